//! The keyed breakers' table: a fixed array of [`Tally`]s, a key living in one of the
//! [`NEIGHBOURHOOD`] tallies from the one its hash names, and the rule of which key makes room
//! for a new one.

use super::tally::Tally;

/// The tallies a key may live in: the one its hash names and the next ones (wrapping). Finding
/// or placing a key reads at most this many.
pub const NEIGHBOURHOOD: usize = 8;

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

/// The table over the zone's tallies, borrowed under the zone's lock, with its count of uses
/// (kept beside the tallies), which orders the uses of one second.
pub struct Table<'a> {
    tallies: &'a mut [Tally],
    uses: &'a mut u32,
    mask: usize,
}

impl<'a> Table<'a> {
    /// The table over `tallies`, whose count must be a power of two (at least
    /// [`NEIGHBOURHOOD`]), and its count of uses.
    pub fn new(tallies: &'a mut [Tally], uses: &'a mut u32) -> Option<Table<'a>> {
        let n = tallies.len();
        (n.is_power_of_two() && n >= NEIGHBOURHOOD).then_some(Table {
            tallies,
            uses,
            mask: n - 1,
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

    /// The tallies a table of `bytes` holds: the largest power of two that fits (0 when not
    /// even one neighbourhood does).
    pub fn capacity_for(bytes: usize) -> usize {
        let n = bytes / core::mem::size_of::<Tally>();
        if n < NEIGHBOURHOOD {
            return 0;
        }
        1 << (usize::BITS - 1 - n.leading_zeros())
    }

    /// How many tallies it has.
    pub fn capacity(&self) -> usize {
        self.tallies.len()
    }

    fn neighbourhood(&self, hash: u64) -> impl Iterator<Item = usize> {
        let (start, mask) = (hash as usize & self.mask, self.mask);
        (0..NEIGHBOURHOOD).map(move |k| (start + k) & mask)
    }

    /// Where the key hashed to `hash` in `family` lives, if it does.
    pub fn find(&self, family: u16, hash: u64) -> Option<usize> {
        self.neighbourhood(hash).find(|&i| {
            let s = &self.tallies[i];
            s.hash == hash && s.family == family
        })
    }

    /// The tally at `i`.
    pub fn tally(&self, i: usize) -> &Tally {
        &self.tallies[i]
    }

    /// The tally at `i`, to count in.
    pub fn tally_mut(&mut self, i: usize) -> &mut Tally {
        &mut self.tallies[i]
    }

    /// Puts a tally of another table (a resize) in an empty place of its neighbourhood, as it
    /// is; `false` when there is none.
    pub fn adopt(&mut self, t: Tally) -> bool {
        let Some(i) = self
            .neighbourhood(t.hash)
            .find(|&i| self.tallies[i].is_empty())
        else {
            return false;
        };
        self.tallies[i] = t;
        true
    }

    /// Empties the tally at `i`, returning what it held.
    pub fn remove(&mut self, i: usize) -> Tally {
        core::mem::replace(&mut self.tallies[i], Tally::EMPTY)
    }

    /// The keys that live here: (index, tally).
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Tally)> {
        self.tallies
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_empty())
    }

