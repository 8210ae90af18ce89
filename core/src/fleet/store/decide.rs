//! The store's answers: suspicion, the fleet's prober and its rounds, recovery seen
//! elsewhere, and when to push.

use super::*;

/// The rounds one computation of the fleet's round ranks this instance in (one step per
/// candidate each): honest claims need one or two (the fleet's latest round, and the one
/// before from a peer that lags). Past them a claim counts only as it would whoever was
/// first, so that claims of many rounds at once cost no more than these.
pub(super) const RANKED_ROUNDS: u32 = 4;

impl FleetStore {
    /// The fresh opinions of peers that judge this breaker by the same rules.
    pub(super) fn agreeing<'a>(
        &'a self,
        now: u64,
        l: &'a Local,
    ) -> impl Iterator<Item = (usize, &'a Opinion)> {
        let exp = self.cfg.expire_ms;
        l.opinions
            .iter()
            .inspect(|_| self.step())
            .filter(move |(_, o)| o.fingerprint == l.fingerprint && o.fresh(now, exp))
            .map(|(i, o)| (*i as usize, o))
    }

    /// The fleet's latest probe of the current open episode: (round, started at). Derived
    /// from the fresh opinions at each call, so the knowledge survives the prober's
    /// disappearance as long as one live instance repeats it.
    ///
    /// Only credible claims count, so that no message can hold this instance's probes off
    /// beyond the fleet's own pace: this instance's own probes always; a peer's claim of
    /// round `r'` after the credited round `r` (probe at `p`) only if its probe came at least
    /// the waits of rounds `r..r'` after `p` (half an interval of tolerance for the ages'
    /// error), and one grace period later still when this instance was the one to probe
    /// round `r` (no one else probes before it, unless it let its turn pass). Of claims of
    /// the same round, the earliest probe counts. A forged round or probe field can thus
    /// neither skip rounds to choose the order nor keep moving the next probe into the
    /// future: the most it can do is what the fleet's own failing probes would.
    ///
    /// Costs a step per opinion and per claim (and the claims' sort), and one per candidate
    /// for each round whose first prober matters, at most [`RANKED_ROUNDS`] of them.
    pub(super) fn fleet_round(&self, now: u64, l: &Local) -> (u32, u64) {
        if !l.in_episode() {
            return (0, 0);
        }
        let p = &l.policy;
        let tol = self.cfg.interval_ms / 2;
        let grace = self.grace(l);
        let mut claims: Vec<(u32, u64, bool)> = self
            .agreeing(now, l)
            .filter(|(_, o)| o.tripped() && o.round > 0)
            .map(|(_, o)| (o.round, o.probe_at_ms, false))
            .collect();
        if l.round > 0 {
            claims.push((l.round, l.probe_at_ms, true));
        }
        // What was settled stands: a round's probe, once accepted, is not taken back or
        // moved later by a peer that replaces or drops its claim.
        if l.settled.0 > 0 {
            claims.push((l.settled.0, l.settled.1, true));
        }
        claims.sort_unstable_by(|a, b| {
            self.step();
            a.cmp(b)
        });
        // (round, probe at, the least probe time a claim of this round needed).
        // Rounds are counted from the episode's start as this instance knows it: a peer's
        // `since` may bring it earlier by an expiry at most, so that no claimed start long ago
        // lets a claim skip rounds (the round-0 due time in `probe_from` may use it in full:
        // there it only brings a probe sooner).
        let base = self
            .anchor(now, l)
            .max(l.episode_start_ms.saturating_sub(self.cfg.expire_ms));
        let (mut round, mut at, mut floor) = (0u32, base, 0u64);
        // Whether this instance is first in the order of the credited round, once asked:
        // ranking costs a step per candidate, so once per round, and for a few rounds at most.
        let mut first: Option<(u32, bool)> = None;
        let mut ranked = 0u32;
        for (r, t, own) in claims {
            self.step();
            if r < round {
                continue;
            }
            if r == round {
                if own || t.saturating_add(tol) >= floor {
                    at = at.min(t);
                }
                continue;
            }
            let need = at.saturating_add(p.waits(round, r));
            if !own && t.saturating_add(tol) < need {
                // Too early whoever was first.
                continue;
            }
            let is_first = match first {
                Some((of, f)) if of == round => f,
                _ => {
                    // Past the rounds ranked, a claim counts only as it would whoever was
                    // first: the grace is required.
                    let f = ranked >= RANKED_ROUNDS || self.first_in(now, l, round);
                    ranked += 1;
                    first = Some((round, f));
                    f
                }
            };
            let need = if is_first {
                need.saturating_add(grace)
            } else {
                need
            };
            if own || t.saturating_add(tol) >= need {
                (round, at, floor) = (r, t, need);
            }
        }
        if round == 0 {
            (0, 0)
        } else {
            (round, at)
        }
    }

    /// Remembers breaker `b`'s fleet round as it stands now (see [`Local::settled`]): after
    /// each message that changed its opinions (once, after the last record) and each local
    /// update, so that a round's earliest known probe is kept.
    pub(super) fn settle_round(&mut self, now: u64, b: usize) {
        let Some(l) = self.breakers.get(b) else {
            return;
        };
        let (round, at) = self.fleet_round(now, l);
        let l = &mut self.breakers[b];
        if !l.in_episode() {
            l.settled = (0, 0);
        } else if round > l.settled.0 || (round == l.settled.0 && round > 0) {
            l.settled = (round, at);
        }
    }

    /// The earliest open instant known of this episode: here, or at an agreeing peer.
    pub(super) fn anchor(&self, now: u64, l: &Local) -> u64 {
        self.agreeing(now, l)
            .filter(|(_, o)| o.tripped())
            .map(|(_, o)| o.since_ms)
            .fold(l.episode_start_ms, u64::min)
    }

    /// How long each instance after the first in the probing order waits more: the longer
    /// of the first probe's wait and the expiry, so that a probe that happened reaches
    /// everyone before the next in line acts.
    pub(super) fn grace(&self, l: &Local) -> u64 {
        l.policy.probe_base_ms.max(self.cfg.expire_ms)
    }

    /// Whether this instance is first in the probing order of `round` ([`FleetStore::rank`]
    /// 0): it may probe and no candidate ranks above it. Stops at the first that does.
    pub(super) fn first_in(&self, now: u64, l: &Local, round: u32) -> bool {
        if !self.can_probe(now, l) {
            return false;
        }
        let mine = (self.score(&self.self_id, l, round), self.self_id.as_str());
        self.candidates(now, l).all(|i| {
            let id = self.peers[i].id.as_str();
            (self.score(id, l, round), id) < mine
        })
    }

    /// This instance's place in the probing order of `round` (0: first), if it may probe.
    pub(super) fn rank(&self, now: u64, l: &Local, round: u32) -> Option<u64> {
        if !self.can_probe(now, l) {
            return None;
        }
        let mine = (self.score(&self.self_id, l, round), self.self_id.as_str());
        Some(
            self.candidates(now, l)
                .filter(|&i| {
                    let id = self.peers[i].id.as_str();
                    (self.score(id, l, round), id) > mine
                })
                .count() as u64,
        )
    }

    pub(super) fn can_probe(&self, now: u64, l: &Local) -> bool {
        let Some(v) = l.view else { return false };
        v.state != State::Closed
            && !v.forced
            && (v.active_probes
                || l.last_refused_ms
                    .is_some_and(|t| t.saturating_add(self.cfg.expire_ms) >= now))
    }

    /// Rendezvous score of an instance for this breaker and round: every instance computes
    /// the same order from the same ids, and a new round reshuffles it, so that the probing
    /// duty rotates and one instance with a broken path cannot hold it.
    pub(super) fn score(&self, id: &str, l: &Local, round: u32) -> u64 {
        self.step();
        mix(Fingerprint::new()
            .str(id)
            .str(&l.upstream)
            .str(&l.route)
            .u64(l.fingerprint)
            .u32(round)
            .finish())
    }

    /// Peers that may probe this breaker now (live, same fingerprint, tripped, traffic).
    pub(super) fn candidates<'a>(
        &'a self,
        now: u64,
        l: &'a Local,
    ) -> impl Iterator<Item = usize> + 'a {
        self.agreeing(now, l)
            .filter(|(_, o)| o.tripped() && o.flags().can_probe)
            .map(|(i, _)| i)
    }

    /// Until when (ms) peers' evidence makes this breaker suspicious, if it does: a fresh
    /// opinion with the same fingerprint says open (or half-open), or the windows of this
    /// instance and its agreeing peers, summed, hold at least `min_requests` attempts at or
    /// over the failure (or slow) rate and at least one peer contributed a failure (or slow
    /// call). The answer lasts until the supporting opinions expire.
    ///
    /// Suspicion is only ever advice: the breaker opens on its own window, with a lower bar
    /// while suspicious, never on this answer alone.
    pub fn suspicious(&self, now_ms: u64, breaker: usize) -> Option<u64> {
        let now = now_ms.max(self.last_now);
        let l = self.breakers.get(breaker)?;
        let exp = self.cfg.expire_ms;
        let until = |o: &Opinion| o.observed_at_ms.saturating_add(exp);
        let open_until = self
            .agreeing(now, l)
            .filter(|(_, o)| o.tripped())
            .map(|(_, o)| until(o))
            .max();
        let p = &l.policy;
        let (mut req, mut fail, mut slow) = l.view.map_or((0, 0, 0), |v| {
            (
                v.requests,
                v.failures.min(v.requests),
                v.slow.min(v.requests),
            )
        });
        let mut fail_until: Option<u64> = None;
        let mut slow_until: Option<u64> = None;
        for (_, o) in self.agreeing(now, l) {
            req = req.saturating_add(o.requests);
            fail = fail.saturating_add(o.failures);
            slow = slow.saturating_add(o.slow);
            if o.failures > 0 {
                fail_until = Some(fail_until.map_or(until(o), |t| t.min(until(o))));
            }
            if o.slow > 0 {
                slow_until = Some(slow_until.map_or(until(o), |t| t.min(until(o))));
            }
        }
        let reaches = |part: u64, rate: u32| {
            req >= u64::from(p.min_requests.max(1))
                && part.saturating_mul(10_000) >= u64::from(rate).saturating_mul(req)
        };
        let rate_until = [
            fail_until.filter(|_| reaches(fail, p.failure_rate)),
            slow_until.filter(|_| p.slow_rate > 0 && reaches(slow, p.slow_rate)),
        ]
        .into_iter()
        .flatten()
        .max();
        open_until.max(rate_until)
    }

    /// From when this instance may start the fleet's next probe of this open breaker, if it
    /// is one of those who may; the shell probes only when this has passed *and* its own
    /// breaker's cooldown allows.
    ///
    /// The instances that may probe (live, same fingerprint, open or half-open, not forced,
    /// with traffic or active probes) are ranked by a rendezvous hash of (instance, breaker,
    /// fingerprint, round). The first may probe from the fleet's due time: the earliest open
    /// instant known plus `probe_base_ms` before any fleet probe, then the latest fleet
    /// probe plus a wait that doubles per probe up to `probe_max_ms`. The k-th may probe k
    /// grace periods later (the longer of `probe_base_ms` and the expiry), so that if the
    /// first vanishes or never probes another takes over, while a probe that happened
    /// reaches everyone (within the expiry) before the next in line would act.
    pub fn probe_from(&self, now_ms: u64, breaker: usize) -> Option<u64> {
        let now = now_ms.max(self.last_now);
        let l = self.breakers.get(breaker)?;
        let (round, probe_at) = self.fleet_round(now, l);
        let rank = self.rank(now, l, round)?;
        let p = &l.policy;
        let due = if round == 0 {
            self.anchor(now, l).saturating_add(p.probe_base_ms)
        } else {
            probe_at.saturating_add(p.wait(round))
        };
        Some(due.saturating_add(rank.saturating_mul(self.grace(l))))
    }

    /// Whether this instance is the one to probe the open breaker now (see
    /// [`FleetStore::probe_from`]).
    pub fn designated_prober(&self, now_ms: u64, breaker: usize) -> bool {
        self.probe_from(now_ms, breaker)
            .is_some_and(|t| t <= now_ms.max(self.last_now))
    }

    /// The instance the fleet expects to probe this breaker next (first in the ranking of
    /// [`FleetStore::probe_from`]), or `None` when no one may.
    pub fn designated(&self, now_ms: u64, breaker: usize) -> Option<&str> {
        let now = now_ms.max(self.last_now);
        let l = self.breakers.get(breaker)?;
        if !l.in_episode() {
            return None;
        }
        let round = self.fleet_round(now, l).0;
        let me = self.can_probe(now, l).then_some(self.self_id.as_str());
        me.into_iter()
            .chain(self.candidates(now, l).map(|i| self.peers[i].id.as_str()))
            .max_by_key(|id| (self.score(id, l, round), *id))
    }

    /// Whether a peer with the same fingerprint closed this breaker after a probe since it
    /// opened here: the upstream answers again, so local probes may start early.
    pub fn peers_report_recovered(&self, now_ms: u64, breaker: usize) -> bool {
        let now = now_ms.max(self.last_now);
        let Some(l) = self.breakers.get(breaker) else {
            return false;
        };
        l.in_episode()
            && self.agreeing(now, l).any(|(_, o)| {
                let f = o.flags();
                o.state() == State::Closed
                    && f.recovered
                    && !f.forced
                    && o.since_ms >= l.episode_start_ms
            })
    }

    /// Whether to end this open breaker's cooldown now because peers report the upstream
    /// recovered ([`FleetStore::peers_report_recovered`]); the call counts it as done. True
    /// at most once per open episode (from the breaker's opening until it closes; a failed
    /// probe's reopening is the same episode): a report that comes and goes, a peer flipping
    /// between recovered and open, or several peers recovering cut the cooldown once, so that
    /// no peer's word buys more than one early probe of an origin that fails this instance.
    pub fn take_hasten(&mut self, now_ms: u64, breaker: usize) -> bool {
        let now = self.clock(now_ms);
        let fresh = self.breakers.get(breaker).is_some_and(|l| !l.hastened);
        if !fresh || !self.peers_report_recovered(now, breaker) {
            return false;
        }
        self.breakers[breaker].hastened = true;
        true
    }

    /// Whether the next round should come sooner, after a quarter of the interval: some
    /// local breaker is closed while its window fails at its rate (two failures or more) but
    /// has not yet the attempts to open. Evidence spreads in rounds, so rounds four times
    /// faster while trouble brews are what let a fleet open before each instance has paid
    /// for it; only the instances whose own breaker fails pay for the extra pulls, and only
    /// until it opens or its window clears.
    pub fn hurry(&self, _now_ms: u64) -> bool {
        self.breakers.iter().any(|l| {
            l.view.is_some_and(|v| {
                v.state == State::Closed
                    && !v.forced
                    && v.failures >= 2
                    && v.failures.saturating_mul(10_000)
                        >= u64::from(l.policy.failure_rate).saturating_mul(v.requests)
            })
        })
    }

    /// What peers act on in this breaker's opinion now.
    pub(super) fn signal(&self, now: u64, b: usize) -> Signal {
        let l = &self.breakers[b];
        let Some(v) = l.view else {
            return Signal::default();
        };
        let failing = v.state == State::Closed
            && !v.forced
            && v.failures >= 2
            && v.failures.saturating_mul(10_000)
                >= u64::from(l.policy.failure_rate).saturating_mul(v.requests);
        Signal {
            state: v.state.code(),
            forced: v.forced,
            level: if failing {
                (v.failures.ilog2() + 1).min(64) as u8
            } else {
                0
            },
            ready: failing && v.requests >= u64::from(l.policy.suspect_min),
            suspicious: self.suspicious(now, b).is_some(),
            recovered: self.peers_report_recovered(now, b),
        }
    }

    /// Whether to push now: tell `fanout` peers to pull this instance at once, because what
    /// peers act on has grown since the last push — a breaker moved (opened, half-opened,
    /// closed, forced or released), a closed breaker's failing window reached 2 failures, or
    /// doubled them, or reached `suspect_min` attempts, or peers' evidence made one
    /// suspicious or reported a recovery (so that news crosses the fleet hop by hop, not
    /// round by round). At most one push per `push_gap_ms`; news within the gap waits for
    /// its end ([`Push::At`]). [`Push::Now`] counts the push as made.
    pub fn take_push(&mut self, now_ms: u64) -> Push {
        let now = self.clock(now_ms);
        let mut news = false;
        for b in 0..self.breakers.len() {
            let s = self.signal(now, b);
            let pushed = &mut self.breakers[b].pushed;
            // What calmed down is remembered at once, so that its return is news again.
            pushed.level = pushed.level.min(s.level);
            pushed.ready &= s.ready;
            pushed.suspicious &= s.suspicious;
            pushed.recovered &= s.recovered;
            news |= s.news_since(pushed);
        }
        if !news {
            return Push::Nothing;
        }
        if let Some(at) = self
            .last_push_ms
            .map(|t| t.saturating_add(self.cfg.push_gap_ms))
            .filter(|&at| at > now)
        {
            return Push::At(at);
        }
        for b in 0..self.breakers.len() {
            self.breakers[b].pushed = self.signal(now, b);
        }
        self.last_push_ms = Some(now);
        self.counters.pushes += 1;
        Push::Now
    }
}
