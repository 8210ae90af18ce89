//! A reload that changes a breaker's parameters: the breaker is retuned, not started afresh.
//!
//! An operator tunes during an incident; a breaker that came back closed with an empty window
//! would send `min_requests` more requests to an origin that still fails. So a retune keeps:
//!
//! - the **state**, open, half-open, closed or forced: no transition happens at the reload
//!   (a reload is no evidence about the origin). An open breaker stays open until its probe;
//!   a closed one whose window already reaches a new, lower rate trips on its next recorded
//!   outcome, judged by the new thresholds (a success too, as always once `min_requests` is
//!   reached: [`Breaker::record`] checks the window on every outcome);
//! - the **episode**: the cooldown deadline (brought forward to `since + max_open` when a
//!   lower `max_open` ends it sooner, never pushed back by a larger `open`), the probe in
//!   flight and its ticket, the good probes so far, the doubling count of the base cooldown
//!   (re-applied to the new `open`, capped by the new `max_open`), the trip's numbers;
//! - the **totals**, every one of them: no counter resets on reload;
//! - the **window**, when its length is unchanged (same buckets); its counts were judged by
//!   the old classes and the old `slow`, and stay as they were until they age out. With
//!   another length ([`Breaker::adopt`]) the window starts empty, and so do the runs of bad
//!   attempts it held (`consecutive` counts from the reload).
//!
//! What the new parameters change at once: `probes` (the run the episode asks for moves by
//! the same amount, never below the new `probes`; a run already long enough closes on the
//! next good probe), a ramp under way (its end kept, brought forward to `now + ramp` when
//! the new ramp is shorter, none with `ramp=0`), `dry_run` (the state is kept: a breaker a
//! dry run held open short-circuits as soon as `dry_run` is off). A cooldown or probe spacing
//! already drawn keeps its old jitter; the next one is drawn with the new. `probe_uri` added
//! to a half-open breaker makes it open with its next probe due when the passive one was (an
//! active breaker is never half-open); removed, the open breaker's next request after that
//! moment is its probe.

use super::*;

/// What a retune kept, for the reload's log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retuned {
    /// The state, as before the reload.
    pub state: State,
    /// The operator's forced state, as before.
    pub forced: Option<Forced>,
    /// In dry run (new parameters).
    pub dry_run: bool,
    /// The window's buckets were kept (same length); otherwise it starts empty.
    pub window_kept: bool,
    /// A lower `max_open` brought the current cooldown's end forward.
    pub cooldown_cut: bool,
}

impl Retuned {
    /// Whether the reload touched a breaker that is turning requests away, or would (open,
    /// half-open, forced open): the operator should know, at `warn`.
    pub fn is_incident(&self) -> bool {
        match self.forced {
            Some(Forced::Open) => true,
            Some(Forced::Closed) => false,
            None => self.state != State::Closed,
        }
    }

    /// The log line's words after the breaker's name, e.g. `parameters changed on reload,
    /// closed, window kept` or `parameters changed on reload while open, kept open until its
    /// probe, window kept`.
    pub fn describe(&self) -> String {
        let state = match (self.forced, self.state) {
            (Some(Forced::Open), _) => "forced open",
            (Some(Forced::Closed), _) => "forced closed",
            (None, State::Open) => "open",
            (None, State::HalfOpen) => "half-open",
            (None, State::Closed) => "closed",
        };
        let dry = if self.dry_run { " (dry run)" } else { "" };
        let kept = match (self.forced, self.state) {
            (Some(Forced::Open), _) => ", kept forced open until reset",
            (None, State::Open) => ", kept open until its probe",
            (None, State::HalfOpen) => ", kept half-open: its probes decide",
            _ => "",
        };
        let cut = if self.cooldown_cut {
            ", cooldown cut to max_open"
        } else {
            ""
        };
        let window = if self.window_kept {
            "window kept"
        } else {
            "window emptied (new length)"
        };
        if self.is_incident() {
            format!("parameters changed on reload while {state}{dry}{kept}{cut}, {window}")
        } else {
            format!("parameters changed on reload, {state}{dry}, {window}")
        }
    }
}

impl<'a> Breaker<'a> {
    /// The header, to carry into a breaker of another window length ([`Breaker::adopt`]).
    pub fn header(&self) -> &BreakerHeader {
        self.hdr
    }

    /// Adds requests turned away without the lock (counted beside the breaker by the shell,
    /// not in its totals) to the totals, before the breaker moves to other memory.
    pub fn count_lock_free(&mut self, short_circuited: u64, ramp_shed: u64) {
        let t = &mut self.hdr.totals;
        t.short_circuited = t.short_circuited.saturating_add(short_circuited);
        t.ramp_shed = t.ramp_shed.saturating_add(ramp_shed);
    }

    /// Takes `cfg` (a reload changed the parameters), keeping the state, the episode, the
    /// totals and the window (see the module's documentation). `None`, and nothing changes,
    /// when `cfg` has another window length: the shell lays out a new breaker and
    /// [`Breaker::adopt`]s this one's header.
    pub fn retune(&mut self, now_ms: u64, cfg: BreakerConfig) -> Option<Retuned> {
        if cfg.window_s as usize != self.ring.len() {
            return None;
        }
        let now = self.clock(now_ms);
        self.hdr.sums.advance(self.ring, now / 1000);
        Some(retune_header(self.hdr, cfg, now, true))
    }

