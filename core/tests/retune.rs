//! A reload that changes a breaker's parameters keeps the incident an incident: the state,
//! the episode, the totals and (same length) the window survive; the new thresholds judge
//! from then on.

mod common;

use circuit_breaker_core::breaker::{
    Admission, Attempt, BreakerConfig, Control, Ending, OwnedBreaker, Ticket,
};
use circuit_breaker_core::snapshot::{Forced, State};
use common::*;
use proptest::prelude::*;

fn retune(s: &mut Story, cfg: BreakerConfig) {
    let now = s.now;
    let r = s.b.breaker().retune(now, cfg).expect("same window length");
    assert!(r.window_kept);
}

/// The breaker laid out anew for `cfg` (another window length) adopting `s`'s.
fn adopt(s: &mut Story, cfg: BreakerConfig) {
    let old = *s.b.breaker().header();
    let mut fresh = OwnedBreaker::with_epoch(cfg, s.now, 99);
    let r = fresh.breaker().adopt(&old, s.now);
    assert!(!r.window_kept);
    s.b = fresh;
}

fn trip(s: &mut Story) {
    s.requests(20, &http(500));
    assert_eq!(s.state(), State::Open);
}

#[test]
fn an_open_breaker_stays_open_until_its_probe() {
    let mut s = Story::new(cfg());
    trip(&mut s);
    let before = s.view().totals;
    s.wait(5_000);
    retune(
        &mut s,
        BreakerConfig {
            failure_rate: 8000,
            ..cfg()
        },
    );
    assert_eq!(s.state(), State::Open);
    assert_eq!(s.view().totals, before, "no counter moved");
    // The cooldown drawn before the reload (30 s, no jitter) still holds.
    assert_eq!(s.rejected(), 25_000);
    s.wait(24_999);
    assert_eq!(s.rejected(), 1);
    s.wait(1);
    let t = s.probe();
    assert_eq!(s.state(), State::HalfOpen);
    s.record(t, &http(500));
    assert_eq!(s.state(), State::Open, "a failed probe reopens it");
    assert_eq!(s.view().cooldown_ms, 60_000, "and doubles the cooldown");
}

#[test]
fn the_old_behaviour_would_have_sent_min_requests() {
    // What a reset did (a fresh breaker): 20 requests reach the failing origin.
    let mut s = Story::new(cfg());
    trip(&mut s);
    s.b = OwnedBreaker::new(
        BreakerConfig {
            failure_rate: 8000,
            ..cfg()
        },
        s.now,
    );
    let mut passed = 0;
    while s.state() == State::Closed {
        s.request(&http(500));
        passed += 1;
    }
    assert_eq!(passed, 20);
}

#[test]
fn a_kept_window_trips_on_fewer_new_requests_than_min_requests() {
    let mut s = Story::new(rates_only());
    s.requests(8, &ok());
    s.requests(7, &http(500));
    assert_eq!(s.state(), State::Closed, "15 requests, below min_requests");
    retune(
        &mut s,
        BreakerConfig {
            failure_rate: 4000,
            ..rates_only()
        },
    );
    assert_eq!(s.view().window.requests, 15, "window kept");
    assert_eq!(s.state(), State::Closed, "no trip at the reload itself");
    let mut passed = 0;
    while s.state() == State::Closed {
        s.request(&http(500));
        passed += 1;
    }
    assert_eq!(passed, 5, "the 20th request of the window trips it");
}

#[test]
fn a_lower_rate_already_reached_trips_on_the_next_outcome() {
    let mut s = Story::new(rates_only());
    s.requests(14, &ok());
    s.requests(6, &http(500));
    assert_eq!(s.state(), State::Closed, "30 % < 50 %");
    retune(
        &mut s,
        BreakerConfig {
            failure_rate: 2500,
            ..rates_only()
        },
    );
    assert_eq!(s.state(), State::Closed, "not at the reload");
    let t = s.request(&http(500)).expect("trips");
    assert_eq!(t.reason, "failure rate 33.3% (7/21) >= 25% in 10s");
}

#[test]
fn another_window_length_keeps_the_state_and_empties_the_window() {
    let mut s = Story::new(cfg());
    trip(&mut s);
    let before = s.view().totals;
    let since = s.view().since_ms;
    s.wait(1_000);
    adopt(
        &mut s,
        BreakerConfig {
            window_s: 30,
            ..cfg()
        },
    );
    let v = s.view();
    assert_eq!(v.state, State::Open);
    assert_eq!(v.since_ms, since);
    assert_eq!(v.totals, before);
    assert_eq!(v.window.seconds, 30);
    assert_eq!(v.window.requests, 0);
    assert_eq!(s.rejected(), 29_000, "the cooldown kept");
    s.wait(29_000);
    let t = s.probe();
    assert_eq!(s.record(t, &ok()).state, State::HalfOpen);
    assert_eq!(
        s.view().consecutive_probe_successes,
        1,
        "the probe's ticket still held"
    );
}

