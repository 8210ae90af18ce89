//! A fixed-size latency histogram with log-spaced bins (ratio √2), cheap to update and to sum.
//!
//! Bin 0 holds responses under 1 ms. Bins 1..=32 cover [1 ms, 65 536 ms) with bounds
//! 2^((i-1)/2) .. 2^(i/2) ms, and bin 33 is open-ended (65.5 s and more).
//!
//! Error bound: [`HistogramSum::percentile`] reports, for the bin holding the wanted rank, the
//! harmonic midpoint of the whole milliseconds the bin can hold, rounded to a whole
//! millisecond. For any latency `x` below 65 536 ms the reported value `r` satisfies
//! `|r - x| <= 0.172 * x + 0.5 ms` ((√2 - 1) / (√2 + 1) ≈ 17.2 % relative error, plus the
//! rounding to whole milliseconds). Latencies in the open-ended bin are reported as 65 536 ms
//! (a lower bound).

/// Number of bins: one under 1 ms, 32 √2-spaced bins up to 65 536 ms, one open-ended bin.
pub const BINS: usize = 34;

/// The smallest whole millisecond value in bin `2l + 2`: ⌈2^l · √2⌉, for l = 0..=15.
const HALF_STEP: [u64; 16] = [
    2, 3, 6, 12, 23, 46, 91, 182, 363, 725, 1449, 2897, 5793, 11586, 23171, 46341,
];

/// Lower bound (inclusive) of the whole-millisecond range of each bin below the last.
const fn lower(bin: usize) -> u64 {
    if bin == 0 {
        0
    } else if bin % 2 == 1 {
        1 << ((bin - 1) / 2)
    } else {
        HALF_STEP[(bin - 2) / 2]
    }
}

/// The value reported for each bin, see the module documentation.
const REPORT: [u64; BINS] = {
    let mut out = [0u64; BINS];
    let mut bin = 1;
    while bin < BINS - 1 {
        let a = lower(bin);
        let b = lower(bin + 1).saturating_sub(1);
        // Harmonic midpoint 2ab/(a+b) minimises the worst relative error over [a, b];
        // an empty bin (b < a) reports its lower bound, it never holds a sample anyway.
        out[bin] = if b < a {
            a
        } else {
            (4 * a * b + (a + b)) / (2 * (a + b))
        };
        bin += 1;
    }
    out[BINS - 1] = 1 << 16;
    out
};

/// The bin that a response time of `ms` milliseconds falls into.
#[inline]
pub fn bin_of(ms: u64) -> usize {
    if ms == 0 {
        return 0;
    }
    let log2 = 63 - ms.leading_zeros() as usize;
    if log2 >= 16 {
        return BINS - 1;
    }
    1 + 2 * log2 + usize::from(ms >= HALF_STEP[log2])
}

/// The value reported for samples in `bin`, in milliseconds.
pub fn report_of(bin: usize) -> u64 {
    REPORT[bin.min(BINS - 1)]
}

/// Per-bin sample counts (saturating `u32`), stored in each window bucket.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// Samples per bin.
    pub counts: [u32; BINS],
}

impl Histogram {
    /// A histogram with no samples.
    pub const EMPTY: Histogram = Histogram { counts: [0; BINS] };

    /// Adds one sample of `ms` milliseconds.
    #[inline]
    pub fn add(&mut self, ms: u64) {
        let c = &mut self.counts[bin_of(ms)];
        *c = c.saturating_add(1);
    }

    /// Adds every sample of `other`.
    pub fn merge_counts(&mut self, other: &Histogram) {
        for (c, o) in self.counts.iter_mut().zip(other.counts.iter()) {
            *c = c.saturating_add(*o);
        }
    }
}

/// A histogram summed over several buckets, wide enough not to saturate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistogramSum {
    counts: [u64; BINS],
    total: u64,
}

impl Default for HistogramSum {
    fn default() -> Self {
        HistogramSum {
            counts: [0; BINS],
            total: 0,
        }
    }
}

impl HistogramSum {
    /// Adds every sample of `h`.
    pub fn merge(&mut self, h: &Histogram) {
        for (sum, &c) in self.counts.iter_mut().zip(h.counts.iter()) {
            *sum = sum.saturating_add(u64::from(c));
            self.total = self.total.saturating_add(u64::from(c));
        }
    }

    /// Number of samples.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The `permille`-th per-mille percentile (500 = median) in milliseconds, `None` when empty.
    /// See the module documentation for the error bound.
    pub fn percentile(&self, permille: u64) -> Option<u64> {
        let rank = self.rank(permille)?;
        let mut seen = 0u64;
        for (bin, &c) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(c);
            if seen >= rank {
                return Some(report_of(bin));
            }
        }
        Some(report_of(BINS - 1))
    }
}

impl HistogramSum {
    /// The rank (from 1) of the `permille`-th percentile's sample; `None` when empty.
    fn rank(&self, permille: u64) -> Option<u64> {
        (self.total > 0).then(|| {
            (self.total.saturating_mul(permille.min(1000)))
                .div_ceil(1000)
                .max(1)
        })
    }

