//! The pure parts of the shell's active prober (`probe_uri`): when a worker looks at a breaker
//! again, which server it probes, and what a probe's answer means to the breaker.
//!
//! Every worker runs the prober; the breaker's instance-wide probe slot
//! ([`Breaker::active_probe`](crate::breaker::Breaker::active_probe)) makes sure that only one
//! of them sends each probe. A worker reads a breaker's published [`Gate`] without the lock and
//! takes the lock only when a probe may be due ([`look`]), so that thousands of closed
//! breakers cost a few atomic reads per worker and look.

use crate::breaker::{Attempt, Ending, FailureClass, FailureSet, Gate};
use crate::directive::ProbeSpec;

/// What a worker does with a breaker now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Look {
    /// A probe may be due (or one is overdue: in flight, or held by a worker that died): ask
    /// for the slot under the lock.
    Lock,
    /// Nothing to do before this time (on the breaker's clock).
    At(u64),
}

/// How long a worker leaves a breaker unwatched when its gate cannot say when the next probe
/// is due (closed, forced, or a probe in flight): a fifth of `probe_interval`, from 10 ms to
/// 500 ms. A breaker that opens in another worker has its first probe due one
/// `probe_interval` (jittered by at most `jitter`) later, so the probe starts on time or at
/// most this late; at 1 s that is 200 ms, and five lock-free reads a second per breaker.
pub fn watch_ms(probe_interval_ms: u32) -> u64 {
    (u64::from(probe_interval_ms) / 5).clamp(10, 500)
}

/// What to do with a breaker whose published gate is `gate` at `now_ms`.
///
/// An open breaker with active probes publishes `Reject` until its next probe is due, so a
/// worker sleeps until then (but no longer than [`watch_ms`], in case fleet peers hasten it).
/// Closed, ramping and forced-open breakers are looked at again after [`watch_ms`];
/// `Ask` (a dry run) can only be answered under the lock.
pub fn look(gate: Gate, now_ms: u64, probe_interval_ms: u32) -> Look {
    let watch = now_ms.saturating_add(watch_ms(probe_interval_ms));
    match gate {
        Gate::Pass | Gate::Ramp { .. } => Look::At(watch),
        Gate::Reject { until_ms, .. } if until_ms == u64::MAX => Look::At(watch),
        Gate::Reject { until_ms, .. } if until_ms > now_ms => Look::At(until_ms.min(watch)),
        Gate::Reject { .. } | Gate::Ask => Look::Lock,
    }
}

/// The server to probe next: the first one at or after `cursor` (wrapping around) that is
/// not marked down, so that successive probes rotate over the healthy-looking servers. `None`
/// when every server is down (or there is none).
pub fn next_server(down: &[bool], cursor: usize) -> Option<usize> {
    let n = down.len();
    let start = cursor.checked_rem(n)?;
    (0..n).map(|i| (start + i) % n).find(|&i| !down[i])
}

/// How a probe request ended, as the shell's HTTP client saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeEnd {
    /// A response head arrived.
    Response {
        /// Its status.
        status: u16,
        /// Its `Retry-After`, in seconds, if it had one.
        retry_after_s: Option<u32>,
    },
    /// No response within `probe_timeout`.
    Timeout,
    /// No response: refused, reset, closed early, or an unreachable server.
    Error,
    /// Something that was not an HTTP/1.x response head.
    Invalid,
    /// The TLS handshake failed or the certificate was refused: counted apart (`tls_errors`),
    /// never an origin failure, as for user requests.
    Tls,
}

