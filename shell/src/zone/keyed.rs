//! Keyed breakers in the zone (`circuit_breaker_key`): the table of compact keys the core
//! rules (`circuit_breaker_core::keyed`), and the breakers keys are promoted to on their first
//! failure or slow call. Touched only with the mutex held.
//!
//! A promoted key's breaker is a node like any other (found by its hash in the table's chains,
//! with a berth for the lock-free gate), but linked in a list of its own: it is freed at run
//! time — when its key makes room for another, or turns compact again once its breaker is
//! closed with an empty window — which the walks of all nodes, letting the mutex go between
//! batches, must never meet.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

use circuit_breaker_core::breaker::histogram::Histogram;
use circuit_breaker_core::breaker::{Breaker, BreakerConfig};
use circuit_breaker_core::keyed::{self, KeyHasher, Placed, Protection, Table, Tally};
use circuit_breaker_core::snapshot::WindowView;
use ngx::allocator::Allocator;

use super::node::{breaker_of, node_layout, slab_class, Node};
use super::table::BreakerMut;
use super::{Key, Kind, Locked, Missing, Zone};

/// Promoted keys a sweep looks at, at most, before giving up.
const SWEEP: usize = 32;

/// One `circuit_breaker_key`: its key as written (`$host`), which names its breakers, the
/// 16 bits of that name's hash its tallies carry, and its breakers' parameters.
#[derive(Clone, Copy)]
pub struct Family<'a> {
    pub name: &'a [u8],
    pub id: u16,
    pub cfg: &'a BreakerConfig,
}

/// The table's figures, for the status page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyedCount {
    /// Keys in the table.
    pub keys: u64,
    /// Tallies it has.
    pub capacity: u64,
    /// Keys promoted to a breaker of their own.
    pub promoted: u64,
}

/// Where a key lives: its tally, and whether it has a breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyedAt {
    pub tally: usize,
    pub promoted: bool,
}

impl Zone {
    /// The hasher of keyed breakers' keys, under the zone's secret.
    pub fn keyed_hasher(&self) -> KeyHasher {
        let h = self.header();
        KeyHasher::new(h.keyed_secret[0], h.keyed_secret[1])
    }

    /// The mark of the table's place `i`, read and counted in without the mutex
    /// (`circuit_breaker_core::keyed::mark`); `None` past the table's places.
    pub fn keyed_mark(&self, i: usize) -> Option<&AtomicU64> {
        let p = NonNull::new(self.header().keyed_marks.load(Ordering::Acquire))?;
        // The first word, the count of marks in use, was written before the array was
        // published, and is only ever lowered to what the array has room for.
        // SAFETY: a marks array, never freed once published.
        let in_use = unsafe { p.as_ref() }.load(Ordering::Acquire) as usize;
        // SAFETY: within the array (the first word, then `in_use` marks at most).
        (i < in_use).then(|| unsafe { &*p.as_ptr().add(1 + i) })
    }
}

