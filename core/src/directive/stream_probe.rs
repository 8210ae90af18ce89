//! `circuit_breaker_probe` in a `stream { upstream {} }` block: an active probe of the
//! upstream's servers while its breaker is open — a TCP connect, and optionally bytes to send
//! and the first bytes the server must answer with (`send="PING\r\n" expect="+PONG"`, a
//! greeting a server speaks first, or a protocol's own handshake); or, with `udp`, a datagram
//! sent and one back (a DNS query and its answer's first bytes).
//!
//! nginx itself reads `\r`, `\n`, `\t`, `\\` and quotes in a directive's words; `\xNN` (two hex
//! digits) writes any other byte, so that a binary handshake (a PostgreSQL `SSLRequest`) can be
//! said.

use super::{duration_u32, invalid, ConfError, Units};
use crate::directive::DEFAULT_PROBE_TIMEOUT_MS;

/// The directive's name.
pub const STREAM_PROBE_DIRECTIVE: &str = "circuit_breaker_probe";

/// The most bytes a probe sends.
pub const MAX_SEND: usize = 1024;
/// The most bytes a probe expects (and so reads).
pub const MAX_EXPECT: usize = 256;
/// The longest `timeout`: well within the lease of the instance's one probe, so that a probe
/// in flight is never taken over by another worker.
pub const MAX_TIMEOUT_MS: u32 = 60_000;

/// What a stream upstream's active probe does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamProbe {
    /// Sent once connected (nothing: none).
    pub send: Vec<u8>,
    /// What the server's first bytes must be (nothing: the connect, and the send, suffice).
    pub expect: Vec<u8>,
    /// The probe's deadline, connect to the last expected byte, in milliseconds.
    pub timeout_ms: u32,
    /// Over UDP: `send` goes as one datagram, and the first datagram back is the answer.
    pub udp: bool,
}

/// Parses `circuit_breaker_probe [udp] [send=STRING] [expect=STRING] [timeout=TIME]` in a
/// stream upstream.
pub fn parse_stream_probe_args<'a>(
    words: impl IntoIterator<Item = &'a str>,
    units: &dyn Units,
) -> Result<StreamProbe, ConfError> {
    const D: &str = STREAM_PROBE_DIRECTIVE;
    let mut p = StreamProbe {
        timeout_ms: DEFAULT_PROBE_TIMEOUT_MS,
        ..StreamProbe::default()
    };
    let mut seen: Vec<&str> = Vec::new();
    for word in words {
        if word == "udp" {
            if p.udp {
                return Err(ConfError::Conflict(format!(
                    "duplicate parameter \"udp\" in \"{D}\" directive"
                )));
            }
            p.udp = true;
            continue;
        }
        let Some((key, v)) = word.split_once('=') else {
            return Err(unknown(word));
        };
        if seen.contains(&key) {
            return Err(ConfError::Conflict(format!(
                "duplicate parameter \"{key}\" in \"{D}\" directive"
            )));
        }
        match key {
            "send" => p.send = bytes(word, v, MAX_SEND, "at most 1024 bytes")?,
            "expect" => p.expect = bytes(word, v, MAX_EXPECT, "at most 256 bytes")?,
            "timeout" => {
                p.timeout_ms = duration_u32(D, units, word, v, false)?;
                if p.timeout_ms > MAX_TIMEOUT_MS {
                    return Err(invalid(D, word, Some("at most 1m")));
                }
            }
            _ => return Err(unknown(word)),
        }
        seen.push(key);
    }
    if p.udp && p.send.is_empty() {
        // A datagram socket's connect sends nothing: the server is only asked by a datagram.
        return Err(invalid(
            D,
            "udp",
            Some("a UDP probe needs \"send\", the datagram the server answers"),
        ));
    }
    Ok(p)
}

fn unknown(word: &str) -> ConfError {
    invalid(
        STREAM_PROBE_DIRECTIVE,
        word,
        Some("a stream upstream's probe takes udp, send, expect, timeout"),
    )
}

/// A parameter's bytes: the word as nginx read it, with `\xNN` for any byte.
fn bytes(word: &str, v: &str, max: usize, too_long: &'static str) -> Result<Vec<u8>, ConfError> {
    let bad = |hint: &'static str| invalid(STREAM_PROBE_DIRECTIVE, word, Some(hint));
    let out = decode(v.as_bytes()).ok_or_else(|| bad("\\x must be followed by two hex digits"))?;
    if out.is_empty() {
        return Err(bad("it must not be empty"));
    }
    if out.len() > max {
        return Err(bad(too_long));
    }
    Ok(out)
}

