//! The module's body filter: how long a client holds up the answer of a request a breaker
//! judges ([`Held`]). Where nginx passes the answer on at the client's pace, an origin may give
//! up on it while the client holds it up, and nginx sees that only once the client has taken
//! what it had: the outcome's reader then asks whether the client held it long enough
//! (`crate::upstream::outcome`). Kept in a record of the request's pool, apart from the
//! request's state, so that a breaker judged at the log phase (`crate::keyed`) finds it too.
//!
//! A request pays two reads of its connection's flags per call of the filter. A call that
//! finds something buffered (what TLS gathers, an HTTP/2 stream's queued frames) goes on to
//! the write event's flags; one that leaves the answer held, or ends a hold while records
//! exist in the worker, walks the request pool's cleanups.

use circuit_breaker_core::breaker::held::Held;
use core::ffi::c_void;
use core::sync::atomic::{AtomicUsize, Ordering};
use nginx_sys::{
    ngx_chain_t, ngx_connection_t, ngx_current_msec, ngx_http_output_body_filter_pt,
    ngx_http_request_t, ngx_http_top_body_filter, ngx_http_upstream_t, ngx_int_t,
    ngx_pool_cleanup_add, ngx_pool_t, NGX_OK,
};

use circuit_breaker_shell::ffi::guard;

static mut NEXT_BODY_FILTER: ngx_http_output_body_filter_pt = None;

/// Records alive in this worker: while there is none, no outcome looks for one.
static RECORDS: AtomicUsize = AtomicUsize::new(0);

/// Puts the filter on top of the chain (called from postconfiguration): above the filters
/// whose flags on the connection say whether what nginx had could all go.
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

/// Passes the chain on, and notes a change in whether the client holds the answer up.
unsafe extern "C" fn body_filter(r: *mut ngx_http_request_t, chain: *mut ngx_chain_t) -> ngx_int_t {
    // SAFETY: nginx passes a live request; its connection outlives the filter's call.
    let c = unsafe { (*r).connection };
    // SAFETY: as above.
    let before = unsafe { (*c).buffered() };
    // SAFETY: set in add_body_filter to the previous top filter, during configuration.
    let rc = match unsafe { NEXT_BODY_FILTER } {
        // SAFETY: the next filter in nginx's chain, with the request and chain it was given.
        Some(next) => unsafe { next(r, chain) },
        None => NGX_OK as ngx_int_t,
    };
    // SAFETY: as above: the filters below end no connection.
    if before | unsafe { (*c).buffered() } != 0 {
        // SAFETY: as above.
        unsafe { noted(r, c, before != 0) };
    }
    rc
}

/// Where the connection had something buffered before or after the filters below: notes a hold
/// that begins or ends. A hold may have begun outside this filter (an HTTP/2 header's frame
/// queued behind the connection by the header filter): a call that leaves the answer held
/// looks for it. Apart from the filter's path (`scripts/bench-instructions`, plain and closed).
///
/// # Safety
/// `r` must be a live request and `c` its connection.
#[cold]
#[inline(never)]
unsafe fn noted(r: *mut ngx_http_request_t, c: *const ngx_connection_t, was_buffered: bool) {
    // SAFETY: as for this function.
    let after = unsafe { blocked(c) };
    if !after && (!was_buffered || RECORDS.load(Ordering::Relaxed) == 0) {
        return;
    }
    // SAFETY: as for this function.
    if unsafe { !(*r).upstream.is_null() } {
        // SAFETY: as for this function.
        guard((), || unsafe { note(r, after) });
    }
}

/// Whether what nginx had for the client could not all be sent on the client's account: a flag
/// of the connection's says something is left (`NGX_HTTP_WRITE_BUFFERED` of the write filter,
/// an HTTP/2 stream's frames queued behind the connection or its window, what TLS kept), and
/// the connection cannot take more now — not what nginx keeps back itself: TLS gathering a
/// record, a write delayed for `limit_rate`, a `sendfile_max_chunk` turn.
///
/// # Safety
/// `c` must be a live connection.
#[inline(always)]
unsafe fn blocked(c: *const ngx_connection_t) -> bool {
    // SAFETY: as for this function.
    let (flags, wev) = unsafe { ((*c).buffered(), &*(*c).write) };
    flags != 0 && wev.ready() == 0 && wev.delayed() == 0
}

/// A request's [`Held`], for the upstream it holds up (a `post_action` makes another), in a
/// cleanup record of its pool: subrequests share the pool.
struct Record {
    request: *const ngx_http_request_t,
    upstream: *const ngx_http_upstream_t,
    held: Held,
}

