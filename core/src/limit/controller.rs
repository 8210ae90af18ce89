//! The gradient controller: the limit's updates, the minimum latency's re-measurement and
//! the view the status page shows (the algorithm: see the module's documentation).

use std::mem::size_of;

use super::share::PRESENT_MS;
use super::{LimitConfig, Samples};
use crate::breaker::jittered;

/// A pinned measurement gives up after this many intervals in which the origin did not drain
/// (long-lived requests may hold slots for minutes); the minimum is then left as it was.
pub const REMEASURE_MAX_INTERVALS: u32 = 8;

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

/// A slowdown in one of whose intervals since the last calm one (latency within the
/// tolerance) the answers came at less than this share of that one's rate, with no fewer in
/// flight, is a pause (the origin's, or the machine's) rather than a queue: an origin with a
/// queue answers at its capacity, at least as fast as before. See [`Limiter::slowed_limit`].
pub const PAUSE_RATE: f64 = 0.75;

/// A pause shows within this many intervals: the one whose rate fell ([`PAUSE_RATE`]) comes
/// at most this many after the last calm one, and the slowdown of its late answers at most
/// this many after it. Later, the calm interval is no reference (a queue that never lets
/// latency back within the tolerance answers below its rate for good), and a slowdown is
/// judged as any other.
pub const PAUSE_INTERVALS: u8 = 2;

/// An interval holding a heavy client's answers and too few of the others' to judge by without
/// them ([`Samples::judged`]) waits for the others up to this many intervals.
pub const OTHERS_WAIT: u64 = 5;

/// Fewest clean answers (see [`Samples::clean`]) that end a pinned measurement early when
/// they agree within the tolerance.
pub const CLEAN_SAMPLES: u32 = 5;

/// After the minimum fell by more than the tolerance, it is measured again this many
/// intervals later; and first this many intervals after creation.
pub const SOON_INTERVALS: u64 = 5;

/// Jitter of the re-measurement period (15 %, Envoy's default), in hundredths of a percent:
/// the nginx instances of a fleet do not pin the same origin at the same moment.
pub(super) const REMEASURE_JITTER: u32 = 1500;

/// Latencies below 1 ms are taken as 1 ms: nginx's clock has millisecond resolution, and
/// a ratio of two zeros means nothing.
pub(super) const LATENCY_FLOOR_MS: f64 = 1.0;

pub(super) const GRADIENT_MIN: f64 = 0.5;

pub(super) const GRADIENT_MAX: f64 = 2.0;

/// Slow start is over (a cut ended it).
pub(super) const SLOW_START_OFF: u8 = 0;

/// Slow start doubles the limit on an interval at it.
pub(super) const SLOW_START_ON: u8 = 1;

/// Slow start doubles from the second interval at the limit on.
pub(super) const SLOW_START_PAUSED: u8 = 2;

pub(super) const PHASE_NORMAL: u8 = 0;

