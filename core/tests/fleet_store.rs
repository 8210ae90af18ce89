//! The opinion store, told as stories over a few instances exchanging real messages.

use circuit_breaker_core::breaker::BreakerConfig;
use circuit_breaker_core::fleet::wire::{self, ErrorKind};
use circuit_breaker_core::fleet::{
    Fingerprint, Flags, FleetConfig, FleetError, FleetStore, LocalView, Message, Policy,
    WireOpinion,
};
use circuit_breaker_core::snapshot::State;

const T0: u64 = 5_000_000;
const IDS: [&str; 4] = ["a", "b", "c", "d"];

fn cfg() -> FleetConfig {
    FleetConfig {
        interval_ms: 1000,
        fanout: 2,
        expire_ms: 3000,
        max_entries: 1024,
        push_gap_ms: 10,
    }
}

fn fp() -> u64 {
    Fingerprint::of_config(&BreakerConfig::default()).finish()
}

fn policy() -> Policy {
    Policy::of_config(&BreakerConfig::default())
}

fn store(id: &str) -> FleetStore {
    let mut s = FleetStore::new(id, &IDS, cfg()).unwrap();
    s.add_breaker("api", "checkout", fp(), policy()).unwrap();
    s
}

fn peer(s: &FleetStore, id: &str) -> usize {
    s.peer_ids().position(|p| p == id).unwrap()
}

fn closed(requests: u64, failures: u64) -> LocalView {
    LocalView {
        state: State::Closed,
        forced: false,
        since_ms: T0 - 60_000,
        requests,
        failures,
        slow: 0,
        probe_starts: 0,
        short_circuited: 0,
        active_probes: false,
    }
}

fn open(since_ms: u64, probe_starts: u64, short_circuited: u64) -> LocalView {
    LocalView {
        state: State::Open,
        since_ms,
        probe_starts,
        short_circuited,
        ..closed(20, 20)
    }
}

/// `to` pulls from `from` at `now`.
fn pull(now: u64, from: &FleetStore, to: &mut FleetStore) {
    let body = from.render(now);
    let p = peer(to, from.self_id());
    to.receive(now, p, body.as_bytes()).unwrap();
}

