//! Relative ejection: a server judged against its pool rather than against fixed rates.
//!
//! The absolute rules ([`super::server_config`]) eject a server whose own window crosses the
//! breaker's `failure_rate` or `slow_rate`. They miss the quiet fault of a pool: one server
//! several times slower than its siblings while the `slow` bound suits the pool's ordinary
//! tail, or one that fails 5 % of its calls while its peers fail 0.1 %. These rules compare
//! each server with the others, once a second, from the same windows:
//!
//! - **Who takes part.** A primary server in the pool (not ejected, probing, or held by the
//!   operator) with at least [`Relative::min_requests`] attempts in its window. With fewer
//!   than [`MIN_SERVERS`] such servers nothing is judged: two cannot say which one is odd.
//! - **Latency.** Each server's [`PERCENTILE`] (p90) response time, from its window's
//!   histogram. The pool's latency is the median of those (the mean of the two middle ones
//!   in a pool of even size), so that a few slow servers do not move it and half of them
//!   slow do. A server whose p90 is, with confidence ([`Sample::latency_low_ms`]: three
//!   standard errors of its rank), at least `latency_factor` times the pool's, and at least
//!   [`MIN_GAP_MS`] above it, is an outlier. A pool uniformly slow has no outlier: that is
//!   the upstream breaker's business.
//! - **Failures.** A server's failures are compared with those of the other servers (the
//!   reference), less any of them that is itself an outlier against the rest, so that a
//!   second bad server does not hide the first. Were the server failing at the reference's
//!   rate, its share of all their `F` failures would follow a binomial law with its share
//!   `π` of the attempts; it is an outlier when its share `s` is above `π` and
//!   `F · KL(s ‖ π) ≥ ln 10⁶` (by the Chernoff bound, at most a one-in-a-million chance; the
//!   test conditions on `F`, so the reference's own few failures are no false certainty),
//!   its rate is at least twice the reference's (smoothed by one failure and one success,
//!   Laplace's rule) and a percentage point above it, and it has at least [`MIN_FAILURES`]
//!   (fewer may be one burst). So five servers all failing 5 % eject nobody, and one failing 5 % among
//!   servers failing 0.1 % goes once it has about two hundred attempts.
//!
//! [`assess`] names the outliers, worst first; the shell ejects them while the pool's cap
//! ([`super::max_ejected`]) allows, with the reason [`Outlier`] writes.

use core::fmt;

use crate::breaker::histogram::HistogramSum;

/// The latency percentile judged, per mille.
pub const PERCENTILE: u64 = 900;
/// Fewest servers with enough attempts for any relative judgement.
pub const MIN_SERVERS: usize = 3;
/// Fewest attempts of a server in its window before it takes part, whatever `min_requests`
/// says: a p90 of fewer is mostly noise.
pub const MIN_REQUESTS: u64 = 20;
/// A latency outlier is at least this far above the pool's latency, whatever the ratio:
/// below it, the histogram's bins (±17 %) and a millisecond's rounding make the ratio.
pub const MIN_GAP_MS: u64 = 5;
/// A failure outlier's window is at most this likely (as `ln(1/p)`) for a server failing
/// at the pool's rate: ln 10⁶.
pub const EVIDENCE: f64 = 13.815_510_557_964_274;
/// A failure outlier fails at least this many times as often as its reference.
pub const FAILURE_FACTOR: f64 = 2.0;
/// A failure outlier has at least this many failures in its window: fewer may be one burst
/// (a reset of a few kept-alive connections), which the binomial law does not describe.
pub const MIN_FAILURES: u64 = 10;
/// ... and fails at least this much more often than its reference (a rate): a server
/// failing 0.5 % beside servers that never fail is not worth a pool's capacity.
pub const MIN_RATE_GAP: f64 = 0.01;
/// Standard errors of confidence in a latency outlier's p90: one whose window's p90 is
/// high by chance (a few unlucky calls of few) is not one.
pub const CONFIDENCE_Z: f64 = 3.0;

/// `circuit_breaker_eject`'s relative rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relative {
    /// A latency outlier's p90 is at least this many hundredths of the pool's (300: 3×);
    /// 0: the latency rule is off.
    pub latency_factor: u32,
    /// The failure rule is on.
    pub failures: bool,
    /// Fewest attempts in a server's window for it to take part (at least
    /// [`MIN_REQUESTS`]).
    pub min_requests: u64,
}

