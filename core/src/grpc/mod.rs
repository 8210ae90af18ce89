//! What a short-circuited gRPC client is told: a trailers-only answer's `grpc-status` and
//! `grpc-message` for each reason a request is turned away. The health checking protocol the
//! active probe speaks is in [`health`]; whose a `DEADLINE_EXCEEDED` is, in [`deadline`].

pub mod deadline;
pub mod health;

/// `grpc-status` OK.
pub const OK: u8 = 0;
/// `grpc-status` DEADLINE_EXCEEDED.
pub const DEADLINE_EXCEEDED: u8 = 4;
/// `grpc-status` UNAVAILABLE: the server cannot take the call now; retry after the pushback.
pub const UNAVAILABLE: u8 = 14;
/// `grpc-status` RESOURCE_EXHAUSTED.
pub const RESOURCE_EXHAUSTED: u8 = 8;

/// Why a request was turned away, as the answer says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnedAway {
    /// The breaker is open or half-open (its probe is elsewhere).
    Open,
    /// The breaker is half-open.
    HalfOpen,
    /// The recovery ramp after the breaker closed.
    Recovering,
    /// The adaptive in-flight limit shed it: the origin is saturated.
    Limited,
}

/// The `grpc-status` and the (already percent-encoded) `grpc-message` of an answer.
///
/// A breaker that is open says UNAVAILABLE, the code gRPC clients retry with backoff and the
/// one they map an HTTP `503` to. The limit says RESOURCE_EXHAUSTED: the origin has more
/// than it can take, which is what that code means and what this module's own limit hears
/// as an overload signal, so that a tier of nginx in front of this one lowers its limit
/// rather than counting a failure against a server that only did its job. (A client whose
/// retry policy should retry it lists RESOURCE_EXHAUSTED among its retryable codes.)
pub fn answer(why: TurnedAway) -> (u8, &'static str) {
    match why {
        TurnedAway::Open => (UNAVAILABLE, "circuit breaker open"),
        TurnedAway::HalfOpen => (UNAVAILABLE, "circuit breaker half_open"),
        TurnedAway::Recovering => (UNAVAILABLE, "circuit breaker recovering"),
        TurnedAway::Limited => (RESOURCE_EXHAUSTED, "circuit breaker limited"),
    }
}

/// `grpc-message` encoding (gRPC over HTTP/2, "Responses"): bytes outside `0x20..=0x7e`, and
/// `%`, as `%XX` in upper-case hex; the rest as they are.
pub fn percent_encode(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    for &b in msg.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b & 15)]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encoding_follows_the_spec() {
        assert_eq!(percent_encode("plain text"), "plain text");
        assert_eq!(percent_encode("100%"), "100%25");
        assert_eq!(percent_encode("a\nb"), "a%0Ab");
        assert_eq!(percent_encode("café"), "caf%C3%A9");
        assert_eq!(percent_encode("\u{7f}"), "%7F");
    }

    #[test]
    fn answers_are_encoded_and_name_the_state() {
        for (why, code, state) in [
            (TurnedAway::Open, 14, "open"),
            (TurnedAway::HalfOpen, 14, "half_open"),
            (TurnedAway::Recovering, 14, "recovering"),
            (TurnedAway::Limited, 8, "limited"),
        ] {
            let (c, msg) = answer(why);
            assert_eq!(c, code);
            assert_eq!(
                percent_encode(msg),
                msg,
                "sent as it is, so already encoded"
            );
            assert!(msg.ends_with(state), "{msg}");
        }
    }
}
