//! The adaptive limit's shared memory. Beside the berth of each breaker whose upstream has
//! `limit=adaptive` lies a [`Block`]: the controller (core's `Limiter`, touched under the
//! mutex), and what requests touch without the lock — one word that holds the limit and the
//! in-flight count, and a table of the processes holding slots, so that a dead worker's
//! slots are returned.
//!
//! A block hangs off its berth and, like berths, is never freed: a worker still serving an
//! older configuration may give a slot back at any time. It passes from tenant to tenant with
//! the berth; its word carries the tenant's tag and each table entry its owner's pid, and every
//! lock-free change is a compare-and-swap on one of them, so a release meant for a former
//! tenant, or for an entry that was reclaimed, changes nothing.
//!
//! The word's format and its steps are core's (`circuit_breaker_core::limit::word`). Admission
//! increments the table entry, then the word; a release decrements the word, then the entry.
//! A worker killed between the two steps leaves its entry one ahead of the word, and the
//! reclaim then returns one slot too many: in-flight reads one low until it drains to zero,
//! where a release finds nothing to take and the count is right again. The window is a few
//! instructions wide.

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use circuit_breaker_core::class::Class;
use circuit_breaker_core::limit::share::{self, Client, Held, Standing, ROWS};
use circuit_breaker_core::limit::word::{self, owner, pack, tag_of, unpack, Take};
use circuit_breaker_core::limit::{LimitConfig, Limiter, Update};
use circuit_breaker_core::status::{ClassFigures, LimitStatus};
use ngx::allocator::Allocator;

use super::block::{block_layout, owners_capacity, Block, Controller, Shared};
use super::node::Node;
use super::table::Locked;
use super::{Handle, Zone};

/// A block and the tenant it was found for. Blocks are never freed and a worker's zone stays
/// mapped as long as it runs, so holding one in worker memory is sound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitPtr {
    block: NonNull<Block>,
    ident: u64,
    /// `tag_of(ident)`, as the word carries it.
    tag: u64,
}

/// This process's entry in a block's owners table, and the slots it holds there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    entry: NonNull<AtomicU64>,
    pid: u32,
    /// Slots this process holds, as the entry says.
    pub held: u32,
}

impl Owner {
    /// Moves the entry to `to` slots; false if it no longer says what this process left
    /// (the block changed tenant).
    #[inline]
    fn move_to(&mut self, to: u32) -> bool {
        // SAFETY: an entry of a block's table, which is never freed (see LimitPtr).
        let e = unsafe { self.entry.as_ref() };
        let ok = e
            .compare_exchange(
                owner(self.pid, self.held),
                owner(self.pid, to),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok();
        if ok {
            self.held = to;
        }
        ok
    }
}

impl LimitPtr {
    fn new(block: NonNull<Block>, ident: u64) -> LimitPtr {
        LimitPtr {
            block,
            ident,
            tag: tag_of(ident),
        }
    }

    fn shared(&self) -> &Shared {
        // SAFETY: a block stays allocated and mapped (see the type), and its shared part is
        // atomics or never changes.
        unsafe { &self.block.as_ref().shared }
    }

    fn owners(&self) -> &[AtomicU64] {
        let n = self.shared().owners;
        // SAFETY: the table follows the block in its allocation (block_layout), initialised
        // when the block was made; entries are atomics.
        unsafe {
            let base = self
                .block
                .as_ptr()
                .cast::<u8>()
                .add(core::mem::size_of::<Block>())
                .cast::<AtomicU64>();
            core::slice::from_raw_parts(base, n as usize)
        }
    }

    /// Entry `index` of the owners table, as process `pid` claimed it (holding nothing).
    pub fn owner(&self, index: u32, pid: u32) -> Option<Owner> {
        let entry = NonNull::from(self.owners().get(index as usize)?);
        Some(Owner {
            entry,
            pid,
            held: 0,
        })
    }

