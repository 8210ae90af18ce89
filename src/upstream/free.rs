//! `peer.free`: classifies the attempt, records it on its server's breaker, settles the
//! request's outcome (see [`super`]), and gives the limit's slot back after the last
//! attempt.

use core::ffi::c_void;

use circuit_breaker_core::breaker::{Classified, Ending, Ticket};
use circuit_breaker_core::settle::{self, Ended, OnServer, Retry};
use circuit_breaker_core::snapshot::State;
use nginx_sys::{
    ngx_peer_connection_t, ngx_pool_cleanup_add, ngx_uint_t, NGX_LOG_ERR, NGX_LOG_WARN,
    NGX_PEER_FAILED, NGX_PEER_NEXT,
};

use crate::eject::{self, Upstream};
use crate::request::{self, Label, RequestState, NO_SERVER};
use crate::retry;
use circuit_breaker_shell::clock::{mono_ms, rnd};
use circuit_breaker_shell::ffi::guard;
use circuit_breaker_shell::zone::Zone;

use super::ledger::ZoneLedger;
use super::{connection_log, limit, log_transition, outcome};

/// The wrapped `peer.free`: classifies the attempt, records it on its server's breaker,
/// settles the request's outcome (see [`super`]), and gives the limit's slot back after the
/// last attempt.
pub(super) unsafe extern "C" fn free_peer(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
    ngx_state: ngx_uint_t,
) {
    guard((), || {
        // SAFETY: nginx calls peer.free with the `peer.data` our peer.init set (no other borrow of
        // that state is live while a hook runs) and the request's live peer.
        let (state, pcr) = unsafe { (request::from_peer_data(data), &mut *pc) };
        // The closed path first: the free from the request's finalization (no retry follows,
        // no TLS failure) of an attempt the balancer chose. The rest apart, for the closed
        // path's cost (`scripts/bench-instructions`, closed).
        if ngx_state == 0 && !state.attempts.routed {
            // SAFETY: as for this function.
            unsafe { free_final(state, pcr) };
        } else {
            // SAFETY: as for this function.
            unsafe { free_any(state, pcr, ngx_state) };
        }
    })
}

/// [`free_peer`] of the last attempt, chosen by the balancer: what [`free_any`] does for
/// it.
///
/// # Safety
/// `state` is the request's state and `pcr` its live peer, in `peer.free`.
#[inline(always)]
unsafe fn free_final(state: &mut RequestState, pcr: &mut ngx_peer_connection_t) {
    // SAFETY: the request owning this state is live during free.
    let req = unsafe { &*state.request() };
    // SAFETY: the request's upstream is live during free.
    let u = unsafe { &*req.upstream };
    // SAFETY: `req` and `u` are this request and its upstream, `pcr` its peer, in peer.free:
    // what `outcome::read` asks.
    let outcome = unsafe {
        outcome::read(
            req,
            u,
            pcr,
            0,
            state.attempts.body_end(),
            state.attempts.body_open(),
            state.probes(),
        )
    };
    // Classified before the balancer's free: the outcome is then kept across the call
    // already classified, rather than read back to be (`scripts/bench-instructions`, closed).
    let attempt = state.judge.classify(outcome.attempt);
    if let Some(free) = state.balancer.free {
        // SAFETY: the balancer's own free with its own data.
        unsafe { free(pcr, state.balancer.data, 0) };
    }
    if let Some((zone, _)) = state.judge.zone() {
        settle(state, zone, &attempt, Settle::Final);
    }
    // SAFETY: request, upstream and peer are live in peer.free.
    unsafe { limit::attempt_ended(state, req, u, pcr, 0, &attempt.attempt) };
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
    let (body_end, body_open, probe) = (
        state.attempts.body_end(),
        state.attempts.body_open(),
        state.probes(),
    );
    // SAFETY: `req` and `u` are this request and its upstream, `pcr` its peer, in peer.free:
    // what `outcome::read` asks.
    let outcome = unsafe { outcome::read(req, u, pcr, ngx_state, body_end, body_open, probe) };
    if core::mem::take(&mut state.attempts.routed) {
        // This module chose the peer (a server probe, or a ramp's last resort): the
        // balancer has nothing to free, and the try is counted here as its free would.
        pcr.tries = pcr.tries.saturating_sub(1);
    } else if let Some(free) = state.balancer.free {
        // A failure the client shaped is no failure of the server for nginx's own
        // `max_fails` either: nginx is told to move on, as for a `404` it retries.
        let failed = ngx_state & NGX_PEER_FAILED as ngx_uint_t != 0;
        let told = if failed && outcome.clients {
            (ngx_state & !(NGX_PEER_FAILED as ngx_uint_t)) | NGX_PEER_NEXT as ngx_uint_t
        } else {
            ngx_state
        };
        // SAFETY: the balancer's own free with its own data.
        unsafe { free(pcr, state.balancer.data, told) };
    }
    if outcome.free_retry {
        // nginx gives this try back; the probe ticket, if any, goes with the retry, and
        // so does the limit's slot.
        return;
    }
    let attempt = outcome.attempt;
    if let Some((zone, _)) = state.judge.zone() {
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
                state.judge.name()
            );
        } else if attempt.ending == Ending::TooBigHeader {
            ngx::ngx_log_error!(
                NGX_LOG_WARN,
                connection_log(req),
                "circuit breaker \"{}\": upstream sent too big header, not counted as an origin failure",
                state.judge.name()
            );
        } else if attempt.ending == Ending::BodyRefused {
            ngx::ngx_log_error!(
                NGX_LOG_WARN,
                connection_log(req),
                "circuit breaker \"{}\": upstream stopped reading the request body, not counted as an origin failure",
                state.judge.name()
            );
        }
        let classified = state.judge.classify(attempt);
        settle(state, zone, &classified, how);
    }
    // SAFETY: request, upstream and peer are live in peer.free.
    unsafe { limit::attempt_ended(state, req, u, pcr, ngx_state, &attempt) };
}

