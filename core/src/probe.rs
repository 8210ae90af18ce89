//! The pure parts of the shell's active prober (`probe_uri`): when a worker looks at a breaker
//! again, which server it probes, and what a probe's answer means to the breaker.
//!
//! Every worker runs the prober; the breaker grants its one probe to one worker at a time,
//! instance-wide ([`Breaker::active_probe`](crate::breaker::Breaker::active_probe)), so that
//! only one of them sends each probe. A worker reads a breaker's published [`Gate`] without the lock and
//! takes the lock only when a probe may be due ([`look`]), so that thousands of closed
//! breakers cost a few atomic reads per worker and look.

use crate::breaker::{Gate, ProbeFailure, ProbeResult};
use crate::directive::ProbeSpec;
use crate::grpc::health::Health;

/// What a worker does with a breaker now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Look {
    /// A probe may be due (or one is overdue: in flight, or held by a worker that died): ask
    /// for the probe under the lock.
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

/// How long a trip waits on the breaker's own probe ([`BreakerConfig::confirm_ms`]) where
/// probes take up to `timeout_ms`: the prober's next look at the breaker ([`watch_ms`]), the
/// probe, and a second for a busy event loop. Past it the window is believed.
///
/// [`BreakerConfig::confirm_ms`]: crate::breaker::BreakerConfig::confirm_ms
pub fn question_ms(timeout_ms: u32, probe_interval_ms: u32) -> u32 {
    let ms = watch_ms(probe_interval_ms) + u64::from(timeout_ms) + 1000;
    u32::try_from(ms).unwrap_or(u32::MAX)
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
    /// Something that was not an HTTP/1.x response head (HTTP/2 for a gRPC probe).
    Invalid,
    /// A gRPC health check's answer, with HTTP status 200.
    Grpc {
        /// What it says.
        health: Health,
        /// Its `grpc-retry-pushback-ms`, in whole seconds rounded up, if it had one.
        retry_after_s: Option<u32>,
    },
    /// The TLS handshake failed or the certificate was refused: counted apart (`tls_errors`),
    /// never an origin failure, as for user requests.
    Tls,
}

/// What a probe found, for [`crate::breaker::Breaker::record_probe`].
///
/// A probe is healthy when a response arrives with a status in `probe_status` (a gRPC probe:
/// when the health service says `SERVING`); anything else — another status, another serving
/// status or `grpc-status`, no response within `probe_timeout`, an error — fails it, whatever
/// `circuit_breaker_failure` lists (that directive judges user requests; an operator who
/// points a probe at `/health` has said what healthy means). `response_ms` is the probe's
/// time, which `probe_latency` judges; an answer's `Retry-After` delays the next probe.
pub fn result(spec: &ProbeSpec, end: ProbeEnd, response_ms: u64) -> ProbeResult {
    let (failure, tls, retry_after_s) = match end {
        ProbeEnd::Response {
            status,
            retry_after_s,
        } => (
            (!spec.healthy(status)).then_some(ProbeFailure::Status(status)),
            false,
            retry_after_s.unwrap_or(0),
        ),
        ProbeEnd::Timeout => (Some(ProbeFailure::Timeout), false, 0),
        ProbeEnd::Error => (Some(ProbeFailure::Error), false, 0),
        ProbeEnd::Invalid => (Some(ProbeFailure::InvalidResponse), false, 0),
        ProbeEnd::Grpc {
            health,
            retry_after_s,
        } => (
            match health {
                Health::Serving => None,
                Health::NotServing(s) => Some(ProbeFailure::NotServing(s)),
                Health::Status(code) => Some(ProbeFailure::GrpcStatus(code)),
                Health::Invalid => Some(ProbeFailure::InvalidResponse),
            },
            false,
            retry_after_s.unwrap_or(0),
        ),
        ProbeEnd::Tls => (None, true, 0),
    };
    ProbeResult {
        failure,
        tls,
        retry_after_s,
        response_ms,
    }
}

