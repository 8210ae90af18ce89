//! Message authentication between the instances of a fleet: HMAC-SHA-256 (RFC 2104, RustCrypto's
//! `hmac` and `sha2`) under the fleet's shared secret. The secret itself never crosses the
//! wire; what does:
//!
//! - **A pull** (`GET …?format=fleet`) carries one header, [`HEADER`]:
//!   `pull FROM NONCE MAC`. `FROM` is the puller's id (percent-encoded as on the wire),
//!   `NONCE` 32 lower-case hex digits (16 random bytes, fresh for every pull), and `MAC` the
//!   HMAC of `cbfleet pull FROM NONCE` in 64 hex digits. The server answers only a request
//!   whose MAC verifies and whose `FROM` is one of its peers.
//! - **The answer** is the message ([`super::wire`]) followed by one line
//!   `auth MAC`, the HMAC of `cbfleet answer NONCE` + line break + the message's every byte,
//!   with the puller's own nonce. The puller verifies it before it parses anything: an answer
//!   forged without the secret, altered by one byte, or replayed from an earlier pull (another
//!   nonce) is refused whole.
//! - **A poke** ("pull me now", sent when a breaker moves) is the same header with `poke`:
//!   `poke FROM NONCE MAC` over `cbfleet poke FROM NONCE`. It carries no opinion, only a
//!   reason to pull `FROM` at once (with a nonce of the receiver's): replaying one costs at
//!   most one extra pull, which the receiver paces. Its nonce starts with the sender's
//!   sequence ([`Nonce::sequenced`]), taken only above the last one and not far ahead of the
//!   receiver's clock ([`poke_is_new`]).
//!
//! The three inputs start with different words, so that no MAC of one kind is valid as
//! another. The request MAC is what `openssl dgst -sha256 -hmac SECRET` prints for the same
//! text, so that an operator can pull a peer by hand. Every comparison of a MAC is constant
//! time ([`Mac::verify_slice`]).
//!
//! `auth=off` (a lab without a secret) keeps the same exchange under an empty key: the format
//! and its checks are the same, but anyone can compute the MACs.

use core::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::wire::{decode_name, encode_name};

type HmacSha256 = Hmac<Sha256>;

/// The request header of a pull or a poke.
pub const HEADER: &str = "X-Circuit-Breaker-Fleet";
/// Random bytes in a nonce.
pub const NONCE_BYTES: usize = 16;
/// The shortest secret accepted: 16 bytes; 32 random ones (`openssl rand -hex 32`) are what
/// the README recommends.
pub const MIN_SECRET_BYTES: usize = 16;
/// The longest secret accepted.
pub const MAX_SECRET_BYTES: usize = 1024;

/// The bytes a sealed answer adds to its message: the `auth` line.
pub const SEAL_BYTES: usize = TRAILER.len() + 2 * MAC_BYTES + 1;
const MAC_BYTES: usize = 32;
const TRAILER: &[u8] = b"auth ";
/// The longest header value accepted (a name of 255 bytes percent-encoded, and the rest).
const MAX_HEADER_BYTES: usize = 5 + 3 * 255 + 1 + 2 * NONCE_BYTES + 1 + 2 * MAC_BYTES + 8;

/// What a request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Send your message, sealed with this nonce.
    Pull,
    /// Pull me now.
    Poke,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Pull => "pull",
            Kind::Poke => "poke",
        }
    }
}

/// A pull's nonce: fresh random bytes from the puller.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Nonce(pub [u8; NONCE_BYTES]);

impl Nonce {
    /// The nonce in 32 lower-case hex digits, as the wire carries it.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }

    /// A nonce from its 32 lower-case hex digits.
    pub fn parse(field: &[u8]) -> Option<Nonce> {
        let mut out = [0u8; NONCE_BYTES];
        unhex(field, &mut out)?;
        Some(Nonce(out))
    }

    /// A poke's nonce: the sender's sequence number (big-endian, its first 8 bytes) and
    /// random bytes. Under the poke's MAC, the sequence lets a receiver refuse a poke it has
    /// seen, or an older one: a recorded poke replayed costs nothing.
    pub fn sequenced(sequence: u64, random: [u8; NONCE_BYTES - 8]) -> Nonce {
        let mut out = [0u8; NONCE_BYTES];
        out[..8].copy_from_slice(&sequence.to_be_bytes());
        out[8..].copy_from_slice(&random);
        Nonce(out)
    }

