//! A pool of servers, each with its own breaker, under random traffic, probes and clock
//! steps: never more servers out than the cap allows, the count of servers out always
//! matches their breakers, a server leaves only on the attempt that crosses its rate and
//! comes back only by good probes, no probe before its cooldown or two at once, and each
//! ejection's cooldown is the first one or twice the last.

use circuit_breaker_core::breaker::{Attempt, BreakerConfig, OwnedBreaker, Ticket};
use circuit_breaker_core::directive::EjectSpec;
use circuit_breaker_core::eject::{self, claim_probe, is_out, max_ejected, Move, Pool};
use circuit_breaker_core::snapshot::State;
use proptest::prelude::*;

const T0: u64 = 1_764_484_800_000;

#[derive(Clone, Debug)]
enum Op {
    Step(u64),
    /// An attempt the balancer sent to a server in the pool.
    Attempt {
        server: usize,
        good: bool,
    },
    /// A request asks to probe a server; if it gets the ticket, the probe ends `good` or not.
    Probe {
        server: usize,
        good: bool,
    },
}

fn op(servers: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (1u64..4_000).prop_map(Op::Step),
        8 => (0..servers, prop::bool::weighted(0.45))
            .prop_map(|(server, good)| Op::Attempt { server, good }),
        2 => (0..servers, prop::bool::ANY).prop_map(|(server, good)| Op::Probe { server, good }),
    ]
}

fn case() -> impl Strategy<Value = (usize, u32, u32, Vec<Op>)> {
    (2usize..7, 1u32..=10_000, 2u32..12).prop_flat_map(|(n, share, min)| {
        (
            Just(n),
            Just(share),
            Just(min),
            prop::collection::vec(op(n), 1..400),
        )
    })
}

struct Server {
    b: OwnedBreaker,
    /// The ticket of the probe in flight, if any.
    probing: Option<Ticket>,
    /// Cooldown of the last ejection, and when the server last returned.
    last_cooldown: Option<u64>,
    returned_at: Option<u64>,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_pool_keeps_its_rules((n, share, min, ops) in case()) {
        let spec = EjectSpec {
            min_requests: min,
            time_ms: 2_000,
            max_time_ms: 16_000,
            ..EjectSpec::default()
        };
        let upstream = BreakerConfig { jitter: 0, ..BreakerConfig::default() };
        let cfg = eject::server_config(&upstream, &spec);
        let mut servers: Vec<Server> = (0..n)
            .map(|_| Server {
                b: OwnedBreaker::new(cfg, T0),
                probing: None,
                last_cooldown: None,
                returned_at: None,
            })
            .collect();
        let mut pool = Pool { out: 0, max: max_ejected(n, share) };
        let mut now = T0;
        let alive = |_| true;
        for op in ops {
            match op {
                Op::Step(ms) => now += ms,
                Op::Attempt { server, good } => {
                    let s = &mut servers[server];
                    if is_out(s.b.breaker().state()) {
                        continue; // the balancer skips it
                    }
                    let a = Attempt::http(if good { 200 } else { 500 }, 5);
                    let before = s.b.breaker().window(now);
                    let (r, m) = eject::record(&mut s.b.breaker(), &mut pool, now, 0, Ticket::Normal, &a);
                    match m {
                        Some(Move::Ejected(t)) => {
                            // On the attempt that makes the window reach the rate with at
                            // least min_requests in it (a good one may, by adding the
                            // request that was missing).
                            let w = s.b.breaker().window(now);
                            prop_assert!(t.reason.starts_with("failure rate"), "{}", t.reason);
                            prop_assert!(w.requests == before.requests + 1 && w.requests >= u64::from(min));
                            prop_assert!(w.failures * 10_000 >= u64::from(cfg.failure_rate) * w.requests);
                            let cooldown = s.b.breaker().view(now).cooldown_ms;
                            let expected = match (s.last_cooldown, s.returned_at) {
                                (Some(last), Some(back)) if now - back < u64::from(cfg.max_open_ms) =>
                                    (last * 2).min(u64::from(cfg.max_open_ms)),
                                _ => u64::from(cfg.open_ms),
                            };
                            prop_assert_eq!(cooldown, expected);
                            s.last_cooldown = Some(cooldown);
                        }
                        None => prop_assert_eq!(r.state, State::Closed),
                        Some(other) => prop_assert!(false, "unexpected move {:?}", other),
                    }
                }
                Op::Probe { server, good } => {
                    let s = &mut servers[server];
                    let state = s.b.breaker().state();
                    let retry_at = s.b.breaker().view(now).retry_at_ms;
                    let (ticket, _) = claim_probe(&mut s.b.breaker(), now, 0, 1, &alive);
                    let Some(ticket) = ticket else { continue };
                    prop_assert!(is_out(state), "a server in the pool is never probed");
                    prop_assert!(s.probing.is_none(), "one probe at a time");
                    if state == State::Open {
                        prop_assert!(retry_at.is_some_and(|t| t <= now), "not before its cooldown");
                    }
                    s.probing = Some(ticket);
                    let a = Attempt::http(if good { 200 } else { 500 }, 5);
                    let (r, m) = eject::record(&mut s.b.breaker(), &mut pool, now, 0, ticket, &a);
                    s.probing = None;
                    match m {
                        Some(Move::Returned(t)) => {
                            prop_assert!(good);
                            prop_assert!(t.reason.ends_with("good probe") || t.reason.ends_with("good probes"), "{}", t.reason);
                            s.returned_at = Some(now);
                        }
                        Some(Move::Kept(t)) => {
                            prop_assert!(!good);
                            let cooldown = s.b.breaker().view(now).cooldown_ms;
                            let last = s.last_cooldown.unwrap_or(u64::from(cfg.open_ms));
                            prop_assert_eq!(cooldown, (last * 2).min(u64::from(cfg.max_open_ms)));
                            s.last_cooldown = Some(cooldown);
                            prop_assert!(t.reason.starts_with("probe failed"));
                        }
                        // After a brownout (not a hard failure) it takes a run of good
                        // probes; the server stays out meanwhile.
                        None => prop_assert!(good && r.state == State::HalfOpen, "{:?}", r),
                        Some(m) => prop_assert!(false, "unexpected move {:?}", m),
                    }
                }
            }
            let out = servers.iter().filter(|s| is_out(s.b.hdr.state())).count() as u32;
            prop_assert_eq!(pool.out, out, "the count follows the breakers");
            prop_assert!(pool.out <= pool.max, "{} out of {} allowed", pool.out, pool.max);
        }
    }

    #[test]
    fn an_all_bad_pool_loses_only_its_cap(n in 2usize..10, share in 1u32..=10_000) {
        let cfg = eject::server_config(
            &BreakerConfig { jitter: 0, ..BreakerConfig::default() },
            &EjectSpec::default(),
        );
        let mut servers: Vec<OwnedBreaker> = (0..n).map(|_| OwnedBreaker::new(cfg, T0)).collect();
        let mut pool = Pool { out: 0, max: max_ejected(n, share) };
        for round in 0..50 {
            for s in &mut servers {
                if !is_out(s.breaker().state()) {
                    eject::record(&mut s.breaker(), &mut pool, T0 + round, 0, Ticket::Normal,
                        &Attempt::http(503, 5));
                }
            }
        }
        prop_assert_eq!(pool.out, max_ejected(n, share));
        let in_pool = servers.iter().filter(|s| !is_out(s.hdr.state())).count();
        prop_assert_eq!(in_pool, n - pool.max as usize);
        prop_assert!(in_pool >= 1 || share == 10_000);
    }
}
