//! Properties of the fleet exchange: the parser survives anything, merging is a maximum
//! (idempotent, order-independent), stale opinions expire, suspicion needs fresh evidence
//! from peers with the same fingerprint, sizes stay bounded, and one prober is designated.

use circuit_breaker_core::fleet::wire::{self, ErrorKind, MAX_ENTRIES, MAX_NUMBER};
use circuit_breaker_core::fleet::{
    Flags, FleetConfig, FleetStore, LocalView, Message, Policy, WireOpinion,
};
use circuit_breaker_core::snapshot::State;
use proptest::prelude::*;

const NOW: u64 = 10_000_000;
const EXPIRE: u64 = 3000;
const ORIGINS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
const ROUTES: [&str; 3] = ["default", "checkout", "catalog"];
const FPS: [u64; 2] = [0x1111, 0x2222];

fn policy() -> Policy {
    Policy {
        min_requests: 20,
        failure_rate: 5000,
        slow_rate: 5000,
        suspect_min: 5,
        probe_base_ms: 30_000,
        probe_max_ms: 300_000,
    }
}

fn cfg(max_entries: usize) -> FleetConfig {
    FleetConfig {
        interval_ms: 1000,
        fanout: 2,
        expire_ms: EXPIRE,
        max_entries,
        push_gap_ms: 10,
    }
}

/// Instance `a` with breakers api/default and api/checkout (fingerprint `FPS[0]`); the
/// records below may also name api/catalog, which it does not have.
fn store(max_entries: usize) -> FleetStore {
    let mut s = FleetStore::new("a", &ORIGINS, cfg(max_entries)).unwrap();
    s.add_breaker("api", "default", FPS[0], policy()).unwrap();
    s.add_breaker("api", "checkout", FPS[0], policy()).unwrap();
    s
}

fn state() -> impl Strategy<Value = State> {
    prop_oneof![
        Just(State::Closed),
        Just(State::HalfOpen),
        Just(State::Open)
    ]
}

fn flags() -> impl Strategy<Value = Flags> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(can_probe, recovered, forced)| Flags {
        can_probe,
        recovered,
        forced,
    })
}

/// A valid record over the small pools above (so that records collide often).
fn record() -> impl Strategy<Value = WireOpinion> {
    (
        (
            prop::sample::select(&ORIGINS[..]),
            prop::sample::select(&ROUTES[..]),
            prop::sample::select(&FPS[..]),
            state(),
            0u64..5000,
            0u64..5000,
        ),
        (0u64..60, 0u64..60, 0u64..60, 0u32..4, 0u64..5000, flags()),
    )
        .prop_map(
            |((origin, route, fp, st, age, since), (req, fail, slow, round, probe, flags))| {
                let requests = req.max(fail).max(slow);
                WireOpinion {
                    origin: origin.into(),
                    upstream: "api".into(),
                    route: route.into(),
                    fingerprint: fp,
                    state: st,
                    age_ms: age,
                    since_ms: age + since,
                    requests,
                    failures: fail,
                    slow,
                    round,
                    probe_ms: (round > 0).then_some(age + probe),
                    flags,
                }
            },
        )
}

/// Any valid record, names and numbers over their whole ranges.
fn wide_record() -> impl Strategy<Value = WireOpinion> {
    let name = "[ -~\u{e9}\u{4e2d}\n]{1,40}";
    (
        (name, name, name, any::<u64>(), state()),
        (
            0..=MAX_NUMBER,
            0..=MAX_NUMBER,
            0..=MAX_NUMBER,
            0..=MAX_NUMBER,
            0..=MAX_NUMBER,
        ),
        (any::<u32>(), 0..=MAX_NUMBER, flags()),
    )
        .prop_map(
            |(
                (origin, upstream, route, fp, st),
                (age, since, req, fail, slow),
                (round, probe, flags),
            )| {
                let (age, since) = (age.min(since), age.max(since));
                WireOpinion {
                    origin,
                    upstream,
                    route,
                    fingerprint: fp,
                    state: st,
                    age_ms: age,
                    since_ms: since,
                    requests: req,
                    failures: fail.min(req),
                    slow: slow.min(req),
                    round,
                    probe_ms: (round > 0).then_some(probe.max(age)),
                    flags,
                }
            },
        )
}

