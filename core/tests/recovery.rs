//! Recovery, told with a fake clock: how many good probes close a breaker, active probes, and
//! the ramp back to full traffic.

mod common;

use circuit_breaker_core::breaker::{
    Admission, BreakerConfig, Control, FailureClass, FailureSet, Gate, Ticket, PROBE_LEASE_MS,
};
use circuit_breaker_core::snapshot::State;
use common::*;

/// Trips a default breaker the way a brownout does: every other request fails, so the run of
/// failures at the trip is 1.
fn brownout_trip(s: &mut Story) {
    let mut last = None;
    for _ in 0..10 {
        s.request(&ok());
        last = s.request(&http(500));
    }
    assert_eq!(
        last.expect("tripped").reason,
        "failure rate 50% (10/20) >= 50% in 10s"
    );
}

/// Waits out the cooldown and sends passive probes ending with `outcomes`; returns the last
/// transition.
fn probes(s: &mut Story, outcomes: &[circuit_breaker_core::breaker::Attempt]) -> Option<State> {
    let mut state = None;
    for a in outcomes {
        let wait = s.rejected();
        s.wait(wait);
        let p = s.probe();
        state = Some(s.record(p, a).state);
    }
    state
}

#[test]
fn a_hard_failure_closes_after_probes_good_probes_however_long_it_lasted() {
    // The origin served 100 requests well, then refused every connection (judged by the
    // rate: the tenth in a row would open it first, see `consecutive.rs`).
    let mut s = Story::new(rates_only());
    s.requests(100, &ok());
    let t = s.requests(100, &timeout()).expect("tripped");
    assert_eq!(t.reason, "failure rate 50% (100/200) >= 50% in 10s");
    assert_eq!(
        s.view().probes_needed,
        3,
        "a hard failure: `probes` will do"
    );
    // It stays down for four probes: failed probes before any good one are the outage, not a
    // sign of a brownout, and ask for nothing more.
    probes(&mut s, &[timeout(), timeout(), timeout(), timeout()]);
    assert_eq!(s.view().probes_needed, 3);
    // Then it heals: exactly three good probes close the breaker.
    assert_eq!(probes(&mut s, &[ok(), ok()]), Some(State::HalfOpen));
    let wait = s.rejected();
    s.wait(wait);
    let p = s.probe();
    let t = s.record(p, &ok()).transition.expect("closed");
    assert_eq!((t.to, t.reason.as_str()), (State::Closed, "3 good probes"));
    assert_eq!(s.view().probes_needed, 0, "closed: nothing needed");
}

#[test]
fn a_brownout_trip_needs_a_long_run_of_good_probes() {
    // Half the requests fail (the threshold): the failures are spread out, not one long run.
    let mut s = Story::new(rates_only());
    brownout_trip(&mut s);
    // K = 1 + ceil(ln 0.005 / ln 0.5) = 9 good probes in a row.
    assert_eq!(s.view().probes_needed, 9);
    assert_eq!(
        probes(&mut s, &[ok(); 8]),
        Some(State::HalfOpen),
        "8 is not enough"
    );
    assert_eq!(s.view().consecutive_probe_successes, 8);
    s.wait(1000);
    let p = s.probe();
    let t = s.record(p, &ok()).transition.expect("closed");
    assert_eq!(t.reason, "9 good probes");

    // At a 20 % threshold a brownout needs 25 (0.8^24 < 0.5 %); a hard failure still 3.
    let low = BreakerConfig {
        failure_rate: 2000,
        ..rates_only()
    };
    let mut s = Story::new(low);
    for _ in 0..4 {
        s.requests(4, &ok());
        s.request(&http(500));
    }
    assert_eq!(s.state(), State::Open);
    assert_eq!(s.view().probes_needed, 25);
    let mut s = Story::new(low);
    s.requests(80, &ok());
    s.requests(20, &http(502));
    assert_eq!(s.state(), State::Open);
    assert_eq!(s.view().probes_needed, 3);
}

