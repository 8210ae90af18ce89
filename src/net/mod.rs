//! Outbound HTTP from a worker process, off the request path: active health probes and the
//! fleet exchange send small HTTP/1.1 requests with [`fetch`], and gRPC health probes one
//! HTTP/2 call with [`health_check`], from tasks started with [`spawn`] or [`every`].
//!
//! - **Connections** are nginx's own (`ngx_event_connect_peer`), so they count against
//!   `worker_connections`, use nginx's event method and appear in its debug log.
//! - **Readiness**: the connection's read and write event handlers wake the task that last
//!   waited on them; hyper's HTTP/1 client and h2 read and write through `c->recv`/`c->send`.
//! - **Tasks** run on ngx's executor (`ngx::async_`): a wake outside the task runs it at once,
//!   inside nginx's event handler; a wake from within it is posted to the next loop iteration.
//! - **Timers**: one per request (its deadline) and one per sleeping [`every`] task, both
//!   `cancelable`: a pending one never holds back an exiting worker. No timer sits on the
//!   connection's events.
//! - **Release**: dropping a request's future (it completed, failed, timed out, or its task was
//!   cancelled) closes its connection and deletes its timer. When nginx starts a graceful
//!   shutdown it closes our connections itself (they are marked idle), so an in-flight request
//!   ends with [`Error::Exiting`] and no socket is left open; no new request starts while the
//!   worker is exiting.

mod grpc;
mod http;
#[cfg(ngx_ssl)]
mod tls;

pub use circuit_breaker_shell::net::{every, exiting, spawn, within, Background, Error, Peer};

pub use self::grpc::{health_check, GrpcAnswer};
pub use self::http::{fetch, Options, Request, Response, DEFAULT_MAX_BODY};
#[cfg(ngx_ssl)]
pub use self::tls::Tls;

/// Upgrades a connected stream to TLS, as a protocol that starts in the clear and then
/// switches asks (NATS: after the server's `INFO`).
#[cfg(ngx_ssl)]
pub async fn start_tls(
    stream: &circuit_breaker_shell::net::stream::Stream,
    tls: &Tls,
) -> Result<(), Error> {
    self::tls::handshake(stream, tls, self::tls::Alpn::Default).await
}
