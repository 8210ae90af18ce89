//! What one upstream attempt amounted to, read off nginx's own state when the peer is freed
//! (nginx calls `peer.free` before it closes the connection, so the event flags are there),
//! classified the way `ngx_http_upstream_next` and the body readers of
//! `ngx_http_upstream.c` classify it.
//!
//! What this cannot see: a body cut short on a connection whose end delimits the body (no
//! length, not chunked) looks complete; an attempt the client abandoned mid-body is judged
//! by its status; failures on the client's side are never the origin's.
//!
//! A gRPC answer's `grpc-status` is read too: from its trailers, which `grpc_pass` has parsed
//! into `u->headers_in.trailers` by the time it finalizes the request on the stream's end
//! (`ctx->done`, then `u->length = 0`) and frees the peer, or from the headers of a
//! trailers-only answer. A stream the client cancels before the trailers has none: it is
//! judged by its HTTP status, as any body the client abandons.

use circuit_breaker_core::breaker::held::says_more;
use circuit_breaker_core::breaker::{origin_ms, Attempt, Ending, Marks};
use circuit_breaker_core::grpc::{self, deadline};
use nginx_sys::{
    ngx_connection_t, ngx_current_msec, ngx_http_request_t, ngx_http_upstream_t, ngx_list_t,
    ngx_msec_t, ngx_parse_http_time, ngx_peer_connection_t, ngx_table_elt_t, ngx_time, ngx_uint_t,
    NGX_PEER_FAILED,
};

/// An attempt, and whether nginx will retry it for free: a kept-alive connection the origin
/// had closed fails with `error`, and `ngx_http_upstream_next` gives the try back ("TODO:
/// inform balancer instead") — it says nothing about the origin.
pub struct Outcome {
    pub attempt: Attempt,
    pub free_retry: bool,
    /// The client shaped how it ended ([`Ending::shaped_by_client`]): not the server's
    /// failure for the balancer's `max_fails` either. An attempt that failed while the
    /// client's body was still arriving is not: a refused or timed-out connect, a reset, are
    /// the server's whatever the body does, and a gRPC stream's body is open for its life.
    pub clients: bool,
}