    /// How `client` stands at `now_ms` under word `w` ([`share::standing`]). A client that is
    /// not heavy leaves its mark whether it is then admitted or not: one that finds the limit
    /// full of another's requests is present all the same.
    #[inline]
    fn standing(&self, client: &Client, w: u64, now_ms: u64) -> Standing {
        let (standing, marks) = self.stands(client, w, now_ms);
        if standing != Standing::Heavy {
            if let Some(i) = share::mark_at(marks, client.tag, now_ms) {
                self.shared().light[i].store(share::mark(client.tag, now_ms), Ordering::Relaxed);
            }
        }
        standing
    }

    /// How `client` stands at `now_ms`, as an answer of its ends.
    #[inline]
    pub fn standing_now(&self, client: &Client, now_ms: u64) -> Standing {
        let w = self.shared().word.load(Ordering::Relaxed);
        self.stands(client, w, now_ms).0
    }

    /// `client`'s tag when another client asked within [`share::PRESENT_MS`] of `now_ms`, or
    /// holds requests in flight now (a heavy client leaves no mark); `None` when it asks alone.
    #[inline]
    pub fn beside_others(&self, client: &Client, now_ms: u64) -> Option<u16> {
        let shared = self.shared();
        let marks = shared.light.each_ref().map(|m| m.load(Ordering::Relaxed));
        if share::others_present(marks, client.tag, now_ms) {
            return Some(client.tag);
        }
        let (_, _, inflight) = unpack(shared.word.load(Ordering::Relaxed));
        (inflight > self.own(client)).then_some(client.tag)
    }

