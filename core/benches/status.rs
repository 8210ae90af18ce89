//! Rendering the status page for 10 000 breakers, as JSON and as Prometheus text.

use circuit_breaker_core::breaker::{Attempt, BreakerConfig, OwnedBreaker, Ticket};
use circuit_breaker_core::status::{render_json, render_prometheus, Entry, ZoneView};
use criterion::{criterion_group, criterion_main, Criterion};

fn entries(n: usize) -> Vec<Entry> {
    let now = 1_764_484_800_000;
    (0..n)
        .map(|i| {
            let mut b = OwnedBreaker::new(BreakerConfig::default(), now);
            let mut br = b.breaker();
            for k in 0..40u64 {
                let status = if k % 3 == 0 { 500 } else { 200 };
                br.record(
                    now + k * 200,
                    7,
                    Ticket::Normal,
                    &Attempt::http(status, k * 7),
                    true,
                );
            }
            Entry {
                upstream: format!("upstream_{}", i / 10),
                route: format!("route_{i}"),
                view: br.view(now + 8_000),
                servers: Vec::new(),
                retry: None,
                probe_uri: None,
                fingerprint: None,
                limit: None,
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let entries = entries(10_000);
    let zone = ZoneView {
        name: "cb".into(),
        size: 32 << 20,
        used: 21 << 20,
        alloc_failures: 0,
        keys: None,
        module_version: env!("CARGO_PKG_VERSION"),
        nginx_version: "1.28.3",
        control: false,
        fleet_json: None,
        stream: false,
        stream_json: None,
    };
    let json = render_json(&zone, &entries).len();
    let prom = render_prometheus(&zone, &entries).len();
    println!("10000 breakers: JSON {json} bytes, Prometheus {prom} bytes");
    let mut g = c.benchmark_group("status_10k");
    g.sample_size(20);
    g.bench_function("json", |b| b.iter(|| render_json(&zone, &entries)));
    g.bench_function("prometheus", |b| {
        b.iter(|| render_prometheus(&zone, &entries))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