#[test]
fn a_hard_failure_over_some_background_noise_is_still_hard() {
    let low = BreakerConfig {
        failure_rate: 2000,
        ..rates_only()
    };
    // 5 % of requests failed before the outage (below 0.2 / (4 - 0.6) = 5.9 %): the run at the
    // trip, 19, holds more than three quarters of the window's 24 failures.
    let mut s = Story::new(low);
    for _ in 0..5 {
        s.requests(19, &ok());
        s.request(&http(500));
    }
    s.requests(19, &timeout()).expect("tripped");
    assert_eq!(s.view().window.failures, 24);
    assert_eq!(s.view().probes_needed, 3);
    // At 10 % the failures before the outage weigh too much (13 of 23): judged as a brownout.
    let mut s = Story::new(low);
    for _ in 0..10 {
        s.requests(9, &ok());
        s.request(&http(500));
    }
    s.requests(13, &timeout()).expect("tripped");
    assert_eq!(s.view().probes_needed, 25);
}

#[test]
fn a_failed_probe_after_a_good_one_doubles_the_run_needed() {
    let mut s = Story::new(cfg());
    brownout_trip(&mut s);
    assert_eq!(s.view().probes_needed, 9);
    // Good, then failed: the origin flakes. Twice the run, and the cooldown doubles as before.
    probes(&mut s, &[ok(), http(500)]);
    let v = s.view();
    assert_eq!(
        (v.state, v.probes_needed, v.cooldown_ms),
        (State::Open, 18, 60_000)
    );
    probes(&mut s, &[ok(), ok(), http(500)]);
    assert_eq!(s.view().probes_needed, 36, "4 K");
    probes(&mut s, &[ok(), http(503)]);
    assert_eq!(s.view().probes_needed, 36, "capped at 4 K");

    // A hard trip that relapses is judged as soft from then on: max(2 × 3, K = 9).
    let mut s = Story::new(cfg());
    s.trip();
    assert_eq!(s.view().probes_needed, 3);
    probes(&mut s, &[http(500), ok(), ok(), http(500)]);
    assert_eq!(s.view().probes_needed, 9);
    // A new trip after a close starts afresh.
    probes(&mut s, &[ok(); 9]);
    assert_eq!(s.state(), State::Closed);
    s.trip();
    assert_eq!(s.view().probes_needed, 3);
}

#[test]
fn a_slow_trip_is_judged_by_the_slow_rate() {
    // Every call hangs past `slow` (a hard slow trip); probes are judged by probe_latency.
    let mut s = Story::new(BreakerConfig {
        slow_ms: 500,
        slow_rate: 2000,
        probe_latency_ms: 500,
        ..cfg()
    });
    s.requests(80, &ok());
    let t = s.requests(20, &slow(900)).expect("tripped");
    assert_eq!(t.reason, "slow rate 20% (20/100) >= 20% in 10s");
    assert_eq!(s.view().probes_needed, 3);
    probes(&mut s, &[slow(900), ok(), ok(), ok()]);
    assert_eq!(s.state(), State::Closed);
}

fn ramp_cfg() -> BreakerConfig {
    BreakerConfig {
        ramp_ms: 10_000,
        ..cfg()
    }
}

/// Trips and closes a breaker by probes; returns when it closed.
fn recover(s: &mut Story) -> u64 {
    s.trip();
    probes(s, &[ok(), ok(), ok()]);
    assert_eq!(s.state(), State::Closed);
    s.now
}

#[test]
fn after_closing_by_probes_the_share_of_requests_ramps_up() {
    let mut s = Story::new(ramp_cfg());
    s.trip();
    probes(&mut s, &[ok(), ok()]);
    s.wait(1000);
    let p = s.probe();
    let t = s.record(p, &ok()).transition.expect("closed");
    assert_eq!(t.reason, "3 good probes");
    assert_eq!(t.detail.as_deref(), Some("ramp from 10% over 10s"));
    // 10 % at first: of 1000 requests about 900 are turned away (and told to come back in 1 s).
    assert_eq!(s.view().ramp_share, 1000);
    let away = s.turned_away_of(1000);
    assert!((880..=920).contains(&away), "{away}");
    // Halfway: 55 %.
    s.wait(5000);
    assert_eq!(s.view().ramp_share, 5500);
    let away2 = s.turned_away_of(1000);
    assert!((430..=470).contains(&away2), "{away2}");
    // Done: everything passes.
    s.wait(5000);
    assert_eq!(s.view().ramp_share, 10_000);
    assert_eq!(s.turned_away_of(1000), 0);
    let v = s.view();
    assert_eq!(v.state, State::Closed);
    assert_eq!(u64::from(away + away2), v.totals.ramp_shed);
    assert_eq!(
        v.totals.short_circuited, 2,
        "the ramp's turn-aways are counted apart"
    );
}

