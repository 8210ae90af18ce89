//! Classifying one upstream attempt: does it count, is it a failure, is it slow.

use super::config::{BreakerConfig, FailureClass, GrpcCode};

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
    /// A gRPC `DEADLINE_EXCEEDED` that answered the client's own `grpc-timeout` (see
    /// [`Attempt::with_client_deadline`]): the client's, not counted at all.
    ClientDeadline,
    /// The origin's response header did not fit nginx's buffer (`proxy_buffer_size`,
    /// "upstream sent too big header"): nginx's configuration, or a client that made the
    /// origin echo a long path or cookie into a header. Not counted at all.
    TooBigHeader,
    /// The origin stopped taking the client's request body and closed or reset the connection
    /// before nginx had sent it whole: what an origin that refuses a too-large upload with
    /// `413` and closes looks like, nginx's send failing before it reads the answer. The
    /// client's body, not the origin's health: not counted at all.
    BodyRefused,
    /// The balancer found no live server ("no live upstreams": every server is marked down by
    /// `max_fails`, ejected, or both): nginx answers `502` itself. Always a failure of the
    /// pool, whatever `circuit_breaker_failure` lists.
    NoLive,
}

impl Ending {
    /// An ending the client shapes, which says nothing of the server: an answer whose header
    /// the client made too big (an echo of its path or cookie), an upload the origin refused.
    /// Not the server's failure for nginx's own `max_fails` either: one such attempt per
    /// server would leave the pool with "no live upstreams", which counts
    /// ([`Ending::NoLive`]).
    pub fn shaped_by_client(self) -> bool {
        matches!(self, Ending::TooBigHeader | Ending::BodyRefused)
    }
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
    /// The `grpc-status` of a gRPC answer (its trailers, or the headers of a trailers-only
    /// answer), if it had one.
    pub grpc_status: Option<u8>,
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
            grpc_status: None,
            response_ms,
        }
    }

    /// A gRPC answer: HTTP `200` whose `grpc-status` is `code`, taking `response_ms`.
    pub fn grpc(code: u8, response_ms: u64) -> Attempt {
        Attempt {
            grpc_status: Some(code),
            ..Attempt::http(200, response_ms)
        }
    }

    /// Whether the origin said it is saturated: a `429`, a `503` with `Retry-After`, or a
    /// gRPC `RESOURCE_EXHAUSTED` (judged as [`classify`] judges a gRPC answer: when its HTTP
    /// status is no 5xx). An overload signal for the adaptive limit, whatever the classes.
    pub fn is_overload(&self) -> bool {
        self.ending == Ending::Response
            && match self.status {
                429 => true,
                503 => self.retry_after_s.is_some(),
                500..=599 => false,
                _ => self.grpc_status == Some(crate::grpc::RESOURCE_EXHAUSTED),
            }
    }

    /// The attempt, judged against the deadline the client itself sent (`grpc-timeout`, in
    /// microseconds, when it sent one), `since_sent_ms` after nginx connected to send the call
    /// (the whole attempt, not the origin's time: the origin counts the deadline from the
    /// call's headers, whatever came after): a gRPC `DEADLINE_EXCEEDED` that answers it is
    /// [`Ending::ClientDeadline`], anything else is unchanged. A client that asks for a
    /// deadline it knows cannot be met (`1n`) must not fail the origin.
    pub fn with_client_deadline(self, deadline_us: Option<u64>, since_sent_ms: u64) -> Attempt {
        match deadline_us {
            Some(d)
                if self.ending == Ending::Response
                    && self.status == 200
                    && self.grpc_status == Some(crate::grpc::DEADLINE_EXCEEDED)
                    && crate::grpc::deadline::answers_client(since_sent_ms, d) =>
            {
                Attempt {
                    ending: Ending::ClientDeadline,
                    status: 0,
                    grpc_status: None,
                    ..self
                }
            }
            _ => self,
        }
    }

    /// An attempt that ended without a status.
    pub fn ended(ending: Ending, response_ms: u64) -> Attempt {
        Attempt {
            ending,
            status: 0,
            retry_after_s: None,
            grpc_status: None,
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
    /// The origin said it is saturated: a `429`, a `503` with `Retry-After`, or a gRPC
    /// `RESOURCE_EXHAUSTED`, whether or not its class is configured as a failure.
    pub overload: bool,
    /// The outcome's failure class, whether or not it is configured as a failure.
    pub class: Option<FailureClass>,
    /// A gateway failure, which `consecutive` counts: a failure (by the configured classes)
    /// that says the origin cannot be reached or cannot answer — a connect error or reset, a
    /// timeout, no live server, a `502`, `503` or `504`, or a gRPC `UNAVAILABLE` or
    /// `DEADLINE_EXCEEDED` — rather than that it answered
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
        FailureClass::Grpc(code) => code.name().into(),
    }
}

