//! Classifying one upstream attempt: does it count, is it a failure, is it slow.

use super::config::{BreakerConfig, FailureClass};

/// How an attempt ended, before any HTTP status is considered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// A response header was received; look at the status.
    Response,
    /// Connect, reset or read error.
    Error,
    /// The upstream timed out.
    Timeout,
    /// The upstream sent an invalid or incomplete header.
    InvalidHeader,
    /// A TLS protocol or certificate failure (never an origin failure).
    Tls,
    /// Nothing to judge the origin by: the client went away before any response, or nginx
    /// retries for free a kept-alive connection the origin had closed. Not counted at all.
    NoVerdict,
    /// The balancer found no live server ("no live upstreams": every server is marked down by
    /// `max_fails`, ejected, or both): nginx answers `502` itself. Always a failure of the
    /// pool, whatever `circuit_breaker_failure` lists.
    NoLive,
}

/// The outcome of one upstream attempt, as the nginx shell saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// How the attempt ended.
    pub ending: Ending,
    /// HTTP status, 0 when there is none.
    pub status: u16,
    /// `Retry-After` of the response in seconds, if it had one.
    pub retry_after_s: Option<u32>,
    /// Upstream response time in milliseconds.
    pub response_ms: u64,
}

impl Attempt {
    /// A response with `status`, no `Retry-After`, taking `response_ms`.
    pub fn http(status: u16, response_ms: u64) -> Attempt {
        Attempt {
            ending: Ending::Response,
            status,
            retry_after_s: None,
            response_ms,
        }
    }

    /// An attempt that ended without a status.
    pub fn ended(ending: Ending, response_ms: u64) -> Attempt {
        Attempt {
            ending,
            status: 0,
            retry_after_s: None,
            response_ms,
        }
    }
}

/// What an [`Attempt`] means to the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Recorded at all (false for [`Ending::NoVerdict`]).
    pub counted: bool,
    /// A failure (its class is in `circuit_breaker_failure`).
    pub failure: bool,
    /// Strictly slower than `slow` (only when `slow` is set and the attempt is not TLS).
    pub slow: bool,
    /// A TLS failure: counted in `tls_errors` only, never in the window.
    pub tls: bool,
    /// A 503 carrying `Retry-After`.
    pub retry_after_503: bool,
    /// The `Retry-After` seconds of a 503, which raise the next cooldown.
    pub retry_after_s: u32,
    /// The outcome's failure class, whether or not it is configured as a failure.
    pub class: Option<FailureClass>,
    /// A gateway failure, which `consecutive` counts: a failure (by the configured classes)
    /// that says the origin cannot be reached or cannot answer — a connect error or reset, a
    /// timeout, no live server, or a `502`, `503` or `504` — rather than that it answered
    /// wrongly (a `500`, an invalid header: the application's, not the gateway's).
    pub gateway: bool,
}

impl Verdict {
    /// Whether the outcome is bad for the window: counted, and a failure or slow.
    pub fn is_bad(&self) -> bool {
        self.counted && !self.tls && (self.failure || self.slow)
    }

    /// Why a bad outcome of `a` is bad, as log lines say it (`http_500`, `timeout`, `slow:
    /// 912ms`); `None` when it is not bad.
    pub fn why_bad(&self, a: &Attempt) -> Option<String> {
        if !self.is_bad() {
            return None;
        }
        Some(match self.class {
            Some(class) if self.failure => class_name(class),
            _ => format!("slow: {}ms", a.response_ms),
        })
    }
}

/// The name of a class as written in `circuit_breaker_failure` (`http_500`, `timeout`, ...).
pub fn class_name(class: FailureClass) -> String {
    match class {
        FailureClass::Error => "error".into(),
        FailureClass::Timeout => "timeout".into(),
        FailureClass::InvalidHeader => "invalid_header".into(),
        FailureClass::Http5xx(code) => format!("http_{code}"),
        FailureClass::Http429 => "http_429".into(),
        FailureClass::Http503RetryAfter => "http_503_retry_after".into(),
        FailureClass::NoLive => "no live upstreams".into(),
    }
}