#[test]
fn a_relapse_during_the_ramp_reopens_the_breaker() {
    let mut s = Story::new(ramp_cfg());
    recover(&mut s);
    s.wait(2000);
    // The requests let through fail: the live window judges them as usual.
    s.rnd = 0; // within any share
    let t = s.requests(20, &http(500)).expect("reopened");
    assert_eq!((t.from, t.to), (State::Closed, State::Open));
    let v = s.view();
    assert_eq!((v.ramp_share, v.probes_needed), (10_000, 3));
    assert_eq!(s.rejected(), 30_000);
}

#[test]
fn an_operators_reset_or_force_close_never_ramps() {
    let mut s = Story::new(ramp_cfg());
    s.trip();
    let t = s.control(Control::Reset).unwrap();
    assert_eq!(t.detail, None);
    assert_eq!(s.turned_away_of(100), 0);
    s.trip();
    s.control(Control::ForceClose);
    assert_eq!(s.turned_away_of(100), 0);
    // Nor does a force_close in the middle of a ramp leave it running.
    s.control(Control::Reset);
    recover(&mut s);
    s.control(Control::ForceClose);
    assert_eq!(s.turned_away_of(100), 0);
    assert_eq!(s.view().ramp_share, 10_000);
}

#[test]
fn the_gate_ramps_without_the_lock() {
    let mut s = Story::new(ramp_cfg());
    let closed_at = recover(&mut s);
    let gate = s.b.breaker().gate();
    assert_eq!(
        gate,
        Gate::Ramp {
            until_ms: closed_at + 10_000,
            ramp_ms: 10_000,
            start: 1000
        }
    );
    // The same draw gets the same answer with or without the lock.
    for (i, at) in [0u64, 2500, 7000, 9999].into_iter().enumerate() {
        for rnd in [0, u32::MAX / 4, u32::MAX / 2, u32::MAX] {
            let lock_free = gate.admit(closed_at + at, rnd).unwrap();
            let mut copy = s.b.clone();
            let locked = copy
                .breaker()
                .admit(closed_at + at, rnd, 1, &|_| true, true)
                .admission;
            assert_eq!(lock_free, locked, "case {i} rnd {rnd}");
        }
    }
    assert_eq!(
        gate.admit(closed_at + 10_000, 0),
        Some(Admission::Pass {
            would_reject: false
        }),
        "after the ramp the stale gate lets everything through"
    );
    // Once the breaker has seen the ramp's end, the gate is a plain pass.
    s.wait(10_000);
    s.request(&ok());
    assert_eq!(s.b.breaker().gate(), Gate::Pass);
}

#[test]
fn a_dry_run_ramps_only_on_paper() {
    let mut s = Story::new(BreakerConfig {
        dry_run: true,
        ..ramp_cfg()
    });
    s.trip();
    s.wait(30_000);
    for _ in 0..3 {
        let p = s.probe();
        s.record(p, &ok());
        s.wait(1000);
    }
    assert_eq!(s.state(), State::Closed);
    assert_eq!(s.b.breaker().gate(), Gate::Ask, "counted under the lock");
    s.rnd = u32::MAX; // outside any share below 100 %
    assert_eq!(s.admit().admission, Admission::Pass { would_reject: true });
    assert_eq!(s.view().totals.ramp_shed, 1);
}

fn active_cfg() -> BreakerConfig {
    BreakerConfig {
        active: true,
        ..cfg()
    }
}

