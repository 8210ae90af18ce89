//! The adaptive limit's invariants under random configurations, flushes and clocks: it stays
//! within its bounds, moves only on a full interval (or on the fewer samples of a slowdown or
//! of a measurement's clean answers, never fewer than `CLEAN_SAMPLES`), and learns a shifted
//! latency floor.

use circuit_breaker_core::limit::{LimitConfig, Limiter, MinChange, Samples, CLEAN_SAMPLES};
use proptest::prelude::*;

fn config() -> impl Strategy<Value = LimitConfig> {
    (
        1u32..=20,
        0u32..=500,
        0u32..=1000,
        0u32..=10_000,
        1u32..=500,
        1u32..=100,
        0u32..=20_000,
    )
        .prop_map(
            |(min, span, initial, tolerance, interval, samples, remeasure)| {
                let max = min + span;
                LimitConfig {
                    limit_min: min,
                    limit_max: max,
                    limit_initial: min + initial % (span + 1),
                    tolerance,
                    interval_ms: interval,
                    samples,
                    remeasure_ms: 10 * interval + remeasure,
                }
            },
        )
}

fn samples() -> impl Strategy<Value = Samples> {
    (
        // Mostly short latencies, with outliers: slowdowns and floors to learn.
        proptest::collection::vec(prop_oneof![3 => 1u64..50, 1 => 0u64..100_000], 0..60),
        0u32..5,
        0u32..3000,
        any::<bool>(),
        prop_oneof![9 => Just(0u32), 1 => 1u32..3],
        // Whom they went to: a client alone, or one of three beside others.
        proptest::option::of(1u16..4),
    )
        .prop_map(|(latencies, drops, inflight, clean, overloads, to)| {
            let mut s = Samples::EMPTY;
            for l in latencies {
                if clean {
                    s.add_clean(l);
                } else {
                    s.add(l);
                }
            }
            for _ in 0..drops {
                s.add_drop();
            }
            for _ in 0..overloads {
                s.add_overload(to);
            }
            s.note_inflight(inflight);
            s
        })
}

#[derive(Clone, Debug)]
enum Op {
    Step(i64),
    Flush(Samples, u32),
    /// A flush whose in-flight is the limit in force: demand meets it.
    Saturated(Samples, u32),
    /// A flush with no more in flight than the limit in force (a pin drained).
    Within(Samples, u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop_oneof![-2_000i64..=2_000, 0i64..=400, Just(i64::MIN), Just(i64::MAX / 4)]
            .prop_map(Op::Step),
        3 => (samples(), any::<u32>()).prop_map(|(s, r)| Op::Flush(s, r)),
        3 => (samples(), any::<u32>()).prop_map(|(s, r)| Op::Saturated(s, r)),
        3 => (samples(), any::<u32>()).prop_map(|(s, r)| Op::Within(s, r)),
    ]
}