impl<'z> Locked<'z> {
    /// The table's tallies, if it has been laid out.
    fn tallies(&self) -> Option<&'z mut [Tally]> {
        let h = self.header();
        let p = NonNull::new(h.keyed_tallies.load(Ordering::Relaxed))?;
        let cap = h.keyed_cap.load(Ordering::Relaxed) as usize;
        // No other borrow of the tallies outlives a call of this module.
        // SAFETY: `keyed_layout` made `cap` tallies at `p`, freed by it alone; the mutex is held.
        Some(unsafe { core::slice::from_raw_parts_mut(p.as_ptr(), cap) })
    }

    /// The table's marks in use (as many as its tallies once laid out).
    fn marks(&self) -> Option<&'z [AtomicU64]> {
        let p = NonNull::new(self.header().keyed_marks.load(Ordering::Relaxed))?;
        // SAFETY: a marks array (see `keyed_mark`), its first word the count in use.
        let in_use = unsafe { p.as_ref() }.load(Ordering::Relaxed) as usize;
        // SAFETY: the `in_use` marks after the first word, never freed.
        Some(unsafe { core::slice::from_raw_parts(p.as_ptr().add(1), in_use) })
    }

    /// Runs `f` on the table, its count of uses kept in the header.
    fn with_table<T>(&self, f: impl FnOnce(&mut Table<'_>) -> T) -> Option<T> {
        let tallies = self.tallies()?;
        let marks = self.marks()?;
        let h = self.header();
        let mut uses = h.keyed_uses.load(Ordering::Relaxed);
        let out = Table::new(tallies, marks, &mut uses).map(|mut t| f(&mut t));
        h.keyed_uses.store(uses, Ordering::Relaxed);
        out
    }

    /// Marks for a table of `cap` places, all empty: the array there is when it has room,
    /// else a new one (the old one stays: a request may still hold it). `None` when the zone
    /// has no room. The count in use is set once the marks are cleared.
    fn keyed_marks_for(&mut self, cap: usize) -> Option<NonNull<AtomicU64>> {
        let h = self.header();
        let room = h.keyed_marks_room.load(Ordering::Relaxed) as usize;
        let p = match NonNull::new(h.keyed_marks.load(Ordering::Relaxed)) {
            Some(p) if room >= cap => p,
            _ => {
                let layout = core::alloc::Layout::array::<AtomicU64>(cap + 1).ok()?;
                let p = self.pool_mut().allocate(layout).ok()?.cast::<AtomicU64>();
                // SAFETY: a fresh allocation of `cap + 1` words.
                unsafe { p.as_ptr().write(AtomicU64::new(0)) };
                for i in 0..cap {
                    // SAFETY: as above.
                    unsafe { p.as_ptr().add(1 + i).write(AtomicU64::new(0)) };
                }
                h.keyed_marks.store(p.as_ptr(), Ordering::Release);
                h.keyed_marks_room.store(cap as u32, Ordering::Relaxed);
                p
            }
        };
        // SAFETY: the array has room for `cap` marks after its first word, never freed.
        let all = unsafe { core::slice::from_raw_parts(p.as_ptr(), cap + 1) };
        all[0].store(0, Ordering::Release);
        for m in &all[1..] {
            circuit_breaker_core::keyed::mark::clear(m);
        }
        all[0].store(cap as u64, Ordering::Release);
        Some(p)
    }

    /// Lays the table out with `cap` tallies (whole buckets), unless it has exactly that many.
    /// A table of another size is replaced by the new one once it is allocated, its keys moved
    /// over as they are (an open key stays open); a key that finds no room there is forgotten,
    /// its breaker freed. `false` when the zone has no room for the new table: the old one,
    /// if any, stays.
    pub fn keyed_layout(&mut self, cap: usize) -> bool {
        let h = self.header();
        let old = h.keyed_tallies.load(Ordering::Relaxed);
        let old_cap = h.keyed_cap.load(Ordering::Relaxed) as usize;
        if !old.is_null() && old_cap == cap {
            return true;
        }
        let fresh = if cap == 0 {
            None
        } else {
            let Ok(layout) = core::alloc::Layout::array::<Tally>(cap) else {
                return false;
            };
            // The marks first: a table without them is no table.
            let Some(marks) = self.keyed_marks_for(cap) else {
                return false;
            };
            let Ok(p) = self.pool_mut().allocate(layout) else {
                // The marks stay, for the next layout; the old table keeps its places.
                // SAFETY: the marks array's first word.
                unsafe { marks.as_ref() }.store(old_cap as u64, Ordering::Release);
                return false;
            };
            let p = p.cast::<Tally>();
            for i in 0..cap {
                // SAFETY: a fresh allocation of `cap` tallies.
                unsafe { p.as_ptr().add(i).write(Tally::EMPTY) };
            }
            Some(p)
        };
        let mut moved = 0;
        let mut lost = Vec::new();
        if let Some(old) = self.tallies() {
            let mut uses = 0;
            let marks = self.marks();
            let mut new_table = fresh.zip(marks).and_then(|(p, marks)| {
                // SAFETY: the `cap` tallies just written, in the zone, under the mutex.
                let s = unsafe { core::slice::from_raw_parts_mut(p.as_ptr(), cap) };
                Table::new(s, marks, &mut uses)
            });
            for t in old.iter().filter(|t| !t.is_empty()) {
                if new_table.as_mut().is_some_and(|n| n.adopt(*t)) {
                    moved += 1;
                } else if t.full != 0 {
                    lost.push(t.hash);
                }
            }
        }
        for hash in lost {
            if let Some(n) = self.keyed_node(hash) {
                // SAFETY: a published node, not borrowed.
                unsafe { self.remove(n) };
            }
        }
        if let (Some(p), Ok(layout)) = (
            NonNull::new(old),
            core::alloc::Layout::array::<Tally>(old_cap),
        ) {
            // SAFETY: allocated by an earlier call, from this pool with this layout; nothing
            // refers to it any more (holds keep an index, checked against the hash).
            unsafe { self.pool_mut().deallocate(p.cast(), layout) };
        }
        if fresh.is_none() {
            self.keyed_drop_all();
            if let Some(p) = NonNull::new(h.keyed_marks.load(Ordering::Relaxed)) {
                // SAFETY: the marks array's first word: no mark is in use without a table.
                unsafe { p.as_ref() }.store(0, Ordering::Release);
            }
        }
        h.keyed_tallies.store(
            fresh.map_or(core::ptr::null_mut(), NonNull::as_ptr),
            Ordering::Relaxed,
        );
        h.keyed_cap.store(cap as u32, Ordering::Relaxed);
        h.keyed_keys.store(moved, Ordering::Relaxed);
        true
    }

    /// Frees every promoted key's breaker.
    fn keyed_drop_all(&mut self) {
        while let Some(n) = NonNull::new(self.header().keyed_head.load(Ordering::Relaxed)) {
            // SAFETY: a node of the keyed list is published, and not borrowed.
            unsafe { self.remove(n) };
        }
    }

    /// The breaker of the promoted key hashed to `hash`, if it exists.
    fn keyed_node(&self, hash: u64) -> Option<NonNull<Node>> {
        let mut n = self.chain_of(hash).load(Ordering::Relaxed);
        // SAFETY: chains hold published nodes only, live while the mutex is held.
        while let Some(node) = unsafe { n.as_ref() } {
            if node.hash == hash && node.kind() == Kind::Keyed {
                return NonNull::new(n);
            }
            n = node.chain.load(Ordering::Relaxed);
        }
        None
    }

    /// Finds the key hashed to `hash` of `fam`, or gives it a tally (the core's
    /// [`Table::place`]: never the tally of a key whose breaker is open, half-open or forced),
    /// freeing the breaker of a key it replaced. `None` when there is no table, or no tally may
    /// take the key.
    pub fn keyed_place(&mut self, fam: &Family, hash: u64, now_ms: u64) -> Option<KeyedAt> {
        let placed = self.with_table(|t| {
            let placed = t.place(fam.id, hash, (now_ms / 1000, fam.cfg.window_s), |s| {
                let Some(n) = self.keyed_node(s.hash) else {
                    return Protection::Evictable;
                };
                // SAFETY: a published node, the mutex held; this borrow of its breaker ends
                // with the closure, and nothing else borrows it meanwhile.
                let mut b = unsafe { breaker_of(n) };
                if may_go(&mut b, now_ms).is_some() {
                    Protection::Evictable
                } else {
                    Protection::Kept
                }
            });
            let promoted = matches!(placed, Placed::Found(i) if t.tally(i).full != 0);
            (placed, promoted)
        })?;
        match placed {
            (Placed::Found(tally), promoted) => Some(KeyedAt { tally, promoted }),
            (Placed::New(tally), _) => {
                self.header().keyed_keys.fetch_add(1, Ordering::Relaxed);
                Some(KeyedAt {
                    tally,
                    promoted: false,
                })
            }
            (Placed::Replaced(tally, old), _) => {
                if old.full != 0 {
                    if let Some(n) = self.keyed_node(old.hash) {
                        // SAFETY: a published node, not borrowed.
                        unsafe { self.remove(n) };
                    }
                }
                Some(KeyedAt {
                    tally,
                    promoted: false,
                })
            }
            (Placed::Full, _) => None,
        }
    }

    /// The key hashed to `hash` of `fam` where it was last found, at `tally`, marked used at
    /// `now_ms` as [`Locked::keyed_place`] marks a key it finds (what its mark counted taken
    /// in); `None` when it is no longer there (then `keyed_place` finds it).
    pub fn keyed_use(
        &mut self,
        fam: &Family,
        tally: usize,
        hash: u64,
        now_ms: u64,
    ) -> Option<KeyedAt> {
        let promoted =
            self.with_table(|t| t.use_at(tally, fam.id, hash, now_ms / 1000, fam.cfg.window_s))??;
        Some(KeyedAt { tally, promoted })
    }

    /// Where the key hashed to `hash` of `fam` lives, if it does (not a use).
    pub fn keyed_find(&mut self, fam: &Family, hash: u64) -> Option<KeyedAt> {
        let tally = self.with_table(|t| t.find(fam.id, hash))??;
        let promoted = self.tallies()?[tally].full != 0;
        Some(KeyedAt { tally, promoted })
    }

    /// The breaker the key at `tally` (hashed to `hash`) was promoted to. A breaker that is
    /// closed, not forced, holding no probe and whose window is empty is freed instead (the
    /// key compact again: nothing it judged is lost), as is the mark of one that is gone.
    pub fn keyed_breaker(
        &mut self,
        tally: usize,
        hash: u64,
        now_ms: u64,
    ) -> Option<BreakerMut<'_>> {
        let Some(n) = self.keyed_node(hash) else {
            self.keyed_demote(tally, hash, now_ms);
            return None;
        };
        let idle = {
            // SAFETY: a published node, the mutex held; the borrow ends with this block.
            let mut b = unsafe { breaker_of(n) };
            may_go(&mut b, now_ms).is_some_and(|w| w.requests == 0)
        };
        if idle {
            // SAFETY: a published node, not borrowed.
            unsafe { self.remove(n) };
            self.keyed_demote(tally, hash, now_ms);
            return None;
        }
        // SAFETY: a published node; `&mut self` rules out a second `BreakerMut`.
        unsafe { self.borrow(n) }
    }

    /// Whether a breaker of a `window_s` window may be promoted and still leave a quarter of
    /// the zone to the others, once the sweep has freed one that may go if need be: the zone's
    /// free pages say so, or the breaker freed was of the same slab class (the new one takes
    /// its place: a freed chunk frees its page only with its neighbours, so free pages alone
    /// made a key wait for the sweep to happen on both halves of a page).
    fn keyed_room(&mut self, now_ms: u64, window_s: u32) -> bool {
        let enough = |l: &Self| {
            let (used, size, _) = l.usage();
            size.saturating_sub(used) >= size / 4
        };
        if enough(self) {
            return true;
        }
        match self.keyed_sweep(now_ms) {
            Some(freed) => {
                let class = node_class(freed);
                (class.is_some() && class == node_class(window_s)) || enough(self)
            }
            None => false,
        }
    }

    /// Frees one promoted key's breaker that may go, or that no request has asked for since
    /// twice its `max_open` (its clients are gone, whatever its state): the next of the keyed
    /// list from where the last sweep stopped, looking at [`SWEEP`] at most. Forced breakers
    /// stay (the operator's). The window (seconds) of the breaker it freed, if it freed one.
    fn keyed_sweep(&mut self, now_ms: u64) -> Option<u32> {
        let h = self.header();
        let mut n = h.keyed_hand.load(Ordering::Relaxed);
        for _ in 0..SWEEP {
            if n.is_null() {
                n = h.keyed_head.load(Ordering::Relaxed);
            }
            let node = NonNull::new(n)?;
            // SAFETY: the hand and the list hold published nodes (`remove` moves the hand off
            // a node it frees), live while the mutex is held.
            n = unsafe { node.as_ref() }.next.load(Ordering::Relaxed);
            let goes = {
                // SAFETY: a published node, the mutex held; the borrow ends with this block.
                let mut b = unsafe { breaker_of(node) };
                let max_open_ms = u64::from(b.config().max_open_ms);
                let idle = now_ms.saturating_sub(b.last_ms()) >= 2 * max_open_ms;
                b.forced().is_none() && (idle || may_go(&mut b, now_ms).is_some())
            };
            if goes {
                h.keyed_hand.store(n, Ordering::Relaxed);
                // SAFETY: a published node, the mutex held.
                let window_s = unsafe { node.as_ref() }.window_s;
                // SAFETY: published, not borrowed.
                unsafe { self.remove(node) };
                return Some(window_s);
            }
        }
        h.keyed_hand.store(n, Ordering::Relaxed);
        None
    }

    /// The key hashed to `hash` at `tally` is compact again (its breaker gone).
    fn keyed_demote(&mut self, tally: usize, hash: u64, now_ms: u64) {
        self.with_table(|t| {
            if t.get(tally).is_some_and(|s| s.hash == hash) {
                t.demote(tally, now_ms / 1000);
            }
        });
    }

    /// Counts a success of the compact key at `tally`.
    pub fn keyed_success(&mut self, tally: usize, now_ms: u64, window_s: u32) {
        self.with_table(|t| {
            if t.get(tally).is_some() {
                t.success(tally, now_ms / 1000, window_s);
            }
        });
    }

    /// Promotes the key at `tally` (`key`, hashed to `hash`, of `fam`): its breaker, which
    /// takes over the successes its tally counted. Workers of an older configuration than the
    /// zone's make none.
    pub fn keyed_promote(
        &mut self,
        fam: &Family,
        tally: usize,
        hash: u64,
        key: &[u8],
        now_ms: u64,
        generation: u64,
    ) -> Result<BreakerMut<'_>, Missing> {
        if generation < self.generation() {
            return Err(Missing::Stale);
        }
        let k = Key {
            hash,
            upstream: fam.name,
            route: key,
            kind: Kind::Keyed,
        };
        let n = match self.keyed_node(hash) {
            Some(n) => n,
            None => {
                // Keys that fail by the thousand (a client's own failing tenants) leave a
                // quarter of the zone to every other breaker: a promoted key that may go
                // makes room, else the key is not promoted.
                if !self.keyed_room(now_ms, fam.cfg.window_s) {
                    self.note_failure(hash);
                    return Err(Missing::Full);
                }
                self.create(&k, fam.cfg, now_ms).ok_or(Missing::Full)?
            }
        };
        let handover = self
            .with_table(|t| {
                t.get(tally)
                    .is_some_and(|s| s.hash == hash)
                    .then(|| t.promote(tally, now_ms / 1000, fam.cfg.window_s))
            })
            .flatten()
            .unwrap_or_default();
        // SAFETY: a published node (found, or just created); `&mut self` rules out a second
        // `BreakerMut`.
        let mut b = unsafe { self.borrow(n) }.ok_or(Missing::Full)?;
        for (second, count) in handover {
            b.absorb_successes(second, count, &Histogram::EMPTY);
        }
        Ok(b)
    }

    /// The breaker of `key` of `fam` for the operator's control: found, or the key placed and
    /// promoted.
    pub fn keyed_control(
        &mut self,
        fam: &Family,
        hasher: &KeyHasher,
        key: &[u8],
        now_ms: u64,
        generation: u64,
    ) -> Result<BreakerMut<'_>, Missing> {
        let hash = hasher.hash(fam.id, key);
        let at = self.keyed_place(fam, hash, now_ms).ok_or(Missing::Full)?;
        self.keyed_promote(fam, at.tally, hash, key, now_ms, generation)
    }

    /// The table's figures.
    pub fn keyed_count(&self) -> KeyedCount {
        let h = self.header();
        KeyedCount {
            keys: u64::from(h.keyed_keys.load(Ordering::Relaxed)),
            capacity: u64::from(h.keyed_cap.load(Ordering::Relaxed)),
            promoted: u64::from(h.keyed_nodes.load(Ordering::Relaxed)),
        }
    }

    /// The promoted keys' breakers, newest first.
    pub(super) fn keyed_nodes(&self) -> Vec<NonNull<Node>> {
        let mut out = Vec::new();
        let mut n = self.header().keyed_head.load(Ordering::Relaxed);
        // SAFETY: the keyed list holds published nodes, live while the mutex is held.
        while let Some(node) = unsafe { n.as_ref() } {
            out.push(NonNull::from(node));
            n = node.next.load(Ordering::Relaxed);
        }
        out
    }
}

