//! The cost of deciding and recording one request.

use std::hint::black_box;
use std::mem::size_of;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use circuit_breaker_core::breaker::{
    layout, Attempt, BreakerConfig, BreakerHeader, Bucket, Control, OwnedBreaker, Ticket,
};
use criterion::{criterion_group, Criterion};

const T0: u64 = 1_764_484_800_000;

fn cfg() -> BreakerConfig {
    // Thresholds the benchmark traffic never reaches: the breaker stays closed.
    BreakerConfig {
        slow_ms: 800,
        ..BreakerConfig::default()
    }
}

/// One request through a closed breaker: admit, then record a 200 (every 4th a 500).
fn request(b: &mut OwnedBreaker, now: u64, i: u32) {
    let d = b.breaker().admit(now, i, 1, &|_| true, true);
    black_box(&d);
    let status = if i % 4 == 0 { 500 } else { 200 };
    let r = b.breaker().record(
        now,
        i,
        Ticket::Normal,
        &Attempt::http(status, u64::from(i % 300)),
        true,
    );
    black_box(&r);
}

fn bench(c: &mut Criterion) {
    c.bench_function("admit+record, closed, uncontended", |bench| {
        let mut b = OwnedBreaker::new(cfg(), T0);
        let mut i = 0u32;
        bench.iter(|| {
            i = i.wrapping_add(1);
            // 10 requests per simulated millisecond: the window keeps turning over.
            request(&mut b, T0 + u64::from(i / 10), i);
        });
    });

    c.bench_function("admit, open (short-circuit)", |bench| {
        let mut b = OwnedBreaker::new(cfg(), T0);
        b.breaker().control(T0, 0, Control::ForceOpen);
        let mut i = 0u32;
        bench.iter(|| {
            i = i.wrapping_add(1);
            black_box(
                b.breaker()
                    .admit(T0 + u64::from(i / 10), i, 1, &|_| true, true),
            );
        });
    });

    c.bench_function(
        "admit+record, closed, 2 threads behind a mutex (per request)",
        |bench| {
            bench.iter_custom(|iters| {
                let shared = Mutex::new(OwnedBreaker::new(cfg(), T0));
                let start = Instant::now();
                thread::scope(|s| {
                    for t in 0..2u32 {
                        let shared = &shared;
                        s.spawn(move || {
                            for i in 0..(iters / 2) as u32 {
                                let now = T0 + u64::from(i / 10);
                                request(&mut shared.lock().unwrap(), now, i ^ t);
                            }
                        });
                    }
                });
                start.elapsed()
            });
        },
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}

fn main() {
    let (bytes, align) = layout(10);
    println!(
        "breaker size: header {} B + 10 buckets x {} B = {} B (align {}), limit 1968 B \
         (2 KiB less the shell's 64 B node and 16 B of slack)",
        size_of::<BreakerHeader>(),
        size_of::<Bucket>(),
        bytes,
        align
    );
    assert!(bytes <= 2048 - 64 - 16);
    benches();
    Criterion::default().configure_from_args().final_summary();
}
