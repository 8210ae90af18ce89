//! The replay over small made-up logs: what it counts, and that the order lines come in (within
//! the reorder horizon) changes nothing.

use std::io::Write;
use std::sync::{Arc, Mutex};

use cb_replay::conf::Specs;
use cb_replay::line::parse;
use cb_replay::sim::Replay;

/// A transitions sink the test can read back.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An outage: 10 requests a second for 60 s, every one failing from 10 s to 30 s.
fn outage() -> Vec<String> {
    (0..600u64)
        .map(|i| {
            let end = 1_700_000_000_000 + i * 100;
            let status = if (100..300).contains(&i) { 502 } else { 200 };
            format!(
                "{}.{:03} 0.020 \"api\" \"-\" \"10.0.0.1:80\" \"{status}\" \"0.020\" \"0.010\"",
                end / 1000,
                end % 1000
            )
        })
        .collect()
}

fn replay(lines: &[String], params: &str) -> (Replay, String) {
    let mut specs = Specs::default();
    specs.add_option(params).unwrap();
    let mut r = Replay::new(specs, vec![Vec::new()], 1, 30_000);
    let sink = Sink::default();
    r.transitions = Some(Box::new(sink.clone()));
    for (n, l) in lines.iter().enumerate() {
        r.feed(&parse(l).unwrap(), n as u64 + 1).unwrap();
    }
    r.finish();
    let out = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    (r, out)
}

#[test]
fn an_outage_opens_once_and_spares_the_origin() {
    let (r, log) = replay(&outage(), "api=open=5s jitter=0% probes=1");
    let s = &r.runs[0][0].stats;
    // Opens on the 10th failure in a row (`consecutive`): line 110.
    assert!(
        log.starts_with(&format!(
            "110 {} +10.920 circuit breaker \"api/default\" opened: 10 gateway failures in a row",
            cb_replay::clock::local_iso(1_700_000_010_900)
        )),
        "{log}"
    );
    assert_eq!(s.opens, 1, "{log}");
    // While the origin fails the breaker refuses, and the probes fail (reopens).
    assert!(s.reopens >= 2, "{log}");
    assert_eq!(s.closes, 1, "{log}");
    // Lines 111 to 300 failed, all refused but two probes; the recovery from line 301 on is
    // seen only by the probe at line 463 (the cooldown had doubled twice): the price.
    assert_eq!(s.failures_spared, 188, "{s:?}");
    assert_eq!(s.successes_lost, 162, "{s:?}");
    assert_eq!(s.refused, s.failures_spared + s.successes_lost);
    assert_eq!(r.counts.late, 0);
}

#[test]
fn lines_a_little_out_of_order_change_nothing() {
    let lines = outage();
    let mut shuffled = lines.clone();
    // Workers interleave: swap neighbours (200 ms apart at most, within the horizon).
    for pair in shuffled.chunks_mut(2) {
        pair.reverse();
    }
    let (a, la) = replay(&lines, "api=open=5s jitter=20% probes=2");
    let (b, lb) = replay(&shuffled, "api=open=5s jitter=20% probes=2");
    let sa = &a.runs[0][0].stats;
    let sb = &b.runs[0][0].stats;
    assert_eq!(sa, sb);
    // The same transitions at the same times; the line numbers follow the shuffle.
    let strip = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| l.split_once(' ').unwrap().1.to_owned())
            .collect()
    };
    assert_eq!(strip(&la), strip(&lb));
}

#[test]
fn a_sweep_runs_every_setting_in_one_pass() {
    let mut specs = Specs::default();
    specs.add_option("api=consecutive=off open=5s").unwrap();
    let sets = vec![
        vec![("failure_rate".to_string(), "30%".to_string())],
        vec![("failure_rate".to_string(), "50%".to_string())],
    ];
    let mut r = Replay::new(specs, sets, 1, 30_000);
    // 40 % failures throughout: a breaker at 30 % opens, one at 50 % never does.
    for i in 0..300u64 {
        let end = 1_700_000_000_000 + i * 100;
        let status = if i % 5 < 2 { 500 } else { 200 };
        let l = format!(
            "{}.{:03} 0.020 \"api\" \"-\" \"10.0.0.1:80\" \"{status}\" \"0.020\" \"0.010\"",
            end / 1000,
            end % 1000
        );
        r.feed(&parse(&l).unwrap(), i + 1).unwrap();
    }
    r.finish();
    let runs = &r.runs[0];
    assert!(runs[0].stats.opens >= 1, "{:?}", runs[0].stats);
    assert_eq!(runs[1].stats.opens, 0);
    assert_eq!((runs[0].stats.requests, runs[1].stats.requests), (300, 300));
}

