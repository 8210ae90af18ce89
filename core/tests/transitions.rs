//! The breaker's life, told with a fake clock.

mod common;

use circuit_breaker_core::breaker::{
    jittered, layout, probe_within_presence, Admission, Attempt, BreakerConfig, Bucket, Control,
    Ending, FailureClass, FailureSet, Ticket, PROBE_LEASE_MS,
};
use circuit_breaker_core::snapshot::{Forced, State};
use common::*;

/// (story, config, batches of (count, outcome), expected state, reason of the last transition)
type TripCase = (
    &'static str,
    BreakerConfig,
    Vec<(usize, Attempt)>,
    State,
    Option<&'static str>,
);

#[test]
fn trip_rules_table() {
    let slow_cfg = BreakerConfig {
        slow_ms: 800,
        slow_rate: 5000,
        ..cfg()
    };
    #[rustfmt::skip]
    let table: Vec<TripCase> = vec![
        ("failure rate exactly at the threshold trips", cfg(),
            vec![(10, ok()), (10, http(500))], State::Open,
            Some("failure rate 50% (10/20) >= 50% in 10s")),
        ("one failure below the threshold does not", cfg(),
            vec![(11, ok()), (9, http(500))], State::Closed, None),
        ("below min_requests never trips, even at 100%", cfg(),
            vec![(19, http(500))], State::Closed, None),
        ("the request that crosses the rate trips", rates_only(),
            vec![(18, ok()), (17, timeout()), (1, timeout())], State::Open,
            Some("failure rate 50% (18/36) >= 50% in 10s")),
        ("ten gateway failures in a row trip, before min_requests", cfg(),
            vec![(5, ok()), (9, timeout()), (1, http(502))], State::Open,
            Some("10 gateway failures in a row, the last: http_502")),
        ("a success breaks the run", cfg(),
            vec![(9, http(503)), (1, ok()), (9, Attempt::ended(Ending::Error, 5))],
            State::Closed, None),
        ("a 500 is the application's, not a gateway failure", cfg(),
            vec![(9, timeout()), (1, http(500)), (9, timeout())], State::Closed, None),
        ("an unnamed class is no gateway failure", BreakerConfig { failures: FailureSet::EMPTY, ..cfg() },
            vec![(19, timeout())], State::Closed, None),
        ("consecutive off", rates_only(),
            vec![(19, timeout())], State::Closed, None),
        ("fractional rates print one decimal", BreakerConfig { failure_rate: 3333, min_requests: 3, ..cfg() },
            vec![(2, ok()), (1, http(502))], State::Open,
            Some("failure rate 33.3% (1/3) >= 33.3% in 10s")),
        ("slow rate trips", slow_cfg,
            vec![(10, ok()), (10, slow(801))], State::Open,
            Some("slow rate 50% (10/20) >= 50% in 10s")),
        ("exactly `slow` is not slow", slow_cfg,
            vec![(10, ok()), (10, slow(800))], State::Closed, None),
        ("slow rule is off without slow", cfg(),
            vec![(20, slow(60_000))], State::Closed, None),
        ("4xx never fails", cfg(),
            vec![(20, http(404)), (20, http(429))], State::Closed, None),
        ("503 with Retry-After is not http_503", cfg(),
            vec![(20, retry_after(503, 1))], State::Closed, None),
        ("TLS errors are never origin failures", cfg(),
            vec![(20, Attempt::ended(Ending::Tls, 5))], State::Closed, None),
        ("aborted requests are not counted", cfg(),
            vec![(10, ok()), (10, Attempt::ended(Ending::NoVerdict, 5)), (9, http(500))],
            State::Closed, None),
    ];
    for (story, cfg, batches, state, reason) in table {
        let mut s = Story::new(cfg);
        let mut last = None;
        for (n, a) in &batches {
            if let Some(t) = s.requests(*n, a) {
                last = Some(t);
            }
        }
        assert_eq!(s.state(), state, "{story}");
        assert_eq!(last.as_ref().map(|t| t.reason.as_str()), reason, "{story}");
        if let Some(t) = last {
            assert_eq!((t.from, t.to), (State::Closed, State::Open), "{story}");
            assert_eq!(t.detail.as_deref(), Some("retry in 30s"), "{story}");
            assert_eq!(s.view().last_transition, t.reason, "{story}");
        }
    }
}

