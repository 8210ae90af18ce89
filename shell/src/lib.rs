//! What the HTTP module (`ngx_http_circuit_breaker_module`) and the stream module
//! (`ngx_stream_circuit_breaker_module`) share at the nginx boundary: the shared zone of breakers
//! (`zone`), nginx's clocks (`clock`), directive plumbing (`conf`), the breaker's log lines
//! (`log`), the pool of servers a bad one is ejected from (`eject`), how the two modules find
//! each other (`kin`), outbound connections and background tasks on nginx's event loop (`net`),
//! and the panic barrier with the small helpers every `extern "C"` callback needs (`ffi`).
//! Nothing here knows HTTP or stream.

pub mod clock;
pub mod conf;
pub mod eject;
pub mod ffi;
pub mod kin;
pub mod log;
pub mod net;
pub mod zone;