#[test]
fn a_closed_breaker_changing_window_starts_it_empty_with_its_totals() {
    let mut s = Story::new(rates_only());
    s.requests(15, &http(500));
    adopt(
        &mut s,
        BreakerConfig {
            window_s: 5,
            ..rates_only()
        },
    );
    assert_eq!(s.state(), State::Closed);
    assert_eq!(s.view().window.requests, 0);
    assert_eq!(s.view().totals.failures, 15);
    assert_eq!(s.requests(19, &http(500)), None);
    assert!(
        s.request(&http(500)).is_some(),
        "min_requests in the new window"
    );
}

#[test]
fn a_probe_in_flight_keeps_its_ticket_and_the_new_probes_count() {
    let mut s = Story::new(cfg());
    trip(&mut s);
    s.wait(30_000);
    let t = s.probe();
    retune(&mut s, BreakerConfig { probes: 1, ..cfg() });
    assert_eq!(s.state(), State::HalfOpen);
    let r = s.record(t, &ok());
    assert_eq!(r.state, State::Closed, "one good probe closes it now");
}

#[test]
fn active_probes_on_and_off_again_keep_the_probe_in_flight_the_only_one() {
    let mut s = Story::new(cfg());
    trip(&mut s);
    s.wait(30_000);
    let t = s.probe();
    retune(
        &mut s,
        BreakerConfig {
            active: true,
            ..cfg()
        },
    );
    assert_eq!(s.state(), State::Open);
    retune(&mut s, cfg());
    s.wait(5_000);
    for _ in 0..20 {
        assert!(
            !matches!(s.admit().admission, Admission::Probe(_)),
            "a second probe beside the one in flight"
        );
        s.wait(100);
    }
    s.record(t, &ok());
    assert_eq!(
        s.view().consecutive_probe_successes,
        1,
        "the probe in flight counts"
    );
}

#[test]
fn more_probes_lengthen_the_run() {
    let mut s = Story::new(cfg());
    trip(&mut s);
    s.wait(30_000);
    let t = s.probe();
    s.record(t, &ok());
    retune(&mut s, BreakerConfig { probes: 5, ..cfg() });
    assert_eq!(s.view().probes_needed, 5);
    assert_eq!(
        s.view().consecutive_probe_successes,
        1,
        "the good probe kept"
    );
    for _ in 0..3 {
        s.wait(1_000);
        let t = s.probe();
        assert_eq!(s.record(t, &ok()).state, State::HalfOpen);
    }
    s.wait(1_000);
    let t = s.probe();
    assert_eq!(s.record(t, &ok()).state, State::Closed);
}

#[test]
fn a_lower_max_open_cuts_the_cooldown_a_higher_open_does_not_extend_it() {
    let mut s = Story::new(cfg());
    trip(&mut s);
    retune(
        &mut s,
        BreakerConfig {
            open_ms: 60_000,
            max_open_ms: 120_000,
            ..cfg()
        },
    );
    assert_eq!(s.rejected(), 30_000, "kept");
    let now = s.now;
    let r =
        s.b.breaker()
            .retune(
                now,
                BreakerConfig {
                    open_ms: 5_000,
                    max_open_ms: 10_000,
                    ..cfg()
                },
            )
            .unwrap();
    assert!(r.cooldown_cut);
    assert_eq!(s.rejected(), 10_000, "cut to the new max_open");
    s.wait(10_000);
    s.probe();
}

#[test]
fn the_doubling_count_is_kept() {
    let mut s = Story::new(cfg());
    trip(&mut s);
    s.wait(30_000);
    let t = s.probe();
    s.record(t, &http(500));
    assert_eq!(s.view().cooldown_ms, 60_000);
    retune(
        &mut s,
        BreakerConfig {
            open_ms: 10_000,
            ..cfg()
        },
    );
    s.wait(60_000);
    let t = s.probe();
    s.record(t, &http(500));
    assert_eq!(
        s.view().cooldown_ms,
        40_000,
        "doubled twice from the new open"
    );
}

#[test]
fn forced_states_are_kept() {
    let mut s = Story::new(cfg());
    s.control(Control::ForceOpen);
    retune(
        &mut s,
        BreakerConfig {
            failure_rate: 9000,
            ..cfg()
        },
    );
    assert_eq!(s.view().forced, Some(Forced::Open));
    s.wait(3_600_000);
    s.rejected();
}

#[test]
fn dry_run_toggled_keeps_the_state() {
    let dry = BreakerConfig {
        dry_run: true,
        ..cfg()
    };
    let mut s = Story::new(dry);
    trip(&mut s);
    assert!(matches!(
        s.admit().admission,
        Admission::Pass { would_reject: true }
    ));
    retune(&mut s, cfg());
    assert_eq!(s.state(), State::Open);
    s.rejected();
}

