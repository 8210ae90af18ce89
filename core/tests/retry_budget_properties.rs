//! The retry budget against a plain log of events: every grant fits the budget of the window
//! it is made in, every denial was needed, a denial is no retry, and seconds that left the
//! window no longer count — whatever the clock does.

use circuit_breaker_core::retry_budget::{RetryBudget, RetryBudgetConfig, WINDOW_S};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Step(i64),
    First(u32),
    Retry,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop_oneof![-3_000i64..=3_000, 0i64..=1_500, 9_000i64..=12_000, Just(i64::MIN), Just(i64::MAX / 4)]
            .prop_map(Op::Step),
        4 => (1u32..=20).prop_map(Op::First),
        5 => Just(Op::Retry),
    ]
}

fn config() -> impl Strategy<Value = RetryBudgetConfig> {
    (0u32..=10_000, 0u32..=20)
        .prop_map(|(budget, min_per_s)| RetryBudgetConfig { budget, min_per_s })
}

/// Events by second, as the budget should see them.
#[derive(Default)]
struct Log {
    firsts: Vec<u64>,
    retries: Vec<u64>,
}

impl Log {
    /// (first attempts, retries) in the window ending at second `s`.
    fn window(&self, s: u64) -> (u64, u64) {
        let live = |t: &&u64| **t <= s && **t + WINDOW_S as u64 > s;
        (
            self.firsts.iter().filter(live).count() as u64,
            self.retries.iter().filter(live).count() as u64,
        )
    }
}

/// `retries · 10000 ≤ budget · firsts + min_per_s · window · 10000`, in exact integers.
fn fits(cfg: &RetryBudgetConfig, firsts: u64, retries: u64) -> bool {
    u128::from(retries) * 10_000
        <= u128::from(cfg.budget) * u128::from(firsts)
            + u128::from(cfg.min_per_s) * WINDOW_S as u128 * 10_000
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn grants_fit_the_window_and_denials_are_needed(
        cfg in config(),
        start in prop_oneof![Just(0u64), 0u64..u64::MAX / 2, 1_700_000_000_000u64..1_800_000_000_000],
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let mut b = RetryBudget::new(cfg, start);
        let mut now = start;
        // The budget's clock never goes back: an earlier reading counts in its latest second.
        let mut second = start / 1000;
        let mut log = Log::default();
        let (mut granted, mut denied) = (0u64, 0u64);
        for op in ops {
            match op {
                Op::Step(d) => now = now.saturating_add_signed(d),
                Op::First(n) => {
                    second = second.max(now / 1000);
                    for _ in 0..n {
                        b.record_first(now);
                        log.firsts.push(second);
                    }
                }
                Op::Retry => {
                    second = second.max(now / 1000);
                    let (firsts, retries) = log.window(second);
                    let before = b.view(now);
                    if b.take_retry(now) {
                        granted += 1;
                        log.retries.push(second);
                        prop_assert!(fits(&cfg, firsts, retries + 1),
                            "granted a retry beyond the budget: {} retries for {} firsts", retries + 1, firsts);
                    } else {
                        denied += 1;
                        prop_assert!(!fits(&cfg, firsts, retries + 1), "denied a retry within the budget");
                        let after = b.view(now);
                        prop_assert_eq!(after.retries, before.retries, "a denied retry was counted");
                        prop_assert_eq!(after.retries_total, before.retries_total);
                    }
                }
            }
            let v = b.view(now);
            let (firsts, retries) = log.window(second.max(now / 1000));
            prop_assert_eq!((v.firsts, v.retries), (firsts, retries), "window at {}", now);
            prop_assert_eq!((v.retries_total, v.retries_denied_total), (granted, denied));
            prop_assert_eq!(v.firsts_total, log.firsts.len() as u64);
            prop_assert_eq!(v.window_s as usize, WINDOW_S);
        }
    }

    #[test]
    fn a_burst_older_than_the_window_buys_nothing(
        cfg in config(),
        start in 0u64..u64::MAX / 2,
        burst in 1u32..5_000,
        later in (WINDOW_S as u64 * 1000 + 1000)..120_000,
    ) {
        let mut b = RetryBudget::new(cfg, start);
        for _ in 0..burst {
            b.record_first(start);
        }
        let now = start + later;
        prop_assert_eq!(b.view(now).firsts, 0);
        let floor = u64::from(cfg.min_per_s) * WINDOW_S as u64;
        let granted = (0..floor + 10).filter(|_| b.take_retry(now)).count() as u64;
        prop_assert_eq!(granted, floor, "only the floor is left {} s after the burst", later / 1000);
    }

    #[test]
    fn lower_classes_stop_retrying_first(
        cfg in config(),
        start in 0u64..u64::MAX / 2,
        firsts in 0u32..5_000,
    ) {
        use circuit_breaker_core::class::{threshold, Class};
        let allowance = cfg.allowance(u64::from(firsts));
        let granted = |class: Option<Class>| {
            let mut b = RetryBudget::new(cfg, start);
            for _ in 0..firsts {
                b.record_first(start);
            }
            (0..allowance + 10).filter(|_| b.take_retry_of(start, class)).count() as u64
        };
        let [c, d, s] = Class::ALL.map(|k| granted(Some(k)));
        prop_assert_eq!(c, allowance, "critical: the whole allowance");
        prop_assert_eq!(granted(None), allowance, "no class: the whole allowance");
        prop_assert!(s <= d && d <= c);
        let t = |k: Class| u64::from(threshold(Some(k), u32::try_from(allowance).unwrap()));
        prop_assert_eq!((d, s), (t(Class::Default), t(Class::Sheddable)));
        // Once sheddable retries have spent their share, critical ones still find the rest.
        let mut b = RetryBudget::new(cfg, start);
        for _ in 0..firsts {
            b.record_first(start);
        }
        let shed = (0..allowance + 10)
            .filter(|_| b.take_retry_of(start, Some(Class::Sheddable)))
            .count() as u64;
        let crit = (0..allowance + 10)
            .filter(|_| b.take_retry_of(start, Some(Class::Critical)))
            .count() as u64;
        prop_assert_eq!(shed + crit, allowance);
    }
}
