//! The client's request body, where a client could use it to hold what the breaker grants.
//!
//! - Read first: a request that may become the half-open probe, or take a slot of the
//!   adaptive limit, has its whole body read before it goes on (as `proxy_request_buffering
//!   on` would; gRPC and `proxy_request_buffering off` otherwise pass it on as it arrives).
//!   A slow upload then waits in this phase, holding nothing.
//! - Its end: where a body is still passed on as it arrives when nginx connects (a location
//!   the PRECONTENT phase does not decide), the request body filter notes when it ended, and
//!   the origin's time starts there (`outcome::read`).

use nginx_sys::{
    ngx_buf_t, ngx_chain_t, ngx_current_msec, ngx_http_core_run_phases, ngx_http_finalize_request,
    ngx_http_read_client_request_body, ngx_http_request_t, ngx_http_top_request_body_filter,
    ngx_int_t, NGX_DONE, NGX_ERROR, NGX_HTTP_SPECIAL_RESPONSE,
};

use crate::request;
use circuit_breaker_shell::ffi::guard;

/// Whether `r` has a request body nobody has read yet: a main request that announced one
/// (a length, chunked, or an HTTP/2 stream not yet closed, which nginx reads as chunked).
#[inline]
pub fn unread(r: &ngx_http_request_t) -> bool {
    core::ptr::eq(r, r.main)
        && r.request_body.is_null()
        && r.discard_body() == 0
        && (r.headers_in.content_length_n > 0 || r.headers_in.chunked() != 0)
}

/// Reads the whole body of `r`, then runs its phases again from this one (as the mirror
/// module does for `mirror_request_body`). The phase handler returns what this returns.
pub fn read_first(r: &mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: a live main request in a phase handler; nginx keeps it (count) until the
    // handler runs.
    let rc = unsafe { ngx_http_read_client_request_body(r, Some(body_read)) };
    if rc >= NGX_HTTP_SPECIAL_RESPONSE as ngx_int_t {
        return rc;
    }
    // SAFETY: as above; NGX_DONE drops the count this phase's call took.
    unsafe { ngx_http_finalize_request(r, NGX_DONE as ngx_int_t) };
    NGX_DONE as ngx_int_t
}

/// The body is read: on with the phases.
unsafe extern "C" fn body_read(r: *mut ngx_http_request_t) {
    guard((), || {
        // SAFETY: nginx calls the post handler with the live request.
        unsafe {
            (*r).write_event_handler = Some(ngx_http_core_run_phases);
            ngx_http_core_run_phases(r);
        }
    });
}

static mut NEXT_BODY_FILTER: nginx_sys::ngx_http_request_body_filter_pt = None;

/// Notes when the body of a request whose body was still arriving at `peer.init` ends.
unsafe extern "C" fn body_filter(r: *mut ngx_http_request_t, chain: *mut ngx_chain_t) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx runs the filter with a live request and a chain (or null) of live
        // links.
        let req = unsafe { &mut *r };
        if let Some(state) = request::here(req) {
            let waits = state.attempts.body_arriving && state.attempts.body_done_at.is_none();
            // SAFETY: as above.
            if waits && unsafe { ends(chain) } {
                // SAFETY: a plain global only this worker's event loop writes.
                state.attempts.body_done_at = Some(unsafe { ngx_current_msec });
            }
        }
        // SAFETY: the next filter, set at configuration, read on the one thread that runs.
        let next = unsafe { NEXT_BODY_FILTER };
        match next {
            // SAFETY: the next filter in nginx's chain, with the request and chain it is given.
            Some(next) => unsafe { next(r, chain) },
            None => NGX_ERROR as ngx_int_t,
        }
    })
}

/// Whether a chain holds the body's last buffer.
///
/// # Safety
/// `chain` is null or a chain of live links and buffers.
pub unsafe fn ends(mut chain: *mut ngx_chain_t) -> bool {
    // SAFETY: this fn's contract.
    while let Some(link) = unsafe { chain.as_ref() } {
        // SAFETY: a link's buffer, null or live.
        if unsafe { link.buf.as_ref() }.is_some_and(|b: &ngx_buf_t| b.last_buf() != 0) {
            return true;
        }
        chain = link.next;
    }
    false
}

/// Puts the body filter on top of the chain (called from postconfiguration).
///
/// # Safety
/// Only during configuration, once per http block.
pub unsafe fn add_body_filter() {
    // SAFETY: nginx's filter chains are only modified during configuration, single-threaded.
    unsafe {
        NEXT_BODY_FILTER = ngx_http_top_request_body_filter;
        ngx_http_top_request_body_filter = Some(body_filter);
    }
}