#[test]
fn failures_spread_over_more_than_the_window_never_trip() {
    // One failure a second for a minute: 60 failures in all, but never 20 in any 10 s.
    let mut s = Story::new(cfg());
    for _ in 0..60 {
        assert_eq!(s.request(&http(500)), None);
        s.wait(1000);
    }
    assert_eq!(s.state(), State::Closed);
    let v = s.view();
    assert_eq!(v.window.requests, 9, "only the last 10 seconds count");
    assert_eq!(v.totals.failures, 60);
    assert!(v.window.failure_rate() == 1.0);
}

#[test]
fn full_cycle_closed_open_half_open_closed() {
    let mut s = Story::new(cfg());
    s.trip();
    let v = s.view();
    assert_eq!(
        (v.since_ms, v.retry_at_ms, v.cooldown_ms),
        (T0, Some(T0 + 30_000), 30_000)
    );

    // Open: no request reaches the origin, Retry-After counts down to the probe.
    assert_eq!(s.rejected(), 30_000);
    s.wait(29_999);
    assert_eq!(s.rejected(), 1);

    // The cooldown has elapsed: the next request turns the breaker half-open and is the probe.
    s.wait(1);
    let d = s.admit();
    let t = d.transition.clone().expect("half-opened");
    assert_eq!(
        (t.from, t.to, t.reason.as_str()),
        (State::Open, State::HalfOpen, "cooldown 30s elapsed")
    );
    let Admission::Probe(probe) = d.admission else {
        panic!("{:?}", d.admission)
    };
    // Everyone else waits while the probe is in flight.
    assert_eq!(s.rejected(), 1000);
    assert_eq!(s.record(probe, &ok()).transition, None);
    assert_eq!(s.view().consecutive_probe_successes, 1);

    // Once a hard outage's first probe is good, the rest of the run comes within half a
    // probe_interval: 166 ms apart. Retry-After says the end of the probe spacing's range
    // from the last probe's start instead (a client told the run's pace could time it).
    s.wait(100);
    assert_eq!(s.rejected(), 900);
    s.wait(65);
    assert_eq!(s.rejected(), 835);
    s.wait(1);
    let p = s.probe();
    assert_eq!(s.record(p, &ok()).transition, None);
    s.wait(166);
    let p = s.probe();
    let r = s.record(p, &ok());
    let t = r.transition.expect("closed");
    assert_eq!(
        (t.from, t.to, t.reason.as_str()),
        (State::HalfOpen, State::Closed, "3 good probes")
    );
    assert_eq!(r.state, State::Closed);

    let v = s.view();
    assert_eq!(v.window.requests, 0, "a fresh window");
    assert_eq!(v.cooldown_ms, 30_000);
    let t = v.totals;
    assert_eq!((t.opened, t.half_opened, t.closed), (1, 1, 1));
    assert_eq!((t.requests, t.failures, t.probes), (23, 20, 3));
    assert_eq!(t.short_circuited, 5);
    assert_eq!(s.request(&ok()), None);
}

#[test]
fn failed_probes_double_the_cooldown_up_to_max_open() {
    let mut s = Story::new(BreakerConfig {
        open_ms: 30_000,
        max_open_ms: 100_000,
        ..cfg()
    });
    s.trip();
    let mut expected = [60_000, 100_000, 100_000].into_iter();
    for (i, failure) in [http(500), timeout(), http(504)].iter().enumerate() {
        let wait = s.rejected();
        s.wait(wait);
        let p = s.probe();
        let t = s.record(p, failure).transition.expect("reopened");
        let cooldown = expected.next().unwrap();
        assert_eq!((t.from, t.to), (State::HalfOpen, State::Open), "probe {i}");
        assert_eq!(
            t.detail,
            Some(format!("retry in {}s", cooldown / 1000)),
            "probe {i}"
        );
        assert_eq!(s.view().cooldown_ms, cooldown, "probe {i}");
        assert_eq!(s.rejected(), cooldown, "probe {i}");
    }
    assert_eq!(s.view().last_transition, "probe failed: http_504");
    // Closing resets the base cooldown: the next trip waits `open` again.
    for _ in 0..3 {
        let wait = s.rejected();
        s.wait(wait);
        let p = s.probe();
        s.record(p, &ok());
    }
    assert_eq!(s.state(), State::Closed);
    s.trip();
    assert_eq!(s.rejected(), 30_000);
}

