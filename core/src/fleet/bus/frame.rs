//! The three messages of the fleet's bus, as they travel in a NATS payload, each sealed with
//! the fleet's key ([`FleetKey::seal_bus`]): a header line, for two of them a message in the
//! fleet's wire format ([`crate::fleet::wire`]), and the `auth` line.
//!
//! ```text
//! cbbus 1 opinions SENDER SEQ EVERY          the sender's own opinions, to every member
//! cbbus 1 hello SENDER SEQ NONCE              "tell me what you think", to every member or one
//! cbbus 1 reply SENDER SEQ NONCE EVERY        the answer to a hello, to the asker alone
//! ```
//!
//! `SENDER` is the member's id as the wire writes names; `SEQ` the sender's sequence (its
//! wall clock in microseconds, only growing: [`crate::fleet::auth::next_sequence`]); `NONCE`
//! 32 hex digits, fresh from the asker; `EVERY` how often, in milliseconds, the sender will
//! speak again while nothing moves ([`super::heartbeat_ms`]), so that the receiver knows how
//! long its word lasts ([`super::lasts_ms`]). The MAC covers the header, so that no one without the
//! key can change who speaks, when, or to whom they answer, and the fleet's subject prefix, so
//! that two fleets on one bus stay apart even under one key; what keeps a recorded message
//! from being believed twice is [`super::Members`].

use crate::fleet::auth::{AuthError, FleetKey, Nonce};
use crate::fleet::wire::{self, decode_name, encode_name, Message, ParseError};

/// The first word of every bus message, and its version.
const MAGIC: &str = "cbbus";
const VERSION: &str = "1";
/// The longest header line: the words, a name of 255 bytes percent-encoded, two numbers.
const MAX_HEADER_BYTES: usize = 32 + 3 * wire::MAX_NAME_BYTES + 2 * 20 + 32;

/// A bus message whose MAC verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A member's own opinions.
    Opinions {
        sender: String,
        seq: u64,
        every_ms: u64,
        message: Message,
    },
    /// A member asks for every member's opinions (or one's), to be answered in its inbox.
    Hello {
        sender: String,
        seq: u64,
        nonce: Nonce,
    },
    /// A member answers this instance's hello `nonce`.
    Reply {
        sender: String,
        seq: u64,
        nonce: Nonce,
        every_ms: u64,
        message: Message,
    },
}

impl Frame {
    /// Who sent it.
    pub fn sender(&self) -> &str {
        match self {
            Frame::Opinions { sender, .. }
            | Frame::Hello { sender, .. }
            | Frame::Reply { sender, .. } => sender,
        }
    }
}

/// Why a bus message was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Its MAC does not verify (forged, altered, or under another key), or it has none.
    Auth(AuthError),
    /// It verifies but is not in the documented form.
    Header,
    /// Its message does not parse.
    Message(ParseError),
    /// Its message names another sender than its header.
    Sender,
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FrameError::Auth(e) => write!(f, "{e}"),
            FrameError::Header => f.write_str("malformed header"),
            FrameError::Message(e) => write!(f, "{e}"),
            FrameError::Sender => f.write_str("message of another sender"),
        }
    }
}

fn header(kind: &str, sender: &str, rest: &[String]) -> String {
    let mut h = format!("{MAGIC} {VERSION} {kind} ");
    encode_name(&mut h, sender);
    for r in rest {
        h.push(' ');
        h.push_str(r);
    }
    h.push('\n');
    h
}

/// The fleet's key and its subjects' prefix, under which every bus message is sealed.
#[derive(Clone, Debug)]
pub struct Sealer<'a> {
    pub key: &'a FleetKey,
    pub prefix: &'a str,
}

fn seal(k: &Sealer<'_>, head: String, body: &[u8]) -> Vec<u8> {
    let mut signed = head.into_bytes();
    signed.extend_from_slice(body);
    k.key.seal_bus(k.prefix, &signed)
}

/// `sender`'s opinions (`body`, a rendered wire message of its own), at sequence `seq`; it
/// speaks again within `every_ms` while nothing moves.
pub fn opinions(key: &Sealer<'_>, sender: &str, seq: u64, every_ms: u64, body: &[u8]) -> Vec<u8> {
    let head = header("opinions", sender, &[seq.to_string(), every_ms.to_string()]);
    seal(key, head, body)
}

