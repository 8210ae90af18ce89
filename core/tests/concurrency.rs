//! Several threads stand in for nginx workers sharing one breaker behind a mutex (which stands
//! in for the zone's slab-pool mutex): totals stay exact and at most one probe is ever in flight.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;

use circuit_breaker_core::breaker::{
    Admission, Attempt, BreakerConfig, Ending, OwnedBreaker, Ticket, PROBE_LEASE_MS,
};
use circuit_breaker_core::snapshot::Totals;

const WORKERS: u32 = 4;
const ROUNDS: u64 = 20_000;

fn xorshift(x: &mut u32) -> u32 {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    *x
}

#[test]
fn workers_hammering_one_breaker_keep_exact_totals_and_one_probe() {
    let cfg = BreakerConfig {
        window_s: 2,
        min_requests: 10,
        open_ms: 30,
        max_open_ms: 200,
        probe_interval_ms: 3,
        probes: 2,
        ..BreakerConfig::default()
    };
    let shared = Mutex::new(OwnedBreaker::new(cfg, 0));
    let clock = AtomicU64::new(0);
    let in_flight = AtomicU32::new(0);
    // Every worker's tally: (requests, failures, short-circuited, probes, tls).
    let tallies: Vec<[u64; 5]> = thread::scope(|s| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (shared, clock, in_flight) = (&shared, &clock, &in_flight);
                s.spawn(move || {
                    let mut tally = [0u64; 5];
                    let mut rnd = 0x9E37_79B9 ^ (w + 1);
                    for _ in 0..ROUNDS {
                        // Workers' cached clocks lag by a few ms.
                        let now = clock
                            .fetch_add(1, Ordering::Relaxed)
                            .saturating_sub(u64::from(w));
                        let r = xorshift(&mut rnd);
                        let ticket = {
                            let mut b = shared.lock().unwrap();
                            match b.breaker().admit(now, r, w, &|_| true, true).admission {
                                Admission::Pass { .. } => Ticket::Normal,
                                Admission::Probe(t) => {
                                    tally[3] += 1;
                                    let before = in_flight.fetch_add(1, Ordering::SeqCst);
                                    assert_eq!(before, 0, "two probes in flight");
                                    t
                                }
                                Admission::Reject { .. } | Admission::Recovering { .. } => {
                                    tally[2] += 1;
                                    continue;
                                }
                            }
                        };
                        // The origin goes down and heals every 3 000 ticks (longer than
                        // the window), so the breaker trips, probes and closes many times.
                        let down = (now / 3000) % 2 == 1;
                        let attempt = match r % 16 {
                            9 => Attempt::ended(Ending::Tls, 1),
                            10 => Attempt::ended(Ending::NoVerdict, 1),
                            _ if down => Attempt::http(500, 5),
                            0 => Attempt::http(500, 5),
                            _ => Attempt::http(200, u64::from(r % 50)),
                        };
                        let end = clock.load(Ordering::Relaxed);
                        let mut b = shared.lock().unwrap();
                        if matches!(ticket, Ticket::Probe(_)) {
                            in_flight.fetch_sub(1, Ordering::SeqCst);
                        }
                        if r % 32 == 31 {
                            b.breaker().release(end, ticket);
                            continue;
                        }
                        b.breaker().record(end, r, ticket, &attempt, true);
                        match attempt.ending {
                            Ending::Tls => tally[4] += 1,
                            Ending::NoVerdict => {}
                            _ => {
                                tally[0] += 1;
                                tally[1] += u64::from(attempt.status == 500);
                            }
                        }
                    }
                    tally
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        clock.load(Ordering::Relaxed) < PROBE_LEASE_MS,
        "no lease expired during the test"
    );
    let sum = |i: usize| tallies.iter().map(|t| t[i]).sum::<u64>();
    let mut b = shared.into_inner().unwrap();
    let t: Totals = b.breaker().view(0).totals;
    assert_eq!(t.requests, sum(0));
    assert_eq!(t.failures, sum(1));
    assert_eq!(t.short_circuited, sum(2));
    assert_eq!(t.probes, sum(3));
    assert_eq!(t.tls_errors, sum(4));
    // The run went through trips and recoveries. How many closes depends on the threads'
    // scheduling (a thread preempted while holding the probe keeps the others out), so only
    // a floor that a loaded machine still reaches: 3 closes were seen with every core busy.
    assert!(
        t.opened > 10 && t.half_opened > 10 && t.closed >= 2,
        "{t:?}"
    );
}
