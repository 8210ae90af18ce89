//! Directive arguments parsed into typed values, with nginx's own error wording.
//!
//! The nginx shell hands over the raw words of a directive; everything that can be decided
//! without nginx (syntax, ranges, cross-parameter rules) is decided here so it can be tested.

use core::fmt;

use crate::breaker::config::{BreakerConfig, FailureClass, FailureSet, MAX_WINDOW_S};

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

fn invalid(value: &str, reason: Option<&'static str>) -> ConfError {
    ConfError::InvalidValue {
        directive: CB,
        value: value.to_owned(),
        reason,
    }
}

fn duration_u32(
    units: &dyn Units,
    word: &str,
    v: &str,
    allow_zero: bool,
) -> Result<u32, ConfError> {
    let ms = units.msec(v).ok_or_else(|| invalid(word, None))?;
    if ms == 0 && !allow_zero {
        return Err(invalid(word, Some("must be positive")));
    }
    u32::try_from(ms).map_err(|_| invalid(word, Some("is too large")))
}

fn count_u32(word: &str, v: &str) -> Result<u32, ConfError> {
    match v.parse::<u32>() {
        Ok(n) if n >= 1 && !v.starts_with('+') => Ok(n),
        Ok(_) => Err(invalid(word, Some("must be at least 1"))),
        Err(_) => Err(invalid(word, None)),
    }
}

fn rate(word: &str, v: &str) -> Result<u32, ConfError> {
    parse_rate(v).ok_or_else(|| invalid(word, Some("must be a percentage from 0% to 100%")))
}

/// A rate that opens a breaker: 0 % would open it with no failures at all.
fn threshold(word: &str, v: &str) -> Result<u32, ConfError> {
    match parse_rate(v) {
        Some(0) => Err(invalid(word, Some("must be more than 0%"))),
        Some(r) => Ok(r),
        None => Err(invalid(word, Some("must be a percentage from 0% to 100%"))),
    }
}

/// Parses the words after `circuit_breaker` (`window=10s min_requests=20 … dry_run`) over the
/// defaults of the spec. The failure classes are left at their default; they come from
/// `circuit_breaker_failure`.
pub fn parse_breaker_args<'a>(
    words: impl IntoIterator<Item = &'a str>,
    units: &dyn Units,
) -> Result<BreakerConfig, ConfError> {
    let mut c = BreakerConfig::default();
    let mut seen: Vec<&str> = Vec::new();
    for word in words {
        let (key, value) = match word.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (word, None),
        };
        if seen.contains(&key) {
            return Err(ConfError::Conflict(format!(
                "duplicate parameter \"{key}\" in \"{CB}\" directive"
            )));
        }
        let Some(v) = value else {
            if word == "dry_run" {
                c.dry_run = true;
                seen.push(key);
                continue;
            }
            return Err(ConfError::InvalidParameter(word.to_owned()));
        };
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
            "slow" => {
                c.slow_ms = if v == "off" {
                    0
                } else {
                    duration_u32(units, word, v, false)?
                }
            }
            "slow_rate" => c.slow_rate = threshold(word, v)?,
            "open" => c.open_ms = duration_u32(units, word, v, false)?,
            "max_open" => c.max_open_ms = duration_u32(units, word, v, false)?,
            "jitter" => c.jitter = rate(word, v)?,
            "probes" => c.probes = count_u32(word, v)?,
            "probe_interval" => c.probe_interval_ms = duration_u32(units, word, v, false)?,
            "probe_latency" => {
                c.probe_latency_ms = if v == "off" {
                    0
                } else {
                    duration_u32(units, word, v, false)?
                }
            }
            _ => return Err(ConfError::InvalidParameter(word.to_owned())),
        }
        seen.push(key);
    }
    if c.max_open_ms < c.open_ms {
        if seen.contains(&"max_open") {
            return Err(ConfError::Conflict(format!(
                "\"max_open\" must not be less than \"open\" in \"{CB}\" directive"
            )));
        }
        // Only `open` was raised above the default cap: the cap follows it.
        c.max_open_ms = c.open_ms;
    }
    if seen.contains(&"slow_rate") && !seen.contains(&"slow") {
        return Err(ConfError::Conflict(format!(
            "\"slow_rate\" requires \"slow\" in \"{CB}\" directive"
        )));
    }
    Ok(c)
}

