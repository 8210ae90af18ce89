//! The adaptive limit against a queueing origin in virtual time: `c` workers, a service time
//! (exponentially distributed around its mean), a FIFO queue, Poisson clients, four nginx
//! workers that pre-aggregate samples and flush every 25 ms or 32 samples (or, with `lazy`,
//! at their next answer or shed, as nginx's do). Deterministic (seeded); run with
//! `--nocapture` to see the figures.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use circuit_breaker_core::limit::{LimitConfig, Limiter, Samples};

const NGINX_WORKERS: usize = 4;
const FLUSH_US: u64 = 25_000;
const FLUSH_SAMPLES: u32 = 32;
const RECLAIM_US: u64 = 500_000;

/// splitmix64: small, seedable, good enough for arrivals and service times.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn exp_us(&mut self, mean_us: f64) -> u64 {
        (-self.unit().ln() * mean_us).round().max(1.0) as u64
    }
    fn u32(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }
}

#[derive(Clone, Copy)]
struct Scenario {
    workers: usize,
    service_ms: f64,
    /// Service time multiplier during `sick`.
    sick_factor: f64,
    /// Start and end of the slowdown, milliseconds.
    sick: (u64, u64),
    rate: f64,
    retry_once: bool,
    seconds: u64,
    cfg: LimitConfig,
    seed: u64,
    /// Every job takes the service time, up to 2 % more (the lab's pool origin), instead of an
    /// exponentially distributed one.
    fixed: bool,
    /// Start and end of a pause, milliseconds: the origin (or the machine) stops, and every
    /// job in service or started meanwhile ends that much later.
    pause: (u64, u64),
    /// Workers flush as nginx's do, at an answer or a shed once their oldest sample is
    /// `FLUSH_US` old (or at `FLUSH_SAMPLES`), or at a shed `RECLAIM_US` after the last
    /// flush; instead of on a timer. A pause then ends an interval on the answers from
    /// before it, flushed by the first shed in it.
    lazy: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive { retry: bool, client: u64 },
    Done { req: usize },
    Flush { worker: usize },
}

struct Req {
    admit_us: u64,
    worker: usize,
    client: u64,
}

/// One 100 ms slice of the run.
#[derive(Clone, Copy, Default)]
struct Slice {
    limit: u32,
    inflight_us: u64,
    done: u64,
    shed: u64,
    lat_sum_ms: u64,
}

struct Run {
    slices: Vec<Slice>,
    /// (admit time µs, latency ms) of every completion.
    lat: Vec<(u64, u64)>,
    /// Per client request: (arrival µs, succeeded).
    clients: Vec<(u64, bool)>,
    updates: Vec<(u64, u32, u32, f64, f64, String)>,
    /// Admission time of every attempt sent to the origin, µs.
    attempts: Vec<u64>,
}

