//! The adaptive in-flight limit in a worker process (`limit=adaptive`).
//!
//! - **Admission** ([`acquire`], from `peer.init`, once the body is read and just before the
//!   balancer is asked): one compare-and-swap on the breaker's shared word takes a slot while
//!   in-flight is below the limit; at the limit the request is shed at once, never queued.
//! - **Slots** are held per request, through its `proxy_next_upstream` retries, until its last
//!   attempt ends ([`attempt_ended`] from `peer.free`, or [`release`] from the request's pool
//!   cleanup when nginx ended the request without a last `peer.free`). Each worker also counts
//!   what it holds in its entry of the block's owners table, so that a worker that dies
//!   holding slots has them returned by the next update of the controller (or the next shed,
//!   if nothing completes).
//! - **Samples** (one per attempt, [`attempt_ended`]) are aggregated in worker memory, with no
//!   lock, and flushed to the controller under the zone lock by the attempt that brings them
//!   to 32, or that ends 25 ms or more after the first of them. No timer: its node in
//!   nginx's timer tree made each request's own timers dearer (`scripts/bench-instructions`,
//!   closed_limit). A worker whose traffic to the upstream stops hands its last samples
//!   (fewer than 32, of its last 25 ms) over with its next attempt there; the controller
//!   needs traffic to move anyway. A shed flushes at once when due, so the dead owners'
//!   slots come back at the first shed that may look.
//!   The controller (`circuit_breaker_core::limit`) updates the limit from the flushes.
//!
//! Imports: request → limit → conf (in `init_process` only), zone. This room keeps its own
//! per-worker state; it knows nothing of requests.

pub mod client;

use core::cell::UnsafeCell;

use circuit_breaker_core::class::Class;
use circuit_breaker_core::limit::share::{Client, Standing};
use circuit_breaker_core::limit::word::Take;
pub use circuit_breaker_core::limit::Sample;
use circuit_breaker_core::limit::{LimitConfig, Samples};
use nginx_sys::{ngx_cycle_t, ngx_log_t, NGX_LOG_ERR};

use crate::conf::Module;
use circuit_breaker_shell::clock::{mono_ms, rnd};
use circuit_breaker_shell::ffi::{pid, process_alive};
use circuit_breaker_shell::zone::{Handle, LimitPtr, Owner, Zone};

/// A worker flushes its samples once it has this many...
const FLUSH_SAMPLES: u32 = 32;
/// ... or at the first attempt this long after the first of them (milliseconds): well inside
/// the controller's shortest sensible interval, so that an update sees every worker's share
/// of it.
const FLUSH_MS: u64 = 25;
/// While it sheds, a worker looks for dead owners at most this often (milliseconds): slots a
/// dead worker held can fill the limit, and then nothing completes to update the controller.
const RECLAIM_MS: u64 = 500;

/// A request's slot: the breaker it was taken from, and the client that took it. `Copy`,
/// kept in the request's state (whose class, if any, is the slot's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    handle: Handle,
    client: Option<Client>,
    /// How the client stood when it took the slot (`share`).
    standing: Standing,
}

impl Hold {
    /// No slot.
    pub const NONE: Hold = Hold {
        handle: Handle::NONE,
        client: None,
        standing: Standing::Light,
    };

    /// Whether a slot is held.
    #[inline]
    pub fn is_held(&self) -> bool {
        !self.handle.is_none()
    }
}

/// What an admission got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// A slot: send the request (in dry run also past the limit; the shed is counted).
    Slot(Hold),
    /// In-flight is at the limit: answer at once (`limited`).
    Shed,
    /// No limit could be set up (the zone is full): the request passes unlimited.
    Unlimited,
}

/// This worker's view of one limited breaker.
struct Local {
    handle: Handle,
    ptr: LimitPtr,
    /// This worker's entry in the owners table (`None`: the table was full).
    owner: Option<Owner>,
    samples: Samples,
    /// Shed since the last flush.
    shed: bool,
    /// Something waits to be flushed (samples, an in-flight figure, a shed), since `since_ms`.
    waiting: bool,
    since_ms: u64,
    reclaimed_ms: u64,
}

