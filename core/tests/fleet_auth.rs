//! Properties of the fleet's trust: an answer opens only with its own nonce and the fleet's
//! key, any change to it is refused, a refused answer changes nothing but a counter, and no
//! authenticated message can hold an instance's probes off beyond the fleet's own pace.

use circuit_breaker_core::fleet::auth::{FleetKey, Kind, Nonce, NONCE_BYTES};
use circuit_breaker_core::fleet::store::{Push, Refused};
use circuit_breaker_core::fleet::{
    Flags, FleetConfig, FleetStore, LocalView, Message, Policy, WireOpinion,
};
use circuit_breaker_core::snapshot::State;
use proptest::prelude::*;

const T0: u64 = 10_000_000;

fn key(secret: &str) -> FleetKey {
    FleetKey::new(secret.as_bytes()).unwrap()
}

fn secret() -> impl Strategy<Value = String> {
    "[!-~]{16,64}"
}

fn nonce() -> impl Strategy<Value = Nonce> {
    any::<[u8; NONCE_BYTES]>().prop_map(Nonce)
}

fn policy() -> Policy {
    Policy {
        min_requests: 20,
        failure_rate: 5000,
        slow_rate: 0,
        suspect_min: 5,
        probe_base_ms: 4000,
        probe_max_ms: 4000,
    }
}

fn cfg() -> FleetConfig {
    FleetConfig {
        interval_ms: 1000,
        fanout: 1,
        expire_ms: 4000,
        max_entries: 1024,
        push_gap_ms: 10,
    }
}

fn store(id: &str) -> FleetStore {
    let mut s = FleetStore::new(id, &["a", "b"], cfg()).unwrap();
    s.add_breaker("api", "default", 0xf00d, policy()).unwrap();
    s
}

fn view(state: State, since_ms: u64, probe_starts: u64, short_circuited: u64) -> LocalView {
    LocalView {
        state,
        forced: false,
        since_ms,
        requests: 20,
        failures: 20,
        slow: 0,
        probe_starts,
        short_circuited,
        active_probes: false,
    }
}

/// Instance "b"'s opinion as a record.
fn record(state: State, round: u32, probe_ms: Option<u64>, can_probe: bool) -> WireOpinion {
    WireOpinion {
        origin: "b".into(),
        upstream: "api".into(),
        route: "default".into(),
        fingerprint: 0xf00d,
        state,
        age_ms: 0,
        since_ms: probe_ms.unwrap_or(0).max(1000),
        requests: 20,
        failures: 20,
        slow: 0,
        round: if probe_ms.is_some() { round.max(1) } else { 0 },
        probe_ms,
        flags: Flags {
            can_probe,
            ..Flags::default()
        },
    }
}

