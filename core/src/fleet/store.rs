//! The opinion store: what this instance knows of its peers' breakers, merged from their
//! messages, and the three answers the shell needs from it (suspicion, the fleet's prober,
//! recovery seen elsewhere).
//!
//! Plain data on the heap of the one worker that runs the exchange, not in the shared zone:
//! names are of any length, and the request path needs only the [`Verdict`] the worker
//! publishes next to each breaker (see [`super`]). A worker that dies takes the store with
//! it; the next one refills it from peers within a few intervals, and the breakers in the
//! zone are untouched meanwhile. The stored [`Opinion`] itself is a `#[repr(C)]`, `Copy`
//! record with no pointers, should a later design keep the table in the zone.
//!
//! Memory is bounded by construction: at most one opinion per (configured peer, local
//! breaker), and records about unknown origins or breakers are counted, not kept; after
//! [`FleetStore::expire`], only opinions received within the expiry remain (at most
//! `fanout` × (expiry / interval + 1) × [`wire::MAX_ENTRIES`]).
//!
//! Every stored time is on this instance's monotonic clock (`now_ms`, as the breakers use);
//! peers' times arrive as ages and become local instants on receipt, so no two instances
//! ever compare clocks. A `now_ms` earlier than one already seen is taken as the latest.

use std::collections::HashMap;

use super::auth::{AuthError, FleetKey, Nonce};
use super::fingerprint::{mix, Fingerprint};
use super::wire::{self, ErrorKind, Flags, Message, ParseError, WireOpinion};
use crate::breaker::BreakerConfig;
use crate::snapshot::{BreakerView, State};

/// How the exchange runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetConfig {
    /// Time between two rounds of pulls (ms).
    pub interval_ms: u64,
    /// Peers pulled from per round.
    pub fanout: usize,
    /// An opinion older than this (ms) is forgotten, and its origin no longer counts as live.
    pub expire_ms: u64,
    /// The most records this instance serves in one message (own opinions first, then the
    /// freshest relayed ones); at most [`wire::MAX_ENTRIES`].
    pub max_entries: usize,
    /// The shortest time between two pushes ([`FleetStore::take_push`]).
    pub push_gap_ms: u64,
}

/// Peers pulled from per interval: 3, or every peer in a fleet of 4 or fewer.
///
/// Measured by `core/tests/fleet_sim.rs` (pulls with relaying, 10 seeds): one opinion
/// reaches all of 8 instances in 2.1 intervals on average (3 at worst), all of 50 in 3.3
/// (4), all of 200 in 4.1 (5); fanout 2 takes 5.5 (7) for 200 and fanout 4 gains under
/// half an interval. Each instance serves `fanout` pulls per interval on average, whatever
/// the fleet's size.
pub fn default_fanout(instances: usize) -> usize {
    instances.saturating_sub(1).clamp(1, 3)
}

/// How many intervals an opinion stays fresh by default: the rounds an opinion needs to
/// reach `instances` at this fanout (`ceil(log(instances) / log(fanout + 1))`), plus two,
/// and at least 3. In the simulation the oldest copy an instance held once all knew was
/// 2.4 intervals old for 8 instances, 3.9 for 50 and 5.0 for 200 (fanout 3), against
/// defaults of 4, 5 and 6.
pub fn default_expire_intervals(instances: usize, fanout: usize) -> u64 {
    let f = fanout.max(1) as u64 + 1;
    let mut reach = 1u64;
    let mut rounds = 0u64;
    while reach < instances as u64 {
        reach = reach.saturating_mul(f);
        rounds += 1;
    }
    (rounds + 2).max(3)
}

impl FleetConfig {
    /// The defaults for a fleet of `instances` (this one included) exchanging every
    /// `interval_ms`: [`default_fanout`], [`default_expire_intervals`], 1024 records, and
    /// [`default_push_gap`].
    pub fn for_fleet(interval_ms: u64, instances: usize) -> FleetConfig {
        let fanout = default_fanout(instances);
        FleetConfig {
            interval_ms,
            fanout,
            expire_ms: interval_ms.saturating_mul(default_expire_intervals(instances, fanout)),
            max_entries: 1024,
            push_gap_ms: default_push_gap(interval_ms),
        }
    }
}

/// The shortest time between two pushes of an instance: a hundredth of the interval, from
/// 5 to 50 ms. Pushes follow evidence (a breaker that moves, a failing window whose
/// failures double, suspicion that begins), so a closed episode makes a handful of them; the
/// gap only bounds a burst, and must stay short against users at hundreds of requests per
/// second (a failure every few milliseconds), whatever the interval.
pub fn default_push_gap(interval_ms: u64) -> u64 {
    (interval_ms / 100).clamp(5, 50)
}

/// The parts of a breaker's configuration the fleet needs to judge it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Combined attempts needed before peers' windows may make this breaker suspicious.
    pub min_requests: u32,
    /// Failure rate, in hundredths of a percent, at which combined windows are suspicious.
    pub failure_rate: u32,
    /// Slow-call rate likewise; 0 when the breaker has no slow-call rule.
    pub slow_rate: u32,
    /// Attempts a suspicious breaker opens on (`suspect_min`): a local window failing at its
    /// rate with that many attempts is pushed to peers, as it opens once they agree.
    pub suspect_min: u32,
    /// The wait before the fleet's first probe of an open episode (ms): `open` for probes
    /// made with user requests, `probe_interval` for active probes.
    pub probe_base_ms: u64,
    /// The longest wait between two fleet probes (ms); the wait doubles after each probe up
    /// to this (`max_open`; equal to `probe_base_ms` for active probes, which do not double).
    pub probe_max_ms: u64,
}

impl Policy {
    /// The policy of a breaker that probes with user requests.
    pub fn of_config(cfg: &BreakerConfig) -> Policy {
        Policy {
            min_requests: cfg.min_requests.max(1),
            failure_rate: cfg.failure_rate,
            slow_rate: if cfg.slow_ms > 0 { cfg.slow_rate } else { 0 },
            suspect_min: cfg.suspect_min.clamp(1, cfg.min_requests.max(1)),
            probe_base_ms: u64::from(cfg.open_ms),
            probe_max_ms: u64::from(cfg.max_open_ms.max(cfg.open_ms)),
        }
    }