    /// This breaker, just laid out with `cfg.window_s` buckets for `cfg`, takes over `old`
    /// (the same breaker with another window length): its state, episode and totals, with
    /// `cfg`; its window starts empty.
    pub fn adopt(&mut self, old: &BreakerHeader, now_ms: u64) -> Retuned {
        let cfg = self.hdr.cfg;
        *self.hdr = *old;
        let now = self.clock(now_ms);
        self.hdr.sums.clear(self.ring, now / 1000);
        self.hdr.clear_runs();
        retune_header(self.hdr, cfg, now, false)
    }
}

fn retune_header(
    h: &mut BreakerHeader,
    cfg: BreakerConfig,
    now: u64,
    window_kept: bool,
) -> Retuned {
    let old = h.cfg;
    h.cfg = cfg;
    h.base_cooldown_ms = rescale_cooldown(h.base_cooldown_ms, &old, &cfg);
    let mut cooldown_cut = false;
    match h.state {
        STATE_CLOSED => {
            h.cooldown_ms = h.base_cooldown_ms;
            if h.flags & QUESTIONED != 0 && (cfg.confirm_ms == 0 || !cfg.active) {
                // Asked no more: its probe, if out, is no one's now.
                h.flags &= !(QUESTIONED | UNANSWERED);
                h.probe_busy = 0;
            } else if h.flags & QUESTIONED != 0 {
                // The question waits as long as the new probe may take.
                h.retry_at_ms = h
                    .retry_at_ms
                    .saturating_sub(u64::from(old.confirm_ms))
                    .saturating_add(u64::from(cfg.confirm_ms))
                    .max(now);
            }
            if h.ramp_until_ms > now {
                h.ramp_until_ms = if cfg.ramp_ms == 0 || cfg.ramp_start >= 10_000 {
                    0
                } else {
                    h.ramp_until_ms
                        .min(now.saturating_add(u64::from(cfg.ramp_ms)))
                };
            }
        }
        _ => {
            // The deadline drawn stays; a lower `max_open` ends it sooner, never before now.
            let cap = h
                .since_ms
                .saturating_add(u64::from(cfg.max_open_ms))
                .max(now);
            if h.state == STATE_OPEN && h.forced == FORCED_NONE && h.retry_at_ms > cap {
                cooldown_cut = true;
            }
            h.retry_at_ms = h.retry_at_ms.min(cap);
            h.next_probe_at_ms = h.next_probe_at_ms.min(cap);
            h.cooldown_ms = h.cooldown_ms.min(cfg.max_open_ms);
            let (was, is) = (old.probes.max(1), cfg.probes.max(1));
            let moved = |run: u32| run.saturating_add(is).saturating_sub(was).max(is);
            h.needed = moved(h.needed.max(was));
            h.soft_needed = moved(h.soft_needed.max(was));
            if h.state == STATE_HALF_OPEN && cfg.active {
                // Active probes never leave a breaker half-open: open, the next probe due
                // when the passive one would have been (not a trip: `opened` unchanged).
                h.state = STATE_OPEN;
                h.retry_at_ms = h.next_probe_at_ms;
            }
        }
    }
    Retuned {
        state: h.state(),
        forced: h.forced(),
        dry_run: cfg.dry_run,
        window_kept,
        cooldown_cut,
    }
}

/// The base cooldown under `new`: the old one's doublings (from the first cooldown of `old`)
/// applied to the first cooldown of `new`, capped by its `max_open`.
fn rescale_cooldown(base_ms: u32, old: &BreakerConfig, new: &BreakerConfig) -> u32 {
    let mut doublings = 0;
    let mut x = u64::from(first_cooldown(old)).max(1);
    while x < u64::from(base_ms) && doublings < 32 {
        x = x.saturating_mul(2);
        doublings += 1;
    }
    let first = first_cooldown(new);
    if doublings == 0 {
        return first;
    }
    let doubled = u64::from(first).saturating_mul(1 << doublings.min(32));
    doubled.min(u64::from(new.max_open_ms)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BreakerConfig {
        BreakerConfig {
            jitter: 0,
            ..BreakerConfig::default()
        }
    }

    #[test]
    fn doublings_carry_over_to_the_new_first_cooldown() {
        let old = cfg();
        let new = BreakerConfig {
            open_ms: 10_000,
            max_open_ms: 60_000,
            ..cfg()
        };
        assert_eq!(rescale_cooldown(30_000, &old, &new), 10_000, "none");
        assert_eq!(rescale_cooldown(60_000, &old, &new), 20_000, "one");
        assert_eq!(rescale_cooldown(120_000, &old, &new), 40_000, "two");
        assert_eq!(rescale_cooldown(300_000, &old, &new), 60_000, "capped");
    }

    #[test]
    fn the_words_say_what_was_kept() {
        let r = Retuned {
            state: State::Open,
            forced: None,
            dry_run: false,
            window_kept: true,
            cooldown_cut: false,
        };
        assert!(r.is_incident());
        assert_eq!(
            r.describe(),
            "parameters changed on reload while open, kept open until its probe, window kept"
        );
        let closed = Retuned {
            state: State::Closed,
            ..r
        };
        assert!(!closed.is_incident());
        assert_eq!(
            closed.describe(),
            "parameters changed on reload, closed, window kept"
        );
        let forced = Retuned {
            state: State::Open,
            forced: Some(Forced::Open),
            window_kept: false,
            ..r
        };
        assert!(forced.is_incident());
        assert_eq!(
            forced.describe(),
            "parameters changed on reload while forced open, kept forced open until reset, \
             window emptied (new length)"
        );
        let held_closed = Retuned {
            forced: Some(Forced::Closed),
            ..r
        };
        assert!(!held_closed.is_incident());
    }
}
