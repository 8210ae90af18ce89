//! The fleet on a bus, told as stories: members that publish sealed messages, hear each
//! other, join late, go silent; and someone on the bus without the key who records, alters
//! and replays what passes.

use circuit_breaker_core::breaker::BreakerConfig;
use circuit_breaker_core::fleet::auth::{FleetKey, Nonce};
use circuit_breaker_core::fleet::bus::frame::Sealer;
use circuit_breaker_core::fleet::bus::{
    frame, heartbeat_ms, lasts_ms, Frame, FrameError, Members, Take, Why, MAX_MEMBERS,
};
use circuit_breaker_core::fleet::wire;
use circuit_breaker_core::fleet::{Fingerprint, FleetConfig, FleetStore, LocalView, Policy};
use circuit_breaker_core::snapshot::State;

const T0: u64 = 5_000_000;
/// The members' wall clock, in microseconds (their sequences).
const US: u64 = 1_800_000_000_000_000;

fn cfg() -> FleetConfig {
    FleetConfig {
        interval_ms: 1000,
        fanout: 0,
        expire_ms: 3000,
        max_entries: 1024,
        push_gap_ms: 10,
    }
}

fn fleet_key() -> &'static FleetKey {
    static KEY: std::sync::OnceLock<FleetKey> = std::sync::OnceLock::new();
    KEY.get_or_init(|| FleetKey::new(b"0123456789abcdef0123456789abcdef").unwrap())
}

/// The fleet's key under its subjects' prefix.
fn key() -> Sealer<'static> {
    Sealer {
        key: fleet_key(),
        prefix: "circuit_breaker.fleet",
    }
}

fn fp() -> u64 {
    Fingerprint::of_config(&BreakerConfig::default()).finish()
}

/// One instance on the bus: its store, its table of members, its sequence.
struct Member {
    store: FleetStore,
    members: Members,
    seq: u64,
}

impl Member {
    fn new(id: &str) -> Member {
        let mut store = FleetStore::for_bus(id, cfg()).unwrap();
        store
            .add_breaker(
                "api",
                "default",
                fp(),
                Policy::of_config(&BreakerConfig::default()),
            )
            .unwrap();
        Member {
            store,
            members: Members::new(id, MAX_MEMBERS, 3000, 250),
            seq: US,
        }
    }

    fn id(&self) -> String {
        self.store.self_id().to_owned()
    }

    /// How often it says it speaks at `now`, as the module does.
    fn every(&self, now: u64) -> u64 {
        heartbeat_ms(1000, self.members.heard(now), self.store.quiet(now))
    }

    /// What it publishes on its opinions subject at `now`.
    fn publish(&mut self, now: u64) -> Vec<u8> {
        let every = self.every(now);
        self.publish_every(now, every)
    }

    /// The same, saying it speaks every `every` ms (as in a fleet of another size, or a lie).
    fn publish_every(&mut self, now: u64, every: u64) -> Vec<u8> {
        self.seq += 1;
        let body = self.store.render(now);
        frame::opinions(&key(), &self.id(), self.seq, every, body.as_bytes())
    }

    /// A hello of its own, remembered.
    fn hello(&mut self, now: u64, n: u8) -> Vec<u8> {
        let nonce = Nonce([n; 16]);
        self.members.hello_sent(now, nonce, true);
        self.seq += 1;
        frame::hello(&key(), &self.id(), self.seq, &nonce)
    }

    /// Its answer to a hello (`None`: not this time).
    fn answer(&mut self, now: u64, payload: &[u8]) -> Option<Vec<u8>> {
        let Ok(Frame::Hello { sender, seq, nonce }) = frame::open(&key(), payload) else {
            return None;
        };
        if !self.members.hello_from(now, US, &sender, seq) {
            return None;
        }
        self.seq += 1;
        let body = self.store.render(now);
        let every = self.every(now);
        Some(frame::reply(
            &key(),
            &self.id(),
            self.seq,
            &nonce,
            every,
            body.as_bytes(),
        ))
    }

