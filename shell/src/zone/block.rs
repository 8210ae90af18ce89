//! The layout of a limit block (see [`super::limit`]): what requests touch without the lock,
//! the controller, and the owners table that follows. Apart from the rest so that a berth can
//! point at one without depending on the code that uses it.

use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use circuit_breaker_core::limit::share::{MARKS, ROWS, WIDTH};
use circuit_breaker_core::limit::{LimitConfig, Limiter};

/// What a lock-free reader may touch: atomics, and the table's length, which never changes.
#[repr(C)]
pub(super) struct Shared {
    /// tag (16 bits) | limit (24) | in-flight (24).
    pub(super) word: AtomicU64,
    /// Requests shed (in dry run: that would have been) since the controller started.
    pub(super) shed: AtomicU64,
    /// Of those, requests of a heavy client turned away at its cap (`share::cap`).
    pub(super) capped: AtomicU64,
    /// The controller's `clean_since` (written under the mutex): an answer to an attempt
    /// that started later is clean.
    pub(super) clean_since: AtomicU64,
    /// The tenant the block is set up for (written under the mutex).
    pub(super) tenant: AtomicU64,
    /// Whether the tenant's configuration has the limit (written under the mutex).
    pub(super) enabled: AtomicU32,
    /// Entries of the owners table that follows the block.
    pub(super) owners: u32,
    /// Per class (`Class::index`): the status page's figures, and critical requests' count
    /// for their guarantee (`circuit_breaker_core::class::admits`).
    pub(super) classes: [ClassCounts; 3],
    /// Requests in flight per client, a count-min sketch (`circuit_breaker_core::limit::share`):
    /// rows of `WIDTH` counters, one after the other. Not corrected when a dead worker's slots
    /// are returned; cleared then instead, which can only make a heavy client read light.
    pub(super) clients: [AtomicU32; ROWS * WIDTH],
    /// Per cell of `clients`: when a heavy request of a client there last began or ended
    /// (`share::stamp`).
    pub(super) stamps: [AtomicU32; ROWS * WIDTH],
    /// The marks (`share::mark`) of the last clients that asked without being heavy.
    pub(super) light: [AtomicU64; MARKS],
}

/// One class's figures under a limit.
#[repr(C)]
#[derive(Default)]
pub(super) struct ClassCounts {
    /// Requests admitted since the controller started.
    pub(super) admitted: AtomicU64,
    /// Requests shed (in dry run: that would have been).
    pub(super) shed: AtomicU64,
    /// Requests holding a slot now. A worker that dies holding slots has them returned to
    /// the word, not here: this count is clamped to the word's in-flight wherever it is read
    /// (shown, or the critical guarantee's), and starts over whenever the word drains.
    pub(super) in_flight: AtomicU32,
}

impl Shared {
    /// Forgets every client's count and the last light client.
    pub(super) fn clear_clients(&self) {
        for c in self.clients.iter().chain(&self.stamps) {
            c.store(0, Ordering::Relaxed);
        }
        for m in &self.light {
            m.store(0, Ordering::Relaxed);
        }
    }
}

impl ClassCounts {
    pub(super) fn reset(&self) {
        self.admitted.store(0, Ordering::Relaxed);
        self.shed.store(0, Ordering::Relaxed);
    }
}

/// Touched under the mutex only.
#[repr(C)]
pub(super) struct Controller {
    pub(super) cfg: LimitConfig,
    pub(super) limiter: Limiter,
}

/// A limiter beside a berth, followed by its owners table: `owners` entries of
/// `pid << 32 | slots held`, one per process that admitted requests.
#[repr(C)]
pub struct Block {
    pub(super) shared: Shared,
    pub(super) controller: UnsafeCell<Controller>,
}

/// How many processes one limiter tracks: the workers of two configurations side by side
/// during a reload (`worker_processes auto` is one per CPU), dead ones not reclaimed yet,
/// and room to spare. A process that finds no entry is counted in the word only, and the
/// slots it holds if it dies are not returned.
pub(super) fn owners_capacity() -> u32 {
    // SAFETY: set once at process start by nginx's os init.
    let cpus = unsafe { nginx_sys::ngx_ncpu }.max(1) as u32;
    cpus.saturating_mul(4).clamp(32, 1024)
}

pub(super) fn block_layout(owners: u32) -> Option<Layout> {
    let (l, _) = Layout::new::<Block>()
        .extend(Layout::array::<AtomicU64>(owners as usize).ok()?)
        .ok()?;
    Some(l.pad_to_align())
}