/// The attempt that reports a probe to the breaker.
///
/// A probe is healthy when a response arrives with a status in `probe_status`; anything else
/// — another status, no response within `probe_timeout`, an error — fails it, whatever
/// `circuit_breaker_failure` lists (that directive judges user requests; an operator who
/// points a probe at `/health` has said what healthy means). The breaker judges through its
/// failure classes, so a failed probe is reported with its own class when that class counts
/// as a failure, else with the first class that does (`failures` is never empty; a stand-in
/// carries no `Retry-After`, which therefore delays the next probe only when its class,
/// `http_503_retry_after`, is a failure). A healthy response is reported as a status that is
/// no failure. `response_ms` is the probe's time, which `probe_latency` judges.
pub fn attempt(spec: &ProbeSpec, failures: FailureSet, end: ProbeEnd, response_ms: u64) -> Attempt {
    let own = match end {
        ProbeEnd::Response {
            status,
            retry_after_s,
        } => {
            if spec.healthy(status) {
                let status = if (500..=599).contains(&status) || status == 429 {
                    200
                } else {
                    status
                };
                return Attempt::http(status, response_ms);
            }
            Attempt {
                retry_after_s,
                ..Attempt::http(status, response_ms)
            }
        }
        ProbeEnd::Timeout => Attempt::ended(Ending::Timeout, response_ms),
        ProbeEnd::Error => Attempt::ended(Ending::Error, response_ms),
        ProbeEnd::Invalid => Attempt::ended(Ending::InvalidHeader, response_ms),
        ProbeEnd::Tls => return Attempt::ended(Ending::Tls, response_ms),
    };
    if class_of(&own).is_some_and(|c| failures.contains(c)) {
        return own;
    }
    // The probe failed, but its own class does not count: report it as one that does.
    let stand_in = STAND_INS
        .iter()
        .copied()
        .chain((500..=599).map(FailureClass::Http5xx))
        .find(|&c| failures.contains(c))
        .unwrap_or(FailureClass::Error);
    let with = |a: Attempt| Attempt { response_ms, ..a };
    with(match stand_in {
        FailureClass::Error => Attempt::ended(Ending::Error, 0),
        FailureClass::Timeout => Attempt::ended(Ending::Timeout, 0),
        FailureClass::InvalidHeader => Attempt::ended(Ending::InvalidHeader, 0),
        FailureClass::Http5xx(code) => Attempt::http(code, 0),
        FailureClass::Http429 => Attempt::http(429, 0),
        FailureClass::Http503RetryAfter => Attempt {
            retry_after_s: Some(own.retry_after_s.unwrap_or(0)),
            ..Attempt::http(503, 0)
        },
    })
}

/// Classes tried, in order, to report a failed probe whose own class does not count.
const STAND_INS: [FailureClass; 5] = [
    FailureClass::Error,
    FailureClass::Timeout,
    FailureClass::InvalidHeader,
    FailureClass::Http429,
    FailureClass::Http503RetryAfter,
];

fn class_of(a: &Attempt) -> Option<FailureClass> {
    match a.ending {
        Ending::Error => Some(FailureClass::Error),
        Ending::Timeout => Some(FailureClass::Timeout),
        Ending::InvalidHeader => Some(FailureClass::InvalidHeader),
        Ending::Response => match a.status {
            503 if a.retry_after_s.is_some() => Some(FailureClass::Http503RetryAfter),
            500..=599 => Some(FailureClass::Http5xx(a.status)),
            429 => Some(FailureClass::Http429),
            _ => None,
        },
        Ending::Tls | Ending::NoVerdict => None,
    }
}

/// Whether a probe speaks TLS, as far as a worker knows.
///
/// nginx keeps the scheme of `proxy_pass https://…` inside the proxy module; what it shows is
/// the TLS context it builds for such a location — and a location without `proxy_ssl_*`
/// settings of its own shares the context of its `server` (or `http`) block with its
/// siblings, plain ones included. So a TLS context in a location that passes to the upstream
/// means "TLS, perhaps". Such a probe asks in plain HTTP first: a plain server answers it
/// (and the scheme is learnt), while a TLS server answers plain HTTP at once with a `400` or
/// by closing the connection, and the probe asks again over TLS within the same
/// `probe_timeout`. (TLS first would not do: a plain server may wait for the end of a request
/// line that a TLS handshake never sends, until the probe times out.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP: no location that passes to the upstream has a TLS context, or a server
    /// answered in plain HTTP.
    Plain,
    /// TLS: a server spoke it.
    Tls,
    /// A TLS context seen, nothing learnt yet.
    Unsure,
}

/// What a plain-HTTP probe heard, as far as the scheme goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard {
    /// A response with this status.
    Status(u16),
    /// Something that was no HTTP response, or a connection closed or reset before one.
    Garbled,
    /// Nothing to go by (refused, timed out, ...).
    Nothing,
}