    /// Takes a payload off the bus: what it did, and whether it wants to ask the sender.
    fn hear(&mut self, now: u64, payload: &[u8]) -> Result<Take, FrameError> {
        let f = frame::open(&key(), payload)?;
        let take = match &f {
            Frame::Opinions { sender, seq, .. } => self.members.opinions(now, US, sender, *seq),
            Frame::Reply {
                sender, seq, nonce, ..
            } => self.members.reply(now, US, sender, *seq, nonce),
            Frame::Hello { .. } => return Ok(Take::Accept),
        };
        if take == Take::Accept {
            let (Frame::Opinions {
                message, every_ms, ..
            }
            | Frame::Reply {
                message, every_ms, ..
            }) = &f
            else {
                unreachable!()
            };
            let lasts = lasts_ms(*every_ms, 1000, self.members.heard(now));
            self.members.lasts(f.sender(), lasts);
            let p = self.store.join(f.sender(), MAX_MEMBERS).unwrap();
            self.store.take_message(now, p, message, lasts).unwrap();
        }
        Ok(take)
    }

    fn suspicious(&self, now: u64) -> bool {
        self.store.suspicious(now, 0).is_some()
    }
}

fn open_view() -> LocalView {
    LocalView {
        state: State::Open,
        forced: false,
        since_ms: T0,
        requests: 20,
        failures: 20,
        slow: 0,
        probe_starts: 0,
        short_circuited: 0,
        active_probes: false,
    }
}

#[test]
fn a_late_member_learns_the_open_breaker_from_the_replies_to_its_hello() {
    let mut a = Member::new("edge-a");
    a.store.update_local(T0, 0, open_view());
    let mut b = Member::new("edge-b");
    // b connects: asks everyone, a answers in b's inbox.
    let hello = b.hello(T0, 1);
    let reply = a.answer(T0, &hello).expect("a answers");
    assert_eq!(b.hear(T0, &reply), Ok(Take::Accept));
    assert!(
        b.suspicious(T0 + 1),
        "within one round trip, not one interval"
    );
    // From then on a's broadcasts are news, in order.
    let m = a.publish(T0 + 1000);
    assert_eq!(b.hear(T0 + 1000, &m), Ok(Take::Accept));
    assert_eq!(b.store.peer_ids().collect::<Vec<_>>(), ["edge-a"]);
}

#[test]
fn a_member_heard_first_by_its_broadcast_is_asked_then_believed() {
    let mut a = Member::new("edge-a");
    a.store.update_local(T0, 0, open_view());
    let mut b = Member::new("edge-b");
    let m = a.publish(T0);
    assert_eq!(
        b.hear(T0, &m),
        Ok(Take::Refuse {
            why: Why::Unverified,
            ask: true
        })
    );
    assert!(!b.suspicious(T0));
    // b asks a alone; a's reply makes its word good.
    let hello = b.hello(T0, 2);
    let reply = a.answer(T0, &hello).unwrap();
    assert_eq!(b.hear(T0 + 5, &reply), Ok(Take::Accept));
    assert!(b.suspicious(T0 + 5));
    let m = a.publish(T0 + 1000);
    assert_eq!(b.hear(T0 + 1000, &m), Ok(Take::Accept));
}

