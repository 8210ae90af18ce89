//! Active health probes (`probe_uri=`): while a breaker that has them is open, the module
//! itself asks one of the upstream's servers for `probe_uri`, every `probe_interval`
//! (jittered), one probe at a time for the whole instance, and the answers alone close it. No
//! user request is let through while it is open.
//!
//! Every worker runs the prober, a background task on its event loop ([`net::every`]) started
//! from `init_process`. At each look it reads the published gate of each breaker of an
//! upstream with `probe_uri` without the lock, and sleeps until the next probe is due
//! ([`probe::look`]). When one is, it picks a server, takes the zone lock and asks for the
//! breaker's one probe, instance-wide (`Breaker::active_probe`): the first worker to ask is
//! granted it, the others find it held. The winner sends the probe from a task of its own, so
//! that a hanging server holds up no other breaker, and records the answer with the probe's
//! ticket.
//!
//! An upstream that ejects servers has a breaker per server, with active probes too: while a
//! server is ejected its probes go to that server alone, and a good one returns it to the pool
//! of every worker (`eject::record_probe`). No user request is ever sent to it meanwhile.
//!
//! - **Exiting**: no look and no probe starts once the worker is exiting; a probe in flight
//!   ends with `net::Error::Exiting` when nginx closes its connection, and frees the
//!   probe.
//! - **Killed**: a worker killed with a probe in flight leaves the probe held by a dead pid; the
//!   next worker to ask reclaims it (`process_alive`), at most one look later.
//! - **Cost**: a look is a few atomic reads per breaker; the lock is taken only when a probe is
//!   due, when one in flight outlasts its spacing, and for a dry run.

mod send;
mod servers;
mod target;

use core::time::Duration;
use std::rc::Rc;

use circuit_breaker_core::breaker::Ticket;
use circuit_breaker_core::probe::{self, Look};
use circuit_breaker_core::settle::{self, Ledger};
use nginx_sys::{ngx_cycle_t, NGX_LOG_ERR, NGX_LOG_INFO};
use ngx::log::ngx_cycle_log;

use crate::conf::Module;
use crate::eject;
use crate::net;
use crate::upstream::ledger::ZoneLedger;
use crate::upstream::log_transition;
use circuit_breaker_shell::clock::{mono_ms, rnd};
use circuit_breaker_shell::ffi::{pid, process_alive};
use circuit_breaker_shell::zone::{Handle, HeldProbe, Locked, Zone};

use self::target::{Target, Watched};

/// How often a breaker the zone does not hold (yet) is looked for: a route whose upstream is
/// picked at run time gets its breaker on first use.
const FIND_MS: u64 = 1000;

/// Breakers handled per hold of the zone lock, as the status walk does, so that thousands of
/// breakers not found yet never hold the lock long.
const LOCK_BATCH: usize = 256;

/// Starts the prober in a worker process (`init_process`), if any upstream has `probe_uri`.
/// Cache manager and loader processes never probe.
pub fn start(cycle: &ngx_cycle_t) {
    let Some(mcf) = Module::serving_main_conf(cycle) else {
        return;
    };
    let targets = target::collect(mcf);
    if targets.is_empty() {
        return;
    }
    // SAFETY: our own zone, mapped in every worker.
    let Some(zone) = (unsafe { Zone::from_shm(mcf.zone) }) else {
        return;
    };
    let prober = Rc::new(Prober { zone, targets });
    net::every(Duration::ZERO, move || {
        let prober = Rc::clone(&prober);
        async move { Some(prober.tick(mono_ms())) }
    })
    .detach();
}

/// This worker's prober: every active-probe breaker, and when to look at each again.
struct Prober {
    zone: Zone,
    targets: Vec<Rc<Target>>,
}