#[test]
fn probe_failure_reasons_name_the_class() {
    for (a, reason) in [
        (http(500), "probe failed: http_500"),
        (timeout(), "probe failed: timeout"),
        (Attempt::ended(Ending::Error, 3), "probe failed: error"),
    ] {
        let mut s = Story::new(cfg());
        s.trip();
        s.wait(30_000);
        let p = s.probe();
        let t = s.record(p, &a).transition.unwrap();
        assert_eq!(t.reason, reason);
        assert_eq!(t.detail.as_deref(), Some("retry in 60s"));
    }
}

#[test]
fn retry_after_raises_the_cooldown_floor() {
    // open=1s, but the origin said Retry-After: 7 (a 503 that is not even a failure class).
    let mut s = Story::new(BreakerConfig {
        open_ms: 1000,
        ..cfg()
    });
    s.request(&retry_after(503, 7));
    assert_eq!(s.view().totals.retry_after_503, 1);
    let t = s.requests(19, &http(500)).expect("tripped");
    assert_eq!(t.detail.as_deref(), Some("retry in 7s"));
    assert_eq!(s.rejected(), 7000);

    // A failed probe answering Retry-After: 20 keeps the breaker away for at least that long.
    s.wait(7000);
    let mut failures = FailureSet::DEFAULT;
    failures.insert(FailureClass::Http503RetryAfter);
    let mut s2 = Story::new(BreakerConfig {
        open_ms: 1000,
        failures,
        ..cfg()
    });
    s2.trip();
    s2.wait(1000);
    let p = s2.probe();
    let t = s2.record(p, &retry_after(503, 20)).transition.unwrap();
    assert_eq!(t.reason, "probe failed: http_503_retry_after");
    assert_eq!(s2.rejected(), 20_000);

    // The floor itself is capped at max_open.
    let mut s3 = Story::new(BreakerConfig {
        open_ms: 1000,
        max_open_ms: 60_000,
        ..cfg()
    });
    s3.request(&retry_after(503, 3600));
    s3.requests(19, &http(500));
    assert_eq!(s3.rejected(), 60_000);
}

#[test]
fn retry_after_outside_the_window_is_forgotten() {
    let mut s = Story::new(BreakerConfig {
        open_ms: 1000,
        ..cfg()
    });
    s.request(&retry_after(503, 7));
    s.wait(10_000);
    s.requests(20, &http(500));
    assert_eq!(s.rejected(), 1000);
}

#[test]
fn a_probe_slower_than_probe_latency_fails() {
    let mut s = Story::new(BreakerConfig {
        probe_latency_ms: 800,
        ..cfg()
    });
    s.trip();
    s.wait(30_000);
    let p = s.probe();
    let t = s.record(p, &slow(950)).transition.unwrap();
    assert_eq!(
        (t.to, t.reason.as_str()),
        (State::Open, "probe too slow: 950ms > 800ms")
    );
    assert_eq!(t.detail.as_deref(), Some("retry in 60s"));
    // Exactly probe_latency is good enough.
    s.wait(60_000);
    let p = s.probe();
    assert_eq!(s.record(p, &slow(800)).transition, None);
    assert_eq!(s.view().consecutive_probe_successes, 1);
}

#[test]
fn a_probe_held_by_a_dead_owner_is_reclaimed() {
    let mut s = Story::new(cfg());
    s.trip();
    s.wait(30_000);
    let Admission::Probe(first) = s.admit_as(7, &|_| true).admission else {
        panic!()
    };
    s.wait(5000);
    // Worker 7 is still alive: nobody else may probe.
    assert!(matches!(
        s.admit_as(8, &|_| true).admission,
        Admission::Reject { .. }
    ));
    // Worker 7 died: worker 8 is granted the probe at once.
    let Admission::Probe(second) = s.admit_as(8, &|o| o != 7).admission else {
        panic!()
    };
    assert_ne!(first, second);
    // The dead worker's late answer is stale: counted, but decides nothing.
    let before = s.view();
    let r = s.record(first, &http(500));
    assert_eq!((r.transition, r.state), (None, State::HalfOpen));
    assert_eq!(s.view().totals.requests, before.totals.requests + 1);
    assert_eq!(s.view().window, before.window);
    assert_eq!(s.record(second, &ok()).transition, None);
    assert_eq!(s.view().consecutive_probe_successes, 1);
}

