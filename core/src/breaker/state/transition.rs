//! Transitions between states, and an operator's control.

use super::*;

/// A change of state, with the human reason and its numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// State before.
    pub from: State,
    /// State after.
    pub to: State,
    /// Why, e.g. `failure rate 55% (22/40) >= 50% in 10s`.
    pub reason: String,
    /// More, e.g. `retry in 30s` when opening, `ramp from 10% over 10s` when closing.
    pub detail: Option<String>,
}

impl Transition {
    /// The reason and its detail, for the log line.
    pub fn why(&self) -> reason::Why<'_> {
        reason::Why(&self.reason, self.detail.as_deref())
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

impl<'a> Breaker<'a> {
    pub(super) fn set_state(&mut self, now: u64, to: u8, reason: &str) -> State {
        let h = &mut *self.hdr;
        let from = h.state();
        if h.state != to {
            // An episode runs from leaving closed to coming back: a reopen after a failed
            // probe is the same episode.
            h.episode_back_ms = if to == STATE_CLOSED || h.state == STATE_CLOSED {
                0
            } else {
                let began = h.since_ms.saturating_sub(u64::from(h.episode_back_ms));
                u32::try_from(now.saturating_sub(began)).unwrap_or(u32::MAX)
            };
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
        h.flags &= !(QUESTIONED | UNANSWERED);
        h.consecutive = 0;
        h.probe_busy = 0;
        h.ramp_until_ms = 0;
        h.reason_len = reason::store(&mut h.reason, reason);
        from
    }

    /// Opens with the current base cooldown, jittered, raised to the largest `Retry-After` in
    /// the window (or `retry_after_s` of the outcome at hand), capped at `max_open` (see
    /// [`cooldown_range`]). With active probes the first one is due when that cooldown ends.
    /// Clients are told the end of the range, never the moment drawn in it.
    pub(super) fn open_now(
        &mut self,
        now: u64,
        rnd: u32,
        reason: String,
        retry_after_s: u32,
    ) -> Transition {
        let live = self.hdr.sums.live(self.ring, now / 1000, None);
        let jitter = self.jitter;
        let h = &mut *self.hdr;
        let floor = u64::from(live.retry_after_s.max(retry_after_s)) * 1000;
        let (lo, hi) = cooldown_range(
            u64::from(h.base_cooldown_ms),
            floor,
            h.cfg.jitter,
            u64::from(h.cfg.max_open_ms),
        );
        let cooldown = draw(lo, hi, jitter_rnd(jitter, Purpose::Cooldown, now, rnd));
        // With passive probes clients are told `hi`, the range's end (see
        // `BreakerHeader::told`); with active ones, the cooldown itself. At most `max_open`,
        // a `u32`.
        let told = if h.cfg.active { cooldown } else { hi };
        h.cooldown_ms = u32::try_from(told).unwrap_or(u32::MAX);
        h.retry_at_ms = now.saturating_add(cooldown);
        h.next_probe_at_ms = h.retry_at_ms;
        let from = self.set_state(now, STATE_OPEN, &reason);
        Transition {
            from,
            to: State::Open,
            reason,
            detail: Some(format!("retry in {}s", reason::secs_ceil(cooldown))),
        }
    }

    pub(super) fn half_open_now(&mut self, now: u64) -> Transition {
        // The cooldown drawn (or cut short by peers), not the one told.
        let drawn = self.hdr.retry_at_ms.saturating_sub(self.hdr.since_ms);
        let reason = format!("cooldown {}s elapsed", reason::secs_ceil(drawn));
        // A probe still in flight stays the probe: only a reload leaves an open breaker one
        // (half-open, then active probes on and off again; or an active probe, then off),
        // and a second beside it would be one request too many for the origin.
        let busy = self.hdr.probe_busy;
        let from = self.set_state(now, STATE_HALF_OPEN, &reason);
        self.hdr.probe_busy = busy;
        self.hdr.next_probe_at_ms = now;
        Transition {
            from,
            to: State::HalfOpen,
            reason,
            detail: None,
        }
    }

    /// Closes with a fresh window. `by_probes`: a recovery, which starts the ramp and, with
    /// `repeat_backoff`, keeps the base cooldown for a trip soon after; otherwise (an
    /// operator's reset) the base cooldown is back at the first one and no ramp starts.
    pub(super) fn close_now(&mut self, now: u64, reason: String, by_probes: bool) -> Transition {
        let h = &mut *self.hdr;
        h.sums.clear(self.ring, now / 1000);
        h.trip = Trip::NONE;
        h.clear_runs();
        h.needed = 0;
        h.soft_needed = 0;
        h.flags = if by_probes { RECLOSED } else { 0 };
        if !(by_probes && h.cfg.repeat_backoff) {
            h.base_cooldown_ms = first_cooldown(&h.cfg);
        }
        h.cooldown_ms = h.base_cooldown_ms;
        let from = self.set_state(now, STATE_CLOSED, &reason);
        let h = &mut *self.hdr;
        let ramp = by_probes && h.cfg.ramp_ms > 0 && h.cfg.ramp_start < 10_000;
        let detail = ramp.then(|| {
            h.ramp_until_ms = now.saturating_add(u64::from(h.cfg.ramp_ms));
            format!(
                "ramp from {}% over {}s",
                reason::rate(h.cfg.ramp_start),
                reason::secs_ceil(u64::from(h.cfg.ramp_ms))
            )
        });
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
    /// `ForceOpen` holds the breaker open (no half-open, no active probes) and `ForceClose`
    /// holds it closed (outcomes still recorded, never trips, no ramp), both until `Reset`,
    /// which returns to a fresh closed breaker with an empty window, the first cooldown and no
    /// ramp; totals are kept. Any outstanding probe ticket becomes stale.
    pub fn control(&mut self, now_ms: u64, _rnd: u32, action: Control) -> Option<Transition> {
        let now = self.clock(now_ms);
        let (forced, reason) = match action {
            Control::ForceOpen => (FORCED_OPEN, "forced open"),
            Control::ForceClose => (FORCED_CLOSED, "forced closed"),
            Control::Reset => (FORCED_NONE, "reset"),
        };
        self.hdr.forced = forced;
        // A forced state is no trip.
        self.hdr.trip = Trip::NONE;
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
                let t = self.close_now(now, reason.into(), false);
                self.hdr.since_ms = now;
                t
            }
        };
        Some(t)
    }
}
