//! The shared-memory zone: a hash table of breakers keyed by (upstream, route), allocated from
//! the zone's slab pool and guarded by the slab pool's own mutex — the one lock nginx releases
//! when a worker dies holding it (`ngx_unlock_mutexes`), so a crash never wedges the zone.

use core::ffi::c_void;
use core::mem::{align_of, size_of};
use core::ptr::{self, null_mut};
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use circuit_breaker_core::breaker::state::{layout, tail_offset};
use circuit_breaker_core::breaker::{Breaker, BreakerConfig, BreakerHeader, Bucket, Control};
use circuit_breaker_core::snapshot::{Forced, State};
use nginx_sys::{
    ngx_cycle_t, ngx_int_t, ngx_pagesize, ngx_shm_zone_t, ngx_shmtx_lock, ngx_shmtx_unlock,
    ngx_slab_alloc, ngx_slab_alloc_locked, ngx_slab_free_locked, ngx_slab_pool_t, NGX_ERROR,
    NGX_LOG_EMERG, NGX_LOG_NOTICE, NGX_OK,
};

use ngx::http::HttpModuleMainConf;

use crate::conf::MainConf;
use crate::util::{guard, hash_name, key_hash, now_ms};

/// Longest upstream name a breaker key can hold.
pub const MAX_UPSTREAM_NAME: usize = 255;
/// The route of an upstream's own breaker.
pub const DEFAULT_ROUTE: &str = "default";

/// Identifies this layout; a zone reused across a reload that loaded another build of the
/// module with a different layout is refused rather than misread.
const MAGIC: u64 = 0x6362_5f7a_6f6e_6501
    ^ ((size_of::<BreakerHeader>() as u64) << 16)
    ^ ((size_of::<Bucket>() as u64) << 40);

#[repr(C)]
struct ZoneHeader {
    magic: u64,
    /// Bumped at every configuration load that reuses the zone (under the mutex; read without
    /// it by [`Zone::passes_closed`]).
    generation: AtomicU64,
    alloc_failures: u64,
    count: u64,
    mask: u64,
    table: *mut *mut Node,
    /// Every node, for the status page and reloads.
    head: *mut Node,
}

#[repr(C)]
struct Node {
    hash: u64,
    chain: *mut Node,
    next: *mut Node,
    prev: *mut Node,
    /// Both names, in their own small allocation: kept apart so that a breaker with the
    /// default 10 s window stays within the slab's 2 KiB size class whatever the names.
    names: *mut u8,
    window_s: u32,
    upstream_len: u16,
    route_len: u16,
    /// 1 while the breaker lets every request through without asking (closed, or forced
    /// closed): refreshed under the mutex after every change, read without it.
    passes: AtomicU8,
    // BreakerHeader at `breaker_offset()`, then `window_s` buckets.
}

// A default breaker (10 s window) must fit the slab's 2 KiB class: 10 000 in a 32 MiB zone.
const _: () =
    assert!(size_of::<Node>() + size_of::<BreakerHeader>() + 10 * size_of::<Bucket>() + 16 <= 2048);

fn breaker_offset() -> usize {
    size_of::<Node>().next_multiple_of(align_of::<BreakerHeader>().max(align_of::<Bucket>()))
}

fn node_size(window_s: u32) -> usize {
    breaker_offset() + layout(window_s).0
}

/// The key of one breaker.
#[derive(Clone, Copy)]
pub struct Key<'a> {
    pub hash: u64,
    pub upstream: &'a [u8],
    pub route: &'a [u8],
}

/// A zone as a worker sees it.
#[derive(Clone, Copy)]
pub struct Zone {
    pool: *mut ngx_slab_pool_t,
    size: usize,
}

/// A breaker found once, to be found again cheaply (see [`Locked::find_by_ref`]).
#[derive(Clone, Copy, Debug)]
pub struct NodeRef {
    node: *mut Node,
    generation: u64,
}

impl NodeRef {
    /// No breaker.
    pub const NONE: NodeRef = NodeRef {
        node: null_mut(),
        generation: 0,
    };
}

/// Why no breaker could be had.
#[derive(Debug, PartialEq, Eq)]
pub enum Missing {
    /// The zone is full (counted in `alloc_failures`).
    Full,
    /// This worker belongs to an older configuration that did not know the breaker.
    Stale,
}

