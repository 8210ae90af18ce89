//! The shared-memory zone: every breaker of the instance, in a hash table allocated from the
//! zone's slab pool and guarded by the slab pool's own mutex — the one lock nginx releases
//! when a worker dies holding it (`ngx_unlock_mutexes`), so a crash never wedges the zone.
//!
//! Beside each breaker a [`berth`] holds what a request may be told without the lock
//! (its `Gate`); berths are never freed, so a lock-free read can never touch freed memory. The
//! table and the breakers are touched only under the mutex ([`Locked`]).
//!
//! A breaker is of one [`Kind`]: an (upstream, route) breaker, or the breaker of one server of
//! an upstream (per-server ejection). An upstream's own breaker may also carry the upstream's
//! retry budget, and its berth a stamp that changes whenever one of the upstream's servers
//! leaves or rejoins the pool, so that every worker follows without the lock.

mod berth;
mod block;
mod gathered;
mod held;
mod history;
mod init;
mod keyed;
mod limit;
mod node;
mod reload;
mod retuned;
mod table;

use circuit_breaker_core::breaker::ramp;
use circuit_breaker_core::class::Class;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use circuit_breaker_core::breaker::{Admission, BreakerHeader, Bucket, Gate};
use nginx_sys::{ngx_shm_zone_t, ngx_slab_pool_t};
use ngx::core::SlabPool;

pub use held::{HeldProbe, Probed};
pub use init::{init_zone, ZoneName};
pub use keyed::{Family, KeyedCount};
pub use limit::{LimitPtr, Owner};
pub use reload::Wanted;
pub use retuned::log_reconciled;
pub use table::{Entry, Locked, Missing};

use berth::Berth;
pub use berth::RawGate;
use node::Node;

/// Longest upstream name a breaker key can hold.
pub const MAX_NAME: usize = u16::MAX as usize;
/// What a breaker judges (the core's, which the status page sorts by).
pub use circuit_breaker_core::snapshot::Kind;
/// The route of an upstream's own breaker (the core's, which the status page names).
pub use circuit_breaker_core::status::DEFAULT_ROUTE;

/// Identifies this layout: a zone reused across a reload that loaded a build of the module
/// with another layout is refused rather than misread. A hash (FNV-1a) of the size of every
/// structure the zone holds, so that no two sizes can cancel out, and of a revision.
const MAGIC: u64 = layout_hash(&[
    0x6362_5f7a_6f6e_6503,
    core::mem::size_of::<Header>() as u64,
    core::mem::size_of::<Node>() as u64,
    core::mem::size_of::<BreakerHeader>() as u64,
    core::mem::size_of::<Bucket>() as u64,
    core::mem::size_of::<Berth>() as u64,
    core::mem::size_of::<block::Block>() as u64,
    core::mem::size_of::<circuit_breaker_core::history::History>() as u64,
    core::mem::size_of::<circuit_breaker_core::keyed::Tally>() as u64,
    circuit_breaker_core::limit::LIMITER_SIZE as u64,
    LAYOUT_REVISION,
]);

/// Bumped when a layout changes without a size changing (revision 1: a berth's index in
/// what was padding; 2: the limit controller's capacity estimate; 3: a berth's rejecting
/// gate packs the announced end beside its wait, which an older build would read as a wait,
/// and a breaker's `cooldown_ms` is the one told; 4: a breaker keeps its episode's start;
/// 5: the zone's jitter seed; 6: keyed breakers; 7: a key lives in one of two buckets;
/// 8: keys' marks; 9: a berth's last answer; 10: a latency outlier's probe limit in a trip,
/// and a berth's claimed second).
const LAYOUT_REVISION: u64 = 10;

