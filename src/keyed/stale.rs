//! An open key's answer from the cache. A location that caches answers for a key whose breaker
//! is open (or whose ramp turns the request away) with what its cache holds — a fresh entry, or
//! an expired one where `proxy_cache_use_stale error` (or the entry's `stale-if-error`) allows
//! — and with the `503` only when the cache has nothing to give; the origin is never asked.
//!
//! The upstream module looks its cache up itself, after its content handler made the request's
//! upstream and before it picks a server, and nothing public runs in between. So the PRECONTENT
//! phase runs the location's content handler itself (the phases' other handlers, `mirror` and
//! `try_files`, are skipped as they are for the `503`), with `r->aio` set, which makes
//! `ngx_http_upstream_init_request` return at once (as it does while a cache read is in
//! flight); the upstream, made but not started, is then given a conf whose `upstream` is a
//! balancer of ours (and whose background updates are off) and started again. The lookup runs
//! as ever, now or once a threaded read completes, and where a server would be chosen our
//! `peer.init` serves the stale entry or answers `503`. Only a location known to make an
//! upstream with a cache takes this path — known from the configuration when the location's
//! own `proxy_pass` (`grpc_pass`, `fastcgi_pass`, `uwsgi_pass`, `scgi_pass`) set its handler,
//! else learned per worker from its requests — and only a request whose body nginx already has
//! or needs none; the others get the `503` at once.

use core::cell::Cell;
use core::ptr::{null_mut, NonNull};

use nginx_sys::{
    ngx_http_finalize_request, ngx_http_request_t, ngx_http_upstream_conf_t,
    ngx_http_upstream_srv_conf_t, ngx_int_t, ngx_palloc, ngx_peer_connection_t, ngx_uint_t,
    NGX_DONE, NGX_ERROR, NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_OK,
};

use super::{hold_of, Hold};
use crate::conf::{Learned, LocConf};
use crate::request::Label;
use crate::respond;
use circuit_breaker_shell::ffi::guard;

/// An open key's answer, kept in the request's hold until the cache (or the `503`) gives it.
#[derive(Clone, Copy)]
pub struct Stale {
    pub label: Label,
    pub retry_after_ms: u64,
    /// `X-Circuit-State` is still to be added to the answer.
    pub header_due: bool,
}

/// Holds whose `X-Circuit-State` is still due in this worker: without one, the header filter
/// has nothing to add.
pub static DUE: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

/// Whether an open key's request of this location may be answered from its cache.
pub fn may_answer(req: &ngx_http_request_t, learned: &Cell<Learned>) -> bool {
    learned.get() == Learned::Caches && req.content_handler.is_some() && body_settled(req)
}

/// nginx has the request's body, or it has none: `ngx_http_read_client_request_body` then
/// calls its handler before it returns.
fn body_settled(req: &ngx_http_request_t) -> bool {
    let none = req.headers_in.chunked() == 0
        && (req.headers_in.content_length_n < 0
            || (req.headers_in.content_length_n == 0
                && req.http_version < nginx_sys::NGX_HTTP_VERSION_20 as ngx_uint_t));
    (!req.request_body.is_null() && req.reading_body() == 0) || req.discard_body() != 0 || none
}

/// Answers `req` from its location's cache, the hold `h` (already the request's) keeping what
/// the key said: runs the location's content handler as the content phase would, and
/// finalizes the request with what it returns. For the PRECONTENT phase to return.
pub fn answer(
    req: &mut ngx_http_request_t,
    h: NonNull<Hold>,
    label: Label,
    retry_after_ms: u64,
) -> ngx_int_t {
    // SAFETY: the request's hold, live until its pool is destroyed; borrowed only here.
    unsafe {
        (*h.as_ptr()).stale = Some(Stale {
            label,
            retry_after_ms,
            header_due: true,
        })
    };
    DUE.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    run(req, h, Towards::Stale)
}

/// Sends the key's probe `req` (its hold `h`) through a location that caches with background
/// updates off: an expired entry is then refreshed by the probe itself, whose outcome judges
/// the key, rather than by a background subrequest no breaker counts (the next request would
/// be the probe again, and every one would reach the origin).
pub fn probe(req: &mut ngx_http_request_t, h: NonNull<Hold>) -> ngx_int_t {
    run(req, h, Towards::Origin)
}

/// Where a held-back upstream goes once started.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Towards {
    /// To [`init`]: the cache's answer or the `503`.
    Stale,
    /// To the origin, as the location says, without background updates.
    Origin,
}