#[test]
fn probe_uri_added_to_a_half_open_breaker_makes_it_open_with_its_probe_due() {
    let mut s = Story::new(cfg());
    trip(&mut s);
    s.wait(30_000);
    let t = s.probe();
    s.record(t, &ok());
    assert_eq!(s.state(), State::HalfOpen);
    retune(
        &mut s,
        BreakerConfig {
            active: true,
            ..cfg()
        },
    );
    assert_eq!(s.state(), State::Open);
    let opened = s.view().totals.opened;
    assert_eq!(opened, 1, "not a trip");
    s.next_active_probe(&ok());
    s.next_active_probe(&ok());
    assert_eq!(s.state(), State::Closed);
}

#[test]
fn a_ramp_under_way_ends_no_later_than_the_new_ramp() {
    let ramping = BreakerConfig {
        ramp_ms: 60_000,
        probes: 1,
        ..cfg()
    };
    let mut s = Story::new(ramping);
    trip(&mut s);
    s.wait(30_000);
    let t = s.probe();
    s.record(t, &ok());
    assert!(s.turned_away_of(1000) > 500);
    retune(
        &mut s,
        BreakerConfig {
            ramp_ms: 0,
            ..ramping
        },
    );
    assert_eq!(s.turned_away_of(1000), 0, "ramp=0 ends it");
}

fn any_attempt() -> impl Strategy<Value = Attempt> {
    prop_oneof![
        Just(ok()),
        Just(http(500)),
        Just(http(503)),
        Just(Attempt::ended(Ending::Timeout, 1000)),
        (0u64..3000).prop_map(slow),
    ]
}

fn any_cfg(window_s: u32) -> impl Strategy<Value = BreakerConfig> {
    (
        1u32..40,
        0u32..=10_000,
        prop_oneof![Just(0u32), 100u32..2000],
        1_000u32..60_000,
        0u32..=5000,
        1u32..6,
        any::<bool>(),
        0u32..12,
        any::<bool>(),
    )
        .prop_map(
            move |(min, rate, slow, open, jitter, probes, active, consec, dry)| BreakerConfig {
                window_s,
                min_requests: min,
                failure_rate: rate,
                slow_ms: slow,
                slow_rate: 5000,
                open_ms: open,
                max_open_ms: open * 4,
                jitter,
                probes,
                active,
                consecutive: consec,
                dry_run: dry,
                ..BreakerConfig::default()
            },
        )
}

proptest! {
    /// Whatever happened before, a retune moves no counter and no state; the same window
    /// length keeps the window; an open breaker (not dry run, not forced) admits nothing
    /// before its deadline but a probe.
    #[test]
    fn retune_keeps_state_totals_and_window(
        old in any_cfg(10),
        new in any_cfg(10),
        other in any_cfg(20),
        history in proptest::collection::vec((0u64..700, any_attempt()), 0..200),
        ahead in 0u64..120_000,
    ) {
        let mut s = Story::new(old);
        for (step, a) in &history {
            s.wait(*step);
            match s.admit().admission {
                Admission::Pass { .. } => { s.record(Ticket::Normal, a); }
                Admission::Probe(t) => { s.record(t, a); }
                _ => {}
            }
        }
        let before = s.view();
        let copy = s.b.clone();
        retune(&mut s, new);
        let after = s.view();
        let state = if before.state == State::HalfOpen && new.active {
            State::Open
        } else {
            before.state
        };
        prop_assert_eq!(after.state, state);
        prop_assert_eq!(after.forced, before.forced);
        prop_assert_eq!(after.totals, before.totals);
        prop_assert_eq!(after.window, before.window);
        prop_assert_eq!(after.since_ms, before.since_ms);
        if before.state == State::Open && !new.dry_run && before.forced.is_none() {
            let start = s.now;
            while s.now <= start + ahead {
                match s.admit().admission {
                    Admission::Pass { .. } => prop_assert!(false, "an open breaker passed a request"),
                    Admission::Probe(_) => break,
                    _ => {}
                }
                s.wait(997);
            }
        }
        // Another length: the same, the window empty.
        let mut a = Story { b: copy, now: s.now, rnd: s.rnd };
        let v0 = a.view();
        adopt(&mut a, other);
        let v1 = a.view();
        let state = if v0.state == State::HalfOpen && other.active {
            State::Open
        } else {
            v0.state
        };
        prop_assert_eq!(v1.state, state);
        prop_assert_eq!(v1.forced, v0.forced);
        prop_assert_eq!(v1.totals, v0.totals);
        prop_assert_eq!(v1.window.requests, 0);
        prop_assert_eq!(v1.window.seconds, 20);
    }
}