/// Reads the outcome of the attempt of `r` being freed with `state`, as nginx left it (the
/// core's `classify` then judges it), timed as the origin's time
/// ([`circuit_breaker_core::breaker::timing`]): `body_done_at` is when the client's body
/// ended, if it was still arriving when nginx connected, and `body_open` when it has not
/// ended yet; `probe` when the attempt is a half-open probe.
///
/// # Safety
/// `r` and `u` must be the live request and its upstream, whose peer `pc` is, called from
/// `peer.free`.
///
/// Always inlined: the final free's fixed `state` (0) folds the failed attempt's branches
/// away, and the attempt stays in registers (`scripts/bench-instructions`, closed).
#[inline(always)]
pub unsafe fn read(
    r: &ngx_http_request_t,
    u: &ngx_http_upstream_t,
    pc: &ngx_peer_connection_t,
    state: ngx_uint_t,
    body_done_at: Option<ngx_msec_t>,
    body_open: bool,
    probe: bool,
) -> Outcome {
    // SAFETY: as for this function.
    let (elapsed_ms, since_sent_ms) = unsafe { origin_time(u, body_done_at) };
    // SAFETY: u.state is the current attempt's state record while the upstream runs.
    let status = unsafe { u.state.as_ref() }.map_or(0, |s| s.status) as u16;
    let failed = state & NGX_PEER_FAILED as ngx_uint_t != 0;
    // SAFETY: the connection, when present, is still open during free.
    let c = unsafe { pc.connection.as_ref() };
    let mut free_retry = false;
    let ending = if failed {
        // SAFETY: `u` and `c` are this attempt's live upstream and (still open) connection, in
        // peer.free (this fn's contract).
        let e = unsafe { failed_ending(r, u, c, status) };
        free_retry = e == Ending::Error && pc.cached() != 0 && status == 0;
        e
    } else if status == 0 {
        // Freed with no response and no failure: the client went away first.
        Ending::NoVerdict
    } else {
        // SAFETY: `u` and `c` are this attempt's live upstream and (still open) connection, in
        // peer.free (this fn's contract).
        unsafe { body_ending(r, u, c) }
    };
    let grpc_status = if status == 200 && ending == Ending::Response {
        // SAFETY: the upstream's parsed headers and trailers lists.
        unsafe { grpc_status(u) }
    } else {
        None
    };
    // An answer the client held up is judged by its header (`held`); a probe's, by nothing:
    // its client could otherwise turn a body that failed into a good probe.
    let judged_at_header = says_more(ending, grpc_status) && !body_open && {
        // SAFETY: as for this function.
        unsafe { held(r, u) }
    };
    let (ending, grpc_status) = if judged_at_header {
        if probe {
            (Ending::NoVerdict, None)
        } else {
            // SAFETY: as for this function.
            (Ending::Response, unsafe { header_grpc(u) })
        }
    } else {
        (ending, grpc_status)
    };
    let retry_after_s = if status == 503 && ending == Ending::Response {
        // SAFETY: the upstream's parsed headers list.
        unsafe { retry_after(&u.headers_in.headers) }
    } else {
        None
    };
    let attempt = Attempt {
        grpc_status,
        // An attempt that ended while the client's body was still arriving: the origin never
        // had the whole request, and whatever it did (an origin that gives up on a body that
        // trickles) is the client's pace.
        ending: if free_retry || body_open {
            Ending::NoVerdict
        } else {
            ending
        },
        status: if ending == Ending::Response {
            status
        } else {
            0
        },
        retry_after_s,
        response_ms: elapsed_ms,
    };
    let attempt = if attempt.grpc_status == Some(grpc::DEADLINE_EXCEEDED) {
        // SAFETY: the request's parsed headers list.
        let sent = unsafe { headers(&r.headers_in.headers, b"grpc-timeout") };
        attempt.with_client_deadline(deadline::client_deadline(sent), since_sent_ms)
    } else {
        attempt
    };
    Outcome {
        attempt,
        free_retry,
        clients: ending.shaped_by_client(),
    }
}

/// Whether `r`'s answer went to the client at the client's pace and the client held it up long
/// enough (`crate::held`) that the answer is judged by its header: an origin may have given up
/// on it because of the client, by a deadline of its own, and nginx saw that only once the
/// client took what it had. An answer nginx spools whole for a cache or a store is read at
/// the origin's pace whatever the client does.
///
/// # Safety
/// `r` and `u` must be the live request and its upstream.
#[inline(always)]
unsafe fn held(r: &ngx_http_request_t, u: &ngx_http_upstream_t) -> bool {
    r.header_sent() != 0
        // SAFETY: as for this function.
        && unsafe { crate::held::held_long(r) }
        && !(u.buffering() != 0 && (u.cacheable() != 0 || u.store() != 0))
        // SAFETY: as for this function.
        && unsafe { paced(u) }
}

/// The `grpc-status` of a trailers-only answer (in its header), for an answer its client held
/// up ([`held`]): what it is judged by.
///
/// # Safety
/// `u` must be a live upstream whose header was parsed.
#[cold]
#[inline(never)]
unsafe fn header_grpc(u: &ngx_http_upstream_t) -> Option<u8> {
    // SAFETY: the location's upstream conf, live for the configuration.
    if !unsafe { u.conf.as_ref() }.is_some_and(passes_trailers) {
        return None;
    }
    // An answer of a gRPC type only, as [`grpc_status_typed`] reads one (a held answer's
    // trailers are not taken).
    // SAFETY: the upstream's parsed Content-Type, null when it had none.
    let grpc_type = unsafe { u.headers_in.content_type.as_ref() }
        .is_some_and(|h| h.value.as_bytes().starts_with(b"application/grpc"));
    if !grpc_type {
        return None;
    }
    // SAFETY: the upstream's parsed headers list.
    unsafe { header(&u.headers_in.headers, b"grpc-status") }.and_then(grpc_code)
}

