//! A worker's memory of the keys it judged lately: each key's hash and the tally it was found
//! in, so that a request for a key seen lately skips the keyed hash and the search of its
//! buckets (`scripts/bench-instructions`, closed_keyed). What it holds is only ever a hint:
//! the tally is checked against the hash under the zone's lock, and a key no longer there is
//! looked for as any other. Clients choose keys, so a place is picked by a cheap mix of the
//! key and may be fought over: a key that loses its place is hashed again, nothing worse.

use core::cell::UnsafeCell;

use circuit_breaker_core::keyed::KeyHasher;

/// Places: a hot set of origins or tenants, not the table.
const PLACES: usize = 64;
/// Longer keys are not remembered.
const KEPT: usize = 40;

#[derive(Clone, Copy)]
struct Remembered {
    /// The zone's hasher the hash was made with (a new zone has another secret).
    hasher: KeyHasher,
    hash: u64,
    tally: u32,
    family: u16,
    len: u8,
    key: [u8; KEPT],
}

struct Memo(UnsafeCell<[Option<Remembered>; PLACES]>);

// SAFETY: a worker runs nginx's event loop on one thread, the only one that touches this.
unsafe impl Sync for Memo {}

static MEMO: Memo = Memo(UnsafeCell::new([None; PLACES]));

/// The place of `key` of `family`: a mix of its length and its first and last eight bytes
/// (read whole when the key has as many, so that no copy of a length known only at run time
/// is made).
fn place(family: u16, key: &[u8]) -> usize {
    let n = key.len();
    let (first, last) = match (key.first_chunk::<8>(), key.last_chunk::<8>()) {
        (Some(f), Some(l)) => (u64::from_le_bytes(*f), u64::from_le_bytes(*l)),
        _ => (key.iter().fold(0u64, |w, &b| (w << 8) | u64::from(b)), 0),
    };
    let mixed = (first ^ last.rotate_left(29) ^ (n as u64) ^ (u64::from(family) << 48))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 58) as usize % PLACES
}

/// What this worker remembers of `key` of `family` under `hasher`: its hash and the tally it
/// was last found in.
pub fn recall(hasher: &KeyHasher, family: u16, key: &[u8]) -> Option<(u64, usize)> {
    if key.len() > KEPT {
        return None;
    }
    // SAFETY: single-threaded (above); the borrow ends with this function.
    let places = unsafe { &*MEMO.0.get() };
    let r = places[place(family, key)].as_ref()?;
    (r.family == family
        && usize::from(r.len) == key.len()
        && r.hasher == *hasher
        && r.key[..key.len()] == *key)
        .then_some((r.hash, r.tally as usize))
}

/// Remembers that `key` of `family`, hashed to `hash` under `hasher`, lives at `tally`.
pub fn remember(hasher: &KeyHasher, family: u16, key: &[u8], hash: u64, tally: usize) {
    let Ok(tally) = u32::try_from(tally) else {
        return;
    };
    if key.len() > KEPT {
        return;
    }
    let mut kept = [0u8; KEPT];
    kept[..key.len()].copy_from_slice(key);
    // SAFETY: single-threaded (above); the borrow ends with this function.
    let places = unsafe { &mut *MEMO.0.get() };
    places[place(family, key)] = Some(Remembered {
        hasher: *hasher,
        hash,
        tally,
        family,
        len: key.len() as u8,
        key: kept,
    });
}
