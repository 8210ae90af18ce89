//! The module's header filter: `X-Circuit-State` for a request a breaker judged
//! (`crate::respond`), and the probe's or the limit's part at a response header
//! (`crate::upstream::header_passed`). Above both, so that neither reaches for the other.

use nginx_sys::{
    ngx_http_output_header_filter_pt, ngx_http_request_t, ngx_http_top_header_filter, ngx_int_t,
    NGX_OK,
};

use crate::ffi::guard;
use crate::request::{self, Note};
use crate::respond;

static mut NEXT_HEADER_FILTER: ngx_http_output_header_filter_pt = None;

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

/// Adds `X-Circuit-State` to responses that went through a breaker: always when the request
/// was short-circuited, otherwise when `circuit_breaker_header on`.
///
/// Whether there may be anything to do is told from the ctx alone, and the work is apart (a
/// PRECONTENT short-circuit's header went in with its Retry-After), so that a request the
/// module never saw pays little (`scripts/bench-instructions`, open_503 and plain).
unsafe extern "C" fn header_filter(r: *mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: nginx passes a live request.
    let look = match request::note(unsafe { &*r }) {
        Note::Nothing => None,
        Note::Here => Some(false),
        Note::Look => Some(true),
    };
    if let Some(look) = look {
        guard((), || {
            // SAFETY: as above; no other reference to the request is live here.
            respond::add_state_header(unsafe { &mut *r }, look)
        });
    }
    // SAFETY: as above.
    if request::holds_grant(unsafe { &*r }) {
        guard((), || {
            // SAFETY: as above, in the header filter; no other reference to it is live.
            unsafe { crate::upstream::header_passed(&mut *r) }
        });
    }
    // SAFETY: set in add_header_filter to the previous top filter, during configuration.
    match unsafe { NEXT_HEADER_FILTER } {
        // SAFETY: the next filter in nginx's chain, with the request it was given.
        Some(next) => unsafe { next(r) },
        None => NGX_OK as ngx_int_t,
    }
}
