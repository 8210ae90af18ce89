//! A breaker's berth: what a request may be told without the lock (the breaker's `Gate`),
//! published under the lock after every change and read lock-free with a sequence lock.
//! Berths live in chunks that are never freed, and a berth names its tenant by an id, so a
//! lock-free reader holding a stale handle reads a mismatch, never freed memory.

use core::sync::atomic::{fence, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use circuit_breaker_core::breaker::Gate;
use circuit_breaker_core::history::History;

use super::block::Block;
use super::gathered::Gathered;
use super::node::Node;

/// Berths per chunk: a chunk fills one slab page.
pub const PER_CHUNK: u32 = (4096 / core::mem::size_of::<Berth>()) as u32;

/// No second: successes are recorded under the lock.
const NO_SECOND: u64 = u64::MAX;

const MODE_ASK: u64 = 0;
const MODE_PASS: u64 = 1;
const MODE_REJECT: u64 = 2;
const MODE_RAMP: u64 = 3;

#[repr(C)]
pub struct Berth {
    /// The tenant's id; 0 while free.
    ident: AtomicU64,
    /// The tenant's key hash, so that a location's remembered handle is checked against the
    /// breaker it wants.
    key: AtomicU64,
    /// Sequence lock over the gate below: odd while a writer is in the middle.
    seq: AtomicU64,
    mode: AtomicU64,
    until: AtomicU64,
    /// `Reject`: the announced end past `until` (high half) and the wait after it (low
    /// half); `Ramp`: its length and start. Two words packed in one, as read on the open
    /// path: no load more, and a `RawGate` still passed in registers.
    wait: AtomicU64,
    /// The second successes may be gathered in without the lock (`NO_SECOND`: none).
    lock_free_second: AtomicU64,
    /// Successes gathered without the lock, absorbed at the next locked call.
    pub gathered: Gathered,
    /// Requests short-circuited, and turned away by a ramp, lock-free; added to the
    /// breaker's totals when shown.
    rejects: AtomicU64,
    ramp_shed: AtomicU64,
    /// Bumped under the mutex when something that workers follow on their own changes (an
    /// upstream's servers in or out of the pool), read without it.
    stamp: AtomicU64,
    /// The fleet's advice (`crate::fleet`), written by the exchange worker and read by the
    /// locked path, both under the mutex: from when this instance may start a probe, and
    /// until when the advice holds (0: no advice, the breaker acts alone).
    fleet_probe_from: AtomicU64,
    fleet_until: AtomicU64,
    /// The tenant node (read and written under the mutex only).
    node: AtomicPtr<Node>,
    /// Next free berth while free (under the mutex).
    next_free: AtomicU32,
    /// This berth's index, set when its chunk is made (in what was padding: the size stays).
    index: u32,
    /// The adaptive limit's block, made for the first tenant with a limit and kept with the
    /// berth from then on (never freed).
    limit: AtomicPtr<Block>,
    /// The tenant's history (`super::history`), made for the first tenant that needed one
    /// and kept with the berth from then on (never freed); it names the tenant it follows.
    history: AtomicPtr<History>,
    /// When the tenant's origin last answered (a stream session's first byte), in any worker,
    /// on the monotonic clock: a silence since is the origin's, not a client's doing.
    answered_ms: AtomicU64,
    /// The last second a once-a-second task of the tenant (its pool's judgement) was claimed
    /// by a worker ([`Berth::claim_second`]).
    claimed_s: AtomicU64,
}

/// A berth's gate as published, not yet decoded into a [`Gate`].
#[derive(Clone, Copy)]
pub struct RawGate {
    mode: u64,
    until: u64,
    wait: u64,
}

impl RawGate {
    /// Whether it is [`Gate::Pass`].
    #[inline(always)]
    pub fn passes(&self) -> bool {
        self.mode == MODE_PASS
    }

    /// The cooldown's end and the word that says what to announce before and after it
    /// ([`reject_gate`] makes the gate of the two), if it is [`Gate::Reject`]: told apart from
    /// the other gates, an open breaker's short-circuit takes them in registers rather than
    /// the whole gate (`scripts/bench-instructions`, open_503).
    #[inline(always)]
    pub fn rejects(&self) -> Option<(u64, u64)> {
        (self.mode == MODE_REJECT).then_some((self.until, self.wait))
    }

    /// The gate.
    #[inline]
    pub fn gate(self) -> Gate {
        match self.mode {
            MODE_PASS => Gate::Pass,
            MODE_REJECT => reject_gate(self.until, self.wait),
            MODE_RAMP => Gate::Ramp {
                until_ms: self.until,
                ramp_ms: (self.wait >> 32) as u32,
                start: self.wait as u32,
            },
            _ => Gate::Ask,
        }
    }
}

/// The [`Gate::Reject`] a berth's `until` and `wait` words hold (see [`RawGate::rejects`]).
#[inline(always)]
pub fn reject_gate(until: u64, wait: u64) -> Gate {
    Gate::Reject {
        until_ms: until,
        announce_ms: until.saturating_add(wait >> 32),
        wait_ms: wait & 0xffff_ffff,
    }
}

/// The `wait` word of a [`Gate::Reject`]: the announced end's lead over `until_ms` and the
/// wait after it, each at most a `u32` (both come from `u32` durations: a cooldown capped by
/// `max_open`, `probe_interval`, `open`).
fn reject_word(until_ms: u64, announce_ms: u64, wait_ms: u64) -> u64 {
    let lead = announce_ms
        .saturating_sub(until_ms)
        .min(u64::from(u32::MAX));
    (lead << 32) | wait_ms.min(u64::from(u32::MAX))
}

impl Berth {
    /// Free berth `index`, whose free list continues at `next_free`, for a fresh chunk.
    pub fn free(index: u32, next_free: u32) -> Berth {
        Berth {
            ident: AtomicU64::new(0),
            key: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            mode: AtomicU64::new(MODE_ASK),
            until: AtomicU64::new(0),
            wait: AtomicU64::new(0),
            lock_free_second: AtomicU64::new(NO_SECOND),
            gathered: Gathered::new(),
            rejects: AtomicU64::new(0),
            ramp_shed: AtomicU64::new(0),
            stamp: AtomicU64::new(0),
            fleet_probe_from: AtomicU64::new(0),
            fleet_until: AtomicU64::new(0),
            node: AtomicPtr::new(core::ptr::null_mut()),
            next_free: AtomicU32::new(next_free),
            index,
            limit: AtomicPtr::new(core::ptr::null_mut()),
            history: AtomicPtr::new(core::ptr::null_mut()),
            answered_ms: AtomicU64::new(0),
            claimed_s: AtomicU64::new(0),
        }
    }

    /// This berth's index.
    #[inline]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The limit block, if one was ever made for this berth.
    #[inline]
    pub fn limit_block(&self) -> *mut Block {
        self.limit.load(Ordering::Acquire)
    }

    /// The history, if one was ever made for this berth (read and written under the mutex).
    #[inline]
    pub fn history(&self) -> *mut History {
        self.history.load(Ordering::Relaxed)
    }

    /// Attaches a history, once built (under the mutex).
    pub fn set_history(&self, history: *mut History) {
        self.history.store(history, Ordering::Relaxed);
    }

    /// Attaches a limit block, once built (under the mutex).
    pub fn set_limit_block(&self, block: *mut Block) {
        self.limit.store(block, Ordering::Release);
    }

    /// The gate, if the berth still holds tenant `ident` with key `key` and no writer was in
    /// the middle of publishing.
    #[inline]
    pub fn read_gate(&self, ident: u64, key: u64) -> Option<Gate> {
        self.read_raw(ident, key).map(RawGate::gate)
    }

    /// The second successes may be gathered in without the lock, as [`Berth::read_gate`].
    /// Reads only what it needs, not the whole gate (`scripts/bench-instructions`, closed).
    #[inline]
    pub fn lock_free_second(&self, ident: u64, key: u64) -> Option<u64> {
        self.consistent(ident, key, |s| s.lock_free_second.load(Ordering::Relaxed))
            .filter(|&second| second != NO_SECOND)
    }

    /// The gate as [`Berth::read_gate`] reads it, not yet decoded: a pass is told by one
    /// comparison, and the rest decoded only when needed.
    #[inline(always)]
    pub fn read_raw(&self, ident: u64, key: u64) -> Option<RawGate> {
        self.consistent(ident, key, |s| RawGate {
            mode: s.mode.load(Ordering::Relaxed),
            until: s.until.load(Ordering::Relaxed),
            wait: s.wait.load(Ordering::Relaxed),
        })
    }

    /// What `load` reads of the berth, if the berth still holds tenant `ident` with key `key`
    /// and no writer was in the middle of publishing (the seqlock's read side).
    #[inline(always)]
    fn consistent<T>(&self, ident: u64, key: u64, load: impl FnOnce(&Berth) -> T) -> Option<T> {
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 || ident == 0 {
            return None;
        }
        // Compared as soon as read (a mismatch, torn or not, only sends the caller to the
        // lock): fewer values live at once on the open and closed paths
        // (`scripts/bench-instructions`, closed and open_503).
        if self.ident.load(Ordering::Relaxed) != ident || self.key.load(Ordering::Relaxed) != key {
            return None;
        }
        let value = load(self);
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != s1 {
            return None;
        }
        Some(value)
    }

    /// Counts a request short-circuited without the lock.
    #[inline]
    pub fn count_reject(&self) {
        self.rejects.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request a ramp turned away without the lock.
    #[inline]
    pub fn count_ramp_shed(&self) {
        self.ramp_shed.fetch_add(1, Ordering::Relaxed);
    }

    /// Notes that the tenant's origin answered at `now_ms` (without the lock).
    #[inline]
    pub fn note_answer(&self, now_ms: u64) {
        // Read first: a busy server's replies come many to the millisecond, and a read-modify-
        // write of a line every worker shares is dearer than a read.
        if self.answered_ms.load(Ordering::Relaxed) < now_ms {
            self.answered_ms.fetch_max(now_ms, Ordering::Relaxed);
        }
    }

    /// Claims second `now_s` for the tenant's once-a-second task, across workers: true for the
    /// first caller of that second (without the lock).
    #[inline]
    pub fn claim_second(&self, now_s: u64) -> bool {
        let cur = self.claimed_s.load(Ordering::Relaxed);
        cur < now_s
            && self
                .claimed_s
                .compare_exchange(cur, now_s, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// When the tenant's origin last answered (0: not since it moved in).
    #[inline]
    pub fn answered_ms(&self) -> u64 {
        self.answered_ms.load(Ordering::Relaxed)
    }

    /// The stamp, if the berth still holds tenant `ident`. A tenant that moves out and another
    /// that moves in between the two reads show a changed stamp, never a stale equal one: a
    /// new tenant's stamp starts past every value the berth had.
    #[inline]
    pub fn stamp(&self, ident: u64) -> Option<u64> {
        let stamp = self.stamp.load(Ordering::Acquire);
        (ident != 0 && self.ident.load(Ordering::Acquire) == ident).then_some(stamp)
    }

    /// The stamp itself, for [`super::StampRef`].
    pub fn stamp_cell(&self) -> &AtomicU64 {
        &self.stamp
    }

    /// Bumps the stamp (under the mutex).
    pub fn bump_stamp(&self) {
        self.stamp.fetch_add(1, Ordering::Release);
    }

    /// Requests short-circuited, and turned away by a ramp, without the lock since the
    /// tenant moved in.
    pub fn lock_free_counts(&self) -> (u64, u64) {
        (
            self.rejects.load(Ordering::Relaxed),
            self.ramp_shed.load(Ordering::Relaxed),
        )
    }

    /// Records the fleet's advice (under the mutex): this instance may start a probe from
    /// `probe_from_ms` (`u64::MAX`: another instance probes), and the advice holds until
    /// `until_ms`.
    pub fn set_fleet_advice(&self, probe_from_ms: u64, until_ms: u64) {
        self.fleet_probe_from
            .store(probe_from_ms, Ordering::Relaxed);
        self.fleet_until.store(until_ms, Ordering::Relaxed);
    }

    /// Whether the fleet lets this instance start a probe at `now_ms` (under the mutex): yes
    /// when no advice holds (no fleet, or its exchange worker is gone).
    #[inline]
    pub fn fleet_may_probe(&self, now_ms: u64) -> bool {
        now_ms > self.fleet_until.load(Ordering::Relaxed)
            || self.fleet_probe_from.load(Ordering::Relaxed) <= now_ms
    }

    /// Publishes `gate` and the second successes may be gathered in without the lock (under
    /// the mutex), skipping the write when nothing changed.
    pub fn publish(&self, gate: Gate, lock_free_second: Option<u64>) {
        let second = lock_free_second.unwrap_or(NO_SECOND);
        let (mode, until, wait) = match gate {
            Gate::Pass => (MODE_PASS, 0, 0),
            Gate::Reject {
                until_ms,
                announce_ms,
                wait_ms,
            } => (
                MODE_REJECT,
                until_ms,
                reject_word(until_ms, announce_ms, wait_ms),
            ),
            Gate::Ramp {
                until_ms,
                ramp_ms,
                start,
            } => (
                MODE_RAMP,
                until_ms,
                (u64::from(ramp_ms) << 32) | u64::from(start),
            ),
            Gate::Ask => (MODE_ASK, 0, 0),
        };
        if self.mode.load(Ordering::Relaxed) == mode
            && self.until.load(Ordering::Relaxed) == until
            && self.wait.load(Ordering::Relaxed) == wait
            && self.lock_free_second.load(Ordering::Relaxed) == second
        {
            return;
        }
        self.write(|s| {
            s.mode.store(mode, Ordering::Relaxed);
            s.until.store(until, Ordering::Relaxed);
            s.wait.store(wait, Ordering::Relaxed);
            s.lock_free_second.store(second, Ordering::Relaxed);
        });
    }

    /// Moves a tenant in (under the mutex): `ident` and `key` name it from now on, its gate
    /// starts at `gate` and its lock-free counter at 0; its stamp moves on.
    pub fn occupy(&self, ident: u64, key: u64, node: *mut Node, gate: Gate) {
        self.node.store(node, Ordering::Relaxed);
        self.bump_stamp();
        self.gathered.clear();
        self.write(|s| {
            s.ident.store(ident, Ordering::Relaxed);
            s.key.store(key, Ordering::Relaxed);
            s.rejects.store(0, Ordering::Relaxed);
            s.ramp_shed.store(0, Ordering::Relaxed);
            s.answered_ms.store(0, Ordering::Relaxed);
        });
        self.set_fleet_advice(0, 0);
        self.publish(gate, None);
    }

    /// Moves the tenant out (under the mutex): no handle names this berth any more.
    pub fn vacate(&self, next_free: u32) {
        self.write(|s| {
            s.ident.store(0, Ordering::Relaxed);
            s.key.store(0, Ordering::Relaxed);
            s.mode.store(MODE_ASK, Ordering::Relaxed);
            s.lock_free_second.store(NO_SECOND, Ordering::Relaxed);
        });
        self.node.store(core::ptr::null_mut(), Ordering::Relaxed);
        self.next_free.store(next_free, Ordering::Relaxed);
    }

    /// The tenant node, if tenant `ident` still lives here (under the mutex).
    pub fn node(&self, ident: u64) -> Option<*mut Node> {
        if ident == 0 || self.ident.load(Ordering::Relaxed) != ident {
            return None;
        }
        let n = self.node.load(Ordering::Relaxed);
        (!n.is_null()).then_some(n)
    }

    /// The tenant's id (under the mutex).
    pub fn ident(&self) -> u64 {
        self.ident.load(Ordering::Relaxed)
    }

    /// The next free berth of the free list (under the mutex).
    pub fn next_free(&self) -> u32 {
        self.next_free.load(Ordering::Relaxed)
    }

    /// A sequence-locked write: readers that overlap it see an odd or changed sequence and
    /// fall back to the lock.
    fn write(&self, f: impl FnOnce(&Berth)) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        f(self);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }
}
