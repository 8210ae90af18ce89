//! gRPC's health checking protocol (`grpc.health.v1.Health/Check`) as the active probe speaks
//! it (`probe_grpc=SERVICE`): the request's one message, and what an answer says.
//!
//! The messages are two one-field protobufs: `HealthCheckRequest { string service = 1; }` and
//! `HealthCheckResponse { ServingStatus status = 1; }`, each sent as one uncompressed gRPC
//! message (a flag byte, a 4-byte big-endian length, the bytes). An answer comes from the
//! network: every length is checked against what arrived, and anything that is not exactly one
//! well-formed message is [`Health::Invalid`].

/// The call's path.
pub const PATH: &str = "/grpc.health.v1.Health/Check";

/// The longest service name `probe_grpc=` takes.
pub const MAX_SERVICE: usize = 200;

/// The most of an answer's body the shell keeps: a health answer is a few bytes, so a longer
/// body is no health answer.
pub const MAX_ANSWER: usize = 1024;

/// `ServingStatus.SERVING`.
const SERVING: u64 = 1;

/// Whether `service` may be named in `probe_grpc=`: empty (the server as a whole) or a
/// fully-qualified service name (`package.Service`), at most [`MAX_SERVICE`] bytes of
/// letters, digits, `.`, `_`, `-` and `/`.
pub fn valid_service(service: &str) -> bool {
    service.len() <= MAX_SERVICE
        && service
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
}

/// The request body: one gRPC message holding `HealthCheckRequest { service }` (an empty
/// service is the empty message, as protobuf writes a default string).
pub fn request(service: &str) -> Vec<u8> {
    let mut msg = Vec::with_capacity(service.len() + 3);
    if !service.is_empty() {
        // Field 1, wire type 2 (length-delimited).
        msg.push(0x0a);
        put_varint(&mut msg, service.len() as u64);
        msg.extend_from_slice(service.as_bytes());
    }
    let mut out = Vec::with_capacity(msg.len() + 5);
    out.push(0);
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(&msg);
    out
}

/// What a health answer says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// `grpc-status` 0 and `SERVING`: a good probe.
    Serving,
    /// `grpc-status` 0 and another serving status: `UNKNOWN` (0), `NOT_SERVING` (2),
    /// `SERVICE_UNKNOWN` (3) or a value this protocol version does not name.
    NotServing(u64),
    /// A `grpc-status` other than `OK`: `UNIMPLEMENTED` (no health service), `NOT_FOUND` (an
    /// unknown service), `UNAVAILABLE`, ...
    Status(u32),
    /// No health answer: no `grpc-status` or one that is not a number, a compressed,
    /// truncated or malformed message, or more or fewer than one message.
    Invalid,
}

/// The result of an answer whose HTTP status was 200: its `grpc-status` (from the trailers,
/// or from the headers of a trailers-only answer), and its body, `truncated` when it was
/// longer than the shell kept.
pub fn judge(grpc_status: Option<&[u8]>, body: &[u8], truncated: bool) -> Health {
    let Some(code) = grpc_status.and_then(status_code) else {
        return Health::Invalid;
    };
    if code != 0 {
        return Health::Status(code);
    }
    if truncated {
        return Health::Invalid;
    }
    match message(body).and_then(serving_status) {
        Some(SERVING) => Health::Serving,
        Some(other) => Health::NotServing(other),
        None => Health::Invalid,
    }
}

/// The name of a serving status, as log lines say it.
pub fn serving_name(status: u64) -> Option<&'static str> {
    match status {
        0 => Some("UNKNOWN"),
        1 => Some("SERVING"),
        2 => Some("NOT_SERVING"),
        3 => Some("SERVICE_UNKNOWN"),
        _ => None,
    }
}

/// A `grpc-status` value: decimal digits, no sign, at most 10 of them.
fn status_code(v: &[u8]) -> Option<u32> {
    if v.is_empty() || v.len() > 10 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    core::str::from_utf8(v).ok()?.parse().ok()
}

/// The one uncompressed message of a body; `None` for anything else.
fn message(body: &[u8]) -> Option<&[u8]> {
    let (&flag, rest) = body.split_first()?;
    if flag != 0 || rest.len() < 4 {
        return None;
    }
    let (len, msg) = rest.split_at(4);
    let len = u32::from_be_bytes(len.try_into().ok()?) as usize;
    (msg.len() == len).then_some(msg)
}

/// Field 1 of a `HealthCheckResponse` (0 when absent, protobuf's default); the last one wins,
/// as protobuf reads a repeated scalar. Unknown fields are skipped; a malformed one is `None`.
fn serving_status(mut msg: &[u8]) -> Option<u64> {
    let mut status = 0;
    while !msg.is_empty() {
        let key = varint(&mut msg)?;
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 {
            return None;
        }
        match wire {
            0 => {
                let v = varint(&mut msg)?;
                if field == 1 {
                    status = v;
                }
            }
            1 => msg = msg.get(8..)?,
            2 => {
                let len = usize::try_from(varint(&mut msg)?).ok()?;
                msg = msg.get(len..)?;
            }
            5 => msg = msg.get(4..)?,
            // Groups (3, 4) are not in proto3, and 6 and 7 are not wire types.
            _ => return None,
        }
        if field == 1 && wire != 0 {
            return None;
        }
    }
    Some(status)
}

