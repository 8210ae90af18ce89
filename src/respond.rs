//! What a client sees: the short-circuit 503, the stale path check, `X-Circuit-State`, and the
//! `$circuit_breaker_state` / `$circuit_breaker_route` variables.

use core::ptr::null_mut;

use circuit_breaker_core::snapshot::State;
use nginx_sys::{
    ngx_conf_t, ngx_http_add_variable, ngx_http_block_reading, ngx_http_finalize_request,
    ngx_http_output_header_filter_pt, ngx_http_request_empty_handler, ngx_http_request_t,
    ngx_http_top_header_filter, ngx_http_upstream_t, ngx_http_variable_value_t, ngx_int_t,
    ngx_pnalloc, ngx_str_t, ngx_uint_t, NGX_ERROR, NGX_HTTP_INTERNAL_SERVER_ERROR,
    NGX_HTTP_SERVICE_UNAVAILABLE, NGX_HTTP_VAR_NOCACHEABLE, NGX_OK,
};
use ngx::http::HttpModuleLocationConf;
use ngx::ngx_string;

use crate::conf::LocConf;
use crate::upstream::{cleanup_handler, PeerData};
use crate::util::{guard, push_header, static_str};
use crate::Module;

static mut NEXT_HEADER_FILTER: ngx_http_output_header_filter_pt = None;

/// Stores the request's PeerData as the module ctx.
pub fn set_ctx(r: &mut ngx_http_request_t, pd: &mut PeerData) {
    // SAFETY: r->ctx has a slot per module; ctx_index is ours.
    unsafe {
        *r.ctx
            .add(<Module as ngx::http::HttpModule>::module().ctx_index) =
            (pd as *mut PeerData).cast();
    }
}

/// The request's PeerData if this location (since the last internal redirect) set it.
pub fn ctx_here(r: &ngx_http_request_t) -> Option<&'static mut PeerData> {
    // SAFETY: r->ctx has a slot per module.
    let ctx = unsafe {
        *r.ctx
            .add(<Module as ngx::http::HttpModule>::module().ctx_index)
    };
    // SAFETY: only set_ctx writes our slot, with a PeerData that lives as long as the request.
    unsafe { ctx.cast::<PeerData>().as_mut() }
}

/// The request's PeerData: the module ctx, or, after an internal redirect cleared it (such as
/// `error_page 503`), the data of our pool cleanup, which outlives redirects.
pub fn get_ctx(r: &ngx_http_request_t) -> Option<&'static mut PeerData> {
    if let Some(pd) = ctx_here(r) {
        return Some(pd);
    }
    if !core::ptr::eq(r.main, r) {
        return None; // subrequests share the main request's pool
    }
    let handler = cleanup_handler();
    // SAFETY: the pool's cleanup list is a live singly linked list.
    let mut c = unsafe { (*r.pool).cleanup };
    // SAFETY: each link is null or a live cleanup record.
    while let Some(cl) = unsafe { c.as_ref() } {
        if cl.handler.is_some_and(|h| h as usize == handler as usize) {
            // SAFETY: our handler's data is always a PeerData.
            return Some(unsafe { &mut *cl.data.cast::<PeerData>() });
        }
        c = cl.next;
    }
    None
}

/// Whether nginx can answer this request from a stale cache entry instead of the origin:
/// the entry exists but expired, and `proxy_cache_use_stale` includes `error` (or the cached
/// response allowed `stale-if-error`).
///
/// # Safety
/// `r` and `u` must be the live request and its upstream.
#[cfg(ngx_http_cache)]
pub unsafe fn can_serve_stale(r: &ngx_http_request_t, u: &ngx_http_upstream_t) -> bool {
    if u.cache_status() != nginx_sys::NGX_HTTP_CACHE_EXPIRED {
        return false;
    }
    // SAFETY: u.conf is the location's upstream conf.
    let use_stale = unsafe { (*u.conf).cache_use_stale }
        & nginx_sys::NGX_HTTP_UPSTREAM_FT_ERROR as ngx_uint_t
        != 0;
    // SAFETY: r.cache is set whenever cache_status is.
    use_stale || unsafe { r.cache.as_ref() }.is_some_and(|c| c.stale_error() != 0)
}

/// Without a cache there is never a stale entry.
#[cfg(not(ngx_http_cache))]
pub unsafe fn can_serve_stale(_r: &ngx_http_request_t, _u: &ngx_http_upstream_t) -> bool {
    false
}

/// Adds `Retry-After` (whole seconds to the next probe, at least 1) and `X-Circuit-State`.
fn add_reject_headers(r: &mut ngx_http_request_t, state: State, retry_after_ms: u64) -> bool {
    let secs = retry_after_ms.div_ceil(1000).max(1);
    // Digits by hand: the formatting machinery costs more than the rest of a short-circuit.
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = secs;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let text = &digits[i..];
    // SAFETY: the request pool is live.
    let buf = unsafe { ngx_pnalloc(r.pool, text.len()) }.cast::<u8>();
    if buf.is_null() {
        return false;
    }
    // SAFETY: buf has text.len() bytes.
    unsafe { core::ptr::copy_nonoverlapping(text.as_ptr(), buf, text.len()) };
    let value = ngx_str_t {
        len: text.len(),
        data: buf,
    };
    // SAFETY: headers_out.headers is the request's live list.
    let ok = unsafe {
        push_header(&mut r.headers_out.headers, "Retry-After", value)
            && push_header(
                &mut r.headers_out.headers,
                "X-Circuit-State",
                static_str(state.name()),
            )
    };
    if let Some(pd) = get_ctx(r) {
        pd.header_added = true;
    }
    ok
}

