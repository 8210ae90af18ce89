//! The keyed breakers' table: a fixed array of [`Tally`]s in buckets of [`BUCKET`], a key
//! living in one of two buckets its hash names, and the rule of which key makes room for a
//! new one.
//!
//! Two choices of bucket rather than one run of places after the hash: a new key goes to
//! the emptier of its two, so buckets fill evenly and a table keeps nearly every key until it
//! is some 80 % full (a single run of eight places starts pushing keys out at half full).

use core::sync::atomic::AtomicU64;

use super::mark;
use super::tally::Tally;

/// Tallies in a bucket.
pub const BUCKET: usize = 8;

/// The tallies a key may live in: the two buckets its hash names. Finding or placing a key
/// reads at most this many.
pub const NEIGHBOURHOOD: usize = 2 * BUCKET;

/// Whether a promoted key may make room for another, as the shell reads its breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// Its breaker is closed, neither forced nor holding a probe: the key may go (its breaker
    /// with it).
    Evictable,
    /// Its breaker is open, half-open, forced or probing: the key stays, whatever the
    /// traffic of other keys.
    Kept,
}

/// Where [`Table::place`] put a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed {
    /// The key was there already, at this index.
    Found(usize),
    /// In an empty tally, at this index.
    New(usize),
    /// In the tally of another key, at this index: that key's tally as it was (if it was
    /// promoted, the caller frees its breaker).
    Replaced(usize, Tally),
    /// Every tally of its neighbourhood holds a key that stays: the key is not judged.
    Full,
}

/// The table over the zone's tallies, borrowed under the zone's lock, with their marks
/// ([`mark`]: read and counted in without the lock) and its count of uses (kept beside the
/// tallies), which orders the uses of one second. Every change of a tally sets its mark, and
/// what a mark counted is taken into its tally before the tally is read or changed.
pub struct Table<'a> {
    tallies: &'a mut [Tally],
    marks: &'a [AtomicU64],
    uses: &'a mut u32,
    buckets: usize,
}