/// `sender`'s hello at sequence `seq` (which dates it) with its fresh `nonce`.
pub fn hello(key: &Sealer<'_>, sender: &str, seq: u64, nonce: &Nonce) -> Vec<u8> {
    seal(
        key,
        header("hello", sender, &[seq.to_string(), nonce.hex()]),
        b"",
    )
}

/// `sender`'s answer to the hello `nonce`: its opinions (`body`) at sequence `seq`, as in
/// [`opinions`].
pub fn reply(
    key: &Sealer<'_>,
    sender: &str,
    seq: u64,
    nonce: &Nonce,
    every_ms: u64,
    body: &[u8],
) -> Vec<u8> {
    let words = [seq.to_string(), nonce.hex(), every_ms.to_string()];
    seal(key, header("reply", sender, &words), body)
}

/// What a bus message says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Opinions,
    Hello,
    Reply,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Opinions => "opinions",
            Kind::Hello => "hello",
            Kind::Reply => "reply",
        }
    }
}

/// The longest hello: its header and seal.
pub const MAX_HELLO_BYTES: usize = MAX_HEADER_BYTES + crate::fleet::auth::SEAL_BYTES;

/// Whether `payload` starts as a message of `kind` does (and a hello is no longer than one
/// can be): what is checked before the MAC is computed, so that what is sent on a subject in
/// another form costs nothing more.
pub fn looks_like(payload: &[u8], kind: Kind) -> bool {
    let Some(rest) = payload.strip_prefix(format!("{MAGIC} {VERSION} ").as_bytes()) else {
        return false;
    };
    rest.strip_prefix(kind.word().as_bytes())
        .is_some_and(|r| r.first() == Some(&b' '))
        && (kind != Kind::Hello || payload.len() <= MAX_HELLO_BYTES)
}

/// Verifies a bus message under `key` (and its prefix), then reads it. Nothing of it is read
/// before its MAC verifies.
pub fn open(key: &Sealer<'_>, payload: &[u8]) -> Result<Frame, FrameError> {
    let signed = key
        .key
        .open_bus(key.prefix, payload)
        .map_err(FrameError::Auth)?;
    let end = signed
        .iter()
        .take(MAX_HEADER_BYTES)
        .position(|&b| b == b'\n')
        .ok_or(FrameError::Header)?;
    let (head, body) = (&signed[..end], &signed[end + 1..]);
    let words: Vec<&[u8]> = head.split(|&b| b == b' ').collect();
    let (magic, version, kind, sender) = match words.as_slice() {
        [m, v, k, s, ..] => (*m, *v, *k, *s),
        _ => return Err(FrameError::Header),
    };
    if magic != MAGIC.as_bytes() || version != VERSION.as_bytes() {
        return Err(FrameError::Header);
    }
    let sender = decode_name(sender).ok_or(FrameError::Header)?;
    let message = |body: &[u8]| -> Result<Message, FrameError> {
        let m = wire::parse(body).map_err(FrameError::Message)?;
        if m.sender != sender {
            return Err(FrameError::Sender);
        }
        Ok(m)
    };
    match (kind, &words[4..]) {
        (b"opinions", [seq, every]) => Ok(Frame::Opinions {
            seq: number(seq)?,
            every_ms: number(every)?,
            message: message(body)?,
            sender,
        }),
        (b"hello", [seq, nonce]) if body.is_empty() => Ok(Frame::Hello {
            seq: number(seq)?,
            nonce: Nonce::parse(nonce).ok_or(FrameError::Header)?,
            sender,
        }),
        (b"reply", [seq, nonce, every]) => Ok(Frame::Reply {
            seq: number(seq)?,
            nonce: Nonce::parse(nonce).ok_or(FrameError::Header)?,
            every_ms: number(every)?,
            message: message(body)?,
            sender,
        }),
        _ => Err(FrameError::Header),
    }
}

