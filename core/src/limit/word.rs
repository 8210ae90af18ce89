//! The word a shell shares between processes for one limit, changed only by compare-and-swap:
//! the tenant's tag (16 bits, never 0), the limit (24 bits) and the requests in flight
//! (24 bits). One word, so that "in flight below the limit, then one more" is a single atomic
//! step for every worker: in-flight never passes the limit at an admission (but for a
//! critical request's guarantee, `crate::class::admits`). The functions
//! here compute the next word; the shell loops on the compare-and-swap.
use super::share::{self, Standing};
use crate::class::{admits, Class};

const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const TAG_SHIFT: u32 = 2 * COUNT_BITS;

/// The largest limit, and in-flight count, a word holds; a larger limit is taken as this.
pub const MAX: u32 = COUNT_MASK as u32;

/// The tag of the tenant with id `ident` (ids start at 1): never 0, which names no tenant.
pub fn tag_of(ident: u64) -> u64 {
    ident.wrapping_sub(1) % 0xffff + 1
}

/// A word of `tag` with `limit` (clipped to [`MAX`]) and `inflight` requests in flight.
pub fn pack(tag: u64, limit: u32, inflight: u32) -> u64 {
    ((tag & 0xffff) << TAG_SHIFT)
        | (u64::from(limit.min(MAX)) << COUNT_BITS)
        | (u64::from(inflight) & COUNT_MASK)
}

/// (tag, limit, in-flight) of a word.
pub fn unpack(w: u64) -> (u64, u32, u32) {
    (
        w >> TAG_SHIFT,
        ((w >> COUNT_BITS) & COUNT_MASK) as u32,
        (w & COUNT_MASK) as u32,
    )
}

/// What an admission makes of a word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// Swap in `next`: a slot, in-flight now `inflight`; `over` in dry run when in-flight
    /// was at the request's threshold already, `capped` when that was a heavy client's cap.
    Slot {
        next: u64,
        inflight: u32,
        over: bool,
        capped: bool,
    },
    /// In-flight is at the limit (or at [`MAX`]).
    Full,
    /// In-flight is below the limit but at the request's class's threshold
    /// ([`crate::class::Class::threshold`]): the rest is kept for the classes above.
    Reserved,
    /// In-flight is below the limit but at a heavy client's cap ([`share::cap`]): the rest
    /// is kept for the other clients.
    OverShare,
    /// The word belongs to another tenant.
    Stale,
}

/// An admission of tenant `tag`'s request of `class` (`None`: classes not in use) to word
/// `w`, `own` requests of its class in flight ([`crate::class::admits`]), from a client of
/// `standing` ([`share::standing`]); `dry_run` takes a slot past the threshold.
#[inline]
pub fn take(
    w: u64,
    tag: u64,
    dry_run: bool,
    class: Option<Class>,
    own: u32,
    standing: Standing,
) -> Take {
    let (t, limit, inflight) = unpack(w);
    if t != tag {
        return Take::Stale;
    }
    // A class's count is not corrected when a dead worker's slots are returned: never more
    // than the word's own.
    let over = !admits(class, limit, inflight, own.min(inflight));
    let heavy = standing == Standing::Heavy && inflight >= share::cap(limit);
    if inflight == MAX {
        return Take::Full;
    }
    if (over || heavy) && !dry_run {
        return if inflight >= limit && over {
            Take::Full
        } else if over {
            Take::Reserved
        } else {
            Take::OverShare
        };
    }
    Take::Slot {
        next: w + 1,
        inflight: inflight + 1,
        over: over || heavy,
        capped: heavy && !over,
    }
}

/// A release of tenant `tag`'s slot: the next word and in-flight before it, or `None` when
/// the word belongs to another tenant (or, which a correct count never sees, holds none).
#[inline]
pub fn give(w: u64, tag: u64) -> Option<(u64, u32)> {
    let (t, _, inflight) = unpack(w);
    (t == tag && inflight > 0).then_some((w - 1, inflight))
}

/// `count` slots returned at once (a dead owner's), never below zero.
pub fn give_back(w: u64, count: u32) -> u64 {
    let (_, _, inflight) = unpack(w);
    w - u64::from(count.min(inflight))
}

/// The same word with the limit set to `limit` (clipped to [`MAX`]).
pub fn with_limit(w: u64, limit: u32) -> u64 {
    let (tag, _, inflight) = unpack(w);
    pack(tag, limit, inflight)
}

/// An entry of the owners table that goes with a word: process `pid` holds `count` slots.
pub fn owner(pid: u32, count: u32) -> u64 {
    (u64::from(pid) << 32) | u64::from(count)
}

/// (pid, count) of an owners entry.
pub fn owner_of(e: u64) -> (u32, u32) {
    ((e >> 32) as u32, e as u32)
}