impl Zone {
    /// The zone behind an nginx shm zone, once `init` ran.
    ///
    /// # Safety
    /// `shm` must be null or a shm zone registered by this module.
    pub unsafe fn from_shm(shm: *const ngx_shm_zone_t) -> Option<Zone> {
        // SAFETY: per the contract; addr is the slab pool once the zone is mapped.
        let shm = unsafe { shm.as_ref()? };
        let pool = shm.shm.addr.cast::<ngx_slab_pool_t>();
        // SAFETY: a mapped zone starts with its slab pool, whose data init() set.
        if pool.is_null() || unsafe { (*pool).data.is_null() } {
            return None;
        }
        Some(Zone {
            pool,
            size: shm.shm.size,
        })
    }

    /// Takes the slab pool's mutex until the guard drops.
    pub fn lock(&self) -> Locked {
        // SAFETY: the pool is a live mapped slab pool.
        unsafe { ngx_shmtx_lock(&mut (*self.pool).mutex) };
        Locked {
            zone: *self,
            touched: null_mut(),
        }
    }

    /// Whether the breaker `handle` names lets requests through without being asked: it is
    /// closed (or forced closed) and no reload freed it. Read without the mutex — it answers
    /// for a moment that has already passed, as any answer under the mutex also does once
    /// the mutex is released.
    pub fn passes_closed(&self, handle: NodeRef) -> bool {
        if handle.node.is_null() {
            return false;
        }
        // SAFETY: the zone header is live; its generation is an atomic.
        let hdr = unsafe { &*(*self.pool).data.cast::<ZoneHeader>() };
        if hdr.generation.load(Ordering::Acquire) != handle.generation {
            return false;
        }
        // A reload that frees the node right after the check above leaves the slab memory
        // mapped; the worst outcome of that race is one request passing unchecked.
        // SAFETY: same generation as the handle's, so the node was live a moment ago (see
        // above); `passes` is an atomic.
        unsafe { (*handle.node).passes.load(Ordering::Acquire) == 1 }
    }
}

/// How many breakers a status snapshot reads per lock hold: each is copied consistently, and
/// the lock is let go between batches so that a scrape of 10 000 breakers never stalls
/// traffic for the whole walk (a batch takes about a quarter of a millisecond).
const SNAPSHOT_BATCH: usize = 256;

impl Zone {
    /// Visits every breaker, holding the lock for one batch at a time. Nodes are freed only
    /// by a reload's reconciliation, which bumps the generation under the lock first; the walk
    /// stops early if that happened between batches, so it never follows a freed node.
    /// Returns the zone's usage as [`Locked::usage`] saw it at the start.
    pub fn visit(&self, mut f: impl FnMut(Entry<'_>)) -> (u64, u64, u64) {
        let mut locked = self.lock();
        let usage = locked.usage();
        let generation = locked.generation();
        let mut n = locked.header().head;
        let mut seen = 0;
        while !n.is_null() {
            if seen > 0 && seen % SNAPSHOT_BATCH == 0 {
                drop(locked);
                locked = self.lock();
                if locked.generation() != generation {
                    break;
                }
            }
            // SAFETY: a live node: the generation is unchanged, so nothing was freed, and the
            // mutex is held.
            unsafe {
                let (upstream, route) = names(n);
                let next = (*n).next;
                f(Entry {
                    upstream,
                    route,
                    breaker: breaker(n),
                });
                n = next;
            }
            seen += 1;
        }
        usage
    }
}

/// The zone with its mutex held.
pub struct Locked {
    zone: Zone,
    /// The node whose breaker was handed out: its `passes` flag is refreshed before unlocking.
    touched: *mut Node,
}

impl Drop for Locked {
    fn drop(&mut self) {
        if !self.touched.is_null() {
            // SAFETY: a live node (handed out under this same lock hold).
            unsafe { refresh_passes(self.touched) };
        }
        // SAFETY: we hold the mutex taken in `Zone::lock`.
        unsafe { ngx_shmtx_unlock(&mut (*self.zone.pool).mutex) };
    }
}

/// One breaker's node as seen under the lock.
pub struct Entry<'a> {
    pub upstream: &'a [u8],
    pub route: &'a [u8],
    pub breaker: Breaker<'a>,
}

