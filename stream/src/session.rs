//! A session's dealings with its breaker: admitted (or refused) in `peer.init`, judged once —
//! at the upstream's first byte, when the first-byte bound runs out after the client's bytes
//! went up, or at the session's end (`circuit_breaker_core::session` says what each means) —
//! and its probe given back if it was one and nothing judged it in time.
//!
//! Nothing is allocated in the session's pool: the session's context keeps one word of the
//! module's (`session::Word`: an ordinary session's upstream and instants, or the probe's
//! place in the worker's table), the worker counts its ordinary sessions that wait for a first
//! byte by when their bounds run out (`session::Wheel`), and one timer of the worker's (the
//! sweeper) serves every bound.

use core::ffi::c_void;

use circuit_breaker_core::breaker::classify::Ending;
use circuit_breaker_core::breaker::{Admission, Attempt, Classified, Ticket};
use circuit_breaker_core::session::{
    self, Expired, Held, Left, Silence, Table, Waited, Wheel, Word,
};
use circuit_breaker_core::snapshot::State;
use circuit_breaker_shell::clock::{mono_ms, rnd};
use circuit_breaker_shell::eject;
use circuit_breaker_shell::ffi::{guard, pid, process_alive};
use circuit_breaker_shell::zone::{Handle, Missing, Zone};
use nginx_sys::{ngx_event_t, ngx_log_t, ngx_msec_t, ngx_stream_session_t};

use crate::conf::{MainConf, SrvConf};
use crate::pool;
use crate::waiting::Waiting;

// A context cell holds a session's word.
const _: () = assert!(core::mem::size_of::<usize>() == 8);

/// The session's word, as the context cell keeps it (0: nothing).
///
/// # Safety
/// `s` must be a live session.
#[inline]
pub unsafe fn bits(s: *const ngx_stream_session_t) -> u64 {
    // SAFETY: a session's `ctx` has a cell per stream module; this one is ours.
    unsafe { *(*s).ctx.add(crate::conf::ctx_index()) as u64 }
}

/// Sets the session's word (`Free`: judged).
///
/// # Safety
/// `s` must be a live session.
#[inline]
pub unsafe fn set_mark(s: *mut ngx_stream_session_t, w: Word) {
    // SAFETY: as in `bits`.
    unsafe { *(*s).ctx.add(crate::conf::ctx_index()) = w.to_bits() as usize as *mut c_void };
}

/// Runs `f` on this worker's waiting sessions, made on first use from the configuration's
/// bounds.
///
/// # Safety
/// `f` must not call this function again (it is given the worker's one table).
#[inline]
pub unsafe fn with_waiting<R>(mcf: &MainConf, f: impl FnOnce(&mut Waiting) -> R) -> R {
    // SAFETY: a worker's one thread, and `f` does not come back here (this fn's contract):
    // the only reference to the table while it lives.
    let t = unsafe { &mut *mcf.sessions.get() };
    let t = match t {
        Some(t) => t,
        None => made(mcf, t),
    };
    f(t)
}

/// The worker's waiting sessions, made from the configuration's bounds (once, out of the
/// way of every later call).
#[cold]
#[inline(never)]
fn made<'a>(mcf: &MainConf, slot: &'a mut Option<Waiting>) -> &'a mut Waiting {
    let bounds: Vec<u32> = mcf
        .upstreams
        .iter()
        // SAFETY: upstream confs live as long as the configuration.
        .map(|&s| unsafe { &*s }.params.map_or(0, |p| p.first_byte_ms))
        .collect();
    slot.insert(Waiting {
        plain: Wheel::new(&mcf.lanes.bounds(&bounds)),
        probes: Table::new(bounds),
    })
}

