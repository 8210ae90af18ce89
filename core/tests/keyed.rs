//! Keyed breakers' table under any sequence of keys (a flood of new ones included), and a key
//! that lives compact until its first failure judged exactly as a breaker that recorded
//! every outcome from the start.

mod common;

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;

use circuit_breaker_core::breaker::histogram::Histogram;
use circuit_breaker_core::breaker::{Attempt, BreakerConfig, Classified, OwnedBreaker, Ticket};
use circuit_breaker_core::keyed::{
    self, KeyHasher, Placed, Protection, Table, Take, Tally, BUCKET, NEIGHBOURHOOD,
};
use circuit_breaker_core::snapshot::State;
use common::*;
use proptest::prelude::*;

/// One use of a key: which key (from a small set, so that keys come back), how much later,
/// and whether its breaker (once promoted) is kept (open, half-open, forced or probing).
#[derive(Clone, Debug)]
struct Use {
    key: u16,
    gap_s: u64,
    promote: bool,
    kept: bool,
}

fn uses() -> impl Strategy<Value = Vec<Use>> {
    proptest::collection::vec(
        (
            0u16..200,
            0u64..3,
            proptest::bool::weighted(0.2),
            proptest::bool::weighted(0.3),
        )
            .prop_map(|(key, gap_s, promote, kept)| Use {
                key,
                gap_s,
                promote,
                kept,
            }),
        1..600,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the keys and their order: a key is in one tally at most, a placed key is where
    /// `find` says, a kept key is never replaced, a promoted key only when its neighbourhood
    /// has no compact one, and always the least recently used of its rank; `Full` only when
    /// every tally of the neighbourhood holds a kept key.
    #[test]
    fn placing_keeps_the_rules(uses in uses(), buckets in 1usize..6) {
        let hasher = KeyHasher::new(0x5eed, 0xcafe);
        let mut tallies = vec![Tally::EMPTY; buckets * BUCKET];
        let mut uses_count = 0u32;
        let mut kept: HashSet<u64> = HashSet::new();
        let mut now = 1000u64;
        for u in &uses {
            now += u.gap_s;
            let key = format!("origin-{}.example", u.key);
            let hash = hasher.hash(0, key.as_bytes());
            let before = tallies.clone();
            let uses_before = uses_count;
            let marks: Vec<AtomicU64> = (0..tallies.len()).map(|_| AtomicU64::new(0)).collect();
            let mut t = Table::new(&mut tallies, &marks, &mut uses_count).unwrap();
            let hood: Vec<usize> = t.places(hash).collect();
            prop_assert!(hood.len() == NEIGHBOURHOOD || hood.len() == BUCKET);
            let placed = t.place(0, hash, (now, 10), |s| {
                if kept.contains(&s.hash) { Protection::Kept } else { Protection::Evictable }
            });
            match placed {
                Placed::Found(i) | Placed::New(i) => {
                    prop_assert_eq!(t.tally(i).hash, hash);
                    prop_assert!(hood.contains(&i));
                }
                Placed::Replaced(i, old) => {
                    prop_assert_eq!(t.tally(i).hash, hash);
                    prop_assert!(hood.contains(&i));
                    prop_assert!(!kept.contains(&old.hash), "a kept key was replaced");
                    prop_assert!(hood.iter().all(|&j| !before[j].is_empty()), "an empty tally was left");
                    // Uses count up from 0 here and never wrap: the least recently used has the
                    // smallest count.
                    let compact: Vec<u32> = hood.iter().filter(|&&j| before[j].full == 0)
                        .map(|&j| before[j].used).collect();
                    if old.full != 0 {
                        prop_assert!(compact.is_empty(), "a promoted key went before a compact one");
                        let oldest = hood.iter()
                            .filter(|&&j| before[j].full != 0 && !kept.contains(&before[j].hash))
                            .map(|&j| before[j].used).min();
                        prop_assert_eq!(Some(old.used), oldest);
                    } else {
                        prop_assert_eq!(Some(old.used), compact.iter().copied().min());
                    }
                    prop_assert!(old.used <= uses_before);
                    kept.remove(&old.hash);
                }
                Placed::Full => {
                    prop_assert!(hood.iter().all(|&j| before[j].full != 0 && kept.contains(&before[j].hash)));
                }
            }
            if let Placed::Found(i) | Placed::New(i) | Placed::Replaced(i, _) = placed {
                if u.promote && t.tally(i).full == 0 {
                    t.tally_mut(i).full = 1;
                }
                if t.tally(i).full != 0 && u.kept {
                    kept.insert(hash);
                }
            }
            let hashes: Vec<u64> = t.iter().map(|(_, s)| s.hash).collect();
            let distinct: HashSet<u64> = hashes.iter().copied().collect();
            prop_assert_eq!(hashes.len(), distinct.len(), "a key in two tallies");
            for h in &kept {
                prop_assert!(t.find(0, *h).is_some(), "a kept key was lost");
            }
        }
    }
}

/// A flood of new keys, each used once, never pushes out a key whose breaker is open, and a
/// table that is full of them still places a real key that comes back often.
#[test]
fn a_flood_of_new_keys_never_moves_an_open_breaker() {
    let hasher = KeyHasher::new(1, 2);
    let mut tallies = vec![Tally::EMPTY; 1024];
    let mut uses = 0u32;
    let open = hasher.hash(0, b"failing.example");
    let busy = hasher.hash(0, b"busy.example");
    let marks: Vec<AtomicU64> = (0..tallies.len()).map(|_| AtomicU64::new(0)).collect();
    let mut t = Table::new(&mut tallies, &marks, &mut uses).unwrap();
    let Placed::New(i) = t.place(0, open, (0, 10), |_| Protection::Kept) else {
        panic!("an empty table")
    };
    t.tally_mut(i).full = 1;
    let protect = |s: &Tally| {
        if s.hash == open {
            Protection::Kept
        } else {
            Protection::Evictable
        }
    };
    let mut busy_lost = 0;
    for n in 0..1_000_000u64 {
        let key = format!("flood-{n}");
        let now = 1 + n / 10_000;
        t.place(0, hasher.hash(0, key.as_bytes()), (now, 10), protect);
        if n % 50 == 0 {
            let placed = t.place(0, busy, (now, 10), protect);
            if n > 0 && matches!(placed, Placed::New(_) | Placed::Replaced(..)) {
                busy_lost += 1;
            }
        }
        assert_eq!(
            t.find(0, open),
            Some(i),
            "the open breaker's key moved at {n}"
        );
    }
    // Used every 50 new keys in a table of 1 024, the busy key is pushed out only when its
    // two buckets take 16 new keys between two of its uses: rarely.
    eprintln!("busy key lost {busy_lost} times");
    assert!(
        busy_lost < 200,
        "the busy key was pushed out {busy_lost} times of 20 000"
    );
}

/// One request's outcome: `gap_ms` after the previous one.
#[derive(Clone, Debug)]
struct Step {
    gap_ms: u64,
    status: u16,
    ms: u64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        (
            0u64..900,
            prop_oneof![6 => Just(200u16), 2 => Just(500u16), 1 => Just(404u16)],
            1u64..1500,
        )
            .prop_map(|(gap_ms, status, ms)| Step { gap_ms, status, ms }),
        1..300,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A key counted compact until its first failure or slow call, then promoted to a breaker
    /// that absorbs the tally's successes, opens on the same request, and with the same window,
    /// as a breaker that recorded everything (windows of up to 16 s: one-second buckets).
    #[test]
    fn compact_then_promoted_equals_a_breaker_from_the_start(
        steps in steps(),
        min in 1u32..15,
        rate in 1000u32..9000,
        window_s in 1u32..=16,
        slow_ms in prop_oneof![Just(0u32), Just(800u32)],
    ) {
        let cfg = BreakerConfig {
            min_requests: min,
            failure_rate: rate,
            window_s,
            slow_ms,
            ..cfg()
        };
        let mut plain = OwnedBreaker::new(cfg, T0);
        let mut tally = Tally::new(9, 0, T0 / 1000);
        let mut promoted: Option<OwnedBreaker> = None;
        let mut now = T0;
        for s in &steps {
            now += s.gap_ms;
            let a = Attempt::http(s.status, s.ms);
            let expected = plain.breaker().record(now, 0, Ticket::Normal, &a, true);
            let got = match promoted.as_mut() {
                Some(b) => b.breaker().record(now, 0, Ticket::Normal, &a, true).transition,
                None => match keyed::take(&Classified::of(a, &cfg)) {
                    Take::Success => {
                        tally.add_success(now / 1000, window_s);
                        None
                    }
                    Take::Nothing => None,
                    Take::Promote => {
                        let mut b = OwnedBreaker::new(cfg, now);
                        for (second, count) in tally.handover(now / 1000, window_s) {
                            b.breaker().absorb_successes(second, count, &Histogram::EMPTY);
                        }
                        let t = b.breaker().record(now, 0, Ticket::Normal, &a, true).transition;
                        promoted = Some(b);
                        t
                    }
                },
            };
            prop_assert_eq!(got.map(|t| t.to), expected.transition.map(|t| t.to));
            if plain.breaker().state() != State::Closed {
                break;
            }
        }
        if let Some(b) = promoted.as_mut() {
            prop_assert_eq!(b.breaker().state(), plain.breaker().state());
            let (v1, v2) = (plain.breaker().view(now), b.breaker().view(now));
            prop_assert_eq!(v1.window.requests, v2.window.requests);
            prop_assert_eq!(v1.window.failures, v2.window.failures);
        } else {
            prop_assert_eq!(plain.breaker().state(), State::Closed);
            let v = plain.breaker().view(now);
            prop_assert_eq!(u64::from(tally.successes(now / 1000, window_s)), v.window.requests);
        }
    }
}

/// The bytes per place the README states (a tally and its mark), and what a table made for
/// 100 000 keys keeps of
/// 100 000 distinct keys sent in a row (none of them used again).
#[test]
fn a_key_costs_64_bytes_and_a_table_keeps_the_keys_it_was_made_for() {
    assert_eq!(core::mem::size_of::<Tally>(), 56);
    let places = Table::places_for(100_000);
    assert_eq!(places, 117_648);
    assert_eq!(Table::PLACE_BYTES, 64, "a tally and its mark");
    assert!(
        places * Table::PLACE_BYTES <= 15 << 19,
        "half of a 15 MiB zone"
    );
    let hasher = KeyHasher::new(0x1234, 0x5678);
    let mut tallies = vec![Tally::EMPTY; places];
    let mut uses = 0u32;
    let marks: Vec<AtomicU64> = (0..places).map(|_| AtomicU64::new(0)).collect();
    let mut t = Table::new(&mut tallies, &marks, &mut uses).unwrap();
    for n in 0..100_000u64 {
        let key = format!("origin-{n}.example");
        t.place(
            0,
            hasher.hash(0, key.as_bytes()),
            (1 + n / 1000, 10),
            |_| Protection::Evictable,
        );
    }
    let kept = t.iter().count();
    eprintln!("{kept} of 100 000 keys kept in {places} places");
    assert!(kept >= 99_800, "only {kept} of 100 000 keys kept");
}

/// What a request a key may not count (a subrequest, one moved on by a redirect) is told:
/// refused exactly when a counted request would be refused or made the probe, told the same
/// wait as a refused one, and nothing in the breaker moves.
#[test]
fn a_request_judged_again_is_refused_while_open_and_changes_nothing() {
    use circuit_breaker_core::breaker::{Admission, Control};
    let mut s = Story::new(BreakerConfig {
        min_requests: 4,
        ..rates_only()
    });
    let again = |s: &mut Story| s.b.breaker().refuses_again(s.now);
    assert_eq!(again(&mut s), None, "closed");
    s.requests(4, &http(500));
    assert_eq!(s.b.hdr.state(), State::Open);
    let before = s.b.breaker().view(s.now);
    let told = again(&mut s).expect("open: refused");
    assert_eq!(s.b.breaker().view(s.now), before, "nothing moved");
    match s.admit().admission {
        Admission::Reject { retry_after_ms } => assert_eq!(retry_after_ms, told),
        other => panic!("a counted request is refused too: {other:?}"),
    }
    // Past the cooldown a counted request would be the probe: one judged again is refused.
    s.wait(60_000);
    assert!(again(&mut s).is_some(), "due to probe: still refused");
    let d = s.admit();
    assert!(matches!(d.admission, Admission::Probe(_)));
    assert!(again(&mut s).is_some(), "half-open: refused");
    // Forced closed lets it through, forced open refuses it; a dry run refuses nothing.
    s.b.breaker().control(s.now, 1, Control::ForceClose);
    assert_eq!(again(&mut s), None);
    s.b.breaker().control(s.now, 1, Control::ForceOpen);
    assert!(again(&mut s).is_some());
    let mut dry = Story::new(BreakerConfig {
        min_requests: 4,
        dry_run: true,
        ..rates_only()
    });
    dry.requests(4, &http(500));
    assert_eq!(dry.b.breaker().refuses_again(dry.now), None, "dry run");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Successes counted in a key's mark without the lock — when the mark is of their second
    /// — or under the lock otherwise, with the key used under the lock now and then, reach the
    /// breaker it is promoted to exactly as successes all counted under the lock do.
    #[test]
    fn successes_counted_without_the_lock_are_handed_over_exactly(
        steps in proptest::collection::vec((0u64..1500, proptest::bool::ANY, proptest::bool::weighted(0.1)), 1..200),
    ) {
        use circuit_breaker_core::keyed::mark;
        let mut tallies = vec![Tally::EMPTY; 8];
        let marks: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(0)).collect();
        let mut uses = 0u32;
        let mut t = Table::new(&mut tallies, &marks, &mut uses).unwrap();
        let mut now_ms = 1_000_000u64;
        let Placed::New(i) = t.place(0, 42, (now_ms / 1000, 10), |_| Protection::Kept) else {
            panic!("an empty table");
        };
        let mut reference = Tally::new(42, 0, now_ms / 1000);
        for (gap, lock_free, use_it) in steps {
            now_ms += gap;
            let now_s = now_ms / 1000;
            if use_it {
                prop_assert_eq!(t.use_at(i, 0, 42, now_s, 10), Some(false));
            }
            if !(lock_free && mark::count(&marks[i], 42, now_s)) {
                t.success(i, now_s, 10);
            }
            reference.add_success(now_s, 10);
        }
        let now_s = now_ms / 1000;
        prop_assert_eq!(t.promote(i, now_s, 10), reference.handover(now_s, 10));
    }
}

