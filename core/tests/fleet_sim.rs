//! Deterministic simulations of a fleet in virtual time, with the real store and the real
//! wire format between instances. `cargo test -p circuit-breaker-core --test fleet_sim --
//! --nocapture` prints the figures the bounds below are set from.
//!
//! Each instance runs the exchange as the shell would: every interval (from its own random
//! phase) it reads its breaker into the store, pulls from `fanout` random peers the body they
//! last published, expires, then publishes its own body and its breaker's advice. Requests
//! between two ticks see the last published advice, as the request path would read it from
//! shared memory.
//!
//! The breaker is a model of the one in `core/src/breaker` plus the rule the shell is to add:
//! a 10 s window; it opens at `failure_rate` with `min_requests` attempts, or, while
//! suspicious, with `suspect_min` failures of its own; after a jittered cooldown (doubling per
//! failed probe) a request may probe if the fleet's advice allows it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use circuit_breaker_core::fleet::{
    default_fanout, wire, FleetAdvice, FleetConfig, FleetStore, LocalView, Policy,
};
use circuit_breaker_core::snapshot::State;

const T0: u64 = 1_000_000;
const INTERVAL: u64 = 1000;

/// splitmix64: deterministic, seedable, good enough for a simulation.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn u32(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }

    /// An exponential gap with this mean (ms), for Poisson arrivals.
    fn gap(&mut self, mean_ms: f64) -> u64 {
        let u = ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        (-u.ln() * mean_ms).round().max(1.0) as u64
    }
}

fn ids(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("10.0.{}.{}:8080", i / 250, i % 250))
        .collect()
}

const FP: u64 = 0x5eed;

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

fn stores(n: usize, cfg: FleetConfig) -> Vec<FleetStore> {
    let ids = ids(n);
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    refs.iter()
        .map(|id| {
            let mut s = FleetStore::new(id, &refs, cfg).unwrap();
            s.add_breaker("api", "default", FP, policy()).unwrap();
            s
        })
        .collect()
}

/// What one instance has published: its body, when it was rendered.
#[derive(Clone, Default)]
struct Published {
    body: String,
    at: u64,
}

/// Serves a published body, its age added to the header's delay.
fn serve(p: &Published, now: u64) -> Vec<u8> {
    wire::delayed(&p.body, now - p.at).unwrap().into_bytes()
}

// ---------------------------------------------------------------------------------------
// Convergence: one opinion, started at one instance, reaching all of them.

struct Spread {
    /// Intervals until every instance held the opinion.
    rounds: u64,
    /// Worst age of the opinion at an instance once all hold it (ms).
    max_age: u64,
}

fn spread(n: usize, fanout: usize, seed: u64) -> Spread {
    let cfg = FleetConfig {
        interval_ms: INTERVAL,
        fanout,
        // Long, to measure the ages opinions naturally arrive with.
        expire_ms: 100 * INTERVAL,
        max_entries: 1024,
        push_gap_ms: 10,
    };
    let mut st = stores(n, cfg);
    let mut rng = Rng(seed);
    let phase: Vec<u64> = (0..n).map(|_| rng.below(INTERVAL)).collect();
    let mut published = vec![Published::default(); n];
    for (i, s) in st.iter().enumerate() {
        published[i] = Published {
            body: s.render(T0),
            at: T0,
        };
    }
    let origin_view = LocalView {
        state: State::Closed,
        forced: false,
        since_ms: T0 - 60_000,
        requests: 12,
        failures: 9,
        slow: 0,
        probe_starts: 0,
        short_circuited: 0,
        active_probes: false,
    };
    let mut known_at: Vec<Option<u64>> = vec![None; n];
    known_at[0] = Some(T0);
    let mut max_age = 0;
    let mut all_at = None;
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> =
        (0..n).map(|i| Reverse((T0 + phase[i], i))).collect();
    while let Some(Reverse((t, i))) = heap.pop() {
        if all_at.is_some_and(|a| t > a + 20 * INTERVAL) {
            break;
        }
        if i == 0 {
            st[0].update_local(t, 0, origin_view);
        }
        let peers = st[i].pick_peers(|| rng.u32());
        for p in peers {
            let j = if p < i { p } else { p + 1 };
            let body = serve(&published[j], t);
            st[i].receive(t, p, &body).unwrap();
        }
        st[i].expire(t);
        published[i] = Published {
            body: st[i].render(t),
            at: t,
        };
        if i != 0 {
            if let Some(o) = st[i].opinion(t, 0, 0) {
                known_at[i].get_or_insert(t);
                if all_at.is_some() {
                    max_age = max_age.max(t - o.observed_at_ms);
                }
            }
        }
        if all_at.is_none() && known_at.iter().all(Option::is_some) {
            all_at = Some(t);
        }
        heap.push(Reverse((t + INTERVAL, i)));
        assert!(t < T0 + 1000 * INTERVAL, "never converged");
    }
    let all = all_at.unwrap();
    Spread {
        rounds: (all - T0).div_ceil(INTERVAL),
        max_age,
    }
}

