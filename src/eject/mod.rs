//! Ejecting a bad server from a good pool. Each server of a breaker-enabled upstream has a
//! breaker in the zone (closed: in the pool, open: ejected, half-open: probing); every
//! attempt sent to a server is recorded on it. A server's breaker that opens takes it out of
//! the balancer in every worker, by the same means `server … down` does: the peer's `down`
//! flag, which round robin, `least_conn`, `hash`, `ip_hash` and `random` all honour.
//!
//! - **Following the zone.** The upstream's own breaker's berth carries a stamp that moves on
//!   every ejection and return. Each request reads it without the lock ([`follow`]); when
//!   it moved, the worker reads the servers' states under the lock and marks its peers (its
//!   own copy without an upstream `zone`; the shared ones, under their lock, with one).
//! - **Only our marks.** An ejected peer's `down` is set to [`EJECTED`], not 1, and only a
//!   `down` of that value is cleared: a configured `down`, another module's (lua's
//!   `set_peer_down`) and nginx's own `max_fails` state (which is not `down` at all) are
//!   left alone.
//! - **Probes.** Without `probe_uri`, once an ejected server's cooldown ends, one request of
//!   the whole instance is sent to it ([`claim_probe`]): the wrapped `peer.get` answers with
//!   that server's address instead of asking the balancer. With `probe_uri` the servers'
//!   breakers have active probes (`eject::server_config`): no request is ever sent to an
//!   ejected server; the prober (`crate::probe`) sends its own probe to the server and
//!   reports it with [`record_probe`], which returns the server as [`record`] does.

mod peers;

pub use peers::PeersLock;

use circuit_breaker_core::breaker::{Breaker, Control, Gate, ProbeResult, Ticket, Why};
use circuit_breaker_core::eject::{self, Move};
use circuit_breaker_core::snapshot::{BreakerView, State};
use nginx_sys::{
    ngx_conf_t, ngx_http_upstream_srv_conf_t, ngx_int_t, ngx_log_t, ngx_pool_t, ngx_str_t,
    NGX_ERROR, NGX_LOG_EMERG, NGX_LOG_WARN, NGX_OK,
};
use ngx::http::{HttpModuleMainConf, HttpModuleServerConf, NgxHttpUpstreamModule};

use crate::clock::rnd;
use crate::conf::{default_route, EjectSetting, Module, Pool, PoolLocal, Server, SrvConf};
use crate::ffi::{pid, process_alive};
use crate::zone::{Locked, StampRef, Zone};

/// `applied` while the upstream's own breaker is missing (the zone was full).
const MISSING: u64 = u64::MAX;