    /// `client`'s requests in flight, as the sketch counts them (never fewer than they are).
    #[inline]
    fn own(&self, client: &Client) -> u32 {
        let shared = self.shared();
        (0..ROWS)
            .map(|r| shared.clients[client.index(r)].load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    fn stands(&self, client: &Client, w: u64, now_ms: u64) -> (Standing, [u64; share::MARKS]) {
        let shared = self.shared();
        let marks = shared.light.each_ref().map(|m| m.load(Ordering::Relaxed));
        if !share::others_present(marks, client.tag, now_ms) {
            // Neither heavy nor suspect without another client: its counts need no reading.
            return (Standing::Light, marks);
        }
        let (_, limit, inflight) = unpack(w);
        let own = self.own(client);
        let was_heavy = (0..ROWS).all(|r| {
            share::recent(
                shared.stamps[client.index(r)].load(Ordering::Relaxed),
                now_ms,
            )
        });
        let held = Held {
            limit,
            inflight,
            own,
            was_heavy,
        };
        (share::standing(held, client.tag, marks, now_ms), marks)
    }

    /// Counts a slot `client` took, standing so, at `now_ms`.
    #[inline]
    fn client_took(&self, client: &Client, standing: Standing, now_ms: u64) {
        for r in 0..ROWS {
            self.shared().clients[client.index(r)].fetch_add(1, Ordering::Relaxed);
        }
        if standing == Standing::Heavy {
            self.stamp(client, now_ms);
        }
    }

    fn stamp(&self, client: &Client, now_ms: u64) {
        for r in 0..ROWS {
            self.shared().stamps[client.index(r)].store(share::stamp(now_ms), Ordering::Relaxed);
        }
    }

    /// Uncounts a slot `client` gave back at `now_ms` (never below zero: a dead worker's
    /// return may have cleared the sketch since); a request that began or ended `heavy`
    /// keeps the client suspect for a while.
    #[inline]
    pub fn client_left(&self, client: &Client, heavy: bool, now_ms: u64) {
        for r in 0..ROWS {
            let c = &self.shared().clients[client.index(r)];
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
        }
        if heavy {
            self.stamp(client, now_ms);
        }
    }

    /// Takes a slot for a request of `class` (`None`: classes not in use) from `client`
    /// (`None`: clients are not told apart) if in-flight is below its threshold (or past it
    /// in dry run), counting it in `owner` first (see the module's note on the order): what
    /// [`word::take`] made of the word that was swapped in, or why none was, and how the
    /// client stood.
    #[inline]
    pub fn acquire(
        &self,
        owner: Option<&mut Owner>,
        dry_run: bool,
        class: Option<Class>,
        client: Option<&Client>,
        now_ms: u64,
    ) -> (Take, Standing) {
        let cell = &self.shared().word;
        // What its class holds, for a critical request's guarantee (`class::admits`): read
        // once, so workers racing may pass it by a few; the word's bound holds regardless.
        let own = match class {
            Some(Class::Critical) => self.shared().classes[Class::Critical.index()]
                .in_flight
                .load(Ordering::Relaxed),
            _ => 0,
        };
        let mut w = cell.load(Ordering::Acquire);
        // Judged once, on the limit first read: a limit that moves meanwhile moves the
        // thresholds by a slot at most.
        let standing = match client {
            Some(c) => self.standing(c, w, now_ms),
            None => Standing::Light,
        };
        let mut taken = word::take(w, self.tag, dry_run, class, own, standing);
        if !matches!(taken, Take::Slot { .. }) {
            // At the threshold: shed without touching the owners table.
            return (taken, standing);
        }
        let mut owner = owner;
        if let Some(o) = owner.as_deref_mut() {
            if !o.move_to(o.held + 1) {
                return (Take::Stale, standing);
            }
        }
        loop {
            let Take::Slot { next, .. } = taken else {
                if let Some(o) = owner.as_deref_mut() {
                    o.move_to(o.held - 1);
                }
                return (taken, standing);
            };
            match cell.compare_exchange_weak(w, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    if let Some(c) = class {
                        let counts = &self.shared().classes[c.index()];
                        counts.admitted.fetch_add(1, Ordering::Relaxed);
                        counts.in_flight.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Some(c) = client {
                        self.client_took(c, standing, now_ms);
                    }
                    return (taken, standing);
                }
                Err(now) => {
                    w = now;
                    taken = word::take(w, self.tag, dry_run, class, own, standing);
                }
            }
        }
    }

    /// Gives a slot back, then uncounts it in `owner`; returns in-flight before the
    /// decrement, `None` when the block belongs to another tenant now.
    #[inline]
    pub fn release(&self, owner: Option<&mut Owner>) -> Option<u32> {
        let cell = &self.shared().word;
        let mut w = cell.load(Ordering::Acquire);
        let before = loop {
            let (next, before) = word::give(w, self.tag)?;
            match cell.compare_exchange_weak(w, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break before,
                Err(now) => w = now,
            }
        };
        if let Some(o) = owner {
            if o.held > 0 {
                o.move_to(o.held - 1);
            }
        }
        if before == 1 {
            // Nothing in flight: a class's count that a dead worker left high starts over. A
            // request admitted meanwhile goes uncounted there, which only reads one low.
            for c in &self.shared().classes {
                c.in_flight.store(0, Ordering::Relaxed);
            }
        }
        Some(before)
    }

    /// When the pin of the pinned measurement under way was set: an answer to an attempt
    /// that started later is clean (`Limiter::clean_since`; `u64::MAX` when none is).
    #[inline]
    pub fn clean_since(&self) -> u64 {
        self.shared().clean_since.load(Ordering::Relaxed)
    }

    /// Counts a request of `class` shed (or, in dry run, one that would have been).
    #[inline]
    pub fn count_shed(&self, class: Option<Class>) {
        self.shared().shed.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = class {
            self.shared().classes[c.index()]
                .shed
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a heavy client's request turned away at its cap (or, in dry run, one that would
    /// have been), beside [`LimitPtr::count_shed`].
    #[inline]
    pub fn count_capped(&self) {
        self.shared().capped.fetch_add(1, Ordering::Relaxed);
    }

    /// A request of `class` gave its slot back (after [`LimitPtr::release`]).
    #[inline]
    pub fn class_left(&self, class: Class) {
        let n = &self.shared().classes[class.index()].in_flight;
        // Never below zero: a new tenant's reset may have come between.
        let _ = n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
    }
}

/// A block borrowed under the mutex.
pub struct LimitMut<'l> {
    ptr: LimitPtr,
    controller: &'l mut Controller,
}

impl LimitMut<'_> {
    /// The block, to be used without the lock from now on.
    pub fn ptr(&self) -> LimitPtr {
        self.ptr
    }

    /// Merges a worker's samples; when the interval ends, updates the limit and publishes it.
    /// Nothing while the tenant's configuration has no limit.
    pub fn record(
        &mut self,
        now_ms: u64,
        samples: &circuit_breaker_core::limit::Samples,
        rnd: u32,
    ) -> Option<Update> {
        if self.ptr.shared().enabled.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let u = self.controller.limiter.record(now_ms, samples, rnd)?;
        self.publish(self.controller.limiter.limit());
        let since = self.controller.limiter.clean_since();
        self.ptr
            .shared()
            .clean_since
            .store(since, Ordering::Relaxed);
        Some(u)
    }

    fn publish(&self, limit: u32) {
        self.update(|w| word::with_limit(w, limit));
    }

    /// Returns `count` slots to the word (never below zero).
    fn give_back(&self, count: u32) {
        if count > 0 {
            self.update(|w| word::give_back(w, count));
        }
    }

    fn update(&self, f: impl Fn(u64) -> u64) {
        let cell = &self.ptr.shared().word;
        let mut w = cell.load(Ordering::Acquire);
        loop {
            let next = f(w);
            if next == w {
                return;
            }
            match cell.compare_exchange_weak(w, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(now) => w = now,
            }
        }
    }

    /// Returns the slots of owners that no longer run (`alive` says), and frees their entries;
    /// returns how many slots came back.
    pub fn reclaim(&mut self, alive: &dyn Fn(u32) -> bool) -> u64 {
        let mut back = 0;
        let ptr = self.ptr;
        for e in ptr.owners() {
            let (pid, _) = word::owner_of(e.load(Ordering::Acquire));
            if pid == 0 || alive(pid) {
                continue;
            }
            // The owner is dead: nobody else changes its entry.
            let (_, count) = word::owner_of(e.swap(0, Ordering::AcqRel));
            self.give_back(count);
            back += u64::from(count);
        }
        if back > 0 {
            // The dead worker's clients are not known: every count starts over.
            ptr.shared().clear_clients();
        }
        back
    }

    /// An entry of the owners table for process `pid`. An entry that already names `pid` is
    /// a dead predecessor's that had the same pid (a live process claims once per tenant):
    /// its slots are returned. `None` when the table is full of live owners.
    pub fn claim_owner(&mut self, pid: u32, alive: &dyn Fn(u32) -> bool) -> Option<u32> {
        let ptr = self.ptr;
        let owners = ptr.owners();
        if let Some(i) = owners
            .iter()
            .position(|e| word::owner_of(e.load(Ordering::Acquire)).0 == pid)
        {
            let (_, count) = word::owner_of(owners[i].swap(owner(pid, 0), Ordering::AcqRel));
            self.give_back(count);
            if count > 0 {
                // As in reclaim: the dead predecessor's clients are not known.
                ptr.shared().clear_clients();
            }
            return Some(i as u32);
        }
        for round in 0..2 {
            if round == 1 {
                self.reclaim(alive);
            }
            for (i, e) in owners.iter().enumerate() {
                if e.compare_exchange(0, owner(pid, 0), Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return Some(i as u32);
                }
            }
        }
        None
    }

    /// The figures of the status page.
    pub fn status(&self) -> LimitStatus {
        let (_, limit, inflight) = unpack(self.ptr.shared().word.load(Ordering::Acquire));
        let v = self.controller.limiter.view();
        LimitStatus {
            limit,
            in_flight: inflight,
            min_latency_ms: v.min_latency_ms,
            last_latency_ms: v.sample_latency_ms,
            shed: self.ptr.shared().shed.load(Ordering::Relaxed),
            capped: self.ptr.shared().capped.load(Ordering::Relaxed),
            classes: self.classes(inflight),
        }
    }

    /// The per-class figures, once a request of a class came; each in-flight count at most
    /// the word's (see `ClassCounts::in_flight`).
    fn classes(&self, inflight: u32) -> Option<[ClassFigures; 3]> {
        let figures = self.ptr.shared().classes.each_ref().map(|c| ClassFigures {
            admitted: c.admitted.load(Ordering::Relaxed),
            shed: c.shed.load(Ordering::Relaxed),
            in_flight: c.in_flight.load(Ordering::Relaxed).min(inflight),
        });
        figures
            .iter()
            .any(|f| *f != ClassFigures::default())
            .then_some(figures)
    }
}

impl Zone {
    /// How many berths the zone has allocated so far (breakers created later may add more).
    pub fn berths_allocated(&self) -> usize {
        let chunks = self.header().nchunks.load(Ordering::Acquire);
        chunks as usize * super::berth::PER_CHUNK as usize
    }

    /// The limit block of `handle`'s breaker, without the lock, if one is set up for it.
    pub fn limit(&self, handle: Handle) -> Option<LimitPtr> {
        let berth = self.berth_of(handle)?;
        let block = NonNull::new(berth.limit_block())?;
        let ptr = LimitPtr::new(block, handle.ident);
        (ptr.shared().tenant.load(Ordering::Acquire) == handle.ident).then_some(ptr)
    }
}

/// What reconciliation or a worker's first use asks of a breaker's block.
enum Want<'a> {
    /// The configuration has this limit: set the block up, and (reconciliation only) start
    /// the controller afresh if its parameters changed.
    On(&'a LimitConfig, bool),
    /// The configuration has no limit.
    Off,
}

impl Locked<'_> {
    /// The block `ptr` names, under the lock, if it still belongs to that tenant.
    pub fn limit_mut(&mut self, ptr: LimitPtr) -> Option<LimitMut<'_>> {
        if ptr.shared().tenant.load(Ordering::Relaxed) != ptr.ident {
            return None;
        }
        // SAFETY: the controller is touched only under the mutex, which `self` holds for as
        // long as the borrow lives.
        let controller = unsafe { &mut *ptr.block.as_ref().controller.get() };
        Some(LimitMut { ptr, controller })
    }