impl Relative {
    /// Both rules off.
    pub const OFF: Relative = Relative {
        latency_factor: 0,
        failures: false,
        min_requests: MIN_REQUESTS,
    };

    /// Whether any rule is on.
    pub fn is_on(&self) -> bool {
        self.latency_factor > 0 || self.failures
    }

    fn min(&self) -> u64 {
        self.min_requests.max(MIN_REQUESTS)
    }
}

/// One server, as the relative rules see it now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// A primary server in the pool, not held by the operator.
    pub eligible: bool,
    /// Attempts in its window.
    pub requests: u64,
    /// Of which failures.
    pub failures: u64,
    /// Its window's [`PERCENTILE`] response time, `None` without samples.
    pub latency_ms: Option<u64>,
    /// What its p90 is at least, with [`CONFIDENCE_Z`] standard errors' confidence: the
    /// percentile at the rank `0.9 n - z √(0.09 n)` of its `n` response times.
    pub latency_low_ms: Option<u64>,
}

impl Sample {
    /// A server's sample from its window: `requests`, `failures`, and the histogram of its
    /// response times.
    pub fn of(eligible: bool, requests: u64, failures: u64, latency: &HistogramSum) -> Sample {
        Sample {
            eligible,
            requests,
            failures,
            latency_ms: latency.percentile_within(PERCENTILE),
            latency_low_ms: latency.percentile_within(low_permille(latency.total())),
        }
    }
}

/// The per-mille rank below which a window of `n` response times holds its true p90's
/// sample with confidence [`CONFIDENCE_Z`] (the binomial spread of the count below it).
pub fn low_permille(n: u64) -> u64 {
    if n == 0 {
        return PERCENTILE;
    }
    let p = PERCENTILE as f64 / 1000.0;
    let spread = CONFIDENCE_Z * (p * (1.0 - p) / n as f64).sqrt();
    ((p - spread).max(0.5) * 1000.0).floor() as u64
}

/// Why a server is an outlier, with the figures a log line and the status page show.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Outlier {
    /// Its p90 is `ms`, the pool's `pool_ms`.
    Latency { ms: u64, pool_ms: u64 },
    /// `failures` of its `requests` failed; of the reference's `pool_requests`,
    /// `pool_failures`.
    Failures {
        failures: u64,
        requests: u64,
        pool_failures: u64,
        pool_requests: u64,
    },
}

impl Outlier {
    /// How many times worse than the pool it is (the order in which outliers go).
    pub fn ratio(&self) -> f64 {
        match *self {
            Outlier::Latency { ms, pool_ms } => ms as f64 / (pool_ms.max(1)) as f64,
            Outlier::Failures {
                failures,
                requests,
                pool_failures,
                pool_requests,
            } => rate(failures, requests) / smoothed(pool_failures, pool_requests),
        }
    }

    /// The latency a returning server's probes must stay within: `factor` (hundredths) of
    /// the pool's; `None` for a failure outlier.
    pub fn probe_limit_ms(&self, factor: u32) -> Option<u64> {
        match *self {
            Outlier::Latency { pool_ms, .. } => Some(limit_of(pool_ms, factor)),
            Outlier::Failures { .. } => None,
        }
    }
}

impl fmt::Display for Outlier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = self.ratio();
        match *self {
            Outlier::Latency { ms, pool_ms } => {
                write!(f, "latency p90 {ms}ms is {x:.1}x the pool's {pool_ms}ms")
            }
            Outlier::Failures {
                failures,
                requests,
                pool_failures,
                pool_requests,
            } => write!(
                f,
                "failure rate {} ({failures}/{requests}) is {x:.1}x the pool's {}",
                percent(failures, requests),
                percent(pool_failures, pool_requests),
            ),
        }
    }
}

fn percent(part: u64, whole: u64) -> String {
    format!("{:.1}%", 100.0 * rate(part, whole))
}

fn rate(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The reference's failure rate with one failure and one success added (Laplace's rule).
fn smoothed(failures: u64, requests: u64) -> f64 {
    (failures as f64 + 1.0) / (requests as f64 + 2.0)
}

/// The latency a server must reach to be an outlier of a pool whose latency is `pool_ms`,
/// and that a latency outlier's probes must stay within: `factor` hundredths of it, and at
/// least [`MIN_GAP_MS`] above it.
pub fn limit_of(pool_ms: u64, factor: u32) -> u64 {
    let scaled = pool_ms.saturating_mul(u64::from(factor)) / 100;
    scaled.max(pool_ms.saturating_add(MIN_GAP_MS))
}