struct Registry {
    zone: Option<Zone>,
    /// By berth index: dense and small.
    locals: Vec<Option<Local>>,
    /// Logged that a limit could not be created (once per worker).
    logged_full: bool,
}

struct Worker(UnsafeCell<Registry>);

// SAFETY: a worker runs nginx's event loop on one thread, the only one that touches this.
unsafe impl Sync for Worker {}

static WORKER: Worker = Worker(UnsafeCell::new(Registry {
    zone: None,
    locals: Vec::new(),
    logged_full: false,
}));

/// This worker's registry. Every caller returns before the next one starts (nginx's event
/// loop is single-threaded and none of these calls re-enters another).
fn registry() -> &'static mut Registry {
    // SAFETY: single-threaded, and no borrow outlives the call that took it (see above).
    unsafe { &mut *WORKER.0.get() }
}

impl Registry {
    fn local(&mut self, handle: Handle) -> Option<(usize, &mut Local)> {
        let i = handle.berth_index();
        match self.locals.get_mut(i) {
            Some(Some(l)) if l.handle == handle => Some((i, l)),
            _ => None,
        }
    }

    /// Sets up this worker's view of `handle`'s limit: the block (made and set up under the
    /// lock if needed) and an entry in its owners table.
    fn set_up(&mut self, zone: &Zone, handle: Handle, cfg: &LimitConfig) -> bool {
        let (ptr, owner) = {
            let mut locked = zone.lock();
            let Some(mut m) = locked.limit_set_up(handle, cfg, mono_ms()) else {
                return false;
            };
            let me = pid();
            let ptr = m.ptr();
            let owner = m
                .claim_owner(me, &process_alive)
                .and_then(|i| ptr.owner(i, me));
            (ptr, owner)
        };
        let i = handle.berth_index();
        if self.locals.len() <= i {
            self.locals.resize_with(i + 1, || None);
        }
        self.locals[i] = Some(Local {
            handle,
            ptr,
            owner,
            samples: Samples::EMPTY,
            shed: false,
            waiting: false,
            since_ms: 0,
            reclaimed_ms: 0,
        });
        true
    }

    /// Hands berth `i`'s samples to the controller under the lock; returns the dead owners'
    /// slots when the limit was updated, or while shedding.
    #[inline(never)]
    fn flush(&mut self, i: usize) {
        let Some(zone) = self.zone.clone() else {
            return;
        };
        let Some(Some(l)) = self.locals.get_mut(i) else {
            return;
        };
        let mut samples = core::mem::replace(&mut l.samples, Samples::EMPTY);
        if l.since_ms <= l.ptr.clean_since() {
            // Begun before the pin in force was set: what it calls clean was called so
            // against an older one (a quiet worker's batch across a halving).
            samples.clean = 0;
        }
        let shed = core::mem::take(&mut l.shed);
        l.waiting = false;
        if samples.is_empty() && !shed {
            return;
        }
        let now = mono_ms();
        let mut locked = zone.lock();
        let Some(mut m) = locked.limit_mut(l.ptr) else {
            return;
        };
        let u = m.record(now, &samples, rnd());
        if let Some(u) = &u {
            ngx::ngx_log_debug!(
                ngx::log::ngx_cycle_log().as_ptr(),
                "circuit breaker limit {} -> {}: mean {:.1}ms of {} ({} apart), minimum {:.1}ms, reached {}, {:?}",
                u.from,
                u.to,
                u.sample_ms,
                u.samples,
                u.apart,
                u.min_latency_ms,
                u.reached,
                u.min_change
            );
        }
        let updated = u.is_some();
        if updated || (shed && now.saturating_sub(l.reclaimed_ms) >= RECLAIM_MS) {
            l.reclaimed_ms = now;
            m.reclaim(&process_alive);
        }
    }
}

