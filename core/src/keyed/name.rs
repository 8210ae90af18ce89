//! How a key is written where people read it — log lines, the status page, a control request:
//! a client chose its bytes, so printable ASCII stands for itself and every other byte (a
//! quote and a backslash included) is written `\xNN`. The written form reads back to the very
//! bytes ([`from_shown`]), so an operator can name any key the page lists, and two keys never
//! look alike.

use std::fmt::Write as _;

/// `bytes` as written: printable ASCII but `"` and `\` as is, anything else `\xNN`.
pub fn shown(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// The bytes a written key stands for: each `\xNN` (either case) one byte, anything else its
/// own UTF-8 bytes (so a key typed as it is, `café`, names itself). `None` for a backslash not
/// followed by `x` and two hex digits.
pub fn from_shown(text: &str) -> Option<Vec<u8>> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let hex = b
            .get(i + 2..i + 4)
            .filter(|_| b.get(i + 1) == Some(&b'x'))?;
        let digits = core::str::from_utf8(hex).ok()?;
        out.push(
            u8::from_str_radix(digits, 16)
                .ok()
                .filter(|_| digits.bytes().all(|c| c.is_ascii_hexdigit()))?,
        );
        i += 4;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn what_a_person_reads() {
        assert_eq!(shown(b"api.example:443"), "api.example:443");
        assert_eq!(shown(b"/\xff\xfe"), "/\\xff\\xfe");
        assert_eq!(shown(b"a\"b\\c\r\n"), "a\\x22b\\x5cc\\x0d\\x0a");
        assert_eq!(shown("café".as_bytes()), "caf\\xc3\\xa9");
        assert_eq!(from_shown("caf\\xC3\\xA9").unwrap(), "café".as_bytes());
        assert_eq!(from_shown("café").unwrap(), "café".as_bytes());
        for bad in ["\\", "\\x", "\\x4", "\\y41", "\\x4g", "\\x+1"] {
            assert_eq!(from_shown(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn the_written_form_reads_back_to_its_bytes(key in proptest::collection::vec(any::<u8>(), 0..300)) {
            let s = shown(&key);
            prop_assert!(s.bytes().all(|c| (0x20..0x7f).contains(&c)));
            prop_assert!(!s.contains('"'));
            prop_assert_eq!(from_shown(&s), Some(key));
        }

        #[test]
        fn two_keys_never_look_alike(a in proptest::collection::vec(any::<u8>(), 0..40),
                                     b in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assume!(a != b);
            prop_assert_ne!(shown(&a), shown(&b));
        }
    }
}
