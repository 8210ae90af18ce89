//! `peer.free`: classifies the attempt, records it on its server's breaker, settles the
//! request's verdict (see [`super`]), and gives the limit's slot back after
//! the last attempt.

use core::ffi::c_void;

use circuit_breaker_core::breaker::{
    classify, response_fails, Attempt, BreakerConfig, Ending, Ticket,
};
use circuit_breaker_core::snapshot::State;
use nginx_sys::{
    ngx_log_t, ngx_peer_connection_t, ngx_pool_cleanup_add, ngx_uint_t, NGX_LOG_ERR, NGX_LOG_WARN,
    NGX_PEER_FAILED, NGX_PEER_NEXT,
};

use crate::clock::{mono_ms, rnd};
use crate::eject::{self, Upstream};
use crate::ffi::guard;
use crate::request::{self, Label, RequestState, NO_SERVER};
use crate::zone::{Locked, Zone};

use super::{connection_log, limit, log_transition, outcome};
use crate::retry;

/// The wrapped `peer.free`: classifies the attempt, records it on its server's breaker,
/// settles the request's verdict (see [`super`]), and gives the limit's
/// slot back after the last attempt.
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
        if ngx_state == 0 && !state.probing {
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
    let outcome = unsafe { outcome::read(req, u, pcr, 0, state.body_end(), state.body_open()) };
    if let Some(free) = state.balancer.free {
        // SAFETY: the balancer's own free with its own data.
        unsafe { free(pcr, state.balancer.data, 0) };
    }
    if let Some((zone, _)) = state.zone() {
        settle(state, zone, &outcome.attempt, Settle::Final);
    }
    // SAFETY: request, upstream and peer are live in peer.free.
    unsafe { limit::attempt_ended(state, req, u, pcr, 0, &outcome.attempt) };
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
    let (body_end, body_open) = (state.body_end(), state.body_open());
    // SAFETY: `req` and `u` are this request and its upstream, `pcr` its peer, in peer.free:
    // what `outcome::read` asks.
    let outcome = unsafe { outcome::read(req, u, pcr, ngx_state, body_end, body_open) };
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
        } else if attempt.ending == Ending::TooBigHeader {
            ngx::ngx_log_error!(
                NGX_LOG_WARN,
                connection_log(req),
                "circuit breaker \"{}\": upstream sent too big header, not counted as an origin failure",
                state.name()
            );
        }
        settle(state, zone, &attempt, how);
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
/// retry budget, and the request's verdict goes to its breaker once, when its last attempt
/// ends. What can be is done without the lock (successes while a breaker allows it, the
/// first attempt in the retry budget); the rest in one lock hold.
///
/// Inline: the lock-free half is most of the closed path's `peer.free`; the rest is
/// [`settle_locked`].
#[inline(always)]
pub(super) fn settle(state: &mut RequestState, zone: &Zone, attempt: &Attempt, how: Settle<'_>) {
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
    if verdict_done {
        // Recorded without the lock: `$circuit_breaker_msec` says when.
        state.recorded_ms = now;
    }
    if !retried && !server_left && verdict_done && !first_left {
        state.pending = None;
        return;
    }
    let left = Left {
        now,
        server: server_left.then_some((server, server_ticket)),
        chosen: server,
        verdict_done,
    };
    settle_locked(state, zone, attempt, how, left);
}

/// What [`settle`] could not do without the lock.
struct Left {
    now: u64,
    /// The attempt's server and its ticket, when their record waits.
    server: Option<(u16, Ticket)>,
    /// The attempt's server ([`NO_SERVER`] when it went to none of the pool's).
    chosen: u16,
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
        chosen,
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
    retry::allow(&mut locked, scf, state, &mut retry, dry_run, now);
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
    let pooled = match scf.breaker.as_ref() {
        Some(cfg) if chosen != NO_SERVER && !state.uscf.is_null() && scf.pool.is_some() => assess(
            &mut locked,
            zone,
            state,
            cfg,
            chosen,
            ticket,
            attempt,
            now,
            log,
        ),
        _ => None,
    };
    let found = match ticket {
        Ticket::Probe(_) => locked.get_probe(state.handle, &state.key(), ticket),
        Ticket::Normal => locked.get(state.handle, state.key_hash),
    };
    let recorded = match (found, pooled) {
        (Some(mut b), Some(a)) if a.explained => b.record_explained(now, rnd(), ticket, attempt),
        (Some(mut b), a) => b.record(now, rnd(), ticket, attempt, a.map_or(true, |a| a.may_open)),
        (None, _) => return,
    };
    drop(locked);
    state.recorded_ms = now;
    if let Some(t) = &recorded.transition {
        log_transition(log, &state.name(), t);
    } else if recorded.state == State::Closed {
        // A failure (successes rarely take the lock) the fleet may need to hear of at once.
        crate::wake::nudge();
    }
    state.label = Some(Label::State(recorded.state));
}

/// What the request's pool says of its outcome on `server` (see `eject::assess`): a good
/// outcome is never explained, but the breaker may still not open on it (its window moving
/// on can raise its rates); the probe of the request's breaker that failed there ejects the
/// server first.
#[allow(clippy::too_many_arguments)]
#[cold]
fn assess(
    locked: &mut Locked<'_>,
    zone: &Zone,
    state: &RequestState,
    cfg: &BreakerConfig,
    server: u16,
    ticket: Ticket,
    attempt: &Attempt,
    now: u64,
    log: *mut ngx_log_t,
) -> Option<eject::Assessment> {
    let why = classify(attempt, cfg).why_bad(attempt);
    let probe = ticket != Ticket::Normal
        && locked
            .get(state.handle, state.key_hash)
            .is_some_and(|b| b.holds_probe(ticket));
    let name = state.name();
    let probe = match (&why, probe) {
        (Some(why), true) => Some((name.as_str(), why.as_str())),
        _ => None,
    };
    // SAFETY: `srv_conf_ptr` is this request's upstream `SrvConf` and `uscf` (not null: the
    // caller checked) its upstream conf, set in peer.init; both live as long as the worker.
    let up = unsafe { Upstream::new(zone, &*state.srv_conf_ptr(), &*state.uscf) };
    let a = eject::assess(locked, up, server, probe, now, log);
    Some(eject::Assessment {
        explained: a.explained && why.is_some(),
        may_open: a.may_open,
    })
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

/// An attempt that counts, neither failed nor was slow, by the upstream's classes (which
/// are its servers' too).
fn is_success(cfg: &BreakerConfig, a: &Attempt) -> bool {
    if a.ending != Ending::Response || (cfg.slow_ms > 0 && a.response_ms > u64::from(cfg.slow_ms)) {
        return false;
    }
    // A response is counted, never TLS, and not slow (above): only its class decides.
    !response_fails(a, cfg)
}