fn merged(parts: &[Samples]) -> Samples {
    let mut m = Samples::EMPTY;
    for p in parts {
        m.merge(p);
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn merging_is_associative_and_commutative(a in samples(), b in samples(), c in samples()) {
        let mut ab = a;
        ab.merge(&b);
        let mut ab_c = ab;
        ab_c.merge(&c);
        let mut bc = b;
        bc.merge(&c);
        let mut a_bc = a;
        a_bc.merge(&bc);
        prop_assert_eq!(ab_c, a_bc);
        let mut ba = b;
        ba.merge(&a);
        prop_assert_eq!(ab, ba);
        let mut e = Samples::EMPTY;
        e.merge(&a);
        prop_assert_eq!(e, a);
    }

    #[test]
    fn the_limit_stays_within_bounds_and_moves_only_on_a_full_interval(
        cfg in config(),
        start in prop_oneof![Just(0u64), 1u64..u64::MAX / 2],
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let mut l = Limiter::new(cfg, start);
        let mut now = start;
        // Clock readings as the controller sees them (never backwards), and what it has
        // been given since its last update.
        let mut seen = start;
        let mut interval_start = start;
        let mut pending: Vec<Samples> = Vec::new();
        // Samples given since the last measurement began: clean answers accumulate across
        // its intervals.
        let mut since_start = 0u64;
        for op in ops {
            let before = l.limit();
            let (s, rnd) = match op {
                Op::Step(d) => {
                    now = now.saturating_add_signed(d);
                    continue;
                }
                Op::Flush(s, rnd) => (s, rnd),
                Op::Saturated(mut s, rnd) => {
                    s.note_inflight(before);
                    (s, rnd)
                }
                Op::Within(mut s, rnd) => {
                    s.inflight_max = s.inflight_max.min(before);
                    (s, rnd)
                }
            };
            seen = seen.max(now);
            pending.push(s);
            since_start += u64::from(s.count);
            match l.record(now, &s, rnd) {
                None => {
                    prop_assert_eq!(l.limit(), before, "moved without an update");
                }
                Some(u) if u.overload => {
                    // An overload signal: a cut at once, the interval going on.
                    prop_assert!(s.overloads > 0);
                    prop_assert_eq!(u.from, before);
                    prop_assert_eq!(u.to, l.limit());
                    prop_assert!(u.to <= u.from, "{} -> {}", u.from, u.to);
                }
                Some(u) => {
                    let m = merged(&pending);
                    let full = u.samples == m.count
                        && u.samples >= cfg.samples
                        && seen - interval_start >= u64::from(cfg.interval_ms);
                    // Short of a full interval, only a slowdown starts a measurement, and only
                    // a measurement's clean answers end or halve it.
                    prop_assert!(
                        full || matches!(
                            u.min_change,
                            MinChange::PinStarted | MinChange::PinMeasured | MinChange::PinHalved
                        ),
                        "{:?} on {} of {} samples", u.min_change, u.samples, m.count
                    );
                    prop_assert!(u.samples >= cfg.samples.min(CLEAN_SAMPLES), "{} samples", u.samples);
                    let counted = if full {
                        u.samples == m.count
                    } else {
                        u64::from(u.samples) <= since_start
                    };
                    prop_assert!(counted, "{} samples of {}", u.samples, since_start);
                    if u.min_change == MinChange::PinStarted {
                        since_start = 0;
                    }
                    prop_assert_eq!(u.from, before);
                    prop_assert_eq!(u.to, l.limit());
                    prop_assert!(u.min_latency_ms >= 0.0 && u.sample_ms >= 1.0);
                    pending.clear();
                    interval_start = seen;
                }
            }
            let limit = l.limit();
            prop_assert!(limit >= cfg.limit_min && limit <= cfg.limit_max, "{} out of bounds", limit);
            let v = l.view();
            prop_assert_eq!(v.limit, limit);
            prop_assert!(v.min_latency_ms.is_finite() && v.sample_latency_ms.is_finite());
        }
    }

    #[test]
    fn the_minimum_is_learnt_again_after_a_shift_up_or_down(
        tolerance in 500u32..=5000,
        interval in 20u32..=200,
        needed in 5u32..=40,
        remeasure in 1_000u32..=5_000,
        a in 1u64..=2_000,
        b in 1u64..=2_000,
        saturated in any::<bool>(),
        per_flush in 1u32..=40,
        gap in 5u64..=50,
        seed in any::<u32>(),
    ) {
        let cfg = LimitConfig {
            tolerance,
            interval_ms: interval,
            samples: needed,
            remeasure_ms: remeasure.max(10 * interval),
            ..LimitConfig::default()
        };
        let mut l = Limiter::new(cfg, 0);
        let mut now = 0u64;
        let mut rnd = seed;
        let mut run = |l: &mut Limiter, latency: u64, until: u64, now: &mut u64| {
            while *now < until {
                *now += gap;
                let mut s = Samples::EMPTY;
                for _ in 0..per_flush {
                    s.add(latency);
                }
                s.note_inflight(if saturated { l.limit() } else { 0 });
                rnd = rnd.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
                l.record(*now, &s, rnd);
            }
        };
        // Long enough for an interval (its length, its latency, its samples) times a few,
        // plus a whole jittered re-measurement period.
        let interval_time = |lat: u64| {
            u64::from(interval).max(lat) + gap * u64::from(needed.div_ceil(per_flush)) + gap
        };
        let settle = |lat: u64| u64::from(cfg.remeasure_ms) * 115 / 100 + 12 * interval_time(lat.max(a).max(b));
        run(&mut l, a, settle(a), &mut now);
        prop_assert_eq!(l.min_latency_ms(), a as f64, "learnt the first floor");
        let t = now + settle(b);
        run(&mut l, b, t, &mut now);
        if saturated {
            // Demand reaches the limit in every interval without holding the origin there
            // (a few answers in flight on average): no periodic pin, which would shed on
            // no evidence. A floor that moved beyond the tolerance is learnt, one within it
            // may stay (it is not a queue either way).
            let tol = 1.0 + f64::from(tolerance) / 10_000.0;
            let m = l.min_latency_ms();
            prop_assert!(
                m * tol >= b as f64 && m <= b as f64 * tol,
                "learnt the shifted floor {} → {} within the tolerance: {}", a, b, m
            );
        } else {
            prop_assert_eq!(l.min_latency_ms(), b as f64, "learnt the shifted floor {} → {}", a, b);
        }
        prop_assert!(!l.view().probing || saturated);
    }
}