/// A base-128 varint of at most 10 bytes, taken off the front of `buf`.
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Some(v);
        }
    }
    None
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(msg: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        out.extend_from_slice(msg);
        out
    }

    #[test]
    fn requests_are_what_grpcio_sends() {
        assert_eq!(request(""), [0, 0, 0, 0, 0]);
        assert_eq!(
            request("pkg.Svc"),
            [0, 0, 0, 0, 9, 0x0a, 7, b'p', b'k', b'g', b'.', b'S', b'v', b'c']
        );
        let long = "a".repeat(MAX_SERVICE);
        let r = request(&long);
        // A length of 200 takes two varint bytes.
        assert_eq!(&r[5..8], &[0x0a, 0xc8, 0x01]);
        assert_eq!(r.len(), 5 + 3 + MAX_SERVICE);
    }

    #[test]
    fn serving_is_the_only_good_answer() {
        assert_eq!(
            judge(Some(b"0"), &answer(&[0x08, 1]), false),
            Health::Serving
        );
        assert_eq!(
            judge(Some(b"0"), &answer(&[0x08, 2]), false),
            Health::NotServing(2)
        );
        assert_eq!(
            judge(Some(b"0"), &answer(&[0x08, 3]), false),
            Health::NotServing(3)
        );
        // An empty message is status UNKNOWN (protobuf's default).
        assert_eq!(
            judge(Some(b"0"), &answer(&[]), false),
            Health::NotServing(0)
        );
        assert_eq!(judge(Some(b"12"), &[], false), Health::Status(12));
        assert_eq!(judge(Some(b"5"), &[], false), Health::Status(5));
    }

    #[test]
    fn unknown_fields_are_skipped_and_the_last_status_wins() {
        let msg = [
            0x10, 0x96, 0x01, // field 2, varint 150
            0x1a, 2, b'h', b'i', // field 3, bytes
            0x25, 1, 2, 3, 4, // field 4, fixed32
            0x29, 1, 2, 3, 4, 5, 6, 7, 8, // field 5, fixed64
            0x08, 2, 0x08, 1, // status NOT_SERVING, then SERVING
        ];
        assert_eq!(judge(Some(b"0"), &answer(&msg), false), Health::Serving);
    }

    #[test]
    fn what_is_not_one_clean_message_is_invalid() {
        type Case<'a> = (Option<&'a [u8]>, Vec<u8>, bool);
        let good = answer(&[0x08, 1]);
        let cases: Vec<Case> = vec![
            (None, good.clone(), false),
            (Some(b""), good.clone(), false),
            (Some(b"+0"), good.clone(), false),
            (Some(b"OK"), good.clone(), false),
            (Some(b"99999999999"), good.clone(), false),
            (Some(b"0"), good.clone(), true),
            (Some(b"0"), vec![], false),
            (Some(b"0"), vec![0, 0, 0], false),
            // Compressed.
            (Some(b"0"), [&[1u8][..], &good[1..]].concat(), false),
            // Length says more than arrived, or less.
            (Some(b"0"), vec![0, 0, 0, 0, 3, 0x08, 1], false),
            (Some(b"0"), vec![0, 0, 0, 0, 1, 0x08, 1], false),
            // Two messages.
            (Some(b"0"), [good.clone(), good.clone()].concat(), false),
            // Field 0, a group, a wrong wire type for the status, a cut varint, a cut field.
            (Some(b"0"), answer(&[0x00, 1]), false),
            (Some(b"0"), answer(&[0x0b, 0x0c]), false),
            (Some(b"0"), answer(&[0x0a, 1, 1]), false),
            (Some(b"0"), answer(&[0x08, 0x81]), false),
            (Some(b"0"), answer(&[0x1a, 5, 1]), false),
            (Some(b"0"), answer(&[0x08; 11].map(|_| 0xff)), false),
        ];
        for (status, body, truncated) in cases {
            assert_eq!(
                judge(status, &body, truncated),
                Health::Invalid,
                "{status:?} {body:?} {truncated}"
            );
        }
    }

    #[test]
    fn service_names() {
        for ok in ["", "grpc.health.v1.Health", "my-pkg/v2.Svc_1"] {
            assert!(valid_service(ok), "{ok}");
        }
        for bad in [
            "a b",
            "a\"b",
            "caf\u{e9}",
            "a;b",
            &"a".repeat(MAX_SERVICE + 1),
        ] {
            assert!(!valid_service(bad), "{bad}");
        }
    }

    #[test]
    fn varints_round_trip() {
        for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut buf = &out[..];
            assert_eq!(varint(&mut buf), Some(v));
            assert!(buf.is_empty());
        }
    }
}
