//! `circuit_breaker`'s words: the breaker's own parameters and its companions' (active
//! probes, the adaptive limit, the retry budget), parsed one group at a time and checked
//! together.

use super::*;

/// An active health probe (`probe_uri=` or `probe_grpc=`, and their companions): what the
/// module sends to an upstream's servers while its breaker is open, and what counts as
/// healthy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    /// Path and query, from `/` (for a gRPC probe, the health service's method).
    pub uri: String,
    /// `probe_grpc=`: the service whose health `grpc.health.v1.Health/Check` asks for over
    /// HTTP/2 (empty: the server's); `None` for an HTTP/1.1 `GET` of `uri`.
    pub grpc: Option<String>,
    /// `Host` header; `None`: the upstream's name, as `proxy_pass` sends it by default.
    pub host: Option<String>,
    /// Statuses that count as healthy, as inclusive ranges (`probe_status=200-399`).
    pub statuses: Vec<(u16, u16)>,
    /// The probe's deadline, connect to last byte of the head, in milliseconds.
    pub timeout_ms: u32,
}

impl ProbeSpec {
    /// Whether an HTTP answer with `status` counts as healthy: one in `probe_status`, and
    /// never for a gRPC probe, whose verdict is the health answer's.
    pub fn healthy(&self, status: u16) -> bool {
        self.grpc.is_none()
            && self
                .statuses
                .iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&status))
    }
}

/// Everything `circuit_breaker` sets: the breaker's own parameters, which live in shared
/// memory, and those of the shell's companions.
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerParams {
    /// The breaker (its `active` flag set when a probe is configured).
    pub cfg: BreakerConfig,
    /// `probe_uri=` and companions.
    pub probe: Option<ProbeSpec>,
    /// `limit=adaptive` and `limit_*`.
    pub limit: Option<LimitConfig>,
    /// `retry_budget=` and `retry_min=`; `None` with `retry_budget=off`.
    pub retry: Option<RetryBudgetConfig>,
}

/// Default deadline of an active probe: a healthy origin answers a health check well within
/// a second, and a probe that hangs must be judged before the next one is due.
pub const DEFAULT_PROBE_TIMEOUT_MS: u32 = 1000;

fn parse_statuses(word: &str, v: &str) -> Result<Vec<(u16, u16)>, ConfError> {
    let bad = || {
        invalid(
            word,
            Some("must be statuses or ranges from 100 to 599, such as 200-399"),
        )
    };
    let code = |s: &str| -> Result<u16, ConfError> {
        match s.parse::<u16>() {
            Ok(c) if (100..=599).contains(&c) && s.len() == 3 => Ok(c),
            _ => Err(bad()),
        }
    };
    let mut out = Vec::new();
    for part in v.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (code(a)?, code(b)?),
            None => (code(part)?, code(part)?),
        };
        if lo > hi || out.len() == 16 {
            return Err(bad());
        }
        out.push((lo, hi));
    }
    Ok(out)
}

fn on_off_duration(units: &dyn Units, word: &str, v: &str) -> Result<u32, ConfError> {
    if v == "off" {
        Ok(0)
    } else {
        duration_u32(units, word, v, false)
    }
}

/// Parses the words after `circuit_breaker` (`window=10s min_requests=20 … dry_run`) over
/// the README's defaults. The failure classes are left at their default; they come from
/// `circuit_breaker_failure`.
pub fn parse_breaker_args<'a>(
    words: impl IntoIterator<Item = &'a str>,
    units: &dyn Units,
) -> Result<BreakerParams, ConfError> {
    let mut p = Parsed::new();
    let mut seen = Seen::new();
    for word in words {
        let (key, value) = match word.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (word, None),
        };
        // The list is the one the replay tool reads words by: a name the parser takes that
        // it lacks is refused here too.
        if !BREAKER_PARAMETERS.contains(&key) {
            return Err(ConfError::InvalidParameter(word.to_owned()));
        }
        if seen.has(key) {
            return Err(ConfError::Conflict(format!(
                "duplicate parameter \"{key}\" in \"{CB}\" directive"
            )));
        }
        let Some(v) = value else {
            if word == "dry_run" {
                p.c.dry_run = true;
                seen.push(key);
                continue;
            }
            return Err(ConfError::InvalidParameter(word.to_owned()));
        };
        let known = p.breaker_param(units, word, key, v)?
            || p.probe_param(units, word, key, v)?
            || p.limit_param(units, word, key, v)?
            || p.retry_param(word, key, v)?;
        if !known {
            return Err(ConfError::InvalidParameter(word.to_owned()));
        }
        seen.push(key);
    }
    p.finish(&seen)
}

/// Every parameter `circuit_breaker` takes, by name (`dry_run` has no value).
pub const BREAKER_PARAMETERS: &[&str] = &[
    "window",
    "min_requests",
    "failure_rate",
    "slow",
    "slow_rate",
    "open",
    "max_open",
    "jitter",
    "probes",
    "probe_interval",
    "probe_latency",
    "consecutive",
    "ramp",
    "ramp_start",
    "suspect_min",
    "probe_uri",
    "probe_grpc",
    "probe_host",
    "probe_status",
    "probe_timeout",
    "limit",
    "limit_min",
    "limit_max",
    "limit_initial",
    "limit_tolerance",
    "limit_interval",
    "limit_samples",
    "limit_remeasure",
    "retry_budget",
    "retry_min",
    "dry_run",
];