/// `postconfiguration`, after the breakers are collected: gives each breaker-enabled
/// upstream whose balancer keeps round-robin peers its pool of servers, unless
/// `circuit_breaker_eject off` (or fewer than two servers). An explicit
/// `circuit_breaker_eject` with a balancer that keeps no such peers is an error.
///
/// # Safety
/// `cf` must be the configuration being parsed, inside the http block, with every
/// upstream's balancer initialised.
pub unsafe fn configure(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: `cf` is the configuration being parsed, inside the http block (this fn's contract),
    // so its http confs are set.
    let cfr = unsafe { &*cf };
    let Some(umcf) = NgxHttpUpstreamModule::main_conf(cfr) else {
        return NGX_OK as ngx_int_t;
    };
    if Module::main_conf(cfr).is_none() {
        return NGX_ERROR as ngx_int_t;
    }
    // SAFETY: the upstream module's array holds pointers to its srv confs.
    let upstreams: &[*mut ngx_http_upstream_srv_conf_t] = unsafe { umcf.upstreams.as_slice() };
    for &uscf in upstreams {
        // SAFETY: each entry is an upstream block's srv conf, allocated from the configuration's
        // pool and live for the cycle.
        let uscf = unsafe { &mut *uscf };
        let Some(scf) = Module::server_conf_mut(uscf) else {
            continue;
        };
        let Some(cfg) = scf.breaker else { continue };
        if scf.original_init.is_none() {
            continue;
        }
        let spec = match scf.eject {
            EjectSetting::Off => continue,
            EjectSetting::On(spec) => spec,
            EjectSetting::Unset => Default::default(),
        };
        // SAFETY: during configuration the upstream's peer data is its balancer's.
        let Some(list) = (unsafe { peers::configured(uscf) }) else {
            if scf.eject != EjectSetting::Unset {
                // SAFETY: an upstream block's file name is a NUL-terminated string.
                let file = unsafe { core::ffi::CStr::from_ptr(uscf.file_name.cast()) };
                ngx::ngx_log_error!(
                    NGX_LOG_EMERG,
                    cfr.log,
                    "\"circuit_breaker_eject\" needs a balancer that keeps nginx's round-robin peers \
                     (round robin, least_conn, hash, ip_hash, random) in upstream \"{}\" in {}:{}",
                    scf.name,
                    file.to_string_lossy(),
                    uscf.line
                );
                return NGX_ERROR as ngx_int_t;
            }
            continue;
        };
        if list.len() < 2 {
            continue;
        }
        let servers: Vec<Server> = list
            .into_iter()
            .map(|(name, backup)| Server::new(scf.name_hash, name, backup))
            .collect();
        scf.pool = Some(Pool {
            cfg: eject::server_config(&cfg, &spec),
            max_ejected: eject::max_ejected(servers.len(), spec.max_ejected),
            servers,
            local: PoolLocal::default(),
        });
    }
    NGX_OK as ngx_int_t
}

/// A breaker-enabled upstream as a worker sees it: the zone, the module's conf and nginx's.
#[derive(Clone, Copy)]
pub struct Upstream<'a> {
    pub zone: &'a Zone,
    pub scf: &'a SrvConf,
    uscf: &'a ngx_http_upstream_srv_conf_t,
}

impl<'a> Upstream<'a> {
    /// # Safety
    /// `uscf` must be the live upstream conf whose module conf is `scf`, in a worker (its
    /// peer data is then its balancer's, round-robin peers when `scf` has a pool).
    pub unsafe fn new(
        zone: &'a Zone,
        scf: &'a SrvConf,
        uscf: &'a ngx_http_upstream_srv_conf_t,
    ) -> Upstream<'a> {
        Upstream { zone, scf, uscf }
    }
}

/// Brings this worker's peers in line with the pool's state in the zone, if it changed since
/// the worker last looked (the common case costs one atomic read and a comparison).
#[inline]
pub fn follow(up: Upstream<'_>, now: u64) {
    let Some(pool) = up.scf.pool.as_ref() else {
        return;
    };
    let local = &pool.local;
    let current = local.stamp.get().read();
    // SAFETY: `up.uscf` keeps round-robin peers: `scf` has a pool (checked above), and
    // `Upstream::new`'s contract ties the two; what `moved` asks.
    let moved = || unsafe { peers::moved(up.uscf, local) };
    if current.is_some() && current == local.applied.get() && !moved() {
        return;
    }
    if current.is_none() && local.applied.get() == Some(MISSING) && now < local.next_due.get() {
        // The upstream's own breaker is missing (the zone is full): ejection is off; look
        // again once a second.
        return;
    }
    let mut locked = up.zone.lock();
    sync(&mut locked, up, pool, now);
}

