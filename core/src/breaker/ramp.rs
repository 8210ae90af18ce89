//! The recovery ramp: after a breaker closes by probes, the share of requests let through
//! rises linearly from `ramp_start` to 100 % over `ramp_ms`.

/// `Retry-After` for a request the ramp turned away. The share grows every millisecond, so a
/// client coming back a second later meets a larger one; a second is also `Retry-After`'s
/// resolution and the smallest wait it can announce.
pub const RAMP_RETRY_AFTER_MS: u64 = 1000;

use crate::class::Class;

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

/// The draw a request of `class` makes against a ramp's share, from the uniform `rnd`:
/// `critical` requests (and those of no class) draw `rnd` itself and pass at the share `s`;
/// `default` ones pass at `s^1.5`, `sheddable` ones at `s²`. So a ramp lets critical
/// requests through first and no class more than its share: at 10 %, 10 %, 3.2 % and 1 %.
/// The same `rnd` never lets a lower class through where a higher one is turned away.
#[inline]
pub fn draw_for(rnd: u32, class: Option<Class>) -> u32 {
    let u = (f64::from(rnd) + 0.5) / 4_294_967_296.0;
    let v = match class {
        None | Some(Class::Critical) => return rnd,
        Some(Class::Default) => u.powf(2.0 / 3.0),
        Some(Class::Sheddable) => u.sqrt(),
    };
    // `u` is below 1, and so is any root of it; `as` saturates anyway.
    (v * 4_294_967_296.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ramp_lets_lower_classes_through_at_powers_of_its_share() {
        let passed = |share, class| {
            (0..100_000u32)
                .filter(|i| lets_through(share, draw_for(i.wrapping_mul(42_949), class)))
                .count()
        };
        for (share, want) in [
            (1000, [10_000, 10_000, 3162, 1000]),
            (5000, [50_000, 50_000, 35_355, 25_000]),
        ] {
            let got = [
                passed(share, None),
                passed(share, Some(Class::Critical)),
                passed(share, Some(Class::Default)),
                passed(share, Some(Class::Sheddable)),
            ];
            for (g, w) in got.iter().zip(want) {
                assert!(
                    (*g as i64 - w as i64).abs() <= 200,
                    "{share}: {got:?} against {want:?}"
                );
            }
        }
        for c in Class::ALL {
            assert!(
                lets_through(10_000, draw_for(u32::MAX, Some(c))),
                "all at the end"
            );
            assert!(!lets_through(0, draw_for(0, Some(c))), "none at 0");
        }
    }

    proptest::proptest! {
        /// The same draw: a lower class through means every higher one is through too.
        #[test]
        fn a_lower_class_never_passes_where_a_higher_one_does_not(
            rnd: u32,
            share in 0u32..=10_000,
        ) {
            let through = Class::ALL.map(|c| lets_through(share, draw_for(rnd, Some(c))));
            proptest::prop_assert!(through[2] <= through[1] && through[1] <= through[0]);
            proptest::prop_assert_eq!(through[0], lets_through(share, rnd));
        }
    }

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
