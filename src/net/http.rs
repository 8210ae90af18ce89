//! One HTTP/1.1 request per connection with hyper's client, under an overall deadline, with a
//! bounded response body.

use core::convert::Infallible;
use core::future::{poll_fn, Future};
use core::pin::{pin, Pin};
use core::task::{Context, Poll};
use core::time::Duration;

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper::header::{HeaderName, HeaderValue, CONNECTION, HOST};
use hyper::{HeaderMap, Method, Uri};

use super::{exiting, within, Error, Peer};
use circuit_breaker_shell::net::stream::{Failure, Shared, Stream};

/// The default cap on a response body kept in memory.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

/// Cap on hyper's read buffer, hence on the response head (status line and headers).
const MAX_BUF: usize = 64 * 1024;

/// One request. `Connection: close` is always sent: every request has its own connection.
pub struct Request<'a> {
    /// `GET`, `HEAD`, `POST`, ...
    pub method: &'a str,
    /// Path and query, in origin form (`/health?deep=1`).
    pub target: &'a str,
    /// The `Host` header.
    pub host: &'a str,
    /// Extra headers, such as a shared-secret header.
    pub headers: &'a [(&'a str, &'a str)],
    /// A small request body, sent with `Content-Length` (none when empty).
    pub body: &'a [u8],
}

/// How to send a request.
#[derive(Clone, Copy)]
pub struct Options<'a> {
    pub(super) timeout: Duration,
    pub(super) max_body: usize,
    pub(super) action: &'static str,
    #[cfg(ngx_ssl)]
    pub(super) tls: Option<&'a super::Tls>,
    #[cfg(not(ngx_ssl))]
    _tls: core::marker::PhantomData<&'a ()>,
}

impl<'a> Options<'a> {
    /// Everything — connecting, the TLS handshake, sending, the response head and body — must
    /// finish within `timeout`. The body is capped at [`DEFAULT_MAX_BODY`].
    pub fn new(timeout: Duration) -> Options<'a> {
        Options {
            timeout,
            max_body: DEFAULT_MAX_BODY,
            action: "sending request",
            #[cfg(ngx_ssl)]
            tls: None,
            #[cfg(not(ngx_ssl))]
            _tls: core::marker::PhantomData,
        }
    }

    /// Keeps at most `max` bytes of the body; reading stops there and the response is marked
    /// truncated. With 0 the body is not read: the request completes with the response head.
    pub fn max_body(mut self, max: usize) -> Options<'a> {
        self.max_body = max;
        self
    }

    /// What nginx's error log lines about this connection say it was doing ("while <action>").
    pub fn action(mut self, action: &'static str) -> Options<'a> {
        self.action = action;
        self
    }

    /// Speaks TLS to the server.
    #[cfg(ngx_ssl)]
    pub fn tls(mut self, tls: &'a super::Tls) -> Options<'a> {
        self.tls = Some(tls);
        self
    }
}

/// A response: its status, headers and (bounded) body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// The body was longer than the cap; `body` holds its first bytes.
    pub truncated: bool,
}

/// Sends `req` to `peer` and returns the response, or why there is none. Returns
/// [`Error::Exiting`] at once, without connecting, if the worker is exiting.
///
/// Dropping the future cancels the request: the connection closes and the deadline's timer is
/// deleted.
pub async fn fetch(peer: &Peer, req: &Request<'_>, opts: &Options<'_>) -> Result<Response, Error> {
    if exiting() {
        return Err(Error::Exiting);
    }
    let request = build(req)?;
    within(opts.timeout, exchange(peer, request, opts)).await
}

fn build(req: &Request<'_>) -> Result<hyper::Request<OnceBody>, Error> {
    let method =
        Method::from_bytes(req.method.as_bytes()).map_err(|_| Error::InvalidRequest("method"))?;
    if !req.target.starts_with('/') {
        return Err(Error::InvalidRequest("target"));
    }
    let uri = Uri::try_from(req.target).map_err(|_| Error::InvalidRequest("target"))?;
    let host = HeaderValue::from_str(req.host).map_err(|_| Error::InvalidRequest("Host"))?;
    let body = if req.body.is_empty() {
        OnceBody(None)
    } else {
        OnceBody(Some(Bytes::copy_from_slice(req.body)))
    };
    let mut request = hyper::Request::new(body);
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    let headers = request.headers_mut();
    headers.insert(HOST, host);
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    for (name, value) in req.headers {
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| Error::InvalidRequest("header"))?;
        let value = HeaderValue::from_str(value).map_err(|_| Error::InvalidRequest("header"))?;
        headers.append(name, value);
    }
    Ok(request)
}

