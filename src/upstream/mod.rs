//! The upstream hooks. `peer.init` asks the breaker (pass, probe or short-circuit), then the
//! adaptive limit (a slot, or shed), and wraps the balancer's callbacks; `peer.get` times each
//! attempt; `peer.free` classifies and records it, stops retries once the breaker is no longer
//! closed, and gives the limit's slot back after the last attempt.

mod admit;
mod limit;
mod outcome;
pub mod precontent;

use core::cell::Cell;
use core::ffi::c_void;

use circuit_breaker_core::breaker::{Admission, Ending, Ticket};
use circuit_breaker_core::snapshot::State;
use nginx_sys::{
    ngx_current_msec, ngx_http_request_t, ngx_http_upstream_srv_conf_t, ngx_int_t,
    ngx_peer_connection_t, ngx_uint_t, NGX_DECLINED, NGX_ERROR, NGX_LOG_ERR, NGX_OK,
};
use ngx::http::HttpModuleServerConf;

use crate::clock::{mono_ms, rnd};
use crate::conf::Module;
use crate::ffi::guard;
use crate::request::{self, Label, RequestState};
use crate::respond;

pub use admit::log_transition;

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
    // SAFETY: per the caller.
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
    let lcf = request::loc_conf(req);
    let route = request::route_of(lcf);
    // A location that always passes to this upstream remembers where its breaker lives.
    let hint = lcf
        .filter(|l| core::ptr::eq(l.upstream, us))
        .map(|l| &l.hint);
    let log = connection_log(req);
    let passed_early = request::take_passed(req);
    let me: *const ngx_http_request_t = req;
    let reuse = request::here(req).is_some_and(|s| {
        s.belongs_to(me) && core::ptr::eq(s.srv_conf(), scf) && core::ptr::eq(s.route(), route)
    });
    let found = if reuse {
        request::here(req)
    } else {
        request::attach(req, scf, route)
    };
    let Some(state) = found else {
        return NGX_ERROR as ngx_int_t;
    };
    // The state lives in the request pool, apart from the request itself: held as a
    // pointer so that the request can be used again below. Every borrow made from it ends
    // before `respond::short_circuit`, whose header filter reads the state.
    let state_ptr: *mut RequestState = state;
    // SAFETY: just found or created; no other borrow of it is live.
    let state = unsafe { &mut *state_ptr };
    let dry_run = scf.breaker.is_some_and(|c| c.dry_run);
    // A request the PRECONTENT phase let through (closed) is not asked again: it is
    // admitted, as one already in flight would be.
    let answer = if passed_early {
        state.handle = hint.map_or(state.handle, Cell::get);
        state.label = Some(Label::State(State::Closed));
        Some(Admission::Pass {
            would_reject: false,
        })
    } else {
        admit::ask(state, hint, log)
    };
    let plan = match answer {
        Some(Admission::Reject { retry_after_ms } | Admission::Recovering { retry_after_ms }) => {
            // SAFETY: the request and its upstream are live in peer.init.
            let u = unsafe { &*req.upstream };
            if respond::can_serve_stale(req, u) {
                Plan::Stale
            } else {
                let label = state.label.unwrap_or(Label::State(State::Open));
                Plan::ShortCircuit(label, retry_after_ms)
            }
        }
        Some(Admission::Probe(_)) => Plan::Normal { probe: !dry_run },
        // Closed: the adaptive limit, if any, has the last word.
        Some(Admission::Pass { .. }) if !limit::admit(state, log) => {
            // SAFETY: the request and its upstream are live in peer.init.
            if respond::can_serve_stale(req, unsafe { &*req.upstream }) {
                Plan::Stale
            } else {
                Plan::ShortCircuit(Label::Limited, limit::RETRY_AFTER_MS)
            }
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
        Plan::Stale => {
            // Short-circuited to stale: the balancer is never asked (its init would only
            // allocate), and get_peer answers NGX_DECLINED so that nginx serves the entry.
            // SAFETY: the state lives in the request pool; no other borrow of it is live.
            unsafe { (*state_ptr).stale = true };
            u.peer.data = state_ptr.cast();
            u.peer.get = Some(get_peer);
            u.peer.free = Some(free_peer);
            u.peer.tries = 0;
            NGX_OK as ngx_int_t
        }
        Plan::Normal { probe } => {
            // SAFETY: the balancer's own init, with the arguments nginx gave us.
            let rc = unsafe { original_init(r, us) };
            // SAFETY: as above.
            let state = unsafe { &mut *state_ptr };
            if rc != NGX_OK as ngx_int_t {
                limit::release(state);
                return rc;
            }
            wrap_balancer(u, state);
            if probe {
                // One probe is one attempt: no proxy_next_upstream retry on its behalf.
                u.peer.tries = 1;
            }
            NGX_OK as ngx_int_t
        }
    }
}