const fn layout_hash(words: &[u64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < words.len() {
        let mut b = 0;
        while b < 8 {
            h ^= (words[i] >> (8 * b)) & 0xff;
            h = h.wrapping_mul(0x0100_0000_01b3);
            b += 1;
        }
        i += 1;
    }
    h
}

/// The zone's header, at the slab pool's `data`. Every field that changes is an atomic, so
/// that a shared reference to it is sound while other processes update it; fields that only
/// change under the mutex use `Relaxed` (the mutex orders them).
#[repr(C)]
struct Header {
    magic: u64,
    /// Bumped when a new configuration takes over the zone; workers of an older one create
    /// no breakers, and a status walk that sees it move stops (nodes may have been freed).
    generation: AtomicU64,
    /// The last berth tenant id handed out (0 names no breaker).
    idents: AtomicU64,
    /// The last breaker epoch handed out, for probe tickets unique across resets.
    epochs: AtomicU64,
    /// Distinct breakers that could not be created because the zone was full.
    alloc_failures: AtomicU64,
    /// Breakers in the table.
    count: AtomicU64,
    /// Hash table: `mask + 1` chains.
    mask: u64,
    table: *mut AtomicPtr<Node>,
    /// Every node, newest first, for the status page and reloads.
    head: AtomicPtr<Node>,
    /// Berth chunks, allocated as needed and never freed.
    chunks: *mut AtomicPtr<Berth>,
    max_chunks: u32,
    nchunks: AtomicU32,
    /// First free berth, `u32::MAX` when none.
    free_berth: AtomicU32,
    /// Wall-clock milliseconds minus monotonic ones, as the status pages show instants.
    wall_offset: AtomicI64,
    /// Key hashes of breakers that could not be created, so each is counted once.
    failed: *mut AtomicU64,
    failed_cap: u32,
    failed_len: AtomicU32,
    /// The instance's jitter seed (`circuit_breaker_jitter_key`, or drawn at random when
    /// the zone was laid out): each breaker's jitter key is made from it at its creation.
    jitter_seed: [AtomicU64; 4],
    /// Keyed breakers (`circuit_breaker_key`, see `keyed`): the secret their keys are hashed
    /// under, drawn when the zone is laid out;
    keyed_secret: [u64; 2],
    /// their table of tallies (null until a configuration with keyed breakers takes the zone)
    /// and its tally count;
    keyed_tallies: AtomicPtr<circuit_breaker_core::keyed::Tally>,
    keyed_cap: AtomicU32,
    /// their marks (`circuit_breaker_core::keyed::mark`), read and counted in without the
    /// mutex: an array whose first word is the count of marks in use, never freed (a
    /// request may hold it while a reload lays out another table), and the marks it has room
    /// for;
    keyed_marks: AtomicPtr<AtomicU64>,
    keyed_marks_room: AtomicU32,
    /// the table's count of uses (under the mutex);
    keyed_uses: AtomicU32,
    /// and the breakers keys were promoted to, newest first: a list of their own, apart from
    /// the list of all nodes that status walks and reloads follow between lock holds, since
    /// these are freed at run time (under the mutex).
    keyed_head: AtomicPtr<Node>,
    keyed_nodes: AtomicU32,
    /// Keys in the table (under the mutex).
    keyed_keys: AtomicU32,
    /// Where the sweep that reclaims promoted keys' breakers goes on from (null: the head).
    keyed_hand: AtomicPtr<Node>,
}

impl Header {
    /// The jitter seed, as bytes.
    fn jitter_seed(&self) -> [u8; 32] {
        let mut seed = [0u8; 32];
        for (chunk, word) in seed.chunks_mut(8).zip(&self.jitter_seed) {
            chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_be_bytes());
        }
        seed
    }

    /// Replaces the jitter seed (for breakers made from now on).
    fn set_jitter_seed(&self, seed: &[u8; 32]) {
        for (chunk, word) in seed.chunks(8).zip(&self.jitter_seed) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            word.store(u64::from_be_bytes(b), Ordering::Relaxed);
        }
    }
}

/// A breaker found once, to be found again without a lookup: its berth and the tenant id the
/// berth had then. A stale handle (the breaker was freed, the berth reused) simply finds nothing.
///
/// It keeps where the berth is rather than its index, so that the hot paths
/// (`admit_unlocked`, `add_success`) need not look it up through the chunk table again
/// (`scripts/bench-instructions`, closed and open_503). It stays 16 bytes (the index lives in
/// the berth): a larger handle moves glibc malloc's per-request path in every case, plain
/// included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// C's layout: the PRECONTENT phase's `extern "C"` branches take it by value. It lives in
// worker memory only, never in the zone.
#[repr(C)]
pub struct Handle {
    /// The berth, in the zone this handle came from (null for no breaker).
    at: *const Berth,
    ident: u64,
}

impl Handle {
    /// No breaker.
    pub const NONE: Handle = Handle {
        at: core::ptr::null(),
        ident: 0,
    };

