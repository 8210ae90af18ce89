//! How many good probes in a row close a breaker: `probes` after a hard failure, many more
//! after a brownout.
//!
//! A breaker that closes after `probes` lucky probes flaps in a brownout: with
//! `failure_rate=20%` and a steady 20 % of failing requests, three probes in a row succeed
//! half the time (0.8³). So the run of good probes needed depends on how the breaker tripped.
//!
//! - **Hard** trip: the origin failed every attempt (refused, hanging). While closed the
//!   breaker counts the bad attempts in a row (failed, or slow with the slow rule on); at the
//!   trip that run is *hard* when it is at least `H = 1 + ⌈ln 0.01 / ln t⌉` long, `t` the
//!   tripping rate, and holds at least three quarters of the window's failures (or slow
//!   calls). A brownout at rate `t` makes `H − 1` more failures in a row after the tripping
//!   one in at most 1 % of trips (`t^(H−1) ≤ 0.01`; H is 4 at 20 %, 8 at 50 %), and spreads
//!   its failures across the window, so it rarely passes the second test either. A hard
//!   failure passes both, even over a background of earlier failures up to `t / (4 − 3t)` of
//!   the traffic (5.9 % at a 20 % threshold, 20 % at 50 %). When the window holds fewer than
//!   `H` failures at the trip (a small `min_requests`: 50 % of 4 is 2), that evidence cannot
//!   tell an outage from a brownout, and the run need only reach the three quarters: the
//!   breaker then trusts the run, as it did before. So a hard failure on a clean history
//!   always closes after exactly `probes` good probes, as before.
//! - **Soft** trip (anything else): it needs `K = max(probes, 1 + ⌈ln 0.005 / ln(1 − t)⌉)` good
//!   probes in a row (25 at 20 %, 9 at 50 %, 52 at 10 %; at most [`MAX_SOFT_RUN`]). A brownout
//!   at rate `t` reaches such a run before its first relapse (see below) with probability
//!   `Σⱼ tʲ (1 − t)^K = (1 − t)^(K−1) ≤ 0.5 %`; leading failed probes do not count against it.
//! - **Relapse**: a failed probe after a good one in the same open period (from the trip to
//!   the close) is the mark of a brownout, not of an outage, whose failed probes all come
//!   before the good ones. It doubles the run needed, and never leaves it below `K` (a hard
//!   trip that relapses is judged as soft from then on), up to [`RELAPSE_CAP`] × `K`. A
//!   brownout that heals is therefore closed within 4 `K` good probes of the heal.
//! - **Pace**: the probes of a run longer than `probes` come closer together after each good
//!   one ([`run_spacing`]), so that `K` take about the time `probes` would: the run counts
//!   answers, and a full interval between them only kept a healed origin away.
//!
//! How well the rule tells them apart, measured over seeded simulations of the real breaker,
//! is in `docs/recovery.md` (`core/tests/probe_rule.rs` prints the table).

/// A brownout at the tripping rate passes for hard in at most this share of trips.
const FOOLS_HARD: f64 = 0.01;
/// ... and closes a soft trip before relapsing in at most this share of open periods.
const FOOLS_SOFT: f64 = 0.005;
/// The longest soft run: below a tripping rate of about 0.5 % the statistics would ask for
/// more than 1 000 probes, which no operator waits for.
pub const MAX_SOFT_RUN: u32 = 1000;
/// Relapses double the run needed up to this many times the soft run.
pub const RELAPSE_CAP: u32 = 4;

/// The smallest `n` with `x^n ≤ target` for `x` in (0, 1), as `⌈ln target / ln x⌉`; the small
/// slack keeps exact powers (0.1² = 0.01) from rounding up.
fn runs_below(x: f64, target: f64) -> u64 {
    let n = (target.ln() / x.ln() - 1e-9).ceil();
    if n.is_finite() && n > 0.0 {
        n.min(u32::MAX as f64) as u64
    } else {
        0
    }
}

/// `H`: the run of bad attempts at a trip, at a tripping rate of `rate` hundredths of a
/// percent, that a brownout at that rate makes in at most 1 % of trips.
pub fn hard_run(rate: u32) -> u32 {
    if rate >= 10_000 {
        // Every attempt in the window failed: there is no brownout to tell apart.
        return 1;
    }
    let t = f64::from(rate.max(1)) / 10_000.0;
    (1 + runs_below(t, FOOLS_HARD)).min(u64::from(u32::MAX)) as u32
}

/// `K`: good probes in a row needed after a soft trip at `rate`, at least `probes`.
pub fn soft_run(rate: u32, probes: u32) -> u32 {
    let probes = probes.max(1);
    if rate >= 10_000 {
        return probes;
    }
    let q = 1.0 - f64::from(rate.max(1)) / 10_000.0;
    let k = (1 + runs_below(q, FOOLS_SOFT)).min(u64::from(MAX_SOFT_RUN)) as u32;
    k.max(probes)
}