/// An ordinary session whose client's bytes went up at `now` starts (again) to wait for a
/// byte back, the sweeper armed for it; false when its bound ran out already (judged: by the
/// sweeper, or now).
#[inline]
pub fn wait(mcf: &MainConf, upstream: u16, again: Option<u64>, now: u64) -> bool {
    if let Some(sent) = again {
        // SAFETY: the wheel's own step.
        match unsafe { with_waiting(mcf, |w| w.plain.leave(upstream, sent, now)) } {
            Left::InTime => {}
            Left::Late => {
                silent_since(mcf, upstream, sent, nginx_log());
                return false;
            }
            Left::Judged => return false,
        }
    }
    // SAFETY: as above.
    match unsafe { with_waiting(mcf, |w| w.plain.wait(upstream, now)) } {
        Waited::Until(due) => arm(mcf, due),
        Waited::Off => {}
        Waited::Behind => behind(mcf, upstream, now),
    }
    true
}

/// The sweeper ran late: judges what ran out, then counts the session that waits from `now`.
#[cold]
fn behind(mcf: &MainConf, upstream: u16, now: u64) {
    sweep_now(mcf, nginx_log());
    // SAFETY: the wheel's own step.
    if let Waited::Until(due) = unsafe { with_waiting(mcf, |w| w.plain.wait(upstream, now)) } {
        arm(mcf, due);
    }
}

/// An ordinary session that waited since `sent` leaves the wheel (answered, or ended, at
/// `now`): true when it is to be judged by what it says; false when its bound ran out first
/// (judged silent by the sweeper, or now).
#[inline]
pub fn leave(mcf: &MainConf, upstream: u16, sent: u64, now: u64, log: *mut ngx_log_t) -> bool {
    // SAFETY: the wheel's own step.
    match unsafe { with_waiting(mcf, |w| w.plain.leave(upstream, sent, now)) } {
        Left::InTime => true,
        Left::Judged => false,
        Left::Late => {
            silent_since(mcf, upstream, sent, log);
            false
        }
    }
}

/// An ordinary session of an upstream without a pool answered at `now`, `ms` after it began
/// to wait: the common outcome, a success told without the lock when it can be; anything
/// else as [`settle`].
#[inline]
pub fn answered(mcf: &MainConf, held: &Held, ms: u64, now: u64, log: *mut ngx_log_t) {
    let attempt = session::answered(ms);
    if let Some(&scf) = mcf.upstreams.get(usize::from(held.upstream)) {
        // SAFETY: upstream confs live as long as the configuration.
        let scf = unsafe { &*scf };
        let told = scf.params.is_some_and(|params| {
            session::succeeds(&attempt, &params.cfg)
                && mcf
                    .zone()
                    .is_some_and(|z| z.answer_success(scf.handle.get(), scf.key_hash, now, ms))
        });
        if told {
            return;
        }
    }
    settle(mcf, held, None, &attempt, log);
}

/// An ordinary session of `upstream` whose client's last bytes went up at `sent` and whose
/// server kept silent past its bound: as [`silent`].
fn silent_since(mcf: &MainConf, upstream: u16, sent: u64, log: *mut ngx_log_t) {
    let held = Held {
        upstream,
        ticket: Ticket::Normal,
        start_ms: sent,
        client_sent: true,
        sent_ms: sent,
    };
    silent(mcf, &held, log);
}

/// The cycle's log, for what the sweeper judges.
fn nginx_log() -> *mut ngx_log_t {
    // SAFETY: nginx's cycle log lives as long as the worker.
    unsafe { (*nginx_sys::ngx_cycle).log }
}

/// Judges a session by `attempt`: on its upstream's breaker, and on its server's when it went
/// to a server of a pool (`server`, or the lane it waited in). An answer is noted in the zone
/// first, for every worker's [`silent`].
pub fn settle(
    mcf: &MainConf,
    held: &Held,
    server: Option<u16>,
    attempt: &Attempt,
    log: *mut ngx_log_t,
) {
    settle_if(mcf, held, server, attempt, log, |_, _, _| (true, true));
}

