//! What a client sees: the short-circuit 503 (from the PRECONTENT phase or from `peer.init`),
//! or a gRPC client's trailers-only answer instead, whether a stale cache entry may answer
//! instead, `X-Circuit-State`, and the `$circuit_breaker_state` / `$circuit_breaker_route` /
//! `$circuit_breaker_upstream` variables.

use core::ptr::null_mut;

use circuit_breaker_core::grpc::{self, TurnedAway};
use circuit_breaker_core::snapshot::State;
use nginx_sys::{
    ngx_http_block_reading, ngx_http_discard_request_body, ngx_http_finalize_request,
    ngx_http_request_empty_handler, ngx_http_request_t, ngx_http_send_header, ngx_http_upstream_t,
    ngx_http_variable_value_t, ngx_int_t, ngx_list_push, ngx_list_t, ngx_pnalloc, ngx_str_t,
    ngx_table_elt_t, ngx_uint_t, NGX_DONE, NGX_ERROR, NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_HTTP_OK,
    NGX_HTTP_SERVICE_UNAVAILABLE, NGX_HTTP_VERSION_20, NGX_OK,
};

use crate::request::{self, Answer, Label};
use circuit_breaker_shell::ffi::guard;

/// Appends a header whose name is static and whose value lives in the request pool.
///
/// Hand-written rather than `ngx::http::Request::add_header_out`, which copies both strings
/// into the pool and hashes a lower-cased copy of the name: on the open path that is ~10 %
/// of a short-circuit's work (see `scripts/bench-instructions`). nginx's own
/// `add_header` builds output headers the same way.
pub(crate) fn push_header(list: &mut ngx_list_t, key: &'static str, value: ngx_str_t) -> bool {
    // SAFETY: a request's headers list holds ngx_table_elt_t elements.
    let h = unsafe { ngx_list_push(list) }.cast::<ngx_table_elt_t>();
    // SAFETY: null or the element just pushed, which we fill whole.
    let Some(h) = (unsafe { h.as_mut() }) else {
        return false;
    };
    fill_header(h, key, value);
    true
}