/// Parses the classes of `circuit_breaker_failure`.
pub fn parse_failure_classes<'a>(
    words: impl IntoIterator<Item = &'a str>,
) -> Result<FailureSet, ConfError> {
    let mut set = FailureSet::EMPTY;
    for w in words {
        let class = FailureClass::parse(w).ok_or_else(|| ConfError::InvalidValue {
            directive: "circuit_breaker_failure",
            value: w.to_owned(),
            reason: None,
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
        reason: None,
    };
    let (name, size) = arg.rsplit_once(':').ok_or_else(bad)?;
    if name.is_empty() {
        return Err(ConfError::Conflict(format!("invalid zone name \"{arg}\"")));
    }
    let bytes = units
        .size(size)
        .ok_or_else(|| ConfError::Conflict(format!("invalid zone size \"{size}\"")))?;
    if bytes < min_size {
        return Err(ConfError::Conflict(format!("zone \"{name}\" is too small")));
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
    struct Fixed;

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
        parse_breaker_args(words, &Fixed)
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
    fn the_spec_example_parses() {
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
    fn every_error_reads_like_nginx() {
        let cases: &[(&[&str], &str)] = &[
            (&["window=abc"], "invalid value \"window=abc\" in \"circuit_breaker\" directive"),
            (&["window=1500ms"], "invalid value \"window=1500ms\" in \"circuit_breaker\" directive, must be whole seconds from 1s to 300s"),
            (&["window=301s"], "invalid value \"window=301s\" in \"circuit_breaker\" directive, must be whole seconds from 1s to 300s"),
            (&["min_requests=0"], "invalid value \"min_requests=0\" in \"circuit_breaker\" directive, must be at least 1"),
            (&["probes=x"], "invalid value \"probes=x\" in \"circuit_breaker\" directive"),
            (&["failure_rate=150%"], "invalid value \"failure_rate=150%\" in \"circuit_breaker\" directive, must be a percentage from 0% to 100%"),
            (&["failure_rate=0%"], "invalid value \"failure_rate=0%\" in \"circuit_breaker\" directive, must be more than 0%"),
            (&["slow=1s", "slow_rate=0%"], "invalid value \"slow_rate=0%\" in \"circuit_breaker\" directive, must be more than 0%"),
            (&["probe_interval=1y"], "invalid value \"probe_interval=1y\" in \"circuit_breaker\" directive"),
            (&["failure_rate=50"], "invalid value \"failure_rate=50\" in \"circuit_breaker\" directive, must be a percentage from 0% to 100%"),
            (&["open=0s"], "invalid value \"open=0s\" in \"circuit_breaker\" directive, must be positive"),
            (&["open=60d"], "invalid value \"open=60d\" in \"circuit_breaker\" directive, is too large"),
            (&["open=1m", "max_open=30s"], "\"max_open\" must not be less than \"open\" in \"circuit_breaker\" directive"),
            (&["slow_rate=10%"], "\"slow_rate\" requires \"slow\" in \"circuit_breaker\" directive"),
            (&["colour=red"], "invalid parameter \"colour=red\""),
            (&["fast"], "invalid parameter \"fast\""),
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
        for bad in ["http_404", "http_600", "http_5000", "http_50", "fail"] {
            assert_eq!(
                parse_failure_classes([bad]).unwrap_err().to_string(),
                format!("invalid value \"{bad}\" in \"circuit_breaker_failure\" directive")
            );
        }
    }

    #[test]
    fn zones() {
        assert_eq!(
            parse_zone("cb:10m", 32768, &Fixed).unwrap(),
            ("cb", 10 << 20)
        );
        assert_eq!(
            parse_zone("cb", 32768, &Fixed).unwrap_err().to_string(),
            "invalid value \"cb\" in \"circuit_breaker_zone\" directive"
        );
        assert_eq!(
            parse_zone("cb:lots", 32768, &Fixed)
                .unwrap_err()
                .to_string(),
            "invalid zone size \"lots\""
        );
        assert_eq!(
            parse_zone("cb:8k", 32768, &Fixed).unwrap_err().to_string(),
            "zone \"cb\" is too small"
        );
        assert_eq!(
            parse_zone(":1m", 32768, &Fixed).unwrap_err().to_string(),
            "invalid zone name \":1m\""
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
