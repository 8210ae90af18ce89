//! Directive arguments parsed into typed values, with nginx's own error wording.
//!
//! The nginx shell hands over the raw words of a directive; everything that can be decided
//! without nginx (syntax, ranges, cross-parameter rules) is decided here so it can be tested.

use core::fmt;

use crate::breaker::config::{
    BreakerConfig, FailureClass, FailureSet, MAX_WINDOW_S, PROBE_LATENCY_OFF,
};
use crate::limit::LimitConfig;
use crate::retry_budget::RetryBudgetConfig;

mod breaker;
mod family;
mod hint;
mod legacy;
mod stream;
mod stream_probe;
mod suggest;

#[cfg(test)]
use breaker::LIMIT_COMPANIONS;
pub use breaker::{
    parse_breaker_args, BreakerParams, ProbeSpec, BREAKER_PARAMETERS, DEFAULT_PROBE_TIMEOUT_MS,
};
pub use family::{
    parse_limit_args, parse_probe_args, parse_retry_budget_args, LIMIT_DIRECTIVE, PROBE_DIRECTIVE,
    RETRY_DIRECTIVE,
};
pub use legacy::{Deprecation, Legacy};
pub use stream::{
    parse_stream_breaker_args, stream_parameters, stream_takes, StreamParams, DEFAULT_FIRST_BYTE_MS,
};
pub use stream_probe::{
    answers, answers_datagram, parse_stream_probe_args, StreamProbe, MAX_EXPECT, MAX_SEND,
    STREAM_PROBE_DIRECTIVE,
};
pub use suggest::{distance, suggest};

/// A configuration error; `Display` gives the `[emerg]` text nginx prints before
/// ` in FILE:LINE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfError {
    /// `invalid value "VALUE" in "DIRECTIVE" directive`, optionally with a reason.
    InvalidValue {
        /// The directive's name.
        directive: &'static str,
        /// The offending word.
        value: String,
        /// Why, when the value is well-formed but out of range.
        reason: Option<&'static str>,
    },
    /// `invalid parameter "WORD"`.
    InvalidParameter(String),
    /// `invalid parameter "WORD" in "DIRECTIVE" directive, HINT`: a word the directive does
    /// not take, and what it does take (a near name, the `name=value` form, the list).
    UnknownParameter {
        /// The directive's name.
        directive: &'static str,
        /// The word as given.
        word: String,
        /// What would be valid.
        hint: String,
    },
    /// `"DIRECTIVE" directive is duplicate`.
    Duplicate(&'static str),
    /// A rule that spans parameters, such as `max_open` below `open`.
    Conflict(String),
}

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfError::InvalidValue {
                directive,
                value,
                reason,
            } => {
                write!(f, "invalid value \"{value}\" in \"{directive}\" directive")?;
                if let Some(reason) = reason {
                    write!(f, ", {reason}")?;
                }
                Ok(())
            }
            ConfError::InvalidParameter(p) => write!(f, "invalid parameter \"{p}\""),
            ConfError::UnknownParameter {
                directive,
                word,
                hint,
            } => write!(
                f,
                "invalid parameter \"{word}\" in \"{directive}\" directive, {hint}"
            ),
            ConfError::Duplicate(d) => write!(f, "\"{d}\" directive is duplicate"),
            ConfError::Conflict(msg) => f.write_str(msg),
        }
    }
}

/// nginx's own value parsers, passed in by the shell (`ngx_parse_time`, `ngx_parse_size`), so
/// that a value means here exactly what it means to nginx.
pub trait Units {
    /// A time in milliseconds as `ngx_parse_time(value, 0)` reads it (so `y` and `M`, which
    /// nginx refuses for millisecond directives, are refused); `None` when nginx refuses it.
    fn msec(&self, value: &str) -> Option<u64>;
    /// A size in bytes as `ngx_parse_size` reads it (`k`, `m`; no `g`); `None` when refused.
    fn size(&self, value: &str) -> Option<u64>;
}

/// Parses `N%` (`50%`, `12.5%`, `0%`..`100%`) into hundredths of a percent.
pub fn parse_rate(s: &str) -> Option<u32> {
    let num = s.strip_suffix('%')?;
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if int.is_empty()
        || int.len() > 3
        || frac.len() > 2
        || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit())
        || (num.contains('.') && frac.is_empty())
    {
        return None;
    }
    let mut v: u32 = int.parse::<u32>().ok()? * 100;
    if !frac.is_empty() {
        let f: u32 = frac.parse().ok()?;
        v += if frac.len() == 1 { f * 10 } else { f };
    }
    (v <= 10_000).then_some(v)
}

const CB: &str = "circuit_breaker";

/// What a time value must look like: `ngx_parse_time` for milliseconds (no `M` or `y`).
pub const TIME_EXPECTED: &str =
    "a time is expected (e.g. 30s, 500ms, 2m; units: ms, s, m, h, d, w)";
/// A time, or `off`.
const TIME_OR_OFF: &str =
    "a time (e.g. 800ms, 30s; units: ms, s, m, h, d, w) or \"off\" is expected";
/// A rate.
pub const RATE_EXPECTED: &str = "must be a percentage from 0% to 100%";
/// A time above what the breaker keeps (milliseconds in 32 bits: 49 days and a half).
const TOO_LONG: &str = "must be less than 49d";
/// A count.
const COUNT_EXPECTED: &str = "a whole number of at least 1 is expected";