fn simulate(sc: &Scenario) -> Run {
    let mut rng = Rng(sc.seed);
    let mut lim = Limiter::new(sc.cfg, 0);
    let end_us = sc.seconds * 1_000_000;
    let mut ev: BinaryHeap<Reverse<(u64, u64, Ev)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |ev: &mut BinaryHeap<Reverse<(u64, u64, Ev)>>, t: u64, e: Ev| {
        seq += 1;
        ev.push(Reverse((t, seq, e)));
    };
    push(
        &mut ev,
        rng.exp_us(1e6 / sc.rate),
        Ev::Arrive {
            retry: false,
            client: 0,
        },
    );
    for w in (0..NGINX_WORKERS).filter(|_| !sc.lazy) {
        push(
            &mut ev,
            FLUSH_US * (w as u64 + 1) / NGINX_WORKERS as u64,
            Ev::Flush { worker: w },
        );
    }
    let mut aggs = [Samples::EMPTY; NGINX_WORKERS];
    // Lazy flushes: when each worker's oldest unflushed sample came, and its last flush.
    let mut since: [Option<u64>; NGINX_WORKERS] = [None; NGINX_WORKERS];
    let mut flushed = [0u64; NGINX_WORKERS];
    let mut reqs: Vec<Req> = Vec::new();
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut busy = 0usize;
    let mut inflight = 0u32;
    let mut next_client = 1u64;
    let mut run = Run {
        slices: vec![Slice::default(); (sc.seconds * 10) as usize],
        lat: Vec::new(),
        clients: vec![(0, false)],
        updates: Vec::new(),
        attempts: Vec::new(),
    };
    let mut last_t = 0u64;
    let service = |t: u64| {
        let s = sc.service_ms * 1000.0;
        if t >= sc.sick.0 * 1000 && t < sc.sick.1 * 1000 {
            s * sc.sick_factor
        } else {
            s
        }
    };
    let take = |rng: &mut Rng, t: u64| {
        if sc.fixed {
            // The lab's origin sleeps the service time, and wakes up to 2 % late: it measured
            // floors of 30.0 to 30.6 ms for 30 ms. (Exactly 30 ms locks its four workers in
            // step, and then a 0.5 s window holds 68 answers far more often than the lab's.)
            (service(t) * (1.0 + 0.02 * rng.unit())).round() as u64
        } else {
            rng.exp_us(service(t))
        }
    };
    // When a job started at `t` that takes `d` ends, the pause included.
    let ends = |t: u64, d: u64| {
        let (from, to) = (sc.pause.0 * 1000, sc.pause.1 * 1000);
        if t < to && t + d > from {
            t + d + (to - t.max(from))
        } else {
            t + d
        }
    };

    while let Some(Reverse((t, _, e))) = ev.pop() {
        if t >= end_us {
            break;
        }
        // In-flight integrated over time, per slice.
        let mut a = last_t;
        while a < t {
            let slice_end = (a / 100_000 + 1) * 100_000;
            let b = slice_end.min(t);
            run.slices[(a / 100_000) as usize].inflight_us += u64::from(inflight) * (b - a);
            a = b;
        }
        last_t = t;
        let now_ms = t / 1000;
        let slice = (t / 100_000) as usize;
        let flush = |w: usize,
                     aggs: &mut [Samples; NGINX_WORKERS],
                     since: &mut [Option<u64>; NGINX_WORKERS],
                     rng: &mut Rng,
                     run: &mut Run,
                     lim: &mut Limiter| {
            let s = std::mem::replace(&mut aggs[w], Samples::EMPTY);
            since[w] = None;
            if let Some(u) = lim.record(now_ms, &s, rng.u32()) {
                run.updates.push((
                    now_ms,
                    u.from,
                    u.to,
                    u.sample_ms,
                    u.min_latency_ms,
                    format!("{:?} n={}", u.min_change, u.samples),
                ));
            }
        };
        match e {
            Ev::Arrive { retry, client } => {
                let client = if retry {
                    client
                } else {
                    let c = next_client;
                    next_client += 1;
                    run.clients.push((t, false));
                    push(
                        &mut ev,
                        t + rng.exp_us(1e6 / sc.rate),
                        Ev::Arrive {
                            retry: false,
                            client: 0,
                        },
                    );
                    c
                };
                let w = (rng.next() % NGINX_WORKERS as u64) as usize;
                if inflight < lim.limit() {
                    inflight += 1;
                    aggs[w].note_inflight(inflight);
                    reqs.push(Req {
                        admit_us: t,
                        worker: w,
                        client,
                    });
                    let id = reqs.len() - 1;
                    run.attempts.push(t);
                    if busy < sc.workers {
                        busy += 1;
                        push(&mut ev, ends(t, take(&mut rng, t)), Ev::Done { req: id });
                    } else {
                        queue.push_back(id);
                    }
                } else {
                    run.slices[slice].shed += 1;
                    aggs[w].add_full();
                    let first = *since[w].get_or_insert(t);
                    if sc.lazy && (t - first >= FLUSH_US || t - flushed[w] >= RECLAIM_US) {
                        flushed[w] = t;
                        flush(w, &mut aggs, &mut since, &mut rng, &mut run, &mut lim);
                    }
                    if sc.retry_once && !retry {
                        push(
                            &mut ev,
                            t + 1,
                            Ev::Arrive {
                                retry: true,
                                client,
                            },
                        );
                    }
                }
            }
            Ev::Done { req } => {
                let r = &reqs[req];
                let ms = t / 1000 - r.admit_us / 1000;
                aggs[r.worker].note_inflight(inflight);
                inflight -= 1;
                run.clients[r.client as usize].1 = true;
                run.lat.push((r.admit_us, ms));
                let sl = &mut run.slices[slice];
                sl.done += 1;
                sl.lat_sum_ms += ms;
                let w = r.worker;
                if r.admit_us / 1000 > lim.clean_since() {
                    aggs[w].add_clean(ms);
                } else {
                    aggs[w].add(ms);
                }
                let first = *since[w].get_or_insert(t);
                if aggs[w].count >= FLUSH_SAMPLES || sc.lazy && t - first >= FLUSH_US {
                    flushed[w] = t;
                    flush(w, &mut aggs, &mut since, &mut rng, &mut run, &mut lim);
                }
                if let Some(next) = queue.pop_front() {
                    push(&mut ev, ends(t, take(&mut rng, t)), Ev::Done { req: next });
                } else {
                    busy -= 1;
                }
            }
            Ev::Flush { worker } => {
                if !aggs[worker].is_empty() {
                    flush(worker, &mut aggs, &mut since, &mut rng, &mut run, &mut lim);
                }
                push(&mut ev, t + FLUSH_US, Ev::Flush { worker });
            }
        }
        run.slices[slice].limit = lim.limit();
    }
    run
}