fn message(sender: &'static str, delay: u64, opinions: Vec<WireOpinion>) -> Message {
    Message {
        sender: sender.into(),
        delay_ms: delay,
        opinions,
    }
}

/// Everything observable of a store's peer opinions.
fn observe(s: &FleetStore, now: u64) -> (Vec<String>, String, Vec<Option<u64>>) {
    let mut ops = Vec::new();
    for b in 0..2 {
        for p in 0..ORIGINS.len() - 1 {
            ops.push(format!("{:?}", s.opinion(now, b, p)));
        }
    }
    let suspicious = (0..2).map(|b| s.suspicious(now, b)).collect();
    (ops, s.render(now), suspicious)
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Truncate(usize),
    DuplicateLine(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (
            any::<usize>(),
            prop_oneof![Just(b' '), Just(b'\n'), Just(b'%'), Just(b'9'), any::<u8>()]
        )
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Remove),
        any::<usize>().prop_map(Mutation::Truncate),
        any::<usize>().prop_map(Mutation::DuplicateLine),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let n = bytes.len().max(1);
    match *m {
        Mutation::Flip(i, b) if !bytes.is_empty() => bytes[i % n] ^= b | 1,
        Mutation::Insert(i, b) => bytes.insert(i % (bytes.len() + 1), b),
        Mutation::Remove(i) if !bytes.is_empty() => {
            bytes.remove(i % n);
        }
        Mutation::Truncate(i) => bytes.truncate(i % n),
        Mutation::DuplicateLine(i) => {
            let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
            let line = lines[i % lines.len()].to_vec();
            bytes.extend_from_slice(&line);
            bytes.push(b'\n');
        }
        _ => {}
    }
}