    /// The `permille`-th percentile in milliseconds, placed within its bin by rank: the
    /// wanted sample's position among the bin's samples, taken geometrically across the
    /// bin's range (bins are √2 apart, and latencies within one are roughly log-uniform).
    /// Less biased than [`HistogramSum::percentile`] when two percentiles are compared (a
    /// bin's midpoint can sit 17 % from the truth in opposite directions for the two);
    /// `None` when empty. The open-ended bin reports its lower bound.
    pub fn percentile_within(&self, permille: u64) -> Option<u64> {
        let rank = self.rank(permille)?;
        let mut seen = 0u64;
        for (bin, &c) in self.counts.iter().enumerate() {
            if c == 0 || seen.saturating_add(c) < rank {
                seen = seen.saturating_add(c);
                continue;
            }
            if bin == BINS - 1 {
                return Some(report_of(bin));
            }
            // The wanted sample is the k-th of the bin's c, at the middle of its share.
            let at = ((rank - seen) as f64 - 0.5) / c as f64;
            let lo = if bin == 0 { 0.0 } else { lower(bin) as f64 };
            let hi = lower(bin + 1) as f64;
            let v = if bin <= 1 {
                lo + (hi - lo) * at
            } else {
                lo * (hi / lo).powf(at)
            };
            return Some(v.round() as u64);
        }
        Some(report_of(BINS - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_steps_are_the_ceiling_of_powers_of_root_two() {
        for (l, &h) in HALF_STEP.iter().enumerate() {
            let exact = 2f64.powf(l as f64 + 0.5);
            assert_eq!(h, exact.ceil() as u64, "l = {l}");
        }
    }

    #[test]
    fn bins_are_monotonic_and_cover_one_ms_to_sixty_seconds() {
        let mut prev = 0;
        for ms in 0..=70_000u64 {
            let b = bin_of(ms);
            assert!(b >= prev && b < BINS, "ms = {ms}");
            prev = b;
        }
        assert_eq!(bin_of(0), 0);
        assert_eq!(bin_of(1), 1);
        assert!(bin_of(60_000) < BINS - 1, "60 s still has its own bin");
        assert_eq!(bin_of(65_536), BINS - 1);
        assert_eq!(bin_of(u64::MAX), BINS - 1);
    }

    #[test]
    fn reported_value_is_within_the_documented_bound() {
        for ms in 1..65_536u64 {
            let r = report_of(bin_of(ms)) as f64;
            let x = ms as f64;
            assert!(
                (r - x).abs() <= 0.172 * x + 0.5,
                "ms = {ms} reported as {r}"
            );
        }
    }

    #[test]
    fn percentiles_walk_the_summed_bins() {
        let mut h = Histogram::EMPTY;
        for _ in 0..90 {
            h.add(40);
        }
        for _ in 0..9 {
            h.add(600);
        }
        h.add(900);
        let mut sum = HistogramSum::default();
        sum.merge(&h);
        assert_eq!(sum.total(), 100);
        let p50 = sum.percentile(500).unwrap();
        let p95 = sum.percentile(950).unwrap();
        let p99 = sum.percentile(990).unwrap();
        assert!((34..=47).contains(&p50), "p50 {p50}");
        assert!((500..=700).contains(&p95), "p95 {p95}");
        assert!(
            (500..=700).contains(&p99),
            "p99 {p99}: rank 99 is still a 600 ms call"
        );
        assert!(sum.percentile(1000).unwrap() >= 760);
        assert_eq!(HistogramSum::default().percentile(500), None);
    }

    #[test]
    fn a_percentile_within_its_bin_follows_the_rank() {
        let mut h = Histogram::EMPTY;
        for ms in 182..256 {
            h.add(ms);
        }
        let mut sum = HistogramSum::default();
        sum.merge(&h);
        assert_eq!(bin_of(182), bin_of(255), "one bin");
        let low = sum.percentile_within(100).unwrap();
        let mid = sum.percentile_within(500).unwrap();
        let high = sum.percentile_within(900).unwrap();
        assert!(low < mid && mid < high, "{low} {mid} {high}");
        assert!(
            (182..=200).contains(&low) && (205..=225).contains(&mid),
            "{low} {mid}"
        );
        assert!((236..=256).contains(&high), "{high}");
        assert_eq!(
            sum.percentile(100),
            sum.percentile(900),
            "one bin, one report"
        );
        assert_eq!(HistogramSum::default().percentile_within(500), None);
        let mut zero = Histogram::EMPTY;
        zero.add(0);
        let mut z = HistogramSum::default();
        z.merge(&zero);
        assert_eq!(z.percentile_within(900), Some(1), "under a millisecond");
        let mut top = Histogram::EMPTY;
        top.add(100_000);
        let mut t = HistogramSum::default();
        t.merge(&top);
        assert_eq!(t.percentile_within(500), Some(65_536));
    }

    #[test]
    fn counts_saturate() {
        let mut h = Histogram::EMPTY;
        h.counts[5] = u32::MAX;
        h.add(5);
        assert_eq!(h.counts[5], u32::MAX);
    }
}
