//! An adaptive in-flight (concurrency) limit per breaker, kept in shared memory.
//!
//! # Algorithm
//!
//! The gradient controller of Envoy's adaptive concurrency filter
//! (<https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/adaptive_concurrency_filter>),
//! itself a variation of Netflix's gradient limit (<https://github.com/Netflix/concurrency-limits>;
//! "Performance Under Load", Netflix Technology Blog, 2018). At the end of every interval:
//!
//! ```text
//! gradient  = clamp(min_latency · (1 + tolerance) / sample_latency, 0.5, 2)
//! new_limit = limit · gradient + √(limit · gradient)
//! ```
//!
//! Why this one. An origin with `c` workers and service time `s` answers in `s` while at
//! most `c` requests are in flight, and in `L·s/c` when `L > c` are (the rest wait in its
//! queue). With the minimum at `s`, `limit · gradient = c · (1 + tolerance)` whatever the
//! limit was: one update puts it at the origin's own concurrency plus the tolerance, so the
//! controller protects within an interval or two of an overload (the gradient is clamped to
//! halving per step, against outliers), and it settles at most at `c·(1 + tolerance) +
//! √(c·(1 + tolerance))` in flight (anywhere from `c·(1 + tolerance)` up, under the hold
//! below) — every worker busy, a short queue — so it sheds only what the origin cannot
//! take. AIMD backs off on drops or a fixed latency threshold by 10 % per step
//! and needs dozens of round trips to walk down; Vegas estimates the same queue
//! (`L·(1 - min/sample)`) but moves by `log L` per step; Gradient2's long-term average
//! baseline follows a sustained overload upwards, and the queue with it.
//!
//! # Departures from Envoy, and why
//!
//! - **Mean, not percentile.** Workers pre-aggregate samples and merge them under the lock;
//!   counts and sums merge exactly, percentiles do not. Little's law relates the mean
//!   latency to concurrency, and Netflix's windowed limit averages by default.
//! - **Intervals.** An interval ends after `interval_ms`, after the last interval's mean
//!   latency (one round trip, so that an update sees the requests admitted under the
//!   previous one: without it the lag of a queue makes the limit oscillate), and with at
//!   least `samples` latency samples. Until then it keeps accumulating: the limit never
//!   moves on fewer samples, but for two decisions that fewer leave in no doubt, each on at
//!   least [`CLEAN_SAMPLES`]: a slowdown, and a pinned measurement's clean answers (below).
//! - **Application-limited** (from Gradient2). The limit grows only if in-flight reached half
//!   of it, and is cut only if in-flight reached it: a latency rise that the limit is not
//!   causing sheds nothing, and a limit nobody approaches does not run away.
//! - **Hold.** While the origin is held at the limit (Little's law: at least half the limit
//!   in flight on average over the interval) and latency is beyond the tolerance, the limit
//!   may fall but never rise: the √ headroom alone lifted a limit the gradient had just cut,
//!   and the limit cycled around the origin's level, each rise a burst into its queue. A
//!   limit only bursts reach still grows.
//! - **No shedding without evidence.** Until its first interval ends the controller limits
//!   nothing (`limit_max`), then starts at twice the demand seen (at least `limit_initial`):
//!   a guessed `limit_initial` below a busy origin's demand shed healthy traffic at every
//!   start. A floor measured with nothing holding the origin is checked pinned once latency
//!   leaves it far behind (see [`Limiter::new`]). Overload signals cut at once
//!   ([`Limiter::record`]).
//! - **Slow start** (TCP's, RFC 5681). Until its first cut the limit doubles whenever demand
//!   meets it and latency allows, so a fresh controller reaches a busy origin's need in a few
//!   intervals from `limit_initial` — but not on an interval with an answer as slow as a
//!   slowdown's: in the interval an origin slows down, the answers are still mostly fast,
//!   in-flight climbs to the limit as its queue builds, and doubling then doubles the queue.
//! - **The minimum follows the origin**, learnt three ways:
//!   1. *Periodic measurement*, every `probe_ms` (jittered by 15 %, as Envoy) and once soon
//!      after creation. When the limit was not reached, the interval's mean is taken as it
//!      is: no queue of ours is in it, and nothing is shed to measure it. When it was, the
//!      limit is pinned to half (at least `limit_min`) until an interval passes with no more
//!      than that in flight; while that drained mean still fell by more than the tolerance,
//!      the pin halves again (the queue was still draining), and a floor found higher than
//!      the last beyond the tolerance is checked once at half the pin (a pin above the
//!      origin's own concurrency keeps a queue at the origin, out of sight of in-flight; this
//!      check applies to the slowdown's pin below too); the last mean is the floor, and
//!      the limit is restored. Envoy pins to 3 for 50 requests every minute whatever the
//!      load, which sheds almost everything a large, healthy origin is sent meanwhile.
//!      *Clean answers* end a measurement sooner: answers to attempts that started after the
//!      pin was set, hence after the older limit's queue drained below it, which the origin
//!      served with no more than the pin in flight (the shell marks them,
//!      [`Samples::clean`]). As soon as [`CLEAN_SAMPLES`] of them agree within the tolerance,
//!      their mean decides as a drained interval's would, whatever the interval: it is the
//!      floor, or, risen beyond the tolerance, checked once at half the pin (answers that
//!      agree do not rule out a queue at the origin: at twice its concurrency each waits
//!      one service time). The lab waited a whole interval of 20 answers after the drain, at
//!      the pin's low rate, and its limit stepped back up after the 0.5 s it has to protect
//!      in. Clean answers that spread at [`SLOWDOWN`]
//!      times the old floor on average halve a pin that may still be halved, at once: for a
//!      steady origin, such a spread is a queue at the origin, the pin above its concurrency.
//!   2. *Slowdown*: with the limit reached, one update whose latency is [`SLOWDOWN`] times
//!      the tolerated level or more, or [`CLAMPED_RUN`] updates in a row at the gradient's
//!      floor, start that measurement at once, pinned where the old minimum would allow the
//!      latency seen (`limit · gradient`, unclamped; often `limit_min`), or the rate of
//!      answers seen allows (the interval's rate times the tolerated old minimum: at most
//!      the origin's new concurrency, whatever its queue, when the answers came at its new
//!      pace; an interval that ends early on a slowdown had not held in-flight at the limit
//!      throughout, which the first overstates) if lower, rather than at half:
//!      halving towards it takes a round trip of the slow origin per step while its queue
//!      grows. A slowdown ends its interval as soon as a quarter of its samples (at least
//!      [`CLEAN_SAMPLES`]) show it. The measurement ends at the steady level of the
//!      origin's own concurrency — its rate of answers while the queue drained times the
//!      new minimum (BBR's bandwidth-delay product), plus the tolerance and the gradient's
//!      headroom — when that is below the saved limit, which was cut against the stale
//!      minimum: going back to it would refill the queue the measurement drained. Without
//!      this, an origin whose service time rose 6× would be halved down to `limit_min` from
//!      its stale minimum, leaving most of its workers idle while clients are refused.
//!   3. *Recovery*: at the limit, an interval faster than the minimum beyond the tolerance
//!      lowers it at once, and it is measured again [`SOON_INTERVALS`] later. Below the limit
//!      such dips are noise and wait for the measurement: a running minimum of noisy means
//!      drifts low, and the controller then takes ordinary latency for a queue.
//!
//! `core/tests/limit_sim.rs` drives the controller against a queueing origin in virtual
//! time and prints the figures.
//!
//! # Shared memory
//!
//! [`Limiter`] is plain data (`#[repr(C)]`, integers and floats, no pointers, 8-byte
//! aligned) of [`LIMITER_SIZE`] = 240 bytes, its configuration and the interval under way
//! included; each worker's [`Samples`] is 40 bytes. The shell mutates it under the zone lock.
//! In-flight counting is the shell's, on one atomic word per limit that holds the tenant's
//! tag, the limit and the in-flight count ([`word`]): it admits a request while in-flight is
//! below [`Limiter::limit`], published there after every update.

use std::mem::size_of;

use crate::breaker::jittered;

/// Latency samples of one worker since its last flush, merged under the lock. Merging is
/// associative and commutative, so flushes may come in any grouping and order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Samples {
    /// Sum of the latencies, milliseconds.
    pub sum_ms: u64,
    /// Latency samples: attempts the origin answered, and timeouts (their elapsed time is
    /// the clearest sign of a queue).
    pub count: u32,
    /// Smallest latency, milliseconds (`u32::MAX` while `count` is 0).
    pub min_ms: u32,
    /// Largest latency, milliseconds.
    pub max_ms: u32,
    /// Attempts that ended with no latency worth averaging (refused, reset, client abort):
    /// counted for the status page, never averaged, so that fast errors cannot drag the
    /// minimum down and throttle a healthy origin.
    pub drops: u32,
    /// The most requests in flight seen at an admission (the shell's counter just after its
    /// increment) or at a completion (just before its decrement): whether the limit was
    /// reached, how much of it was used, and whether the origin drained.
    pub inflight_max: u32,
    /// Latency samples (of `count`) of attempts that started after the pin of a pinned
    /// measurement was set ([`Limiter::clean_since`]): none is admitted before the queue of
    /// the older limit has drained below the pin, so these are answers the origin gave with
    /// no more than the pin in flight.
    pub clean: u32,
    /// Answers in which the origin said it is saturated — a `429`, a `503` with
    /// `Retry-After`, a gRPC `RESOURCE_EXHAUSTED` — whether or not their class counts as a
    /// breaker failure: no latency sample (the origin turned the work away), and the limit
    /// falls at once ([`Limiter::record`]).
    pub overloads: u32,
}

impl Default for Samples {
    fn default() -> Self {
        Samples::EMPTY
    }
}

impl Samples {
    /// Nothing recorded.
    pub const EMPTY: Samples = Samples {
        sum_ms: 0,
        count: 0,
        min_ms: u32::MAX,
        max_ms: 0,
        drops: 0,
        inflight_max: 0,
        clean: 0,
        overloads: 0,
    };

