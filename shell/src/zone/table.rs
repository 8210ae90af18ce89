//! The breakers' hash table, touched only with the zone's mutex held ([`Locked`]).

use core::alloc::Layout;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicPtr, Ordering};

use circuit_breaker_core::breaker::jitter::JitterSource;
use circuit_breaker_core::breaker::{BreakerConfig, BreakerHeader, Gate, Ticket};
use circuit_breaker_core::history::{History, HistoryView};
use circuit_breaker_core::retry_budget::{RetryBudget, RetryBudgetConfig, RetryBudgetView};
use circuit_breaker_core::snapshot::BreakerView;
use circuit_breaker_core::status::LimitStatus;
use ngx::allocator::Allocator;
use ngx::core::slab::LockedSlabPool;

use super::berth::{Berth, PER_CHUNK};
use super::node::{breaker_of, names, node_layout, slab_class, write_fresh_breaker, Node};
use super::{Handle, Header, Key, Kind, Zone};

/// The list a node of `kind` is linked in: keyed breakers' own, or that of all the others.
fn list_of(h: &Header, kind: Kind) -> &AtomicPtr<Node> {
    if kind == Kind::Keyed {
        &h.keyed_head
    } else {
        &h.head
    }
}

/// Why no breaker could be had.
#[derive(Debug, PartialEq, Eq)]
pub enum Missing {
    /// The zone is full (counted in `alloc_failures`).
    Full,
    /// This worker belongs to an older configuration, which creates no breakers.
    Stale,
}

/// One breaker as the status walk sees it.
pub struct Entry<'a> {
    pub upstream: &'a [u8],
    /// The route, or the server's address.
    pub route: &'a [u8],
    pub kind: Kind,
    pub view: BreakerView,
    /// The upstream's retry budget, on an upstream's own breaker.
    pub retry: Option<RetryBudgetView>,
    /// The adaptive limit, when the breaker's configuration has one.
    pub limit: Option<LimitStatus>,
}

/// The zone with its mutex held.
pub struct Locked<'z> {
    zone: &'z Zone,
    pool: LockedSlabPool,
}

/// A breaker borrowed under the lock. Dropping it publishes the breaker's gate to its berth,
/// so lock-free readers follow every change.
pub struct BreakerMut<'l> {
    breaker: circuit_breaker_core::breaker::Breaker<'l>,
    berth: &'l Berth,
    node: NonNull<Node>,
    handle: Handle,
    /// Its history, if it has one (see `super::history`).
    history: Option<NonNull<History>>,
}

impl<'l> core::ops::Deref for BreakerMut<'l> {
    type Target = circuit_breaker_core::breaker::Breaker<'l>;
    fn deref(&self) -> &Self::Target {
        &self.breaker
    }
}

impl core::ops::DerefMut for BreakerMut<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.breaker
    }
}

impl Drop for BreakerMut<'_> {
    fn drop(&mut self) {
        self.berth
            .publish(self.breaker.gate(), self.breaker.successes_lock_free());
        if let Some(mut h) = self.history {
            let b = &self.breaker;
            // SAFETY: a history stays allocated once made and is touched only under the
            // mutex, held for as long as this borrow lives.
            unsafe { h.as_mut() }.note(b.last_ms(), b.totals(), b.state());
        }
    }
}