impl Prober {
    /// Looks at the breakers whose time has come; returns how long to sleep.
    ///
    /// First without the lock: each breaker's gate says when its next probe is due. Those due
    /// (or not found in the zone yet) are then handled under the lock, a batch at a time, and
    /// the probes claimed are sent once it is released.
    fn tick(&self, now: u64) -> Duration {
        let mut due = Vec::new();
        for t in &self.targets {
            if t.in_flight.get() || t.next_look.get() > now {
                continue;
            }
            let gate = match t.handle.get() {
                h if h.is_none() => None,
                h => self.zone.gate(h, t.key_hash),
            };
            match gate.map(|g| probe::look(g, now, t.up.interval_ms)) {
                Some(Look::At(at)) => t.next_look.set(at),
                // Due (or not found yet): the server first, outside the zone lock.
                Some(Look::Lock) => due.push((t, t.peer())),
                None if t.handle.get().is_none() => due.push((t, None)),
                None => due.push((t, t.peer())),
            }
        }
        let mut claimed = Vec::new();
        for batch in due.chunks(LOCK_BATCH) {
            let mut locked = self.zone.lock();
            for (t, server) in batch {
                let ticket = claim(&mut locked, t, server.is_some(), now);
                if let (Some(ticket), Some(server)) = (ticket, server) {
                    claimed.push((*t, ticket, server.clone()));
                }
            }
        }
        for (t, ticket, server) in claimed {
            // Held (in flight) before the task starts: it may end within `spawn`.
            let held = Held::new(&self.zone, t, ticket);
            net::spawn(run(held, server)).detach();
        }
        let wake = self
            .targets
            .iter()
            .map(|t| match t.in_flight.get() {
                true => now.saturating_add(probe::watch_ms(t.up.interval_ms)),
                false => t.next_look.get(),
            })
            .min()
            .unwrap_or(u64::MAX);
        Duration::from_millis(wake.saturating_sub(now).max(1))
    }
}

/// Under the lock: finds the breaker if need be, asks for its probe when a server can
/// be probed, and plans the next look.
fn claim(locked: &mut Locked<'_>, t: &Target, server: bool, now: u64) -> Option<Ticket> {
    let interval = t.up.interval_ms;
    let handle = t.handle.get();
    let known = !handle.is_none() && locked.get(handle, t.key_hash).is_some();
    let found = if known {
        locked.get(handle, t.key_hash)
    } else {
        locked.find(&t.key())
    };
    let Some(mut b) = found else {
        t.handle.set(Handle::NONE);
        t.next_look.set(now.saturating_add(FIND_MS));
        return None;
    };
    t.handle.set(b.handle());
    // In a fleet, only the instance the fleet names probes (`may_probe`); a server's breaker
    // is this instance's view of the server alone.
    let routed = matches!(t.what, Watched::Route(_));
    let ticket = if server && (!routed || b.may_probe(now)) {
        b.active_probe(now, rnd(), pid(), &process_alive)
    } else {
        None
    };
    t.next_look.set(match probe::look(b.gate(), now, interval) {
        Look::At(at) => at,
        // Just found: the next tick claims it.
        Look::Lock if !known => now,
        // Due but taken (in flight elsewhere, or held by a worker that died: reclaimed
        // at the next look), another fleet member's to probe, a dry run, or no server.
        Look::Lock => now.saturating_add(probe::watch_ms(interval)),
    });
    ticket
}

type Held = HeldProbe<Target>;

/// Sends probes and records their answers: one, and the next at once when it is due as this
/// one ends (a probe that took its whole spacing, such as one that hung until
/// `probe_timeout`), rather than at the next look.
async fn run(held: Held, server: net::Peer) {
    let mut next = Some((held, server));
    while let Some((held, server)) = next {
        next = probe_once(held, server).await;
    }
}

