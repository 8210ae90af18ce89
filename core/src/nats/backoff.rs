//! When and where to reconnect: an exponential [`Backoff`] with jitter drawn from randomness
//! the caller passes in, and a [`Rotation`] over the configured servers.

/// The delay before each reconnection attempt: a ceiling that doubles from `min_ms` up to
/// `max_ms`, with "equal jitter": half the ceiling, plus a uniform draw over the other half.
///
/// Equal rather than full jitter (a draw over the whole ceiling): full jitter can draw next
/// to nothing at any attempt, so a worker facing a server that refuses it at once would still
/// retry in a tight loop now and then, and a whole fleet restarted with its bus would send a
/// share of its reconnections at once. With equal jitter every delay is at least half the
/// ceiling, so the pressure on a sick server really halves each time, while the draw over the
/// other half still spreads the fleet out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    min_ms: u64,
    max_ms: u64,
    attempt: u32,
}

impl Backoff {
    /// A backoff from `min_ms` (0 taken as 1, so that the delay grows) to `max_ms` (taken as
    /// `min_ms` when below it).
    pub fn new(min_ms: u64, max_ms: u64) -> Self {
        let min_ms = min_ms.max(1);
        Backoff {
            min_ms,
            max_ms: max_ms.max(min_ms),
            attempt: 0,
        }
    }

    /// The delay before the next attempt, in milliseconds, given a uniform random `rnd`: in
    /// `[ceiling / 2, ceiling]`, where the ceiling is `min_ms` doubled once per attempt since
    /// the last [`Backoff::reset`], up to `max_ms`. The same attempt and `rnd` give the same
    /// delay.
    pub fn next(&mut self, rnd: u32) -> u64 {
        let ceiling = self.ceiling();
        // Saturate well before shifting past 64 bits; the ceiling reached max_ms long before.
        self.attempt = (self.attempt + 1).min(63);
        let floor = ceiling / 2;
        let span = ceiling - floor + 1;
        // rnd scaled onto [0, span): uniform, and without the bias of a modulo.
        let draw = (u128::from(span) * u128::from(rnd)) >> 32;
        floor + draw as u64
    }

    /// Back to `min_ms`: call once a connection is up (and has lasted).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Attempts since the last reset.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    fn ceiling(&self) -> u64 {
        match 1u64.checked_shl(self.attempt) {
            Some(factor) => self.min_ms.saturating_mul(factor).min(self.max_ms),
            None => self.max_ms,
        }
    }
}

/// The order servers are tried in: each in turn from a start index (drawn by the caller, so
/// that workers and instances spread over the list rather than all falling on its first), so
/// that every server is tried before any is tried twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rotation {
    len: usize,
    next: usize,
}

impl Rotation {
    /// A rotation over `len` servers starting at `start % len`; `None` when there are none.
    pub fn new(len: usize, start: usize) -> Option<Self> {
        (len > 0).then(|| Rotation {
            len,
            next: start % len,
        })
    }

    /// The index of the server to try next.
    // Not an Iterator: it never ends, so an Option would only be unwrapped.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> usize {
        let i = self.next;
        self.next = (i + 1) % self.len;
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_delay_grows_from_min_to_max() {
        let mut b = Backoff::new(100, 1000);
        // rnd 0 gives the floor, u32::MAX the ceiling.
        let lows: Vec<u64> = (0..6).map(|_| b.next(0)).collect();
        assert_eq!(lows, [50, 100, 200, 400, 500, 500]);
        b.reset();
        let highs: Vec<u64> = (0..6).map(|_| b.next(u32::MAX)).collect();
        assert_eq!(highs, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.attempt(), 6);
    }

    #[test]
    fn reset_starts_over() {
        let mut b = Backoff::new(10, 10_000);
        let first = b.clone().next(12345);
        for _ in 0..20 {
            b.next(7);
        }
        assert_eq!(b.next(u32::MAX), 10_000);
        b.reset();
        assert_eq!(b.attempt(), 0);
        assert_eq!(b.next(12345), first);
    }

    #[test]
    fn odd_bounds_are_made_sane() {
        let mut b = Backoff::new(0, 0);
        assert_eq!(b.next(u32::MAX), 1);
        assert_eq!(b.next(u32::MAX), 1);
        let mut b = Backoff::new(500, 100);
        assert!((250..=500).contains(&b.next(99)));
        assert!((250..=500).contains(&b.next(u32::MAX / 3)));
        // No overflow however far it goes.
        let mut b = Backoff::new(u64::MAX / 2, u64::MAX);
        for _ in 0..100 {
            assert!(b.next(u32::MAX) >= u64::MAX / 4);
        }
        assert_eq!(b.ceiling(), u64::MAX);
    }

    #[test]
    fn every_server_is_tried_before_any_twice() {
        let mut r = Rotation::new(3, 7).unwrap();
        let order: Vec<usize> = (0..7).map(|_| r.next()).collect();
        assert_eq!(order, [1, 2, 0, 1, 2, 0, 1]);
        let mut one = Rotation::new(1, 5).unwrap();
        assert_eq!([one.next(), one.next()], [0, 0]);
        assert_eq!(Rotation::new(0, 0), None);
    }

    proptest! {
        #[test]
        fn the_delay_stays_within_bounds_and_is_deterministic(
            min in 0u64..100_000,
            max in 0u64..10_000_000,
            draws in proptest::collection::vec(any::<u32>(), 1..80),
        ) {
            let mut a = Backoff::new(min, max);
            let mut b = Backoff::new(min, max);
            let top = max.max(min.max(1));
            let mut prev_floor = 0;
            for &rnd in &draws {
                let ceiling = a.ceiling();
                let d = a.next(rnd);
                prop_assert_eq!(d, b.next(rnd));
                prop_assert!(d <= top);
                prop_assert!(d >= ceiling / 2 && d <= ceiling);
                // The floor never falls: each attempt waits at least half the last ceiling.
                prop_assert!(ceiling / 2 >= prev_floor);
                prev_floor = ceiling / 2;
            }
        }

        #[test]
        fn a_rotation_visits_all_before_repeating(len in 1usize..50, start in any::<usize>()) {
            let mut r = Rotation::new(len, start).unwrap();
            for _round in 0..3 {
                let mut seen = vec![false; len];
                for _ in 0..len {
                    let i = r.next();
                    prop_assert!(i < len);
                    prop_assert!(!seen[i]);
                    seen[i] = true;
                }
            }
        }
    }
}