fn spread_table(sizes: &[usize], fanouts: &[usize], seeds: u64) -> Vec<(usize, usize, u64, u64)> {
    let mut out = Vec::new();
    for &n in sizes {
        for &fanout in fanouts {
            let runs: Vec<Spread> = (0..seeds).map(|seed| spread(n, fanout, seed)).collect();
            let worst_round = runs.iter().map(|s| s.rounds).max().unwrap();
            let worst_age = runs.iter().map(|s| s.max_age).max().unwrap();
            let mean = runs.iter().map(|s| s.rounds).sum::<u64>() as f64 / seeds as f64;
            let default = if fanout == default_fanout(n) {
                " (default)"
            } else {
                ""
            };
            println!(
                "  n={n:3} fanout={fanout}{default:10}: all know after {mean:.1} rounds on \
                 average, {worst_round} at worst; oldest copy held after: {:.1} intervals",
                worst_age as f64 / INTERVAL as f64
            );
            out.push((n, fanout, worst_round, worst_age));
        }
    }
    out
}

#[test]
fn an_opinion_reaches_every_instance_in_a_few_intervals() {
    for (n, fanout, worst_round, worst_age) in spread_table(&[8, 50, 200], &[3], 5) {
        let cfg = FleetConfig::for_fleet(INTERVAL, n);
        assert_eq!(cfg.fanout, fanout);
        // The default expiry outlasts the oldest copy an instance holds.
        assert!(
            worst_age < cfg.expire_ms,
            "n={n}: age {worst_age} vs expiry"
        );
        assert!(worst_round <= [3, 4, 5][[8, 50, 200].iter().position(|&x| x == n).unwrap()]);
    }
}

// ---------------------------------------------------------------------------------------
// An outage in a fleet of 8.

struct Breaker {
    window: VecDeque<(u64, bool)>,
    state: State,
    since: u64,
    retry_at: u64,
    cooldown: u64,
    half_opened: u64,
    short_circuited: u64,
    good_probes: u32,
}

const WINDOW_MS: u64 = 10_000;
const MIN_REQUESTS: usize = 20;
const OPEN_MS: u64 = 30_000;
const MAX_OPEN_MS: u64 = 300_000;

impl Breaker {
    fn new() -> Breaker {
        Breaker {
            window: VecDeque::new(),
            state: State::Closed,
            since: T0,
            retry_at: 0,
            cooldown: OPEN_MS,
            half_opened: 0,
            short_circuited: 0,
            good_probes: 0,
        }
    }

    fn prune(&mut self, now: u64) {
        while self
            .window
            .front()
            .is_some_and(|&(t, _)| t + WINDOW_MS <= now)
        {
            self.window.pop_front();
        }
    }

