//! A session's dealings with its breaker: admitted (or refused) in `peer.init`, judged once —
//! at the upstream's first byte, when the first-byte bound runs out after the client's bytes
//! went up, or at the session's end (`circuit_breaker_core::session` says what each means) —
//! and its probe given back if it was one and nothing judged it.

use core::ffi::c_void;
use core::ptr::NonNull;

use circuit_breaker_core::breaker::{Admission, Attempt, Classified, Ticket};
use circuit_breaker_core::session;
use circuit_breaker_core::snapshot::State;
use circuit_breaker_shell::clock::{mono_ms, rnd};
use circuit_breaker_shell::ffi::{first_time, pid, process_alive};
use circuit_breaker_shell::zone::{Missing, Zone};
use nginx_sys::{ngx_event_t, ngx_log_t, ngx_msec_t, ngx_stream_session_t, NGX_LOG_ERR};

use crate::conf::{MainConf, SrvConf};

/// What the module keeps of a session it admitted, in the session's pool (`s->ctx`).
pub struct Session {
    /// The upstream's breaker conf, which lives as long as the configuration.
    pub scf: *const SrvConf,
    /// The zone, as this worker maps it.
    pub zone: Zone,
    /// The ticket it was admitted with (a probe's, or normal).
    pub ticket: Ticket,
    /// When nginx began connecting (the admission), on the monotonic clock.
    pub start_ms: u64,
    /// The client's bytes were passed on to the upstream.
    pub client_sent: bool,
    /// Judged already: nothing the session does afterwards counts.
    pub settled: bool,
    /// Refused by the breaker: the log phase says `503`.
    pub refused: bool,
    /// The first-byte bound, armed when the client's first bytes go up.
    pub silence: ngx_event_t,
    /// The session's connection's log, for the transitions a timer settles.
    pub log: *mut ngx_log_t,
}

impl Session {
    fn scf(&self) -> &SrvConf {
        // SAFETY: the upstream's conf lives as long as the configuration, which outlives
        // every session of it.
        unsafe { &*self.scf }
    }

    /// Judges the session by `attempt`, once.
    pub fn settle(&mut self, attempt: &Attempt) {
        if self.settled {
            return;
        }
        self.settled = true;
        self.disarm();
        let scf = self.scf();
        let Some(params) = scf.params else { return };
        let now = mono_ms();
        let c = Classified::of(*attempt, &params.cfg);
        let handle = scf.handle.get();
        if self.ticket == Ticket::Normal
            && c.is_success()
            && self
                .zone
                .add_success(handle, scf.key_hash, now, attempt.response_ms)
        {
            return;
        }
        let mut locked = self.zone.lock();
        let Some(mut b) = locked.get_or_find(handle, &scf.key()) else {
            return;
        };
        let r = b.record_classified(now, rnd(), self.ticket, &c, true);
        scf.handle.set(b.handle());
        drop(b);
        drop(locked);
        if let Some(t) = &r.transition {
            circuit_breaker_shell::log::transition(self.log, &format!("\"{}\"", scf.name), t);
        }
    }

    /// The session ended without a verdict: its probe, if it was one, is given back.
    pub fn settle_end(&mut self, end: &session::Ended) {
        match session::ended(end) {
            Some(a) => self.settle(&a),
            None => self.settle(&Attempt::ended(
                circuit_breaker_core::breaker::classify::Ending::NoVerdict,
                end.ms,
            )),
        }
    }

    /// Arms the first-byte bound, once the client's first bytes went up.
    pub fn arm(&mut self) {
        let bound = self.scf().params.map_or(0, |p| p.first_byte_ms);
        if bound == 0 || self.settled || self.silence.timer_set() != 0 {
            return;
        }
        let me: *mut Session = self;
        self.silence.handler = Some(silence_handler);
        self.silence.data = me.cast();
        self.silence.log = self.log;
        // SAFETY: the event lives in the session's pool until the pool's cleanup, which
        // takes it off the timer tree first (`disarm`).
        unsafe { nginx_sys::ngx_add_timer(&mut self.silence, bound as ngx_msec_t) };
    }

    /// Takes the first-byte bound off the timer tree.
    pub fn disarm(&mut self) {
        if self.silence.timer_set() != 0 {
            // SAFETY: the event is on the timer tree (timer_set), in this worker.
            unsafe { nginx_sys::ngx_del_timer(&mut self.silence) };
        }
    }
}

/// The first-byte bound ran out: the server kept silent after the client's bytes.
unsafe extern "C" fn silence_handler(ev: *mut ngx_event_t) {
    circuit_breaker_shell::ffi::guard((), || {
        // SAFETY: `data` is the session state `arm` set, alive while the timer is set.
        let s = unsafe { &mut *(*ev).data.cast::<Session>() };
        let ms = mono_ms().saturating_sub(s.start_ms);
        s.settle(&session::silent(ms));
    })
}

/// Pool cleanup: the bound never outlives the session's memory.
pub unsafe extern "C" fn cleanup(data: *mut c_void) {
    circuit_breaker_shell::ffi::guard((), || {
        // SAFETY: registered with the session state as its data, before the pool frees it.
        if let Some(mut s) = NonNull::new(data.cast::<Session>()) {
            // SAFETY: as above.
            unsafe { s.as_mut() }.disarm();
        }
    })
}

/// What the breaker says to a new session of `scf`'s upstream: `None` when no breaker
/// applies (no zone, the zone full, or this worker's configuration older than the zone's and
/// the breaker new).
pub fn admit(zone: &Zone, mcf: &MainConf, scf: &SrvConf, log: *mut ngx_log_t) -> Option<Admission> {
    let now = mono_ms();
    if let Some(a) = zone.admit_unlocked(scf.handle.get(), scf.key_hash, now) {
        return Some(a);
    }
    let cfg = scf.params?.cfg;
    let found = {
        let mut locked = zone.lock();
        let found = locked.get_or_create(scf.handle.get(), &scf.key(), &cfg, mcf.generation, now);
        found.map(|mut b| {
            let may_probe = b.may_probe(now) || b.state() == State::HalfOpen;
            let d = b.admit(now, rnd(), pid(), &process_alive, may_probe);
            scf.handle.set(b.handle());
            d
        })
    };
    let decision = match found {
        Ok(d) => d,
        Err(Missing::Full) => {
            if first_time(scf.key_hash) {
                ngx::ngx_log_error!(
                    NGX_LOG_ERR,
                    log,
                    "circuit breaker \"{}\" not created: the zone is full, its sessions \
                         pass unchecked",
                    scf.name
                );
            }
            return None;
        }
        Err(Missing::Stale) => return None,
    };
    if let Some(t) = &decision.transition {
        circuit_breaker_shell::log::transition(log, &format!("\"{}\"", scf.name), t);
    }
    Some(decision.admission)
}

/// The session's state, if the module admitted it.
///
/// # Safety
/// `s` must be a live session.
pub unsafe fn of<'a>(s: *const ngx_stream_session_t) -> Option<&'a mut Session> {
    // SAFETY: a session's `ctx` holds every stream module's context.
    unsafe {
        (*(*s).ctx.add(crate::conf::ctx_index()))
            .cast::<Session>()
            .as_mut()
    }
}
