//! Laying out a new zone, or adopting the previous configuration's zone on reload.

use core::alloc::Layout;
use core::ffi::c_void;
use core::ptr::{self, null_mut};
use core::sync::atomic::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64};

use nginx_sys::{
    ngx_int_t, ngx_shm_zone_t, ngx_slab_pool_t, NGX_ERROR, NGX_LOG_EMERG, NGX_LOG_NOTICE, NGX_OK,
};
use ngx::allocator::Allocator;
use ngx::core::SlabPool;

use super::berth::{Berth, PER_CHUNK};
use super::node::Node;
use super::{Header, MAGIC};
use crate::ffi::{guard, nginx_version, MODULE_VERSION};

/// How many failed keys the zone remembers per 4 KiB page of zone, so that each is counted
/// once (up to 1024: past that, every failure counts).
const FAILED_KEYS_PER_PAGE: usize = 4;

/// What the zone needs to know of the configuration that declared it (the shm zone's
/// `data`): its name, for messages, and the jitter seed `circuit_breaker_jitter_key` gave.
#[derive(Default)]
pub struct ZoneName(pub String, pub Option<[u8; 32]>);

/// `shm_zone->init`: lays out a new zone, or adopts the previous configuration's zone on
/// reload (nginx hands over the old zone's data and keeps the mapping, as for `limit_req`).
/// The breakers are brought in line with the configuration later, in `init_module`: a cycle
/// can still fail after its zones are initialised, and then the running one must keep them.
///
/// # Safety
/// Called by nginx only, with a zone registered by `crate::conf::add_zone` (its `data` a
/// [`ZoneName`]).
pub unsafe extern "C" fn init_zone(shm_zone: *mut ngx_shm_zone_t, old: *mut c_void) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx calls init with our registered zone, mapped, its data a ZoneName.
        let z = unsafe { &mut *shm_zone };
        // SAFETY: conf sets `data` to a ZoneName that lives as long as the configuration.
        let name = unsafe { &*z.data.cast::<ZoneName>() };
        // SAFETY: the zone is mapped and starts with its slab pool.
        let Some(pool) = (unsafe { SlabPool::from_shm_zone(z) }) else {
            return NGX_ERROR as ngx_int_t;
        };
        let existing = pool.as_ref().data;
        if !old.is_null() && !existing.is_null() {
            // SAFETY: our header, written by a previous init of this zone.
            if unsafe { (*existing.cast::<Header>()).magic } != MAGIC {
                ngx::ngx_log_error!(
                    NGX_LOG_EMERG,
                    z.shm.log,
                    "circuit breaker zone \"{}\" was laid out by another build of the module; \
                     rename the zone or restart nginx",
                    name.0
                );
                return NGX_ERROR as ngx_int_t;
            }
            if let Some(seed) = &name.1 {
                // SAFETY: our header, checked above; its seed is atomics.
                unsafe { (*existing.cast::<Header>()).set_jitter_seed(seed) };
            }
            return NGX_OK as ngx_int_t;
        }
        let seed = name.1.unwrap_or_else(random_seed);
        if lay_out(&pool, z.shm.size, &name.0, &seed).is_none() {
            return NGX_ERROR as ngx_int_t;
        }
        // SAFETY: nginx sets ngx_test_config from its command line, before reading any
        // configuration. Once per new zone, not on every `nginx -t`, which sets up zones too.
        if unsafe { nginx_sys::ngx_test_config } == 0 {
            ngx::ngx_log_error!(
                NGX_LOG_NOTICE,
                z.shm.log,
                "circuit breaker zone \"{}\" initialized: {} bytes, module {} built for nginx {}",
                name.0,
                z.shm.size,
                MODULE_VERSION,
                nginx_version()
            );
        }
        NGX_OK as ngx_int_t
    })
}