    fn counts(&mut self, now: u64) -> (usize, usize) {
        self.prune(now);
        let f = self.window.iter().filter(|&&(_, failed)| failed).count();
        (self.window.len(), f)
    }

    fn view(&mut self, now: u64) -> LocalView {
        let (r, f) = self.counts(now);
        LocalView {
            state: self.state,
            forced: false,
            since_ms: self.since,
            requests: r as u64,
            failures: f as u64,
            slow: 0,
            probe_starts: self.half_opened,
            short_circuited: self.short_circuited,
            active_probes: false,
        }
    }

    fn open(&mut self, now: u64, rng: &mut Rng) {
        // jitter=20%: the cooldown spread over [0.8, 1.2] of its base.
        let spread = self.cooldown / 5;
        self.retry_at = now + self.cooldown - spread + rng.below(2 * spread + 1);
        self.state = State::Open;
        self.since = now;
    }
}

struct Outage {
    n: usize,
    /// Exchange interval (ms).
    interval: u64,
    rate: f64,
    fanout: usize,
    suspect_min: usize,
    /// Which instances see the origin fail (the rest see it healthy).
    failing: Vec<bool>,
    /// Instances that die (stop exchanging and serving) at `dead_from`.
    dead: Vec<bool>,
    dead_from: u64,
    /// Simulated time after T0.
    duration: u64,
    /// Serve own opinions as of the pull (the store in shared memory) rather than as of the
    /// server's last round.
    live_own: bool,
    /// Run rounds after a quarter interval while the store says to hurry.
    hurry: bool,
    seed: u64,
}

#[derive(Debug, Default)]
struct OutageResult {
    /// Failing requests the origin received before every failing-path instance was open.
    failing_before_all_open: u64,
    /// When the last of them opened (ms after T0).
    all_open_after: Option<u64>,
    /// Probes that reached the origin, by time.
    probes: Vec<u64>,
    /// Instances that ever opened.
    opened: Vec<bool>,
    /// Instances that were ever suspicious.
    suspected: Vec<bool>,
}

