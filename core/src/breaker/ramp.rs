//! The recovery ramp: after a breaker closes by probes, the share of requests let through
//! rises linearly from `ramp_start` to 100 % over `ramp_ms`.

/// `Retry-After` for a request the ramp turned away. The share grows every millisecond, so a
/// client coming back a second later meets a larger one; a second is also `Retry-After`'s
/// resolution and the smallest wait it can announce.
pub const RAMP_RETRY_AFTER_MS: u64 = 1000;

/// The share let through at `now_ms` (hundredths of a percent) by a ramp that ends at
/// `until_ms`, lasts `ramp_ms` and starts at `start`; 10 000 outside the ramp.
#[inline]
pub fn share(until_ms: u64, ramp_ms: u32, start: u32, now_ms: u64) -> u32 {
    if now_ms >= until_ms || ramp_ms == 0 {
        return 10_000;
    }
    let ramp = u64::from(ramp_ms);
    let left = (until_ms - now_ms).min(ramp);
    let span = u64::from(10_000 - start.min(10_000));
    10_000 - (span * left / ramp) as u32
}

/// Whether a request drawing the uniform `rnd` falls within `share`.
#[inline]
pub fn lets_through(share: u32, rnd: u32) -> bool {
    (u64::from(rnd) * 10_000) >> 32 < u64::from(share)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_rises_linearly_from_start_to_all() {
        let until = 20_000;
        assert_eq!(share(until, 10_000, 1000, 10_000), 1000, "start");
        assert_eq!(share(until, 10_000, 1000, 15_000), 5500, "halfway");
        assert_eq!(share(until, 10_000, 1000, 19_990), 9991);
        assert_eq!(share(until, 10_000, 1000, 20_000), 10_000, "done");
        assert_eq!(
            share(until, 10_000, 1000, 0),
            1000,
            "before the start: no less"
        );
        assert_eq!(share(until, 0, 1000, 0), 10_000, "no ramp");
        assert_eq!(
            share(until, 10_000, 20_000, 10_000),
            10_000,
            "start above 100 %"
        );
    }

    #[test]
    fn a_share_lets_through_its_part_of_uniform_draws() {
        assert!(!lets_through(0, 0));
        assert!(lets_through(10_000, u32::MAX));
        let through = (0..10_000u32)
            .filter(|i| lets_through(1000, i.wrapping_mul(429_497)))
            .count();
        assert!((950..=1050).contains(&through), "{through}");
    }
}
