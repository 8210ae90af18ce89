//! Following, judging and controlling a pool's servers, over either module's upstream conf
//! ([`Pooled`]) and round-robin peers ([`super::RrUpstream`]). Each server of a pool has a
//! breaker in the zone (closed: in the pool, open: ejected, half-open: probing); a server's
//! breaker that opens takes it out of the balancer in every worker, by the same means
//! `server … down` does.
//!
//! - **Following the zone.** The upstream's own breaker's berth carries a stamp that moves on
//!   every ejection and return. Each request or session reads it without the lock
//!   ([`follow`]); when it moved, the worker reads the servers' states under the lock and
//!   marks its peers (its own copy without an upstream `zone`; the shared ones, under their
//!   lock, with one).
//! - **Probes.** Without active probes, once an ejected server's cooldown ends, one request or
//!   session of the whole instance is sent to it ([`claim_probe`]). With them, no client's is
//!   ever sent to an ejected server; the prober reports its own with [`record_probe`].

use core::cell::Cell;

use circuit_breaker_core::breaker::{Breaker, Control, Gate, ProbeResult, Ticket};
use circuit_breaker_core::eject::outlier::{self, Sample};
use circuit_breaker_core::eject::ramp::ServerRamp;
use circuit_breaker_core::eject::{self, Move};
use circuit_breaker_core::snapshot::{BreakerView, State};
use nginx_sys::{ngx_log_t, ngx_pool_t, ngx_str_t, NGX_LOG_WARN};

use super::peers::{self, RrPeers, RrUpstream};
use super::pool::{Pool, Server};
use crate::clock::rnd;
use crate::ffi::{pid, process_alive};
use crate::zone::{Handle, Key, Kind, Locked, StampRef, Zone};

/// `applied` while the upstream's own breaker is missing (the zone was full).
const MISSING: u64 = u64::MAX;

/// What an upstream conf with a pool says of it, for either module.
pub trait Pooled {
    /// nginx's conf of the upstream block.
    type Uscf: RrUpstream;
    /// The pool, when the upstream has one.
    fn pool(&self) -> Option<&PoolOf<Self::Uscf>>;
    /// The upstream's name.
    fn name(&self) -> &str;
    /// Where this worker last found the upstream's own breaker, which carries the stamp.
    fn home(&self) -> &Cell<Handle>;
    /// The key of the upstream's own breaker.
    fn home_key(&self) -> Key<'_>;
    /// The key of the breaker of this upstream's server `server`.
    fn server_key<'a>(&'a self, server: &'a Server) -> Key<'a> {
        Key {
            hash: server.key_hash,
            upstream: self.name().as_bytes(),
            route: server.name.as_bytes(),
            kind: Kind::Server,
        }
    }
}

/// The pool over an upstream conf's round-robin peers.
pub type PoolOf<U> = Pool<<<U as RrUpstream>::Peers as RrPeers>::Peer>;

/// A breaker-enabled upstream as a worker sees it: the zone, the module's conf and nginx's.
pub struct Upstream<'a, C: Pooled> {
    pub zone: &'a Zone,
    pub scf: &'a C,
    uscf: &'a C::Uscf,
}

impl<C: Pooled> Clone for Upstream<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C: Pooled> Copy for Upstream<'_, C> {}