#[test]
fn active_probes_take_a_refused_requests_outcome() {
    let (r, log) = replay(
        &outage(),
        "api=probe_uri=/healthz probe_interval=2s jitter=0%",
    );
    let s = &r.runs[0][0].stats;
    assert_eq!((s.opens, s.closes), (1, 1), "{log}");
    // Probes every 2 s from the trip on; the origin heals at 30 s (line 301), and the first
    // probe after it closes the breaker (a hard outage: `probes` of them, close together).
    let closed = log.lines().last().unwrap();
    assert!(closed.contains("closed: 3 good probes"), "{log}");
    // Seconds since the first request's start (at 1_699_999_999.980).
    let since: f64 = closed.split(' ').nth(2).unwrap()[1..].parse().unwrap();
    let at = 1_699_999_999.980 + since;
    assert!((1_700_000_030.0..1_700_000_034.0).contains(&at), "{log}");
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the order, gaps and lengths of the requests, the replay neither panics nor
        /// loses one: every request is counted once per breaker, and every refused one is
        /// spared, lost or without a verdict.
        #[test]
        fn any_traffic(reqs in proptest::collection::vec(
            (0u64..200_000, 0u64..120_000, prop::sample::select(vec![200u16, 404, 500, 502, 503, 504]),
             any::<bool>(), 0u8..3), 1..400),
            horizon in prop::sample::select(vec![0u64, 1000, 30_000]),
            params in prop::sample::select(vec![
                "min_requests=2 open=1s jitter=50% consecutive=3",
                "min_requests=5 slow=50ms slow_rate=10% ramp=2s probes=4",
                "probe_uri=/h probe_interval=500ms min_requests=1",
                "min_requests=3 dry_run",
            ])) {
            let mut specs = Specs::default();
            specs.add_option(params).unwrap();
            let sets = vec![Vec::new(), vec![("failure_rate".to_string(), "20%".to_string())]];
            let mut r = Replay::new(specs, sets, 7, horizon);
            let mut n = 0u64;
            for (end, rt, status, no_header, route) in &reqs {
                n += 1;
                let end = 1_700_000_000_000 + end;
                let l = format!(
                    "{}.{:03} {}.{:03} \"api\" \"r{route}\" \"10.0.0.1:80\" \"{status}\" \"{}.{:03}\" \"{}\"",
                    end / 1000, end % 1000, rt / 1000, rt % 1000, rt / 1000, rt % 1000,
                    if *no_header { "-" } else { "0.001" });
                r.feed(&parse(&l).unwrap(), n).unwrap();
            }
            r.finish();
            prop_assert_eq!(r.counts.replayed, reqs.len() as u64);
            for v in 0..2 {
                let total: u64 = r.runs.iter().map(|runs| runs[v].stats.requests).sum();
                prop_assert_eq!(total, reqs.len() as u64);
                for runs in r.runs.iter() {
                    let s = &runs[v].stats;
                    prop_assert_eq!(s.refused, s.failures_spared + s.successes_lost + s.refused_unjudged);
                    prop_assert!(s.longest_open_ms <= s.open_ms);
                    prop_assert!(s.closes <= s.opens);
                }
            }
        }
    }
}

