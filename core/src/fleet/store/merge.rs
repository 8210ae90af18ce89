//! Taking peers' answers in: authentication, merge, expiry and the per-peer counters.

use std::collections::hash_map::Entry;

use super::*;

impl FleetStore {
    /// A pull from `peer` failed before any message (refused, timed out, bad status).
    pub fn peer_failed(&mut self, now_ms: u64, peer: usize) {
        let now = self.clock(now_ms);
        if let Some(p) = self.peers.get_mut(peer) {
            p.counters.failures += 1;
            p.counters.last_error_ms = Some(now);
        }
    }

    /// Parses and merges the message pulled from `peer`. A message that does not parse, or
    /// that another instance sent, changes nothing but the peer's `parse_errors`.
    pub fn receive(
        &mut self,
        now_ms: u64,
        peer: usize,
        body: &[u8],
    ) -> Result<Received, ParseError> {
        let now = self.clock(now_ms);
        let parsed = wire::parse(body).and_then(|m| match self.peers.get(peer) {
            Some(p) if p.id == m.sender => Ok(m),
            _ => Err(ParseError {
                line: 1,
                kind: ErrorKind::Sender,
            }),
        });
        match parsed {
            Ok(m) => {
                let got = self.merge(now, &m);
                let p = &mut self.peers[peer];
                p.counters.exchanges += 1;
                p.counters.last_exchange_ms = Some(now);
                p.auth_told = false;
                p.tls_told = false;
                Ok(got)
            }
            Err(e) => {
                if let Some(p) = self.peers.get_mut(peer) {
                    p.counters.parse_errors += 1;
                    p.counters.last_error_ms = Some(now);
                }
                Err(e)
            }
        }
    }

    /// A message of bus member `peer` whose seal and freshness were checked
    /// ([`crate::fleet::bus`]): merged as [`FleetStore::receive`] merges an answer.
    ///
    /// `lasts_ms` is how long the sender's quiet opinions stay fresh when it says it speaks
    /// less often than each interval (a quiet member on a bus, [`crate::fleet::bus::lasts_ms`]);
    /// 0 for the fleet's expiry. An opinion that is not quiet expires with the fleet's expiry
    /// whatever the sender says.
    pub fn take_message(
        &mut self,
        now_ms: u64,
        peer: usize,
        m: &Message,
        lasts_ms: u64,
    ) -> Result<Received, ParseError> {
        let now = self.clock(now_ms);
        match self.peers.get(peer) {
            Some(p) if p.live && p.id == m.sender => {}
            _ => {
                return Err(ParseError {
                    line: 1,
                    kind: ErrorKind::Sender,
                })
            }
        }
        let got = self.merge_lasting(now, m, lasts_ms);
        let p = &mut self.peers[peer];
        p.lasts_ms = lasts_ms;
        p.counters.exchanges += 1;
        p.counters.last_exchange_ms = Some(now);
        Ok(got)
    }

    /// The answer to a pull from `peer` made with `nonce`: verified under `key` first (see
    /// [`crate::fleet::auth`]), then parsed and merged as [`FleetStore::receive`] does. An answer
    /// that does not verify changes nothing but the peer's `auth_failures`.
    pub fn receive_sealed(
        &mut self,
        now_ms: u64,
        peer: usize,
        key: &FleetKey,
        nonce: &Nonce,
        answer: &[u8],
    ) -> Result<Received, Refused> {
        match key.open(nonce, answer) {
            Ok(body) => self.receive(now_ms, peer, body).map_err(Refused::Parse),
            Err(error) => Err(Refused::Auth {
                error,
                first: self.auth_failed(now_ms, peer),
            }),
        }
    }

    /// An answer of `peer` failed authentication. Returns whether it is the first since the
    /// peer's last good exchange (the one to log).
    pub fn auth_failed(&mut self, now_ms: u64, peer: usize) -> bool {
        let now = self.clock(now_ms);
        let Some(p) = self.peers.get_mut(peer) else {
            return false;
        };
        p.counters.auth_failures += 1;
        p.counters.last_error_ms = Some(now);
        !core::mem::replace(&mut p.auth_told, true)
    }

    /// A pull from `peer` failed at TLS (handshake or certificate). Returns whether it is the
    /// first since the peer's last good exchange (the one to log).
    pub fn tls_failed(&mut self, now_ms: u64, peer: usize) -> bool {
        let now = self.clock(now_ms);
        let Some(p) = self.peers.get_mut(peer) else {
            return false;
        };
        p.counters.tls_failures += 1;
        p.counters.last_error_ms = Some(now);
        !core::mem::replace(&mut p.tls_told, true)
    }