proptest! {
    /// Whatever a promoted key's breaker judged and however long it has been closed: one that
    /// is open, half-open or forced never goes (a flood cannot close it by taking its room);
    /// one that never opened goes only with no failure nor slow call in its window; one that
    /// opened only once its episode is over (its window, ramp and `max_open`).
    #[test]
    fn a_breaker_goes_only_when_nothing_it_judged_is_still_to_count(
        state in prop_oneof![Just(State::Closed), Just(State::Open), Just(State::HalfOpen)],
        forced in any::<bool>(),
        closed_for_ms in 0u64..1 << 24,
        opened in any::<bool>(),
        failing in any::<bool>(),
        window_s in 1u32..600,
        ramp_ms in 0u32..600_000,
        max_open_ms in 1u32..3_600_000,
    ) {
        let cfg = BreakerConfig { window_s, ramp_ms, max_open_ms, ..BreakerConfig::default() };
        let judged = keyed::Judged { opened, failing };
        let goes = keyed::may_go(state, forced, closed_for_ms, &cfg, judged);
        let episode_over = closed_for_ms >= u64::from(window_s) * 1000
            && closed_for_ms >= u64::from(ramp_ms)
            && closed_for_ms >= u64::from(max_open_ms);
        let expected = state == State::Closed
            && !forced
            && if opened { episode_over } else { !failing };
        prop_assert_eq!(goes, expected);
    }
}
