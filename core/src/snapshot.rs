//! Plain-data views of breakers, taken under the zone lock and rendered after it is released.

/// The state a breaker is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Traffic flows; outcomes are recorded.
    Closed,
    /// Probes are let through one at a time.
    HalfOpen,
    /// Traffic is short-circuited.
    Open,
}

impl State {
    /// `closed`, `half_open` or `open`, as in `$circuit_breaker_state` and the status page.
    pub fn name(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::HalfOpen => "half_open",
            State::Open => "open",
        }
    }

    /// 0 closed, 1 half-open, 2 open, so that `max_over_time(...) == 2` finds a stuck breaker.
    pub fn code(self) -> u8 {
        match self {
            State::Closed => 0,
            State::HalfOpen => 1,
            State::Open => 2,
        }
    }
}

/// A state forced by an operator, held until `reset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forced {
    /// Forced open: everything short-circuits.
    Open,
    /// Forced closed: nothing short-circuits.
    Closed,
}

impl Forced {
    /// `open` or `closed`, as in the status page's `forced` field.
    pub fn name(self) -> &'static str {
        match self {
            Forced::Open => "open",
            Forced::Closed => "closed",
        }
    }
}

/// The live window, summed over its buckets.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowView {
    /// Window length in seconds.
    pub seconds: u32,
    /// Attempts recorded in the window.
    pub requests: u64,
    /// Of which failures.
    pub failures: u64,
    /// Of which slow calls.
    pub slow: u64,
}

impl WindowView {
    /// failures / requests, 0 when the window is empty.
    pub fn failure_rate(&self) -> f64 {
        ratio(self.failures, self.requests)
    }

    /// slow / requests, 0 when the window is empty.
    pub fn slow_rate(&self) -> f64 {
        ratio(self.slow, self.requests)
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Which rate opened a breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TripCause {
    /// Failures reached `failure_rate`.
    FailureRate,
    /// Slow calls reached `slow_rate`.
    SlowRate,
    /// `consecutive` gateway failures came in a row.
    Consecutive,
    /// A server failed the probe of its upstream's open breaker, and was ejected.
    Probe,
    /// A server's latency stood out from its pool's, and it was ejected.
    LatencyOutlier,
    /// A server's failures stood out from its pool's, and it was ejected.
    FailureOutlier,
}

impl TripCause {
    /// `failure_rate`, `slow_rate` or `consecutive`, as the parameter that crossed is
    /// named; `probe` for a server ejected by a failed probe; `latency_outlier` or
    /// `failure_outlier` for one its pool judged an outlier.
    pub fn name(self) -> &'static str {
        match self {
            TripCause::FailureRate => "failure_rate",
            TripCause::SlowRate => "slow_rate",
            TripCause::Consecutive => "consecutive",
            TripCause::Probe => "probe",
            TripCause::LatencyOutlier => "latency_outlier",
            TripCause::FailureOutlier => "failure_outlier",
        }
    }

    /// Whether the threshold is a rate (else a count, or nothing).
    pub fn is_rate(self) -> bool {
        matches!(self, TripCause::FailureRate | TripCause::SlowRate)
    }
}

/// The window that opened a breaker, as it was on the request that tripped it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TripView {
    /// Which rate crossed.
    pub cause: TripCause,
    /// That rate's threshold, in hundredths of a percent (`failure_rate=50%` is 5000); for
    /// `consecutive`, the run's length; 0 for a probe.
    pub threshold: u32,
    /// It tripped on `suspect_min` requests while peers' suspicion was in force.
    pub suspected: bool,
    /// The window's figures then.
    pub window: WindowView,
}

/// Latency percentiles over the window, in milliseconds (`None` without samples).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyView {
    /// Median.
    pub p50: Option<u64>,
    /// 90th percentile (what a pool's relative rules judge a server by), placed within its
    /// histogram bin by rank as they place it.
    pub p90: Option<u64>,
    /// 95th percentile.
    pub p95: Option<u64>,
    /// 99th percentile.
    pub p99: Option<u64>,
}

/// Running totals since the breaker was created or last reset.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Attempts recorded.
    pub requests: u64,
    /// Attempts classified as failures.
    pub failures: u64,
    /// Slow attempts.
    pub slow: u64,
    /// Requests answered without touching the origin because the breaker was open or
    /// half-open (in dry run: that would have been).
    pub short_circuited: u64,
    /// Probes started.
    pub probes: u64,
    /// TLS handshake/certificate failures (never origin failures).
    pub tls_errors: u64,
    /// 503 responses that carried `Retry-After`.
    pub retry_after_503: u64,
    /// Transitions to open.
    pub opened: u64,
    /// Transitions to half-open.
    pub half_opened: u64,
    /// Transitions to closed.
    pub closed: u64,
    /// Requests turned away by the recovery ramp (in dry run: that would have been); not in
    /// `short_circuited`.
    pub ramp_shed: u64,
    /// Bad outcomes (in `failures` or `slow`) that the pool explained, left out of the
    /// window: their server was ejected, or about to be.
    pub explained: u64,
}