    /// Adds one latency sample. The sum and count wrap rather than saturate: a worker flushes
    /// its samples at 32, nowhere near either bound, and the controller's merge saturates
    /// (`scripts/bench-instructions`: closed_limit 15 instructions fewer per request).
    #[inline]
    pub fn add(&mut self, latency_ms: u64) {
        let ms = u32::try_from(latency_ms).unwrap_or(u32::MAX);
        self.sum_ms = self.sum_ms.wrapping_add(latency_ms);
        self.count = self.count.wrapping_add(1);
        self.min_ms = self.min_ms.min(ms);
        self.max_ms = self.max_ms.max(ms);
    }

    /// Adds one latency sample of an attempt that started after [`Limiter::clean_since`]
    /// (wrapping, as [`Samples::add`]).
    #[inline]
    pub fn add_clean(&mut self, latency_ms: u64) {
        self.add(latency_ms);
        self.clean = self.clean.wrapping_add(1);
    }

    /// Counts one attempt without a latency sample.
    #[inline]
    pub fn add_drop(&mut self) {
        self.drops = self.drops.saturating_add(1);
    }

    /// Counts one answer in which the origin said it is saturated (see
    /// [`Samples::overloads`]).
    #[inline]
    pub fn add_overload(&mut self) {
        self.overloads = self.overloads.saturating_add(1);
    }

    /// Notes the in-flight count seen at an admission (after the increment) or a completion
    /// (before the decrement).
    #[inline]
    pub fn note_inflight(&mut self, inflight: u32) {
        self.inflight_max = self.inflight_max.max(inflight);
    }

    /// Adds `other` to `self`.
    #[inline]
    pub fn merge(&mut self, other: &Samples) {
        self.sum_ms = self.sum_ms.saturating_add(other.sum_ms);
        self.count = self.count.saturating_add(other.count);
        self.min_ms = self.min_ms.min(other.min_ms);
        self.max_ms = self.max_ms.max(other.max_ms);
        self.drops = self.drops.saturating_add(other.drops);
        self.inflight_max = self.inflight_max.max(other.inflight_max);
        self.clean = self.clean.saturating_add(other.clean);
        self.overloads = self.overloads.saturating_add(other.overloads);
    }

    /// Whether nothing at all was recorded.
    pub fn is_empty(&self) -> bool {
        self.count == 0 && self.drops == 0 && self.inflight_max == 0 && self.overloads == 0
    }

    /// Mean latency in milliseconds, `None` without samples.
    pub fn mean_ms(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ms as f64 / f64::from(self.count))
    }
}

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
    /// Period of the minimum's re-measurement (`limit_probe`, default 10 s, BBR's
    /// `min_rtt` window; Envoy's 60 s learns a slower origin too late): how long a lasting
    /// upward shift of latency that costs no throughput may go unnoticed.
    pub probe_ms: u32,
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
            probe_ms: 10_000,
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
    /// `probe_ms` is shorter than ten intervals.
    Probe,
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
            LimitConfigError::Probe => "limit_probe",
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
        if u64::from(self.probe_ms) < 10 * u64::from(self.interval_ms) {
            return Err(LimitConfigError::Probe);
        }
        Ok(())
    }

    /// The same parameters brought into range, so that no input can make the controller
    /// divide by zero or leave its bounds.
    fn sane(mut self) -> LimitConfig {
        self.limit_min = self.limit_min.max(1);
        self.limit_max = self.limit_max.max(self.limit_min);
        self.limit_initial = self.limit_initial.clamp(self.limit_min, self.limit_max);
        self.tolerance = self.tolerance.min(10_000);
        self.interval_ms = self.interval_ms.clamp(1, 60_000);
        self.samples = self.samples.clamp(1, 100_000);
        self.probe_ms = self.probe_ms.max(self.interval_ms.saturating_mul(10));
        self
    }
}

/// A pinned measurement gives up after this many intervals in which the origin did not drain
/// (long-lived requests may hold slots for minutes); the minimum is then left as it was.
pub const PROBE_MAX_INTERVALS: u32 = 8;

/// This many updates in a row at the gradient's floor (latency at least twice the tolerated
/// level) while the limit is reached start a pinned measurement at once: either the queue is
/// deeper than halving drains, or the origin itself got slower, and only a measurement at a
/// lower concurrency tells which.
pub const CLAMPED_RUN: u32 = 3;

/// One update at the limit with latency at least this many times the tolerated level starts
/// the measurement at once: no queue the limit allowed, nor the spread of a mean of
/// `samples` answers, explains it — the origin itself got slower, and every interval spent
/// halving towards it lets the queue grow.
pub const SLOWDOWN: f64 = 4.0;

/// Fewest clean answers (see [`Samples::clean`]) that end a pinned measurement early when
/// they agree within the tolerance.
pub const CLEAN_SAMPLES: u32 = 5;

/// After the minimum fell by more than the tolerance, it is measured again this many
/// intervals later; and first this many intervals after creation.
pub const SOON_INTERVALS: u64 = 5;

/// Jitter of the re-measurement period (15 %, Envoy's default), in hundredths of a percent:
/// the nginx instances of a fleet do not pin the same origin at the same moment.
const PROBE_JITTER: u32 = 1500;

/// Latencies below 1 ms are taken as 1 ms: nginx's clock has millisecond resolution, and
/// a ratio of two zeros means nothing.
const LATENCY_FLOOR_MS: f64 = 1.0;

const GRADIENT_MIN: f64 = 0.5;
const GRADIENT_MAX: f64 = 2.0;

const PHASE_NORMAL: u8 = 0;
const PHASE_PROBING: u8 = 1;

/// How an update changed the minimum latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MinChange {
    /// Unchanged.
    None,
    /// Lowered at once: an interval at the limit was faster than it beyond the tolerance.
    Fell,
    /// Taken again from an interval in which the limit was not reached (periodic).
    Remeasured,
    /// A pinned measurement began: the limit is held at a lower pin until the origin drains.
    ProbeStarted,
    /// A pinned measurement halved its pin: latency was still falling.
    ProbeHalved,
    /// A pinned measurement ended: the minimum is its last drained interval's mean.
    Probed,
    /// A pinned measurement gave up without draining; the minimum is unchanged.
    ProbeAbandoned,
}

/// What an update did, for logging and tests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Update {
    /// The limit in force before.
    pub from: u32,
    /// The limit in force now.
    pub to: u32,
    /// The interval's mean latency, milliseconds.
    pub sample_ms: f64,
    /// The minimum latency the controller now works from, milliseconds.
    pub min_latency_ms: f64,
    /// Latency samples the update was made on.
    pub samples: u32,
    /// Whether in-flight reached the limit during the interval.
    pub reached: bool,
    /// What happened to the minimum.
    pub min_change: MinChange,
    /// The origin said it is saturated: the limit fell at once, whatever the interval (see
    /// [`Limiter::record`]).
    pub overload: bool,
}

/// Figures for the status page (the shell adds in-flight and its shed counter).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LimitView {
    /// The limit requests are compared against now.
    pub limit: u32,
    /// The minimum latency it works from, milliseconds (0 before the first update).
    pub min_latency_ms: f64,
    /// Mean latency of the last interval, milliseconds (0 before the first update).
    pub sample_latency_ms: f64,
    /// A pinned measurement of the minimum is under way.
    pub probing: bool,
    /// Updates made.
    pub updates: u64,
    /// Measurements of the minimum completed (periodic and pinned).
    pub remeasures: u32,
}

/// The controller of one breaker, in shared memory.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Limiter {
    cfg: LimitConfig,
    /// The limit, fractional so that small steps accumulate; [`Limiter::limit`] rounds down.
    limit: f64,
    /// The minimum latency, milliseconds; 0 until the first update.
    min_ms: f64,
    /// The last interval's mean latency, milliseconds.
    sample_ms: f64,
    /// The limit before a pinned measurement, restored after it.
    saved_limit: f64,
    /// During a pinned measurement: the mean latency at the previous pin (or before it).
    probe_ref_ms: f64,
    /// During a pinned measurement: the highest rate of answers (per millisecond) of an
    /// interval that had not drained — the origin was busy then, so this is its capacity.
    probe_rate: f64,
    /// During a pinned measurement: the flushes made of clean samples only (see
    /// [`Samples::clean`]), merged.
    probe_clean: Samples,
    /// The interval under way.
    pending: Samples,
    interval_start_ms: u64,
    /// During a pinned measurement: when the pin in force was set, and the answers since.
    pin_since_ms: u64,
    pin_answers: u64,
    /// The latest clock reading; earlier readings are taken as this.
    last_ms: u64,
    next_probe_ms: u64,
    /// No cut on an overload signal before this (one per interval).
    overload_gate_ms: u64,
    updates: u64,
    remeasures: u32,
    /// The pinned limit during a measurement.
    pin: u32,
    /// Intervals spent at the current pin without draining.
    probe_busy: u32,
    /// Consecutive updates at the gradient's floor with the limit reached.
    clamped: u32,

    phase: u8,
    /// Until the first cut, the limit doubles while latency allows.
    slow_start: u8,
    /// During a pinned measurement: the pin was halved at least once.
    halved: u8,
    /// No update yet: nothing is known of the origin, and the limit admits up to
    /// `limit_max` (see [`Limiter::new`]).
    unmeasured: u8,
    /// The minimum was first measured with nothing holding the origin: the first pinned
    /// measurement checks its floor at a lower pin whatever it finds (it may have been a
    /// queue).
    unheld_min: u8,
    _pad: [u8; 3],
}

/// Size of a [`Limiter`] in shared memory, bytes.
pub const LIMITER_SIZE: usize = size_of::<Limiter>();