fn invalid(d: &'static str, value: &str, reason: Option<&'static str>) -> ConfError {
    ConfError::InvalidValue {
        directive: d,
        value: value.to_owned(),
        reason,
    }
}

fn duration_u32(
    d: &'static str,
    units: &dyn Units,
    word: &str,
    v: &str,
    allow_zero: bool,
) -> Result<u32, ConfError> {
    let ms = units
        .msec(v)
        .ok_or_else(|| invalid(d, word, Some(TIME_EXPECTED)))?;
    if ms == 0 && !allow_zero {
        return Err(invalid(d, word, Some("must be positive")));
    }
    u32::try_from(ms).map_err(|_| invalid(d, word, Some(TOO_LONG)))
}

fn count_u32(d: &'static str, word: &str, v: &str) -> Result<u32, ConfError> {
    match v.parse::<u32>() {
        Ok(n) if n >= 1 && !v.starts_with('+') => Ok(n),
        Ok(_) => Err(invalid(d, word, Some("must be at least 1"))),
        Err(_) => Err(invalid(d, word, Some(COUNT_EXPECTED))),
    }
}

fn rate(d: &'static str, word: &str, v: &str) -> Result<u32, ConfError> {
    parse_rate(v).ok_or_else(|| invalid(d, word, Some(RATE_EXPECTED)))
}

/// A rate that opens a breaker: 0 % would open it with no failures at all.
fn threshold(d: &'static str, word: &str, v: &str) -> Result<u32, ConfError> {
    match parse_rate(v) {
        Some(0) => Err(invalid(d, word, Some("must be more than 0%"))),
        Some(r) => Ok(r),
        None => Err(invalid(d, word, Some(RATE_EXPECTED))),
    }
}

/// The parameters a directive has named so far, to refuse a duplicate. On the stack, not in a
/// `Vec`: scratch allocations at start-up move where glibc places every later chunk, request
/// pools included, and make every request dearer (`scripts/bench-instructions`,
/// closed_limit; docs/adaptive-limit.md tells how it was found).
pub(crate) struct Seen<'a> {
    keys: [&'a str; Seen::CAPACITY],
    len: usize,
}

impl<'a> Seen<'a> {
    /// More than any directive's parameter names: a name is pushed once, after it was known.
    const CAPACITY: usize = 40;

    pub(crate) const fn new() -> Self {
        Seen {
            keys: [""; Seen::CAPACITY],
            len: 0,
        }
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.keys[..self.len].contains(&key)
    }

    /// Notes `key`. A directive names fewer parameters than [`Seen::CAPACITY`] (each once,
    /// after it was known): more would be a parser's bug, and fails loudly (the directive
    /// handlers' guard turns the panic into a configuration error).
    pub(crate) fn push(&mut self, key: &'a str) {
        self.keys[self.len] = key;
        self.len += 1;
    }
}

pub use crate::eject::spec::{
    EjectSpec, RelativeSpec, DEFAULT_LATENCY_FACTOR, DEFAULT_SERVER_RAMP_MS,
};

/// A factor of `1.5` to `100`, `x` optional (`3`, `2.5x`), in hundredths.
fn parse_factor(v: &str) -> Option<u32> {
    let v = v.strip_suffix('x').unwrap_or(v);
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if int.is_empty()
        || frac.len() > 2
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let int: u32 = int.parse().ok().filter(|&i| i <= 100)?;
    let frac = format!("{frac:0<2}").parse::<u32>().ok()?;
    Some(int * 100 + frac).filter(|f| (150..=10_000).contains(f))
}

/// `circuit_breaker_eject` as configured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EjectSetting {
    /// Not given: on for a pool of two or more servers, with the defaults, where the balancer
    /// keeps round-robin peers.
    #[default]
    Unset,
    /// `off`.
    Off,
    /// Given with these parameters: refused where the balancer keeps no round-robin peers.
    On(EjectSpec),
}