/// Whatever parses is a valid message: it renders and parses back to itself, and holds no
/// more records than allowed nor than the input could carry.
fn check_parsed(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(m) = wire::parse(bytes) {
        prop_assert!(m.opinions.len() <= MAX_ENTRIES);
        prop_assert!(m.opinions.len() * 30 <= bytes.len());
        prop_assert_eq!(wire::parse(wire::render(&m).as_bytes()), Ok(m));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_parser_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        check_parsed(&bytes)?;
        let mut framed = b"cbfleet 1 b 1 0\n".to_vec();
        framed.extend_from_slice(&bytes);
        framed.push(b'\n');
        check_parsed(&framed)?;
    }

    #[test]
    fn the_parser_never_panics_on_mutated_messages(
        records in prop::collection::vec(wide_record(), 0..6),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let mut bytes = wire::render(&message("b", 0, records)).into_bytes();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        check_parsed(&bytes)?;
    }

    #[test]
    fn valid_messages_round_trip(
        records in prop::collection::vec(wide_record(), 0..8),
        delay in 0..=MAX_NUMBER,
    ) {
        let m = message("b", delay, records);
        prop_assert_eq!(wire::parse(wire::render(&m).as_bytes()), Ok(m));
    }

    #[test]
    fn merging_is_idempotent_and_order_independent(
        records in prop::collection::vec((0u64..3000, record()), 0..24),
        order in any::<u64>(),
    ) {
        let single = |(delay, r): &(u64, WireOpinion)| message("b", *delay, vec![r.clone()]);
        let mut once = store(1024);
        for r in &records {
            once.merge(NOW, &single(r));
        }
        let mut shuffled = records.clone();
        // A Fisher-Yates shuffle from the case's own random number.
        let mut x = order | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mut reordered = store(1024);
        for r in &shuffled {
            reordered.merge(NOW, &single(r));
        }
        let mut twice = store(1024);
        for r in records.iter().chain(records.iter().rev()) {
            twice.merge(NOW, &single(r));
        }
        let mut batched = store(1024);
        batched.merge(NOW, &Message {
            sender: "b".into(),
            delay_ms: 0,
            opinions: records
                .iter()
                .map(|(d, r)| WireOpinion { age_ms: r.age_ms + d, since_ms: r.since_ms + d,
                    probe_ms: r.probe_ms.map(|p| p + d), ..r.clone() })
                .collect(),
        });
        prop_assert_eq!(observe(&once, NOW), observe(&reordered, NOW));
        prop_assert_eq!(observe(&once, NOW), observe(&twice, NOW));
        prop_assert_eq!(observe(&once, NOW), observe(&batched, NOW));
        prop_assert_eq!(observe(&once, NOW + 1500), observe(&reordered, NOW + 1500));
        prop_assert_eq!(observe(&once, NOW + 1500), observe(&twice, NOW + 1500));
    }

    #[test]
    fn stale_opinions_expire(
        records in prop::collection::vec((0u64..3000, record()), 1..12),
        later in 0u64..6000,
    ) {
        let mut s = store(1024);
        for (delay, r) in &records {
            s.merge(NOW, &message("b", *delay, vec![r.clone()]));
        }
        let now = NOW + later;
        for b in 0..2 {
            for p in 0..ORIGINS.len() - 1 {
                if let Some(o) = s.opinion(now, b, p) {
                    prop_assert!(o.observed_at_ms + EXPIRE >= now);
                }
            }
        }
        s.expire(now);
        let fresh = records
            .iter()
            .filter(|(d, r)| {
                r.origin != "a" && r.route != "catalog" && d + r.age_ms + later <= EXPIRE
            })
            .count();
        prop_assert!(s.held() <= fresh);
        if later > EXPIRE {
            prop_assert_eq!(s.held(), 0);
            prop_assert_eq!(s.suspicious(now, 0), None);
            prop_assert_eq!(s.suspicious(now, 1), None);
        }
    }

    #[test]
    fn suspicion_needs_fresh_evidence_from_a_peer_with_the_same_fingerprint(
        records in prop::collection::vec((0u64..3000, record()), 0..16),
        local in (0u64..100, 0u64..100),
        later in 0u64..4000,
    ) {
        let mut s = store(1024);
        let (req, fail) = (local.0.max(local.1), local.1);
        for b in 0..2 {
            s.update_local(NOW, b, LocalView {
                state: State::Closed,
                forced: false,
                since_ms: NOW - 100_000,
                requests: req,
                failures: fail,
                slow: 0,
                probe_starts: 0,
                short_circuited: 0,
                active_probes: false,
            });
        }
        for (delay, r) in &records {
            s.merge(NOW, &message("b", *delay, vec![r.clone()]));
        }
        let now = NOW + later;
        for (b, route) in [(0, "default"), (1, "checkout")] {
            let Some(until) = s.suspicious(now, b) else { continue };
            prop_assert!(until >= now);
            // Some fresh stored opinion with this instance's fingerprint is evidence.
            let evidence = (0..ORIGINS.len() - 1).any(|p| {
                s.opinion(now, b, p).is_some_and(|o| {
                    o.fingerprint == FPS[0]
                        && ((o.state() != State::Closed && !o.flags().forced)
                            || o.failures > 0
                            || o.slow > 0)
                })
            });
            prop_assert!(evidence, "suspicious without evidence on {}", route);
        }
        // Healthy peers never make anything suspicious, whatever the local window.
        let mut healthy = store(1024);
        for b in 0..2 {
            healthy.update_local(NOW, b, LocalView {
                state: State::Closed,
                forced: false,
                since_ms: NOW - 100_000,
                requests: req,
                failures: fail,
                slow: 0,
                probe_starts: 0,
                short_circuited: 0,
                active_probes: false,
            });
        }
        for (delay, r) in &records {
            let mut r = r.clone();
            (r.state, r.failures, r.slow, r.round, r.probe_ms) = (State::Closed, 0, 0, 0, None);
            healthy.merge(NOW, &message("b", *delay, vec![r]));
        }
        prop_assert_eq!(healthy.suspicious(now, 0), None);
        prop_assert_eq!(healthy.suspicious(now, 1), None);
        // Records with another fingerprint only never make anything suspicious.
        let mut other = store(1024);
        for (delay, r) in &records {
            let mut r = r.clone();
            r.fingerprint = FPS[1];
            other.merge(NOW, &message("b", *delay, vec![r]));
        }
        prop_assert_eq!(other.suspicious(now, 0), None);
        prop_assert_eq!(other.suspicious(now, 1), None);
    }

    #[test]
    fn sizes_stay_bounded(
        batches in prop::collection::vec(prop::collection::vec(record(), 0..40), 1..8),
        cap in 1usize..30,
    ) {
        let mut s = store(cap);
        for b in &batches {
            s.merge(NOW, &message("b", 0, b.clone()));
            let out = s.message(NOW);
            prop_assert!(out.opinions.len() <= cap);
            prop_assert!(s.held() <= 2 * (ORIGINS.len() - 1));
            let text = wire::render(&out);
            prop_assert!(wire::parse(text.as_bytes()).is_ok());
        }
    }

    #[test]
    fn exactly_one_instance_is_designated_when_views_agree(
        n in 1usize..10,
        names in prop::collection::vec("[a-z0-9.:-]{1,12}", 10),
        round_offset in 0u64..3,
    ) {
        let mut ids: Vec<String> = names;
        ids.sort();
        ids.dedup();
        let ids: Vec<&str> = ids.iter().take(n).map(String::as_str).collect();
        let mut stores: Vec<FleetStore> = ids
            .iter()
            .map(|id| {
                let mut s = FleetStore::new(id, &ids, cfg(1024)).unwrap();
                s.add_breaker("api", "default", FPS[0], policy()).unwrap();
                s
            })
            .collect();
        let open = |short: u64| LocalView {
            state: State::Open,
            forced: false,
            since_ms: NOW - round_offset * 1000,
            requests: 20,
            failures: 20,
            slow: 0,
            probe_starts: 0,
            short_circuited: short,
            active_probes: false,
        };
        let at = |stores: &mut Vec<FleetStore>, now: u64, short: u64| {
            for s in stores.iter_mut() {
                s.update_local(now, 0, open(short));
            }
            for i in 0..stores.len() {
                for j in 0..stores.len() {
                    if i != j {
                        let body = stores[j].render(now);
                        let p = stores[i].peer_ids().position(|x| x == ids[j]).unwrap();
                        stores[i].receive(now, p, body.as_bytes()).unwrap();
                    }
                }
            }
        };
        at(&mut stores, NOW, 0);
        at(&mut stores, NOW + 1000, 1);
        let due = NOW - round_offset * 1000 + 30_000;
        at(&mut stores, due - 1, 2);
        prop_assert!(!stores.iter().any(|s| s.designated_prober(due - 1, 0)));
        at(&mut stores, due, 3);
        let probers: Vec<&str> =
            stores.iter().filter(|s| s.designated_prober(due, 0)).map(|s| s.self_id()).collect();
        prop_assert_eq!(probers.len(), 1);
        let d = stores[0].designated(due, 0).unwrap();
        prop_assert_eq!(probers[0], d);
        prop_assert!(stores.iter().all(|s| s.designated(due, 0) == Some(d)));
    }
}

