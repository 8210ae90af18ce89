//! An answer its client held up is judged by its header: the hold is the time between a write
//! that could not finish and the next that did, and a client that chooses which answers to
//! hold, having seen their headers, can make none of them count as a failure that the same
//! answers read at once would not have been.

mod common;

use circuit_breaker_core::breaker::held::{Held, HELD_MS};
use circuit_breaker_core::breaker::{classify, Attempt, BreakerConfig, Ending};
use circuit_breaker_core::grpc::{DEADLINE_EXCEEDED, UNAVAILABLE};
use circuit_breaker_core::snapshot::State;
use common::*;
use proptest::prelude::*;

/// One note of a hold: a wait, then whether nginx's write finished.
fn notes() -> impl Strategy<Value = Vec<(u64, bool)>> {
    prop::collection::vec((0u64..2_000, any::<bool>()), 0..200)
}

/// An answer as the origin gave it: its header's status and `grpc-status`, and how it ended
/// (read at once, a body fails by the origin alone: the reader's no-verdict for a failure
/// while the client's reads stalled is a hold's).
fn answers() -> impl Strategy<Value = (u16, Option<u8>, Ending, Option<u8>)> {
    let status = prop_oneof![
        Just(200u16),
        Just(206),
        Just(404),
        Just(429),
        Just(500),
        Just(503)
    ];
    let header_grpc = prop_oneof![Just(None), Just(Some(0u8)), Just(Some(UNAVAILABLE))];
    let ending = prop_oneof![
        Just(Ending::Response),
        Just(Ending::Error),
        Just(Ending::Timeout)
    ];
    let trailers = prop_oneof![
        Just(None),
        Just(Some(0u8)),
        Just(Some(DEADLINE_EXCEEDED)),
        Just(Some(UNAVAILABLE)),
    ];
    (status, header_grpc, ending, trailers)
}

/// The attempt nginx's reader makes of an answer read at once: a body that failed has no
/// status; a gRPC status is the trailers', else the header's.
fn read_at_once(
    status: u16,
    header_grpc: Option<u8>,
    ending: Ending,
    trailers: Option<u8>,
) -> Attempt {
    Attempt {
        ending,
        status: if ending == Ending::Response {
            status
        } else {
            0
        },
        grpc_status: if ending == Ending::Response {
            trailers.or(header_grpc)
        } else {
            None
        },
        retry_after_s: None,
        response_ms: 20,
    }
}

proptest! {
    #[test]
    fn a_hold_is_the_time_between_a_blocked_write_and_the_next_that_finished(
        notes in notes(),
        after in 0u64..5_000,
    ) {
        let mut h = Held::default();
        let (mut now, mut model, mut since) = (1_000u64, 0u64, None);
        let mut last = 0;
        for &(wait, blocked) in &notes {
            now += wait;
            h.note(blocked, now);
            match (since, blocked) {
                (None, true) => since = Some(now),
                (Some(t), false) => {
                    model += now - t;
                    since = None;
                }
                _ => {}
            }
            let ms = h.ms(now);
            prop_assert_eq!(ms, model + since.map_or(0, |t| now - t));
            prop_assert!(ms >= last, "never shrinks");
            prop_assert!(ms <= now - 1_000, "never more than the time that went by");
            last = ms;
        }
        let end = now + after;
        prop_assert_eq!(h.held_long(end), h.ms(end) >= HELD_MS);
    }

    #[test]
    fn holding_never_makes_a_failure_and_says_only_what_the_header_said(
        (status, header_grpc, ending, trailers) in answers(),
        other_end in prop_oneof![Just(Ending::Response), Just(Ending::Error), Just(Ending::Timeout)],
    ) {
        // A `grpc-status` in the header is a trailers-only answer: no body, no trailers.
        prop_assume!(
            header_grpc.is_none()
                || (trailers.is_none() && ending == Ending::Response && other_end == Ending::Response)
        );
        let cfg = BreakerConfig::default();
        let at_once = read_at_once(status, header_grpc, ending, trailers);
        let held = if at_once.may_be_held() {
            at_once.judged_at_header(status, header_grpc)
        } else {
            at_once
        };
        let (h, r) = (classify(&held, &cfg), classify(&at_once, &cfg));
        prop_assert!(!h.failure || r.failure, "held {:?} fails, read at once {:?} not", held, at_once);
        prop_assert!(h.counted || !r.counted);
        // However the body ended, the held verdict is the header's.
        let other = read_at_once(status, header_grpc, other_end, trailers);
        let other_held = if other.may_be_held() {
            other.judged_at_header(status, header_grpc)
        } else {
            other
        };
        let o = classify(&other_held, &cfg);
        prop_assert_eq!((h.failure, h.counted), (o.failure, o.counted));
    }
}

/// An origin with a write deadline that fails one request in ten with a `500`: a client that
/// holds every `200` until the deadline cuts it, and reads the `500`s at once, opens nothing;
/// the same answers, had the cuts counted, open the default breaker.
#[test]
fn a_client_that_holds_the_successes_it_sees_opens_nothing() {
    let run = |judged_at_header: bool| {
        let mut s = Story::new(cfg());
        for i in 0..2_000u32 {
            let a = if i % 10 == 0 {
                Attempt::http(500, 20)
            } else {
                let cut = Attempt::ended(Ending::Error, 20);
                if judged_at_header {
                    cut.judged_at_header(200, None)
                } else {
                    cut
                }
            };
            if s.state() != State::Closed {
                return s.state();
            }
            s.request(&a);
            s.wait(5);
        }
        s.state()
    };
    assert_eq!(run(true), State::Closed);
    assert_eq!(run(false), State::Open);
}