struct Summary {
    inflight: f64,
    limit: f64,
    throughput: f64,
    lat_mean: f64,
    lat_p99: u64,
    shed_share: f64,
}

/// Figures over `[from_s, to_s)`.
fn summary(run: &Run, from_s: u64, to_s: u64) -> Summary {
    let sl = &run.slices[(from_s * 10) as usize..(to_s * 10) as usize];
    let secs = (to_s - from_s) as f64;
    let done: u64 = sl.iter().map(|s| s.done).sum();
    let shed: u64 = sl.iter().map(|s| s.shed).sum();
    let mut lat: Vec<u64> = run
        .lat
        .iter()
        .filter(|(a, _)| *a >= from_s * 1_000_000 && *a < to_s * 1_000_000)
        .map(|(_, l)| *l)
        .collect();
    lat.sort_unstable();
    Summary {
        inflight: sl.iter().map(|s| s.inflight_us).sum::<u64>() as f64 / (secs * 1e6),
        limit: sl.iter().map(|s| f64::from(s.limit)).sum::<f64>() / sl.len() as f64,
        throughput: done as f64 / secs,
        lat_mean: lat.iter().sum::<u64>() as f64 / lat.len().max(1) as f64,
        lat_p99: lat.get(lat.len() * 99 / 100).copied().unwrap_or(0),
        shed_share: shed as f64 / (shed + done).max(1) as f64,
    }
}

fn print_slices(run: &Run, from_s: f64, to_s: f64) {
    for (i, s) in run.slices.iter().enumerate() {
        let t = i as f64 / 10.0;
        if t >= from_s && t < to_s {
            println!(
                "  t={t:5.1}s limit={:4} inflight={:6.2} done={:4} shed={:4} lat={:6.1}ms",
                s.limit,
                s.inflight_us as f64 / 100_000.0,
                s.done,
                s.shed,
                s.lat_sum_ms as f64 / s.done.max(1) as f64
            );
        }
    }
}

fn capacity(sc: &Scenario, factor: f64) -> f64 {
    sc.workers as f64 * 1000.0 / (sc.service_ms * factor)
}