impl Limiter {
    /// A controller created at `now_ms`, with no minimum yet. Until its first update it
    /// sheds nothing (up to `limit_max`): it has no evidence of a queue, and a guess
    /// (`limit_initial`) that a busy origin exceeds would shed healthy traffic at every
    /// start, reload and new upstream. That update, on the answers of its first interval,
    /// sets the limit at twice the most requests in flight seen (where slow start would
    /// take it; at least `limit_initial`), so that demand that doubles within an interval is
    /// the most let in unmeasured. Its second also measures the minimum (as Envoy starts
    /// with a measurement), and the first pinned measurement checks that floor at a lower
    /// pin whatever it finds, so that a start under overload does not take a queue for the
    /// floor.
    pub fn new(cfg: LimitConfig, now_ms: u64) -> Limiter {
        let cfg = cfg.sane();
        let initial = f64::from(cfg.limit_initial);
        Limiter {
            cfg,
            limit: initial,
            min_ms: 0.0,
            sample_ms: 0.0,
            saved_limit: initial,
            probe_ref_ms: 0.0,
            probe_rate: 0.0,
            probe_clean: Samples::EMPTY,
            pending: Samples::EMPTY,
            interval_start_ms: now_ms,
            pin_since_ms: now_ms,
            pin_answers: 0,
            last_ms: now_ms,
            next_probe_ms: now_ms.saturating_add(SOON_INTERVALS * u64::from(cfg.interval_ms)),
            overload_gate_ms: 0,
            updates: 0,
            remeasures: 0,
            pin: cfg.limit_min,
            probe_busy: 0,
            clamped: 0,
            phase: PHASE_NORMAL,
            slow_start: 1,
            halved: 0,
            unmeasured: u8::from(cfg.limit_min < cfg.limit_max),
            unheld_min: u8::from(cfg.limit_min < cfg.limit_max),
            _pad: [0; 3],
        }
    }

    /// A controller that limits from `limit_initial` from its first request, with no
    /// unmeasured start (how [`Limiter::new`]'s is once its first interval has set the
    /// limit at `limit_initial`). For tests of the controller proper.
    #[doc(hidden)]
    pub fn new_at_initial(cfg: LimitConfig, now_ms: u64) -> Limiter {
        Limiter {
            unmeasured: 0,
            unheld_min: 0,
            ..Limiter::new(cfg, now_ms)
        }
    }

    /// The parameters in force (brought into range).
    pub fn config(&self) -> &LimitConfig {
        &self.cfg
    }

    /// The limit to compare in-flight requests against: admit while in-flight is below it.
    /// Always within `limit_min..=limit_max`.
    #[inline]
    pub fn limit(&self) -> u32 {
        if self.phase == PHASE_PROBING {
            return self.pin;
        }
        if self.unmeasured != 0 {
            return self.cfg.limit_max;
        }
        // The float stays within the bounds; the clamp only guards the conversion.
        (self.limit as u32).clamp(self.cfg.limit_min, self.cfg.limit_max)
    }

    /// During a pinned measurement, when its pin was set: an attempt that started later (in a
    /// later millisecond) is clean ([`Samples::clean`]). `u64::MAX` otherwise.
    #[inline]
    pub fn clean_since(&self) -> u64 {
        if self.phase == PHASE_PROBING {
            self.pin_since_ms
        } else {
            u64::MAX
        }
    }

    /// The minimum latency the limit is computed from, milliseconds (0 before any update).
    pub fn min_latency_ms(&self) -> f64 {
        self.min_ms
    }

    /// Figures for the status page.
    pub fn view(&self) -> LimitView {
        LimitView {
            limit: self.limit(),
            min_latency_ms: self.min_ms,
            sample_latency_ms: self.sample_ms,
            probing: self.phase == PHASE_PROBING,
            updates: self.updates,
            remeasures: self.remeasures,
        }
    }

    /// Merges a worker's flushed samples at `now_ms`; when the interval is over and holds
    /// enough samples, updates the limit and returns what changed. `rnd` is a uniform random
    /// number (jitter of the next re-measurement).
    ///
    /// An interval lasts at least `interval_ms` and at least the last mean latency, so that
    /// an update sees the requests admitted under the previous one, and holds at least
    /// `samples` latency samples. Two decisions take fewer, because their answers leave no
    /// doubt and every round trip waited for lets a queue grow or sheds what the origin could
    /// serve: a slowdown (`slowed_down`, on at least a quarter of `samples` and at least
    /// [`CLEAN_SAMPLES`]) and a pinned measurement's clean answers (`clean_decides`, on at
    /// least [`CLEAN_SAMPLES`], or `samples` if fewer).
    ///
    /// An overload signal ([`Samples::overloads`]) cuts the limit at once, outside a pinned
    /// measurement, at most once per interval (`interval_ms`, or the last mean latency if
    /// longer: the cut's effect takes a round trip to show): to half the lower of the limit
    /// and the most in flight of the flush that carried it — the concurrency at which the
    /// origin said "too much" — as the gradient's largest cut (TCP halves on a loss), and
    /// slow start ends. The interval under way goes on; the gradient may lift the limit
    /// again by its headroom while latency stays near the minimum, and the next signal
    /// halves it again, so that an origin that refuses what it cannot take settles the
    /// limit just under its capacity.
    pub fn record(&mut self, now_ms: u64, samples: &Samples, rnd: u32) -> Option<Update> {
        let now = now_ms.max(self.last_ms);
        self.last_ms = now;
        self.pending.merge(samples);
        if samples.overloads > 0 && self.phase == PHASE_NORMAL && now >= self.overload_gate_ms {
            return Some(self.overload_cut(now, samples));
        }
        let elapsed = now - self.interval_start_ms;
        let mut length = u64::from(self.cfg.interval_ms);
        if self.phase == PHASE_PROBING {
            self.pin_answers = self.pin_answers.saturating_add(u64::from(samples.count));
            // Only a flush made wholly at the pin: one begun under an older limit holds
            // answers called clean against that limit (a worker whose clock runs a
            // millisecond ahead may also call one clean that was admitted just before).
            if samples.count > 0
                && samples.clean == samples.count
                && samples.inflight_max <= self.pin
            {
                self.probe_clean.merge(samples);
            }
            if self.clean_decides() {
                return Some(self.clean_update(now, elapsed, rnd));
            }
        } else {
            // A pinned measurement admits nothing new until the queue drains: no interval
            // needs to wait for the effect of the last update.
            length = length.max(self.sample_ms as u64);
        }
        if (elapsed < length || self.pending.count < self.cfg.samples) && !self.slowed_down() {
            return None;
        }
        let interval = std::mem::replace(&mut self.pending, Samples::EMPTY);
        self.interval_start_ms = now;
        Some(self.update(now, elapsed, &interval, rnd))
    }

    /// [`Limiter::record`]'s cut on an overload signal.
    fn overload_cut(&mut self, now: u64, s: &Samples) -> Update {
        let from = self.limit();
        // Before the first interval, nothing limited: the origin's word is the evidence.
        let mut at = if self.unmeasured != 0 {
            f64::from(self.cfg.limit_max)
        } else {
            self.limit
        };
        self.unmeasured = 0;
        if s.inflight_max > 0 {
            at = at.min(f64::from(s.inflight_max));
        }
        self.limit = self.bounded(at * GRADIENT_MIN);
        self.slow_start = 0;
        self.overload_gate_ms =
            now.saturating_add(u64::from(self.cfg.interval_ms).max(self.sample_ms as u64));
        Update {
            from,
            to: self.limit(),
            sample_ms: self.sample_ms,
            min_latency_ms: self.min_ms,
            samples: 0,
            reached: s.inflight_max >= from,
            min_change: MinChange::None,
            overload: true,
        }
    }

    /// The update of a pinned measurement that its clean answers decided: the interval under
    /// way ends, and the floor is their mean, or the pin is halved.
    fn clean_update(&mut self, now: u64, elapsed: u64, rnd: u32) -> Update {
        let clean = std::mem::replace(&mut self.probe_clean, Samples::EMPTY);
        let interval = std::mem::replace(&mut self.pending, Samples::EMPTY);
        self.interval_start_ms = now;
        let since = now.saturating_sub(self.pin_since_ms);
        if self.probe_rate == 0.0 && interval.inflight_max > self.pin && since > 0 {
            // No interval has ended busy yet, and the queue drained within this one: the
            // answers since the pin was set, while it drained and then at the pin, are a
            // capacity measured low rather than none. (This interval alone may be a few
            // milliseconds long: four workers answering at once made one a third too high
            // in the lab.)
            self.probe_rate = self.pin_answers as f64 / since as f64;
        }
        self.update(now, elapsed, &clean, rnd)
    }

    /// Whether the interval under way already shows a slowdown at the limit: a quarter of
    /// its samples (at least [`CLEAN_SAMPLES`]) averaging [`SLOWDOWN`] times the tolerated
    /// latency or more. Five exponential service times average five times their mean with
    /// odds below 10⁻⁶; a queue the limit allowed is within the gradient's reach. The lab's
    /// overload is seen 75 to 130 ms after it begins instead of 160 to 210 ms (tenth to
    /// ninetieth percentile of 100 seeds of `tests/limit_sim.rs`), with less of a queue to
    /// drain.
    fn slowed_down(&self) -> bool {
        let p = &self.pending;
        self.phase == PHASE_NORMAL
            && self.min_ms > 0.0
            && p.count >= (self.cfg.samples / 4).max(CLEAN_SAMPLES)
            && p.inflight_max >= self.limit()
            && p.sum_ms as f64 >= f64::from(p.count) * SLOWDOWN * self.min_ms * self.tolerated()
    }