#[test]
fn forged_altered_and_replayed_messages_are_refused_and_counted() {
    let mut a = Member::new("edge-a");
    a.store.update_local(T0, 0, open_view());
    let mut b = Member::new("edge-b");
    let reply = a.answer(T0, &b.hello(T0, 1)).unwrap();
    b.hear(T0, &reply).unwrap();
    let m = a.publish(T0 + 100);
    assert_eq!(b.hear(T0 + 100, &m), Ok(Take::Accept));

    // Replayed: the same bytes again, and the reply again.
    assert!(matches!(
        b.hear(T0 + 200, &m),
        Ok(Take::Refuse {
            why: Why::Replayed,
            ..
        })
    ));
    assert!(matches!(
        b.hear(T0 + 200, &reply),
        Ok(Take::Refuse {
            why: Why::UnknownNonce,
            ..
        })
    ));
    // Altered: a byte of the body, the sequence pushed forward.
    let mut altered = m.clone();
    let at = altered.len() / 2;
    altered[at] ^= 1;
    assert!(matches!(
        b.hear(T0 + 200, &altered),
        Err(FrameError::Auth(_))
    ));
    let text = String::from_utf8(m.clone()).unwrap();
    let bumped = text.replacen(&format!(" {} ", a.seq), &format!(" {} ", a.seq + 1), 1);
    assert_ne!(bumped, text);
    assert!(matches!(
        b.hear(T0 + 200, bumped.as_bytes()),
        Err(FrameError::Auth(_))
    ));
    // Forged: sealed under another key, or not sealed at all.
    let other_key = FleetKey::new(b"another-secret-of-32-characters!").unwrap();
    let other = Sealer {
        key: &other_key,
        prefix: "circuit_breaker.fleet",
    };
    let body = a.store.render(T0);
    let forged = frame::opinions(&other, "edge-a", a.seq + 10, 1000, body.as_bytes());
    assert!(matches!(
        b.hear(T0 + 200, &forged),
        Err(FrameError::Auth(_))
    ));
    assert!(b.hear(T0 + 200, body.as_bytes()).is_err());
    // A hello replayed is answered at most once per pace.
    let hello = b.hello(T0, 3);
    assert!(a.answer(T0 + 300, &hello).is_some());
    assert!(a.answer(T0 + 301, &hello).is_none());
    let refused: u64 = b.members.refused().iter().map(|(_, n)| n).sum();
    assert_eq!(
        refused, 2,
        "the replays (the MACs are refused before any table)"
    );
}

#[test]
fn a_member_speaks_for_itself_alone() {
    let mut a = Member::new("edge-a");
    let mut b = Member::new("edge-b");
    let reply = a.answer(T0, &b.hello(T0, 1)).unwrap();
    b.hear(T0, &reply).unwrap();
    // a (holding the key) says edge-c's breaker is open: not taken on a bus.
    let mut m = wire::parse(a.store.render(T0).as_bytes()).unwrap();
    m.opinions.push(wire::WireOpinion {
        origin: "edge-c".into(),
        upstream: "api".into(),
        route: "default".into(),
        fingerprint: fp(),
        state: State::Open,
        age_ms: 0,
        since_ms: 0,
        requests: 20,
        failures: 20,
        slow: 0,
        round: 0,
        probe_ms: None,
        flags: Default::default(),
    });
    b.store.join("edge-c", MAX_MEMBERS);
    let p = b.store.join("edge-a", MAX_MEMBERS).unwrap();
    let got = b.store.take_message(T0, p, &m, 0).unwrap();
    assert_eq!(got.merged, 0);
    assert_eq!(got.dropped, 1);
    assert!(!b.suspicious(T0));
}

#[test]
fn a_silent_member_parts_and_its_opinions_go_with_it() {
    let mut a = Member::new("edge-a");
    a.store.update_local(T0, 0, open_view());
    let mut b = Member::new("edge-b");
    let reply = a.answer(T0, &b.hello(T0, 1)).unwrap();
    b.hear(T0, &reply).unwrap();
    assert!(b.suspicious(T0));
    let gone = b.members.forget(T0 + 3001);
    assert_eq!(gone, ["edge-a"]);
    for id in gone {
        b.store.part(&id);
    }
    assert!(!b.suspicious(T0 + 3001));
    assert_eq!(b.store.peer_ids().count(), 0);
    assert!(b.store.peer_stats(T0 + 3001).is_empty());
    // Its place is taken again by the next to speak.
    let mut c = Member::new("edge-c");
    c.store.update_local(T0, 0, open_view());
    let reply = c.answer(T0 + 3002, &b.hello(T0 + 3002, 2)).unwrap();
    assert_eq!(b.hear(T0 + 3002, &reply), Ok(Take::Accept));
    assert_eq!(b.store.peer_ids().collect::<Vec<_>>(), ["edge-c"]);
    assert!(b.suspicious(T0 + 3002));
}

