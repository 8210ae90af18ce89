//! Choosing whom to pull from.

/// `k` distinct indices out of `0..n` chosen uniformly at random (all of them, shuffled, when
/// `k >= n`): a partial Fisher–Yates shuffle, so the cost is `O(n)` whatever `k`.
pub fn pick(n: usize, k: usize, mut rnd: impl FnMut() -> u32) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    let k = k.min(n);
    for i in 0..k {
        let left = (n - i) as u64;
        // Lemire's multiply-shift: uniform enough for 32-bit draws over small ranges, and
        // no modulo.
        let j = i + ((u64::from(rnd()) * left) >> 32) as usize;
        all.swap(i, j);
    }
    all.truncate(k);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: u64) -> impl FnMut() -> u32 {
        let mut s = seed;
        move || {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 32) as u32
        }
    }

    #[test]
    fn picks_are_distinct_and_in_range() {
        let mut r = lcg(1);
        for n in 0..12 {
            for k in 0..14 {
                let p = pick(n, k, &mut r);
                assert_eq!(p.len(), k.min(n));
                let mut s = p.clone();
                s.sort_unstable();
                s.dedup();
                assert_eq!(s.len(), p.len());
                assert!(p.iter().all(|&i| i < n));
            }
        }
    }

    #[test]
    fn every_peer_is_picked_about_as_often() {
        let mut r = lcg(7);
        let mut counts = [0u32; 10];
        for _ in 0..10_000 {
            for i in pick(10, 3, &mut r) {
                counts[i] += 1;
            }
        }
        // 3000 expected each; a biased draw (say, never the last) would fall far outside.
        assert!(
            counts.iter().all(|&c| (2800..3200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn extreme_draws_stay_in_range() {
        assert_eq!(pick(5, 5, || u32::MAX).len(), 5);
        assert_eq!(pick(5, 2, || 0), vec![0, 1]);
    }
}
