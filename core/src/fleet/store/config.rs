//! How the exchange runs: its configuration and defaults, and what it needs of a breaker's
//! configuration.

use crate::breaker::BreakerConfig;

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
    /// freshest relayed ones); at most [`crate::fleet::wire::MAX_ENTRIES`].
    pub max_entries: usize,
    /// The shortest time between two pushes ([`super::FleetStore::take_push`]).
    pub push_gap_ms: u64,
}

/// Peers pulled from per interval: 3, or every peer in a fleet of 4 or fewer. Each instance
/// serves `fanout` pulls per interval on average, whatever the fleet's size; how fast an
/// opinion spreads at each fanout is measured by `core/tests/fleet_sim.rs` (docs/fleet.md).
pub fn default_fanout(instances: usize) -> usize {
    instances.saturating_sub(1).clamp(1, 3)
}

/// How many intervals an opinion stays fresh by default: the rounds an opinion needs to
/// reach `instances` at this fanout (`ceil(log(instances) / log(fanout + 1))`), plus two,
/// and at least 3: above the oldest copy an instance holds once all know, in
/// `core/tests/fleet_sim.rs` (docs/fleet.md).
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
    pub(super) fn wait(&self, round: u32) -> u64 {
        let cap = self.probe_max_ms.max(self.probe_base_ms);
        self.probe_base_ms
            .saturating_mul(1u64 << round.min(40))
            .min(cap)
    }

    /// The waits after rounds `from..to`: the least time the fleet takes from its `from`-th
    /// probe to its `to`-th, whoever probes. Constant time: the wait stops changing after 40
    /// doublings.
    pub(super) fn waits(&self, from: u32, to: u32) -> u64 {
        let mut sum = 0u64;
        let mut k = from;
        while k < to && k < 41 {
            sum = sum.saturating_add(self.wait(k));
            k += 1;
        }
        sum.saturating_add(u64::from(to.saturating_sub(k)).saturating_mul(self.wait(40)))
    }
}