/// Whether a trip at `rate` with `run` bad attempts in a row and `part` failures (or slow
/// calls) in the window was hard: the run is at least [`hard_run`] (or `part`, when the
/// window holds fewer) and holds at least three quarters of `part`.
pub fn is_hard(run: u32, part: u64, rate: u32) -> bool {
    let run = u64::from(run);
    run >= u64::from(hard_run(rate)).min(part) && run.saturating_mul(4) >= part.saturating_mul(3)
}

/// The closest two probes of a long run may be, in milliseconds (see [`run_spacing`]).
pub const MIN_RUN_SPACING_MS: u64 = 50;

/// How far apart the next probe of a run of `needed` good probes may come, after a good one,
/// never closer than [`MIN_RUN_SPACING_MS`]:
///
/// - a hard failure's run (`probes` long): the rest of it within half an interval of its
///   first good probe (`interval / (2 × probes)` apart). A refusing or hanging origin that
///   answers again has healed; a full interval between its good probes only kept clients
///   away (3 s after the heal with `probe_interval=1s probes=3`).
/// - a longer run (a brownout's): about the time `probes` probes would take (`needed ×
///   spacing ≈ probes × interval`), for a relapse to show; its run is a count of answers,
///   each one request, not a length of time (25 s at 20 % with an interval apart).
pub fn run_spacing(interval_ms: u32, probes: u32, needed: u32) -> u64 {
    let interval = u64::from(interval_ms);
    let probes = u64::from(probes.max(1));
    let needed = u64::from(needed.max(1));
    let spacing = if needed <= probes {
        interval / (2 * probes)
    } else {
        interval * probes / needed
    };
    spacing.clamp(MIN_RUN_SPACING_MS.min(interval), interval)
}

/// The run needed after a relapse: doubled, at least `soft`, at most [`RELAPSE_CAP`] × `soft`.
pub fn relapse(needed: u32, soft: u32) -> u32 {
    needed
        .saturating_mul(2)
        .max(soft)
        .min(soft.saturating_mul(RELAPSE_CAP))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_runs_take_the_time_of_probes_probes() {
        // A hard failure's run: the rest of it within half an interval.
        assert_eq!(run_spacing(1000, 3, 3), 166);
        assert_eq!(run_spacing(1000, 1, 1), 500);
        assert_eq!(run_spacing(200, 3, 3), MIN_RUN_SPACING_MS);
        // 25 after a 20 % brownout: 120 ms apart, 3 s for the run.
        assert_eq!(run_spacing(1000, 3, 25), 120);
        // Four times that after relapses: the floor.
        assert_eq!(run_spacing(1000, 3, 100), MIN_RUN_SPACING_MS);
        // Never further apart than the interval, nor closer than it when it is tiny.
        assert_eq!(run_spacing(20, 3, 25), 20);
        assert_eq!(run_spacing(0, 3, 25), 0);
    }

    #[test]
    fn hard_runs_by_rate() {
        // rate, H: 0.2^3 = 0.008 <= 1 %, 0.5^7 = 0.0078, 0.1^2 = 0.01 exactly.
        for (rate, h) in [
            (2000, 4),
            (5000, 8),
            (1000, 3),
            (500, 3),
            (9000, 45),
            (10_000, 1),
        ] {
            assert_eq!(hard_run(rate), h, "rate {rate}");
        }
        assert!(hard_run(0) >= 1);
    }

    #[test]
    fn soft_runs_by_rate() {
        // 0.8^24 = 0.0047 <= 0.5 % < 0.8^23; 0.5^8 = 0.0039.
        for (rate, probes, k) in [
            (2000, 3, 25),
            (5000, 3, 9),
            (1000, 3, 52),
            (2500, 3, 20),
            (9000, 3, 4),
            (9900, 3, 3),
            (10_000, 3, 3),
            (5000, 12, 12),
            (1, 3, MAX_SOFT_RUN),
            (0, 3, MAX_SOFT_RUN),
        ] {
            assert_eq!(soft_run(rate, probes), k, "rate {rate} probes {probes}");
        }
        let q: f64 = 0.8;
        assert!(q.powi(24) <= FOOLS_SOFT && q.powi(23) > FOOLS_SOFT);
    }

    #[test]
    fn hard_needs_a_long_run_holding_most_of_the_window() {
        assert!(is_hard(4, 4, 2000));
        assert!(!is_hard(3, 4, 2000), "shorter than H");
        assert!(
            !is_hard(7, 9, 5000),
            "shorter than H, and the window holds more"
        );
        assert!(
            is_hard(3, 3, 5000),
            "the window holds fewer than H: all in the run"
        );
        assert!(!is_hard(2, 3, 5000));
        assert!(is_hard(300, 400, 2000));
        assert!(
            !is_hard(299, 400, 2000),
            "too many failures lie outside the run"
        );
        assert!(is_hard(1, 1, 10_000));
    }

    #[test]
    fn relapses_double_from_at_least_soft_up_to_the_cap() {
        assert_eq!(relapse(3, 25), 25, "a hard trip that relapses is soft");
        assert_eq!(relapse(25, 25), 50);
        assert_eq!(relapse(50, 25), 100);
        assert_eq!(relapse(100, 25), 100);
        assert_eq!(relapse(u32::MAX, u32::MAX), u32::MAX);
    }
}