/// The origin's time of the attempt being freed, in milliseconds: the core's rule, from the
/// marks nginx keeps (`u->start_time` at the connect, `header_time` once the header is
/// parsed) and the body's end; and the whole attempt's, since the connect.
///
/// # Safety
/// `u` must be a live upstream in `peer.free`.
#[inline(always)]
unsafe fn origin_time(u: &ngx_http_upstream_t, body_done_at: Option<ngx_msec_t>) -> (u64, u64) {
    // SAFETY: a plain global only this worker's event loop writes, and it runs us.
    let now = unsafe { ngx_current_msec };
    let since = |t: ngx_msec_t| t.saturating_sub(u.start_time) as u64;
    // SAFETY: u.state is the current attempt's state record while the upstream runs.
    let header_ms = unsafe { u.state.as_ref() }
        .map(|s| s.header_time)
        .filter(|&h| h != ngx_msec_t::MAX)
        .map(|h| h as u64);
    let ended_ms = since(now);
    // The rule has nothing to take off an answer that came whole with its header and a body
    // that was whole before the connect: most answers of a proxy (`scripts/bench-instructions`,
    // closed).
    let origin = if body_done_at.is_none() && !header_ms.is_some_and(|h| h < ended_ms) {
        ended_ms
    } else {
        // SAFETY: u is live in peer.free (this fn's contract).
        unsafe { origin_marked(u, ended_ms, header_ms, body_done_at.map(since)) }
    };
    (origin, ended_ms)
}

/// [`origin_time`] by the core's rule, for an answer whose header came before its end or a
/// body that ended after the connect.
///
/// # Safety
/// `u` must be a live upstream in `peer.free`.
#[cold]
#[inline(never)]
unsafe fn origin_marked(
    u: &ngx_http_upstream_t,
    ended_ms: u64,
    header_ms: Option<u64>,
    body_done_ms: Option<u64>,
) -> u64 {
    // Whether the client paced the answer matters only when the header came before the end.
    // SAFETY: as for this function.
    let paced_by_client = header_ms.is_some_and(|h| h < ended_ms) && unsafe { paced(u) };
    origin_ms(Marks {
        ended_ms,
        header_ms,
        body_done_ms,
        paced_by_client,
    })
}

/// Whether the answer went to the client at the client's pace: a tunnel (its 101 is the
/// origin's answer, the rest its client's), an event stream (its length is its client's),
/// passed on as it arrived, or buffered with no spool, or with a spool that filled up.
///
/// # Safety
/// `u` must be a live upstream in `peer.free`.
#[inline(never)]
unsafe fn paced(u: &ngx_http_upstream_t) -> bool {
    // SAFETY: the location's upstream conf, live for the configuration.
    let conf = unsafe { u.conf.as_ref() };
    if u.upgrade() != 0
        || u.buffering() == 0
        || !conf.is_some_and(|c| c.max_temp_file_size != 0)
        // SAFETY: as for this function; its header was parsed.
        || unsafe { streams_by_design(u) }
    {
        return true;
    }
    // SAFETY: as for this function.
    unsafe { spool_full(u) }
}

/// Whether the answer's spool (the event pipe's temporary file) reached its size bound: the
/// pipe then stops reading the origin until the client takes what it has.
///
/// # Safety
/// `u` must be a live upstream in `peer.free`.
unsafe fn spool_full(u: &ngx_http_upstream_t) -> bool {
    // SAFETY: null, or the request's event pipe.
    let Some(p) = (unsafe { u.pipe.as_ref() }) else {
        return false;
    };
    // SAFETY: null, or the pipe's temporary file.
    let file = unsafe { p.temp_file.as_ref() };
    // Full as the pipe judges it: the next buffer would not fit (the pipe writes whole
    // buffers, so the offset may stop short of the bound).
    file.is_some_and(|f| f.offset.saturating_add(p.bufs.size as i64) > p.max_temp_file_size)
}