/// A healthy origin of `workers` at `load` of its capacity, for 20 s, with the defaults.
fn steady(workers: usize, service_ms: f64, load: f64, seed: u64) -> Scenario {
    let mut sc = Scenario {
        workers,
        service_ms,
        sick_factor: 1.0,
        sick: (0, 0),
        rate: 0.0,
        retry_once: false,
        seconds: 20,
        cfg: LimitConfig::default(),
        seed,
        fixed: false,
        pause: (0, 0),
        lazy: false,
    };
    sc.rate = capacity(&sc, 1.0) * load;
    sc
}

fn run_steady(workers: usize, service_ms: f64, load: f64, seed: u64) -> (Scenario, Run) {
    let sc = steady(workers, service_ms, load, seed);
    let run = simulate(&sc);
    if std::env::var("SIM_TRACE").is_ok() {
        for u in run.updates.iter().take(80) {
            println!(
                "  update t={} {}→{} sample {:.1} min {:.1} {}",
                u.0, u.1, u.2, u.3, u.4, u.5
            );
        }
    }
    (sc, run)
}

#[test]
fn steady_overload_keeps_the_origin_busy_with_a_short_queue() {
    for (c, s, over) in [
        (4, 5.0, 1.5),
        (4, 5.0, 3.0),
        (16, 10.0, 1.5),
        (64, 20.0, 2.0),
    ] {
        for seed in 1..=5 {
            let (sc, run) = run_steady(c, s, over, seed);
            let sum = summary(&run, 5, 20);
            let cap = capacity(&sc, 1.0);
            let tol = f64::from(sc.cfg.tolerance) / 10_000.0;
            let eq = c as f64 * (1.0 + tol);
            println!(
                "overload: c={c} s={s}ms λ={:.0}/s ({over}× capacity {cap:.0}/s): in-flight {:.2} (c·(1+tol) = {eq:.1}, +√ = {:.1}), limit {:.1}, throughput {:.1} % of capacity, latency mean {:.1} ms ({:.2}× s) p99 {} ms",
                sc.rate, sum.inflight, eq + eq.sqrt(), sum.limit, 100.0 * sum.throughput / cap,
                sum.lat_mean, sum.lat_mean / s, sum.lat_p99
            );
            assert!(
                sum.throughput >= 0.93 * cap,
                "throughput {} of {}",
                sum.throughput,
                cap
            );
            assert!(
                sum.inflight >= c as f64,
                "in-flight {} below the workers",
                sum.inflight
            );
            assert!(
                sum.inflight <= 1.7 * c as f64 + 4.0,
                "in-flight {}",
                sum.inflight
            );
            assert!(
                sum.lat_mean <= 2.0 * s,
                "queueing latency {} ms",
                sum.lat_mean
            );
        }
    }
}

#[test]
fn a_healthy_origin_sheds_nothing_but_its_own_queues() {
    // (workers, service ms, load, largest share shed after the first second in any run, and
    // on average). Exponential origins near their capacity queue on their own (M/M/1 at 70 %:
    // means of 2 to 30 ms in 100 ms); in some runs the limit trims those queues a little.
    for (c, s, load, most, mean) in [
        (4, 5.0, 0.5, 0.0, 0.0),
        (4, 5.0, 0.8, 0.05, 0.005),
        (16, 10.0, 0.7, 0.0, 0.0),
        (64, 20.0, 0.8, 0.0, 0.0),
        (1, 2.0, 0.5, 0.01, 0.001),
        (1, 2.0, 0.7, 0.05, 0.005),
    ] {
        let mut sum = 0.0;
        for seed in 1..=SEEDS {
            let (_, run) = run_steady(c, s, load, 100 + seed);
            let start = summary(&run, 0, 1);
            let rest = summary(&run, 1, 20);
            println!(
                "healthy: c={c} s={s}ms load {load}: shed {:.2} % in the first second (from limit_initial), {:.3} % after; in-flight {:.2}, limit {:.1}, latency mean {:.1} ms",
                100.0 * start.shed_share, 100.0 * rest.shed_share, rest.inflight, rest.limit, rest.lat_mean
            );
            assert!(
                rest.shed_share <= most,
                "c={c} s={s} load={load} seed={seed}"
            );
            sum += rest.shed_share;
        }
        let avg = sum / SEEDS as f64;
        println!(
            "healthy: c={c} s={s}ms load {load}: {:.3} % shed on average",
            100.0 * avg
        );
        assert!(avg <= mean, "c={c} s={s} load={load}: {:.3} %", 100.0 * avg);
    }
}