/// How an attempt ended for its request.
pub(super) enum Settle<'a> {
    /// nginx will make no other attempt: this one is what the client gets.
    Final,
    /// nginx will retry it, unless the breaker or the retry budget says no (setting the
    /// peer's tries to 0 here).
    Retried(&'a mut ngx_peer_connection_t),
}

/// The attempt on its server's breaker (when it went to a server of the pool); then the
/// request's side — a retry is let through only while the breaker is closed and within the
/// retry budget, and the request's outcome is settled on its breaker once, when its last
/// attempt ends. What can be is done without the lock (successes while a breaker allows it, the
/// first attempt in the retry budget); the rest is the core's settlement
/// (`circuit_breaker_core::settle`), in one lock hold.
///
/// Inline: the lock-free half is most of the closed path's `peer.free`; the rest is
/// [`settle_locked`].
#[inline(always)]
pub(super) fn settle(state: &mut RequestState, zone: &Zone, attempt: &Classified, how: Settle<'_>) {
    let now = mono_ms();
    // SAFETY: `srv_conf_ptr` is the upstream's `SrvConf` in the configuration this request runs
    // under, which outlives the request and its state.
    let scf = unsafe { &*state.judge.srv_conf_ptr() };
    let server = core::mem::replace(&mut state.attempts.server, NO_SERVER);
    let server_ticket = core::mem::replace(&mut state.attempts.server_ticket, Ticket::Normal);
    let retried = matches!(how, Settle::Retried(_));
    let success = attempt.is_success();
    let on_server = (server != NO_SERVER).then(|| OnServer {
        index: server,
        ticket: server_ticket,
        recorded: success
            && server_ticket == Ticket::Normal
            && eject::add_success(zone, scf, server, now, attempt.attempt.response_ms),
    });
    if on_server.is_some() && eject::assess_due(scf, now) {
        assess(state, zone, now);
    }
    let recorded = !retried
        && success
        && state.settlement.ticket == Ticket::Normal
        && zone.add_success(
            state.judge.handle,
            state.judge.key_hash,
            now,
            attempt.attempt.response_ms,
        );
    if scf.retry.is_some() && !state.attempts.counted_first && scf.local.firsts.add(now) {
        state.attempts.counted_first = true;
    }
    if recorded {
        // Recorded without the lock: `$circuit_breaker_msec` says when.
        state.settlement.recorded_ms = now;
    }
    let server_left = on_server.is_some_and(|s| !s.recorded);
    let first_left = scf.retry.is_some() && !state.attempts.counted_first;
    if !retried && !server_left && recorded && !first_left {
        state.settlement.pending = None;
        return;
    }
    settle_locked(state, zone, attempt, how, now, on_server, recorded);
}