/// The `limit_*` companions of `limit=adaptive`.
pub(crate) const LIMIT_COMPANIONS: [&str; 7] = [
    "limit_min",
    "limit_max",
    "limit_initial",
    "limit_tolerance",
    "limit_interval",
    "limit_samples",
    "limit_remeasure",
];

/// What `circuit_breaker`'s words set so far: the breaker's own parameters and each
/// companion's, parsed by one method per group and checked together at the end.
struct Parsed {
    c: BreakerConfig,
    probe: ProbeSpec,
    limit: LimitConfig,
    adaptive: bool,
    retry: Option<RetryBudgetConfig>,
    retry_min: Option<u32>,
}

fn needs(what: &str, of: &str) -> ConfError {
    ConfError::Conflict(format!(
        "\"{what}\" requires \"{of}\" in \"{CB}\" directive"
    ))
}

impl Parsed {
    fn new() -> Parsed {
        Parsed {
            c: BreakerConfig::default(),
            probe: ProbeSpec {
                uri: String::new(),
                grpc: None,
                host: None,
                statuses: vec![(200, 399)],
                timeout_ms: DEFAULT_PROBE_TIMEOUT_MS,
            },
            limit: LimitConfig::default(),
            adaptive: false,
            retry: Some(RetryBudgetConfig::default()),
            retry_min: None,
        }
    }