/// The name a TLS probe checks the server's certificate against, and the SNI it sends, as
/// nginx's `ngx_http_upstream_ssl_name` makes them for the traffic it proxies: `name`
/// (`proxy_ssl_name`, or the upstream's) without a port; SNI only with
/// `proxy_ssl_server_name on`, and never for an IP literal (RFC 6066).
pub fn tls_names(name: &[u8], server_name: bool) -> (Vec<u8>, Option<Vec<u8>>) {
    let host = match name.first() {
        Some(b'[') => match name.iter().position(|&b| b == b']') {
            Some(end) => &name[..=end],
            None => name,
        },
        _ => name.split(|&b| b == b':').next().unwrap_or(name),
    };
    let literal = host.first() == Some(&b'[')
        || core::str::from_utf8(host).is_ok_and(|h| h.parse::<core::net::Ipv4Addr>().is_ok());
    let sni = (server_name && !host.is_empty() && !literal).then(|| host.to_vec());
    (host.to_vec(), sni)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ProbeSpec {
        ProbeSpec {
            uri: "/health".into(),
            grpc: None,
            host: None,
            statuses: vec![(200, 399)],
            timeout_ms: 1000,
        }
    }

    fn failed(spec: &ProbeSpec, end: ProbeEnd) -> bool {
        let r = result(spec, end, 5);
        assert!(!r.tls);
        r.failure.is_some()
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
            announce_ms: until_ms,
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
    fn a_grpc_probe_is_healthy_when_serving_only() {
        let s = ProbeSpec {
            uri: crate::grpc::health::PATH.into(),
            grpc: Some(String::new()),
            ..spec()
        };
        let grpc = |health| ProbeEnd::Grpc {
            health,
            retry_after_s: None,
        };
        assert!(!failed(&s, grpc(Health::Serving)));
        assert_eq!(
            result(&s, grpc(Health::NotServing(2)), 5).failure,
            Some(ProbeFailure::NotServing(2))
        );
        assert_eq!(
            result(&s, grpc(Health::Status(12)), 5).failure,
            Some(ProbeFailure::GrpcStatus(12))
        );
        assert_eq!(
            result(&s, grpc(Health::Invalid), 5).failure,
            Some(ProbeFailure::InvalidResponse)
        );
        // Whatever its HTTP status, an answer without a health result is no good probe.
        for status in [200, 204, 302, 503] {
            let r = result(
                &s,
                ProbeEnd::Response {
                    status,
                    retry_after_s: None,
                },
                5,
            );
            assert_eq!(r.failure, Some(ProbeFailure::Status(status)));
        }
        // A pushback delays the next probe as a Retry-After does.
        let r = result(
            &s,
            ProbeEnd::Grpc {
                health: Health::NotServing(2),
                retry_after_s: Some(7),
            },
            5,
        );
        assert_eq!(r.retry_after_s, 7);
        assert_eq!(
            r.failed(0).as_deref(),
            Some("probe failed: NOT_SERVING"),
            "the log names the serving status"
        );
    }

    #[test]
    fn a_probe_is_healthy_by_probe_status_only() {
        let s = spec();
        let resp = |status| ProbeEnd::Response {
            status,
            retry_after_s: None,
        };
        assert!(!failed(&s, resp(200)));
        assert!(!failed(&s, resp(302)));
        assert!(
            failed(&s, resp(404)),
            "404 is no failure class, but unhealthy"
        );
        assert!(failed(&s, resp(500)));
        assert!(failed(&s, resp(429)));
        assert!(failed(&s, ProbeEnd::Timeout));
        assert!(failed(&s, ProbeEnd::Error));
        assert!(failed(&s, ProbeEnd::Invalid));
        let lenient = ProbeSpec {
            statuses: vec![(200, 599)],
            ..spec()
        };
        assert!(
            !failed(&lenient, resp(503)),
            "healthy by the operator's word"
        );
        assert_eq!(
            result(&s, resp(404), 9).failure,
            Some(ProbeFailure::Status(404))
        );
    }

    #[test]
    fn a_failed_probe_keeps_its_retry_after_and_its_time() {
        let busy = ProbeEnd::Response {
            status: 503,
            retry_after_s: Some(30),
        };
        let r = result(&spec(), busy, 42);
        assert_eq!(
            (r.failure, r.retry_after_s, r.response_ms),
            (Some(ProbeFailure::Status(503)), 30, 42)
        );
        let ok = result(
            &spec(),
            ProbeEnd::Response {
                status: 200,
                retry_after_s: None,
            },
            900,
        );
        assert_eq!(
            (ok.failure, ok.response_ms),
            (None, 900),
            "probe_latency judges it"
        );
    }

    #[test]
    fn a_tls_failure_is_no_verdict_on_the_origin() {
        let r = result(&spec(), ProbeEnd::Tls, 5);
        assert!(r.tls && r.failure.is_none());
    }

    #[test]
    fn tls_names_are_nginx_s() {
        assert_eq!(
            tls_names(b"api.internal", true),
            (b"api.internal".to_vec(), Some(b"api.internal".to_vec()))
        );
        assert_eq!(
            tls_names(b"api.internal:8443", true).1,
            Some(b"api.internal".to_vec())
        );
        assert_eq!(
            tls_names(b"api.internal", false),
            (b"api.internal".to_vec(), None),
            "proxy_ssl_server_name off"
        );
        assert_eq!(
            tls_names(b"10.0.0.5:8443", true),
            (b"10.0.0.5".to_vec(), None),
            "no SNI for an IP"
        );
        assert_eq!(tls_names(b"[::1]:8443", true), (b"[::1]".to_vec(), None));
        assert_eq!(tls_names(b"", true), (Vec::new(), None));
    }
}