fn outage(o: &Outage) -> OutageResult {
    let n = o.n;
    let cfg = FleetConfig {
        fanout: o.fanout,
        ..FleetConfig::for_fleet(o.interval, n)
    };
    let mut st = stores(n, cfg);
    let mut rng = Rng(o.seed);
    let mut br: Vec<Breaker> = (0..n).map(|_| Breaker::new()).collect();
    let mut advice = vec![FleetAdvice::default(); n];
    let mut published = vec![Published::default(); n];
    for (i, s) in st.iter().enumerate() {
        published[i] = Published {
            body: s.render(T0),
            at: T0,
        };
    }
    let mut res = OutageResult {
        opened: vec![false; n],
        suspected: vec![false; n],
        ..OutageResult::default()
    };
    // Events: (time, kind 0 = tick / 1 = request, instance).
    let mut heap: BinaryHeap<Reverse<(u64, u8, usize)>> = BinaryHeap::new();
    for i in 0..n {
        heap.push(Reverse((T0 + rng.below(o.interval), 0, i)));
        let mean = 1000.0 / o.rate;
        heap.push(Reverse((T0 + rng.gap(mean), 1, i)));
    }
    let end = T0 + o.duration;
    let mut last_pull = vec![0u64; n];
    let failing_count = o.failing.iter().filter(|&&f| f).count();
    while let Some(Reverse((t, kind, i))) = heap.pop() {
        if t > end {
            break;
        }
        let dead = o.dead[i] && t >= o.dead_from;
        if kind == 0 {
            if !dead {
                let v = br[i].view(t);
                st[i].update_local(t, 0, v);
                // With `hurry`, the worker wakes every quarter interval but pulls only when
                // the store asks to hurry or a whole interval has passed.
                let pull = !o.hurry || t >= last_pull[i] + o.interval || st[i].hurry(t);
                if pull {
                    last_pull[i] = t;
                }
                let peers = if pull {
                    st[i].pick_peers(|| rng.u32())
                } else {
                    Vec::new()
                };
                for p in peers {
                    let j = if p < i { p } else { p + 1 };
                    if o.dead[j] && t >= o.dead_from {
                        st[i].peer_failed(t, p);
                    } else {
                        let body = if o.live_own {
                            let v = br[j].view(t);
                            st[j].update_local(t, 0, v);
                            st[j].render(t).into_bytes()
                        } else {
                            serve(&published[j], t)
                        };
                        st[i].receive(t, p, &body).unwrap();
                    }
                }
                st[i].expire(t);
                published[i] = Published {
                    body: st[i].render(t),
                    at: t,
                };
                advice[i] = st[i].advice(t, 0);
                if advice[i].suspicious_until_ms.is_some() {
                    res.suspected[i] = true;
                }
            }
            let next = if o.hurry { o.interval / 4 } else { o.interval };
            heap.push(Reverse((t + next, 0, i)));
            continue;
        }
        if dead {
            // A dead instance serves no one either.
            continue;
        }
        heap.push(Reverse((t + rng.gap(1000.0 / o.rate), 1, i)));
        let fails = o.failing[i];
        let b = &mut br[i];
        match b.state {
            State::Closed => {
                if fails && res.all_open_after.is_none() {
                    res.failing_before_all_open += 1;
                }
                b.window.push_back((t, fails));
                let (r, f) = b.counts(t);
                let rate_ok = f * 2 >= r;
                let suspicious = advice[i].suspicious_until_ms.is_some_and(|u| u >= t);
                if rate_ok && (r >= MIN_REQUESTS || (suspicious && f >= o.suspect_min)) {
                    b.open(t, &mut rng);
                    res.opened[i] = true;
                    let all = (0..n).all(|k| !o.failing[k] || br[k].state != State::Closed);
                    if all && failing_count > 0 && res.all_open_after.is_none() {
                        res.all_open_after = Some(t - T0);
                    }
                }
            }
            State::Open => {
                let fleet_ok =
                    advice[i].probe_from_ms.is_some_and(|p| p <= t) || advice[i].peers_recovered;
                if t >= b.retry_at && (fleet_ok || o.fanout == 0) {
                    // The probe: one request to the origin.
                    b.half_opened += 1;
                    res.probes.push(t - T0);
                    if std::env::var("SIM_DEBUG").is_ok() {
                        let v = st[i].breaker_view(t, 0).unwrap();
                        eprintln!(
                            "probe t={} by {i}: advice {:?} round {} designated {:?} agreeing {} open {}",
                            t - T0,
                            advice[i],
                            v.round,
                            v.designated,
                            v.agreeing_peers,
                            v.open_peers
                        );
                    }
                    if fails {
                        b.cooldown = (b.cooldown * 2).min(MAX_OPEN_MS);
                        b.open(t, &mut rng);
                    } else {
                        b.good_probes += 1;
                        b.state = State::Closed;
                        b.since = t;
                        b.window.clear();
                        b.cooldown = OPEN_MS;
                    }
                } else {
                    b.short_circuited += 1;
                }
            }
            State::HalfOpen => unreachable!("probes complete at once in this model"),
        }
    }
    res
}

fn fleet_of_8(rate: f64, fanout: usize, seed: u64) -> Outage {
    Outage {
        n: 8,
        interval: INTERVAL,
        rate,
        fanout,
        suspect_min: 5,
        failing: vec![true; 8],
        dead: vec![false; 8],
        dead_from: u64::MAX,
        duration: 600_000,
        live_own: false,
        hurry: false,
        seed,
    }
}

/// The most probes within any span of `span` ms.
fn densest(probes: &[u64], span: u64) -> usize {
    (0..probes.len())
        .map(|i| {
            probes[i..]
                .iter()
                .take_while(|&&p| p < probes[i] + span)
                .count()
        })
        .max()
        .unwrap_or(0)
}