// ---------------------------------------------------------------------------------------
// The merge's cost: counted in the store's own steps ([`FleetStore::work`]), not timed.

/// Steps a merge may take per record, and per peer for each breaker it changes that is open
/// here (whose fleet round it settles once: each opinion looked at, the claims above the
/// settled round sorted and chained, the instance ranked in a few rounds).
const PER_RECORD: u64 = 2;
const PER_PEER_AND_OPEN_BREAKER: u64 = 16;

fn peer_id(i: usize) -> String {
    format!("10.0.{}.{}:8080", i / 250, i % 250)
}

/// Instance 0 of `peers + 1`, with breakers api/r0..r3: open with traffic to probe with,
/// open without, or closed, as `states` says.
fn wide_store(peers: usize, states: &[u8]) -> FleetStore {
    let ids: Vec<String> = (0..=peers).map(peer_id).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut s = FleetStore::new(refs[0], &refs, cfg(MAX_ENTRIES)).unwrap();
    for (r, &st) in states.iter().enumerate() {
        let b = s
            .add_breaker("api", &format!("r{r}"), FPS[0], policy())
            .unwrap();
        let view = |short: u64| LocalView {
            state: if st == 0 { State::Closed } else { State::Open },
            forced: false,
            since_ms: NOW - 400_000,
            requests: 20,
            failures: 20,
            slow: 0,
            probe_starts: 0,
            short_circuited: if st == 2 { short } else { 0 },
            active_probes: false,
        };
        s.update_local(NOW - 1000, b, view(1));
        s.update_local(NOW, b, view(2));
    }
    s
}