#[test]
fn the_store_s_peers_are_bounded() {
    let mut s = FleetStore::for_bus("me", cfg()).unwrap();
    assert_eq!(s.join("a", 2), Some(0));
    assert_eq!(s.join("a", 2), Some(0));
    assert_eq!(s.join("b", 2), Some(1));
    assert_eq!(s.join("c", 2), None);
    assert_eq!(s.join("me", 2), None);
    s.part("a");
    assert_eq!(s.join("c", 2), Some(0));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever someone on the bus without the key publishes — the members' own sealed
        /// messages altered anywhere, replayed in any order, or any bytes at all — no breaker of
        /// a member that had heard nobody becomes suspicious, and nobody joins its store.
        #[test]
        fn without_the_key_nothing_moves(
            flips in proptest::collection::vec((any::<usize>(), 0u8..8), 1..4),
            replays in proptest::collection::vec(0usize..3, 0..6),
            junk in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut a = Member::new("edge-a");
            a.store.update_local(T0, 0, open_view());
            let recorded = [a.publish(T0), a.publish(T0 + 1), a.hello(T0, 9)];
            let mut b = Member::new("edge-b");
            for m in &recorded {
                let mut bad = m.clone();
                for &(i, bit) in &flips {
                    let i = i % bad.len();
                    bad[i] ^= 1 << bit;
                }
                let _ = b.hear(T0 + 10, &bad);
            }
            for &i in &replays {
                // Replayed as they were: a's word cannot be believed before a reply to b.
                let _ = b.hear(T0 + 20, &recorded[i]);
            }
            let _ = b.hear(T0 + 30, &junk);
            prop_assert!(!b.suspicious(T0 + 30));
            prop_assert_eq!(b.store.peer_ids().count(), 0);
        }
    }
}

#[test]
fn a_heartbeat_that_only_renews_opinions_changes_nothing_worth_applying() {
    let mut a = Member::new("edge-a");
    a.store.update_local(T0, 0, open_view());
    let mut b = Member::new("edge-b");
    let p = b.store.join("edge-a", MAX_MEMBERS).unwrap();
    let said = |a: &mut Member, now: u64| wire::parse(a.store.render(now).as_bytes()).unwrap();
    let first = said(&mut a, T0);
    assert_eq!(b.store.take_message(T0, p, &first, 0).unwrap().changed, 1);
    // The same opinion a second later: merged (it is fresher), nothing new.
    let again = said(&mut a, T0 + 1000);
    let got = b.store.take_message(T0 + 1000, p, &again, 0).unwrap();
    assert_eq!((got.merged, got.changed), (1, 0));
    assert!(b.suspicious(T0 + 1000));
    // Its window moved: new.
    let mut view = open_view();
    view.requests = 21;
    view.failures = 21;
    a.store.update_local(T0 + 2000, 0, view);
    let moved = said(&mut a, T0 + 2000);
    assert_eq!(
        b.store
            .take_message(T0 + 2000, p, &moved, 0)
            .unwrap()
            .changed,
        1
    );
    // Heard again only after the opinion expired at b: new again, though the same.
    let late = said(&mut a, T0 + 6000);
    assert_eq!(
        b.store
            .take_message(T0 + 6000, p, &late, 0)
            .unwrap()
            .changed,
        1
    );
}

fn healthy_view() -> LocalView {
    LocalView {
        state: State::Closed,
        requests: 100,
        failures: 0,
        ..open_view()
    }
}