/// An attempt `ngx_http_upstream_next` gave up on.
///
/// # Safety
/// As for [`read`].
unsafe fn failed_ending(
    r: &ngx_http_request_t,
    u: &ngx_http_upstream_t,
    c: Option<&ngx_connection_t>,
    status: u16,
) -> Ending {
    // No connection: connect() failed at once (refused, unreachable).
    let Some(c) = c else { return Ending::Error };
    // SAFETY: a live connection's events.
    let (rd, wr) = unsafe { (&*c.read, &*c.write) };
    if rd.timedout() != 0 || wr.timedout() != 0 {
        return Ending::Timeout;
    }
    if let Some(tls) = tls_handshake_failure(u, c) {
        return tls;
    }
    let broken = wr.error() != 0 || rd.eof() != 0 || rd.error() != 0;
    if broken && body_unsent(r, u) {
        // The connection broke with the client's body not all sent: the origin stopped
        // reading it (a `413` and a close, which nginx's send or read meets as a reset).
        return Ending::BodyRefused;
    }
    if rd.eof() != 0 || rd.error() != 0 {
        // Reset, or closed before a whole header ("upstream prematurely closed connection"),
        // even after a status line.
        return Ending::Error;
    }
    if status >= 400 {
        // proxy_next_upstream http_5xx / http_403 / http_404 / http_429.
        return Ending::Response;
    }
    if !u.buffer.start.is_null() && u.buffer.last != u.buffer.start {
        // A full buffer and no whole header: "upstream sent too big header" (nginx's
        // buffer, or what a client made the origin echo); else bytes that made no valid
        // header.
        return if u.buffer.last == u.buffer.end {
            Ending::TooBigHeader
        } else {
            Ending::InvalidHeader
        };
    }
    Ending::Error
}

/// Whether `r` has a body and its attempt `u` began to send the request but did not send it
/// whole.
fn body_unsent(r: &ngx_http_request_t, u: &ngx_http_upstream_t) -> bool {
    let has_body = r.headers_in.content_length_n > 0 || r.headers_in.chunked() != 0;
    has_body && u.request_sent() != 0 && u.request_body_sent() == 0
}

/// A TLS connection whose request was never sent: the handshake or the certificate check
/// failed. A certificate refused after the handshake, or a TLS protocol failure (an alert,
/// an OpenSSL error: nginx sets `read->error`), is a TLS error; a reset or EOF during the
/// handshake (`read->eof` alone: "peer closed connection in SSL handshake") is the origin's
/// `error`, as nginx counts it.
#[cfg(ngx_ssl)]
fn tls_handshake_failure(u: &ngx_http_upstream_t, c: &ngx_connection_t) -> Option<Ending> {
    // SAFETY: c.ssl is null or the connection's live TLS state.
    let ssl = unsafe { c.ssl.as_ref() }?;
    if u.request_sent() != 0 {
        return None;
    }
    // SAFETY: a live connection's read event.
    let rd = unsafe { &*c.read };
    if ssl.handshaked() != 0 || rd.error() != 0 {
        Some(Ending::Tls)
    } else {
        Some(Ending::Error)
    }
}

#[cfg(not(ngx_ssl))]
fn tls_handshake_failure(_u: &ngx_http_upstream_t, _c: &ngx_connection_t) -> Option<Ending> {
    None
}