/// Sends one probe and records its answer; returns the next probe, held, and its server when it
/// is due already.
async fn probe_once(held: Held, server: net::Peer) -> Option<(Held, net::Peer)> {
    let t = Rc::clone(&held.target);
    let started = mono_ms();
    let sent = send::probe(&t.up, &server).await;
    let now = mono_ms();
    let Some(end) = sent.end else {
        // No verdict on the origin (the worker is exiting, or had no free connection): the
        // probe is freed when `held` drops. A request nginx cannot send is said once.
        if let Some(e @ net::Error::InvalidRequest(_)) = sent.error() {
            if !t.complained.replace(true) {
                ngx::ngx_log_error!(
                    NGX_LOG_ERR,
                    ngx_cycle_log().as_ptr(),
                    "circuit breaker \"{}\" probe not sent: {}",
                    t.name(),
                    e
                );
            }
        }
        return None;
    };
    let result = probe::result(&t.up.spec, end, now.saturating_sub(started));
    // Recorded with the ticket: nothing is left for `held` to give back.
    let (ticket, zone) = held.into_verdict()?;
    let log = ngx_cycle_log().as_ptr();
    let why = sent.failure(&t.up.spec, result.response_ms, t.up.latency_ms);
    let transition = match &t.what {
        Watched::Route(_) => {
            let mut locked = zone.lock();
            // A failure its server explains (ejected at once, if the pool may lose it) says
            // nothing of the upstream: the next probe goes to another server.
            let explained = match (&why, t.up.pool(&zone), t.up.index_of(&server)) {
                (Some(why), Some(up), Some(i)) if !result.tls => {
                    let mut ledger = ZoneLedger {
                        locked: &mut locked,
                        handle: t.handle.get(),
                        key: t.key(),
                        scf: up.scf,
                        up: Some(up),
                        now,
                    };
                    let held = ledger.own(ticket, |b| b.holds_probe(ticket));
                    match (held, up.scf.breaker.as_ref()) {
                        (Some(true), Some(cfg)) => {
                            let name = t.name();
                            let mut moves = Vec::new();
                            let probe = Some((name.as_str(), &why[..]));
                            let a = settle::assess(
                                &mut ledger,
                                cfg,
                                i,
                                probe,
                                now,
                                &mut None,
                                &mut moves,
                                &mut rnd,
                            );
                            eject::moved(ledger.locked, up, &moves, now, log);
                            a.explained
                        }
                        _ => false,
                    }
                }
                _ => false,
            };
            // By its ticket: a reload that changed the window length moved the breaker.
            let mut b = locked.get_probe(t.handle.get(), &t.key(), ticket)?;
            if explained {
                b.probe_explained(now, ticket);
                None
            } else {
                b.record_probe(now, rnd(), ticket, &result).transition
            }
        }
        Watched::Server { index, .. } => {
            // Logs a return itself, and has every worker follow it.
            let up = t.up.pool(&zone)?;
            eject::record_probe(up, *index, ticket, &result, now, log);
            None
        }
    };
    if let Some(why) = why {
        // A TLS failure is no verdict on the origin and keeps the breaker open: said once at
        // `error` (until the next answer), as the user path does; other failures at `info`.
        let tls = end == probe::ProbeEnd::Tls;
        let level = if tls && !t.complained.replace(true) {
            NGX_LOG_ERR
        } else {
            NGX_LOG_INFO
        };
        ngx::ngx_log_error!(
            level,
            log,
            "circuit breaker \"{}\" probe to {} failed: {}",
            t.name(),
            String::from_utf8_lossy(server.name()),
            why
        );
        if !tls {
            t.complained.set(false);
        }
    } else {
        t.complained.set(false);
    }
    if let Some(tr) = &transition {
        log_transition(log, &t.name(), tr);
    }
    // The next probe may be due already, or before the prober would look again (the run of
    // good probes after a brownout comes faster than the interval): then this task sends it,
    // waiting for it without holding the probe if need be. The server first, outside the zone lock.
    let watch = probe::watch_ms(t.up.interval_ms);
    loop {
        let now = mono_ms();
        let gate = zone.gate(t.handle.get(), t.key_hash)?;
        match probe::look(gate, now, t.up.interval_ms) {
            Look::Lock => break,
            Look::At(at) if at.saturating_sub(now) < watch => {
                ngx::async_::sleep(Duration::from_millis(at.saturating_sub(now).max(1))).await;
                if net::exiting() {
                    return None;
                }
            }
            Look::At(_) => {
                t.next_look.set(0);
                return None;
            }
        }
    }
    let now = mono_ms();
    let server = t.peer()?;
    let ticket = claim(&mut zone.lock(), &t, true, now)?;
    Some((Held::new(&zone, &t, ticket), server))
}
