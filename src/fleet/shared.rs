//! Where the exchange worker publishes for every worker: its message for peers, the fleet's
//! JSON object and its Prometheus families, and when they were rendered. A shared zone of its
//! own (`circuit_breaker_fleet`), sized from the configuration, so that the fleet's text never
//! takes room from breakers; touched only under its slab pool's mutex, never by a request
//! that goes to an upstream.
//!
//! Beside the texts, two signals to the exchange worker from the others, atomics outside the
//! mutex: a counter that any worker bumps when a breaker moves or records an outcome (the
//! exchange looks again), and one bit per peer that a worker answering that peer's
//! authenticated poke sets (the exchange pulls it at once).

use core::alloc::Layout;
use core::ffi::c_void;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use nginx_sys::{ngx_int_t, ngx_shm_zone_t, ngx_slab_pool_t, NGX_ERROR, NGX_LOG_EMERG, NGX_OK};
use ngx::allocator::Allocator;
use ngx::core::SlabPool;

use circuit_breaker_core::fleet::conf::MAX_PEERS;

use circuit_breaker_shell::ffi::guard;

/// The zone's name.
pub const ZONE_NAME: &str = "circuit_breaker_fleet";

/// Identifies this layout, so that a zone kept across a reload that loaded another build of
/// the module is refused rather than misread.
const MAGIC: u64 = 0x6362_5f66_6c65_6501 ^ ((core::mem::size_of::<Header>() as u64) << 32);

/// What is published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The message served at `?format=fleet` (`circuit_breaker_core::fleet::wire`).
    Wire = 0,
    /// The status page's `fleet` object.
    Json = 1,
    /// The fleet's Prometheus families.
    Prometheus = 2,
}

const PARTS: usize = 3;

/// One published text: a buffer in the pool, reused while it is large enough.
#[repr(C)]
struct Text {
    ptr: AtomicPtr<u8>,
    len: AtomicUsize,
    cap: AtomicUsize,
}

/// At the slab pool's `data`. Atomics only, so that a shared reference is sound while other
/// processes write; every access is under the mutex, which orders them (`Relaxed`).
#[repr(C)]
struct Header {
    magic: u64,
    /// When each text was rendered (monotonic ms); 0 before its first publication.
    at_ms: [AtomicU64; PARTS],
    /// Publications that had to leave a text out for lack of room.
    short: AtomicU64,
    texts: [Text; PARTS],
    /// Bumped by any worker when the exchange should look at the breakers again.
    moved: AtomicU64,
    /// Peers (by index) that asked to be pulled now.
    pokes: [AtomicU64; POKE_WORDS],
    /// The highest poke sequence taken from each peer (by index): a poke is acted on only
    /// when its sequence is higher, so a recorded one replayed moves nothing.
    poke_seq: [AtomicU64; MAX_PEERS],
}

const POKE_WORDS: usize = MAX_PEERS.div_ceil(64);

/// The fleet zone as a process sees it.
pub struct FleetZone {
    pool: SlabPool,
}

impl FleetZone {
    /// The zone behind an nginx shm zone, once [`init_zone`] has laid it out.
    ///
    /// # Safety
    /// `shm` must be null or the fleet zone registered by this module, in a process where it
    /// is mapped (a worker, or the master between init and the next reload).
    pub unsafe fn from_shm(shm: *const ngx_shm_zone_t) -> Option<FleetZone> {
        // SAFETY: this fn's contract is laid_out_pool's.
        let (pool, _) = unsafe { circuit_breaker_shell::ffi::laid_out_pool(shm)? };
        Some(FleetZone { pool })
    }

    fn header(&self) -> &Header {
        // SAFETY: `data` points at the header init_zone wrote; its fields are atomics.
        unsafe { &*self.pool.as_ref().data.cast::<Header>() }
    }

    /// Replaces the published texts with `texts` (in [`Part`] order), rendered at `at_ms`.
    /// Returns false when a text did not fit: the zone then serves nothing for that part
    /// rather than an older text under the new time.
    pub fn publish(&self, at_ms: u64, texts: [&[u8]; PARTS]) -> bool {
        self.publish_parts(at_ms, &[Part::Wire, Part::Json, Part::Prometheus], &texts)
    }

    /// Replaces the message for peers alone (a push between two rounds).
    pub fn publish_wire(&self, at_ms: u64, wire: &[u8]) -> bool {
        self.publish_parts(at_ms, &[Part::Wire], &[wire])
    }

    fn publish_parts(&self, at_ms: u64, parts: &[Part], texts: &[&[u8]]) -> bool {
        let locked = self.pool.lock();
        let h = self.header();
        let mut whole = true;
        for (&part, &bytes) in parts.iter().zip(texts) {
            let t = &h.texts[part as usize];
            h.at_ms[part as usize].store(at_ms, Ordering::Relaxed);
            let mut ptr = t.ptr.load(Ordering::Relaxed);
            let cap = t.cap.load(Ordering::Relaxed);
            if ptr.is_null() || bytes.len() > cap {
                if let Some(old) = NonNull::new(ptr) {
                    // SAFETY: allocated by an earlier publication from this pool with this layout,
                    // published nowhere else; the mutex is held.
                    unsafe { locked.deallocate(old, Layout::from_size_align_unchecked(cap, 1)) };
                }
                t.ptr.store(ptr::null_mut(), Ordering::Relaxed);
                t.cap.store(0, Ordering::Relaxed);
                t.len.store(0, Ordering::Relaxed);
                // Room to grow a little, so that a message that gains a record does not
                // reallocate at every round.
                let want = bytes.len().saturating_add(bytes.len() / 4).max(256);
                let Ok(layout) = Layout::from_size_align(want, 1) else {
                    whole = false;
                    continue;
                };
                match locked.allocate(layout) {
                    Ok(p) => {
                        ptr = p.cast::<u8>().as_ptr();
                        t.ptr.store(ptr, Ordering::Relaxed);
                        t.cap.store(want, Ordering::Relaxed);
                    }
                    Err(_) => {
                        whole = false;
                        continue;
                    }
                }
            }
            // SAFETY: `ptr` holds `cap >= bytes.len()` bytes of this pool, and the mutex is
            // held, so no reader copies them meanwhile.
            unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
            t.len.store(bytes.len(), Ordering::Relaxed);
        }
        if !whole {
            h.short.fetch_add(1, Ordering::Relaxed);
        }
        drop(locked);
        whole
    }

