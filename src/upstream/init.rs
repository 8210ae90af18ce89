//! `peer.init`: asks the breaker (pass, probe or short-circuit), then the adaptive limit (a
//! slot, or shed), follows the pool's ejections, and wraps the balancer's callbacks.

use circuit_breaker_core::breaker::{Admission, Ticket};
use circuit_breaker_core::snapshot::State;
use nginx_sys::{
    ngx_http_request_t, ngx_http_upstream_srv_conf_t, ngx_int_t, ngx_uint_t, NGX_ERROR, NGX_OK,
};
use ngx::http::HttpModuleServerConf;

use crate::conf::{Module, SrvConf};
use crate::eject::{self, Upstream};
use crate::request::{self, Label, RequestState};
use crate::respond;
use circuit_breaker_shell::clock::mono_ms;
use circuit_breaker_shell::ffi::guard;

use super::free::free_peer;
use super::{admit, connection_log, get_peer, get_peer_unpooled, get_stale, limit, notify_peer};
#[cfg(ngx_ssl)]
use super::{save_session, set_session};

/// The wrapped `peer.init`.
pub unsafe extern "C" fn init_peer(
    r: *mut ngx_http_request_t,
    us: *mut ngx_http_upstream_srv_conf_t,
) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx calls peer.init with a live request and its upstream's conf.
        unsafe { init_peer_inner(r, us) }
    })
}

/// A balancer's `peer.init`.
type InitPeer =
    unsafe extern "C" fn(*mut ngx_http_request_t, *mut ngx_http_upstream_srv_conf_t) -> ngx_int_t;

/// What `peer.init` decided, once the request's state is no longer borrowed.
enum Plan {
    Normal { probe: bool },
    Stale,
    ShortCircuit(Label, u64),
}

unsafe fn init_peer_inner(
    r: *mut ngx_http_request_t,
    us: *mut ngx_http_upstream_srv_conf_t,
) -> ngx_int_t {
    // SAFETY: `r` and `us` are the live request and upstream conf nginx passed to `init_peer`; no
    // other Rust borrow of either exists.
    let (req, uscf) = unsafe { (&mut *r, &mut *us) };
    let Some(scf) = Module::server_conf(uscf) else {
        return NGX_ERROR as ngx_int_t;
    };
    let Some(original_init) = scf.original_init else {
        return NGX_ERROR as ngx_int_t;
    };
    if scf.breaker.is_none() {
        // SAFETY: the balancer's own init, with the arguments nginx gave us.
        return unsafe { original_init(r, us) };
    }
    // The closed path first: a request the PRECONTENT phase let through, to an upstream
    // without a pool, and its limit's slot if it has one. The rest apart, for the closed
    // path's cost (`scripts/bench-instructions`, closed and closed_limit).
    if scf.pool.is_none() {
        let log = connection_log(req);
        if let Some(state) = take_passed(req, scf) {
            let state_ptr: *mut RequestState = state;
            // SAFETY: the state lives in the request pool, apart from the request; the borrow
            // of the request that found it has ended.
            let state = unsafe { &mut *state_ptr };
            if scf.presence_when_closed {
                // SAFETY: `req` is the live request this state belongs to, in peer.init.
                unsafe { super::class::note_admitted(req, state, log) };
            }
            if !limit::admit(req, state, log) {
                // SAFETY: `r` as nginx gave it; the borrow of its state has ended.
                return unsafe { shed(&mut *r, state_ptr) };
            }
            // SAFETY: `r` and `us` as nginx gave them; nothing borrowed from `req` but the
            // state (in the request pool, apart from the request) is live.
            return unsafe { init_passed(r, us, original_init, state) };
        }
    }
    // SAFETY: as for this function.
    unsafe { init_asked(r, us, scf, original_init) }
}

