//! The episode's start, as the status page shows "open since": the trip out of closed, which
//! neither a failed probe's reopen nor an operator's force open of an open breaker moves;
//! none while closed.

mod common;

use circuit_breaker_core::breaker::Control;
use circuit_breaker_core::snapshot::State;
use common::*;

#[test]
fn a_failed_probe_reopens_within_the_same_episode() {
    let mut s = Story::new(cfg());
    assert_eq!(s.view().episode_ms, None, "closed: no episode");
    s.requests(10, &ok());
    assert!(s.requests(10, &http(500)).is_some());
    let tripped_at = s.view().since_ms;
    assert_eq!(s.view().episode_ms, Some(tripped_at));

    // The cooldown ends, the probe fails: open again since now, the episode since the trip.
    s.wait(30_000);
    let p = s.probe();
    assert_eq!(s.view().state, State::HalfOpen);
    assert_eq!(s.view().episode_ms, Some(tripped_at));
    assert!(s.record(p, &http(500)).transition.is_some());
    let v = s.view();
    assert_eq!(v.state, State::Open);
    assert!(v.since_ms > tripped_at, "the state's start moved");
    assert_eq!(v.episode_ms, Some(tripped_at), "the episode's did not");

    // Forcing it open keeps the episode; closing by probes ends it.
    s.control(Control::ForceOpen);
    assert_eq!(s.view().episode_ms, Some(tripped_at));
    s.control(Control::Reset);
    assert_eq!(s.view().episode_ms, None, "reset: closed, no episode");

    // The next trip starts a new one.
    s.wait(1000);
    s.requests(10, &ok());
    s.requests(10, &http(500));
    let again = s.view();
    assert_eq!(again.state, State::Open);
    assert_eq!(again.episode_ms, Some(again.since_ms));
    assert!(again.since_ms > tripped_at);
    s.wait(60_000);
    for _ in 0..3 {
        let p = s.probe();
        s.record(p, &ok());
        s.wait(1000);
    }
    assert_eq!(s.state(), State::Closed);
    assert_eq!(
        s.view().episode_ms,
        None,
        "closed by probes: the episode ended"
    );
}

#[test]
fn a_force_open_from_closed_starts_one_and_a_force_close_ends_it() {
    let mut s = Story::new(cfg());
    s.wait(500);
    s.control(Control::ForceOpen);
    let v = s.view();
    assert_eq!(v.episode_ms, Some(v.since_ms));
    s.control(Control::ForceClose);
    assert_eq!(s.view().episode_ms, None);
}

#[test]
fn the_wall_clock_moves_the_episode_with_the_rest() {
    let mut s = Story::new(cfg());
    s.requests(10, &ok());
    assert!(s.requests(10, &http(500)).is_some());
    let mut v = s.view();
    let mono = v.since_ms;
    v.on_wall_clock(mono + 2_000, 1_764_484_800_000);
    assert_eq!(v.episode_ms, Some(1_764_484_798_000));
    assert_eq!(v.since_ms, 1_764_484_798_000);
}