/// Reads every server's state under the lock (held through `locked`) and applies it to the
/// peers.
fn sync(locked: &mut Locked<'_>, up: Upstream<'_>, pool: &Pool, now: u64) {
    let (zone, scf) = (up.zone, up.scf);
    let local = &pool.local;
    let home = locked
        .get_or_find(scf.local.home.get(), &scf.key(default_route()))
        .map(|b| b.handle());
    let Some(home) = home else {
        local.stamp.set(StampRef::NONE);
        local.applied.set(Some(MISSING));
        local.next_due.set(now.saturating_add(1000));
        return;
    };
    scf.local.home.set(home);
    let stamp = zone.stamp(home);
    local.stamp.set(zone.stamp_ref(home));
    let mut out = 0;
    let mut next_due = u64::MAX;
    for s in &pool.servers {
        let Some(b) = locked.get_or_find(s.local.handle.get(), &scf.server_key(s)) else {
            // No breaker (the zone is full): the server stays in.
            s.local.out.set(false);
            continue;
        };
        s.local.handle.set(b.handle());
        let state = b.state();
        s.local.out.set(eject::is_out(state));
        out += u32::from(eject::is_out(state));
        let due = match (state, b.gate()) {
            _ if b.config().active || b.forced().is_some() => u64::MAX,
            (State::Open, Gate::Reject { until_ms, .. }) => until_ms,
            // A dry run's gate never rejects: its view says when the probe may start.
            (State::Open, _) => b.view(now).retry_at_ms.unwrap_or(now),
            (State::HalfOpen, _) => now,
            _ => u64::MAX,
        };
        next_due = next_due.min(due);
    }
    local.out.set(out);
    local.next_due.set(next_due);
    local.applied.set(stamp);
    // SAFETY: `up.uscf` is live and keeps round-robin peers, as `scf.pool` exists
    // (`Upstream::new`'s contract), in a worker: what `apply` asks.
    unsafe { peers::apply(up.uscf, pool) };
}

/// The server an attempt was sent to, from the `pc->name` the balancer set.
///
/// # Safety
/// `name` must be null or the name of the peer the balancer chose for the attempt.
#[inline]
pub unsafe fn server_of(pool: &Pool, name: *const ngx_str_t) -> Option<u16> {
    let map = pool.local.peers.try_borrow().ok()?;
    if let Some(p) = map.iter().find(|p| core::ptr::eq(p.name, name)) {
        return Some(p.server);
    }
    // SAFETY: `name` is null or the chosen peer's name (this fn's contract), live for the attempt.
    // A peer built after the map (a `zone` that resolves names) is found by address.
    let name = unsafe { name.as_ref() }?.as_bytes();
    pool.servers
        .iter()
        .position(|s| s.name.as_bytes() == name)
        .map(|i| i as u16)
}

/// Records a success of an attempt sent to server `server` without the lock, if its breaker
/// allows it now; false when the caller must record it under the lock. Its latency is left
/// out: a server's breaker judges rates, and the status page shows no server latencies.
#[inline]
pub fn add_success(zone: &Zone, scf: &SrvConf, server: u16, now: u64) -> bool {
    scf.pool
        .as_ref()
        .and_then(|p| p.servers.get(server as usize))
        .is_some_and(|s| zone.add_success_count(s.local.handle.get(), s.key_hash, now))
}

/// How many peers this worker's balancer skips because their server is out: a request gets
/// that many fewer tries, as it would with `server … down`.
#[inline]
pub fn downed(scf: &SrvConf) -> u32 {
    scf.pool.as_ref().map_or(0, |p| p.local.downed.get())
}

/// A probe this request is to make: the server, its ticket, and where to connect.
pub struct Probe {
    pub server: u16,
    pub ticket: Ticket,
    pub sockaddr: *mut nginx_sys::sockaddr,
    pub socklen: nginx_sys::socklen_t,
    pub name: *mut ngx_str_t,
}

/// Whether an ejected server's probe may be due at `now`, as far as this worker knows (no
/// lock): then [`claim_probe`] asks.
#[inline]
pub fn probe_due(pool: &Pool, now: u64) -> bool {
    now >= pool.local.next_due.get() && !pool.cfg.active
}

/// How long a worker waits before it asks again for an ejected server's probe that it
/// claimed but could not send (no peer for the server in its map).
const COPY_RETRY_MS: u64 = 1000;