/// What a breaker judges: the zone stores it as a byte beside the breaker's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Requests of an (upstream, route): `route` is the route's name.
    Route = 0,
    /// Attempts sent to one server of an upstream: `route` is the server's address.
    Server = 1,
    /// Requests with one value of a `circuit_breaker_key`: `upstream` is the key as written
    /// (`$host`), `route` the value.
    Keyed = 2,
}

/// Everything the status page shows of one breaker.
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerView {
    /// Current state.
    pub state: State,
    /// Whether `dry_run` is set.
    pub dry_run: bool,
    /// Operator-forced state, if any.
    pub forced: Option<Forced>,
    /// When the current state began, on the clock the breaker runs on (see
    /// [`BreakerView::on_wall_clock`]).
    pub since_ms: u64,
    /// Open or half-open: when the episode began, on the same clock — the trip (or force
    /// open) that took it out of closed, which a failed probe's reopen does not move.
    pub episode_ms: Option<u64>,
    /// When the next probe may start (open or half-open only), on the same clock.
    pub retry_at_ms: Option<u64>,
    /// The live window.
    pub window: WindowView,
    /// Latency percentiles over the window: of the requests recorded in it, and while open or
    /// half-open of the probes too (they do not count as the window's requests).
    pub latency: LatencyView,
    /// The current cooldown (doubles after each failed probe).
    pub cooldown_ms: u64,
    /// Good probes in a row in the current open period.
    pub consecutive_probe_successes: u32,
    /// Good probes in a row needed to close (open or half-open; 0 when closed or forced):
    /// `probes` after a hard failure, more after a brownout or a relapse (see
    /// [`judge`](crate::breaker::judge)).
    pub probes_needed: u32,
    /// The share of requests let through, in hundredths of a percent: below 10 000 while
    /// the recovery ramp runs, 10 000 otherwise (whatever the state).
    pub ramp_share: u32,
    /// Until when peers' suspicion lowers the evidence needed to trip, if it is in force.
    pub suspect_until_ms: Option<u64>,
    /// Running totals.
    pub totals: Totals,
    /// Why the last transition happened, with its numbers; empty before the first.
    pub last_transition: String,
    /// Open or half-open by a trip (not forced): the window that tripped it.
    pub tripped: Option<TripView>,
    /// The last minutes, interval by interval, when the status request asked for them
    /// (`history=1`); on the same clock.
    pub history: Option<HistoryView>,
}

impl BreakerView {
    /// Moves the view's instants from the monotonic clock the breaker runs on to Unix
    /// milliseconds, given a reading of each clock taken at the same moment. Durations are
    /// measured on the monotonic clock only, so a step of the wall clock moves `since`,
    /// `retry_at` and `suspect_until` with it but never shortens or stretches a cooldown.
    pub fn on_wall_clock(&mut self, mono_now_ms: u64, wall_now_ms: u64) {
        let c = Clocks {
            mono_ms: mono_now_ms,
            wall_ms: wall_now_ms,
        };
        self.since_ms = c.wall(self.since_ms);
        self.episode_ms = self.episode_ms.map(|t| c.wall(t));
        self.retry_at_ms = self.retry_at_ms.map(|t| c.wall(t));
        self.suspect_until_ms = self.suspect_until_ms.map(|t| c.wall(t));
        if let Some(h) = &mut self.history {
            h.start_ms = c.wall(h.start_ms);
        }
    }
}

/// The two clocks read at the same moment: the monotonic one breakers and the fleet's store
/// run on, and Unix time in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clocks {
    /// Monotonic milliseconds.
    pub mono_ms: u64,
    /// Unix milliseconds.
    pub wall_ms: u64,
}

impl Clocks {
    /// The Unix milliseconds of the monotonic instant `mono`, before or after the reading.
    pub fn wall(self, mono: u64) -> u64 {
        if mono >= self.mono_ms {
            self.wall_ms.saturating_add(mono - self.mono_ms)
        } else {
            self.wall_ms.saturating_sub(self.mono_ms - mono)
        }
    }
}

/// One complete interval of a breaker's history (`crate::history`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Point {
    /// Attempts recorded.
    pub requests: u32,
    /// Of which failures.
    pub failures: u32,
    /// Of which slow.
    pub slow: u32,
    /// The worst state seen ([`State::code`]: 2 open is worst).
    pub state: u8,
}

/// A breaker's history (`crate::history`) as the status page shows it: `points` oldest
/// first, the last one the current interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryView {
    /// When the first point's interval began, on the breaker's clock (the status page moves
    /// it to the wall clock).
    pub start_ms: u64,
    /// Each point's length.
    pub step_ms: u64,
    /// Oldest first; the last is the current interval, still filling.
    pub points: Vec<Point>,
}