#[test]
fn active_probes_risk_no_user_request_and_see_the_heal_within_probes_intervals() {
    let mut s = Story::new(active_cfg());
    let t = s.trip();
    assert_eq!(
        t.detail.as_deref(),
        Some("retry in 1s"),
        "first probe after probe_interval"
    );
    // No user request is ever a probe: Retry-After says when the next active probe is due.
    assert_eq!(s.rejected(), 1000);
    s.wait(300);
    assert_eq!(s.rejected(), 700);
    assert_eq!(s.active_probe(), None, "not due yet");
    s.wait(700);
    assert_eq!(s.b.hdr.active_probe_due_ms(), Some(s.now));
    let first = s.active_probe().expect("due");
    assert_eq!(s.active_probe(), None, "one in flight for the instance");
    assert!(matches!(s.admit().admission, Admission::Reject { .. }));
    // Still down: the breaker stays open, no transition, nothing doubles.
    let r = s.record(first, &timeout());
    assert_eq!((r.transition, r.state), (None, State::Open));
    assert_eq!(s.rejected(), 1000, "the next one in probe_interval");
    for _ in 0..5 {
        assert_eq!(s.next_active_probe(&timeout()).state, State::Open);
    }
    assert_eq!(
        s.view().cooldown_ms,
        1000,
        "active probes never double the cooldown"
    );
    assert_eq!(s.view().retry_at_ms, Some(s.now + 1000));
    // The origin heals: three good probes, one a second, close it — no half-open on the way.
    let healed = s.now;
    assert_eq!(s.next_active_probe(&ok()).state, State::Open);
    assert_eq!(s.next_active_probe(&ok()).state, State::Open);
    let r = s.next_active_probe(&ok());
    let t = r.transition.expect("closed");
    assert_eq!(
        (t.from, t.to, t.reason.as_str()),
        (State::Open, State::Closed, "3 good probes")
    );
    assert!(s.now - healed <= 3 * 1000);
    let v = s.view();
    assert_eq!((v.totals.half_opened, v.totals.probes), (0, 9));
    assert_eq!(s.b.hdr.active_probe_due_ms(), None);
}

#[test]
fn a_long_run_after_a_brownout_takes_the_time_of_probes_probes() {
    let mut s = Story::new(active_cfg());
    brownout_trip(&mut s);
    assert_eq!(s.view().probes_needed, 9, "50 %: 9 good probes in a row");
    // Still sick: a failed probe keeps the interval.
    assert_eq!(s.next_active_probe(&http(500)).state, State::Open);
    assert_eq!(s.rejected(), 1000);
    // Healed: the first good probe within an interval, then the run at 3 s / 9 = 333 ms.
    let healed = s.now;
    assert_eq!(s.next_active_probe(&ok()).state, State::Open);
    assert_eq!(s.b.hdr.active_probe_due_ms(), Some(s.now + 333));
    assert_eq!(
        s.view().retry_at_ms,
        Some(s.now + 333),
        "and Retry-After says so"
    );
    let mut last = None;
    for _ in 0..8 {
        last = s.next_active_probe(&ok()).transition;
    }
    assert_eq!(last.expect("closed").reason, "9 good probes");
    // Within probe_interval + probes × probe_interval of the heal, as after a hard failure
    // (one a second, the 9 took 9 s).
    assert!(s.now - healed <= 1000 + 3 * 1000, "{} ms", s.now - healed);
    // A failed probe in the middle of the run (a relapse) goes back to the full interval.
    let mut s = Story::new(active_cfg());
    brownout_trip(&mut s);
    s.next_active_probe(&ok());
    let at = s.now;
    s.next_active_probe(&http(500));
    assert_eq!(s.now, at + 333);
    assert_eq!(s.b.hdr.active_probe_due_ms(), Some(s.now + 1000));
}

#[test]
fn with_active_probes_the_gate_rejects_for_the_whole_open_period() {
    let mut s = Story::new(active_cfg());
    s.trip();
    let gate = s.b.breaker().gate();
    assert_eq!(
        gate,
        Gate::Reject {
            until_ms: s.now + 1000,
            announce_ms: s.now + 1000,
            wait_ms: 1000
        }
    );
    assert_eq!(
        gate.admit(s.now + 400, 0),
        Some(Admission::Reject {
            retry_after_ms: 600
        })
    );
    assert_eq!(
        gate.admit(s.now + 5000, 0),
        Some(Admission::Reject {
            retry_after_ms: 1000
        }),
        "a probe overdue or in flight: no lock needed either"
    );
    s.wait(1000);
    s.active_probe().unwrap();
    assert_eq!(s.rejected(), 1000, "while it is in flight");
}

#[test]
fn an_active_probe_is_reclaimed_from_a_dead_worker_or_after_its_lease() {
    let mut s = Story::new(active_cfg());
    s.trip();
    s.wait(1000);
    let (now, rnd) = (s.now, s.rnd);
    let first = s.b.breaker().active_probe(now, rnd, 7, &|_| true).unwrap();
    s.wait(5000);
    let now = s.now;
    assert_eq!(s.b.breaker().active_probe(now, rnd, 8, &|_| true), None);
    let second =
        s.b.breaker()
            .active_probe(now, rnd, 8, &|o| o != 7)
            .unwrap();
    assert_ne!(first, second);
    // The dead worker's late answer decides nothing.
    s.record(first, &ok());
    assert_eq!(s.view().consecutive_probe_successes, 0);
    s.wait(PROBE_LEASE_MS);
    let now = s.now;
    let third = s.b.breaker().active_probe(now, rnd, 9, &|_| true).unwrap();
    s.record(second, &ok());
    s.record(third, &ok());
    assert_eq!(s.view().consecutive_probe_successes, 1);
    // A probe that got no verdict is just freed.
    let fourth = {
        s.wait(1000);
        s.active_probe().unwrap()
    };
    let now = s.now;
    s.b.breaker().release(now, fourth);
    s.wait(1000);
    assert!(s.active_probe().is_some());
}

