//! Sending one probe: `GET probe_uri` with its `Host`, under `probe_timeout` from connect to
//! the response head (the body is not read: the status decides), or with `probe_grpc` a gRPC
//! health check over HTTP/2 under `probe_timeout` from connect to its trailers; over TLS when
//! the upstream's locations speak it.

use core::time::Duration;

use circuit_breaker_core::directive::ProbeSpec;
use circuit_breaker_core::grpc::health;
use circuit_breaker_core::probe::ProbeEnd;
use hyper::HeaderMap;
use nginx_sys::{ngx_parse_http_time, ngx_time};

use super::target::Upstream;
use crate::net::{self, Error, GrpcAnswer, Options, Peer, Request, Response};

/// What nginx's error log says a probe's connection was for ("while probing upstream").
const ACTION: &str = "probing upstream";

/// How a probe went.
pub struct Sent {
    /// `None`: no verdict on the origin (the worker is exiting, or had no free connection).
    pub end: Option<ProbeEnd>,
    /// What went wrong, for the log.
    error: Option<Error>,
}

impl Sent {
    /// Why no response came, if none did.
    pub fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// Why the probe failed, for the log; `None` when it was healthy.
    pub fn failure(&self, spec: &ProbeSpec, took_ms: u64, latency_ms: u32) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(e.to_string());
        }
        match self.end? {
            ProbeEnd::Response { status, .. } if !spec.healthy(status) => {
                Some(format!("status {status}"))
            }
            ProbeEnd::Grpc { health, .. } if health != health::Health::Serving => {
                let r = circuit_breaker_core::probe::result(spec, self.end?, took_ms);
                Some(
                    r.failure
                        .map_or_else(|| "invalid response".into(), |f| f.to_string()),
                )
            }
            _ if latency_ms > 0 && took_ms > u64::from(latency_ms) => {
                Some(format!("took {took_ms}ms > {latency_ms}ms"))
            }
            _ => None,
        }
    }
}

/// Sends the probe of `up` to `server`, in plain HTTP or TLS as the locations passing to the
/// upstream speak (see `crate::conf::scheme`): a TLS probe never speaks plain HTTP.
pub async fn probe(up: &Upstream, server: &Peer) -> Sent {
    if let Some(service) = up.spec.grpc.as_deref() {
        return grpc(up, server, service).await;
    }
    let req = Request {
        method: "GET",
        target: &up.spec.uri,
        host: &up.host,
        headers: &[("User-Agent", "nginx circuit breaker probe")],
        body: &[],
    };
    let options = Options::new(Duration::from_millis(u64::from(up.spec.timeout_ms)))
        .max_body(0)
        .action(ACTION);
    #[cfg(ngx_ssl)]
    if let Some(tls) = up.tls.as_ref() {
        return sent(net::fetch(server, &req, &options.tls(tls)).await);
    }
    sent(net::fetch(server, &req, &options).await)
}

/// Asks the server's gRPC health service about `service`.
async fn grpc(up: &Upstream, server: &Peer, service: &str) -> Sent {
    let options = Options::new(Duration::from_millis(u64::from(up.spec.timeout_ms))).action(ACTION);
    #[cfg(ngx_ssl)]
    if let Some(tls) = up.tls.as_ref() {
        return sent_grpc(net::health_check(server, &up.host, service, &options.tls(tls)).await);
    }
    sent_grpc(net::health_check(server, &up.host, service, &options).await)
}

fn sent_grpc(r: Result<GrpcAnswer, Error>) -> Sent {
    let r = r.map(|a| {
        if a.status != 200 {
            return ProbeEnd::Response {
                status: a.status,
                retry_after_s: None,
            };
        }
        ProbeEnd::Grpc {
            health: health::judge(
                a.grpc_status.as_ref().map(|v| v.as_bytes()),
                &a.body,
                a.truncated,
            ),
            retry_after_s: a.pushback.as_ref().and_then(|v| pushback_s(v.as_bytes())),
        }
    });
    match r {
        Ok(end) => Sent {
            end: Some(end),
            error: None,
        },
        Err(e) => Sent {
            end: failed(&e),
            error: Some(e),
        },
    }
}

/// `grpc-retry-pushback-ms` in whole seconds, rounded up; a value that is not a number is
/// ignored, as gRPC clients ignore it.
fn pushback_s(v: &[u8]) -> Option<u32> {
    if v.is_empty() || v.len() > 10 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let ms: u64 = core::str::from_utf8(v).ok()?.parse().ok()?;
    Some(ms.div_ceil(1000).min(u64::from(u32::MAX)) as u32)
}

fn sent(r: Result<Response, Error>) -> Sent {
    let end = match &r {
        Ok(resp) => Some(ProbeEnd::Response {
            status: resp.status,
            retry_after_s: retry_after(&resp.headers),
        }),
        Err(e) => failed(e),
    };
    Sent {
        end,
        error: r.err(),
    }
}

/// What a probe that got no answer says about the origin.
fn failed(e: &Error) -> Option<ProbeEnd> {
    match e {
        Error::Exiting | Error::NoConnection | Error::InvalidRequest(_) => None,
        Error::Timeout => Some(ProbeEnd::Timeout),
        Error::Protocol(_) => Some(ProbeEnd::Invalid),
        Error::Tls | Error::TlsVerify(_) | Error::TlsName => Some(ProbeEnd::Tls),
        Error::Refused | Error::Connect(_) | Error::Reset | Error::Closed | Error::Io(_) => {
            Some(ProbeEnd::Error)
        }
    }
}

/// `Retry-After` in seconds: delta-seconds, or an HTTP date as nginx reads it.
fn retry_after(headers: &HeaderMap) -> Option<u32> {
    let v = headers.get(hyper::header::RETRY_AFTER)?.as_bytes();
    if let Some(n) = core::str::from_utf8(v)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    {
        return Some(n);
    }
    // SAFETY: nginx's parser reads exactly `len` bytes.
    let t = unsafe { ngx_parse_http_time(v.as_ptr().cast_mut(), v.len()) };
    (t > 0).then(|| (t - ngx_time()).clamp(0, i64::from(u32::MAX)) as u32)
}