/// Runs per healthy scenario: a queue that the origin's own randomness builds comes in some
/// runs only.
const SEEDS: u64 = 40;

fn sick(rate: f64, retry_once: bool, seed: u64, fixed: bool) -> (Scenario, Run) {
    let sc = Scenario {
        workers: 4,
        service_ms: 5.0,
        sick_factor: 6.0,
        sick: (10_000, 15_000),
        rate,
        retry_once,
        seconds: 20,
        cfg: LimitConfig::default(),
        seed,
        fixed,
        pause: (0, 0),
        lazy: false,
    };
    let run = simulate(&sc);
    (sc, run)
}

#[test]
fn a_six_fold_slowdown_is_limited_within_ms_and_released_within_a_second() {
    // The overload (clients at half the healthy capacity, retrying a failure once)
    // and a harder one (clients at 1.5× the healthy capacity, 9× the sick one).
    for (rate, retry) in [(400.0, true), (1200.0, false)] {
        for seed in 1..=5 {
            let (sc, run) = sick(rate, retry, 10 * seed + u64::from(retry), false);
            let before = summary(&run, 5, 10);
            let during = summary(&run, 11, 15);
            let after = summary(&run, 16, 20);
            let sick_cap = capacity(&sc, 6.0);
            // Settled: from this slice on, the limit stays within twice its mean while sick.
            let settled = run.slices[100..150]
                .iter()
                .rposition(|s| f64::from(s.limit) > 2.0 * during.limit)
                .map_or(0, |i| (i as u64 + 1) * 100);
            // Falls: the limit at most half what it was before.
            let falls = run.slices[100..]
                .iter()
                .position(|s| f64::from(s.limit) <= 0.5 * before.limit)
                .map_or(u64::MAX, |i| (i as u64 + 1) * 100);
            let first_shed = run.slices[100..]
                .iter()
                .position(|s| s.shed > 0)
                .map_or(u64::MAX, |i| i as u64 * 100);
            let peak = run.slices[100..150]
                .iter()
                .map(|s| s.inflight_us as f64 / 100_000.0)
                .fold(0.0, f64::max);
            // Back: within capacity, the first slice from which nothing more is shed; still
            // overloaded, the first slice at which the limit is back at its level before.
            let back = if rate < capacity(&sc, 1.0) {
                run.slices[150..]
                    .iter()
                    .rposition(|s| s.shed > 0)
                    .map_or(0, |i| (i as u64 + 1) * 100)
            } else {
                run.slices[150..]
                    .iter()
                    .position(|s| f64::from(s.limit) >= 0.9 * before.limit)
                    .map_or(u64::MAX, |i| i as u64 * 100)
            };
            let sick_clients: Vec<_> = run
                .clients
                .iter()
                .filter(|(a, _)| *a >= 10_000_000 && *a < 15_000_000)
                .collect();
            let ok = sick_clients.iter().filter(|(_, ok)| *ok).count() as f64
                / sick_clients.len() as f64;
            let share = sick_cap / rate;
            println!(
                "6× for 5 s, λ={rate}/s retry={retry} seed {seed}: before: limit {:.1}, in-flight {:.2}, latency {:.1} ms | first shed +{first_shed} ms, limit halved +{falls} ms, settled +{settled} ms, peak in-flight {peak:.1} | sick: limit {:.1}, in-flight {:.2}, throughput {:.0} % of capacity, latency {:.0} ms (p99 {} ms), client success {:.1} % (capacity share {:.1} %) | after: back +{back} ms, limit {:.1}, in-flight {:.2}, latency {:.1} ms",
                before.limit, before.inflight, before.lat_mean, during.limit, during.inflight,
                100.0 * during.throughput / sick_cap, during.lat_mean, during.lat_p99,
                100.0 * ok, 100.0 * share, after.limit, after.inflight, after.lat_mean
            );
            if std::env::var("SIM_TRACE").is_ok() {
                print_slices(&run, 9.5, 11.5);
                print_slices(&run, 14.5, 16.5);
                for u in run
                    .updates
                    .iter()
                    .filter(|u| (u.0 >= 9_900 && u.0 < 11_500) || (u.0 >= 14_800 && u.0 < 17_000))
                {
                    println!(
                        "  update t={} {}→{} sample {:.1} min {:.1} {}",
                        u.0, u.1, u.2, u.3, u.4, u.5
                    );
                }
            }
            assert!(
                before.limit < 2.0 * during.limit || falls <= 500,
                "limit halved after {falls} ms"
            );
            assert!(settled <= 1000, "limit settled after {settled} ms");
            assert!(
                during.throughput >= 0.85 * sick_cap,
                "throughput {}",
                during.throughput
            );
            assert!(ok >= 0.85 * share, "client success {ok}");
            assert!(back <= 1000, "back {back} ms after the end");
        }
    }
}

