//! Recording outcomes: the window, the trip check, and the fleet's and the pool's hooks.

use super::*;

/// A trip the window makes, before it is made.
struct Tripping {
    text: String,
    trip: Trip,
    /// Good probes in a row that close it after a soft trip.
    soft: u32,
    hard: bool,
}

/// The answer of [`Breaker::record`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The transition this outcome caused, to be logged once.
    pub transition: Option<Transition>,
    /// The state after recording.
    pub state: State,
}

impl<'a> Breaker<'a> {
    /// The second (of the monotonic clock) during which successes — counted attempts of
    /// normal requests that neither fail nor are slow — may be gathered without the lock and
    /// absorbed later with [`Breaker::absorb_successes`], until the breaker next changes; `None`
    /// when every outcome must be recorded under the lock.
    ///
    /// Some while closed with the window's rates below their thresholds: a success only
    /// lowers a rate, so none of them could open the breaker — as long as no second leaves
    /// the window meanwhile, which is why it holds for the window's latest second only.
    pub fn successes_lock_free(&self) -> Option<u64> {
        let h = &*self.hdr;
        if h.state != STATE_CLOSED || h.forced == FORCED_OPEN {
            return None;
        }
        let s = &h.sums;
        let below = |part: u64, rate: u32| {
            part == 0 || part.saturating_mul(10_000) < u64::from(rate).saturating_mul(s.requests)
        };
        let ok = below(s.failures, h.cfg.failure_rate)
            && (h.cfg.slow_ms == 0 || below(s.slow, h.cfg.slow_rate));
        ok.then_some(s.second)
    }

    /// Absorbs `count` successes gathered without the lock in monotonic second `second`,
    /// with their latencies: as if each had been recorded, in the order they happened, before
    /// whatever this call is followed by.
    pub fn absorb_successes(&mut self, second: u64, count: u32, latency: &Histogram) {
        if count == 0 {
            return;
        }
        let h = &mut *self.hdr;
        h.totals.requests = h.totals.requests.saturating_add(u64::from(count));
        if h.state == STATE_CLOSED {
            h.sums.absorb(self.ring, second, count, latency);
            h.clear_runs();
        }
    }

    /// Records the outcome of an attempt admitted with `ticket`.
    ///
    /// In closed state a normal outcome enters the window and may open the breaker — unless
    /// `may_open` is false (the per-server `max_eject` cap: the window keeps recording, and a
    /// later outcome trips it once it may); the current probe's outcome (half-open, or an
    /// active probe) may close it, and a failed half-open probe reopens it whatever
    /// `may_open` says (the breaker was out already); anything else (a stale probe ticket, a
    /// normal request finishing while not closed) only counts in the totals.
    pub fn record(
        &mut self,
        now_ms: u64,
        rnd: u32,
        ticket: Ticket,
        attempt: &Attempt,
        may_open: bool,
    ) -> Recorded {
        let c = Classified::of(*attempt, &self.hdr.cfg);
        self.record_classified(now_ms, rnd, ticket, &c, may_open)
    }