/// Runs the location's content handler for `req` as the content phase would, its upstream held
/// back and sent `towards`, and finalizes the request with what the handler returns.
fn run(req: &mut ngx_http_request_t, h: NonNull<Hold>, towards: Towards) -> ngx_int_t {
    let Some(handler) = req.content_handler else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    req.write_event_handler = Some(nginx_sys::ngx_http_request_empty_handler);
    let r: *mut ngx_http_request_t = req;
    // SAFETY: the live request in its PRECONTENT phase, its location's own handler; no borrow
    // of the request is used past here.
    let rc = unsafe { content(r, handler, h, towards) };
    // SAFETY: as the content phase does with its handler's code.
    unsafe { ngx_http_finalize_request(r, rc) };
    NGX_DONE as ngx_int_t
}

/// Learns, from a request of the location `h` judged that its own content handler served,
/// whether that handler makes an upstream with a cache.
pub fn learn(req: &ngx_http_request_t, h: &Hold) {
    // SAFETY: the location conf the hold names lives as long as the configuration.
    let Some(lcf) = (unsafe { h.lcf.as_ref() }) else {
        return;
    };
    if lcf.keyed_cache.get() != Learned::Unknown || h.stale.is_some() {
        return;
    }
    let same_handler = match (req.content_handler, h.handler) {
        (Some(a), Some(b)) => a as usize == b as usize,
        _ => false,
    };
    if !same_handler || !request_in(req, lcf) {
        return;
    }
    // SAFETY: null, or the request's upstream, live with the request; its conf is the
    // location's, live as long as the configuration.
    let Some(ucf) = (unsafe { req.upstream.as_ref().and_then(|u| u.conf.as_ref()) }) else {
        return;
    };
    lcf.learn_cache(ucf);
}

/// The request is still in the location `lcf` (no redirect moved it on).
fn request_in(req: &ngx_http_request_t, lcf: &LocConf) -> bool {
    crate::request::loc_conf(req).is_some_and(|l| core::ptr::eq(l, lcf))
}

/// The location's content handler, with its upstream held back, then given a conf of its own
/// and started.
///
/// # Safety
/// `r` is a live request in the PRECONTENT phase, `handler` its location's content handler,
/// and `h` its hold (which nginx's calls below may reach too: it is only borrowed between
/// them).
unsafe fn content(
    r: *mut ngx_http_request_t,
    handler: unsafe extern "C" fn(*mut ngx_http_request_t) -> ngx_int_t,
    h: NonNull<Hold>,
    towards: Towards,
) -> ngx_int_t {
    // SAFETY: a live request; `aio` is only read by nginx on this thread, and put back as it
    // was before anything else runs.
    let aio = unsafe { (*r).aio() };
    // SAFETY: as above.
    unsafe { (*r).set_aio(1) };
    // SAFETY: the location's own content handler, with the request it was meant for.
    let rc = unsafe { handler(r) };
    // SAFETY: as above.
    unsafe { (*r).set_aio(aio) };
    // SAFETY: a live request.
    let req = unsafe { &mut *r };
    // SAFETY: null or the upstream the handler made, live with the request.
    let u = unsafe { req.upstream.as_ref() };
    let held_back = u.is_some_and(|u| u.cleanup.is_null() && !u.conf.is_null());
    if rc != NGX_DONE as ngx_int_t || !held_back || req.done() != 0 {
        // No upstream left waiting (an error, a handler that made none, or a request nginx
        // finalized meanwhile).
        return rc;
    }
    // Its own conf whenever it starts: now, or when a body still arriving has.
    // SAFETY: the request's upstream, checked above; not started.
    match unsafe { own_conf(req, towards) } {
        // SAFETY: the request's hold, live until its pool is destroyed; borrowed only here.
        Some(conf) => unsafe { (*h.as_ptr()).own_conf = conf.cast() },
        None => {
            // As the upstream module does when it cannot start: the reference the body read
            // took is released by the NGX_DONE returned.
            // SAFETY: a live request.
            unsafe { ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t) };
            return rc;
        }
    }
    // Started now only when nginx has the whole body (as `body_settled` made sure): a body
    // still arriving starts it when it has arrived, into the conf given above.
    // SAFETY: null, or the request's body, live with the request.
    let body_done = unsafe { req.request_body.as_ref() }.map_or(true, |b| b.rest <= 0);
    if body_done && req.reading_body() == 0 {
        // SAFETY: an upstream made by its module and not started; its body is read.
        unsafe { nginx_sys::ngx_http_upstream_init(r) };
    }
    rc
}