impl<'a> Table<'a> {
    /// The table over `tallies` and their `marks` (as many), whose count must be a whole
    /// number of buckets (at least one), and its count of uses.
    pub fn new(
        tallies: &'a mut [Tally],
        marks: &'a [AtomicU64],
        uses: &'a mut u32,
    ) -> Option<Table<'a>> {
        let n = tallies.len();
        (n >= BUCKET && n % BUCKET == 0 && marks.len() == n).then_some(Table {
            tallies,
            marks,
            uses,
            buckets: n / BUCKET,
        })
    }

    /// The next use's number.
    fn tick(&mut self) -> u32 {
        *self.uses = self.uses.wrapping_add(1);
        *self.uses
    }

    /// How many uses ago the tally at `i` was last used (its count wraps: an age, never a
    /// comparison of two counts).
    fn age(&self, i: usize) -> u32 {
        self.uses.wrapping_sub(self.tallies[i].used)
    }

    /// The tallies a table of `bytes` holds, with their marks: whole buckets (0 when not
    /// even one fits).
    pub fn capacity_for(bytes: usize) -> usize {
        bytes / Self::PLACE_BYTES / BUCKET * BUCKET
    }

    /// Bytes a place takes: its tally and its mark.
    pub const PLACE_BYTES: usize = core::mem::size_of::<Tally>() + 8;

    /// The tallies a table needs to keep `keys` live keys: 20 places for 17 keys, in whole
    /// buckets.
    pub fn places_for(keys: usize) -> usize {
        keys.saturating_mul(20).div_ceil(17).div_ceil(BUCKET).max(1) * BUCKET
    }

    /// The keys a table of `places` tallies keeps (the inverse of [`Table::places_for`]).
    pub fn keys_kept(places: usize) -> usize {
        places / 20 * 17 + places % 20 * 17 / 20
    }

    /// How many tallies it has.
    pub fn capacity(&self) -> usize {
        self.tallies.len()
    }

    /// The first tallies of the two buckets `hash` names (the same one twice, rarely).
    fn buckets_of(&self, hash: u64) -> [usize; 2] {
        // The high half of a product picks a bucket evenly among any count of them; the
        // second choice is made from the hash's other half.
        let pick = |h: u64| ((u128::from(h) * self.buckets as u128) >> 64) as usize * BUCKET;
        [pick(hash), pick(hash.rotate_left(32))]
    }

    /// The tallies the key hashed to `hash` may live in, its first bucket's first.
    pub fn places(&self, hash: u64) -> impl Iterator<Item = usize> {
        let [a, b] = self.buckets_of(hash);
        let second = (b != a).then_some(b);
        (a..a + BUCKET).chain(second.into_iter().flat_map(|b| b..b + BUCKET))
    }

    /// Empty tallies in the bucket starting at `b`.
    fn room(&self, b: usize) -> usize {
        self.tallies[b..b + BUCKET]
            .iter()
            .filter(|t| t.is_empty())
            .count()
    }

    /// An empty tally for the key hashed to `hash`: in the emptier of its buckets.
    fn empty_for(&self, hash: u64) -> Option<usize> {
        let [a, b] = self.buckets_of(hash);
        let bucket = if self.room(b) > self.room(a) { b } else { a };
        (bucket..bucket + BUCKET).find(|&i| self.tallies[i].is_empty())
    }

    /// Where the key hashed to `hash` in `family` lives, if it does.
    pub fn find(&self, family: u16, hash: u64) -> Option<usize> {
        let [a, b] = self.buckets_of(hash);
        let within = |start: usize| {
            self.tallies[start..start + BUCKET]
                .iter()
                .position(|s| s.hash == hash && s.family == family)
                .map(|k| start + k)
        };
        within(a).or_else(|| within(b))
    }

    /// Marks the key hashed to `hash` in `family` (whose window is `window_s`) used at
    /// `now_s` where a caller last found it, at `i` (as [`Table::place`] does a key it finds);
    /// `None` when it is not there any more, else whether it was promoted.
    pub fn use_at(
        &mut self,
        i: usize,
        family: u16,
        hash: u64,
        now_s: u64,
        window_s: u32,
    ) -> Option<bool> {
        let s = self.tallies.get(i)?;
        if s.hash != hash || s.family != family {
            return None;
        }
        self.used(i, now_s, window_s);
        Some(self.tallies[i].full != 0)
    }

    /// The tally at `i` used now: what its mark counted taken in, touched, the latest use,
    /// and a use of its mark's second.
    fn used(&mut self, i: usize, now_s: u64, window_s: u32) {
        self.fold(i, now_s, window_s);
        let tick = self.tick();
        let s = &mut self.tallies[i];
        s.touch(now_s);
        s.used = tick;
        mark::note_use(&self.marks[i], s.hash, now_s);
    }

    /// Takes what the mark at `i` counted without the lock into its tally (a key whose window
    /// is `window_s`), the mark moved on to `now_s`.
    pub fn fold(&mut self, i: usize, now_s: u64, window_s: u32) {
        if !self.tallies[i].is_empty() {
            let promoted = self.tallies[i].full != 0;
            self.take_mark(i, promoted, now_s, window_s);
        }
    }

    /// Sets the mark at `i` to its key, promoted or not, at `now_s`, and counts what it
    /// counted without the lock in the tally — one change of the mark, so that a count made
    /// meanwhile is either taken or lands in the new mark.
    fn take_mark(&mut self, i: usize, promoted: bool, now_s: u64, window_s: u32) {
        let s = &mut self.tallies[i];
        if let Some((second, n)) = mark::take(&self.marks[i], s.hash, promoted, now_s) {
            s.add_at(second.min(now_s), n, window_s);
        }
    }

    /// Counts a success of the compact key at `i` at `now_s`, under the lock.
    pub fn success(&mut self, i: usize, now_s: u64, window_s: u32) {
        self.fold(i, now_s, window_s);
        self.tallies[i].add_success(now_s, window_s);
    }

    /// Promotes the key at `i`: its successes over the window (see [`Tally::handover`]), what
    /// its mark counted included; from now on its mark sends every request to the lock.
    pub fn promote(&mut self, i: usize, now_s: u64, window_s: u32) -> Vec<(u64, u32)> {
        self.take_mark(i, true, now_s, window_s);
        let s = &mut self.tallies[i];
        s.full = 1;
        s.handover(now_s, window_s)
    }

    /// The key at `i` is compact again (its breaker freed).
    pub fn demote(&mut self, i: usize, now_s: u64) {
        let s = &mut self.tallies[i];
        s.full = 0;
        mark::take(&self.marks[i], s.hash, false, now_s);
    }

    /// The tally at `i`, if the table has one.
    pub fn get(&self, i: usize) -> Option<&Tally> {
        self.tallies.get(i)
    }

    /// The tally at `i`.
    pub fn tally(&self, i: usize) -> &Tally {
        &self.tallies[i]
    }

    /// The tally at `i`, to change by hand, its mark left as it is: for tests (the shell
    /// changes a tally only through the calls above, which keep its mark).
    pub fn tally_mut(&mut self, i: usize) -> &mut Tally {
        &mut self.tallies[i]
    }

    /// Puts a tally of another table (a resize) in an empty place of its neighbourhood, as it
    /// is (what the old table's mark counted is left behind); `false` when there is none.
    pub fn adopt(&mut self, t: Tally) -> bool {
        let Some(i) = self.empty_for(t.hash) else {
            return false;
        };
        self.tallies[i] = t;
        mark::take(&self.marks[i], t.hash, t.full != 0, u64::from(t.last_s));
        true
    }

    /// Empties the tally at `i`, returning what it held.
    pub fn remove(&mut self, i: usize) -> Tally {
        mark::clear(&self.marks[i]);
        core::mem::replace(&mut self.tallies[i], Tally::EMPTY)
    }

    /// The keys that live here: (index, tally).
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Tally)> {
        self.tallies
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_empty())
    }

    /// Finds the key hashed to `hash` (never 0) in `family` or gives it a tally at `now_s`:
    /// an empty one of the emptier of its buckets, else the least recently used compact key's,
    /// else the least recently used promoted key's that `protection` lets go; never a kept
    /// key's. The key found or placed is marked used (at `now_s`, and as the latest use).
    pub fn place(
        &mut self,
        family: u16,
        hash: u64,
        (now_s, window_s): (u64, u32),
        protection: impl Fn(&Tally) -> Protection,
    ) -> Placed {
        if let Some(i) = self.find(family, hash) {
            self.used(i, now_s, window_s);
            return Placed::Found(i);
        }
        let mut fresh = Tally::new(hash, family, now_s);
        fresh.used = self.tick();
        if let Some(i) = self.empty_for(hash) {
            self.tallies[i] = fresh;
            mark::take(&self.marks[i], hash, false, now_s);
            mark::note_use(&self.marks[i], hash, now_s);
            return Placed::New(i);
        }
        // Compact keys first (they carry successes only), then promoted ones; the least
        // recently used of each.
        let rank = |i: usize| {
            let s = &self.tallies[i];
            let recent = self.recent(i, now_s);
            if s.full == 0 {
                Some((0, recent))
            } else if protection(s) == Protection::Evictable {
                Some((1, recent))
            } else {
                None
            }
        };
        let victim = self
            .places(hash)
            .filter_map(|i| rank(i).map(|r| (r, i)))
            .min_by_key(|&(r, _)| r);
        match victim {
            Some((_, i)) => {
                let old = core::mem::replace(&mut self.tallies[i], fresh);
                mark::take(&self.marks[i], hash, false, now_s);
                mark::note_use(&self.marks[i], hash, now_s);
                Placed::Replaced(i, old)
            }
            None => Placed::Full,
        }
    }

    /// How recently the key at `i` was used, for making room: the second of its last use
    /// (its mark's, when requests passed on the mark since), then — within one second — how
    /// many requests used it (passing on its mark or under the lock), so that a busy key
    /// outranks the keys of a flood, then the order of its last use under the lock.
    pub fn recent(&self, i: usize, now_s: u64) -> (u64, u32, u32) {
        let s = &self.tallies[i];
        let last = u64::from(s.last_s);
        let stale = u32::MAX - self.age(i);
        match mark::peek(&self.marks[i], s.hash, now_s) {
            Some((second, uses, _)) if second >= last => (second, uses, stale),
            _ => (last, 0, stale),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks(n: usize) -> &'static [AtomicU64] {
        Box::leak((0..n).map(|_| AtomicU64::new(0)).collect())
    }

    fn table<'a>(tallies: &'a mut [Tally], uses: &'a mut u32) -> Table<'a> {
        let n = tallies.len();
        Table::new(tallies, marks(n), uses).expect("whole buckets")
    }

    #[test]
    fn sizes_are_whole_buckets() {
        assert_eq!(Table::capacity_for(0), 0);
        assert_eq!(Table::capacity_for(Table::PLACE_BYTES * 7), 0);
        assert_eq!(Table::capacity_for(Table::PLACE_BYTES * 8), 8);
        assert_eq!(Table::capacity_for(Table::PLACE_BYTES * 100), 96);
        assert_eq!(Table::places_for(100_000), 117_648);
        assert_eq!(Table::places_for(1), 8);
        assert_eq!(Table::keys_kept(117_648), 100_000);
        assert!(Table::new(&mut [Tally::EMPTY; 12], marks(12), &mut 0).is_none());
        assert!(Table::new(&mut [Tally::EMPTY; 24], marks(24), &mut 0).is_some());
        assert!(Table::new(&mut [Tally::EMPTY; 24], marks(16), &mut 0).is_none());
    }

    #[test]
    fn a_key_may_live_in_two_buckets() {
        let mut tallies = [Tally::EMPTY; 64];
        let mut uses = 0;
        let t = table(&mut tallies, &mut uses);
        let hash = 0x1234_5678_9abc_def0;
        let places: Vec<usize> = t.places(hash).collect();
        assert_eq!(places.len(), NEIGHBOURHOOD);
        for bucket in places.chunks(BUCKET) {
            assert_eq!(bucket[0] % BUCKET, 0);
            assert_eq!(bucket[BUCKET - 1], bucket[0] + BUCKET - 1);
        }
        // A table of one bucket: both choices are that bucket, listed once.
        let mut one = [Tally::EMPTY; 8];
        let t = table(&mut one, &mut uses);
        assert_eq!(
            t.places(hash).collect::<Vec<_>>(),
            (0..8).collect::<Vec<_>>()
        );
    }

    #[test]
    fn finds_what_it_placed() {
        let mut tallies = [Tally::EMPTY; 64];
        let mut uses = 0;
        let mut t = table(&mut tallies, &mut uses);
        let Placed::New(a) = t.place(0, 5, (1, 10), |_| Protection::Kept) else {
            panic!("an empty table");
        };
        let Placed::New(b) = t.place(0, 21 << 40, (1, 10), |_| Protection::Kept) else {
            panic!("room left");
        };
        assert!(t.places(5).any(|i| i == a));
        assert_eq!(t.find(0, 21 << 40), Some(b));
        assert_eq!(t.find(1, 21 << 40), None, "another family's key");
        assert_eq!(
            t.place(0, 21 << 40, (9, 10), |_| Protection::Kept),
            Placed::Found(b)
        );
        assert_eq!(t.tally(b).last_s, 9);
    }

    #[test]
    fn a_use_where_a_key_was_found_counts_as_placing_it() {
        let mut tallies = [Tally::EMPTY; 16];
        let mut uses = 0;
        let mut t = table(&mut tallies, &mut uses);
        let Placed::New(i) = t.place(0, 77, (1, 10), |_| Protection::Kept) else {
            panic!("an empty table");
        };
        t.place(0, 78, (1, 10), |_| Protection::Kept);
        assert_eq!(t.use_at(i, 0, 77, 5, 10), Some(false));
        assert_eq!(t.tally(i).last_s, 5);
        assert_eq!(t.tally(i).used, 3, "the latest use");
        assert_eq!(t.use_at(i, 1, 77, 6, 10), None, "another family's");
        assert_eq!(t.use_at(i, 0, 79, 6, 10), None, "another key's");
        assert_eq!(t.use_at(99, 0, 77, 6, 10), None, "out of the table");
        t.tally_mut(i).full = 1;
        assert_eq!(t.use_at(i, 0, 77, 6, 10), Some(true));
    }

    #[test]
    fn what_a_mark_counts_without_the_lock_reaches_the_tally_and_the_breaker() {
        let mut tallies = [Tally::EMPTY; 8];
        let mut uses = 0;
        let m = marks(8);
        let mut t = Table::new(&mut tallies, m, &mut uses).unwrap();
        let Placed::New(i) = t.place(0, 77, (100, 10), |_| Protection::Kept) else {
            panic!("an empty table");
        };
        assert!(mark::compact(
            m[i].load(core::sync::atomic::Ordering::Relaxed),
            77
        ));
        assert!(mark::count(&m[i], 77, 100));
        assert!(mark::count(&m[i], 77, 100));
        assert!(
            !mark::count(&m[i], 77, 101),
            "the next second takes the lock"
        );
        t.success(i, 101, 10);
        assert!(mark::count(&m[i], 77, 101));
        assert_eq!(t.use_at(i, 0, 77, 102, 10), Some(false));
        assert_eq!(t.tally(i).successes(102, 10), 4);
        assert!(mark::count(&m[i], 77, 102));
        assert_eq!(
            t.promote(i, 102, 10),
            vec![(100, 2), (101, 2), (102, 1)],
            "what the mark counted is handed over"
        );
        assert!(
            !mark::count(&m[i], 77, 102),
            "a promoted key's requests take the lock"
        );
        t.demote(i, 103);
        assert!(mark::count(&m[i], 77, 103));
        // Its place given to another key: the old key's counts are refused.
        t.remove(i);
        assert!(!mark::count(&m[i], 77, 103));
    }

    #[test]
    fn a_busy_key_passing_without_the_lock_outlasts_a_flood() {
        let mut tallies = [Tally::EMPTY; 8];
        let mut uses = 0;
        let m = marks(8);
        let mut t = Table::new(&mut tallies, m, &mut uses).unwrap();
        let Placed::New(busy) = t.place(0, 5, (100, 10), |_| Protection::Kept) else {
            panic!("an empty table");
        };
        for second in 101..110 {
            // Its first request of the second takes the lock; the others pass on the mark.
            assert!(!mark::pass(&m[busy], 5, second));
            assert_eq!(t.use_at(busy, 0, 5, second, 10), Some(false));
            t.success(busy, second, 10);
            for _ in 0..50 {
                assert!(mark::pass(&m[busy], 5, second));
                assert!(mark::count(&m[busy], 5, second));
            }
            for k in 0..8u64 {
                t.place(0, 1000 + second * 10 + k, (second, 10), |_| {
                    Protection::Kept
                });
                assert_eq!(t.find(0, 5), Some(busy), "second {second}, flood key {k}");
            }
        }
    }

    #[test]
    fn a_new_key_goes_to_the_emptier_bucket() {
        let mut tallies = [Tally::EMPTY; 64];
        let mut uses = 0;
        let mut t = table(&mut tallies, &mut uses);
        let hash = 0x0123_4567_89ab_cdef_u64;
        let [a, b] = t.buckets_of(hash);
        assert_ne!(a, b);
        for i in a..a + 3 {
            t.tally_mut(i).hash = 1000 + i as u64;
        }
        let Placed::New(i) = t.place(0, hash, (1, 10), |_| Protection::Kept) else {
            panic!("room left");
        };
        assert!((b..b + BUCKET).contains(&i), "the second bucket is emptier");
    }

    #[test]
    fn a_full_neighbourhood_gives_up_its_least_recently_used_compact_key_first() {
        let mut tallies = [Tally::EMPTY; 8];
        let mut uses = 0;
        let mut t = table(&mut tallies, &mut uses);
        for k in 0..8u64 {
            t.place(0, 8 * k + 1, (10 + k, 10), |_| Protection::Kept);
        }
        // The oldest key (used at 10) is promoted and closed; the next (11) compact.
        t.tally_mut(0).full = 1;
        let placed = t.place(0, 1000, (20, 10), |_| Protection::Evictable);
        assert!(matches!(placed, Placed::Replaced(1, old) if old.last_s == 11));
        // With no compact key left but promoted closed ones, the oldest of those goes.
        for i in 0..8 {
            t.tally_mut(i).full = 1;
        }
        let placed = t.place(0, 2000, (21, 10), |_| Protection::Evictable);
        assert!(matches!(placed, Placed::Replaced(0, old) if old.last_s == 10));
    }

    #[test]
    fn a_resize_adopts_keys_as_they_are_while_there_is_room() {
        let mut small = [Tally::EMPTY; 8];
        let mut uses = 0;
        let mut t = table(&mut small, &mut uses);
        t.place(0, 3, (10, 10), |_| Protection::Kept);
        t.tally_mut(0).full = 1;
        let kept = *t.tally(0);
        let mut big = [Tally::EMPTY; 16];
        let mut uses2 = 0;
        let mut t2 = table(&mut big, &mut uses2);
        assert!(t2.adopt(kept));
        let i = t2.find(0, 3).expect("adopted");
        assert_eq!(t2.tally(i).full, 1);
        let mut full = [kept; 8];
        for (i, f) in full.iter_mut().enumerate() {
            f.hash = 100 + i as u64;
        }
        let mut uses3 = 0;
        assert!(!table(&mut full, &mut uses3).adopt(kept));
    }

    #[test]
    fn kept_keys_never_make_room() {
        let mut tallies = [Tally::EMPTY; 8];
        let mut uses = 0;
        let mut t = table(&mut tallies, &mut uses);
        for k in 0..8u64 {
            t.place(0, k + 1, (10, 10), |_| Protection::Kept);
        }
        for i in 0..8 {
            t.tally_mut(i).full = 1;
        }
        assert_eq!(t.place(0, 99, (11, 10), |_| Protection::Kept), Placed::Full);
        assert_eq!(t.iter().count(), 8);
    }
}
