//! What a client or nginx's configuration causes moves no breaker: a gRPC deadline the client
//! set, a header too big for nginx's buffer. Recorded, such outcomes change nothing a breaker
//! decides, in any state and any order, and a probe that ends so is only freed.

mod common;

use circuit_breaker_core::breaker::{Admission, Attempt, Ending, Ticket};
use circuit_breaker_core::grpc::DEADLINE_EXCEEDED;
use circuit_breaker_core::snapshot::State;
use common::*;
use proptest::prelude::*;

/// A call sent with `grpc-timeout: 1n`, answered at once with `DEADLINE_EXCEEDED`.
fn client_deadline() -> Attempt {
    Attempt::grpc(DEADLINE_EXCEEDED, 0).with_client_deadline(Some(0), 0)
}

fn too_big_header() -> Attempt {
    Attempt::ended(Ending::TooBigHeader, 3)
}

#[test]
fn a_thousand_of_them_open_nothing() {
    let mut s = Story::new(cfg());
    assert_eq!(client_deadline().ending, Ending::ClientDeadline);
    for i in 0..1000 {
        let a = if i % 2 == 0 {
            client_deadline()
        } else {
            too_big_header()
        };
        assert_eq!(s.request(&a), None);
        s.wait(1);
    }
    let v = s.view();
    assert_eq!(v.state, State::Closed);
    assert_eq!((v.totals.requests, v.totals.failures), (0, 0));
}

#[test]
fn the_origins_own_deadline_still_opens() {
    let mut s = Story::new(cfg());
    // No deadline from the client: ten in a row open by `consecutive`.
    let own = Attempt::grpc(DEADLINE_EXCEEDED, 40).with_client_deadline(None, 40);
    let t = s.requests(10, &own).expect("opened");
    assert!(
        t.reason.starts_with("10 gateway failures in a row"),
        "{}",
        t.reason
    );
}

#[test]
fn a_probe_the_client_ended_is_only_freed() {
    let mut s = Story::new(cfg());
    s.trip();
    s.wait(30_000);
    for a in [client_deadline(), too_big_header()] {
        let p = s.probe();
        s.record(p, &a);
        assert_eq!(s.state(), State::HalfOpen);
        s.wait(1_000);
    }
    // The next request is the probe at once (no probe of the origin's was spent), and its
    // answer decides.
    let p = s.probe();
    s.record(p, &client_deadline());
    let p = s.probe();
    s.record(p, &ok());
    assert_eq!(s.view().consecutive_probe_successes, 1);
}

/// One step of a story: a wait, then an outcome of the origin's or the client's.
#[derive(Clone, Debug)]
enum Step {
    Origin(u16, u64),
    Client(bool, u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let status = prop_oneof![Just(200u16), Just(500), Just(502), Just(404)];
    prop::collection::vec(
        prop_oneof![
            (status, 0u64..3_000).prop_map(|(s, w)| Step::Origin(s, w)),
            (any::<bool>(), 0u64..3_000).prop_map(|(d, w)| Step::Client(d, w)),
        ],
        1..300,
    )
}

/// Runs `steps`, with or without the client's; every request asks admission first and a
/// probe's outcome goes with its ticket. Returns what the breaker decided at each origin
/// step, and its view at the end.
fn run(steps: &[Step], with_client: bool) -> (Vec<String>, String) {
    let mut s = Story::new(cfg());
    let mut decided = Vec::new();
    for step in steps {
        let (wait, attempt) = match *step {
            Step::Origin(status, w) => (w, Some(Attempt::http(status, 20))),
            Step::Client(deadline, w) => (
                w,
                with_client.then(|| {
                    if deadline {
                        client_deadline()
                    } else {
                        too_big_header()
                    }
                }),
            ),
        };
        s.wait(wait);
        let Some(a) = attempt else { continue };
        let d = s.admit();
        let ticket = match d.admission {
            Admission::Probe(t) => t,
            Admission::Pass { .. } => Ticket::Normal,
            _ => {
                if matches!(step, Step::Origin(..)) {
                    decided.push(format!("{:?}", d.admission));
                }
                continue;
            }
        };
        let r = s.record(ticket, &a);
        if matches!(step, Step::Origin(..)) {
            decided.push(format!("{:?} {:?}", d.admission, r.state));
        }
    }
    let v = s.view();
    let end = format!(
        "{:?} requests={} failures={} opened={}",
        v.state, v.totals.requests, v.totals.failures, v.totals.opened
    );
    (decided, end)
}

proptest! {
    #[test]
    fn the_clients_outcomes_change_no_decision(steps in steps()) {
        // A client's outcome that comes while a probe may start can take the probe; the
        // probe is then free again at once, as if it had not been asked: compare what the
        // origin's requests were told, and where the breaker ends.
        let (with, end_with) = run(&steps, true);
        let (without, end_without) = run(&steps, false);
        let probes_taken = |d: &[String]| d.iter().filter(|x| x.starts_with("Probe")).count();
        prop_assert_eq!(end_with, end_without);
        prop_assert_eq!(probes_taken(&with), probes_taken(&without));
    }
}

#[test]
fn a_streaming_body_takes_the_probe_only_once_it_is_overdue() {
    let mut s = Story::new(cfg());
    s.trip();
    let overdue = |s: &mut Story| {
        let now = s.now;
        s.b.breaker().probe_overdue(now)
    };
    assert!(!overdue(&mut s), "not while the cooldown runs");
    s.wait(30_000);
    assert!(!overdue(&mut s), "not as the cooldown ends");
    s.wait(999);
    assert!(!overdue(&mut s));
    s.wait(1);
    assert!(
        overdue(&mut s),
        "one probe_interval after, nobody having taken it"
    );
    let p = s.probe();
    assert!(!overdue(&mut s), "not while a probe is in flight");
    s.record(p, &ok());
    s.wait(2_000);
    assert!(overdue(&mut s), "the next one, once it waited an interval");
    // With active probes no user request ever probes.
    let mut a = Story::new(circuit_breaker_core::breaker::BreakerConfig {
        active: true,
        ..cfg()
    });
    a.trip();
    a.wait(120_000);
    assert!(!overdue(&mut a));
}