/// `peer.init` of any other request: asks the breaker unless the PRECONTENT phase let the
/// request through, then takes the limit's slot, follows the pool and wraps the balancer.
///
/// # Safety
/// As for [`init_peer_inner`]; `scf` is `us`'s conf and `original_init` its balancer's init.
#[inline(never)]
unsafe fn init_asked(
    r: *mut ngx_http_request_t,
    us: *mut ngx_http_upstream_srv_conf_t,
    scf: &SrvConf,
    original_init: InitPeer,
) -> ngx_int_t {
    // SAFETY: `r` and `us` are the live request and upstream conf nginx passed to `init_peer`;
    // no other Rust borrow of either exists.
    let (req, uscf) = unsafe { (&mut *r, &mut *us) };
    let log = connection_log(req);
    let me: *const ngx_http_request_t = req;
    // An upload passed on as it arrives, not yet whole: never the probe (`body.rs`).
    let body_arriving = req.reading_body() != 0;
    // A request the PRECONTENT phase let through (closed) is not asked again: it is
    // admitted, as one already in flight would be.
    let passed = take_passed(req, scf).map(core::ptr::from_mut);
    // The state lives in the request pool, apart from the request itself: held as a
    // pointer so that the request can be used again below. Every borrow made from it ends
    // before `respond::short_circuit`, whose header filter reads the state.
    let (state_ptr, answer) = match passed {
        Some(state_ptr) => {
            let pass = Admission::Pass {
                would_reject: false,
            };
            (state_ptr, Some(pass))
        }
        None => {
            let lcf = request::loc_conf(req);
            let route = request::route_of(lcf);
            // A location that always passes to this upstream remembers where its breaker
            // lives.
            let hint = lcf
                .filter(|l| core::ptr::eq(l.upstream, us))
                .map(|l| &l.hint);
            let reuse = request::here(req).is_some_and(|s| {
                s.belongs_to(me)
                    && core::ptr::eq(s.judge.srv_conf(), scf)
                    && core::ptr::eq(s.judge.route(), route)
            });
            let found = if reuse {
                request::here(req)
            } else {
                request::attach(req, scf, route)
            };
            let Some(state) = found else {
                return NGX_ERROR as ngx_int_t;
            };
            let state_ptr: *mut RequestState = state;
            // SAFETY: just found or created; no other borrow of it is live.
            let state = unsafe { &mut *state_ptr };
            state.attempts.body_arriving = body_arriving;
            // SAFETY: `req` is the live request this state belongs to, in peer.init.
            let class = unsafe { super::class::of(req, state, log) };
            let answer = admit::ask(state, hint, log, !body_arriving, class);
            (state_ptr, answer)
        }
    };
    // SAFETY: the request's state (above); the borrows made while finding it have ended.
    let state = unsafe { &mut *state_ptr };
    let dry_run = scf.breaker.is_some_and(|c| c.dry_run);
    if scf.presence_when_closed && matches!(answer, Some(Admission::Pass { .. })) {
        // SAFETY: `req` is the live request this state belongs to, in peer.init.
        unsafe { super::class::note_admitted(req, state, log) };
    }
    let plan = match answer {
        Some(Admission::Reject { retry_after_ms } | Admission::Recovering { retry_after_ms }) => {
            // SAFETY: the request and its upstream are live in peer.init.
            let u = unsafe { &*req.upstream };
            if respond::can_serve_stale(req, u) {
                Plan::Stale
            } else {
                let label = state.told.label.unwrap_or(Label::State(State::Open));
                Plan::ShortCircuit(label, retry_after_ms)
            }
        }
        Some(Admission::Probe(_)) => Plan::Normal { probe: !dry_run },
        // Closed: the adaptive limit, if any, has the last word.
        Some(Admission::Pass { .. }) if !limit::admit(req, state, log) => {
            // SAFETY: the request as nginx gave it; the borrow of its state has ended.
            return unsafe { shed(req, state_ptr) };
        }
        _ => Plan::Normal { probe: false },
    };
    // SAFETY: peer.init runs with the request's upstream set up.
    let Some(u) = (unsafe { req.upstream.as_mut() }) else {
        return NGX_ERROR as ngx_int_t;
    };
    match plan {
        Plan::ShortCircuit(label, retry_after_ms) => {
            // SAFETY: request and upstream are live; no borrow of the state is used past
            // this point (the header filter reads it).
            unsafe { respond::short_circuit(req, u, label, retry_after_ms) }
        }
        Plan::Stale => serve_stale(u, state_ptr),
        Plan::Normal { probe } => {
            // SAFETY: `state_ptr` is this request's state in its pool, live as long as the request;
            // the earlier borrow ended when the plan was made.
            let state = unsafe { &mut *state_ptr };
            state.judge.uscf = us;
            if scf.pool.is_some() {
                if let Some((zone, _)) = state.judge.zone() {
                    // SAFETY: the upstream's own conf, in a worker.
                    eject::follow(unsafe { Upstream::new(zone, scf, uscf) }, mono_ms());
                }
            }
            // SAFETY: the balancer's own init, with the arguments nginx gave us.
            let rc = unsafe { original_init(r, us) };
            if rc != NGX_OK as ngx_int_t {
                limit::release(state);
                return rc;
            }
            // SAFETY: the request's upstream, live in peer.init; the earlier borrow is not used
            // past the init. Borrowed afresh: the balancer's init wrote `r->upstream->peer`.
            let u = unsafe { &mut *(*r).upstream };
            wrap_balancer(u, state);
            if probe {
                // One probe is one attempt: no proxy_next_upstream retry on its behalf.
                u.peer.tries = 1;
                // SAFETY: the live request in peer.init, apart from its upstream.
                if !unsafe { caches(&*r) } {
                    read_whole(u);
                }
            } else {
                // Peers out of the pool are tries nginx would count but cannot make, as
                // for `server … down`.
                let out = eject::downed(scf) as ngx_uint_t;
                if out > 0 {
                    u.peer.tries = u.peer.tries.saturating_sub(out).max(1);
                }
            }
            NGX_OK as ngx_int_t
        }
    }
}