impl Locked {
    #[allow(clippy::mut_from_ref)] // shared memory, exclusive while the mutex is held
    fn header(&self) -> &mut ZoneHeader {
        // SAFETY: data points at our header (set in init), and the mutex is held.
        unsafe { &mut *(*self.zone.pool).data.cast::<ZoneHeader>() }
    }

    /// Bytes of the zone in use (whole slab pages), the zone's size and allocation failures.
    pub fn usage(&self) -> (u64, u64, u64) {
        // SAFETY: pfree is maintained by the slab allocator under this mutex.
        let free = unsafe { (*self.zone.pool).pfree } as u64;
        // SAFETY: ngx_pagesize is set at process start.
        let page = unsafe { ngx_pagesize } as u64;
        let size = self.zone.size as u64;
        (
            size.saturating_sub(free * page),
            size,
            self.header().alloc_failures,
        )
    }

    fn generation(&self) -> u64 {
        self.header().generation.load(Ordering::Relaxed)
    }

    fn find_node(&self, key: &Key) -> *mut Node {
        let h = self.header();
        // SAFETY: the table has mask + 1 slots; chains hold live nodes.
        let mut n = unsafe { *h.table.add((key.hash & h.mask) as usize) };
        while !n.is_null() {
            // SAFETY: n is a live node.
            unsafe {
                if (*n).hash == key.hash {
                    let (u, r) = names(n);
                    if u == key.upstream && r == key.route {
                        return n;
                    }
                }
                n = (*n).chain;
            }
        }
        null_mut()
    }