#[test]
fn a_quiet_member_speaks_less_often_and_is_kept_until_its_word_lapses() {
    let mut a = Member::new("edge-a");
    a.store.update_local(T0, 0, healthy_view());
    assert!(a.store.quiet(T0));
    let mut b = Member::new("edge-b");
    // In a fleet of 200, a quiet member speaks every 13 intervals.
    assert_eq!(heartbeat_ms(1000, 200, true), 13_000);
    let reply = a.answer(T0, &b.hello(T0, 1)).unwrap();
    b.hear(T0, &reply).unwrap();
    // b hears one member: a stated 13 s is believed as twice what a fleet of 16 needs, 2
    // intervals, so a's word lasts 6 s (a fleet of 200 believes it: 39 s).
    let m = a.publish_every(T0 + 1, 13_000);
    assert_eq!(b.hear(T0 + 1, &m), Ok(Take::Accept));
    assert_eq!(lasts_ms(13_000, 1000, 1), 6000);
    assert_eq!(lasts_ms(13_000, 1000, 200), 39_000);
    let p = b.store.peer_index("edge-a").unwrap();
    // Past the fleet's expiry (3 s) it is still a member, its healthy window still counted.
    let later = T0 + 5000;
    assert!(b.members.forget(later).is_empty());
    assert_eq!(b.members.heard(later), 1);
    assert_eq!(b.store.opinion(later, 0, p).map(|o| o.requests), Some(100));
    assert!(b.store.peer_stats(later)[0].reachable);
    // Silent for longer than its word lasts: gone.
    assert_eq!(b.members.forget(T0 + 6002), ["edge-a"]);

    // Trouble lasts the fleet's expiry, whatever period a sender states.
    let mut c = Member::new("edge-c");
    c.store.update_local(T0, 0, open_view());
    assert!(!c.store.quiet(T0));
    let reply = c.answer(T0, &b.hello(T0, 2)).unwrap();
    b.hear(T0, &reply).unwrap();
    let m = c.publish_every(T0 + 1, 13_000);
    assert_eq!(b.hear(T0 + 1, &m), Ok(Take::Accept));
    assert!(b.suspicious(T0 + 2000));
    assert!(!b.suspicious(T0 + 3002), "its open opinion expired at 3 s");
}

#[test]
fn a_quiet_word_not_renewed_lapses_with_the_sender_s_next() {
    let mut a = Member::new("edge-a");
    a.store.update_local(T0, 0, healthy_view());
    let mut b = Member::new("edge-b");
    let hello = b.hello(T0, 1);
    b.hear(T0, &a.answer(T0, &hello).unwrap()).unwrap();
    b.hear(T0 + 1, &a.publish_every(T0 + 1, 2000)).unwrap();
    let p = b.store.peer_index("edge-a").unwrap();
    assert!(
        b.store.opinion(T0 + 5000, 0, p).is_some(),
        "quiet: lasts 6 s"
    );
    // The breaker loses its traffic: a's next message says nothing of it, and its quiet word
    // lasts no longer than that message's (3 s), not the 6 s said before.
    a.store.update_local(
        T0 + 1000,
        0,
        LocalView {
            requests: 0,
            ..healthy_view()
        },
    );
    assert!(!a.store.render(T0 + 1000).contains("edge-a api"));
    b.hear(T0 + 1000, &a.publish_every(T0 + 1000, 1000))
        .unwrap();
    assert!(b.store.opinion(T0 + 2500, 0, p).is_some());
    assert!(b.store.opinion(T0 + 3002, 0, p).is_none());
}

#[test]
fn a_recovery_is_news_for_the_expiry_then_quiet() {
    let mut a = Member::new("edge-a");
    a.store.update_local(T0, 0, open_view());
    let closed = LocalView {
        state: State::Closed,
        since_ms: T0 + 5000,
        requests: 0,
        failures: 0,
        probe_starts: 1,
        ..open_view()
    };
    a.store.update_local(T0 + 5000, 0, closed);
    assert!(a.store.render(T0 + 5000).contains(" r\n"), "recovered");
    assert!(!a.store.quiet(T0 + 5000));
    assert!(!a.store.quiet(T0 + 8000));
    assert!(
        a.store.quiet(T0 + 8001),
        "quiet once the recovery is older than the expiry"
    );
    // A receiver holds it as quiet then too: it lasts what its sender says.
    let mut b = Member::new("edge-b");
    let hello = b.hello(T0 + 8001, 1);
    let reply = a.answer(T0 + 8001, &hello).unwrap();
    b.hear(T0 + 8001, &reply).unwrap();
    let m = a.publish_every(T0 + 8002, 2000);
    b.hear(T0 + 8002, &m).unwrap();
    let p = b.store.peer_index("edge-a").unwrap();
    assert!(b.store.opinion(T0 + 8002 + 5000, 0, p).is_some());
}