/// The Kullback–Leibler divergence of Bernoulli(`q`) from Bernoulli(`p`), `0 < p < 1`.
fn kl(q: f64, p: f64) -> f64 {
    let term = |a: f64, b: f64| if a <= 0.0 { 0.0 } else { a * (a / b).ln() };
    term(q, p) + term(1.0 - q, 1.0 - p)
}

/// The servers of `samples` that take part.
fn judged<'a>(
    samples: &'a [Sample],
    rel: &'a Relative,
) -> impl Iterator<Item = (usize, &'a Sample)> + 'a {
    samples
        .iter()
        .enumerate()
        .filter(move |(_, s)| s.eligible && s.requests >= rel.min())
}

/// The median of `v` (sorted here): the mean of the two middle values for an even count.
fn median(v: &mut [u64]) -> Option<u64> {
    v.sort_unstable();
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]).div_ceil(2)),
    }
}

/// The pool's latency: the median of the p90s of the servers that take part, `None` with
/// fewer than [`MIN_SERVERS`] of them.
pub fn pool_latency(samples: &[Sample], rel: &Relative) -> Option<u64> {
    let mut v: Vec<u64> = judged(samples, rel)
        .filter_map(|(_, s)| s.latency_ms)
        .collect();
    if v.len() < MIN_SERVERS {
        return None;
    }
    median(&mut v)
}

/// Whether `f` failures of `n` attempts are a failure outlier against `pf` of `pn`: at
/// least [`FAILURE_FACTOR`] times the reference's rate (smoothed), and more of the
/// `f + pf` failures than chance gives a server with its share of the attempts.
fn fails_more(f: u64, n: u64, pf: u64, pn: u64) -> bool {
    let all = f.saturating_add(pf);
    let (q, p) = (rate(f, n), smoothed(pf, pn));
    if f < MIN_FAILURES || q < FAILURE_FACTOR * p || q - rate(pf, pn) < MIN_RATE_GAP {
        return false;
    }
    let (share, expected) = (rate(f, all), rate(n, n.saturating_add(pn)));
    share > expected && all as f64 * kl(share, expected) >= EVIDENCE
}

/// The pool's failures and attempts that server `me` is compared with: those of the other
/// servers that take part, less any of them that is itself a failure outlier against the
/// rest (so that a second bad server does not hide the first). `None` with fewer than
/// [`MIN_SERVERS`] servers taking part.
pub fn reference(samples: &[Sample], rel: &Relative, me: usize) -> Option<(u64, u64)> {
    let others: Vec<&Sample> = judged(samples, rel)
        .filter(|&(i, _)| i != me)
        .map(|(_, s)| s)
        .collect();
    if others.len() + 1 < MIN_SERVERS {
        return None;
    }
    let f: u64 = others.iter().map(|s| s.failures).sum();
    let n: u64 = others.iter().map(|s| s.requests).sum();
    let (mut rf, mut rn) = (f, n);
    for s in &others {
        if fails_more(s.failures, s.requests, f - s.failures, n - s.requests) {
            rf -= s.failures;
            rn -= s.requests;
        }
    }
    Some(if rn == 0 { (f, n) } else { (rf, rn) })
}

/// The outliers of the pool `samples` under `rel`, worst first.
pub fn assess(samples: &[Sample], rel: &Relative) -> Vec<(usize, Outlier)> {
    let mut out = Vec::new();
    if !rel.is_on() {
        return out;
    }
    let pool_ms = if rel.latency_factor > 0 {
        pool_latency(samples, rel)
    } else {
        None
    };
    for (i, s) in judged(samples, rel) {
        if let (Some(pool_ms), Some(ms), Some(low)) = (pool_ms, s.latency_ms, s.latency_low_ms) {
            if low >= limit_of(pool_ms, rel.latency_factor) {
                out.push((i, Outlier::Latency { ms, pool_ms }));
                continue;
            }
        }
        if !rel.failures || s.failures == 0 {
            continue;
        }
        let Some((pf, pn)) = reference(samples, rel, i) else {
            continue;
        };
        if fails_more(s.failures, s.requests, pf, pn) {
            out.push((
                i,
                Outlier::Failures {
                    failures: s.failures,
                    requests: s.requests,
                    pool_failures: pf,
                    pool_requests: pn,
                },
            ));
        }
    }
    out.sort_by(|a, b| b.1.ratio().total_cmp(&a.1.ratio()));
    out
}

#[cfg(test)]
mod tests;
