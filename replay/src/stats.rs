//! What one replayed breaker did, counted as it happens.

use circuit_breaker_core::breaker::Transition;
use circuit_breaker_core::snapshot::State;

/// One breaker's counters over the replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests of this breaker that made an upstream attempt.
    pub requests: u64,
    /// Of which the breaker judged failures or slow (whether or not it let them through).
    pub bad: u64,
    /// Closed → open: each an episode.
    pub opens: u64,
    /// Half-open → open: a probe failed.
    pub reopens: u64,
    /// Back to closed.
    pub closes: u64,
    /// Opens less than `max_open` after the previous close (the breaker's own measure of a
    /// fresh start, see `repeat_backoff`): the origin was not really well.
    pub flaps: u64,
    /// Milliseconds spent open or half-open (an episode still open at the log's end counts
    /// up to its last request).
    pub open_ms: u64,
    /// The longest episode, milliseconds.
    pub longest_open_ms: u64,
    /// Requests the breaker would have refused (open, half-open but not the probe, or turned
    /// away by a ramp).
    pub refused: u64,
    /// Of those, the ones that failed (or were slow) at the origin: load spared.
    pub failures_spared: u64,
    /// Of those, the ones that succeeded at the origin: answers lost.
    pub successes_lost: u64,
    /// Refused requests nginx had no verdict on (the client left): neither.
    pub refused_unjudged: u64,
    /// Probes let through (half-open requests).
    pub probes: u64,
    /// Requests a live breaker turned away (they never reached the origin: their outcome is
    /// unknown, and never recorded).
    pub refused_live: u64,
    /// Of those, the ones this replay let through (it decided otherwise).
    pub refused_live_let_through: u64,
    /// Retries the log shows (attempts after a request's first, in its last upstream).
    pub retries: u64,
    /// Of those, the requests whose retry the upstream's retry budget would have denied (the
    /// client gets the attempt before it), or that no retry would have been made for (the
    /// breaker not closed, or the request its probe).
    pub retries_denied: u64,
    /// Requests a retry rescued in the log that would have failed without it.
    pub rescues_lost: u64,
    /// Per class (`Class::index`), of the requests whose line names one.
    pub classes: [ClassStats; 3],
    /// When the current episode began.
    pub open_since: Option<u64>,
    /// When the breaker last closed.
    pub last_close: Option<u64>,
}

/// What a setting made of one class's requests: the same as the breaker's [`Stats`] of the
/// same names, for the requests of that class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Requests that made an upstream attempt (`Stats::requests`).
    pub requests: u64,
    /// Requests the breaker would have refused, those refused live too (`Stats::refused`).
    pub refused: u64,
    /// Requests that would not have retried (`Stats::retries_denied`).
    pub retries_denied: u64,
}

impl Stats {
    /// Counts a transition at `now_ms`; `max_open_ms` is the breaker's.
    pub fn transition(&mut self, now_ms: u64, t: &Transition, max_open_ms: u32) {
        match (t.from, t.to) {
            (State::Closed, State::Open) => {
                self.opens += 1;
                if self
                    .last_close
                    .is_some_and(|c| now_ms.saturating_sub(c) < u64::from(max_open_ms))
                {
                    self.flaps += 1;
                }
                self.open_since = Some(now_ms);
            }
            (_, State::Open) => self.reopens += 1,
            (_, State::Closed) => {
                self.closes += 1;
                self.end_episode(now_ms);
                self.last_close = Some(now_ms);
            }
            _ => {}
        }
    }

    /// Ends the current episode, if any, at `now_ms`.
    pub fn end_episode(&mut self, now_ms: u64) {
        if let Some(since) = self.open_since.take() {
            let d = now_ms.saturating_sub(since);
            self.open_ms += d;
            self.longest_open_ms = self.longest_open_ms.max(d);
        }
    }

    /// Adds another breaker's counters (for totals).
    pub fn add(&mut self, o: &Stats) {
        self.requests += o.requests;
        self.bad += o.bad;
        self.opens += o.opens;
        self.reopens += o.reopens;
        self.closes += o.closes;
        self.flaps += o.flaps;
        self.open_ms += o.open_ms;
        self.longest_open_ms = self.longest_open_ms.max(o.longest_open_ms);
        self.refused += o.refused;
        self.failures_spared += o.failures_spared;
        self.successes_lost += o.successes_lost;
        self.refused_unjudged += o.refused_unjudged;
        self.probes += o.probes;
        self.refused_live += o.refused_live;
        self.refused_live_let_through += o.refused_live_let_through;
        self.retries += o.retries;
        self.retries_denied += o.retries_denied;
        self.rescues_lost += o.rescues_lost;
        for (k, ok) in self.classes.iter_mut().zip(&o.classes) {
            k.requests += ok.requests;
            k.refused += ok.refused;
            k.retries_denied += ok.retries_denied;
        }
    }
}

/// `1h02m03s`, `4m05s`, `6.7s`, `0s`: a duration as a person reads it.
pub fn human_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 if ms == 0 => "0s".into(),
        0..=59 => format!("{}.{}s", s, (ms % 1000) / 100),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(from: State, to: State) -> Transition {
        Transition {
            from,
            to,
            reason: String::new(),
            detail: None,
        }
    }

    #[test]
    fn episodes_and_flaps() {
        let mut s = Stats::default();
        s.transition(1000, &t(State::Closed, State::Open), 60_000);
        s.transition(31_000, &t(State::Open, State::HalfOpen), 60_000);
        s.transition(31_100, &t(State::HalfOpen, State::Open), 60_000);
        s.transition(91_000, &t(State::HalfOpen, State::Closed), 60_000);
        // Reopened 30 s after closing: a flap.
        s.transition(121_000, &t(State::Closed, State::Open), 60_000);
        s.transition(131_000, &t(State::HalfOpen, State::Closed), 60_000);
        // 10 minutes later: a fresh incident.
        s.transition(731_000, &t(State::Closed, State::Open), 60_000);
        s.end_episode(741_000);
        assert_eq!((s.opens, s.reopens, s.closes, s.flaps), (3, 1, 2, 1));
        assert_eq!(s.open_ms, 90_000 + 10_000 + 10_000);
        assert_eq!(s.longest_open_ms, 90_000);
    }

    #[test]
    fn durations() {
        assert_eq!(human_ms(0), "0s");
        assert_eq!(human_ms(6_789), "6.7s");
        assert_eq!(human_ms(245_000), "4m05s");
        assert_eq!(human_ms(3_723_000), "1h02m03s");
    }
}