/// `init_process`: when the configuration limits any upstream, sizes this worker's tables
/// for every berth the zone has, so that a breaker's first request allocates nothing.
///
/// Memory malloc'd while a request's pool is live lands above that pool on the heap and
/// outlives it, and glibc may then serve later request pools from its bins rather than its
/// top chunk, which makes every later request dearer (`scripts/bench-instructions`,
/// closed_limit; glibc's figures move with the heap's layout, see the script's head).
pub fn init_process(cycle: &ngx_cycle_t) {
    let Some(mcf) = Module::serving_main_conf(cycle) else {
        return;
    };
    let upstreams = &mcf.upstreams;
    // SAFETY: upstream confs live as long as the configuration.
    let limited = upstreams.iter().any(|&s| unsafe { (*s).limit.is_some() });
    if !limited {
        return;
    }
    let Some(zone) = mcf.zone() else {
        return;
    };
    let berths = zone.berths_allocated();
    let reg = registry();
    reg.locals.reserve_exact(berths);
}

impl Local {
    /// Notes that something waits to be flushed at `now`; true when the flush is due: 32
    /// samples, or the first of them `FLUSH_MS` old.
    #[inline]
    fn wait(&mut self, now: u64) -> bool {
        if !self.waiting {
            self.waiting = true;
            self.since_ms = now;
        }
        self.samples.count >= FLUSH_SAMPLES || now.wrapping_sub(self.since_ms) >= FLUSH_MS
    }

    /// [`Local::wait`] for a shed, also due when the dead owners may be looked for again.
    fn wait_shed(&mut self, now: u64) -> bool {
        self.wait(now) || now.saturating_sub(self.reclaimed_ms) >= RECLAIM_MS
    }

    /// `Some(Some(standing))`: a slot, and how its client stood; `Some(None)`: shed;
    /// `None`: the block changed tenant.
    #[inline]
    fn acquire(
        &mut self,
        dry_run: bool,
        class: Option<Class>,
        client: Option<&Client>,
    ) -> Option<Option<Standing>> {
        let (taken, standing) =
            self.ptr
                .acquire(self.owner.as_mut(), dry_run, class, client, mono_ms());
        match taken {
            Take::Slot {
                inflight,
                over,
                capped,
                ..
            } => {
                self.samples.note_inflight(inflight);
                if over {
                    self.ptr.count_shed(class);
                }
                if capped {
                    self.ptr.count_capped();
                }
                Some(Some(standing))
            }
            Take::Full => {
                self.samples.add_full();
                self.ptr.count_shed(class);
                self.shed = true;
                Some(None)
            }
            Take::Reserved => {
                self.ptr.count_shed(class);
                self.samples.add_reserved();
                self.shed = true;
                Some(None)
            }
            Take::OverShare => {
                self.ptr.count_shed(class);
                self.ptr.count_capped();
                self.samples.add_over_share();
                self.shed = true;
                Some(None)
            }
            Take::Stale => None,
        }
    }

    /// Gives `hold`'s slot back, of a request of `class` that began or ended `heavy` or not;
    /// in-flight before, as [`LimitPtr::release`] says.
    #[inline]
    fn release(&mut self, hold: &Hold, class: Option<Class>, heavy: bool) -> Option<u32> {
        let before = self.ptr.release(self.owner.as_mut());
        if before.is_some() {
            if let Some(c) = class {
                self.ptr.class_left(c);
            }
            if let Some(c) = &hold.client {
                self.ptr.client_left(c, heavy, mono_ms());
            }
        }
        before
    }
}

/// A request's ask of a limit: its breaker, its class (`None`: classes not in use) and its
/// client (`None`: not told apart).
#[derive(Clone, Copy, Debug)]
pub struct Ask {
    pub handle: Handle,
    pub class: Option<Class>,
    pub client: Option<Client>,
}

impl Ask {
    fn hold(&self, standing: Standing) -> Hold {
        Hold {
            handle: self.handle,
            client: self.client,
            standing,
        }
    }
}

/// Admits `ask` under its breaker's limit `cfg`: a slot, or shed. `dry_run` admits past the
/// limit and counts the shed. The first request of a breaker in this worker takes the lock
/// once, to set up the limit and this worker's owner entry.
#[inline]
pub fn acquire(
    zone: &Zone,
    ask: Ask,
    cfg: &LimitConfig,
    dry_run: bool,
    log: *mut ngx_log_t,
    name: impl FnOnce() -> String,
) -> Admit {
    let reg = registry();
    if let Some((i, l)) = reg.local(ask.handle) {
        match l.acquire(dry_run, ask.class, ask.client.as_ref()) {
            Some(Some(standing)) => return Admit::Slot(ask.hold(standing)),
            Some(None) => {
                if l.wait_shed(mono_ms()) {
                    reg.flush(i);
                }
                return Admit::Shed;
            }
            None => reg.locals[i] = None,
        }
    }
    acquire_first(zone, ask, cfg, dry_run, log, name)
}