    /// The block of `handle`'s breaker, set up with `cfg` if it is not yet (a breaker created
    /// on first use, or a block that belonged to another tenant). A block already set up is
    /// left as it is: only a new configuration changes its parameters. `None` when the
    /// breaker is gone or the zone is full.
    pub fn limit_set_up(
        &mut self,
        handle: Handle,
        cfg: &LimitConfig,
        now_ms: u64,
    ) -> Option<LimitMut<'_>> {
        let berth = self.zone().berth_of(handle)?;
        berth.node(handle.ident)?;
        let ptr = self.set_up(handle, Want::On(cfg, false), now_ms)?;
        self.limit_mut(ptr)
    }

    /// Brings node `n`'s block in line with a new configuration's `want`: set up, started
    /// afresh when its parameters changed (in-flight requests keep their slots), or turned off
    /// (the limit no longer applies; workers of the old configuration still count).
    ///
    /// # Safety
    /// `n` must be a published node.
    pub(super) unsafe fn limit_reconcile(
        &mut self,
        n: NonNull<Node>,
        want: Option<&LimitConfig>,
        now_ms: u64,
    ) {
        // SAFETY: `n` is published (this fn's contract), which is what `handle_of` asks.
        let Some(handle) = (unsafe { self.handle_of(n) }) else {
            return;
        };
        match want {
            Some(cfg) => {
                self.set_up(handle, Want::On(cfg, true), now_ms);
            }
            None => {
                self.set_up(handle, Want::Off, now_ms);
            }
        }
    }

