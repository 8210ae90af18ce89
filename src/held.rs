//! The module's body filter: how long a client holds up the answer of a request that goes to
//! an upstream ([`Held`]). Where nginx passes the answer on at the client's pace, an origin
//! may give up on it while the client holds it up, and nginx sees that only once the client
//! has taken what it had: the outcome's reader then asks how long the client held it
//! (`crate::upstream::outcome`). Kept in a record of the request's pool, apart from the
//! request's state, so that a breaker judged at the log phase (`crate::keyed`) finds it too.
//!
//! A request pays two reads of its connection's flags per call of the filter; only a write
//! that could not finish, and the next that did, look for the record.

use circuit_breaker_core::breaker::held::Held;
use core::ffi::c_void;
use nginx_sys::{
    ngx_chain_t, ngx_connection_t, ngx_current_msec, ngx_http_output_body_filter_pt,
    ngx_http_request_t, ngx_http_top_body_filter, ngx_int_t, ngx_pool_cleanup_add, NGX_OK,
};

use circuit_breaker_shell::ffi::guard;

static mut NEXT_BODY_FILTER: ngx_http_output_body_filter_pt = None;

/// Puts the filter on top of the chain (called from postconfiguration): above the write
/// filter, whose flag on the connection says whether what it had could all go.
///
/// # Safety
/// Only during configuration, once per http block.
pub unsafe fn add_body_filter() {
    // SAFETY: nginx's filter chain is only modified during configuration, single-threaded.
    unsafe {
        NEXT_BODY_FILTER = ngx_http_top_body_filter;
        ngx_http_top_body_filter = Some(body_filter);
    }
}

/// Passes the chain on, and notes a change in whether the client holds the answer up: the
/// write filter's flag on the request's connection (an HTTP/2 or HTTP/3 stream's own), set
/// while what nginx had could not all be sent.
unsafe extern "C" fn body_filter(r: *mut ngx_http_request_t, chain: *mut ngx_chain_t) -> ngx_int_t {
    // SAFETY: nginx passes a live request; its connection outlives the filter's call.
    let c = unsafe { (*r).connection };
    // SAFETY: as above.
    let before = unsafe { blocked(c) };
    // SAFETY: set in add_body_filter to the previous top filter, during configuration.
    let rc = match unsafe { NEXT_BODY_FILTER } {
        // SAFETY: the next filter in nginx's chain, with the request and chain it was given.
        Some(next) => unsafe { next(r, chain) },
        None => NGX_OK as ngx_int_t,
    };
    // SAFETY: as above: the filters below end no connection.
    let after = unsafe { blocked(c) };
    // SAFETY: as above.
    if before != after && unsafe { !(*r).upstream.is_null() } {
        // SAFETY: as above.
        guard((), || unsafe { note(r, after) });
    }
    rc
}

/// Whether what nginx had for the client could not all be sent (`NGX_HTTP_WRITE_BUFFERED`).
///
/// # Safety
/// `c` must be a live connection.
#[inline(always)]
unsafe fn blocked(c: *const ngx_connection_t) -> bool {
    // SAFETY: as for this function.
    let flags = unsafe { (*c).buffered() };
    flags & nginx_sys::NGX_HTTP_WRITE_BUFFERED != 0
}

/// A request's [`Held`], in a cleanup record of its pool: the request it is for, since
/// subrequests share the pool.
struct Record {
    request: *const ngx_http_request_t,
    held: Held,
}

/// The marker of a [`Record`]'s cleanup: there is nothing to free (the pool's memory goes
/// with the pool).
unsafe extern "C" fn kept(_data: *mut c_void) {}

/// Notes that `r`'s answer is held up (`blocked`) or no longer, now.
///
/// # Safety
/// `r` must be a live request.
#[cold]
#[inline(never)]
unsafe fn note(r: *mut ngx_http_request_t, blocked: bool) {
    // SAFETY: a plain global only this worker's event loop writes, and it runs us.
    let now = unsafe { ngx_current_msec } as u64;
    // SAFETY: as for this function.
    let record = match unsafe { find(r) } {
        Some(rec) => rec,
        None if !blocked => return,
        // SAFETY: as for this function.
        None => match unsafe { add(r) } {
            Some(rec) => rec,
            None => return,
        },
    };
    // SAFETY: a record lives as long as the request's pool; nothing else borrows it now.
    unsafe { (*record).held.note(blocked, now) };
}

/// Whether the client has held up `r`'s answer long enough that a failure of it is not
/// judged ([`Held::held_long`]), now.
///
/// # Safety
/// `r` must be a live request.
pub unsafe fn held_long(r: &ngx_http_request_t) -> bool {
    // SAFETY: a plain global only this worker's event loop writes, and it runs us.
    let now = unsafe { ngx_current_msec } as u64;
    // SAFETY: as for this function.
    let Some(record) = (unsafe { find(r) }) else {
        return false;
    };
    // SAFETY: a record lives as long as the request's pool; only read.
    unsafe { (*record).held.held_long(now) }
}

/// `r`'s record, if it has one.
///
/// # Safety
/// `r` must be a live request.
unsafe fn find(r: *const ngx_http_request_t) -> Option<*mut Record> {
    // SAFETY: the request pool's cleanup list, live with the request.
    let mut c = unsafe { (*(*r).pool).cleanup };
    // SAFETY: each record is null or live until the pool is destroyed.
    while let Some(rec) = unsafe { c.as_ref() } {
        if rec
            .handler
            .is_some_and(|h| h as usize == kept as *const () as usize)
        {
            let record = rec.data.cast::<Record>();
            // SAFETY: a cleanup with our marker holds a `Record` (see `add`).
            if !record.is_null() && core::ptr::eq(unsafe { (*record).request }, r) {
                return Some(record);
            }
        }
        c = rec.next;
    }
    None
}

/// A new record for `r`, in its pool (`None`: no memory).
///
/// # Safety
/// `r` must be a live request.
unsafe fn add(r: *mut ngx_http_request_t) -> Option<*mut Record> {
    // SAFETY: the request's live pool; the data is allocated with the record.
    let cln = unsafe { ngx_pool_cleanup_add((*r).pool, core::mem::size_of::<Record>()).as_mut() }?;
    let record = cln.data.cast::<Record>();
    // SAFETY: `ngx_pool_cleanup_add` allocated `data` for a `Record`, aligned as the pool
    // aligns (to a pointer, which is a `Record`'s alignment).
    unsafe {
        record.write(Record {
            request: r,
            held: Held::default(),
        })
    };
    cln.handler = Some(kept);
    Some(record)
}