pub(super) const PHASE_PROBING: u8 = 1;

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
    PinStarted,
    /// A pinned measurement halved its pin: latency was still falling.
    PinHalved,
    /// A pinned measurement ended: the minimum is its last drained interval's mean.
    PinMeasured,
    /// A pinned measurement gave up without draining; the minimum is unchanged.
    PinAbandoned,
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
    /// Latency samples of heavy clients the interval set apart (`Samples::heavy`), counted in
    /// `samples` when there were too few others to judge by.
    pub apart: u32,
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
    pub(super) cfg: LimitConfig,
    /// The limit, fractional so that small steps accumulate; [`Limiter::limit`] rounds down.
    pub(super) limit: f64,
    /// The minimum latency, milliseconds; 0 until the first update.
    pub(super) min_ms: f64,
    /// The last interval's mean latency, milliseconds.
    pub(super) sample_ms: f64,
    /// The limit before a pinned measurement, restored after it.
    pub(super) saved_limit: f64,
    /// During a pinned measurement: the mean latency at the previous pin (or before it).
    pub(super) remeasure_ref_ms: f64,
    /// During a pinned measurement: the highest rate of answers (per millisecond) of an
    /// interval that had not drained — the origin was busy then, so this is its capacity.
    pub(super) remeasure_rate: f64,
    /// During a pinned measurement: the flushes made of clean samples only (see
    /// [`Samples::clean`]), merged.
    pub(super) remeasure_clean: Samples,
    /// The interval under way.
    pub(super) interval: Samples,
    pub(super) interval_start_ms: u64,
    /// During a pinned measurement: when the pin in force was set, and the answers since.
    pub(super) pin_since_ms: u64,
    pub(super) pin_answers: u64,
    /// The latest clock reading; earlier readings are taken as this.
    pub(super) last_ms: u64,
    pub(super) next_remeasure_ms: u64,
    /// No cut on an overload signal before this (one per interval).
    pub(super) overload_gate_ms: u64,
    /// Whom the overload signals since `signals_ms` went to ([`Samples::overload_to`]), and
    /// when the first of them came: signals further apart than [`PRESENT_MS`] are judged apart.
    pub(super) signals_to: u32,
    pub(super) signals_ms: u64,
    pub(super) updates: u64,
    pub(super) remeasures: u32,
    /// The pinned limit during a measurement.
    pub(super) pin: u32,
    /// Intervals spent at the current pin without draining.
    pub(super) remeasure_busy: u32,
    /// Consecutive updates at the gradient's floor with the limit reached.
    pub(super) clamped: u32,
    /// Answers per millisecond of the last interval the gradient judged calm (latency within
    /// the tolerance), and the limit it left.
    pub(super) calm_rate: f64,
    pub(super) calm_limit: f64,
    /// The most in flight in that calm interval.
    pub(super) calm_inflight: u32,
    /// An interval since the calm one had its answers slow down while no fewer were in
    /// flight ([`PAUSE_RATE`]): the intervals since, that one being 1; 0 when none did
    /// within [`PAUSE_INTERVALS`].
    pub(super) paused: u32,
    /// During a pinned measurement that a pause started ([`PAUSE_RATE`]): the limit before
    /// it (the last calm interval's), restored when the measurement finds the old floor (the
    /// pause is over). 0 otherwise.
    pub(super) slowed_limit: f64,
    /// When a limit was last restored so: the next restore waits a re-measurement period, so
    /// that an origin whose capacity fell while its floor did not (fewer workers) refills
    /// its queue once, not at every slowdown.
    pub(super) restored_ms: u64,

    pub(super) phase: u8,
    /// Until the first cut the limit doubles while latency allows ([`SLOW_START_ON`]); after
    /// an interval in which nobody came near it, only from the second interval at it
    /// ([`SLOW_START_PAUSED`]); never after the cut ([`SLOW_START_OFF`]).
    pub(super) slow_start: u8,
    /// During a pinned measurement: the pin was halved at least once.
    pub(super) halved: u8,
    /// No update yet: nothing is known of the origin, and the limit admits up to
    /// `limit_max` (see [`Limiter::new`]).
    pub(super) unmeasured: u8,
    /// The minimum was first measured with nothing holding the origin: the first pinned
    /// measurement checks its floor at a lower pin whatever it finds (it may have been a
    /// queue).
    pub(super) unheld_min: u8,
    /// Intervals since the last calm one (saturating).
    pub(super) since_calm: u8,
    pub(super) _pad: [u8; 2],
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
            remeasure_ref_ms: 0.0,
            remeasure_rate: 0.0,
            remeasure_clean: Samples::EMPTY,
            interval: Samples::EMPTY,
            interval_start_ms: now_ms,
            pin_since_ms: now_ms,
            pin_answers: 0,
            last_ms: now_ms,
            next_remeasure_ms: now_ms.saturating_add(SOON_INTERVALS * u64::from(cfg.interval_ms)),
            overload_gate_ms: 0,
            signals_to: 0,
            signals_ms: 0,
            updates: 0,
            remeasures: 0,
            pin: cfg.limit_min,
            remeasure_busy: 0,
            clamped: 0,
            calm_rate: 0.0,
            calm_limit: 0.0,
            calm_inflight: 0,
            paused: 0,
            slowed_limit: 0.0,
            restored_ms: 0,
            phase: PHASE_NORMAL,
            slow_start: SLOW_START_ON,
            halved: 0,
            unmeasured: u8::from(cfg.limit_min < cfg.limit_max),
            unheld_min: u8::from(cfg.limit_min < cfg.limit_max),
            since_calm: 0,
            _pad: [0; 2],
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
    /// An overload signal ([`Samples::overloads`]) that went, with those of the second before
    /// it, to more than one client, or to one alone ([`Samples::overload_to`]), cuts the limit
    /// at once,
    /// outside a pinned measurement, at most once per interval (`interval_ms`, or the last
    /// mean latency if longer: the cut's effect takes a round trip to show): to half the
    /// lower of the limit and the most in flight of the flush that carried it — the
    /// concurrency at which the origin said "too much" — as the gradient's largest cut (TCP
    /// halves on a loss), and slow start ends. The interval under way goes on; the gradient
    /// may lift the limit again by its headroom while latency stays near the minimum, and
    /// the next signal halves it again, so that an origin that refuses what it cannot take
    /// settles the limit just under its capacity.
    pub fn record(&mut self, now_ms: u64, samples: &Samples, rnd: u32) -> Option<Update> {
        let now = now_ms.max(self.last_ms);
        self.last_ms = now;
        self.interval.merge(samples);
        if samples.overloads > 0 && self.signalled(now, samples) {
            return Some(self.overload_cut(now, samples));
        }
        let elapsed = now - self.interval_start_ms;
        let mut length = u64::from(self.cfg.interval_ms);
        if self.phase == PHASE_PROBING {
            self.pin_answers = self.pin_answers.saturating_add(u64::from(samples.all()));
            // Only a flush made wholly at the pin: one begun under an older limit holds
            // answers called clean against that limit (a worker whose clock runs a
            // millisecond ahead may also call one clean that was admitted just before).
            if samples.count > 0
                && samples.clean == samples.count
                && samples.inflight_max <= self.pin
            {
                self.remeasure_clean.merge(samples);
            }
            if self.clean_decides() {
                return Some(self.clean_update(now, elapsed, rnd));
            }
        } else {
            // A pinned measurement admits nothing new until the queue drains: no interval
            // needs to wait for the effect of the last update.
            length = length.max(self.sample_ms as u64);
        }
        if (elapsed < length || self.interval.all() < self.cfg.samples) && !self.slowed_down() {
            return None;
        }
        // A heavy client's answers with too few of the others' to judge by: the interval
        // waits for theirs, up to OTHERS_WAIT intervals, before it is judged by all — a round
        // of slow requests ending at once would otherwise decide it.
        let i = &self.interval;
        if i.heavy > 0 && i.count < self.enough() && elapsed < length.saturating_mul(OTHERS_WAIT) {
            return None;
        }
        let interval = std::mem::replace(&mut self.interval, Samples::EMPTY);
        self.interval_start_ms = now;
        Some(self.update(now, elapsed, &interval, rnd))
    }

    /// Whether the overload signals `samples` carries, with those of the [`PRESENT_MS`] before
    /// them, cut the limit now. Their interval would not do: it waits for `samples` latency
    /// samples, which overload answers are not, and at a low rate lasts many seconds.
    fn signalled(&mut self, now: u64, samples: &Samples) -> bool {
        if self.signals_to == 0 || now.saturating_sub(self.signals_ms) >= PRESENT_MS {
            self.signals_to = 0;
            self.signals_ms = now;
        }
        self.signals_to = Samples::overload_join(self.signals_to, samples.overload_to);
        self.signals_to == Samples::SEVERAL
            && self.phase == PHASE_NORMAL
            && now >= self.overload_gate_ms
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
        self.slow_start = SLOW_START_OFF;
        // The cut spent the signals: the next needs its own, one client's beside others being
        // none.
        self.signals_to = 0;
        self.overload_gate_ms =
            now.saturating_add(u64::from(self.cfg.interval_ms).max(self.sample_ms as u64));
        Update {
            from,
            to: self.limit(),
            sample_ms: self.sample_ms,
            min_latency_ms: self.min_ms,
            samples: 0,
            apart: s.heavy,
            reached: s.reached(from),
            min_change: MinChange::None,
            overload: true,
        }
    }

    /// The update of a pinned measurement that its clean answers decided: the interval under
    /// way ends, and the floor is their mean, or the pin is halved.
    fn clean_update(&mut self, now: u64, elapsed: u64, rnd: u32) -> Update {
        let clean = std::mem::replace(&mut self.remeasure_clean, Samples::EMPTY);
        let interval = std::mem::replace(&mut self.interval, Samples::EMPTY);
        self.interval_start_ms = now;
        let since = now.saturating_sub(self.pin_since_ms);
        if self.remeasure_rate == 0.0 && interval.inflight_max > self.pin && since > 0 {
            // No interval has ended busy yet, and the queue drained within this one: the
            // answers since the pin was set, while it drained and then at the pin, are a
            // capacity measured low rather than none. (This interval alone may be a few
            // milliseconds long: four workers answering at once made one a third too high
            // in the lab.)
            self.remeasure_rate = self.pin_answers as f64 / since as f64;
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
        // The others' answers alone: an interval cut short on a heavy client's would judge
        // by nothing else (its answers come in bursts, a round of slow requests ending).
        let p = &self.interval;
        self.phase == PHASE_NORMAL
            && self.min_ms > 0.0
            && p.count >= (self.cfg.samples / 4).max(CLEAN_SAMPLES)
            && p.reached(self.limit())
            && p.sum_ms as f64 >= f64::from(p.count) * SLOWDOWN * self.min_ms * self.tolerated()
    }

    /// Whether the clean answers of a pinned measurement decide it before its interval
    /// ends: at least [`CLEAN_SAMPLES`] of them, and either
    /// - they agree, the slowest within the tolerance of the fastest: more would not move
    ///   their mean beyond the tolerance (an origin whose latency spreads wider, the
    ///   exponential service times of a busy one, is measured over whole intervals of
    ///   `samples` answers instead); `remeasure` takes their mean as a drained interval's; or
    /// - they spread, at [`SLOWDOWN`] times the tolerated floor on average, at a pin that
    ///   may still be halved: the floor rose far, and for a steady origin such a spread is a
    ///   queue at the origin, the pin above its concurrency; `remeasure` halves it.
    fn clean_decides(&self) -> bool {
        let c = &self.remeasure_clean;
        if c.count < CLEAN_SAMPLES.min(self.cfg.samples) {
            return false;
        }
        let tolerated = self.tolerated();
        let agree = f64::from(c.max_ms) <= f64::from(c.min_ms).max(LATENCY_FLOOR_MS) * tolerated;
        let far = c.sum_ms as f64 >= f64::from(c.count) * SLOWDOWN * self.min_ms * tolerated;
        agree || (far && self.halved == 0 && self.lower_pin() < self.pin)
    }

    /// Fewest samples of clients that are not heavy by which an interval is judged without
    /// the heavy clients' ([`Samples::judged`]).
    fn enough(&self) -> u32 {
        CLEAN_SAMPLES.min(self.cfg.samples)
    }

    /// The pin a measurement halves to.
    fn lower_pin(&self) -> u32 {
        (self.pin / 2).max(self.cfg.limit_min)
    }

    fn schedule_remeasure(&mut self, now: u64, rnd: u32) {
        self.next_remeasure_ms = now.saturating_add(jittered(
            u64::from(self.cfg.remeasure_ms),
            REMEASURE_JITTER,
            rnd,
        ));
    }

    fn bounded(&self, limit: f64) -> f64 {
        limit.clamp(f64::from(self.cfg.limit_min), f64::from(self.cfg.limit_max))
    }

    fn update(&mut self, now: u64, elapsed: u64, s: &Samples, rnd: u32) -> Update {
        let apart = s.heavy;
        let s = &s.judged(self.enough());
        let from = self.limit();
        let sample = s.mean_ms().unwrap_or(0.0).max(LATENCY_FLOOR_MS);
        let reached = s.reached(from);
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
            self.remeasure(now, elapsed, s, sample, rnd)
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
            apart,
            reached,
            min_change: change,
            overload: false,
        }
    }

    /// One step of a pinned measurement.
    fn remeasure(
        &mut self,
        now: u64,
        elapsed: u64,
        s: &Samples,
        sample: f64,
        rnd: u32,
    ) -> MinChange {
        if s.inflight_max > self.pin {
            // Not drained: some of this interval's requests queued behind more than `pin`.
            // They were waiting, so the origin was busy: its rate of answers is its
            // capacity, and the queue's latency is what a fall is measured from — before
            // the first halving. After it, the reference is the drained mean at the pin
            // before: the tail of that pin's queue, raised into it, made every next pin seem
            // to fall, and one measurement halved a 64-worker origin's pin down to 3.
            if self.halved == 0 {
                self.remeasure_ref_ms = self.remeasure_ref_ms.max(sample);
            }
            if elapsed > 0 {
                self.remeasure_rate = self.remeasure_rate.max(f64::from(s.all()) / elapsed as f64);
            }
            self.remeasure_busy += 1;
            if self.remeasure_busy < REMEASURE_MAX_INTERVALS {
                return MinChange::None;
            }
            self.end_remeasure(now, rnd, false);
            self.slowed_limit = 0.0;
            return MinChange::PinAbandoned;
        }
        self.remeasure_busy = 0;
        let lower = self.lower_pin();
        // A pin that demand never reached turned nobody away: halving it sheds requests on
        // the strength of one mean's noise (a healthy origin's interval a quarter slower
        // than the last one), so the smaller signals below count only at a held pin.
        let held = s.reached(self.pin);
        // Latency that fell with the pin by more than the tolerance was still a queue.
        let falling = held && sample * self.tolerated() < self.remeasure_ref_ms;
        // A floor above the last one beyond the tolerance is checked at half the pin once: a
        // pin above the origin's own concurrency keeps a queue at the origin, out of sight
        // of in-flight (a periodic measurement's half limit, at the moment the origin slowed
        // down: the lab took 85 ms for a 30 ms origin, and the limit rose to 40). A latency
        // that then falls was that queue, and the halving goes on. A floor that more than
        // doubled (the gradient's floor) is no noise, held or not.
        let far = sample * GRADIENT_MIN > self.min_ms * self.tolerated();
        let rose = self.halved == 0
            && (far || held && (sample > self.min_ms * self.tolerated() || self.unheld_min != 0));
        if lower < self.pin && (falling || rose) {
            // Latency fell with the concurrency, or has yet to show it does not: halve again.
            self.halved = 1;
            self.pin = lower;
            self.pin_since_ms = now;
            self.pin_answers = 0;
            self.remeasure_ref_ms = sample;
            self.remeasure_clean = Samples::EMPTY;
            return MinChange::PinHalved;
        }
        let old_ms = self.min_ms;
        self.min_ms = sample;
        self.remeasures = self.remeasures.saturating_add(1);
        self.end_remeasure(now, rnd, true);
        if self.slowed_limit > 0.0
            && sample <= old_ms * self.tolerated()
            && (self.restored_ms == 0
                || now
                    >= self
                        .restored_ms
                        .saturating_add(u64::from(self.cfg.remeasure_ms)))
        {
            // The pause is over and the origin answers as it did before it (a collector's
            // pause, a stalled machine: its requests came back late at once). The rate of
            // answers at the pin is the pin's, not the origin's capacity, and the limit from
            // before the pause stands: measured low at a pin of 3, a floor of noisy answers
            // then held a healthy origin at half its demand (`tests/limit_sim.rs`, a pause).
            self.limit = self.bounded(self.limit.max(self.slowed_limit));
            self.restored_ms = now;
        }
        self.slowed_limit = 0.0;
        MinChange::PinMeasured
    }

    /// Ends a pinned measurement. The limit goes back to where it was, or, when the
    /// measurement saw the origin busy, to no more than the steady level of the origin's
    /// own concurrency: its capacity times the new minimum (BBR's bandwidth-delay product,
    /// Cardwell et al., "BBR: Congestion-Based Congestion Control", ACM Queue 2016), plus
    /// the tolerance and the gradient's headroom. After a slowdown the saved limit was cut
    /// against a stale minimum and is far above that level; going back to it would refill
    /// the origin's queue at once, the very burst the measurement drained.
    fn end_remeasure(&mut self, now: u64, rnd: u32, measured: bool) {
        self.phase = PHASE_NORMAL;
        // The pause, if there was one, is over: its answers were measured.
        self.paused = 0;
        if measured {
            self.unheld_min = 0;
        }
        let mut limit = self.saved_limit;
        if measured && self.remeasure_rate > 0.0 {
            let busy = self.remeasure_rate * self.min_ms * self.tolerated();
            limit = limit.min(busy + busy.sqrt()).max(f64::from(self.pin));
        }
        self.limit = self.bounded(limit);
        self.remeasure_rate = 0.0;
        self.remeasure_clean = Samples::EMPTY;
        self.clamped = 0;
        self.schedule_remeasure(now, rnd);
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
        // A heavy client's cap alone (`share`) lets the limit move, but starts no periodic
        // pinned measurement: pinning half the limit would shed the others while the heavy
        // client's requests drain, and the others' latency is the floor already.
        let reached_by_all = s.reached_by_all(self.limit());
        // In-flight itself at the limit: a client's own requests stay below it (a quarter of
        // it, or no more than the others': `share`), and neither a class's threshold nor a
        // heavy client's cap stands in for it.
        let full = s.inflight_max >= self.limit() || s.full > 0;
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
            self.next_remeasure_ms = self.next_remeasure_ms.min(soon);
            change = MinChange::Fell;
        }
        let due = now >= self.next_remeasure_ms;
        // A floor measured with nothing holding the origin, that latency has since left
        // far behind (the gradient at its floor), is checked by a pinned measurement,
        // reached or not: the unlimited start left a queue in it, and the queue grows.
        let pin_due =
            due && self.unheld_min != 0 && sample * GRADIENT_MIN > self.min_ms * self.tolerated();
        if due && !reached_by_all && !pin_due {
            self.unheld_min = 0;
            // Nobody waited on our limit: the interval's mean is the origin's own latency.
            self.min_ms = sample;
            self.remeasures = self.remeasures.saturating_add(1);
            self.schedule_remeasure(now, rnd);
            change = MinChange::Remeasured;
        }

        let raw = self.min_ms * self.tolerated() / sample;
        let gradient = raw.clamp(GRADIENT_MIN, GRADIENT_MAX);
        let l = self.limit;
        let mut target = l * gradient + (l * gradient).sqrt();
        let none_slow = f64::from(s.max_ms) < SLOWDOWN * self.min_ms * self.tolerated();
        if gradient >= 1.0 && reached && self.slow_start != SLOW_START_OFF && none_slow {
            // Slow start (TCP's, RFC 5681): until the first cut, double while demand meets
            // the limit — unless an answer already took a slowdown's latency: in the
            // interval in which an origin slows down, the answers are still mostly fast
            // ones, in-flight climbs to the limit as the queue builds, and doubling it then
            // only doubles the queue to drain. Paused, it waits one interval at the limit.
            if self.slow_start == SLOW_START_PAUSED {
                self.slow_start = SLOW_START_ON;
            } else {
                target = target.max(2.0 * l);
            }
        }
        // Requests in flight on average over the interval (Little's law: answers per
        // millisecond times their mean latency).
        let held = elapsed > 0 && f64::from(s.all()) * sample / elapsed as f64 >= l / 2.0;
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
        if used < l && !reached && self.slow_start != SLOW_START_OFF {
            // Nobody came near the limit. Demand that then meets it may be a surge whose
            // queue has not shown in latency yet (it takes a round trip to form): doubling on
            // that first interval doubles the queue the surge builds, and a cut below what
            // is in flight follows. So the doubling waits one interval at the limit: a
            // surge's queue shows by then, a busy healthy origin's growth goes on.
            self.slow_start = SLOW_START_PAUSED;
        }
        if target < l {
            self.slow_start = SLOW_START_OFF;
        }
        self.limit = self.bounded(target);

        self.clamped = if reached && raw <= GRADIENT_MIN {
            self.clamped + 1
        } else {
            0
        };
        let slowdown = raw * SLOWDOWN <= 1.0;
        // A periodic measurement pins half the limit, and sheds what comes above the pin: it
        // needs the limit to hold the origin (on average, not in a burst) or latency beyond
        // the tolerance. Otherwise it stays due for an interval nobody reached, which
        // measures the floor as it is: bursts that reached a healthy origin's limit now and
        // then were shed at half of it.
        let periodic = reached_by_all && due && (held || raw < 1.0);
        let rate = if elapsed > 0 {
            f64::from(s.all()) / elapsed as f64
        } else {
            0.0
        };
        // Fewer answers with no fewer requests in flight, the limit full: the origin stopped,
        // and what came meanwhile filled the limit. (Fewer answers after a cut are the
        // cut's; a rate that dips by chance, below the limit, is no pause: a client would
        // then pin the limit with a few slow requests of its own.) The interval a pause ends
        // may still be calm: a shed in the pause flushes a worker's answers from before it,
        // and they end the interval. Once: a second such interval is demand that fell.
        let stopped = full
            && self.since_calm <= PAUSE_INTERVALS
            && rate < self.calm_rate * PAUSE_RATE
            && s.inflight_max >= self.calm_inflight;
        if raw >= 1.0 && !(stopped && self.paused == 0) {
            self.calm_rate = rate;
            self.calm_limit = self.limit;
            self.calm_inflight = s.inflight_max;
            self.paused = 0;
            self.since_calm = 0;
        } else {
            self.since_calm = self.since_calm.saturating_add(1);
            // The intervals since the one that stopped, that one being 1.
            self.paused = if stopped {
                1
            } else if self.paused != 0 && self.paused <= u32::from(PAUSE_INTERVALS) {
                self.paused + 1
            } else {
                0
            };
        }
        // Since a pause, the limit need not be reached again: the interval that spans it
        // reached it, and the late answers of its queue end in the next as in-flight falls.
        let slowed =
            reached && (slowdown || self.clamped >= CLAMPED_RUN) || self.paused != 0 && slowdown;
        if pin_due || periodic || slowed {
            // A pause shows in any interval since the calm one: the one that spans it may
            // only cut, and the slowdown then show in the next, whose answers flow again; or
            // a periodic measurement falls due in it, and pins first.
            self.slowed_limit = if self.paused != 0 {
                self.calm_limit
            } else {
                0.0
            };
            self.saved_limit = self.limit;
            self.remeasure_ref_ms = sample;
            self.remeasure_rate = 0.0;
            self.remeasure_clean = Samples::EMPTY;
            self.remeasure_busy = 0;
            // A periodic measurement pins half the limit, and halves on while latency
            // falls. After a slowdown, the pin goes at once to the concurrency the old
            // minimum would allow at this latency (`l · raw`, often `limit_min`): halving
            // step by step would take several round trips of the slow origin to get there.
            let mut pin = self.limit / 2.0;
            // Sized so whether or not a periodic measurement is due: one that waits for an
            // interval nobody reaches may be due for long.
            if slowed {
                pin = pin.min(l * raw);
                if elapsed > 0 {
                    let rate = f64::from(s.all()) / elapsed as f64;
                    pin = pin.min(rate * self.min_ms * self.tolerated());
                }
            }
            self.pin = (pin as u32).max(self.cfg.limit_min);
            self.pin_since_ms = now;
            self.pin_answers = 0;
            self.halved = 0;
            self.phase = PHASE_PROBING;
            change = MinChange::PinStarted;
        }
        change
    }
}
