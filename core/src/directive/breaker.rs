//! `circuit_breaker`'s words: the breaker's own parameters and, deprecated, its companions'
//! (active probes, the adaptive limit, the retry budget: directives of their own now, parsed
//! by the same methods in `family`), parsed one group at a time and checked together.

use super::legacy::Legacy;
use super::*;

/// An active health probe (`circuit_breaker_probe`, or the deprecated `probe_uri=` or
/// `probe_grpc=` and their companions): what the
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
    /// `probe_status`'s default (`200-399`) when none was given.
    pub(super) fn with_default_statuses(mut self) -> ProbeSpec {
        if self.statuses.is_empty() {
            self.statuses = vec![(200, 399)];
        }
        self
    }

    /// Whether an HTTP answer with `status` counts as healthy: one in `probe_status`, and
    /// never for a gRPC probe, whose result is the health answer's.
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
    /// `probe_uri=` and companions (deprecated: `circuit_breaker_probe`).
    pub probe: Option<ProbeSpec>,
    /// `limit=adaptive` and `limit_*` (deprecated: `circuit_breaker_limit`).
    pub limit: Option<LimitConfig>,
    /// `retry_budget=` and `retry_min=` (deprecated: `circuit_breaker_retry_budget`); the
    /// default budget when not given, `None` with `retry_budget=off`.
    pub retry: Option<RetryBudgetConfig>,
    /// The parameters given that have a directive of their own now (a `warn` names it).
    pub legacy: Legacy,
}

/// Default deadline of an active probe: a healthy origin answers a health check well within
/// a second, and a probe that hangs must be judged before the next one is due.
pub const DEFAULT_PROBE_TIMEOUT_MS: u32 = 1000;

