//! The breaker's state machine over a header and a ring of buckets in shared memory.

use std::mem::{align_of, size_of};

use super::classify::{class_name, classify, Attempt, Verdict};
use super::config::BreakerConfig;
use super::histogram::HistogramSum;
use super::reason::{self, REASON_BYTES};
use super::window::{Bucket, Sums};
use crate::snapshot::{BreakerView, Forced, LatencyView, State, Totals, WindowView};

/// A probe slot held this long (milliseconds) is reclaimed even if its owner still lives.
pub const PROBE_LEASE_MS: u64 = 120_000;

const STATE_CLOSED: u8 = 0;
const STATE_HALF_OPEN: u8 = 1;
const STATE_OPEN: u8 = 2;
const FORCED_NONE: u8 = 0;
const FORCED_OPEN: u8 = 1;
const FORCED_CLOSED: u8 = 2;

/// The fixed part of a breaker in shared memory; `window_s` [`Bucket`]s follow it (see
/// [`layout`]). Plain integers only, so any worker may read and write it under the zone lock.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BreakerHeader {
    cfg: BreakerConfig,
    totals: Totals,
    sums: Sums,
    /// The latest clock reading seen; earlier readings are clamped to it.
    last_ms: u64,
    since_ms: u64,
    retry_at_ms: u64,
    next_probe_at_ms: u64,
    probe_granted_ms: u64,
    /// The current (jittered, floored, capped) cooldown.
    cooldown_ms: u64,
    /// The un-jittered cooldown: `open`, doubled after each failed probe, up to `max_open`.
    base_cooldown_ms: u64,
    /// The last probe ticket handed out: the breaker's epoch in the high half, a counter in
    /// the low half (see [`BreakerHeader::new`]).
    probe_gen: u64,
    probe_owner: u32,
    consecutive: u32,
    state: u8,
    forced: u8,
    probe_busy: u8,
    reason_len: u8,
    reason: [u8; REASON_BYTES],
}

impl BreakerHeader {
    /// A closed breaker with an empty window, created at `now_ms`. Its buckets must be filled
    /// with [`Bucket::EMPTY`].
    ///
    /// `epoch` must differ from that of every earlier breaker that lived in the same memory
    /// (the shell takes it from a counter in the zone), so that a probe ticket handed out
    /// before a reset or a reload is never taken for one handed out after.
    pub fn new(cfg: BreakerConfig, now_ms: u64, epoch: u32) -> Self {
        BreakerHeader {
            cfg,
            totals: Totals::default(),
            sums: Sums {
                second: now_ms / 1000,
                ..Sums::default()
            },
            last_ms: now_ms,
            since_ms: now_ms,
            retry_at_ms: 0,
            next_probe_at_ms: 0,
            probe_granted_ms: 0,
            cooldown_ms: u64::from(cfg.open_ms),
            base_cooldown_ms: u64::from(cfg.open_ms),
            probe_gen: u64::from(epoch) << 32,
            probe_owner: 0,
            consecutive: 0,
            state: STATE_CLOSED,
            forced: FORCED_NONE,
            probe_busy: 0,
            reason_len: 0,
            reason: [0; REASON_BYTES],
        }
    }

    /// The parameters this breaker was created with.
    pub fn config(&self) -> &BreakerConfig {
        &self.cfg
    }

    /// The current state (readable without the buckets).
    pub fn state(&self) -> State {
        match self.state {
            STATE_OPEN => State::Open,
            STATE_HALF_OPEN => State::HalfOpen,
            _ => State::Closed,
        }
    }

    /// The operator-forced state, if any.
    pub fn forced(&self) -> Option<Forced> {
        match self.forced {
            FORCED_OPEN => Some(Forced::Open),
            FORCED_CLOSED => Some(Forced::Closed),
            _ => None,
        }
    }

    /// Running totals.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }
}

