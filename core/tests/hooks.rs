//! The hooks other parts of the module drive, told with a fake clock: the fleet's suspicion,
//! designated prober and hastening, and what a breaker per server needs (the `max_eject` cap,
//! a cooldown that doubles on repeated ejections).

mod common;

use circuit_breaker_core::breaker::{Admission, BreakerConfig, Control};
use circuit_breaker_core::snapshot::State;
use common::*;

#[test]
fn a_suspected_breaker_trips_on_a_handful_of_local_failures() {
    let mut s = Story::new(cfg());
    s.suspect(60_000);
    assert_eq!(s.view().suspect_until_ms, Some(s.now + 60_000));
    s.requests(2, &ok());
    assert_eq!(s.request(&http(500)), None);
    assert_eq!(
        s.request(&http(500)),
        None,
        "4 requests: fewer than suspect_min"
    );
    let t = s.request(&http(500)).expect("tripped on 5");
    assert_eq!(
        t.reason,
        "failure rate 60% (3/5) >= 50% in 10s while suspected"
    );
    // Fewer failures than a brownout's telltale run (8 at 50 %): the run decides. All three
    // are in it: a hard failure, `probes` will do.
    assert_eq!(s.view().probes_needed, 3);
    // Interleaved with a good answer, they look like a brownout: K = 9 good probes.
    let mut s = Story::new(cfg());
    s.suspect(60_000);
    for a in [ok(), http(500), ok(), http(500)] {
        s.request(&a);
    }
    s.request(&http(500)).expect("tripped on 5");
    assert_eq!(s.view().probes_needed, 9);

    // The same traffic without suspicion, or after it expired, does not trip.
    for suspect_for in [0, 1000] {
        let mut s = Story::new(cfg());
        s.suspect(suspect_for);
        s.wait(1000);
        s.requests(2, &ok());
        assert_eq!(s.requests(3, &http(500)), None);
        assert_eq!(s.view().suspect_until_ms, None);
    }
}

#[test]
fn suspicion_never_opens_without_a_local_failure() {
    // Even a (refused by the parser) 0 % threshold needs one local failure.
    let mut s = Story::new(BreakerConfig {
        failure_rate: 0,
        ..cfg()
    });
    s.suspect(60_000);
    assert_eq!(s.requests(50, &ok()), None);
    assert_eq!(s.state(), State::Closed);
    assert!(s.request(&http(500)).is_some());
    // suspect_min above min_requests is min_requests; 0 is 1.
    let mut s = Story::new(BreakerConfig {
        min_requests: 3,
        suspect_min: 10,
        ..cfg()
    });
    s.suspect(60_000);
    s.request(&ok());
    s.request(&http(500));
    assert!(s.request(&http(500)).is_some(), "3 requests suffice");
    let mut s = Story::new(BreakerConfig {
        suspect_min: 0,
        ..cfg()
    });
    s.suspect(60_000);
    assert!(s.request(&http(500)).is_some(), "one local failure");
}

#[test]
fn a_member_that_is_not_the_prober_waits_for_the_one_that_is() {
    let mut s = Story::new(cfg());
    s.trip();
    s.wait(30_000);
    // The cooldown is over, but another fleet member probes: stay open, come back later.
    let d = s.admit_not_prober();
    assert_eq!(
        (d.admission, d.transition),
        (
            Admission::Reject {
                retry_after_ms: 1000
            },
            None
        )
    );
    assert_eq!(s.state(), State::Open);
    // The designated prober half-opens and probes.
    let p = s.probe();
    s.record(p, &ok());
    s.wait(1000);
    // Half-open, probe due: this member still starts none.
    assert_eq!(
        s.admit_not_prober().admission,
        Admission::Reject {
            retry_after_ms: 1000
        }
    );
    let p = s.probe();
    s.record(p, &ok());
    assert_eq!(s.view().consecutive_probe_successes, 2);
    // While cooling down, Retry-After still counts down to the end of the cooldown.
    let mut s = Story::new(cfg());
    s.trip();
    s.wait(10_000);
    assert_eq!(
        s.admit_not_prober().admission,
        Admission::Reject {
            retry_after_ms: 20_000
        }
    );
}