/// The failure class of an attempt's outcome, whether or not it is configured (`None`: it
/// has none: a success, a 4xx, a client-caused gRPC code, no verdict, TLS).
#[inline(always)]
fn class_of(a: &Attempt) -> Option<FailureClass> {
    match a.ending {
        Ending::NoVerdict
        | Ending::ClientDeadline
        | Ending::TooBigHeader
        | Ending::BodyRefused
        | Ending::Tls => None,
        Ending::Error => Some(FailureClass::Error),
        Ending::Timeout => Some(FailureClass::Timeout),
        Ending::InvalidHeader => Some(FailureClass::InvalidHeader),
        Ending::NoLive => Some(FailureClass::NoLive),
        Ending::Response => match a.status {
            503 if a.retry_after_s.is_some() => Some(FailureClass::Http503RetryAfter),
            500..=599 => Some(FailureClass::Http5xx(a.status)),
            429 => Some(FailureClass::Http429),
            _ => match a.grpc_status {
                None => None,
                Some(code) => GrpcCode::of_status(code).map(FailureClass::Grpc),
            },
        },
    }
}

/// Whether an attempt that ended with a response is a failure under `cfg`: what
/// [`classify`] says of it in `failure`, for the closed path's successes, without the rest
/// of the verdict (`scripts/bench-instructions`, closed).
#[inline(always)]
pub fn response_fails(a: &Attempt, cfg: &BreakerConfig) -> bool {
    class_of(a).is_some_and(|c| c == FailureClass::NoLive || cfg.failures.contains(c))
}

/// Classifies one attempt under `cfg`.
///
/// Attempts with no verdict, and those the client or nginx's configuration caused (a gRPC
/// deadline the client set, a header too big for nginx's buffer), are not counted; TLS failures are counted apart and never fail; transport
/// errors fail when their class is configured; 5xx responses fail by code, except that a 503
/// with `Retry-After` is its own class; 429 fails only when named; other statuses never fail,
/// but an answer with a `grpc-status` the server caused has that code's class (the HTTP
/// status of a gRPC answer is `200`; a 5xx or 429 is judged by its HTTP class first).
#[inline]
pub fn classify(a: &Attempt, cfg: &BreakerConfig) -> Verdict {
    let slow = cfg.slow_ms > 0 && a.response_ms > u64::from(cfg.slow_ms);
    if a.ending == Ending::Response && a.status < 400 && a.grpc_status.is_none() {
        // Most answers of a proxy: no class, no overload signal, only perhaps slow
        // (`scripts/bench-instructions`, closed).
        return Verdict {
            counted: true,
            slow,
            ..Verdict::default()
        };
    }
    classify_rest(*a, cfg, slow)
}

