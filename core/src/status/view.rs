//! What the status output is rendered from: the zone's figures and one entry per breaker,
//! put together ([`super::assemble`]) from what was copied out under the zone's lock.

use crate::retry_budget::RetryBudgetView;
use crate::snapshot::BreakerView;

/// The top of the status output: the shared-memory zone's figures, and whether the location
/// serving it has `control=on`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneView {
    /// The zone's name (`circuit_breaker_zone name:size`).
    pub name: String,
    /// The zone's size in bytes.
    pub size: u64,
    /// Bytes allocated from the zone.
    pub used: u64,
    /// Breakers that could not be created because the zone was full (they fail open).
    pub alloc_failures: u64,
    /// The table of `circuit_breaker_key`'s keys, when a location has one.
    pub keys: Option<KeysView>,
    /// The module's own version (its crate's), shown as `module_version` and in
    /// Prometheus's `build_info`.
    pub module_version: &'static str,
    /// The nginx version the module was built for, and so runs in (nginx refuses a module
    /// built for another version); Prometheus's `build_info` shows it.
    pub nginx_version: &'static str,
    /// The location has `control=on`: shown as `"control":true` (and left out otherwise) for
    /// the dashboard to offer its buttons.
    pub control: bool,
    /// The fleet exchange's own JSON object (`crate::fleet::status::render_json`, as the
    /// exchange worker last published it), shown as the page's `fleet` member; `None` without
    /// `circuit_breaker_fleet`.
    pub fleet_json: Option<String>,
    /// The zone keeps the stream module's breakers (Prometheus's `zone_info` says
    /// `module="stream"`; the http block's say `"http"`).
    pub stream: bool,
    /// The stream module's zones, each as its own page renders (`render_json`), shown as the
    /// page's `stream` member; `None` where nginx has no stream breakers.
    pub stream_json: Option<Vec<Vec<u8>>>,
}

/// The table of keyed breakers' keys, as the page shows it (`"keys"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeysView {
    /// Keys in the table.
    pub used: u64,
    /// Tallies it has.
    pub capacity: u64,
    /// Keys with a breaker of their own.
    pub promoted: u64,
    /// Of those, the ones listed among the breakers (see `query::lists_key` and `key_limit`).
    pub listed: u64,
    /// The promoted keys not listed: closed ones unless `keys=all`, those outside `key_prefix`
    /// or `upstream`/`route`, and those past `key_limit`.
    pub unlisted: u64,
    /// Keys whose breaker is open or half-open, listed or not: what an alert reads (clients
    /// that open keys of their own can push another's past `key_limit`).
    pub open: u64,
}

/// One breaker as the status location shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The upstream's name.
    pub upstream: String,
    /// The route's name; [`super::DEFAULT_ROUTE`] (`"default"`) for the upstream's own breaker.
    pub route: String,
    /// The breaker's figures, taken under the zone lock, on the wall clock.
    pub view: BreakerView,
    /// An upstream's own breaker: the upstream's servers when ejection is on, in
    /// configuration order (empty otherwise).
    pub servers: Vec<ServerEntry>,
    /// An upstream's own breaker: the upstream's retry budget, when it has one.
    pub retry: Option<RetryBudgetView>,
    /// Recovery (`probe_uri`): the path and query active probes request while the breaker is
    /// open; `None` for a breaker that probes with user requests.
    pub probe_uri: Option<String>,
    /// The breaker's configuration fingerprint (`crate::fleet::Fingerprint`) when the
    /// instance is in a fleet: then the breaker object also shows it, and whether peers make
    /// the breaker suspicious.
    pub fingerprint: Option<u64>,
    /// The adaptive in-flight limit beside the breaker (`limit=adaptive`), if any.
    pub limit: Option<LimitStatus>,
}

/// The adaptive in-flight limit of one breaker, as the status location shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LimitStatus {
    /// The limit requests are admitted under now.
    pub limit: u32,
    /// Requests holding a slot now (all workers).
    pub in_flight: u32,
    /// The minimum latency the limit is computed from, milliseconds (0 before the first
    /// update).
    pub min_latency_ms: f64,
    /// Mean latency of the last interval, milliseconds (0 before the first update).
    pub last_latency_ms: f64,
    /// Requests shed by the limit (in dry run: that would have been) since the controller
    /// started (created, or its parameters changed).
    pub shed: u64,
    /// Of `shed`, requests of a client that held most of the limit turned away at its cap
    /// (`crate::limit::share`).
    pub capped: u64,
    /// Per class (`Class::index`: critical, default, sheddable), once a request of a class
    /// came (`circuit_breaker_class`); `None` while classes are not in use.
    pub classes: Option<[ClassFigures; 3]>,
}

/// One class's figures under an adaptive limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassFigures {
    /// Requests admitted since the controller started.
    pub admitted: u64,
    /// Requests shed (in dry run: that would have been).
    pub shed: u64,
    /// Requests holding a slot now.
    pub in_flight: u32,
}

/// One server of an upstream, as the status location shows it under the upstream's own
/// breaker: its place in the pool is its breaker's state (see [`crate::eject`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerEntry {
    /// The server's address, as nginx names the peer (`10.0.0.1:8080`).
    pub address: String,
    /// A `backup` server.
    pub backup: bool,
    /// Its breaker's figures.
    pub view: BreakerView,
}
