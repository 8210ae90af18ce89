//! Seeded Bernoulli simulations of the real breaker: how many good probes close it (see
//! `breaker::judge`). (a) A hard failure that heals closes after exactly `probes`; (b) a steady
//! brownout at or above the tripping rate stays open through 40 probes in well over 99 % of
//! cases; (c) a brownout that heals closes within 4 K good probes.
//!
//! `cargo test --release -p circuit-breaker-core --test probe_rule -- --ignored --nocapture`
//! prints the full table quoted in `judge`'s documentation.

mod common;

use circuit_breaker_core::breaker::judge::{soft_run, RELAPSE_CAP};
use circuit_breaker_core::breaker::{Attempt, BreakerConfig, Ending};
use circuit_breaker_core::snapshot::State;
use common::*;
use proptest::prelude::*;

/// xorshift64*: small, seedable, good enough for Bernoulli draws.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) < p * (1u64 << 53) as f64
    }
}

fn outcome(fails: bool) -> Attempt {
    if fails {
        http(500)
    } else {
        ok()
    }
}

/// The issue's configuration: `window=5s min_requests=20 failure_rate=20% probes=3
/// probe_interval=1s`, active probes, no jitter.
fn issue_cfg() -> BreakerConfig {
    BreakerConfig {
        window_s: 5,
        min_requests: 20,
        failure_rate: 2000,
        probes: 3,
        active: true,
        ..cfg()
    }
}

/// Healthy traffic at `rps` for a whole window, then traffic failing with probability `p`
/// until the breaker trips (`None` if it has not after 200 windows).
fn run_until_trip(s: &mut Story, rng: &mut Rng, rps: u64, p: f64) -> Option<()> {
    let step = 1000 / rps.max(1);
    let window = u64::from(s.b.hdr.config().window_s) * rps;
    for _ in 0..window {
        s.request(&ok());
        s.wait(step);
    }
    for _ in 0..200 * window {
        if s.request(&outcome(rng.chance(p))).is_some() {
            return Some(());
        }
        s.wait(step);
    }
    None
}

/// Sends up to `n` probes (active, or passive after each cooldown), failing with probability
/// `p`; returns after how many the breaker closed. `old_rule` says whether `probes` good ones
/// in a row came up among them (what closed the breaker before).
fn probe_until_closed(s: &mut Story, rng: &mut Rng, p: f64, n: usize) -> (Option<usize>, bool) {
    let probes = s.b.hdr.config().probes as usize;
    let (mut run, mut old_rule) = (0, false);
    for i in 1..=n {
        let fails = rng.chance(p);
        run = if fails { 0 } else { run + 1 };
        old_rule |= run >= probes;
        let state = if s.b.hdr.config().active {
            s.next_active_probe(&outcome(fails)).state
        } else {
            let wait = s.rejected();
            s.wait(wait);
            let t = s.probe();
            s.record(t, &outcome(fails)).state
        };
        if state == State::Closed {
            return (Some(i), old_rule);
        }
    }
    (None, old_rule)
}

struct Tally {
    trips: u32,
    closed: u32,
    old_rule_closed: u32,
}

/// `runs` brownouts at failure probability `p`, each probed `n` times.
fn brownouts(cfg: BreakerConfig, rps: u64, p: f64, runs: u32, n: usize, seed: u64) -> Tally {
    let mut t = Tally {
        trips: 0,
        closed: 0,
        old_rule_closed: 0,
    };
    for i in 0..runs {
        let mut rng = Rng::new(seed ^ (u64::from(i) << 20));
        let mut s = Story::new(cfg);
        if run_until_trip(&mut s, &mut rng, rps, p).is_none() {
            continue;
        }
        t.trips += 1;
        let (closed, old) = probe_until_closed(&mut s, &mut rng, p, n);
        t.closed += u32::from(closed.is_some());
        t.old_rule_closed += u32::from(old);
    }
    t
}

#[test]
fn b_a_steady_brownout_at_the_threshold_stays_open() {
    // 1000 brownouts at exactly the tripping rate, 200 requests/s, 40 active probes each.
    let t = brownouts(issue_cfg(), 200, 0.2, 1000, 40, 1);
    assert_eq!(t.trips, 1000);
    assert!(t.closed < 10, "{} of 1000 closed", t.closed);
    // Three lucky probes in a row would have closed most of them.
    assert!(t.old_rule_closed > 900, "{}", t.old_rule_closed);
}

#[test]
fn b_even_at_low_traffic_a_brownout_at_the_threshold_stays_open() {
    // 8 requests/s: the 5 s window barely holds twice min_requests, the evidence is thin.
    let t = brownouts(issue_cfg(), 8, 0.2, 2000, 40, 8);
    assert_eq!(t.trips, 2000);
    assert!(t.closed < 20, "{} of 2000 closed", t.closed);
}