/// [`classify`] of what is not a plain answer. The attempt by value: a caller that has it in
/// registers stores it only on this path (`scripts/bench-instructions`, closed).
#[inline(never)]
fn classify_rest(a: Attempt, cfg: &BreakerConfig, slow: bool) -> Verdict {
    match a.ending {
        Ending::NoVerdict | Ending::TooBigHeader | Ending::BodyRefused => {
            return Verdict::default()
        }
        // The client's deadline ran out first: no verdict on the answer, but an origin that
        // had not answered in `slow` or more is slow (a deadline shorter than `slow` says
        // nothing).
        Ending::ClientDeadline => {
            return Verdict {
                counted: slow,
                slow,
                ..Verdict::default()
            }
        }
        Ending::Tls => {
            return Verdict {
                counted: true,
                tls: true,
                ..Verdict::default()
            }
        }
        _ => {}
    }
    let class = class_of(&a);
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
                        | FailureClass::Grpc(GrpcCode::Unavailable | GrpcCode::DeadlineExceeded)
                )
            ),
        slow,
        tls: false,
        retry_after_503,
        overload: a.is_overload(),
        retry_after_s: if retry_after_503 {
            a.retry_after_s.unwrap_or(0)
        } else {
            0
        },
        class,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::breaker::config::FailureSet;

    /// The given classes, `slow=800ms`.
    pub(crate) fn cfg_with(classes: &[&str]) -> BreakerConfig {
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

    #[test]
    fn the_plain_answers_path_agrees_with_the_rest() {
        let cfgs = [
            cfg_with(&[
                "error",
                "timeout",
                "http_500",
                "http_429",
                "grpc_unavailable",
            ]),
            BreakerConfig::default(),
            BreakerConfig {
                slow_ms: 0,
                ..cfg_with(&["http_502", "http_503_retry_after"])
            },
        ];
        let endings = ALL_ENDINGS;
        for cfg in &cfgs {
            for ending in endings {
                for status in (0..=600).step_by(1) {
                    for grpc_status in [None, Some(0), Some(4), Some(8), Some(14), Some(200)] {
                        for retry_after_s in [None, Some(3)] {
                            for response_ms in [0, 800, 801] {
                                let a = Attempt {
                                    ending,
                                    status,
                                    retry_after_s,
                                    grpc_status,
                                    response_ms,
                                };
                                let slow = cfg.slow_ms > 0 && response_ms > u64::from(cfg.slow_ms);
                                assert_eq!(classify(&a, cfg), classify_rest(a, cfg, slow), "{a:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn what_the_client_or_nginx_caused_never_counts() {
        let all = cfg_with(&[
            "error",
            "timeout",
            "invalid_header",
            "grpc_deadline_exceeded",
        ]);
        let fast = BreakerConfig { slow_ms: 0, ..all };
        for ending in [
            Ending::ClientDeadline,
            Ending::TooBigHeader,
            Ending::BodyRefused,
        ] {
            for cfg in [&fast, &BreakerConfig::default()] {
                let a = Attempt::ended(ending, 50_000);
                let v = classify(&a, cfg);
                assert_eq!(v, Verdict::default(), "{ending:?}");
                assert!(!v.is_bad() && !response_fails(&a, cfg));
                assert!(!a.is_overload());
            }
        }
    }

    #[test]
    fn a_client_deadline_past_slow_is_slow() {
        let cfg = BreakerConfig {
            slow_ms: 300,
            ..BreakerConfig::default()
        };
        let hung = Attempt::ended(Ending::ClientDeadline, 500);
        let v = classify(&hung, &cfg);
        assert!(v.counted && v.slow && !v.failure && v.is_bad());
        assert_eq!(v.why_bad(&hung).as_deref(), Some("slow: 500ms"));
        // A deadline shorter than `slow`: nothing.
        assert_eq!(
            classify(&Attempt::ended(Ending::ClientDeadline, 200), &cfg),
            Verdict::default()
        );
    }

    #[test]
    fn a_deadline_the_client_set_is_the_clients() {
        let cfg = BreakerConfig::default();
        // `grpc-timeout: 1n`, answered at once.
        let a = Attempt::grpc(crate::grpc::DEADLINE_EXCEEDED, 0).with_client_deadline(Some(0), 0);
        assert_eq!(a.ending, Ending::ClientDeadline);
        assert!(!classify(&a, &cfg).counted);
        // No deadline from the client: the origin's (a gateway failure by default).
        let a =
            Attempt::grpc(crate::grpc::DEADLINE_EXCEEDED, 3_000).with_client_deadline(None, 3_000);
        let v = classify(&a, &cfg);
        assert!(v.failure && v.gateway);
        // The origin gave up long before the client's 10 s: its own deadline.
        let a = Attempt::grpc(crate::grpc::DEADLINE_EXCEEDED, 200)
            .with_client_deadline(Some(10_000_000), 200);
        assert!(classify(&a, &cfg).failure);
        // Other answers are left alone, whatever the client's deadline.
        for a in [
            Attempt::grpc(crate::grpc::UNAVAILABLE, 0),
            Attempt::grpc(0, 0),
            Attempt::http(504, 0),
            Attempt::ended(Ending::Timeout, 0),
        ] {
            assert_eq!(a.with_client_deadline(Some(0), 0), a);
        }
        // A server stream: its header came at once (the origin's time), its status when the
        // client's 2-s deadline ran out.
        let a = Attempt::grpc(crate::grpc::DEADLINE_EXCEEDED, 10)
            .with_client_deadline(Some(2_000_000), 2_001);
        assert_eq!(a.ending, Ending::ClientDeadline);
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
            "grpc_unknown",
            "grpc_deadline_exceeded",
            "grpc_resource_exhausted",
            "grpc_internal",
            "grpc_unavailable",
            "grpc_data_loss",
        ] {
            assert_eq!(class_name(FailureClass::parse(name).unwrap()), name);
        }
    }

    /// Every ending.
    const ALL_ENDINGS: [Ending; 10] = [
        Ending::Response,
        Ending::Error,
        Ending::Timeout,
        Ending::InvalidHeader,
        Ending::Tls,
        Ending::NoVerdict,
        Ending::ClientDeadline,
        Ending::TooBigHeader,
        Ending::BodyRefused,
        Ending::NoLive,
    ];

    #[test]
    fn only_endings_a_client_shapes_spare_the_server() {
        let spared = [Ending::TooBigHeader, Ending::BodyRefused];
        for e in ALL_ENDINGS {
            assert_eq!(e.shaped_by_client(), spared.contains(&e), "{e:?}");
        }
    }

    #[test]
    fn grpc_status_classes() {
        let default = BreakerConfig::default();
        let all = cfg_with(&[
            "grpc_unknown",
            "grpc_deadline_exceeded",
            "grpc_resource_exhausted",
            "grpc_internal",
            "grpc_unavailable",
            "grpc_data_loss",
        ]);
        // (grpc-status, a failure by default, its class)
        #[rustfmt::skip]
        let table: &[(u8, bool, Option<&str>)] = &[
            (0, false, None),                               // OK
            (1, false, None),                               // CANCELLED
            (2, true, Some("grpc_unknown")),
            (3, false, None),                               // INVALID_ARGUMENT
            (4, true, Some("grpc_deadline_exceeded")),
            (5, false, None),                               // NOT_FOUND
            (6, false, None),                               // ALREADY_EXISTS
            (7, false, None),                               // PERMISSION_DENIED
            (8, false, Some("grpc_resource_exhausted")),    // overload, not an outage
            (9, false, None),                               // FAILED_PRECONDITION
            (10, false, None),                              // ABORTED
            (11, false, None),                              // OUT_OF_RANGE
            (12, false, None),                              // UNIMPLEMENTED
            (13, false, Some("grpc_internal")),              // a client's unparseable message
            (14, true, Some("grpc_unavailable")),
            (15, true, Some("grpc_data_loss")),
            (16, false, None),                              // UNAUTHENTICATED
            (17, false, None),                              // no such code
            (200, false, None),
        ];
        for &(code, failure, class) in table {
            let a = Attempt::grpc(code, 5);
            let v = classify(&a, &default);
            assert!(v.counted, "{code}");
            assert_eq!(v.failure, failure, "grpc-status {code} by default");
            assert_eq!(v.class.map(class_name).as_deref(), class, "{code}");
            // Named or not, a code a client causes never fails; the others fail when named.
            assert_eq!(
                classify(&a, &all).failure,
                class.is_some(),
                "{code} all named"
            );
            assert!(!classify(&a, &cfg_with(&[])).failure, "{code} none named");
            assert_eq!(v.overload, code == 8, "{code} overload");
            assert_eq!(v.gateway, code == 4 || code == 14, "{code} gateway");
        }
        // The HTTP status of the answer comes first: a 502 from nginx is http_502.
        let a = Attempt {
            grpc_status: Some(5),
            ..Attempt::http(502, 5)
        };
        assert_eq!(
            classify(&a, &default).class,
            Some(FailureClass::Http5xx(502))
        );
        assert!(classify(&a, &default).failure);
        // A transport failure has no status to read.
        let a = Attempt {
            grpc_status: Some(14),
            ..Attempt::ended(Ending::Timeout, 5)
        };
        assert_eq!(classify(&a, &default).class, Some(FailureClass::Timeout));
    }

    #[test]
    fn response_fails_is_classify_s_failure() {
        let cfgs = [
            BreakerConfig::default(),
            cfg_with(&[]),
            cfg_with(&[
                "http_429",
                "grpc_resource_exhausted",
                "http_503_retry_after",
            ]),
        ];
        for status in [200, 204, 404, 429, 500, 502, 503, 504, 599] {
            for grpc in [None, Some(0), Some(5), Some(8), Some(14), Some(99)] {
                for retry_after_s in [None, Some(3)] {
                    let a = Attempt {
                        grpc_status: grpc,
                        retry_after_s,
                        ..Attempt::http(status, 5)
                    };
                    for cfg in &cfgs {
                        assert_eq!(response_fails(&a, cfg), classify(&a, cfg).failure, "{a:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn grpc_codes_follow_their_table() {
        for n in 0..=255u8 {
            let by_table = GrpcCode::ALL
                .iter()
                .find(|(_, c, _)| *c == n)
                .map(|(g, _, _)| *g);
            assert_eq!(GrpcCode::of_status(n), by_table, "{n}");
        }
    }

    #[test]
    fn client_caused_grpc_codes_cannot_be_named() {
        for name in crate::breaker::GRPC_CLIENT_CODES {
            assert_eq!(FailureClass::parse(name), None, "{name}");
        }
        assert_eq!(FailureClass::parse("grpc_"), None);
        assert_eq!(FailureClass::parse("grpc_14"), None);
    }

    #[test]
    fn overload_signals() {
        let default = BreakerConfig::default();
        assert!(classify(&Attempt::http(429, 5), &default).overload);
        assert!(classify(&ra(503, 1), &default).overload);
        assert!(!classify(&Attempt::http(503, 5), &default).overload);
        assert!(!classify(&Attempt::http(500, 5), &default).overload);
        assert!(classify(&Attempt::grpc(8, 5), &default).overload);
        assert!(!classify(&Attempt::grpc(14, 5), &default).overload);
        // An overload signal is no failure unless named.
        assert!(!classify(&Attempt::http(429, 5), &default).failure);
        assert!(!classify(&Attempt::grpc(8, 5), &default).failure);
        // The same rule as the classes'.
        for a in [
            Attempt::http(429, 5),
            ra(503, 1),
            ra(500, 1),
            Attempt::http(503, 5),
            Attempt::grpc(8, 5),
            Attempt::grpc(14, 5),
            Attempt {
                grpc_status: Some(8),
                ..Attempt::http(502, 5)
            },
            Attempt {
                grpc_status: Some(8),
                ..Attempt::ended(Ending::Error, 5)
            },
        ] {
            let v = classify(&a, &default);
            let by_class = matches!(
                v.class,
                Some(
                    FailureClass::Http429
                        | FailureClass::Http503RetryAfter
                        | FailureClass::Grpc(GrpcCode::ResourceExhausted)
                )
            );
            assert_eq!(v.overload, by_class, "{a:?}");
        }
        let named = cfg_with(&["grpc_resource_exhausted", "http_429"]);
        assert!(classify(&Attempt::grpc(8, 5), &named).failure);
        assert!(classify(&Attempt::http(429, 5), &named).failure);
    }
}