/// A session whose server kept silent past its bound: a failure, unless the upstream answered
/// another session since the client's last bytes (a server that answers anyone is not hung:
/// the client made its own session wait, with an unfinished or a blocking command) — and, on
/// its server of a pool, unless that server did. A probe's silence is no verdict: its probe is
/// given back (a client could otherwise fail the probe at will and keep the breaker open).
pub fn silent(mcf: &MainConf, held: &Held, log: *mut ngx_log_t) {
    let attempt = session::silent(mono_ms().saturating_sub(held.start_ms));
    silence(mcf, held, None, true, &attempt, log);
}

/// A session that nothing came back to after its client's bytes, as `attempt` (a timeout):
/// as [`silent`], on its server of a pool (`server`, or the lane it waited in) only when
/// `on_server`.
pub fn silence(
    mcf: &MainConf,
    held: &Held,
    server: Option<u16>,
    on_server: bool,
    attempt: &Attempt,
    log: *mut ngx_log_t,
) {
    if !matches!(held.ticket, Ticket::Normal) {
        unjudged(mcf, held, log);
        return;
    }
    settle_if(mcf, held, server, attempt, log, |zone, scf, server| {
        let upstream = zone.answered_ms(scf.handle.get());
        let answered = server
            .filter(|_| on_server)
            .and_then(|i| server_handle(scf, i))
            .map(|h| zone.answered_ms(h));
        (
            session::silence_counts(upstream, held.sent_ms),
            answered.is_some_and(|at| session::silence_counts(at, held.sent_ms)),
        )
    });
}

/// A session of lane `lane` whose datagram the server's host refused at `now` (an ICMP
/// error) waits in the wheel as a silent one would, and is judged as silence at its bound
/// (the sweeper): a refusal comes at once, before a server slow to answer others has; and an
/// ICMP error forged against a live server, or one a client's oversized datagram brought
/// back, then counts no more than the client's own silence would. False when the lane has no
/// bound (`first_byte=off`): judge it at once ([`refused`]).
pub fn refused_later(mcf: &MainConf, lane: u16, now: u64) -> bool {
    // SAFETY: the wheel's own step.
    match unsafe { with_waiting(mcf, |w| w.plain.wait(lane, now)) } {
        Waited::Until(due) => {
            arm(mcf, due);
            true
        }
        Waited::Behind => {
            behind(mcf, lane, now);
            true
        }
        Waited::Off => false,
    }
}

/// A session whose datagram the server's host refused (an ICMP error), as `attempt`: judged
/// as silence is, a failure only while the upstream (and, on its server of a pool, that
/// server) answered nobody since the client's datagram. A dead port answers nobody; an ICMP
/// error forged against a live server (the kernel matches one to a socket by addresses and
/// ports alone), or one a client's oversized datagram brought back, counts nothing while the
/// server answers others. A probe's fails on the same condition, and is given back otherwise.
pub fn refused(
    mcf: &MainConf,
    held: &Held,
    server: Option<u16>,
    attempt: &Attempt,
    log: *mut ngx_log_t,
) {
    if matches!(held.ticket, Ticket::Normal) {
        silence(mcf, held, server, true, attempt, log);
        return;
    }
    let answered = lane_owner(mcf, held.upstream)
        .and_then(|(scf, _)| mcf.zone().map(|z| z.answered_ms(scf.handle.get())));
    if answered.is_some_and(|at| session::silence_counts(at, held.sent_ms)) {
        settle(mcf, held, None, attempt, log);
    } else {
        unjudged(mcf, held, log);
    }
}

/// A server replied at `now` on a session of lane `lane` judged already: noted as an answer,
/// of its upstream and of its server of a pool, for [`silent`].
pub fn replied(mcf: &MainConf, lane: u16, now: u64) {
    let Some((scf, server)) = lane_owner(mcf, lane) else {
        return;
    };
    let Some(zone) = mcf.zone() else {
        return;
    };
    zone.note_answer(scf.handle.get(), now);
    if let Some(h) = server.and_then(|i| server_handle(scf, i)) {
        zone.note_answer(h, now);
    }
}