    /// The sequence number of a poke's nonce ([`Nonce::sequenced`]).
    pub fn sequence(&self) -> u64 {
        let mut s = [0u8; 8];
        s.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(s)
    }
}

/// How far ahead of the receiver's wall clock a poke's sequence may be (µs): a minute, far
/// beyond what the clocks of a fleet's machines differ by (NTP keeps them within
/// milliseconds), and no longer than a sender's pokes can be silenced by one dated ahead.
pub const POKE_AHEAD_US: u64 = 60_000_000;

/// Whether a poke with sequence `seq`, taken at the receiver's wall clock `now_us`
/// (microseconds), is news after `last` (the highest taken from its sender); when it is,
/// `seq` is the new `last`. A sender's sequence is its wall clock in microseconds, kept
/// increasing within the process ([`next_sequence`]), so only a strictly later one is news,
/// and none more than [`POKE_AHEAD_US`] ahead of the receiver's clock: taken, a sequence
/// dated far ahead (up to 2^64 − 1) would refuse the sender's honest pokes until the clock
/// reached it. A `last` itself beyond that horizon was not taken under this rule (an earlier
/// build took it, or this clock stepped back): it guards nothing, as after a restart.
pub fn poke_is_new(last: u64, seq: u64, now_us: u64) -> bool {
    let horizon = now_us.saturating_add(POKE_AHEAD_US);
    let last = if last > horizon { 0 } else { last };
    seq <= horizon && seq > last
}

/// The next poke sequence after `last` at wall-clock microseconds `now_us`: the clock, or
/// one more than the last if the clock has not moved on (or stepped back).
pub fn next_sequence(last: u64, now_us: u64) -> u64 {
    now_us.max(last.saturating_add(1))
}

impl fmt::Debug for Nonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Nonce({})", self.hex())
    }
}

/// A request whose MAC verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authenticated {
    /// Pull or poke.
    pub kind: Kind,
    /// The id the requester gave (it knows the secret).
    pub from: String,
    /// Its nonce.
    pub nonce: Nonce,
}

/// Why a request or an answer was refused. Says nothing of the secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthError {
    /// No authentication where some was needed (no header, no `auth` line).
    Missing,
    /// Not in the documented form.
    Malformed,
    /// The MAC does not verify: forged, altered, or made for another nonce.
    Mismatch,
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthError::Missing => "no authentication",
            AuthError::Malformed => "malformed authentication",
            AuthError::Mismatch => "authentication does not verify",
        })
    }
}

impl std::error::Error for AuthError {}

/// Why a secret was refused (never with the secret in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretError {
    /// Shorter than [`MIN_SECRET_BYTES`] or longer than [`MAX_SECRET_BYTES`].
    Length,
    /// A byte that is not visible ASCII.
    Bytes,
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretError::Length => write!(
                f,
                "must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} characters"
            ),
            SecretError::Bytes => f.write_str("must be visible ASCII characters"),
        }
    }
}

/// The fleet's key: an HMAC-SHA-256 instance keyed with the secret, cloned for each MAC.
#[derive(Clone)]
pub struct FleetKey {
    mac: HmacSha256,
    authenticated: bool,
}

impl fmt::Debug for FleetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret.
        f.write_str(if self.authenticated {
            "FleetKey(secret)"
        } else {
            "FleetKey(off)"
        })
    }
}

impl PartialEq for FleetKey {
    /// Two keys are equal when they MAC alike (the secrets are not kept to compare).
    fn eq(&self, other: &FleetKey) -> bool {
        self.authenticated == other.authenticated
            && self.tag(&[b"cbfleet key"]) == other.tag(&[b"cbfleet key"])
    }
}

impl Eq for FleetKey {}

