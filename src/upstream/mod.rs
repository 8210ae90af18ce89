//! The upstream hooks. `peer.init` (`init.rs`) asks the breaker (pass, probe or
//! short-circuit), then the adaptive limit (a slot, or shed), follows the pool's ejections
//! and wraps the balancer's callbacks; `peer.get` (here) times each attempt, sends a server
//! probe where it is due, and notes the server the balancer chose; `peer.free` (`free.rs`)
//! classifies the attempt, records it on its server's breaker, settles the request's outcome
//! (see [`settle`]), and gives the limit's slot back after the last attempt. The PRECONTENT
//! short-circuit is `precontent.rs` (which reads a body first where a client could hold the
//! probe or a slot with it: `body.rs`), asking the breaker `admit.rs`, the limit's part
//! `limit.rs`, reading an attempt's outcome `outcome.rs`; whether a retry follows and may be
//! made is `crate::retry`.
//!
//! # A request's outcome
//!
//! The (upstream, route) breaker judges what clients got: each request's final outcome,
//! once, and the attempts before it only through the servers' breakers. The free from
//! `ngx_http_upstream_finalize_request` ends the last attempt; the free from
//! `ngx_http_upstream_next` is followed by a retry exactly when [`crate::retry::follows`] says so
//! (nginx decides right after the free, on what the free can read). So the outcome is
//! settled at the free that ends the request — in the same lock hold as the attempt's
//! server record and the retry budget — and the request that crosses the threshold opens
//! the breaker, as before. Two cases settle later: a retry that finds no live server
//! (`peer.get` fails: nginx answers 502, so the previous attempt was the last), and, should
//! nginx decide otherwise than foreseen, the request's end (a pool cleanup).

mod admit;
pub mod body;
pub mod class;
mod free;
mod init;
pub mod ledger;
pub mod limit;
pub mod outcome;
pub mod precontent;
mod ramp;

use core::ffi::c_void;

use circuit_breaker_core::breaker::{Attempt, Ending, Ticket};
use nginx_sys::{
    ngx_http_request_t, ngx_int_t, ngx_peer_connection_t, ngx_uint_t, NGX_BUSY, NGX_DECLINED,
    NGX_DONE, NGX_ERROR, NGX_OK,
};

use crate::eject::{self};
use crate::request::{self, RequestState, NO_SERVER};
use circuit_breaker_shell::clock::mono_ms;
use circuit_breaker_shell::ffi::guard;

pub use admit::{log_transition, log_transition_of};
pub use init::init_peer;

/// The header filter, for a request holding the probe or a slot of the limit: the probe's
/// answer read whole (again: an origin's `X-Accel-Buffering: no`), a slot given back at a
/// streamed answer's header.
///
/// # Safety
/// `r` must be the live request, in the header filter.
pub unsafe fn header_passed(r: &mut ngx_http_request_t) {
    // SAFETY: as for this function.
    unsafe {
        init::read_probe_whole(r);
        limit::header_passed(r);
    }
}

use free::{settle, Settle};

pub(crate) fn connection_log(r: &ngx_http_request_t) -> *mut nginx_sys::ngx_log_t {
    // SAFETY: a live request has a live connection.
    unsafe { (*r.connection).log }
}

/// `peer.get` of a request short-circuited to stale: no connection at all. NGX_DECLINED
/// makes nginx take its "error" path without a log line; with tries at 0 that path serves
/// the stale entry (proxy_cache_use_stale error).
pub(crate) unsafe extern "C" fn get_stale(
    pc: *mut ngx_peer_connection_t,
    _data: *mut c_void,
) -> ngx_int_t {
    // SAFETY: nginx passes the request's live peer.
    unsafe { (*pc).tries = 0 };
    NGX_DECLINED as ngx_int_t
}

/// The wrapped `peer.get` of an upstream without a pool (no server breakers, no server
/// probes): the balancer chooses, and an attempt left pending for a retry that finds no
/// server is settled. Apart from [`get_peer`], for the closed path's cost
/// (`scripts/bench-instructions`, closed).
pub(super) unsafe extern "C" fn get_peer_unpooled(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: `data` is the state our peer.init set; pc is the request's peer.
        let state = unsafe { request::from_peer_data(data) };
        let Some(get) = state.balancer.get else {
            return NGX_ERROR as ngx_int_t;
        };
        // SAFETY: the balancer's own get with its own data.
        let rc = unsafe { get(pc, state.balancer.data) };
        if state.settlement.pending.is_some() {
            settle_no_server(state, rc);
        } else if rc == NGX_BUSY as ngx_int_t {
            settle_no_live(state);
        }
        rc
    })
}

/// The balancer found no live server for the request's first attempt ("no live upstreams":
/// every server is marked down by `max_fails`, ejected, or both): nginx answers `502` itself
/// and calls no `peer.free`, so the request's outcome is settled here, a failure of the pool
/// that no ejection explains. The request was sent nowhere: it is no first attempt of the
/// retry budget.
#[cold]
fn settle_no_live(state: &mut RequestState) {
    if let Some((zone, _)) = state.judge.zone() {
        state.attempts.counted_first = true;
        let attempt = state.judge.classify(Attempt::ended(Ending::NoLive, 0));
        settle(state, zone, &attempt, Settle::Final);
    }
}