/// Connects, sends, and reads the response, with hyper's connection future and the request's
/// future polled together by this one task (no second task to outlive the request).
async fn exchange(
    peer: &Peer,
    request: hyper::Request<OnceBody>,
    opts: &Options<'_>,
) -> Result<Response, Error> {
    let stream = Stream::connect(peer, opts.action).await?;
    #[cfg(ngx_ssl)]
    if let Some(tls) = opts.tls {
        super::tls::handshake(&stream, tls, super::tls::Alpn::Default).await?;
    }
    let shared = stream.shared();
    let (mut sender, conn) = http1::Builder::new()
        .max_buf_size(MAX_BUF)
        .handshake::<_, OnceBody>(stream)
        .await
        .map_err(|e| classify(&e, shared.failure()))?;
    // Queued now, so that the connection's first poll already writes it. `sender` stays alive
    // until the exchange ends: hyper winds the connection down once it is dropped.
    let response = sender.send_request(request);
    let max_body = opts.max_body;
    let work = async move {
        let response = response.await?;
        let (parts, body) = response.into_parts();
        let (body, truncated) = read_body(body, max_body).await?;
        Ok(Response {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
            truncated,
        })
    };
    drive(conn, work, |e| classify(&e, shared.failure()), &shared).await
}

/// Polls a client connection's future and its exchange's together, in this one task (no
/// second task to outlive the request): the connection first, as it writes the request and
/// reads the answer that the exchange then finds ready. A connection that fails fails the
/// exchange unless it had finished; one that ends with the exchange still waiting left it
/// nothing to wake it: the connection closed.
pub(super) async fn drive<T, E>(
    conn: impl Future<Output = Result<(), E>>,
    work: impl Future<Output = Result<T, E>>,
    fail: impl Fn(E) -> Error,
    shared: &Shared,
) -> Result<T, Error> {
    let (mut conn, mut work) = (pin!(conn), pin!(work));
    let mut conn_done = false;
    poll_fn(|cx| {
        if !conn_done {
            match conn.as_mut().poll(cx) {
                Poll::Ready(Ok(())) => conn_done = true,
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(match work.as_mut().poll(cx) {
                        Poll::Ready(Ok(r)) => Ok(r),
                        _ => Err(fail(e)),
                    });
                }
                Poll::Pending => {}
            }
        }
        match work.as_mut().poll(cx) {
            Poll::Ready(r) => Poll::Ready(r.map_err(&fail)),
            Poll::Pending if conn_done => {
                Poll::Ready(Err(shared.failure().map_or(Error::Closed, Error::from)))
            }
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Reads up to `max` bytes of the body.
async fn read_body(mut body: Incoming, max: usize) -> Result<(Vec<u8>, bool), hyper::Error> {
    let mut data = Vec::new();
    if max == 0 {
        return Ok((data, !body.is_end_stream()));
    }
    while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let Ok(chunk) = frame?.into_data() else {
            // Trailers.
            continue;
        };
        let room = max - data.len();
        if chunk.len() > room {
            data.extend_from_slice(&chunk[..room]);
            return Ok((data, true));
        }
        data.extend_from_slice(&chunk);
    }
    Ok((data, false))
}

/// The error to report: what the socket saw if anything, else hyper's reading of it.
fn classify(e: &hyper::Error, failure: Option<Failure>) -> Error {
    if let Some(f) = failure {
        return f.into();
    }
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        return Error::Closed;
    }
    if let Some(io) = std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>())
    {
        if let Some(errno) = io.raw_os_error() {
            return Error::Io(errno);
        }
    }
    Error::Protocol(e.to_string())
}

/// A request body sent in one piece.
struct OnceBody(Option<Bytes>);

impl Body for OnceBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.take().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.as_ref().map_or(0, |b| b.len() as u64))
    }
}
