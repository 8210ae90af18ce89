//! A breaker's recent past for the dashboard's chart: per interval of [`STEP_MS`], the
//! attempts, failures and slow calls recorded and the worst state seen, over the last
//! [`POINTS`] intervals (five minutes), so that a page opened during an incident shows what
//! led to it.
//!
//! It lives in shared memory beside the breaker (the shell gives each breaker one, under the
//! zone lock) and follows the breaker's running totals rather than every event: after each
//! locked call the shell [`History::note`]s the totals and the state, and an interval's
//! counts are the totals' difference between its start and the next's. An interval with no
//! call at all saw nothing recorded, in the state the breaker was left in.

pub use crate::snapshot::{HistoryView, Point};
use crate::snapshot::{State, Totals};

/// One interval, in milliseconds.
pub const STEP_MS: u64 = 10_000;
/// Intervals shown: the current one (still filling) and those before it.
pub const POINTS: usize = 30;
/// Complete intervals kept.
const KEPT: usize = POINTS - 1;

/// The history of one breaker, in shared memory. Plain integers only: any worker may read
/// and write it under the zone lock. 512 bytes, the slab's class for it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct History {
    /// Whom it follows (the shell's tenant id of the breaker): another owner starts afresh.
    owner: u64,
    /// The current interval's number (clock / [`STEP_MS`]).
    current: u64,
    /// The totals when the current interval began: requests, failures, slow.
    base: [u64; 3],
    /// Complete intervals held, up to `KEPT`.
    kept: u32,
    /// The worst state seen in the current interval.
    state: u8,
    /// The state at the last note: the one an interval with no call was spent in.
    last: u8,
    /// Complete intervals, interval `n` at `n % KEPT`.
    points: [Point; KEPT],
}

fn counts(t: &Totals) -> [u64; 3] {
    [t.requests, t.failures, t.slow]
}

impl History {
    /// A history for `owner` that begins at `now_ms`, with the breaker's totals and state
    /// then: nothing before.
    pub fn new(owner: u64, now_ms: u64, totals: &Totals, state: State) -> History {
        History {
            owner,
            current: now_ms / STEP_MS,
            base: counts(totals),
            kept: 0,
            state: state.code(),
            last: state.code(),
            points: [Point::default(); KEPT],
        }
    }

    /// Whether it follows `owner`.
    pub fn owned_by(&self, owner: u64) -> bool {
        self.owner == owner
    }

    /// The current interval's counts: the totals since it began. Totals that went back (the
    /// breaker was started afresh) count from zero.
    fn running(&self, totals: &Totals) -> Point {
        let t = counts(totals);
        let part = |i: usize| {
            let d = if t[i] >= self.base[i] {
                t[i] - self.base[i]
            } else {
                t[i]
            };
            u32::try_from(d).unwrap_or(u32::MAX)
        };
        Point {
            requests: part(0),
            failures: part(1),
            slow: part(2),
            state: self.state,
        }
    }

    /// Records the breaker as it is after a call at `now_ms`: its running totals and its
    /// state. A call in a later interval closes the current one (with what was recorded up to
    /// now: the call's own outcome falls in it, one call per interval's edge) and those
    /// between, empty, in the state it was left in. An earlier clock reading is taken as the
    /// current interval.
    pub fn note(&mut self, now_ms: u64, totals: &Totals, state: State) {
        let interval = now_ms / STEP_MS;
        if interval > self.current {
            let done = self.running(totals);
            let left = self.last;
            // Only the last `KEPT` intervals are kept: skip what would be overwritten.
            let first = self.current.max(interval.saturating_sub(KEPT as u64));
            for n in first..interval {
                let p = if n == self.current {
                    done
                } else {
                    Point {
                        state: left,
                        ..Point::default()
                    }
                };
                self.points[(n % KEPT as u64) as usize] = p;
            }
            self.kept = (u64::from(self.kept) + (interval - self.current)).min(KEPT as u64) as u32;
            self.current = interval;
            self.base = counts(totals);
            // The new interval begins in the state the breaker was left in.
            self.state = left;
        }
        self.state = self.state.max(state.code());
        self.last = state.code();
    }