    /// The wait after the fleet's `round`-th probe: doubled per probe, capped.
    fn wait(&self, round: u32) -> u64 {
        let cap = self.probe_max_ms.max(self.probe_base_ms);
        self.probe_base_ms
            .saturating_mul(1u64 << round.min(40))
            .min(cap)
    }

    /// The waits after rounds `from..to`: the least time the fleet takes from its `from`-th
    /// probe to its `to`-th, whoever probes. Constant time: the wait stops changing after 40
    /// doublings.
    fn waits(&self, from: u32, to: u32) -> u64 {
        let mut sum = 0u64;
        let mut k = from;
        while k < to && k < 41 {
            sum = sum.saturating_add(self.wait(k));
            k += 1;
        }
        sum.saturating_add(u64::from(to.saturating_sub(k)).saturating_mul(self.wait(40)))
    }
}

/// The local breaker as the exchange worker reads it each interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalView {
    /// Its state.
    pub state: State,
    /// Whether an operator forces it (its state is then no evidence).
    pub forced: bool,
    /// When the state began, on the monotonic clock.
    pub since_ms: u64,
    /// Attempts in its live window.
    pub requests: u64,
    /// Of which failures.
    pub failures: u64,
    /// Of which slow.
    pub slow: u64,
    /// A counter that grows by one at each probe start (an open → half-open transition, or
    /// an active probe sent); the store notices fleet probes by watching it.
    pub probe_starts: u64,
    /// A counter of short-circuited requests; while it grows the instance has traffic to
    /// probe with.
    pub short_circuited: u64,
    /// The breaker probes actively (it needs no traffic to probe).
    pub active_probes: bool,
}

impl LocalView {
    /// From a breaker's status view (its instants on the monotonic clock, as taken before
    /// [`BreakerView::on_wall_clock`]).
    pub fn of_view(v: &BreakerView, active_probes: bool) -> LocalView {
        LocalView {
            state: v.state,
            forced: v.forced.is_some(),
            since_ms: v.since_ms,
            requests: v.window.requests,
            failures: v.window.failures,
            slow: v.window.slow,
            probe_starts: v.totals.half_opened,
            short_circuited: v.totals.short_circuited,
            active_probes,
        }
    }
}

/// One instance's opinion of one breaker, as stored: instants on this instance's clock.
///
/// `Ord` is the merge order: the newer opinion wins, and identical instants are broken by
/// the content, so that merging is a maximum (idempotent, commutative, associative).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Opinion {
    /// When the origin formed it (estimated from its age).
    pub observed_at_ms: u64,
    /// The breaker's fingerprint at the origin.
    pub fingerprint: u64,
    /// When the origin's state began.
    pub since_ms: u64,
    /// The origin's window: attempts.
    pub requests: u64,
    /// Failures.
    pub failures: u64,
    /// Slow calls.
    pub slow: u64,
    /// When the fleet's latest probe started, as the origin knows (meaningful when `round > 0`).
    pub probe_at_ms: u64,
    /// Fleet probes started in this open episode, as the origin knows.
    pub round: u32,
    /// [`State::code`] of the origin's state.
    pub state: u8,
    /// [`Flags::bits`].
    pub flags: u8,
}

impl Opinion {
    /// The origin's state.
    pub fn state(&self) -> State {
        match self.state {
            2 => State::Open,
            1 => State::HalfOpen,
            _ => State::Closed,
        }
    }

    /// The record's flags.
    pub fn flags(&self) -> Flags {
        Flags::from_bits(self.flags)
    }

    /// Open or half-open by the upstream's doing (not an operator's).
    fn tripped(&self) -> bool {
        self.state() != State::Closed && !self.flags().forced
    }

    fn fresh(&self, now: u64, expire_ms: u64) -> bool {
        self.observed_at_ms.saturating_add(expire_ms) >= now
    }

    /// Worth passing on: evidence of trouble or of recovery. Healthy windows are served
    /// by their own instance only, which keeps messages small in a healthy fleet.
    fn worth_relaying(&self) -> bool {
        let f = self.flags();
        self.tripped() || self.failures > 0 || self.slow > 0 || f.recovered
    }
}

/// What the exchange worker publishes for one breaker after each round, for every worker's
/// request path to read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Until when peers' evidence makes the breaker suspicious ([`FleetStore::suspicious`]).
    pub suspicious_until_ms: Option<u64>,
    /// From when this instance may start the fleet's next probe
    /// ([`FleetStore::probe_from`]); `None`: not this instance.
    pub probe_from_ms: Option<u64>,
    /// A peer saw the upstream recover since this breaker opened
    /// ([`FleetStore::peers_report_recovered`]).
    pub peers_recovered: bool,
}

/// Counters of one peer's exchanges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerCounters {
    /// Messages received and merged.
    pub exchanges: u64,
    /// Pulls that failed before a message arrived (refused, timed out, bad status).
    pub failures: u64,
    /// Messages refused by the parser, or from the wrong sender.
    pub parse_errors: u64,
    /// Answers refused because their MAC did not verify (forged, altered, replayed, or made
    /// under another secret).
    pub auth_failures: u64,
    /// Pulls refused at TLS: a handshake that failed (a peer answering in plain HTTP), or a
    /// certificate that does not verify or does not match.
    pub tls_failures: u64,
    /// Pokes from the peer that made this instance pull it at once.
    pub pokes: u64,
    /// When the latest message was merged.
    pub last_exchange_ms: Option<u64>,
    /// When the latest failure or refused message was.
    pub last_error_ms: Option<u64>,
}

/// One peer as the status page shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStats {
    /// Its id.
    pub id: String,
    /// Its latest exchange succeeded, within the expiry.
    pub reachable: bool,
    /// Its counters.
    pub counters: PeerCounters,
    /// Fresh opinions held from it (directly or relayed).
    pub opinions: usize,
    /// Of which about a breaker this instance has with another fingerprint: a configuration
    /// that differs across the fleet.
    pub disagreements: usize,
}

