//! A retry budget per upstream, kept in shared memory: retries in a rolling window may be at
//! most a share of the first attempts in it, plus a small floor.
//!
//! The shape is Finagle's `RetryBudget` (a share of requests, a minimum rate, a 10 s window;
//! <https://twitter.github.io/finagle/guide/Clients.html#retries>) and tower's `TpsBudget`:
//! a first attempt deposits, a retry withdraws, and a retry is made only if the window holds
//! enough. Retries are therefore never a multiplier of load: at any rate of failures, the
//! origin sees at most `(1 + budget)` times the requests plus the floor.
//!
//! A retry is granted at `now` when, counting it,
//!
//! ```text
//! retries in the window ≤ budget × first attempts in the window + min_per_s × window
//! ```
//!
//! Each grant is judged in the window it is made in (as Finagle and tower do): a retry is
//! paid for by first attempts of the ten seconds before it, so when those leave the window
//! before the retry does, the window may for a while hold more retries than its remaining
//! first attempts would buy. A denial is counted as such and is never a retry.
//!
//! # Window
//!
//! Fixed at [`WINDOW_S`] = 10 one-second buckets (Finagle's and tower's default TTL, and the
//! breaker's default window): the budget is a ratio, so the window only smooths it; a longer
//! one would let a burst of first attempts minutes ago pay for a retry storm now, and would
//! cost shared memory (a bucket a second). Old buckets are evicted, not accumulated.
//!
//! # Shared memory
//!
//! [`RetryBudget`] is plain data (`#[repr(C)]`, integers only, 8-byte aligned) of
//! [`RETRY_BUDGET_SIZE`] = 136 bytes, its configuration and ten buckets included; the shell
//! mutates it under the zone lock.

use crate::class::{threshold, Class};
use std::mem::size_of;

/// The window's length in seconds (one bucket per second).
pub const WINDOW_S: usize = 10;

/// Parameters of a retry budget (`retry_budget=20% retry_min=3`). The budget is in
/// hundredths of a percent.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBudgetConfig {
    /// Retries allowed per first attempt in the window, 0..=10000 (`retry_budget`, default
    /// 20 %: Envoy's `budget_percent` and Finagle's `percentCanRetry`; an origin sees at most
    /// 1.2× its clients' requests, whatever fails).
    pub budget: u32,
    /// Retries allowed per second on top, whatever the traffic (`retry_min`, default 3: so
    /// that a quiet upstream can still retry. Envoy's floor is 3 *concurrent* retries, which
    /// for retries that take about a second is 3 per second; Finagle's 10 per second is per
    /// client instance, while this floor is per upstream of a whole nginx, which many clients
    /// share. At 1000 requests/s the floor adds 0.3 % to the budget; at 5 requests/s it lets
    /// most failures be retried, as it should).
    pub min_per_s: u32,
}

impl Default for RetryBudgetConfig {
    fn default() -> Self {
        RetryBudgetConfig {
            budget: 2000,
            min_per_s: 3,
        }
    }
}

/// A parameter of [`RetryBudgetConfig`] out of its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryBudgetConfigError {
    /// `budget` above 10000 (100 %).
    Budget,
    /// `min_per_s` above [`MAX_MIN_PER_S`].
    MinPerS,
}

/// The largest floor, retries per second.
pub const MAX_MIN_PER_S: u32 = 100_000;

impl RetryBudgetConfigError {
    /// The directive parameter at fault, for `invalid value "…" in "circuit_breaker"`.
    pub fn parameter(self) -> &'static str {
        match self {
            RetryBudgetConfigError::Budget => "retry_budget",
            RetryBudgetConfigError::MinPerS => "retry_min",
        }
    }
}

impl RetryBudgetConfig {
    /// Checks each parameter's range.
    pub fn check(&self) -> Result<(), RetryBudgetConfigError> {
        if self.budget > 10_000 {
            return Err(RetryBudgetConfigError::Budget);
        }
        if self.min_per_s > MAX_MIN_PER_S {
            return Err(RetryBudgetConfigError::MinPerS);
        }
        Ok(())
    }

    /// Retries the window may hold with `firsts` first attempts in it.
    pub fn allowance(&self, firsts: u64) -> u64 {
        let share = u128::from(self.budget.min(10_000)) * u128::from(firsts) / 10_000;
        let share = u64::try_from(share).unwrap_or(u64::MAX);
        let floor = u64::from(self.min_per_s.min(MAX_MIN_PER_S)) * WINDOW_S as u64;
        share.saturating_add(floor)
    }
}

/// One second of the window.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Bucket {
    firsts: u32,
    retries: u32,
}

