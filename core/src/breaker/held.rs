//! How long a client held an answer up: where nginx passes an answer on at the client's pace
//! (`proxy_buffering off`, gRPC, a spool that is bounded), a client that stops reading stops
//! nginx reading the origin too, and an origin with a deadline of its own (a send timeout, a
//! `WriteTimeout`, a server-side gRPC deadline) gives up on the answer mid-way. nginx sees
//! that end only once it has passed on what it had — when the client no longer holds anything
//! up — so the time the client held nginx's writes is kept as it goes, and an answer that then
//! failed is the client's doing, not the origin's.

use super::classify::{Attempt, Ending};

/// Held up this long in all, an answer that fails after its header has no verdict: an
/// origin's deadline on its writes is longer in practice, so a client cannot make one give up
/// within less; a client on a slow link that holds an answer up longer still gets its answer
/// judged when it comes whole.
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

    /// Whether the client held the answer up long enough that its failure is not judged
    /// ([`HELD_MS`]).
    pub fn held_long(&self, now_ms: u64) -> bool {
        self.ms(now_ms) >= HELD_MS
    }
}

impl Attempt {
    /// Whether the attempt failed in a way a client that holds the answer up can cause: the
    /// connection reset, closed short or timed out during the body, or a gRPC status
    /// other than `OK` in its trailers — what [`Attempt::held_by_client`] takes from the
    /// origin. An HTTP status is the origin's word at the header, before any hold.
    pub fn may_be_held(&self) -> bool {
        match self.ending {
            Ending::Error | Ending::Timeout => true,
            Ending::Response => {
                self.status == 200 && self.grpc_status.is_some_and(|c| c != crate::grpc::OK)
            }
            _ => false,
        }
    }

    /// The attempt, once its client held the answer up long enough ([`Held::held_long`]):
    /// a failure it may have caused ([`Attempt::may_be_held`]) has no verdict; anything
    /// else, a success above all, is unchanged.
    pub fn held_by_client(self) -> Attempt {
        if !self.may_be_held() {
            return self;
        }
        Attempt {
            ending: Ending::NoVerdict,
            status: 0,
            grpc_status: None,
            retry_after_s: None,
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
    fn only_failures_a_hold_can_cause_lose_their_verdict() {
        let cut = Attempt::ended(Ending::Error, 20);
        assert_eq!(cut.held_by_client().ending, Ending::NoVerdict);
        let timed_out = Attempt::ended(Ending::Timeout, 20);
        assert_eq!(timed_out.held_by_client().ending, Ending::NoVerdict);
        let deadline = Attempt::grpc(crate::grpc::DEADLINE_EXCEEDED, 20).held_by_client();
        assert_eq!(
            (deadline.ending, deadline.grpc_status),
            (Ending::NoVerdict, None)
        );
        for kept in [
            Attempt::http(200, 20),
            Attempt::http(500, 20),
            Attempt::http(503, 20),
            Attempt::grpc(0, 20),
            Attempt::ended(Ending::InvalidHeader, 20),
            Attempt::ended(Ending::NoLive, 20),
            Attempt::ended(Ending::Tls, 20),
        ] {
            assert!(!kept.may_be_held(), "{kept:?}");
            assert_eq!(kept.held_by_client(), kept);
        }
    }
}