/// The lab's "time to protect" (lab/analyze.py): the first time T after the start of the
/// slowdown, on a 100 ms grid, from which every 500 ms window up to its end holds at most
/// `level` × the client rate attempts per second; `None` when there is none.
fn protect_ms(run: &Run, sc: &Scenario, level: f64) -> Option<u64> {
    let (s0, s1) = (sc.sick.0 * 1000, sc.sick.1 * 1000);
    let most = level * sc.rate * 0.5;
    let starts: Vec<u64> = (0..)
        .map(|i| s0 + i * 100_000)
        .take_while(|t| t + 500_000 <= s1)
        .collect();
    let over: Vec<bool> = starts
        .iter()
        .map(|&t| {
            let n = run
                .attempts
                .iter()
                .filter(|&&a| a >= t && a < t + 500_000)
                .count();
            n as f64 > most
        })
        .collect();
    if std::env::var("SIM_TRACE").is_ok() {
        for (i, &t) in starts.iter().enumerate() {
            let n = run
                .attempts
                .iter()
                .filter(|&&a| a >= t && a < t + 500_000)
                .count();
            if over[i] {
                println!("  over: +{} ms: {n} attempts", (t - s0) / 1000);
            }
        }
    }
    (0..starts.len())
        .find(|&i| !over[i..].iter().any(|&o| o))
        .map(|i| (starts[i] - s0) / 1000)
}