/// The probe's answer is read at the origin's pace, whatever its client does: buffered (and
/// spooled to disk past the buffers), as `proxy_buffering on` would, where the module
/// passing to the origin can buffer at all (it made an event pipe with an input filter:
/// proxy, FastCGI, uwsgi, SCGI — gRPC cannot). A client that reads slowly then holds the
/// probe no longer than the origin takes.
fn read_whole(u: &mut nginx_sys::ngx_http_upstream_t) {
    // SAFETY: null, or the pipe the content handler allocated for this upstream.
    let can_buffer = unsafe { u.pipe.as_ref() }.is_some_and(|p| p.input_filter.is_some());
    if can_buffer && u.buffering() == 0 {
        u.set_buffering(1);
    }
}

/// The probe's answer, its header about to be sent: read whole, again — an origin's
/// `X-Accel-Buffering: no` turned buffering off after `peer.init` (nginx decides how to read
/// the answer only once its header is sent).
///
/// # Safety
/// `r` must be the live request, in the header filter.
pub unsafe fn read_probe_whole(r: &mut ngx_http_request_t) {
    let probing = request::here(r).is_some_and(|s| s.settlement.ticket != Ticket::Normal);
    if !probing || caches(r) {
        return;
    }
    // SAFETY: the request's upstream, null or live while it runs.
    if let Some(u) = unsafe { r.upstream.as_mut() } {
        if !u.peer.connection.is_null() && u.header_sent() == 0 {
            read_whole(u);
        }
    }
}

/// Whether the request's answer may be cached or stored: buffering it for the probe alone
/// would cache or store that one answer where the location's others are not.
#[cfg(ngx_http_cache)]
fn caches(r: &ngx_http_request_t) -> bool {
    // SAFETY: the request's upstream, live in peer.init.
    !r.cache.is_null() || unsafe { r.upstream.as_ref() }.is_some_and(|u| u.store() != 0)
}

#[cfg(not(ngx_http_cache))]
fn caches(r: &ngx_http_request_t) -> bool {
    // SAFETY: the request's upstream, live in peer.init.
    unsafe { r.upstream.as_ref() }.is_some_and(|u| u.store() != 0)
}

