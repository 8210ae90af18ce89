//! The module's header filter: `X-Circuit-State` for a request a breaker judged
//! (`crate::respond`), and the probe's or the limit's part at a response header
//! (`crate::upstream::header_passed`). Above both, so that neither reaches for the other.

use nginx_sys::{
    ngx_http_output_header_filter_pt, ngx_http_request_t, ngx_http_top_header_filter, ngx_int_t,
    NGX_OK,
};

use crate::request::{self, AtHeader};
use crate::respond;
use circuit_breaker_shell::ffi::guard;

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
/// module never saw, or whose state needs nothing, pays little (`scripts/bench-instructions`,
/// open_503, plain and closed).
unsafe extern "C" fn header_filter(r: *mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: nginx passes a live request.
    match request::at_header(unsafe { &*r }) {
        AtHeader::Nothing => {}
        // SAFETY: as above, in the header filter.
        AtHeader::Here { header, holds } => unsafe { header_here(r, header, holds) },
        // SAFETY: as above, in the header filter.
        AtHeader::Look => unsafe { header_look(r) },
    }
    if crate::keyed::ANY.load(core::sync::atomic::Ordering::Relaxed) {
        // SAFETY: as above, in the header filter.
        unsafe { crate::keyed::at_header(r) };
    }
    // SAFETY: set in add_header_filter to the previous top filter, during configuration.
    match unsafe { NEXT_HEADER_FILTER } {
        // SAFETY: the next filter in nginx's chain, with the request it was given.
        Some(next) => unsafe { next(r) },
        None => NGX_OK as ngx_int_t,
    }
}

/// [`header_filter`] for the state in the ctx: `X-Circuit-State` if it wants it, then what
/// it holds given back at the header.
///
/// # Safety
/// `r` is the live request, in the header filter, its state in the ctx.
#[inline(never)]
unsafe fn header_here(r: *mut ngx_http_request_t, header: bool, holds: bool) {
    if header {
        guard((), || {
            // SAFETY: as for this function; no other reference to the request is live here.
            respond::add_state_header(unsafe { &mut *r }, false)
        });
    }
    if holds {
        guard((), || {
            // SAFETY: as for this function; no other reference to the request is live.
            unsafe { crate::upstream::header_passed(&mut *r) }
        });
    }
}

/// [`header_filter`] after an internal redirect: the state looked for first.
///
/// # Safety
/// `r` is the live request, in the header filter.
#[cold]
#[inline(never)]
unsafe fn header_look(r: *mut ngx_http_request_t) {
    guard((), || {
        // SAFETY: as for this function; no other reference to the request is live here.
        respond::add_state_header(unsafe { &mut *r }, true)
    });
    // SAFETY: as for this function.
    if request::holds_grant(unsafe { &*r }) {
        guard((), || {
            // SAFETY: as for this function; no other reference to the request is live.
            unsafe { crate::upstream::header_passed(&mut *r) }
        });
    }
}
