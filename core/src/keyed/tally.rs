//! One key of a keyed breaker's table, compact: its hash, its last use, its successes over the
//! window in [`RING`] buckets, the breaker it was promoted to if any, and the first bytes of
//! the key for the status page. Plain data in the zone, touched only under its lock.

/// Buckets of a tally's window: one second each for a window of up to 16 s (the default is
/// 10 s), as the breaker's own window; `window / RING` seconds each (rounded up) beyond.
pub const RING: usize = 16;
/// Bytes of the key a tally keeps for the status page (the whole key's hash identifies it).
pub const SHOWN: usize = 68;

const TRUNCATED: u8 = 1;

/// A key's tally. 128 bytes: a million keys in 128 MiB, 100 000 in 12.5 MiB.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tally {
    /// The key's hash ([`super::KeyHasher`]); 0 for an empty tally.
    pub hash: u64,
    /// The second (of the monotonic clock) the key was last used in.
    pub last_s: u32,
    /// The table's use count at the key's last use: the order of uses within a second.
    pub used: u32,
    /// The bucket number (seconds / bucket length) of the ring's newest bucket.
    head: u32,
    /// The full breaker this key was promoted to: the shell's reference to it, 0 when none.
    pub full: u32,
    /// The keyed directive's index.
    pub family: u16,
    key_len: u8,
    flags: u8,
    /// Successes per bucket, saturating.
    ring: [u16; RING],
    key: [u8; SHOWN],
}

const _: () = assert!(core::mem::size_of::<Tally>() == 128);

impl Tally {
    /// An empty tally.
    pub const EMPTY: Tally = Tally {
        hash: 0,
        last_s: 0,
        used: 0,
        head: 0,
        full: 0,
        family: 0,
        key_len: 0,
        flags: 0,
        ring: [0; RING],
        key: [0; SHOWN],
    };

    /// The tally of `key` (hashed to `hash`, never 0) in `family`, used at `now_s`, with
    /// nothing counted yet.
    pub fn new(hash: u64, family: u16, key: &[u8], now_s: u64) -> Tally {
        let shown = key.len().min(SHOWN);
        let mut s = Tally {
            hash,
            last_s: now_s as u32,
            family,
            key_len: shown as u8,
            flags: if key.len() > SHOWN { TRUNCATED } else { 0 },
            ..Tally::EMPTY
        };
        s.key[..shown].copy_from_slice(&key[..shown]);
        s
    }

    /// Whether no key lives here.
    pub fn is_empty(&self) -> bool {
        self.hash == 0
    }

    /// The key as far as the tally keeps it, and whether it was longer.
    pub fn shown(&self) -> (&[u8], bool) {
        (
            &self.key[..self.key_len as usize],
            self.flags & TRUNCATED != 0,
        )
    }

    /// Notes a use at `now_s` (a decision, an outcome).
    pub fn touch(&mut self, now_s: u64) {
        let now = now_s as u32;
        if now > self.last_s {
            self.last_s = now;
        }
    }

    /// Counts one success at `now_s` in a window of `window_s` seconds.
    pub fn add_success(&mut self, now_s: u64, window_s: u32) {
        let e = self.advance(now_s, window_s);
        let b = &mut self.ring[e as usize % RING];
        *b = b.saturating_add(1);
        self.touch(now_s);
    }

    /// The successes counted over the window at `now_s`.
    pub fn successes(&self, now_s: u64, window_s: u32) -> u32 {
        self.live(now_s, window_s).map(|(_, n)| n).sum()
    }

    /// The successes counted over the window at `now_s`, each bucket's at its last second
    /// (never after `now_s`), oldest first, for the full breaker the key is promoted to to
    /// absorb; the ring is emptied.
    pub fn handover(&mut self, now_s: u64, window_s: u32) -> Vec<(u64, u32)> {
        let width = u64::from(bucket_s(window_s));
        let out = self
            .live(now_s, window_s)
            .filter(|&(_, n)| n > 0)
            .map(|(b, n)| (((b + 1) * width - 1).min(now_s), n))
            .collect();
        self.ring = [0; RING];
        out
    }

