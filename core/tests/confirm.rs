//! A trip that asks the breaker's own probe first (`confirm_ms`, a stream upstream with
//! `circuit_breaker_probe`): silence is the one signal a client can shape, so the window that
//! would open the breaker is believed only once the module's probe finds the origin silent too.

mod common;

use circuit_breaker_core::breaker::{Admission, BreakerConfig, Control, Gate, Ticket};
use circuit_breaker_core::snapshot::State;
use common::*;
use proptest::prelude::*;

fn confirming() -> BreakerConfig {
    BreakerConfig {
        active: true,
        confirm_ms: 3000,
        ..cfg()
    }
}

/// [`confirming`] judged by its rates alone (`consecutive` off).
fn confirming_rates() -> BreakerConfig {
    BreakerConfig {
        consecutive: 0,
        ..confirming()
    }
}

/// `n` silent sessions (twenty trip the default window, by its rate or by `consecutive`).
fn silence(s: &mut Story, n: usize) -> Option<circuit_breaker_core::breaker::Transition> {
    s.requests(n, &timeout())
}

#[test]
fn a_trip_waits_for_the_probe_and_a_good_one_clears_the_window() {
    let mut s = Story::new(confirming());
    assert_eq!(
        silence(&mut s, 20),
        None,
        "no transition: the probe is asked first"
    );
    assert_eq!(s.state(), State::Closed);
    assert!(s.b.hdr.questioned());
    assert_eq!(
        s.b.breaker().gate(),
        Gate::Ask,
        "the prober asks under the lock"
    );
    assert_eq!(s.b.hdr.active_probe_due_ms(), Some(s.now), "due at once");
    // Sessions still pass, and more silence opens nothing while the question is open.
    assert_eq!(silence(&mut s, 30), None);
    assert_eq!(s.state(), State::Closed);
    let probe = s.active_probe().expect("the question's probe");
    assert_eq!(s.active_probe(), None, "one probe at a time");
    s.wait(5);
    let r = s.record(probe, &ok());
    assert_eq!((r.transition, r.state), (None, State::Closed));
    assert!(!s.b.hdr.questioned());
    assert_eq!(s.b.breaker().gate(), Gate::Pass);
    let v = s.view();
    assert_eq!(
        v.window.requests, 0,
        "the clients' silence is gone from the window"
    );
    assert_eq!(v.totals.failures, 50, "and still in the totals");
    assert_eq!(v.totals.opened, 0);
}

#[test]
fn a_failed_probe_opens_on_the_window_and_says_both() {
    let mut s = Story::new(confirming_rates());
    assert_eq!(silence(&mut s, 20), None);
    let probe = s.active_probe().expect("the question's probe");
    s.wait(1000);
    let t = s.record(probe, &timeout()).transition.expect("opened");
    assert_eq!((t.from, t.to), (State::Closed, State::Open));
    assert_eq!(
        t.reason,
        "failure rate 100% (20/20) >= 50% in 10s, then probe failed: timeout"
    );
    assert!(!s.b.hdr.questioned());
    // Open as after any trip: active probes from here, no user request through.
    assert!(matches!(s.admit().admission, Admission::Reject { .. }));
    assert_eq!(s.view().totals.opened, 1);
}

#[test]
fn a_failed_probe_opens_nothing_once_the_window_no_longer_trips() {
    let mut s = Story::new(confirming_rates());
    assert_eq!(silence(&mut s, 20), None);
    let probe = s.active_probe().expect("the question's probe");
    // Answered sessions meanwhile take the rate below 50 %.
    assert_eq!(s.requests(21, &ok()), None);
    let r = s.record(probe, &timeout());
    assert_eq!((r.transition, r.state), (None, State::Closed));
    assert!(!s.b.hdr.questioned());
    assert_eq!(
        s.view().window.requests,
        41,
        "the window stays: it judges on"
    );
}

#[test]
fn an_unanswered_question_lapses_and_the_window_is_believed() {
    let mut s = Story::new(confirming());
    assert_eq!(silence(&mut s, 20), None);
    s.wait(2999);
    assert_eq!(silence(&mut s, 1), None, "still asking");
    s.wait(1);
    let t = silence(&mut s, 1).expect("lapsed: the window opens it");
    assert_eq!(t.to, State::Open);
}

#[test]
fn questions_come_at_most_once_per_probe_interval() {
    let mut s = Story::new(confirming());
    assert_eq!(silence(&mut s, 20), None);
    let probe = s.active_probe().expect("the question's probe");
    s.record(probe, &ok());
    // At once, a new window's worth of silence: its question waits for the spacing the
    // last probe drew (one probe_interval, no jitter here).
    assert_eq!(silence(&mut s, 20), None);
    assert!(s.b.hdr.questioned());
    assert_eq!(s.active_probe(), None, "not before the spacing");
    s.wait(1000);
    let probe = s.active_probe().expect("one interval later");
    s.record(probe, &ok());
    assert_eq!(s.state(), State::Closed);
}

