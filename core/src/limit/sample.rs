//! What the controller learns from one upstream attempt.

use crate::breaker::{Attempt, Ending};

/// An upstream attempt as the controller sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sample {
    /// The origin answered (or timed out) after this many milliseconds.
    Latency(u64),
    /// The same, for a retry (`proxy_next_upstream`): its request took its slot before the
    /// attempt started, so it is never clean.
    Retried(u64),
    /// No latency worth averaging: refused, reset, a client that went away.
    Drop,
    /// The origin said it is saturated (`429`, `503` with `Retry-After`, gRPC
    /// `RESOURCE_EXHAUSTED`): no latency sample, and the batch goes to the controller at
    /// once, which cuts the limit.
    Overload,
}

impl Sample {
    /// The sample of attempt `a`, a `retry` or the request's first: timeouts are latency at
    /// their elapsed time (the clearest sign of a queue); errors with no answer (refused,
    /// reset, a client that went away) carry no latency worth averaging, and fast ones would
    /// drag the minimum down; an answer in which the origin says it is saturated
    /// ([`Attempt::is_overload`]) is an overload signal, not a latency.
    pub fn of(a: &Attempt, retry: bool) -> Sample {
        if a.is_overload() {
            return Sample::Overload;
        }
        match a.ending {
            Ending::Response | Ending::Timeout | Ending::InvalidHeader if retry => {
                Sample::Retried(a.response_ms)
            }
            Ending::Response | Ending::Timeout | Ending::InvalidHeader => {
                Sample::Latency(a.response_ms)
            }
            Ending::Error
            | Ending::Tls
            | Ending::NoVerdict
            | Ending::ClientDeadline
            | Ending::TooBigHeader
            | Ending::BodyRefused
            | Ending::NoLive => Sample::Drop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overload_before_latency_and_no_answer_no_latency() {
        assert_eq!(Sample::of(&Attempt::http(429, 5), false), Sample::Overload);
        let busy = Attempt {
            retry_after_s: Some(1),
            ..Attempt::http(503, 5)
        };
        assert_eq!(Sample::of(&busy, true), Sample::Overload);
        assert_eq!(
            Sample::of(&Attempt::http(503, 5), false),
            Sample::Latency(5)
        );
        assert_eq!(Sample::of(&Attempt::http(200, 7), true), Sample::Retried(7));
        let timeout = Attempt::ended(Ending::Timeout, 900);
        assert_eq!(Sample::of(&timeout, false), Sample::Latency(900));
        for e in [
            Ending::Error,
            Ending::Tls,
            Ending::NoVerdict,
            Ending::NoLive,
        ] {
            assert_eq!(
                Sample::of(&Attempt::ended(e, 3), false),
                Sample::Drop,
                "{e:?}"
            );
        }
    }
}