/// Everything the zone needs besides its breakers, in one allocation (a small zone cannot
/// spare a slab page per size class): the header, the hash table, the berth chunk pointers,
/// the failed keys and the log context.
fn lay_out(pool: &SlabPool, size: usize, name: &str, seed: &[u8; 32]) -> Option<()> {
    let chains = (size / 4096).next_power_of_two().max(64);
    let failed_cap = (size / 4096 * FAILED_KEYS_PER_PAGE).clamp(8, 1024);
    // The smallest breaker (a 1 s window) takes a 1 KiB slab: no more nodes than that fit.
    let max_chunks = (size / 1024).div_ceil(PER_CHUNK as usize) + 1;
    let ctx = format!(" in circuit breaker zone \"{name}\"\0");
    let (meta, table_at) = Layout::new::<Header>()
        .extend(Layout::array::<AtomicPtr<Node>>(chains).ok()?)
        .ok()?;
    let (meta, chunks_at) = meta
        .extend(Layout::array::<AtomicPtr<Berth>>(max_chunks).ok()?)
        .ok()?;
    let (meta, failed_at) = meta
        .extend(Layout::array::<AtomicU64>(failed_cap).ok()?)
        .ok()?;
    let (meta, ctx_at) = meta
        .extend(Layout::from_size_align(ctx.len(), 1).ok()?)
        .ok()?;
    let secret = random_seed();
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&secret[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    };
    let keyed_secret = [word(0), word(1)];
    let base = pool.allocate(meta).ok()?.cast::<u8>().as_ptr();
    // SAFETY: `base` holds `meta`, which places each part at its offset with its alignment;
    // nothing else uses the zone until init returns.
    unsafe {
        let hdr = base.cast::<Header>();
        let table = base.add(table_at).cast::<AtomicPtr<Node>>();
        let chunks = base.add(chunks_at).cast::<AtomicPtr<Berth>>();
        let failed = base.add(failed_at).cast::<AtomicU64>();
        let log_ctx = base.add(ctx_at);
        for i in 0..chains {
            table.add(i).write(AtomicPtr::new(null_mut()));
        }
        for i in 0..max_chunks {
            chunks.add(i).write(AtomicPtr::new(null_mut()));
        }
        for i in 0..failed_cap {
            failed.add(i).write(AtomicU64::new(0));
        }
        ptr::copy_nonoverlapping(ctx.as_ptr(), log_ctx, ctx.len());
        hdr.write(Header {
            magic: MAGIC,
            generation: AtomicU64::new(0),
            idents: AtomicU64::new(0),
            epochs: AtomicU64::new(0),
            alloc_failures: AtomicU64::new(0),
            count: AtomicU64::new(0),
            mask: chains as u64 - 1,
            table,
            head: AtomicPtr::new(null_mut()),
            chunks,
            max_chunks: max_chunks as u32,
            nchunks: AtomicU32::new(0),
            free_berth: AtomicU32::new(u32::MAX),
            wall_offset: AtomicI64::new(0),
            failed,
            failed_cap: failed_cap as u32,
            failed_len: AtomicU32::new(0),
            jitter_seed: [0, 1, 2, 3].map(|_| AtomicU64::new(0)),
            keyed_secret,
            keyed_tallies: AtomicPtr::new(null_mut()),
            keyed_cap: AtomicU32::new(0),
            keyed_marks: AtomicPtr::new(null_mut()),
            keyed_marks_room: AtomicU32::new(0),
            keyed_uses: AtomicU32::new(0),
            keyed_head: AtomicPtr::new(null_mut()),
            keyed_nodes: AtomicU32::new(0),
            keyed_keys: AtomicU32::new(0),
            keyed_hand: AtomicPtr::new(null_mut()),
        });
        (*hdr).set_jitter_seed(seed);
        let raw: *mut ngx_slab_pool_t = ptr::from_ref(pool.as_ref()).cast_mut();
        (*raw).log_ctx = log_ctx;
        (*raw).data = hdr.cast();
        // A full zone is reported once per breaker by the module, not at [crit] per attempt.
        (*raw).set_log_nomem(0);
    }
    Some(())
}

/// A seed no client can guess, for a zone whose configuration names no
/// `circuit_breaker_jitter_key`: the kernel's random bytes (`getrandom(2)`, which needs no
/// file, so a chroot without /dev has them too; then /dev/urandom), or, should both fail,
/// the clocks and the process id through SHA-256 (jitter stays unpredictable enough to keep
/// clients from betting on a probe; only a replay needs the seed, and it needs the key file).
fn random_seed() -> [u8; 32] {
    use std::io::Read as _;
    let mut seed = [0u8; 32];
    // SAFETY: `seed` is a writable buffer of `seed.len()` bytes for the call's duration.
    let got = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), seed.len(), 0) };
    let read = if usize::try_from(got) == Ok(seed.len()) {
        Ok(())
    } else {
        std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut seed))
    };
    if read.is_err() {
        let mixed = format!(
            "{} {} {} {:p}",
            crate::clock::wall_ms(),
            crate::clock::mono_ms(),
            crate::ffi::pid(),
            &seed
        );
        seed = circuit_breaker_core::breaker::jitter::breaker_key(mixed.as_bytes(), b"seed", b"");
    }
    seed
}
