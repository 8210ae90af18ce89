//! Keyed breakers in the fleet's exchange: a key one instance opens makes the same key
//! suspicious on another, through real messages; keys come and go within a bound, and a
//! member that floods the fleet with keys can neither push out the keys an instance judges
//! nor grow its store or its messages without bound.

use circuit_breaker_core::breaker::BreakerConfig;
use circuit_breaker_core::fleet::{
    Fingerprint, Flags, FleetConfig, FleetStore, LocalView, Message, Policy, WireOpinion,
    KEYED_PER_MESSAGE, MAX_KEYED,
};
use circuit_breaker_core::snapshot::State;

const T0: u64 = 5_000_000;
const IDS: [&str; 3] = ["a", "b", "c"];
const FAMILY: &str = "$origin";

fn cfg() -> FleetConfig {
    FleetConfig {
        interval_ms: 1000,
        fanout: 2,
        expire_ms: 3000,
        max_entries: 4096,
        push_gap_ms: 10,
    }
}

fn fp() -> u64 {
    Fingerprint::of_config(&BreakerConfig::default()).finish()
}

fn store(id: &str) -> FleetStore {
    let mut s = FleetStore::new(id, &IDS, cfg()).unwrap();
    s.add_breaker(
        "api",
        "checkout",
        fp(),
        Policy::of_config(&BreakerConfig::default()),
    )
    .unwrap();
    s.add_family(FAMILY, fp(), Policy::of_config(&BreakerConfig::default()))
        .unwrap();
    s
}

fn view(state: State, requests: u64, failures: u64, since_ms: u64) -> LocalView {
    LocalView {
        state,
        forced: false,
        since_ms,
        requests,
        failures,
        slow: 0,
        probe_starts: 0,
        short_circuited: 0,
        active_probes: false,
    }
}

fn record(origin: &str, key: &str, state: State, failures: u64) -> WireOpinion {
    WireOpinion {
        origin: origin.into(),
        upstream: FAMILY.into(),
        route: key.into(),
        fingerprint: fp(),
        state,
        age_ms: 0,
        since_ms: 1000,
        requests: 20,
        failures,
        slow: 0,
        round: 0,
        probe_ms: None,
        flags: Flags::default(),
    }
}

fn message(sender: &str, opinions: Vec<WireOpinion>) -> Message {
    Message {
        sender: sender.into(),
        delay_ms: 0,
        opinions,
    }
}

fn pull(now: u64, from: &FleetStore, to: &mut FleetStore) {
    let body = from.render(now);
    let p = to.peer_ids().position(|p| p == from.self_id()).unwrap();
    to.receive(now, p, body.as_bytes()).unwrap();
}

#[test]
fn a_key_open_on_one_instance_makes_the_same_key_suspicious_on_another_and_no_other_key() {
    let (mut a, mut b) = (store("a"), store("b"));
    let open = view(State::Open, 20, 20, T0 - 100);
    let k = a.add_keyed(FAMILY, "shop.example", Some(&open)).unwrap();
    a.update_local(T0, k, open);
    pull(T0, &a, &mut b);
    // `b` has not judged the key yet: it keeps the opinion, and tells its shell of the key.
    let added = b.take_added();
    assert_eq!(added.len(), 1);
    let kb = added[0];
    assert!(b.is_keyed(kb));
    assert_eq!(b.breaker_index(FAMILY, "shop.example"), Some(kb));
    // Once the key fails here too, the peer's word lowers its bar.
    b.update_local(T0 + 10, kb, view(State::Closed, 1, 1, T0 - 60_000));
    assert_eq!(b.suspicious(T0 + 10, kb), Some(T0 + 3000));
    // Another key of the family, and the family's name as an upstream, hear nothing.
    let failing = view(State::Closed, 1, 1, T0 - 60_000);
    let other = b.add_keyed(FAMILY, "blog.example", Some(&failing)).unwrap();
    b.update_local(T0 + 10, other, failing);
    assert_eq!(b.suspicious(T0 + 10, other), None);
    assert_eq!(b.suspicious(T0 + 10, 0), None);
    // Another family's key, or the same name with another fingerprint, is not taken.
    let mut foreign = record("a", "shop.example", State::Open, 20);
    foreign.upstream = "$host".into();
    let mut differs = record("a", "x.example", State::Open, 20);
    differs.fingerprint ^= 1;
    let got = b.merge(T0 + 20, &message("a", vec![foreign, differs]));
    assert_eq!(got.dropped, 2);
    assert!(b.take_added().is_empty());
    assert_eq!(
        b.families(),
        vec![(FAMILY, fp(), 1)],
        "the other fingerprint is counted against the family"
    );
}