/// A decimal number as the header writes it: digits only, no sign, no leading zero.
fn number(field: &[u8]) -> Result<u64, FrameError> {
    let ok = !field.is_empty()
        && field.len() <= 20
        && field.iter().all(u8::is_ascii_digit)
        && (field == b"0" || field[0] != b'0');
    if !ok {
        return Err(FrameError::Header);
    }
    core::str::from_utf8(field)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(FrameError::Header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fleet_key() -> &'static FleetKey {
        static KEY: std::sync::OnceLock<FleetKey> = std::sync::OnceLock::new();
        KEY.get_or_init(|| FleetKey::new(b"0123456789abcdef0123456789abcdef").unwrap())
    }

    fn key() -> Sealer<'static> {
        Sealer {
            key: fleet_key(),
            prefix: "cb.fleet",
        }
    }

    fn body(sender: &str) -> Vec<u8> {
        let mut s = String::new();
        wire::render_header(&mut s, sender, 0, 0);
        s.into_bytes()
    }

    #[test]
    fn each_kind_reads_back() {
        let k = key();
        let n = Nonce([7; 16]);
        let o = open(&k, &opinions(&k, "edge 1", 42, 1000, &body("edge 1"))).unwrap();
        assert!(
            matches!(&o, Frame::Opinions { sender, seq: 42, every_ms: 1000, .. } if sender == "edge 1")
        );
        assert_eq!(
            open(&k, &hello(&k, "b", 5, &n)).unwrap(),
            Frame::Hello {
                sender: "b".into(),
                seq: 5,
                nonce: n
            }
        );
        let r = open(&k, &reply(&k, "c", 9, &n, 1000, &body("c"))).unwrap();
        assert!(matches!(r, Frame::Reply { seq: 9, nonce, every_ms: 1000, .. } if nonce == n));
        assert_eq!(r.sender(), "c");
    }

    #[test]
    fn a_glance_tells_each_kind_from_the_others() {
        let k = key();
        let n = Nonce([1; 16]);
        let o = opinions(&k, "a", 1, 1000, &body("a"));
        let h = hello(&k, "a", 1, &n);
        let r = reply(&k, "a", 1, &n, 1000, &body("a"));
        assert!(looks_like(&o, Kind::Opinions) && !looks_like(&o, Kind::Hello));
        assert!(looks_like(&h, Kind::Hello) && !looks_like(&h, Kind::Reply));
        assert!(looks_like(&r, Kind::Reply) && !looks_like(&r, Kind::Opinions));
        assert!(!looks_like(b"cbbus 1 hellox a", Kind::Hello));
        let mut long = h.clone();
        long.resize(MAX_HELLO_BYTES + 1, b'x');
        assert!(!looks_like(&long, Kind::Hello));
        assert!(!looks_like(b"", Kind::Opinions));
    }

    #[test]
    fn a_message_of_another_fleet_on_the_bus_does_not_verify() {
        let k = key();
        let staging = Sealer {
            key: fleet_key(),
            prefix: "cb.staging",
        };
        let m = opinions(&staging, "a", 1, 1000, &body("a"));
        assert!(matches!(open(&k, &m), Err(FrameError::Auth(_))));
        assert!(open(&staging, &m).is_ok());
    }

    #[test]
    fn a_message_that_names_another_sender_is_refused() {
        let k = key();
        assert_eq!(
            open(&k, &opinions(&k, "a", 1, 1000, &body("b"))),
            Err(FrameError::Sender)
        );
    }

    #[test]
    fn headers_out_of_form_are_refused_even_when_sealed() {
        let k = key();
        for head in [
            "cbbus 2 opinions a 1\n",
            "cbbus 1 opinions a 01\n",
            "cbbus 1 opinions a -1\n",
            "cbbus 1 opinions a 1 2\n",
            "cbbus 1 hello a 0707\n",
            "cbbus 1 hello a 07070707070707070707070707070707\n",
            "cbbus 1 shout a 1\n",
            "cbbus 1 opinions a 99999999999999999999\n",
            "cbbus 1 opinions\n",
            "cbbus 1 hello a 1 07070707070707070707070707070707\nextra",
            "no line break at all",
        ] {
            let sealed = k.key.seal_bus(k.prefix, head.as_bytes());
            assert!(
                matches!(
                    open(&k, &sealed),
                    Err(FrameError::Header | FrameError::Message(_))
                ),
                "{head:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn any_change_of_a_byte_is_refused(i in 0usize..200, bit in 0u8..8, seq: u64) {
            let k = key();
            let sealed = opinions(&k, "edge-1", seq, 1000, &body("edge-1"));
            let i = i % sealed.len();
            let mut bad = sealed.clone();
            bad[i] ^= 1 << bit;
            prop_assert!(open(&k, &bad).is_err());
        }

        #[test]
        fn arbitrary_payloads_are_refused_without_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..400)
        ) {
            prop_assert!(open(&key(), &bytes).is_err());
        }
    }
}