struct Row {
    mean: f64,
    worst: u64,
    open_after_s: f64,
    probes: usize,
    densest: usize,
}

#[derive(Clone, Copy)]
struct Mode {
    fanout: usize,
    suspect_min: usize,
    live_own: bool,
    hurry: bool,
}

/// The design the shell is to build: the default fanout, bodies published once per round,
/// quarter-interval wake-ups that pull early while [`FleetStore::hurry`] says so.
const RECOMMENDED: Mode = Mode {
    fanout: 3,
    suspect_min: 5,
    live_own: false,
    hurry: true,
};

/// The exchange exactly as the brief states it: every 1 s, no hurry.
const PLAIN: Mode = Mode {
    hurry: false,
    ..RECOMMENDED
};

const ALONE: Mode = Mode { fanout: 0, ..PLAIN };

fn row(rate: f64, m: Mode, seeds: u64, duration: u64) -> Row {
    let runs: Vec<OutageResult> = (0..seeds)
        .map(|seed| {
            outage(&Outage {
                suspect_min: m.suspect_min,
                live_own: m.live_own,
                hurry: m.hurry,
                duration,
                ..fleet_of_8(rate, m.fanout, seed)
            })
        })
        .collect();
    let failing: Vec<u64> = runs.iter().map(|r| r.failing_before_all_open).collect();
    let opened: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.all_open_after.map(|t| t as f64 / 1000.0))
        .collect();
    Row {
        mean: failing.iter().sum::<u64>() as f64 / seeds as f64,
        worst: *failing.iter().max().unwrap(),
        open_after_s: if opened.len() == runs.len() {
            opened.iter().sum::<f64>() / opened.len() as f64
        } else {
            f64::INFINITY
        },
        probes: runs.iter().map(|r| r.probes.len()).max().unwrap(),
        densest: runs
            .iter()
            .map(|r| densest(&r.probes, OPEN_MS))
            .max()
            .unwrap(),
    }
}

fn print_row(rate: f64, label: &str, r: &Row) {
    println!(
        "  r={rate:2} {label:24} failing {:5.1} / {:3}   all open after {:5.1} s   \
         probes {:2}, at most {} within 30 s",
        r.mean, r.worst, r.open_after_s, r.probes, r.densest
    );
}

#[test]
fn eight_instances_pay_for_an_outage_about_once() {
    // 100 s: the outage, the first fleet probe (~30 s) and the second (~90 s).
    for rate in [1.0, 2.0, 4.0, 10.0] {
        let plain = row(rate, PLAIN, 5, 100_000);
        let best = row(rate, RECOMMENDED, 5, 100_000);
        print_row(rate, "every 1 s", &plain);
        print_row(rate, "every 1 s, hurrying", &best);
        for r in [&plain, &best] {
            assert!(r.open_after_s.is_finite(), "r={rate}: not all opened");
            assert!(r.densest <= 2, "r={rate}: {} probes within 30 s", r.densest);
            assert!(r.probes <= 3, "r={rate}: {} probes in 100 s", r.probes);
        }
        // Bounds a little above the figures of `report` (20 seeds), which docs/fleet.md quotes.
        let (plain_max, best_max) = match rate as u32 {
            1 => (52, 48),
            2 => (60, 48),
            4 => (76, 56),
            _ => (125, 88),
        };
        assert!(
            plain.worst <= plain_max,
            "r={rate}: {} failing",
            plain.worst
        );
        assert!(best.worst <= best_max, "r={rate}: {} failing", best.worst);
        assert!(best.mean <= plain.mean);
    }
}

