//! Active probes of stream upstreams (`circuit_breaker_probe` in `stream { upstream {} }`):
//! while a breaker that has them is open, the module itself connects to one of the upstream's
//! servers every `probe_interval` (jittered), sends `send` and reads `expect`, one probe at a
//! time for the whole instance, and the answers alone close it. No client's session is let
//! through as the probe (`BreakerConfig::active`), so a client can neither hold the probe nor
//! fail it, nor make the breaker close.
//!
//! As the http module's prober: every worker runs one, a background task on its event loop
//! started from `init_process`; it reads each breaker's published gate without the lock,
//! sleeps until the next probe is due (`circuit_breaker_core::probe::look`), and asks for the
//! breaker's one probe under the lock (`Breaker::active_probe`): the first worker to ask sends
//! it, from a task of its own, on one of nginx's connections. A worker that exits or dies with
//! a probe in flight gives it back, or leaves it to be reclaimed at the next look.
//!
//! A worker probes one server (not `down`, not a backup) until a probe of it fails, then the
//! next: the good probes that close the breaker are one server's in a row, so that one dead
//! server of a pool nginx's balancer routes around cannot keep the breaker open. Probes are
//! TCP, or with `udp` a datagram and the first one back.

use core::cell::Cell;
use core::time::Duration;
use std::rc::Rc;

use circuit_breaker_core::breaker::{ProbeFailure, ProbeResult, Ticket};
use circuit_breaker_core::directive::{answers, answers_datagram, StreamProbe, MAX_EXPECT};
use circuit_breaker_core::probe::{self, Look};
use circuit_breaker_shell::clock::{mono_ms, rnd};
use circuit_breaker_shell::eject::{self, Pooled, Server};
use circuit_breaker_shell::ffi::{pid, process_alive};
use circuit_breaker_shell::net::{self, stream::Stream, Error, Peer};
use circuit_breaker_shell::zone::{Handle, HeldProbe, Key, Kind, Probed, Zone, DEFAULT_ROUTE};
use nginx_sys::{NGX_LOG_INFO, NGX_LOG_WARN};
use ngx::log::ngx_cycle_log;

use crate::conf::{MainConf, SrvConf};
use crate::pool;

/// How often a breaker the zone does not hold yet is looked for (it is made by the upstream's
/// first session, or by the configuration).
const FIND_MS: u64 = 1000;

/// Starts the prober in a worker, if any stream upstream has `circuit_breaker_probe`.
pub fn start(mcf: &'static MainConf) {
    let targets: Vec<Rc<Target>> = mcf
        .upstreams
        .iter()
        // SAFETY: upstream confs live as long as the configuration, which outlives the worker's
        // tasks of it.
        .map(|&s| unsafe { &*s })
        .filter(|s| s.probe.is_some() && s.params.is_some() && !s.servers.is_empty())
        .flat_map(|scf| {
            // The upstream's breaker, and each server's of its pool: an ejected server
            // returns through its own probes.
            let servers = scf.pool.as_ref().map_or(0, |p| p.servers.len());
            core::iter::once(None)
                .chain((0..servers).map(|i| Some(i as u16)))
                .map(move |server| {
                    Rc::new(Target {
                        scf,
                        server,
                        next_look: Cell::new(0),
                        in_flight: Cell::new(false),
                        cursor: Cell::new(rnd() as usize),
                    })
                })
        })
        .collect();
    if targets.is_empty() {
        return;
    }
    let Some(zone) = mcf.zone() else {
        return;
    };
    let prober = Rc::new(Prober { zone, targets });
    net::every(Duration::ZERO, move || {
        let prober = Rc::clone(&prober);
        async move { Some(prober.tick(mono_ms())) }
    })
    .detach();
}

/// A stream upstream with active probes, as this worker watches it.
struct Target {
    scf: &'static SrvConf,
    /// A server of its pool (its own breaker), or `None`: the upstream's breaker.
    server: Option<u16>,
    next_look: Cell<u64>,
    in_flight: Cell<bool>,
    /// The server probed, until one of its probes fails: a run of good probes is one
    /// server's, so that a dead server among healthy ones cannot keep the breaker open.
    cursor: Cell<usize>,
}

