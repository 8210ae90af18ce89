//! How long a client held an answer up, and what a held answer says. Where nginx passes an
//! answer on at the client's pace (`proxy_buffering off`, gRPC, a spool that is bounded), a
//! client that stops reading stops nginx reading the origin too, and an origin with a deadline
//! of its own (a send timeout, a `WriteTimeout`, a server-side gRPC deadline) gives up on the
//! answer mid-way. nginx sees that end only once it has passed on what it had — when the
//! client no longer holds anything up — so the time the client held nginx's writes is kept as
//! it goes, and a held answer is judged by its header alone, as a tunnel is by its `101`.
//!
//! By its header, not by nothing: a client sees the header before it decides to hold the rest,
//! so a rule that dropped held answers would let it drop its successes and keep the failures
//! it sees (an origin's `500`s), and one that dropped only held failures would let an origin's
//! deadline turn its successes into nothing. Judged by the header, a held answer counts as
//! what the origin said before the client could shape anything.

use super::classify::{Attempt, Ending};

/// Held up this long in all, an answer is judged by its header. Shorter holds come and go on
/// any link and leave the answer judged whole; an origin can still be made to give up by a
/// shorter hold when its deadline leaves less than this beyond the answer's own time.
pub const HELD_MS: u64 = 1000;

/// The time a client held up the answer of one request: the holds that ended, and the one
/// under way, in milliseconds of a monotonic clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// When the hold under way began, if one is.
    since: Option<u64>,
    /// The holds that ended, in all.
    ended_ms: u64,
}

impl Held {
    /// The answer's writes are held up (`blocked`: what nginx had could not all go to the
    /// client), or no longer, as of `now_ms`. Only a change matters: a hold begins at the
    /// first write that could not finish, and ends at the first that did.
    pub fn note(&mut self, blocked: bool, now_ms: u64) {
        match (self.since, blocked) {
            (None, true) => self.since = Some(now_ms),
            (Some(t), false) => {
                self.ended_ms = self.ended_ms.saturating_add(now_ms.saturating_sub(t));
                self.since = None;
            }
            _ => {}
        }
    }

    /// The time held in all as of `now_ms`, the hold under way included.
    pub fn ms(&self, now_ms: u64) -> u64 {
        let open = self.since.map_or(0, |t| now_ms.saturating_sub(t));
        self.ended_ms.saturating_add(open)
    }

    /// Whether the client held the answer up long enough that the answer is judged by its
    /// header ([`HELD_MS`]).
    pub fn held_long(&self, now_ms: u64) -> bool {
        self.ms(now_ms) >= HELD_MS
    }
}

/// Whether an attempt that ended so, with this `grpc-status`, says more than its header did:
/// its body failed (closed short, reset, timed out), it failed with the client's reads stalled
/// (no verdict), or a gRPC status other than `OK` came with it. A plain answer says only what
/// its header did; what the client's own request shaped (its deadline, its body) keeps its
/// own rule.
#[inline]
pub fn says_more(ending: Ending, grpc_status: Option<u8>) -> bool {
    match ending {
        Ending::Error | Ending::Timeout | Ending::NoVerdict => true,
        Ending::Response => grpc_status.is_some_and(|c| c != crate::grpc::OK),
        _ => false,
    }
}

impl Attempt {
    /// Whether the attempt says more than its header did ([`says_more`]): what
    /// [`Attempt::judged_at_header`] may change.
    #[inline]
    pub fn may_be_held(&self) -> bool {
        says_more(self.ending, self.grpc_status)
    }

    /// The attempt of an answer its client held up long enough ([`Held::held_long`]), judged by
    /// its header: the HTTP `status` and the `grpc-status` the header carried (a trailers-only
    /// answer's), whatever its body or trailers then said.
    pub fn judged_at_header(self, status: u16, grpc_status: Option<u8>) -> Attempt {
        Attempt {
            ending: Ending::Response,
            status,
            grpc_status,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_add_up_and_the_one_under_way_counts() {
        let mut h = Held::default();
        assert_eq!(h.ms(5), 0);
        h.note(false, 10);
        assert_eq!(h.ms(20), 0, "a write that finished begins nothing");
        h.note(true, 100);
        h.note(true, 300);
        assert_eq!(
            h.ms(400),
            300,
            "a second blocked write does not restart the hold"
        );
        h.note(false, 700);
        assert_eq!(h.ms(5000), 600);
        h.note(true, 1000);
        assert_eq!(h.ms(1300), 900);
        assert!(!h.held_long(1399));
        assert!(h.held_long(1400));
        h.note(false, 1400);
        assert!(h.held_long(1400));
    }

    #[test]
    fn a_clock_that_goes_back_adds_nothing() {
        let mut h = Held::default();
        h.note(true, 500);
        assert_eq!(h.ms(400), 0);
        h.note(false, 400);
        assert_eq!(h.ms(10_000), 0);
    }

    #[test]
    fn a_held_answer_is_judged_by_its_header() {
        let cfg = crate::breaker::BreakerConfig::default();
        let verdict = |a: Attempt| crate::breaker::classify(&a, &cfg);
        // Cut short, reset or timed out after a 200, or a failing status in trailers: a success.
        for body in [
            Attempt::ended(Ending::Error, 20),
            Attempt::ended(Ending::Timeout, 20),
            Attempt::ended(Ending::NoVerdict, 20),
            Attempt::grpc(crate::grpc::DEADLINE_EXCEEDED, 20),
            Attempt::grpc(crate::grpc::UNAVAILABLE, 20),
        ] {
            assert!(body.may_be_held(), "{body:?}");
            let v = verdict(body.judged_at_header(200, None));
            assert!(v.counted && !v.failure, "{body:?}: {v:?}");
        }
        // The header's own word stays: a 500, a trailers-only UNAVAILABLE.
        let v = verdict(Attempt::ended(Ending::Error, 20).judged_at_header(500, None));
        assert!(v.failure);
        let only = Attempt::grpc(crate::grpc::UNAVAILABLE, 20);
        let v = verdict(only.judged_at_header(200, Some(crate::grpc::UNAVAILABLE)));
        assert!(v.failure);
        // What says only what its header did is left alone.
        for plain in [
            Attempt::http(200, 20),
            Attempt::http(500, 20),
            Attempt::grpc(0, 20),
        ] {
            assert!(!plain.may_be_held(), "{plain:?}");
        }
    }
}
