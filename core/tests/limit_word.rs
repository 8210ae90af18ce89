//! Threads stand in for nginx workers sharing one limit's word, as the shell does: admission
//! and release by compare-and-swap, each worker's holdings in its owners entry. Requests
//! holding a slot never outnumber the limit, counts come back to zero, and a worker that
//! "dies" holding slots has them returned from its entry.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread;

use circuit_breaker_core::limit::share::Standing;
use circuit_breaker_core::limit::word::{self, Take};

const WORKERS: u32 = 4;
const ROUNDS: u32 = 20_000;
const TAG: u64 = 3;

fn xorshift(x: &mut u32) -> u32 {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    *x
}

/// The shell's admission: the owner entry first, then the word.
fn acquire(w: &AtomicU64, entry: &AtomicU64, pid: u32, held: &mut u32) -> bool {
    let mut cur = w.load(Ordering::Acquire);
    if matches!(
        word::take(cur, TAG, false, None, 0, Standing::Light),
        Take::Full | Take::Stale
    ) {
        return false;
    }
    entry.store(word::owner(pid, *held + 1), Ordering::Release);
    loop {
        match word::take(cur, TAG, false, None, 0, Standing::Light) {
            Take::Slot { next, .. } => {
                match w.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        *held += 1;
                        return true;
                    }
                    Err(now) => cur = now,
                }
            }
            _ => {
                entry.store(word::owner(pid, *held), Ordering::Release);
                return false;
            }
        }
    }
}

/// The shell's release: the word first, then the owner entry.
fn release(w: &AtomicU64, entry: &AtomicU64, pid: u32, held: &mut u32) {
    let mut cur = w.load(Ordering::Acquire);
    while let Some((next, _)) = word::give(cur, TAG) {
        match w.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(now) => cur = now,
        }
    }
    *held -= 1;
    entry.store(word::owner(pid, *held), Ordering::Release);
}

#[test]
fn workers_never_hold_more_slots_than_the_limit() {
    let w = AtomicU64::new(word::pack(TAG, 5, 0));
    let entries: Vec<AtomicU64> = (0..WORKERS).map(|_| AtomicU64::new(0)).collect();
    let holding = AtomicU32::new(0);
    let most = AtomicU32::new(0);
    let limit_max = AtomicU32::new(5);
    let stop = AtomicBool::new(false);
    let taken: u32 = thread::scope(|s| {
        // The controller moves the limit between 2 and 8 meanwhile.
        s.spawn(|| {
            let mut x = 99u32;
            while !stop.load(Ordering::Relaxed) {
                let limit = 2 + xorshift(&mut x) % 7;
                limit_max.fetch_max(limit, Ordering::SeqCst);
                let mut cur = w.load(Ordering::Acquire);
                while let Err(now) = w.compare_exchange_weak(
                    cur,
                    word::with_limit(cur, limit),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    cur = now;
                }
                thread::yield_now();
            }
        });
        let handles: Vec<_> = (0..WORKERS)
            .map(|i| {
                let (w, entry, holding, most) = (&w, &entries[i as usize], &holding, &most);
                s.spawn(move || {
                    let pid = 1000 + i;
                    let mut held = 0;
                    let mut taken = 0;
                    let mut x = 7 + i;
                    for _ in 0..ROUNDS {
                        if acquire(w, entry, pid, &mut held) {
                            taken += 1;
                            let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            if xorshift(&mut x) % 4 == 0 {
                                thread::yield_now();
                            }
                            holding.fetch_sub(1, Ordering::SeqCst);
                            release(w, entry, pid, &mut held);
                        }
                    }
                    taken
                })
            })
            .collect();
        let taken = handles.into_iter().map(|h| h.join().unwrap()).sum();
        stop.store(true, Ordering::Relaxed);
        taken
    });
    assert!(taken > ROUNDS / 10, "slots were taken: {taken}");
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= limit_max.load(Ordering::SeqCst),
        "{most} holders, the limit never above {}",
        limit_max.load(Ordering::SeqCst)
    );
    assert_eq!(
        word::unpack(w.load(Ordering::SeqCst)).2,
        0,
        "every slot back"
    );
    for e in &entries {
        assert_eq!(word::owner_of(e.load(Ordering::SeqCst)).1, 0);
    }
}

#[test]
fn a_dead_workers_slots_come_back_from_its_entry() {
    let w = AtomicU64::new(word::pack(TAG, 6, 0));
    let entries: Vec<AtomicU64> = (0..2).map(|_| AtomicU64::new(0)).collect();
    // Worker 0 takes four slots and dies holding them.
    let mut held = 0;
    for _ in 0..4 {
        assert!(acquire(&w, &entries[0], 1000, &mut held));
    }
    // Worker 1 finds two left.
    let mut held1 = 0;
    assert!(acquire(&w, &entries[1], 1001, &mut held1));
    assert!(acquire(&w, &entries[1], 1001, &mut held1));
    assert!(!acquire(&w, &entries[1], 1001, &mut held1), "at the limit");
    // The reclaim, under the zone lock: the dead owner's entry says four.
    let (pid, count) = word::owner_of(entries[0].swap(0, Ordering::AcqRel));
    assert_eq!((pid, count), (1000, 4));
    let cur = w.load(Ordering::Acquire);
    w.store(word::give_back(cur, count), Ordering::Release);
    assert!(acquire(&w, &entries[1], 1001, &mut held1), "slots back");
    assert_eq!(word::unpack(w.load(Ordering::SeqCst)).2, 3);
}