impl FleetKey {
    /// The key of a secret: [`MIN_SECRET_BYTES`]..=[`MAX_SECRET_BYTES`] visible ASCII
    /// characters.
    pub fn new(secret: &[u8]) -> Result<FleetKey, SecretError> {
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&secret.len()) {
            return Err(SecretError::Length);
        }
        if !secret.iter().all(|b| (b'!'..=b'~').contains(b)) {
            return Err(SecretError::Bytes);
        }
        Ok(FleetKey {
            mac: keyed(secret),
            authenticated: true,
        })
    }

    /// The key of a secret file's contents: the first line, without its line break.
    pub fn from_file(contents: &[u8]) -> Result<FleetKey, SecretError> {
        let line = contents.split(|&b| b == b'\n').next().unwrap_or_default();
        FleetKey::new(line.strip_suffix(b"\r").unwrap_or(line))
    }

    /// `auth=off`: the empty key, which anyone can use.
    pub fn unauthenticated() -> FleetKey {
        FleetKey {
            mac: keyed(b""),
            authenticated: false,
        }
    }

    /// Whether this key comes from a secret.
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    fn tagger(&self, parts: &[&[u8]]) -> HmacSha256 {
        let mut m = self.mac.clone();
        for p in parts {
            m.update(p);
        }
        m
    }

    fn tag(&self, parts: &[&[u8]]) -> [u8; MAC_BYTES] {
        self.tagger(parts).finalize().into_bytes().into()
    }

    fn request_input(kind: Kind, from: &str, nonce: &Nonce) -> (String, String) {
        let mut id = String::new();
        encode_name(&mut id, from);
        let text = format!("cbfleet {} {id} {}", kind.word(), nonce.hex());
        (id, text)
    }

    /// The [`HEADER`] value of a request from `from`.
    pub fn request(&self, kind: Kind, from: &str, nonce: &Nonce) -> String {
        let (id, text) = FleetKey::request_input(kind, from, nonce);
        let mac = hex(&self.tag(&[text.as_bytes()]));
        format!("{} {id} {} {mac}", kind.word(), nonce.hex())
    }

    /// Checks a request's [`HEADER`] value.
    pub fn check_request(&self, value: Option<&[u8]>) -> Result<Authenticated, AuthError> {
        let value = value.ok_or(AuthError::Missing)?;
        if value.len() > MAX_HEADER_BYTES {
            return Err(AuthError::Malformed);
        }
        let mut words = value.split(|&b| b == b' ');
        let (Some(kind), Some(from), Some(nonce), Some(mac), None) = (
            words.next(),
            words.next(),
            words.next(),
            words.next(),
            words.next(),
        ) else {
            return Err(AuthError::Malformed);
        };
        let kind = match kind {
            b"pull" => Kind::Pull,
            b"poke" => Kind::Poke,
            _ => return Err(AuthError::Malformed),
        };
        let from = decode_name(from).ok_or(AuthError::Malformed)?;
        let nonce = Nonce::parse(nonce).ok_or(AuthError::Malformed)?;
        let mut got = [0u8; MAC_BYTES];
        unhex(mac, &mut got).ok_or(AuthError::Malformed)?;
        let (_, text) = FleetKey::request_input(kind, &from, &nonce);
        self.tagger(&[text.as_bytes()])
            .verify_slice(&got)
            .map_err(|_| AuthError::Mismatch)?;
        Ok(Authenticated { kind, from, nonce })
    }

    fn answer_tagger(&self, nonce: &Nonce, body: &[u8]) -> HmacSha256 {
        let head = format!("cbfleet answer {}\n", nonce.hex());
        self.tagger(&[head.as_bytes(), body])
    }

    /// The answer to a pull with `nonce`: `body` followed by its `auth` line.
    pub fn seal(&self, nonce: &Nonce, body: &[u8]) -> Vec<u8> {
        with_seal(body, self.answer_tagger(nonce, body))
    }

    /// The message inside an answer to a pull with `nonce`, once its `auth` line verifies.
    pub fn open<'a>(&self, nonce: &Nonce, answer: &'a [u8]) -> Result<&'a [u8], AuthError> {
        let (body, got) = split_seal(answer)?;
        self.answer_tagger(nonce, body)
            .verify_slice(&got)
            .map_err(|_| AuthError::Mismatch)?;
        Ok(body)
    }

    fn bus_tagger(&self, prefix: &str, signed: &[u8]) -> HmacSha256 {
        self.tagger(&[b"cbfleet bus ", prefix.as_bytes(), b"\n", signed])
    }

    /// A message for the fleet's bus (`super::bus`) under the subject prefix `prefix`:
    /// `signed` (its header line and body) followed by its `auth` line, the HMAC of
    /// `cbfleet bus PREFIX`, a line break and every byte of `signed`. Its header says what it
    /// is and carries what makes it fresh (a sequence, a nonce), so that the MAC covers them;
    /// the prefix is covered too, so that a message republished under another fleet's prefix
    /// does not verify there, even under the same key.
    pub fn seal_bus(&self, prefix: &str, signed: &[u8]) -> Vec<u8> {
        with_seal(signed, self.bus_tagger(prefix, signed))
    }

    /// What a bus message under `prefix` signs, once its `auth` line verifies.
    pub fn open_bus<'a>(&self, prefix: &str, sealed: &'a [u8]) -> Result<&'a [u8], AuthError> {
        let (signed, got) = split_seal(sealed)?;
        self.bus_tagger(prefix, signed)
            .verify_slice(&got)
            .map_err(|_| AuthError::Mismatch)?;
        Ok(signed)
    }
}