#[test]
fn an_active_probe_answered_with_retry_after_waits_for_it_up_to_max_open() {
    let mut failures = FailureSet::DEFAULT;
    failures.insert(FailureClass::Http503RetryAfter);
    let mut s = Story::new(BreakerConfig {
        failures,
        max_open_ms: 60_000,
        ..active_cfg()
    });
    s.trip();
    s.next_active_probe(&retry_after(503, 20));
    assert_eq!(s.rejected(), 20_000);
    s.next_active_probe(&retry_after(503, 3600));
    assert_eq!(s.rejected(), 60_000, "capped at max_open");
    assert_eq!(s.state(), State::Open);
}

#[test]
fn forced_open_sends_no_active_probe_and_dry_run_passes_everyone() {
    let mut s = Story::new(active_cfg());
    s.trip();
    s.wait(1000);
    let stale = s.active_probe().unwrap();
    s.control(Control::ForceOpen);
    assert_eq!(s.b.hdr.active_probe_due_ms(), None);
    s.wait(10_000);
    assert_eq!(s.active_probe(), None);
    assert_eq!(s.record(stale, &ok()).transition, None);
    assert_eq!(s.rejected(), 30_000, "forced open announces `open`");
    s.control(Control::Reset);
    assert_eq!(s.active_probe(), None, "closed");

    let mut dry = Story::new(BreakerConfig {
        dry_run: true,
        ..active_cfg()
    });
    dry.trip();
    assert_eq!(
        dry.admit().admission,
        Admission::Pass { would_reject: true }
    );
    let r = dry.next_active_probe(&ok());
    assert_eq!(r.state, State::Open);
    assert_eq!(dry.record(Ticket::Normal, &ok()).state, State::Open);
}

#[test]
fn active_probes_close_into_the_ramp() {
    let mut s = Story::new(BreakerConfig {
        ramp_ms: 20_000,
        ramp_start: 2500,
        ..active_cfg()
    });
    s.trip();
    for _ in 0..2 {
        s.next_active_probe(&ok());
    }
    let t = s.next_active_probe(&ok()).transition.unwrap();
    assert_eq!(t.detail.as_deref(), Some("ramp from 25% over 20s"));
    assert_eq!(s.view().ramp_share, 2500);
}

#[test]
fn an_active_probe_is_judged_by_its_own_result_not_the_failure_classes() {
    use circuit_breaker_core::breaker::{ProbeFailure, ProbeResult};
    // Failure classes that a 404 is not in: the probe still fails, and a good answer closes.
    let mut s = Story::new(BreakerConfig {
        active: true,
        probes: 1,
        probe_interval_ms: 1000,
        ..cfg()
    });
    s.trip();
    s.wait(1000);
    let now = s.now;
    let t =
        s.b.breaker()
            .active_probe(now, 0, 1, &|_| true)
            .expect("a probe is due");
    let failed = ProbeResult {
        failure: Some(ProbeFailure::Status(404)),
        tls: false,
        retry_after_s: 5,
        response_ms: 10,
    };
    let r = s.b.breaker().record_probe(now, 0, t, &failed);
    assert_eq!(r.state, State::Open);
    assert_eq!(s.view().consecutive_probe_successes, 0);
    assert!(
        s.view().retry_at_ms.unwrap() >= now + 5000,
        "the origin's Retry-After delays the next probe"
    );
    s.wait(5000);
    let now = s.now;
    let t =
        s.b.breaker()
            .active_probe(now, 0, 1, &|_| true)
            .expect("due again");
    let good = ProbeResult {
        failure: None,
        ..failed
    };
    let r = s.b.breaker().record_probe(now, 0, t, &good);
    assert_eq!(r.state, State::Closed);
    assert_eq!(r.transition.map(|t| t.reason), Some("1 good probe".into()));
}