/// What the fleet says of one breaker, for the status page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakerFleetView {
    /// This instance's fingerprint of it.
    pub fingerprint: u64,
    /// Peers with a fresh opinion and the same fingerprint.
    pub agreeing_peers: usize,
    /// Of which open or half-open.
    pub open_peers: usize,
    /// Peers with a fresh opinion and another fingerprint (not combined).
    pub disagreeing_peers: usize,
    /// See [`Verdict`].
    pub verdict: Verdict,
    /// The instance the fleet expects to probe next, while open.
    pub designated: Option<String>,
    /// Fleet probes started in this open episode, as far as known.
    pub round: u32,
}

/// Store-wide counters of records that were not kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Records from an origin that is not a configured peer.
    pub unknown_origin: u64,
    /// Records of a breaker this instance does not have.
    pub unknown_breaker: u64,
    /// Records older than the expiry on arrival.
    pub stale: u64,
    /// Pushes made: moments this instance told `fanout` peers to pull it at once.
    pub pushes: u64,
}

/// What one merge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// Records that replaced or added an opinion.
    pub merged: usize,
    /// Records that were already known (or older than what is known).
    pub known: usize,
    /// Records this instance's own opinions echoed back.
    pub own: usize,
    /// Records dropped: unknown origin or breaker, or stale.
    pub dropped: usize,
}

/// Why an answer was not merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its MAC did not verify; `first` says whether this is the first such refusal since the
    /// peer's last good exchange (log it then, not at every round).
    Auth {
        /// What was wrong.
        error: AuthError,
        /// The first of a run.
        first: bool,
    },
    /// It verified but does not parse, or another instance sent it.
    Parse(ParseError),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Auth { error, .. } => write!(f, "{error}"),
            Refused::Parse(e) => write!(f, "{e}"),
        }
    }
}

/// Whether to push now ([`FleetStore::take_push`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Push {
    /// Nothing new to tell.
    Nothing,
    /// Tell `fanout` peers to pull now; the store counts it as done.
    Now,
    /// News waits for the gap after the last push: ask again at this instant.
    At(u64),
}

/// Why the store could not be built or a breaker added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetError {
    /// An empty name, or one longer than [`wire::MAX_NAME_BYTES`].
    InvalidName(String),
    /// A peer listed twice.
    DuplicatePeer(String),
    /// A breaker added twice.
    DuplicateBreaker(String, String),
}

impl std::fmt::Display for FleetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FleetError::InvalidName(n) => write!(f, "invalid name \"{n}\""),
            FleetError::DuplicatePeer(n) => write!(f, "peer \"{n}\" is duplicate"),
            FleetError::DuplicateBreaker(u, r) => write!(f, "breaker \"{u}/{r}\" is duplicate"),
        }
    }
}

impl std::error::Error for FleetError {}

fn valid_name(n: &str) -> Result<(), FleetError> {
    if n.is_empty() || n.len() > wire::MAX_NAME_BYTES {
        Err(FleetError::InvalidName(n.to_string()))
    } else {
        Ok(())
    }
}

#[derive(Clone, Debug)]
struct Peer {
    id: String,
    counters: PeerCounters,
    /// A refusal of this kind was reported since the last good exchange.
    auth_told: bool,
    tls_told: bool,
}

/// What peers act on in a breaker's opinion, as last pushed: a push is due when it grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Signal {
    state: u8,
    forced: bool,
    /// While closed and failing at its rate: 1 + log2 of the failures (from 2 failures), so
    /// that a window is pushed as its failures double.
    level: u8,
    /// The window would open a suspicious breaker (at least `suspect_min` attempts).
    ready: bool,
    suspicious: bool,
    recovered: bool,
}

impl Signal {
    /// News worth a push: anything but a failing window that calmed down.
    fn news_since(&self, old: &Signal) -> bool {
        self.state != old.state
            || self.forced != old.forced
            || self.level > old.level
            || (self.ready && !old.ready)
            || (self.suspicious && !old.suspicious)
            || (self.recovered && !old.recovered)
    }
}

#[derive(Clone, Debug)]
struct Local {
    upstream: String,
    route: String,
    fingerprint: u64,
    policy: Policy,
    view: Option<LocalView>,
    /// When the current open episode began (valid while the view is not closed).
    episode_start_ms: u64,
    /// `probe_starts` when the episode began.
    episode_probes: u64,
    /// The breaker closed after a probe and has stayed closed since.
    recovered: bool,
    /// This instance's own latest fleet probe in the episode.
    round: u32,
    probe_at_ms: u64,
    last_refused_ms: Option<u64>,
    /// At most one opinion per peer, sorted by peer index.
    opinions: Vec<(u32, Opinion)>,
    /// What peers were last told of it.
    pushed: Signal,
}

impl Local {
    fn in_episode(&self) -> bool {
        self.view.is_some_and(|v| v.state != State::Closed)
    }
}

/// Everything this instance knows of the fleet. See the module's documentation.
#[derive(Clone, Debug)]
pub struct FleetStore {
    cfg: FleetConfig,
    self_id: String,
    peers: Vec<Peer>,
    peer_index: HashMap<String, usize>,
    breakers: Vec<Local>,
    breaker_index: HashMap<String, HashMap<String, usize>>,
    counters: Counters,
    last_now: u64,
    last_push_ms: Option<u64>,
}

impl FleetStore {
    /// A store for instance `self_id` with these peers. `peers` may list `self_id` too (so
    /// that every instance can share one list); it is left out. Peers are numbered in the
    /// order given, without `self_id`.
    pub fn new(
        self_id: &str,
        peers: &[&str],
        mut cfg: FleetConfig,
    ) -> Result<FleetStore, FleetError> {
        valid_name(self_id)?;
        cfg.max_entries = cfg.max_entries.min(wire::MAX_ENTRIES);
        let mut store = FleetStore {
            cfg,
            self_id: self_id.to_string(),
            peers: Vec::new(),
            peer_index: HashMap::new(),
            breakers: Vec::new(),
            breaker_index: HashMap::new(),
            counters: Counters::default(),
            last_now: 0,
            last_push_ms: None,
        };
        for &p in peers.iter().filter(|&&p| p != self_id) {
            valid_name(p)?;
            if store.peer_index.contains_key(p) {
                return Err(FleetError::DuplicatePeer(p.to_string()));
            }
            store.peer_index.insert(p.to_string(), store.peers.len());
            store.peers.push(Peer {
                id: p.to_string(),
                counters: PeerCounters::default(),
                auth_told: false,
                tls_told: false,
            });
        }
        Ok(store)
    }

