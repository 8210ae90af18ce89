//! The rolling window: a ring of 1-second buckets plus running sums over the live ones.

use super::histogram::{Histogram, HistogramSum};

/// One second of the rolling window.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// The second this bucket holds, on the breaker's clock, modulo 2³² (4 bytes rather than
    /// 8 keep a default breaker within the slab's 2 KiB class). The ring never keeps a bucket
    /// older than its length, so the wrap, once every 136 years, is harmless.
    pub second: u32,
    /// Attempts recorded in that second.
    pub requests: u32,
    /// Of which failures.
    pub failures: u32,
    /// Of which slow.
    pub slow: u32,
    /// The largest `Retry-After` (seconds) of a 503 seen in that second.
    pub retry_after_s: u32,
    /// Response times.
    pub latency: Histogram,
}

impl Bucket {
    /// A bucket with nothing in it. The shell fills a new tail with this.
    pub const EMPTY: Bucket = Bucket {
        second: 0,
        requests: 0,
        failures: 0,
        slow: 0,
        retry_after_s: 0,
        latency: Histogram::EMPTY,
    };

    /// Whether this bucket's second lies in the window of `len` seconds ending at `now_s`
    /// (the caller knows the ring holds nothing older than `len` seconds before its newest).
    #[inline]
    pub fn is_live(&self, now_s: u64, len: u64) -> bool {
        u64::from((now_s as u32).wrapping_sub(self.second)) < len
    }
}

/// Running sums over the live buckets, kept in the header so that deciding costs O(1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sums {
    /// The latest second the ring has been advanced to.
    pub second: u64,
    /// Attempts in the live buckets.
    pub requests: u64,
    /// Failures in the live buckets.
    pub failures: u64,
    /// Slow calls in the live buckets.
    pub slow: u64,
}

impl Sums {
    fn evict(&mut self, b: &mut Bucket, second: u64) {
        self.requests = self.requests.saturating_sub(u64::from(b.requests));
        self.failures = self.failures.saturating_sub(u64::from(b.failures));
        self.slow = self.slow.saturating_sub(u64::from(b.slow));
        *b = Bucket {
            second: second as u32,
            ..Bucket::EMPTY
        };
    }

    /// Moves the window forward to `now_s`, evicting the buckets that fall out of it.
    /// `now_s` never goes backwards (the caller clamps its clock); an earlier value is a no-op.
    #[inline]
    pub fn advance(&mut self, ring: &mut [Bucket], now_s: u64) {
        if now_s <= self.second {
            return;
        }
        let len = ring.len() as u64;
        if now_s - self.second >= len {
            self.clear(ring, now_s);
            return;
        }
        for t in self.second + 1..=now_s {
            let i = (t % len) as usize;
            if let Some(b) = ring.get_mut(i) {
                self.evict(b, t);
            }
        }
        self.second = now_s;
    }

    /// Empties the window (a fresh window starting at `now_s`).
    pub fn clear(&mut self, ring: &mut [Bucket], now_s: u64) {
        ring.fill(Bucket::EMPTY);
        *self = Sums {
            second: now_s,
            ..Sums::default()
        };
    }

    /// Records one attempt in the current second (after [`Sums::advance`] to `now_s`).
    #[inline]
    pub fn record(
        &mut self,
        ring: &mut [Bucket],
        now_s: u64,
        failure: bool,
        slow: bool,
        retry_after_s: u32,
        response_ms: u64,
    ) {
        if ring.is_empty() {
            return;
        }
        let i = (now_s % ring.len() as u64) as usize;
        let Some(b) = ring.get_mut(i) else { return };
        if b.second != now_s as u32 {
            self.evict(b, now_s);
        }
        b.requests = b.requests.saturating_add(1);
        self.requests = self.requests.saturating_add(1);
        if failure {
            b.failures = b.failures.saturating_add(1);
            self.failures = self.failures.saturating_add(1);
        }
        if slow {
            b.slow = b.slow.saturating_add(1);
            self.slow = self.slow.saturating_add(1);
        }
        b.retry_after_s = b.retry_after_s.max(retry_after_s);
        b.latency.add(response_ms);
    }

    /// Adds a probe's response time to the current second's latencies (after
    /// [`Sums::advance`] to `now_s`): shown with the window's percentiles, counted nowhere.
    pub fn note_latency(&mut self, ring: &mut [Bucket], now_s: u64, response_ms: u64) {
        if ring.is_empty() {
            return;
        }
        let i = (now_s % ring.len() as u64) as usize;
        let Some(b) = ring.get_mut(i) else { return };
        if b.second != now_s as u32 {
            self.evict(b, now_s);
        }
        b.latency.add(response_ms);
    }