    /// The points at `now_ms` (the breaker's totals and state given, as [`History::note`]
    /// would take them, without changing anything): at most [`POINTS`], ending with the
    /// interval `now_ms` falls in.
    pub fn view(&self, now_ms: u64, totals: &Totals, state: State) -> HistoryView {
        let mut h = *self;
        h.note(now_ms.max(self.current * STEP_MS), totals, state);
        let n = h.kept as u64;
        let mut points: Vec<Point> = (h.current - n..h.current)
            .map(|i| h.points[(i % KEPT as u64) as usize])
            .collect();
        points.push(h.running(totals));
        HistoryView {
            start_ms: (h.current - n) * STEP_MS,
            step_ms: STEP_MS,
            points,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn totals(requests: u64, failures: u64, slow: u64) -> Totals {
        Totals {
            requests,
            failures,
            slow,
            ..Totals::default()
        }
    }

    const T0: u64 = 1_000_000;

    #[test]
    fn fits_the_slabs_512_byte_class() {
        assert_eq!(std::mem::size_of::<History>(), 512);
    }

    #[test]
    fn each_interval_counts_what_was_recorded_in_it() {
        let mut h = History::new(7, T0, &totals(5, 1, 0), State::Closed);
        assert!(h.owned_by(7) && !h.owned_by(8));
        h.note(T0 + 1000, &totals(15, 3, 1), State::Closed);
        h.note(T0 + 9000, &totals(20, 4, 1), State::Closed);
        // The next interval: the first one closes with 15 attempts, 3 failures, 1 slow.
        h.note(T0 + STEP_MS, &totals(30, 14, 1), State::Open);
        let v = h.view(T0 + STEP_MS + 500, &totals(30, 14, 1), State::Open);
        assert_eq!(v.start_ms, T0);
        assert_eq!(v.step_ms, STEP_MS);
        assert_eq!(
            v.points,
            vec![
                Point {
                    requests: 25,
                    failures: 13,
                    slow: 1,
                    state: 0
                },
                Point {
                    requests: 0,
                    failures: 0,
                    slow: 0,
                    state: 2
                },
            ]
        );
    }

    #[test]
    fn quiet_intervals_are_empty_in_the_state_left() {
        let mut h = History::new(1, T0, &totals(0, 0, 0), State::Closed);
        h.note(T0 + 100, &totals(10, 10, 0), State::Open);
        // Nothing for 35 s, then a view: the first interval, two empty open ones, the current.
        let v = h.view(T0 + 35_000, &totals(10, 10, 0), State::Open);
        let states: Vec<u8> = v.points.iter().map(|p| p.state).collect();
        let reqs: Vec<u32> = v.points.iter().map(|p| p.requests).collect();
        assert_eq!(states, vec![2, 2, 2, 2]);
        assert_eq!(reqs, vec![10, 0, 0, 0]);
        // The view changed nothing.
        assert_eq!(
            h.view(T0 + 100, &totals(10, 10, 0), State::Open)
                .points
                .len(),
            1
        );
    }

    #[test]
    fn the_worst_state_of_an_interval_shows() {
        let mut h = History::new(1, T0, &totals(0, 0, 0), State::Closed);
        h.note(T0 + 100, &totals(1, 1, 0), State::Open);
        h.note(T0 + 200, &totals(1, 1, 0), State::HalfOpen);
        h.note(T0 + 300, &totals(2, 1, 0), State::Closed);
        let v = h.view(T0 + STEP_MS, &totals(2, 1, 0), State::Closed);
        assert_eq!(v.points[0].state, 2);
        assert_eq!(v.points[1].state, 0, "the next begins as it was left");
    }

    #[test]
    fn totals_that_go_back_count_from_zero() {
        let mut h = History::new(1, T0, &totals(100, 50, 0), State::Open);
        let v = h.view(T0 + 10, &totals(3, 1, 0), State::Closed);
        assert_eq!((v.points[0].requests, v.points[0].failures), (3, 1));
        h.note(T0 + 10, &totals(3, 1, 0), State::Closed);
    }

    proptest! {
        /// Whatever the calls' times, at most `POINTS` points, ending at the interval of the
        /// view's time; what each call recorded is in the interval of the call before it
        /// (the same one but at an interval's edge, see `note`), and every point shown holds
        /// exactly what was recorded in its interval.
        #[test]
        fn bounded_contiguous_and_counted(
            steps in proptest::collection::vec((0u64..40_000, 0u64..50, 0usize..3), 0..200),
            late in 0u64..400_000,
        ) {
            let states = [State::Closed, State::HalfOpen, State::Open];
            let mut h = History::new(1, T0, &totals(0, 0, 0), State::Closed);
            let (mut now, mut req, mut prev) = (T0, 0u64, T0 / STEP_MS);
            let mut per: std::collections::BTreeMap<u64, u64> = Default::default();
            for (dt, n, s) in steps {
                now += dt;
                req += n;
                h.note(now, &totals(req, 0, 0), states[s]);
                *per.entry(prev).or_default() += n;
                prev = now / STEP_MS;
            }
            let at = now + late;
            let v = h.view(at, &totals(req, 0, 0), State::Closed);
            prop_assert!(v.points.len() <= POINTS && !v.points.is_empty());
            let first = v.start_ms / STEP_MS;
            prop_assert_eq!(first + v.points.len() as u64 - 1, at / STEP_MS);
            prop_assert!(first >= T0 / STEP_MS);
            for (i, p) in v.points.iter().enumerate() {
                let want = per.get(&(first + i as u64)).copied().unwrap_or(0);
                prop_assert_eq!(u64::from(p.requests), want, "interval {}", i);
            }
        }
    }
}