/// A [`Record`]'s cleanup, and the mark by which one is found: frees it with the pool.
unsafe extern "C" fn dropped(data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: the data of a cleanup with this handler is a `Record` boxed by `add`, freed only
    // here, once (nginx runs each cleanup once).
    drop(unsafe { Box::from_raw(data.cast::<Record>()) });
    RECORDS.fetch_sub(1, Ordering::Relaxed);
}

/// Notes that `r`'s answer is held up (`blocked`), or that what was held has gone.
///
/// # Safety
/// `r` must be a live request with an upstream.
unsafe fn note(r: *mut ngx_http_request_t, blocked: bool) {
    // SAFETY: a plain global only this worker's event loop writes, and it runs us.
    let now = unsafe { ngx_current_msec } as u64;
    // SAFETY: as for this function.
    let pool = unsafe { (*r).pool };
    if !blocked {
        // The flag is the connection's: the write that ended it may be any request's of the
        // pool (a subrequest's), so every hold under way there ends.
        // SAFETY: the request's live pool.
        unsafe { each(pool, |rec| rec.held.note(false, now)) };
        return;
    }
    // SAFETY: as for this function.
    let record = match unsafe { find(r) } {
        Some(rec) => rec,
        // SAFETY: as for this function.
        None if unsafe { judged(r) } => match unsafe { add(r) } {
            Some(rec) => rec,
            None => return,
        },
        None => return,
    };
    // SAFETY: a record lives as long as the request's pool; nothing else borrows it now.
    unsafe { (*record).held.note(true, now) };
}

/// Whether a breaker judges `r`: the module's state is in its ctx, or a key holds it.
///
/// # Safety
/// `r` must be a live request.
unsafe fn judged(r: *const ngx_http_request_t) -> bool {
    // SAFETY: as for this function.
    let req = unsafe { &*r };
    crate::request::answered(req) || crate::keyed::judges(req)
}

/// Whether the client has held up `r`'s answer from its upstream long enough that the answer
/// is judged by its header ([`Held::held_long`]), now.
///
/// # Safety
/// `r` must be a live request.
#[inline]
pub unsafe fn held_long(r: &ngx_http_request_t) -> bool {
    if RECORDS.load(Ordering::Relaxed) == 0 {
        return false;
    }
    // SAFETY: a plain global only this worker's event loop writes, and it runs us.
    let now = unsafe { ngx_current_msec } as u64;
    // SAFETY: as for this function.
    let Some(record) = (unsafe { find(r) }) else {
        return false;
    };
    // SAFETY: a record lives as long as the request's pool; only read.
    unsafe { &*record }.held.held_long(now)
}

/// Calls `f` on every record of `pool`.
///
/// # Safety
/// `pool` must be a live pool.
unsafe fn each(pool: *mut ngx_pool_t, mut f: impl FnMut(&mut Record)) {
    // SAFETY: the pool's cleanup list, live with the pool.
    let mut c = unsafe { (*pool).cleanup };
    // SAFETY: each record is null or live until the pool is destroyed.
    while let Some(rec) = unsafe { c.as_ref() } {
        if rec
            .handler
            .is_some_and(|h| h as usize == dropped as *const () as usize)
        {
            // SAFETY: a cleanup with our handler holds a `Record` (see `add`), which nothing
            // else borrows now.
            if let Some(record) = unsafe { rec.data.cast::<Record>().as_mut() } {
                f(record);
            }
        }
        c = rec.next;
    }
}

/// `r`'s record for its upstream, if it has one.
///
/// # Safety
/// `r` must be a live request.
unsafe fn find(r: *const ngx_http_request_t) -> Option<*mut Record> {
    let mut found = None;
    // SAFETY: as for this function.
    let upstream = unsafe { (*r).upstream }.cast_const();
    // SAFETY: the request's live pool (this fn's contract).
    unsafe {
        each((*r).pool, |rec| {
            if found.is_none()
                && core::ptr::eq(rec.request, r)
                && core::ptr::eq(rec.upstream, upstream)
            {
                found = Some(core::ptr::from_mut(rec));
            }
        })
    };
    found
}

/// A new record for `r`, linked into its pool's cleanups (`None`: no memory).
///
/// # Safety
/// `r` must be a live request.
unsafe fn add(r: *mut ngx_http_request_t) -> Option<*mut Record> {
    // SAFETY: the request's live pool.
    let cln = unsafe { ngx_pool_cleanup_add((*r).pool, 0).as_mut() }?;
    let record = Box::into_raw(Box::new(Record {
        request: r,
        // SAFETY: as for this function.
        upstream: unsafe { (*r).upstream },
        held: Held::default(),
    }));
    RECORDS.fetch_add(1, Ordering::Relaxed);
    cln.data = record.cast();
    cln.handler = Some(dropped);
    Some(record)
}