/// `body` followed by its `auth` line, the MAC `tagger` finishes.
fn with_seal(body: &[u8], tagger: HmacSha256) -> Vec<u8> {
    let mac: [u8; MAC_BYTES] = tagger.finalize().into_bytes().into();
    let mut out = Vec::with_capacity(body.len() + SEAL_BYTES);
    out.extend_from_slice(body);
    out.extend_from_slice(TRAILER);
    out.extend_from_slice(hex(&mac).as_bytes());
    out.push(b'\n');
    out
}

/// A sealed text's bytes before its `auth` line, and the MAC that line carries.
fn split_seal(sealed: &[u8]) -> Result<(&[u8], [u8; MAC_BYTES]), AuthError> {
    // The `auth` line has a fixed length: the last bytes, whatever the message holds.
    let Some(start) = sealed.len().checked_sub(SEAL_BYTES) else {
        return Err(AuthError::Missing);
    };
    let (body, last) = sealed.split_at(start);
    let Some(mac) = last
        .strip_prefix(TRAILER)
        .and_then(|m| m.strip_suffix(b"\n"))
    else {
        return Err(AuthError::Missing);
    };
    let mut got = [0u8; MAC_BYTES];
    unhex(mac, &mut got).ok_or(AuthError::Malformed)?;
    Ok((body, got))
}

fn keyed(secret: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length (longer ones are hashed first), so this cannot fail.
    match HmacSha256::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
    s
}