/// The window's figures and the running totals, for the status page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryBudgetView {
    /// The window's length, seconds.
    pub window_s: u32,
    /// First attempts in the window.
    pub firsts: u64,
    /// Retries granted in the window.
    pub retries: u64,
    /// Retries the window may hold with its first attempts.
    pub allowance: u64,
    /// Retries granted since creation (`…_retries_total`).
    pub retries_total: u64,
    /// Retries denied since creation (`…_retries_denied_total`).
    pub retries_denied_total: u64,
    /// First attempts since creation.
    pub firsts_total: u64,
}

/// The retry budget of one upstream, in shared memory.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RetryBudget {
    cfg: RetryBudgetConfig,
    /// The latest second the window has been advanced to; earlier clocks are taken as it.
    second: u64,
    /// Sums over the live buckets, so that a decision costs O(1).
    firsts: u64,
    retries: u64,
    firsts_total: u64,
    retries_total: u64,
    denied_total: u64,
    ring: [Bucket; WINDOW_S],
}

/// Size of a [`RetryBudget`] in shared memory, bytes.
pub const RETRY_BUDGET_SIZE: usize = size_of::<RetryBudget>();

impl RetryBudget {
    /// An empty budget created at `now_ms`.
    pub fn new(cfg: RetryBudgetConfig, now_ms: u64) -> RetryBudget {
        RetryBudget {
            cfg,
            second: now_ms / 1000,
            firsts: 0,
            retries: 0,
            firsts_total: 0,
            retries_total: 0,
            denied_total: 0,
            ring: [Bucket::default(); WINDOW_S],
        }
    }

    /// The parameters in force.
    pub fn config(&self) -> &RetryBudgetConfig {
        &self.cfg
    }

    /// Moves the window to `now_ms`, evicting the seconds that left it, and returns the
    /// current bucket. A clock earlier than the window's latest second counts in that second.
    fn advance(&mut self, now_ms: u64) -> usize {
        let now = now_ms / 1000;
        if now > self.second {
            if now - self.second >= WINDOW_S as u64 {
                self.ring = [Bucket::default(); WINDOW_S];
                self.firsts = 0;
                self.retries = 0;
            } else {
                for t in self.second + 1..=now {
                    let b = &mut self.ring[(t % WINDOW_S as u64) as usize];
                    self.firsts = self.firsts.saturating_sub(u64::from(b.firsts));
                    self.retries = self.retries.saturating_sub(u64::from(b.retries));
                    *b = Bucket::default();
                }
            }
            self.second = now;
        }
        (self.second % WINDOW_S as u64) as usize
    }

    /// Records a first attempt (a client request sent to the upstream for the first time).
    pub fn record_first(&mut self, now_ms: u64) {
        self.record_firsts(now_ms, 1);
    }

    /// Records `n` first attempts of the same second at once (counted elsewhere without a
    /// lock, then handed over), as `n` calls of [`RetryBudget::record_first`] would.
    pub fn record_firsts(&mut self, now_ms: u64, n: u32) {
        let i = self.advance(now_ms);
        let b = &mut self.ring[i];
        b.firsts = b.firsts.saturating_add(n);
        self.firsts = self.firsts.saturating_add(u64::from(n));
        self.firsts_total = self.firsts_total.saturating_add(u64::from(n));
    }

    /// Asks for one retry at `now_ms`: `true` if the budget allows it, in which case it is
    /// counted; `false` if not, in which case only the denial is counted and the caller must
    /// not retry.
    pub fn take_retry(&mut self, now_ms: u64) -> bool {
        self.take_retry_of(now_ms, None)
    }

    /// [`RetryBudget::take_retry`] for a request of `class` (`None`: classes not in use):
    /// lower classes give way first, by the same reserve as under the adaptive limit
    /// ([`crate::class::Class::threshold`] of the allowance), so that `sheddable` retries stop
    /// at 80 % of it and `critical` ones have all of it.
    pub fn take_retry_of(&mut self, now_ms: u64, class: Option<Class>) -> bool {
        let i = self.advance(now_ms);
        let allowance = self.cfg.allowance(self.firsts);
        let allowance = u64::from(threshold(
            class,
            u32::try_from(allowance).unwrap_or(u32::MAX),
        ));
        if self.retries.saturating_add(1) > allowance {
            self.denied_total = self.denied_total.saturating_add(1);
            return false;
        }
        let b = &mut self.ring[i];
        b.retries = b.retries.saturating_add(1);
        self.retries = self.retries.saturating_add(1);
        self.retries_total = self.retries_total.saturating_add(1);
        true
    }