/// Claims the probe of an ejected server whose cooldown ended, for the request about to
/// make its first attempt (see [`probe_due`]).
///
/// # Safety
/// `uscf` must be the pool's live upstream conf, in a worker, and `r_pool` the request's pool.
#[cold]
pub unsafe fn claim_probe(
    pool: &Pool,
    zone: &Zone,
    uscf: &ngx_http_upstream_srv_conf_t,
    r_pool: *mut ngx_pool_t,
    now: u64,
) -> Option<Probe> {
    let mut locked = zone.lock();
    let mut next_due = u64::MAX;
    let mut claimed = None;
    for (i, s) in pool.servers.iter().enumerate() {
        if !s.local.out.get() {
            continue;
        }
        let Some(mut b) = locked.get(s.local.handle.get(), s.key_hash) else {
            continue;
        };
        if claimed.is_some() {
            next_due = next_due.min(now);
            continue;
        }
        let (ticket, again) = eject::claim_probe(&mut b, now, rnd(), pid(), &process_alive);
        if let Some(t) = ticket {
            claimed = Some((i as u16, t));
        }
        if let Some(wait) = again {
            next_due = next_due.min(now.saturating_add(wait));
        }
    }
    pool.local.next_due.set(next_due);
    let (server, ticket) = claimed?;
    // The peers' read locks are taken without the zone's: a worker spinning on them must
    // not hold up every breaker of the instance.
    drop(locked);
    let copy = pool
        .local
        .peers
        .try_borrow()
        .ok()
        .and_then(|m| m.iter().find(|p| p.server == server).copied())
        // SAFETY: `uscf` keeps round-robin peers (a pool exists) and `r_pool` is the
        // request's (this fn's contract); the peer comes from this upstream's map.
        .and_then(|peer| unsafe { peers::copy_peer(uscf, &pool.local, &peer, r_pool) });
    let Some((sockaddr, socklen, name)) = copy else {
        // No peer to send it to (the map is not built yet, or the peers just changed):
        // free the probe, and ask again a second later (the next request's `follow`
        // rebuilds the map) rather than waiting for the next change of the pool.
        let s = &pool.servers[server as usize];
        if let Some(mut b) = zone.lock().get(s.local.handle.get(), s.key_hash) {
            b.release(now, ticket);
        }
        let again = now.saturating_add(COPY_RETRY_MS);
        pool.local
            .next_due
            .set(pool.local.next_due.get().min(again));
        return None;
    };
    Some(Probe {
        server,
        ticket,
        sockaddr,
        socklen,
        name,
    })
}

/// The servers of `up`'s pool out now and its cap, under the lock held through `locked`,
/// this worker's view brought up to date first: another worker may have moved a server since
/// this one looked (or this one never looked: the prober's worker may have served no request
/// yet), and the cap must count it. `None` without a pool.
pub fn count(locked: &mut Locked<'_>, up: Upstream<'_>, now: u64) -> Option<eject::Pool> {
    let pool = up.scf.pool.as_ref()?;
    let local = &pool.local;
    if local.applied.get().is_none() || local.stamp.get().read() != local.applied.get() {
        sync(locked, up, pool, now);
    }
    Some(eject::Pool {
        out: local.out.get(),
        max: pool.max_ejected,
    })
}