/// Lower-case hex digits into exactly `out.len()` bytes.
pub(crate) fn unhex(field: &[u8], out: &mut [u8]) -> Option<()> {
    if field.len() != 2 * out.len() {
        return None;
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    for (o, pair) in out.iter_mut().zip(field.chunks_exact(2)) {
        *o = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn key() -> FleetKey {
        FleetKey::new(SECRET).unwrap()
    }

    fn nonce(b: u8) -> Nonce {
        Nonce([b; NONCE_BYTES])
    }

    #[test]
    fn a_request_is_what_openssl_computes() {
        // printf 'cbfleet pull 10.0.0.5:8080 0101…01' \
        //     | openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef
        let h = key().request(Kind::Pull, "10.0.0.5:8080", &nonce(1));
        assert_eq!(
            h,
            "pull 10.0.0.5:8080 01010101010101010101010101010101 \
             d4c2c6e262e0318de8198e18b491c182033be4b0b8279eca86246d15399c36c6"
        );
        let got = key().check_request(Some(h.as_bytes())).unwrap();
        assert_eq!(got.kind, Kind::Pull);
        assert_eq!(got.from, "10.0.0.5:8080");
        assert_eq!(got.nonce, nonce(1));
    }

    #[test]
    fn rfc_4231_test_case_2() {
        // HMAC-SHA-256 with key "Jefe" over "what do ya want for nothing?".
        let k = FleetKey {
            mac: keyed(b"Jefe"),
            authenticated: true,
        };
        assert_eq!(
            hex(&k.tag(&[b"what do ya want ", b"for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn requests_that_do_not_verify_are_refused() {
        let k = key();
        let good = k.request(Kind::Poke, "[::1]:80", &nonce(7));
        assert!(k.check_request(Some(good.as_bytes())).is_ok());
        assert_eq!(k.check_request(None), Err(AuthError::Missing));
        let other = FleetKey::new(b"another-secret-of-32-characters!").unwrap();
        assert_eq!(
            other.check_request(Some(good.as_bytes())),
            Err(AuthError::Mismatch)
        );
        // Another kind, sender or nonce under the same MAC.
        for (from, to) in [("poke", "pull"), ("[::1]:80", "[::1]:81"), ("0707", "0708")] {
            let bad = good.replacen(from, to, 1);
            assert_eq!(
                k.check_request(Some(bad.as_bytes())),
                Err(AuthError::Mismatch),
                "{bad}"
            );
        }
        for bad in [
            "",
            "pull",
            "pull a b c d",
            "push a 00 00",
            "pull a%zz 00 00",
        ] {
            assert_eq!(
                k.check_request(Some(bad.as_bytes())),
                Err(AuthError::Malformed),
                "{bad}"
            );
        }
        let upper = good.to_uppercase().replace("POKE", "poke");
        assert_eq!(
            k.check_request(Some(upper.as_bytes())),
            Err(AuthError::Malformed)
        );
    }

    #[test]
    fn an_answer_opens_only_with_its_nonce_and_key() {
        let k = key();
        let body = b"cbfleet 1 a 0 0\n";
        let sealed = k.seal(&nonce(3), body);
        assert!(sealed.starts_with(body));
        assert!(sealed.ends_with(b"\n"));
        assert_eq!(k.open(&nonce(3), &sealed), Ok(&body[..]));
        assert_eq!(k.open(&nonce(4), &sealed), Err(AuthError::Mismatch));
        assert_eq!(
            FleetKey::unauthenticated().open(&nonce(3), &sealed),
            Err(AuthError::Mismatch)
        );
        assert_eq!(k.open(&nonce(3), body), Err(AuthError::Missing));
        assert_eq!(k.open(&nonce(3), b""), Err(AuthError::Missing));
        let zz = format!("auth {}\n", "z".repeat(64));
        assert_eq!(k.open(&nonce(3), zz.as_bytes()), Err(AuthError::Malformed));
        // An empty message seals too (the parser refuses it afterwards).
        let empty = k.seal(&nonce(3), b"");
        assert_eq!(k.open(&nonce(3), &empty), Ok(&b""[..]));
    }

    #[test]
    fn a_bus_message_opens_only_as_sealed() {
        let k = key();
        let signed = b"cbbus 1 opinions a 7\ncbfleet 1 a 0 0\n";
        let sealed = k.seal_bus("cb.prod", signed);
        assert_eq!(k.open_bus("cb.prod", &sealed), Ok(&signed[..]));
        // Another fleet's prefix, under the same key.
        assert_eq!(k.open_bus("cb.staging", &sealed), Err(AuthError::Mismatch));
        // Not an answer to any pull, and no answer is a bus message.
        assert_eq!(k.open(&nonce(0), &sealed), Err(AuthError::Mismatch));
        let answer = k.seal(&nonce(0), signed);
        assert_eq!(k.open_bus("cb.prod", &answer), Err(AuthError::Mismatch));
        for i in 0..signed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert_eq!(
                k.open_bus("cb.prod", &bad),
                Err(AuthError::Mismatch),
                "byte {i}"
            );
        }
        assert_eq!(
            FleetKey::unauthenticated().open_bus("cb.prod", &sealed),
            Err(AuthError::Mismatch)
        );
        assert_eq!(k.open_bus("cb.prod", signed), Err(AuthError::Missing));
    }

    #[test]
    fn secrets_are_checked_and_never_shown() {
        assert_eq!(FleetKey::new(b"short").unwrap_err(), SecretError::Length);
        assert_eq!(
            FleetKey::new(b"sixteen chars ok").map(|k| k.is_authenticated()),
            Err(SecretError::Bytes)
        );
        assert!(FleetKey::new(b"sixteen-chars-ok").is_ok());
        assert_eq!(
            FleetKey::new(&[b'x'; MAX_SECRET_BYTES + 1]).unwrap_err(),
            SecretError::Length
        );
        assert_eq!(format!("{:?}", key()), "FleetKey(secret)");
        assert_eq!(
            format!("{:?}", FleetKey::unauthenticated()),
            "FleetKey(off)"
        );
        assert_eq!(
            FleetKey::from_file(b"0123456789abcdef0123456789abcdef\r\nx\n"),
            Ok(key())
        );
        assert_eq!(FleetKey::from_file(SECRET), Ok(key()));
        assert_ne!(
            FleetKey::from_file(b"0123456789abcdef0123456789abcdeF"),
            Ok(key())
        );
        assert_eq!(FleetKey::from_file(b""), Err(SecretError::Length));
    }
}
