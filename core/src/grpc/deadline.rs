//! A client's own gRPC deadline: the `grpc-timeout` it sent, which nginx passes to the
//! origin unchanged. An origin that answers `DEADLINE_EXCEEDED` once that deadline has run
//! out did what the client asked; the failure is the client's, never the origin's.

/// How far the origin's clock may run ahead of nginx's, in microseconds, when it says the
/// client's deadline ran out: nginx's cached millisecond clock, and the origin's own timer.
const SLACK_US: u64 = 5_000;

/// A value past which a deadline is no deadline at all, as gRPC's core library reads one
/// (the protocol allows eight digits; it takes up to a thousand million).
const INFINITE_AFTER: u64 = 1_000_000_000;

/// A `grpc-timeout` header's value in microseconds, read as gRPC's core library reads it
/// (the server the origin most likely runs): spaces around, `TimeoutValue` of any number of
/// digits (above a thousand million: no deadline, `u64::MAX`), spaces, `TimeoutUnit` (`H`,
/// `M`, `S`, `m`, `u` or `n`); `None` when it is anything else. A nanosecond value rounds
/// down: `1n` is no time at all.
pub fn parse_timeout(value: &[u8]) -> Option<u64> {
    let v = value.trim_ascii();
    let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let rest = v[digits..].trim_ascii_start();
    let [unit] = rest else { return None };
    let mut n = 0u64;
    for d in &v[..digits] {
        n = n * 10 + u64::from(d - b'0');
        if n > INFINITE_AFTER {
            return Some(u64::MAX);
        }
    }
    Some(match unit {
        b'H' => n.saturating_mul(3_600_000_000),
        b'M' => n.saturating_mul(60_000_000),
        b'S' => n.saturating_mul(1_000_000),
        b'm' => n.saturating_mul(1_000),
        b'u' => n,
        b'n' => n / 1_000,
        _ => return None,
    })
}

/// The deadline the client set, in microseconds, from every `grpc-timeout` field it sent:
/// the smallest, since a server may obey any one of them; a field that does not read as a
/// timeout counts as none at all (no time), since a server may read it otherwise. `None`:
/// the client sent no `grpc-timeout`.
pub fn client_deadline<'a>(fields: impl IntoIterator<Item = &'a [u8]>) -> Option<u64> {
    fields
        .into_iter()
        .map(|f| parse_timeout(f).unwrap_or(0))
        .min()
}

/// Whether a `DEADLINE_EXCEEDED` that came `elapsed_ms` after nginx connected answers the
/// client's own deadline of `deadline_us`: the origin starts counting that deadline no
/// earlier than nginx sent it the call, so its deadline cannot run out before `deadline_us`
/// on nginx's clock, less the clocks' slack and a tenth for an origin that checks its
/// deadline a little early. An origin that gives up sooner hit a deadline of its own (a
/// dependency, its own timeout): that failure is the origin's.
pub fn answers_client(elapsed_ms: u64, deadline_us: u64) -> bool {
    let elapsed_us = elapsed_ms.saturating_mul(1_000).saturating_add(SLACK_US);
    elapsed_us >= deadline_us - deadline_us / 10
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_timeout(b"1n"), Some(0));
        assert_eq!(parse_timeout(b"1500n"), Some(1));
        assert_eq!(parse_timeout(b"7u"), Some(7));
        assert_eq!(parse_timeout(b"250m"), Some(250_000));
        assert_eq!(parse_timeout(b"2S"), Some(2_000_000));
        assert_eq!(parse_timeout(b"3M"), Some(180_000_000));
        assert_eq!(parse_timeout(b"1H"), Some(3_600_000_000));
        assert_eq!(
            parse_timeout(b"99999999H"),
            Some(99_999_999 * 3_600_000_000)
        );
    }

    #[test]
    fn malformed() {
        for bad in [
            &b""[..],
            b"S",
            b"10",
            b"10s",
            b"-1S",
            b"1.5S",
            b"1SS",
            b"1 S x",
        ] {
            assert_eq!(parse_timeout(bad), None, "{:?}", bad);
        }
    }

    #[test]
    fn a_client_deadline_answered() {
        // A 1-ns deadline: whatever the origin does, it answers the client.
        assert!(answers_client(0, 0));
        // One second asked, the origin gave up at one second.
        assert!(answers_client(1_000, 1_000_000));
        assert!(answers_client(905, 1_000_000));
        // The origin gave up at 100 ms of a 10-s deadline: its own deadline.
        assert!(!answers_client(100, 10_000_000));
        assert!(!answers_client(0, 1_000_000));
    }

    #[test]
    fn never_overflows() {
        assert!(answers_client(u64::MAX, u64::MAX));
        assert!(!answers_client(0, u64::MAX));
    }
}