/// An attempt freed by `ngx_http_upstream_finalize_request` after its header: the body may
/// still have failed (nginx answers the client 502/504, or cuts the body short).
///
/// # Safety
/// As for [`read`]. Inline in it, as it is (`scripts/bench-instructions`, closed).
#[inline(always)]
unsafe fn body_ending(
    r: &ngx_http_request_t,
    u: &ngx_http_upstream_t,
    c: Option<&ngx_connection_t>,
) -> Ending {
    if u.upgrade() != 0 {
        // A tunnel (WebSocket): its answer was its 101. How it ends — idle past
        // proxy_read_timeout, closed by either side — is the client's and the application's,
        // and ten idle tunnels had opened a healthy origin's breaker.
        return Ending::Response;
    }
    // SAFETY: a live connection's read event.
    let rd = c.map(|c| unsafe { &*c.read });
    let timed_out = rd.is_some_and(|e| e.timedout() != 0);
    // SAFETY: u.pipe is null or the request's event pipe.
    if let (true, Some(p)) = (u.buffering() != 0, unsafe { u.pipe.as_ref() }) {
        if p.upstream_error() != 0 {
            // SAFETY: as for this function.
            return if unsafe { waited_on_client(r, u) } {
                Ending::NoVerdict
            } else if body_unsent(r, u) {
                // An early answer (a `413`), then the reset over the body left unread.
                Ending::BodyRefused
            // SAFETY: as for this function: its header was parsed.
            } else if (timed_out || c.is_none()) && unsafe { streams_by_design(u) } {
                // Quiet past the read timeout; read once the connection is gone (a key's),
                // a timeout is not told from a reset: a stream's end is taken as its client's.
                Ending::Response
            } else if timed_out {
                Ending::Timeout
            } else {
                Ending::Error
            };
        }
        if p.upstream_eof() != 0 && p.upstream_done() == 0 && p.length != -1 {
            return Ending::Error; // "upstream prematurely closed connection"
        }
        return Ending::Response;
    }
    let failed = timed_out || u.error() != 0 || rd.is_some_and(|e| e.error() != 0);
    // SAFETY: as for this function.
    if failed && unsafe { waited_on_client(r, u) } {
        return Ending::NoVerdict;
    }
    if failed && !timed_out && body_unsent(r, u) {
        return Ending::BodyRefused;
    }
    // SAFETY: as for this function: its header was parsed.
    if timed_out && unsafe { streams_by_design(u) } {
        return Ending::Response;
    }
    if timed_out {
        return Ending::Timeout;
    }
    if failed {
        return Ending::Error;
    }
    if rd.is_some_and(|e| e.eof() != 0) && u.length > 0 {
        return Ending::Error; // closed before the announced length or the last chunk
    }
    Ending::Response
}

/// How an answer nginx passed on as it arrived (`proxy_buffering off`) ended, when it ended
/// short of the `Content-Length` its origin announced while its client was still there and
/// taking it: the origin closed or reset the connection, failed, or kept silent past
/// `proxy_read_timeout` — an error, all of them, as the upstream's connection, whose flags
/// tell them apart, is gone by then. `None`: not cut short (or not so that it tells).
///
/// Only an announced length: a stream without one (chunked, gRPC, an event stream) may end as
/// its client chose — at its own gRPC deadline, or idle past the read timeout on a quiet
/// subscription — and says nothing of its origin by where it stops. A client that went away,
/// reset its stream or stopped taking the answer past `send_timeout` marks its own connection
/// (`error`, `timedout`); and one whose body nginx stopped sending once the answer's header
/// had gone to it (an origin that answers before it reads an upload, then waits for the rest)
/// shaped the end itself: no verdict.
///
/// # Safety
/// `r` and `u` must be the live request and its upstream, the upstream finalized.
unsafe fn cut_short(r: &ngx_http_request_t, u: &ngx_http_upstream_t) -> Option<Ending> {
    // SAFETY: a live request's connection (an HTTP/2 stream's own).
    let client = unsafe { r.connection.as_ref() };
    let cut = u.buffering() == 0
        && u.header_sent() != 0
        && u.upgrade() == 0
        && u.headers_in.content_length_n > 0
        && u.length > 0
        && client.is_some_and(|c| c.error() == 0 && c.timedout() == 0);
    match cut {
        false => None,
        true if body_unsent(r, u) => Some(Ending::BodyRefused),
        true => Some(Ending::Error),
    }
}

/// Whether the answer is a stream by design, whose quiet spells are its application's
/// ([`circuit_breaker_core::breaker::streams`]), by the Content-Type its origin sent: one that
/// falls silent past the read timeout after its header is judged by its header, and timed to
/// it. Counting its end let twelve clients that subscribe to a quiet topic open a breaker.
///
/// # Safety
/// `u` must be a live upstream whose header was parsed.
unsafe fn streams_by_design(u: &ngx_http_upstream_t) -> bool {
    // SAFETY: null, or the origin's Content-Type header, in the request's pool (this fn's
    // contract).
    let t = unsafe { u.headers_in.content_type.as_ref() };
    t.is_some_and(|h| circuit_breaker_core::breaker::streams::streams_by_design(h.value.as_bytes()))
}