/// Sessions of one lane that kept silent past their bound, counted by the wheel: as
/// [`silent`], each.
fn silent_many(mcf: &MainConf, x: &Silence, log: *mut ngx_log_t) {
    for _ in 0..x.sessions {
        silent_since(mcf, x.upstream, x.sent_ms, log);
    }
}

/// The upstream whose lane `lane` is (its own, or one of its servers'), and the server.
fn lane_owner(mcf: &MainConf, lane: u16) -> Option<(&SrvConf, Option<u16>)> {
    let (upstream, server) = mcf.lanes.owner(lane);
    let &scf = mcf.upstreams.get(usize::from(upstream))?;
    // SAFETY: upstream confs live as long as the configuration.
    Some((unsafe { &*scf }, server))
}

/// Where this worker last found the breaker of server `i` of `scf`'s pool.
fn server_handle(scf: &SrvConf, i: u16) -> Option<Handle> {
    let s = scf.pool.as_ref()?.servers.get(usize::from(i))?;
    Some(s.local.handle.get())
}

/// [`settle`] on the upstream's breaker and on the server's as `counts` says, given the zone,
/// the upstream's conf and the session's server of a pool.
fn settle_if(
    mcf: &MainConf,
    held: &Held,
    server: Option<u16>,
    attempt: &Attempt,
    log: *mut ngx_log_t,
    counts: impl FnOnce(&Zone, &SrvConf, Option<u16>) -> (bool, bool),
) {
    let Some((scf, waited_on)) = lane_owner(mcf, held.upstream) else {
        return;
    };
    let Some(params) = &scf.params else { return };
    let Some(zone) = mcf.zone() else {
        return;
    };
    let server = server.or(waited_on).filter(|_| scf.pool.is_some());
    let (on_upstream, on_server) = counts(&zone, scf, server);
    let server = server.filter(|_| on_server);
    if !on_upstream && server.is_none() {
        return;
    }
    let now = mono_ms();
    let handle = scf.handle.get();
    if attempt.ending == Ending::Response {
        zone.note_answer(handle, now);
        if let Some(h) = server.and_then(|i| server_handle(scf, i)) {
            zone.note_answer(h, now);
        }
    }
    let normal = matches!(held.ticket, Ticket::Normal);
    let success = normal && session::succeeds(attempt, &params.cfg);
    if let (Some(i), Some(up)) = (server, pool::upstream(&zone, scf)) {
        // A success goes on both without the lock when it can.
        let server_done = success && eject::add_success(&zone, scf, i, now, attempt.response_ms);
        let upstream_done = !on_upstream
            || (success && zone.add_success(handle, scf.key_hash, now, attempt.response_ms));
        if server_done && upstream_done {
            return;
        }
        let c = Classified::of(*attempt, &params.cfg);
        pool::settle(
            up,
            i,
            held.ticket,
            &c,
            server_done,
            !upstream_done,
            now,
            log,
        );
        return;
    }
    if !on_upstream {
        return;
    }
    if success && zone.add_success(handle, scf.key_hash, now, attempt.response_ms) {
        return;
    }
    let c = Classified::of(*attempt, &params.cfg);
    let transition = {
        let mut locked = zone.lock();
        let Some(mut b) = locked.get_or_find(handle, &scf.key()) else {
            return;
        };
        scf.handle.set(b.handle());
        let r = b.record_classified(now, rnd(), held.ticket, &c, true);
        r.transition
    };
    if let Some(t) = &transition {
        circuit_breaker_shell::log::transition(log, &format!("\"{}\"", scf.name), t);
    }
}

/// A session that nothing judged: its probe, if it was one, is given back.
pub fn unjudged(mcf: &MainConf, held: &Held, log: *mut ngx_log_t) {
    if !matches!(held.ticket, Ticket::Normal) {
        let ms = mono_ms().saturating_sub(held.start_ms);
        settle(mcf, held, None, &Attempt::ended(Ending::NoVerdict, ms), log);
    }
}