    /// The berth the handle names. Handles are made only from a zone's berths (by its
    /// lookups, under the configuration that owns the zone, which outlives every request and
    /// timer using the handle), and berths are never freed while the zone is mapped. The
    /// lifetime is the caller's: private to this module, whose uses end within one call or
    /// are tied to the zone's borrow (`Zone::berth_of`).
    #[inline(always)]
    fn berth<'z>(self) -> Option<&'z Berth> {
        // SAFETY: null, or a berth of a mapped zone (above): live, and made of atomics only,
        // so a shared reference is sound while others update it.
        unsafe { self.at.as_ref() }
    }

    /// The handle of the breaker whose berth `at` holds tenant `ident`.
    fn new(ident: u64, at: &Berth) -> Handle {
        Handle {
            at: at as *const Berth,
            ident,
        }
    }

    /// Whether this names no breaker.
    #[inline]
    pub fn is_none(&self) -> bool {
        self.ident == 0
    }

    /// The berth's index: small and dense, for tables kept per breaker in worker memory.
    #[inline]
    pub fn berth_index(&self) -> usize {
        self.berth().map_or(u32::MAX, Berth::index) as usize
    }
}

impl Default for Handle {
    fn default() -> Handle {
        Handle::NONE
    }
}

/// A breaker as the log names it: `"up/route"`, `"up" server 10.0.0.1:80`, or `"$host" key
/// "a.example"`.
pub fn who(upstream: &[u8], route: &[u8], kind: Kind) -> String {
    let up = String::from_utf8_lossy(upstream);
    if kind == Kind::Keyed {
        return format!(
            "\"{up}\" key \"{}\"",
            circuit_breaker_core::keyed::name::shown(route)
        );
    }
    let route = String::from_utf8_lossy(route);
    match kind {
        Kind::Server => format!("\"{up}\" server {route}"),
        _ => format!("\"{up}/{route}\""),
    }
}

/// The key of one breaker.
#[derive(Clone, Copy, Debug)]
pub struct Key<'a> {
    pub hash: u64,
    pub upstream: &'a [u8],
    /// The route's name, or the server's address for [`Kind::Server`].
    pub route: &'a [u8],
    pub kind: Kind,
}

impl<'a> Key<'a> {
    /// The key of upstream `upstream`'s own breaker (its `default` route), hashed here: for
    /// code that knows the upstream only by name (the http module's view of a stream one).
    pub fn own(upstream: &'a [u8]) -> Key<'a> {
        Key {
            hash: crate::ffi::key_hash(
                crate::ffi::hash_name(upstream),
                crate::ffi::hash_name(DEFAULT_ROUTE.as_bytes()),
            ),
            upstream,
            route: DEFAULT_ROUTE.as_bytes(),
            kind: Kind::Route,
        }
    }

    /// The key of the breaker of upstream `upstream`'s server `server`, hashed here.
    pub fn server(upstream: &'a [u8], server: &'a [u8]) -> Key<'a> {
        Key {
            hash: crate::ffi::server_key_hash(
                crate::ffi::hash_name(upstream),
                crate::ffi::hash_name(server),
            ),
            upstream,
            route: server,
            kind: Kind::Server,
        }
    }
}

/// A zone as a process sees it.
#[derive(Clone)]
pub struct Zone {
    pool: SlabPool,
    size: usize,
}

impl Zone {
    /// The zone behind an nginx shm zone, once [`init_zone`] has laid it out.
    ///
    /// # Safety
    /// `shm` must be null or a shm zone registered by this module, in a process where it is
    /// mapped (the master between init and the next reload, or a worker).
    #[inline]
    pub unsafe fn from_shm(shm: *const ngx_shm_zone_t) -> Option<Zone> {
        // SAFETY: this fn's contract is laid_out_pool's.
        let (pool, size) = unsafe { crate::ffi::laid_out_pool(shm)? };
        Some(Zone { pool, size })
    }

    /// [`Zone::from_shm`] of a zone another module laid out (the stream module's, which the
    /// http module's status location reads): `None` unless its layout is this build's.
    ///
    /// # Safety
    /// As for [`Zone::from_shm`], of a zone registered by either module.
    pub unsafe fn from_kin_shm(shm: *const ngx_shm_zone_t) -> Option<Zone> {
        // SAFETY: this fn's contract is from_shm's.
        let z = unsafe { Self::from_shm(shm) }?;
        (z.header().magic == MAGIC).then_some(z)
    }

