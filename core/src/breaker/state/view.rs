//! What the breaker shows: its window and its whole view, for the status page.

use super::*;

impl<'a> Breaker<'a> {
    /// The latest clock reading the breaker has seen.
    pub fn last_ms(&self) -> u64 {
        self.hdr.last_ms
    }

    /// When its current state began.
    pub fn since_ms(&self) -> u64 {
        self.hdr.since_ms
    }

    /// Running totals.
    pub fn totals(&self) -> &Totals {
        &self.hdr.totals
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

    /// The window at `now_ms` (advancing it first) as its pool's relative rules judge it:
    /// attempts, failures, and the histogram of response times (probes' too).
    pub fn sample(&mut self, now_ms: u64) -> (u64, u64, HistogramSum) {
        let now = self.clock(now_ms);
        let h = &mut *self.hdr;
        h.sums.advance(self.ring, now / 1000);
        let mut hist = HistogramSum::default();
        h.sums.live(self.ring, now / 1000, Some(&mut hist));
        (h.sums.requests, h.sums.failures, hist)
    }

    /// Everything the status page shows, computed from the live buckets at `now_ms`.
    pub fn view(&self, now_ms: u64) -> BreakerView {
        let h = &*self.hdr;
        let now = now_ms.max(h.last_ms);
        let mut hist = HistogramSum::default();
        let live = h.sums.live(self.ring, now / 1000, Some(&mut hist));
        let state = h.state();
        let forced = h.forced();
        // When the next probe may start, as a turned-away request's Retry-After says it: with
        // passive probes the end of the jitter's range, not the moment drawn in it (a status
        // page may be public, and that moment is the probe's), and once that moment has
        // passed, now at the latest; while one is in flight, not before one spacing from now.
        let told = |due: u64| {
            let t = h.told(due);
            if due > now {
                t
            } else {
                t.min(now)
            }
        };
        let spacing = now.saturating_add(u64::from(h.cfg.probe_interval_ms));
        let retry_at_ms = match state {
            State::Open if forced.is_none() && h.cfg.active && h.probe_busy != 0 => {
                Some(h.retry_at_ms.max(spacing))
            }
            State::Open if forced.is_none() => Some(told(h.retry_at_ms)),
            State::HalfOpen if h.probe_busy != 0 => Some(told(h.next_probe_at_ms).max(spacing)),
            State::HalfOpen => Some(told(h.next_probe_at_ms)),
            _ => None,
        };
        let unforced_closed = state == State::Closed && forced.is_none();
        BreakerView {
            state,
            dry_run: h.cfg.dry_run,
            forced,
            since_ms: h.since_ms,
            episode_ms: (state != State::Closed)
                .then(|| h.since_ms.saturating_sub(u64::from(h.episode_back_ms))),
            retry_at_ms,
            window: WindowView {
                seconds: h.cfg.window_s,
                requests: live.requests,
                failures: live.failures,
                slow: live.slow,
            },
            latency: LatencyView {
                p50: hist.percentile(500),
                p90: hist.percentile_within(900),
                p95: hist.percentile(950),
                p99: hist.percentile(990),
            },
            // As told (with passive probes, `since` plus the one drawn would be the moment).
            cooldown_ms: u64::from(h.cooldown_ms),
            consecutive_probe_successes: h.consecutive,
            probes_needed: if state == State::Closed || forced.is_some() {
                0
            } else {
                h.needed.max(1)
            },
            ramp_share: if unforced_closed {
                ramp::share(h.ramp_until_ms, h.cfg.ramp_ms, h.cfg.ramp_start, now)
            } else {
                10_000
            },
            suspect_until_ms: (now < h.suspect_until_ms).then_some(h.suspect_until_ms),
            totals: h.totals,
            last_transition: reason::load(&h.reason, h.reason_len).to_string(),
            tripped: if state == State::Closed || forced.is_some() {
                None
            } else {
                h.trip.view(&h.cfg)
            },
            history: None,
        }
    }
}