    /// The window at `now_ms` (without moving it: a view never changes the budget) and the
    /// totals.
    pub fn view(&self, now_ms: u64) -> RetryBudgetView {
        let now = (now_ms / 1000).max(self.second);
        let (mut firsts, mut retries) = (0u64, 0u64);
        for age in 0..WINDOW_S as u64 {
            // Seconds the ring still holds and the window at `now` covers.
            let Some(t) = self.second.checked_sub(age) else {
                break;
            };
            if t + (WINDOW_S as u64) <= now {
                break;
            }
            let b = &self.ring[(t % WINDOW_S as u64) as usize];
            firsts += u64::from(b.firsts);
            retries += u64::from(b.retries);
        }
        RetryBudgetView {
            window_s: WINDOW_S as u32,
            firsts,
            retries,
            allowance: self.cfg.allowance(firsts),
            retries_total: self.retries_total,
            retries_denied_total: self.denied_total,
            firsts_total: self.firsts_total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_764_484_800_000;

    fn budget() -> RetryBudget {
        RetryBudget::new(RetryBudgetConfig::default(), T0)
    }

    #[test]
    fn the_struct_is_small_plain_data() {
        assert_eq!(RETRY_BUDGET_SIZE, 136);
        assert_eq!(std::mem::align_of::<RetryBudget>(), 8);
    }

    #[test]
    fn a_quiet_upstream_may_retry_its_floor_and_no_more() {
        let mut b = budget();
        // No first attempts at all: 3 per second over 10 s.
        let granted = (0..100).filter(|_| b.take_retry(T0)).count();
        assert_eq!(granted, 30);
        let v = b.view(T0);
        assert_eq!(
            (v.retries, v.retries_total, v.retries_denied_total),
            (30, 30, 70)
        );
    }

    #[test]
    fn a_busy_upstream_may_retry_a_fifth_of_its_requests() {
        let mut b = budget();
        for _ in 0..1000 {
            b.record_first(T0);
        }
        let granted = (0..1000).filter(|_| b.take_retry(T0 + 500)).count();
        assert_eq!(granted, 200 + 30);
        assert_eq!(b.view(T0 + 500).allowance, 230);
    }

    #[test]
    fn firsts_handed_over_at_once_count_as_one_by_one() {
        let (mut one, mut many) = (budget(), budget());
        for _ in 0..37 {
            one.record_first(T0 + 2_500);
        }
        many.record_firsts(T0 + 2_500, 37);
        many.record_firsts(T0 + 2_500, 0);
        assert_eq!(one.view(T0 + 3_000), many.view(T0 + 3_000));
        assert_eq!(many.view(T0 + 11_999).firsts, 37);
        assert_eq!(many.view(T0 + 12_000).firsts, 0);
    }

    #[test]
    fn a_denied_retry_is_no_retry() {
        let mut b = RetryBudget::new(
            RetryBudgetConfig {
                budget: 0,
                min_per_s: 0,
            },
            T0,
        );
        b.record_first(T0);
        assert!(!b.take_retry(T0));
        let v = b.view(T0);
        assert_eq!(
            (v.retries, v.retries_total, v.retries_denied_total),
            (0, 0, 1)
        );
    }

    #[test]
    fn seconds_that_left_the_window_no_longer_count() {
        let mut b = budget();
        for _ in 0..1000 {
            b.record_first(T0);
        }
        for _ in 0..230 {
            assert!(b.take_retry(T0));
        }
        assert!(
            !b.take_retry(T0 + 9_999),
            "second T0 is still in the window"
        );
        let v = b.view(T0 + 10_000);
        assert_eq!((v.firsts, v.retries), (0, 0), "10 s later it left");
        // A burst 11 s ago buys nothing: only the floor is left.
        let granted = (0..100).filter(|_| b.take_retry(T0 + 11_000)).count();
        assert_eq!(granted, 30);
    }

    #[test]
    fn a_clock_that_goes_back_counts_in_the_latest_second() {
        let mut b = budget();
        b.record_first(T0 + 5_000);
        b.record_first(T0);
        b.record_first(0);
        assert!(b.take_retry(0));
        let v = b.view(0);
        assert_eq!((v.firsts, v.retries), (3, 1));
        assert_eq!(b.view(T0 + 14_999).firsts, 3);
        assert_eq!(b.view(T0 + 15_000).firsts, 0);
    }

    #[test]
    fn parameters_out_of_range_are_named() {
        let ok = RetryBudgetConfig::default();
        assert_eq!(ok.check(), Ok(()));
        let over = RetryBudgetConfig {
            budget: 10_001,
            ..ok
        };
        assert_eq!(
            over.check().map_err(RetryBudgetConfigError::parameter),
            Err("retry_budget")
        );
        let floor = RetryBudgetConfig {
            min_per_s: MAX_MIN_PER_S + 1,
            ..ok
        };
        assert_eq!(
            floor.check().map_err(RetryBudgetConfigError::parameter),
            Err("retry_min")
        );
        // Refused by `nginx -t`; here they are capped, never overflowing.
        let huge = RetryBudgetConfig {
            budget: u32::MAX,
            min_per_s: u32::MAX,
        };
        assert_eq!(huge.allowance(u64::MAX), u64::MAX);
    }
}
