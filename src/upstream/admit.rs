//! Asking a request's breaker whether the request may go to the origin: first without the
//! lock (the breaker's published gate answers the common cases), then under it.

use core::cell::Cell;

use circuit_breaker_core::breaker::{Admission, BreakerConfig, Decision, Transition};
use circuit_breaker_core::class::Class;
use circuit_breaker_core::snapshot::State;
use nginx_sys::ngx_log_t;

use crate::request::{Label, RequestState};
use circuit_breaker_shell::clock::{mono_ms, rnd};
use circuit_breaker_shell::ffi::{pid, process_alive};
use circuit_breaker_shell::zone::{Handle, Key, Missing, Zone};

/// What the breaker can say without the lock: a pass or a rejection, or `None` when only
/// the locked path can tell (a cooldown that ended, half-open, the first request of a
/// location in this worker). A probe is never claimed here.
#[inline(always)]
pub fn ask_unlocked(
    state: &mut RequestState,
    hint: Option<&Cell<Handle>>,
    class: Option<Class>,
) -> Option<Admission> {
    let (zone, _) = state.judge.zone()?;
    let handle = match (state.judge.handle.is_none(), hint) {
        (true, Some(h)) => h.get(),
        _ => state.judge.handle,
    };
    let now = mono_ms();
    let a = zone.admit_unlocked_as(handle, state.judge.key_hash, now, class)?;
    state.judge.handle = handle;
    if class.is_some() && matches!(a, Admission::Reject { .. }) {
        // Turned away while open: its class is present when the probe comes due.
        super::class::note(handle, class, now);
    }
    note(state, &a, None);
    Some(a)
}

/// The full answer, under the lock when the gate cannot tell: may be granted the probe,
/// unless `may_probe` is false (a request whose body is still arriving: it would hold the
/// probe for as long as its client takes) and the probe has not waited a `probe_interval`
/// for another taker. `None` when no breaker applies (the zone is full, or this worker's configuration is older
/// than the zone's and the breaker is new).
///
/// Inline with [`ask_unlocked`], the locked half apart, for the stale path's cost
/// (`scripts/bench-instructions`, open_stale).
#[inline(always)]
pub fn ask(
    state: &mut RequestState,
    hint: Option<&Cell<Handle>>,
    log: *mut ngx_log_t,
    may_probe: bool,
    class: Option<Class>,
) -> Option<Admission> {
    if let Some(a) = ask_unlocked(state, hint, class) {
        return Some(a);
    }
    ask_locked(state, hint, log, may_probe, class)
}

/// [`ask`] when the gate cannot tell. A request of a class leaves the probe to a request of a
/// lower class that came lately (`super::class::may_probe`), unless the probe has waited a
/// `probe_interval` for another taker.
#[inline(never)]
fn ask_locked(
    state: &mut RequestState,
    hint: Option<&Cell<Handle>>,
    log: *mut ngx_log_t,
    may_probe: bool,
    class: Option<Class>,
) -> Option<Admission> {
    let cfg = *state.judge.srv_conf().breaker.as_ref()?;
    let (zone, mcf) = state.judge.zone()?;
    let now = mono_ms();
    let handle = hint.map_or(state.judge.handle, Cell::get);
    let may_probe = may_probe && super::class::may_probe(handle, class, now);
    let answer = admit_locked(
        zone,
        handle,
        &state.judge.key(),
        &cfg,
        mcf.generation,
        now,
        may_probe,
        class,
    );
    let (decision, breaker_state, found) = match answer {
        Ok(a) => a,
        Err(Missing::Full) => {
            circuit_breaker_shell::log::not_created(log, state.judge.key_hash, &state.judge.name());
            return None;
        }
        Err(Missing::Stale) => return None,
    };
    state.judge.handle = found;
    state.settlement.judged_ms = now;
    super::class::note(found, class, now);
    if let Some(h) = hint {
        h.set(found);
    }
    if let Some(t) = &decision.transition {
        log_transition(log, &state.judge.name(), t);
    }
    note(state, &decision.admission, Some(breaker_state));
    if let Admission::Probe(ticket) = decision.admission {
        state.settlement.ticket = ticket;
    }
    Some(decision.admission)
}

#[allow(clippy::too_many_arguments)]
fn admit_locked(
    zone: &Zone,
    handle: Handle,
    key: &Key,
    cfg: &BreakerConfig,
    generation: u64,
    now: u64,
    may_probe: bool,
    class: Option<Class>,
) -> Result<(Decision, State, Handle), Missing> {
    let mut locked = zone.lock();
    let mut b = locked.get_or_create(handle, key, cfg, generation, now)?;
    let draw = b.draw_for(rnd(), class);
    // The fleet names one prober per open episode; a half-open breaker is already this
    // instance's probe, whose good answers in a row it still needs.
    let may_probe =
        (may_probe || b.probe_overdue(now)) && (b.state() == State::HalfOpen || b.may_probe(now));
    let d = b.admit(now, draw, pid(), &process_alive, may_probe);
    Ok((d, b.state(), b.handle()))
}

/// Records what the request was told.
fn note(state: &mut RequestState, a: &Admission, breaker_state: Option<State>) {
    state.told.label = Some(match (a, breaker_state) {
        (Admission::Recovering { .. }, _) => Label::Recovering,
        (_, Some(s)) => Label::State(s),
        (Admission::Reject { .. }, None) => Label::State(State::Open),
        (_, None) => Label::State(State::Closed),
    });
    state.told.short_circuited =
        matches!(a, Admission::Reject { .. } | Admission::Recovering { .. });
}

/// One `warn` line per transition, with its numbers; and the fleet's exchange, if any, is
/// told a breaker moved.
pub fn log_transition(log: *mut ngx_log_t, name: &str, t: &Transition) {
    log_transition_of(log, &format!("\"{name}\""), t);
}

/// [`log_transition`] of a breaker named as `circuit_breaker_shell::zone::who` names it (quotes and all).
pub fn log_transition_of(log: *mut ngx_log_t, who: &str, t: &Transition) {
    crate::wake::nudge();
    circuit_breaker_shell::log::transition(log, who, t);
}
