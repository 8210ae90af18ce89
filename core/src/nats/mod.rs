//! The client side of the NATS protocol, for the fleet exchange over a bus: instances publish
//! their opinions to a NATS server and subscribe to each other's, instead of (or beside)
//! pulling them from their peers.
//!
//! A codec, not a client: no I/O, no clock, no randomness. The shell owns the socket, reads
//! into [`Parser::feed`] and writes what the encoders build; it passes in the time it keeps
//! and the random numbers [`Backoff::next`] and [`Rotation::new`] take. Every size is bounded
//! ([`Limits`], [`MAX_SUBJECT_LEN`], [`parse::MAX_CONNECT_URLS`]), so that a misbehaving server
//! costs a worker a bounded amount of memory and then its connection.
//!
//! - [`parse`]: what the server sends (`INFO`, `MSG`, `HMSG`, `PING`, `PONG`, `+OK`, `-ERR`),
//!   parsed incrementally.
//! - [`encode`]: what the client sends (`CONNECT`, `SUB`, `UNSUB`, `PUB`, `PING`, `PONG`),
//!   with subjects checked before they go out.
//! - [`backoff`]: when to reconnect and to which server.
//! - [`error`]: why a stream or a request was refused.
//!
//! # A connection's life, as the shell drives it
//!
//! 1. Connect to the server [`Rotation::next`] names; on failure wait [`Backoff::next`].
//! 2. Read the server's `INFO` ([`ServerOp::Info`]): [`Parser::set_max_payload`] to its
//!    `max_payload`; if it says `tls_required`, upgrade first; sign its `nonce` when using an
//!    nkey.
//! 3. Send [`connect`] (with `protocol` 1, so that the server may send `INFO` again), the
//!    subscriptions ([`subscribe`]), and a [`ping`]: its `PONG` confirms the server took
//!    them. A `-ERR` before it is a refusal (`Authorization Violation`), and the server
//!    closes the connection after it — except a subject its permissions refuse
//!    ([`err_keeps_connection`]): then only that publication or subscription is lost.
//! 4. Answer every [`ServerOp::Ping`] with [`pong`]: nats-server closes a connection that
//!    leaves its pings unanswered ("Stale Connection"). Send [`ping`] when nothing was read
//!    for a while, and give up on the connection when its `PONG` does not come.
//! 5. A later `INFO` with `ldm` means the server is shutting down: reconnect elsewhere
//!    (`connect_urls` lists the rest of its cluster).
//! 6. Any [`ProtoError`] from the parser: close, and reconnect after [`Backoff::next`]; a
//!    connection that lasted calls [`Backoff::reset`].

pub mod backoff;
pub mod encode;
pub mod error;
pub mod parse;

pub use backoff::{Backoff, Rotation};
pub use encode::{
    connect, ping, pong, publish, subscribe, unsubscribe, valid_queue, valid_subject, Connect,
    MAX_SUBJECT_LEN,
};
pub use error::ProtoError;
pub use parse::{err_keeps_connection, Info, Limits, Msg, Parser, ServerOp};