    /// Whether the clean answers of a pinned measurement decide it before its interval
    /// ends: at least [`CLEAN_SAMPLES`] of them, and either
    /// - they agree, the slowest within the tolerance of the fastest: more would not move
    ///   their mean beyond the tolerance (an origin whose latency spreads wider, the
    ///   exponential service times of a busy one, is measured over whole intervals of
    ///   `samples` answers instead); `probe` takes their mean as a drained interval's; or
    /// - they spread, at [`SLOWDOWN`] times the tolerated floor on average, at a pin that
    ///   may still be halved: the floor rose far, and for a steady origin such a spread is a
    ///   queue at the origin, the pin above its concurrency; `probe` halves it.
    fn clean_decides(&self) -> bool {
        let c = &self.probe_clean;
        if c.count < CLEAN_SAMPLES.min(self.cfg.samples) {
            return false;
        }
        let tolerated = self.tolerated();
        let agree = f64::from(c.max_ms) <= f64::from(c.min_ms).max(LATENCY_FLOOR_MS) * tolerated;
        let far = c.sum_ms as f64 >= f64::from(c.count) * SLOWDOWN * self.min_ms * tolerated;
        agree || (far && self.halved == 0 && self.lower_pin() < self.pin)
    }

    /// The pin a measurement halves to.
    fn lower_pin(&self) -> u32 {
        (self.pin / 2).max(self.cfg.limit_min)
    }

    fn schedule_probe(&mut self, now: u64, rnd: u32) {
        self.next_probe_ms =
            now.saturating_add(jittered(u64::from(self.cfg.probe_ms), PROBE_JITTER, rnd));
    }

    fn bounded(&self, limit: f64) -> f64 {
        limit.clamp(f64::from(self.cfg.limit_min), f64::from(self.cfg.limit_max))
    }

    fn update(&mut self, now: u64, elapsed: u64, s: &Samples, rnd: u32) -> Update {
        let from = self.limit();
        let sample = s.mean_ms().unwrap_or(0.0).max(LATENCY_FLOOR_MS);
        let reached = s.inflight_max >= from;
        self.updates = self.updates.saturating_add(1);
        let change = if self.updates == 1 {
            // The first interval after creation only holds the requests that were fast
            // enough to finish within it: its mean is biased low. Nothing is decided on it
            // but the demand.
            if self.unmeasured != 0 {
                self.unmeasured = 0;
                let demand = 2.0 * f64::from(s.inflight_max);
                self.limit = self.bounded(demand.max(f64::from(self.cfg.limit_initial)));
                self.saved_limit = self.limit;
            }
            MinChange::None
        } else if self.phase == PHASE_PROBING {
            self.probe(now, elapsed, s, sample, rnd)
        } else {
            self.gradient(now, elapsed, s, sample, reached, rnd)
        };
        self.sample_ms = sample;
        Update {
            from,
            to: self.limit(),
            sample_ms: sample,
            min_latency_ms: self.min_ms,
            samples: s.count,
            reached,
            min_change: change,
            overload: false,
        }
    }

    /// One step of a pinned measurement.
    fn probe(&mut self, now: u64, elapsed: u64, s: &Samples, sample: f64, rnd: u32) -> MinChange {
        if s.inflight_max > self.pin {
            // Not drained: some of this interval's requests queued behind more than `pin`.
            // They were waiting, so the origin was busy: its rate of answers is its
            // capacity, and the queue's latency is what a fall is measured from — before
            // the first halving. After it, the reference is the drained mean at the pin
            // before: the tail of that pin's queue, raised into it, made every next pin seem
            // to fall, and one measurement halved a 64-worker origin's pin down to 3.
            if self.halved == 0 {
                self.probe_ref_ms = self.probe_ref_ms.max(sample);
            }
            if elapsed > 0 {
                self.probe_rate = self.probe_rate.max(f64::from(s.count) / elapsed as f64);
            }
            self.probe_busy += 1;
            if self.probe_busy < PROBE_MAX_INTERVALS {
                return MinChange::None;
            }
            self.end_probe(now, rnd, false);
            return MinChange::ProbeAbandoned;
        }
        self.probe_busy = 0;
        let lower = self.lower_pin();
        // Latency that fell with the pin by more than the tolerance was still a queue.
        let falling = sample * self.tolerated() < self.probe_ref_ms;
        // A floor above the last one beyond the tolerance is checked at half the pin once: a
        // pin above the origin's own concurrency keeps a queue at the origin, out of sight
        // of in-flight (a periodic measurement's half limit, at the moment the origin slowed
        // down: the lab took 85 ms for a 30 ms origin, and the limit rose to 40). A latency
        // that then falls was that queue, and the halving goes on.
        let rose =
            self.halved == 0 && (sample > self.min_ms * self.tolerated() || self.unheld_min != 0);
        if lower < self.pin && (falling || rose) {
            // Latency fell with the concurrency, or has yet to show it does not: halve again.
            self.halved = 1;
            self.pin = lower;
            self.pin_since_ms = now;
            self.pin_answers = 0;
            self.probe_ref_ms = sample;
            self.probe_clean = Samples::EMPTY;
            return MinChange::ProbeHalved;
        }
        self.min_ms = sample;
        self.remeasures = self.remeasures.saturating_add(1);
        self.end_probe(now, rnd, true);
        MinChange::Probed
    }

    /// Ends a pinned measurement. The limit goes back to where it was, or, when the
    /// measurement saw the origin busy, to no more than the steady level of the origin's
    /// own concurrency: its capacity times the new minimum (BBR's bandwidth-delay product,
    /// Cardwell et al., "BBR: Congestion-Based Congestion Control", ACM Queue 2016), plus
    /// the tolerance and the gradient's headroom. After a slowdown the saved limit was cut
    /// against a stale minimum and is far above that level; going back to it would refill
    /// the origin's queue at once, the very burst the measurement drained.
    fn end_probe(&mut self, now: u64, rnd: u32, measured: bool) {
        self.phase = PHASE_NORMAL;
        if measured {
            self.unheld_min = 0;
        }
        let mut limit = self.saved_limit;
        if measured && self.probe_rate > 0.0 {
            let busy = self.probe_rate * self.min_ms * self.tolerated();
            limit = limit.min(busy + busy.sqrt()).max(f64::from(self.pin));
        }
        self.limit = self.bounded(limit);
        self.probe_rate = 0.0;
        self.probe_clean = Samples::EMPTY;
        self.clamped = 0;
        self.schedule_probe(now, rnd);
    }

    fn tolerated(&self) -> f64 {
        1.0 + f64::from(self.cfg.tolerance) / 10_000.0
    }

    /// One step of the gradient controller.
    fn gradient(
        &mut self,
        now: u64,
        elapsed: u64,
        s: &Samples,
        sample: f64,
        reached: bool,
        rnd: u32,
    ) -> MinChange {
        let mut change = MinChange::None;
        if self.min_ms <= 0.0 {
            // The first interval: a start under overload may hold a queue, hence the early
            // re-measurement scheduled at creation.
            self.min_ms = sample;
        } else if reached && sample * self.tolerated() < self.min_ms {
            // At the limit, in-flight sits above the origin's concurrency and latency above
            // the floor; faster than the floor beyond the tolerance, the origin recovered.
            // Take it now, and measure again soon: this interval mixes slow and fast answers.
            // Below the limit, dips are noise and wait for the next measurement: a running
            // minimum of noisy means drifts low, and the controller would then take ordinary
            // latency for a queue.
            self.min_ms = sample;
            let soon = now.saturating_add(SOON_INTERVALS * u64::from(self.cfg.interval_ms));
            self.next_probe_ms = self.next_probe_ms.min(soon);
            change = MinChange::Fell;
        }
        let due = now >= self.next_probe_ms;
        // A floor measured with nothing holding the origin, that latency has since left
        // far behind (the gradient at its floor), is checked by a pinned measurement,
        // reached or not: the unlimited start left a queue in it, and the queue grows.
        let pin_due =
            due && self.unheld_min != 0 && sample * GRADIENT_MIN > self.min_ms * self.tolerated();
        if due && !reached && !pin_due {
            self.unheld_min = 0;
            // Nobody waited on our limit: the interval's mean is the origin's own latency.
            self.min_ms = sample;
            self.remeasures = self.remeasures.saturating_add(1);
            self.schedule_probe(now, rnd);
            change = MinChange::Remeasured;
        }

        let raw = self.min_ms * self.tolerated() / sample;
        let gradient = raw.clamp(GRADIENT_MIN, GRADIENT_MAX);
        let l = self.limit;
        let mut target = l * gradient + (l * gradient).sqrt();
        let none_slow = f64::from(s.max_ms) < SLOWDOWN * self.min_ms * self.tolerated();
        if gradient >= 1.0 && reached && self.slow_start != 0 && none_slow {
            // Slow start (TCP's, RFC 5681): until the first cut, double while demand meets
            // the limit — unless an answer already took a slowdown's latency: in the
            // interval in which an origin slows down, the answers are still mostly fast
            // ones, in-flight climbs to the limit as the queue builds, and doubling it then
            // only doubles the queue to drain.
            target = target.max(2.0 * l);
        }
        // Requests in flight on average over the interval (Little's law: answers per
        // millisecond times their mean latency).
        let held = elapsed > 0 && f64::from(s.count) * sample / elapsed as f64 >= l / 2.0;
        if raw < 1.0 && held {
            // The origin is held at the limit and its latency shows a queue beyond the
            // tolerance: the limit may fall, never rise (it rises only while latency stays
            // near its minimum; Vegas likewise stops growing its window once the queue it
            // estimates passes its alpha).
            // The √ headroom alone lifted a limit the gradient had just cut, each answer
            // measured a limit older than the one in force, and the limit cycled by 2-3
            // around the origin's level, every rise a burst into its queue
            // (`tests/limit_sim.rs`, the lab's overload). A limit only bursts reach, with
            // the origin idle on average, still grows by its headroom: the bursts' own
            // queueing at the origin is no reason to shed the next burst.
            target = target.min(l);
        }
        let used = 2.0 * f64::from(s.inflight_max);
        if (target > l && used < l) || (target < l && !reached) {
            // Application-limited (Gradient2): a limit that nobody reached did not make
            // latency rise, and one that nobody approached is not known to be too small.
            target = l;
        }
        if target < l {
            self.slow_start = 0;
        }
        self.limit = self.bounded(target);

        self.clamped = if reached && raw <= GRADIENT_MIN {
            self.clamped + 1
        } else {
            0
        };
        let slowdown = raw * SLOWDOWN <= 1.0;
        if pin_due || (reached && (due || slowdown || self.clamped >= CLAMPED_RUN)) {
            self.saved_limit = self.limit;
            self.probe_ref_ms = sample;
            self.probe_rate = 0.0;
            self.probe_clean = Samples::EMPTY;
            self.probe_busy = 0;
            // A periodic measurement pins half the limit, and halves on while latency
            // falls. After a slowdown, the pin goes at once to the concurrency the old
            // minimum would allow at this latency (`l · raw`, often `limit_min`): halving
            // step by step would take several round trips of the slow origin to get there.
            let mut pin = self.limit / 2.0;
            if !due {
                pin = pin.min(l * raw);
                if elapsed > 0 {
                    let rate = f64::from(s.count) / elapsed as f64;
                    pin = pin.min(rate * self.min_ms * self.tolerated());
                }
            }
            self.pin = (pin as u32).max(self.cfg.limit_min);
            self.pin_since_ms = now;
            self.pin_answers = 0;
            self.halved = 0;
            self.phase = PHASE_PROBING;
            change = MinChange::ProbeStarted;
        }
        change
    }
}