fn record(origin: &str, state: State, age_ms: u64) -> WireOpinion {
    WireOpinion {
        origin: origin.into(),
        upstream: "api".into(),
        route: "checkout".into(),
        fingerprint: fp(),
        state,
        age_ms,
        since_ms: age_ms + 1000,
        requests: 20,
        failures: 20,
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

#[test]
fn a_peer_open_with_the_same_fingerprint_makes_the_breaker_suspicious_until_it_expires() {
    let mut a = store("a");
    a.update_local(T0, 0, closed(0, 0));
    assert_eq!(a.suspicious(T0, 0), None);

    let mut other = record("b", State::Open, 0);
    other.fingerprint ^= 1;
    a.merge(T0, &message("b", vec![other]));
    assert_eq!(
        a.suspicious(T0, 0),
        None,
        "another configuration is not combined"
    );

    a.merge(T0, &message("b", vec![record("c", State::Open, 500)]));
    let until = T0 - 500 + 3000;
    assert_eq!(a.suspicious(T0, 0), Some(until));
    assert_eq!(a.suspicious(until, 0), Some(until));
    assert_eq!(
        a.suspicious(until + 1, 0),
        None,
        "stale evidence is no evidence"
    );
}

#[test]
fn an_operator_forced_open_is_no_evidence() {
    let mut a = store("a");
    a.update_local(T0, 0, closed(0, 0));
    let mut forced = record("b", State::Open, 0);
    forced.requests = 0;
    forced.failures = 0;
    forced.flags.forced = true;
    a.merge(T0, &message("b", vec![forced]));
    assert_eq!(a.suspicious(T0, 0), None);
}

#[test]
fn windows_are_combined_across_the_fleet() {
    let mut a = store("a");
    // 4 local failures out of 4, and two peers with 8/10 each: 20 of 24 >= 50%, >= 20.
    a.update_local(T0, 0, closed(4, 4));
    let mut b = record("b", State::Closed, 200);
    (b.requests, b.failures) = (10, 8);
    let mut c = record("c", State::Closed, 900);
    (c.requests, c.failures) = (10, 8);
    a.merge(T0, &message("b", vec![b.clone()]));
    assert_eq!(a.suspicious(T0, 0), None, "14 attempts are too few");
    a.merge(T0, &message("b", vec![c]));
    assert_eq!(
        a.suspicious(T0, 0),
        Some(T0 - 900 + 3000),
        "until the first expires"
    );

    // Healthy peers dilute the rate below the threshold.
    let mut d = record("d", State::Closed, 0);
    (d.requests, d.failures) = (40, 0);
    a.merge(T0, &message("b", vec![d]));
    assert_eq!(a.suspicious(T0, 0), None);
}

#[test]
fn local_failures_alone_are_not_the_fleets_suspicion() {
    let mut a = store("a");
    a.update_local(T0, 0, closed(30, 30));
    let mut b = record("b", State::Closed, 0);
    (b.requests, b.failures) = (30, 0);
    a.merge(T0, &message("b", vec![b]));
    assert_eq!(a.suspicious(T0, 0), None);
}

#[test]
fn slow_calls_count_when_the_breaker_has_a_slow_rule() {
    let cfg = BreakerConfig {
        slow_ms: 800,
        slow_rate: 5000,
        ..BreakerConfig::default()
    };
    let mut a = FleetStore::new("a", &IDS, cfg_()).unwrap();
    a.add_breaker("api", "checkout", fp(), Policy::of_config(&cfg))
        .unwrap();
    a.update_local(T0, 0, closed(0, 0));
    let mut b = record("b", State::Closed, 0);
    (b.requests, b.failures, b.slow) = (20, 0, 15);
    a.merge(T0, &message("b", vec![b.clone()]));
    assert_eq!(a.suspicious(T0, 0), Some(T0 + 3000));

    let mut plain = store("a");
    plain.update_local(T0, 0, closed(0, 0));
    plain.merge(T0, &message("b", vec![b]));
    assert_eq!(
        plain.suspicious(T0, 0),
        None,
        "no slow rule, no slow evidence"
    );
}

fn cfg_() -> FleetConfig {
    cfg()
}

#[test]
fn records_that_cannot_be_used_are_counted_and_dropped() {
    let mut a = store("a");
    let mut unknown_breaker = record("b", State::Open, 0);
    unknown_breaker.route = "catalog".into();
    let got = a.merge(
        T0,
        &Message {
            sender: "b".into(),
            delay_ms: 2500,
            opinions: vec![
                record("a", State::Open, 0),
                record("zz", State::Open, 0),
                unknown_breaker,
                record("c", State::Open, 501),
                record("d", State::Open, 500),
            ],
        },
    );
    assert_eq!((got.own, got.dropped, got.merged), (1, 3, 1));
    let c = a.counters();
    assert_eq!((c.unknown_origin, c.unknown_breaker, c.stale), (1, 1, 1));
    let d = a.opinion(T0, 0, peer(&a, "d")).unwrap();
    assert_eq!(
        d.observed_at_ms,
        T0 - 3000,
        "the header's delay is part of the age"
    );
}

#[test]
fn a_broken_or_misdirected_message_changes_nothing_but_a_counter() {
    let mut a = store("a");
    a.update_local(T0, 0, closed(0, 0));
    let b = peer(&a, "b");
    let body = wire::render(&message("c", vec![record("c", State::Open, 0)]));
    let e = a.receive(T0, b, body.as_bytes()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Sender);
    let e = a.receive(T0, b, b"cbfleet 1 b 1 0\n").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Count);
    assert_eq!(a.suspicious(T0, 0), None);
    a.peer_failed(T0, b);
    let s = &a.peer_stats(T0)[b];
    assert_eq!((s.counters.parse_errors, s.counters.failures), (2, 1));
    assert!(!s.reachable);
    assert!(a.receive(T0, 99, body.as_bytes()).is_err(), "no such peer");
}

#[test]
fn peers_are_reachable_while_their_last_exchange_is_recent_and_good() {
    let mut a = store("a");
    let mut b = store("b");
    b.update_local(T0, 0, closed(5, 1));
    pull(T0, &b, &mut a);
    let pb = peer(&a, "b");
    let s = &a.peer_stats(T0 + 3000)[pb];
    assert!(s.reachable);
    assert_eq!(
        (s.opinions, s.disagreements, s.counters.exchanges),
        (1, 0, 1)
    );
    assert_eq!(s.counters.last_exchange_ms, Some(T0));
    assert!(!a.peer_stats(T0 + 3001)[pb].reachable);
    a.peer_failed(T0 + 1000, pb);
    assert!(!a.peer_stats(T0 + 1000)[pb].reachable);
}

#[test]
fn a_peer_with_another_configuration_shows_as_a_disagreement() {
    let mut a = store("a");
    let mut b = FleetStore::new("b", &IDS, cfg()).unwrap();
    let other = Fingerprint::of_config(&BreakerConfig {
        min_requests: 5,
        ..BreakerConfig::default()
    })
    .finish();
    b.add_breaker("api", "checkout", other, policy()).unwrap();
    b.update_local(T0, 0, open(T0 - 1000, 0, 3));
    pull(T0, &b, &mut a);
    let s = &a.peer_stats(T0)[peer(&a, "b")];
    assert_eq!((s.opinions, s.disagreements), (1, 1));
    let v = a.breaker_view(T0, 0).unwrap();
    assert_eq!(
        (v.agreeing_peers, v.disagreeing_peers, v.open_peers),
        (0, 1, 0)
    );
    assert_eq!(v.advice.suspicious_until_ms, None);
}

#[test]
fn opinions_travel_through_a_relay_and_age_on_the_way() {
    let (mut a, mut b, mut c) = (store("a"), store("b"), store("c"));
    c.update_local(T0, 0, open(T0 - 2000, 0, 1));
    pull(T0, &c, &mut b);
    pull(T0 + 700, &b, &mut a);
    let o = a.opinion(T0 + 700, 0, peer(&a, "c")).unwrap();
    assert_eq!(
        o.observed_at_ms, T0,
        "700 ms in b's store are part of the age"
    );
    assert_eq!(o.since_ms, T0 - 2000);
    assert_eq!(o.state(), State::Open);
    assert!(a.suspicious(T0 + 700, 0).is_some());

    // Healthy windows are served by their own instance but not relayed.
    let (mut a, mut b, mut c) = (store("a"), store("b"), store("c"));
    c.update_local(T0, 0, closed(30, 0));
    pull(T0, &c, &mut b);
    assert!(b.opinion(T0, 0, peer(&b, "c")).is_some());
    pull(T0, &b, &mut a);
    assert!(a.opinion(T0, 0, peer(&a, "c")).is_none());
}

#[test]
fn an_idle_breaker_is_not_served() {
    let mut a = store("a");
    a.update_local(T0, 0, closed(0, 0));
    assert!(a.message(T0).opinions.is_empty());
    assert_eq!(a.render(T0), "cbfleet 1 a 0 0\n");
}

#[test]
fn a_message_keeps_own_opinions_and_the_freshest_relayed_ones_within_its_cap() {
    let ids: Vec<String> = (0..50).map(|i| format!("i{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut s = FleetStore::new(
        "i0",
        &refs,
        FleetConfig {
            max_entries: 10,
            expire_ms: 60_000,
            ..cfg()
        },
    )
    .unwrap();
    for r in 0..3 {
        s.add_breaker("api", &format!("r{r}"), fp(), policy())
            .unwrap();
        s.update_local(T0, r, closed(10, if r == 1 { 9 } else { 0 }));
    }
    let mut m = message("i1", vec![]);
    for i in 1..50u64 {
        let mut o = record(&format!("i{i}"), State::Open, i * 100);
        o.route = "r0".into();
        m.opinions.push(o);
    }
    s.merge(T0, &m);
    let out = s.message(T0);
    assert_eq!(out.opinions.len(), 10);
    let own: Vec<&str> = out.opinions[..3].iter().map(|o| o.route.as_str()).collect();
    assert_eq!(own, ["r1", "r0", "r2"], "own first, trouble first");
    let ages: Vec<u64> = out.opinions[3..].iter().map(|o| o.age_ms).collect();
    assert_eq!(ages, [100, 200, 300, 400, 500, 600, 700]);
    assert!(wire::parse(s.render(T0).as_bytes()).is_ok());
}

/// Instances with their local breakers, exchanging with every other live one on demand.
struct Fleet {
    stores: Vec<FleetStore>,
    views: Vec<LocalView>,
    silent: Vec<bool>,
}

impl Fleet {
    /// `a`, `b`, `c`, all opened at T0, all with traffic.
    fn three_open() -> Fleet {
        let mut f = Fleet {
            stores: vec![store("a"), store("b"), store("c")],
            views: vec![open(T0, 0, 0); 3],
            silent: vec![false; 3],
        };
        f.at(T0).at(T0 + 1000);
        f
    }

    /// Every live instance reads its breaker (which keeps refusing requests while open),
    /// then pulls from every other live one.
    fn at(&mut self, now: u64) -> &mut Fleet {
        for (i, x) in self.stores.iter_mut().enumerate() {
            if !self.silent[i] {
                self.views[i].short_circuited += 1;
                x.update_local(now, 0, self.views[i]);
            }
        }
        for i in 0..self.stores.len() {
            for j in 0..self.stores.len() {
                if i != j && !self.silent[i] && !self.silent[j] {
                    let body = self.stores[j].render(now);
                    let p = peer(&self.stores[i], self.stores[j].self_id());
                    self.stores[i].receive(now, p, body.as_bytes()).unwrap();
                }
            }
        }
        self
    }

    /// Live instances that would probe at `now`.
    fn probers(&self, now: u64) -> Vec<&str> {
        self.stores
            .iter()
            .zip(&self.silent)
            .filter(|(x, &silent)| !silent && x.designated_prober(now, 0))
            .map(|(x, _)| x.self_id())
            .collect()
    }

    fn index(&self, id: &str) -> usize {
        self.stores.iter().position(|x| x.self_id() == id).unwrap()
    }
}

#[test]
fn the_fleet_agrees_on_one_prober_per_cooldown_and_rotates_it() {
    let mut f = Fleet::three_open();
    let base = 30_000;
    let first = f.stores[0].designated(T0 + 1000, 0).unwrap().to_string();
    for x in &f.stores {
        assert_eq!(x.designated(T0 + 1000, 0), Some(first.as_str()));
    }
    assert!(
        f.at(T0 + base - 1).probers(T0 + base - 1).is_empty(),
        "not before the cooldown"
    );
    assert_eq!(f.at(T0 + base).probers(T0 + base), [first.as_str()]);
    let grace = 30_000; // the longer of the cooldown and the expiry
    let t = T0 + base + grace;
    assert_eq!(f.at(t - 1).probers(t - 1).len(), 1);
    assert_eq!(
        f.at(t).probers(t).len(),
        2,
        "the next in line, if the first never probed"
    );

    // The designated instance probes at +30.1 s and fails; every instance learns it.
    let p = f.index(&first);
    f.views[p] = open(T0 + base + 120, 1, f.views[p].short_circuited);
    f.at(T0 + base + 1000);
    for x in &f.stores {
        assert_eq!(x.breaker_view(T0 + base + 1000, 0).unwrap().round, 1);
    }
    // The next probe waits twice the cooldown after that one, from whoever is first now.
    let next = T0 + base + 120 + 2 * base;
    assert!(f.at(next - 1).probers(next - 1).is_empty());
    assert_eq!(f.at(next).probers(next).len(), 1);
}

#[test]
fn when_the_designated_instance_vanishes_another_takes_over() {
    let mut f = Fleet::three_open();
    let first = f.stores[0].designated(T0 + 1000, 0).unwrap().to_string();
    let p = f.index(&first);
    f.silent[p] = true;
    // Its last opinion, from T0 + 1 s, is fresh for 3 s more: the others still wait for it.
    f.at(T0 + 4000);
    let other = (p + 1) % 3;
    assert_eq!(
        f.stores[other].designated(T0 + 4000, 0),
        Some(first.as_str())
    );
    f.at(T0 + 4001);
    let d = f.stores[other]
        .designated(T0 + 4001, 0)
        .unwrap()
        .to_string();
    assert_ne!(d, first);
    assert_eq!(
        f.stores[(p + 2) % 3].designated(T0 + 4001, 0),
        Some(d.as_str())
    );
    assert_eq!(f.at(T0 + 30_000).probers(T0 + 30_000), [d.as_str()]);
}

#[test]
fn an_instance_without_traffic_is_not_asked_to_probe() {
    let mut s = [store("a"), store("b")];
    s[0].update_local(T0, 0, open(T0, 0, 0));
    s[0].update_local(T0 + 1000, 0, open(T0, 0, 0));
    s[1].update_local(T0, 0, open(T0, 0, 0));
    s[1].update_local(T0 + 1000, 0, open(T0, 0, 9));
    let [x, y] = &mut s;
    pull(T0 + 1000, x, y);
    pull(T0 + 1000, y, x);
    assert_eq!(s[0].designated(T0 + 1000, 0), Some("b"));
    assert_eq!(s[1].designated(T0 + 1000, 0), Some("b"));
    assert_eq!(s[0].probe_from(T0 + 1000, 0), None);
    assert_eq!(s[1].probe_from(T0 + 1000, 0), Some(T0 + 30_000));

    // Active probes need no traffic.
    s[0].update_local(
        T0 + 1500,
        0,
        LocalView {
            active_probes: true,
            ..open(T0, 0, 0)
        },
    );
    assert!(s[0].probe_from(T0 + 1500, 0).is_some());
}

#[test]
fn an_instance_alone_keeps_the_breakers_own_doubling_cooldown() {
    let mut a = store("a");
    a.update_local(T0, 0, open(T0, 0, 1));
    a.update_local(T0 + 1000, 0, open(T0, 0, 2));
    assert_eq!(a.designated(T0 + 1000, 0), Some("a"));
    assert_eq!(a.probe_from(T0 + 1000, 0), Some(T0 + 30_000));
    // Probe at +30 s fails: reopened at +30.1 s.
    a.update_local(T0 + 31_000, 0, open(T0 + 30_100, 1, 3));
    assert_eq!(a.probe_from(T0 + 31_000, 0), Some(T0 + 30_100 + 60_000));
    a.update_local(T0 + 91_000, 0, open(T0 + 90_100, 2, 4));
    assert_eq!(a.probe_from(T0 + 91_000, 0), Some(T0 + 90_100 + 120_000));
}

#[test]
fn a_forced_or_closed_breaker_never_probes_for_the_fleet() {
    let mut a = store("a");
    a.update_local(
        T0,
        0,
        LocalView {
            forced: true,
            ..open(T0, 0, 1)
        },
    );
    a.update_local(
        T0 + 1,
        0,
        LocalView {
            forced: true,
            ..open(T0, 0, 2)
        },
    );
    assert_eq!(a.probe_from(T0 + 100_000, 0), None);
    a.update_local(T0 + 2, 0, closed(0, 0));
    assert_eq!(a.probe_from(T0 + 100_000, 0), None);
    assert_eq!(a.designated(T0 + 100_000, 0), None);
}

#[test]
fn a_peer_that_closed_after_a_probe_lets_local_probes_start_early() {
    let (mut a, mut b) = (store("a"), store("b"));
    a.update_local(T0, 0, open(T0, 0, 1));
    b.update_local(T0 - 5000, 0, open(T0 - 5000, 0, 1));
    // b probes (half-open), then closes on good probes.
    b.update_local(
        T0 + 25_000,
        0,
        LocalView {
            state: State::HalfOpen,
            ..open(T0 + 25_000, 1, 2)
        },
    );
    b.update_local(
        T0 + 28_000,
        0,
        LocalView {
            since_ms: T0 + 27_000,
            probe_starts: 1,
            ..closed(0, 0)
        },
    );
    pull(T0 + 28_000, &b, &mut a);
    assert!(a.peers_report_recovered(T0 + 28_000, 0));
    assert!(a.advice(T0 + 28_000, 0).peers_recovered);
    assert!(!a.peers_report_recovered(T0 + 31_001, 0), "expired");

    // A close that came before this breaker opened is old news.
    let mut late = store("a");
    late.update_local(T0 + 27_500, 0, open(T0 + 27_500, 0, 1));
    pull(T0 + 28_000, &b, &mut late);
    assert!(!late.peers_report_recovered(T0 + 28_000, 0));
}

/// Peers' report of recovery ends this instance's cooldown once per open episode: a peer
/// flipping between recovered and open every second for 15 s cuts it once (its report rose 8
/// times, and each rise cut it before), a failed probe's reopening is the same episode, and
/// the next episode, after a close, may be cut once again.
#[test]
fn a_recovery_report_cuts_a_cooldown_once_per_episode() {
    let mut a = store("a");
    // b's opinion at `now`: closed after a probe (a recovery) `ago` ms before, or open.
    let say = |a: &mut FleetStore, now: u64, recovered: bool, ago: u64| {
        let mut r = record("b", State::Open, 0);
        if recovered {
            r.state = State::Closed;
            r.since_ms = ago;
            (r.requests, r.failures) = (0, 0);
            r.flags.recovered = true;
        }
        a.merge(now, &message("b", vec![r]));
    };
    a.update_local(T0, 0, open(T0, 0, 1));
    assert!(!a.take_hasten(T0, 0), "no report, no cut");
    let (mut cuts, mut rises, mut was) = (0, 0, false);
    for k in 1..=15u64 {
        let now = T0 + k * 1000;
        say(&mut a, now, k % 2 == 1, 500);
        a.update_local(now, 0, open(T0, 0, 1 + k));
        let reported = a.peers_report_recovered(now, 0);
        rises += u32::from(reported && !was);
        was = reported;
        cuts += u32::from(a.take_hasten(now, 0));
    }
    assert_eq!(rises, 8, "the report came and went");
    assert_eq!(cuts, 1, "the cooldown is cut once");

    // a's probe fails: reopened, the same episode; the report stands, and cuts nothing more.
    let mut now = T0 + 16_000;
    a.update_local(
        now,
        0,
        LocalView {
            state: State::HalfOpen,
            ..open(now, 1, 17)
        },
    );
    now += 100;
    a.update_local(now, 0, open(now, 1, 18));
    for _ in 0..3 {
        now += 1000;
        say(&mut a, now, true, 500);
        a.update_local(now, 0, open(T0 + 16_100, 1, 19));
        assert!(a.peers_report_recovered(now, 0));
        assert!(
            !a.take_hasten(now, 0),
            "a failed probe reopens the same episode"
        );
    }

    // Closed, then open again: another episode, whose cooldown one report may cut once.
    now += 1000;
    a.update_local(
        now,
        0,
        LocalView {
            since_ms: now,
            probe_starts: 2,
            ..closed(0, 0)
        },
    );
    assert!(!a.take_hasten(now, 0), "closed: nothing to cut");
    now += 5000;
    let reopened = now;
    a.update_local(now, 0, open(reopened, 2, 20));
    say(&mut a, now, true, 6000);
    assert!(
        !a.take_hasten(now, 0),
        "a recovery before this episode is old news"
    );
    now += 1000;
    say(&mut a, now, true, 500);
    assert!(a.take_hasten(now, 0), "a recovery in this episode");
    assert!(!a.take_hasten(now, 0));
}

#[test]
fn an_operator_reset_is_not_a_recovery() {
    let (mut a, mut b) = (store("a"), store("b"));
    a.update_local(T0, 0, open(T0, 0, 1));
    b.update_local(T0, 0, open(T0, 0, 1));
    b.update_local(
        T0 + 1000,
        0,
        LocalView {
            since_ms: T0 + 900,
            ..closed(0, 0)
        },
    );
    pull(T0 + 1000, &b, &mut a);
    assert!(!a.peers_report_recovered(T0 + 1000, 0));
}

#[test]
fn construction_refuses_bad_names_and_duplicates() {
    assert_eq!(
        FleetStore::new("", &[], cfg()).unwrap_err(),
        FleetError::InvalidName(String::new())
    );
    assert_eq!(
        FleetStore::new("a", &["b", "b"], cfg()).unwrap_err(),
        FleetError::DuplicatePeer("b".into())
    );
    let mut s = FleetStore::new("a", &["a", "b"], cfg()).unwrap();
    assert_eq!(s.peer_ids().collect::<Vec<_>>(), ["b"], "self is left out");
    s.add_breaker("api", "default", 1, policy()).unwrap();
    assert_eq!(
        s.add_breaker("api", "default", 2, policy()).unwrap_err(),
        FleetError::DuplicateBreaker("api".into(), "default".into())
    );
    assert_eq!(
        FleetError::DuplicatePeer("b".into()).to_string(),
        "peer \"b\" is duplicate"
    );
    let long = "x".repeat(256);
    assert!(s.add_breaker(&long, "default", 1, policy()).is_err());
}

#[test]
fn defaults_scale_with_the_fleet() {
    let pair = FleetConfig::for_fleet(1000, 2);
    assert_eq!((pair.fanout, pair.expire_ms), (1, 3000));
    let small = FleetConfig::for_fleet(1000, 8);
    assert_eq!((small.fanout, small.expire_ms), (3, 4000));
    let mid = FleetConfig::for_fleet(1000, 50);
    assert_eq!((mid.fanout, mid.expire_ms), (3, 5000));
    let big = FleetConfig::for_fleet(500, 200);
    assert_eq!((big.fanout, big.expire_ms), (3, 3000));
}

#[test]
fn only_a_breaker_failing_below_its_volume_asks_to_hurry() {
    let mut a = store("a");
    assert!(!a.hurry(T0), "nothing known yet");
    a.update_local(T0, 0, closed(30, 1));
    assert!(!a.hurry(T0), "background errors");
    a.update_local(T0, 0, closed(1, 1));
    assert!(!a.hurry(T0), "a single failure");
    a.update_local(T0, 0, closed(4, 2));
    assert!(a.hurry(T0), "failing at its rate");
    a.update_local(T0, 0, open(T0, 0, 1));
    assert!(!a.hurry(T0), "open already");
    a.update_local(
        T0,
        0,
        LocalView {
            forced: true,
            ..closed(4, 4)
        },
    );
    assert!(!a.hurry(T0), "forced closed");

    // Peers' trouble alone does not make a healthy instance pull faster.
    let mut b = store("b");
    b.update_local(T0, 0, closed(10, 0));
    b.merge(T0, &message("c", vec![record("c", State::Open, 0)]));
    assert!(b.suspicious(T0, 0).is_some());
    assert!(!b.hurry(T0));
}