    fn pool_ptr(&self) -> *mut ngx_slab_pool_t {
        core::ptr::from_ref(self.pool.as_ref()).cast_mut()
    }

    fn header(&self) -> &Header {
        // SAFETY: `data` points at the header init_zone wrote; the header's changing fields
        // are atomics, so a shared reference is sound while other processes update them.
        unsafe { &*self.pool.as_ref().data.cast::<Header>() }
    }

    /// The berth `index` names, if it was ever allocated.
    fn berth(&self, index: u32) -> Option<&Berth> {
        let h = self.header();
        let chunk = index / berth::PER_CHUNK;
        if chunk >= h.nchunks.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: chunks below `nchunks` were allocated and published (Release) before it
        // was raised, and are never freed.
        let base = unsafe { (*h.chunks.add(chunk as usize)).load(Ordering::Acquire) };
        let base = NonNull::new(base)?;
        // SAFETY: a chunk holds PER_CHUNK berths, all initialised; berths are atomics only.
        Some(unsafe { &*base.as_ptr().add((index % berth::PER_CHUNK) as usize) })
    }

    /// [`Handle::berth`], borrowed for as long as the zone.
    #[inline]
    fn berth_of(&self, handle: Handle) -> Option<&Berth> {
        handle.berth()
    }

    /// What the breaker `handle` names says to a request at `now_ms` without the lock, or `None` when only the locked path can tell (or the
    /// handle no longer names `key_hash`'s breaker). A rejection or a ramp's turn-away is
    /// counted in the berth's lock-free counters.
    #[inline]
    pub fn admit_unlocked(&self, handle: Handle, key_hash: u64, now_ms: u64) -> Option<Admission> {
        Self::admit_raw(handle, Self::raw_gate(handle, key_hash)?, now_ms)
    }

    /// [`Zone::admit_unlocked`] for a request of `class` (see [`Zone::admit_raw_as`]).
    #[inline]
    pub fn admit_unlocked_as(
        &self,
        handle: Handle,
        key_hash: u64,
        now_ms: u64,
        class: Option<Class>,
    ) -> Option<Admission> {
        Self::admit_raw_as(handle, Self::raw_gate(handle, key_hash)?, now_ms, class)
    }

    /// [`Zone::admit_unlocked`] with the gate [`Zone::raw_gate`] read.
    #[inline(always)]
    pub fn admit_raw(handle: Handle, raw: RawGate, now_ms: u64) -> Option<Admission> {
        Self::admit_gate(handle.berth()?, raw.gate(), now_ms, None)
    }

    /// [`Zone::admit_raw`] for a request of `class`: a ramp lets it through at its class's
    /// power of the share (`circuit_breaker_core::breaker::ramp::draw_for`).
    #[inline]
    pub fn admit_raw_as(
        handle: Handle,
        raw: RawGate,
        now_ms: u64,
        class: Option<Class>,
    ) -> Option<Admission> {
        Self::admit_gate(handle.berth()?, raw.gate(), now_ms, class)
    }

    /// [`Zone::admit_raw`] for a gate that [`RawGate::rejects`], given the two words it
    /// returned.
    #[inline(always)]
    pub fn admit_reject(
        handle: Handle,
        until_ms: u64,
        wait_word: u64,
        now_ms: u64,
    ) -> Option<Admission> {
        Self::admit_gate(
            handle.berth()?,
            berth::reject_gate(until_ms, wait_word),
            now_ms,
            None,
        )
    }

    #[inline(always)]
    fn admit_gate(
        berth: &Berth,
        gate: Gate,
        now_ms: u64,
        class: Option<Class>,
    ) -> Option<Admission> {
        // Only a ramp draws a share.
        let rnd = if matches!(gate, Gate::Ramp { .. }) {
            ramp::draw_for(crate::clock::rnd(), class)
        } else {
            0
        };
        let admission = gate.admit(now_ms, rnd)?;
        match admission {
            Admission::Reject { .. } => berth.count_reject(),
            Admission::Recovering { .. } => berth.count_ramp_shed(),
            _ => {}
        }
        Some(admission)
    }

