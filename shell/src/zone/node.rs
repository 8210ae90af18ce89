//! A breaker's node: its names, its links in the table, and the breaker that follows it in
//! the same allocation.

use core::alloc::Layout;
use core::mem::{align_of, size_of};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, Ordering};

use circuit_breaker_core::breaker::state::{layout, tail_offset};
use circuit_breaker_core::breaker::{Breaker, BreakerConfig, BreakerHeader, Bucket};
use circuit_breaker_core::retry_budget::RetryBudget;

use super::Kind;

/// One breaker in the table. The fields other than the links and `retry` never change once
/// the node is published; the links are atomics because the status walk reads them between
/// lock holds.
/// The breaker's header and its `window_s` buckets follow at [`breaker_offset`].
#[repr(C)]
pub struct Node {
    pub hash: u64,
    pub chain: AtomicPtr<Node>,
    pub next: AtomicPtr<Node>,
    pub prev: AtomicPtr<Node>,
    /// Both names: inside the node's own allocation when the slab's size class has room
    /// for them, else in a small allocation of their own, so that a default breaker stays
    /// within the 2 KiB class whatever its names.
    pub names: *mut u8,
    /// The upstream's retry budget, on an upstream's own breaker: an allocation of its own,
    /// set and freed under the mutex (a reload may add, change or drop it).
    pub retry: AtomicPtr<RetryBudget>,
    pub berth: u32,
    pub window_s: u32,
    pub upstream_len: u16,
    pub route_len: u16,
    /// A [`Kind`], as a byte.
    pub kind: u8,
}

impl Node {
    /// What the breaker judges.
    pub fn kind(&self) -> Kind {
        match self.kind {
            1 => Kind::Server,
            2 => Kind::Keyed,
            _ => Kind::Route,
        }
    }

    /// The retry budget, if the node carries one (under the mutex).
    pub fn retry(&self) -> Option<core::ptr::NonNull<RetryBudget>> {
        core::ptr::NonNull::new(self.retry.load(Ordering::Relaxed))
    }
}

// A default breaker (10 s window) must fit the slab's 2 KiB class: 10 000 in a 32 MiB zone.
const _: () =
    assert!(breaker_offset() + size_of::<BreakerHeader>() + 10 * size_of::<Bucket>() <= 2048);

const fn breaker_offset() -> usize {
    let a = if align_of::<BreakerHeader>() > align_of::<Bucket>() {
        align_of::<BreakerHeader>()
    } else {
        align_of::<Bucket>()
    };
    size_of::<Node>().next_multiple_of(a)
}

pub fn node_layout(window_s: u32) -> Option<Layout> {
    Layout::from_size_align(breaker_offset() + layout(window_s).0, 16).ok()
}

/// The bytes the slab allocator really hands out for `size`: a power of two up to half a
/// page, whole pages above.
pub fn slab_class(size: usize) -> usize {
    // SAFETY: ngx_pagesize is set once at process start.
    let page = unsafe { nginx_sys::ngx_pagesize };
    if size <= page / 2 {
        size.next_power_of_two().max(8)
    } else {
        size.next_multiple_of(page)
    }
}

/// # Safety
/// `n` must point at a node's allocation sized for `cfg.window_s` buckets, not borrowed.
pub unsafe fn write_fresh_breaker(n: NonNull<Node>, cfg: BreakerConfig, now_ms: u64, epoch: u32) {
    // SAFETY: the header and the buckets lie inside the node's allocation (node_layout).
    unsafe {
        let hdr = n
            .as_ptr()
            .cast::<u8>()
            .add(breaker_offset())
            .cast::<BreakerHeader>();
        hdr.write(BreakerHeader::new(cfg, now_ms, epoch));
        let tail = hdr.cast::<u8>().add(tail_offset()).cast::<Bucket>();
        for i in 0..cfg.window_s as usize {
            tail.add(i).write(Bucket::EMPTY);
        }
    }
}

/// # Safety
/// `n` must be a published node, and the caller must hold the mutex for `'a`.
pub unsafe fn breaker_of<'a>(n: NonNull<Node>) -> Breaker<'a> {
    // SAFETY: `write_fresh_breaker` laid out a header and `window_s` buckets after the node.
    unsafe {
        let window = n.as_ref().window_s as usize;
        let hdr = n
            .as_ptr()
            .cast::<u8>()
            .add(breaker_offset())
            .cast::<BreakerHeader>();
        let tail = hdr.cast::<u8>().add(tail_offset()).cast::<Bucket>();
        Breaker::new(&mut *hdr, core::slice::from_raw_parts_mut(tail, window))
    }
}

/// # Safety
/// `node` must be published; its names live as long as it does.
pub unsafe fn names(node: &Node) -> (&[u8], &[u8]) {
    let (ul, rl) = (node.upstream_len as usize, node.route_len as usize);
    // SAFETY: `try_create` copied both names into the names allocation.
    unsafe {
        (
            core::slice::from_raw_parts(node.names, ul),
            core::slice::from_raw_parts(node.names.add(ul), rl),
        )
    }
}
