//! `consecutive`: a run of gateway failures opens the breaker at once, whatever its rate.
//! It opens on exactly the request that makes the run `consecutive` long — in any sequence
//! of outcomes, the run counted as the configuration's classes say and broken by any other
//! counted outcome — and never on a healthy origin's scattered gateway errors.

mod common;

use circuit_breaker_core::breaker::{Attempt, BreakerConfig, Ending, OwnedBreaker, Ticket};
use circuit_breaker_core::snapshot::State;
use common::*;
use proptest::prelude::*;

/// What one request got, and whether it is a gateway failure under the default classes.
fn outcomes() -> Vec<(Attempt, Option<bool>)> {
    // `None`: not counted at all (it neither extends nor breaks the run).
    vec![
        (Attempt::ended(Ending::Error, 5), Some(true)),
        (Attempt::ended(Ending::Timeout, 1000), Some(true)),
        (Attempt::ended(Ending::NoLive, 0), Some(true)),
        (Attempt::http(502, 5), Some(true)),
        (Attempt::http(503, 5), Some(true)),
        (Attempt::http(504, 5), Some(true)),
        (Attempt::http(500, 5), Some(false)),
        (Attempt::ended(Ending::InvalidHeader, 5), Some(false)),
        (Attempt::http(200, 5), Some(false)),
        (Attempt::http(404, 5), Some(false)),
        (Attempt::http(429, 5), Some(false)),
        (Attempt::ended(Ending::Tls, 5), None),
        (Attempt::ended(Ending::NoVerdict, 5), None),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn opens_on_the_request_that_makes_the_run(
        n in 1u32..=15,
        picks in prop::collection::vec((0usize..13, 0u64..400), 1..300),
    ) {
        // Rates that never trip: only the run can open it.
        let cfg = BreakerConfig {
            consecutive: n,
            min_requests: u32::MAX,
            ..cfg()
        };
        let all = outcomes();
        let mut b = OwnedBreaker::new(cfg, T0);
        let mut now = T0;
        let mut run = 0u32;
        for (pick, gap) in picks {
            now += gap;
            let (a, gateway) = all[pick];
            run = match gateway {
                Some(true) => run + 1,
                Some(false) => 0,
                None => run,
            };
            let r = b.breaker().record(now, 0, Ticket::Normal, &a, true);
            if run >= n {
                prop_assert_eq!(r.state, State::Open, "a run of {} of {}", run, n);
                let t = r.transition.expect("opened by this request");
                prop_assert!(t.reason.starts_with(&format!("{n} gateway failures in a row, the last: ")),
                    "{}", t.reason);
                prop_assert_eq!(b.breaker().view(now).probes_needed, cfg.probes);
                break;
            }
            prop_assert_eq!(r.state, State::Closed, "a run of {} of {}", run, n);
        }
    }
}

#[test]
fn a_healthy_origin_with_one_percent_scattered_gateway_errors_never_trips() {
    // A million requests at 400 a second (42 minutes), 1 % of them refused, reset or timed
    // out at random; the default breaker.
    let mut b = OwnedBreaker::new(BreakerConfig::default(), T0);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut longest = (0u32, 0u32);
    for i in 0..1_000_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bad = x % 100 == 0;
        let a = if bad {
            Attempt::ended(Ending::Error, 5)
        } else {
            Attempt::http(200, 5)
        };
        longest.0 = if bad { longest.0 + 1 } else { 0 };
        longest.1 = longest.1.max(longest.0);
        let r = b
            .breaker()
            .record(T0 + i * 5 / 2, 0, Ticket::Normal, &a, true);
        assert_eq!(r.state, State::Closed, "request {i}");
    }
    assert!(
        longest.1 >= 2,
        "the errors did come in short runs: {}",
        longest.1
    );
}

#[test]
fn a_refusing_origin_is_cut_off_on_the_tenth_request() {
    // Healthy for 10 s at 400 a second, then every connection refused: the rate alone would
    // wait for 4000 failures (50 % of a 10 s window); the run opens it on the tenth.
    let mut s = Story::new(cfg());
    for _ in 0..4000 {
        s.request(&ok());
        s.wait(2);
    }
    let mut opened = None;
    for i in 1..=20 {
        if let Some(t) = s.request(&Attempt::ended(Ending::Error, 1)) {
            opened = Some((i, t.reason));
            break;
        }
    }
    assert_eq!(
        opened,
        Some((
            10,
            "10 gateway failures in a row, the last: error".to_string()
        ))
    );
}
