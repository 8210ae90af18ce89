//! Random sequences of requests, outcomes, active probes, clock steps (including backwards),
//! peers' suspicion and hastening, and operator actions never break the breaker's invariants;
//! the lock-free gate always agrees with the locked decision.

use circuit_breaker_core::breaker::judge::{MAX_SOFT_RUN, RELAPSE_CAP};
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
        may_probe: bool,
    },
    ActiveProbe {
        owner: u32,
        rnd: u32,
    },
    Record {
        pick: usize,
        attempt: Attempt,
        rnd: u32,
        may_open: bool,
    },
    Release {
        pick: usize,
    },
    Control(Control),
    /// Peers suspect the origin for this long from now (0: withdraw).
    Suspect(u64),
    Hasten,
    /// What the lock-free gate says this long from now must be what `admit` says.
    Gate {
        ahead: u64,
        rnd: u32,
    },
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
        proptest::option::of(0u8..20),
        0u64..3000,
    )
        .prop_map(
            |(transport, status, retry_after_s, grpc_status, response_ms)| Attempt {
                ending: transport,
                status,
                retry_after_s,
                grpc_status,
                response_ms,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop_oneof![-5_000i64..=5_000, 0i64..=130_000, Just(i64::MIN), Just(i64::MAX)]
            .prop_map(Op::Step),
        6 => (0u32..4, any::<u32>(), prop::bool::weighted(0.9))
            .prop_map(|(owner, rnd, may_probe)| Op::Admit { owner, rnd, may_probe }),
        2 => (0u32..4, any::<u32>()).prop_map(|(owner, rnd)| Op::ActiveProbe { owner, rnd }),
        6 => (any::<usize>(), attempt(), any::<u32>(), prop::bool::weighted(0.9))
            .prop_map(|(pick, attempt, rnd, may_open)| Op::Record { pick, attempt, rnd, may_open }),
        1 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        1 => prop_oneof![
            Just(Control::ForceOpen),
            Just(Control::ForceClose),
            Just(Control::Reset)
        ]
        .prop_map(Op::Control),
        1 => prop_oneof![Just(0u64), 1u64..=60_000].prop_map(Op::Suspect),
        1 => Just(Op::Hasten),
        2 => (0u64..=40_000, any::<u32>()).prop_map(|(ahead, rnd)| Op::Gate { ahead, rnd }),
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
        (
            0u32..=2_000,
            0u32..=1000,
            any::<bool>(),
            any::<u128>(),
            prop_oneof![Just(0u32), 1u32..=5_000],
        ),
        (
            prop_oneof![Just(0u32), 1u32..=20_000],
            0u32..=10_000,
            0u32..=10,
            any::<bool>(),
            any::<bool>(),
            prop_oneof![Just(0u32), 1u32..=20],
        ),
    )
        .prop_map(|(a, b, c, d)| BreakerConfig {
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
            ramp_ms: d.0,
            ramp_start: d.1,
            suspect_min: d.2,
            active: d.3,
            repeat_backoff: d.4,
            consecutive: d.5,
            confirm_ms: c.4,
        })
}

fn legal(t: &Transition, by_control: bool, active: bool) -> bool {
    by_control
        || matches!(
            (t.from, t.to, active),
            (State::Closed, State::Open, _)
                | (State::Open, State::HalfOpen, false)
                | (State::HalfOpen, State::Closed, false)
                | (State::HalfOpen, State::Open, false)
                | (State::Open, State::Closed, true)
        )
}

/// Marks every probe ticket held as stale: a new one was handed out, or the state was reset.
fn stale_all(held: &mut [(Ticket, bool)]) {
    for h in held.iter_mut() {
        if matches!(h.0, Ticket::Probe(_)) {
            h.1 = true;
        }
    }
}