/// A pool of two whose first server fails half the time: each failure is retried on the
/// other server and rescued. The retry budget (20 % plus 3 a second) lets some of them be
/// retried; without it, all are; and the breaker sees what the client would have got.
#[test]
fn the_retry_budget_decides_what_the_client_gets() {
    let lines: Vec<String> = (0..1000u64)
        .map(|i| {
            let end = 1_700_000_000_000 + i * 10;
            if i % 2 == 0 {
                format!(
                    "{}.{:03} 0.012 \"api\" \"-\" \"10.0.0.1:80, 10.0.0.2:80\" \"502, 200\" \
                     \"0.002, 0.010\" \"-, 0.005\"",
                    end / 1000,
                    end % 1000
                )
            } else {
                format!(
                    "{}.{:03} 0.010 \"api\" \"-\" \"10.0.0.2:80\" \"200\" \"0.010\" \"0.005\"",
                    end / 1000,
                    end % 1000
                )
            }
        })
        .collect();
    let stats = |params: &str| {
        let (r, log) = replay(&lines, params);
        (r.runs[0][0].stats.clone(), log)
    };
    let (off, log) = stats("api=retry_budget=off consecutive=off failure_rate=20%");
    assert_eq!(
        (off.retries, off.retries_denied, off.rescues_lost),
        (500, 0, 0)
    );
    assert_eq!((off.bad, off.opens), (0, 0), "{log}");
    let (on, log) = stats("api=consecutive=off failure_rate=20%");
    // 100 first attempts a second: 20 % of them and 3 a second may retry, of 50 a second
    // that want to; the rest fail, over a fifth of the requests: it opens, and then sends
    // (and retries) only its probes.
    assert_eq!(on.opens, 1, "{log}");
    assert!(on.retries_denied > 10, "{on:?}");
    assert!(on.retries < 500 && on.retries > on.retries_denied, "{on:?}");
    assert_eq!(on.rescues_lost, on.retries_denied);
    assert!(on.refused > 0 && on.bad > 0, "{on:?}");
    // In dry run every request is sent, its retries asked of the budget.
    let (dry, log) = stats("api=consecutive=off failure_rate=20% dry_run");
    assert_eq!(dry.retries, 500, "{log}");
    assert!(
        dry.retries_denied > 250 && dry.retries_denied < 400,
        "{dry:?}"
    );
}

/// The same pool, every request a retry's candidate, with the log's classes: in dry run
/// every request is sent and asks the budget, and sheddable requests' retries are denied
/// first (they may take 80 % of the allowance, critical ones all of it), as in the module.
/// The classes are counted as the log gives them, the adaptive limit's sheds among them.
#[test]
fn the_retry_budget_denies_sheddable_retries_first() {
    let lines: Vec<String> = (0..1000u64)
        .map(|i| {
            let end = 1_700_000_000_000 + i * 10;
            let class = if i % 2 == 0 { "critical" } else { "sheddable" };
            format!(
                "{}.{:03} 0.012 \"api\" \"-\" \"10.0.0.1:80, 10.0.0.2:80\" \"502, 200\" \
                 \"0.002, 0.010\" \"-, 0.005\" \"closed\" \"{}\" \"{class}\"",
                end / 1000,
                end % 1000,
                81_000_000 + i * 10
            )
        })
        .chain(std::iter::once(
            "1700000010.005 0.000 \"api\" \"-\" \"-\" \"-\" \"-\" \"-\" \"limited\" \"81010005\" \
             \"sheddable\""
                .to_owned(),
        ))
        .collect();
    let (r, log) = replay(&lines, "api=consecutive=off failure_rate=20% dry_run");
    let s = &r.runs[0][0].stats;
    let [critical, _, sheddable] = s.classes;
    assert_eq!((critical.requests, sheddable.requests), (500, 500), "{log}");
    assert!(
        sheddable.retries_denied > critical.retries_denied + 50,
        "{critical:?} {sheddable:?}"
    );
    assert_eq!(
        critical.retries_denied + sheddable.retries_denied,
        s.retries_denied
    );
    let live = r.counts.classes;
    assert_eq!((live[0].requests, live[2].requests), (500, 501));
    assert_eq!((live[2].refused_live, live[2].limited_live), (1, 1));
    let text = cb_replay::report::text(&r, &[]);
    assert!(
        text.contains(
            "classes: critical 500 (0 refused live, 0 of them by the limit), \
                       sheddable 501 (1 refused live, 1 of them by the limit)"
        ),
        "{text}"
    );
    let by_class = format!(
        "  by class: critical 500 requests, refused {}, {} would not have retried; sheddable \
         500 requests, refused {}, {} would not have retried\n",
        critical.refused, critical.retries_denied, sheddable.refused, sheddable.retries_denied
    );
    assert!(text.contains(&by_class), "{text}");
    let mut json = Vec::new();
    cb_replay::report::write_json(&mut json, &r, &[]).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(v["lines"]["classes"]["sheddable"]["limited_live"], 1);
    let b = &v["settings"][0]["breakers"]["api/default"]["classes"];
    assert_eq!(b["sheddable"]["retries_denied"], sheddable.retries_denied);
    assert!(b.get("default").is_none(), "{b}");
}

/// One line of `api` ending at `ms` (after 1 700 000 000 000) with `status`, and, when given,
/// the module's fields and the class.
fn classed(ms: u64, status: u16, class: Option<&str>) -> String {
    let end = 1_700_000_000_000 + ms;
    let tail = class.map_or(String::new(), |c| {
        format!(" \"closed\" \"{}\" \"{c}\"", 81_000_000 + ms)
    });
    format!(
        "{}.{:03} 0.000 \"api\" \"-\" \"10.0.0.1:80\" \"{status}\" \"0.001\" \"0.001\"{tail}",
        end / 1000,
        end % 1000
    )
}