impl Probed for Target {
    fn in_flight(&self) -> &Cell<bool> {
        &self.in_flight
    }

    fn handle(&self) -> Handle {
        match self.pool_server() {
            Some(s) => s.local.handle.get(),
            None => self.scf.handle.get(),
        }
    }

    fn key(&self) -> Key<'_> {
        match self.pool_server() {
            Some(s) => self.scf.server_key(s),
            None => Key {
                hash: self.scf.key_hash,
                upstream: self.scf.name.as_bytes(),
                route: DEFAULT_ROUTE.as_bytes(),
                kind: Kind::Route,
            },
        }
    }
}

impl Target {
    /// The pool's server this target probes, if it is a server's.
    fn pool_server(&self) -> Option<&Server> {
        let i = self.server?;
        self.scf.pool.as_ref()?.servers.get(usize::from(i))
    }

    fn set_handle(&self, h: Handle) {
        match self.pool_server() {
            Some(s) => s.local.handle.set(h),
            None => self.scf.handle.set(h),
        }
    }

    fn interval_ms(&self) -> u32 {
        self.scf.params.map_or(1000, |p| p.cfg.probe_interval_ms)
    }

    /// The server to probe.
    fn server(&self) -> Option<Peer> {
        if let Some(i) = self.server {
            return self.scf.pool_peers.get(usize::from(i)).cloned();
        }
        let servers = &self.scf.servers;
        servers
            .get(self.cursor.get().checked_rem(servers.len())?)
            .cloned()
    }
}

struct Prober {
    zone: Zone,
    targets: Vec<Rc<Target>>,
}

impl Prober {
    /// Looks at the breakers whose time has come, claims the probes due and sends them;
    /// returns how long to sleep.
    fn tick(&self, now: u64) -> Duration {
        for t in &self.targets {
            if t.in_flight.get() || t.next_look.get() > now {
                continue;
            }
            let gate = match t.handle() {
                h if h.is_none() => None,
                h => self.zone.gate(h, t.key().hash),
            };
            if let Some(Look::At(at)) = gate.map(|g| probe::look(g, now, t.interval_ms())) {
                t.next_look.set(at);
                continue;
            }
            // Its address first: a probe claimed is one the instance waits for.
            let Some(server) = t.server() else {
                t.next_look.set(now.saturating_add(FIND_MS));
                continue;
            };
            if let Some(ticket) = claim(&self.zone, t, now) {
                let held = Held::new(&self.zone, t, ticket);
                net::spawn(probe_once(held, server)).detach();
            }
        }
        let wake = self
            .targets
            .iter()
            .map(|t| match t.in_flight.get() {
                true => now.saturating_add(probe::watch_ms(t.interval_ms())),
                false => t.next_look.get(),
            })
            .min()
            .unwrap_or(u64::MAX);
        Duration::from_millis(wake.saturating_sub(now).max(1))
    }
}

/// Under the lock: finds the breaker, asks for its probe, and plans the next look.
fn claim(zone: &Zone, t: &Target, now: u64) -> Option<Ticket> {
    let interval = t.interval_ms();
    let mut locked = zone.lock();
    let (handle, key) = (t.handle(), t.key());
    let known = !handle.is_none() && locked.get(handle, key.hash).is_some();
    let found = if known {
        locked.get(handle, key.hash)
    } else {
        locked.find(&key)
    };
    let Some(mut b) = found else {
        t.next_look.set(now.saturating_add(FIND_MS));
        return None;
    };
    t.set_handle(b.handle());
    // In a fleet, only the instance the fleet names probes (an upstream's: a server's breaker
    // is this instance's view of the server), but a question is this instance's own window's.
    let ticket = if t.server.is_some() || b.questioned_at(now) || b.may_probe(now) {
        b.active_probe(now, rnd(), pid(), &process_alive)
    } else {
        None
    };
    t.next_look.set(match probe::look(b.gate(), now, interval) {
        Look::At(at) => at,
        Look::Lock if !known => now,
        Look::Lock => now.saturating_add(probe::watch_ms(interval)),
    });
    ticket
}

type Held = HeldProbe<Target>;

