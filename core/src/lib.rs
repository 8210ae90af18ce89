//! The circuit breaker's logic with no nginx dependency, so that plain `cargo test` proves it.
#![forbid(unsafe_code)]
pub mod breaker;
pub mod class;
pub mod directive;
pub mod eject;
pub mod fleet;
pub mod grpc;
pub mod history;
pub mod keyed;
pub mod limit;
pub mod nats;
pub mod probe;
pub mod retry_budget;
pub mod session;
pub mod settle;
pub mod snapshot;
pub mod status;