    /// The gate the breaker `handle` names last published, not yet decoded, read without the
    /// lock (inline: a closed breaker's pass is told by one more comparison), or `None` as for
    /// [`Zone::admit_unlocked`].
    ///
    /// No zone to look up first: a handle names its berth itself (the PRECONTENT phase reads
    /// neither the main conf nor the zone for it, `scripts/bench-instructions`).
    #[inline(always)]
    pub fn raw_gate(handle: Handle, key_hash: u64) -> Option<RawGate> {
        handle.berth()?.read_raw(handle.ident, key_hash)
    }

    /// The gate the breaker `handle` names last published, read without the lock and without
    /// counting anything (the prober's look), or `None` when the handle no longer names
    /// `key_hash`'s breaker or a writer was publishing.
    pub fn gate(&self, handle: Handle, key_hash: u64) -> Option<Gate> {
        self.berth_of(handle)?.read_gate(handle.ident, key_hash)
    }

    /// Records a success of the breaker `handle` names — a counted attempt of a normal request
    /// that neither failed nor was slow, `ms` long — without the lock, if the breaker allows
    /// it now (see [`gathered`]); false when the caller must record it under the lock.
    #[inline]
    pub fn add_success(&self, handle: Handle, key_hash: u64, now_ms: u64, ms: u64) -> bool {
        let Some(berth) = self.berth_of(handle) else {
            return false;
        };
        let now_s = now_ms / 1000;
        berth.lock_free_second(handle.ident, key_hash) == Some(now_s)
            && berth.gathered.add(now_s, ms)
    }

    /// Notes that the origin of the breaker `handle` names answered at `now_ms` (as
    /// [`Zone::note_answer`]) with a success that took `ms` (as [`Zone::add_success`]), with
    /// one look at the berth; false when the success waits for the lock (the answer is noted
    /// then, if the handle still names the breaker).
    #[inline]
    pub fn answer_success(&self, handle: Handle, key_hash: u64, now_ms: u64, ms: u64) -> bool {
        let Some(berth) = self.berth_of(handle) else {
            return false;
        };
        let now_s = now_ms / 1000;
        if berth.lock_free_second(handle.ident, key_hash) == Some(now_s) {
            berth.note_answer(now_ms);
            return berth.gathered.add(now_s, ms);
        }
        if berth.stamp(handle.ident).is_some() {
            berth.note_answer(now_ms);
        }
        false
    }

    /// As [`Zone::add_success`], for a breaker whose latencies are never shown (a server's).
    #[inline]
    pub fn add_success_count(&self, handle: Handle, key_hash: u64, now_ms: u64) -> bool {
        let Some(berth) = self.berth_of(handle) else {
            return false;
        };
        let now_s = now_ms / 1000;
        berth.lock_free_second(handle.ident, key_hash) == Some(now_s) && berth.gathered.count(now_s)
    }

    /// Notes, without the lock, that the origin of the breaker `handle` names answered at
    /// `now_ms` (a stream session's first byte).
    #[inline]
    pub fn note_answer(&self, handle: Handle, now_ms: u64) {
        if let Some(b) = self
            .berth_of(handle)
            .filter(|b| b.stamp(handle.ident).is_some())
        {
            b.note_answer(now_ms);
        }
    }

    /// When the origin of the breaker `handle` names last answered, in any worker (0: never
    /// since the breaker moved into its berth, or the handle names it no longer).
    pub fn answered_ms(&self, handle: Handle) -> u64 {
        self.berth_of(handle)
            .filter(|b| b.stamp(handle.ident).is_some())
            .map_or(0, Berth::answered_ms)
    }

    /// Claims second `now_ms / 1000` for a once-a-second task of the breaker `handle` names (a
    /// pool's judgement), so that one worker does it each second: true for the first caller
    /// of that second, and whenever the handle names the breaker no longer (the caller then
    /// takes the lock and finds it).
    pub fn claim_second(&self, handle: Handle, now_ms: u64) -> bool {
        match self.berth_of(handle) {
            Some(b) if b.stamp(handle.ident).is_some() => b.claim_second(now_ms / 1000),
            _ => true,
        }
    }