/// Whether an answer that failed after its header was waiting on the client: nginx reads
/// an answer it passes on as it arrives (`proxy_buffering off`, gRPC) only as fast as the
/// client takes it, and a buffered one too once its spool is full (`proxy_max_temp_file_size`),
/// so a client that reads nothing (an HTTP/2 window of 0, a socket it never reads) makes
/// the origin's connection time out or the origin give up. The client's doing, not the
/// origin's: such an attempt has no verdict.
///
/// # Safety
/// `r` and `u` must be the live request and its upstream, in `peer.free`.
#[cold]
unsafe fn waited_on_client(r: &ngx_http_request_t, u: &ngx_http_upstream_t) -> bool {
    // SAFETY: a live request's connection (an HTTP/2 stream's own).
    let stuck = unsafe { r.connection.as_ref() }.is_some_and(|c| c.buffered() != 0);
    if u.buffering() == 0 {
        return stuck || !u.busy_bufs.is_null();
    }
    // SAFETY: null, or the request's event pipe.
    let unspooled = unsafe { u.pipe.as_ref() }.is_some_and(|p| p.max_temp_file_size == 0);
    // SAFETY: as for this function.
    stuck && (unspooled || unsafe { spool_full(u) })
}

/// The `grpc-status` of a gRPC answer: its trailers', else (a trailers-only answer) its
/// headers'. Only where the location passes trailers on (`grpc_pass` always does, and
/// `proxy_pass` with `proxy_pass_trailers on`), and there only for an answer of type
/// `application/grpc…` or with trailers: a `proxy_pass` answer costs one test, not a test
/// of its type (`scripts/bench-instructions`, closed).
///
/// # Safety
/// `u` must be a live upstream whose header was parsed.
#[inline(always)]
unsafe fn grpc_status(u: &ngx_http_upstream_t) -> Option<u8> {
    // SAFETY: the location's upstream conf, live for the configuration.
    if !unsafe { u.conf.as_ref() }.is_some_and(passes_trailers) {
        return None;
    }
    // SAFETY: as for this function.
    unsafe { grpc_status_typed(u) }
}

/// Whether the location passes an answer's trailers on: a flag since nginx 1.27.2
/// (`proxy_pass_trailers`), one bit of the upstream's conf before (set by `grpc_pass`).
#[cfg(ngx_pass_trailers_flag)]
#[inline(always)]
pub(super) fn passes_trailers(c: &nginx_sys::ngx_http_upstream_conf_t) -> bool {
    c.pass_trailers != 0
}

#[cfg(not(ngx_pass_trailers_flag))]
#[inline(always)]
pub(super) fn passes_trailers(c: &nginx_sys::ngx_http_upstream_conf_t) -> bool {
    c.pass_trailers() != 0
}

/// [`grpc_status`] where trailers are passed on.
///
/// # Safety
/// As for [`grpc_status`].
#[inline(never)]
unsafe fn grpc_status_typed(u: &ngx_http_upstream_t) -> Option<u8> {
    // SAFETY: the upstream's parsed Content-Type, null when it had none.
    let grpc_type = unsafe { u.headers_in.content_type.as_ref() }
        .is_some_and(|h| h.value.as_bytes().starts_with(b"application/grpc"));
    let trailers = u.headers_in.trailers.part.nelts > 0;
    if !grpc_type && !trailers {
        return None;
    }
    // SAFETY: as for this function.
    unsafe { grpc_status_read(u) }
}

/// [`grpc_status`] of an answer that may have one.
///
/// # Safety
/// As for [`grpc_status`].
unsafe fn grpc_status_read(u: &ngx_http_upstream_t) -> Option<u8> {
    // SAFETY: the upstream's live lists (this fn's contract).
    let value = unsafe { header(&u.headers_in.trailers, b"grpc-status") }
        // SAFETY: as above.
        .or_else(|| unsafe { header(&u.headers_in.headers, b"grpc-status") })?;
    grpc_code(value)
}

