//! The relative rules ([`outlier::assess`]) on seeded pools: each server's window filled with
//! exponentially distributed response times through the real histogram, and Bernoulli
//! failures. How often a healthy pool (every server alike) names an outlier, how often a
//! slow or failing server is found, by window size. Deterministic; `--nocapture` prints the
//! table quoted in docs/ejection.md.

use circuit_breaker_core::breaker::histogram::{Histogram, HistogramSum};
use circuit_breaker_core::eject::outlier::{self, Outlier, Relative, Sample};

const RULES: Relative = Relative {
    latency_factor: 300,
    failures: true,
    min_requests: 10,
};

/// splitmix64: small, seedable, good enough for service times and failures.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

/// One server's window: `n` attempts of mean `mean_ms`, each failing with probability `p`.
fn window(rng: &mut Rng, n: u64, mean_ms: f64, p: f64) -> Sample {
    let mut h = Histogram::EMPTY;
    let mut failures = 0;
    for _ in 0..n {
        h.add((-rng.unit().ln() * mean_ms).round() as u64);
        failures += u64::from(rng.unit() < p);
    }
    let mut sum = HistogramSum::default();
    sum.merge(&h);
    Sample::of(true, n, failures, &sum)
}

/// Of `trials` pools of `servers` (the first with `slow`× the mean and failure rate `bad`,
/// the others `p`), how many named the first, and how many named another.
fn run(seed: u64, trials: u32, servers: usize, n: u64, slow: f64, bad: f64, p: f64) -> (u32, u32) {
    let mut rng = Rng(seed);
    let (mut found, mut wrong) = (0, 0);
    for _ in 0..trials {
        let pool: Vec<Sample> = (0..servers)
            .map(|i| {
                if i == 0 {
                    window(&mut rng, n, 20.0 * slow, bad)
                } else {
                    window(&mut rng, n, 20.0, p)
                }
            })
            .collect();
        let got = outlier::assess(&pool, &RULES);
        found += u32::from(got.iter().any(|o| o.0 == 0));
        wrong += u32::from(got.iter().any(|o| o.0 != 0));
    }
    (found, wrong)
}

#[test]
fn a_healthy_pool_names_no_outlier() {
    for (servers, n) in [(3, 20), (4, 20), (4, 50), (4, 250), (10, 100)] {
        let (first, other) = run(n + servers as u64, 2000, servers, n, 1.0, 0.01, 0.01);
        eprintln!(
            "healthy {servers} x {n}: {} of 2000 pools named one",
            first + other
        );
        assert_eq!(first + other, 0, "{servers} servers, {n} attempts each");
    }
}

#[test]
fn a_server_twice_as_slow_is_no_latency_outlier_at_3x() {
    for n in [20, 50, 250, 1000] {
        let (found, wrong) = run(7 + n, 2000, 4, n, 2.0, 0.0, 0.0);
        eprintln!("2x, 4 x {n}: {found} of 2000");
        assert!(found <= 2, "{n} attempts: {found} of 2000");
        assert_eq!(wrong, 0);
    }
}

/// Each judgement is one window; the shell judges once a second, so a share found per
/// window of a half is found within a few seconds.
#[test]
fn a_server_five_times_slower_is_found() {
    for (n, least) in [(50, 900), (250, 1990), (1000, 2000)] {
        let (found, wrong) = run(11 + n, 2000, 4, n, 5.0, 0.0, 0.0);
        eprintln!("5x, 4 x {n}: {found} of 2000");
        assert!(found >= least, "{n} attempts: {found} of 2000");
        assert_eq!(wrong, 0);
    }
}

#[test]
fn failures_one_in_five_at_five_percent_against_a_tenth() {
    let (found, wrong) = run(3, 2000, 5, 200, 1.0, 0.05, 0.001);
    eprintln!("5% vs 0.1%, 5 x 200: {found} of 2000, others {wrong}");
    assert!(found >= 900, "{found} of 2000");
    assert_eq!(wrong, 0);
    let (found, wrong) = run(5, 2000, 5, 500, 1.0, 0.05, 0.001);
    eprintln!("5% vs 0.1%, 5 x 500: {found} of 2000, others {wrong}");
    assert!(found >= 1990, "{found} of 2000");
    assert_eq!(wrong, 0);
}

#[test]
fn five_servers_all_failing_five_percent_name_nobody() {
    for n in [100, 200, 1000] {
        let (first, other) = run(17 + n, 2000, 5, n, 1.0, 0.05, 0.05);
        eprintln!("all 5%, 5 x {n}: {} of 2000", first + other);
        assert_eq!(first + other, 0, "{n} attempts each");
    }
}

/// The table in docs/ejection.md: `cargo test --release -p circuit-breaker-core --test
/// outlier_sim -- --ignored --nocapture`.
#[test]
#[ignore]
fn table() {
    eprintln!("| attempts per server | healthy | 2x | 3x | 5x | 10x | 5 % among 0.1 % |");
    eprintln!("|---|---|---|---|---|---|---|");
    let share = |(found, wrong): (u32, u32)| format!("{:.2} %", f64::from(found + wrong) / 100.0);
    for n in [20u64, 50, 100, 250, 1000] {
        eprintln!(
            "| {n} | {} | {} | {} | {} | {} | {} |",
            share(run(n, 10_000, 4, n, 1.0, 0.01, 0.01)),
            share(run(n + 1, 10_000, 4, n, 2.0, 0.0, 0.0)),
            share(run(n + 2, 10_000, 4, n, 3.0, 0.0, 0.0)),
            share(run(n + 3, 10_000, 4, n, 5.0, 0.0, 0.0)),
            share(run(n + 4, 10_000, 4, n, 10.0, 0.0, 0.0)),
            share(run(n + 5, 10_000, 5, n, 1.0, 0.05, 0.001)),
        );
    }
}

#[test]
fn the_reason_names_the_figures() {
    let o = Outlier::Latency {
        ms: 412,
        pool_ms: 79,
    };
    assert_eq!(o.to_string(), "latency p90 412ms is 5.2x the pool's 79ms");
}
