//! A compact key's requests pass and its successes are counted in its mark without the lock:
//! what workers do to one mark at once (clocks a second apart, a promotion while another
//! counts) loses no success, and a key used that way keeps its place in the table.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use circuit_breaker_core::keyed::{mark, Placed, Protection, Table, Tally};

const H: u64 = 0xabcd_ef01_2345_6789;

fn marks(n: usize) -> &'static [AtomicU64] {
    Box::leak((0..n).map(|_| AtomicU64::new(0)).collect())
}

/// One request of key `H` at `second`, as the shell makes it: on the mark when it may pass,
/// else under the lock.
fn request(t: &mut Table<'_>, m: &[AtomicU64], i: usize, second: u64) {
    if !mark::pass(&m[i], H, second) {
        assert_eq!(t.use_at(i, 0, H, second, 10), Some(false));
    }
}

/// Worker A, whose clock is at 101, counts in the mark; worker B, still at 100, then takes
/// the lock and folds it: A's successes are kept, and the mark stays of 101.
#[test]
fn a_worker_whose_clock_is_behind_loses_no_success() {
    let mut tallies = [Tally::EMPTY; 8];
    let mut uses = 0;
    let m = marks(8);
    let mut t = Table::new(&mut tallies, m, &mut uses).unwrap();
    let Placed::New(i) = t.place(0, H, (100, 10), |_| Protection::Kept) else {
        panic!("an empty table")
    };
    t.success(i, 101, 10);
    for _ in 0..50 {
        assert!(mark::count(&m[i], H, 101));
    }
    assert!(!mark::count(&m[i], H, 100));
    t.success(i, 100, 10);
    assert!(mark::count(&m[i], H, 101), "the mark is still of 101");
    assert_eq!(t.tally(i).successes(101, 10), 52);
    assert_eq!(
        t.promote(i, 101, 10).iter().map(|&(_, n)| n).sum::<u32>(),
        53
    );
}

/// Another worker counts in the mark while promotions and demotions come and go: every
/// success it counted is handed over to a breaker.
#[test]
fn a_success_counted_while_the_key_is_promoted_is_never_lost() {
    let m = marks(8);
    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let mut tallies = [Tally::EMPTY; 8];
    let mut uses = 0;
    let mut t = Table::new(&mut tallies, m, &mut uses).unwrap();
    let Placed::New(i) = t.place(0, H, (100, 10), |_| Protection::Kept) else {
        panic!("an empty table")
    };
    let counter = std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            n += u64::from(mark::count(&m[i], H, 100));
        }
        n
    });
    let mut handed = 0u64;
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_millis(500) {
        handed += t
            .promote(i, 100, 10)
            .iter()
            .map(|&(_, n)| u64::from(n))
            .sum::<u64>();
        t.demote(i, 100);
    }
    stop.store(true, Ordering::Relaxed);
    let counted = counter.join().unwrap();
    handed += t
        .promote(i, 100, 10)
        .iter()
        .map(|&(_, n)| u64::from(n))
        .sum::<u64>();
    assert_eq!(handed, counted);
}

/// A key whose requests pass on its mark and end with no verdict (their clients went away)
/// is still used: a few new keys a second do not push it out.
#[test]
fn a_key_passing_on_its_mark_keeps_its_place() {
    let mut tallies = [Tally::EMPTY; 8];
    let mut uses = 0;
    let m = marks(8);
    let mut t = Table::new(&mut tallies, m, &mut uses).unwrap();
    let Placed::New(k) = t.place(0, H, (100, 10), |_| Protection::Kept) else {
        panic!("an empty table")
    };
    t.success(k, 100, 10);
    for second in 101..111u64 {
        for n in 0..8u64 {
            request(&mut t, m, k, second);
            request(&mut t, m, k, second);
            t.place(0, (second * 100 + n) << 8 | 1, (second, 10), |_| {
                Protection::Evictable
            });
            assert_eq!(t.find(0, H), Some(k), "second {second}, new key {n}");
        }
    }
}

/// A key used after the keys of a flood, within the same second, is not the one that makes
/// room for the next.
#[test]
fn the_key_used_last_is_not_the_one_to_go() {
    let mut tallies = [Tally::EMPTY; 8];
    let mut uses = 0;
    let m = marks(8);
    let mut t = Table::new(&mut tallies, m, &mut uses).unwrap();
    let Placed::New(k) = t.place(0, H, (199, 10), |_| Protection::Evictable) else {
        panic!("an empty table")
    };
    for n in 0..7u64 {
        let h = (n + 1) << 44 | 3;
        t.place(0, h, (200, 10), |_| Protection::Evictable);
        assert!(mark::count(&m[t.find(0, h).unwrap()], h, 200));
    }
    request(&mut t, m, k, 200);
    t.success(k, 200, 10);
    let Placed::Replaced(_, old) = t.place(0, 99 << 44 | 5, (200, 10), |_| Protection::Evictable)
    else {
        panic!("a full bucket")
    };
    assert_ne!(old.hash, H);
}