/// Keeps the sweeper armed no later than `due`, a deadline the table holds: it stays at or
/// before the table's earliest, since sessions leaving only move that later.
pub fn arm(mcf: &MainConf, due: u64) {
    // SAFETY: the worker's own sweeper event, in its configuration's memory; nginx's timers
    // run on this thread only.
    let ev = unsafe { &mut *mcf.sweeper.get() };
    if ev.timer_set() != 0 && (ev.timer.key as u64) <= due {
        return;
    }
    let mcf_ptr: *const MainConf = mcf;
    ev.handler = Some(sweep);
    ev.data = mcf_ptr.cast_mut().cast();
    ev.log = nginx_log();
    // A worker that is told to exit need not wait for it.
    ev.set_cancelable(1);
    let wait = due.saturating_sub(mono_ms()).max(1);
    // SAFETY: the event lives as long as the configuration, which outlives the worker's
    // timers of it.
    unsafe { nginx_sys::ngx_add_timer(ev, wait as ngx_msec_t) };
}

/// The sweeper: the bounds that ran out, judged.
unsafe extern "C" fn sweep(ev: *mut ngx_event_t) {
    guard((), || {
        // SAFETY: `data` is the main conf `arm` set, alive as long as the configuration.
        let mcf = unsafe { &*(*ev).data.cast::<MainConf>() };
        // SAFETY: as above.
        sweep_now(mcf, unsafe { (*ev).log });
    })
}

/// Judges every bound that ran out by now, and arms the sweeper for the next.
fn sweep_now(mcf: &MainConf, log: *mut ngx_log_t) {
    let mut probes = Vec::new();
    let mut plain = Vec::new();
    let now = mono_ms();
    // SAFETY: the wheel's and the table's own steps.
    let next = unsafe {
        with_waiting(mcf, |w| {
            w.probes.expire(now, &mut probes);
            w.plain.expire(now, &mut plain);
            match (w.probes.next_deadline(), w.plain.next_due()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        })
    };
    for e in &probes {
        match e {
            Expired::Silent(h) => silent(mcf, h, log),
            Expired::Unjudged(h) => unjudged(mcf, h, log),
        }
    }
    for x in &plain {
        silent_many(mcf, x, log);
    }
    if let Some(due) = next {
        arm(mcf, due);
    }
}

/// What the breaker says to a new session of `scf`'s upstream, and the breaker's state then:
/// `None` when no breaker applies (no zone, the zone full, or this worker's configuration
/// older than the zone's and the breaker new).
pub fn admit(
    zone: &Zone,
    mcf: &MainConf,
    scf: &SrvConf,
    log: *mut ngx_log_t,
) -> Option<(Admission, State)> {
    let now = mono_ms();
    if let Some(a) = zone.admit_unlocked(scf.handle.get(), scf.key_hash, now) {
        // Without the lock only a closed breaker passes, and only one in its cooldown refuses.
        let state = match a {
            Admission::Reject { .. } => State::Open,
            _ => State::Closed,
        };
        return Some((a, state));
    }
    let cfg = scf.params?.cfg;
    let found = {
        let mut locked = zone.lock();
        let found = locked.get_or_create(scf.handle.get(), &scf.key(), &cfg, mcf.generation, now);
        found.map(|mut b| {
            let may_probe = b.may_probe(now) || b.state() == State::HalfOpen;
            let d = b.admit(now, rnd(), pid(), &process_alive, may_probe);
            scf.handle.set(b.handle());
            (d, b.state())
        })
    };
    let (decision, state) = match found {
        Ok(d) => d,
        Err(Missing::Full) => {
            circuit_breaker_shell::log::not_created(log, scf.key_hash, &scf.name);
            return None;
        }
        Err(Missing::Stale) => return None,
    };
    if let Some(t) = &decision.transition {
        circuit_breaker_shell::log::transition(log, &format!("\"{}\"", scf.name), t);
    }
    Some((decision.admission, state))
}