/// [`acquire`] for a breaker this worker has no view of yet (or one that changed tenant).
#[cold]
#[inline(never)]
fn acquire_first(
    zone: &Zone,
    ask: Ask,
    cfg: &LimitConfig,
    dry_run: bool,
    log: *mut ngx_log_t,
    name: impl FnOnce() -> String,
) -> Admit {
    let reg = registry();
    if !reg.set_up(zone, ask.handle, cfg) {
        if !core::mem::replace(&mut reg.logged_full, true) {
            ngx::ngx_log_error!(
                NGX_LOG_ERR,
                log,
                "circuit breaker \"{}\" limit not created: the zone is full, its traffic passes unlimited",
                name()
            );
        }
        return Admit::Unlimited;
    }
    reg.zone.get_or_insert_with(|| zone.clone());
    match reg.local(ask.handle) {
        Some((i, l)) => match l.acquire(dry_run, ask.class, ask.client.as_ref()) {
            Some(Some(standing)) => Admit::Slot(ask.hold(standing)),
            Some(None) => {
                if l.wait_shed(mono_ms()) {
                    reg.flush(i);
                }
                Admit::Shed
            }
            None => Admit::Unlimited,
        },
        None => Admit::Unlimited,
    }
}

/// The end of an attempt of a request of `class` holding `hold`: its sample, and its slot
/// back when it was the request's last attempt.
#[inline]
pub fn attempt_ended(hold: Hold, class: Option<Class>, s: Sample, last: bool) {
    let reg = registry();
    let Some((i, l)) = reg.local(hold.handle) else {
        return;
    };
    let now = mono_ms();
    // Set apart if its client was heavy when it began or is now: the first requests of a
    // round of slow ones began light, and end among the round's heavy ones.
    let latency = matches!(s, Sample::Latency(_) | Sample::Retried(_));
    let ending = match hold.client {
        Some(c) if latency && !hold.standing.apart() => l.ptr.standing_now(&c, now),
        _ => Standing::Light,
    };
    let apart = hold.standing.apart() || ending.apart();
    let heavy = hold.standing == Standing::Heavy || ending == Standing::Heavy;
    match s {
        Sample::Latency(ms) | Sample::Retried(ms) if apart => l.samples.add_heavy(ms),
        // Started after a pinned measurement's pin was set: clean. `ms` is the attempt's
        // time since `u->start_time`, which a first attempt takes in the same loop iteration
        // as its admission.
        Sample::Latency(ms) if now.wrapping_sub(ms) > l.ptr.clean_since() => {
            l.samples.add_clean(ms)
        }
        Sample::Latency(ms) | Sample::Retried(ms) => l.samples.add(ms),
        Sample::Drop => l.samples.add_drop(),
        Sample::Overload => l
            .samples
            .add_overload(hold.client.and_then(|c| l.ptr.beside_others(&c, now))),
    }
    if last {
        if let Some(before) = l.release(&hold, class, heavy) {
            l.samples.note_inflight(before);
        }
    }
    // The first overload signal of a batch goes at once (the controller cuts at most once
    // an interval: the rest wait for the batch's flush).
    let told = s == Sample::Overload && l.samples.overloads == 1;
    if l.wait(now) || told {
        reg.flush(i);
    }
}

/// Gives `hold`'s slot back, of a request of `class`: its request ended without a last
/// attempt (the client went away before one, or nginx gave up after a failed attempt without
/// freeing the peer again).
pub fn release(hold: Hold, class: Option<Class>) {
    let reg = registry();
    let Some((i, l)) = reg.local(hold.handle) else {
        return;
    };
    if let Some(before) = l.release(&hold, class, hold.standing == Standing::Heavy) {
        l.samples.note_inflight(before);
        if l.wait(mono_ms()) {
            reg.flush(i);
        }
    }
}