#[test]
fn a_probe_held_past_the_lease_is_reclaimed() {
    let mut s = Story::new(cfg());
    s.trip();
    s.wait(30_000);
    let Admission::Probe(first) = s.admit_as(7, &|_| true).admission else {
        panic!()
    };
    s.wait(PROBE_LEASE_MS - 1);
    assert!(matches!(
        s.admit_as(8, &|_| true).admission,
        Admission::Reject { .. }
    ));
    s.wait(1);
    let Admission::Probe(second) = s.admit_as(8, &|_| true).admission else {
        panic!()
    };
    assert_ne!(first, second);
    assert_eq!(s.record(first, &ok()).transition, None);
    assert_eq!(
        s.view().consecutive_probe_successes,
        0,
        "the stale probe counted for nothing"
    );
}

#[test]
fn release_frees_the_probe_without_a_verdict() {
    let mut s = Story::new(cfg());
    s.trip();
    s.wait(30_000);
    let p = s.probe();
    let now = s.now;
    s.b.breaker().release(now, p);
    s.wait(1000);
    let p = s.probe();
    // An aborted probe is also just freed.
    s.record(p, &Attempt::ended(Ending::NoVerdict, 5));
    s.wait(1000);
    let p = s.probe();
    s.record(p, &Attempt::ended(Ending::Tls, 5));
    s.wait(1000);
    s.probe();
    let v = s.view();
    assert_eq!(
        (v.state, v.consecutive_probe_successes),
        (State::HalfOpen, 0)
    );
    assert_eq!(v.totals.probes, 4);
    assert_eq!(v.totals.tls_errors, 1);
}

#[test]
fn normal_requests_finishing_while_open_count_only_in_totals() {
    let mut s = Story::new(cfg());
    let d = s.admit();
    assert!(matches!(
        d.admission,
        Admission::Pass {
            would_reject: false
        }
    ));
    s.trip();
    let window = s.view().window;
    // The request admitted before the trip now fails: totals only, no transition.
    let r = s.record(Ticket::Normal, &http(500));
    assert_eq!((r.transition, r.state), (None, State::Open));
    assert_eq!(s.view().window, window);
    assert_eq!(s.view().totals.failures, 21);
}

#[test]
fn forced_open_and_forced_closed_hold_until_reset() {
    let mut s = Story::new(cfg());
    let t = s.control(Control::ForceOpen).unwrap();
    assert_eq!(
        (t.from, t.to, t.reason.as_str()),
        (State::Closed, State::Open, "forced open")
    );
    assert_eq!(s.rejected(), 30_000);
    s.wait(3_600_000);
    assert_eq!(s.rejected(), 30_000, "no half-open while forced");
    let v = s.view();
    assert_eq!(
        (v.state, v.forced, v.retry_at_ms),
        (State::Open, Some(Forced::Open), None)
    );

    let t = s.control(Control::ForceClose).unwrap();
    assert_eq!(
        (t.from, t.to, t.reason.as_str()),
        (State::Open, State::Closed, "forced closed")
    );
    assert_eq!(
        s.requests(100, &http(500)),
        None,
        "forced closed never trips"
    );
    let v = s.view();
    assert_eq!(
        (v.state, v.forced, v.window.failures),
        (State::Closed, Some(Forced::Closed), 100)
    );

    let t = s.control(Control::Reset).unwrap();
    assert_eq!(
        (t.from, t.to, t.reason.as_str()),
        (State::Closed, State::Closed, "reset")
    );
    let v = s.view();
    assert_eq!(
        (v.forced, v.window.requests, v.totals.failures),
        (None, 0, 100)
    );
    assert_eq!((v.totals.opened, v.totals.closed), (1, 1));
    s.trip();
}

