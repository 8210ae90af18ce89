//! How long one message takes to merge: 200 peers and a message at the record cap
//! ([`wire::MAX_ENTRIES`]), through the shell's path (MAC, parse, merge). Timed, so ignored by
//! default; it prints and asserts nothing:
//!
//! ```text
//! cargo test -p circuit-breaker-core --release --test fleet_merge_time -- --ignored --nocapture
//! ```
//!
//! The bound this is measured against (the issue's: under 50 ms) is checked machine-free by
//! `fleet_properties.rs`, which counts the merge's steps instead of timing them. Only the
//! store's public calls of the first fleet release are used here, so that the same file
//! measures an older checkout.

use std::time::{Duration, Instant};

use circuit_breaker_core::fleet::auth::{FleetKey, Nonce, NONCE_BYTES};
use circuit_breaker_core::fleet::wire::{self, MAX_ENTRIES};
use circuit_breaker_core::fleet::{Flags, FleetConfig, FleetStore, LocalView, Message, Policy};
use circuit_breaker_core::fleet::{Received, WireOpinion};
use circuit_breaker_core::snapshot::State;

const T0: u64 = 50_000_000;
const PEERS: usize = 200;
const ROUTES: usize = MAX_ENTRIES.div_ceil(PEERS);
const FP: u64 = 0x5eed;

fn ids() -> Vec<String> {
    (0..=PEERS)
        .map(|i| format!("10.0.{}.{}:8080", i / 250, i % 250))
        .collect()
}

fn policy() -> Policy {
    Policy {
        min_requests: 20,
        failure_rate: 5000,
        slow_rate: 0,
        suspect_min: 5,
        probe_base_ms: 30_000,
        probe_max_ms: 300_000,
    }
}

fn open(short_circuited: u64) -> LocalView {
    LocalView {
        state: State::Open,
        forced: false,
        since_ms: T0 - 600_000,
        requests: 20,
        failures: 20,
        slow: 0,
        probe_starts: 0,
        short_circuited,
        active_probes: false,
    }
}

/// Instance 0 of 201, its `ROUTES` breakers open for ten minutes with traffic to probe with
/// (so that every claim of a round is ranked).
fn receiver() -> FleetStore {
    let ids = ids();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let cfg = FleetConfig::for_fleet(1000, refs.len());
    let mut s = FleetStore::new(refs[0], &refs, cfg).unwrap();
    for r in 0..ROUTES {
        let b = s
            .add_breaker("api", &format!("r{r}"), FP, policy())
            .unwrap();
        s.update_local(T0 - 1000, b, open(1));
        s.update_local(T0, b, open(2));
    }
    s
}

/// Origin `o`'s opinion of route `r`: open, with a claimed round of its own.
fn record(ids: &[String], o: usize, r: usize) -> WireOpinion {
    let round = (o % 9) as u32;
    let age = (o as u64 * 7) % 900;
    WireOpinion {
        origin: ids[o].clone(),
        upstream: "api".into(),
        route: format!("r{r}"),
        fingerprint: FP,
        state: State::Open,
        age_ms: age,
        since_ms: 500_000,
        requests: 20,
        failures: 20,
        slow: 0,
        round,
        probe_ms: (round > 0).then_some(age + 1000 * (o as u64 % 400)),
        flags: Flags {
            can_probe: o % 3 != 0,
            ..Flags::default()
        },
    }
}

/// The record cap's worth of records, each about another (origin, breaker): what one peer
/// may send in a fleet of 200.
fn distinct() -> Message {
    let ids = ids();
    let opinions = (0..MAX_ENTRIES)
        .map(|k| record(&ids, 1 + k % PEERS, k / PEERS))
        .collect();
    Message {
        sender: ids[1].clone(),
        delay_ms: 0,
        opinions,
    }
}

/// The issue's crafted message: the record cap's worth about one breaker, the 200 origins
/// over and over.
fn repeated() -> Message {
    let ids = ids();
    let opinions = (0..MAX_ENTRIES)
        .map(|k| record(&ids, 1 + k % PEERS, 0))
        .collect();
    Message {
        sender: ids[1].clone(),
        delay_ms: 0,
        opinions,
    }
}

/// Merges `m` as the shell does (sealed, verified, parsed, merged) into fresh copies of
/// `store`, for at most `budget` or `runs` times; prints the median and the slowest.
fn time(name: &str, store: &FleetStore, m: &Message, runs: usize, budget: Duration) {
    let key = FleetKey::new(b"0123456789abcdef0123456789abcdef").unwrap();
    let nonce = Nonce([7; NONCE_BYTES]);
    let body = wire::render(m);
    let sealed = key.seal(&nonce, body.as_bytes());
    let (mut took, mut then) = (Vec::new(), Vec::new());
    let mut outcome = String::new();
    let start = Instant::now();
    while took.len() < runs && (took.is_empty() || start.elapsed() < budget) {
        let mut s = store.clone();
        let now = T0 + 100;
        let t = Instant::now();
        let got: Result<Received, _> = s.receive_sealed(now, 0, &key, &nonce, &sealed);
        took.push(t.elapsed());
        outcome = match got {
            Ok(r) => format!("merged {}, known {}", r.merged, r.known),
            Err(e) => format!("refused: {e}"),
        };
        // The rest of the shell's step after an answer: every breaker's advice, and whether
        // to push.
        let t = Instant::now();
        for b in 0..ROUTES {
            std::hint::black_box(s.advice(now, b));
        }
        std::hint::black_box(s.take_push(now));
        then.push(t.elapsed());
    }
    took.sort();
    then.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name}: {} records ({} bytes), {PEERS} peers: merge median {:.2} ms, slowest {:.2} ms; \
         then advice and push median {:.2} ms, slowest {:.2} ms; over {} runs ({outcome})",
        m.opinions.len(),
        body.len(),
        ms(took[took.len() / 2]),
        ms(took[took.len() - 1]),
        ms(then[then.len() / 2]),
        ms(then[then.len() - 1]),
        took.len(),
    );
}

#[test]
#[ignore = "timed: run with --release --ignored --nocapture"]
fn merge_time_at_200_peers_and_the_record_cap() {
    let store = receiver();
    time(
        "distinct records",
        &store,
        &distinct(),
        21,
        Duration::from_secs(20),
    );
    time(
        "one breaker, origins repeated",
        &store,
        &repeated(),
        21,
        Duration::from_secs(20),
    );
}