    /// The breaker for `key`, if it exists.
    pub fn find(&mut self, key: &Key) -> Option<Breaker<'_>> {
        let n = self.find_node(key);
        if n.is_null() {
            return None;
        }
        self.touched = n;
        // SAFETY: a live node, exclusively ours while the mutex is held.
        Some(unsafe { breaker(n) })
    }

    /// The breaker for `key`, created with `cfg` if missing. Workers of an older configuration
    /// (`generation` below the zone's) never create breakers.
    pub fn find_or_create(
        &mut self,
        key: &Key,
        cfg: &BreakerConfig,
        generation: u64,
    ) -> Result<Breaker<'_>, Missing> {
        self.find_or_create_ref(key, cfg, generation)
            .map(|(b, _)| b)
    }

    /// As [`Locked::find_or_create`], with a handle that finds the same breaker again
    /// without a lookup while the zone's generation holds.
    pub fn find_or_create_ref(
        &mut self,
        key: &Key,
        cfg: &BreakerConfig,
        generation: u64,
    ) -> Result<(Breaker<'_>, NodeRef), Missing> {
        let mut n = self.find_node(key);
        if n.is_null() {
            if generation < self.generation() {
                return Err(Missing::Stale);
            }
            n = self.create(key, cfg, now_ms());
            if n.is_null() {
                self.header().alloc_failures += 1;
                return Err(Missing::Full);
            }
        }
        let handle = NodeRef {
            node: n,
            generation: self.generation(),
        };
        self.touched = n;
        // SAFETY: a live node, exclusively ours while the mutex is held.
        Ok((unsafe { breaker(n) }, handle))
    }

    /// The breaker a [`NodeRef`] names, if no reload may have freed it since.
    pub fn by_ref(&mut self, handle: NodeRef) -> Option<(Breaker<'_>, NodeRef)> {
        // Nodes are freed only by a reload's reconciliation, which bumps the generation first.
        if handle.node.is_null() || handle.generation != self.generation() {
            return None;
        }
        self.touched = handle.node;
        // SAFETY: same generation: the node is still live; the mutex is held.
        Some((unsafe { breaker(handle.node) }, handle))
    }

    /// The breaker a [`NodeRef`] names, or, when a reload may have freed it since, the one
    /// `key` finds.
    pub fn find_by_ref(&mut self, handle: NodeRef, key: &Key) -> Option<Breaker<'_>> {
        // Nodes are freed only by a reload's reconciliation, which bumps the generation first.
        if !handle.node.is_null() && handle.generation == self.generation() {
            self.touched = handle.node;
            // SAFETY: same generation: the node is still live; the mutex is held.
            return Some(unsafe { breaker(handle.node) });
        }
        self.find(key)
    }

    fn create(&mut self, key: &Key, cfg: &BreakerConfig, now: u64) -> *mut Node {
        let size = node_size(cfg.window_s);
        // SAFETY: the mutex is held, as the _locked variants require.
        let (n, names) = unsafe {
            let names = ngx_slab_alloc_locked(
                self.zone.pool,
                (key.upstream.len() + key.route.len()).max(1),
            );
            let n = ngx_slab_alloc_locked(self.zone.pool, size).cast::<Node>();
            if n.is_null() || names.is_null() {
                for p in [n.cast::<c_void>(), names] {
                    if !p.is_null() {
                        ngx_slab_free_locked(self.zone.pool, p);
                    }
                }
                return null_mut();
            }
            (n, names.cast::<u8>())
        };
        let h = self.header();
        // SAFETY: n is a fresh allocation of `size` bytes, aligned by the slab allocator to at
        // least its size class (>= 8) — and BreakerHeader's alignment is checked in init.
        unsafe {
            let slot = h.table.add((key.hash & h.mask) as usize);
            n.write(Node {
                hash: key.hash,
                chain: *slot,
                next: h.head,
                prev: null_mut(),
                names,
                window_s: cfg.window_s,
                upstream_len: key.upstream.len() as u16,
                route_len: key.route.len() as u16,
                passes: AtomicU8::new(1),
            });
            *slot = n;
            if !h.head.is_null() {
                (*h.head).prev = n;
            }
            h.head = n;
            reset_breaker(n, *cfg, now);
            ptr::copy_nonoverlapping(key.upstream.as_ptr(), names, key.upstream.len());
            ptr::copy_nonoverlapping(
                key.route.as_ptr(),
                names.add(key.upstream.len()),
                key.route.len(),
            );
        }
        h.count += 1;
        n
    }

    fn remove(&mut self, n: *mut Node) {
        let h = self.header();
        // SAFETY: n is a live node in both the table chain and the list.
        unsafe {
            let mut slot = h.table.add(((*n).hash & h.mask) as usize);
            while !(*slot).is_null() {
                if *slot == n {
                    *slot = (*n).chain;
                    break;
                }
                slot = &mut (**slot).chain;
            }
            if (*n).prev.is_null() {
                h.head = (*n).next;
            } else {
                (*(*n).prev).next = (*n).next;
            }
            if !(*n).next.is_null() {
                (*(*n).next).prev = (*n).prev;
            }
            ngx_slab_free_locked(self.zone.pool, (*n).names.cast());
            ngx_slab_free_locked(self.zone.pool, n.cast());
        }
        h.count -= 1;
    }

    /// Brings the zone in line with a newly loaded configuration: breakers whose upstream or
    /// route is gone are freed, those whose parameters changed start afresh (an operator's
    /// forced state is kept), unchanged ones keep their window and state, and every upstream
    /// gets its default breaker and one per route that passes to it.
    fn reconcile(&mut self, mcf: &MainConf, now: u64) -> (usize, usize) {
        let (mut dropped, mut reset) = (0, 0);
        let mut n = self.header().head;
        while !n.is_null() {
            // SAFETY: live nodes under the mutex; `next` is read before any free.
            let next = unsafe { (*n).next };
            // SAFETY: as above.
            let (upstream, route) = unsafe { names(n) };
            let scf = mcf.upstreams.iter().find_map(|&s| {
                // SAFETY: upstream confs live as long as the configuration.
                let s = unsafe { &*s };
                (s.name.as_bytes() == upstream).then_some(s)
            });
            let route_known = scf
                .is_some_and(|s| core::str::from_utf8(route).is_ok_and(|r| s.knows_route(mcf, r)));
            match scf.and_then(|s| s.breaker.as_ref()) {
                Some(cfg) if route_known => {
                    // SAFETY: live node.
                    let current = unsafe { *(*breaker_header(n)).config() };
                    if current != *cfg {
                        // SAFETY: live node.
                        let window_same = unsafe { (*n).window_s } == cfg.window_s;
                        if window_same {
                            // SAFETY: live node with the same tail length.
                            unsafe {
                                let forced = (*breaker_header(n)).forced();
                                reset_breaker(n, *cfg, now);
                                reapply_forced(n, forced, now);
                                refresh_passes(n);
                            }
                        } else {
                            // SAFETY: live node; removed nodes are recreated on demand.
                            let forced = unsafe { (*breaker_header(n)).forced() };
                            let (u, r) = (upstream.to_vec(), route.to_vec());
                            self.remove(n);
                            let key = Key {
                                hash: key_hash(hash_name(&u), hash_name(&r)),
                                upstream: &u,
                                route: &r,
                            };
                            let m = self.create(&key, cfg, now);
                            if !m.is_null() {
                                // SAFETY: fresh live node.
                                unsafe {
                                    reapply_forced(m, forced, now);
                                    refresh_passes(m);
                                }
                            }
                        }
                        reset += 1;
                    }
                }
                _ => {
                    self.remove(n);
                    dropped += 1;
                }
            }
            n = next;
        }
        self.ensure_defaults(mcf, now);
        (dropped, reset)
    }

    fn ensure_defaults(&mut self, mcf: &MainConf, now: u64) {
        for &s in &mcf.upstreams {
            // SAFETY: upstream confs live as long as the configuration.
            let s = unsafe { &*s };
            let Some(cfg) = s.breaker.as_ref() else {
                continue;
            };
            let key = Key {
                hash: key_hash(s.name_hash, hash_name(DEFAULT_ROUTE.as_bytes())),
                upstream: s.name.as_bytes(),
                route: DEFAULT_ROUTE.as_bytes(),
            };
            if self.find_node(&key).is_null() && self.create(&key, cfg, now).is_null() {
                self.header().alloc_failures += 1;
            }
        }
    }
}