/// An open breaker whose cooldown ends: the first request after it is critical and fails,
/// the next is sheddable and succeeds. A sheddable request came in the second before (they
/// came all along), so the critical one leaves the probe to the sheddable one, which closes
/// the breaker; without the classes the critical request probes, fails, and it reopens.
#[test]
fn a_half_open_probe_is_left_to_a_sheddable_request() {
    let run = |with: bool| {
        let class = |i: u64| with.then_some(if i % 2 == 0 { "critical" } else { "sheddable" });
        // Open on the 20th failure, at 190 ms: the cooldown (1 s) ends at 1 190 ms.
        let mut lines: Vec<String> = (0..20u64).map(|i| classed(i * 10, 502, class(i))).collect();
        lines.extend((0..91u64).map(|i| classed(200 + i * 10, 502, class(i + 1))));
        lines.push(classed(1250, 502, with.then_some("critical")));
        lines.push(classed(1260, 200, with.then_some("sheddable")));
        lines.extend((0..10u64).map(|i| classed(1300 + i * 10, 200, class(i))));
        let (r, log) = replay(&lines, "api=open=1s jitter=0% probes=1 consecutive=off");
        (r.runs[0][0].stats.clone(), log)
    };
    let (with, log) = run(true);
    assert_eq!((with.opens, with.reopens, with.closes), (1, 0, 1), "{log}");
    let (without, log) = run(false);
    assert_eq!((without.opens, without.reopens), (1, 1), "{log}");
}

/// After a close by probes, a ramp of 10 s lets critical requests through at its share and
/// sheddable ones at its square: of requests alternating between the two, the replay refuses
/// more sheddable ones. A key's breaker (`$`) takes no class, as live.
#[test]
fn a_ramp_lets_critical_requests_through_first() {
    let lines = |upstream: &str| -> Vec<String> {
        let mut l: Vec<String> = (0..20u64)
            .map(|i| classed(i * 10, 502, Some("default")))
            .collect();
        l.push(classed(1250, 200, Some("default")));
        l.extend((0..2000u64).map(|i| {
            let class = if i % 2 == 0 { "critical" } else { "sheddable" };
            classed(1600 + i * 4, 200, Some(class))
        }));
        l.into_iter()
            .map(|s| s.replace("\"api\"", &format!("\"{upstream}\"")))
            .collect()
    };
    let (r, log) = replay(
        &lines("api"),
        "api=open=1s jitter=0% probes=1 ramp=10s consecutive=off",
    );
    let [critical, _, sheddable] = r.runs[0][0].stats.classes;
    assert_eq!(r.runs[0][0].stats.closes, 1, "{log}");
    assert!(critical.refused > 100, "{critical:?}");
    assert!(
        sheddable.refused > critical.refused + 100,
        "{critical:?} {sheddable:?}"
    );
    let (r, log) = replay(
        &lines("$origin"),
        "$origin=open=1s jitter=0% probes=1 ramp=10s consecutive=off",
    );
    assert_eq!(r.runs[0][0].stats.closes, 1, "{log}");
    assert!(r.runs[0][0]
        .stats
        .classes
        .iter()
        .all(|k| k.requests == 0 && k.refused == 0));
}

/// A log that crowds more requests into the reorder horizon than the buffer holds (here all
/// at one time): the oldest run early, the buffer stays within its bound, and none is lost.
#[test]
fn the_reorder_buffer_is_bounded() {
    let mut specs = Specs::default();
    specs.add_option("api=open=5s").unwrap();
    let mut r = Replay::new(specs, vec![Vec::new()], 1, 30_000);
    r.max_waiting = 100;
    for i in 0..1000u64 {
        // Ending together, started over the second before.
        let l = format!(
            "1700000001.000 0.{:03} \"api\" \"-\" \"10.0.0.1:80\" \"200\" \"0.001\" \"0.001\"",
            i % 1000
        );
        r.feed(&parse(&l).unwrap(), i + 1).unwrap();
        assert!(r.waiting() <= 100, "{}", r.waiting());
    }
    r.finish();
    assert_eq!(r.runs[0][0].stats.requests, 1000);
    assert!(r.counts.early > 0, "{:?}", r.counts);
    // Its starts came after the earliest had run: late, as a line that far out of order is.
    assert!(r.counts.late > 0, "{:?}", r.counts);
}
