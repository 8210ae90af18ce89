//! Successes gathered without the lock. While a closed breaker's rates are below their
//! thresholds, no success can open it (core: `Breaker::successes_lock_free`), so a success
//! is added here with two atomic operations instead of a lock hold, and the next locked call
//! on the breaker absorbs them first (`Breaker::absorb_successes`), as if each had been
//! recorded in turn. The closed path's most common outcome thus costs no lock.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use circuit_breaker_core::breaker::histogram::{bin_of, Histogram, BINS};

/// Bits of the count in `Gathered::tally`; the second takes the rest.
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

#[repr(C)]
pub struct Gathered {
    /// The monotonic second the successes happened in (high bits) and their number (low
    /// [`COUNT_BITS`]), changed together by one compare-and-swap.
    tally: AtomicU64,
    /// Their latencies, by histogram bin.
    bins: [AtomicU32; BINS],
}

impl Gathered {
    pub fn new() -> Gathered {
        Gathered {
            tally: AtomicU64::new(0),
            bins: [const { AtomicU32::new(0) }; BINS],
        }
    }

    /// Adds one success of second `now_s` that took `ms`; false when successes of another
    /// second wait (the caller takes the lock, which absorbs them).
    #[inline]
    pub fn add(&self, now_s: u64, ms: u64) -> bool {
        if !self.count(now_s) {
            return false;
        }
        self.bins[bin_of(ms)].fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Adds one success of second `now_s` whose latency does not matter, as [`Gathered::add`].
    #[inline]
    pub fn count(&self, now_s: u64) -> bool {
        let mut cur = self.tally.load(Ordering::Relaxed);
        loop {
            let (second, count) = (cur >> COUNT_BITS, cur & COUNT_MASK);
            if (count > 0 && second != now_s) || count == COUNT_MASK {
                return false;
            }
            let next = (now_s << COUNT_BITS) | (count + 1);
            match self
                .tally
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Takes what is waiting (under the mutex): the second, the count and the latencies.
    /// A success added while this runs may see its latency taken with the next batch.
    pub fn take(&self) -> Option<(u64, u32, Histogram)> {
        if self.tally.load(Ordering::Relaxed) & COUNT_MASK == 0 {
            return None;
        }
        let tally = self.tally.swap(0, Ordering::Relaxed);
        let mut h = Histogram::EMPTY;
        for (out, bin) in h.counts.iter_mut().zip(self.bins.iter()) {
            if bin.load(Ordering::Relaxed) != 0 {
                *out = bin.swap(0, Ordering::Relaxed);
            }
        }
        let count = (tally & COUNT_MASK) as u32;
        (count > 0).then_some((tally >> COUNT_BITS, count, h))
    }

    /// Drops whatever waits (a new tenant moves in).
    pub fn clear(&self) {
        self.tally.store(0, Ordering::Relaxed);
        for bin in &self.bins {
            bin.store(0, Ordering::Relaxed);
        }
    }
}