/// The figures of the report: `cargo test --release -p circuit-breaker-core --test fleet_sim
/// -- --ignored --nocapture`.
#[test]
#[ignore = "a report (about two minutes in release): run with --ignored --nocapture"]
fn report() {
    println!("one opinion spreading (10 seeds):");
    spread_table(&[8, 50, 200], &[1, 2, 3, 4], 10);
    let seeds = 20;
    println!();
    println!("8 instances, Poisson arrivals at r req/s each, origin failing every request,");
    println!("window=10s min_requests=20 failure_rate=50% open=30s (doubling) jitter=20%;");
    println!(
        "failing requests at the origin before all 8 are open (mean / worst of {seeds} seeds),"
    );
    println!("mean time until all are open, most probes in 10 minutes and within any 30 s:");
    for rate in [1.0, 2.0, 4.0, 10.0] {
        print_row(rate, "alone", &row(rate, ALONE, seeds, 600_000));
        for suspect_min in [5, 3] {
            for (label, m) in [("every 1 s", PLAIN), ("every 1 s, hurrying", RECOMMENDED)] {
                let m = Mode { suspect_min, ..m };
                print_row(
                    rate,
                    &format!("{label}, s={suspect_min}"),
                    &row(rate, m, seeds, 600_000),
                );
            }
            let m = Mode {
                suspect_min,
                live_own: true,
                ..RECOMMENDED
            };
            print_row(
                rate,
                &format!("+ live own, s={suspect_min}"),
                &row(rate, m, seeds, 600_000),
            );
        }
    }
    let r = outage(&Outage {
        hurry: true,
        ..fleet_of_8(4.0, 3, 0)
    });
    println!(
        "fleet probes of one run (s after the outage began): {:?}",
        r.probes
    );
}

#[test]
fn a_failure_seen_by_one_instance_opens_no_other() {
    for rate in [2.0, 10.0] {
        let mut o = fleet_of_8(rate, default_fanout(8), 3);
        o.failing = (0..8).map(|i| i == 0).collect();
        o.hurry = true;
        o.duration = 60_000;
        let r = outage(&o);
        assert!(r.opened[0]);
        assert!(
            r.suspected[1..].iter().all(|&s| s),
            "the others heard of it"
        );
        assert!(
            r.opened[1..].iter().all(|&x| !x),
            "but opened on nothing of their own"
        );
    }
}

#[test]
fn silent_peers_change_no_local_decision() {
    // Seven of eight die before the outage: the last one opens on its own evidence,
    // exactly when it would alone.
    for seed in 0..3 {
        let mut o = fleet_of_8(4.0, default_fanout(8), seed);
        o.dead = (0..8).map(|i| i != 0).collect();
        o.dead_from = T0;
        o.failing = (0..8).map(|i| i == 0).collect();
        o.hurry = true;
        o.duration = 20_000;
        let with = outage(&o);
        o.fanout = 0;
        let alone = outage(&o);
        assert_eq!(with.failing_before_all_open, alone.failing_before_all_open);
        assert_eq!(with.failing_before_all_open, MIN_REQUESTS as u64);
    }
}

#[test]
fn when_the_prober_vanishes_another_takes_over() {
    // All open; the first fleet probe; then one instance dies right after it. The next
    // probe still comes when due (60 s later, doubled), from another instance if need be.
    let first = outage(&fleet_of_8(4.0, 3, 11)).probes[0];
    let mut worst_gap = 0;
    for victim in 0..8 {
        let mut k = fleet_of_8(4.0, 3, 11);
        k.dead = (0..8).map(|i| i == victim).collect();
        k.dead_from = T0 + first + 1;
        k.duration = 100_000;
        let r = outage(&k);
        let after: Vec<u64> = r.probes.iter().copied().filter(|&p| p > first).collect();
        assert!(!after.is_empty(), "victim {victim}: nobody probed again");
        worst_gap = worst_gap.max(after[0] - first);
        // The prober that dies before anyone heard of its probe costs one extra probe, an
        // expiry later: two within 30 s, never more.
        assert!(
            densest(&r.probes, OPEN_MS) <= 2,
            "victim {victim}: {:?}",
            r.probes
        );
    }
    assert!(worst_gap <= 60_000 + 2 * INTERVAL, "{worst_gap}");
}
