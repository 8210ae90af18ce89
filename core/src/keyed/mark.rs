//! A key's mark: one atomic word beside each tally, which a request reads and counts in
//! without the zone's lock, as an upstream breaker's gate and gathered successes are read and
//! counted without it.
//!
//! A mark says which key lives in its place (24 bits of the key's hash), whether that key
//! was promoted to a breaker, and, for one second (the mark's), the requests that passed on
//! it and the successes counted in it. A request whose key is compact passes on the mark
//! alone while the mark is of the request's second ([`pass`]), and its success is counted in
//! it likewise ([`count`]); a request of another second, a failure, and anything about a
//! promoted key take the lock, where the mark's successes are taken into the tally ([`take`])
//! before the tally is read or changed, and the mark moves on to the later of its second and
//! the clock's (workers' clocks straddle a second boundary now and then: a mark a second
//! ahead is read as ahead, and kept). Every change of a mark is a single atomic operation, so
//! a count made without the lock is either taken with the mark or lands in the new one —
//! never lost, and never counted for another key, since a mark whose tag is not the key's
//! refuses it (but for a key whose 24 bits are those of the key that took its place, one
//! chance in 16 million a replacement: that key's mark then lets the other key's requests
//! pass as compact and counts their successes, until its second ends).

use core::sync::atomic::{AtomicU64, Ordering};

const SUCCESS_BITS: u32 = 10;
const USE_BITS: u32 = 6;
const LOW_BITS: u32 = SUCCESS_BITS + USE_BITS;
const SECOND_BITS: u32 = 23;
const PROMOTED: u64 = 1 << (LOW_BITS + SECOND_BITS);
const TAG_SHIFT: u32 = LOW_BITS + SECOND_BITS + 1;
const SUCCESS_MASK: u64 = (1 << SUCCESS_BITS) - 1;
const USE_ONE: u64 = 1 << SUCCESS_BITS;
const USE_MASK: u64 = ((1 << USE_BITS) - 1) << SUCCESS_BITS;
const SECOND_MASK: u64 = (1 << SECOND_BITS) - 1;

/// The bits of a key's hash its mark carries; never 0 (the mark of an empty place).
pub fn tag(hash: u64) -> u64 {
    (hash >> TAG_SHIFT).max(1)
}

/// The mark of the key hashed to `hash`, promoted or not, of second `second`, with nothing
/// counted.
pub fn word(hash: u64, promoted: bool, second: u64) -> u64 {
    (tag(hash) << TAG_SHIFT)
        | if promoted { PROMOTED } else { 0 }
        | ((second & SECOND_MASK) << LOW_BITS)
}

/// Whether mark `w` says the key hashed to `hash` lives in its place, compact.
pub fn compact(w: u64, hash: u64) -> bool {
    w >> TAG_SHIFT == tag(hash) && w & PROMOTED == 0
}

fn is_of(w: u64, hash: u64) -> bool {
    w >> TAG_SHIFT == tag(hash)
}

fn same_second(w: u64, now_s: u64) -> bool {
    (w >> LOW_BITS) & SECOND_MASK == now_s & SECOND_MASK
}

/// The second of mark `w`, in full, as seen at `now_s` (marks keep its low bits): behind the
/// clock, or ahead of it (another worker's clock is a little ahead) within half the range.
fn second_of(w: u64, now_s: u64) -> u64 {
    let low = (w >> LOW_BITS) & SECOND_MASK;
    let back = now_s.wrapping_sub(low) & SECOND_MASK;
    if back > SECOND_MASK / 2 {
        now_s + (SECOND_MASK + 1 - back)
    } else {
        now_s.saturating_sub(back)
    }
}

/// Changes `m` by `f` while `f` says how (a compare-and-swap loop); whether it did.
fn update(m: &AtomicU64, f: impl FnMut(u64) -> Option<u64>) -> bool {
    m.fetch_update(Ordering::Relaxed, Ordering::Relaxed, f)
        .is_ok()
}

/// A request of the compact key hashed to `hash` at `now_s` passes on mark `m`, without the
/// lock, and is counted as a use of its second: whether it may (`false`: the key is not there
/// or not compact, or the mark is of another second — the caller takes the lock).
pub fn pass(m: &AtomicU64, hash: u64, now_s: u64) -> bool {
    update(m, |w| {
        (compact(w, hash) && same_second(w, now_s)).then(|| {
            if w & USE_MASK == USE_MASK {
                w
            } else {
                w + USE_ONE
            }
        })
    })
}

/// Counts a success of the compact key hashed to `hash` at `now_s` in mark `m`, without the
/// lock: whether it was counted (`false`: the key is not there or not compact, the mark is of
/// another second, or its count is full — the caller takes the lock).
pub fn count(m: &AtomicU64, hash: u64, now_s: u64) -> bool {
    update(m, |w| {
        (compact(w, hash) && same_second(w, now_s) && w & SUCCESS_MASK != SUCCESS_MASK)
            .then_some(w + 1)
    })
}