/// A crafted record, but for its origin: any of the breakers (and one this instance lacks),
/// any state, round and probe time (the odd round far ahead, or far back in time), so that
/// claims are credible or not and rank many candidates.
fn crafted() -> impl Strategy<Value = WireOpinion> {
    (
        (0usize..5, state(), 0u64..2500, any::<bool>()),
        (
            0u32..12,
            0u64..400_000,
            any::<bool>(),
            any::<bool>(),
            prop::bool::weighted(0.1),
        ),
    )
        .prop_map(
            |((route, st, age, other_fp), (round, probe, can_probe, recovered, wide))| {
                let (round, probe) = if wide {
                    (round * 1000 + 1, probe * 1000)
                } else {
                    (round, probe)
                };
                WireOpinion {
                    origin: String::new(),
                    upstream: "api".into(),
                    route: format!("r{route}"),
                    fingerprint: FPS[usize::from(other_fp && route % 2 == 0)],
                    state: st,
                    age_ms: age,
                    since_ms: age + 300_000,
                    requests: 20,
                    failures: 10,
                    slow: 0,
                    round,
                    probe_ms: (round > 0).then_some(age + probe),
                    flags: Flags {
                        can_probe,
                        recovered,
                        forced: false,
                    },
                }
            },
        )
}

/// The steps `m`'s merge takes in `s`, and the bound it must stay under.
fn merge_cost(
    s: &mut FleetStore,
    now: u64,
    m: &Message,
    states: &[u8],
    peers: usize,
) -> (u64, u64) {
    let open_named = (0..states.len())
        .filter(|&r| states[r] != 0 && m.opinions.iter().any(|o| o.route == format!("r{r}")))
        .count() as u64;
    let before = s.work();
    s.merge(now, m);
    let cost = s.work() - before;
    let bound = PER_RECORD * m.opinions.len() as u64
        + PER_PEER_AND_OPEN_BREAKER * peers as u64 * open_named.max(1);
    (cost, bound)
}