/// Classifies one attempt under `cfg`.
///
/// Attempts with no verdict are not counted; TLS failures are counted apart and never fail; transport
/// errors fail when their class is configured; 5xx responses fail by code, except that a 503
/// with `Retry-After` is its own class; 429 fails only when named; other statuses never fail.
#[inline]
pub fn classify(a: &Attempt, cfg: &BreakerConfig) -> Verdict {
    let class = match a.ending {
        Ending::NoVerdict => return Verdict::default(),
        Ending::Tls => {
            return Verdict {
                counted: true,
                tls: true,
                ..Verdict::default()
            }
        }
        Ending::Error => Some(FailureClass::Error),
        Ending::Timeout => Some(FailureClass::Timeout),
        Ending::InvalidHeader => Some(FailureClass::InvalidHeader),
        Ending::NoLive => Some(FailureClass::NoLive),
        Ending::Response => match a.status {
            503 if a.retry_after_s.is_some() => Some(FailureClass::Http503RetryAfter),
            500..=599 => Some(FailureClass::Http5xx(a.status)),
            429 => Some(FailureClass::Http429),
            _ => None,
        },
    };
    let retry_after_503 = class == Some(FailureClass::Http503RetryAfter);
    let failure = class.is_some_and(|c| c == FailureClass::NoLive || cfg.failures.contains(c));
    Verdict {
        counted: true,
        failure,
        gateway: failure
            && matches!(
                class,
                Some(
                    FailureClass::Error
                        | FailureClass::Timeout
                        | FailureClass::NoLive
                        | FailureClass::Http503RetryAfter
                        | FailureClass::Http5xx(502..=504)
                )
            ),
        slow: cfg.slow_ms > 0 && a.response_ms > u64::from(cfg.slow_ms),
        tls: false,
        retry_after_503,
        retry_after_s: if retry_after_503 {
            a.retry_after_s.unwrap_or(0)
        } else {
            0
        },
        class,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::config::FailureSet;

    fn cfg_with(classes: &[&str]) -> BreakerConfig {
        let mut failures = FailureSet::EMPTY;
        for c in classes {
            failures.insert(FailureClass::parse(c).unwrap());
        }
        BreakerConfig {
            failures,
            slow_ms: 800,
            ..BreakerConfig::default()
        }
    }

    fn ra(status: u16, secs: u32) -> Attempt {
        Attempt {
            retry_after_s: Some(secs),
            ..Attempt::http(status, 10)
        }
    }

    #[test]
    fn classification_table() {
        let default = BreakerConfig::default();
        let with_429 = cfg_with(&["http_429", "http_503_retry_after"]);
        let none = cfg_with(&[]);
        // (attempt, config, counted, failure, tls, retry_after_503)
        #[rustfmt::skip]
        let table: &[(&str, Attempt, &BreakerConfig, bool, bool, bool, bool)] = &[
            ("200 never fails", Attempt::http(200, 5), &default, true, false, false, false),
            ("302 never fails", Attempt::http(302, 5), &default, true, false, false, false),
            ("404 never fails", Attempt::http(404, 5), &default, true, false, false, false),
            ("404 even if everything else is named", Attempt::http(404, 5), &with_429, true, false, false, false),
            ("429 is not a failure by default", Attempt::http(429, 5), &default, true, false, false, false),
            ("429 fails when named", Attempt::http(429, 5), &with_429, true, true, false, false),
            ("500 fails by default", Attempt::http(500, 5), &default, true, true, false, false),
            ("501 is not in the default set", Attempt::http(501, 5), &default, true, false, false, false),
            ("503 fails by default", Attempt::http(503, 5), &default, true, true, false, false),
            ("503 + Retry-After is its own class", ra(503, 7), &default, true, false, false, true),
            ("503 + Retry-After fails when named", ra(503, 7), &with_429, true, true, false, true),
            ("500 + Retry-After is still http_500", ra(500, 7), &default, true, true, false, false),
            ("error fails by default", Attempt::ended(Ending::Error, 5), &default, true, true, false, false),
            ("timeout fails by default", Attempt::ended(Ending::Timeout, 5), &default, true, true, false, false),
            ("timeout not named", Attempt::ended(Ending::Timeout, 5), &none, true, false, false, false),
            ("invalid_header fails by default", Attempt::ended(Ending::InvalidHeader, 5), &default, true, true, false, false),
            ("invalid_header not named", Attempt::ended(Ending::InvalidHeader, 5), &none, true, false, false, false),
            ("TLS is never a failure", Attempt::ended(Ending::Tls, 5), &default, true, false, true, false),
            ("no verdict is not counted", Attempt::ended(Ending::NoVerdict, 5), &default, false, false, false, false),
            ("no live server fails by default", Attempt::ended(Ending::NoLive, 0), &default, true, true, false, false),
            ("no live server fails whatever is named", Attempt::ended(Ending::NoLive, 0), &none, true, true, false, false),
        ];
        for (name, a, cfg, counted, failure, tls, ra503) in table {
            let v = classify(a, cfg);
            assert_eq!(
                (v.counted, v.failure, v.tls, v.retry_after_503),
                (*counted, *failure, *tls, *ra503),
                "{name}"
            );
        }
        assert_eq!(classify(&ra(503, 7), &default).retry_after_s, 7);
        assert_eq!(
            classify(&ra(503, 7), &default).class,
            Some(FailureClass::Http503RetryAfter)
        );
        assert_eq!(classify(&ra(429, 7), &with_429).retry_after_s, 0);
    }

    #[test]
    fn gateway_failures_are_the_origin_unreachable() {
        let default = BreakerConfig::default();
        for (a, gateway) in [
            (Attempt::ended(Ending::Error, 5), true),
            (Attempt::ended(Ending::Timeout, 5), true),
            (Attempt::ended(Ending::NoLive, 0), true),
            (Attempt::http(502, 5), true),
            (Attempt::http(503, 5), true),
            (Attempt::http(504, 5), true),
            (Attempt::http(500, 5), false),
            (Attempt::ended(Ending::InvalidHeader, 5), false),
            (Attempt::http(429, 5), false),
            (Attempt::http(404, 5), false),
            (Attempt::http(200, 5), false),
            (Attempt::ended(Ending::Tls, 5), false),
        ] {
            assert_eq!(classify(&a, &default).gateway, gateway, "{a:?}");
        }
        // A class not named in circuit_breaker_failure is no failure, nor a gateway one.
        assert!(!classify(&Attempt::http(502, 5), &cfg_with(&["http_500"])).gateway);
        assert!(classify(&ra(503, 2), &cfg_with(&["http_503_retry_after"])).gateway);
    }

    #[test]
    fn slow_means_strictly_slower_than_slow() {
        let cfg = cfg_with(&[]);
        assert!(!classify(&Attempt::http(200, 800), &cfg).slow);
        assert!(classify(&Attempt::http(200, 801), &cfg).slow);
        let off = BreakerConfig::default();
        assert!(!classify(&Attempt::http(200, u64::MAX), &off).slow);
    }

    #[test]
    fn class_names_match_the_directive() {
        for name in [
            "error",
            "timeout",
            "invalid_header",
            "http_429",
            "http_503_retry_after",
            "http_500",
            "http_599",
        ] {
            assert_eq!(class_name(FailureClass::parse(name).unwrap()), name);
        }
    }
}