    /// Whether the key has not been used for a whole window at `now_s`.
    pub fn idle(&self, now_s: u64, window_s: u32) -> bool {
        now_s.saturating_sub(u64::from(self.last_s)) >= u64::from(window_s)
    }

    /// Moves the ring on to `now_s`'s bucket, emptying those it passes; returns its number.
    /// A `now_s` behind the newest bucket (another worker's clock, updated a little later)
    /// counts in the newest.
    fn advance(&mut self, now_s: u64, window_s: u32) -> u64 {
        let e = now_s / u64::from(bucket_s(window_s));
        let head = u64::from(self.head);
        if e <= head && head - e < RING as u64 {
            return head;
        }
        if e > head {
            for k in 1..=(e - head).min(RING as u64) {
                self.ring[((head + k) % RING as u64) as usize] = 0;
            }
        } else {
            // Far behind: the ring is another era's (the clock cannot go back this far).
            self.ring = [0; RING];
        }
        self.head = e as u32;
        e
    }

    /// The buckets that overlap the window at `now_s` (the seconds after `now_s -
    /// window_s`): (bucket number, successes), oldest first.
    fn live(&self, now_s: u64, window_s: u32) -> impl Iterator<Item = (u64, u32)> + '_ {
        let width = u64::from(bucket_s(window_s));
        let head = u64::from(self.head);
        let first = head.saturating_sub(RING as u64 - 1);
        (first..=head)
            .filter(move |&b| (b + 1) * width + u64::from(window_s) > now_s + 1)
            .map(move |b| (b, u32::from(self.ring[(b % RING as u64) as usize])))
    }
}

/// A bucket's length for a window of `window_s` seconds.
fn bucket_s(window_s: u32) -> u32 {
    window_s.div_ceil(RING as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_window_and_forgets_what_left_it() {
        let mut s = Tally::new(7, 0, b"a.example", 100);
        for t in 100..110 {
            s.add_success(t, 10);
        }
        assert_eq!(s.successes(109, 10), 10);
        assert_eq!(s.successes(113, 10), 10 - 4, "100-103 left the window");
        assert_eq!(s.successes(200, 10), 0);
        s.add_success(200, 10);
        assert_eq!(s.successes(200, 10), 1);
        assert_eq!(s.last_s, 200);
    }

    #[test]
    fn handover_gives_each_bucket_at_its_last_second_and_empties_the_ring() {
        let mut s = Tally::new(7, 0, b"a.example", 100);
        s.add_success(100, 10);
        s.add_success(101, 10);
        s.add_success(104, 10);
        assert_eq!(s.handover(104, 10), vec![(100, 1), (101, 1), (104, 1)]);
        assert_eq!(s.successes(104, 10), 0);
    }

    #[test]
    fn a_long_window_counts_in_longer_buckets() {
        // 40 s: 3 s buckets, each handed over at its last second.
        let mut s = Tally::new(7, 0, b"a.example", 300);
        for t in [300, 301, 302, 303, 339] {
            s.add_success(t, 40);
        }
        assert_eq!(s.successes(339, 40), 5);
        assert_eq!(
            s.successes(342, 40),
            2,
            "the bucket of 300-302 left the window"
        );
        assert_eq!(s.handover(339, 40), vec![(302, 3), (305, 1), (339, 1)]);
    }

    #[test]
    fn a_clock_a_little_behind_counts_in_the_newest_bucket() {
        let mut s = Tally::new(7, 0, b"k", 100);
        s.add_success(110, 10);
        s.add_success(108, 10);
        assert_eq!(s.successes(110, 10), 2);
        assert_eq!(s.last_s, 110);
    }

    #[test]
    fn keeps_the_first_bytes_of_a_long_key() {
        let long = [b'x'; 300];
        let s = Tally::new(7, 3, &long, 0);
        assert_eq!(s.shown(), (&long[..SHOWN], true));
        let s = Tally::new(7, 3, b"short", 0);
        assert_eq!(s.shown(), (&b"short"[..], false));
        assert_eq!(s.family, 3);
    }

    #[test]
    fn idle_after_a_whole_window() {
        let s = Tally::new(7, 0, b"k", 100);
        assert!(!s.idle(109, 10));
        assert!(s.idle(110, 10));
    }
}
