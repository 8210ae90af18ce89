//! `circuit_breaker` in a `stream { upstream {} }` block: the breaker's own parameters that
//! mean something for sessions, and `first_byte`, the bound on a server's silence.

use super::{duration_u32, invalid, parse_breaker_args, ConfError, Units, TIME_OR_OFF};
use crate::breaker::BreakerConfig;

/// Whether a stream breaker takes the parameter `key`: the http breaker's own (not its
/// companions': probes by URI or gRPC, the adaptive limit, the retry budget), and `first_byte`.
pub fn stream_takes(key: &str) -> bool {
    key == "first_byte"
        || (super::BREAKER_PARAMETERS.contains(&key) && !super::legacy::is_companions(key))
}

/// Every parameter a stream breaker takes, by name, in the http breaker's order.
pub fn stream_parameters() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = super::BREAKER_PARAMETERS
        .iter()
        .copied()
        .filter(|k| stream_takes(k))
        .collect();
    let at = all
        .iter()
        .position(|&k| k == "dry_run")
        .unwrap_or(all.len());
    all.insert(at, "first_byte");
    all
}

/// The default `first_byte`: a database's or a cache's first answer of a session is its
/// handshake or the reply to one command, which a working server gives in milliseconds; above
/// the blocking pops job queues start their sessions with (Celery's 1 s, Sidekiq's 2 s), and
/// below the timeouts of clients that give up at all, whose sessions would otherwise end
/// before it runs out and say nothing.
pub const DEFAULT_FIRST_BYTE_MS: u32 = 3_000;

/// What a stream `circuit_breaker` sets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamParams {
    /// The breaker.
    pub cfg: BreakerConfig,
    /// How long a server may stay silent once the client's first bytes reached it; 0 (`off`)
    /// when silence is never a failure.
    pub first_byte_ms: u32,
}

/// Parses the words after a stream block's `circuit_breaker` over the README's defaults.
pub fn parse_stream_breaker_args<'a>(
    words: impl IntoIterator<Item = &'a str>,
    units: &dyn Units,
) -> Result<StreamParams, ConfError> {
    const D: &str = "circuit_breaker";
    let mut first_byte_ms = DEFAULT_FIRST_BYTE_MS;
    let mut seen_first_byte = false;
    let mut rest = Vec::new();
    for word in words {
        let key = word.split_once('=').map_or(word, |(k, _)| k);
        if key == "first_byte" {
            if seen_first_byte {
                return Err(ConfError::Conflict(format!(
                    "duplicate parameter \"first_byte\" in \"{D}\" directive"
                )));
            }
            seen_first_byte = true;
            first_byte_ms = match word.split_once('=') {
                Some((_, "off")) => 0,
                Some((_, v)) if units.msec(v).is_some() => duration_u32(D, units, word, v, false)?,
                _ => return Err(invalid(D, word, Some(TIME_OR_OFF))),
            };
            continue;
        }
        if !stream_takes(key) && super::BREAKER_PARAMETERS.contains(&key) {
            return Err(ConfError::Conflict(format!(
                "parameter \"{key}\" of \"{D}\" is for http upstreams only; a stream \
                 upstream's breaker takes {}",
                stream_parameters().join(", ")
            )));
        }
        rest.push(word);
    }
    let params = parse_breaker_args(rest, units)?;
    Ok(StreamParams {
        cfg: params.cfg,
        first_byte_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directive::tests::Fixed;

    fn parse(words: &str) -> Result<StreamParams, String> {
        parse_stream_breaker_args(words.split_whitespace(), &Fixed).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_the_http_breakers_and_a_three_second_bound() {
        let p = parse("").unwrap();
        assert_eq!(p.cfg, BreakerConfig::default());
        assert_eq!(p.first_byte_ms, 3_000);
    }

    #[test]
    fn session_parameters_are_taken() {
        let p =
            parse("window=5s min_requests=4 failure_rate=25% slow=200ms first_byte=500ms dry_run")
                .unwrap();
        assert_eq!(p.cfg.window_s, 5);
        assert_eq!(p.cfg.min_requests, 4);
        assert_eq!(p.cfg.failure_rate, 2500);
        assert_eq!(p.cfg.slow_ms, 200);
        assert!(p.cfg.dry_run);
        assert_eq!(p.first_byte_ms, 500);
        assert_eq!(parse("first_byte=off").unwrap().first_byte_ms, 0);
    }

    #[test]
    fn http_only_parameters_and_bad_bounds_are_refused() {
        for w in [
            "probe_uri=/health",
            "limit=adaptive",
            "retry_budget=20%",
            "probe_grpc=x",
        ] {
            let e = parse(w).unwrap_err();
            assert!(e.contains("is for http upstreams only"), "{w}: {e}");
        }
        for w in ["first_byte=0", "first_byte=soon", "first_byte"] {
            let e = parse(w).unwrap_err();
            assert!(e.starts_with(&format!("invalid value \"{w}\"")), "{w}: {e}");
        }
        assert!(parse("first_byte=1s first_byte=2s")
            .unwrap_err()
            .contains("duplicate"));
        assert!(parse("windw=5s")
            .unwrap_err()
            .contains("invalid parameter \"windw=5s\""));
    }

    #[test]
    fn the_stream_parameters_are_the_breakers_own_and_first_byte() {
        assert_eq!(
            stream_parameters().join(" "),
            "window min_requests failure_rate slow slow_rate open max_open jitter probes \
             probe_interval probe_latency consecutive ramp ramp_start suspect_min first_byte \
             dry_run"
        );
    }
}