    /// The breaker's own parameters; `false` for another's.
    fn breaker_param(
        &mut self,
        units: &dyn Units,
        word: &str,
        key: &str,
        v: &str,
    ) -> Result<bool, ConfError> {
        let c = &mut self.c;
        match key {
            "window" => {
                let ms = units.msec(v).ok_or_else(|| invalid(word, None))?;
                if ms < 1000 || ms % 1000 != 0 || ms / 1000 > u64::from(MAX_WINDOW_S) {
                    return Err(invalid(word, Some("must be whole seconds from 1s to 300s")));
                }
                c.window_s = (ms / 1000) as u32;
            }
            "min_requests" => c.min_requests = count_u32(word, v)?,
            "failure_rate" => c.failure_rate = threshold(word, v)?,
            "slow" => c.slow_ms = on_off_duration(units, word, v)?,
            "slow_rate" => c.slow_rate = threshold(word, v)?,
            "open" => c.open_ms = duration_u32(units, word, v, false)?,
            "max_open" => c.max_open_ms = duration_u32(units, word, v, false)?,
            "jitter" => c.jitter = rate(word, v)?,
            "probes" => c.probes = count_u32(word, v)?,
            "probe_interval" => c.probe_interval_ms = duration_u32(units, word, v, false)?,
            "probe_latency" if v == "off" => c.probe_latency_ms = PROBE_LATENCY_OFF,
            "probe_latency" => c.probe_latency_ms = duration_u32(units, word, v, false)?,
            "consecutive" if v == "off" => c.consecutive = 0,
            "consecutive" => c.consecutive = count_u32(word, v)?,
            "ramp" => c.ramp_ms = on_off_duration(units, word, v)?,
            "ramp_start" => c.ramp_start = threshold(word, v)?,
            "suspect_min" => c.suspect_min = count_u32(word, v)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `probe_uri=`, `probe_grpc=` and their companions.
    fn probe_param(
        &mut self,
        units: &dyn Units,
        word: &str,
        key: &str,
        v: &str,
    ) -> Result<bool, ConfError> {
        let probe = &mut self.probe;
        match key {
            "probe_uri" => {
                if !v.starts_with('/') || v.bytes().any(|b| b <= b' ' || b == 0x7f) {
                    return Err(invalid(word, Some("must be a path from \"/\"")));
                }
                probe.uri = v.to_owned();
                self.c.active = true;
            }
            "probe_grpc" => {
                if !crate::grpc::health::valid_service(v) {
                    return Err(invalid(
                        word,
                        Some("must be a gRPC service name, or empty for the server's health"),
                    ));
                }
                probe.uri = crate::grpc::health::PATH.to_owned();
                probe.grpc = Some(v.to_owned());
                self.c.active = true;
            }
            "probe_host" => {
                if v.is_empty() || v.bytes().any(|b| b <= b' ' || b == 0x7f) {
                    return Err(invalid(word, None));
                }
                probe.host = Some(v.to_owned());
            }
            "probe_status" => probe.statuses = parse_statuses(word, v)?,
            "probe_timeout" => probe.timeout_ms = duration_u32(units, word, v, false)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `limit=` and `limit_*`.
    fn limit_param(
        &mut self,
        units: &dyn Units,
        word: &str,
        key: &str,
        v: &str,
    ) -> Result<bool, ConfError> {
        let limit = &mut self.limit;
        match key {
            "limit" => match v {
                "adaptive" => self.adaptive = true,
                "off" => self.adaptive = false,
                _ => return Err(invalid(word, Some("must be \"adaptive\" or \"off\""))),
            },
            "limit_min" => limit.limit_min = count_u32(word, v)?,
            "limit_max" => limit.limit_max = count_u32(word, v)?,
            "limit_initial" => limit.limit_initial = count_u32(word, v)?,
            "limit_tolerance" => limit.tolerance = rate(word, v)?,
            "limit_interval" => limit.interval_ms = duration_u32(units, word, v, false)?,
            "limit_samples" => limit.samples = count_u32(word, v)?,
            "limit_remeasure" => limit.remeasure_ms = duration_u32(units, word, v, false)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `retry_budget=` and `retry_min=`.
    fn retry_param(&mut self, word: &str, key: &str, v: &str) -> Result<bool, ConfError> {
        match key {
            "retry_budget" => {
                self.retry = if v == "off" {
                    None
                } else {
                    Some(RetryBudgetConfig {
                        budget: rate(word, v)?,
                        ..RetryBudgetConfig::default()
                    })
                }
            }
            "retry_min" => {
                self.retry_min = Some(match v.parse::<u32>() {
                    Ok(n) if !v.starts_with('+') => n,
                    _ => return Err(invalid(word, None)),
                })
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The rules between parameters, then the result.
    fn finish(mut self, seen: &Seen) -> Result<BreakerParams, ConfError> {
        self.check_breaker(seen)?;
        self.check_probe(seen)?;
        self.check_limit(seen)?;
        self.check_retry()?;
        let c = self.c;
        Ok(BreakerParams {
            cfg: c,
            probe: c.active.then_some(self.probe),
            limit: self.adaptive.then_some(self.limit),
            retry: self.retry,
        })
    }

    fn check_breaker(&mut self, seen: &Seen) -> Result<(), ConfError> {
        let c = &mut self.c;
        if c.max_open_ms < c.open_ms {
            if seen.has("max_open") {
                return Err(ConfError::Conflict(format!(
                    "\"max_open\" must not be less than \"open\" in \"{CB}\" directive"
                )));
            }
            // Only `open` was raised above the default cap: the cap follows it.
            c.max_open_ms = c.open_ms;
        }
        if seen.has("slow_rate") && !seen.has("slow") {
            return Err(needs("slow_rate", "slow"));
        }
        if seen.has("ramp_start") && c.ramp_ms == 0 {
            return Err(needs("ramp_start", "ramp"));
        }
        Ok(())
    }

    fn check_probe(&self, seen: &Seen) -> Result<(), ConfError> {
        if seen.has("probe_uri") && seen.has("probe_grpc") {
            return Err(ConfError::Conflict(format!(
                "\"probe_uri\" and \"probe_grpc\" are mutually exclusive in \"{CB}\" directive"
            )));
        }
        if seen.has("probe_status") && seen.has("probe_grpc") {
            // A health answer's verdict is its serving status, not its HTTP status.
            return Err(ConfError::Conflict(format!(
                "\"probe_status\" does not apply to \"probe_grpc\" in \"{CB}\" directive"
            )));
        }
        for p in ["probe_host", "probe_status", "probe_timeout"] {
            if seen.has(p) && !self.c.active {
                return Err(needs(p, "probe_uri"));
            }
        }
        Ok(())
    }

    fn check_limit(&mut self, seen: &Seen) -> Result<(), ConfError> {
        for p in LIMIT_COMPANIONS {
            if seen.has(p) && !self.adaptive {
                return Err(needs(p, "limit=adaptive"));
            }
        }
        if !self.adaptive {
            return Ok(());
        }
        let limit = &mut self.limit;
        if !seen.has("limit_initial") {
            // A fresh limit starts inside the bounds the operator chose.
            limit.limit_initial = limit
                .limit_initial
                .max(limit.limit_min)
                .min(limit.limit_max);
        }
        if let Err(e) = limit.check() {
            use crate::limit::LimitConfigError as E;
            let rule = match e {
                E::LimitMin => "\"limit_min\" must be at least 1",
                E::LimitMax => "\"limit_max\" must be between \"limit_min\" and 16777215",
                E::LimitInitial => {
                    "\"limit_initial\" must be between \"limit_min\" and \"limit_max\""
                }
                E::Tolerance => "\"limit_tolerance\" must be at most 100%",
                E::Interval => "\"limit_interval\" must be at most 60s",
                E::Samples => "\"limit_samples\" must be at most 100000",
                E::Remeasure => "\"limit_remeasure\" must be at least ten \"limit_interval\"s",
            };
            return Err(ConfError::Conflict(format!("{rule} in \"{CB}\" directive")));
        }
        Ok(())
    }

    fn check_retry(&mut self) -> Result<(), ConfError> {
        match (self.retry.as_mut(), self.retry_min) {
            (Some(r), Some(m)) => r.min_per_s = m,
            (None, Some(_)) => return Err(needs("retry_min", "retry_budget")),
            _ => {}
        }
        if let Some(r) = &self.retry {
            if r.check().is_err() {
                return Err(invalid("retry_min", Some("is too large")));
            }
        }
        Ok(())
    }
}