#[test]
fn peers_reporting_recovery_end_the_cooldown_now() {
    let mut s = Story::new(cfg());
    assert!(!s.hasten(), "closed: nothing to hasten");
    s.trip();
    s.wait(5000);
    assert!(s.hasten());
    assert_eq!(s.view().retry_at_ms, Some(s.now));
    let d = s.admit();
    assert_eq!(d.transition.unwrap().to, State::HalfOpen);
    assert!(matches!(d.admission, Admission::Probe(_)));
    // Half-open with a probe in flight: nothing to hasten; after it, the spacing is cut short.
    assert!(!s.hasten());
    let p = match d.admission {
        Admission::Probe(p) => p,
        _ => unreachable!(),
    };
    s.record(p, &ok());
    // (A hard outage's next good probe comes 166 ms later: `judge::run_spacing`.)
    s.wait(100);
    assert!(s.hasten());
    s.probe();
    // The probes still decide; a forced breaker is never hastened.
    s.control(Control::ForceOpen);
    assert!(!s.hasten());

    let mut active = Story::new(BreakerConfig {
        active: true,
        ..cfg()
    });
    active.trip();
    assert!(active.hasten());
    assert_eq!(active.b.hdr.active_probe_due_ms(), Some(active.now));
    assert!(active.active_probe().is_some());
}

#[test]
fn a_server_under_the_max_eject_cap_keeps_recording_but_stays_in() {
    let mut s = Story::new(BreakerConfig { probes: 1, ..cfg() });
    for _ in 0..30 {
        s.admit();
        let r = s.record_capped(circuit_breaker_core::breaker::Ticket::Normal, &http(500));
        assert_eq!((r.transition, r.state), (None, State::Closed));
    }
    assert_eq!(s.view().window.failures, 30, "the window kept recording");
    // Another server returned: the next outcome may eject this one at once.
    let t = s.request(&http(500)).expect("ejected");
    assert_eq!(t.reason, "failure rate 100% (31/31) >= 50% in 10s");
    assert_eq!(
        s.view().probes_needed,
        1,
        "a refusing server: one good probe returns it"
    );
    // A failed probe puts it back out whatever the cap says: it was out already.
    s.wait(30_000);
    let p = s.probe();
    let r = s.record_capped(p, &http(500));
    assert_eq!(r.state, State::Open);
}

#[test]
fn repeated_ejections_double_the_cooldown_until_the_server_stays_in() {
    let server = BreakerConfig {
        probes: 1,
        open_ms: 10_000,
        max_open_ms: 60_000,
        repeat_backoff: true,
        ..cfg()
    };
    let mut s = Story::new(server);
    // Ejected, returned, ejected again soon after: 10 s, 20 s, 40 s, then capped at 60 s.
    for cooldown in [10_000, 20_000, 40_000, 60_000, 60_000] {
        s.trip();
        assert_eq!(s.rejected(), cooldown);
        s.wait(cooldown);
        let p = s.probe();
        assert_eq!(s.record(p, &ok()).state, State::Closed);
        s.wait(5_000);
    }
    // In good standing for max_open: the next ejection starts from `open` again.
    s.wait(60_000);
    s.trip();
    assert_eq!(s.rejected(), 10_000);
    // A failed probe still doubles within an ejection, and the doubled base carries over.
    s.wait(10_000);
    let p = s.probe();
    s.record(p, &http(500));
    assert_eq!(s.rejected(), 20_000);
    s.wait(20_000);
    let p = s.probe();
    s.record(p, &ok());
    s.trip();
    assert_eq!(s.rejected(), 40_000);
    // A reset forgets it all.
    s.control(Control::Reset);
    s.trip();
    assert_eq!(s.rejected(), 10_000);

    // Without repeat_backoff (upstream breakers), every trip after a close waits `open`.
    let mut u = Story::new(BreakerConfig {
        repeat_backoff: false,
        ..server
    });
    for _ in 0..3 {
        u.trip();
        assert_eq!(u.rejected(), 10_000);
        u.wait(10_000);
        let p = u.probe();
        u.record(p, &ok());
    }
}

#[test]
fn with_active_probes_repeated_ejections_double_the_wait_for_the_first_probe() {
    let mut s = Story::new(BreakerConfig {
        probes: 1,
        active: true,
        repeat_backoff: true,
        max_open_ms: 8_000,
        ..cfg()
    });
    for wait in [1000, 2000, 4000, 8000, 8000] {
        let t = s.trip();
        assert_eq!(t.detail, Some(format!("retry in {}s", wait / 1000)));
        assert_eq!(s.next_active_probe(&ok()).state, State::Closed);
        s.wait(1000);
    }
}