#[test]
fn an_operator_or_a_close_ends_the_question() {
    let mut s = Story::new(confirming());
    assert_eq!(silence(&mut s, 20), None);
    assert!(s.b.hdr.questioned());
    s.control(Control::ForceOpen);
    assert!(!s.b.hdr.questioned());
    s.control(Control::Reset);
    assert!(!s.b.hdr.questioned());
    assert_eq!(s.b.breaker().gate(), Gate::Pass);
    // A stale question's ticket is no probe of the reset breaker.
    assert_eq!(silence(&mut s, 20), None);
    let probe = s.active_probe().expect("a new question's probe");
    s.control(Control::Reset);
    assert_eq!(s.record(probe, &timeout()).transition, None);
    assert_eq!(s.state(), State::Closed);
}

#[test]
fn without_confirm_or_active_probes_a_trip_is_at_once() {
    for cfg in [
        BreakerConfig {
            confirm_ms: 0,
            ..confirming()
        },
        BreakerConfig {
            active: false,
            ..confirming()
        },
    ] {
        let mut s = Story::new(cfg);
        assert!(silence(&mut s, 10).is_some_and(|t| t.to == State::Open));
        assert!(!s.b.hdr.questioned());
    }
}

#[test]
fn a_probe_that_gets_no_verdict_leaves_the_question_to_the_next() {
    let mut s = Story::new(confirming());
    assert_eq!(silence(&mut s, 20), None);
    let probe = s.active_probe().expect("the question's probe");
    let now = s.now;
    s.b.breaker().release(now, probe);
    assert!(s.b.hdr.questioned());
    let probe = s.active_probe().expect("asked again");
    s.record(probe, &ok());
    assert!(!s.b.hdr.questioned());
    assert_eq!(s.state(), State::Closed);
}

proptest! {
    /// Whatever the sessions do, in any order with the probe's questions: a breaker whose
    /// probe the origin answers (within its timeout) never opens.
    #[test]
    fn an_origin_that_answers_its_probe_is_never_opened(
        steps in proptest::collection::vec((0u8..3, 0u64..400), 1..400),
    ) {
        let mut s = Story::new(confirming());
        let mut held: Option<(Ticket, u64)> = None;
        for (what, ms) in steps {
            s.wait(ms);
            match what {
                0 => { silence(&mut s, 1); }
                1 => { s.requests(1, &ok()); }
                _ => {
                    // The prober answers early.
                    if let Some((t, _)) = held.take() {
                        s.record(t, &ok());
                    }
                }
            }
            // The prober takes a question's probe once due, and answers within a second.
            if held.is_none() && s.b.hdr.questioned() {
                let due = s.b.hdr.active_probe_due_ms().expect("a question's probe is due");
                if due <= s.now {
                    held = s.active_probe().map(|t| (t, s.now));
                }
            }
            if let Some((t, at)) = held {
                if s.now >= at + 1000 {
                    s.record(t, &ok());
                    held = None;
                }
            }
            prop_assert_eq!(s.state(), State::Closed);
        }
        prop_assert_eq!(s.view().totals.opened, 0);
    }
}

#[test]
fn a_late_answer_is_no_probe_once_the_question_lapsed() {
    let mut s = Story::new(confirming());
    assert_eq!(silence(&mut s, 20), None);
    let probe = s.active_probe().expect("the question's probe");
    s.wait(3000);
    let r = s.record(probe, &ok());
    assert_eq!((r.transition, r.state), (None, State::Closed));
    assert!(!s.b.hdr.questioned(), "lapsed");
    assert_eq!(
        s.b.breaker().gate(),
        Gate::Pass,
        "no lock for a question that waits on nothing"
    );
    let v = s.view();
    assert_eq!(
        (v.totals.closed, v.window.requests),
        (0, 20),
        "nothing closed, nothing cleared"
    );
    let t = silence(&mut s, 1).expect("the window believed");
    assert_eq!(t.to, State::Open);
}

#[test]
fn a_reload_that_drops_the_probe_drops_the_question() {
    let mut s = Story::new(confirming());
    assert_eq!(silence(&mut s, 20), None);
    assert!(s.b.hdr.questioned());
    let now = s.now;
    let cfg = BreakerConfig {
        active: false,
        confirm_ms: 0,
        ..confirming()
    };
    s.b.breaker().retune(now, cfg);
    assert!(!s.b.hdr.questioned());
    assert_eq!(s.b.breaker().gate(), Gate::Pass);
    assert!(silence(&mut s, 1).is_some_and(|t| t.to == State::Open));
}

