//! A pool of two to eight servers in front of the upstream's breaker, driven the way the
//! shell drives them (the core's settlement, `settle::settle`): each request picks a server
//! still in the pool when it starts, and ends later, in any order; its outcome goes to its
//! server's breaker first, then — unless
//! the pool explains it (`eject::explain`) — to the upstream's window. With the breaker's
//! defaults and `min_requests` of 5, 20 or 100:
//!
//! - as many bad servers as ejection may take out (`max_ejected`) never open the upstream,
//!   whatever the order requests start and end in, and however much healthy history the pool
//!   has;
//! - when every server fails, the upstream opens, on a bounded number of requests;
//! - a request that finds no live server always counts.

mod common;

use circuit_breaker_core::breaker::{Attempt, BreakerConfig, Classified, Ending, Recorded, Ticket};
use circuit_breaker_core::directive::EjectSpec;
use circuit_breaker_core::eject::{self, max_ejected};
use circuit_breaker_core::settle::{settle, Ended, OnServer};
use circuit_breaker_core::snapshot::State;
use common::ledger::Zone;
use proptest::prelude::*;

const T0: u64 = 1_764_484_800_000;

#[derive(Clone, Debug)]
enum Op {
    /// The clock moves on.
    Step(u64),
    /// A request starts: the balancer picks the `pick`-th server still in the pool.
    Start(usize),
    /// The `pick`-th request in flight ends.
    End(usize),
}

fn ops(n: usize) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            1 => (1u64..300).prop_map(Op::Step),
            6 => (0..n * 8).prop_map(Op::Start),
            6 => (0..64usize).prop_map(Op::End),
        ],
        50..600,
    )
}

/// The upstream's breaker and its pool of servers (the zone), which servers are bad, and the
/// requests in flight (the server each went to).
struct Sim {
    now: u64,
    cfg: BreakerConfig,
    zone: Zone,
    bad: Vec<bool>,
    flying: Vec<usize>,
    opened_at: Option<u64>,
    requests: u64,
}

impl Sim {
    fn new(n: usize, bad: usize, min_requests: u32) -> Sim {
        let cfg = BreakerConfig {
            min_requests,
            ..BreakerConfig::default()
        };
        Sim {
            now: T0,
            cfg,
            zone: Zone::new(cfg, n, T0),
            bad: (0..n).map(|i| i < bad).collect(),
            flying: Vec::new(),
            opened_at: None,
            requests: 0,
        }
    }

    fn in_pool(&mut self) -> Vec<usize> {
        (0..self.bad.len())
            .filter(|&i| !eject::is_out(self.zone.servers[i].breaker().state()))
            .collect()
    }

    /// A request starts; with no server in the pool, nginx finds no live one at once.
    fn start(&mut self, pick: usize) {
        let live = self.in_pool();
        if live.is_empty() {
            self.settle(None, &Attempt::ended(Ending::NoLive, 0));
            return;
        }
        self.flying.push(live[pick % live.len()]);
    }

    fn end(&mut self, pick: usize) {
        if self.flying.is_empty() {
            return;
        }
        let s = self.flying.remove(pick % self.flying.len());
        let a = if self.bad[s] {
            Attempt::http(500, 5)
        } else {
            Attempt::http(200, 5)
        };
        self.settle(Some(s), &a);
    }

    /// What the shell's `peer.free` does under the lock: the core's settlement of the
    /// request's last attempt.
    fn settle(&mut self, server: Option<usize>, a: &Attempt) -> Recorded {
        self.requests += 1;
        let c = Classified::of(*a, &self.cfg);
        let end = Ended {
            attempt: &c,
            upstream: &self.cfg,
            name: "u/-",
            now_ms: self.now,
            ticket: Ticket::Normal,
            server: server.map(|s| OnServer {
                index: s as u16,
                ticket: Ticket::Normal,
                recorded: false,
            }),
            retry: false,
            dry_run: false,
            recorded: false,
            budget: false,
            first_counted: false,
            class: None,
        };
        let r = settle(&mut self.zone, &end, &mut || 0)
            .recorded
            .expect("the upstream's breaker");
        if r.state == State::Open && self.opened_at.is_none() {
            self.opened_at = Some(self.requests);
        }
        r
    }