impl Zone {
    /// Takes the keyed breakers over for a new configuration (after [`Zone::reconcile`], whose
    /// counts this adds to): the table laid out for `cap` tallies (none when no location has a
    /// keyed breaker), the breakers of keys whose family the configuration no longer has
    /// freed, and those whose family's parameters changed retuned as upstream breakers are
    /// (state, episode and totals kept; the window too when its length is the same). A key's
    /// tally, and so its successes, stays whatever the reload.
    pub fn keyed_reconcile(
        &self,
        cap: usize,
        families: &[Family],
        now_ms: u64,
        out: &mut super::reload::Reconciled,
    ) -> bool {
        let mut locked = self.lock();
        let laid = locked.keyed_layout(cap);
        for n in locked.keyed_nodes() {
            // SAFETY: a node of the keyed list, published; the names are copied out before
            // the node may be freed below.
            let (family, key) = unsafe { locked.names_of(n) };
            let (family, key) = (family.to_vec(), key.to_vec());
            let Some(fam) = families.iter().find(|f| f.name == family.as_slice()) else {
                // SAFETY: published, not borrowed.
                unsafe { locked.remove(n) };
                out.dropped += 1;
                continue;
            };
            // SAFETY: published, the lock held; the borrow ends with the statement.
            let current = unsafe { locked.breaker_at(n) }.map(|b| *b.config());
            if current.is_none() || current == Some(*fam.cfg) {
                continue;
            }
            let who = out
                .retuned
                .wants_name()
                .then(|| super::who(&family, &key, Kind::Keyed));
            // SAFETY: published; `window_s` is fixed at creation.
            let retuned = if unsafe { Locked::window_of(n) } == fam.cfg.window_s {
                // SAFETY: published, the lock held; the borrow drops at the end of the arm.
                unsafe { locked.breaker_at(n) }.and_then(|mut b| b.retune(now_ms, *fam.cfg))
            } else {
                // SAFETY: published, the lock held; the borrow is dropped before `remove`.
                let old = unsafe { locked.breaker_at(n) }.map(|mut b| b.carry_out());
                let hash = {
                    // SAFETY: published.
                    unsafe { n.as_ref() }.hash
                };
                // SAFETY: published, not borrowed.
                unsafe { locked.remove(n) };
                let k = Key {
                    hash,
                    upstream: &family,
                    route: &key,
                    kind: Kind::Keyed,
                };
                match (locked.create(&k, fam.cfg, now_ms), old) {
                    (Some(_), Some(old)) => locked.find(&k).map(|mut b| b.adopt(&old, now_ms)),
                    _ => None,
                }
            };
            out.retuned.note(who, retuned);
        }
        laid
    }
}

/// Whether a promoted key's breaker may go at `now_ms` (`keyed::may_go`, on what it judged:
/// its window advanced to now): its window then, else `None`.
fn may_go(b: &mut Breaker<'_>, now_ms: u64) -> Option<WindowView> {
    let w = b.window(now_ms);
    let judged = keyed::Judged {
        opened: b.totals().opened > 0,
        failing: w.failures > 0 || w.slow > 0,
    };
    let closed_for = now_ms.saturating_sub(b.since_ms());
    let forced = b.forced().is_some();
    keyed::may_go(b.state(), forced, closed_for, b.config(), judged).then_some(w)
}

/// The slab class of a breaker's node of a `window_s` window.
fn node_class(window_s: u32) -> Option<usize> {
    node_layout(window_s).map(|l| slab_class(l.size()))
}