#[test]
fn b_brownouts_above_the_threshold_stay_open_too() {
    for (p, seed) in [(0.3, 2), (0.5, 3), (0.8, 4)] {
        let t = brownouts(issue_cfg(), 200, p, 300, 40, seed);
        assert_eq!(t.trips, 300, "p {p}");
        assert!(t.closed < 3, "p {p}: {} of 300 closed", t.closed);
    }
    // The defaults (50 %, min_requests 20, 10 s window) at 50 and 70 %, passive probes.
    let passive = BreakerConfig {
        open_ms: 1000,
        max_open_ms: 1000,
        ..cfg()
    };
    for (p, seed) in [(0.5, 5), (0.7, 6)] {
        let t = brownouts(passive, 50, p, 300, 40, seed);
        assert_eq!(t.trips, 300, "p {p}");
        assert!(t.closed < 3, "p {p}: {} of 300 closed", t.closed);
    }
}

#[test]
fn c_a_brownout_that_heals_closes_within_four_k_good_probes() {
    let cfg = issue_cfg();
    let k = soft_run(cfg.failure_rate, cfg.probes) as usize;
    assert_eq!(k, 25);
    let mut worst = 0;
    for i in 0..200u64 {
        let mut rng = Rng::new(1000 + i);
        let mut s = Story::new(cfg);
        run_until_trip(&mut s, &mut rng, 200, 0.2).expect("tripped");
        if probe_until_closed(&mut s, &mut rng, 0.2, 40).0.is_some() {
            continue;
        }
        // Healed: every probe succeeds from now on.
        let (closed, _) = probe_until_closed(&mut s, &mut rng, 0.0, RELAPSE_CAP as usize * k);
        let n = closed.expect("closed within 4 K after the heal");
        assert!(n >= k, "{n}");
        worst = worst.max(n);
    }
    assert!(worst > k, "some relapsed and needed more than K: {worst}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn a_a_hard_failure_that_heals_closes_after_exactly_probes(
        rate in prop_oneof![Just(2000u32), Just(5000), Just(10_000), 1u32..=10_000],
        min_requests in 1u32..=60,
        probes in 1u32..=5,
        window_s in 1u32..=30,
        rps in 1u64..=200,
        healthy_s in 0u64..=40,
        still_down in 0usize..=6,
        active in any::<bool>(),
        transport in prop_oneof![Just(Ending::Error), Just(Ending::Timeout)],
    ) {
        let cfg = BreakerConfig {
            window_s,
            min_requests,
            failure_rate: rate,
            probes,
            active,
            open_ms: 5000,
            ..cfg()
        };
        let step = 1000 / rps;
        // Traffic enough to reach min_requests within the window.
        prop_assume!(u64::from(window_s) * 1000 / step >= u64::from(min_requests));
        let mut s = Story::new(cfg);
        for _ in 0..healthy_s * rps {
            s.request(&ok());
            s.wait(step);
        }
        // Every attempt fails (refused, or hanging) until the breaker trips.
        let down = Attempt::ended(transport, 10);
        let mut tripped = false;
        for _ in 0..100_000 {
            if s.request(&down).is_some() {
                tripped = true;
                break;
            }
            s.wait(step);
        }
        prop_assert!(tripped);
        prop_assert_eq!(s.view().probes_needed, probes);
        // Down for a few more probes, then healed.
        let mut rng = Rng::new(0);
        prop_assert_eq!(probe_until_closed(&mut s, &mut rng, 1.0, still_down).0, None);
        let (closed, _) = probe_until_closed(&mut s, &mut rng, 0.0, 1000);
        prop_assert_eq!(closed, Some(probes as usize));
    }
}

#[test]
#[ignore = "prints the table of judge's documentation; slow in debug builds"]
fn the_full_table() {
    let rows: [(&str, BreakerConfig, u64); 5] = [
        ("20% min 20, 5s at 200/s", issue_cfg(), 200),
        ("20% min 20, 5s at 8/s", issue_cfg(), 8),
        (
            "50% min 20, 10s at 50/s",
            BreakerConfig {
                active: true,
                ..cfg()
            },
            50,
        ),
        (
            "50% min 5, 10s at 2/s",
            BreakerConfig {
                active: true,
                min_requests: 5,
                ..cfg()
            },
            2,
        ),
        (
            "50% min 4, 10s at 1/s",
            BreakerConfig {
                active: true,
                min_requests: 4,
                ..cfg()
            },
            1,
        ),
    ];
    for (name, cfg, rps) in rows {
        let t0 = f64::from(cfg.failure_rate) / 10_000.0;
        print!("{name:26}");
        for p in [t0, t0 + 0.1, 0.5, 0.7, 0.9] {
            if p > 0.95 {
                continue;
            }
            let t = brownouts(cfg, rps, p, 2000, 40, 7);
            print!(
                "  p={p:.1}: {:.2}% (old {:.0}%)",
                100.0 * f64::from(t.closed) / f64::from(t.trips.max(1)),
                100.0 * f64::from(t.old_rule_closed) / f64::from(t.trips.max(1))
            );
            assert!(t.trips > 1900, "{name} p={p}: {} trips", t.trips);
        }
        println!();
    }
}
