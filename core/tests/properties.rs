//! Random sequences of requests, outcomes, clock steps (including backwards) and operator
//! actions never break the breaker's invariants.

use circuit_breaker_core::breaker::{
    Admission, Attempt, BreakerConfig, Control, Ending, FailureSet, OwnedBreaker, Ticket,
    Transition,
};
use circuit_breaker_core::snapshot::State;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Step(i64),
    Admit {
        owner: u32,
        rnd: u32,
    },
    Record {
        pick: usize,
        attempt: Attempt,
        rnd: u32,
    },
    Release {
        pick: usize,
    },
    Control(Control),
}

fn attempt() -> impl Strategy<Value = Attempt> {
    let transport = prop_oneof![
        6 => Just(Ending::Response),
        1 => Just(Ending::Error),
        1 => Just(Ending::Timeout),
        1 => Just(Ending::InvalidHeader),
        1 => Just(Ending::Tls),
        1 => Just(Ending::NoVerdict),
    ];
    let status = prop_oneof![
        Just(200u16),
        Just(404),
        Just(429),
        Just(500),
        Just(503),
        0u16..1000
    ];
    (
        transport,
        status,
        proptest::option::of(0u32..100_000),
        0u64..3000,
    )
        .prop_map(|(transport, status, retry_after_s, response_ms)| Attempt {
            ending: transport,
            status,
            retry_after_s,
            response_ms,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop_oneof![-5_000i64..=5_000, 0i64..=130_000, Just(i64::MIN), Just(i64::MAX)]
            .prop_map(Op::Step),
        6 => (0u32..4, any::<u32>()).prop_map(|(owner, rnd)| Op::Admit { owner, rnd }),
        6 => (any::<usize>(), attempt(), any::<u32>())
            .prop_map(|(pick, attempt, rnd)| Op::Record { pick, attempt, rnd }),
        1 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        1 => prop_oneof![
            Just(Control::ForceOpen),
            Just(Control::ForceClose),
            Just(Control::Reset)
        ]
        .prop_map(Op::Control),
    ]
}

fn config() -> impl Strategy<Value = BreakerConfig> {
    (
        (
            1u32..=12,
            1u32..=10,
            0u32..=10_000,
            0u32..=1000,
            0u32..=10_000,
        ),
        (0u32..=5_000, 0u32..=20_000, 0u32..=10_000, 1u32..=3),
        (0u32..=2_000, 0u32..=1000, any::<bool>(), any::<u128>()),
    )
        .prop_map(|(a, b, c)| BreakerConfig {
            window_s: a.0,
            min_requests: a.1,
            failure_rate: a.2,
            slow_ms: a.3,
            slow_rate: a.4,
            open_ms: b.0,
            max_open_ms: b.0 + b.1,
            jitter: b.2,
            probes: b.3,
            probe_interval_ms: c.0,
            probe_latency_ms: c.1,
            dry_run: c.2,
            failures: if c.3 % 2 == 0 {
                FailureSet::DEFAULT
            } else {
                FailureSet::from_bits(c.3)
            },
        })
}

fn legal(t: &Transition, by_control: bool) -> bool {
    by_control
        || matches!(
            (t.from, t.to),
            (State::Closed, State::Open)
                | (State::Open, State::HalfOpen)
                | (State::HalfOpen, State::Closed)
                | (State::HalfOpen, State::Open)
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold(cfg in config(), start in prop_oneof![Just(0u64), any::<u64>(), 1_700_000_000_000u64..1_800_000_000_000], ops in proptest::collection::vec(op(), 1..300)) {
        let mut b = OwnedBreaker::new(cfg, start);
        let mut now = start;
        // Tickets handed out and not yet finished; a probe ticket marked `true` must be stale.
        let mut held: Vec<(Ticket, bool)> = Vec::new();
        let dead = 3u32;
        for op in ops {
            let before = b.breaker().state();
            let before_view = b.breaker().view(now);
            let (transition, by_control) = match op {
                Op::Step(d) => {
                    now = now.saturating_add_signed(d);
                    (None, false)
                }
                Op::Admit { owner, rnd } => {
                    let d = b.breaker().admit(now, rnd, owner, &|o| o != dead);
                    match d.admission {
                        Admission::Pass { would_reject } => {
                            prop_assert!(!would_reject || cfg.dry_run);
                            held.push((Ticket::Normal, false));
                        }
                        Admission::Probe(t) => {
                            // Every earlier probe ticket is now stale: one probe in flight.
                            for h in held.iter_mut() {
                                if matches!(h.0, Ticket::Probe(_)) {
                                    h.1 = true;
                                }
                            }
                            held.push((t, false));
                        }
                        Admission::Reject { retry_after_ms } => {
                            prop_assert!(!cfg.dry_run);
                            prop_assert!(retry_after_ms >= 1);
                        }
                    }
                    (d.transition, false)
                }
                Op::Record { pick, attempt, rnd } => {
                    if held.is_empty() {
                        (None, false)
                    } else {
                        let (ticket, stale) = held.swap_remove(pick % held.len());
                        let r = b.breaker().record(now, rnd, ticket, &attempt);
                        prop_assert_eq!(r.state, b.breaker().state());
                        if stale {
                            prop_assert!(r.transition.is_none(), "a stale probe decided: {:?}", r.transition);
                            let after = b.breaker().view(now);
                            prop_assert_eq!(after.consecutive_probe_successes, before_view.consecutive_probe_successes);
                            prop_assert_eq!(after.window, before_view.window);
                        }
                        (r.transition, false)
                    }
                }
                Op::Release { pick } => {
                    if !held.is_empty() {
                        let (ticket, _) = held.swap_remove(pick % held.len());
                        b.breaker().release(now, ticket);
                        prop_assert_eq!(b.breaker().state(), before);
                    }
                    (None, false)
                }
                Op::Control(c) => {
                    for h in held.iter_mut() {
                        if matches!(h.0, Ticket::Probe(_)) {
                            h.1 = true;
                        }
                    }
                    (b.breaker().control(now, 0, c), true)
                }
            };
            let after = b.breaker().state();
            match &transition {
                Some(t) => {
                    prop_assert!(legal(t, by_control), "illegal {:?}", t);
                    prop_assert_eq!(t.from, before);
                    prop_assert_eq!(t.to, after);
                    prop_assert!(!t.reason.is_empty());
                }
                None => prop_assert_eq!(before, after),
            }
            let view = b.breaker().view(now);
            for rate in [view.window.failure_rate(), view.window.slow_rate()] {
                prop_assert!((0.0..=1.0).contains(&rate));
            }
            prop_assert!(view.window.failures <= view.window.requests);
            prop_assert!(view.window.slow <= view.window.requests);
            prop_assert!(view.cooldown_ms <= u64::from(cfg.max_open_ms.max(cfg.open_ms)));
            prop_assert!(view.totals.short_circuited >= before_view.totals.short_circuited);
            let running = b.breaker().window(now);
            prop_assert_eq!(running, b.breaker().view(now).window, "running sums = live buckets");
        }
    }
}