#[test]
fn the_labs_overload_is_measured_at_once_and_held_at_the_origins_capacity() {
    // Issue 14's overload as the lab runs it (scripts/lab --suite issue14-limit): 400
    // clients a second retrying a shed request once, an origin of 4 workers whose service
    // time of 5 ms (up to 2 % late) becomes 30 ms for 5 s. The controller must see the
    // slowdown in its first slow answers, measure the new floor from the first clean ones,
    // and come back to the origin's own level (4 · 1.25 + √5 ≈ 7), not to the limit it had
    // cut against the old floor — all before the lab's 0.5 s.
    // SIM_SEEDS=N runs N seeds and prints their figures (the lab's time to protect over many
    // seeds, for a closing note); the asserts hold for the first 8, whatever N.
    let seeds: u64 = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    for seed in 1..=seeds {
        let (sc, run) = sick(400.0, true, 1000 + seed, true);
        let sick_updates: Vec<_> = run.updates.iter().filter(|u| u.0 >= 10_000).collect();
        let started = sick_updates
            .iter()
            .find(|u| u.5.starts_with("PinStarted"))
            .expect("a measurement");
        let measured = sick_updates
            .iter()
            .find(|u| u.5.starts_with("PinMeasured"))
            .expect("a measured floor");
        let protect = protect_ms(&run, &sc, 0.34);
        println!(
            "seed {seed}: measurement from +{} ms to +{} ms, floor {:.1} ms, limit {}; lab's time to protect {protect:?} ms",
            started.0 - 10_000,
            measured.0 - 10_000,
            measured.4,
            measured.2
        );
        if std::env::var("SIM_TRACE").is_ok() {
            print_slices(&run, 9.9, 11.5);
            for u in sick_updates.iter().filter(|u| u.0 < 11_500) {
                println!(
                    "  update t={} {}→{} sample {:.1} min {:.1} {}",
                    u.0, u.1, u.2, u.3, u.4, u.5
                );
            }
        }
        if seed > 8 {
            continue;
        }
        assert!(started.0 <= 10_200, "measured from {}", started.0);
        // Back at the origin's level before the lab's 0.5 s: the step from the pin adds
        // attempts to the window that holds it.
        assert!(measured.0 <= 10_500, "floor measured at {}", measured.0);
        assert!(
            protect.is_some_and(|p| p <= 500),
            "time to protect {protect:?}"
        );
        assert!((measured.4 - 30.0).abs() <= 3.0, "floor {}", measured.4);
        assert!(
            (5..=9).contains(&measured.2),
            "limit after it {}",
            measured.2
        );
        let peak = run.slices[110..150].iter().map(|s| s.limit).max().unwrap();
        assert!(peak <= 10, "limit up to {peak} while sick");
        // Held there: from a second in to the end of the slowdown the origin keeps a queue,
        // and a queue beyond the tolerance never raises the limit. (Raised by its √ headroom
        // after each cut, the limit cycled by 2-3 around that level, every rise a burst of
        // attempts into the queue: in all 40 seeds tried.)
        let rises: Vec<_> = run
            .updates
            .iter()
            .filter(|u| u.0 >= 11_000 && u.0 < 15_000 && u.2 > u.1)
            .collect();
        assert!(rises.is_empty(), "seed {seed}: rises {rises:?}");
    }
}

#[test]
fn a_fresh_limit_sheds_nothing_in_front_of_a_healthy_busy_origin() {
    // The healthy starts: 100 ms (the lab's pool origin, ±2 %) at 300 requests/s,
    // 30 in flight, and 20 ms exponential at 700 requests/s; enough workers that neither
    // queues (47 % and 22 % busy). A fresh controller with the defaults (`limit_initial`
    // 20, below the first one's demand) must shed nothing in the first 5 s.
    for (service_ms, rate, fixed) in [(100.0, 300.0, true), (20.0, 700.0, false)] {
        for seed in 1..=5 {
            let sc = Scenario {
                workers: 64,
                service_ms,
                sick_factor: 1.0,
                sick: (0, 0),
                rate,
                retry_once: false,
                seconds: 6,
                cfg: LimitConfig::default(),
                seed: 300 + seed,
                fixed,
                pause: (0, 0),
                lazy: false,
            };
            let run = simulate(&sc);
            let shed: u64 = run.slices[..50].iter().map(|s| s.shed).sum();
            let first: u64 = run.slices[..10].iter().map(|s| s.shed).sum();
            let first_limit = run.slices[2].limit;
            println!(
                "fresh: {service_ms} ms at {rate}/s seed {seed}: shed {first} in the first second, {shed} in the first 5 s; limit at 0.3 s {first_limit}"
            );
            assert_eq!(shed, 0, "{service_ms} ms at {rate}/s seed {seed}");
        }
    }
}

