//! The upstream hooks. `peer.init` asks the breaker (pass, probe or short-circuit), then the
//! adaptive limit (a slot, or shed), follows the pool's ejections and wraps the balancer's
//! callbacks; `peer.get` times each attempt, sends a server probe where it is due, and notes
//! the server the balancer chose; `peer.free` classifies the attempt, records it on its
//! server's breaker, settles the request's verdict (see [`settle`]), and gives the limit's
//! slot back after the last attempt.
//!
//! # A request's verdict
//!
//! The (upstream, route) breaker judges what clients got: each request's final outcome,
//! once, and the attempts before it only through the servers' breakers. The free from
//! `ngx_http_upstream_finalize_request` ends the last attempt; the free from
//! `ngx_http_upstream_next` is followed by a retry exactly when [`retry::follows`] says so
//! (nginx decides right after the free, on what the free can read). So the verdict is
//! recorded at the free that ends the request — in the same lock hold as the attempt's
//! server record and the retry budget — and the request that crosses the threshold opens
//! the breaker, as before. Two cases settle later: a retry that finds no live server
//! (`peer.get` fails: nginx answers 502, so the previous attempt was the last), and, should
//! nginx decide otherwise than foreseen, the request's end (a pool cleanup).

mod admit;
mod limit;
mod outcome;
pub mod precontent;
mod retry;

use core::ffi::c_void;

use circuit_breaker_core::breaker::{Admission, Attempt, Ending, Ticket};
use circuit_breaker_core::snapshot::State;
use nginx_sys::{
    ngx_current_msec, ngx_http_request_t, ngx_http_upstream_srv_conf_t, ngx_int_t,
    ngx_peer_connection_t, ngx_pool_cleanup_add, ngx_uint_t, NGX_DECLINED, NGX_DONE, NGX_ERROR,
    NGX_LOG_ERR, NGX_OK, NGX_PEER_FAILED, NGX_PEER_NEXT,
};
use ngx::http::HttpModuleServerConf;