#[test]
fn reset_makes_a_probe_ticket_stale_and_restores_the_cooldown() {
    let mut s = Story::new(cfg());
    s.trip();
    s.wait(30_000);
    let p = s.probe();
    s.record(p, &http(500));
    assert_eq!(s.view().cooldown_ms, 60_000);
    s.wait(60_000);
    let p = s.probe();
    let t = s.control(Control::Reset).unwrap();
    assert_eq!((t.from, t.to), (State::HalfOpen, State::Closed));
    let r = s.record(p, &http(500));
    assert_eq!((r.transition, r.state), (None, State::Closed));
    assert_eq!(
        s.view().window.requests,
        0,
        "a stale probe does not enter the window"
    );
    s.trip();
    assert_eq!(s.rejected(), 30_000);
}

#[test]
fn dry_run_evaluates_and_reports_but_never_rejects() {
    let mut s = Story::new(BreakerConfig {
        dry_run: true,
        ..cfg()
    });
    let t = s.trip();
    assert_eq!(t.to, State::Open);
    let d = s.admit();
    assert_eq!(d.admission, Admission::Pass { would_reject: true });
    assert_eq!(s.record(Ticket::Normal, &http(500)).state, State::Open);
    assert_eq!(
        s.view().window.requests,
        20,
        "outcomes while open go to totals only"
    );
    s.wait(30_000);
    let d = s.admit();
    assert_eq!(d.transition.as_ref().unwrap().to, State::HalfOpen);
    let Admission::Probe(p) = d.admission else {
        panic!("{:?}", d.admission)
    };
    assert_eq!(s.admit().admission, Admission::Pass { would_reject: true });
    s.record(p, &ok());
    for _ in 0..2 {
        s.wait(1000);
        let p = s.probe();
        s.record(p, &ok());
    }
    assert_eq!(s.state(), State::Closed);
    let v = s.view();
    assert!(v.dry_run);
    assert_eq!(v.totals.short_circuited, 2);
    assert_eq!(
        s.admit().admission,
        Admission::Pass {
            would_reject: false
        }
    );
    // Even forced open only reports.
    s.control(Control::ForceOpen);
    assert_eq!(s.admit().admission, Admission::Pass { would_reject: true });
}

#[test]
fn a_clock_going_backwards_is_clamped() {
    let mut s = Story::new(cfg());
    s.wait(5000);
    s.request(&http(500));
    s.now = T0 - 1_000_000;
    s.requests(18, &http(500));
    s.now = 0;
    s.request(&http(500));
    assert_eq!(s.state(), State::Open);
    let v = s.view();
    assert_eq!(v.since_ms, T0 + 5000, "opened at the latest time seen");
    assert_eq!(v.window.requests, 20);
    assert_eq!(s.rejected(), 30_000, "the cooldown did not run backwards");
    s.now = T0 + 40_000;
    let d = s.admit();
    assert_eq!(d.transition.as_ref().unwrap().to, State::HalfOpen);
    let Admission::Probe(p) = d.admission else {
        panic!()
    };
    s.record(p, &ok());
    s.now = 3;
    assert_eq!(
        s.rejected(),
        1000,
        "the probe spacing from the probe's start"
    );
    // Even the end of time is just a time.
    s.now = u64::MAX;
    s.admit();
    s.record(Ticket::Normal, &ok());
    let _ = s.view();
}

#[test]
fn a_probe_within_a_second_of_opening_needs_the_classes_admitted_before() {
    let with = |open_ms, jitter, active| BreakerConfig {
        open_ms,
        jitter,
        active,
        ..BreakerConfig::default()
    };
    // The default cooldown (30 s, ±20 %) leaves a second of turned-away requests.
    assert!(!probe_within_presence(&BreakerConfig::default()));
    assert!(probe_within_presence(&with(500, 0, false)));
    assert!(!probe_within_presence(&with(1000, 0, false)));
    // 1.2 s, jittered by 20 %, may be 960 ms; by 10 %, no less than 1 080 ms.
    assert!(probe_within_presence(&with(1200, 2000, false)));
    assert!(!probe_within_presence(&with(1200, 1000, false)));
    // Active probes are no request's: classes choose none.
    assert!(!probe_within_presence(&with(500, 0, true)));
}

