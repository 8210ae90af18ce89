//! The fleet exchange: instances of nginx share their breakers' opinions off the request
//! path, so that a fleet does not pay for an outage once per instance. Pure logic: no I/O,
//! time passed in as `now_ms` (monotonic), randomness passed in.
//!
//! - [`fingerprint`]: a stable 64-bit hash of a breaker's parameters; opinions are combined
//!   only between breakers with the same (upstream, route) *and* fingerprint.
//! - [`wire`]: the compact, versioned line format served at `?format=fleet`, and its strict
//!   parser.
//! - [`auth`]: HMAC-SHA-256 under the fleet's key: pulls and pokes authenticated, answers
//!   sealed with the puller's nonce.
//! - [`store`]: the opinion store — merge, expiry, per-peer counters — and its answers:
//!   [`FleetStore::suspicious`], [`FleetStore::probe_from`] /
//!   [`FleetStore::designated_prober`], [`FleetStore::peers_report_recovered`], when to
//!   pull early ([`FleetStore::hurry`]) and when to push ([`FleetStore::take_push`]).
//! - [`select`]: choosing `fanout` peers to pull from.
//! - [`status`]: the fleet's part of the status page, JSON and Prometheus.
//! - [`conf`]: the directive's words.
//!
//! Opinions, not orders: nothing here opens a breaker. Suspicion lowers the local bar (the
//! breaker still needs failures of its own, say 5 instead of `min_requests`); the fleet's
//! prober only withholds probes from the others; a peer's recovery only lets local probes
//! start early.
//!
//! # How the shell drives it
//!
//! One worker owns the [`FleetStore`], built from the configured instance id, the peer list
//! (the same list on every instance may include the instance itself) and every breaker with
//! its [`Fingerprint`] and [`Policy`]. It wakes every quarter of `interval_ms` and:
//! 1. reads each breaker from shared memory into [`FleetStore::update_local`];
//! 2. when a whole interval has passed since its last pull, or [`FleetStore::hurry`] says so,
//!    pulls `?format=fleet` from each of [`FleetStore::pick_peers`] with a fresh nonce
//!    (timeout about half the interval, body capped at [`wire::MAX_MESSAGE_BYTES`]), handing
//!    each answer to [`FleetStore::receive_sealed`] and each failure to
//!    [`FleetStore::peer_failed`] or [`FleetStore::tls_failed`]; then [`FleetStore::expire`];
//! 3. publishes into the shared zone: [`FleetStore::render`] with the time it was rendered,
//!    and each breaker's [`FleetStore::advice`] beside the breaker; when peers report
//!    recovery it ends the breaker's cooldown if [`FleetStore::take_hasten`] says so (once
//!    per open episode);
//! 4. between rounds, when a breaker moved, reads the breakers again and asks
//!    [`FleetStore::take_push`]: on [`Push::Now`] it publishes its message and pokes
//!    [`FleetStore::pick_peers`], each of which pulls it at once; a peer that pokes it is
//!    pulled at once ([`FleetStore::poked`]).
//!
//! The request path reads only the published advice (three integers): while
//! `suspicious_until_ms >= now` a closed breaker opens on `suspect_min` failures of its own
//! at its failure rate; an open breaker whose cooldown has passed probes only when
//! `probe_from_ms <= now` or `peers_recovered`. Advice older than the expiry (the
//! exchange worker is gone) is ignored, so the breaker acts alone. A worker serving
//! `?format=fleet` sends the published body through [`wire::delayed`] with the body's age,
//! so that ages stay true without re-rendering.

pub mod auth;
pub mod bus;
pub mod conf;
pub mod fingerprint;
pub mod select;
pub mod status;
pub mod store;
pub mod wire;

/// How a stream upstream's breaker is named in the fleet (on the wire, in the fleet's status):
/// `stream:NAME`, its route `default`. No request reaches an http upstream named so (nginx
/// reads `stream:NAME` in `proxy_pass` as a host and a port), so the two never meet; an instance whose
/// stream breakers stay out of its fleet ignores these records as it does any breaker it
/// does not have.
pub const STREAM_PREFIX: &str = "stream:";

pub use conf::FleetDirective;
pub use fingerprint::Fingerprint;
pub use store::{
    default_expire_intervals, default_fanout, default_push_gap, BreakerFleetView, Counters,
    FleetAdvice, FleetConfig, FleetError, FleetStore, LocalView, Opinion, PeerCounters, PeerStats,
    Policy, Push, Received, Refused, KEYED_PER_MESSAGE, MAX_KEYED,
};
pub use wire::{ErrorKind, Flags, Message, ParseError, WireOpinion};