#[test]
fn a_pause_of_a_healthy_origin_is_shed_only_while_it_lasts() {
    // A healthy origin stops for 400 ms (a collector's pause, a stalled machine) and comes
    // back as it was: what piles up in the pause meets the limit, and its answers come late
    // at once; once they are in, the origin is what it was, and so should the limit be.
    for (workers, service_ms, load) in [(4, 20.0, 0.4), (16, 10.0, 0.5), (64, 20.0, 0.3)] {
        for seed in 1..=10 {
            let sc = Scenario {
                seconds: 14,
                pause: (10_000, 10_400),
                ..steady(workers, service_ms, load, 700 + seed)
            };
            let run = simulate(&sc);
            let before = summary(&run, 5, 10);
            let during: u64 = run.slices[100..105].iter().map(|s| s.shed).sum();
            let after: u64 = run.slices[105..140].iter().map(|s| s.shed).sum();
            let back = run.slices[105..140]
                .iter()
                .position(|s| f64::from(s.limit) >= 0.8 * before.limit)
                .map_or(-1.0, |i| i as f64 / 10.0 + 0.1);
            println!(
                "pause: c={workers} s={service_ms}ms load {load} seed {seed}: limit {:.1} before; shed {during} in the pause, {after} after it; limit back to 80 % {back:.1} s after",
                before.limit
            );
            // The pinned measurement that drains the pause's requests sheds too: a tenth to a
            // quarter of a second of arrivals. A floor measured low at that pin held the
            // limit at half the demand, and shed 1.4 s of them.
            assert!(
                (after as f64) <= sc.rate * 0.4,
                "c={workers} s={service_ms} load={load} seed={seed}: {after} shed after"
            );
            if std::env::var("SIM_TRACE").as_deref() == Ok(&format!("{workers}/{seed}")) {
                print_slices(&run, 9.8, 12.0);
                for u in run.updates.iter().filter(|u| u.0 >= 9_900 && u.0 < 12_000) {
                    println!(
                        "  update t={} {}→{} sample {:.1} min {:.1} {}",
                        u.0, u.1, u.2, u.3, u.4, u.5
                    );
                }
            }
        }
    }
}

#[test]
fn a_pause_that_ends_an_interval_on_the_answers_before_it_is_still_a_pause() {
    // nginx's workers flush their samples at their next answer or shed: the first shed in a
    // pause flushes a worker's answers from before it, and they end an interval that looks
    // calm but for its rate; the late answers then end the next as in-flight falls, below
    // the limit. `t/65-limit.t`'s paused upstream: 4 workers of 23 ms at 45 %, limit 2 to 16.
    for at in [1_500, 10_000] {
        for seed in 1..=100 {
            let mut sc = Scenario {
                seconds: 14,
                pause: (at, at + 400),
                fixed: true,
                lazy: true,
                ..steady(4, 23.0, 0.45, 900 + seed)
            };
            sc.cfg.limit_min = 2;
            sc.cfg.limit_max = 16;
            sc.cfg.limit_initial = 16;
            sc.cfg.interval_ms = 100;
            let run = simulate(&sc);
            let a = (at / 100) as usize;
            let before = run.slices[a - 1].limit;
            let low = run.slices[a..a + 11].iter().map(|s| s.limit).min();
            // Back within 1.1 s of the pause's end.
            let back = run.slices[a + 4..a + 15]
                .iter()
                .position(|s| s.limit >= before);
            if std::env::var("SIM_TRACE").as_deref() == Ok(&format!("{at}/{seed}")) {
                print_slices(&run, at as f64 / 1000.0 - 0.5, at as f64 / 1000.0 + 1.5);
            }
            assert!(
                low.is_some_and(|l| l < before),
                "at {at} seed {seed}: not pinned"
            );
            assert!(
                back.is_some(),
                "at {at} seed {seed}: the limit of {before} not back"
            );
        }
    }
}