/// Appends two headers as [`push_header`] does, in one step when the list's last part has
/// room for both (as it has unless the response already carries many headers).
///
/// Hand-written rather than two `ngx_list_push` calls, for the short-circuit's two headers
/// (`scripts/bench-instructions`, open_503).
fn push_headers2(
    list: &mut ngx_list_t,
    first: (&'static str, ngx_str_t),
    second: (&'static str, ngx_str_t),
) -> bool {
    headers2_in_place(list, first, second)
        || (push_header(list, first.0, first.1) && push_header(list, second.0, second.1))
}

/// [`push_headers2`] when the list's last part has room for both; false, with nothing
/// written, when it has not.
#[inline(always)]
fn headers2_in_place(
    list: &mut ngx_list_t,
    first: (&'static str, ngx_str_t),
    second: (&'static str, ngx_str_t),
) -> bool {
    // SAFETY: `last` points at the list's live last part (ngx_list_init set it, pushes
    // move it).
    let last = unsafe { &mut *list.last };
    if list.size != core::mem::size_of::<ngx_table_elt_t>() || last.nelts + 2 > list.nalloc {
        return false;
    }
    // As ngx_list_push does: the part's `elts` holds `nalloc` elements of `size` bytes
    // (checked to be ngx_table_elt_t's above), of which the first `nelts` are in use.

    // SAFETY: the two elements after the first `nelts` are free (checked above) and become
    // ours once `nelts` counts them.
    let h = unsafe { last.elts.cast::<ngx_table_elt_t>().add(last.nelts) };
    last.nelts += 2;
    // SAFETY: the two elements just claimed, which we fill whole.
    let (a, b) = unsafe { (&mut *h, &mut *h.add(1)) };
    fill_header(a, first.0, first.1);
    fill_header(b, second.0, second.1);
    true
}

#[inline]
fn fill_header(h: &mut ngx_table_elt_t, key: &'static str, value: ngx_str_t) {
    h.hash = 1;
    h.key = ngx_str_t {
        len: key.len(),
        data: key.as_ptr().cast_mut(),
    };
    h.value = value;
    h.lowcase_key = null_mut();
    #[cfg(ngx_table_elt_next)]
    {
        h.next = null_mut();
    }
}

pub(crate) fn static_value(s: &'static str) -> ngx_str_t {
    ngx_str_t {
        len: s.len(),
        data: s.as_ptr().cast_mut(),
    }
}

/// `Retry-After`'s whole seconds for a wait of `retry_after_ms`: rounded up as `div_ceil`
/// does (but for the last 999 values of a u64), at least 1.
#[inline(always)]
fn retry_after_secs(retry_after_ms: u64) -> u64 {
    (retry_after_ms.saturating_add(999) / 1000).max(1)
}

/// The short-circuit's `503` with `Retry-After` and `X-Circuit-State` in the common case, as
/// [`reject`]: the seconds' text static and both headers written in place, no call. `None`,
/// with nothing written, when either is not so ([`reject`] then does it all).
#[inline(always)]
pub fn reject_in_place(
    r: &mut ngx_http_request_t,
    label: Label,
    retry_after_ms: u64,
) -> Option<ngx_int_t> {
    // From 1 ms to 9 999 s, the whole seconds need neither the saturation nor the floor of
    // `retry_after_secs` (with the digits' slice below: `scripts/bench-instructions`,
    // open_503).
    if retry_after_ms.wrapping_sub(1) >= 9_999_000 {
        return None;
    }
    // Not `div_ceil`: it divides and then tests the remainder, where this cannot overflow.
    #[allow(clippy::manual_div_ceil)]
    let value = static_seconds((retry_after_ms + 999) / 1000)?;
    headers2_in_place(
        &mut r.headers_out.headers,
        ("Retry-After", value),
        ("X-Circuit-State", static_value(label.name())),
    )
    .then_some(NGX_HTTP_SERVICE_UNAVAILABLE as ngx_int_t)
}

/// Adds `Retry-After` (whole seconds, at least 1) and `X-Circuit-State`.
#[inline(always)]
fn add_reject_headers(r: &mut ngx_http_request_t, label: Label, retry_after_ms: u64) -> bool {
    let secs = retry_after_secs(retry_after_ms);
    let value = match static_seconds(secs) {
        Some(v) => v,
        None => {
            let mut buf = itoa::Buffer::new();
            let text = buf.format(secs).as_bytes();
            // SAFETY: the request pool is live.
            let Some(p) = (unsafe { ngx_pnalloc(r.pool, text.len()).cast::<u8>().as_mut() }) else {
                return false;
            };
            // SAFETY: `p` has text.len() bytes.
            unsafe { core::ptr::copy_nonoverlapping(text.as_ptr(), p, text.len()) };
            ngx_str_t {
                len: text.len(),
                data: p,
            }
        }
    };
    push_headers2(
        &mut r.headers_out.headers,
        ("Retry-After", value),
        ("X-Circuit-State", static_value(label.name())),
    )
}

/// "0" to "9999" back to back, five bytes each: the number of digits, then the digits
/// zero-padded on the left. The `Retry-After` of any cooldown up to 2 h 46 min needs no
/// allocation and no formatting; the digits' count read rather than worked out (with the
/// rounding in [`retry_after_secs`]: `scripts/bench-instructions`, open_503).
static SECONDS: [u8; 50_000] = {
    let mut out = [0u8; 50_000];
    let mut i = 0;
    while i < 10_000 {
        out[5 * i] = if i < 10 {
            1
        } else if i < 100 {
            2
        } else if i < 1000 {
            3
        } else {
            4
        };
        out[5 * i + 1] = b'0' + (i / 1000) as u8;
        out[5 * i + 2] = b'0' + (i / 100 % 10) as u8;
        out[5 * i + 3] = b'0' + (i / 10 % 10) as u8;
        out[5 * i + 4] = b'0' + (i % 10) as u8;
        i += 1;
    }
    out
};

/// `secs` as a static string, below 10 000.
#[inline(always)]
fn static_seconds(secs: u64) -> Option<ngx_str_t> {
    let i = usize::try_from(secs).ok().filter(|&i| i < 10_000)?;
    let digits = usize::from(*SECONDS.get(5 * i)?);
    let text = SECONDS.get((5 * i + 5).wrapping_sub(digits)..5 * i + 5)?;
    Some(ngx_str_t {
        len: text.len(),
        data: text.as_ptr().cast_mut(),
    })
}

/// The short-circuit answer from the PRECONTENT phase: the phase engine finalizes the
/// request with the returned 503 (so `error_page 503` applies), before any upstream exists.
#[inline(always)]
pub fn reject(r: &mut ngx_http_request_t, label: Label, retry_after_ms: u64) -> ngx_int_t {
    if !add_reject_headers(r, label, retry_after_ms) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    NGX_HTTP_SERVICE_UNAVAILABLE as ngx_int_t
}

/// The short-circuit answer from the PRECONTENT phase, for any client: [`reject`]'s 503, or a
/// gRPC client's answer ([`send_grpc`]), sent and finalized here (the phase handler then
/// returns `NGX_DONE`, which is what this returns for it).
#[inline(always)]
pub fn answer(r: &mut ngx_http_request_t, label: Label, retry_after_ms: u64) -> ngx_int_t {
    if !grpc_client(r) {
        return reject(r, label, retry_after_ms);
    }
    let rc = send_grpc(r, label, retry_after_ms);
    // SAFETY: a live request in its PRECONTENT phase, finalized once, with what sending
    // its header gave (as a content handler's caller does); nothing reads it after.
    unsafe { ngx_http_finalize_request(r, rc) };
    NGX_DONE as ngx_int_t
}

/// Whether the client speaks gRPC (or gRPC-Web): its request's `Content-Type` starts with
/// `application/grpc`. Such a client reads a call's outcome in `grpc-status`, not in the
/// HTTP status.
#[inline(always)]
pub fn grpc_client(r: &ngx_http_request_t) -> bool {
    // SAFETY: null or the request's parsed Content-Type header.
    unsafe { r.headers_in.content_type.as_ref() }
        .is_some_and(|h| h.value.as_bytes().starts_with(b"application/grpc"))
}

/// Sends a gRPC client's short-circuit answer: HTTP `200`, trailers-only (a HEADERS frame
/// that ends the stream) with `grpc-status` and `grpc-message` (see
/// [`grpc::answer`]), the wait as `grpc-retry-pushback-ms` (gRPC's server pushback, which a
/// retrying client waits for) and `X-Circuit-State`. Returns what to finalize the request
/// with.
#[cold]
#[inline(never)]
pub fn send_grpc(r: &mut ngx_http_request_t, label: Label, retry_after_ms: u64) -> ngx_int_t {
    // SAFETY: a live request; a no-op when its body is being read already (peer.init).
    if unsafe { ngx_http_discard_request_body(r) } != NGX_OK as ngx_int_t {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    if !add_grpc_headers(r, label, retry_after_ms) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    // SAFETY: a live request whose header is not sent yet.
    unsafe { ngx_http_send_header(r) }
}

fn turned_away(label: Label) -> TurnedAway {
    match label {
        Label::State(State::HalfOpen) => TurnedAway::HalfOpen,
        Label::State(_) => TurnedAway::Open,
        Label::Recovering => TurnedAway::Recovering,
        Label::Limited => TurnedAway::Limited,
    }
}

/// The status, type and headers of [`send_grpc`]'s answer.
fn add_grpc_headers(r: &mut ngx_http_request_t, label: Label, retry_after_ms: u64) -> bool {
    let (code, message) = grpc::answer(turned_away(label));
    let ct = static_value("application/grpc");
    r.headers_out.status = NGX_HTTP_OK as ngx_uint_t;
    r.headers_out.content_type_len = ct.len;
    r.headers_out.content_type = ct;
    r.headers_out.content_type_lowcase = null_mut();
    // HTTP/2 ends the stream with the header (trailers-only); HTTP/1.1 (gRPC-Web) needs a
    // length to end the answer.
    r.headers_out.content_length_n = if r.http_version == NGX_HTTP_VERSION_20 as ngx_uint_t {
        -1
    } else {
        0
    };
    r.set_header_only(1);
    let status = if code == grpc::RESOURCE_EXHAUSTED {
        "8"
    } else {
        "14"
    };
    let mut buf = itoa::Buffer::new();
    let text = buf.format(retry_after_ms).as_bytes();
    // SAFETY: the request pool is live.
    let Some(p) = (unsafe { ngx_pnalloc(r.pool, text.len()).cast::<u8>().as_mut() }) else {
        return false;
    };
    // SAFETY: `p` has text.len() bytes.
    unsafe { core::ptr::copy_nonoverlapping(text.as_ptr(), p, text.len()) };
    let pushback = ngx_str_t {
        len: text.len(),
        data: p,
    };
    let list = &mut r.headers_out.headers;
    push_headers2(
        list,
        ("grpc-status", static_value(status)),
        ("grpc-message", static_value(message)),
    ) && push_headers2(
        list,
        ("grpc-retry-pushback-ms", pushback),
        ("X-Circuit-State", static_value(label.name())),
    )
}

/// Whether nginx can answer this request from a stale cache entry instead of the origin:
/// the entry exists but expired, and `proxy_cache_use_stale` includes `error` (or the cached
/// response allowed `stale-if-error`).
#[cfg(ngx_http_cache)]
pub fn can_serve_stale(r: &ngx_http_request_t, u: &ngx_http_upstream_t) -> bool {
    if u.cache_status() != nginx_sys::NGX_HTTP_CACHE_EXPIRED {
        return false;
    }
    // SAFETY: u.conf is the location's upstream conf (live for the configuration) or a copy in the request pool.
    let use_stale = unsafe { (*u.conf).cache_use_stale }
        & nginx_sys::NGX_HTTP_UPSTREAM_FT_ERROR as ngx_uint_t
        != 0;
    // SAFETY: r.cache is set whenever cache_status is.
    use_stale || unsafe { r.cache.as_ref() }.is_some_and(|c| c.stale_error() != 0)
}

/// Without a cache there is never a stale entry.
#[cfg(not(ngx_http_cache))]
pub fn can_serve_stale(_r: &ngx_http_request_t, _u: &ngx_http_upstream_t) -> bool {
    false
}

/// Answers `503` with `Retry-After` and `X-Circuit-State` from inside `peer.init`, before any
/// connection exists, and returns the code that makes nginx drop the upstream quietly.
///
/// The upstream module finalizes the request itself when `peer.init` fails; with its cleanup
/// pointer cleared it only does `ngx_http_finalize_request(r, NGX_DONE)`. So the request gets
/// one extra reference for our own `ngx_http_finalize_request(r, 503)` (which runs
/// `error_page` and sends the special response), and that NGX_DONE releases it.
///
/// # Safety
/// `r` and `u` must be the live request and its upstream, called from `peer.init`, with no
/// borrow of the request's state live (the header filter reads it).
pub unsafe fn short_circuit(
    r: &mut ngx_http_request_t,
    u: &mut ngx_http_upstream_t,
    label: Label,
    retry_after_ms: u64,
) -> ngx_int_t {
    let grpc = grpc_client(r);
    if !grpc && !add_reject_headers(r, label, retry_after_ms) {
        return NGX_ERROR as ngx_int_t;
    }
    // The header filter must not add it again. (A PRECONTENT short-circuit's `Rejected`
    // needs no such note: the filter never adds the header for it.)
    if let Some(state) = request::here(r) {
        state.told.header_added = true;
    }
    #[cfg(ngx_http_cache)]
    // SAFETY: as ngx_http_upstream_finalize_request does: release the cache node this request
    // may hold (the "updating" lock) before the upstream is abandoned.
    unsafe {
        if !r.cache.is_null() {
            nginx_sys::ngx_http_file_cache_free(r.cache, null_mut());
        }
    }
    // SAFETY: u.cleanup points at where the upstream's cleanup handler is kept (set before
    // peer.init).
    unsafe {
        if !u.cleanup.is_null() {
            *u.cleanup = None;
            u.cleanup = null_mut();
        }
    }
    // The upstream had installed its broken-connection checks; they must not run for a
    // request it no longer owns.
    r.read_event_handler = Some(ngx_http_block_reading);
    r.write_event_handler = Some(ngx_http_request_empty_handler);
    // SAFETY: the main request is live while any of its requests is.
    let main = unsafe { &mut *r.main };
    main.set_count(main.count() + 1);
    let rc = if grpc {
        send_grpc(r, label, retry_after_ms)
    } else {
        NGX_HTTP_SERVICE_UNAVAILABLE as ngx_int_t
    };
    // SAFETY: a live request; the extra reference above keeps it alive through this call.
    unsafe { ngx_http_finalize_request(r, rc) };
    NGX_ERROR as ngx_int_t
}

/// Adds `X-Circuit-State` for the request's state: the one in the ctx
/// ([`request::AtHeader::Here`], which wants it), or, with `look`, the one [`request::find`]
/// finds, if it wants it.
#[inline(never)]
pub(crate) fn add_state_header(req: &mut ngx_http_request_t, look: bool) {
    let state = if look {
        let on = request::header_on(req);
        match request::find(req) {
            Some(Answer::State(s)) if request::wants_header(s, || on) => Some(s),
            _ => None,
        }
    } else {
        request::here(req)
    };
    let Some(state) = state else { return };
    let Some(label) = state.told.label else {
        return;
    };
    state.told.header_added = true;
    push_header(
        &mut req.headers_out.headers,
        "X-Circuit-State",
        static_value(label.name()),
    );
}

/// `$circuit_breaker_upstream`: the name of the upstream the request went to, as breakers
/// are named, whether or not one applies (so that a log for `cb-replay` can be captured
/// before any breaker is on), or of the breaker that turned it away (a refused request
/// never gets an upstream of its own, and a replay must know whose it was); not found (`-`
/// in a log) when the request has neither.
pub(crate) unsafe extern "C" fn upstream_variable(
    r: *mut ngx_http_request_t,
    v: *mut ngx_http_variable_value_t,
    _data: usize,
) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes a live request and a value to fill.
        let (req, v) = unsafe { (&mut *r, &mut *v) };
        // SAFETY: `r->upstream` is null or the request's upstream, live with the request; its
        // `upstream` is null or an upstream's conf, which lives as long as the configuration.
        let upstream_judged = matches!(request::find(req), Some(Answer::State(s)) if s.told.label.is_some())
            || matches!(request::find(req), Some(Answer::Rejected(_)));
        let keyed = if upstream_judged {
            None
        } else {
            request::key_said(req).map(|s| (s.family.as_ptr().cast_mut(), s.family.len()))
        };
        let host = keyed.or_else(|| {
            // SAFETY: as above.
            unsafe { req.upstream.as_ref().and_then(|u| u.upstream.as_ref()) }
                .map(|uscf| uscf.host)
                .filter(|h| h.len > 0 && !h.data.is_null())
                .map(|h| (h.data, h.len))
                .or_else(|| judged_by(req).map(|n| (n.as_ptr().cast_mut(), n.len())))
        });
        match host {
            Some((data, len)) => {
                v.set_len(len as u32);
                v.set_valid(1);
                v.set_no_cacheable(0);
                v.set_not_found(0);
                v.data = data;
            }
            None => v.set_not_found(1),
        }
        NGX_OK as ngx_int_t
    })
}

/// The upstream of the breaker that judged a request with no upstream of its own: the one
/// its state names, or the one its short-circuit kept (the location's, for a shared record).
fn judged_by(req: &mut ngx_http_request_t) -> Option<&'static str> {
    let lcf = request::loc_conf(req);
    let scf = match request::find(req)? {
        Answer::State(s) => s.judge.srv_conf_ptr(),
        Answer::Rejected(rec) => match rec.upstream() {
            Some(scf) => scf,
            None => lcf?.precontent,
        },
    };
    // SAFETY: null, or an upstream's conf, which lives as long as the configuration the
    // request runs under.
    let scf = unsafe { scf.as_ref() }?;
    // SAFETY: the name lives in that conf, longer than the variable's value is used.
    Some(unsafe { &*(scf.name.as_str() as *const str) })
}

pub(crate) unsafe extern "C" fn variable(
    r: *mut ngx_http_request_t,
    v: *mut ngx_http_variable_value_t,
    data: usize,
) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes a live request and a value to fill.
        let (req, v) = unsafe { (&mut *r, &mut *v) };
        let lcf = request::loc_conf(req);
        let text: &str = match request::find(req) {
            Some(Answer::State(s)) if s.told.label.is_some() => match s.told.label {
                Some(label) if data == 0 => label.name(),
                _ => route_name(s.judge.route()),
            },
            Some(Answer::Rejected(s)) if data == 0 => s.label.name(),
            Some(Answer::Rejected(s)) => {
                route_name(s.route().unwrap_or_else(|| request::route_of(lcf)))
            }
            _ => match request::key_said(req) {
                // A key's breaker judged it, and no upstream's.
                Some(k) if data == 0 => k.label.name(),
                Some(k) => {
                    v.set_len(k.key.len as u32);
                    v.set_valid(1);
                    v.set_no_cacheable(0);
                    v.set_not_found(0);
                    v.data = k.key.data;
                    return NGX_OK as ngx_int_t;
                }
                None => "",
            },
        };
        v.set_len(text.len() as u32);
        v.set_valid(1);
        v.set_no_cacheable(0);
        v.set_not_found(0);
        v.data = text.as_ptr().cast_mut();
        NGX_OK as ngx_int_t
    })
}

/// The route's name, which lives as long as the configuration (longer than the variable's
/// value is used).
fn route_name(route: &crate::conf::Route) -> &'static str {
    // SAFETY: route names live in loc confs (or a static) for the configuration's lifetime,
    // which outlasts every request run under it.
    unsafe { &*(route.name.as_str() as *const str) }
}