/// A `grpc-status` value: a decimal of at most 3 digits; anything else (a hostile origin's) is
/// no status.
fn grpc_code(value: &[u8]) -> Option<u8> {
    if value.is_empty() || value.len() > 3 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value
        .iter()
        .try_fold(0u16, |n, d| Some(n * 10 + u16::from(d - b'0')))
        .and_then(|n| u8::try_from(n).ok())
}

/// The values of every header `name` (lower case) of a list.
///
/// # Safety
/// `list` must be a live headers list.
unsafe fn headers<'a>(list: &'a ngx_list_t, name: &[u8]) -> Vec<&'a [u8]> {
    let mut found = Vec::new();
    let mut part = &list.part;
    loop {
        if !part.elts.is_null() {
            let first = part.elts.cast::<ngx_table_elt_t>();
            // SAFETY: a list part's elts hold nelts table elements.
            let elts = unsafe { core::slice::from_raw_parts(first, part.nelts) };
            found.extend(
                elts.iter()
                    .filter(|h| h.hash != 0 && h.key.as_bytes().eq_ignore_ascii_case(name))
                    .map(|h| h.value.as_bytes()),
            );
        }
        // SAFETY: next is null or the next live part.
        match unsafe { part.next.as_ref() } {
            Some(p) => part = p,
            None => return found,
        }
    }
}

/// The value of the first header `name` (lower case) of a list.
///
/// # Safety
/// `list` must be a live headers list.
pub(super) unsafe fn header<'a>(list: &'a ngx_list_t, name: &[u8]) -> Option<&'a [u8]> {
    let mut part = &list.part;
    loop {
        if !part.elts.is_null() {
            let first = part.elts.cast::<ngx_table_elt_t>();
            // SAFETY: a list part's elts hold nelts table elements.
            let elts = unsafe { core::slice::from_raw_parts(first, part.nelts) };
            for h in elts {
                if h.hash != 0 && h.key.as_bytes().eq_ignore_ascii_case(name) {
                    return Some(h.value.as_bytes());
                }
            }
        }
        // SAFETY: next is null or the next live part.
        match unsafe { part.next.as_ref() } {
            Some(p) => part = p,
            None => return None,
        }
    }
}

/// `Retry-After` in seconds: delta-seconds or an HTTP date.
///
/// # Safety
/// `list` must be a live headers list.
pub(super) unsafe fn retry_after(list: &ngx_list_t) -> Option<u32> {
    let mut part = &list.part;
    loop {
        let first = part.elts.cast::<ngx_table_elt_t>();
        // SAFETY: a list part's elts hold nelts table elements.
        let elts = unsafe { core::slice::from_raw_parts(first, part.nelts) };
        for h in elts {
            if h.hash != 0 && h.key.as_bytes().eq_ignore_ascii_case(b"retry-after") {
                let v = h.value.as_bytes();
                if let Some(n) = core::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok())
                {
                    return Some(n);
                }
                // SAFETY: nginx's parser reads exactly len bytes.
                let t = unsafe { ngx_parse_http_time(h.value.data, h.value.len) };
                if t > 0 {
                    return Some((t - ngx_time()).clamp(0, i64::from(u32::MAX)) as u32);
                }
                return None;
            }
        }
        // SAFETY: next is null or the next live part.
        match unsafe { part.next.as_ref() } {
            Some(p) => part = p,
            None => return None,
        }
    }
}