/// Judges the request's pool by its relative rules (once a second per worker).
#[cold]
fn assess(state: &RequestState, zone: &Zone, now: u64) {
    // SAFETY: `srv_conf_ptr` is the upstream's `SrvConf` in the configuration this request runs
    // under, which outlives the request and its state.
    let scf = unsafe { &*state.judge.srv_conf_ptr() };
    // SAFETY: set in peer.init to the request's upstream conf (or null), live in a worker.
    let Some(uscf) = (unsafe { state.judge.uscf.as_ref() }) else {
        return;
    };
    // SAFETY: the request owning this state is live while its attempts end.
    let log = connection_log(unsafe { &*state.request() });
    // SAFETY: `uscf` is the upstream conf whose module conf is `scf`, in a worker.
    eject::assess(unsafe { Upstream::new(zone, scf, uscf) }, now, log);
}

/// The locked half of [`settle`]: the core's settlement, then its plan carried out.
#[inline(never)]
fn settle_locked(
    state: &mut RequestState,
    zone: &Zone,
    attempt: &Classified,
    how: Settle<'_>,
    now: u64,
    on_server: Option<OnServer>,
    recorded: bool,
) {
    // SAFETY: `srv_conf_ptr` is the upstream's `SrvConf` in the configuration this request runs
    // under, which outlives the request and its state.
    let scf = unsafe { &*state.judge.srv_conf_ptr() };
    let Some(cfg) = scf.breaker.as_ref() else {
        state.settlement.pending = None;
        return;
    };
    let retry = match how {
        Settle::Retried(pc) => Some(pc),
        Settle::Final => None,
    };
    // SAFETY: set in peer.init to the request's upstream conf (or null), live in a worker.
    let uscf = unsafe { state.judge.uscf.as_ref() };
    // SAFETY: `uscf` is the upstream conf whose module conf is `scf`, in a worker.
    let up = uscf.map(|u| unsafe { Upstream::new(zone, scf, u) });
    let on_server = on_server.filter(|_| up.is_some() && scf.pool.is_some());
    // SAFETY: the request owning this state is live while its attempts end.
    let log = connection_log(unsafe { &*state.request() });
    let name = state.judge.name();
    // The budget refuses lower classes' retries first: the class is read for a retry.
    let class = if retry.is_some() && scf.retry.is_some() {
        let r = state.request().cast_mut();
        // SAFETY: the request owning this state is live while its attempts end; the class is
        // read through the raw pointer, past the caller's shared borrow of the request.
        unsafe { super::class::of(r, state, log) }
    } else {
        state.told.class.flatten()
    };
    let end = Ended {
        attempt,
        upstream: cfg,
        name: &name,
        now_ms: now,
        ticket: state.settlement.ticket,
        server: on_server,
        retry: retry.is_some(),
        dry_run: cfg.dry_run,
        recorded,
        budget: scf.retry.is_some(),
        first_counted: state.attempts.counted_first,
        class,
    };
    let plan = {
        let mut locked = zone.lock();
        let mut ledger = ZoneLedger {
            locked: &mut locked,
            handle: state.judge.handle,
            key: state.judge.key(),
            scf,
            up,
            now,
        };
        let plan = settle::settle(&mut ledger, &end, &mut rnd);
        if let (false, Some(up)) = (plan.moves.is_empty(), up) {
            eject::moved(&mut locked, up, &plan.moves, now, log);
        }
        plan
    };
    state.attempts.counted_first = plan.first_counted;
    match (plan.retry, retry) {
        (Retry::Made, _) => {
            state.settlement.pending = Some(*attempt);
            settle_late(state);
            return;
        }
        // nginx's `ngx_http_upstream_next` then finalizes with this attempt's answer.
        (Retry::Refused, Some(pc)) => pc.tries = 0,
        _ => {}
    }
    state.settlement.pending = None;
    if recorded {
        return;
    }
    state.settlement.ticket = Ticket::Normal;
    let Some(recorded) = plan.recorded else {
        return;
    };
    state.settlement.recorded_ms = now;
    if let Some(t) = &recorded.transition {
        log_transition(log, &name, t);
    } else if recorded.state == State::Closed {
        // A failure (successes rarely take the lock) the fleet may need to hear of at once.
        crate::wake::nudge();
    }
    state.told.label = Some(Label::State(recorded.state));
}

/// Makes sure a request whose last attempt nginx said it would retry is judged even if the
/// retry never comes: a pool cleanup, added once (its cleanups run newest first, so the
/// request's state is still there).
fn settle_late(state: &mut RequestState) {
    if core::mem::replace(&mut state.attempts.settles_late, true) {
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
        if let (Some(a), Some((zone, _))) = (state.settlement.pending.take(), state.judge.zone()) {
            settle(state, zone, &a, Settle::Final);
        }
    });
}
