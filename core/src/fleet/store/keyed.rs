//! Keyed breakers in the exchange (`circuit_breaker_key`): breakers the configuration does
//! not list, made and dropped at run time, one per value of a key.
//!
//! A family (the key as written, `$host`) is known from the configuration with the
//! fingerprint and policy every breaker of it shares. Its breakers enter the store two ways,
//! at most [`MAX_KEYED`] at once:
//!
//! - **Local**: the shell adds a key whose breaker here is open, forced or failing
//!   ([`FleetStore::add_keyed`] with its view); at the bound, a key only peers spoke of
//!   makes room for it, else one whose breaker here says less (a failing one for an open
//!   one).
//! - **From a peer**: a record about a key of a known family, with the family's fingerprint,
//!   that tells of trouble (open, failures or slow calls) and names the key in its written
//!   form exactly (one key, one name) adds the key ([`FleetStore::merge`]), so that its
//!   opinion is at hand when the key fails here. At the bound the record is dropped and
//!   counted (`keyed_left_out`): a member can fill the store with keys, never push out the
//!   keys this instance judges. A record of another fingerprint is counted per family
//!   ([`FleetStore::families`]), so that divergent configurations show.
//!
//! A keyed breaker is retired ([`FleetStore::retire_idle`]) once nothing about it is worth
//! saying — its breaker here gone, or closed, quiet and past an expiry since it closed — and
//! no peer's opinion of it is fresh; its index goes to the next key. A message carries at
//! most [`KEYED_PER_MESSAGE`] keyed records of this instance's own, open ones first, and as
//! many relayed ones, so that keys cannot crowd out the configuration's breakers.

use super::*;

/// Keyed breakers the store holds at once.
pub const MAX_KEYED: usize = 1024;
/// Keyed records of this instance's own in one message, and relayed ones.
pub const KEYED_PER_MESSAGE: usize = 256;

impl FleetStore {
    /// Adds the family of keyed breakers `name` (the key as written): every breaker of it
    /// has this fingerprint and policy.
    pub fn add_family(
        &mut self,
        name: &str,
        fingerprint: u64,
        policy: Policy,
    ) -> Result<(), FleetError> {
        valid_name(name)?;
        self.families
            .insert(name.to_string(), (fingerprint, policy));
        Ok(())
    }

    /// The keyed breaker of `family` for `key` (as the status page writes it): found, or
    /// added. `local`: this instance's own view of it, when it has the key (at the bound, a
    /// key only peers spoke of makes room for it, else one whose breaker here says less: a
    /// closed one for an open one). `None` for an unknown family, a name that is not a key's
    /// written form or is too long for the wire, or no room.
    pub fn add_keyed(
        &mut self,
        family: &str,
        key: &str,
        local: Option<&LocalView>,
    ) -> Option<usize> {
        if let Some(i) = self.breaker_index(family, key) {
            return Some(i);
        }
        let &(fingerprint, policy) = self.families.get(family)?;
        if valid_name(key).is_err() || !canonical(key) {
            return None;
        }
        if self.keyed >= MAX_KEYED {
            let victim = local.and_then(|v| self.victim(weight(Some(v))))?;
            self.retire(victim);
        }
        let i = self.insert(family, key, fingerprint, policy, true).ok()?;
        self.keyed += 1;
        Some(i)
    }

    /// The keyed breaker that makes room for one of `weight`: one only peers spoke of (the
    /// one whose latest opinion is oldest), else the lightest of those this instance has,
    /// if lighter.
    fn victim(&self, weight: u8) -> Option<usize> {
        self.breakers
            .iter()
            .enumerate()
            .filter(|(_, l)| l.keyed && !l.retired)
            .map(|(i, l)| {
                self.step();
                let newest = l.opinions.values().map(|o| o.observed_at_ms).max();
                ((l.view.is_some(), self::weight(l.view.as_ref()), newest), i)
            })
            .filter(|&((local, w, _), _)| !local || w < weight)
            .min()
            .map(|(_, i)| i)
    }

    /// A record of a key this store does not hold: its breaker, added when the record's
    /// family is known here with the same fingerprint and the record tells of trouble.
    pub(super) fn keyed_from_peer(&mut self, o: &WireOpinion) -> Option<usize> {
        let &(fingerprint, _) = self.families.get(&o.upstream)?;
        if fingerprint != o.fingerprint {
            *self.disagreeing.entry(o.upstream.clone()).or_default() += 1;
            return None;
        }
        let trouble = o.state != State::Closed || o.failures > 0 || o.slow > 0;
        if !trouble || o.flags.forced {
            return None;
        }
        if self.keyed >= MAX_KEYED {
            self.counters.keyed_left_out += 1;
            return None;
        }
        let i = self.add_keyed(&o.upstream, &o.route, None)?;
        self.added.push(i);
        Some(i)
    }