#[test]
fn jitter_stays_within_its_bounds() {
    // 20 % of 30 s: every cooldown lies in [24 s, 36 s] and both ends are reached.
    let (mut lo, mut hi) = (u64::MAX, 0);
    for i in 0..100_000u32 {
        let rnd = i.wrapping_mul(2_654_435_761);
        let c = jittered(30_000, 2000, rnd);
        assert!((24_000..=36_000).contains(&c), "rnd {rnd}: {c}");
        lo = lo.min(c);
        hi = hi.max(c);
    }
    assert_eq!(
        (jittered(30_000, 2000, 0), jittered(30_000, 2000, u32::MAX)),
        (24_000, 36_000)
    );
    assert!(lo < 24_100 && hi > 35_900, "{lo}..{hi}");
    assert_eq!(jittered(30_000, 0, 12345), 30_000);
    assert_eq!(jittered(u64::MAX, 10_000, u32::MAX), u64::MAX);

    // The breaker draws the cooldown and the run's pace in their ranges, and tells clients
    // the cooldown's end of range (see tests/probe_timing.rs).
    for rnd in [0, u32::MAX / 3, u32::MAX] {
        let mut s = Story::new(BreakerConfig::default());
        s.rnd = rnd;
        s.trip();
        assert_eq!(s.view().cooldown_ms, 36_000, "as told");
        assert_eq!(s.rejected(), 36_000);
        let circuit_breaker_core::breaker::Gate::Reject { until_ms, .. } = s.b.breaker().gate()
        else {
            panic!("open")
        };
        let c = until_ms - s.now;
        assert!((24_000..36_000).contains(&c), "{c}");
        s.wait(c);
        let p = s.probe();
        s.record(p, &ok());
        let start = s.now;
        while !matches!(s.admit().admission, Admission::Probe(_)) {
            s.wait(1);
        }
        let spacing = s.now - start;
        assert!((132..=200).contains(&spacing), "{spacing}");
    }
}

#[test]
fn view_reports_window_rates_and_latency() {
    let mut s = Story::new(BreakerConfig {
        slow_ms: 500,
        slow_rate: 10_000,
        ..cfg()
    });
    s.requests(90, &slow(40));
    s.requests(9, &slow(600));
    s.request(&slow(900));
    let v = s.view();
    assert_eq!(
        (v.window.requests, v.window.failures, v.window.slow),
        (100, 0, 10)
    );
    assert!((v.window.slow_rate() - 0.1).abs() < 1e-9);
    let (p50, p95, p99) = (
        v.latency.p50.unwrap(),
        v.latency.p95.unwrap(),
        v.latency.p99.unwrap(),
    );
    assert!(
        p50.abs_diff(40) <= 7 && p95.abs_diff(600) <= 104 && p99.abs_diff(600) <= 104,
        "{:?}",
        v.latency
    );
    s.wait(10_000);
    let v = s.view();
    assert_eq!(
        (v.window.requests, v.latency.p50),
        (0, None),
        "the window moved on"
    );
    assert_eq!(v.totals.requests, 100);
}

#[test]
fn a_breaker_with_ten_buckets_fits_in_two_kib() {
    // The slab's 2 KiB class holds the shell's node header (64 B) and 16 B of slack besides.
    let (size, align) = layout(10);
    assert!(size <= 2048 - 64 - 16, "{size} bytes");
    assert!(align.is_power_of_two() && align <= 16);
    assert_eq!(layout(0).0 + 10 * std::mem::size_of::<Bucket>(), size);
}

#[test]
fn probe_tickets_stay_unique_across_a_reset_by_reload() {
    // Before the reload: a probe is in flight with the old breaker's ticket.
    let mut s = Story::new(cfg());
    s.b = circuit_breaker_core::breaker::OwnedBreaker::with_epoch(cfg(), s.now, 1);
    s.trip();
    s.wait(30_000);
    let old = s.probe();
    // The reload changed the parameters: the breaker starts afresh in the same memory, with
    // the next epoch, trips again and grants its own first probe.
    s.b = circuit_breaker_core::breaker::OwnedBreaker::with_epoch(cfg(), s.now, 2);
    s.trip();
    s.wait(30_000);
    let new = s.probe();
    assert_ne!(
        old, new,
        "a ticket from before the reset is never a ticket after it"
    );
    // The old probe ends well: it is not the new probe, which stays held.
    s.record(old, &ok());
    assert_eq!(s.view().consecutive_probe_successes, 0);
    assert!(s.rejected() > 0, "the new probe is still held");
    s.record(new, &ok());
    assert_eq!(s.view().consecutive_probe_successes, 1);
}