/// The outcome of a request's last upstream attempt, read once the request is over (its log
/// phase), for a breaker judged from outside the balancer (`crate::keyed`: an upstream
/// resolved at run time has no `peer.free` of ours). `None` when no upstream answered or
/// failed for it: nginx answered itself, the client went first (`499`), or nothing was sent.
///
/// The connection is closed by then, so the flags [`read`] reads on it are gone: an attempt
/// without a response header is a timeout when nginx said `504`, a too-big or invalid header
/// when bytes that made none filled or sat in nginx's buffer, else an error (a TLS failure
/// included). An answer passed on as it arrived that nginx ended short of its announced
/// length is an error ([`cut_short`]). The origin's time is to its response header (what a
/// client reading slowly cannot stretch), or to the failure.
///
/// # Safety
/// `r` must be a live main request in its log phase.
pub unsafe fn read_ended(
    r: &ngx_http_request_t,
    body_done_at: Option<ngx_msec_t>,
) -> Option<Attempt> {
    // SAFETY: null, or the request's upstream, kept in its pool until the request is freed.
    let u = unsafe { r.upstream.as_ref() }?;
    // SAFETY: null, or the last attempt's state record, in the request pool.
    let st = unsafe { u.state.as_ref() }?;
    let status = st.status as u16;
    // The client went first, or its body was still arriving: whatever the origin did then
    // (gave up on a body that trickles) is the client's pace.
    if status == 0 || r.headers_out.status == 499 || r.reading_body() != 0 {
        return None;
    }
    let header_ms = (st.header_time != ngx_msec_t::MAX).then_some(st.header_time as u64);
    let ending = match header_ms {
        None if status == 504 => Ending::Timeout,
        // No connection is left to tell a failed send from a read: a request whose body was
        // not all sent is judged as one the origin stopped reading, as [`read`] judges it.
        None if body_unsent(r, u) => Ending::BodyRefused,
        None if !u.buffer.start.is_null() && u.buffer.last != u.buffer.start => {
            if u.buffer.last == u.buffer.end {
                Ending::TooBigHeader
            } else {
                Ending::InvalidHeader
            }
        }
        None => Ending::Error,
        // SAFETY: `r` and `u` are the live request and its upstream (this fn's contract); no
        // connection is passed, as none is left.
        Some(_) => match unsafe { body_ending(r, u, None) } {
            // SAFETY: as above.
            Ending::Response => unsafe { cut_short(r, u) }.unwrap_or(Ending::Response),
            ending => ending,
        },
    };
    let ended_ms = if st.response_time == ngx_msec_t::MAX {
        // SAFETY: a plain global only this worker's event loop writes.
        unsafe { ngx_current_msec }.saturating_sub(u.start_time) as u64
    } else {
        st.response_time as u64
    };
    // The origin's time: to its header (a slow reader cannot stretch it), from when the
    // client's body ended if that was after the connect (a body passed on as it arrives).
    let response_ms = origin_ms(Marks {
        ended_ms,
        header_ms,
        body_done_ms: body_done_at
            .filter(|&t| t > u.start_time)
            .map(|t| (t - u.start_time) as u64),
        paced_by_client: header_ms.is_some(),
    });
    let response = ending == Ending::Response;
    let attempt = Attempt {
        ending,
        status: if response { status } else { 0 },
        retry_after_s: if response && status == 503 {
            // SAFETY: the upstream's parsed headers list.
            unsafe { retry_after(&u.headers_in.headers) }
        } else {
            None
        },
        grpc_status: if response && status == 200 {
            // SAFETY: the upstream's parsed headers and trailers.
            unsafe { grpc_status(u) }
        } else {
            None
        },
        response_ms,
    };
    let attempt = if attempt.grpc_status == Some(grpc::DEADLINE_EXCEEDED) {
        // SAFETY: the request's parsed headers list.
        let sent = unsafe { headers(&r.headers_in.headers, b"grpc-timeout") };
        // The client's deadline runs to the call's end (a stream's status comes last), as
        // [`read`] times it: not to the header.
        attempt.with_client_deadline(deadline::client_deadline(sent), ended_ms)
    } else {
        attempt
    };
    // SAFETY: `r` and `u` are the live request and its upstream (this fn's contract).
    if attempt.may_be_held() && unsafe { held(r, u) } {
        // SAFETY: as above.
        return Some(attempt.judged_at_header(status, unsafe { header_grpc(u) }));
    }
    Some(attempt)
}