    /// The limit of `handle`'s breaker for the status page, when its configuration has one.
    pub fn limit_status(&mut self, handle: Handle) -> Option<LimitStatus> {
        let ptr = self.zone().limit(handle)?;
        if ptr.shared().enabled.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.limit_mut(ptr).map(|l| l.status())
    }

    /// The handle of a published node.
    ///
    /// # Safety
    /// `n` must be a published node.
    pub(super) unsafe fn handle_of(&self, n: NonNull<Node>) -> Option<Handle> {
        // SAFETY: `n` is published (this fn's contract) and the mutex held, so it is live; `berth`
        // is fixed at creation.
        let index = unsafe { n.as_ref() }.berth;
        let berth = self.zone().berth(index)?;
        Some(Handle::new(berth.ident(), berth))
    }

    fn set_up(&mut self, handle: Handle, want: Want, now_ms: u64) -> Option<LimitPtr> {
        let berth = self.zone().berth_of(handle)?;
        let block = match NonNull::new(berth.limit_block()) {
            Some(b) => b,
            None if matches!(want, Want::Off) => return None,
            None => {
                let b = self.allocate_block()?;
                berth.set_limit_block(b.as_ptr());
                b
            }
        };
        let ptr = LimitPtr::new(block, handle.ident);
        let shared = ptr.shared();
        let ours = shared.tenant.load(Ordering::Relaxed) == handle.ident;
        // SAFETY: under the mutex, which `self` holds.
        let controller = unsafe { &mut *block.as_ref().controller.get() };
        match want {
            Want::Off => {
                if ours && shared.enabled.swap(0, Ordering::Relaxed) != 0 {
                    LimitMut { ptr, controller }.publish(word::MAX);
                }
                return None;
            }
            Want::On(cfg, _) if !ours => {
                // A new tenant: every count starts at zero. The owners are cleared before the
                // word names the tenant, so an admission that sees the new tag finds them so.
                for e in ptr.owners() {
                    e.store(0, Ordering::Relaxed);
                }
                shared.shed.store(0, Ordering::Relaxed);
                shared.capped.store(0, Ordering::Relaxed);
                for c in &shared.classes {
                    c.reset();
                    c.in_flight.store(0, Ordering::Relaxed);
                }
                shared.clear_clients();
                controller.cfg = *cfg;
                controller.limiter = Limiter::new(*cfg, now_ms);
                shared.clean_since.store(u64::MAX, Ordering::Relaxed);
                shared.enabled.store(1, Ordering::Relaxed);
                shared.tenant.store(handle.ident, Ordering::Release);
                let limit = controller.limiter.limit();
                shared
                    .word
                    .store(pack(ptr.tag, limit, 0), Ordering::Release);
            }
            Want::On(cfg, reconciling) => {
                let off = shared.enabled.load(Ordering::Relaxed) == 0;
                if reconciling && (off || controller.cfg != *cfg) {
                    // New parameters: the controller starts afresh; requests in flight keep
                    // their slots and the owners table.
                    controller.cfg = *cfg;
                    controller.limiter = Limiter::new(*cfg, now_ms);
                    shared.shed.store(0, Ordering::Relaxed);
                    shared.capped.store(0, Ordering::Relaxed);
                    for c in &shared.classes {
                        c.reset();
                    }
                    shared.clean_since.store(u64::MAX, Ordering::Relaxed);
                    shared.enabled.store(1, Ordering::Relaxed);
                    let limit = controller.limiter.limit();
                    LimitMut { ptr, controller }.publish(limit);
                }
            }
        }
        Some(ptr)
    }