    /// A copy of the published `part` and when it was rendered, or `None` before the first
    /// publication (or when it did not fit).
    pub fn read(&self, part: Part) -> Option<(u64, Vec<u8>)> {
        let _locked = self.pool.lock();
        let h = self.header();
        let at = h.at_ms[part as usize].load(Ordering::Relaxed);
        let t = &h.texts[part as usize];
        let ptr = t.ptr.load(Ordering::Relaxed);
        if at == 0 || ptr.is_null() {
            return None;
        }
        let len = t.len.load(Ordering::Relaxed);
        // SAFETY: `ptr` holds `len` bytes written by `publish`; the mutex is held.
        let bytes = unsafe { core::slice::from_raw_parts(ptr, len) }.to_vec();
        Some((at, bytes))
    }

    /// Publications that left a text out for lack of room.
    pub fn short(&self) -> u64 {
        let _locked = self.pool.lock();
        self.header().short.load(Ordering::Relaxed)
    }

    /// The counter workers bump when the exchange should look again.
    pub fn moved(&self) -> &AtomicU64 {
        &self.header().moved
    }

    /// Takes peer `index`'s poke of sequence `seq` at wall-clock microseconds `now_us` if it
    /// is later than every poke taken from that peer before and not too far ahead of this
    /// clock (see `circuit_breaker_core::fleet::auth::poke_is_new`); one refused stores
    /// nothing.
    pub fn poke_if_new(&self, index: usize, seq: u64, now_us: u64) -> bool {
        let Some(last) = self.header().poke_seq.get(index) else {
            return false;
        };
        let taken = last.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |prev| {
            circuit_breaker_core::fleet::auth::poke_is_new(prev, seq, now_us).then_some(seq)
        });
        if taken.is_err() {
            return false;
        }
        self.poke(index);
        true
    }

    /// Peer `index` asked to be pulled now.
    fn poke(&self, index: usize) {
        if let Some(w) = self.header().pokes.get(index / 64) {
            w.fetch_or(1 << (index % 64), Ordering::Relaxed);
        }
    }

    /// The peers that asked to be pulled since the last call, by index.
    pub fn take_pokes(&self, peers: usize) -> Vec<usize> {
        let mut out = Vec::new();
        for (w, word) in self
            .header()
            .pokes
            .iter()
            .enumerate()
            .take(peers.div_ceil(64))
        {
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::Relaxed);
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                out.push(w * 64 + b);
                bits &= bits - 1;
            }
        }
        out
    }
}

/// `shm_zone->init`: lays out the header, or keeps the previous configuration's zone on
/// reload (same size): its texts age truthfully until the new exchange worker replaces them.
pub unsafe extern "C" fn init_zone(shm_zone: *mut ngx_shm_zone_t, old: *mut c_void) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx calls init with our registered zone, mapped.
        let z = unsafe { &mut *shm_zone };
        // SAFETY: the zone is mapped and starts with its slab pool.
        let Some(pool) = (unsafe { SlabPool::from_shm_zone(z) }) else {
            return NGX_ERROR as ngx_int_t;
        };
        let existing = pool.as_ref().data;
        if !old.is_null() && !existing.is_null() {
            // SAFETY: our header, written by a previous init of this zone.
            if unsafe { (*existing.cast::<Header>()).magic } == MAGIC {
                return NGX_OK as ngx_int_t;
            }
            ngx::ngx_log_error!(
                NGX_LOG_EMERG,
                z.shm.log,
                "circuit breaker zone \"{}\" was laid out by another build of the module; \
                 restart nginx",
                ZONE_NAME
            );
            return NGX_ERROR as ngx_int_t;
        }
        let Ok(hdr) = pool.allocate(Layout::new::<Header>()) else {
            return NGX_ERROR as ngx_int_t;
        };
        let hdr = hdr.cast::<Header>().as_ptr();
        let text = || Text {
            ptr: AtomicPtr::new(ptr::null_mut()),
            len: AtomicUsize::new(0),
            cap: AtomicUsize::new(0),
        };
        // SAFETY: a fresh allocation of a Header; nothing else uses the zone until init
        // returns.
        unsafe {
            hdr.write(Header {
                magic: MAGIC,
                at_ms: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
                short: AtomicU64::new(0),
                texts: [text(), text(), text()],
                moved: AtomicU64::new(0),
                pokes: [const { AtomicU64::new(0) }; POKE_WORDS],
                poke_seq: [const { AtomicU64::new(0) }; MAX_PEERS],
            });
            let raw: *mut ngx_slab_pool_t = ptr::from_ref(pool.as_ref()).cast_mut();
            (*raw).data = hdr.cast();
            // A text that does not fit is counted, not logged at [crit] at every round.
            (*raw).set_log_nomem(0);
        }
        NGX_OK as ngx_int_t
    })
}