/// Parses `circuit_breaker_eject [failure_rate=…] [slow_rate=…] [min_requests=…] [time=…]
/// [max_time=…] [max_ejected=…] [relative=on|off|latency|failures] [latency_factor=…]
/// [ramp=…|off] | off`; `None` for `off`.
pub fn parse_eject_args<'a>(
    words: impl IntoIterator<Item = &'a str>,
    units: &dyn Units,
) -> Result<Option<EjectSpec>, ConfError> {
    const D: &str = "circuit_breaker_eject";
    let mut words = words.into_iter().peekable();
    if words.next_if_eq(&"off").is_some() {
        return match words.next() {
            None => Ok(None),
            // `off` with other parameters is none of them.
            Some(_) => Err(ConfError::UnknownParameter {
                directive: D,
                word: "off".to_owned(),
                hint: "\"off\" takes no other parameters".to_owned(),
            }),
        };
    }
    const NAMES: [&str; 9] = [
        "failure_rate",
        "slow_rate",
        "min_requests",
        "time",
        "max_time",
        "max_ejected",
        "relative",
        "latency_factor",
        "ramp",
    ];
    let unknown = |word: &str, hint: String| ConfError::UnknownParameter {
        directive: D,
        word: word.to_owned(),
        hint,
    };
    let bad = |word: &str, reason: Option<&'static str>| ConfError::InvalidValue {
        directive: D,
        value: word.to_owned(),
        reason,
    };
    let mut e = EjectSpec::default();
    let mut seen = Seen::new();
    let mut relative_latency = None;
    for word in words {
        let Some((key, v)) = word.split_once('=') else {
            let hint = if NAMES.contains(&word) {
                format!("parameters are given as name=value, e.g. \"{word}=...\"")
            } else {
                hint::expected_names(word, &NAMES)
            };
            return Err(unknown(word, hint));
        };
        if seen.has(key) {
            return Err(ConfError::Conflict(format!(
                "duplicate parameter \"{key}\" in \"{D}\" directive"
            )));
        }
        let pct = |v: &str| match parse_rate(v) {
            Some(0) => Err(bad(word, Some("must be more than 0%"))),
            Some(r) => Ok(r),
            None => Err(bad(word, Some(RATE_EXPECTED))),
        };
        let ms = |v: &str| -> Result<u32, ConfError> {
            match units.msec(v) {
                Some(0) => Err(bad(word, Some("must be positive"))),
                Some(ms) => u32::try_from(ms).map_err(|_| bad(word, Some(TOO_LONG))),
                None => Err(bad(word, Some(TIME_EXPECTED))),
            }
        };
        match key {
            "failure_rate" => e.failure_rate = Some(pct(v)?),
            "slow_rate" => e.slow_rate = Some(pct(v)?),
            "min_requests" => {
                e.min_requests = match v.parse::<u32>() {
                    Ok(n) if n >= 1 && !v.starts_with('+') => n,
                    Ok(_) => return Err(bad(word, Some("must be at least 1"))),
                    Err(_) => return Err(bad(word, Some(COUNT_EXPECTED))),
                }
            }
            "time" => e.time_ms = ms(v)?,
            "max_time" => e.max_time_ms = ms(v)?,
            "max_ejected" => e.max_ejected = pct(v)?,
            "ramp" if v == "off" => e.ramp_ms = Some(0),
            "ramp" => {
                e.ramp_ms = Some(match units.msec(v) {
                    Some(0) => return Err(bad(word, Some("must be positive, or \"off\""))),
                    Some(ms) => u32::try_from(ms).map_err(|_| bad(word, Some(TOO_LONG)))?,
                    None => return Err(bad(word, Some(TIME_OR_OFF))),
                })
            }
            "relative" => {
                let (latency, failures) = match v {
                    "on" => (true, true),
                    "off" => (false, false),
                    "latency" => (true, false),
                    "failures" => (false, true),
                    _ => {
                        return Err(bad(
                            word,
                            Some("expected \"on\", \"off\", \"latency\" or \"failures\""),
                        ))
                    }
                };
                relative_latency = Some(latency);
                e.relative.failures = failures;
                e.relative.explicit = true;
            }
            "latency_factor" => {
                e.relative.latency_factor = parse_factor(v).ok_or_else(|| {
                    bad(
                        word,
                        Some("must be a factor from 1.5 to 100, e.g. \"3\" or \"2.5x\""),
                    )
                })?;
                e.relative.explicit = true;
            }
            _ => return Err(unknown(word, hint::expected_names(key, &NAMES))),
        }
        seen.push(key);
    }
    // `latency_factor` in any order with `relative`: the rule is on unless `relative` says
    // otherwise, at the factor given or the default.
    let latency_on = relative_latency.unwrap_or(true);
    if seen.has("latency_factor") && !latency_on {
        return Err(ConfError::Conflict(format!(
            "\"latency_factor\" needs the latency rule, which \"relative\" turns off, in \"{D}\" directive"
        )));
    }
    if !latency_on {
        e.relative.latency_factor = 0;
    }
    if e.max_time_ms < e.time_ms {
        if seen.has("max_time") {
            return Err(ConfError::Conflict(format!(
                "\"max_time\" must not be less than \"time\" in \"{D}\" directive, \
                 or be left out to follow \"time\""
            )));
        }
        e.max_time_ms = e.time_ms;
    }
    Ok(Some(e))
}

/// What `circuit_breaker_failure` takes (a test checks the list against the parser).
pub const FAILURE_CLASSES: &str = "expected one of: error, timeout, invalid_header, \
     http_500 to http_599 (e.g. http_502), http_429, http_503_retry_after, grpc_unknown, \
     grpc_deadline_exceeded, grpc_resource_exhausted, grpc_internal, grpc_unavailable, \
     grpc_data_loss";

/// Parses the classes of `circuit_breaker_failure`.
pub fn parse_failure_classes<'a>(
    words: impl IntoIterator<Item = &'a str>,
) -> Result<FailureSet, ConfError> {
    let mut set = FailureSet::EMPTY;
    for w in words {
        let class = FailureClass::parse(w).ok_or_else(|| ConfError::InvalidValue {
            directive: "circuit_breaker_failure",
            value: w.to_owned(),
            reason: Some(if crate::breaker::GRPC_CLIENT_CODES.contains(&w) {
                "a client causes it, it never counts against a server"
            } else {
                FAILURE_CLASSES
            }),
        })?;
        set.insert(class);
    }
    Ok(set)
}