/// Gives the request's upstream a conf of its own without background updates (one would ask
/// the origin, and no breaker counts it) and, `towards` [`Towards::Stale`], whose balancer is
/// [`init`]'s, with no resolved address: nginx then asks `init` where it would pick a server.
/// Returns the conf.
///
/// # Safety
/// `req.upstream` is live, with its conf, and not started.
unsafe fn own_conf(
    req: &mut ngx_http_request_t,
    towards: Towards,
) -> Option<*mut ngx_http_upstream_conf_t> {
    let lcf = crate::request::loc_conf(req)?;
    // SAFETY: set when merging from the main conf, which outlives every request.
    let mcf = unsafe { lcf.main.as_ref() }?;
    // Made at configuration when a location has a keyed breaker; lives as long as it.
    let uscf = Some(mcf.keyed_stale_upstream).filter(|u| !u.is_null())?;
    let size = core::mem::size_of::<ngx_http_upstream_conf_t>();
    // SAFETY: the request pool is live.
    let conf = unsafe { ngx_palloc(req.pool, size) }.cast::<ngx_http_upstream_conf_t>();
    if conf.is_null() {
        return None;
    }
    // SAFETY: the upstream is live (this fn's contract); `conf` has room for one conf, apart
    // from the one copied.
    unsafe {
        let u = &mut *req.upstream;
        core::ptr::copy_nonoverlapping(u.conf, conf, 1);
        #[cfg(ngx_http_cache)]
        {
            (*conf).cache_background_update = 0;
        }
        if towards == Towards::Stale {
            (*conf).upstream = uscf;
            u.resolved = null_mut();
        }
        u.conf = conf;
    }
    Some(conf)
}

/// Makes the balancer [`own_conf`] points an open key's requests at.
///
/// # Safety
/// `pool` is the configuration's pool.
pub unsafe fn make_upstream(pool: *mut nginx_sys::ngx_pool_t) -> *mut ngx_http_upstream_srv_conf_t {
    let size = core::mem::size_of::<ngx_http_upstream_srv_conf_t>();
    // SAFETY: the configuration's pool is live (this fn's contract).
    let uscf = unsafe { nginx_sys::ngx_pcalloc(pool, size) }.cast::<ngx_http_upstream_srv_conf_t>();
    // SAFETY: null or a zeroed conf of ours.
    if let Some(u) = unsafe { uscf.as_mut() } {
        u.peer.init = Some(init);
    }
    uscf
}

/// `peer.init` of an open key's request whose cache did not answer it: the stale entry if
/// nginx may serve it, else the key's `503`.
unsafe extern "C" fn init(
    r: *mut ngx_http_request_t,
    _us: *mut ngx_http_upstream_srv_conf_t,
) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx calls peer.init with a live request and its upstream.
        let req = unsafe { &mut *r };
        // SAFETY: as above.
        let Some(u) = (unsafe { req.upstream.as_mut() }) else {
            return NGX_ERROR as ngx_int_t;
        };
        let Some(mut h) = hold_of(req) else {
            return NGX_ERROR as ngx_int_t;
        };
        // SAFETY: the hold lives until the request pool is destroyed; nothing else borrows it meanwhile.
        let h = unsafe { h.as_mut() };
        let Some(stale) = h.stale.as_mut() else {
            return NGX_ERROR as ngx_int_t;
        };
        if respond::can_serve_stale(req, u) {
            u.peer.data = null_mut();
            u.peer.get = Some(crate::upstream::get_stale);
            u.peer.free = Some(free_none);
            u.peer.tries = 0;
            return NGX_OK as ngx_int_t;
        }
        let (label, retry_after_ms) = (stale.label, stale.retry_after_ms);
        // The short-circuit adds the header itself.
        header_written(stale);
        // SAFETY: the live request and its upstream, in peer.init; the hold is not used again.
        unsafe { respond::short_circuit(req, u, label, retry_after_ms) }
    })
}

/// `X-Circuit-State` is no longer due for this answer.
pub fn header_written(stale: &mut Stale) {
    if core::mem::replace(&mut stale.header_due, false) {
        DUE.fetch_sub(1, core::sync::atomic::Ordering::Relaxed);
    }
}

/// Adds `X-Circuit-State` to the stale answer, if still due (a fresh entry's answer, which
/// the origin would not have been asked for either, gets none).
pub fn add_header(req: &mut ngx_http_request_t, stale: &mut Stale) {
    if !stale.header_due || !answered_stale(req) {
        return;
    }
    header_written(stale);
    respond::push_header(
        &mut req.headers_out.headers,
        "X-Circuit-State",
        respond::static_value(stale.label.name()),
    );
}

#[cfg(ngx_http_cache)]
fn answered_stale(req: &ngx_http_request_t) -> bool {
    // SAFETY: null or the request's upstream, live with the request.
    unsafe { req.upstream.as_ref() }
        .is_some_and(|u| u.cache_status() == nginx_sys::NGX_HTTP_CACHE_STALE)
}

#[cfg(not(ngx_http_cache))]
fn answered_stale(_req: &ngx_http_request_t) -> bool {
    false
}

/// `peer.free` of an answer from the cache: no server was taken.
unsafe extern "C" fn free_none(
    _pc: *mut ngx_peer_connection_t,
    _data: *mut core::ffi::c_void,
    _state: nginx_sys::ngx_uint_t,
) {
}