    /// The configuration.
    pub fn config(&self) -> &FleetConfig {
        &self.cfg
    }

    /// This instance's id.
    pub fn self_id(&self) -> &str {
        &self.self_id
    }

    /// The peers' ids, by index.
    pub fn peer_ids(&self) -> impl Iterator<Item = &str> {
        self.peers.iter().map(|p| p.id.as_str())
    }

    /// Store-wide counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Opinions held, fresh or not yet expired: at most one per (peer, breaker).
    pub fn held(&self) -> usize {
        self.breakers.iter().map(|l| l.opinions.len()).sum()
    }

    /// Adds a breaker this instance has; returns its index for the other calls.
    pub fn add_breaker(
        &mut self,
        upstream: &str,
        route: &str,
        fingerprint: u64,
        policy: Policy,
    ) -> Result<usize, FleetError> {
        valid_name(upstream)?;
        valid_name(route)?;
        if self.breaker_index(upstream, route).is_some() {
            return Err(FleetError::DuplicateBreaker(upstream.into(), route.into()));
        }
        let idx = self.breakers.len();
        self.breaker_index
            .entry(upstream.to_string())
            .or_default()
            .insert(route.to_string(), idx);
        self.breakers.push(Local {
            upstream: upstream.to_string(),
            route: route.to_string(),
            fingerprint,
            policy,
            view: None,
            episode_start_ms: 0,
            episode_probes: 0,
            recovered: false,
            round: 0,
            probe_at_ms: 0,
            last_refused_ms: None,
            opinions: Vec::new(),
            pushed: Signal::default(),
        });
        Ok(idx)
    }