/// A retry's `peer.get` is done: when the balancer found no server for it, nginx answers the
/// client itself, and the attempt before was the last.
#[inline]
fn settle_no_server(state: &mut RequestState, rc: ngx_int_t) {
    if let Some(pending) = state.settlement.pending.take() {
        if rc != NGX_OK as ngx_int_t && rc != NGX_DONE as ngx_int_t {
            if let Some((zone, _)) = state.judge.zone() {
                settle(state, zone, &pending, Settle::Final);
            }
        }
    }
}

/// The wrapped `peer.get` of a pool: the first attempt goes to an ejected server when its
/// probe is due; otherwise the balancer chooses, and the server it chose is noted — or, for a
/// returning server on its ramp, perhaps passed over (`ramp.rs`).
pub(super) unsafe extern "C" fn get_peer(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: `data` is the state our peer.init set; pc is the request's peer.
        let (state, pc) = unsafe { (request::from_peer_data(data), &mut *pc) };
        let Some(get) = state.balancer.get else {
            return NGX_ERROR as ngx_int_t;
        };
        state.attempts.server = NO_SERVER;
        state.attempts.started = state.attempts.started.saturating_add(1);
        // SAFETY: `srv_conf_ptr` is the upstream's `SrvConf` in the configuration this request runs
        // under, which outlives the request and its state.
        let scf = unsafe { &*state.judge.srv_conf_ptr() };
        if let Some(pool) = scf.pool.as_ref() {
            let now = mono_ms();
            if state.attempts.started == 1
                && !state.judge.uscf.is_null()
                && eject::probe_due(pool, now)
            {
                // SAFETY: `state.judge.uscf` is this request's upstream conf, set in peer.init
                // and live in a worker; `r` is the live request whose pool the copy uses.
                let claimed = state.judge.zone().and_then(|(zone, _)| unsafe {
                    eject::claim_probe(pool, zone, &*state.judge.uscf, (*state.request()).pool, now)
                });
                if let Some(p) = claimed {
                    // The try it takes is one more than the balancer counted.
                    ramp::route(state, pc, p.server, (p.sockaddr, p.socklen, p.name));
                    state.attempts.server_ticket = p.ticket;
                    if state.settlement.ticket == Ticket::Normal {
                        // The probe of the request's breaker is one attempt, wherever it goes.
                        pc.tries = pc.tries.saturating_add(1);
                    }
                    return NGX_OK as ngx_int_t;
                }
            }
        }
        // SAFETY: the balancer's own get with its own data.
        let mut rc = unsafe { get(pc, state.balancer.data) };
        let chosen = rc == NGX_OK as ngx_int_t || rc == NGX_DONE as ngx_int_t;
        if let (true, Some(pool)) = (chosen, scf.pool.as_ref()) {
            // SAFETY: the balancer just chose the peer `pc->name` names.
            state.attempts.server = unsafe { eject::server_of(pool, pc.name) }.unwrap_or(NO_SERVER);
            let now = mono_ms();
            if state.attempts.started == 1 && eject::ramping(pool, now) {
                // SAFETY: the request's state and peer, just given by the balancer's `get`.
                rc = unsafe { ramp::pick(state, pc, get, rc, pool, now) };
            }
        }
        if let (true, Some(pool)) = (
            state.attempts.started > 1 && state.attempts.passed_over != NO_SERVER,
            scf.pool.as_ref(),
        ) {
            // SAFETY: the request's state and peer, just answered by the balancer's `get`.
            rc = unsafe { ramp::retry(state, pc, rc, pool) };
        }
        if state.settlement.pending.is_some() {
            settle_no_server(state, rc);
        } else if rc == NGX_BUSY as ngx_int_t && state.attempts.started == 1 {
            settle_no_live(state);
        }
        rc
    })
}

/// The balancer's callbacks for the current attempt: none while it probes a server the
/// balancer never chose (round robin's session hooks read the peer it chose).
fn balancer_of(data: *mut c_void) -> Option<request::Balancer> {
    // SAFETY: `data` is the state our peer.init set; only copied out of.
    let state = unsafe { request::from_peer_data(data) };
    (!state.attempts.routed).then_some(state.balancer)
}

pub(super) unsafe extern "C" fn notify_peer(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
    ty: ngx_uint_t,
) {
    if let Some(b) = balancer_of(data) {
        if let Some(f) = b.notify {
            // SAFETY: the balancer's own notify with its own data.
            unsafe { f(pc, b.data, ty) };
        }
    }
}

#[cfg(ngx_ssl)]
pub(super) unsafe extern "C" fn set_session(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
) -> ngx_int_t {
    match balancer_of(data).and_then(|b| b.set_session.map(|f| (f, b.data))) {
        // SAFETY: the balancer's own hook with its own data.
        Some((f, d)) => unsafe { f(pc, d) },
        None => NGX_OK as ngx_int_t,
    }
}

#[cfg(ngx_ssl)]
pub(super) unsafe extern "C" fn save_session(pc: *mut ngx_peer_connection_t, data: *mut c_void) {
    if let Some((f, d)) = balancer_of(data).and_then(|b| b.save_session.map(|f| (f, b.data))) {
        // SAFETY: the balancer's own hook with its own data.
        unsafe { f(pc, d) };
    }
}