/// Saves the balancer's callbacks in the request's state and puts ours in their place.
fn wrap_balancer(u: &mut nginx_sys::ngx_http_upstream_t, state: &mut RequestState) {
    let original = u.peer.data;
    u.peer.data = core::ptr::from_mut(state).cast();
    let b = &mut state.balancer;
    b.get = u.peer.get;
    b.free = u.peer.free;
    b.notify = u.peer.notify;
    b.data = original;
    u.peer.get = Some(get_peer);
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

fn connection_log(r: &ngx_http_request_t) -> *mut nginx_sys::ngx_log_t {
    // SAFETY: a live request has a live connection.
    unsafe { (*r.connection).log }
}

/// The wrapped `peer.get`: no connection at all while short-circuited to stale.
unsafe extern "C" fn get_peer(pc: *mut ngx_peer_connection_t, data: *mut c_void) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: `data` is the state our peer.init set; pc is the request's peer.
        let (state, pc) = unsafe { (request::from_peer_data(data), &mut *pc) };
        if state.stale {
            // NGX_DECLINED makes nginx take its "error" path without a log line; with
            // tries at 0 that path serves the stale entry (proxy_cache_use_stale error).
            pc.tries = 0;
            return NGX_DECLINED as ngx_int_t;
        }
        let Some(get) = state.balancer.get else {
            return NGX_ERROR as ngx_int_t;
        };
        // SAFETY: a plain integer nginx's event loop maintains.
        state.attempt_started = unsafe { ngx_current_msec };
        // SAFETY: the balancer's own get with its own data.
        unsafe { get(pc, state.balancer.data) }
    })
}

/// The wrapped `peer.free`: records the attempt's outcome, then stops retries when the
/// breaker is no longer closed, and gives the limit's slot back after the last attempt.
unsafe extern "C" fn free_peer(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
    ngx_state: ngx_uint_t,
) {
    guard((), || {
        // SAFETY: as in get_peer.
        let (state, pcr) = unsafe { (request::from_peer_data(data), &mut *pc) };
        // SAFETY: the request owning this state is live during free.
        let req = unsafe { &*state.request() };
        // SAFETY: as above; ngx_current_msec is a plain integer.
        let elapsed = unsafe { ngx_current_msec }.saturating_sub(state.attempt_started) as u64;
        // SAFETY: the request's upstream is live during free.
        let u = unsafe { &*req.upstream };
        // SAFETY: as above.
        let outcome = unsafe { outcome::classify(u, pcr, ngx_state, elapsed) };
        if let Some(free) = state.balancer.free {
            // SAFETY: the balancer's own free with its own data.
            unsafe { free(pc, state.balancer.data, ngx_state) };
        }
        if outcome.free_retry {
            // nginx gives this try back; the probe ticket, if any, goes with the retry, and
            // so does the limit's slot.
            return;
        }
        record(state, req, pcr, &outcome);
        // SAFETY: request, upstream and peer are live in peer.free.
        unsafe { limit::attempt_ended(state, req, u, pcr, ngx_state, &outcome.attempt) };
    })
}

/// Records an attempt's outcome in its breaker (a success of a closed breaker without the
/// lock); no retries once the breaker is no longer closed.
fn record(
    state: &mut RequestState,
    req: &ngx_http_request_t,
    pcr: &mut ngx_peer_connection_t,
    outcome: &outcome::Outcome,
) {
    let Some((zone, _)) = state.zone() else {
        return;
    };
    let now = mono_ms();
    if state.ticket == Ticket::Normal && is_success(state, &outcome.attempt) {
        let ms = outcome.attempt.response_ms;
        if zone.add_success(state.handle, state.key_hash, now, ms) {
            return;
        }
    }
    let ticket = core::mem::replace(&mut state.ticket, Ticket::Normal);
    let recorded = {
        let mut locked = zone.lock();
        let Some(mut b) = locked.get(state.handle, state.key_hash) else {
            return;
        };
        b.record(now, rnd(), ticket, &outcome.attempt, true)
    };
    let log = connection_log(req);
    if outcome.attempt.ending == Ending::Tls {
        ngx::ngx_log_error!(
            NGX_LOG_ERR,
            log,
            "circuit breaker \"{}\": TLS failure with the upstream, counted apart, not as an origin failure",
            state.name()
        );
    }
    if let Some(t) = &recorded.transition {
        log_transition(log, &state.name(), t);
    }
    state.label = Some(Label::State(recorded.state));
    let dry_run = state.srv_conf().breaker.is_some_and(|c| c.dry_run);
    if recorded.state != State::Closed && !dry_run {
        // No proxy_next_upstream retries while open or half-open.
        pcr.tries = 0;
    }
}

/// An attempt that counts, neither failed nor was slow, by the upstream's classes.
fn is_success(state: &RequestState, a: &circuit_breaker_core::breaker::Attempt) -> bool {
    let Some(cfg) = state.srv_conf().breaker.as_ref() else {
        return false;
    };
    if a.ending != Ending::Response || (cfg.slow_ms > 0 && a.response_ms > u64::from(cfg.slow_ms)) {
        return false;
    }
    let v = circuit_breaker_core::breaker::classify(a, cfg);
    v.counted && !v.failure && !v.slow && !v.tls
}

unsafe extern "C" fn notify_peer(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
    ty: ngx_uint_t,
) {
    // SAFETY: our state; the balancer's own notify with its own data.
    unsafe {
        let b = request::from_peer_data(data).balancer;
        if let Some(f) = b.notify {
            f(pc, b.data, ty);
        }
    }
}

#[cfg(ngx_ssl)]
unsafe extern "C" fn set_session(pc: *mut ngx_peer_connection_t, data: *mut c_void) -> ngx_int_t {
    // SAFETY: as in notify_peer.
    unsafe {
        let b = request::from_peer_data(data).balancer;
        match b.set_session {
            Some(f) => f(pc, b.data),
            None => NGX_OK as ngx_int_t,
        }
    }
}

#[cfg(ngx_ssl)]
unsafe extern "C" fn save_session(pc: *mut ngx_peer_connection_t, data: *mut c_void) {
    // SAFETY: as in notify_peer.
    unsafe {
        let b = request::from_peer_data(data).balancer;
        if let Some(f) = b.save_session {
            f(pc, b.data);
        }
    }
}