impl BreakerMut<'_> {
    /// The handle that finds this breaker again.
    pub fn handle(&self) -> Handle {
        self.handle
    }

    /// The upstream's retry budget, when this is an upstream's own breaker and it has one.
    pub fn retry_budget(&mut self) -> Option<&mut RetryBudget> {
        // SAFETY: the node is published and the mutex held for the borrow's lifetime; the
        // budget is its own allocation, touched only under the mutex.
        unsafe { self.node.as_ref().retry().map(|mut p| p.as_mut()) }
    }

    /// Tells every worker that something it follows on its own changed (see
    /// [`Zone::stamp`]).
    pub fn bump_stamp(&self) {
        self.berth.bump_stamp();
    }

    /// Whether the fleet lets this instance start a probe now (see `crate::fleet`): always,
    /// unless the exchange worker published advice that still holds and names another
    /// prober.
    pub fn may_probe(&self, now_ms: u64) -> bool {
        self.berth.fleet_may_probe(now_ms)
    }

    /// Records the fleet's advice: probes from `probe_from_ms` (`u64::MAX`: not this
    /// instance), until `until_ms`.
    pub fn set_fleet_advice(&self, probe_from_ms: u64, until_ms: u64) {
        self.berth.set_fleet_advice(probe_from_ms, until_ms);
    }

    /// The breaker's header, to move into another allocation (a reload changed its window
    /// length), with the requests turned away lock-free, which the berth counts and the move
    /// leaves behind, counted in its totals.
    pub fn carry_out(&mut self) -> BreakerHeader {
        let (rejects, ramp_shed) = self.berth.lock_free_counts();
        self.breaker.count_lock_free(rejects, ramp_shed);
        *self.breaker.header()
    }

    /// Its history at `now_ms`, if it has one.
    pub fn history(&self, now_ms: u64) -> Option<HistoryView> {
        let h = self.history?;
        let b = &self.breaker;
        // SAFETY: as in `drop`.
        Some(unsafe { h.as_ref() }.view(now_ms, b.totals(), b.state()))
    }

    /// The status view, with the requests short-circuited lock-free counted in.
    pub fn view(&self, now_ms: u64) -> BreakerView {
        let mut v = self.breaker.view(now_ms);
        let (rejects, ramp_shed) = self.berth.lock_free_counts();
        v.totals.short_circuited = v.totals.short_circuited.saturating_add(rejects);
        v.totals.ramp_shed = v.totals.ramp_shed.saturating_add(ramp_shed);
        v
    }
}

impl<'z> Locked<'z> {
    pub(super) fn new(zone: &'z Zone) -> Locked<'z> {
        Locked {
            zone,
            pool: zone.pool.lock(),
        }
    }

    pub(super) fn header(&self) -> &'z Header {
        self.zone.header()
    }