    /// Adds `count` successes that happened in second `second` (and their latencies),
    /// recorded elsewhere meanwhile: into that second's bucket if the window still holds it,
    /// moving the window forward first if that second is newer. Returns whether they entered
    /// the window (a second that already left it is too old).
    pub fn absorb(
        &mut self,
        ring: &mut [Bucket],
        second: u64,
        count: u32,
        latency: &Histogram,
    ) -> bool {
        if ring.is_empty() || count == 0 {
            return false;
        }
        let len = ring.len() as u64;
        if second > self.second {
            self.advance(ring, second);
        } else if self.second - second >= len {
            return false;
        }
        let i = (second % len) as usize;
        let Some(b) = ring.get_mut(i) else {
            return false;
        };
        if b.second != second as u32 {
            // The bucket was never touched since the window passed that second.
            self.evict(b, second);
        }
        b.requests = b.requests.saturating_add(count);
        self.requests = self.requests.saturating_add(u64::from(count));
        b.latency.merge_counts(latency);
        true
    }

    /// The live buckets' sums at `now_s`, walked bucket by bucket (for views and checks);
    /// merges their histograms into `hist` if given. Nothing is live once `now_s` is a whole
    /// window past the latest second the ring was advanced to.
    pub fn live(&self, ring: &[Bucket], now_s: u64, hist: Option<&mut HistogramSum>) -> LiveSums {
        if now_s.saturating_sub(self.second) >= ring.len() as u64 {
            return LiveSums::default();
        }
        live_sums(ring, now_s, hist)
    }
}

/// Sums of the live buckets of a ring at `now_s`, walked bucket by bucket (for views and checks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveSums {
    /// Attempts.
    pub requests: u64,
    /// Failures.
    pub failures: u64,
    /// Slow calls.
    pub slow: u64,
    /// Largest `Retry-After` seconds.
    pub retry_after_s: u32,
}

/// Walks the live buckets of `ring` at `now_s`; merges their histograms into `hist` if given.
/// Use [`Sums::live`], which also knows when the whole ring is out of date.
fn live_sums(ring: &[Bucket], now_s: u64, mut hist: Option<&mut HistogramSum>) -> LiveSums {
    let len = ring.len() as u64;
    let mut s = LiveSums::default();
    for b in ring.iter().filter(|b| b.is_live(now_s, len)) {
        s.requests += u64::from(b.requests);
        s.failures += u64::from(b.failures);
        s.slow += u64::from(b.slow);
        s.retry_after_s = s.retry_after_s.max(b.retry_after_s);
        if let Some(h) = hist.as_deref_mut() {
            h.merge(&b.latency);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(n: usize) -> Vec<Bucket> {
        vec![Bucket::EMPTY; n]
    }

    fn check(sums: &Sums, ring: &[Bucket]) {
        let live = sums.live(ring, sums.second, None);
        assert_eq!(
            (live.requests, live.failures, live.slow),
            (sums.requests, sums.failures, sums.slow)
        );
    }

    #[test]
    fn old_seconds_are_evicted_not_accumulated() {
        let mut r = ring(3);
        let mut s = Sums {
            second: 100,
            ..Sums::default()
        };
        for t in 100..=102 {
            s.advance(&mut r, t);
            s.record(&mut r, t, true, false, 0, 5);
            check(&s, &r);
        }
        assert_eq!(s.requests, 3);
        s.advance(&mut r, 103);
        assert_eq!(
            (s.requests, s.failures),
            (2, 2),
            "second 100 left the window"
        );
        check(&s, &r);
        s.advance(&mut r, 200);
        assert_eq!(s.requests, 0);
        check(&s, &r);
    }

    #[test]
    fn seconds_wrap_at_two_to_the_32() {
        // The ring's seconds are kept modulo 2^32: a window straddling the wrap still adds up.
        let mut r = ring(3);
        let start = (1u64 << 32) - 2;
        let mut s = Sums {
            second: start,
            ..Sums::default()
        };
        for t in start..start + 4 {
            s.advance(&mut r, t);
            s.record(&mut r, t, true, false, 0, 5);
            check(&s, &r);
        }
        assert_eq!((s.requests, s.failures), (3, 3));
        // A view long after the last advance sees nothing, even where the low 32 bits of the
        // second happen to match old buckets.
        assert_eq!(s.live(&r, start + 3 + (1 << 32), None), LiveSums::default());
        assert_eq!(s.live(&r, start + 3, None).requests, 3);
    }

    #[test]
    fn an_empty_ring_records_nothing_and_never_panics() {
        let mut r = ring(0);
        let mut s = Sums::default();
        s.advance(&mut r, 5);
        s.record(&mut r, 5, true, true, 3, 1);
        assert_eq!(s.requests, 0);
    }
}