impl<'a, C: Pooled> Upstream<'a, C> {
    /// # Safety
    /// `uscf` must be the live upstream conf whose module conf is `scf`, in a worker (its
    /// peer data is then its balancer's, round-robin peers when `scf` has a pool).
    pub unsafe fn new(zone: &'a Zone, scf: &'a C, uscf: &'a C::Uscf) -> Upstream<'a, C> {
        Upstream { zone, scf, uscf }
    }
}

/// Brings this worker's peers in line with the pool's state in the zone, if it changed since
/// the worker last looked (the common case costs one atomic read and a comparison).
#[inline]
pub fn follow<C: Pooled>(up: Upstream<'_, C>, now: u64) {
    let Some(pool) = up.scf.pool() else {
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
fn sync<C: Pooled>(locked: &mut Locked<'_>, up: Upstream<'_, C>, pool: &PoolOf<C::Uscf>, now: u64) {
    let (zone, scf) = (up.zone, up.scf);
    let local = &pool.local;
    let home = locked
        .get_or_find(scf.home().get(), &scf.home_key())
        .map(|b| b.handle());
    let Some(home) = home else {
        local.stamp.set(StampRef::NONE);
        local.applied.set(Some(MISSING));
        local.next_due.set(now.saturating_add(1000));
        return;
    };
    scf.home().set(home);
    let stamp = zone.stamp(home);
    local.stamp.set(zone.stamp_ref(home));
    let mut out = 0;
    let mut next_due = u64::MAX;
    let mut ramp_until = 0;
    for s in &pool.servers {
        let Some(b) = locked.get_or_find(s.local.handle.get(), &scf.server_key(s)) else {
            // No breaker (the zone is full): the server stays in.
            s.local.out.set(false);
            s.local.ramp.set(ServerRamp::NONE);
            continue;
        };
        s.local.handle.set(b.handle());
        let state = b.state();
        s.local.out.set(eject::is_out(state));
        let gate = b.gate();
        let ramp = ServerRamp::of(gate);
        s.local.ramp.set(ramp);
        ramp_until = ramp_until.max(ramp.until_ms);
        out += u32::from(eject::is_out(state));
        let due = match (state, gate) {
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
    local.ramp_until.set(ramp_until);
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
pub unsafe fn server_of<P>(pool: &Pool<P>, name: *const ngx_str_t) -> Option<u16> {
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

/// The address and name of a peer of server `server`, copied into `r_pool` (see
/// [`peers::copy_peer`]), for an attempt this module sends past the balancer: a probe (to a
/// server out of the pool, `live` false), or, `live` true, a pick [`passes_over`] turned
/// down for which the balancer found no other server — a peer round robin could pick now.
///
/// # Safety
/// `uscf` must be the live upstream conf of `pool`, in a worker; `r_pool` the request's pool.
pub unsafe fn address_of<U: RrUpstream>(
    uscf: &U,
    pool: &PoolOf<U>,
    server: u16,
    r_pool: *mut ngx_pool_t,
    live: bool,
) -> Option<(
    *mut nginx_sys::sockaddr,
    nginx_sys::socklen_t,
    *mut ngx_str_t,
)> {
    let live_at = live.then(crate::clock::unix_s);
    let map = pool.local.peers.try_borrow().ok()?;
    map.iter().filter(|p| p.server == server).find_map(|peer| {
        // SAFETY: `uscf` keeps round-robin peers and `r_pool` is the request's (this fn's
        // contract); the peer comes from this upstream's map.
        unsafe { peers::copy_peer(uscf, &pool.local, peer, r_pool, live_at) }
    })
}

/// Whether any server of the pool is returning on a ramp in this worker's view at `now` (one
/// comparison: the common case).
#[inline]
pub fn ramping<P>(pool: &Pool<P>, now: u64) -> bool {
    now < pool.local.ramp_until.get()
}

/// Whether the balancer's pick of server `server` at `now` is passed over for the server's
/// ramp (`circuit_breaker_core::eject::ramp`): the draw turns it down and another primary
/// server could take the request (`peers::may_pass_over`). A backup is never held back.
///
/// # Safety
/// `uscf` must be the live upstream conf of `pool`, in a worker.
#[cold]
pub unsafe fn passes_over<U: RrUpstream>(
    uscf: &U,
    pool: &PoolOf<U>,
    server: u16,
    now: u64,
) -> bool {
    let Some(s) = pool.servers.get(server as usize) else {
        return false;
    };
    let ramp = s.local.ramp.get();
    if s.backup || ramp.keeps(now, rnd(), true) {
        return false;
    }
    // SAFETY: `uscf` is `pool`'s live upstream conf, in a worker (this fn's contract).
    unsafe { peers::may_pass_over(uscf, &pool.local, server, crate::clock::unix_s()) }
}

/// Records a success of an attempt sent to server `server` that took `ms` without the
/// lock, if its breaker allows it now; false when the caller must record it under the lock.
/// Its latency joins the server's window: the relative rules judge it ([`assess`]).
#[inline]
pub fn add_success<C: Pooled>(zone: &Zone, scf: &C, server: u16, now: u64, ms: u64) -> bool {
    scf.pool()
        .and_then(|p| p.servers.get(server as usize))
        .is_some_and(|s| zone.add_success(s.local.handle.get(), s.key_hash, now, ms))
}

/// How often a pool is judged by its relative rules.
const ASSESS_MS: u64 = 1000;

/// Whether this worker is due to judge the pool by its relative rules ([`assess`]): on the
/// first attempt it sees end in each second of the monotonic clock (one comparison).
#[inline]
pub fn assess_due<C: Pooled>(scf: &C, now: u64) -> bool {
    scf.pool().is_some_and(|p| now >= p.local.next_assess.get())
}

/// Judges the pool of `up` by its relative rules (`circuit_breaker_core::eject::outlier`),
/// under the lock: ejects its outliers, worst first, while the cap allows, and renews the
/// probe latency limit of the servers out as latency outliers from the pool's latency now.
#[cold]
pub fn assess<C: Pooled>(up: Upstream<'_, C>, now: u64, log: *mut ngx_log_t) {
    let Some(pool) = up.scf.pool() else {
        return;
    };
    if !pool.relative.is_on() {
        pool.local.next_assess.set(u64::MAX);
        return;
    }
    // The next second's start: whichever worker's attempt ends first in a second judges the
    // pool in that second, which a replay of the log (on the module's clock) can follow.
    pool.local.next_assess.set(
        (now / ASSESS_MS)
            .saturating_add(1)
            .saturating_mul(ASSESS_MS),
    );
    // One worker judges the pool each second: the others go on without the lock.
    if !up.zone.claim_second(up.scf.home().get(), now) {
        return;
    }
    let mut locked = up.zone.lock();
    let Some(mut count) = count(&mut locked, up, now) else {
        return;
    };
    let samples: Vec<Sample> = pool
        .servers
        .iter()
        .map(|s| {
            let Some(mut b) = locked.get_or_find(s.local.handle.get(), &up.scf.server_key(s))
            else {
                return Sample::default();
            };
            s.local.handle.set(b.handle());
            let eligible = !s.backup && b.state() == State::Closed && b.forced().is_none();
            let (requests, failures, latency) = b.sample(now);
            Sample::of(eligible, requests, failures, &latency)
        })
        .collect();
    let rules = pool.relative;
    if let Some(pool_ms) = outlier::pool_latency(&samples, &rules) {
        let limit = outlier::limit_of(pool_ms, rules.latency_factor);
        for (i, s) in pool.servers.iter().enumerate() {
            if s.local.out.get() {
                with_server(&mut locked, up.scf, i as u16, |b| {
                    b.set_outlier_limit(limit)
                });
            }
        }
    }
    let mut moves = Vec::new();
    for (i, o) in outlier::assess(&samples, &rules) {
        if !count.may_eject() {
            break;
        }
        let m = with_server(&mut locked, up.scf, i as u16, |b| {
            eject::eject_outlier(b, &mut count, now, rnd(), &o, rules.latency_factor)
        });
        if let Some(m) = m.flatten() {
            moves.push((i as u16, m));
        }
    }
    moved(&mut locked, up, &moves, now, log);
}

/// How many peers this worker's balancer skips because their server is out: a request gets
/// that many fewer tries, as it would with `server … down`.
#[inline]
pub fn downed<C: Pooled>(scf: &C) -> u32 {
    scf.pool().map_or(0, |p| p.local.downed.get())
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
pub fn probe_due<P>(pool: &Pool<P>, now: u64) -> bool {
    now >= pool.local.next_due.get() && !pool.cfg.active
}

/// How long after claiming an ejected server's probe a worker asks about it again.
const PROBE_ASK_MS: u64 = 100;

/// How long a worker waits before it asks again for an ejected server's probe that it
/// claimed but could not send (no peer for the server in its map).
const COPY_RETRY_MS: u64 = 1000;

/// Claims the probe of an ejected server whose cooldown ended, for the request about to
/// make its first attempt (see [`probe_due`]).
///
/// # Safety
/// `uscf` must be the pool's live upstream conf, in a worker, and `r_pool` the request's pool.
#[cold]
pub unsafe fn claim_probe<U: RrUpstream>(
    pool: &PoolOf<U>,
    zone: &Zone,
    uscf: &U,
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
    // A run of good probes may need more than the one claimed (after a brownout, or for a
    // latency outlier) and no move may follow it: ask again soon; the breaker then says
    // when the next may start.
    let asked = match claimed {
        Some(_) => next_due.min(now.saturating_add(PROBE_ASK_MS)),
        None => next_due,
    };
    pool.local.next_due.set(asked);
    let (server, ticket) = claimed?;
    // The peers' read locks are taken without the zone's: a worker spinning on them must
    // not hold up every breaker of the instance.
    drop(locked);
    // SAFETY: `uscf` keeps round-robin peers (a pool exists) and `r_pool` is the request's
    // (this fn's contract).
    let copy = unsafe { address_of(uscf, pool, server, r_pool, false) };
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
pub fn count<C: Pooled>(
    locked: &mut Locked<'_>,
    up: Upstream<'_, C>,
    now: u64,
) -> Option<eject::Pool> {
    let pool = up.scf.pool()?;
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
pub fn with_server<C: Pooled, R>(
    locked: &mut Locked<'_>,
    scf: &C,
    server: u16,
    f: impl FnOnce(&mut Breaker<'_>) -> R,
) -> Option<R> {
    let s = scf.pool()?.servers.get(server as usize)?;
    let mut b = locked.get_or_find(s.local.handle.get(), &scf.server_key(s))?;
    s.local.handle.set(b.handle());
    Some(f(&mut b))
}

/// The pool's servers.
pub fn server_count<C: Pooled>(scf: &C) -> u16 {
    scf.pool().map_or(0, |p| p.servers.len() as u16)
}

/// Logs each server's move and, when one changed the pool, tells every worker (the upstream's
/// stamp) and applies it to this worker's peers at once; under the lock held through
/// `locked`.
pub fn moved<C: Pooled>(
    locked: &mut Locked<'_>,
    up: Upstream<'_, C>,
    moves: &[(u16, Move)],
    now: u64,
    log: *mut ngx_log_t,
) {
    let scf = up.scf;
    let Some(pool) = scf.pool() else {
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
        let home = scf.home_key();
        if let Some(home) = locked.get(scf.home().get(), home.hash) {
            home.bump_stamp();
        }
    }
    sync(locked, up, pool, now);
}

/// Reports the prober's probe of the ejected server `server` (with `probe_uri`), sent with
/// the ticket its breaker's `active_probe` gave: a good one returns the server to the pool in
/// every worker, logged as any return.
pub fn record_probe<C: Pooled>(
    up: Upstream<'_, C>,
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
fn judge<C: Pooled>(
    locked: &mut Locked<'_>,
    up: Upstream<'_, C>,
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
pub fn release<C: Pooled>(zone: &Zone, scf: &C, server: u16, ticket: Ticket, now: u64) {
    let Some(s) = scf.pool().and_then(|p| p.servers.get(server as usize)) else {
        return;
    };
    let mut locked = zone.lock();
    if let Some(mut b) = locked.get(s.local.handle.get(), s.key_hash) {
        b.release(now, ticket);
    };
}

/// One `warn` line per ejection and return, with its numbers.
fn log_move<C: Pooled>(log: *mut ngx_log_t, scf: &C, s: &Server, m: &Move) {
    let (verb, why) = m.words();
    ngx::ngx_log_error!(
        NGX_LOG_WARN,
        log,
        "circuit breaker \"{}\" server {} {}: {}",
        scf.name(),
        s.name,
        verb,
        why
    );
}

/// An operator's `action=eject` (out until `restore`, whatever the cap says) or
/// `action=restore` (back in, a fresh window) of `server`: the server's new view, or `None`
/// for an unknown server (or one whose breaker the zone could not hold).
pub fn control<C: Pooled>(
    zone: &Zone,
    scf: &C,
    server: &str,
    eject: bool,
    now: u64,
) -> Option<BreakerView> {
    let pool = scf.pool()?;
    let s = pool.servers.iter().find(|s| s.name == server)?;
    control_key(zone, &scf.home_key(), &scf.server_key(s), eject, now)
}

/// [`control`] of the server whose breaker's key is `server`, in the pool of the upstream whose
/// own breaker's key is `home`: for a module that knows the pool only by the zone's breakers
/// (the http status location's control of a stream pool).
pub fn control_key(
    zone: &Zone,
    home: &Key<'_>,
    server: &Key<'_>,
    eject: bool,
    now: u64,
) -> Option<BreakerView> {
    let mut locked = zone.lock();
    // The upstream's own breaker first: a server found without it is changed by nobody.
    locked.find(home)?;
    let view = {
        let mut b = locked.find(server)?;
        let action = if eject {
            Control::ForceOpen
        } else {
            Control::Reset
        };
        b.control(now, rnd(), action);
        b.view(now)
    };
    if let Some(home) = locked.find(home) {
        home.bump_stamp();
    }
    Some(view)
}

/// The servers of each upstream, with their breakers' views, for the status page: in
/// configuration order, each with its backup flag.
pub fn servers<C: Pooled>(scf: &C) -> impl Iterator<Item = (&str, bool)> {
    scf.pool()
        .into_iter()
        .flat_map(|p| p.servers.iter().map(|s| (s.name.as_str(), s.backup)))
}
