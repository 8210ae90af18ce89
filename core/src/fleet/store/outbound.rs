//! What the store says: the advice each breaker publishes, the status page's views and
//! the outbound message.

use super::*;

impl FleetStore {
    /// The three answers at once, as the shell publishes them.
    pub fn advice(&self, now_ms: u64, breaker: usize) -> FleetAdvice {
        FleetAdvice {
            suspicious_until_ms: self.suspicious(now_ms, breaker),
            probe_from_ms: self.probe_from(now_ms, breaker),
            peers_recovered: self.peers_report_recovered(now_ms, breaker),
        }
    }

    /// The stored opinion of `peer` about `breaker`, if fresh.
    pub fn opinion(&self, now_ms: u64, breaker: usize, peer: usize) -> Option<&Opinion> {
        let now = now_ms.max(self.last_now);
        let l = self.breakers.get(breaker)?;
        let o = l.opinions.get(&u32::try_from(peer).ok()?)?;
        o.fresh(now, self.cfg.expire_ms).then_some(o)
    }

    /// What the fleet says of one breaker, for the status page (keyed ones are counted, not
    /// shown).
    pub fn breaker_view(&self, now_ms: u64, breaker: usize) -> Option<BreakerFleetView> {
        let now = now_ms.max(self.last_now);
        let l = self.breakers.get(breaker).filter(|l| !l.keyed)?;
        let exp = self.cfg.expire_ms;
        let fresh = l.opinions.iter().filter(|(_, o)| o.fresh(now, exp));
        let agreeing = self.agreeing(now, l).count();
        Some(BreakerFleetView {
            fingerprint: l.fingerprint,
            agreeing_peers: agreeing,
            open_peers: self.agreeing(now, l).filter(|(_, o)| o.tripped()).count(),
            disagreeing_peers: fresh.count() - agreeing,
            advice: self.advice(now, breaker),
            designated: self.designated(now, breaker).map(str::to_string),
            round: self.fleet_round(now, l).0,
        })
    }

    /// Every peer's figures.
    pub fn peer_stats(&self, now_ms: u64) -> Vec<PeerStats> {
        let now = now_ms.max(self.last_now);
        let exp = self.cfg.expire_ms;
        let mut out: Vec<PeerStats> = self
            .peers
            .iter()
            .map(|p| {
                let c = p.counters;
                let reachable = c.last_exchange_ms.is_some_and(|t| {
                    t.saturating_add(exp.max(p.lasts_ms)) >= now
                        && c.last_error_ms.map_or(true, |e| e <= t)
                });
                PeerStats {
                    id: p.id.clone(),
                    reachable,
                    counters: c,
                    opinions: 0,
                    disagreements: 0,
                }
            })
            .collect();
        for l in &self.breakers {
            for (i, o) in l.opinions.iter().filter(|(_, o)| o.fresh(now, exp)) {
                let s = &mut out[*i as usize];
                s.opinions += 1;
                if o.fingerprint != l.fingerprint {
                    s.disagreements += 1;
                }
            }
        }
        // Places parted bus members left hold nothing (their opinions went with them).
        out.into_iter()
            .zip(&self.peers)
            .filter(|(_, p)| p.live)
            .map(|(s, _)| s)
            .collect()
    }

    /// Picks `fanout` distinct peers at random to pull from this round (all of them when
    /// there are fewer). `rnd` yields uniform random numbers.
    pub fn pick_peers(&self, rnd: impl FnMut() -> u32) -> Vec<usize> {
        crate::fleet::select::pick(self.peers.len(), self.cfg.fanout, rnd)
    }

    pub(super) fn own_opinion(&self, now: u64, l: &Local) -> Option<WireOpinion> {
        let v = l.view?;
        let open = v.state != State::Closed;
        let flags = Flags {
            can_probe: self.can_probe(now, l),
            recovered: l.recovered && !open,
            forced: v.forced,
        };
        if !(open || v.forced || v.requests > 0 || flags.recovered) {
            return None;
        }
        let (round, probe_at) = self.fleet_round(now, l);
        let requests = v.requests.min(wire::MAX_NUMBER);
        Some(WireOpinion {
            origin: self.self_id.clone(),
            upstream: l.upstream.clone(),
            route: l.route.clone(),
            fingerprint: l.fingerprint,
            state: v.state,
            age_ms: 0,
            since_ms: now.saturating_sub(v.since_ms).min(wire::MAX_NUMBER),
            requests,
            failures: v.failures.min(requests),
            slow: v.slow.min(requests),
            round,
            probe_ms: (round > 0).then(|| now.saturating_sub(probe_at).min(wire::MAX_NUMBER)),
            flags,
        })
    }

