//! The origin's time: what `slow`, the window's latencies and the adaptive limit judge an
//! attempt by. It is the time the origin took, never the client's: from when the origin had
//! the whole request to when it gave the whole answer, where nginx can tell the two apart.
//!
//! - The start is when nginx connected, or when the client's request body ended if it was
//!   still arriving then (an upload passed on as it arrives: `proxy_request_buffering off`,
//!   gRPC streams): a slow upload is the client's time.
//! - The end is the whole answer when nginx reads it at the origin's pace (buffered, and
//!   spooled to disk if the client is slower), else the response header: an answer passed
//!   to the client as it arrives (`proxy_buffering off`, gRPC, a spool of no size) comes only
//!   as fast as the client reads it, so what follows the header is the client's time. A
//!   slow body after a fast header is then seen only when it times out.
//! - No header (the origin failed or timed out first): the whole attempt.

/// When, in milliseconds after nginx connected to the origin, an attempt's parts happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    /// The attempt ended (`peer.free`).
    pub ended_ms: u64,
    /// The response header was parsed, if it was.
    pub header_ms: Option<u64>,
    /// The client's request body ended after nginx connected (it was still arriving then).
    pub body_done_ms: Option<u64>,
    /// The answer was passed to the client as it arrived, at the client's pace.
    pub paced_by_client: bool,
}

/// The origin's time of an attempt, in milliseconds (see the module's description).
#[inline]
pub fn origin_ms(m: Marks) -> u64 {
    let end = match m.header_ms {
        Some(h) if m.paced_by_client => h.min(m.ended_ms),
        _ => m.ended_ms,
    };
    end.saturating_sub(m.body_done_ms.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks(ended_ms: u64, header_ms: Option<u64>, paced: bool, body: Option<u64>) -> Marks {
        Marks {
            ended_ms,
            header_ms,
            body_done_ms: body,
            paced_by_client: paced,
        }
    }

    #[test]
    fn buffered_answers_take_their_whole_time() {
        assert_eq!(origin_ms(marks(900, Some(20), false, None)), 900);
    }

    #[test]
    fn a_slow_reader_is_not_the_origin() {
        // 20 ms to the header, then 10 s for the client to read the answer.
        assert_eq!(origin_ms(marks(10_020, Some(20), true, None)), 20);
    }

    #[test]
    fn a_slow_origin_is_slow_whoever_reads() {
        assert_eq!(origin_ms(marks(3_010, Some(3_000), true, None)), 3_000);
        // It timed out before any header.
        assert_eq!(origin_ms(marks(5_000, None, true, None)), 5_000);
    }

    #[test]
    fn a_slow_upload_is_not_the_origin() {
        // The body trickled in for 8 s; the origin answered 30 ms after it ended.
        assert_eq!(origin_ms(marks(8_030, Some(8_030), true, Some(8_000))), 30);
        assert_eq!(origin_ms(marks(8_030, Some(8_030), false, Some(8_000))), 30);
        // The origin answered before the body ended (an early 413): no time of its own.
        assert_eq!(origin_ms(marks(9_000, Some(5), true, Some(8_000))), 0);
    }
}