#[test]
fn a_lapsed_question_is_believed_only_by_the_trip_that_finds_it() {
    // Review: the flag of a lapsed question outlived it, and a trip an hour later opened at
    // once, unasked.
    let mut s = Story::new(confirming());
    assert_eq!(silence(&mut s, 20), None);
    let probe = s.active_probe().expect("the question's probe");
    s.wait(3000).wait(3_600_000);
    assert_eq!(
        silence(&mut s, 20),
        None,
        "a trip an hour later asks afresh"
    );
    assert!(s.b.hdr.questioned());
    // The lapsed question's probe is no one's: the new question claims its own.
    s.record(probe, &timeout());
    assert_eq!(s.state(), State::Closed, "a stale answer decides nothing");
    let probe = s.active_probe().expect("the new question's probe");
    s.record(probe, &ok());
    assert_eq!(s.state(), State::Closed);

    // Answered sessions take the window below its rates while it asks, and the question
    // lapses: the first outcome after, which trips nothing, forgets it, so the next trip,
    // within the same window's time, asks too.
    let mut s = Story::new(confirming_rates());
    assert_eq!(silence(&mut s, 20), None);
    assert_eq!(s.requests(30, &ok()), None);
    s.wait(3000);
    assert_eq!(s.requests(1, &ok()), None);
    assert_eq!(silence(&mut s, 12), None, "asks again");
    assert!(s.b.hdr.questioned());
}

#[test]
fn a_reload_that_drops_the_probe_and_brings_it_back_asks_afresh() {
    let mut s = Story::new(confirming());
    assert_eq!(silence(&mut s, 20), None);
    let now = s.now;
    let off = BreakerConfig {
        active: false,
        confirm_ms: 0,
        ..confirming()
    };
    s.b.breaker().retune(now, off);
    s.b.breaker().retune(now, confirming());
    s.wait(3001);
    assert_eq!(silence(&mut s, 1), None, "no stale question believed");
    assert!(s.b.hdr.questioned());
}

proptest! {
    /// A server that fails every probe is opened within a probe spacing and the probe's own
    /// time of the window that trips, whatever the sessions do meanwhile.
    #[test]
    fn a_server_that_fails_its_probe_is_opened_within_the_bound(
        steps in proptest::collection::vec((0u8..2, 0u64..300), 1..200),
        answer_ms in 0u64..1000,
    ) {
        let mut s = Story::new(confirming_rates());
        let mut held: Option<(Ticket, u64)> = None;
        let mut asked_at: Option<u64> = None;
        for (what, ms) in steps {
            s.wait(ms);
            if s.state() != State::Closed {
                break;
            }
            if what == 0 {
                silence(&mut s, 1);
            } else {
                s.requests(1, &ok());
            }
            if s.b.hdr.questioned() {
                asked_at.get_or_insert(s.now);
            }
            let due = s.b.hdr.active_probe_due_ms().is_some_and(|due| due <= s.now);
            if held.is_none() && s.b.hdr.questioned() && due {
                held = s.active_probe().map(|t| (t, s.now));
            }
            if let Some((t, at)) = held {
                if s.now >= at + answer_ms {
                    s.record(t, &timeout());
                    held = None;
                    if s.state() == State::Closed {
                        // Left closed only where the window no longer trips.
                        let w = s.view().window;
                        prop_assert!(w.requests < 20 || w.failures * 2 < w.requests,
                            "a failed probe left a tripping window closed: {:?}", w);
                        asked_at = None;
                    }
                }
            }
            if let Some(at) = asked_at {
                if s.state() == State::Closed && s.b.hdr.questioned() {
                    // probe_interval (1 s) + confirm_ms (3 s): the question is still open.
                    prop_assert!(s.now < at + 1000 + 3000, "asked at {at}, still asking at {}", s.now);
                }
            }
        }
    }
}

#[test]
fn a_question_whose_probes_only_came_back_is_not_believed() {
    // Review: a client that takes every connection makes each probe come back without a
    // verdict (no connection to probe with); the question lapsed, and was believed.
    let mut s = Story::new(confirming());
    assert_eq!(silence(&mut s, 20), None);
    for _ in 0..15 {
        let probe = s.active_probe().expect("asked again at once");
        s.wait(200);
        let now = s.now;
        s.b.breaker().release(now, probe);
    }
    assert_eq!(silence(&mut s, 1), None, "not believed: asked afresh");
    assert!(s.b.hdr.questioned());
    // Due one spacing after the last probe claimed.
    let due = s.b.hdr.active_probe_due_ms().expect("its probe");
    s.now = s.now.max(due);
    let probe = s.active_probe().expect("the new question's probe");
    assert_eq!(
        s.record(probe, &timeout()).state,
        State::Open,
        "a failed probe opens it"
    );
}

#[test]
fn a_reload_that_gives_the_probe_longer_moves_the_question_deadline() {
    let mut s = Story::new(confirming());
    assert_eq!(silence(&mut s, 20), None);
    let probe = s.active_probe().expect("the question's probe");
    let now = s.now;
    s.b.breaker().retune(
        now,
        BreakerConfig {
            confirm_ms: 11_000,
            ..confirming()
        },
    );
    s.wait(4000);
    assert!(s.b.hdr.questioned(), "still asking");
    s.record(probe, &ok());
    assert!(!s.b.hdr.questioned());
    assert_eq!(
        s.view().window.requests,
        0,
        "answered: the window starts again"
    );
}