/// Under the lock: a use of the key hashed to `hash` at `now_s`, counted in its mark when
/// the mark is of that second (after [`take`], it is, unless another worker's clock moved it
/// ahead).
pub fn note_use(m: &AtomicU64, hash: u64, now_s: u64) {
    update(m, |w| {
        (is_of(w, hash) && same_second(w, now_s) && w & USE_MASK != USE_MASK).then_some(w + USE_ONE)
    });
}

/// Under the lock: sets mark `m` to the key hashed to `hash` (promoted or not), of the later
/// of its second and `now_s` (its uses kept while that second is the same), and takes the
/// successes counted in it for that key without the lock: (their second, how many), when
/// there were any.
pub fn take(m: &AtomicU64, hash: u64, promoted: bool, now_s: u64) -> Option<(u64, u32)> {
    let mut taken = None;
    update(m, |w| {
        let mine = is_of(w, hash);
        let second = if mine {
            second_of(w, now_s).max(now_s)
        } else {
            now_s
        };
        let uses = if mine && same_second(w, second) {
            w & USE_MASK
        } else {
            0
        };
        let n = (w & SUCCESS_MASK) as u32;
        taken = (mine && n > 0).then(|| (second_of(w, now_s), n));
        Some(word(hash, promoted, second) | uses)
    });
    taken
}

/// Under the lock: what mark `m` holds for the key hashed to `hash`, without taking it: its
/// second, the requests that passed in it and the successes counted (`None` when the mark
/// is another key's).
pub fn peek(m: &AtomicU64, hash: u64, now_s: u64) -> Option<(u64, u32, u32)> {
    let w = m.load(Ordering::Relaxed);
    is_of(w, hash).then(|| {
        (
            second_of(w, now_s),
            ((w & USE_MASK) >> SUCCESS_BITS) as u32,
            (w & SUCCESS_MASK) as u32,
        )
    })
}

/// Under the lock: an empty place's mark.
pub fn clear(m: &AtomicU64) {
    m.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: u64 = 0xabcd_ef01_2345_6789;

    #[test]
    fn counts_a_compact_key_in_its_second_only() {
        let m = AtomicU64::new(word(HASH, false, 1000));
        assert!(pass(&m, HASH, 1000));
        assert!(count(&m, HASH, 1000));
        assert!(count(&m, HASH, 1000));
        assert!(!count(&m, HASH, 1001), "another second takes the lock");
        assert!(!pass(&m, HASH, 1001), "another second takes the lock");
        assert!(!count(&m, HASH ^ (1 << 63), 1000), "another key's mark");
        assert!(!pass(&m, HASH ^ (1 << 63), 1000), "another key's mark");
        assert_eq!(peek(&m, HASH, 1000), Some((1000, 1, 2)));
        assert_eq!(take(&m, HASH, false, 1001), Some((1000, 2)));
        assert!(count(&m, HASH, 1001), "the mark moved on");
        note_use(&m, HASH, 1001);
        assert_eq!(peek(&m, HASH, 1001), Some((1001, 1, 1)), "uses start again");
        let p = AtomicU64::new(word(HASH, true, 1000));
        assert!(!count(&p, HASH, 1000), "a promoted key's breaker counts");
        assert!(!pass(&p, HASH, 1000), "a promoted key's breaker judges");
        assert!(compact(word(HASH, false, 5), HASH));
        assert!(!compact(0, HASH), "an empty place");
    }

    #[test]
    fn full_counts_take_the_lock_and_uses_saturate() {
        let m = AtomicU64::new(word(HASH, false, 7) | SUCCESS_MASK);
        assert!(!count(&m, HASH, 7));
        assert_eq!(take(&m, HASH, false, 7), Some((7, SUCCESS_MASK as u32)));
        for _ in 0..100 {
            assert!(pass(&m, HASH, 7));
        }
        assert_eq!(peek(&m, HASH, 7), Some((7, 63, 0)));
    }

    #[test]
    fn the_second_reads_back_in_full_across_the_wrap_and_ahead() {
        let at = (SECOND_MASK + 1) * 3 + 5;
        let m = AtomicU64::new(word(HASH, false, at - 10) + 4);
        assert_eq!(take(&m, HASH, false, at), Some((at - 10, 4)));
        let m = AtomicU64::new(word(HASH, false, 2) + 1);
        assert_eq!(take(&m, HASH, false, 3), Some((2, 1)));
        // A mark a second ahead of this worker's clock: read as ahead, and kept.
        let m = AtomicU64::new(word(HASH, false, 101) + 7);
        assert_eq!(peek(&m, HASH, 100), Some((101, 0, 7)));
        assert_eq!(take(&m, HASH, false, 100), Some((101, 7)));
        assert!(count(&m, HASH, 101), "still of second 101");
        assert!(!count(&m, HASH, 100));
    }

    #[test]
    fn another_keys_counts_are_not_taken() {
        let m = AtomicU64::new(word(HASH ^ (1 << 62), false, 9) + 3);
        assert_eq!(take(&m, HASH, false, 9), None);
        assert_eq!(peek(&m, HASH, 9), Some((9, 0, 0)), "now the key's");
        clear(&m);
        assert_eq!(peek(&m, HASH, 9), None);
    }
}