    /// [`Breaker::record`] of an attempt classified already (by the upstream's classes, which
    /// are its servers' too): the settlement classifies once for every breaker it records on.
    pub fn record_classified(
        &mut self,
        now_ms: u64,
        rnd: u32,
        ticket: Ticket,
        c: &Classified,
        may_open: bool,
    ) -> Recorded {
        let now = self.clock(now_ms);
        let (v, attempt) = (&c.verdict, &c.attempt);
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
            // No verdict on the origin: a probe that got none is just freed, and the
            // next request may probe at once (a client that ends its probes early must not
            // space the origin's out).
            if probe {
                self.free_probe(now);
            }
            None
        } else if probe {
            self.probe_outcome(now, rnd, v, attempt, may_open)
        } else if ticket == Ticket::Normal && self.hdr.state == STATE_CLOSED {
            let now_s = now / 1000;
            let h = &mut *self.hdr;
            h.sums.advance(self.ring, now_s);
            if h.sums.requests == 0 {
                // The window emptied: a run that began before is no evidence now.
                h.clear_runs();
            }
            h.sums.record(
                self.ring,
                now_s,
                v.failure,
                v.slow,
                v.retry_after_s,
                attempt.response_ms,
            );
            let next = |run: u32, bad: bool| if bad { run.saturating_add(1) } else { 0 };
            h.fail_run = next(h.fail_run, v.failure);
            h.slow_run = next(h.slow_run, v.slow);
            h.gateway_run = next(h.gateway_run, v.gateway);
            if h.forced == FORCED_NONE && may_open {
                self.check_trip(now, rnd, v)
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

    /// Peers report the origin failing: until `until_ms` (on this breaker's clock), the window
    /// trips on `suspect_min` requests instead of `min_requests`, at the same rates, and never
    /// without a local failure (or slow call). Each call replaces the previous deadline (0
    /// ends the suspicion).
    pub fn suspect(&mut self, until_ms: u64) {
        self.hdr.suspect_until_ms = until_ms;
    }

    /// Peers report the origin recovered: an open breaker (not forced) ends its cooldown now,
    /// so that the next request (passive) or the next [`Breaker::active_probe`] (active)
    /// probes at once; a half-open one waiting out its probe spacing may start its next probe
    /// now. The probes still decide. Returns whether anything moved.
    pub fn hasten(&mut self, now_ms: u64) -> bool {
        let now = self.clock(now_ms);
        let h = &mut *self.hdr;
        if h.forced != FORCED_NONE {
            return false;
        }
        match h.state {
            STATE_OPEN if h.retry_at_ms > now || (h.cfg.active && h.next_probe_at_ms > now) => {
                h.retry_at_ms = h.retry_at_ms.min(now);
                if h.cfg.active {
                    h.next_probe_at_ms = h.next_probe_at_ms.min(now);
                }
                true
            }
            STATE_HALF_OPEN if h.probe_busy == 0 && h.next_probe_at_ms > now => {
                h.next_probe_at_ms = now;
                true
            }
            _ => false,
        }
    }

    pub(super) fn check_trip(&mut self, now: u64, rnd: u32, last: &Verdict) -> Option<Transition> {
        let Some(tripping) = self.would_trip(now, Some(last)) else {
            // A lapsed question no trip believes is forgotten: a later trip asks afresh.
            if self.hdr.flags & QUESTIONED != 0 && now >= self.hdr.retry_at_ms {
                self.forget_question();
            }
            return None;
        };
        if self.asks_first(now) {
            return None;
        }
        Some(self.open_tripping(now, rnd, tripping))
    }

    /// The trip the window makes now, if any: `last` is the outcome at hand (named by a trip
    /// on failures in a row).
    fn would_trip(&self, now: u64, last: Option<&Verdict>) -> Option<Tripping> {
        let (cfg, s) = (&self.hdr.cfg, &self.hdr.sums);
        let run = self.hdr.gateway_run;
        if cfg.consecutive > 0 && run >= cfg.consecutive {
            // Certain evidence that needs no rate: a hard outage, closed by `probes` probes.
            let text = match last.and_then(|v| v.class) {
                Some(class) => format!(
                    "{run} gateway failures in a row, the last: {}",
                    class_name(class)
                ),
                None => format!("{run} gateway failures in a row"),
            };
            let probes = cfg.probes.max(1);
            let trip = Trip::new(&self.hdr.sums, TripBy::Consecutive, false);
            return Some(Tripping {
                text,
                trip,
                soft: probes,
                hard: true,
            });
        }
        let suspected = now < self.hdr.suspect_until_ms;
        let min = cfg.min_requests.max(1);
        let min = if suspected {
            cfg.suspect_min.clamp(1, min)
        } else {
            min
        };
        if s.requests < u64::from(min) {
            return None;
        }
        let reaches = |part: u64, rate: u32| at_rate(part, rate, s.requests);
        let fail_at = reaches(s.failures, cfg.failure_rate);
        let slow_at = cfg.slow_ms > 0 && reaches(s.slow, cfg.slow_rate);
        let (what, part, rate) = if fail_at {
            ("failure", s.failures, cfg.failure_rate)
        } else if slow_at {
            ("slow", s.slow, cfg.slow_rate)
        } else {
            return None;
        };
        let by = if what == "slow" {
            TripBy::SlowRate
        } else {
            TripBy::FailureRate
        };
        let trip = Trip::new(s, by, suspected);
        let text = format!(
            "{what} rate {}% ({part}/{}) >= {}% in {}s{}",
            reason::percent(part, s.requests),
            s.requests,
            reason::rate(rate),
            cfg.window_s,
            if suspected { " while suspected" } else { "" }
        );
        // Hard only when every kind of bad call at its rate came in one unbroken run: slow
        // calls mixed with scattered errors are a brownout of errors too.
        let h = &*self.hdr;
        let (mut soft, mut hard) = (h.cfg.probes.max(1), true);
        for (at, run, part, rate) in [
            (fail_at, h.fail_run, s.failures, cfg.failure_rate),
            (slow_at, h.slow_run, s.slow, cfg.slow_rate),
        ] {
            if at {
                soft = soft.max(judge::soft_run(rate, h.cfg.probes));
                hard &= judge::is_hard(run, part, rate);
            }
        }
        Some(Tripping {
            text,
            trip,
            soft,
            hard,
        })
    }

    fn open_tripping(&mut self, now: u64, rnd: u32, p: Tripping) -> Transition {
        self.open_period(now, rnd, p.text, p.trip, p.soft, p.hard)
    }

    /// With `confirm_ms` (and active probes), whether a trip waits on the breaker's own
    /// probe: the first trip asks it, due at once (or when the probe spacing next allows: at
    /// most one question per `probe_interval`), and the breaker stays closed until the
    /// probe's answer ([`Breaker::record_probe`]). A question unanswered past `confirm_ms`
    /// lapses: the trip that finds it so, while the silence that raised it can still be in
    /// the window, is believed — unless a probe of it came back without a verdict (it could
    /// not connect); a later one asks afresh.
    fn asks_first(&mut self, now: u64) -> bool {
        let h = &*self.hdr;
        if h.cfg.confirm_ms == 0 || !h.cfg.active {
            return false;
        }
        if h.flags & QUESTIONED != 0 {
            if now < h.retry_at_ms {
                return true;
            }
            let window_ms = u64::from(h.cfg.window_s).saturating_mul(1000);
            let recent = now < h.retry_at_ms.saturating_add(window_ms);
            let believed = recent && h.flags & UNANSWERED == 0;
            self.forget_question();
            if believed {
                return false;
            }
        }
        let h = &mut *self.hdr;
        h.flags |= QUESTIONED;
        h.next_probe_at_ms = h.next_probe_at_ms.max(now);
        h.retry_at_ms = h
            .next_probe_at_ms
            .saturating_add(u64::from(h.cfg.confirm_ms));
        true
    }

    /// Drops a lapsed question, and its probe if still out: an answer that comes later is
    /// no one's, and the next question may claim the probe.
    fn forget_question(&mut self) {
        let h = &mut *self.hdr;
        h.flags &= !(QUESTIONED | UNANSWERED);
        h.probe_busy = 0;
    }

    /// The answer to a question ([`Breaker::asks_first`]): a good probe says the origin
    /// answers, so the window's silence was its clients' and goes; a failed one opens the
    /// breaker on the window as it stands now, if it still trips and it `may_open`.
    pub(super) fn answer_question(
        &mut self,
        now: u64,
        rnd: u32,
        failed: Option<String>,
        may_open: bool,
    ) -> Option<Transition> {
        let h = &mut *self.hdr;
        h.flags &= !(QUESTIONED | UNANSWERED);
        h.probe_busy = 0;
        let Some(why) = failed else {
            h.sums.clear(self.ring, now / 1000);
            h.clear_runs();
            return None;
        };
        if !may_open {
            return None;
        }
        let mut p = self.would_trip(now, None)?;
        p.text = format!("{}, then {why}", p.text);
        Some(self.open_tripping(now, rnd, p))
    }

    /// Opens a closed breaker for a new open period: how many good probes will close it
    /// (`probes` after a hard trip, `soft` otherwise), and with `repeat_backoff` whether the
    /// cooldown doubles.
    pub(super) fn open_period(
        &mut self,
        now: u64,
        rnd: u32,
        text: String,
        trip: Trip,
        soft: u32,
        hard: bool,
    ) -> Transition {
        let h = &mut *self.hdr;
        h.trip = trip;
        h.soft_needed = soft;
        h.needed = if hard { h.cfg.probes.max(1) } else { soft };
        h.flags &= !GOOD_SEEN;
        if h.cfg.repeat_backoff {
            let soon = h.flags & RECLOSED != 0
                && now.saturating_sub(h.since_ms) < u64::from(h.cfg.max_open_ms);
            h.base_cooldown_ms = if soon {
                h.base_cooldown_ms.saturating_mul(2).min(h.cfg.max_open_ms)
            } else {
                first_cooldown(&h.cfg)
            };
        }
        h.flags &= !RECLOSED;
        self.open_now(now, rnd, text, 0)
    }

    /// Opens a closed breaker at once, whatever its window says, as after a hard failure
    /// (`probes` good probes close it): a server that failed the probe of its upstream's open
    /// breaker (see [`mod@crate::eject::explain`]). `None`, and nothing changes, when it is not
    /// closed or is forced.
    pub fn trip(&mut self, now_ms: u64, rnd: u32, reason: String) -> Option<Transition> {
        let now = self.clock(now_ms);
        if self.hdr.state != STATE_CLOSED || self.hdr.forced != FORCED_NONE {
            return None;
        }
        let probes = self.hdr.cfg.probes.max(1);
        let trip = Trip::new(&self.hdr.sums, TripBy::Probe, false);
        Some(self.open_period(now, rnd, reason, trip, probes, true))
    }

    /// Opens a closed breaker at once for a server its pool judged an outlier
    /// ([`crate::eject::outlier`]), for `reason`: a latency outlier (`limit_ms` set, the
    /// latency its probes must stay within) needs the run of good probes a brownout at 25 %
    /// needs (20: a server five times slower than the pool, exponentially, makes such a run
    /// within three times the pool's p90 about once in 300 tries, a healed one 98 times in
    /// 100), a failure outlier the run its own failure rate `rate` asks (as a soft trip at
    /// that rate). `None`, and nothing changes, when it is not closed or is forced.
    pub fn trip_outlier(
        &mut self,
        now_ms: u64,
        rnd: u32,
        reason: String,
        limit_ms: Option<u64>,
        rate: u32,
    ) -> Option<Transition> {
        let now = self.clock(now_ms);
        if self.hdr.state != STATE_CLOSED || self.hdr.forced != FORCED_NONE {
            return None;
        }
        let probes = self.hdr.cfg.probes;
        let (by, soft) = match limit_ms {
            Some(_) => (TripBy::LatencyOutlier, judge::soft_run(2500, probes)),
            None => (TripBy::FailureOutlier, judge::soft_run(rate, probes)),
        };
        let trip = Trip::new(&self.hdr.sums, by, false);
        let t = self.open_period(now, rnd, reason, trip, soft, false);
        self.set_outlier_limit(limit_ms.unwrap_or(0));
        Some(t)
    }

    /// Closes an open or half-open breaker as its probes would have, for `reason`: the replay
    /// of a log that holds none of the module's own probes (a server seen serving again was
    /// returned by them), so that a later trip doubles as after any return. `None` when it
    /// is closed or forced.
    pub fn close_as_probed(&mut self, now_ms: u64, reason: String) -> Option<Transition> {
        let now = self.clock(now_ms);
        if self.hdr.state == STATE_CLOSED || self.hdr.forced != FORCED_NONE {
            return None;
        }
        Some(self.close_now(now, reason, true))
    }

    /// Renews the probe latency limit of a server out as a latency outlier from the pool's
    /// latency now; nothing for any other breaker.
    pub fn set_outlier_limit(&mut self, limit_ms: u64) {
        let h = &mut *self.hdr;
        if h.state != STATE_CLOSED {
            h.trip.set_limit_ms(limit_ms);
        }
    }

    /// Whether the live window at `now_ms` holds failures at `failure_rate` or slow calls at
    /// `slow_rate` (with `slow` set), `min_requests` reached or not: with the breaker's own
    /// rates, a server whose breaker is about to eject it.
    pub fn reaches(&mut self, now_ms: u64, failure_rate: u32, slow_rate: u32) -> bool {
        let now = self.clock(now_ms);
        let h = &mut *self.hdr;
        h.sums.advance(self.ring, now / 1000);
        let s = &h.sums;
        at_rate(s.failures, failure_rate, s.requests)
            || (h.cfg.slow_ms > 0 && at_rate(s.slow, slow_rate, s.requests))
    }

    /// Records the bad outcome (a failure, or a slow call) of an attempt admitted with
    /// `ticket` that the pool explains: its server is out of the pool, or on its way out (see
    /// [`mod@crate::eject::explain`]). The totals count it (it is what the client got), and
    /// `explained` too, but never the window: ejection fixes it, so it must not open this
    /// breaker. The probe's outcome says nothing of the upstream either: the probe is
    /// freed, no verdict, and the next probe may start at once, for another server. An outcome
    /// that is not bad is recorded as [`Breaker::record`] does.
    pub fn record_explained(
        &mut self,
        now_ms: u64,
        rnd: u32,
        ticket: Ticket,
        attempt: &Attempt,
    ) -> Recorded {
        let c = Classified::of(*attempt, &self.hdr.cfg);
        self.record_explained_classified(now_ms, rnd, ticket, &c)
    }

    /// [`Breaker::record_explained`] of an attempt classified already.
    pub fn record_explained_classified(
        &mut self,
        now_ms: u64,
        rnd: u32,
        ticket: Ticket,
        c: &Classified,
    ) -> Recorded {
        let v = &c.verdict;
        if !v.counted || v.tls || !(v.failure || v.slow) {
            return self.record_classified(now_ms, rnd, ticket, c, true);
        }
        let now = self.clock(now_ms);
        let t = &mut self.hdr.totals;
        t.requests = t.requests.saturating_add(1);
        t.failures = t.failures.saturating_add(u64::from(v.failure));
        t.slow = t.slow.saturating_add(u64::from(v.slow));
        t.retry_after_503 = t
            .retry_after_503
            .saturating_add(u64::from(v.retry_after_503));
        t.explained = t.explained.saturating_add(1);
        self.probe_explained(now, ticket);
        Recorded {
            transition: None,
            state: self.hdr.state(),
        }
    }
}