use crate::clock::{mono_ms, rnd};
use crate::conf::{Module, SrvConf};
use crate::eject::{self, Upstream};
use crate::ffi::guard;
use crate::request::{self, Label, RequestState, NO_SERVER};
use crate::respond;
use crate::zone::Zone;

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
    let me: *const ngx_http_request_t = req;
    // The closed path first: a request the PRECONTENT phase let through, to an upstream
    // with neither a limit nor a pool. The rest apart: 20 instructions per closed request
    // less (`scripts/bench-instructions`, closed).
    if scf.limit.is_none() && scf.pool.is_none() {
        let passed = request::here(req)
            .filter(|s| s.passed && s.belongs_to(me) && core::ptr::eq(s.srv_conf(), scf));
        if let Some(state) = passed {
            state.passed = false;
            state.label = Some(Label::State(State::Closed));
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
    // A request the PRECONTENT phase let through (closed) is not asked again: it is
    // admitted, as one already in flight would be.
    let passed = request::here(req)
        .filter(|s| s.passed && s.belongs_to(me) && core::ptr::eq(s.srv_conf(), scf))
        .map(core::ptr::from_mut);
    // The state lives in the request pool, apart from the request itself: held as a
    // pointer so that the request can be used again below. Every borrow made from it ends
    // before `respond::short_circuit`, whose header filter reads the state.
    let (state_ptr, answer) = match passed {
        Some(state_ptr) => {
            // SAFETY: the request's own state, found just above; no other borrow of it is live.
            let state = unsafe { &mut *state_ptr };
            state.passed = false;
            state.label = Some(Label::State(State::Closed));
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
                    && core::ptr::eq(s.srv_conf(), scf)
                    && core::ptr::eq(s.route(), route)
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
            let answer = admit::ask(unsafe { &mut *state_ptr }, hint, log);
            (state_ptr, answer)
        }
    };
    // SAFETY: the request's state (above); the borrows made while finding it have ended.
    let state = unsafe { &mut *state_ptr };
    let dry_run = scf.breaker.is_some_and(|c| c.dry_run);
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
            // allocate), and `get_stale` answers NGX_DECLINED so that nginx serves the entry.
            u.peer.data = state_ptr.cast();
            u.peer.get = Some(get_stale);
            u.peer.free = Some(free_peer);
            u.peer.tries = 0;
            NGX_OK as ngx_int_t
        }
        Plan::Normal { probe } => {
            // SAFETY: `state_ptr` is this request's state in its pool, live as long as the request;
            // the earlier borrow ended when the plan was made.
            let state = unsafe { &mut *state_ptr };
            state.uscf = us;
            if scf.pool.is_some() {
                if let Some((zone, _)) = state.zone() {
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
            // SAFETY: the request's upstream, live in peer.init; the borrow taken before the
            // init is not used past it. Borrowed afresh: the balancer's init wrote
            // `r->upstream->peer`.
            let u = unsafe { &mut *(*r).upstream };
            wrap_balancer(u, state);
            if probe {
                // One probe is one attempt: no proxy_next_upstream retry on its behalf.
                u.peer.tries = 1;
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

/// `peer.init` of a request the PRECONTENT phase let through, for an upstream with neither
/// an adaptive limit nor a pool: the balancer's init, then its callbacks wrapped (what
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
    state.uscf = us;
    // SAFETY: the balancer's own init, with the arguments nginx gave us.
    let rc = unsafe { original_init(r, us) };
    if rc != NGX_OK as ngx_int_t {
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
/// inlined into `peer.init`, its one caller: 6 instructions per request less
/// (`scripts/bench-instructions`, closed).
#[inline(always)]
fn wrap_balancer(u: &mut nginx_sys::ngx_http_upstream_t, state: &mut RequestState) {
    let original = u.peer.data;
    let pooled = state.srv_conf().pool.is_some();
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

fn connection_log(r: &ngx_http_request_t) -> *mut nginx_sys::ngx_log_t {
    // SAFETY: a live request has a live connection.
    unsafe { (*r.connection).log }
}

/// `peer.get` of a request short-circuited to stale: no connection at all. NGX_DECLINED
/// makes nginx take its "error" path without a log line; with tries at 0 that path serves
/// the stale entry (proxy_cache_use_stale error).
unsafe extern "C" fn get_stale(pc: *mut ngx_peer_connection_t, _data: *mut c_void) -> ngx_int_t {
    // SAFETY: nginx passes the request's live peer.
    unsafe { (*pc).tries = 0 };
    NGX_DECLINED as ngx_int_t
}

/// The wrapped `peer.get` of an upstream without a pool (no server breakers, no server
/// probes): the balancer chooses, and a verdict left pending by a retry that finds no
/// server is settled. Apart from [`get_peer`]: 26 instructions per closed request less
/// (`scripts/bench-instructions`, closed).
unsafe extern "C" fn get_peer_unpooled(
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
        if state.pending.is_some() {
            settle_no_server(state, rc);
        }
        rc
    })
}

/// A retry's `peer.get` is done: when the balancer found no server for it, nginx answers the
/// client itself, and the attempt before was the last.
#[inline]
fn settle_no_server(state: &mut RequestState, rc: ngx_int_t) {
    if let Some(pending) = state.pending.take() {
        if rc != NGX_OK as ngx_int_t && rc != NGX_DONE as ngx_int_t {
            if let Some((zone, _)) = state.zone() {
                settle(state, zone, &pending, Settle::Final);
            }
        }
    }
}

/// The wrapped `peer.get` of a pool: the first attempt goes to an ejected server when its
/// probe is due; otherwise the balancer chooses, and the server it chose is noted.
unsafe extern "C" fn get_peer(pc: *mut ngx_peer_connection_t, data: *mut c_void) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: `data` is the state our peer.init set; pc is the request's peer.
        let (state, pc) = unsafe { (request::from_peer_data(data), &mut *pc) };
        let Some(get) = state.balancer.get else {
            return NGX_ERROR as ngx_int_t;
        };
        state.server = NO_SERVER;
        state.attempts = state.attempts.saturating_add(1);
        // SAFETY: `srv_conf_ptr` is the upstream's `SrvConf` in the configuration this request runs
        // under, which outlives the request and its state.
        let scf = unsafe { &*state.srv_conf_ptr() };
        if let Some(pool) = scf.pool.as_ref() {
            let now = mono_ms();
            if state.attempts == 1
                && state.ticket == Ticket::Normal
                && !state.uscf.is_null()
                && eject::probe_due(pool, now)
            {
                // SAFETY: `state.uscf` is this request's upstream conf, set in peer.init
                // and live in a worker; `r` is the live request whose pool the copy uses.
                let claimed = state.zone().and_then(|(zone, _)| unsafe {
                    eject::claim_probe(pool, zone, &*state.uscf, (*state.request()).pool, now)
                });
                if let Some(p) = claimed {
                    // The balancer never sees this attempt: its free is not called for it,
                    // and the try it takes is one more than the balancer counted.
                    state.server = p.server;
                    state.server_ticket = p.ticket;
                    state.probing = true;
                    pc.sockaddr = p.sockaddr;
                    pc.socklen = p.socklen;
                    pc.name = p.name;
                    pc.set_cached(0);
                    pc.connection = core::ptr::null_mut();
                    pc.tries = pc.tries.saturating_add(1);
                    return NGX_OK as ngx_int_t;
                }
            }
        }
        // SAFETY: the balancer's own get with its own data.
        let rc = unsafe { get(pc, state.balancer.data) };
        settle_no_server(state, rc);
        let chosen = rc == NGX_OK as ngx_int_t || rc == NGX_DONE as ngx_int_t;
        if let (true, Some(pool)) = (chosen, scf.pool.as_ref()) {
            // SAFETY: the balancer just chose the peer `pc->name` names.
            state.server = unsafe { eject::server_of(pool, pc.name) }.unwrap_or(NO_SERVER);
        }
        rc
    })
}

/// The wrapped `peer.free`: classifies the attempt, records it on its server's breaker,
/// settles the request's verdict (see the module's documentation), and gives the limit's
/// slot back after the last attempt.
unsafe extern "C" fn free_peer(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
    ngx_state: ngx_uint_t,
) {
    guard((), || {
        // SAFETY: nginx calls peer.free with the `peer.data` our peer.init set (no other borrow of
        // that state is live while a hook runs) and the request's live peer.
        let (state, pcr) = unsafe { (request::from_peer_data(data), &mut *pc) };
        // The closed path first: the free from the request's finalization (no retry follows,
        // no TLS failure) of an attempt the balancer chose, holding no limit's slot. The rest
        // apart: 31 instructions per closed request less (`scripts/bench-instructions`, closed).
        if ngx_state == 0 && !state.probing && !state.limit.is_held() {
            // SAFETY: as for this function.
            unsafe { free_final(state, pcr) };
        } else {
            // SAFETY: as for this function.
            unsafe { free_any(state, pcr, ngx_state) };
        }
    })
}

/// [`free_peer`] of the last attempt, chosen by the balancer, holding no limit's slot: what
/// [`free_any`] does for it.
///
/// # Safety
/// `state` is the request's state and `pcr` its live peer, in `peer.free`.
#[inline(always)]
unsafe fn free_final(state: &mut RequestState, pcr: &mut ngx_peer_connection_t) {
    // SAFETY: the request owning this state is live during free.
    let req = unsafe { &*state.request() };
    // SAFETY: the request's upstream is live during free.
    let u = unsafe { &*req.upstream };
    // The attempt started when `ngx_http_upstream_connect` set `u->start_time`.
    // SAFETY: `ngx_current_msec` is a plain global written only by this worker's event loop,
    // which is running us.
    let elapsed = unsafe { ngx_current_msec }.saturating_sub(u.start_time) as u64;
    // SAFETY: `u` is this request's upstream and `pcr` its peer, in peer.free: what `classify`
    // asks.
    let outcome = unsafe { outcome::classify(u, pcr, 0, elapsed) };
    if let Some(free) = state.balancer.free {
        // SAFETY: the balancer's own free with its own data.
        unsafe { free(pcr, state.balancer.data, 0) };
    }
    if let Some((zone, _)) = state.zone() {
        settle(state, zone, &outcome.attempt, Settle::Final);
    }
}

/// [`free_peer`] of any attempt.
///
/// # Safety
/// `state` is the request's state and `pcr` its live peer, in `peer.free`.
#[inline(never)]
unsafe fn free_any(
    state: &mut RequestState,
    pcr: &mut ngx_peer_connection_t,
    ngx_state: ngx_uint_t,
) {
    // SAFETY: the request owning this state is live during free.
    let req = unsafe { &*state.request() };
    // SAFETY: the request's upstream is live during free.
    let u = unsafe { &*req.upstream };
    // The attempt started when `ngx_http_upstream_connect` set `u->start_time`, right
    // before it asked `peer.get`.
    // SAFETY: `ngx_current_msec` is a plain global written only by this worker's event
    // loop, which is running us.
    let elapsed = unsafe { ngx_current_msec }.saturating_sub(u.start_time) as u64;
    // SAFETY: `u` is this request's upstream and `pcr` its peer, in peer.free: what `classify`
    // asks.
    let outcome = unsafe { outcome::classify(u, pcr, ngx_state, elapsed) };
    if core::mem::take(&mut state.probing) {
        // This module chose the peer (a server probe): the balancer has nothing to
        // free, and the try is counted here as its free would.
        pcr.tries = pcr.tries.saturating_sub(1);
    } else if let Some(free) = state.balancer.free {
        // SAFETY: the balancer's own free with its own data.
        unsafe { free(pcr, state.balancer.data, ngx_state) };
    }
    if outcome.free_retry {
        // nginx gives this try back; the probe ticket, if any, goes with the retry, and
        // so does the limit's slot.
        return;
    }
    let attempt = outcome.attempt;
    if let Some((zone, _)) = state.zone() {
        let next = ngx_state & (NGX_PEER_FAILED | NGX_PEER_NEXT) as ngx_uint_t != 0;
        // SAFETY: the request, its upstream and its peer, in free.
        let how = if next && unsafe { retry::follows(req, u, pcr, &attempt) } {
            Settle::Retried(&mut *pcr)
        } else {
            Settle::Final
        };
        if attempt.ending == Ending::Tls {
            ngx::ngx_log_error!(
                NGX_LOG_ERR,
                connection_log(req),
                "circuit breaker \"{}\": TLS failure with the upstream, counted apart, not as an origin failure",
                state.name()
            );
        }
        settle(state, zone, &attempt, how);
    }
    // SAFETY: request, upstream and peer are live in peer.free.
    unsafe { limit::attempt_ended(state, req, u, pcr, ngx_state, &attempt) };
}

/// How an attempt ended for its request.
enum Settle<'a> {
    /// nginx will make no other attempt: this one is what the client gets.
    Final,
    /// nginx will retry it, unless the breaker or the retry budget says no (setting the
    /// peer's tries to 0 here).
    Retried(&'a mut ngx_peer_connection_t),
}

/// The attempt on its server's breaker (when it went to a server of the pool); then the
/// request's side — a retry is let through only while the breaker is closed and within the
/// retry budget, and the request's verdict goes to its breaker once, when its last attempt
/// ends. What can be is done without the lock (successes while a breaker allows it, the
/// first attempt in the retry budget); the rest in one lock hold.
///
/// Inline: the lock-free half is most of the closed path's `peer.free`; the rest is
/// [`settle_locked`].
#[inline(always)]
fn settle(state: &mut RequestState, zone: &Zone, attempt: &Attempt, how: Settle<'_>) {
    let now = mono_ms();
    // SAFETY: `srv_conf_ptr` is the upstream's `SrvConf` in the configuration this request runs
    // under, which outlives the request and its state.
    let scf = unsafe { &*state.srv_conf_ptr() };
    let server = core::mem::replace(&mut state.server, NO_SERVER);
    let server_ticket = core::mem::replace(&mut state.server_ticket, Ticket::Normal);
    let retried = matches!(how, Settle::Retried(_));
    let success = scf.breaker.as_ref().is_some_and(|c| is_success(c, attempt));
    let server_left = server != NO_SERVER
        && !(success
            && server_ticket == Ticket::Normal
            && eject::add_success(zone, scf, server, now));
    let verdict_done = !retried
        && success
        && state.ticket == Ticket::Normal
        && zone.add_success(state.handle, state.key_hash, now, attempt.response_ms);
    if scf.retry.is_some() && !state.counted_first && scf.firsts.add(now) {
        state.counted_first = true;
    }
    let first_left = scf.retry.is_some() && !state.counted_first;
    if !retried && !server_left && verdict_done && !first_left {
        state.pending = None;
        return;
    }
    let left = Left {
        now,
        server: server_left.then_some((server, server_ticket)),
        verdict_done,
    };
    settle_locked(state, zone, attempt, how, left);
}

/// What [`settle`] could not do without the lock.
struct Left {
    now: u64,
    /// The attempt's server and its ticket, when their record waits.
    server: Option<(u16, Ticket)>,
    /// The request's verdict is recorded.
    verdict_done: bool,
}

/// The locked half of [`settle`].
#[inline(never)]
fn settle_locked(
    state: &mut RequestState,
    zone: &Zone,
    attempt: &Attempt,
    how: Settle<'_>,
    left: Left,
) {
    let Left {
        now,
        server,
        verdict_done,
    } = left;
    // SAFETY: `srv_conf_ptr` is the upstream's `SrvConf` in the configuration this request runs
    // under, which outlives the request and its state.
    let scf = unsafe { &*state.srv_conf_ptr() };
    let mut retry = match how {
        Settle::Retried(pc) => Some(pc),
        Settle::Final => None,
    };
    // SAFETY: the request owning this state is live while its attempts end.
    let log = connection_log(unsafe { &*state.request() });
    let dry_run = scf.breaker.is_some_and(|c| c.dry_run);
    let mut locked = zone.lock();
    if let (Some((server, server_ticket)), false) = (server, state.uscf.is_null()) {
        // SAFETY: set in peer.init to the request's upstream conf, live in a worker.
        let up = unsafe { Upstream::new(zone, scf, &*state.uscf) };
        eject::record(&mut locked, up, server, server_ticket, attempt, now, log);
    }
    if retry.is_some() && !dry_run {
        let closed = locked
            .get(state.handle, state.key_hash)
            .map_or(true, |b| b.state() == State::Closed);
        if !closed {
            // No proxy_next_upstream retries while open or half-open.
            if let Some(pc) = retry.take() {
                pc.tries = 0;
            }
        }
    }
    if scf.retry.is_some() {
        let home = locked.get_or_find(scf.home.get(), &scf.key(crate::conf::default_route()));
        if let Some(mut home) = home {
            scf.home.set(home.handle());
            if let Some(budget) = home.retry_budget() {
                // This worker's first attempts, then this one's if not counted yet.
                if let Some((second, n)) = scf.firsts.take() {
                    budget.record_firsts(second.saturating_mul(1000), n);
                }
                if !core::mem::replace(&mut state.counted_first, true) {
                    budget.record_first(now);
                }
                if retry.is_some() && !budget.take_retry(now) {
                    // Over budget: the client gets what this attempt produced.
                    if let Some(pc) = retry.take() {
                        pc.tries = 0;
                    }
                }
            }
        }
    }
    if retry.is_some() {
        drop(locked);
        state.pending = Some(*attempt);
        settle_late(state);
        return;
    }
    state.pending = None;
    if verdict_done {
        return;
    }
    let ticket = core::mem::replace(&mut state.ticket, Ticket::Normal);
    let recorded = match locked.get(state.handle, state.key_hash) {
        Some(mut b) => b.record(now, rnd(), ticket, attempt, true),
        None => return,
    };
    drop(locked);
    if let Some(t) = &recorded.transition {
        log_transition(log, &state.name(), t);
    }
    state.label = Some(Label::State(recorded.state));
}

/// Makes sure a request whose last attempt nginx said it would retry is judged even if the
/// retry never comes: a pool cleanup, added once (its cleanups run newest first, so the
/// request's state is still there).
fn settle_late(state: &mut RequestState) {
    if core::mem::replace(&mut state.settles_late, true) {
        return;
    }
    // SAFETY: the request owning this state is live; its pool too.
    let pool = unsafe { (*state.request()).pool };
    // SAFETY: the pool is live; one cleanup record with room for no data.
    if let Some(cln) = unsafe { ngx_pool_cleanup_add(pool, 0).as_mut() } {
        cln.handler = Some(settle_at_end);
        cln.data = core::ptr::from_mut(state).cast();
    }
}

unsafe extern "C" fn settle_at_end(data: *mut c_void) {
    guard((), || {
        // SAFETY: the state `settle_late` registered, released only by an older cleanup.
        let state = unsafe { &mut *data.cast::<RequestState>() };
        if let (Some(a), Some((zone, _))) = (state.pending.take(), state.zone()) {
            settle(state, zone, &a, Settle::Final);
        }
    });
}

/// The balancer's callbacks for the current attempt: none while it probes a server the
/// balancer never chose (round robin's session hooks read the peer it chose).
fn balancer_of(data: *mut c_void) -> Option<request::Balancer> {
    // SAFETY: `data` is the state our peer.init set; only copied out of.
    let state = unsafe { request::from_peer_data(data) };
    (!state.probing).then_some(state.balancer)
}

/// An attempt that counts, neither failed nor was slow, by the upstream's classes (which
/// are its servers' too).
fn is_success(cfg: &circuit_breaker_core::breaker::BreakerConfig, a: &Attempt) -> bool {
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
    if let Some(b) = balancer_of(data) {
        if let Some(f) = b.notify {
            // SAFETY: the balancer's own notify with its own data.
            unsafe { f(pc, b.data, ty) };
        }
    }
}

#[cfg(ngx_ssl)]
unsafe extern "C" fn set_session(pc: *mut ngx_peer_connection_t, data: *mut c_void) -> ngx_int_t {
    match balancer_of(data).and_then(|b| b.set_session.map(|f| (f, b.data))) {
        // SAFETY: the balancer's own hook with its own data.
        Some((f, d)) => unsafe { f(pc, d) },
        None => NGX_OK as ngx_int_t,
    }
}

#[cfg(ngx_ssl)]
unsafe extern "C" fn save_session(pc: *mut ngx_peer_connection_t, data: *mut c_void) {
    if let Some((f, d)) = balancer_of(data).and_then(|b| b.save_session.map(|f| (f, b.data))) {
        // SAFETY: the balancer's own hook with its own data.
        unsafe { f(pc, d) };
    }
}
