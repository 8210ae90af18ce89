//! What the status page shows of an open breaker: the window that tripped it (kept while the
//! live window ages out, through half-open and failed probes, gone once closed or forced),
//! and the probes' response times among the window's percentiles.

mod common;

use circuit_breaker_core::breaker::{BreakerConfig, Control, ProbeResult, Ticket};
use circuit_breaker_core::snapshot::{State, TripCause, TripView, WindowView};
use common::*;

fn tripped(requests: u64, failures: u64, slow: u64) -> TripView {
    TripView {
        cause: TripCause::FailureRate,
        threshold: 5000,
        suspected: false,
        window: WindowView {
            seconds: 10,
            requests,
            failures,
            slow,
        },
    }
}

#[test]
fn the_window_that_tripped_outlives_the_live_one() {
    let mut s = Story::new(cfg());
    assert_eq!(s.view().tripped, None, "closed: none");
    s.requests(10, &ok());
    assert!(
        s.requests(10, &http(500)).is_some(),
        "10 of 20 failed: 50 %"
    );
    assert_eq!(s.view().tripped, Some(tripped(20, 10, 0)));
    assert_eq!(s.view().window.requests, 20);

    // The cooldown (30 s) outlasts the window (10 s): the live window empties, the trip stays.
    s.wait(15_000);
    let v = s.view();
    assert_eq!((v.state, v.window.requests), (State::Open, 0));
    assert_eq!(v.tripped, Some(tripped(20, 10, 0)));

    // Half-open, and a failed probe that reopens it: still the numbers of the trip.
    s.wait(15_000);
    let p = s.probe();
    assert_eq!(s.view().state, State::HalfOpen);
    assert_eq!(s.view().tripped, Some(tripped(20, 10, 0)));
    assert!(s.record(p, &http(500)).transition.is_some());
    assert_eq!(s.view().state, State::Open);
    assert_eq!(s.view().tripped, Some(tripped(20, 10, 0)));

    // Closed by probes: a fresh window, no trip.
    s.wait(60_000);
    for _ in 0..3 {
        let p = s.probe();
        s.record(p, &ok());
        s.wait(1000);
    }
    assert_eq!(s.state(), State::Closed);
    assert_eq!(s.view().tripped, None);
}

#[test]
fn a_slow_trip_and_a_suspected_one_say_so() {
    let mut s = Story::new(BreakerConfig {
        slow_ms: 100,
        slow_rate: 8000,
        suspect_min: 3,
        ..cfg()
    });
    s.requests(4, &ok());
    assert!(s.requests(16, &slow(500)).is_some(), "16 of 20 slow: 80 %");
    let t = s.view().tripped.expect("tripped");
    assert_eq!(
        (t.cause, t.threshold, t.suspected),
        (TripCause::SlowRate, 8000, false)
    );
    assert_eq!(
        (t.window.requests, t.window.failures, t.window.slow),
        (20, 0, 16)
    );
    assert_eq!(TripCause::SlowRate.name(), "slow_rate");

    s.control(Control::Reset);
    s.suspect(60_000);
    assert!(
        s.requests(3, &http(502)).is_some(),
        "3 failures while suspected"
    );
    let t = s.view().tripped.expect("tripped");
    assert_eq!((t.cause, t.suspected), (TripCause::FailureRate, true));
    assert_eq!(t.window.requests, 3);
}

#[test]
fn a_forced_state_is_no_trip() {
    let mut s = Story::new(cfg());
    s.control(Control::ForceOpen);
    assert_eq!(s.view().state, State::Open);
    assert_eq!(s.view().tripped, None, "forced open: no trip");
    s.control(Control::Reset);
    s.trip();
    assert!(s.view().tripped.is_some());
    s.control(Control::ForceOpen);
    assert_eq!(s.view().tripped, None, "forced after a trip");
    s.control(Control::ForceClose);
    assert_eq!(s.view().tripped, None);
    s.control(Control::Reset);
    s.trip();
    s.control(Control::Reset);
    assert_eq!(s.view().tripped, None, "reset");
}

#[test]
fn probes_give_the_origin_latency_while_open() {
    let mut s = Story::new(cfg());
    s.trip();
    s.wait(30_000);
    assert_eq!(s.view().latency.p95, None, "the trip's answers aged out");
    // Three probes: 200, 400 and 800 ms; not counted as the window's requests.
    for ms in [200, 400, 800] {
        let p = s.probe();
        s.wait(ms);
        s.record(p, &slow(ms));
        s.wait(1000 - ms);
    }
    assert_eq!(s.state(), State::Closed, "three good probes close it");
    assert_eq!(s.view().latency.p95, None, "closed: a fresh window");

    // Failed half-open probes: the breaker stays out, their times show.
    let mut s = Story::new(cfg());
    s.trip();
    s.wait(30_000);
    let p = s.probe();
    s.wait(2000);
    s.record(p, &timeout());
    let v = s.view();
    assert_eq!((v.state, v.window.requests), (State::Open, 0));
    let p95 = v.latency.p95.expect("the probe's time");
    assert!((800..=1300).contains(&p95), "{p95}");
}

#[test]
fn active_probes_give_the_origin_latency_too() {
    let mut s = Story::new(BreakerConfig {
        active: true,
        ..cfg()
    });
    s.trip();
    let due = s.b.hdr.active_probe_due_ms().expect("due");
    // Past the window: its only sample is the probe's.
    s.now = due + 11_000;
    let t = s.active_probe().expect("the probe granted");
    let (now, rnd) = (s.now, s.rnd);
    s.b.breaker().record_probe(
        now,
        rnd,
        t,
        &ProbeResult {
            failure: Some(circuit_breaker_core::breaker::ProbeFailure::Status(503)),
            tls: false,
            retry_after_s: 0,
            response_ms: 3000,
        },
    );
    let v = s.view();
    assert_eq!(v.state, State::Open);
    let p95 = v.latency.p95.expect("the probe's time");
    assert!((2400..=3600).contains(&p95), "{p95}");
    assert!(v.tripped.is_some());
    assert_eq!(v.window.requests, 0);
    // A stale ticket's outcome is no probe of the origin's: not shown.
    let (now, rnd) = (s.now, s.rnd);
    s.b.breaker().record_probe(
        now,
        rnd,
        Ticket::Probe(0),
        &ProbeResult {
            failure: None,
            tls: false,
            retry_after_s: 0,
            response_ms: 60_000,
        },
    );
    assert!(s.view().latency.p99.expect("p99") < 10_000);
}