    /// The families, with their fingerprints and the records of their keys refused for
    /// another fingerprint (a peer whose `circuit_breaker_key` has other parameters), by name.
    pub fn families(&self) -> Vec<(&str, u64, u64)> {
        let mut out: Vec<(&str, u64, u64)> = self
            .families
            .iter()
            .map(|(name, &(fp, _))| {
                let d = self.disagreeing.get(name).copied().unwrap_or(0);
                (name.as_str(), fp, d)
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// The names of the breaker at `i` (a retired keyed breaker's are empty).
    pub fn names_of(&self, i: usize) -> Option<(&str, &str)> {
        self.breakers
            .get(i)
            .map(|l| (l.upstream.as_str(), l.route.as_str()))
    }

    /// Keyed breakers a peer's record added since the last call: the shell looks for them in
    /// the zone.
    pub fn take_added(&mut self) -> Vec<usize> {
        core::mem::take(&mut self.added)
    }

    /// Whether the breaker at `i` is a keyed one still held.
    pub fn is_keyed(&self, i: usize) -> bool {
        self.breakers.get(i).is_some_and(|l| l.keyed && !l.retired)
    }

    /// Keyed breakers held.
    pub fn keyed(&self) -> usize {
        self.keyed
    }

    /// The keyed breaker at `i` is gone from the zone here (its key went compact, or made
    /// room for another): only peers' opinions of it remain.
    pub fn forget_local(&mut self, i: usize) {
        if let Some(l) = self.breakers.get_mut(i).filter(|l| l.keyed) {
            l.view = None;
        }
    }

    /// Retires the keyed breakers nothing is worth saying about at `now_ms` (see the module's
    /// documentation); returns their indexes, which the next keyed breakers may take.
    pub fn retire_idle(&mut self, now_ms: u64) -> Vec<usize> {
        let now = self.clock(now_ms);
        let exp = self.cfg.expire_ms;
        let idle: Vec<usize> = self
            .breakers
            .iter()
            .enumerate()
            .filter(|(_, l)| {
                self.step();
                let quiet = l.view.map_or(true, |v| {
                    v.state == State::Closed
                        && !v.forced
                        && v.failures == 0
                        && v.slow == 0
                        && now.saturating_sub(v.since_ms) > exp
                });
                l.keyed && !l.retired && quiet && !l.opinions.values().any(|o| o.fresh(now, exp))
            })
            .map(|(i, _)| i)
            .collect();
        for &i in &idle {
            self.retire(i);
        }
        idle
    }

    fn retire(&mut self, i: usize) {
        let Some(l) = self.breakers.get_mut(i).filter(|l| l.keyed && !l.retired) else {
            return;
        };
        if let Some(routes) = self.breaker_index.get_mut(&l.upstream) {
            routes.remove(&l.route);
            if routes.is_empty() {
                self.breaker_index.remove(&l.upstream);
            }
        }
        l.upstream.clear();
        l.route.clear();
        l.view = None;
        l.opinions.clear();
        l.retired = true;
        self.free.push(i);
        self.keyed -= 1;
    }

    /// Keeps at most [`KEYED_PER_MESSAGE`] keyed records in `own` (already in the order to
    /// keep), leaving the others as they are.
    pub(super) fn bound_keyed(&self, own: Vec<(bool, WireOpinion)>) -> Vec<WireOpinion> {
        let mut keyed = 0;
        own.into_iter()
            .filter(|(is_keyed, _)| {
                let keep = !is_keyed || keyed < KEYED_PER_MESSAGE;
                keyed += usize::from(*is_keyed);
                keep
            })
            .map(|(_, o)| o)
            .collect()
    }
}

/// How much a keyed breaker's view says, for making room: open or forced, then failing, then
/// quiet.
pub fn weight(v: Option<&LocalView>) -> u8 {
    match v {
        Some(v) if v.state != State::Closed || v.forced => 2,
        Some(v) if v.failures > 0 || v.slow > 0 => 1,
        _ => 0,
    }
}

/// Whether `key` is a key's written form exactly (`name::shown` of what it stands for): a
/// peer may not name one key two ways, which would make two entries of one breaker.
fn canonical(key: &str) -> bool {
    crate::keyed::name::from_shown(key).is_some_and(|b| crate::keyed::name::shown(&b) == key)
}
