//! Where a worker counts a session that waits for a first byte ([`super::Wheel`]): one lane
//! per upstream with a breaker, and one more per server of each upstream whose servers have
//! breakers of their own (a pool that ejects), so that the silence of a session is the
//! server's it went to as well as its upstream's. A session starts in its upstream's lane
//! ([`super::Plain::new`]) and moves to its server's once its server is known, before it
//! first waits ([`super::Plain::place`]).

use super::MAX_UPSTREAMS;

/// The lanes of a configuration's upstreams and their servers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lanes {
    /// Each upstream's first server lane, and how many servers it has lanes for.
    servers: Vec<(u16, u16)>,
    /// The owner of each server lane, from the upstreams' count on: (upstream, server).
    owners: Vec<(u16, u16)>,
}

impl Lanes {
    /// Lanes for upstreams whose pools have `servers[i]` servers (0: no pool). Upstreams past
    /// [`MAX_UPSTREAMS`] lanes in all keep their own lane only: their servers' silence is then
    /// not told apart.
    pub fn new(servers: &[usize]) -> Lanes {
        let upstreams = servers.len();
        let mut next = upstreams;
        let mut out = Lanes::default();
        for (u, &n) in servers.iter().enumerate() {
            let fits = n > 0 && next + n <= MAX_UPSTREAMS && u < MAX_UPSTREAMS;
            if !fits {
                out.servers.push((0, 0));
                continue;
            }
            out.servers.push((next as u16, n as u16));
            for s in 0..n {
                out.owners.push((u as u16, s as u16));
            }
            next += n;
        }
        out
    }

    /// The lane of upstream `upstream`'s server `server`, if it has one.
    #[inline]
    pub fn server(&self, upstream: u16, server: u16) -> Option<u16> {
        let &(first, n) = self.servers.get(usize::from(upstream))?;
        (server < n).then(|| first + server)
    }

    /// Whether any server has a lane (some upstream ejects).
    #[inline]
    pub fn has_servers(&self) -> bool {
        !self.owners.is_empty()
    }

    /// Whose lane `lane` is: its upstream, and its server for a server's lane.
    #[inline]
    pub fn owner(&self, lane: u16) -> (u16, Option<u16>) {
        if self.owners.is_empty() {
            return (lane, None);
        }
        match usize::from(lane).checked_sub(self.servers.len()) {
            None => (lane, None),
            Some(i) => match self.owners.get(i) {
                Some(&(u, s)) => (u, Some(s)),
                None => (lane, None),
            },
        }
    }

    /// Every lane's bound, given each upstream's (a server's is its upstream's).
    pub fn bounds(&self, upstreams: &[u32]) -> Vec<u32> {
        let mut out: Vec<u32> = upstreams.to_vec();
        out.resize(self.servers.len(), 0);
        out.extend(self.owners.iter().map(|&(u, _)| out_of(upstreams, u)));
        out
    }
}

fn out_of(bounds: &[u32], upstream: u16) -> u32 {
    bounds.get(usize::from(upstream)).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn upstreams_keep_their_index_and_servers_follow() {
        let s = Lanes::new(&[0, 3, 0, 2]);
        assert_eq!(s.owner(0), (0, None));
        assert_eq!(s.owner(3), (3, None));
        assert_eq!(s.server(0, 0), None, "no pool");
        assert_eq!(s.server(1, 0), Some(4));
        assert_eq!(s.server(1, 2), Some(6));
        assert_eq!(s.server(1, 3), None, "past its servers");
        assert_eq!(s.server(3, 1), Some(8));
        assert_eq!(s.owner(4), (1, Some(0)));
        assert_eq!(s.owner(8), (3, Some(1)));
        assert_eq!(s.owner(9), (9, None), "no such lane");
        assert_eq!(
            s.bounds(&[100, 200, 300, 400]),
            [100, 200, 300, 400, 200, 200, 200, 400, 400]
        );
    }

    #[test]
    fn past_the_word_s_reach_an_upstream_keeps_its_own_lane() {
        let s = Lanes::new(&[MAX_UPSTREAMS - 3, 5]);
        assert!(s.server(0, 0).is_some());
        assert_eq!(s.server(1, 0), None, "would pass MAX_UPSTREAMS");
    }

    proptest! {
        #[test]
        fn every_server_has_a_lane_of_its_own(pools in proptest::collection::vec(0usize..6, 0..20)) {
            let s = Lanes::new(&pools);
            let mut seen = std::collections::HashSet::new();
            for (u, &n) in pools.iter().enumerate() {
                prop_assert_eq!(s.owner(u as u16), (u as u16, None));
                for srv in 0..n {
                    let lane = s.server(u as u16, srv as u16).unwrap();
                    prop_assert!(usize::from(lane) >= pools.len());
                    prop_assert!(seen.insert(lane));
                    prop_assert_eq!(s.owner(lane), (u as u16, Some(srv as u16)));
                }
            }
            let bounds: Vec<u32> = (0..pools.len() as u32).collect();
            prop_assert_eq!(s.bounds(&bounds).len(), pools.len() + seen.len());
        }
    }
}
