//! One gRPC health check (`grpc.health.v1.Health/Check`) per connection, over HTTP/2 with h2:
//! h2's connection future and the call's are polled together by the probe's own task, as
//! [`super::http`] does with hyper's, under an overall deadline, with a bounded answer.

use bytes::Bytes;
use circuit_breaker_core::grpc::health::{self, MAX_ANSWER};
use http::{HeaderMap, HeaderValue, Method, Request, Uri};

use super::http::drive;
use super::within;
use super::{exiting, Error, Options, Peer};
use circuit_breaker_shell::net::stream::{Failure, Stream};

/// Cap on the header list a server may send (HPACK-decoded), in bytes; a health answer's is
/// a few dozen.
const MAX_HEADERS: u32 = 16 * 1024;

/// What a health check's answer carried.
#[derive(Debug)]
pub struct GrpcAnswer {
    /// The HTTP status (a gRPC server always says 200).
    pub status: u16,
    /// `grpc-status`, from the trailers or, in a trailers-only answer, the headers.
    pub grpc_status: Option<HeaderValue>,
    /// `grpc-retry-pushback-ms`, from the same place.
    pub pushback: Option<HeaderValue>,
    /// The first [`MAX_ANSWER`] bytes of the body.
    pub body: Vec<u8>,
    /// The body was longer.
    pub truncated: bool,
}

/// Asks `peer`'s health service about `service` (empty: the server as a whole), with
/// `authority` as the call's `:authority`. Only `opts`' timeout, action and TLS apply: the
/// answer is capped at [`MAX_ANSWER`].
pub async fn health_check(
    peer: &Peer,
    authority: &str,
    service: &str,
    opts: &Options<'_>,
) -> Result<GrpcAnswer, Error> {
    if exiting() {
        return Err(Error::Exiting);
    }
    #[cfg(ngx_ssl)]
    let scheme = if opts.tls.is_some() { "https" } else { "http" };
    #[cfg(not(ngx_ssl))]
    let scheme = "http";
    let uri = Uri::try_from(format!("{scheme}://{authority}{}", health::PATH))
        .map_err(|_| Error::InvalidRequest("Host"))?;
    let mut request = Request::new(());
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri;
    let headers = request.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    headers.insert("te", HeaderValue::from_static("trailers"));
    headers.insert(
        "user-agent",
        HeaderValue::from_static("nginx circuit breaker probe"),
    );
    let body = Bytes::from(health::request(service));
    within(opts.timeout, call(peer, request, body, opts)).await
}

async fn call(
    peer: &Peer,
    request: Request<()>,
    body: Bytes,
    opts: &Options<'_>,
) -> Result<GrpcAnswer, Error> {
    let stream = Stream::connect(peer, opts.action).await?;
    #[cfg(ngx_ssl)]
    if let Some(tls) = opts.tls {
        super::tls::handshake(&stream, tls, super::tls::Alpn::H2).await?;
    }
    let shared = stream.shared();
    let fail = |e: h2::Error| classify(&e, shared.failure());
    let (client, conn) = h2::client::Builder::new()
        .enable_push(false)
        .max_header_list_size(MAX_HEADERS)
        .handshake::<_, Bytes>(stream)
        .await
        .map_err(fail)?;
    // `client` stays alive until the call ends: h2 winds the connection down once it is gone.
    let work = async move {
        let mut client = client.ready().await?;
        let (response, mut send) = client.send_request(request, false)?;
        send.send_data(body, true)?;
        let response = response.await?;
        let (parts, mut body) = response.into_parts();
        let mut answer = GrpcAnswer {
            status: parts.status.as_u16(),
            grpc_status: None,
            pushback: None,
            body: Vec::new(),
            truncated: false,
        };
        if body.is_end_stream() {
            // Trailers-only: the status is in the headers.
            take_status(&mut answer, &parts.headers);
            return Ok(answer);
        }
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let _ = body.flow_control().release_capacity(chunk.len());
            let room = MAX_ANSWER - answer.body.len();
            if chunk.len() > room {
                answer.body.extend_from_slice(&chunk[..room]);
                answer.truncated = true;
                return Ok(answer);
            }
            answer.body.extend_from_slice(&chunk);
        }
        if let Some(trailers) = body.trailers().await? {
            take_status(&mut answer, &trailers);
        }
        Ok(answer)
    };
    drive(conn, work, fail, &shared).await
}

fn take_status(answer: &mut GrpcAnswer, headers: &HeaderMap) {
    answer.grpc_status = headers.get("grpc-status").cloned();
    answer.pushback = headers.get("grpc-retry-pushback-ms").cloned();
}

/// The error to report: what the socket saw if anything, else h2's reading of it.
fn classify(e: &h2::Error, failure: Option<Failure>) -> Error {
    if let Some(f) = failure {
        return f.into();
    }
    if let Some(io) = e.get_io() {
        return match io.raw_os_error() {
            Some(errno) => Error::Io(errno),
            None => Error::Closed,
        };
    }
    Error::Protocol(e.to_string())
}
