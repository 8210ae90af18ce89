//! Answers that are streams by design: server-sent events, whose quiet spells are their
//! application's (a subscription to a quiet topic), not their origin's. nginx ends one that
//! stays quiet past its read timeout as it ends a hung answer; its client chose what it waits
//! for, so such an end is judged by the answer's header, as a tunnel's is by its `101`, and
//! the answer is timed to its header. A stream that fails otherwise — a reset, a close before
//! its end — still counts.
//!
//! Not gRPC: its servers send a call's header with its first message, so a watch with nothing
//! to report times out before any header, as a hung call does, and one that sent its header
//! early and then hangs would look like a quiet watch (docs/behaviour.md says what to do).

/// Whether an answer of this `Content-Type` is a stream by design: `text/event-stream`, in any
/// case, with or without parameters.
pub fn streams_by_design(content_type: &[u8]) -> bool {
    const EVENTS: &[u8] = b"text/event-stream";
    content_type.len() >= EVENTS.len()
        && content_type[..EVENTS.len()].eq_ignore_ascii_case(EVENTS)
        && content_type[EVENTS.len()..]
            .first()
            .map_or(true, |&b| b == b';' || b == b' ' || b == b'\t')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_streams_only() {
        for t in [
            &b"text/event-stream"[..],
            b"Text/Event-Stream; charset=utf-8",
            b"text/event-stream ;charset=utf-8",
        ] {
            assert!(streams_by_design(t), "{}", String::from_utf8_lossy(t));
        }
        for t in [
            &b""[..],
            b"text/plain",
            b"application/json",
            b"text/event",
            b"text/event-streams",
            b"application/grpc",
            b"application/grpc+proto",
            b"application/json;stream=watch",
        ] {
            assert!(!streams_by_design(t), "{}", String::from_utf8_lossy(t));
        }
    }
}