/// Updates `n.passes` from its breaker's state.
///
/// # Safety
/// `n` must be a live node, and the caller must hold the mutex.
unsafe fn refresh_passes(n: *mut Node) {
    // SAFETY: per the contract.
    let h = unsafe { &*breaker_header(n) };
    let passes = match h.forced() {
        Some(Forced::Closed) => true,
        Some(Forced::Open) => false,
        None => h.state() == State::Closed,
    };
    // SAFETY: per the contract; `passes` is an atomic.
    unsafe { (*n).passes.store(u8::from(passes), Ordering::Release) };
}

/// # Safety
/// `n` must be a live node.
unsafe fn breaker_header(n: *mut Node) -> *mut BreakerHeader {
    // SAFETY: the header sits at a fixed offset inside the node's allocation.
    unsafe { n.cast::<u8>().add(breaker_offset()).cast() }
}

/// # Safety
/// `n` must be a live node, and the caller must hold the mutex for the borrow's duration.
unsafe fn breaker<'a>(n: *mut Node) -> Breaker<'a> {
    // SAFETY: header and tail are laid out by `create` for `window_s` buckets.
    unsafe {
        let hdr = breaker_header(n);
        let tail = hdr.cast::<u8>().add(tail_offset()).cast::<Bucket>();
        Breaker::new(
            &mut *hdr,
            core::slice::from_raw_parts_mut(tail, (*n).window_s as usize),
        )
    }
}

/// # Safety
/// `n` must be a live node.
unsafe fn names<'a>(n: *mut Node) -> (&'a [u8], &'a [u8]) {
    // SAFETY: `create` stored both names in the node's names allocation.
    unsafe {
        let ul = (*n).upstream_len as usize;
        let rl = (*n).route_len as usize;
        let start = (*n).names;
        (
            core::slice::from_raw_parts(start, ul),
            core::slice::from_raw_parts(start.add(ul), rl),
        )
    }
}

/// # Safety
/// `n` must be a node whose tail holds `cfg.window_s` buckets.
unsafe fn reset_breaker(n: *mut Node, cfg: BreakerConfig, now: u64) {
    // SAFETY: per the contract.
    unsafe {
        breaker_header(n).write(BreakerHeader::new(cfg, now, 0));
        let tail = breaker_header(n)
            .cast::<u8>()
            .add(tail_offset())
            .cast::<Bucket>();
        for i in 0..cfg.window_s as usize {
            tail.add(i).write(Bucket::EMPTY);
        }
    }
}

/// # Safety
/// `n` must be a live node.
unsafe fn reapply_forced(n: *mut Node, forced: Option<Forced>, now: u64) {
    let action = match forced {
        Some(Forced::Open) => Control::ForceOpen,
        Some(Forced::Closed) => Control::ForceClose,
        None => return,
    };
    // SAFETY: per the contract.
    let mut b = unsafe { breaker(n) };
    b.control(now, 0, action);
}