/// The word a shell shares between processes for one limit, changed only by compare-and-swap:
/// the tenant's tag (16 bits, never 0), the limit (24 bits) and the requests in flight
/// (24 bits). One word, so that "in flight below the limit, then one more" is a single atomic
/// step for every worker: in-flight never passes the limit at an admission. The functions
/// here compute the next word; the shell loops on the compare-and-swap.
pub mod word {
    const COUNT_BITS: u32 = 24;
    const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
    const TAG_SHIFT: u32 = 2 * COUNT_BITS;

    /// The largest limit, and in-flight count, a word holds; a larger limit is taken as this.
    pub const MAX: u32 = COUNT_MASK as u32;

    /// The tag of the tenant with id `ident` (ids start at 1): never 0, which names no tenant.
    pub fn tag_of(ident: u64) -> u64 {
        ident.wrapping_sub(1) % 0xffff + 1
    }

    /// A word of `tag` with `limit` (clipped to [`MAX`]) and `inflight` requests in flight.
    pub fn pack(tag: u64, limit: u32, inflight: u32) -> u64 {
        ((tag & 0xffff) << TAG_SHIFT)
            | (u64::from(limit.min(MAX)) << COUNT_BITS)
            | (u64::from(inflight) & COUNT_MASK)
    }

    /// (tag, limit, in-flight) of a word.
    pub fn unpack(w: u64) -> (u64, u32, u32) {
        (
            w >> TAG_SHIFT,
            ((w >> COUNT_BITS) & COUNT_MASK) as u32,
            (w & COUNT_MASK) as u32,
        )
    }