fn sender(peers: usize) -> String {
    peer_id(1.min(peers))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever a message holds — records repeated many times (each copy newer than the
    /// last), all about one breaker or spread, claims of many rounds, many peers — its merge
    /// takes at most a few steps per record, plus a few per peer for each breaker it changes
    /// that is open here (the store has four: c · (records + peers)). Before, each record
    /// settled its breaker again, and each settle ranked every candidate for every claim:
    /// records × peers².
    #[test]
    fn a_merge_costs_in_proportion_to_the_message(
        peers in prop_oneof![1usize..8, 190usize..260],
        states in prop::collection::vec(0u8..3, 4),
        first in prop::collection::vec(any::<prop::sample::Index>(), 0..600),
        repeats in 1u64..8,
        records in prop::collection::vec(any::<prop::sample::Index>(), 1..585),
        seed in prop::collection::vec((any::<usize>(), crafted()), 256),
        one_breaker in any::<bool>(),
        later in 0u64..3000,
    ) {
        let mut s = wide_store(peers, &states);
        // Seed records, each copied `n` times (the copies newer and newer), from any instance
        // of the fleet (this one included) or a stranger.
        let pick = |ix: &[prop::sample::Index], n: u64| -> Vec<WireOpinion> {
            ix.iter()
                .flat_map(|i| {
                    let (o, r) = i.get(&seed);
                    let origin = if o % 16 == 0 {
                        "stranger".into()
                    } else {
                        peer_id(o % (peers + 1))
                    };
                    let route = if one_breaker { "r0".into() } else { r.route.clone() };
                    (0..n).map(move |k| WireOpinion {
                        origin: origin.clone(),
                        route: route.clone(),
                        age_ms: r.age_ms.saturating_sub(k),
                        ..r.clone()
                    })
                })
                .collect()
        };
        // What the store held before: a message merged once.
        let earlier = Message { sender: sender(peers), delay_ms: 0, opinions: pick(&first, 1) };
        let (cost, bound) = merge_cost(&mut s, NOW, &earlier, &states, peers);
        prop_assert!(cost <= bound, "first merge: {} steps > {}", cost, bound);
        // Then a crafted one.
        let m = Message {
            sender: sender(peers),
            delay_ms: 0,
            opinions: pick(&records, repeats),
        };
        let (cost, bound) = merge_cost(&mut s, NOW + later, &m, &states, peers);
        prop_assert!(
            cost <= bound,
            "{} records, {} peers: {} steps > {}",
            m.opinions.len(), peers, cost, bound
        );
        // On the wire, a message that repeats a record is refused whole before any merge.
        let mut keys = std::collections::HashSet::new();
        let repeated = !m
            .opinions
            .iter()
            .all(|o| keys.insert((&o.origin, &o.upstream, &o.route)));
        match wire::parse(wire::render(&m).as_bytes()) {
            Ok(_) => prop_assert!(!repeated),
            Err(e) => prop_assert_eq!((repeated, e.kind), (true, ErrorKind::Duplicate)),
        }
    }
}

/// The crafted messages at full size: 200 peers and the record cap, every breaker
/// open with traffic. The record cap's worth of distinct records; the same breaker's records
/// from every origin over and over (built by hand: the parser refuses it); a round of its own
/// claimed by every origin; and, on the wire, the second refused without a step of the
/// store.
#[test]
fn a_message_at_the_record_cap_costs_in_proportion_to_it() {
    let peers = 200;
    let states = [2u8; 4];
    let record = |o: usize, r: usize| WireOpinion {
        origin: peer_id(1 + o % peers),
        upstream: "api".into(),
        route: format!("r{r}"),
        fingerprint: FPS[0],
        state: State::Open,
        age_ms: (o as u64 * 7) % 900,
        since_ms: 300_000,
        requests: 20,
        failures: 20,
        slow: 0,
        round: 1 + (o % 9) as u32,
        probe_ms: Some(1000 * (o as u64 % 300) + 900),
        flags: Flags {
            can_probe: o % 3 != 0,
            ..Flags::default()
        },
    };
    let distinct = Message {
        sender: sender(peers),
        delay_ms: 0,
        opinions: (0..MAX_ENTRIES)
            .map(|k| record(k % peers, (k / peers) % 4))
            .collect(),
    };
    let repeated = Message {
        sender: sender(peers),
        delay_ms: 0,
        opinions: (0..MAX_ENTRIES).map(|k| record(k, 0)).collect(),
    };
    // Every origin claims a round of its own, a second ago: the first counts, and the rest,
    // never credible, are sorted again at each settle.
    let rounds = Message {
        sender: sender(peers),
        delay_ms: 0,
        opinions: (0..peers)
            .map(|o| WireOpinion {
                round: 1 + o as u32,
                probe_ms: Some(1000),
                ..record(o, 0)
            })
            .collect(),
    };
    for m in [&distinct, &repeated, &rounds] {
        let mut s = wide_store(peers, &states);
        let (cost, bound) = merge_cost(&mut s, NOW, m, &states, peers);
        assert!(cost <= bound, "{cost} steps > {bound}");
        // Again, now that it is all known.
        let (cost, bound) = merge_cost(&mut s, NOW, m, &states, peers);
        assert!(cost <= bound, "again: {cost} steps > {bound}");
    }
    let mut s = wide_store(peers, &states);
    let before = (s.work(), s.held());
    let err = s
        .receive(NOW, 0, wire::render(&repeated).as_bytes())
        .unwrap_err();
    assert_eq!((err.line, err.kind), (2 + peers, ErrorKind::Duplicate));
    assert_eq!((s.work(), s.held()), before);
}