    fn run(&mut self, ops: &[Op]) {
        for op in ops {
            match *op {
                Op::Step(ms) => self.now += ms,
                Op::Start(pick) => self.start(pick),
                Op::End(pick) => self.end(pick),
            }
        }
        while !self.flying.is_empty() {
            self.end(0);
        }
    }

    /// Healthy history: every server answers `per_server` requests well, one at a time.
    fn warm(&mut self, per_server: usize) {
        for _ in 0..per_server {
            for s in 0..self.bad.len() {
                self.settle(Some(s), &Attempt::http(200, 5));
            }
            self.now += 10;
        }
    }
}

fn min_requests() -> impl Strategy<Value = u32> {
    prop_oneof![Just(5u32), Just(20), Just(100)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn bad_servers_ejection_may_take_out_never_open_the_upstream(
        n in 2usize..=8,
        min in min_requests(),
        history in 0usize..60,
        seed in any::<u64>(),
        ops in ops(8),
    ) {
        let max = max_ejected(n, EjectSpec::default().max_ejected) as usize;
        let bad = 1 + (seed as usize) % max;
        let mut sim = Sim::new(n, bad, min);
        sim.warm(history);
        sim.run(&ops);
        prop_assert_eq!(sim.opened_at, None,
            "{} bad of {} (max {}) opened the upstream: {}", bad, n, max,
            sim.zone.upstream.breaker().view(sim.now).last_transition);
    }

    #[test]
    fn a_pool_that_fails_entirely_opens_the_upstream(
        n in 2usize..=8,
        min in min_requests(),
        concurrency in 1usize..=8,
        picks in prop::collection::vec(0usize..64, 1..16),
    ) {
        let mut sim = Sim::new(n, n, min);
        let max = u64::from(sim.zone.max);
        let c = concurrency as u64;
        // Each server the pool may lose has its `min_requests` (10) of failures explained
        // before it is ejected, and so has every request still in flight to it then; past
        // that, every failure counts.
        let bound = u64::from(min) + max * (10 + c) + c;
        // Up to `concurrency` requests in flight, started and ended in the order the picks
        // give.
        for i in 0..bound as usize * 2 {
            let p = picks[i % picks.len()];
            if sim.flying.len() < concurrency {
                sim.start(p);
            } else {
                sim.end(p);
            }
            sim.now += 5;
        }
        prop_assert!(sim.opened_at.is_some_and(|at| at <= bound),
            "{} servers failing, min_requests={}, {} at once: opened at {:?} (bound {})",
            n, min, concurrency, sim.opened_at, bound);
    }
}

#[test]
fn no_live_server_always_counts() {
    let mut sim = Sim::new(2, 0, 20);
    for _ in 0..9 {
        let r = sim.settle(None, &Attempt::ended(Ending::NoLive, 0));
        assert_eq!(r.state, State::Closed);
    }
    // A gateway failure: the tenth in a row opens it (`consecutive`), before `min_requests`.
    let r = sim.settle(None, &Attempt::ended(Ending::NoLive, 0));
    assert_eq!(r.state, State::Open);
    let t = r.transition.expect("opened");
    assert_eq!(
        t.reason,
        "10 gateway failures in a row, the last: no live upstreams"
    );
}

#[test]
fn one_bad_server_of_two_one_request_at_a_time() {
    // The case: round robin, one at a time, the bad server's tenth failure is the
    // upstream's twentieth request; it ejects the server and leaves the upstream closed.
    let mut sim = Sim::new(2, 1, 20);
    for i in 0..200 {
        sim.start(i % 2);
        sim.end(0);
        sim.now += 10;
    }
    assert_eq!(sim.opened_at, None);
    assert!(eject::is_out(sim.zone.servers[0].breaker().state()));
    let totals = sim.zone.upstream.breaker().view(sim.now).totals;
    assert_eq!(
        totals.explained, 10,
        "the bad server's ten failures, explained"
    );
}