/// Size in bytes and alignment of a header followed by `window_s` buckets, for the shell's
/// allocator. The buckets start at [`tail_offset`].
pub fn layout(window_s: u32) -> (usize, usize) {
    let tail = (window_s as usize).saturating_mul(size_of::<Bucket>());
    let align = align_of::<BreakerHeader>().max(align_of::<Bucket>());
    (tail_offset().saturating_add(tail), align)
}

/// Offset in bytes of the first bucket after the header.
pub const fn tail_offset() -> usize {
    size_of::<BreakerHeader>().next_multiple_of(align_of::<Bucket>())
}

/// Which request a caller holds: a normal one, or the probe of a slot generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ticket {
    /// A normal request (every [`Admission::Pass`]).
    Normal,
    /// The half-open probe: the ticket it was granted, unique in the zone's lifetime.
    Probe(u64),
}

/// Whether a request may go to the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Send it, with [`Ticket::Normal`]. `would_reject` is true only in dry run, where the
    /// breaker would have short-circuited it.
    Pass {
        /// Dry run only: a real breaker would have rejected this request.
        would_reject: bool,
    },
    /// Send it as the half-open probe; report its outcome with this ticket.
    Probe(Ticket),
    /// Short-circuit it.
    Reject {
        /// Time until a probe may start, at least 1 ms (for `Retry-After`).
        retry_after_ms: u64,
    },
}

/// The answer of [`Breaker::admit`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// What to do with the request.
    pub admission: Admission,
    /// The transition this call caused (open → half-open), to be logged once.
    pub transition: Option<Transition>,
}

/// The answer of [`Breaker::record`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The transition this outcome caused, to be logged once.
    pub transition: Option<Transition>,
    /// The state after recording.
    pub state: State,
}

/// A change of state, with the human reason and its numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// State before.
    pub from: State,
    /// State after.
    pub to: State,
    /// Why, e.g. `failure rate 55% (22/40) >= 50% in 10s`.
    pub reason: String,
    /// More, e.g. `retry in 30s` when opening.
    pub detail: Option<String>,
}

/// What a request may be told without the zone lock, as of the breaker's last change: the
/// shell keeps it in atomics beside the breaker and refreshes it after every locked call, so
/// that the common cases — closed, and open while cooling down — cost no lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Let every request through (closed, or forced closed); outcomes are still recorded.
    Pass,
    /// Short-circuit every request until `until_ms` (open and cooling down; `u64::MAX` when
    /// forced open, where `Retry-After` says `wait_ms`).
    Reject {
        /// End of the cooldown.
        until_ms: u64,
        /// The wait to announce when `until_ms` is `u64::MAX`.
        wait_ms: u64,
    },
    /// Only [`Breaker::admit`], under the lock, can tell.
    Ask,
}

impl Gate {
    /// The admission this gate gives at `now_ms` without the lock, or `None` when only
    /// [`Breaker::admit`] can tell (a cooldown that has ended included). A rejection given
    /// here is not in the breaker's totals: the caller counts it.
    #[inline]
    pub fn admit(self, now_ms: u64) -> Option<Admission> {
        match self {
            Gate::Pass => Some(Admission::Pass {
                would_reject: false,
            }),
            Gate::Reject { until_ms, wait_ms } if now_ms < until_ms => Some(Admission::Reject {
                retry_after_ms: if until_ms == u64::MAX {
                    wait_ms.max(1)
                } else {
                    until_ms - now_ms
                },
            }),
            _ => None,
        }
    }
}

/// An operator action from the control endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Open and hold open until [`Control::Reset`].
    ForceOpen,
    /// Close and hold closed (never trips) until [`Control::Reset`].
    ForceClose,
    /// Back to a fresh closed breaker (totals kept).
    Reset,
}