/// `\xNN` decoded; every other byte as it is. `None` for a `\x` without two hex digits.
pub fn decode(v: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'\\' && v.get(i + 1) == Some(&b'x') {
            let hex = v.get(i + 2..i + 4)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let s = core::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(s, 16).ok()?);
            i += 4;
        } else {
            out.push(v[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Whether the first datagram a server sent back answers `expect`: it begins with it (any
/// datagram does when nothing is expected). A datagram is whole or nothing: a shorter one
/// never becomes the answer with the next.
pub fn answers_datagram(expect: &[u8], datagram: &[u8]) -> bool {
    datagram.starts_with(expect)
}

/// Whether the bytes a server sent so far (`got`) answer `expect`: `Some(true)` once they
/// begin with it, `Some(false)` as soon as one differs, `None` while they are a part of it.
pub fn answers(expect: &[u8], got: &[u8]) -> Option<bool> {
    let n = expect.len().min(got.len());
    if expect[..n] != got[..n] {
        return Some(false);
    }
    (got.len() >= expect.len()).then_some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directive::tests::Fixed;
    use proptest::prelude::*;

    fn parse(words: &[&str]) -> Result<StreamProbe, String> {
        parse_stream_probe_args(words.iter().copied(), &Fixed).map_err(|e| e.to_string())
    }

    #[test]
    fn a_connect_a_send_and_an_expect() {
        let p = parse(&[]).unwrap();
        assert_eq!((p.send.len(), p.expect.len(), p.timeout_ms), (0, 0, 1000));
        let p = parse(&["send=PING\r\n", "expect=+PONG", "timeout=300ms"]).unwrap();
        assert_eq!(p.send, b"PING\r\n");
        assert_eq!(p.expect, b"+PONG");
        assert_eq!(p.timeout_ms, 300);
        let p = parse(&["send=\\x00\\x00\\x00\\x08\\x04\\xd2\\x16\\x2f", "expect=N"]).unwrap();
        assert_eq!(p.send, [0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f]);
    }

    #[test]
    fn bad_words_are_refused() {
        for (w, want) in [
            ("send=", "must not be empty"),
            ("send=\\x4", "two hex digits"),
            ("expect=\\xzz", "two hex digits"),
            ("uri=/health", "takes udp, send, expect, timeout"),
            ("send", "takes udp, send, expect, timeout"),
            ("udp=on", "takes udp, send, expect, timeout"),
            ("udp", "needs \"send\""),
            ("timeout=soon", "invalid value"),
            ("timeout=2m", "at most 1m"),
            ("send=\\x+f", "two hex digits"),
        ] {
            let e = parse(&[w]).unwrap_err();
            assert!(e.contains(want), "{w}: {e}");
        }
        let long = format!("expect={}", "a".repeat(MAX_EXPECT + 1));
        assert!(parse(&[&long]).unwrap_err().contains("at most 256 bytes"));
        let long = format!("send={}", "a".repeat(MAX_SEND + 1));
        assert!(parse(&[&long]).unwrap_err().contains("at most 1024 bytes"));
        assert!(parse(&["send=a", "send=b"])
            .unwrap_err()
            .contains("duplicate parameter \"send\""));
        assert!(parse(&["udp", "send=a", "udp"])
            .unwrap_err()
            .contains("duplicate parameter \"udp\""));
    }

    #[test]
    fn a_udp_probe_sends_a_datagram() {
        let p = parse(&["udp", "send=\\x12\\x34", "expect=\\x12\\x34"]).unwrap();
        assert!(p.udp);
        assert_eq!((p.send, p.expect), (vec![0x12, 0x34], vec![0x12, 0x34]));
        assert!(!parse(&["send=a"]).unwrap().udp);
        assert!(parse(&["send=a", "udp"]).unwrap().udp, "in any order");
        assert!(answers_datagram(b"", b""), "nothing expected: any datagram");
        assert!(answers_datagram(b"\x12\x34", b"\x12\x34\x81\x80"));
        assert!(
            !answers_datagram(b"\x12\x34", b"\x12"),
            "a short datagram is not a part"
        );
        assert!(!answers_datagram(b"\x12\x34", b"\x12\x35"));
    }

    proptest! {
        #[test]
        fn an_answer_in_any_chunks_is_judged_alike(
            expect in prop::collection::vec(any::<u8>(), 1..16),
            answer in prop::collection::vec(any::<u8>(), 0..24),
            cuts in prop::collection::vec(0usize..24, 0..4),
        ) {
            let whole = answers(&expect, &answer);
            // Fed as it comes, the first verdict is the whole answer's.
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c <= answer.len()).collect();
            cuts.push(answer.len());
            cuts.sort_unstable();
            let first = cuts.iter().find_map(|&c| answers(&expect, &answer[..c]));
            prop_assert_eq!(first, whole);
            prop_assert_eq!(whole == Some(true), answer.starts_with(&expect));
        }

        #[test]
        fn a_datagram_answers_as_a_whole_answer_would(
            expect in prop::collection::vec(any::<u8>(), 0..16),
            datagram in prop::collection::vec(any::<u8>(), 0..24),
        ) {
            let whole = if expect.is_empty() { Some(true) } else { answers(&expect, &datagram) };
            // What answers whole answers as a datagram; what is only a part of it does not.
            prop_assert_eq!(answers_datagram(&expect, &datagram), whole == Some(true));
        }

        #[test]
        fn hex_escapes_say_every_byte(b in prop::collection::vec(any::<u8>(), 0..32)) {
            let written: String = b.iter().map(|x| format!("\\x{x:02x}")).collect();
            prop_assert_eq!(decode(written.as_bytes()), Some(b));
        }
    }
}