    /// Takes the zone's mutex until the guard drops.
    pub fn lock(&self) -> Locked<'_> {
        Locked::new(self)
    }

    /// The wall-clock reading that goes with monotonic `mono_ms`, for showing instants.
    ///
    /// nginx reads its two clocks one after the other, so their difference wobbles by a
    /// millisecond from one update to the next; the zone keeps one difference for every
    /// worker and follows only a real step of the wall clock (more than 5 ms), so that two
    /// pages read in turn show the same instants.
    pub fn wall_clock(&self, mono_ms: u64, wall_ms: u64) -> u64 {
        let seen = wall_ms as i64 - mono_ms as i64;
        let kept = &self.header().wall_offset;
        let offset = match kept.load(Ordering::Relaxed) {
            0 => seen,
            k if (seen - k).abs() > 5 => seen,
            k => return mono_ms.saturating_add_signed(k),
        };
        kept.store(offset, Ordering::Relaxed);
        mono_ms.saturating_add_signed(offset)
    }

    /// How many breakers the table holds, without the lock: a size to make room for.
    pub fn breakers(&self) -> usize {
        self.header().count.load(Ordering::Relaxed) as usize
    }

    /// The zone's generation: bumped by every configuration that takes the zone over.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.header().generation.load(Ordering::Acquire)
    }

    /// The stamp of the breaker `handle` names (see [`BreakerMut::bump_stamp`]), without the
    /// lock; `None` when the handle no longer names a breaker.
    #[inline]
    pub fn stamp(&self, handle: Handle) -> Option<u64> {
        self.berth_of(handle)?.stamp(handle.ident)
    }

    /// Where the stamp of the breaker `handle` names lives, to be read again without a
    /// lookup (see [`StampRef`]).
    #[inline]
    pub fn stamp_ref(&self, handle: Handle) -> StampRef {
        match self.berth_of(handle) {
            Some(s) if s.stamp(handle.ident).is_some() => StampRef(s.stamp_cell()),
            _ => StampRef::NONE,
        }
    }
}

/// A breaker's stamp, read with one atomic load: its berth is never freed while the zone is
/// mapped (the whole life of a configuration in a worker), and every change a reader follows
/// moves the stamp on — including the berth passing to another tenant (`occupy` bumps it) —
/// so a reader that took it for a breaker sees each change of that breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StampRef(*const AtomicU64);

impl StampRef {
    /// No stamp: [`StampRef::read`] says `None`.
    pub const NONE: StampRef = StampRef(core::ptr::null());

    /// The stamp now.
    #[inline]
    pub fn read(self) -> Option<u64> {
        // SAFETY: null, or a berth's stamp in a chunk that is never freed while the zone is
        // mapped; taken by a worker for its own configuration, during which it stays mapped.
        unsafe { self.0.as_ref() }.map(|s| s.load(Ordering::Acquire))
    }
}

impl Default for StampRef {
    fn default() -> StampRef {
        StampRef::NONE
    }
}

/// How many breakers a status walk reads per lock hold: each is copied consistently, and the
/// lock is let go between batches, so a scrape of 10 000 breakers never stalls traffic for
/// the whole walk (a batch takes about a quarter of a millisecond).
const VISIT_BATCH: usize = 256;

impl Zone {
    /// Walks every breaker with the lock held, letting it go after each `batch` nodes so that
    /// no other worker waits for more than one batch, and returns the lock. `step` gets each
    /// node after the walk has read its successor, so it may free that node. Between batches
    /// `go_on` says whether the walk may continue: nodes are freed only by a reconciliation,
    /// so a walk that is not one stops when a reconciliation bumped the generation meanwhile.
    fn walk<'z>(
        &'z self,
        mut locked: Locked<'z>,
        batch: usize,
        mut go_on: impl FnMut(&Locked<'z>) -> bool,
        mut step: impl FnMut(&mut Locked<'z>, NonNull<Node>),
    ) -> Locked<'z> {
        let mut node = locked.first();
        let mut done = 0;
        while let Some(n) = node {
            if done > 0 && done % batch == 0 {
                drop(locked);
                locked = self.lock();
                if !go_on(&locked) {
                    break;
                }
            }
            done += 1;
            // SAFETY: `n`, reached under the lock, is published: `go_on` stopped the walk if a
            // reconciliation ran between batches, and `step` frees a node only after this read.
            node = unsafe { locked.next(n) };
            step(&mut locked, n);
        }
        locked
    }