impl Scheme {
    /// Whether the probe starts in TLS.
    pub fn starts_with_tls(self) -> bool {
        self == Scheme::Tls
    }

    /// After a plain-HTTP probe: what is learnt, and whether to ask again over TLS. Any
    /// status but `400` proves plain HTTP; a `400` or a garbled answer is what a TLS server
    /// says to plain HTTP, when the scheme is unsure.
    pub fn after_plain(self, heard: Heard) -> (Scheme, bool) {
        match (self, heard) {
            (Scheme::Unsure, Heard::Status(400) | Heard::Garbled) => (self, true),
            (Scheme::Unsure, Heard::Status(_)) => (Scheme::Plain, false),
            _ => (self, false),
        }
    }

    /// After asking again over TLS: what is learnt. `spoke_tls` (the handshake completed, or
    /// the server's certificate was refused) proves TLS, and the TLS attempt's outcome is the
    /// probe's; otherwise the plain one's stands.
    pub fn after_tls(self, spoke_tls: bool) -> Scheme {
        if spoke_tls {
            Scheme::Tls
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::{classify, BreakerConfig};

    fn spec() -> ProbeSpec {
        ProbeSpec {
            uri: "/health".into(),
            host: None,
            statuses: vec![(200, 399)],
            timeout_ms: 1000,
        }
    }

    fn failed(spec: &ProbeSpec, failures: FailureSet, end: ProbeEnd) -> bool {
        let cfg = BreakerConfig {
            failures,
            ..BreakerConfig::default()
        };
        let v = classify(&attempt(spec, failures, end, 5), &cfg);
        assert!(v.counted);
        v.failure
    }

    #[test]
    fn a_closed_breaker_is_watched_every_fifth_of_the_interval() {
        assert_eq!(look(Gate::Pass, 1000, 1000), Look::At(1200));
        let ramp = Gate::Ramp {
            until_ms: 9000,
            ramp_ms: 10_000,
            start: 1000,
        };
        assert_eq!(look(ramp, 1000, 1000), Look::At(1200));
        assert_eq!(watch_ms(20), 10, "at least 10 ms");
        assert_eq!(watch_ms(60_000), 500, "at most 500 ms");
    }

    #[test]
    fn an_open_breaker_is_looked_at_when_its_probe_is_due() {
        let open = |until_ms| Gate::Reject {
            until_ms,
            wait_ms: 1000,
        };
        assert_eq!(look(open(1150), 1000, 1000), Look::At(1150));
        assert_eq!(
            look(open(5000), 1000, 1000),
            Look::At(1200),
            "no longer than the watch"
        );
        assert_eq!(look(open(1000), 1000, 1000), Look::Lock, "due now");
        assert_eq!(look(open(400), 1000, 1000), Look::Lock, "overdue");
        assert_eq!(look(open(u64::MAX), 1000, 1000), Look::At(1200), "forced");
        assert_eq!(look(Gate::Ask, 1000, 1000), Look::Lock, "dry run");
    }

    #[test]
    fn servers_rotate_over_those_not_down() {
        let down = [false, true, false, false];
        let mut cursor = 0;
        let mut seen = Vec::new();
        for _ in 0..6 {
            let i = next_server(&down, cursor).unwrap();
            seen.push(i);
            cursor = i + 1;
        }
        assert_eq!(seen, [0, 2, 3, 0, 2, 3]);
        assert_eq!(next_server(&down, 1), Some(2), "skips the down one");
        assert_eq!(next_server(&down, 17), Some(2), "a stale cursor wraps");
        assert_eq!(next_server(&[true, true], 0), None);
        assert_eq!(next_server(&[], 3), None);
        assert_eq!(next_server(&[false], 5), Some(0));
        assert_eq!(
            next_server(&[true, false], usize::MAX),
            Some(1),
            "any cursor"
        );
    }

    #[test]
    fn a_probe_is_healthy_by_probe_status_only() {
        let s = spec();
        let d = FailureSet::DEFAULT;
        let resp = |status| ProbeEnd::Response {
            status,
            retry_after_s: None,
        };
        assert!(!failed(&s, d, resp(200)));
        assert!(!failed(&s, d, resp(302)));
        assert!(
            failed(&s, d, resp(404)),
            "404 is no failure class, but unhealthy"
        );
        assert!(failed(&s, d, resp(500)));
        assert!(failed(&s, d, resp(429)));
        assert!(failed(&s, d, ProbeEnd::Timeout));
        assert!(failed(&s, d, ProbeEnd::Error));
        assert!(failed(&s, d, ProbeEnd::Invalid));
        let lenient = ProbeSpec {
            statuses: vec![(200, 599)],
            ..spec()
        };
        assert!(
            !failed(&lenient, d, resp(503)),
            "healthy by the operator's word"
        );
        assert_eq!(attempt(&lenient, d, resp(503), 7), Attempt::http(200, 7));
    }

    #[test]
    fn a_failed_probe_fails_whatever_circuit_breaker_failure_lists() {
        let s = spec();
        let mut only_503 = FailureSet::EMPTY;
        only_503.insert(FailureClass::Http5xx(503));
        for end in [
            ProbeEnd::Timeout,
            ProbeEnd::Error,
            ProbeEnd::Invalid,
            ProbeEnd::Response {
                status: 404,
                retry_after_s: None,
            },
        ] {
            assert!(failed(&s, only_503, end), "{end:?}");
            assert_eq!(attempt(&s, only_503, end, 9).response_ms, 9, "{end:?}");
        }
        let mut only_ra = FailureSet::EMPTY;
        only_ra.insert(FailureClass::Http503RetryAfter);
        assert!(failed(&s, only_ra, ProbeEnd::Error));
        let mut timeouts = FailureSet::EMPTY;
        timeouts.insert(FailureClass::Timeout);
        assert_eq!(
            attempt(&s, timeouts, ProbeEnd::Error, 3),
            Attempt::ended(Ending::Timeout, 3)
        );
    }

    #[test]
    fn a_failed_probe_keeps_its_retry_after_and_its_time() {
        let busy = ProbeEnd::Response {
            status: 503,
            retry_after_s: Some(30),
        };
        let mut with_ra = FailureSet::DEFAULT;
        with_ra.insert(FailureClass::Http503RetryAfter);
        let a = attempt(&spec(), with_ra, busy, 42);
        assert_eq!(
            (a.status, a.retry_after_s, a.response_ms),
            (503, Some(30), 42)
        );
        // By default a 503 with Retry-After is no failure class: the probe still fails.
        assert!(failed(&spec(), FailureSet::DEFAULT, busy));
        let ok = attempt(
            &spec(),
            FailureSet::DEFAULT,
            ProbeEnd::Response {
                status: 200,
                retry_after_s: None,
            },
            900,
        );
        assert_eq!(ok.response_ms, 900, "probe_latency judges it");
    }

    #[test]
    fn a_tls_failure_is_no_verdict_on_the_origin() {
        let cfg = BreakerConfig::default();
        let v = classify(&attempt(&spec(), cfg.failures, ProbeEnd::Tls, 5), &cfg);
        assert!(v.tls && !v.failure);
    }

    #[test]
    fn the_scheme_is_learnt_from_what_answered() {
        let u = Scheme::Unsure;
        assert!(!u.starts_with_tls() && !Scheme::Plain.starts_with_tls());
        assert!(Scheme::Tls.starts_with_tls());
        assert_eq!(u.after_plain(Heard::Status(200)), (Scheme::Plain, false));
        assert_eq!(
            u.after_plain(Heard::Status(503)),
            (Scheme::Plain, false),
            "a TLS server never answers plain HTTP with a 503"
        );
        assert_eq!(
            u.after_plain(Heard::Status(400)),
            (u, true),
            "nginx's HTTPS port"
        );
        assert_eq!(
            u.after_plain(Heard::Garbled),
            (u, true),
            "a TLS alert or a close"
        );
        assert_eq!(
            u.after_plain(Heard::Nothing),
            (u, false),
            "refused or timed out"
        );
        assert_eq!(
            Scheme::Plain.after_plain(Heard::Status(400)),
            (Scheme::Plain, false)
        );
        assert_eq!(u.after_tls(true), Scheme::Tls);
        assert_eq!(u.after_tls(false), u, "a failed handshake proves nothing");
    }
}