/// Runs `f` on the breaker of server `server` of `scf`'s pool, under the lock held through
/// `locked`.
pub fn with_server<R>(
    locked: &mut Locked<'_>,
    scf: &SrvConf,
    server: u16,
    f: impl FnOnce(&mut Breaker<'_>) -> R,
) -> Option<R> {
    let s = scf.pool.as_ref()?.servers.get(server as usize)?;
    let mut b = locked.get_or_find(s.local.handle.get(), &scf.server_key(s))?;
    s.local.handle.set(b.handle());
    Some(f(&mut b))
}

/// The pool's servers.
pub fn server_count(scf: &SrvConf) -> u16 {
    scf.pool.as_ref().map_or(0, |p| p.servers.len() as u16)
}

/// Logs each server's move and, when one changed the pool, tells every worker (the upstream's
/// stamp) and applies it to this worker's peers at once; under the lock held through
/// `locked`.
pub fn moved(
    locked: &mut Locked<'_>,
    up: Upstream<'_>,
    moves: &[(u16, Move)],
    now: u64,
    log: *mut ngx_log_t,
) {
    let scf = up.scf;
    let Some(pool) = scf.pool.as_ref() else {
        return;
    };
    for (server, m) in moves {
        if let Some(s) = pool.servers.get(*server as usize) {
            log_move(log, scf, s, m);
        }
    }
    if moves.is_empty() {
        return;
    }
    if moves.iter().any(|(_, m)| m.changes_pool()) {
        if let Some(home) = locked.get(scf.local.home.get(), scf.home_hash()) {
            home.bump_stamp();
        }
    }
    sync(locked, up, pool, now);
}

/// Reports the prober's probe of the ejected server `server` (with `probe_uri`), sent with
/// the ticket its breaker's `active_probe` gave: a good one returns the server to the pool in
/// every worker, logged as any return.
pub fn record_probe(
    up: Upstream<'_>,
    server: u16,
    ticket: Ticket,
    probe: &ProbeResult,
    now: u64,
    log: *mut ngx_log_t,
) {
    let mut locked = up.zone.lock();
    judge(&mut locked, up, server, now, log, |b, count| {
        eject::record_probe(b, count, now, rnd(), ticket, probe).1
    });
}

/// Lets `step` judge server `server`'s breaker with the pool's count of servers out, under
/// the lock held through `locked`; then logs the move, and when the pool changed bumps the
/// stamp (every worker follows) and applies it to this worker's peers.
fn judge(
    locked: &mut Locked<'_>,
    up: Upstream<'_>,
    server: u16,
    now: u64,
    log: *mut ngx_log_t,
    step: impl FnOnce(&mut Breaker<'_>, &mut eject::Pool) -> Option<Move>,
) {
    let Some(mut count) = count(locked, up, now) else {
        return;
    };
    let m = with_server(locked, up.scf, server, |b| step(b, &mut count));
    if let Some(m) = m.flatten() {
        moved(locked, up, &[(server, m)], now, log);
    }
}

/// Frees the probe a request held that ended before its probe's outcome.
pub fn release(zone: &Zone, scf: &SrvConf, server: u16, ticket: Ticket, now: u64) {
    let Some(s) = scf
        .pool
        .as_ref()
        .and_then(|p| p.servers.get(server as usize))
    else {
        return;
    };
    let mut locked = zone.lock();
    if let Some(mut b) = locked.get(s.local.handle.get(), s.key_hash) {
        b.release(now, ticket);
    };
}

/// One `warn` line per ejection and return, with its numbers.
fn log_move(log: *mut ngx_log_t, scf: &SrvConf, s: &Server, m: &Move) {
    let (verb, t) = match m {
        Move::Ejected(t) | Move::Kept(t) => ("ejected", t),
        Move::Returned(t) => ("returned", t),
    };
    let back = t.detail.as_deref().map(|d| {
        d.strip_prefix("retry in ")
            .map_or(d.to_owned(), |s| format!("back in {s}"))
    });
    ngx::ngx_log_error!(
        NGX_LOG_WARN,
        log,
        "circuit breaker \"{}\" server {} {}: {}",
        scf.name,
        s.name,
        verb,
        Why(&t.reason, back.as_deref())
    );
}

/// An operator's `action=eject` (out until `restore`, whatever the cap says) or
/// `action=restore` (back in, a fresh window) of `server`: the server's new view, or `None`
/// for an unknown server (or one whose breaker the zone could not hold).
pub fn control(
    zone: &Zone,
    scf: &SrvConf,
    server: &str,
    eject: bool,
    now: u64,
) -> Option<BreakerView> {
    let pool = scf.pool.as_ref()?;
    let s = pool.servers.iter().find(|s| s.name == server)?;
    let mut locked = zone.lock();
    let view = {
        let mut b = locked.find(&scf.server_key(s))?;
        let action = if eject {
            Control::ForceOpen
        } else {
            Control::Reset
        };
        b.control(now, rnd(), action);
        b.view(now)
    };
    if let Some(home) = locked.find(&scf.key(default_route())) {
        home.bump_stamp();
    }
    Some(view)
}

/// The servers of each upstream, with their breakers' views, for the status page: in
/// configuration order, each with its backup flag.
pub fn servers(scf: &SrvConf) -> impl Iterator<Item = (&str, bool)> {
    scf.pool
        .iter()
        .flat_map(|p| p.servers.iter().map(|s| (s.name.as_str(), s.backup)))
}