fn message(opinions: Vec<WireOpinion>) -> String {
    circuit_breaker_core::fleet::wire::render(&Message {
        sender: "b".into(),
        delay_ms: 0,
        opinions,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_sealed_answer_opens_with_its_nonce_and_key_only(
        s in secret(), other in secret(), n in nonce(), m in nonce(),
        body in proptest::collection::vec(any::<u8>(), 0..2048),
    ) {
        let k = key(&s);
        let sealed = k.seal(&n, &body);
        prop_assert_eq!(k.open(&n, &sealed), Ok(&body[..]));
        if m != n {
            prop_assert!(k.open(&m, &sealed).is_err(), "replayed under another nonce");
        }
        if other != s {
            prop_assert!(key(&other).open(&n, &sealed).is_err(), "another secret");
        }
        prop_assert!(FleetKey::unauthenticated().open(&n, &sealed).is_err());
    }

    #[test]
    fn any_changed_byte_is_refused(
        s in secret(), n in nonce(),
        body in proptest::collection::vec(any::<u8>(), 1..1024),
        at in any::<proptest::sample::Index>(), flip in 1u8..=255,
    ) {
        let k = key(&s);
        let mut sealed = k.seal(&n, &body);
        let i = at.index(sealed.len());
        sealed[i] ^= flip;
        prop_assert!(k.open(&n, &sealed).is_err(), "byte {} of {}", i, sealed.len());
    }

    #[test]
    fn a_cut_or_extended_answer_is_refused(
        s in secret(), n in nonce(),
        body in proptest::collection::vec(any::<u8>(), 0..1024),
        at in any::<proptest::sample::Index>(),
        tail in proptest::collection::vec(any::<u8>(), 1..64),
    ) {
        let k = key(&s);
        let sealed = k.seal(&n, &body);
        let cut = at.index(sealed.len());
        prop_assert!(k.open(&n, &sealed[..cut]).is_err());
        let mut longer = sealed.clone();
        longer.extend_from_slice(&tail);
        prop_assert!(k.open(&n, &longer).is_err());
    }

    #[test]
    fn requests_verify_only_unchanged(
        s in secret(), n in nonce(), poke in any::<bool>(),
        from in "[a-z0-9.:\\[\\]]{1,40}",
        at in any::<proptest::sample::Index>(), flip in 1u8..=255,
    ) {
        let k = key(&s);
        let kind = if poke { Kind::Poke } else { Kind::Pull };
        let h = k.request(kind, &from, &n);
        let got = k.check_request(Some(h.as_bytes())).unwrap();
        prop_assert_eq!((got.kind, got.from.as_str(), got.nonce), (kind, from.as_str(), n));
        let mut bad = h.into_bytes();
        let i = at.index(bad.len());
        bad[i] ^= flip;
        prop_assert!(k.check_request(Some(&bad)).is_err(), "byte {}", i);
    }

    /// A refused answer — forged, altered, replayed — moves the peer's `auth_failures` and
    /// nothing else: the store answers exactly as before.
    #[test]
    fn a_refused_answer_changes_nothing_but_its_counter(
        s in secret(), n in nonce(), m in nonce(),
        at in any::<proptest::sample::Index>(), flip in 1u8..=255,
        how in 0u8..3,
    ) {
        prop_assume!(m != n);
        let k = key(&s);
        let mut a = store("a");
        a.update_local(T0, 0, view(State::Closed, T0 - 60_000, 0, 0));
        let body = message(vec![record(State::Open, 0, None, true)]);
        let sealed = k.seal(&n, body.as_bytes());
        let before = (a.advice(T0, 0), a.held(), a.peer_stats(T0)[0].counters.exchanges);
        let (answer, with) = match how {
            // altered by a byte
            0 => {
                let mut x = sealed.clone();
                let i = at.index(x.len());
                x[i] ^= flip;
                (x, n)
            }
            // replayed: sealed for an earlier pull
            1 => (sealed.clone(), m),
            // forged: no MAC at all
            _ => (body.clone().into_bytes(), n),
        };
        let r = a.receive_sealed(T0, 0, &k, &with, &answer);
        prop_assert!(matches!(r, Err(Refused::Auth { .. })), "{:?}", r);
        prop_assert_eq!((a.advice(T0, 0), a.held(), a.peer_stats(T0)[0].counters.exchanges), before);
        prop_assert_eq!(a.peer_stats(T0)[0].counters.auth_failures, 1);
        // The genuine answer still merges, and makes the breaker suspicious.
        prop_assert!(a.receive_sealed(T0, 0, &k, &n, &sealed).is_ok());
        prop_assert!(a.advice(T0, 0).suspicious_until_ms.is_some());
    }

    /// Whatever round and probe times a peer claims, and whenever, an instance that is first
    /// to probe its fleet round keeps its turn: no message received before its due time
    /// makes its `probe_from` later than it was or than its schedule without any claim would
    /// (the twin below: the same peer, claiming no round; the peer's word may have brought
    /// it earlier, and take that back). And no message puts `probe_from` further ahead than one
    /// wait and one grace period per peer. (Whether the peer may probe at all stays the same
    /// throughout: a candidate that appears may take a turn its rank gives it.)
    #[test]
    fn claims_cannot_hold_off_the_first_prober(
        claims in proptest::collection::vec((0u32..6, 0u64..20_000), 1..40),
        can_probe in any::<bool>(),
    ) {
        let mut a = store("a");
        let mut twin = store("a");
        let opened = T0 - 1000;
        for s in [&mut a, &mut twin] {
            s.update_local(T0 - 2000, 0, view(State::Closed, T0 - 60_000, 0, 0));
            s.update_local(T0 - 1000, 0, view(State::Open, opened, 0, 0));
            s.update_local(T0, 0, view(State::Open, opened, 0, 1));
        }
        let p = policy();
        let grace = p.probe_base_ms.max(cfg().expire_ms);
        let mut now = T0;
        let mut probes = 0u64;
        // Its own schedule: the next probe after its own last one (or its opening).
        let mut alone = opened + p.probe_base_ms;
        for (round, probe_ms) in claims {
            now += 500;
            a.update_local(now, 0, view(State::Open, opened, probes, probes + now));
            twin.update_local(now, 0, view(State::Open, opened, probes, probes + now));
            let before = a.probe_from(now, 0).unwrap();
            let first = before <= now + 500 && a.designated(now, 0) == Some("a");
            let r = record(State::Open, round, (round > 0).then_some(probe_ms), can_probe);
            let body = message(vec![r]);
            a.receive(now, 0, body.as_bytes()).unwrap();
            let honest = message(vec![record(State::Open, 0, None, can_probe)]);
            twin.receive(now, 0, honest.as_bytes()).unwrap();
            let after = a.probe_from(now, 0).unwrap();
            let unclaimed = twin.probe_from(now, 0).unwrap();
            if first {
                prop_assert!(
                    after <= before.max(alone).max(unclaimed),
                    "held off: {} -> {} at {} (alone {}, with no claim {})",
                    before, after, now, alone, unclaimed
                );
            }
            prop_assert!(after <= now + p.probe_max_ms + 2 * grace, "{} at {}", after, now);
            if after <= now {
                // It probes, and the probe fails: its own round goes on.
                probes += 1;
                alone = now + p.probe_max_ms;
                for s in [&mut a, &mut twin] {
                    s.update_local(now, 0, view(State::HalfOpen, now, probes, probes + now));
                    s.update_local(now + 1, 0, view(State::Open, now + 1, probes, probes + now + 1));
                }
            }
        }
    }
}

#[test]
fn a_push_follows_each_move_at_most_once_per_gap() {
    let mut a = store("a");
    a.update_local(T0, 0, view(State::Closed, T0 - 60_000, 0, 0));
    let mut closed = view(State::Closed, T0 - 60_000, 0, 0);
    closed.requests = 1;
    closed.failures = 0;
    a.update_local(T0, 0, closed);
    assert_eq!(
        a.take_push(T0),
        Push::Nothing,
        "a healthy window is no news"
    );
    closed.requests = 2;
    closed.failures = 2;
    a.update_local(T0 + 1, 0, closed);
    assert_eq!(
        a.take_push(T0 + 1),
        Push::Now,
        "a window that starts failing"
    );
    assert_eq!(a.take_push(T0 + 2), Push::Nothing, "told once");
    closed.requests = 4;
    closed.failures = 3;
    a.update_local(T0 + 3, 0, closed);
    assert_eq!(
        a.take_push(T0 + 3),
        Push::Nothing,
        "3 failures: not doubled"
    );
    closed.requests = 5;
    closed.failures = 4;
    a.update_local(T0 + 4, 0, closed);
    assert_eq!(
        a.take_push(T0 + 4),
        Push::At(T0 + 11),
        "doubled, within the gap"
    );
    assert_eq!(a.take_push(T0 + 11), Push::Now);
    a.update_local(T0 + 12, 0, view(State::Open, T0 + 12, 0, 0));
    assert_eq!(a.take_push(T0 + 12), Push::At(T0 + 21), "opened");
    assert_eq!(a.take_push(T0 + 21), Push::Now);
    assert_eq!(a.take_push(T0 + 40), Push::Nothing);
    assert_eq!(a.counters().pushes, 3);
    // News from a peer that makes this instance suspicious is passed on.
    let mut b = store("b");
    let mut quiet = view(State::Closed, T0 - 60_000, 0, 0);
    quiet.failures = 0;
    b.update_local(T0 + 40, 0, quiet);
    assert_eq!(b.take_push(T0 + 40), Push::Nothing);
    let body = a.render(T0 + 40);
    b.receive(T0 + 41, 0, body.as_bytes()).unwrap();
    assert_eq!(
        b.take_push(T0 + 41),
        Push::Now,
        "suspicious: tell the others"
    );
    assert_eq!(b.take_push(T0 + 60), Push::Nothing);
}

#[test]
fn refusals_are_told_once_per_run() {
    let mut a = store("a");
    let k = key("0123456789abcdef0123456789abcdef");
    let n = Nonce([1; NONCE_BYTES]);
    let forged = b"cbfleet 1 b 0 0\nauth 00\n";
    for first in [true, false, false] {
        match a.receive_sealed(T0, 0, &k, &n, forged) {
            Err(Refused::Auth { first: f, .. }) => assert_eq!(f, first),
            other => panic!("{other:?}"),
        }
    }
    assert!(a.tls_failed(T0, 0));
    assert!(!a.tls_failed(T0, 0));
    let good = k.seal(&n, b"cbfleet 1 b 0 0\n");
    a.receive_sealed(T0, 0, &k, &n, &good).unwrap();
    assert!(a.auth_failed(T0 + 1, 0), "told again after a good exchange");
    assert!(a.tls_failed(T0 + 1, 0));
    let c = a.peer_stats(T0)[0].counters;
    assert_eq!((c.auth_failures, c.tls_failures, c.exchanges), (4, 3, 1));
    assert!(
        !a.peer_stats(T0 + 1)[0].reachable,
        "a refusal after the exchange"
    );
}

/// A peer that moves its claimed probe of a round later, or drops the claim, does not move
/// this instance's turn later: the round's earliest accepted probe stands.
#[test]
fn a_round_claimed_again_later_or_dropped_keeps_its_probe() {
    let mut a = store("a");
    let opened = T0 - 1000;
    a.update_local(T0 - 2000, 0, view(State::Closed, T0 - 60_000, 0, 0));
    a.update_local(T0 - 1000, 0, view(State::Open, opened, 0, 0));
    a.update_local(T0, 0, view(State::Open, opened, 0, 1));
    let say = |a: &mut FleetStore, now: u64, round: u32, probe: Option<u64>| {
        // its own users keep being refused: it may probe
        a.update_local(now, 0, view(State::Open, opened, 0, now));
        let body = message(vec![record(State::Open, round, probe, true)]);
        a.receive(now, 0, body.as_bytes()).unwrap();
        a.probe_from(now, 0).unwrap()
    };
    // "b" probed round 1 and then round 2 (each claim at its due time)
    let now = T0 + 4000;
    say(&mut a, now, 1, Some(1000));
    let now = now + 4000;
    let first = say(&mut a, now, 2, Some(0));
    // the same round again, claimed later; then no claim at all
    let later = say(&mut a, now + 500, 2, Some(0));
    assert!(later <= first, "moved later: {first} -> {later}");
    let dropped = say(&mut a, now + 1000, 0, None);
    assert!(dropped <= first, "dropped: {first} -> {dropped}");
}

/// A poke's sequence rides in its nonce, under its MAC; a receiver takes only a later one,
/// and a sender's sequence only grows, whatever its clock does.
#[test]
fn poke_sequences_only_grow_and_replays_are_not_news() {
    use circuit_breaker_core::fleet::auth::{next_sequence, poke_is_new};
    let n = Nonce::sequenced(0x0102_0304_0506_0708, [9; NONCE_BYTES - 8]);
    assert_eq!(n.sequence(), 0x0102_0304_0506_0708);
    assert_eq!(&n.0[8..], &[9; NONCE_BYTES - 8]);
    let now_us = 1_800_000_000_000_000;
    assert!(poke_is_new(0, 1, now_us));
    assert!(!poke_is_new(5, 5, now_us), "the same poke again");
    assert!(!poke_is_new(5, 4, now_us), "an older poke");
    let mut last = 0;
    for now_us in [1_000u64, 1_000, 999, 5_000, 4_000, 4_000] {
        let next = next_sequence(last, now_us);
        assert!(next > last, "{last} -> {next} at {now_us}");
        last = next;
    }
    // The sequence is under the MAC: a changed one does not verify.
    let k = key("0123456789abcdef-pokes");
    let header = k.request(Kind::Poke, "10.0.0.1:80", &n);
    let changed = Nonce::sequenced(n.sequence() + 1, [9; NONCE_BYTES - 8]);
    let forged = header.replacen(&n.hex(), &changed.hex(), 1);
    assert!(k.check_request(Some(header.as_bytes())).is_ok());
    assert!(k.check_request(Some(forged.as_bytes())).is_err());
}

/// The receiver's side of pokes, as the shell keeps it: the last sequence taken from the
/// sender, replaced by a poke's only when the poke is news.
fn take(last: &mut u64, seq: u64, now_us: u64) -> bool {
    use circuit_breaker_core::fleet::auth::poke_is_new;
    let new = poke_is_new(*last, seq, now_us);
    if new {
        *last = seq;
    }
    new
}

/// A poke dated far ahead of the receiver's clock (up to 2^64 - 1) is refused and stored
/// nowhere, so the sender's honest pokes that follow are still taken; and a sequence stored
/// beyond that horizon (by an earlier build, before a reload) guards nothing.
#[test]
fn a_poke_from_the_future_silences_no_one() {
    use circuit_breaker_core::fleet::auth::{next_sequence, POKE_AHEAD_US};
    let mut now_us = 1_800_000_000_000_000u64;
    let mut last = 0;
    let mut sent = 0;
    sent = next_sequence(sent, now_us);
    assert!(take(&mut last, sent, now_us), "an honest poke");
    for ahead in [u64::MAX, now_us + POKE_AHEAD_US + 1, now_us * 2] {
        assert!(!take(&mut last, ahead, now_us), "{ahead} is too far ahead");
        assert_eq!(last, sent, "a refused poke moves nothing");
    }
    // A sender whose clock runs somewhat ahead is still heard.
    assert!(take(&mut last, now_us + POKE_AHEAD_US, now_us));
    // The sender's next pokes, on its own clock: taken once the clock passes the last taken.
    let mut honest = 0;
    for _ in 0..10 {
        now_us += 7_000_000;
        sent = next_sequence(sent, now_us);
        honest += u32::from(take(&mut last, sent, now_us));
    }
    assert_eq!(honest, 2, "taken once past the poke a minute ahead");
    // A sequence of 2^64 - 1 already stored (an earlier build took it) is forgotten, as at a
    // restart, and the honest pokes are taken again, each once.
    last = u64::MAX;
    sent = next_sequence(sent, now_us + 1);
    assert!(take(&mut last, sent, now_us + 1));
    assert!(!take(&mut last, sent, now_us + 1), "the same poke replayed");
    assert!(take(&mut last, next_sequence(sent, now_us + 2), now_us + 2));
}

/// A peer that claims its episode began long ago cannot make a claim skip rounds: the
/// rounds are counted from this instance's own start (less one expiry).
#[test]
fn a_start_claimed_long_ago_skips_no_round() {
    let run = |since_ms: u64| {
        let mut a = store("a");
        let opened = T0 - 1000;
        a.update_local(T0 - 2000, 0, view(State::Closed, T0 - 60_000, 0, 0));
        a.update_local(T0 - 1000, 0, view(State::Open, opened, 0, 0));
        let now = T0 + 1000;
        a.update_local(now, 0, view(State::Open, opened, 0, now));
        let unclaimed = a.probe_from(now, 0);
        let mut r = record(State::Open, 5, Some(0), true);
        r.since_ms = since_ms;
        let body = message(vec![r]);
        a.receive(now, 0, body.as_bytes()).unwrap();
        (unclaimed, a.probe_from(now, 0))
    };
    let (unclaimed, claimed) = run(1_000_000_000_000);
    assert!(
        claimed <= unclaimed,
        "round 5 claimed with a start long ago: {unclaimed:?} -> {claimed:?}"
    );
}