    /// What an admission makes of a word.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Take {
        /// Swap in `next`: a slot, in-flight now `inflight`; `over` in dry run when in-flight
        /// was at the limit already.
        Slot {
            next: u64,
            inflight: u32,
            over: bool,
        },
        /// In-flight is at the limit (or at [`MAX`]).
        Full,
        /// The word belongs to another tenant.
        Stale,
    }

    /// An admission of tenant `tag` to word `w`; `dry_run` takes a slot past the limit.
    #[inline]
    pub fn take(w: u64, tag: u64, dry_run: bool) -> Take {
        let (t, limit, inflight) = unpack(w);
        if t != tag {
            return Take::Stale;
        }
        let over = inflight >= limit;
        if (over && !dry_run) || inflight == MAX {
            return Take::Full;
        }
        Take::Slot {
            next: w + 1,
            inflight: inflight + 1,
            over,
        }
    }

    /// A release of tenant `tag`'s slot: the next word and in-flight before it, or `None` when
    /// the word belongs to another tenant (or, which a correct count never sees, holds none).
    #[inline]
    pub fn give(w: u64, tag: u64) -> Option<(u64, u32)> {
        let (t, _, inflight) = unpack(w);
        (t == tag && inflight > 0).then_some((w - 1, inflight))
    }

    /// `count` slots returned at once (a dead owner's), never below zero.
    pub fn give_back(w: u64, count: u32) -> u64 {
        let (_, _, inflight) = unpack(w);
        w - u64::from(count.min(inflight))
    }

    /// The same word with the limit set to `limit` (clipped to [`MAX`]).
    pub fn with_limit(w: u64, limit: u32) -> u64 {
        let (tag, _, inflight) = unpack(w);
        pack(tag, limit, inflight)
    }

    /// An entry of the owners table that goes with a word: process `pid` holds `count` slots.
    pub fn owner(pid: u32, count: u32) -> u64 {
        (u64::from(pid) << 32) | u64::from(count)
    }

    /// (pid, count) of an owners entry.
    pub fn owner_of(e: u64) -> (u32, u32) {
        ((e >> 32) as u32, e as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_000_000;

    fn samples(n: u32, latency_ms: u64, inflight: u32) -> Samples {
        let mut s = Samples::EMPTY;
        for _ in 0..n {
            s.add(latency_ms);
        }
        s.note_inflight(inflight);
        s
    }

    /// `latencies` of attempts that started after the pin was set, with `inflight` at most
    /// in flight.
    fn clean(latencies: &[u64], inflight: u32) -> Samples {
        let mut s = Samples::EMPTY;
        for &l in latencies {
            s.add_clean(l);
        }
        s.note_inflight(inflight);
        s
    }

    /// A controller and a clock; each step is one flush at the end of a 100 ms interval.
    struct Story {
        l: Limiter,
        now: u64,
    }

    impl Story {
        fn new(cfg: LimitConfig) -> Story {
            Story {
                l: Limiter::new_at_initial(cfg, T0),
                now: T0,
            }
        }
        /// A controller of `limit_max`, saturated at `latency_ms` until it has measured its
        /// minimum once.
        fn measured(limit_max: u32, latency_ms: u64) -> Story {
            let mut st = Story::new(LimitConfig {
                limit_max,
                ..LimitConfig::default()
            });
            while st.l.view().remeasures == 0 {
                st.saturated(latency_ms);
            }
            st
        }
        /// [`Story::measured`], then five more intervals saturated at `latency_ms`.
        fn settled(limit_max: u32, latency_ms: u64) -> Story {
            let mut st = Story::measured(limit_max, latency_ms);
            for _ in 0..5 {
                st.saturated(latency_ms);
            }
            st
        }
        /// An interval of 20 answers at `latency_ms` with `inflight` at most in flight.
        fn step(&mut self, latency_ms: u64, inflight: u32) -> Update {
            self.now += 100.max(self.l.sample_ms as u64);
            let s = samples(20, latency_ms, inflight);
            self.l
                .record(self.now, &s, u32::MAX / 2)
                .expect("an interval ended")
        }
        /// An interval in which the origin is held at the limit: as many requests in flight
        /// on average as the limit allows (Little's law), each `latency_ms` long.
        fn held(&mut self, latency_ms: u64) -> Update {
            let limit = self.l.limit();
            let elapsed = 100.max(self.l.sample_ms as u64);
            self.now += elapsed;
            let n = (u64::from(limit) * elapsed).div_ceil(latency_ms) as u32;
            let s = samples(n.max(20), latency_ms, limit);
            self.l
                .record(self.now, &s, u32::MAX / 2)
                .expect("an interval ended")
        }
        /// An interval in which demand meets the limit.
        fn saturated(&mut self, latency_ms: u64) -> Update {
            let limit = self.l.limit();
            self.step(latency_ms, limit)
        }
    }

    #[test]
    fn the_structs_are_small_plain_data() {
        assert_eq!(size_of::<Samples>(), 40);
        assert_eq!(LIMITER_SIZE, 240);
        assert_eq!(std::mem::align_of::<Limiter>(), 8);
    }

    #[test]
    fn no_update_before_the_interval_ends_with_enough_samples() {
        let mut l = Limiter::new_at_initial(LimitConfig::default(), T0);
        assert_eq!(
            l.record(T0 + 50, &samples(100, 10, 20), 0),
            None,
            "interval not over"
        );
        let mut l = Limiter::new_at_initial(LimitConfig::default(), T0);
        assert_eq!(
            l.record(T0 + 500, &samples(19, 10, 20), 0),
            None,
            "19 samples"
        );
        assert_eq!(
            l.record(T0 + 510, &samples(0, 0, 20), 0),
            None,
            "drops are no samples"
        );
        let u = l
            .record(T0 + 520, &samples(1, 10, 20), 0)
            .expect("20 samples");
        assert_eq!(u.samples, 20);
    }

    #[test]
    fn the_first_interval_decides_nothing() {
        let mut st = Story::new(LimitConfig::default());
        let u = st.saturated(10);
        assert_eq!((u.from, u.to, u.min_latency_ms), (20, 20, 0.0));
    }

    #[test]
    fn a_queue_halves_the_limit_and_a_healthy_latency_doubles_it_in_slow_start() {
        let mut st = Story::new(LimitConfig::default());
        st.saturated(10);
        let u = st.saturated(10);
        assert_eq!(
            (u.from, u.to, u.min_latency_ms),
            (20, 40, 10.0),
            "slow start"
        );
        // 30 ms against a 10 ms floor: the gradient, 0.42, is clamped to 0.5, plus √20.
        let u = st.saturated(30);
        assert_eq!((u.from, u.to), (40, 24));
        // Slow start is over: a healthy latency grows by 1.25 and a square root.
        let u = st.saturated(10);
        assert_eq!((u.from, u.to), (24, 36), "24.5·1.25 + √30.6");
    }

    #[test]
    fn a_limit_nobody_reaches_neither_falls_nor_grows() {
        let mut st = Story::new(LimitConfig::default());
        st.step(10, 3);
        st.step(10, 3);
        let u = st.step(500, 19);
        assert_eq!((u.from, u.to), (20, 20), "not reached: no cut");
        let u = st.step(10, 9);
        assert_eq!((u.from, u.to), (20, 20), "less than half used: no growth");
        let u = st.step(10, 10);
        assert_eq!((u.from, u.to), (20, 30), "half used: growth");
    }

    #[test]
    fn a_queue_beyond_the_tolerance_holds_a_held_limit_and_one_within_it_grows_it() {
        let mut st = Story::measured(100, 10);
        // 30 ms: a cut, which also ends slow start.
        let u = st.saturated(30);
        assert!(u.to < u.from);
        let held = st.l.limit();
        // 13 ms against 12.5 tolerated, the origin held at the limit: a queue, too short to
        // cut (the limit · 0.96 and its root are above the limit), and no reason to let in
        // more.
        for _ in 0..20 {
            let u = st.held(13);
            assert_eq!((u.from, u.to), (held, held));
        }
        // The same latency when only bursts reach the limit (20 answers in 100 ms: 2.6 in
        // flight on average): the headroom grows it, so the next burst is not shed.
        let u = st.saturated(13);
        assert!(u.to > held, "{} → {}", u.from, u.to);
        // Within the tolerance a held limit grows.
        let held = st.l.limit();
        let u = st.held(12);
        assert!(u.to > held, "{} → {}", u.from, u.to);
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let cfg = LimitConfig {
            limit_min: 5,
            limit_max: 50,
            ..LimitConfig::default()
        };
        let mut st = Story::new(cfg);
        for _ in 0..100 {
            let u = st.saturated(1);
            assert!((5..=50).contains(&u.to));
        }
        assert_eq!(st.l.limit(), 50);
        // A queue that grows with every request let in: the pinned measurements halve down
        // to the floor and no further.
        let mut lowest = u32::MAX;
        for _ in 0..100 {
            let limit = st.l.limit();
            let u = st.step(1000 * u64::from(limit), limit);
            assert!((5..=50).contains(&u.to));
            lowest = lowest.min(u.to);
        }
        assert_eq!(lowest, 5);
    }

    #[test]
    fn a_slowed_origin_is_measured_again_instead_of_starved() {
        let mut st = Story::new(LimitConfig::default());
        // Saturated at a 10 ms floor until the first measurement has confirmed it.
        while st.l.view().remeasures == 0 {
            st.saturated(10);
        }
        for _ in 0..10 {
            st.saturated(10);
        }
        assert_eq!(st.l.min_latency_ms(), 10.0);
        let before = st.l.limit();
        // The origin's own service time rises 6×, whatever the concurrency: more than
        // `SLOWDOWN` times the tolerated latency, so the measurement starts at once, pinned
        // where the old floor would allow this latency (limit · 12.5/60), not at half. (Held:
        // the rate of answers that the limit allows at 60 ms, which pins at the same level.)
        let u = st.held(60);
        assert_eq!(u.min_change, MinChange::ProbeStarted);
        assert!(st.l.view().probing);
        assert_eq!(st.l.limit(), (f64::from(before) * 12.5 / 60.0) as u32);
        // Drained at once, nothing falling; a floor that rose is checked once at half the
        // pin, where latency does not fall, and taken.
        let mut changes = Vec::new();
        loop {
            let u = st.saturated(60);
            changes.push(u.min_change);
            if u.min_change != MinChange::ProbeHalved {
                break;
            }
        }
        assert_eq!(changes.last(), Some(&MinChange::Probed), "{changes:?}");
        assert_eq!(
            changes,
            [MinChange::ProbeHalved, MinChange::Probed],
            "checked once"
        );
        assert_eq!(st.l.min_latency_ms(), 60.0);
        // From the new floor the limit grows back to the origin's share.
        let cut = st.l.limit();
        for _ in 0..10 {
            st.saturated(60);
        }
        assert!(
            cut < before && st.l.limit() >= before,
            "{cut} → {}",
            st.l.limit()
        );
    }

    #[test]
    fn a_queue_twice_the_tolerated_latency_is_measured_after_three_updates() {
        let mut st = Story::new(LimitConfig::default());
        while st.l.view().remeasures == 0 {
            st.saturated(10);
        }
        // 30 ms against 12.5 tolerated: a queue the halving may drain, or a slower origin.
        let changes: Vec<MinChange> = (0..3).map(|_| st.saturated(30).min_change).collect();
        assert_eq!(
            changes,
            [MinChange::None, MinChange::None, MinChange::ProbeStarted]
        );
    }

    #[test]
    fn after_a_slowdown_the_limit_returns_to_the_origins_capacity_not_above() {
        let mut st = Story::settled(40, 5);
        let before = st.l.limit();
        assert_eq!(before, 40);
        // 4 workers at 30 ms: 20 answers in 150 ms while the queue drains from `before`.
        let u = st.saturated(150);
        assert_eq!(u.min_change, MinChange::ProbeStarted);
        let pin = st.l.limit();
        assert_eq!(pin, 3, "40 · 6.25/150 is below limit_min");
        st.now += 150;
        let u = st.l.record(st.now, &samples(20, 120, before), 0).unwrap();
        assert_eq!(u.min_change, MinChange::None, "not drained");
        st.now += 100;
        let u = st.l.record(st.now, &samples(20, 30, pin), 0).unwrap();
        assert_eq!(u.min_change, MinChange::Probed);
        assert_eq!(u.min_latency_ms, 30.0);
        // Capacity 20/150 per ms × 30 ms = 4 workers; × 1.25 = 5, + √5.
        assert_eq!(u.to, 7, "not the saved limit");
        assert!(u.to < before);
    }

    /// A controller at 40 of a 5 ms origin that slowed down to 30 ms, pinned at 3 and past
    /// one interval that had not drained.
    fn slowed_and_pinned() -> Story {
        let mut st = Story::settled(40, 5);
        let u = st.saturated(150);
        assert_eq!((u.min_change, st.l.limit()), (MinChange::ProbeStarted, 3));
        st.now += 150;
        let u = st.l.record(st.now, &samples(20, 120, 40), 0).unwrap();
        assert_eq!(u.min_change, MinChange::None, "not drained");
        st
    }

    #[test]
    fn clean_answers_that_agree_end_a_measurement_at_once() {
        let mut st = slowed_and_pinned();
        // Four clean answers are too few; a flush with one answer that is not clean, or made
        // with more than the pin in flight (begun under the old limit), counts for nothing.
        st.now += 10;
        assert_eq!(st.l.record(st.now, &clean(&[30, 31, 30, 32], 3), 0), None);
        let mut mixed = clean(&[30, 30], 3);
        mixed.add(30);
        assert_eq!(st.l.record(st.now + 5, &mixed, 0), None);
        assert_eq!(st.l.record(st.now + 6, &clean(&[30, 30], 9), 0), None);
        // The fifth, 30 ms after the pinned interval began: the floor is their mean.
        st.now += 20;
        let u = st.l.record(st.now, &clean(&[33], 2), 0).expect("measured");
        assert_eq!((u.min_change, u.samples), (MinChange::Probed, 5));
        assert_eq!(u.min_latency_ms, 31.2);
        // Capacity 20/150 per ms × 31.2 ms × 1.25 = 5.2, + √5.2.
        assert_eq!(u.to, 7);
    }

    #[test]
    fn clean_answers_that_spread_wait_for_the_interval() {
        // An exponential origin's answers, not within the tolerance of each other: 14 ms on
        // average, not far above the old floor of 5 (4 × 6.25) ...
        let mut st = slowed_and_pinned();
        st.now += 10;
        assert_eq!(st.l.record(st.now, &clean(&[4, 25, 8, 20, 12], 3), 0), None);
        st.now += 100;
        let u =
            st.l.record(st.now, &clean(&[14; 15], 3), 0)
                .expect("interval over");
        assert_eq!((u.min_change, u.samples), (MinChange::Probed, 20));
        assert_eq!(u.min_latency_ms, 13.95);
        // ... or far above it (30 ms), at a pin of `limit_min`, which cannot be halved.
        let mut st = slowed_and_pinned();
        st.now += 10;
        assert_eq!(
            st.l.record(st.now, &clean(&[8, 45, 20, 60, 17], 3), 0),
            None
        );
    }

    #[test]
    fn agreeing_clean_answers_above_the_old_floor_are_checked_at_lower_pins() {
        // Held at 40 by a 5 ms origin that slows to 26 ms: the rate the limit allows at
        // 26 ms (40/26 per ms) × 6.25 pins at 9, above its 4 workers.
        let mut st = Story::settled(40, 5);
        let u = st.held(26);
        assert_eq!((u.min_change, st.l.limit()), (MinChange::ProbeStarted, 9));
        // Five answers that agree, at 52 ms: each waited one service time (9 in flight for 4
        // workers). A floor that rose is checked at half the pin, at once.
        st.now += 60;
        let u =
            st.l.record(st.now, &clean(&[52, 53, 52, 52, 54], 9), 0)
                .unwrap();
        assert_eq!((u.min_change, st.l.limit()), (MinChange::ProbeHalved, 4));
        // At 4 they agree at 26 ms: half what they were, still falling with the pin, which
        // halves again (to `limit_min`); at 3 the same 26 ms is the floor.
        st.now += 30;
        let u =
            st.l.record(st.now, &clean(&[26, 26, 27, 26, 26], 4), 0)
                .unwrap();
        assert_eq!((u.min_change, st.l.limit()), (MinChange::ProbeHalved, 3));
        st.now += 30;
        let u =
            st.l.record(st.now, &clean(&[26, 26, 27, 26, 26], 3), 0)
                .unwrap();
        assert_eq!((u.min_change, u.min_latency_ms), (MinChange::Probed, 26.2));
    }

    #[test]
    fn clean_answers_far_above_the_old_floor_halve_the_pin_at_once() {
        let mut st = Story::new(LimitConfig {
            limit_min: 1,
            ..LimitConfig::default()
        });
        // A periodic measurement of a 10 ms origin.
        while st.saturated(10).min_change != MinChange::ProbeStarted {}
        let pin = st.l.limit();
        assert!(pin >= 4, "pinned at {pin}");
        // The origin slowed down meanwhile: its answers at the pin spread from 55 to 90 ms,
        // more than 4 × 12.5 on average. They are its own queue: halve now.
        st.now += 20;
        let u =
            st.l.record(st.now, &clean(&[55, 70, 90, 60, 80], pin), 0)
                .expect("decided");
        assert_eq!(u.min_change, MinChange::ProbeHalved);
        assert_eq!(st.l.limit(), pin / 2);
        // Halved once: at the lower pin, spread answers wait for their interval.
        st.now += 20;
        let spread = clean(&[55, 70, 90, 60, 80], pin / 2);
        assert_eq!(st.l.record(st.now, &spread, 0), None);
    }

    #[test]
    fn a_slowdown_ends_its_interval_on_a_quarter_of_its_samples() {
        let mut st = Story::settled(40, 5);
        let limit = st.l.limit();
        // Four answers at 40 ms, eight times the floor, 10 ms into the interval: too few.
        st.now += 10;
        assert_eq!(st.l.record(st.now, &samples(4, 40, limit), 0), None);
        // The fifth: a slowdown, decided at once. Five answers in 20 ms, 0.25 per ms × 5 ms
        // × 1.25: pinned at `limit_min`, below the 40 · 6.25/40 the latency alone allows.
        st.now += 10;
        let u = st.l.record(st.now, &samples(1, 40, limit), 0).unwrap();
        assert_eq!((u.min_change, u.samples), (MinChange::ProbeStarted, 5));
        assert_eq!(st.l.limit(), 3);
        // Twenty answers at 20 ms (four times the floor, under the slowdown's five) wait
        // for their interval.
        let mut st = Story::measured(40, 5);
        st.saturated(5);
        st.now += 10;
        assert_eq!(st.l.record(st.now, &samples(20, 20, 40), 0), None);
    }

    #[test]
    fn slow_start_does_not_double_on_an_answer_as_slow_as_a_slowdown() {
        let mut st = Story::new(LimitConfig::default());
        st.saturated(10);
        st.saturated(10);
        assert_eq!(st.l.limit(), 40, "slow start doubled");
        // Mostly fast answers and one at 60 ms, over 4 × 12.5: the origin is slowing down.
        st.now += 100;
        let mut s = samples(19, 9, 40);
        s.add(60);
        let u = st.l.record(st.now, &s, 0).unwrap();
        // 40 · 12.5/11.55 + √43.3, not 80.
        assert_eq!((u.from, u.to), (40, 49));
    }

    #[test]
    fn after_a_halving_the_pins_queue_does_not_raise_the_reference() {
        let mut st = Story::new(LimitConfig {
            limit_min: 1,
            limit_max: 64,
            ..LimitConfig::default()
        });
        while st.l.view().remeasures == 0 {
            st.saturated(10);
        }
        while st.l.limit() < 64 {
            st.saturated(10);
        }
        // Held at 64 by a queue within the gradient's reach (14 ms) until the periodic
        // measurement pins 32, whose drained mean fell to 10 (that was a queue): halved to 16.
        let started = loop {
            let u = st.held(14);
            if u.min_change == MinChange::ProbeStarted {
                break u;
            }
        };
        assert_eq!((started.from, started.to), (64, 32));
        assert_eq!(st.step(10, 32).min_change, MinChange::ProbeHalved);
        // The first interval at 16 still holds 32's queue (not drained, 13 ms); the next
        // drains at 10 ms, as at 32: the floor, not another halving.
        assert_eq!(st.step(13, 32).min_change, MinChange::None);
        let u = st.step(10, 16);
        assert_eq!(u.min_change, MinChange::Probed);
        assert_eq!(u.min_latency_ms, 10.0);
    }

    #[test]
    fn a_recovered_origin_lowers_the_minimum_at_once_at_the_limit() {
        let mut st = Story::new(LimitConfig::default());
        while st.l.view().remeasures == 0 {
            st.saturated(60);
        }
        let u = st.saturated(20);
        assert_eq!((u.min_change, u.min_latency_ms), (MinChange::Fell, 20.0));
        // Below the limit a faster interval is no evidence: it waits for a measurement.
        let mut st = Story::new(LimitConfig::default());
        while st.l.view().remeasures == 0 {
            st.step(60, 2);
        }
        let u = st.step(20, 2);
        assert_eq!((u.min_change, u.min_latency_ms), (MinChange::None, 60.0));
    }

    #[test]
    fn the_minimum_is_measured_again_periodically_below_the_limit() {
        let mut st = Story::new(LimitConfig::default());
        while st.l.view().remeasures == 0 {
            st.step(10, 2);
        }
        let start = st.now;
        let u = loop {
            let u = st.step(30, 2);
            if u.min_change != MinChange::None {
                break u;
            }
            assert_eq!(u.min_latency_ms, 10.0);
        };
        assert_eq!(
            (u.min_change, u.min_latency_ms),
            (MinChange::Remeasured, 30.0)
        );
        let waited = st.now - start;
        assert!((8_400..=11_600).contains(&waited), "10 s ± 15 %: {waited}");
        assert_eq!(st.l.limit(), 20, "nothing pinned, nothing shed");
    }

    #[test]
    fn a_pinned_measurement_halves_while_latency_falls() {
        let mut st = Story::new(LimitConfig::default());
        st.saturated(10);
        st.saturated(10);
        st.saturated(10);
        st.saturated(10);
        // Demand meets a limit of 160 in slow start; the origin queues: latency grows with
        // the concurrency as for 10 workers of 10 ms.
        let queue = |limit: u32| u64::from(limit.max(10)) * 10 / 10;
        let mut pins = Vec::new();
        loop {
            let limit = st.l.limit();
            let u = st.step(queue(limit), limit);
            if st.l.view().probing {
                pins.push(st.l.limit());
            }
            if u.min_change == MinChange::Probed {
                break;
            }
            assert!(st.l.view().updates < 100);
        }
        assert!(pins.windows(2).all(|w| w[1] <= w[0]), "{pins:?}");
        assert!(*pins.last().unwrap() <= 10, "down to the knee: {pins:?}");
        assert_eq!(st.l.min_latency_ms(), 10.0);
    }

    #[test]
    fn a_floor_that_rose_under_a_periodic_pin_is_confirmed_lower() {
        let mut st = Story::measured(20, 5);
        while st.l.limit() < 20 {
            st.saturated(5);
        }
        // The periodic measurement comes due just as the origin (4 workers) slows to 30 ms:
        // at its pin of 10, 6 requests wait at the origin, out of the limit's sight.
        while !st.l.view().probing {
            st.now += 1_000;
            st.saturated(5);
        }
        let pin = st.l.limit();
        assert_eq!(pin, 10);
        let at = |n: u32| 30 * u64::from(n.max(4)) / 4;
        let u = st.step(at(pin), pin);
        assert_eq!(
            u.min_change,
            MinChange::ProbeHalved,
            "75 ms is no 5 ms floor"
        );
        let mut last = u;
        while last.min_change == MinChange::ProbeHalved || last.min_change == MinChange::None {
            let pin = st.l.limit();
            last = st.step(at(pin), pin);
        }
        assert_eq!(last.min_change, MinChange::Probed);
        assert_eq!(
            last.min_latency_ms, 30.0,
            "the origin's own latency, not its queue's"
        );
    }

    #[test]
    fn a_pinned_measurement_gives_up_if_the_origin_never_drains() {
        let mut st = Story::new(LimitConfig::default());
        let mut started = None;
        for _ in 0..50 {
            let limit = st.l.limit();
            let u = st.step(10, limit + 5);
            match u.min_change {
                MinChange::ProbeStarted => started = Some(st.l.view().updates),
                MinChange::ProbeAbandoned => {
                    let at = st.l.view().updates;
                    assert_eq!(at - started.unwrap(), u64::from(PROBE_MAX_INTERVALS));
                    assert!(!st.l.view().probing);
                    return;
                }
                _ => {}
            }
        }
        panic!("never gave up");
    }

    #[test]
    fn a_clock_that_goes_back_is_held() {
        let mut l = Limiter::new_at_initial(LimitConfig::default(), T0);
        assert_eq!(l.record(T0 + 200, &samples(5, 10, 1), 0), None);
        assert_eq!(l.record(0, &samples(5, 10, 1), 0), None);
        assert!(
            l.record(T0 - 1, &samples(10, 10, 1), 0).is_some(),
            "200 ms, 20 samples"
        );
    }

    #[test]
    fn fast_errors_are_counted_not_averaged() {
        let mut s = samples(3, 30, 4);
        s.add_drop();
        s.add_drop();
        assert_eq!((s.count, s.drops, s.mean_ms()), (3, 2, Some(30.0)));
        assert_eq!(Samples::EMPTY.mean_ms(), None);
    }

    #[test]
    fn a_sub_millisecond_origin_is_taken_as_one_millisecond() {
        let mut st = Story::new(LimitConfig::default());
        st.saturated(0);
        let u = st.saturated(0);
        assert_eq!((u.sample_ms, u.min_latency_ms, u.to), (1.0, 1.0, 40));
    }

    #[test]
    fn each_bad_parameter_is_named() {
        let ok = LimitConfig::default();
        assert_eq!(ok.check(), Ok(()));
        let bad = [
            (LimitConfig { limit_min: 0, ..ok }, "limit_min"),
            (LimitConfig { limit_max: 2, ..ok }, "limit_max"),
            (
                LimitConfig {
                    limit_max: word::MAX + 1,
                    ..ok
                },
                "limit_max",
            ),
            (
                LimitConfig {
                    limit_initial: 2,
                    ..ok
                },
                "limit_initial",
            ),
            (
                LimitConfig {
                    limit_initial: 1001,
                    ..ok
                },
                "limit_initial",
            ),
            (
                LimitConfig {
                    tolerance: 10_001,
                    ..ok
                },
                "limit_tolerance",
            ),
            (
                LimitConfig {
                    interval_ms: 0,
                    ..ok
                },
                "limit_interval",
            ),
            (LimitConfig { samples: 0, ..ok }, "limit_samples"),
            (
                LimitConfig {
                    probe_ms: 999,
                    ..ok
                },
                "limit_probe",
            ),
        ];
        for (cfg, name) in bad {
            assert_eq!(cfg.check().map_err(LimitConfigError::parameter), Err(name));
            // Refused by `nginx -t`, but never a panic or a limit out of range here.
            let l = Limiter::new_at_initial(cfg, T0);
            assert!(l.limit() >= 1 && l.limit() >= l.config().limit_min);
        }
    }

    #[test]
    fn the_word_packs_tag_limit_and_in_flight() {
        let w = word::pack(7, 1000, 42);
        assert_eq!(word::unpack(w), (7, 1000, 42));
        assert_eq!(
            word::unpack(word::pack(0xffff, word::MAX, word::MAX)),
            (0xffff, word::MAX, word::MAX)
        );
        assert_eq!(
            word::unpack(word::pack(1, u32::MAX, 0)).1,
            word::MAX,
            "clipped"
        );
        assert_eq!(word::unpack(word::with_limit(w, 3)), (7, 3, 42));
        assert_eq!(word::unpack(word::give_back(w, 40)), (7, 1000, 2));
        assert_eq!(
            word::unpack(word::give_back(w, 99)),
            (7, 1000, 0),
            "never below 0"
        );
        assert_eq!(word::owner_of(word::owner(4242, 17)), (4242, 17));
    }

    #[test]
    fn tags_are_never_zero() {
        assert_eq!(word::tag_of(1), 1);
        assert_eq!(word::tag_of(0xffff), 0xffff);
        assert_eq!(word::tag_of(0x10000), 1);
        assert!((1..200_000u64).all(|i| (1..=0xffff).contains(&word::tag_of(i))));
    }

    #[test]
    fn a_slot_is_taken_below_the_limit_only() {
        let w = word::pack(5, 2, 0);
        let word::Take::Slot {
            next,
            inflight,
            over,
        } = word::take(w, 5, false)
        else {
            panic!("a free slot")
        };
        assert_eq!((inflight, over), (1, false));
        let word::Take::Slot { next, .. } = word::take(next, 5, false) else {
            panic!("the second")
        };
        assert_eq!(word::take(next, 5, false), word::Take::Full);
        assert_eq!(
            word::take(next, 6, false),
            word::Take::Stale,
            "another tenant"
        );
        let word::Take::Slot { inflight, over, .. } = word::take(next, 5, true) else {
            panic!("dry run passes")
        };
        assert_eq!((inflight, over), (3, true));
        assert_eq!(word::give(next, 5), Some((next - 1, 2)));
        assert_eq!(
            word::give(next, 6),
            None,
            "a former tenant's release changes nothing"
        );
        assert_eq!(word::give(w, 5), None, "none held");
        let full = word::pack(5, word::MAX, word::MAX);
        assert_eq!(word::take(full, 5, true), word::Take::Full, "never wraps");
    }

    fn overloaded(n: u32, inflight: u32) -> Samples {
        let mut s = Samples::EMPTY;
        for _ in 0..n {
            s.add_overload();
        }
        s.note_inflight(inflight);
        s
    }

    #[test]
    fn an_overload_signal_halves_the_limit_at_once_once_per_interval() {
        let mut st = Story::settled(1000, 10);
        let before = st.l.limit();
        assert!(before >= 40, "{before}");
        // Mid-interval, a flush carrying one 429 at 40 in flight: half of 40, at once.
        st.now += 10;
        let u =
            st.l.record(st.now, &overloaded(1, 40), 0)
                .expect("cut at once");
        assert!(u.overload);
        assert_eq!((u.from, u.to), (before, 20));
        assert_eq!(st.l.limit(), 20);
        // Another within the same interval: no second cut.
        st.now += 50;
        assert_eq!(st.l.record(st.now, &overloaded(3, 20), 0), None);
        assert_eq!(st.l.limit(), 20);
        // One interval later (100 ms, the mean latency being 10 ms), the next signal cuts.
        st.now += 50;
        let u = st.l.record(st.now, &overloaded(1, 20), 0).expect("cut");
        assert_eq!((u.from, u.to), (20, 10));
    }

    #[test]
    fn an_overload_signal_cuts_from_the_lower_of_the_limit_and_in_flight() {
        // A limit far above what is in flight: the cut is from the in-flight.
        let mut st = Story::settled(1000, 10);
        st.now += 10;
        let u = st.l.record(st.now, &overloaded(1, 9), 0).unwrap();
        assert_eq!(u.to, 4);
        // Never below limit_min; no in-flight figure: from the limit.
        let mut st = Story::settled(1000, 10);
        let before = st.l.limit();
        st.now += 10;
        let u = st.l.record(st.now, &overloaded(1, 0), 0).unwrap();
        assert_eq!(u.to, before / 2);
        st.now += 200;
        let u = st.l.record(st.now, &overloaded(1, 1), 0).unwrap();
        assert_eq!(u.to, LimitConfig::default().limit_min);
    }

    #[test]
    fn an_overload_signal_ends_slow_start_and_the_limit_grows_back_slowly() {
        let mut st = Story::new(LimitConfig::default());
        st.saturated(10);
        st.now += 10;
        let u = st.l.record(st.now, &overloaded(1, 20), 0).unwrap();
        assert_eq!(u.to, 10);
        // Healthy latency at the limit: no doubling (slow start is over), the √ headroom only.
        let u = st.saturated(10);
        assert!(u.to > 10 && u.to < 20, "{} -> {}", u.from, u.to);
    }

    #[test]
    fn no_overload_cut_during_a_pinned_measurement() {
        let mut st = slowed_and_pinned();
        let pin = st.l.limit();
        st.now += 1;
        let u = st.l.record(st.now, &overloaded(1, pin), 0);
        assert!(!matches!(u, Some(u) if u.overload));
        assert_eq!(st.l.limit(), pin);
    }

    #[test]
    fn overload_answers_are_no_latency_samples() {
        let mut s = overloaded(2, 5);
        assert_eq!(s.count, 0);
        assert!(!s.is_empty());
        assert_eq!(s.mean_ms(), None);
        s.merge(&overloaded(3, 1));
        assert_eq!(s.overloads, 5);
    }

    #[test]
    fn a_fresh_controller_sheds_nothing_until_it_has_seen_the_demand() {
        let cfg = LimitConfig::default();
        let mut l = Limiter::new(cfg, T0);
        assert_eq!(l.limit(), cfg.limit_max, "nothing known: no limit");
        // 30 in flight (above limit_initial) while the first interval runs.
        assert_eq!(l.record(T0 + 50, &samples(10, 100, 30), 0), None);
        assert_eq!(l.limit(), cfg.limit_max);
        let u = l.record(T0 + 120, &samples(10, 100, 30), 0).unwrap();
        assert_eq!((u.from, u.to, u.min_change), (1000, 60, MinChange::None));
        // Healthy after it: the limit is never reached, and never falls (approached, it
        // grows).
        let mut now = T0 + 120;
        for _ in 0..20 {
            now += 110;
            l.record(now, &samples(20, 100, 35), 0);
            assert!(l.limit() >= 60, "{}", l.limit());
        }
        // A quiet start: limit_initial.
        let mut l = Limiter::new(cfg, T0);
        l.record(T0 + 120, &samples(20, 10, 3), 0).unwrap();
        assert_eq!(l.limit(), cfg.limit_initial);
        // A fixed limit is one from the start.
        let fixed = LimitConfig {
            limit_min: 2,
            limit_max: 2,
            limit_initial: 2,
            ..cfg
        };
        assert_eq!(Limiter::new(fixed, T0).limit(), 2);
    }

    #[test]
    fn a_healthy_start_is_measured_as_it_is() {
        let mut l = Limiter::new(LimitConfig::default(), T0);
        let mut now = T0;
        let mut changes = Vec::new();
        for _ in 0..8 {
            now += 110;
            changes.push(l.record(now, &samples(20, 40, 10), 0).unwrap().min_change);
        }
        assert!(changes.contains(&MinChange::Remeasured), "{changes:?}");
        assert!(!changes.contains(&MinChange::ProbeStarted), "{changes:?}");
        assert!(l.limit() >= 20);
    }

    #[test]
    fn a_floor_measured_in_an_unlimited_starts_queue_is_checked_pinned() {
        // An origin overloaded from the start: its first decided interval already queues
        // (the floor taken is 40 ms), and latency keeps growing, the limit (twice the first
        // demand) unreached.
        let mut l = Limiter::new(LimitConfig::default(), T0);
        let mut now = T0 + 100;
        assert_eq!(l.record(now, &samples(20, 40, 100), 0).unwrap().to, 200);
        now += 100;
        l.record(now, &samples(20, 40, 120), 0).unwrap();
        assert_eq!(l.min_latency_ms(), 40.0);
        let mut pinned = None;
        for _ in 0..10 {
            now += 200;
            let u = l.record(now, &samples(20, 150, 150), 0).unwrap();
            if u.min_change == MinChange::ProbeStarted {
                pinned = Some(u);
                break;
            }
        }
        let u = pinned.expect("a pinned measurement, limit unreached");
        assert!(!u.reached);
        assert_eq!(u.to, u.from / 2, "half the limit");
        // Drained at the pin, at the old floor: checked at half again all the same.
        let pin = u.to;
        now += 200;
        let u = l.record(now, &samples(20, 40, pin), 0).unwrap();
        assert_eq!((u.min_change, u.to), (MinChange::ProbeHalved, pin / 2));
    }

    #[test]
    fn an_overload_signal_before_the_first_interval_sets_the_limit() {
        let mut l = Limiter::new(LimitConfig::default(), T0);
        let u = l.record(T0 + 5, &overloaded(1, 30), 0).unwrap();
        assert_eq!((u.from, u.to), (1000, 15));
        let mut l = Limiter::new(LimitConfig::default(), T0);
        let u = l.record(T0 + 5, &overloaded(1, 0), 0).unwrap();
        assert_eq!(u.to, 500);
    }
}