/// `shm_zone->init`: lays out a new zone, or adopts the previous configuration's zone on
/// reload (nginx hands the old zone's data and keeps the mapping, as for `limit_req`). The
/// breakers are brought in line with the configuration later, in [`init_module`]: a cycle can
/// still fail after its zones are initialised, and then the running one must keep its state.
pub unsafe extern "C" fn init(shm_zone: *mut ngx_shm_zone_t, data: *mut c_void) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx calls init with our registered zone, mapped, its data our main conf.
        unsafe { init_zone(&mut *shm_zone, data) }
    })
}

unsafe fn init_zone(z: &mut ngx_shm_zone_t, old: *mut c_void) -> ngx_int_t {
    // SAFETY: set in conf::add_zone.
    let mcf = unsafe { &mut *z.data.cast::<MainConf>() };
    let pool = z.shm.addr.cast::<ngx_slab_pool_t>();
    // SAFETY: a mapped zone starts with its slab pool.
    let existing = unsafe { (*pool).data };
    if !old.is_null() && !existing.is_null() {
        // SAFETY: our header, written by a previous init of this zone.
        if unsafe { (*existing.cast::<ZoneHeader>()).magic } != MAGIC {
            ngx::ngx_log_error!(
                NGX_LOG_EMERG,
                z.shm.log,
                "circuit breaker zone \"{}\" was laid out by another build of the module; \
                 rename the zone or restart nginx",
                mcf.zone_name
            );
            return NGX_ERROR as ngx_int_t;
        }
        return NGX_OK as ngx_int_t;
    }
    assert!(align_of::<BreakerHeader>() <= 16 && align_of::<Bucket>() <= 16);

    // SAFETY: a fresh zone: nothing else uses it until init returns.
    unsafe {
        let buckets = (z.shm.size / 4096).next_power_of_two().max(64);
        let hdr = ngx_slab_alloc(pool, size_of::<ZoneHeader>()).cast::<ZoneHeader>();
        let table = ngx_slab_alloc(pool, buckets * size_of::<*mut Node>()).cast::<*mut Node>();
        if hdr.is_null() || table.is_null() {
            return NGX_ERROR as ngx_int_t;
        }
        for i in 0..buckets {
            table.add(i).write(null_mut());
        }
        hdr.write(ZoneHeader {
            magic: MAGIC,
            generation: AtomicU64::new(0),
            alloc_failures: 0,
            count: 0,
            mask: buckets as u64 - 1,
            table,
            head: null_mut(),
        });
        let ctx = format!(" in circuit breaker zone \"{}\"\0", mcf.zone_name);
        let lc = ngx_slab_alloc(pool, ctx.len()).cast::<u8>();
        if !lc.is_null() {
            ptr::copy_nonoverlapping(ctx.as_ptr(), lc, ctx.len());
            (*pool).log_ctx = lc;
        }
        (*pool).data = hdr.cast();
        // A full zone is reported once per breaker by the module, not per attempt at [crit].
        (*pool).set_log_nomem(0);
    }
    NGX_OK as ngx_int_t
}

/// `init_module`, where a new configuration is committed (nginx exits rather than fall back
/// after this point): the zone's breakers are reconciled with it — a new generation, freed or
/// reset breakers, and a default breaker for every upstream.
pub unsafe extern "C" fn init_module(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes the cycle being committed.
        let cycle = unsafe { &*cycle };
        let Some(mcf) = <crate::Module as HttpModuleMainConf>::main_conf_mut(cycle) else {
            return NGX_OK as ngx_int_t; // no http block
        };
        // SAFETY: our own zone, initialised by now.
        let Some(zone) = (unsafe { Zone::from_shm(mcf.zone) }) else {
            return NGX_OK as ngx_int_t;
        };
        let mut locked = zone.lock();
        let reused = locked.generation() > 0;
        mcf.generation = locked.header().generation.fetch_add(1, Ordering::AcqRel) + 1;
        let (dropped, reset) = locked.reconcile(mcf, now_ms());
        drop(locked);
        if reused && dropped + reset > 0 {
            ngx::ngx_log_error!(
                NGX_LOG_NOTICE,
                cycle.log,
                "circuit breaker zone \"{}\": {} breaker(s) dropped, {} reset by the new configuration",
                mcf.zone_name,
                dropped,
                reset
            );
        }
        NGX_OK as ngx_int_t
    })
}
