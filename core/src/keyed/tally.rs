//! One key of a keyed breaker's table, compact: its hash, its last use, its successes over the
//! window in [`RING`] buckets, and whether it was promoted to a breaker. Plain data in the
//! zone, touched only under its lock. The key itself is not kept: its hash (under the zone's
//! secret) identifies it, and a promoted key's breaker carries its name.

/// Buckets of a tally's window: one second each for a window of up to 16 s (the default is
/// 10 s), as the breaker's own window; `window / RING` seconds each (rounded up) beyond.
pub const RING: usize = 16;
/// A key's tally: 56 bytes.
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
    /// The keyed directive's index.
    pub family: u16,
    /// 1 when the key was promoted to a breaker (found by its hash), 0 when not.
    pub full: u8,
    _reserved: u8,
    /// Successes per bucket, saturating.
    ring: [u16; RING],
}

const _: () = assert!(core::mem::size_of::<Tally>() == 56);

impl Tally {
    /// An empty tally.
    pub const EMPTY: Tally = Tally {
        hash: 0,
        last_s: 0,
        used: 0,
        head: 0,
        family: 0,
        full: 0,
        _reserved: 0,
        ring: [0; RING],
    };

    /// The tally of a key hashed to `hash` (never 0) in `family`, used at `now_s`, with
    /// nothing counted yet.
    pub fn new(hash: u64, family: u16, now_s: u64) -> Tally {
        Tally {
            hash,
            last_s: now_s as u32,
            family,
            ..Tally::EMPTY
        }
    }

    /// Whether no key lives here.
    pub fn is_empty(&self) -> bool {
        self.hash == 0
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

    /// Counts `n` successes of second `second` (a little in the past, counted without the
    /// lock) in a window of `window_s` seconds: in that second's bucket while the ring still
    /// has it, else not at all (it left the window).
    pub fn add_at(&mut self, second: u64, n: u32, window_s: u32) {
        let width = u64::from(bucket_s(window_s));
        let e = second / width;
        if e > u64::from(self.head) {
            self.advance(second, window_s);
        }
        let head = u64::from(self.head);
        if e <= head && head - e < RING as u64 {
            let b = &mut self.ring[(e % RING as u64) as usize];
            *b = b.saturating_add(u16::try_from(n).unwrap_or(u16::MAX));
        }
        self.touch(second);
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
        let mut s = Tally::new(7, 0, 100);
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
        let mut s = Tally::new(7, 0, 100);
        s.add_success(100, 10);
        s.add_success(101, 10);
        s.add_success(104, 10);
        assert_eq!(s.handover(104, 10), vec![(100, 1), (101, 1), (104, 1)]);
        assert_eq!(s.successes(104, 10), 0);
    }

    #[test]
    fn a_long_window_counts_in_longer_buckets() {
        // 40 s: 3 s buckets, each handed over at its last second.
        let mut s = Tally::new(7, 0, 300);
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
        let mut s = Tally::new(7, 0, 100);
        s.add_success(110, 10);
        s.add_success(108, 10);
        assert_eq!(s.successes(110, 10), 2);
        assert_eq!(s.last_s, 110);
    }

    #[test]
    fn successes_counted_without_the_lock_land_in_their_second() {
        let mut s = Tally::new(7, 0, 100);
        s.add_success(105, 10);
        s.add_at(103, 4, 10);
        assert_eq!(s.handover(105, 10), vec![(103, 4), (105, 1)]);
        s.add_at(107, 2, 10);
        assert_eq!(s.last_s, 107, "a later second moves the ring on");
        s.add_at(80, 9, 10);
        assert_eq!(
            s.successes(107, 10),
            2,
            "a second out of the ring is not counted"
        );
    }

    #[test]
    fn idle_after_a_whole_window() {
        let s = Tally::new(7, 0, 100);
        assert!(!s.idle(109, 10));
        assert!(s.idle(110, 10));
    }
}