#[test]
fn a_quiet_key_from_a_peer_is_not_kept() {
    let mut b = store("b");
    let got = b.merge(
        T0,
        &message("a", vec![record("a", "fine.example", State::Closed, 0)]),
    );
    assert_eq!(got.dropped, 1);
    assert_eq!(b.keyed(), 0);
}

#[test]
fn keys_are_retired_once_nothing_about_them_is_worth_saying_and_their_places_reused() {
    let mut a = store("a");
    let open = view(State::Open, 20, 20, T0 - 100);
    let k = a.add_keyed(FAMILY, "shop.example", Some(&open)).unwrap();
    a.update_local(T0, k, open);
    assert!(a.retire_idle(T0).is_empty(), "open");
    a.update_local(T0 + 1000, k, view(State::Closed, 0, 0, T0 + 1000));
    assert!(
        a.retire_idle(T0 + 2000).is_empty(),
        "closed within an expiry"
    );
    assert_eq!(a.retire_idle(T0 + 4001), vec![k]);
    assert_eq!(a.keyed(), 0);
    assert!(!a.is_keyed(k));
    assert_eq!(a.breaker_index(FAMILY, "shop.example"), None);
    assert!(!a.render(T0 + 4001).contains("shop.example"));
    let again = a.add_keyed(FAMILY, "blog.example", Some(&open)).unwrap();
    assert_eq!(again, k, "the index is reused");
    // A key whose breaker is gone here and that no peer speaks of goes at the next round.
    a.update_local(T0 + 5000, again, view(State::Closed, 3, 3, T0));
    a.forget_local(again);
    assert_eq!(a.retire_idle(T0 + 5001), vec![again]);
    // A key a peer still speaks of stays.
    let mut b = store("b");
    b.merge(
        T0,
        &message("a", vec![record("a", "shop.example", State::Open, 20)]),
    );
    let kb = b.take_added()[0];
    assert!(b.retire_idle(T0 + 2000).is_empty());
    assert_eq!(b.retire_idle(T0 + 3001), vec![kb], "its opinion expired");
}

#[test]
fn a_flood_of_keys_from_a_member_fills_the_bound_but_never_pushes_out_a_local_key() {
    let mut b = store("b");
    let open = view(State::Open, 20, 20, T0);
    let local = b.add_keyed(FAMILY, "mine.example", Some(&open)).unwrap();
    b.update_local(T0, local, open);
    let flood: Vec<WireOpinion> = (0..4000)
        .map(|i| record("a", &format!("k{i}.example"), State::Open, 20))
        .collect();
    let got = b.merge(T0, &message("a", flood));
    assert_eq!(b.keyed(), MAX_KEYED);
    assert_eq!(got.merged, MAX_KEYED - 1);
    assert_eq!(b.counters().keyed_left_out, (4000 - (MAX_KEYED - 1)) as u64);
    assert!(b.is_keyed(local), "the local key stays");
    // A key this instance judges still gets in: one only peers spoke of makes room.
    let mine = b.add_keyed(FAMILY, "mine-too.example", Some(&open));
    assert!(mine.is_some());
    assert_eq!(b.keyed(), MAX_KEYED);
    assert!(b.is_keyed(local));
    // Merging cost a step per record, not per record times the keys held.
    assert!(
        b.work() < 4 * 4000 + 4 * MAX_KEYED as u64,
        "work {}",
        b.work()
    );
}