    pub(super) fn zone(&self) -> &'z Zone {
        self.zone
    }

    pub(super) fn pool_mut(&mut self) -> &mut LockedSlabPool {
        &mut self.pool
    }

    /// Bytes of the zone in use (whole slab pages), its size, and breakers that could not be
    /// created.
    pub fn usage(&self) -> (u64, u64, u64) {
        // SAFETY: pfree is maintained by the slab allocator under the mutex we hold.
        let free = unsafe { (*self.zone.pool_ptr()).pfree } as u64;
        // SAFETY: ngx_pagesize is set once at process start.
        let page = unsafe { nginx_sys::ngx_pagesize } as u64;
        let size = self.zone.size as u64;
        (
            size.saturating_sub(free * page),
            size,
            self.header().alloc_failures.load(Ordering::Relaxed),
        )
    }

    /// The zone's generation.
    pub fn generation(&self) -> u64 {
        self.header().generation.load(Ordering::Relaxed)
    }

    pub(super) fn bump_generation(&self) -> u64 {
        self.header().generation.fetch_add(1, Ordering::AcqRel) + 1
    }

    pub(super) fn chain_of(&self, hash: u64) -> &'z AtomicPtr<Node> {
        let h = self.header();
        // SAFETY: the table has `mask + 1` chains, laid out by init_zone.
        unsafe { &*h.table.add((hash & h.mask) as usize) }
    }

    fn find_node(&self, key: &Key) -> Option<NonNull<Node>> {
        let mut n = self.chain_of(key.hash).load(Ordering::Relaxed);
        // SAFETY: chains hold published nodes only, which stay live while the mutex is held.
        while let Some(node) = unsafe { n.as_ref() } {
            if node.hash == key.hash
                && node.kind() == key.kind
                // SAFETY: `node` came off a chain, so it is published: `try_create` wrote its
                // names, and only `remove` frees it, which needs the mutex we hold.
                && unsafe { names(node) } == (key.upstream, key.route)
            {
                return NonNull::new(n);
            }
            n = node.chain.load(Ordering::Relaxed);
        }
        None
    }

    /// The breaker `key` names, if it exists.
    pub fn find(&mut self, key: &Key) -> Option<BreakerMut<'_>> {
        let n = self.find_node(key)?;
        // SAFETY: a published node, exclusively ours while the mutex is held.
        unsafe { self.borrow(n) }
    }

    /// The breaker `key` names, created with `cfg` if missing. Workers of an older
    /// configuration (`generation` below the zone's) never create breakers.
    pub fn find_or_create(
        &mut self,
        key: &Key,
        cfg: &BreakerConfig,
        generation: u64,
        now_ms: u64,
    ) -> Result<BreakerMut<'_>, Missing> {
        let n = match self.find_node(key) {
            Some(n) => n,
            None if generation < self.generation() => return Err(Missing::Stale),
            None => self.create(key, cfg, now_ms).ok_or(Missing::Full)?,
        };
        // SAFETY: `n` came off a chain or was just created, so it is published; `self` holds the
        // mutex, and `&mut self` rules out a second `BreakerMut`.
        unsafe { self.borrow(n) }.ok_or(Missing::Full)
    }

    /// The breaker `handle` names, if it still lives and has `key_hash`.
    pub fn get(&mut self, handle: Handle, key_hash: u64) -> Option<BreakerMut<'_>> {
        let n = self.node_of(handle, key_hash)?;
        // SAFETY: `node_of` matched the berth's tenant ident under the mutex `self` holds, so `n` is
        // published; `&mut self` rules out a second `BreakerMut`.
        unsafe { self.borrow(n) }
    }

    /// The breaker whose probe `ticket` is: the one `handle` names if it still lives, else
    /// the one `key` names if it waits for that very probe (a reload moved the breaker into
    /// other memory for another window length, its probe in flight: without this, the
    /// probe's outcome would be lost and its probe held until the lease runs out).
    pub fn get_probe(
        &mut self,
        handle: Handle,
        key: &Key,
        ticket: Ticket,
    ) -> Option<BreakerMut<'_>> {
        let n = match self.node_of(handle, key.hash) {
            Some(n) => n,
            None => {
                let n = self.find_node(key)?;
                // SAFETY: `n` came off a chain, so it is published; `self` holds the mutex, and
                // the borrow ends with this statement.
                let holds = unsafe { self.borrow_with(n, false) }?
                    .breaker
                    .holds_probe(ticket);
                if !holds {
                    return None;
                }
                n
            }
        };
        // SAFETY: `n` is the berth's tenant (ident matched) or came off a chain: published, with
        // the mutex held by `self`; `&mut self` rules out a second `BreakerMut`.
        unsafe { self.borrow(n) }
    }

    /// The breaker `handle` names if it still lives and has `key`'s hash, else the one `key`
    /// names, if it exists.
    pub fn get_or_find(&mut self, handle: Handle, key: &Key) -> Option<BreakerMut<'_>> {
        let n = self
            .node_of(handle, key.hash)
            .or_else(|| self.find_node(key))?;
        // SAFETY: `n` is the berth's tenant (ident matched) or came off a chain: published, with the
        // mutex held by `self`; `&mut self` rules out a second `BreakerMut`.
        unsafe { self.borrow(n) }
    }

    /// The breaker `handle` names if it still lives, else the one `key` names, created if
    /// missing (as [`Locked::find_or_create`]).
    pub fn get_or_create(
        &mut self,
        handle: Handle,
        key: &Key,
        cfg: &BreakerConfig,
        generation: u64,
        now_ms: u64,
    ) -> Result<BreakerMut<'_>, Missing> {
        match self.node_of(handle, key.hash) {
            // SAFETY: `node_of` matched the berth's tenant ident under the mutex, so `n` is
            // published; `&mut self` rules out a second `BreakerMut`.
            Some(n) => unsafe { self.borrow(n) }.ok_or(Missing::Full),
            None => self.find_or_create(key, cfg, generation, now_ms),
        }
    }

    fn node_of(&self, handle: Handle, key_hash: u64) -> Option<NonNull<Node>> {
        let berth = self.zone.berth_of(handle)?;
        let n = NonNull::new(berth.node(handle.ident)?)?;
        // SAFETY: the berth's tenant is a published node while its ident matches.
        (unsafe { n.as_ref() }.hash == key_hash).then_some(n)
    }

    /// # Safety
    /// `n` must be a published node.
    pub(super) unsafe fn borrow(&mut self, n: NonNull<Node>) -> Option<BreakerMut<'_>> {
        // SAFETY: `n` is published (this fn's contract).
        unsafe { self.borrow_with(n, true) }
    }

    /// As [`Locked::borrow`]; `make_history`: make the breaker a history if it has none (a
    /// status walk or a reload does not: a breaker no request touched has no past to show).
    ///
    /// # Safety
    /// `n` must be a published node.
    unsafe fn borrow_with(
        &mut self,
        n: NonNull<Node>,
        make_history: bool,
    ) -> Option<BreakerMut<'_>> {
        // SAFETY: `n` is published (this fn's contract), and cannot be freed: `remove` needs the
        // mutex, which `self` holds.
        let node = unsafe { n.as_ref() };
        let berth = self.zone.berth(node.berth)?;
        let handle = Handle::new(berth.ident(), berth);
        // SAFETY: `n` is published (this fn's contract); its names live as long as it does.
        let (upstream, route) = unsafe { names(node) };
        // Its draws from the zone's seed and its name, as `cb-replay --jitter-key` makes them.
        let jitter = JitterSource {
            seed: self.header().jitter_seed(),
            upstream,
            route,
        };
        // SAFETY: the breaker memory follows the node and is touched only under the mutex,
        // which `self` holds for as long as the borrow lives.
        let mut breaker = unsafe { breaker_of(n) }.with_jitter(jitter);
        // Successes gathered without the lock come first, as they happened first.
        if let Some((second, count, latency)) = berth.gathered.take() {
            breaker.absorb_successes(second, count, &latency);
        }
        let history = self.history_for(berth, handle.ident, &breaker, make_history);
        Some(BreakerMut {
            breaker,
            berth,
            node: n,
            handle,
            history,
        })
    }

    /// Creates the breaker `key` names. The node is built whole — names, breaker, berth —
    /// before it is linked into the table: a worker killed half way leaves at worst an
    /// unreachable allocation, never a half-built breaker for the others.
    pub(super) fn create(
        &mut self,
        key: &Key,
        cfg: &BreakerConfig,
        now_ms: u64,
    ) -> Option<NonNull<Node>> {
        let found = self.try_create(key, cfg, now_ms);
        if found.is_none() {
            self.note_failure(key.hash);
        }
        found
    }

    fn try_create(&mut self, key: &Key, cfg: &BreakerConfig, now_ms: u64) -> Option<NonNull<Node>> {
        let (Ok(upstream_len), Ok(route_len)) = (
            u16::try_from(key.upstream.len()),
            u16::try_from(key.route.len()),
        ) else {
            return None;
        };
        let names_len = key.upstream.len() + key.route.len();
        let node_layout = node_layout(cfg.window_s)?;
        let inline = node_layout.size() + names_len <= slab_class(node_layout.size());
        let alloc_layout = if inline {
            Layout::from_size_align(node_layout.size() + names_len, node_layout.align()).ok()?
        } else {
            node_layout
        };
        let names_layout = Layout::from_size_align(names_len.max(1), 1).ok()?;
        let n = self.pool.allocate(alloc_layout).ok()?.cast::<Node>();
        let names = if inline {
            // SAFETY: the names follow the node inside its allocation.
            unsafe { NonNull::new_unchecked(n.as_ptr().cast::<u8>().add(node_layout.size())) }
        } else {
            match self.pool.allocate(names_layout) {
                Ok(p) => p.cast::<u8>(),
                Err(_) => {
                    // SAFETY: allocated just above from this pool.
                    unsafe { self.pool.deallocate(n.cast(), alloc_layout) };
                    return None;
                }
            }
        };
        let Some(berth_index) = self.take_berth() else {
            // SAFETY: allocated just above from this pool.
            unsafe {
                if !inline {
                    self.pool.deallocate(names, names_layout);
                }
                self.pool.deallocate(n.cast(), alloc_layout);
            }
            return None;
        };
        let h = self.header();
        let epoch = h.epochs.fetch_add(1, Ordering::Relaxed).wrapping_add(1) as u32;
        // SAFETY: `n` is a fresh, 16-aligned allocation of node_layout, `names` one of the names'
        // length; nothing else can reach either until the node is linked below.
        unsafe {
            ptr::copy_nonoverlapping(key.upstream.as_ptr(), names.as_ptr(), key.upstream.len());
            ptr::copy_nonoverlapping(
                key.route.as_ptr(),
                names.as_ptr().add(key.upstream.len()),
                key.route.len(),
            );
            n.as_ptr().write(Node {
                hash: key.hash,
                chain: AtomicPtr::new(ptr::null_mut()),
                next: AtomicPtr::new(ptr::null_mut()),
                prev: AtomicPtr::new(ptr::null_mut()),
                names: names.as_ptr(),
                retry: AtomicPtr::new(ptr::null_mut()),
                berth: berth_index,
                window_s: cfg.window_s,
                upstream_len,
                route_len,
                kind: key.kind as u8,
            });
            write_fresh_breaker(n, *cfg, now_ms, epoch);
        }
        let ident = h.idents.fetch_add(1, Ordering::Relaxed) + 1;
        let berth = self.zone.berth(berth_index)?;
        berth.occupy(ident, key.hash, n.as_ptr(), Gate::Pass);
        // SAFETY: `n` is complete; the head node, if any, is published and live. Publish: link
        // into the chain and the list of all nodes.
        unsafe {
            let node = n.as_ref();
            let chain = self.chain_of(key.hash);
            node.chain
                .store(chain.load(Ordering::Relaxed), Ordering::Relaxed);
            let list = list_of(h, key.kind);
            let head = list.load(Ordering::Relaxed);
            node.next.store(head, Ordering::Relaxed);
            if let Some(old) = head.as_ref() {
                old.prev.store(n.as_ptr(), Ordering::Relaxed);
            }
            chain.store(n.as_ptr(), Ordering::Release);
            list.store(n.as_ptr(), Ordering::Release);
        }
        h.count.fetch_add(1, Ordering::Relaxed);
        if key.kind == Kind::Keyed {
            h.keyed_nodes.fetch_add(1, Ordering::Relaxed);
        }
        Some(n)
    }

    /// Unlinks and frees a node. Only a new configuration's reconciliation removes nodes,
    /// after bumping the generation, so a status walk never follows a freed node.
    ///
    /// # Safety
    /// `n` must be a published node (in its chain and in the list), not borrowed.
    pub(super) unsafe fn remove(&mut self, n: NonNull<Node>) {
        let h = self.header();
        // SAFETY: `n` is published (this fn's contract): in its chain and in the list.
        let node = unsafe { n.as_ref() };
        let mut link = self.chain_of(node.hash);
        loop {
            let cur = link.load(Ordering::Relaxed);
            if cur.is_null() {
                break;
            }
            if cur == n.as_ptr() {
                link.store(node.chain.load(Ordering::Relaxed), Ordering::Relaxed);
                break;
            }
            // SAFETY: chains hold published nodes.
            link = unsafe { &(*cur).chain };
        }
        let (prev, next) = (
            node.prev.load(Ordering::Relaxed),
            node.next.load(Ordering::Relaxed),
        );
        // SAFETY: neighbours in the list are published nodes.
        unsafe {
            match prev.as_ref() {
                Some(p) => p.next.store(next, Ordering::Relaxed),
                None => list_of(h, node.kind()).store(next, Ordering::Relaxed),
            }
            if let Some(nx) = next.as_ref() {
                nx.prev.store(prev, Ordering::Relaxed);
            }
        }
        let free = h.free_berth.load(Ordering::Relaxed);
        if let Some(berth) = self.zone.berth(node.berth) {
            berth.vacate(free);
            h.free_berth.store(node.berth, Ordering::Relaxed);
        }
        // SAFETY: `n` is still a node of this zone (unlinked just above, not yet freed).
        unsafe { self.set_retry(n, None, 0) };
        let names_len = node.upstream_len as usize + node.route_len as usize;
        // SAFETY: both allocations were made in `try_create`, and the node is unreachable
        // now; names inside the node's allocation go with it.
        unsafe {
            if let Some(l) = node_layout(node.window_s) {
                let inline = node.names == n.as_ptr().cast::<u8>().add(l.size());
                if !inline {
                    if let (Some(p), Ok(nl)) = (
                        NonNull::new(node.names),
                        Layout::from_size_align(names_len.max(1), 1),
                    ) {
                        self.pool.deallocate(p, nl);
                    }
                }
                self.pool.deallocate(n.cast(), l);
            }
        }
        h.count.fetch_sub(1, Ordering::Relaxed);
        if node.kind() == Kind::Keyed {
            h.keyed_nodes.fetch_sub(1, Ordering::Relaxed);
            if h.keyed_hand.load(Ordering::Relaxed) == n.as_ptr() {
                h.keyed_hand.store(next, Ordering::Relaxed);
            }
        }
    }

    /// Gives node `n` a retry budget with `cfg` (kept, counts and all, when it has one with
    /// the same parameters; a fresh one otherwise), or takes it away (`None`). Returns
    /// whether the node has the budget asked for: `false` when the zone is full.
    ///
    /// # Safety
    /// `n` must be a node of this zone, not yet freed (published, or being removed).
    pub(super) unsafe fn set_retry(
        &mut self,
        n: NonNull<Node>,
        cfg: Option<RetryBudgetConfig>,
        now_ms: u64,
    ) -> bool {
        // SAFETY: `n` is a live node of this zone (this fn's contract), the mutex held.
        let node = unsafe { n.as_ref() };
        let layout = Layout::new::<RetryBudget>();
        if let Some(old) = node.retry() {
            // SAFETY: a budget this function allocated and initialised.
            if cfg.as_ref() == Some(unsafe { old.as_ref() }.config()) {
                return true;
            }
            node.retry.store(ptr::null_mut(), Ordering::Relaxed);
            // SAFETY: allocated below from this pool; no one else refers to it.
            unsafe { self.pool.deallocate(old.cast(), layout) };
        }
        let Some(cfg) = cfg else { return true };
        let Ok(p) = self.pool.allocate(layout) else {
            return false;
        };
        let p = p.cast::<RetryBudget>();
        // SAFETY: a fresh allocation of the budget's layout.
        unsafe { p.as_ptr().write(RetryBudget::new(cfg, now_ms)) };
        node.retry.store(p.as_ptr(), Ordering::Relaxed);
        true
    }

    /// A free berth, allocating a new chunk of them when none is left.
    fn take_berth(&mut self) -> Option<u32> {
        let h = self.header();
        let mut free = h.free_berth.load(Ordering::Relaxed);
        if free == u32::MAX {
            self.add_chunk()?;
            free = h.free_berth.load(Ordering::Relaxed);
        }
        let berth = self.zone.berth(free)?;
        h.free_berth.store(berth.next_free(), Ordering::Relaxed);
        Some(free)
    }

    fn add_chunk(&mut self) -> Option<()> {
        let h = self.header();
        let n = h.nchunks.load(Ordering::Relaxed);
        if n >= h.max_chunks {
            return None;
        }
        let layout = Layout::array::<Berth>(PER_CHUNK as usize).ok()?;
        let chunk = self.pool.allocate(layout).ok()?.cast::<Berth>();
        let first = n * PER_CHUNK;
        for i in 0..PER_CHUNK {
            let next = if i + 1 < PER_CHUNK {
                first + i + 1
            } else {
                u32::MAX
            };
            // SAFETY: the chunk has room for PER_CHUNK berths.
            unsafe {
                chunk
                    .as_ptr()
                    .add(i as usize)
                    .write(Berth::free(first + i, next))
            };
        }
        // SAFETY: `chunks` has `max_chunks` entries and n is below it.
        unsafe { (*h.chunks.add(n as usize)).store(chunk.as_ptr(), Ordering::Release) };
        h.nchunks.store(n + 1, Ordering::Release);
        h.free_berth.store(first, Ordering::Relaxed);
        Some(())
    }

    /// Counts a breaker that could not be created, once per key (while the set of failed
    /// keys has room; past that, every failure counts).
    pub(super) fn note_failure(&self, hash: u64) {
        let h = self.header();
        let len = h.failed_len.load(Ordering::Relaxed);
        for i in 0..len {
            // SAFETY: `failed` has `failed_cap` entries, `len` of them in use.
            if unsafe { (*h.failed.add(i as usize)).load(Ordering::Relaxed) } == hash {
                return;
            }
        }
        if len < h.failed_cap {
            // SAFETY: `len < failed_cap`, so entry `len` lies within the `failed_cap` entries
            // init_zone laid out.
            unsafe { (*h.failed.add(len as usize)).store(hash, Ordering::Relaxed) };
            h.failed_len.store(len + 1, Ordering::Relaxed);
        }
        h.alloc_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The first node of the list of all nodes.
    pub(super) fn first(&self) -> Option<NonNull<Node>> {
        NonNull::new(self.header().head.load(Ordering::Acquire))
    }

    /// The node after `n` in the list of all nodes.
    ///
    /// # Safety
    /// `n` must be a published node.
    pub(super) unsafe fn next(&self, n: NonNull<Node>) -> Option<NonNull<Node>> {
        // SAFETY: `n` is published (this fn's contract), so the node is live; `next` is an atomic.
        NonNull::new(unsafe { n.as_ref() }.next.load(Ordering::Acquire))
    }

    /// The names of a node.
    ///
    /// # Safety
    /// `n` must be a published node; the names live while it does.
    pub(super) unsafe fn names_of(&self, n: NonNull<Node>) -> (&[u8], &[u8]) {
        // SAFETY: `n` is published (this fn's contract); the names never change, and the slices
        // borrow `self`, so `remove(&mut self)` cannot free them meanwhile.
        unsafe { names(n.as_ref()) }
    }

    /// The breaker of a node, borrowed under the lock.
    ///
    /// # Safety
    /// `n` must be a published node.
    pub(super) unsafe fn breaker_at(&mut self, n: NonNull<Node>) -> Option<BreakerMut<'_>> {
        // SAFETY: `n` is published (this fn's contract), all that `borrow_with` asks.
        unsafe { self.borrow_with(n, false) }
    }

    /// The window length a node was laid out for.
    ///
    /// # Safety
    /// `n` must be a published node.
    pub(super) unsafe fn window_of(n: NonNull<Node>) -> u32 {
        // SAFETY: `n` is published (this fn's contract), so live; `window_s` is fixed at creation.
        unsafe { n.as_ref() }.window_s
    }
}