/// A cooldown or probe spacing spread by `jitter` (hundredths of a percent): `base_ms` times
/// a factor in [1 - j, 1 + j] picked uniformly by `rnd`.
#[inline]
pub fn jittered(base_ms: u64, jitter: u32, rnd: u32) -> u64 {
    let j = u64::from(jitter.min(10_000));
    let offset = (u64::from(rnd) * (2 * j + 1)) >> 32;
    let factor = 10_000 - j + offset;
    // Split so that huge bases saturate instead of overflowing.
    (base_ms / 10_000)
        .saturating_mul(factor)
        .saturating_add((base_ms % 10_000) * factor / 10_000)
}

/// One breaker, borrowed from shared memory while the caller holds the zone lock.
#[derive(Debug)]
pub struct Breaker<'a> {
    hdr: &'a mut BreakerHeader,
    ring: &'a mut [Bucket],
}

impl<'a> Breaker<'a> {
    /// Wraps a header and its `window_s` buckets.
    pub fn new(hdr: &'a mut BreakerHeader, buckets: &'a mut [Bucket]) -> Breaker<'a> {
        debug_assert_eq!(buckets.len(), hdr.cfg.window_s as usize);
        Breaker { hdr, ring: buckets }
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.hdr.state()
    }

    /// What requests may be told without the lock until the breaker next changes.
    pub fn gate(&self) -> Gate {
        let h = &*self.hdr;
        match h.forced() {
            Some(Forced::Closed) => return Gate::Pass,
            Some(Forced::Open) => {
                return Gate::Reject {
                    until_ms: u64::MAX,
                    wait_ms: u64::from(h.cfg.open_ms),
                }
            }
            None => {}
        }
        match h.state() {
            State::Closed => Gate::Pass,
            // A dry run counts what it would have rejected, under the lock.
            _ if h.cfg.dry_run => Gate::Ask,
            State::Open => Gate::Reject {
                until_ms: h.retry_at_ms,
                wait_ms: 0,
            },
            State::HalfOpen => Gate::Ask,
        }
    }

    fn clock(&mut self, now_ms: u64) -> u64 {
        let now = now_ms.max(self.hdr.last_ms);
        self.hdr.last_ms = now;
        now
    }

    /// Decides whether a request goes to the upstream.
    ///
    /// `rnd` is a uniform random number for jitter; `owner` identifies the caller (its worker)
    /// should it get the probe slot; `owner_alive` tells whether the current holder of the
    /// slot still exists, so that a slot of a vanished worker is reclaimed.
    pub fn admit(
        &mut self,
        now_ms: u64,
        rnd: u32,
        owner: u32,
        owner_alive: &dyn Fn(u32) -> bool,
    ) -> Decision {
        let now = self.clock(now_ms);
        match self.hdr.forced() {
            Some(Forced::Closed) => return self.pass(None),
            Some(Forced::Open) => {
                let wait = u64::from(self.hdr.cfg.open_ms).max(1);
                return self.reject(wait, None);
            }
            None => {}
        }
        let transition = match self.hdr.state() {
            State::Closed => return self.pass(None),
            State::Open if now < self.hdr.retry_at_ms => {
                return self.reject(self.hdr.retry_at_ms - now, None)
            }
            State::Open => Some(self.half_open_now(now)),
            State::HalfOpen => None,
        };
        let h = &mut *self.hdr;
        if h.probe_busy != 0
            && (now.saturating_sub(h.probe_granted_ms) >= PROBE_LEASE_MS
                || !owner_alive(h.probe_owner))
        {
            h.probe_busy = 0;
        }
        if h.probe_busy == 0 && now >= h.next_probe_at_ms {
            h.probe_busy = 1;
            // The low half counts; the epoch in the high half stays.
            h.probe_gen =
                (h.probe_gen & !0xffff_ffff) | u64::from((h.probe_gen as u32).wrapping_add(1));
            h.probe_owner = owner;
            h.probe_granted_ms = now;
            let spacing = jittered(u64::from(h.cfg.probe_interval_ms), h.cfg.jitter, rnd);
            h.next_probe_at_ms = now.saturating_add(spacing);
            h.totals.probes = h.totals.probes.saturating_add(1);
            return Decision {
                admission: Admission::Probe(Ticket::Probe(h.probe_gen)),
                transition,
            };
        }
        let wait = if h.probe_busy != 0 {
            u64::from(h.cfg.probe_interval_ms)
        } else {
            h.next_probe_at_ms - now
        };
        self.reject(wait.max(1), transition)
    }

    fn pass(&self, transition: Option<Transition>) -> Decision {
        Decision {
            admission: Admission::Pass {
                would_reject: false,
            },
            transition,
        }
    }

    fn reject(&mut self, retry_after_ms: u64, transition: Option<Transition>) -> Decision {
        let t = &mut self.hdr.totals;
        t.short_circuited = t.short_circuited.saturating_add(1);
        let admission = if self.hdr.cfg.dry_run {
            Admission::Pass { would_reject: true }
        } else {
            Admission::Reject { retry_after_ms }
        };
        Decision {
            admission,
            transition,
        }
    }

    fn holds_probe(&self, ticket: Ticket) -> bool {
        matches!(ticket, Ticket::Probe(gen)
            if self.hdr.probe_busy != 0
                && gen == self.hdr.probe_gen
                && self.hdr.state == STATE_HALF_OPEN)
    }

    /// Records the outcome of an attempt admitted with `ticket`.
    ///
    /// In closed state a normal outcome enters the window and may open the breaker; the
    /// current probe's outcome closes or reopens it; anything else (a stale probe ticket, a
    /// normal request finishing while not closed) only counts in the totals.
    pub fn record(&mut self, now_ms: u64, rnd: u32, ticket: Ticket, attempt: &Attempt) -> Recorded {
        let now = self.clock(now_ms);
        let v = classify(attempt, &self.hdr.cfg);
        let probe = self.holds_probe(ticket);
        let t = &mut self.hdr.totals;
        if v.tls {
            t.tls_errors = t.tls_errors.saturating_add(1);
        } else if v.counted {
            t.requests = t.requests.saturating_add(1);
            t.failures = t.failures.saturating_add(u64::from(v.failure));
            t.slow = t.slow.saturating_add(u64::from(v.slow));
            t.retry_after_503 = t
                .retry_after_503
                .saturating_add(u64::from(v.retry_after_503));
        }
        let transition = if !v.counted || v.tls {
            // No verdict on the origin: a probe that got none just frees its slot.
            if probe {
                self.hdr.probe_busy = 0;
            }
            None
        } else if probe {
            self.probe_outcome(now, rnd, &v, attempt)
        } else if ticket == Ticket::Normal && self.hdr.state == STATE_CLOSED {
            let now_s = now / 1000;
            let h = &mut *self.hdr;
            h.sums.advance(self.ring, now_s);
            h.sums.record(
                self.ring,
                now_s,
                v.failure,
                v.slow,
                v.retry_after_s,
                attempt.response_ms,
            );
            if h.forced == FORCED_NONE {
                self.check_trip(now, rnd)
            } else {
                None
            }
        } else {
            None
        };
        Recorded {
            transition,
            state: self.hdr.state(),
        }
    }

    /// The request holding `ticket` ended without an outcome: frees its probe slot, if any.
    pub fn release(&mut self, now_ms: u64, ticket: Ticket) {
        self.clock(now_ms);
        if self.holds_probe(ticket) {
            self.hdr.probe_busy = 0;
        }
    }

    fn check_trip(&mut self, now: u64, rnd: u32) -> Option<Transition> {
        let (cfg, s) = (&self.hdr.cfg, &self.hdr.sums);
        if s.requests < u64::from(cfg.min_requests.max(1)) {
            return None;
        }
        let reaches = |part: u64, rate: u32| {
            part.saturating_mul(10_000) >= u64::from(rate).saturating_mul(s.requests)
        };
        let (what, part, rate) = if reaches(s.failures, cfg.failure_rate) {
            ("failure", s.failures, cfg.failure_rate)
        } else if cfg.slow_ms > 0 && reaches(s.slow, cfg.slow_rate) {
            ("slow", s.slow, cfg.slow_rate)
        } else {
            return None;
        };
        let text = format!(
            "{what} rate {}% ({part}/{}) >= {}% in {}s",
            reason::percent(part, s.requests),
            s.requests,
            reason::rate(rate),
            cfg.window_s
        );
        Some(self.open_now(now, rnd, text, 0))
    }

    fn probe_outcome(
        &mut self,
        now: u64,
        rnd: u32,
        v: &Verdict,
        a: &Attempt,
    ) -> Option<Transition> {
        let h = &mut *self.hdr;
        h.probe_busy = 0;
        let limit = u64::from(h.cfg.probe_latency_ms);
        let too_slow = limit > 0 && a.response_ms > limit;
        if !v.failure && !too_slow {
            h.consecutive = h.consecutive.saturating_add(1);
            let needed = h.cfg.probes.max(1);
            if h.consecutive < needed {
                return None;
            }
            let text = if needed == 1 {
                "1 good probe".to_string()
            } else {
                format!("{needed} good probes")
            };
            return Some(self.close_now(now, text, None));
        }
        let max = u64::from(h.cfg.max_open_ms);
        h.base_cooldown_ms = h.base_cooldown_ms.saturating_mul(2).min(max);
        let text = match v.class {
            Some(class) if v.failure => format!("probe failed: {}", class_name(class)),
            _ => format!("probe too slow: {}ms > {}ms", a.response_ms, limit),
        };
        Some(self.open_now(now, rnd, text, v.retry_after_s))
    }

    fn set_state(&mut self, now: u64, to: u8, reason: &str) -> State {
        let h = &mut *self.hdr;
        let from = h.state();
        if h.state != to {
            h.since_ms = now;
            let t = &mut h.totals;
            let counter = match to {
                STATE_OPEN => &mut t.opened,
                STATE_HALF_OPEN => &mut t.half_opened,
                _ => &mut t.closed,
            };
            *counter = counter.saturating_add(1);
        }
        h.state = to;
        h.consecutive = 0;
        h.probe_busy = 0;
        h.reason_len = reason::store(&mut h.reason, reason);
        from
    }

    /// Opens with the current base cooldown, jittered, raised to the largest `Retry-After` in
    /// the window (or `retry_after_s` of the outcome at hand), capped at `max_open`.
    fn open_now(&mut self, now: u64, rnd: u32, reason: String, retry_after_s: u32) -> Transition {
        let live = self.hdr.sums.live(self.ring, now / 1000, None);
        let h = &mut *self.hdr;
        let floor = u64::from(live.retry_after_s.max(retry_after_s)) * 1000;
        let cooldown = jittered(h.base_cooldown_ms, h.cfg.jitter, rnd)
            .max(floor)
            .min(u64::from(h.cfg.max_open_ms));
        h.cooldown_ms = cooldown;
        h.retry_at_ms = now.saturating_add(cooldown);
        let from = self.set_state(now, STATE_OPEN, &reason);
        Transition {
            from,
            to: State::Open,
            reason,
            detail: Some(format!("retry in {}s", reason::secs_ceil(cooldown))),
        }
    }

    fn half_open_now(&mut self, now: u64) -> Transition {
        let reason = format!(
            "cooldown {}s elapsed",
            reason::secs_ceil(self.hdr.cooldown_ms)
        );
        self.hdr.next_probe_at_ms = now;
        let from = self.set_state(now, STATE_HALF_OPEN, &reason);
        Transition {
            from,
            to: State::HalfOpen,
            reason,
            detail: None,
        }
    }

    /// Closes with a fresh window and the base cooldown back at `open`.
    fn close_now(&mut self, now: u64, reason: String, detail: Option<String>) -> Transition {
        let h = &mut *self.hdr;
        h.sums.clear(self.ring, now / 1000);
        h.base_cooldown_ms = u64::from(h.cfg.open_ms);
        h.cooldown_ms = h.base_cooldown_ms;
        let from = self.set_state(now, STATE_CLOSED, &reason);
        Transition {
            from,
            to: State::Closed,
            reason,
            detail,
        }
    }

    /// Applies an operator action. Always returns the transition (possibly with `from == to`,
    /// e.g. forcing open an open breaker) so that every operator action is logged; the
    /// `opened`/`closed` totals count only real changes of state.
    ///
    /// `ForceOpen` holds the breaker open (no half-open) and `ForceClose` holds it closed
    /// (outcomes still recorded, never trips), both until `Reset`, which returns to a fresh
    /// closed breaker with an empty window and the base cooldown; totals are kept. Any
    /// outstanding probe ticket becomes stale.
    pub fn control(&mut self, now_ms: u64, _rnd: u32, action: Control) -> Option<Transition> {
        let now = self.clock(now_ms);
        let (forced, reason) = match action {
            Control::ForceOpen => (FORCED_OPEN, "forced open"),
            Control::ForceClose => (FORCED_CLOSED, "forced closed"),
            Control::Reset => (FORCED_NONE, "reset"),
        };
        self.hdr.forced = forced;
        let t = match action {
            Control::ForceOpen => {
                let from = self.set_state(now, STATE_OPEN, reason);
                Transition {
                    from,
                    to: State::Open,
                    reason: reason.into(),
                    detail: None,
                }
            }
            Control::ForceClose => {
                let from = self.set_state(now, STATE_CLOSED, reason);
                Transition {
                    from,
                    to: State::Closed,
                    reason: reason.into(),
                    detail: None,
                }
            }
            Control::Reset => {
                let t = self.close_now(now, reason.into(), None);
                self.hdr.since_ms = now;
                t
            }
        };
        Some(t)
    }

    /// The window's running sums at `now_ms` (advancing it first), as used for decisions.
    pub fn window(&mut self, now_ms: u64) -> WindowView {
        let now = self.clock(now_ms);
        let h = &mut *self.hdr;
        h.sums.advance(self.ring, now / 1000);
        WindowView {
            seconds: h.cfg.window_s,
            requests: h.sums.requests,
            failures: h.sums.failures,
            slow: h.sums.slow,
        }
    }

    /// Everything the status page shows, computed from the live buckets at `now_ms`.
    pub fn view(&self, now_ms: u64) -> BreakerView {
        let h = &*self.hdr;
        let now = now_ms.max(h.last_ms);
        let mut hist = HistogramSum::default();
        let live = h.sums.live(self.ring, now / 1000, Some(&mut hist));
        let state = h.state();
        let forced = h.forced();
        // When the next probe may start: while one is in flight, not before one spacing from
        // now (what a turned-away request's Retry-After says too).
        let retry_at_ms = match state {
            State::Open if forced.is_none() => Some(h.retry_at_ms),
            State::HalfOpen if h.probe_busy != 0 => Some(
                h.next_probe_at_ms
                    .max(now.saturating_add(u64::from(h.cfg.probe_interval_ms))),
            ),
            State::HalfOpen => Some(h.next_probe_at_ms),
            _ => None,
        };
        BreakerView {
            state,
            dry_run: h.cfg.dry_run,
            forced,
            since_ms: h.since_ms,
            retry_at_ms,
            window: WindowView {
                seconds: h.cfg.window_s,
                requests: live.requests,
                failures: live.failures,
                slow: live.slow,
            },
            latency: LatencyView {
                p50: hist.percentile(500),
                p95: hist.percentile(950),
                p99: hist.percentile(990),
            },
            cooldown_ms: h.cooldown_ms,
            consecutive_probe_successes: h.consecutive,
            totals: h.totals,
            last_transition: reason::load(&h.reason, h.reason_len).to_string(),
        }
    }
}
