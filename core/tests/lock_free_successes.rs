//! Successes gathered without the lock and absorbed at the next locked call leave the breaker
//! exactly as recording each of them would have: same transitions, same window.

mod common;

use circuit_breaker_core::breaker::histogram::{bin_of, Histogram};
use circuit_breaker_core::breaker::{Attempt, BreakerConfig, OwnedBreaker, Ticket};
use circuit_breaker_core::snapshot::State;
use common::*;
use proptest::prelude::*;

/// One request: a success (`Ok(ms)`) or a failure, `gap_ms` after the previous one.
#[derive(Clone, Debug)]
struct Step {
    gap_ms: u64,
    ok: bool,
    ms: u64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        (0u64..700, proptest::bool::weighted(0.7), 1u64..400).prop_map(|(gap_ms, ok, ms)| Step {
            gap_ms,
            ok,
            ms,
        }),
        1..300,
    )
}

fn attempt(s: &Step) -> Attempt {
    if s.ok {
        Attempt::http(200, s.ms)
    } else {
        Attempt::http(500, s.ms)
    }
}

/// Successes gathered without the lock, waiting to be absorbed, as the shell keeps them in a
/// breaker's berth.
#[derive(Default)]
struct Gathered {
    second: u64,
    count: u32,
    latency: Option<Histogram>,
}

impl Gathered {
    fn take(&mut self, b: &mut OwnedBreaker) {
        if self.count > 0 {
            let h = self.latency.take().unwrap_or(Histogram::EMPTY);
            b.breaker().absorb_successes(self.second, self.count, &h);
        }
        self.count = 0;
    }
}

proptest! {
    #[test]
    fn absorbing_equals_recording(steps in steps(), min in 1u32..12, rate in 1000u32..9000) {
        let cfg = BreakerConfig { min_requests: min, failure_rate: rate, window_s: 3, ..cfg() };
        let (mut plain, mut absorbing) = (OwnedBreaker::new(cfg, T0), OwnedBreaker::new(cfg, T0));
        let mut gathered = Gathered::default();
        let mut now = T0;
        for s in &steps {
            now += s.gap_ms;
            let a = attempt(s);
            let expected = plain.breaker().record(now, 0, Ticket::Normal, &a, true);
            let lock_free = s.ok
                && absorbing.breaker().successes_lock_free() == Some(now / 1000)
                && (gathered.count == 0 || gathered.second == now / 1000);
            if lock_free {
                // What the shell does without the lock.
                gathered.second = now / 1000;
                gathered.count += 1;
                gathered.latency.get_or_insert(Histogram::EMPTY).counts[bin_of(s.ms)] += 1;
                prop_assert_eq!(expected.transition, None, "a success never opens it");
            } else {
                gathered.take(&mut absorbing);
                let got = absorbing.breaker().record(now, 0, Ticket::Normal, &a, true);
                prop_assert_eq!(got.transition.map(|t| t.to), expected.transition.map(|t| t.to));
            }
            if plain.breaker().state() != State::Closed {
                break;
            }
        }
        gathered.take(&mut absorbing);
        prop_assert_eq!(absorbing.breaker().state(), plain.breaker().state());
        let (v1, v2) = (plain.breaker().view(now), absorbing.breaker().view(now));
        prop_assert_eq!(v1.window, v2.window);
        prop_assert_eq!(v1.latency, v2.latency);
        prop_assert_eq!(v1.totals.requests, v2.totals.requests);
    }
}

#[test]
fn successes_wait_for_the_lock_once_a_rate_is_reached() {
    let mut s = Story::new(BreakerConfig {
        min_requests: 4,
        ..cfg()
    });
    let second = Some(T0 / 1000);
    assert_eq!(
        s.b.breaker().successes_lock_free(),
        second,
        "an empty window"
    );
    s.requests(1, &http(500));
    assert_eq!(
        s.b.breaker().successes_lock_free(),
        None,
        "1/1 failed: a success could reach min_requests at 50%"
    );
    s.requests(2, &ok());
    assert_eq!(
        s.b.breaker().successes_lock_free(),
        second,
        "1/3 is below 50%"
    );
    s.wait(1000);
    assert_eq!(
        s.b.breaker().successes_lock_free(),
        second,
        "only for the window's latest second: a new second takes the lock first"
    );
    s.requests(1, &http(500));
    assert_eq!(s.state(), State::Open, "2 failures of 4");
    assert_eq!(s.b.breaker().successes_lock_free(), None, "open");
}