    fn allocate_block(&mut self) -> Option<NonNull<Block>> {
        let owners = owners_capacity();
        let layout = block_layout(owners)?;
        let p = self.pool_mut().allocate(layout).ok()?.cast::<Block>();
        // SAFETY: a fresh allocation of `layout`, which holds the block and `owners` entries;
        // nothing else can reach it until the berth publishes it.
        unsafe {
            p.as_ptr().write(Block {
                shared: Shared {
                    word: AtomicU64::new(0),
                    shed: AtomicU64::new(0),
                    capped: AtomicU64::new(0),
                    clean_since: AtomicU64::new(u64::MAX),
                    tenant: AtomicU64::new(0),
                    enabled: AtomicU32::new(0),
                    owners,
                    classes: Default::default(),
                    clients: [const { AtomicU32::new(0) }; ROWS * share::WIDTH],
                    stamps: [const { AtomicU32::new(0) }; ROWS * share::WIDTH],
                    light: [const { AtomicU64::new(0) }; share::MARKS],
                },
                controller: UnsafeCell::new(Controller {
                    cfg: LimitConfig::default(),
                    limiter: Limiter::new(LimitConfig::default(), 0),
                }),
            });
            let table = p
                .as_ptr()
                .cast::<u8>()
                .add(core::mem::size_of::<Block>())
                .cast::<AtomicU64>();
            for i in 0..owners as usize {
                table.add(i).write(AtomicU64::new(0));
            }
        }
        Some(p)
    }
}
