//! The store's records: what it reads of local breakers, keeps of peers' opinions and
//! publishes, and its counters.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::config::Policy;
use crate::fleet::auth::AuthError;
use crate::fleet::wire::{self, Flags, ParseError};
use crate::snapshot::{BreakerView, State};

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
    /// How long it stays fresh when that is longer than the fleet's expiry: the word of a
    /// quiet member on a bus, which speaks less often ([`crate::fleet::bus::lasts_ms`]).
    pub lasts_ms: u64,
}

/// Whether a record says nothing but that its breaker is closed and well: no failure, no slow
/// call, not forced, and a recovery, if any, older than the expiry (its state `state_age_ms`
/// old). A quiet member of a bus speaks less often, and its quiet word lasts longer
/// ([`crate::fleet::bus`]).
pub(super) fn says_quiet(
    state: State,
    failures: u64,
    slow: u64,
    flags: Flags,
    state_age_ms: u64,
    expire_ms: u64,
) -> bool {
    state == State::Closed
        && failures == 0
        && slow == 0
        && !flags.forced
        && !flags.can_probe
        && (!flags.recovered || state_age_ms > expire_ms)
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
    pub(super) fn tripped(&self) -> bool {
        self.state() != State::Closed && !self.flags().forced
    }

    /// Whether `self`, replacing `old`, says more than that the origin still holds it.
    pub(super) fn tells_more_than(&self, old: &Opinion, now: u64, expire_ms: u64) -> bool {
        !old.fresh(now, expire_ms)
            || (
                self.fingerprint,
                self.requests,
                self.failures,
                self.slow,
                self.round,
                self.state,
                self.flags,
            ) != (
                old.fingerprint,
                old.requests,
                old.failures,
                old.slow,
                old.round,
                old.state,
                old.flags,
            )
    }

    pub(super) fn fresh(&self, now: u64, expire_ms: u64) -> bool {
        self.observed_at_ms
            .saturating_add(expire_ms.max(self.lasts_ms))
            >= now
    }

    /// [`says_quiet`] at `now`: only such an opinion may last past the expiry.
    pub(super) fn quiet(&self, now: u64, expire_ms: u64) -> bool {
        let age = now.saturating_sub(self.since_ms);
        says_quiet(
            self.state(),
            self.failures,
            self.slow,
            self.flags(),
            age,
            expire_ms,
        )
    }

    /// Worth passing on: evidence of trouble or of recovery. Healthy windows are served
    /// by their own instance only, which keeps messages small in a healthy fleet.
    pub(super) fn worth_relaying(&self) -> bool {
        let f = self.flags();
        self.tripped() || self.failures > 0 || self.slow > 0 || f.recovered
    }
}

/// What the exchange worker publishes for one breaker after each round, for every worker's
/// request path to read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FleetAdvice {
    /// Until when peers' evidence makes the breaker suspicious ([`super::FleetStore::suspicious`]).
    pub suspicious_until_ms: Option<u64>,
    /// From when this instance may start the fleet's next probe
    /// ([`super::FleetStore::probe_from`]); `None`: not this instance.
    pub probe_from_ms: Option<u64>,
    /// A peer saw the upstream recover since this breaker opened
    /// ([`super::FleetStore::peers_report_recovered`]).
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
    /// See [`FleetAdvice`].
    pub advice: FleetAdvice,
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
    /// Keyed breakers left out of the exchange: already [`super::MAX_KEYED`] of them.
    pub keyed_left_out: u64,
    /// Pushes made: moments this instance told `fanout` peers to pull it at once.
    pub pushes: u64,
}

/// What one merge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// Records that replaced or added an opinion.
    pub merged: usize,
    /// Of those, the ones that told something new: an opinion that was absent or expired,
    /// or whose window, state, flags, fingerprint or probe round differ. A heartbeat that
    /// only renews an opinion is merged but changes no advice before the next round.
    pub changed: usize,
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

/// Whether to push now ([`super::FleetStore::take_push`]).
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

pub(super) fn valid_name(n: &str) -> Result<(), FleetError> {
    if n.is_empty() || n.len() > wire::MAX_NAME_BYTES {
        Err(FleetError::InvalidName(n.to_string()))
    } else {
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub(super) struct Peer {
    pub(super) id: String,
    /// Still a peer: configured, or a bus member not yet parted ([`super::FleetStore::part`]).
    pub(super) live: bool,
    pub(super) counters: PeerCounters,
    /// A refusal of this kind was reported since the last good exchange.
    pub(super) auth_told: bool,
    pub(super) tls_told: bool,
    /// How long its last word stays fresh, when longer than the expiry (a quiet bus member).
    pub(super) lasts_ms: u64,
}

/// What peers act on in a breaker's opinion, as last pushed: a push is due when it grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Signal {
    pub(super) state: u8,
    pub(super) forced: bool,
    /// While closed and failing at its rate: 1 + log2 of the failures (from 2 failures), so
    /// that a window is pushed as its failures double.
    pub(super) level: u8,
    /// The window would open a suspicious breaker (at least `suspect_min` attempts).
    pub(super) ready: bool,
    pub(super) suspicious: bool,
    pub(super) recovered: bool,
}

impl Signal {
    /// News worth a push: anything but a failing window that calmed down.
    pub(super) fn news_since(&self, old: &Signal) -> bool {
        self.state != old.state
            || self.forced != old.forced
            || self.level > old.level
            || (self.ready && !old.ready)
            || (self.suspicious && !old.suspicious)
            || (self.recovered && !old.recovered)
    }
}

#[derive(Clone, Debug)]
pub(super) struct Local {
    pub(super) upstream: String,
    pub(super) route: String,
    pub(super) fingerprint: u64,
    pub(super) policy: Policy,
    pub(super) view: Option<LocalView>,
    /// When the current open episode began (valid while the view is not closed).
    pub(super) episode_start_ms: u64,
    /// `probe_starts` when the episode began.
    pub(super) episode_probes: u64,
    /// The breaker closed after a probe and has stayed closed since.
    pub(super) recovered: bool,
    /// This instance's own latest fleet probe in the episode.
    pub(super) round: u32,
    pub(super) probe_at_ms: u64,
    /// The fleet's round as this instance last settled it, and the earliest probe time it
    /// accepted for it: within an episode the round never goes back and its probe never moves
    /// later (a peer replacing its claim with a later time of the same round, or dropping it,
    /// would otherwise hold the next probe off).
    pub(super) settled: (u32, u64),
    pub(super) last_refused_ms: Option<u64>,
    /// At most one opinion per peer, by peer index.
    pub(super) opinions: Opinions,
    /// What peers were last told of it.
    pub(super) pushed: Signal,
    /// Peers' report of recovery has cut this episode's cooldown.
    pub(super) hastened: bool,
    /// A message being merged changed one of its opinions (it is settled once, after).
    pub(super) touched: bool,
    /// A keyed breaker's (`circuit_breaker_key`): added and retired at run time.
    pub(super) keyed: bool,
    /// Retired: its index waits to be given to another keyed breaker.
    pub(super) retired: bool,
}

/// One breaker's opinions, by peer index: found and replaced in constant time, so that a
/// message's records cost one step each whatever the peers. The hasher is fixed, since the
/// keys are this instance's own indexes (nothing a peer chooses), and the order of iteration
/// is then the same at every run; nothing depends on that order anyway.
pub(super) type Opinions = HashMap<u32, Opinion, BuildHasherDefault<DefaultHasher>>;

impl Local {
    pub(super) fn in_episode(&self) -> bool {
        self.view.is_some_and(|v| v.state != State::Closed)
    }
}