#[test]
fn retry_at_says_when_the_next_probe_may_start_while_one_is_in_flight() {
    let mut s = Story::new(cfg());
    s.trip();
    s.wait(30_000);
    let _probe = s.probe();
    s.wait(5_000); // the probe is slow: 5 s in flight
    let v = s.view();
    assert_eq!(v.state, State::HalfOpen);
    let at = v.retry_at_ms.expect("a probe time");
    assert!(
        at > s.now,
        "retry_at {at} is not in the past while a probe is in flight"
    );
    assert_eq!(at, s.now + 1_000, "one probe_interval from now");
    // Told the end of the spacing's range from now: without jitter, the same.
    assert_eq!(s.rejected(), 1_000, "and Retry-After agrees");
}

#[test]
fn the_gate_answers_the_common_cases_without_the_lock() {
    use circuit_breaker_core::breaker::Gate;
    let mut s = Story::new(cfg());
    assert_eq!(s.b.breaker().gate(), Gate::Pass);
    assert_eq!(
        Gate::Pass.admit(s.now, 0),
        Some(Admission::Pass {
            would_reject: false
        })
    );
    s.trip();
    let gate = s.b.breaker().gate();
    assert_eq!(
        gate,
        Gate::Reject {
            until_ms: s.now + 30_000,
            announce_ms: s.now + 30_000,
            wait_ms: 0
        }
    );
    assert_eq!(
        gate.admit(s.now + 10_000, 0),
        Some(Admission::Reject {
            retry_after_ms: 20_000
        })
    );
    assert_eq!(
        gate.admit(s.now + 30_000, 0),
        None,
        "the cooldown's end needs the lock"
    );
    s.wait(30_000);
    let _probe = s.probe();
    assert_eq!(s.b.breaker().gate(), Gate::Ask, "half-open asks");
    s.control(Control::ForceOpen);
    let forced = s.b.breaker().gate();
    assert_eq!(
        forced.admit(s.now + 3_600_000, 0),
        Some(Admission::Reject {
            retry_after_ms: 30_000
        }),
        "forced open rejects for good, announcing the open cooldown"
    );
    s.control(Control::ForceClose);
    assert_eq!(s.b.breaker().gate(), Gate::Pass);

    let mut dry = Story::new(BreakerConfig {
        dry_run: true,
        ..cfg()
    });
    dry.trip();
    assert_eq!(
        dry.b.breaker().gate(),
        Gate::Ask,
        "a dry run counts its would-be rejections under the lock"
    );
    dry.control(Control::ForceOpen);
    assert_eq!(
        dry.b.breaker().gate(),
        Gate::Ask,
        "even forced open, a dry run never rejects"
    );
}

#[test]
fn a_wall_clock_step_moves_since_but_never_a_cooldown() {
    // The breaker runs on the monotonic clock; the wall clock steps back one hour while it is
    // open. The cooldown ends 30 s of monotonic time later all the same, and the status page
    // shows wall times taken from the wall clock of the moment.
    const WALL: u64 = 1_764_484_800_000;
    let mut s = Story::new(cfg());
    s.trip();
    let opened_mono = s.now;
    let mut v = s.view();
    v.on_wall_clock(s.now, WALL);
    assert_eq!(v.since_ms, WALL);
    assert_eq!(v.retry_at_ms, Some(WALL + 30_000));

    s.wait(10_000);
    let stepped_wall = WALL + 10_000 - 3_600_000;
    let mut v = s.view();
    v.on_wall_clock(s.now, stepped_wall);
    assert_eq!(
        v.since_ms,
        stepped_wall - 10_000,
        "since follows the wall clock"
    );
    assert_eq!(v.retry_at_ms, Some(stepped_wall + 20_000));
    assert_eq!(s.rejected(), 20_000, "the cooldown did not move");

    s.wait(20_000);
    assert_eq!(s.now - opened_mono, 30_000);
    let _probe = s.probe();
    assert_eq!(s.state(), State::HalfOpen);
}