/// The short-circuit answer from the PRECONTENT phase: the phase engine finalizes the
/// request with the returned 503 (so `error_page 503` applies), before any upstream exists.
///
/// # Safety
/// `r` must be the live request.
pub unsafe fn reject(r: &mut ngx_http_request_t, state: State, retry_after_ms: u64) -> ngx_int_t {
    if !add_reject_headers(r, state, retry_after_ms) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    NGX_HTTP_SERVICE_UNAVAILABLE as ngx_int_t
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
/// `r` and `u` must be the live request and its upstream, called from `peer.init`.
pub unsafe fn short_circuit(
    r: &mut ngx_http_request_t,
    u: &mut ngx_http_upstream_t,
    state: State,
    retry_after_ms: u64,
) -> ngx_int_t {
    if !add_reject_headers(r, state, retry_after_ms) {
        return NGX_ERROR as ngx_int_t;
    }

    #[cfg(ngx_http_cache)]
    // SAFETY: as ngx_http_upstream_finalize_request does: release the cache node this request
    // may hold (the "updating" lock) before the upstream is abandoned.
    unsafe {
        if !r.cache.is_null() {
            nginx_sys::ngx_http_file_cache_free(r.cache, null_mut());
        }
    }
    // SAFETY: u.cleanup points at the upstream's cleanup handler slot (set before peer.init).
    unsafe {
        if !u.cleanup.is_null() {
            *u.cleanup = None;
            u.cleanup = null_mut();
        }
        // The upstream had installed its broken-connection checks; they must not run for a
        // request it no longer owns.
        r.read_event_handler = Some(ngx_http_block_reading);
        r.write_event_handler = Some(ngx_http_request_empty_handler);
        let main = &mut *r.main;
        main.set_count(main.count() + 1);
        ngx_http_finalize_request(r, NGX_HTTP_SERVICE_UNAVAILABLE as ngx_int_t);
    }
    NGX_ERROR as ngx_int_t
}

/// Adds `X-Circuit-State` to responses that went through a breaker: always when the request
/// was short-circuited, otherwise when `circuit_breaker_header on`.
unsafe extern "C" fn header_filter(r: *mut ngx_http_request_t) -> ngx_int_t {
    let add = guard(false, || {
        // SAFETY: nginx passes a live request.
        let req = unsafe { &mut *r };
        let Some(pd) = get_ctx(req) else { return false };
        if pd.header_added {
            return false;
        }
        let Some(state) = pd.state else { return false };
        let on = Module::location_conf(req).is_some_and(|l: &LocConf| l.header == 1);
        if !(pd.short_circuited || on) {
            return false;
        }
        pd.header_added = true;
        // SAFETY: the request's live headers list.
        unsafe {
            push_header(
                &mut req.headers_out.headers,
                "X-Circuit-State",
                static_str(state.name()),
            )
        }
    });
    let _ = add;
    // SAFETY: set in add_header_filter to the previous top filter.
    match unsafe { NEXT_HEADER_FILTER } {
        // SAFETY: the next filter in nginx's chain.
        Some(next) => unsafe { next(r) },
        None => NGX_OK as ngx_int_t,
    }
}

/// Puts our header filter on top of the chain (called from postconfiguration).
///
/// # Safety
/// Only during configuration, once per http block.
pub unsafe fn add_header_filter() {
    // SAFETY: nginx's filter chain is only modified during configuration, single-threaded.
    unsafe {
        NEXT_HEADER_FILTER = ngx_http_top_header_filter;
        ngx_http_top_header_filter = Some(header_filter);
    }
}

/// Registers `$circuit_breaker_state` and `$circuit_breaker_route`.
pub unsafe fn add_variables(cf: *mut ngx_conf_t) -> ngx_int_t {
    let vars: [(ngx_str_t, usize); 2] = [
        (ngx_string!("circuit_breaker_state"), 0),
        (ngx_string!("circuit_breaker_route"), 1),
    ];
    for (mut name, data) in vars {
        // SAFETY: `cf` is live during preconfiguration.
        let v =
            unsafe { ngx_http_add_variable(cf, &mut name, NGX_HTTP_VAR_NOCACHEABLE as ngx_uint_t) };
        // SAFETY: non-null variable record just added.
        let Some(v) = (unsafe { v.as_mut() }) else {
            return NGX_ERROR as ngx_int_t;
        };
        v.get_handler = Some(variable);
        v.data = data;
    }
    NGX_OK as ngx_int_t
}

unsafe extern "C" fn variable(
    r: *mut ngx_http_request_t,
    v: *mut ngx_http_variable_value_t,
    data: usize,
) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes a live request and a value to fill.
        let (req, v) = unsafe { (&*r, &mut *v) };
        let text: &str = match get_ctx(req) {
            Some(pd) if data == 0 => pd.state.map_or("", State::name),
            Some(pd) if pd.state.is_some() => pd.route(),
            _ => "",
        };
        v.set_len(text.len() as u32);
        v.set_valid(1);
        v.set_no_cacheable(0);
        v.set_not_found(0);
        // The strings are 'static or live in the loc conf for the cycle.
        v.data = text.as_ptr().cast_mut();
        NGX_OK as ngx_int_t
    })
}
