//! Why a byte stream from the server, or something the caller asked to send, is refused.

use std::fmt;

/// How many bytes of a name from the wire an error repeats: enough to recognise it in a log
/// line, few enough that a hostile peer cannot fill one.
const SHOWN: usize = 64;

/// A protocol error. Any of them from [`super::Parser`] means the connection is beyond repair
/// (the framing is lost, or the peer is not a NATS server we can trust): the caller closes it
/// and reconnects. From the encoder, the operation was not built and nothing was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtoError {
    /// No CRLF within the first `max` bytes of a control line.
    ControlLineTooLong {
        /// The limit (the line with its CRLF must fit in it).
        max: usize,
    },
    /// A control line ended in LF without the CR before it.
    BareLineFeed,
    /// A message of `size` bytes, above the `max` in force.
    PayloadTooLarge {
        /// The size the control line announced, or the payload the caller gave.
        size: u64,
        /// The limit.
        max: usize,
    },
    /// A control line whose first word is no operation a server sends (shown escaped, cut).
    UnknownOperation(String),
    /// A known operation with the wrong number or form of arguments.
    BadArguments(&'static str),
    /// A payload not followed by CRLF: the announced size was wrong.
    MissingCrlf,
    /// An `HMSG` whose header block does not start with `NATS/1.0`.
    BadHeaders,
    /// An `INFO` whose JSON is malformed, not an object, or holds a field of the wrong type.
    BadInfo(String),
    /// [`super::Parser::feed`] given more than [`super::Parser::room`] bytes.
    BufferFull {
        /// The most bytes the parser holds.
        bound: usize,
    },
    /// A subject (or reply subject) that [`super::valid_subject`] refuses (shown escaped, cut).
    InvalidSubject(String),
    /// A queue group that [`super::encode::valid_queue`] refuses (shown escaped, cut).
    InvalidQueue(String),
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ControlLineTooLong { max } => write!(f, "control line longer than {max} bytes"),
            Self::BareLineFeed => f.write_str("control line ended by a bare LF"),
            Self::PayloadTooLarge { size, max } => {
                write!(f, "payload of {size} bytes above max_payload {max}")
            }
            Self::UnknownOperation(op) => write!(f, "unknown operation \"{op}\""),
            Self::BadArguments(op) => write!(f, "bad arguments to {op}"),
            Self::MissingCrlf => f.write_str("missing CRLF after payload"),
            Self::BadHeaders => f.write_str("HMSG headers not starting with \"NATS/1.0\""),
            Self::BadInfo(why) => write!(f, "bad INFO: {why}"),
            Self::BufferFull { bound } => write!(f, "more than {bound} bytes buffered"),
            Self::InvalidSubject(s) => write!(f, "invalid subject \"{s}\""),
            Self::InvalidQueue(q) => write!(f, "invalid queue group \"{q}\""),
        }
    }
}

impl std::error::Error for ProtoError {}

/// `bytes` as a log line may repeat them: printable ASCII as is (`"` and `\` escaped), other
/// bytes as `\xNN`, at most [`SHOWN`] of them, then `...` if there were more.
pub(crate) fn shown(bytes: &[u8]) -> String {
    let mut s = bytes[..bytes.len().min(SHOWN)].escape_ascii().to_string();
    if bytes.len() > SHOWN {
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_like_nginx_log_lines() {
        let cases = [
            (
                ProtoError::ControlLineTooLong { max: 4096 },
                "control line longer than 4096 bytes",
            ),
            (
                ProtoError::PayloadTooLarge {
                    size: 2_000_000,
                    max: 1_048_576,
                },
                "payload of 2000000 bytes above max_payload 1048576",
            ),
            (
                ProtoError::UnknownOperation(shown(b"FOO")),
                "unknown operation \"FOO\"",
            ),
            (ProtoError::BadArguments("MSG"), "bad arguments to MSG"),
            (ProtoError::MissingCrlf, "missing CRLF after payload"),
            (
                ProtoError::BadInfo("not a JSON object".into()),
                "bad INFO: not a JSON object",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
        }
    }

    #[test]
    fn names_from_the_wire_are_escaped_and_cut() {
        assert_eq!(shown(b"a\"b\\c\r\n\xff"), "a\\\"b\\\\c\\r\\n\\xff");
        let long = [b'a'; 100];
        assert_eq!(shown(&long), format!("{}...", "a".repeat(SHOWN)));
    }
}