/// Connects, sends `send`, reads until the answer is `expect` or is not: true when the server
/// answered as expected (or nothing was expected). Over UDP, the first datagram back is the
/// answer, and one must come.
async fn exchange(server: &Peer, p: &StreamProbe) -> Result<bool, Error> {
    if p.udp {
        let socket = Stream::connect_datagram(server, "probing").await?;
        socket.send_all(&p.send).await?;
        // Read into room for `expect` (and a byte when nothing is expected): the rest of a
        // longer datagram is not needed, and goes with it.
        let mut buf = [0u8; MAX_EXPECT];
        let n = socket.recv(&mut buf[..p.expect.len().max(1)]).await?;
        return Ok(answers_datagram(&p.expect, &buf[..n]));
    }
    let stream = Stream::connect(server, "probing").await?;
    if !p.send.is_empty() {
        stream.send_all(&p.send).await?;
    }
    if p.expect.is_empty() {
        return Ok(true);
    }
    let mut got = Vec::with_capacity(p.expect.len());
    let mut buf = [0u8; 256];
    loop {
        let room = (p.expect.len() - got.len()).min(buf.len());
        let n = stream.recv(&mut buf[..room]).await?;
        if n == 0 {
            return Err(Error::Closed);
        }
        got.extend_from_slice(&buf[..n]);
        if let Some(verdict) = answers(&p.expect, &got) {
            return Ok(verdict);
        }
    }
}

/// Sends one probe and records what it found.
async fn probe_once(held: Held, server: Peer) {
    let t = Rc::clone(&held.target);
    let Some(spec) = t.scf.probe.as_ref() else {
        return;
    };
    let started = mono_ms();
    let timeout = Duration::from_millis(u64::from(spec.timeout_ms));
    let failure = match net::within(timeout, exchange(&server, spec)).await {
        Ok(true) => None,
        Ok(false) => Some(ProbeFailure::InvalidResponse),
        Err(Error::Timeout) => Some(ProbeFailure::Timeout),
        // No verdict on the server: the probe is given back when `held` drops.
        Err(Error::Exiting | Error::NoConnection) => return,
        Err(_) => Some(ProbeFailure::Error),
    };
    let now = mono_ms();
    let result = ProbeResult {
        failure,
        tls: false,
        retry_after_s: 0,
        response_ms: now.saturating_sub(started),
    };
    let Some((ticket, zone)) = held.into_verdict() else {
        return;
    };
    let log = ngx_cycle_log().as_ptr();
    if let Some(i) = t.server {
        // A server of the pool: a good probe returns it, in every worker.
        if let Some(up) = pool::upstream(&zone, t.scf) {
            eject::record_probe(up, i, ticket, &result, now, log);
        }
        t.next_look.set(0);
        return;
    }
    let (transition, asked) = {
        let mut locked = zone.lock();
        let Some(mut b) = locked.get_probe(t.scf.handle.get(), &t.key(), ticket) else {
            return;
        };
        let asked = b.questioned_at(now) && b.holds_probe(ticket);
        (
            b.record_probe(now, rnd(), ticket, &result).transition,
            asked,
        )
    };
    let limit = t.scf.params.map_or(0, |p| p.cfg.probe_limit_ms());
    let failed = result.failed(limit);
    if let Some(why) = &failed {
        // The next probe goes to the next server.
        t.cursor.set(t.cursor.get().wrapping_add(1));
        ngx::ngx_log_error!(
            NGX_LOG_INFO,
            log,
            "circuit breaker \"{}\" {} to {}",
            t.scf.name,
            why,
            String::from_utf8_lossy(server.name())
        );
    }
    if let Some(tr) = &transition {
        circuit_breaker_shell::log::transition(log, &format!("\"{}\"", t.scf.name), tr);
    } else if asked && failed.is_none() {
        ngx::ngx_log_error!(
            NGX_LOG_WARN,
            log,
            "circuit breaker \"{}\" stays closed: its window would open it, but {} answered \
             its probe; the window starts again",
            t.scf.name,
            String::from_utf8_lossy(server.name())
        );
    }
    // Looked at again at once: the next probe of a run comes at its own time, not a tick late.
    t.next_look.set(0);
}