fn same_kind(a: &Admission, b: &Admission) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold(cfg in config(), start in prop_oneof![Just(0u64), any::<u64>(), 1_700_000_000_000u64..1_800_000_000_000], ops in proptest::collection::vec(op(), 1..300)) {
        let mut b = OwnedBreaker::new(cfg, start);
        let mut now = start;
        // The latest clock reading the breaker saw (every op ends with one, `window(now)`).
        let mut seen = start;
        // Tickets handed out and not yet finished; a probe ticket marked `true` must be stale.
        let mut held: Vec<(Ticket, bool)> = Vec::new();
        let dead = 3u32;
        let cap = RELAPSE_CAP * MAX_SOFT_RUN.max(cfg.probes);
        let first_cooldown = if cfg.active { cfg.probe_interval_ms } else { cfg.open_ms };
        for op in ops {
            let before = b.breaker().state();
            let before_view = b.breaker().view(now);
            let forced = before_view.forced.is_some();
            let (transition, by_control) = match op {
                Op::Step(d) => {
                    now = now.saturating_add_signed(d);
                    (None, false)
                }
                Op::Admit { owner, rnd, may_probe } => {
                    let d = b.breaker().admit(now, rnd, owner, &|o| o != dead, may_probe);
                    match d.admission {
                        Admission::Pass { would_reject } => {
                            prop_assert!(!would_reject || cfg.dry_run);
                            held.push((Ticket::Normal, false));
                        }
                        Admission::Probe(t) => {
                            prop_assert!(!cfg.active, "a user request probed with active probes");
                            prop_assert!(may_probe, "probed where another member probes");
                            // Every earlier probe ticket is now stale: one probe in flight.
                            stale_all(&mut held);
                            held.push((t, false));
                        }
                        Admission::Reject { retry_after_ms } => {
                            prop_assert!(!cfg.dry_run);
                            prop_assert!(retry_after_ms >= 1);
                        }
                        Admission::Recovering { retry_after_ms } => {
                            prop_assert!(!cfg.dry_run && !forced && cfg.ramp_ms > 0);
                            prop_assert_eq!(before, State::Closed);
                            prop_assert_eq!(retry_after_ms, 1000);
                        }
                    }
                    if !may_probe {
                        prop_assert!(d.transition.is_none(), "half-opened where another member probes");
                    }
                    (d.transition, false)
                }
                Op::ActiveProbe { owner, rnd } => {
                    if let Some(t) = b.breaker().active_probe(now, rnd, owner, &|o| o != dead) {
                        prop_assert!(cfg.active && !forced);
                        // Open, or closed with a trip asking the probe first (`confirm_ms`).
                        prop_assert!(
                            before == State::Open || before == State::Closed && cfg.confirm_ms > 0,
                            "an active probe while {:?}", before
                        );
                        stale_all(&mut held);
                        held.push((t, false));
                    }
                    (None, false)
                }
                Op::Record { pick, attempt, rnd, may_open } => {
                    if held.is_empty() {
                        (None, false)
                    } else {
                        let (ticket, stale) = held.swap_remove(pick % held.len());
                        let r = b.breaker().record(now, rnd, ticket, &attempt, may_open);
                        prop_assert_eq!(r.state, b.breaker().state());
                        if stale {
                            prop_assert!(r.transition.is_none(), "a stale probe decided: {:?}", r.transition);
                            let after = b.breaker().view(now);
                            prop_assert_eq!(after.consecutive_probe_successes, before_view.consecutive_probe_successes);
                            prop_assert_eq!(after.window, before_view.window);
                        }
                        if let Some(t) = &r.transition {
                            if t.from == State::Closed {
                                prop_assert!(may_open, "opened under the max_eject cap");
                                // Never without local evidence; with the full count unless suspected.
                                let v = b.breaker().view(now);
                                prop_assert!(v.window.failures + v.window.slow >= 1, "{:?}", v.window);
                                let in_a_row = t.reason.contains("gateway failures in a row");
                                if in_a_row {
                                    prop_assert!(cfg.consecutive > 0, "{}", t.reason);
                                } else if v.suspect_until_ms.is_none() {
                                    prop_assert!(v.window.requests >= u64::from(cfg.min_requests));
                                }
                                prop_assert!(v.probes_needed >= cfg.probes.max(1));
                            }
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
                    stale_all(&mut held);
                    (b.breaker().control(now, 0, c), true)
                }
                Op::Suspect(ms) => {
                    b.breaker().suspect(if ms == 0 { 0 } else { now.saturating_add(ms) });
                    (None, false)
                }
                Op::Hasten => {
                    let moved = b.breaker().hasten(now);
                    prop_assert!(!moved || (!forced && before != State::Closed));
                    if moved && before == State::Open {
                        let v = b.breaker().view(now);
                        // Due now, or one spacing away while an active probe is in flight.
                        let slack = if cfg.active { u64::from(cfg.probe_interval_ms) } else { 0 };
                        prop_assert!(v.retry_at_ms.is_some_and(|t| t <= now.max(seen).saturating_add(slack)));
                    }
                    (None, false)
                }
                Op::Gate { ahead, rnd } => {
                    // At or after the latest clock reading (the gate is as of it).
                    let at = seen.saturating_add(ahead);
                    let gate = b.breaker().gate();
                    if let Some(lock_free) = gate.admit(at, rnd) {
                        let mut copy = b.clone();
                        let locked = copy.breaker().admit(at, rnd, 1, &|_| true, true);
                        prop_assert!(locked.transition.is_none(), "{:?} {:?}", gate, locked);
                        prop_assert!(same_kind(&lock_free, &locked.admission), "{:?}: {:?} vs {:?}", gate, lock_free, locked.admission);
                        if let (Admission::Reject { retry_after_ms: x }, Admission::Reject { retry_after_ms: y }) = (lock_free, locked.admission) {
                            prop_assert_eq!(x, y, "{:?}", gate);
                        }
                    }
                    (None, false)
                }
            };
            let after = b.breaker().state();
            match &transition {
                Some(t) => {
                    prop_assert!(legal(t, by_control, cfg.active), "illegal {:?}", t);
                    prop_assert_eq!(t.from, before);
                    prop_assert_eq!(t.to, after);
                    prop_assert!(!t.reason.is_empty());
                }
                None => prop_assert_eq!(before, after),
            }
            if cfg.active {
                prop_assert!(after != State::HalfOpen, "active probes never half-open");
            }
            let view = b.breaker().view(now);
            // The episode: from leaving closed to coming back, whatever reopens it between.
            prop_assert_eq!(view.episode_ms.is_some(), after != State::Closed);
            if let Some(e) = view.episode_ms {
                prop_assert!(e <= view.since_ms);
                match before_view.episode_ms {
                    None => prop_assert_eq!(e, view.since_ms, "a new episode begins with its state"),
                    // Kept, but for one that outlasted the 49 days the header can hold.
                    Some(was) if view.since_ms - was < u64::from(u32::MAX) => prop_assert_eq!(e, was),
                    Some(_) => {}
                }
            }
            for rate in [view.window.failure_rate(), view.window.slow_rate()] {
                prop_assert!((0.0..=1.0).contains(&rate));
            }
            prop_assert!(view.window.failures <= view.window.requests);
            prop_assert!(view.window.slow <= view.window.requests);
            prop_assert!(view.cooldown_ms <= u64::from(cfg.max_open_ms.max(cfg.open_ms).max(first_cooldown)));
            prop_assert!(view.totals.short_circuited >= before_view.totals.short_circuited);
            prop_assert!(view.totals.ramp_shed >= before_view.totals.ramp_shed);
            prop_assert!(view.ramp_share >= cfg.ramp_start.min(10_000) && view.ramp_share <= 10_000);
            if view.state != State::Closed || view.forced.is_some() || cfg.ramp_ms == 0 {
                prop_assert_eq!(view.ramp_share, 10_000);
            }
            if view.state == State::Closed || view.forced.is_some() {
                prop_assert_eq!(view.probes_needed, 0);
            } else {
                prop_assert!(view.probes_needed >= cfg.probes.max(1) && view.probes_needed <= cap, "{}", view.probes_needed);
            }
            let running = b.breaker().window(now);
            seen = seen.max(now);
            prop_assert_eq!(running, b.breaker().view(now).window, "running sums = live buckets");
        }
    }
}