/// Short-circuited to stale: the balancer is never asked (its init would only allocate),
/// and `get_stale` answers NGX_DECLINED so that nginx serves the entry.
fn serve_stale(u: &mut nginx_sys::ngx_http_upstream_t, state: *mut RequestState) -> ngx_int_t {
    u.peer.data = state.cast();
    u.peer.get = Some(get_stale);
    u.peer.free = Some(free_peer);
    u.peer.tries = 0;
    NGX_OK as ngx_int_t
}

/// The request's state when the PRECONTENT phase let it through to `scf` (closed), taken:
/// peer.init does not ask the breaker again.
#[inline(always)]
fn take_passed<'r>(req: &'r mut ngx_http_request_t, scf: &SrvConf) -> Option<&'r mut RequestState> {
    let me: *const ngx_http_request_t = req;
    let body_arriving = req.reading_body() != 0;
    let state = request::here(req)
        .filter(|s| s.told.passed && s.belongs_to(me) && core::ptr::eq(s.judge.srv_conf(), scf))?;
    state.told.passed = false;
    state.told.label = Some(Label::State(State::Closed));
    state.attempts.body_arriving = body_arriving;
    Some(state)
}

/// A request the adaptive limit shed: stale if available, else the short-circuit.
///
/// # Safety
/// `req` is the live request in `peer.init` and `state` its state, no borrow of it live.
#[cold]
#[inline(never)]
unsafe fn shed(req: &mut ngx_http_request_t, state: *mut RequestState) -> ngx_int_t {
    // SAFETY: peer.init runs with the request's upstream set up.
    let Some(u) = (unsafe { req.upstream.as_mut() }) else {
        return NGX_ERROR as ngx_int_t;
    };
    if respond::can_serve_stale(req, u) {
        return serve_stale(u, state);
    }
    // SAFETY: request and upstream are live; no borrow of the state is used past this point
    // (the header filter reads it).
    unsafe { respond::short_circuit(req, u, Label::Limited, limit::RETRY_AFTER_MS) }
}

/// `peer.init` of a request the PRECONTENT phase let through (and its limit admitted), for
/// an upstream without a pool: the balancer's init, then its callbacks wrapped (what
/// [`init_asked`] does for it).
///
/// # Safety
/// `r` and `us` must be the live request and upstream conf nginx passed to `peer.init`, and
/// `state` the request's state.
#[inline(always)]
unsafe fn init_passed(
    r: *mut ngx_http_request_t,
    us: *mut ngx_http_upstream_srv_conf_t,
    original_init: InitPeer,
    state: &mut RequestState,
) -> ngx_int_t {
    state.judge.uscf = us;
    // SAFETY: the balancer's own init, with the arguments nginx gave us.
    let rc = unsafe { original_init(r, us) };
    if rc != NGX_OK as ngx_int_t {
        limit::release(state);
        return rc;
    }
    // SAFETY: peer.init runs with the request's upstream set up; the balancer's init just
    // wrote its peer.
    match unsafe { (*r).upstream.as_mut() } {
        Some(u) => {
            wrap_balancer(u, state);
            NGX_OK as ngx_int_t
        }
        None => NGX_ERROR as ngx_int_t,
    }
}

/// Saves the balancer's callbacks in the request's state and puts ours in their place. Always
/// inlined into `peer.init`, its one caller (`scripts/bench-instructions`, closed).
#[inline(always)]
fn wrap_balancer(u: &mut nginx_sys::ngx_http_upstream_t, state: &mut RequestState) {
    let original = u.peer.data;
    let pooled = state.judge.srv_conf().pool.is_some();
    u.peer.data = core::ptr::from_mut(state).cast();
    let b = &mut state.balancer;
    b.get = u.peer.get;
    b.free = u.peer.free;
    b.notify = u.peer.notify;
    b.data = original;
    u.peer.get = Some(if pooled { get_peer } else { get_peer_unpooled });
    u.peer.free = Some(free_peer);
    if b.notify.is_some() {
        u.peer.notify = Some(notify_peer);
    }
    #[cfg(ngx_ssl)]
    {
        b.set_session = u.peer.set_session;
        b.save_session = u.peer.save_session;
        u.peer.set_session = Some(set_session);
        u.peer.save_session = Some(save_session);
    }
}