    /// `peer` sent an authenticated poke (it asks to be pulled now).
    pub fn poked(&mut self, peer: usize) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.counters.pokes += 1;
        }
    }

    /// The index of the peer called `id`.
    pub fn peer_index(&self, id: &str) -> Option<usize> {
        self.peer_index.get(id).copied()
    }

    /// Merges a parsed message (whoever sent it): each record replaces the stored opinion of
    /// its (origin, breaker) when it is newer. Records about this instance, from unknown
    /// origins, about unknown breakers or older than the expiry are dropped; one about a key
    /// of a known family adds its keyed breaker when it tells of trouble ([`keyed`]).
    ///
    /// Linear: each record is one step, and each breaker whose opinions changed has its fleet
    /// round settled once, after the last record, whatever the number of records about it.
    /// A parsed message repeats no (origin, breaker) ([`ErrorKind::Duplicate`]); in one built
    /// by hand that does, the records are merged in turn, the newest winning as always.
    pub fn merge(&mut self, now_ms: u64, m: &Message) -> Received {
        self.merge_lasting(now_ms, m, 0)
    }

    fn merge_lasting(&mut self, now_ms: u64, m: &Message, lasts_ms: u64) -> Received {
        let now = self.clock(now_ms);
        let mut got = Received::default();
        let mut touched = Vec::new();
        // The breakers the sender's own records named (on a bus).
        let mut said: Vec<bool> = Vec::new();
        for o in &m.opinions {
            self.step();
            if o.origin == self.self_id {
                got.own += 1;
                continue;
            }
            // On a bus each member speaks for itself alone.
            let origin = self
                .peer_index
                .get(&o.origin)
                .copied()
                .filter(|_| !self.bus || o.origin == m.sender);
            let Some(origin) = origin else {
                self.counters.unknown_origin += 1;
                got.dropped += 1;
                continue;
            };
            let known = self.breaker_index(&o.upstream, &o.route);
            if known.is_none() && !self.families.contains_key(&o.upstream) {
                self.counters.unknown_breaker += 1;
                got.dropped += 1;
                continue;
            }
            // Parsed numbers are at most 10^12, so these sums cannot overflow; saturating
            // anyway, for messages built by hand.
            let ago = |ms: u64| now.saturating_sub(m.delay_ms.saturating_add(ms));
            if m.delay_ms.saturating_add(o.age_ms) > self.cfg.expire_ms {
                self.counters.stale += 1;
                got.dropped += 1;
                continue;
            }
            // A key of a family this instance has: kept when it tells of trouble.
            let Some(b) = known.or_else(|| self.keyed_from_peer(o)) else {
                self.counters.unknown_breaker += 1;
                got.dropped += 1;
                continue;
            };
            let mut new = Opinion {
                observed_at_ms: ago(o.age_ms),
                fingerprint: o.fingerprint,
                since_ms: ago(o.since_ms),
                requests: o.requests,
                failures: o.failures.min(o.requests),
                slow: o.slow.min(o.requests),
                probe_at_ms: match (o.round, o.probe_ms) {
                    (0, _) | (_, None) => 0,
                    (_, Some(p)) => ago(p),
                },
                round: if o.probe_ms.is_some() { o.round } else { 0 },
                state: o.state.code(),
                flags: o.flags.bits(),
                lasts_ms: 0,
            };
            if new.quiet(now, self.cfg.expire_ms) {
                new.lasts_ms = lasts_ms;
            }
            if said.len() <= b {
                said.resize(b + 1, false);
            }
            said[b] = true;
            let l = &mut self.breakers[b];
            match l.opinions.entry(origin as u32) {
                Entry::Occupied(old) if *old.get() >= new => {
                    got.known += 1;
                    continue;
                }
                Entry::Occupied(mut old) => {
                    if new.tells_more_than(old.get(), now, self.cfg.expire_ms) {
                        got.changed += 1;
                    }
                    old.insert(new);
                }
                Entry::Vacant(entry) => {
                    got.changed += 1;
                    entry.insert(new);
                }
            }
            got.merged += 1;
            if !core::mem::replace(&mut l.touched, true) {
                touched.push(b);
            }
        }
        for b in touched {
            self.breakers[b].touched = false;
            self.settle_round(now, b);
        }
        // On a bus a message is its sender's whole word: an opinion of it that this one did
        // not renew (a breaker that lost its traffic, or a record the message had no room
        // for) lasts no longer than the message's own word, so that a quiet period said
        // before does not keep it. One step per breaker.
        if let Some(&p) = self.peer_index.get(&m.sender).filter(|_| self.bus) {
            let looked = self.breakers.len() as u64;
            self.work.set(self.work.get().wrapping_add(looked));
            for (b, l) in self.breakers.iter_mut().enumerate() {
                if said.get(b).copied().unwrap_or(false) {
                    continue;
                }
                if let Some(o) = l.opinions.get_mut(&(p as u32)) {
                    o.lasts_ms = o.lasts_ms.min(lasts_ms);
                }
            }
        }
        got
    }

    /// Forgets opinions older than the expiry. Answers ignore them anyway; this returns
    /// their memory. Call it once per interval.
    pub fn expire(&mut self, now_ms: u64) {
        let now = self.clock(now_ms);
        let exp = self.cfg.expire_ms;
        let mut looked = 0u64;
        for l in &mut self.breakers {
            looked += l.opinions.len() as u64;
            l.opinions.retain(|_, o| o.fresh(now, exp));
        }
        self.work.set(self.work.get().wrapping_add(looked));
    }
}