    /// Finds the key (`key`, hashed to `hash`, never 0, in `family`) or gives it a tally at
    /// `now_s`: an empty one of its neighbourhood, else the least recently used compact key's,
    /// else the least recently used promoted key's that `protection` lets go; never a kept
    /// key's. The key found or placed is marked used (at `now_s`, and as the latest use).
    pub fn place(
        &mut self,
        family: u16,
        hash: u64,
        key: &[u8],
        now_s: u64,
        protection: impl Fn(&Tally) -> Protection,
    ) -> Placed {
        let tick = self.tick();
        if let Some(i) = self.find(family, hash) {
            self.tallies[i].touch(now_s);
            self.tallies[i].used = tick;
            return Placed::Found(i);
        }
        let mut fresh = Tally::new(hash, family, key, now_s);
        fresh.used = tick;
        if let Some(i) = self
            .neighbourhood(hash)
            .find(|&i| self.tallies[i].is_empty())
        {
            self.tallies[i] = fresh;
            return Placed::New(i);
        }
        // Compact keys first (they carry successes only), then promoted ones; the least
        // recently used of each.
        let rank = |i: usize| {
            let s = &self.tallies[i];
            let stale = u32::MAX - self.age(i);
            if s.full == 0 {
                Some((0, stale))
            } else if protection(s) == Protection::Evictable {
                Some((1, stale))
            } else {
                None
            }
        };
        let victim = self
            .neighbourhood(hash)
            .filter_map(|i| rank(i).map(|r| (r, i)))
            .min_by_key(|&(r, _)| r);
        match victim {
            Some((_, i)) => Placed::Replaced(i, core::mem::replace(&mut self.tallies[i], fresh)),
            None => Placed::Full,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table<'a>(tallies: &'a mut [Tally], uses: &'a mut u32) -> Table<'a> {
        Table::new(tallies, uses).expect("a power of two")
    }

    #[test]
    fn sizes_are_powers_of_two_of_whole_tallies() {
        assert_eq!(Table::capacity_for(0), 0);
        assert_eq!(Table::capacity_for(128 * 7), 0);
        assert_eq!(Table::capacity_for(128 * 8), 8);
        assert_eq!(Table::capacity_for(128 * 100), 64);
        assert_eq!(Table::capacity_for(16 << 20), 131_072);
        assert!(Table::new(&mut [Tally::EMPTY; 12], &mut 0).is_none());
    }

    #[test]
    fn finds_what_it_placed() {
        let mut tallies = [Tally::EMPTY; 16];
        let mut uses = 0;
        let mut t = table(&mut tallies, &mut uses);
        assert_eq!(t.place(0, 5, b"a", 1, |_| Protection::Kept), Placed::New(5));
        assert_eq!(
            t.place(0, 21, b"b", 1, |_| Protection::Kept),
            Placed::New(6)
        );
        assert_eq!(t.find(0, 21), Some(6));
        assert_eq!(t.find(1, 21), None, "another family's key");
        assert_eq!(
            t.place(0, 21, b"b", 9, |_| Protection::Kept),
            Placed::Found(6)
        );
        assert_eq!(t.tally(6).last_s, 9);
    }

    #[test]
    fn a_full_neighbourhood_gives_up_its_least_recently_used_compact_key_first() {
        let mut tallies = [Tally::EMPTY; 8];
        let mut uses = 0;
        let mut t = table(&mut tallies, &mut uses);
        for k in 0..8u64 {
            t.place(0, 8 * k + 1, b"k", 10 + k, |_| Protection::Kept);
        }
        // The oldest key (used at 10) is promoted and closed; the next (11) compact.
        t.tally_mut(1).full = 1;
        let placed = t.place(0, 1000, b"new", 20, |_| Protection::Evictable);
        assert!(matches!(placed, Placed::Replaced(2, old) if old.last_s == 11));
        // With no compact key left but promoted closed ones, the oldest of those goes.
        for i in 0..8 {
            t.tally_mut(i).full = 1;
        }
        let placed = t.place(0, 2000, b"newer", 21, |_| Protection::Evictable);
        assert!(matches!(placed, Placed::Replaced(1, old) if old.last_s == 10));
    }

    #[test]
    fn a_resize_adopts_keys_as_they_are_while_there_is_room() {
        let mut small = [Tally::EMPTY; 8];
        let mut uses = 0;
        let mut t = table(&mut small, &mut uses);
        t.place(0, 3, b"a", 10, |_| Protection::Kept);
        t.tally_mut(3).full = 1;
        let kept = *t.tally(3);
        let mut big = [Tally::EMPTY; 16];
        let mut uses2 = 0;
        let mut t2 = table(&mut big, &mut uses2);
        assert!(t2.adopt(kept));
        assert_eq!(t2.find(0, 3), Some(3));
        assert_eq!(t2.tally(3).full, 1);
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
            t.place(0, k + 1, b"k", 10, |_| Protection::Kept);
        }
        for i in 0..8 {
            t.tally_mut(i).full = 1;
        }
        assert_eq!(t.place(0, 99, b"x", 11, |_| Protection::Kept), Placed::Full);
        assert_eq!(t.iter().count(), 8);
    }
}