fn parse_statuses(d: &'static str, word: &str, v: &str) -> Result<Vec<(u16, u16)>, ConfError> {
    let bad = || {
        invalid(
            d,
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

fn on_off_duration(
    d: &'static str,
    units: &dyn Units,
    word: &str,
    v: &str,
) -> Result<u32, ConfError> {
    if v == "off" {
        return Ok(0);
    }
    match units.msec(v) {
        None => Err(invalid(d, word, Some(TIME_OR_OFF))),
        Some(_) => duration_u32(d, units, word, v, false),
    }
}

/// Parses the words after `circuit_breaker` (`window=10s min_requests=20 … dry_run`) over
/// the README's defaults. The failure classes are left at their default; they come from
/// `circuit_breaker_failure`.
pub fn parse_breaker_args<'a>(
    words: impl IntoIterator<Item = &'a str>,
    units: &dyn Units,
) -> Result<BreakerParams, ConfError> {
    let mut p = Parsed::new(CB);
    let mut seen = Seen::new();
    let mut legacy = Legacy::default();
    for word in words {
        let (key, value) = match word.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (word, None),
        };
        // The list is the one the replay tool reads words by: a name the parser takes that
        // it lacks is refused here too.
        let Some(&key) = BREAKER_PARAMETERS.iter().find(|&&k| k == key) else {
            return Err(hint::unknown_breaker_parameter(word, units));
        };
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
            return Err(hint::missing_value(word));
        };
        if word == "dry_run" || key == "dry_run" {
            return Err(invalid(CB, word, Some("\"dry_run\" takes no value")));
        }
        let known = p.breaker_param(units, word, key, v)?
            || p.probe_param(units, word, key, v)?
            || p.limit_param(units, word, key, v)?
            || p.retry_param(word, key, v)?;
        if !known {
            return Err(hint::unknown_breaker_parameter(word, units));
        }
        legacy.note(key, v);
        seen.push(key);
    }
    let mut params = p.finish(&seen)?;
    params.legacy = legacy;
    Ok(params)
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
pub(super) struct Parsed {
    /// The directive whose words these are (errors name it, and its parameters).
    d: &'static str,
    pub(super) c: BreakerConfig,
    pub(super) probe: ProbeSpec,
    pub(super) limit: LimitConfig,
    pub(super) adaptive: bool,
    pub(super) retry: Option<RetryBudgetConfig>,
    pub(super) retry_min: Option<u32>,
}

impl Parsed {
    /// A parameter's name in this directive: `probe_uri` is `circuit_breaker_probe`'s `uri`.
    pub(super) fn name(&self, key: &'static str) -> &'static str {
        if self.d == CB {
            return key;
        }
        ["probe_", "limit_", "retry_"]
            .iter()
            .find_map(|p| key.strip_prefix(p))
            .unwrap_or(key)
    }

    fn needs(&self, what: &'static str, of: &str) -> ConfError {
        ConfError::Conflict(format!(
            "\"{}\" requires \"{of}\" in \"{}\" directive",
            self.name(what),
            self.d
        ))
    }

    /// A companion's parameter of `circuit_breaker` without the one that turns it on: also
    /// the directive that says both (`"circuit_breaker_probe uri=... timeout=..."`).
    fn needs_companion(&self, what: &'static str, of: &str, new: &str) -> ConfError {
        let plain = self.needs(what, of);
        if self.d != CB {
            return plain;
        }
        ConfError::Conflict(format!("{plain}, or use \"{new}\""))
    }

    pub(super) fn new(d: &'static str) -> Parsed {
        Parsed {
            d,
            c: BreakerConfig::default(),
            probe: ProbeSpec {
                uri: String::new(),
                grpc: None,
                host: None,
                // `probe_status`'s default is set once a probe is configured: nothing is
                // allocated for a breaker without one (see `Seen`).
                statuses: Vec::new(),
                timeout_ms: DEFAULT_PROBE_TIMEOUT_MS,
            },
            limit: LimitConfig::default(),
            adaptive: false,
            retry: Some(RetryBudgetConfig::default()),
            retry_min: None,
        }
    }

    /// The breaker's own parameters; `false` for another's.
    pub(super) fn breaker_param(
        &mut self,
        units: &dyn Units,
        word: &str,
        key: &str,
        v: &str,
    ) -> Result<bool, ConfError> {
        let (d, c) = (self.d, &mut self.c);
        match key {
            "window" => {
                let whole = Some("must be whole seconds from 1s to 300s");
                let ms = units.msec(v).ok_or_else(|| invalid(d, word, whole))?;
                if ms < 1000 || ms % 1000 != 0 || ms / 1000 > u64::from(MAX_WINDOW_S) {
                    return Err(invalid(d, word, whole));
                }
                c.window_s = (ms / 1000) as u32;
            }
            "min_requests" => c.min_requests = count_u32(d, word, v)?,
            "failure_rate" => c.failure_rate = threshold(d, word, v)?,
            "slow" => c.slow_ms = on_off_duration(d, units, word, v)?,
            "slow_rate" => c.slow_rate = threshold(d, word, v)?,
            "open" => c.open_ms = duration_u32(d, units, word, v, false)?,
            "max_open" => c.max_open_ms = duration_u32(d, units, word, v, false)?,
            "jitter" => c.jitter = rate(d, word, v)?,
            "probes" => c.probes = count_u32(d, word, v)?,
            "probe_interval" => c.probe_interval_ms = duration_u32(d, units, word, v, false)?,
            "probe_latency" if v == "off" => c.probe_latency_ms = PROBE_LATENCY_OFF,
            "probe_latency" => c.probe_latency_ms = duration_u32(d, units, word, v, false)?,
            "consecutive" if v == "off" => c.consecutive = 0,
            "consecutive" => {
                c.consecutive = count_u32(d, word, v).map_err(|_| {
                    invalid(d, word, Some("must be a number of at least 1, or \"off\""))
                })?
            }
            "ramp" => c.ramp_ms = on_off_duration(d, units, word, v)?,
            "ramp_start" => c.ramp_start = threshold(d, word, v)?,
            "suspect_min" => c.suspect_min = count_u32(d, word, v)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `probe_uri=`, `probe_grpc=` and their companions.
    pub(super) fn probe_param(
        &mut self,
        units: &dyn Units,
        word: &str,
        key: &str,
        v: &str,
    ) -> Result<bool, ConfError> {
        let (d, probe) = (self.d, &mut self.probe);
        match key {
            "probe_uri" => {
                if !v.starts_with('/') || v.bytes().any(|b| b <= b' ' || b == 0x7f) {
                    return Err(invalid(d, word, Some("must be a path from \"/\"")));
                }
                probe.uri = v.to_owned();
                self.c.active = true;
            }
            "probe_grpc" => {
                if !crate::grpc::health::valid_service(v) {
                    return Err(invalid(
                        d,
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
                    return Err(invalid(d, word, Some("must be a host name")));
                }
                probe.host = Some(v.to_owned());
            }
            "probe_status" => probe.statuses = parse_statuses(d, word, v)?,
            "probe_timeout" => probe.timeout_ms = duration_u32(d, units, word, v, false)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `limit=` and `limit_*`.
    pub(super) fn limit_param(
        &mut self,
        units: &dyn Units,
        word: &str,
        key: &str,
        v: &str,
    ) -> Result<bool, ConfError> {
        let (d, limit) = (self.d, &mut self.limit);
        match key {
            "limit" => match v {
                "adaptive" => self.adaptive = true,
                "off" => self.adaptive = false,
                _ => return Err(invalid(d, word, Some("must be \"adaptive\" or \"off\""))),
            },
            "limit_min" => limit.limit_min = count_u32(d, word, v)?,
            "limit_max" => limit.limit_max = count_u32(d, word, v)?,
            "limit_initial" => limit.limit_initial = count_u32(d, word, v)?,
            "limit_tolerance" => limit.tolerance = rate(d, word, v)?,
            "limit_interval" => limit.interval_ms = duration_u32(d, units, word, v, false)?,
            "limit_samples" => limit.samples = count_u32(d, word, v)?,
            "limit_remeasure" => limit.remeasure_ms = duration_u32(d, units, word, v, false)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `retry_budget=` and `retry_min=`.
    pub(super) fn retry_param(
        &mut self,
        word: &str,
        key: &str,
        v: &str,
    ) -> Result<bool, ConfError> {
        let d = self.d;
        match key {
            "retry_budget" => {
                self.retry = if v == "off" {
                    None
                } else {
                    Some(RetryBudgetConfig {
                        budget: rate(d, word, v)?,
                        ..RetryBudgetConfig::default()
                    })
                }
            }
            "retry_min" => {
                self.retry_min = Some(match v.parse::<u32>() {
                    Ok(n) if !v.starts_with('+') => n,
                    _ => {
                        return Err(invalid(
                            d,
                            word,
                            Some("a whole number of retries per second is expected"),
                        ))
                    }
                })
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The rules between parameters, then the result.
    pub(super) fn finish(mut self, seen: &Seen) -> Result<BreakerParams, ConfError> {
        self.check_breaker(seen)?;
        self.check_probe(seen)?;
        self.check_limit(seen)?;
        self.check_retry()?;
        let c = self.c;
        Ok(BreakerParams {
            cfg: c,
            probe: c.active.then(|| self.probe.with_default_statuses()),
            limit: self.adaptive.then_some(self.limit),
            retry: self.retry,
            legacy: Legacy::default(),
        })
    }

    fn check_breaker(&mut self, seen: &Seen) -> Result<(), ConfError> {
        let c = &mut self.c;
        if c.max_open_ms < c.open_ms {
            if seen.has("max_open") {
                return Err(ConfError::Conflict(format!(
                    "\"max_open\" must not be less than \"open\" in \"{CB}\" directive, \
                     or be left out to follow \"open\""
                )));
            }
            // Only `open` was raised above the default cap: the cap follows it.
            c.max_open_ms = c.open_ms;
        }
        if seen.has("slow_rate") && !seen.has("slow") {
            return Err(self.needs("slow_rate", "slow"));
        }
        if seen.has("ramp_start") && c.ramp_ms == 0 {
            return Err(self.needs("ramp_start", "ramp"));
        }
        Ok(())
    }

    pub(super) fn check_probe(&self, seen: &Seen) -> Result<(), ConfError> {
        let (n, d) = (|k| self.name(k), self.d);
        if seen.has("probe_uri") && seen.has("probe_grpc") {
            return Err(ConfError::Conflict(format!(
                "\"{}\" and \"{}\" are mutually exclusive in \"{d}\" directive, \
                 a probe is HTTP or gRPC",
                n("probe_uri"),
                n("probe_grpc")
            )));
        }
        if seen.has("probe_status") && seen.has("probe_grpc") {
            // A health answer's result is its serving status, not its HTTP status.
            return Err(ConfError::Conflict(format!(
                "\"{}\" does not apply to \"{}\" in \"{d}\" directive, \
                 a gRPC probe is judged by its serving status",
                n("probe_status"),
                n("probe_grpc")
            )));
        }
        for p in ["probe_host", "probe_status", "probe_timeout"] {
            if seen.has(p) && !self.c.active {
                let n = p.trim_start_matches("probe_");
                let new = format!("{} uri=... {n}=...", super::PROBE_DIRECTIVE);
                return Err(self.needs_companion(p, "probe_uri", &new));
            }
        }
        Ok(())
    }

    pub(super) fn check_limit(&mut self, seen: &Seen) -> Result<(), ConfError> {
        for p in LIMIT_COMPANIONS {
            if seen.has(p) && !self.adaptive {
                let n = p.trim_start_matches("limit_");
                let new = format!("{} adaptive {n}=...", super::LIMIT_DIRECTIVE);
                return Err(self.needs_companion(p, "limit=adaptive", &new));
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
            let n = |k| self.name(k);
            let rule = match e {
                E::LimitMin => format!("\"{}\" must be at least 1", n("limit_min")),
                E::LimitMax => format!(
                    "\"{}\" must be between \"{}\" and 16777215",
                    n("limit_max"),
                    n("limit_min")
                ),
                E::LimitInitial => format!(
                    "\"{}\" must be between \"{}\" and \"{}\"",
                    n("limit_initial"),
                    n("limit_min"),
                    n("limit_max")
                ),
                E::Tolerance => format!("\"{}\" must be at most 100%", n("limit_tolerance")),
                E::Interval => format!("\"{}\" must be at most 60s", n("limit_interval")),
                E::Samples => format!("\"{}\" must be at most 100000", n("limit_samples")),
                E::Remeasure => format!(
                    "\"{}\" must be at least ten \"{}\"s",
                    n("limit_remeasure"),
                    n("limit_interval")
                ),
            };
            return Err(ConfError::Conflict(format!(
                "{rule} in \"{}\" directive",
                self.d
            )));
        }
        Ok(())
    }

    pub(super) fn check_retry(&mut self) -> Result<(), ConfError> {
        match (self.retry.as_mut(), self.retry_min) {
            (Some(r), Some(m)) => r.min_per_s = m,
            (None, Some(_)) => return Err(self.needs("retry_min", "retry_budget")),
            _ => {}
        }
        if let Some(r) = &self.retry {
            if r.check().is_err() {
                let min = self.retry_min.unwrap_or_default();
                return Err(ConfError::Conflict(format!(
                    "invalid value \"{}={min}\" in \"{}\" directive, must be at most {}",
                    self.name("retry_min"),
                    self.d,
                    crate::retry_budget::MAX_MIN_PER_S
                )));
            }
        }
        Ok(())
    }
}