    /// The breakers added, as (upstream, route), by index.
    pub fn breakers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.breakers
            .iter()
            .map(|l| (l.upstream.as_str(), l.route.as_str()))
    }

    /// The index of a breaker added with [`FleetStore::add_breaker`].
    pub fn breaker_index(&self, upstream: &str, route: &str) -> Option<usize> {
        self.breaker_index.get(upstream)?.get(route).copied()
    }

    fn clock(&mut self, now_ms: u64) -> u64 {
        self.last_now = self.last_now.max(now_ms);
        self.last_now
    }

    /// Records the local breaker's state, read from shared memory; call it for every breaker
    /// before serving, merging or asking (once per interval is enough). Notices the start of
    /// an open episode, this instance's probes (which advance the fleet's round) and a close
    /// after a probe (which peers learn as a recovery).
    pub fn update_local(&mut self, now_ms: u64, breaker: usize, v: LocalView) {
        let now = self.clock(now_ms);
        let Some(l) = self.breakers.get(breaker) else {
            return;
        };
        let known_round = self.fleet_round(now, l).0;
        let expire = self.cfg.expire_ms;
        let Some(l) = self.breakers.get_mut(breaker) else {
            return;
        };
        let prev = l.view;
        let was_open = prev.is_some_and(|p| p.state != State::Closed);
        let is_open = v.state != State::Closed;
        if is_open && !was_open {
            l.episode_start_ms = v.since_ms.min(now);
            l.episode_probes = v.probe_starts;
            l.recovered = false;
            l.round = 0;
            l.probe_at_ms = 0;
        }
        if let Some(p) = prev {
            if is_open && v.probe_starts > p.probe_starts {
                // The probe's own start is the half-open's `since`; after a failed probe the
                // reopening's `since` is within a probe's duration of it.
                l.round = known_round.saturating_add(1);
                l.probe_at_ms = v.since_ms.min(now);
            }
            if v.short_circuited > p.short_circuited {
                l.last_refused_ms = Some(now);
            }
        }
        if was_open && !is_open {
            l.recovered = !v.forced && v.probe_starts > l.episode_probes;
            l.round = 0;
            l.probe_at_ms = 0;
        }
        if v.forced {
            l.recovered = false;
        }
        if l.last_refused_ms
            .is_some_and(|t| t.saturating_add(expire) < now)
        {
            l.last_refused_ms = None;
        }
        l.view = Some(v);
    }

    /// A pull from `peer` failed before any message (refused, timed out, bad status).
    pub fn peer_failed(&mut self, now_ms: u64, peer: usize) {
        let now = self.clock(now_ms);
        if let Some(p) = self.peers.get_mut(peer) {
            p.counters.failures += 1;
            p.counters.last_error_ms = Some(now);
        }
    }

    /// Parses and merges the message pulled from `peer`. A message that does not parse, or
    /// that another instance sent, changes nothing but the peer's `parse_errors`.
    pub fn receive(
        &mut self,
        now_ms: u64,
        peer: usize,
        body: &[u8],
    ) -> Result<Received, ParseError> {
        let now = self.clock(now_ms);
        let parsed = wire::parse(body).and_then(|m| match self.peers.get(peer) {
            Some(p) if p.id == m.sender => Ok(m),
            _ => Err(ParseError {
                line: 1,
                kind: ErrorKind::Sender,
            }),
        });
        match parsed {
            Ok(m) => {
                let got = self.merge(now, &m);
                let p = &mut self.peers[peer];
                p.counters.exchanges += 1;
                p.counters.last_exchange_ms = Some(now);
                p.auth_told = false;
                p.tls_told = false;
                Ok(got)
            }
            Err(e) => {
                if let Some(p) = self.peers.get_mut(peer) {
                    p.counters.parse_errors += 1;
                    p.counters.last_error_ms = Some(now);
                }
                Err(e)
            }
        }
    }

    /// The answer to a pull from `peer` made with `nonce`: verified under `key` first (see
    /// [`super::auth`]), then parsed and merged as [`FleetStore::receive`] does. An answer
    /// that does not verify changes nothing but the peer's `auth_failures`.
    pub fn receive_sealed(
        &mut self,
        now_ms: u64,
        peer: usize,
        key: &FleetKey,
        nonce: &Nonce,
        answer: &[u8],
    ) -> Result<Received, Refused> {
        match key.open(nonce, answer) {
            Ok(body) => self.receive(now_ms, peer, body).map_err(Refused::Parse),
            Err(error) => Err(Refused::Auth {
                error,
                first: self.auth_failed(now_ms, peer),
            }),
        }
    }

    /// An answer of `peer` failed authentication. Returns whether it is the first since the
    /// peer's last good exchange (the one to log).
    pub fn auth_failed(&mut self, now_ms: u64, peer: usize) -> bool {
        let now = self.clock(now_ms);
        let Some(p) = self.peers.get_mut(peer) else {
            return false;
        };
        p.counters.auth_failures += 1;
        p.counters.last_error_ms = Some(now);
        !core::mem::replace(&mut p.auth_told, true)
    }

    /// A pull from `peer` failed at TLS (handshake or certificate). Returns whether it is the
    /// first since the peer's last good exchange (the one to log).
    pub fn tls_failed(&mut self, now_ms: u64, peer: usize) -> bool {
        let now = self.clock(now_ms);
        let Some(p) = self.peers.get_mut(peer) else {
            return false;
        };
        p.counters.tls_failures += 1;
        p.counters.last_error_ms = Some(now);
        !core::mem::replace(&mut p.tls_told, true)
    }

    /// `peer` sent an authenticated poke (it asks to be pulled now).
    pub fn poked(&mut self, peer: usize) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.counters.pokes += 1;
        }
    }

    /// The index of the peer called `id`.
    pub fn peer_index(&self, id: &str) -> Option<usize> {
        self.peer_index.get(id).copied()
    }

    /// Merges a parsed message (whoever sent it): each record replaces the stored opinion of
    /// its (origin, breaker) when it is newer. Records about this instance, from unknown
    /// origins, about unknown breakers or older than the expiry are dropped.
    pub fn merge(&mut self, now_ms: u64, m: &Message) -> Received {
        let now = self.clock(now_ms);
        let mut got = Received::default();
        for o in &m.opinions {
            if o.origin == self.self_id {
                got.own += 1;
                continue;
            }
            let Some(&origin) = self.peer_index.get(&o.origin) else {
                self.counters.unknown_origin += 1;
                got.dropped += 1;
                continue;
            };
            let Some(b) = self.breaker_index(&o.upstream, &o.route) else {
                self.counters.unknown_breaker += 1;
                got.dropped += 1;
                continue;
            };
            // Parsed numbers are at most 10^12, so these sums cannot overflow; saturating
            // anyway, for messages built by hand.
            let ago = |ms: u64| now.saturating_sub(m.delay_ms.saturating_add(ms));
            if m.delay_ms.saturating_add(o.age_ms) > self.cfg.expire_ms {
                self.counters.stale += 1;
                got.dropped += 1;
                continue;
            }
            let new = Opinion {
                observed_at_ms: ago(o.age_ms),
                fingerprint: o.fingerprint,
                since_ms: ago(o.since_ms),
                requests: o.requests,
                failures: o.failures.min(o.requests),
                slow: o.slow.min(o.requests),
                probe_at_ms: match (o.round, o.probe_ms) {
                    (0, _) | (_, None) => 0,
                    (_, Some(p)) => ago(p),
                },
                round: if o.probe_ms.is_some() { o.round } else { 0 },
                state: o.state.code(),
                flags: o.flags.bits(),
            };
            let slot = &mut self.breakers[b].opinions;
            match slot.binary_search_by_key(&(origin as u32), |(i, _)| *i) {
                Ok(at) if slot[at].1 >= new => got.known += 1,
                Ok(at) => {
                    slot[at].1 = new;
                    got.merged += 1;
                }
                Err(at) => {
                    slot.insert(at, (origin as u32, new));
                    got.merged += 1;
                }
            }
        }
        got
    }

    /// Forgets opinions older than the expiry. Answers ignore them anyway; this returns
    /// their memory. Call it once per interval.
    pub fn expire(&mut self, now_ms: u64) {
        let now = self.clock(now_ms);
        let exp = self.cfg.expire_ms;
        for l in &mut self.breakers {
            l.opinions.retain(|(_, o)| o.fresh(now, exp));
        }
    }

    /// The fresh opinions of peers that judge this breaker by the same rules.
    fn agreeing<'a>(
        &'a self,
        now: u64,
        l: &'a Local,
    ) -> impl Iterator<Item = (usize, &'a Opinion)> {
        let exp = self.cfg.expire_ms;
        l.opinions
            .iter()
            .filter(move |(_, o)| o.fingerprint == l.fingerprint && o.fresh(now, exp))
            .map(|(i, o)| (*i as usize, o))
    }

    /// The fleet's latest probe of the current open episode: (round, started at). Derived
    /// from the fresh opinions at each call, so the knowledge survives the prober's
    /// disappearance as long as one live instance repeats it.
    ///
    /// Only credible claims count, so that no message can hold this instance's probes off
    /// beyond the fleet's own pace: this instance's own probes always; a peer's claim of
    /// round `r'` after the credited round `r` (probe at `p`) only if its probe came at least
    /// the waits of rounds `r..r'` after `p` (half an interval of tolerance for the ages'
    /// error), and one grace period later still when this instance was the one to probe
    /// round `r` (no one else probes before it, unless it let its turn pass). Of claims of
    /// the same round, the earliest probe counts. A forged round or probe field can thus
    /// neither skip rounds to choose the order nor keep moving the next probe into the
    /// future: the most it can do is what the fleet's own failing probes would.
    fn fleet_round(&self, now: u64, l: &Local) -> (u32, u64) {
        if !l.in_episode() {
            return (0, 0);
        }
        let p = &l.policy;
        let tol = self.cfg.interval_ms / 2;
        let grace = self.grace(l);
        let mut claims: Vec<(u32, u64, bool)> = self
            .agreeing(now, l)
            .filter(|(_, o)| o.tripped() && o.round > 0)
            .map(|(_, o)| (o.round, o.probe_at_ms, false))
            .collect();
        if l.round > 0 {
            claims.push((l.round, l.probe_at_ms, true));
        }
        claims.sort_unstable();
        // (round, probe at, the least probe time a claim of this round needed).
        let (mut round, mut at, mut floor) = (0u32, self.anchor(now, l), 0u64);
        for (r, t, own) in claims {
            if r < round {
                continue;
            }
            if r == round {
                if own || t.saturating_add(tol) >= floor {
                    at = at.min(t);
                }
                continue;
            }
            let mut need = at.saturating_add(p.waits(round, r));
            if self.rank(now, l, round) == Some(0) {
                need = need.saturating_add(grace);
            }
            if own || t.saturating_add(tol) >= need {
                (round, at, floor) = (r, t, need);
            }
        }
        if round == 0 {
            (0, 0)
        } else {
            (round, at)
        }
    }

    /// The earliest open instant known of this episode: here, or at an agreeing peer.
    fn anchor(&self, now: u64, l: &Local) -> u64 {
        self.agreeing(now, l)
            .filter(|(_, o)| o.tripped())
            .map(|(_, o)| o.since_ms)
            .fold(l.episode_start_ms, u64::min)
    }

    /// How long each instance after the first in the probing order waits more: the longer
    /// of the first probe's wait and the expiry, so that a probe that happened reaches
    /// everyone before the next in line acts.
    fn grace(&self, l: &Local) -> u64 {
        l.policy.probe_base_ms.max(self.cfg.expire_ms)
    }

    /// This instance's place in the probing order of `round` (0: first), if it may probe.
    fn rank(&self, now: u64, l: &Local, round: u32) -> Option<u64> {
        if !self.can_probe(now, l) {
            return None;
        }
        let mine = (self.score(&self.self_id, l, round), self.self_id.as_str());
        Some(
            self.candidates(now, l)
                .filter(|&i| {
                    let id = self.peers[i].id.as_str();
                    (self.score(id, l, round), id) > mine
                })
                .count() as u64,
        )
    }

    fn can_probe(&self, now: u64, l: &Local) -> bool {
        let Some(v) = l.view else { return false };
        v.state != State::Closed
            && !v.forced
            && (v.active_probes
                || l.last_refused_ms
                    .is_some_and(|t| t.saturating_add(self.cfg.expire_ms) >= now))
    }

    /// Rendezvous score of an instance for this breaker and round: every instance computes
    /// the same order from the same ids, and a new round reshuffles it, so that the probing
    /// duty rotates and one instance with a broken path cannot hold it.
    fn score(&self, id: &str, l: &Local, round: u32) -> u64 {
        mix(Fingerprint::new()
            .str(id)
            .str(&l.upstream)
            .str(&l.route)
            .u64(l.fingerprint)
            .u32(round)
            .finish())
    }

    /// Peers that may probe this breaker now (live, same fingerprint, tripped, traffic).
    fn candidates<'a>(&'a self, now: u64, l: &'a Local) -> impl Iterator<Item = usize> + 'a {
        self.agreeing(now, l)
            .filter(|(_, o)| o.tripped() && o.flags().can_probe)
            .map(|(i, _)| i)
    }

    /// Until when (ms) peers' evidence makes this breaker suspicious, if it does: a fresh
    /// opinion with the same fingerprint says open (or half-open), or the windows of this
    /// instance and its agreeing peers, summed, hold at least `min_requests` attempts at or
    /// over the failure (or slow) rate and at least one peer contributed a failure (or slow
    /// call). The answer lasts until the supporting opinions expire.
    ///
    /// Suspicion is only ever advice: the breaker opens on its own window, with a lower bar
    /// while suspicious, never on this answer alone.
    pub fn suspicious(&self, now_ms: u64, breaker: usize) -> Option<u64> {
        let now = now_ms.max(self.last_now);
        let l = self.breakers.get(breaker)?;
        let exp = self.cfg.expire_ms;
        let until = |o: &Opinion| o.observed_at_ms.saturating_add(exp);
        let open_until = self
            .agreeing(now, l)
            .filter(|(_, o)| o.tripped())
            .map(|(_, o)| until(o))
            .max();
        let p = &l.policy;
        let (mut req, mut fail, mut slow) = l.view.map_or((0, 0, 0), |v| {
            (
                v.requests,
                v.failures.min(v.requests),
                v.slow.min(v.requests),
            )
        });
        let mut fail_until: Option<u64> = None;
        let mut slow_until: Option<u64> = None;
        for (_, o) in self.agreeing(now, l) {
            req = req.saturating_add(o.requests);
            fail = fail.saturating_add(o.failures);
            slow = slow.saturating_add(o.slow);
            if o.failures > 0 {
                fail_until = Some(fail_until.map_or(until(o), |t| t.min(until(o))));
            }
            if o.slow > 0 {
                slow_until = Some(slow_until.map_or(until(o), |t| t.min(until(o))));
            }
        }
        let reaches = |part: u64, rate: u32| {
            req >= u64::from(p.min_requests.max(1))
                && part.saturating_mul(10_000) >= u64::from(rate).saturating_mul(req)
        };
        let rate_until = [
            fail_until.filter(|_| reaches(fail, p.failure_rate)),
            slow_until.filter(|_| p.slow_rate > 0 && reaches(slow, p.slow_rate)),
        ]
        .into_iter()
        .flatten()
        .max();
        open_until.max(rate_until)
    }

    /// From when this instance may start the fleet's next probe of this open breaker, if it
    /// is one of those who may; the shell probes only when this has passed *and* its own
    /// breaker's cooldown allows.
    ///
    /// The instances that may probe (live, same fingerprint, open or half-open, not forced,
    /// with traffic or active probes) are ranked by a rendezvous hash of (instance, breaker,
    /// fingerprint, round). The first may probe from the fleet's due time: the earliest open
    /// instant known plus `probe_base_ms` before any fleet probe, then the latest fleet
    /// probe plus a wait that doubles per probe up to `probe_max_ms`. The k-th may probe k
    /// grace periods later (the longer of `probe_base_ms` and the expiry), so that if the
    /// first vanishes or never probes another takes over, while a probe that happened
    /// reaches everyone (within the expiry) before the next in line would act.
    pub fn probe_from(&self, now_ms: u64, breaker: usize) -> Option<u64> {
        let now = now_ms.max(self.last_now);
        let l = self.breakers.get(breaker)?;
        let (round, probe_at) = self.fleet_round(now, l);
        let rank = self.rank(now, l, round)?;
        let p = &l.policy;
        let due = if round == 0 {
            self.anchor(now, l).saturating_add(p.probe_base_ms)
        } else {
            probe_at.saturating_add(p.wait(round))
        };
        Some(due.saturating_add(rank.saturating_mul(self.grace(l))))
    }

    /// Whether this instance is the one to probe the open breaker now (see
    /// [`FleetStore::probe_from`]).
    pub fn designated_prober(&self, now_ms: u64, breaker: usize) -> bool {
        self.probe_from(now_ms, breaker)
            .is_some_and(|t| t <= now_ms.max(self.last_now))
    }

    /// The instance the fleet expects to probe this breaker next (first in the ranking of
    /// [`FleetStore::probe_from`]), or `None` when no one may.
    pub fn designated(&self, now_ms: u64, breaker: usize) -> Option<&str> {
        let now = now_ms.max(self.last_now);
        let l = self.breakers.get(breaker)?;
        if !l.in_episode() {
            return None;
        }
        let round = self.fleet_round(now, l).0;
        let me = self.can_probe(now, l).then_some(self.self_id.as_str());
        me.into_iter()
            .chain(self.candidates(now, l).map(|i| self.peers[i].id.as_str()))
            .max_by_key(|id| (self.score(id, l, round), *id))
    }

    /// Whether a peer with the same fingerprint closed this breaker after a probe since it
    /// opened here: the upstream answers again, so local probes may start early.
    pub fn peers_report_recovered(&self, now_ms: u64, breaker: usize) -> bool {
        let now = now_ms.max(self.last_now);
        let Some(l) = self.breakers.get(breaker) else {
            return false;
        };
        l.in_episode()
            && self.agreeing(now, l).any(|(_, o)| {
                let f = o.flags();
                o.state() == State::Closed
                    && f.recovered
                    && !f.forced
                    && o.since_ms >= l.episode_start_ms
            })
    }

    /// Whether the next round should come sooner, after a quarter of the interval: some
    /// local breaker is closed while its window fails at its rate (two failures or more) but
    /// has not yet the attempts to open. Evidence spreads in rounds, so rounds four times
    /// faster while trouble brews are what let a fleet open before each instance has paid
    /// for it; only the instances whose own breaker fails pay for the extra pulls, and only
    /// until it opens or its window clears.
    pub fn hurry(&self, _now_ms: u64) -> bool {
        self.breakers.iter().any(|l| {
            l.view.is_some_and(|v| {
                v.state == State::Closed
                    && !v.forced
                    && v.failures >= 2
                    && v.failures.saturating_mul(10_000)
                        >= u64::from(l.policy.failure_rate).saturating_mul(v.requests)
            })
        })
    }

    /// What peers act on in this breaker's opinion now.
    fn signal(&self, now: u64, b: usize) -> Signal {
        let l = &self.breakers[b];
        let Some(v) = l.view else {
            return Signal::default();
        };
        let failing = v.state == State::Closed
            && !v.forced
            && v.failures >= 2
            && v.failures.saturating_mul(10_000)
                >= u64::from(l.policy.failure_rate).saturating_mul(v.requests);
        Signal {
            state: v.state.code(),
            forced: v.forced,
            level: if failing {
                (v.failures.ilog2() + 1).min(64) as u8
            } else {
                0
            },
            ready: failing && v.requests >= u64::from(l.policy.suspect_min),
            suspicious: self.suspicious(now, b).is_some(),
            recovered: self.peers_report_recovered(now, b),
        }
    }

    /// Whether to push now: tell `fanout` peers to pull this instance at once, because what
    /// peers act on has grown since the last push — a breaker moved (opened, half-opened,
    /// closed, forced or released), a closed breaker's failing window reached 2 failures, or
    /// doubled them, or reached `suspect_min` attempts, or peers' evidence made one
    /// suspicious or reported a recovery (so that news crosses the fleet hop by hop, not
    /// round by round). At most one push per `push_gap_ms`; news within the gap waits for
    /// its end ([`Push::At`]). [`Push::Now`] counts the push as made.
    pub fn take_push(&mut self, now_ms: u64) -> Push {
        let now = self.clock(now_ms);
        let mut news = false;
        for b in 0..self.breakers.len() {
            let s = self.signal(now, b);
            let pushed = &mut self.breakers[b].pushed;
            // What calmed down is remembered at once, so that its return is news again.
            pushed.level = pushed.level.min(s.level);
            pushed.ready &= s.ready;
            pushed.suspicious &= s.suspicious;
            pushed.recovered &= s.recovered;
            news |= s.news_since(pushed);
        }
        if !news {
            return Push::Nothing;
        }
        if let Some(at) = self
            .last_push_ms
            .map(|t| t.saturating_add(self.cfg.push_gap_ms))
            .filter(|&at| at > now)
        {
            return Push::At(at);
        }
        for b in 0..self.breakers.len() {
            self.breakers[b].pushed = self.signal(now, b);
        }
        self.last_push_ms = Some(now);
        self.counters.pushes += 1;
        Push::Now
    }

    /// The three answers at once, as the shell publishes them.
    pub fn verdict(&self, now_ms: u64, breaker: usize) -> Verdict {
        Verdict {
            suspicious_until_ms: self.suspicious(now_ms, breaker),
            probe_from_ms: self.probe_from(now_ms, breaker),
            peers_recovered: self.peers_report_recovered(now_ms, breaker),
        }
    }

    /// The stored opinion of `peer` about `breaker`, if fresh.
    pub fn opinion(&self, now_ms: u64, breaker: usize, peer: usize) -> Option<&Opinion> {
        let now = now_ms.max(self.last_now);
        let l = self.breakers.get(breaker)?;
        let at = l
            .opinions
            .binary_search_by_key(&(peer as u32), |(i, _)| *i)
            .ok()?;
        let o = &l.opinions[at].1;
        o.fresh(now, self.cfg.expire_ms).then_some(o)
    }

    /// What the fleet says of one breaker, for the status page.
    pub fn breaker_view(&self, now_ms: u64, breaker: usize) -> Option<BreakerFleetView> {
        let now = now_ms.max(self.last_now);
        let l = self.breakers.get(breaker)?;
        let exp = self.cfg.expire_ms;
        let fresh = l.opinions.iter().filter(|(_, o)| o.fresh(now, exp));
        let agreeing = self.agreeing(now, l).count();
        Some(BreakerFleetView {
            fingerprint: l.fingerprint,
            agreeing_peers: agreeing,
            open_peers: self.agreeing(now, l).filter(|(_, o)| o.tripped()).count(),
            disagreeing_peers: fresh.count() - agreeing,
            verdict: self.verdict(now, breaker),
            designated: self.designated(now, breaker).map(str::to_string),
            round: self.fleet_round(now, l).0,
        })
    }

    /// Every peer's figures.
    pub fn peer_stats(&self, now_ms: u64) -> Vec<PeerStats> {
        let now = now_ms.max(self.last_now);
        let exp = self.cfg.expire_ms;
        let mut out: Vec<PeerStats> = self
            .peers
            .iter()
            .map(|p| {
                let c = p.counters;
                let reachable = c.last_exchange_ms.is_some_and(|t| {
                    t.saturating_add(exp) >= now && c.last_error_ms.map_or(true, |e| e <= t)
                });
                PeerStats {
                    id: p.id.clone(),
                    reachable,
                    counters: c,
                    opinions: 0,
                    disagreements: 0,
                }
            })
            .collect();
        for l in &self.breakers {
            for (i, o) in l.opinions.iter().filter(|(_, o)| o.fresh(now, exp)) {
                let s = &mut out[*i as usize];
                s.opinions += 1;
                if o.fingerprint != l.fingerprint {
                    s.disagreements += 1;
                }
            }
        }
        out
    }

    /// Picks `fanout` distinct peers at random to pull from this round (all of them when
    /// there are fewer). `rnd` yields uniform random numbers.
    pub fn pick_peers(&self, rnd: impl FnMut() -> u32) -> Vec<usize> {
        super::select::pick(self.peers.len(), self.cfg.fanout, rnd)
    }

    fn own_opinion(&self, now: u64, l: &Local) -> Option<WireOpinion> {
        let v = l.view?;
        let open = v.state != State::Closed;
        let flags = Flags {
            can_probe: self.can_probe(now, l),
            recovered: l.recovered && !open,
            forced: v.forced,
        };
        if !(open || v.forced || v.requests > 0 || flags.recovered) {
            return None;
        }
        let (round, probe_at) = self.fleet_round(now, l);
        let requests = v.requests.min(wire::MAX_NUMBER);
        Some(WireOpinion {
            origin: self.self_id.clone(),
            upstream: l.upstream.clone(),
            route: l.route.clone(),
            fingerprint: l.fingerprint,
            state: v.state,
            age_ms: 0,
            since_ms: now.saturating_sub(v.since_ms).min(wire::MAX_NUMBER),
            requests,
            failures: v.failures.min(requests),
            slow: v.slow.min(requests),
            round,
            probe_ms: (round > 0).then(|| now.saturating_sub(probe_at).min(wire::MAX_NUMBER)),
            flags,
        })
    }

    fn relayed_opinion(&self, now: u64, l: &Local, origin: usize, o: &Opinion) -> WireOpinion {
        let age = now.saturating_sub(o.observed_at_ms).min(wire::MAX_NUMBER);
        let ago = |t: u64| now.saturating_sub(t).clamp(age, wire::MAX_NUMBER);
        let round = o.round;
        WireOpinion {
            origin: self.peers[origin].id.clone(),
            upstream: l.upstream.clone(),
            route: l.route.clone(),
            fingerprint: o.fingerprint,
            state: o.state(),
            age_ms: age,
            since_ms: ago(o.since_ms),
            requests: o.requests,
            failures: o.failures,
            slow: o.slow,
            round,
            probe_ms: (round > 0).then(|| ago(o.probe_at_ms)),
            flags: o.flags(),
        }
    }

    /// The message this instance serves now: its own opinions of breakers that saw traffic
    /// or trouble (open ones first), then the freshest relayed opinions worth passing on,
    /// up to `max_entries` records; older ones are left out first.
    pub fn message(&self, now_ms: u64) -> Message {
        let now = now_ms.max(self.last_now);
        let cap = self.cfg.max_entries;
        let mut own: Vec<WireOpinion> = self
            .breakers
            .iter()
            .filter_map(|l| self.own_opinion(now, l))
            .collect();
        // Trouble first, so that a cap drops quiet breakers before open ones.
        own.sort_by_key(|o| {
            (
                o.state == State::Closed && !o.flags.recovered,
                o.failures == 0,
            )
        });
        own.truncate(cap);
        let exp = self.cfg.expire_ms;
        let mut relayed: Vec<(u64, usize, usize)> = Vec::new();
        for (b, l) in self.breakers.iter().enumerate() {
            for (i, o) in &l.opinions {
                if o.fresh(now, exp) && o.worth_relaying() {
                    relayed.push((now.saturating_sub(o.observed_at_ms), b, *i as usize));
                }
            }
        }
        let room = cap - own.len();
        if relayed.len() > room && room > 0 {
            relayed.select_nth_unstable(room - 1);
        }
        relayed.truncate(room);
        relayed.sort_unstable();
        for (_, b, i) in relayed {
            let l = &self.breakers[b];
            if let Ok(at) = l.opinions.binary_search_by_key(&(i as u32), |(k, _)| *k) {
                own.push(self.relayed_opinion(now, l, i, &l.opinions[at].1));
            }
        }
        Message {
            sender: self.self_id.clone(),
            delay_ms: 0,
            opinions: own,
        }
    }

    /// [`FleetStore::message`] rendered for the wire.
    pub fn render(&self, now_ms: u64) -> String {
        wire::render(&self.message(now_ms))
    }
}