/// Checks a `circuit_breaker_zone name:size` argument; returns the name and size in bytes.
/// `min_size` is the smallest zone nginx can lay a slab pool and the breaker table in.
pub fn parse_zone<'a>(
    arg: &'a str,
    min_size: u64,
    units: &dyn Units,
) -> Result<(&'a str, u64), ConfError> {
    let bad = || ConfError::InvalidValue {
        directive: "circuit_breaker_zone",
        value: arg.to_owned(),
        reason: Some("must be name:size, e.g. \"circuit_breaker:1m\""),
    };
    let (name, size) = arg.rsplit_once(':').ok_or_else(bad)?;
    if name.is_empty() {
        return Err(ConfError::Conflict(format!(
            "invalid zone name \"{arg}\", must be name:size, e.g. \"circuit_breaker:1m\""
        )));
    }
    let bytes = units.size(size).ok_or_else(|| {
        ConfError::Conflict(format!(
            "invalid zone size \"{size}\", a size is expected (e.g. 1m, 512k; units: k, m)"
        ))
    })?;
    if bytes < min_size {
        return Err(ConfError::Conflict(format!(
            "zone \"{name}\" is too small, it must be at least {}k",
            min_size / 1024
        )));
    }
    Ok((name, bytes))
}

/// Checks a route name for `circuit_breaker_route`: the bytes the status page and labels can
/// carry without surprise.
pub fn check_route_name(name: &str) -> Result<(), ConfError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ConfError::InvalidValue {
            directive: "circuit_breaker_route",
            value: name.to_owned(),
            reason: Some("a route is 1 to 64 letters, digits, \"_\", \"-\" or \".\""),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nginx's parsers stand outside this crate; the tests need only the values they use.
    pub(super) struct Fixed;

    impl Units for Fixed {
        fn msec(&self, v: &str) -> Option<u64> {
            let n = |s: &str, unit: u64| s.parse::<u64>().ok().map(|n| n * unit);
            if let Some(ms) = v.strip_suffix("ms") {
                return n(ms, 1);
            }
            match v.as_bytes().last()? {
                b's' => n(&v[..v.len() - 1], 1000),
                b'm' => n(&v[..v.len() - 1], 60_000),
                b'd' => n(&v[..v.len() - 1], 86_400_000),
                b'0'..=b'9' => n(v, 1000),
                _ => None,
            }
        }
        fn size(&self, v: &str) -> Option<u64> {
            match v.as_bytes().last()? {
                b'k' => v[..v.len() - 1].parse::<u64>().ok().map(|n| n << 10),
                b'm' => v[..v.len() - 1].parse::<u64>().ok().map(|n| n << 20),
                _ => v.parse().ok(),
            }
        }
    }

    fn breaker<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<BreakerConfig, ConfError> {
        parse_breaker_args(words, &Fixed).map(|p| p.cfg)
    }

    fn params<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<BreakerParams, ConfError> {
        parse_breaker_args(words, &Fixed)
    }

    #[test]
    fn companions_default_and_parse() {
        let p = params([]).unwrap();
        assert_eq!((p.probe, p.limit), (None, None));
        assert_eq!(
            p.retry,
            Some(RetryBudgetConfig::default()),
            "the retry budget is on"
        );
        assert!(!p.cfg.active);

        let p = params([
            "probe_uri=/health?deep=1",
            "probe_host=api.internal",
            "probe_status=200,204-299",
            "probe_timeout=500ms",
            "ramp=10s",
            "ramp_start=5%",
            "suspect_min=3",
            "limit=adaptive",
            "limit_min=2",
            "limit_max=50",
            "retry_budget=10%",
            "retry_min=0",
        ])
        .unwrap();
        assert!(p.cfg.active);
        let probe = p.probe.unwrap();
        assert_eq!(probe.uri, "/health?deep=1");
        assert_eq!(probe.host.as_deref(), Some("api.internal"));
        assert!(probe.healthy(200) && probe.healthy(204) && !probe.healthy(201));
        assert_eq!(probe.timeout_ms, 500);
        assert_eq!(
            (p.cfg.ramp_ms, p.cfg.ramp_start, p.cfg.suspect_min),
            (10_000, 500, 3)
        );
        let l = p.limit.unwrap();
        assert_eq!((l.limit_min, l.limit_max, l.limit_initial), (2, 50, 20));
        let l = params(["limit=adaptive", "limit_max=10"])
            .unwrap()
            .limit
            .unwrap();
        assert_eq!(l.limit_initial, 10, "the start follows a lower cap");
        let r = p.retry.unwrap();
        assert_eq!((r.budget, r.min_per_s), (1000, 0));
        assert_eq!(params(["retry_budget=off"]).unwrap().retry, None);
        assert_eq!(
            params(["probe_uri=/h"]).unwrap().probe.unwrap().statuses,
            vec![(200, 399)]
        );
    }

    #[test]
    fn the_parameter_list_is_what_the_parser_takes() {
        for name in BREAKER_PARAMETERS {
            // A known name is refused for its value or for lacking one (`dry_run` for having
            // one), if at all: never as unknown when written as it is meant.
            let meant = if *name == "dry_run" {
                name.to_string()
            } else {
                format!("{name}=x")
            };
            assert!(
                !matches!(
                    params([meant.as_str()]),
                    Err(ConfError::UnknownParameter { .. })
                ),
                "{meant}: refused as unknown"
            );
        }
        assert!(matches!(
            params(["no_such=1"]),
            Err(ConfError::UnknownParameter { .. })
        ));
        assert!(LIMIT_COMPANIONS
            .iter()
            .all(|c| BREAKER_PARAMETERS.contains(c)));
        assert!(Seen::CAPACITY >= BREAKER_PARAMETERS.len());
    }

    #[test]
    fn probe_grpc_asks_the_health_service() {
        let p = params(["probe_grpc=", "probe_timeout=300ms", "probe_host=api"]).unwrap();
        assert!(p.cfg.active);
        let probe = p.probe.unwrap();
        assert_eq!(probe.grpc.as_deref(), Some(""), "the server's own health");
        assert_eq!(probe.uri, "/grpc.health.v1.Health/Check");
        assert_eq!(
            (probe.timeout_ms, probe.host.as_deref()),
            (300, Some("api"))
        );
        assert!(
            !probe.healthy(200),
            "an HTTP status alone is no health result"
        );
        let probe = params(["probe_grpc=pkg.v1.Orders"]).unwrap().probe.unwrap();
        assert_eq!(probe.grpc.as_deref(), Some("pkg.v1.Orders"));
        assert_eq!(params(["probe_uri=/h"]).unwrap().probe.unwrap().grpc, None);
    }

    #[test]
    fn companion_errors_read_like_nginx() {
        let cases: &[(&[&str], &str)] = &[
            (&["probe_uri=health"], "invalid value \"probe_uri=health\" in \"circuit_breaker\" directive, must be a path from \"/\""),
            (&["probe_uri=/h", "probe_status=600"], "invalid value \"probe_status=600\" in \"circuit_breaker\" directive, must be statuses or ranges from 100 to 599, such as 200-399"),
            (&["probe_uri=/h", "probe_status=399-200"], "invalid value \"probe_status=399-200\" in \"circuit_breaker\" directive, must be statuses or ranges from 100 to 599, such as 200-399"),
            (&["probe_timeout=1s"], "\"probe_timeout\" requires \"probe_uri\" in \"circuit_breaker\" directive, or use \"circuit_breaker_probe uri=... timeout=...\""),
            (&["ramp_start=5%"], "\"ramp_start\" requires \"ramp\" in \"circuit_breaker\" directive"),
            (&["limit=yes"], "invalid value \"limit=yes\" in \"circuit_breaker\" directive, must be \"adaptive\" or \"off\""),
            (&["limit_max=5"], "\"limit_max\" requires \"limit=adaptive\" in \"circuit_breaker\" directive, or use \"circuit_breaker_limit adaptive max=...\""),
            (&["retry_budget=off", "retry_min=3"], "\"retry_min\" requires \"retry_budget\" in \"circuit_breaker\" directive"),
            (&["retry_min=-1"], "invalid value \"retry_min=-1\" in \"circuit_breaker\" directive, a whole number of retries per second is expected"),
            (&["probe_grpc=a b"], "invalid value \"probe_grpc=a b\" in \"circuit_breaker\" directive, must be a gRPC service name, or empty for the server's health"),
            (&["probe_uri=/h", "probe_grpc=x"], "\"probe_uri\" and \"probe_grpc\" are mutually exclusive in \"circuit_breaker\" directive, a probe is HTTP or gRPC"),
            (&["probe_grpc=", "probe_status=200"], "\"probe_status\" does not apply to \"probe_grpc\" in \"circuit_breaker\" directive, a gRPC probe is judged by its serving status"),
            (&["limit=adaptive", "limit_interval=1s", "limit_remeasure=5s"], "\"limit_remeasure\" must be at least ten \"limit_interval\"s in \"circuit_breaker\" directive"),
            (&["limit=adaptive", "limit_probe=10s"], "invalid parameter \"limit_probe=10s\" in \"circuit_breaker\" directive, expected one of: window, min_requests, failure_rate, slow, slow_rate, consecutive, open, max_open, jitter, probes, probe_interval, probe_latency, ramp, ramp_start, suspect_min, dry_run"),
        ];
        for (args, msg) in cases {
            let err = params(args.iter().copied()).unwrap_err();
            assert_eq!(err.to_string(), *msg, "{args:?}");
        }
        let err = params(["limit=adaptive", "limit_min=10", "limit_max=5"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"limit_max\" must be between \"limit_min\" and 16777215 in \"circuit_breaker\" directive"
        );
    }

    #[test]
    fn eject_relative() {
        let rel = |args: &[&str]| {
            parse_eject_args(args.iter().copied(), &Fixed).map(|e| e.unwrap().relative)
        };
        let on = RelativeSpec::default();
        assert_eq!(
            (on.latency_factor, on.failures, on.explicit),
            (300, true, false)
        );
        assert_eq!(rel(&[]).unwrap(), on);
        let r = rel(&["relative=off"]).unwrap();
        assert_eq!((r.latency_factor, r.failures), (0, false));
        assert!(!EjectSpec {
            relative: r,
            ..EjectSpec::default()
        }
        .relative_rules()
        .is_on());
        let r = rel(&["relative=latency"]).unwrap();
        assert_eq!(
            (r.latency_factor, r.failures, r.explicit),
            (300, false, true)
        );
        let r = rel(&["relative=failures"]).unwrap();
        assert_eq!((r.latency_factor, r.failures), (0, true));
        for (args, want) in [
            (&["latency_factor=5"][..], 500),
            (&["latency_factor=2.5x"][..], 250),
            (&["latency_factor=1.5"][..], 150),
            (&["latency_factor=100"][..], 10_000),
            (&["latency_factor=4", "relative=latency"][..], 400),
            (&["relative=on", "latency_factor=4x"][..], 400),
        ] {
            assert_eq!(rel(args).unwrap().latency_factor, want, "{args:?}");
        }
        let rules = parse_eject_args(["min_requests=40"], &Fixed)
            .unwrap()
            .unwrap()
            .relative_rules();
        assert_eq!(
            (rules.latency_factor, rules.failures, rules.min_requests),
            (300, true, 40)
        );
        for (args, msg) in [
            (&["relative=yes"][..], "invalid value \"relative=yes\" in \"circuit_breaker_eject\" directive, expected \"on\", \"off\", \"latency\" or \"failures\""),
            (&["latency_factor=1"][..], "invalid value \"latency_factor=1\" in \"circuit_breaker_eject\" directive, must be a factor from 1.5 to 100, e.g. \"3\" or \"2.5x\""),
            (&["latency_factor=101"][..], "invalid value \"latency_factor=101\" in \"circuit_breaker_eject\" directive, must be a factor from 1.5 to 100, e.g. \"3\" or \"2.5x\""),
            (&["latency_factor=2.555"][..], "invalid value \"latency_factor=2.555\" in \"circuit_breaker_eject\" directive, must be a factor from 1.5 to 100, e.g. \"3\" or \"2.5x\""),
            (&["latency_factor=-3"][..], "invalid value \"latency_factor=-3\" in \"circuit_breaker_eject\" directive, must be a factor from 1.5 to 100, e.g. \"3\" or \"2.5x\""),
            (&["latency_factor=x"][..], "invalid value \"latency_factor=x\" in \"circuit_breaker_eject\" directive, must be a factor from 1.5 to 100, e.g. \"3\" or \"2.5x\""),
            (&["relative=failures", "latency_factor=3"][..], "\"latency_factor\" needs the latency rule, which \"relative\" turns off, in \"circuit_breaker_eject\" directive"),
            (&["latency_factor=3", "relative=off"][..], "\"latency_factor\" needs the latency rule, which \"relative\" turns off, in \"circuit_breaker_eject\" directive"),
        ] {
            assert_eq!(rel(args).unwrap_err().to_string(), msg, "{args:?}");
        }
    }

    #[test]
    fn eject_ramp() {
        let ramp = |args: &[&str]| {
            parse_eject_args(args.iter().copied(), &Fixed)
                .unwrap()
                .unwrap()
        };
        let e = ramp(&[]);
        assert_eq!((e.ramp_ms, e.server_ramp_ms()), (None, 10_000));
        let e = ramp(&["ramp=30s"]);
        assert_eq!((e.ramp_ms, e.server_ramp_ms()), (Some(30_000), 30_000));
        let e = ramp(&["ramp=off"]);
        assert_eq!((e.ramp_ms, e.server_ramp_ms()), (Some(0), 0));
    }

    #[test]
    fn eject() {
        assert_eq!(parse_eject_args(["off"], &Fixed).unwrap(), None);
        assert_eq!(
            parse_eject_args([], &Fixed).unwrap(),
            Some(EjectSpec::default())
        );
        let e = parse_eject_args(
            [
                "failure_rate=30%",
                "min_requests=5",
                "time=5s",
                "max_time=1m",
                "max_ejected=34%",
            ],
            &Fixed,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (
                e.failure_rate,
                e.min_requests,
                e.time_ms,
                e.max_time_ms,
                e.max_ejected
            ),
            (Some(3000), 5, 5000, 60_000, 3400)
        );
        assert_eq!(
            parse_eject_args(["time=10m"], &Fixed)
                .unwrap()
                .unwrap()
                .max_time_ms,
            600_000
        );
        for (args, msg) in [
            (&["time=0s"][..], "invalid value \"time=0s\" in \"circuit_breaker_eject\" directive, must be positive"),
            (&["max_ejected=0%"][..], "invalid value \"max_ejected=0%\" in \"circuit_breaker_eject\" directive, must be more than 0%"),
            (&["time=1m", "max_time=10s"][..], "\"max_time\" must not be less than \"time\" in \"circuit_breaker_eject\" directive, or be left out to follow \"time\""),
            (&["colour=red"][..], "invalid parameter \"colour=red\" in \"circuit_breaker_eject\" directive, expected one of: failure_rate, slow_rate, min_requests, time, max_time, max_ejected, relative, latency_factor, ramp"),
            (&["ramp=0s"][..], "invalid value \"ramp=0s\" in \"circuit_breaker_eject\" directive, must be positive, or \"off\""),
            (&["ramp=soon"][..], "invalid value \"ramp=soon\" in \"circuit_breaker_eject\" directive, a time (e.g. 800ms, 30s; units: ms, s, m, h, d, w) or \"off\" is expected"),
            (&["ramp=50d"][..], "invalid value \"ramp=50d\" in \"circuit_breaker_eject\" directive, must be less than 49d"),
            (&["max_time=1m", "tme=5s"][..], "invalid parameter \"tme=5s\" in \"circuit_breaker_eject\" directive, did you mean \"time\"?"),
            (&["time"][..], "invalid parameter \"time\" in \"circuit_breaker_eject\" directive, parameters are given as name=value, e.g. \"time=...\""),
            (&["time=soon"][..], "invalid value \"time=soon\" in \"circuit_breaker_eject\" directive, a time is expected (e.g. 30s, 500ms, 2m; units: ms, s, m, h, d, w)"),
            (&["off", "time=1s"][..], "invalid parameter \"off\" in \"circuit_breaker_eject\" directive, \"off\" takes no other parameters"),
        ] {
            assert_eq!(parse_eject_args(args.iter().copied(), &Fixed).unwrap_err().to_string(), msg);
        }
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("50%"), Some(5000));
        assert_eq!(parse_rate("12.5%"), Some(1250));
        assert_eq!(parse_rate("0.25%"), Some(25));
        assert_eq!(parse_rate("100%"), Some(10_000));
        assert_eq!(parse_rate("0%"), Some(0));
        for bad in ["50", "101%", "%", "1.%", "1.234%", "-5%", "a%", "1000%"] {
            assert_eq!(parse_rate(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_readme_example_parses() {
        let c = breaker(
            "window=10s min_requests=20 failure_rate=50% slow=800ms slow_rate=50% open=30s \
             max_open=5m jitter=20% probes=3 probe_interval=1s probe_latency=800ms"
                .split(' '),
        )
        .unwrap();
        assert_eq!(c.window_s, 10);
        assert_eq!(c.slow_ms, 800);
        assert_eq!(c.slow_rate, 5000);
        assert_eq!(c.max_open_ms, 300_000);
        assert_eq!(c.probe_latency_ms, 800);
        assert!(!c.dry_run);
        assert_eq!(breaker([]).unwrap(), BreakerConfig::default());
        assert!(breaker(["dry_run"]).unwrap().dry_run);
    }

    #[test]
    fn probes_follow_slow_unless_probe_latency_says_otherwise() {
        let slow = breaker(["slow=150ms"]).unwrap();
        assert_eq!((slow.probe_latency_ms, slow.probe_limit_ms()), (0, 150));
        let own = breaker(["slow=150ms", "probe_latency=800ms"]).unwrap();
        assert_eq!(own.probe_limit_ms(), 800);
        let off = breaker(["slow=150ms", "probe_latency=off"]).unwrap();
        assert_eq!(off.probe_limit_ms(), 0);
        assert_eq!(
            breaker([]).unwrap().probe_limit_ms(),
            0,
            "no slow, no limit"
        );
        assert_eq!(
            breaker(["probe_latency=0"]).unwrap_err().to_string(),
            "invalid value \"probe_latency=0\" in \"circuit_breaker\" directive, must be positive"
        );
    }

    #[test]
    fn consecutive_is_on_by_default() {
        assert_eq!(breaker([]).unwrap().consecutive, 10);
        assert_eq!(breaker(["consecutive=3"]).unwrap().consecutive, 3);
        assert_eq!(breaker(["consecutive=off"]).unwrap().consecutive, 0);
        for bad in [
            "consecutive=0",
            "consecutive=-1",
            "consecutive=x",
            "consecutive=+2",
        ] {
            assert!(breaker([bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_duplicate_is_refused_after_every_other_parameter() {
        let all = "window=10s min_requests=5 failure_rate=50% slow=1s slow_rate=50% open=10s \
                   max_open=5m jitter=20% probes=3 probe_interval=1s probe_latency=800ms \
                   ramp=10s ramp_start=10% suspect_min=3 probe_uri=/health probe_host=h \
                   probe_status=200 probe_timeout=1s limit=adaptive limit_min=2 limit_max=50 \
                   limit_initial=10 limit_tolerance=50% limit_interval=100ms limit_samples=20 \
                   limit_remeasure=30s retry_budget=20% retry_min=5 consecutive=5 dry_run";
        let params =
            parse_breaker_args(all.split_whitespace(), &Fixed).expect("every parameter once");
        assert!(params.cfg.dry_run && params.limit.is_some());
        let err =
            parse_breaker_args(all.split_whitespace().chain(["retry_min=6"]), &Fixed).unwrap_err();
        assert_eq!(
            err.to_string(),
            "duplicate parameter \"retry_min\" in \"circuit_breaker\" directive"
        );
    }

    #[test]
    fn every_error_reads_like_nginx() {
        let cases: &[(&[&str], &str)] = &[
            (&["window=abc"], "invalid value \"window=abc\" in \"circuit_breaker\" directive, must be whole seconds from 1s to 300s"),
            (&["window=1500ms"], "invalid value \"window=1500ms\" in \"circuit_breaker\" directive, must be whole seconds from 1s to 300s"),
            (&["window=301s"], "invalid value \"window=301s\" in \"circuit_breaker\" directive, must be whole seconds from 1s to 300s"),
            (&["min_requests=0"], "invalid value \"min_requests=0\" in \"circuit_breaker\" directive, must be at least 1"),
            (&["probes=x"], "invalid value \"probes=x\" in \"circuit_breaker\" directive, a whole number of at least 1 is expected"),
            (&["failure_rate=150%"], "invalid value \"failure_rate=150%\" in \"circuit_breaker\" directive, must be a percentage from 0% to 100%"),
            (&["failure_rate=0%"], "invalid value \"failure_rate=0%\" in \"circuit_breaker\" directive, must be more than 0%"),
            (&["slow=1s", "slow_rate=0%"], "invalid value \"slow_rate=0%\" in \"circuit_breaker\" directive, must be more than 0%"),
            (&["probe_interval=1y"], "invalid value \"probe_interval=1y\" in \"circuit_breaker\" directive, a time is expected (e.g. 30s, 500ms, 2m; units: ms, s, m, h, d, w)"),
            (&["failure_rate=50"], "invalid value \"failure_rate=50\" in \"circuit_breaker\" directive, must be a percentage from 0% to 100%"),
            (&["open=0s"], "invalid value \"open=0s\" in \"circuit_breaker\" directive, must be positive"),
            (&["open=60d"], "invalid value \"open=60d\" in \"circuit_breaker\" directive, must be less than 49d"),
            (&["open=1m", "max_open=30s"], "\"max_open\" must not be less than \"open\" in \"circuit_breaker\" directive, or be left out to follow \"open\""),
            (&["slow_rate=10%"], "\"slow_rate\" requires \"slow\" in \"circuit_breaker\" directive"),
            (&["colour=red"], "invalid parameter \"colour=red\" in \"circuit_breaker\" directive, expected one of: window, min_requests, failure_rate, slow, slow_rate, consecutive, open, max_open, jitter, probes, probe_interval, probe_latency, ramp, ramp_start, suspect_min, dry_run"),
            (&["fast"], "invalid parameter \"fast\" in \"circuit_breaker\" directive, expected one of: window, min_requests, failure_rate, slow, slow_rate, consecutive, open, max_open, jitter, probes, probe_interval, probe_latency, ramp, ramp_start, suspect_min, dry_run"),
            (&["open=1s", "open=2s"], "duplicate parameter \"open\" in \"circuit_breaker\" directive"),
        ];
        for (args, msg) in cases {
            let err = breaker(args.iter().copied()).unwrap_err();
            assert_eq!(err.to_string(), *msg, "{args:?}");
        }
    }

    #[test]
    fn open_above_the_default_cap_raises_the_cap() {
        let c = breaker(["open=10m"]).unwrap();
        assert_eq!(c.max_open_ms, 600_000);
    }

    #[test]
    fn failure_classes() {
        let s = parse_failure_classes(["error", "http_500", "http_429", "http_503_retry_after"])
            .unwrap();
        assert!(s.contains(FailureClass::Error));
        assert!(s.contains(FailureClass::Http5xx(500)));
        assert!(!s.contains(FailureClass::Http5xx(502)));
        assert!(!s.contains(FailureClass::Timeout));
        assert!(s.contains(FailureClass::Http429));
        assert!(s.contains(FailureClass::Http503RetryAfter));
        for bad in [
            "http_404",
            "http_600",
            "http_5000",
            "http_50",
            "fail",
            "grpc_14",
        ] {
            assert_eq!(
                parse_failure_classes([bad]).unwrap_err().to_string(),
                format!(
                    "invalid value \"{bad}\" in \"circuit_breaker_failure\" directive, \
                     {FAILURE_CLASSES}"
                )
            );
        }
        // The list the message gives is what the parser takes.
        let listed = FAILURE_CLASSES
            .trim_start_matches("expected one of: ")
            .replace(" to http_599 (e.g. http_502)", "")
            .split(", ")
            .map(str::to_owned)
            .collect::<Vec<_>>();
        for class in &listed {
            assert!(parse_failure_classes([class.as_str()]).is_ok(), "{class}");
        }
        for (_, _, name) in crate::breaker::GrpcCode::ALL {
            assert!(listed.iter().any(|c| c == name), "{name} is not listed");
        }
        assert!(parse_failure_classes(["http_599"]).is_ok());
        let s = parse_failure_classes(["grpc_unavailable", "grpc_resource_exhausted"]).unwrap();
        assert!(s.contains(FailureClass::Grpc(crate::breaker::GrpcCode::Unavailable)));
        assert!(!s.contains(FailureClass::Grpc(crate::breaker::GrpcCode::Internal)));
        assert_eq!(
            parse_failure_classes(["grpc_not_found"])
                .unwrap_err()
                .to_string(),
            "invalid value \"grpc_not_found\" in \"circuit_breaker_failure\" directive, \
             a client causes it, it never counts against a server"
        );
    }

    #[test]
    fn zones() {
        assert_eq!(
            parse_zone("cb:10m", 32768, &Fixed).unwrap(),
            ("cb", 10 << 20)
        );
        assert_eq!(
            parse_zone("cb", 32768, &Fixed).unwrap_err().to_string(),
            "invalid value \"cb\" in \"circuit_breaker_zone\" directive, must be name:size, \
             e.g. \"circuit_breaker:1m\""
        );
        assert_eq!(
            parse_zone("cb:lots", 32768, &Fixed)
                .unwrap_err()
                .to_string(),
            "invalid zone size \"lots\", a size is expected (e.g. 1m, 512k; units: k, m)"
        );
        assert_eq!(
            parse_zone("cb:8k", 32768, &Fixed).unwrap_err().to_string(),
            "zone \"cb\" is too small, it must be at least 32k"
        );
        assert_eq!(
            parse_zone(":1m", 32768, &Fixed).unwrap_err().to_string(),
            "invalid zone name \":1m\", must be name:size, e.g. \"circuit_breaker:1m\""
        );
    }

    #[test]
    fn route_names() {
        assert!(check_route_name("checkout").is_ok());
        assert!(check_route_name("v2.api-read_x").is_ok());
        assert!(check_route_name("").is_err());
        assert!(check_route_name("a b").is_err());
        assert!(check_route_name(&"x".repeat(65)).is_err());
    }
}