    pub(super) fn relayed_opinion(
        &self,
        now: u64,
        l: &Local,
        origin: usize,
        o: &Opinion,
    ) -> WireOpinion {
        let age = now.saturating_sub(o.observed_at_ms).min(wire::MAX_NUMBER);
        let ago = |t: u64| now.saturating_sub(t).clamp(age, wire::MAX_NUMBER);
        let round = o.round;
        WireOpinion {
            origin: self.peers[origin].id.clone(),
            upstream: l.upstream.clone(),
            route: l.route.clone(),
            fingerprint: o.fingerprint,
            state: o.state(),
            age_ms: age,
            since_ms: ago(o.since_ms),
            requests: o.requests,
            failures: o.failures,
            slow: o.slow,
            round,
            probe_ms: (round > 0).then(|| ago(o.probe_at_ms)),
            flags: o.flags(),
        }
    }

    /// The message this instance serves now: its own opinions of breakers that saw traffic
    /// or trouble (open ones first), then the freshest relayed opinions worth passing on,
    /// up to `max_entries` records; older ones are left out first.
    pub fn message(&self, now_ms: u64) -> Message {
        let now = now_ms.max(self.last_now);
        let cap = self.cfg.max_entries;
        let mut own: Vec<(bool, WireOpinion)> = self
            .breakers
            .iter()
            .filter_map(|l| Some((l.keyed, self.own_opinion(now, l)?)))
            .collect();
        // Trouble first, so that a cap drops quiet breakers before open ones.
        own.sort_by_key(|(_, o)| {
            (
                o.state == State::Closed && !o.flags.recovered,
                o.failures == 0,
            )
        });
        let mut own = self.bound_keyed(own);
        own.truncate(cap);
        let exp = self.cfg.expire_ms;
        // (age, breaker, origin)
        let mut relayed: Vec<(u64, usize, usize)> = Vec::new();
        let mut keyed = Vec::new();
        // On a bus every member hears every other: nothing is relayed.
        let relaying = if self.bus {
            &[][..]
        } else {
            &self.breakers[..]
        };
        for (b, l) in relaying.iter().enumerate() {
            for (i, o) in &l.opinions {
                if o.fresh(now, exp) && o.worth_relaying() {
                    let r = (now.saturating_sub(o.observed_at_ms), b, *i as usize);
                    if l.keyed {
                        keyed.push(r);
                    } else {
                        relayed.push(r);
                    }
                }
            }
        }
        // The freshest relayed keyed records, as many as this instance's own may be.
        if keyed.len() > KEYED_PER_MESSAGE {
            keyed.select_nth_unstable(KEYED_PER_MESSAGE - 1);
            keyed.truncate(KEYED_PER_MESSAGE);
        }
        relayed.append(&mut keyed);
        let room = cap - own.len();
        if relayed.len() > room && room > 0 {
            relayed.select_nth_unstable(room - 1);
        }
        relayed.truncate(room);
        relayed.sort_unstable();
        for (_, b, i) in relayed {
            let l = &self.breakers[b];
            if let Some(o) = l.opinions.get(&(i as u32)) {
                own.push(self.relayed_opinion(now, l, i, o));
            }
        }
        Message {
            sender: self.self_id.clone(),
            delay_ms: 0,
            opinions: own,
        }
    }

    /// Whether this instance has nothing to tell but that its breakers are closed and well
    /// ([`records::says_quiet`] of each one's own view). A quiet member of a bus speaks less
    /// often ([`crate::fleet::bus::heartbeat_ms`]).
    pub fn quiet(&self, now_ms: u64) -> bool {
        let now = now_ms.max(self.last_now);
        self.breakers.iter().all(|l| {
            l.view.map_or(true, |v| {
                let flags = Flags {
                    can_probe: false,
                    recovered: l.recovered,
                    forced: v.forced,
                };
                let age = now.saturating_sub(v.since_ms);
                records::says_quiet(v.state, v.failures, v.slow, flags, age, self.cfg.expire_ms)
            })
        })
    }

    /// [`FleetStore::message`] rendered for the wire.
    pub fn render(&self, now_ms: u64) -> String {
        wire::render(&self.message(now_ms))
    }
}
