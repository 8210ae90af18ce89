//! An adaptive limit's parameters (`limit=adaptive` and its `limit_*` companions) and their
//! checks.

use super::word;

/// Parameters of an adaptive limit (`limit=adaptive limit_min=… limit_max=…` of the
/// `circuit_breaker` directive). Rates are hundredths of a percent, durations milliseconds.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitConfig {
    /// The limit never falls below this, nor does a pinned measurement (`limit_min`, default
    /// 3: Envoy's `min_concurrency`; low enough to protect an origin of a few workers, high
    /// enough that a measurement at the floor still gathers its samples quickly).
    pub limit_min: u32,
    /// The limit never rises above this (`limit_max`, default 1000: Envoy's
    /// `max_concurrency_limit`; above nginx's default `worker_connections` of a few workers).
    pub limit_max: u32,
    /// The limit of a fresh controller (`limit_initial`, default 20: Netflix's initial
    /// limit). Slow start doubles it per interval while demand meets it, so a busy upstream
    /// reaches 160 in about half a second; starting at `limit_max` would leave an overload
    /// at start unprotected for the many halvings it takes to come down from there.
    pub limit_initial: u32,
    /// Latency above the minimum that is not yet a queue (`limit_tolerance`, default 25 %,
    /// Envoy's `buffer`): in-flight settles at most near `c·(1 + tolerance) + √(c·(1 +
    /// tolerance))` for an origin of `c` workers, and the natural spread of latency moves nothing.
    pub tolerance: u32,
    /// Shortest interval between two updates (`limit_interval`, default 100 ms, Envoy's
    /// `concurrency_update_interval`): a few round trips of a typical origin, and the
    /// reaction time to an overload.
    pub interval_ms: u32,
    /// Fewest latency samples an update is made on (`limit_samples`, default 20): the mean
    /// of 20 exponential service times is within ±25 % — the tolerance — about three
    /// times in four; fewer would move the limit on noise. An interval short of them is
    /// extended.
    pub samples: u32,
    /// Period of the minimum's re-measurement (`limit_remeasure`, default 10 s, BBR's
    /// `min_rtt` window; Envoy's 60 s learns a slower origin too late): how long a lasting
    /// upward shift of latency that costs no throughput may go unnoticed.
    pub remeasure_ms: u32,
}

impl Default for LimitConfig {
    fn default() -> Self {
        LimitConfig {
            limit_min: 3,
            limit_max: 1000,
            limit_initial: 20,
            tolerance: 2500,
            interval_ms: 100,
            samples: 20,
            remeasure_ms: 10_000,
        }
    }
}

/// A parameter of [`LimitConfig`] that is out of its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitConfigError {
    /// `limit_min` is 0.
    LimitMin,
    /// `limit_max` is below `limit_min`, or above [`word::MAX`].
    LimitMax,
    /// `limit_initial` is outside `limit_min..=limit_max`.
    LimitInitial,
    /// `tolerance` is above 10000 (100 %).
    Tolerance,
    /// `interval_ms` is 0 or above 60 s.
    Interval,
    /// `samples` is 0 or above 100 000.
    Samples,
    /// `remeasure_ms` is shorter than ten intervals.
    Remeasure,
}

impl LimitConfigError {
    /// The directive parameter at fault, for `invalid value "…" in "circuit_breaker"`.
    pub fn parameter(self) -> &'static str {
        match self {
            LimitConfigError::LimitMin => "limit_min",
            LimitConfigError::LimitMax => "limit_max",
            LimitConfigError::LimitInitial => "limit_initial",
            LimitConfigError::Tolerance => "limit_tolerance",
            LimitConfigError::Interval => "limit_interval",
            LimitConfigError::Samples => "limit_samples",
            LimitConfigError::Remeasure => "limit_remeasure",
        }
    }
}

impl LimitConfig {
    /// Checks every parameter's range; the controller clamps anyway, but a configuration
    /// that needs clamping is refused by `nginx -t`.
    pub fn check(&self) -> Result<(), LimitConfigError> {
        if self.limit_min == 0 {
            return Err(LimitConfigError::LimitMin);
        }
        // The shared word holds the limit in 24 bits: a larger one would be clipped there.
        if self.limit_max < self.limit_min || self.limit_max > word::MAX {
            return Err(LimitConfigError::LimitMax);
        }
        if !(self.limit_min..=self.limit_max).contains(&self.limit_initial) {
            return Err(LimitConfigError::LimitInitial);
        }
        if self.tolerance > 10_000 {
            return Err(LimitConfigError::Tolerance);
        }
        if self.interval_ms == 0 || self.interval_ms > 60_000 {
            return Err(LimitConfigError::Interval);
        }
        if self.samples == 0 || self.samples > 100_000 {
            return Err(LimitConfigError::Samples);
        }
        if u64::from(self.remeasure_ms) < 10 * u64::from(self.interval_ms) {
            return Err(LimitConfigError::Remeasure);
        }
        Ok(())
    }

    /// The same parameters brought into range, so that no input can make the controller
    /// divide by zero or leave its bounds.
    pub(super) fn sane(mut self) -> LimitConfig {
        self.limit_min = self.limit_min.max(1);
        self.limit_max = self.limit_max.max(self.limit_min);
        self.limit_initial = self.limit_initial.clamp(self.limit_min, self.limit_max);
        self.tolerance = self.tolerance.min(10_000);
        self.interval_ms = self.interval_ms.clamp(1, 60_000);
        self.samples = self.samples.clamp(1, 100_000);
        self.remeasure_ms = self.remeasure_ms.max(self.interval_ms.saturating_mul(10));
        self
    }
}