#[test]
fn a_message_carries_a_bounded_number_of_keyed_records_open_ones_first() {
    let mut a = store("a");
    for i in 0..(KEYED_PER_MESSAGE + 100) {
        let state = if i >= KEYED_PER_MESSAGE {
            State::Open
        } else {
            State::Closed
        };
        let v = view(state, 20, 5, T0 - 100);
        let k = a
            .add_keyed(FAMILY, &format!("k{i}.example"), Some(&v))
            .unwrap();
        a.update_local(T0, k, v);
    }
    let api = a.breaker_index("api", "checkout").unwrap();
    a.update_local(T0, api, view(State::Closed, 10, 1, T0 - 60_000));
    let m = a.message(T0);
    let keyed: Vec<&WireOpinion> = m.opinions.iter().filter(|o| o.upstream == FAMILY).collect();
    assert_eq!(keyed.len(), KEYED_PER_MESSAGE);
    assert_eq!(
        keyed.iter().filter(|o| o.state == State::Open).count(),
        100,
        "every open key is carried"
    );
    assert!(
        m.opinions.iter().any(|o| o.upstream == "api"),
        "the configuration's breakers are never crowded out"
    );
    // Relayed keyed records are bounded the same way.
    let mut b = store("b");
    pull(T0, &a, &mut b);
    let relayed = b
        .message(T0)
        .opinions
        .iter()
        .filter(|o| o.upstream == FAMILY)
        .count();
    assert!(relayed <= KEYED_PER_MESSAGE, "{relayed}");
}

#[test]
fn a_key_has_one_name_on_the_wire() {
    let mut b = store("b");
    let mut named = |key: &str| {
        b.merge(T0, &message("a", vec![record("a", key, State::Open, 20)]))
            .merged
    };
    // Another spelling of "Api", a backslash that is no escape, raw UTF-8: refused.
    assert_eq!(named("\\x41pi"), 0);
    assert_eq!(named("\\q"), 0);
    assert_eq!(named("caf\u{e9}"), 0);
    assert_eq!(
        named("\\xC3\\xA9"),
        0,
        "upper-case hex is not the written form"
    );
    assert_eq!(named("Api"), 1);
    assert_eq!(named("caf\\xc3\\xa9"), 1);
    assert_eq!(b.keyed(), 2);
    // A key too long for the wire stays out, and makes no room for itself.
    let long = "\\xff".repeat(64);
    let open = view(State::Open, 20, 20, T0);
    assert_eq!(b.add_keyed(FAMILY, &long, Some(&open)), None);
    assert_eq!(b.keyed(), 2);
}

#[test]
fn at_the_bound_an_open_key_pushes_out_a_failing_one_and_never_the_reverse() {
    let mut a = store("a");
    let failing = view(State::Closed, 5, 1, T0);
    for i in 0..MAX_KEYED {
        let k = a
            .add_keyed(FAMILY, &format!("k{i}.example"), Some(&failing))
            .unwrap();
        a.update_local(T0, k, failing);
    }
    assert_eq!(
        a.add_keyed(FAMILY, "another-failing.example", Some(&failing)),
        None,
        "a failing key does not push out another"
    );
    let open = view(State::Open, 20, 20, T0);
    let k = a
        .add_keyed(FAMILY, "down.example", Some(&open))
        .expect("room made");
    a.update_local(T0, k, open);
    assert_eq!(a.keyed(), MAX_KEYED);
    // Full of open keys, an open key waits for one to close.
    for i in 0..MAX_KEYED {
        if let Some(b) = a.breaker_index(FAMILY, &format!("k{i}.example")) {
            a.update_local(T0, b, open);
        }
    }
    assert_eq!(a.add_keyed(FAMILY, "down-too.example", Some(&open)), None);
    assert!(a.breaker_index(FAMILY, "down.example").is_some());
}
