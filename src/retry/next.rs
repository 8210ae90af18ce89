//! Whether nginx will retry the attempt being freed: `ngx_http_upstream_next` frees the peer
//! first and decides after, on what the free cannot be told but can read — the tries left,
//! `proxy_next_upstream` (and `_timeout`), the method, an unbuffered body already sent, a
//! client gone. Known at the free, the answer settles the request's outcome at once (an
//! attempt that is retried is not what the client got) and lets the retry budget deny a
//! retry before it is made.

use circuit_breaker_core::breaker::{Attempt, Ending};
use nginx_sys::{
    ngx_current_msec, ngx_http_request_t, ngx_http_upstream_t, ngx_peer_connection_t, ngx_uint_t,
    NGX_HTTP_LOCK, NGX_HTTP_PATCH, NGX_HTTP_POST, NGX_HTTP_UPSTREAM_FT_ERROR,
    NGX_HTTP_UPSTREAM_FT_HTTP_403, NGX_HTTP_UPSTREAM_FT_HTTP_404, NGX_HTTP_UPSTREAM_FT_HTTP_429,
    NGX_HTTP_UPSTREAM_FT_HTTP_500, NGX_HTTP_UPSTREAM_FT_HTTP_502, NGX_HTTP_UPSTREAM_FT_HTTP_503,
    NGX_HTTP_UPSTREAM_FT_HTTP_504, NGX_HTTP_UPSTREAM_FT_INVALID_HEADER,
    NGX_HTTP_UPSTREAM_FT_NOLIVE, NGX_HTTP_UPSTREAM_FT_NON_IDEMPOTENT, NGX_HTTP_UPSTREAM_FT_TIMEOUT,
};

/// The `ngx_http_upstream_next` failure type nginx gave an attempt that ended so.
fn ft_type(a: &Attempt) -> u32 {
    match a.ending {
        Ending::Timeout => NGX_HTTP_UPSTREAM_FT_TIMEOUT,
        Ending::InvalidHeader | Ending::TooBigHeader => NGX_HTTP_UPSTREAM_FT_INVALID_HEADER,
        Ending::Response => match a.status {
            500 => NGX_HTTP_UPSTREAM_FT_HTTP_500,
            502 => NGX_HTTP_UPSTREAM_FT_HTTP_502,
            503 => NGX_HTTP_UPSTREAM_FT_HTTP_503,
            504 => NGX_HTTP_UPSTREAM_FT_HTTP_504,
            403 => NGX_HTTP_UPSTREAM_FT_HTTP_403,
            404 => NGX_HTTP_UPSTREAM_FT_HTTP_404,
            429 => NGX_HTTP_UPSTREAM_FT_HTTP_429,
            _ => NGX_HTTP_UPSTREAM_FT_ERROR,
        },
        Ending::Error
        | Ending::Tls
        | Ending::NoVerdict
        | Ending::ClientDeadline
        | Ending::BodyRefused => NGX_HTTP_UPSTREAM_FT_ERROR,
        Ending::NoLive => NGX_HTTP_UPSTREAM_FT_NOLIVE,
    }
}

/// Whether the attempt that ended as `a`, freed by `ngx_http_upstream_next` with `pc`'s tries
/// already counted down, is retried: the same test `ngx_http_upstream_next` makes next.
///
/// # Safety
/// `r` and `u` must be the live request and its upstream whose peer `pc` is, in `peer.free`.
pub unsafe fn follows(
    r: &ngx_http_request_t,
    u: &ngx_http_upstream_t,
    pc: &ngx_peer_connection_t,
    a: &Attempt,
) -> bool {
    // SAFETY: a live request's connection; the location's upstream conf.
    let (c, conf) = unsafe { (&*r.connection, &*u.conf) };
    if pc.tries == 0 || c.error() != 0 {
        return false;
    }
    let sent = u.request_sent() != 0;
    let mut mask = ft_type(a) as ngx_uint_t;
    if sent && r.method & (NGX_HTTP_POST | NGX_HTTP_LOCK | NGX_HTTP_PATCH) as ngx_uint_t != 0 {
        mask |= NGX_HTTP_UPSTREAM_FT_NON_IDEMPOTENT as ngx_uint_t;
    }
    let timeout = conf.next_upstream_timeout;
    // SAFETY: a plain integer nginx's event loop maintains.
    let now = unsafe { ngx_current_msec };
    conf.next_upstream & mask == mask
        && !(sent && r.request_body_no_buffering() != 0)
        && !(timeout != 0 && now.wrapping_sub(pc.start_time) >= timeout)
}