    /// Visits every breaker's view at `now_ms`, holding the lock for one batch at a time.
    /// Nodes are freed only by a new configuration's reconciliation, which bumps the
    /// generation under the lock first: the walk stops if that happened between batches, so
    /// it never follows a freed node. Returns the zone's usage as [`Locked::usage`] saw it.
    /// `history`: each view carries the breaker's history, if it has one.
    pub fn visit(
        &self,
        now_ms: u64,
        history: bool,
        mut f: impl FnMut(Entry<'_>),
    ) -> (u64, u64, u64) {
        let locked = self.lock();
        let usage = locked.usage();
        let generation = locked.generation();
        let step = |locked: &mut Locked<'_>, n: NonNull<Node>| {
            // SAFETY: `n` is published (walk's promise: same generation, lock held).
            unsafe { visit_one(locked, n, now_ms, history, &mut f) }
        };
        drop(self.walk(locked, VISIT_BATCH, |l| l.generation() == generation, step));
        usage
    }

    /// Visits the breakers keys were promoted to, as [`Zone::visit`] does the others, in one
    /// lock hold (they are freed at run time: a walk in batches could meet a freed one), and
    /// returns the table's figures; `None` when the zone has no table of keys.
    pub fn visit_keyed(
        &self,
        now_ms: u64,
        history: bool,
        mut f: impl FnMut(Entry<'_>),
    ) -> Option<KeyedCount> {
        let mut locked = self.lock();
        let count = locked.keyed_count();
        if count.capacity == 0 {
            return None;
        }
        for n in locked.keyed_nodes() {
            // SAFETY: a node of the keyed list, published, the lock held throughout.
            unsafe { visit_one(&mut locked, n, now_ms, history, &mut f) };
        }
        Some(count)
    }
}

impl Zone {
    /// The fleet's walk of keyed breakers: `f` gets (family, key, view) of those that are
    /// open, forced, failing or slow in their window, or changed state within `recent_ms` —
    /// the others are passed over with a glance at their state and window sums, so that the
    /// lock, held for the whole walk (keyed breakers are freed at run time), stays short.
    pub fn visit_keyed_worth(
        &self,
        now_ms: u64,
        recent_ms: u64,
        mut f: impl FnMut(&[u8], &[u8], circuit_breaker_core::snapshot::BreakerView),
    ) {
        let mut locked = self.lock();
        for n in locked.keyed_nodes() {
            // SAFETY: a node of the keyed list, published, the lock held throughout; the
            // borrow ends with the block.
            let view = match unsafe { locked.breaker_at(n) } {
                Some(mut b) => {
                    let w = b.window(now_ms);
                    let worth = b.state() != circuit_breaker_core::snapshot::State::Closed
                        || b.forced().is_some()
                        || w.failures > 0
                        || w.slow > 0
                        || now_ms.saturating_sub(b.since_ms()) < recent_ms;
                    worth.then(|| b.view(now_ms))
                }
                None => None,
            };
            let Some(view) = view else { continue };
            // SAFETY: published (as above); the names borrow `locked`, not let go meanwhile.
            let (family, key) = unsafe { locked.names_of(n) };
            f(family, key, view);
        }
    }
}

/// Gives `f` one breaker's entry, for a status walk.
///
/// # Safety
/// `n` must be published, reached under the lock `locked` holds.
unsafe fn visit_one(
    locked: &mut Locked<'_>,
    n: NonNull<Node>,
    now_ms: u64,
    history: bool,
    f: &mut impl FnMut(Entry<'_>),
) {
    // SAFETY: `n` is published (this fn's contract); the
    // `BreakerMut` borrows `locked` mutably and is gone by the end of the match.
    let (view, retry) = match unsafe { locked.breaker_at(n) } {
        Some(mut b) => {
            let mut view = b.view(now_ms);
            if history {
                view.history = b.history(now_ms);
            }
            (view, b.retry_budget().map(|r| r.view(now_ms)))
        }
        None => return,
    };
    // SAFETY: `n` is published (as above); only its berth index is read.
    let limit = unsafe { locked.handle_of(n) }.and_then(|h| locked.limit_status(h));
    // SAFETY: `n` is published (as above); the names borrow `locked`, which is not let
    // go before `f` returns.
    let (upstream, route) = unsafe { locked.names_of(n) };
    f(Entry {
        upstream,
        route,
        // SAFETY: `n` is published (as above); `kind` is fixed at creation.
        kind: unsafe { n.as_ref() }.kind(),
        view,
        retry,
        limit,
    });
}
