//! A key's mark: one atomic word beside each tally, which a request reads and counts in
//! without the zone's lock, as an upstream breaker's gate and gathered successes are read and
//! counted without it.
//!
//! A mark says which key lives in its place (24 bits of the key's hash), whether that key
//! was promoted to a breaker, and the successes counted without the lock in one second (the
//! mark's). A request whose key is compact is let through on the mark alone, and its success
//! is counted in the mark while the mark's second is the request's; the first success of
//! another second, a failure, and anything about a promoted key take the lock, where the
//! mark's successes are taken into the tally ([`take`]) before the tally is read or changed.
//! Every write of a mark under the lock is a single atomic store or swap, so a count made
//! without the lock is either taken with the mark or lands in the new one — never lost, and
//! never counted for another key, since a mark whose tag is not the key's refuses the count
//! (but for a key whose 24 bits are those of the key that took its place, one chance in 16
//! million a replacement: a success counted for the wrong key, nothing worse).

use core::sync::atomic::{AtomicU64, Ordering};

const COUNT_BITS: u32 = 16;
const SECOND_BITS: u32 = 23;
const PROMOTED: u64 = 1 << (COUNT_BITS + SECOND_BITS);
const TAG_SHIFT: u32 = COUNT_BITS + SECOND_BITS + 1;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const SECOND_MASK: u64 = (1 << SECOND_BITS) - 1;

/// The bits of a key's hash its mark carries; never 0 (the mark of an empty place).
pub fn tag(hash: u64) -> u64 {
    (hash >> TAG_SHIFT).max(1)
}

/// The mark of the key hashed to `hash`, promoted or not, at `now_s`, with nothing counted.
pub fn word(hash: u64, promoted: bool, now_s: u64) -> u64 {
    (tag(hash) << TAG_SHIFT)
        | if promoted { PROMOTED } else { 0 }
        | ((now_s & SECOND_MASK) << COUNT_BITS)
}

/// Whether mark `w` says the key hashed to `hash` lives in its place, compact.
pub fn compact(w: u64, hash: u64) -> bool {
    w >> TAG_SHIFT == tag(hash) && w & PROMOTED == 0
}

/// The second of mark `w`, in full, as seen at `now_s` (marks keep its low bits).
fn second_of(w: u64, now_s: u64) -> u64 {
    let low = (w >> COUNT_BITS) & SECOND_MASK;
    now_s.saturating_sub(now_s.wrapping_sub(low) & SECOND_MASK)
}

/// Counts a success of the compact key hashed to `hash` at `now_s` in mark `m`, without the
/// lock: whether it was counted (`false`: the key is not there or not compact, the mark is of
/// another second, or its count is full — the caller takes the lock).
pub fn count(m: &AtomicU64, hash: u64, now_s: u64) -> bool {
    let mut w = m.load(Ordering::Relaxed);
    loop {
        let same_second = (w >> COUNT_BITS) & SECOND_MASK == now_s & SECOND_MASK;
        if !compact(w, hash) || !same_second || w & COUNT_MASK == COUNT_MASK {
            return false;
        }
        match m.compare_exchange_weak(w, w + 1, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(now) => w = now,
        }
    }
}

/// Under the lock: sets mark `m` to the key hashed to `hash` (promoted or not) at `now_s`,
/// and takes what was counted in it for that key without the lock: (its second, how many),
/// when anything was.
pub fn take(m: &AtomicU64, hash: u64, promoted: bool, now_s: u64) -> Option<(u64, u32)> {
    let old = m.swap(word(hash, promoted, now_s), Ordering::Relaxed);
    let n = (old & COUNT_MASK) as u32;
    (old >> TAG_SHIFT == tag(hash) && n > 0).then(|| (second_of(old, now_s), n))
}

/// Under the lock: what mark `m` holds for the key hashed to `hash` without taking it: its
/// second and count (`None` when the mark is another key's).
pub fn peek(m: &AtomicU64, hash: u64, now_s: u64) -> Option<(u64, u32)> {
    let w = m.load(Ordering::Relaxed);
    (w >> TAG_SHIFT == tag(hash)).then(|| (second_of(w, now_s), (w & COUNT_MASK) as u32))
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
        assert!(count(&m, HASH, 1000));
        assert!(count(&m, HASH, 1000));
        assert!(!count(&m, HASH, 1001), "another second takes the lock");
        assert!(!count(&m, HASH ^ (1 << 63), 1000), "another key's mark");
        assert_eq!(take(&m, HASH, false, 1001), Some((1000, 2)));
        assert!(count(&m, HASH, 1001), "the mark moved on");
        assert_eq!(peek(&m, HASH, 1001), Some((1001, 1)));
        let p = AtomicU64::new(word(HASH, true, 1000));
        assert!(!count(&p, HASH, 1000), "a promoted key's breaker counts");
        assert!(compact(word(HASH, false, 5), HASH));
        assert!(!compact(0, HASH), "an empty place");
    }

    #[test]
    fn a_full_count_takes_the_lock() {
        let m = AtomicU64::new(word(HASH, false, 7) | COUNT_MASK);
        assert!(!count(&m, HASH, 7));
        assert_eq!(take(&m, HASH, false, 7), Some((7, COUNT_MASK as u32)));
    }

    #[test]
    fn the_second_reads_back_in_full_across_the_wrap() {
        let at = (SECOND_MASK + 1) * 3 + 5;
        let m = AtomicU64::new(word(HASH, false, at - 10) + 4);
        assert_eq!(take(&m, HASH, false, at), Some((at - 10, 4)));
        let m = AtomicU64::new(word(HASH, false, 2) + 1);
        assert_eq!(take(&m, HASH, false, 3), Some((2, 1)));
    }

    #[test]
    fn another_keys_counts_are_not_taken() {
        let m = AtomicU64::new(word(HASH ^ (1 << 62), false, 9) + 3);
        assert_eq!(take(&m, HASH, false, 9), None);
        clear(&m);
        assert_eq!(peek(&m, HASH, 9), None);
    }
}
