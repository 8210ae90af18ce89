//! Answers that are streams by design: server-sent events and gRPC calls, whose quiet spells
//! are their application's (a subscription to a quiet topic, a watch with nothing to report),
//! not their origin's. nginx ends one that stays quiet past its read timeout as it ends a hung
//! answer; its client chose what it waits for, so such an end is judged by the answer's
//! header, as a tunnel's is by its `101`. A stream that fails otherwise — a reset, a close
//! before its end — still counts.

/// Whether an answer of this `Content-Type` is a stream by design: `text/event-stream`, or a
/// gRPC type (`application/grpc`, `application/grpc+proto`, …), in any case.
pub fn streams_by_design(content_type: &[u8]) -> bool {
    let starts =
        |p: &[u8]| content_type.len() >= p.len() && content_type[..p.len()].eq_ignore_ascii_case(p);
    starts(b"text/event-stream") || starts(b"application/grpc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_streams_and_grpc_calls() {
        for t in [
            &b"text/event-stream"[..],
            b"Text/Event-Stream; charset=utf-8",
            b"application/grpc",
            b"application/grpc+proto",
            b"APPLICATION/GRPC-web",
        ] {
            assert!(streams_by_design(t), "{}", String::from_utf8_lossy(t));
        }
        for t in [
            &b""[..],
            b"text/plain",
            b"application/json",
            b"text/event",
            b"application/octet-stream",
            b"application/grp",
        ] {
            assert!(!streams_by_design(t), "{}", String::from_utf8_lossy(t));
        }
    }
}
