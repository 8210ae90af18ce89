//! The exchange format: what an instance serves to its peers (`?format=fleet`) and parses
//! from them.
//!
//! A line format rather than JSON, because the parser must stay cheap and bounded against a
//! peer that lies: every line has a fixed number of space-separated fields of fixed types, so
//! the parser never builds a tree it would have to walk afterwards, never recurses, and holds
//! at most [`MAX_ENTRIES`] records of at most three [`MAX_NAME_BYTES`] names each; it is also
//! about a third of the size of the same record in JSON (one record is 70–100 bytes), and
//! stays readable with `curl`.
//!
//! ```text
//! cbfleet 1 10.0.0.5:8080 3 0
//! 10.0.0.5:8080 api checkout 9f3c2a1b00d4e5f6 open 0 4100 31 29 0 0 - p
//! 10.0.0.7:8080 api checkout 9f3c2a1b00d4e5f6 half_open 850 200 0 0 0 1 200 p
//! 10.0.0.9:8080 api default 0b5e11c2d4a7f001 closed 1900 3200 14 9 0 0 - -
//! ```
//!
//! The header is `cbfleet VERSION SENDER ENTRIES DELAY`: the format's version, the serving
//! instance's id, the number of record lines that follow, and a delay in milliseconds that
//! the receiver adds to every age below (so that a body rendered once can be served for a
//! while without being rewritten). Each record is
//!
//! `ORIGIN UPSTREAM ROUTE FINGERPRINT STATE AGE SINCE REQUESTS FAILURES SLOW ROUND PROBE FLAGS`
//!
//! - `ORIGIN`: the instance whose opinion this is (the sender's own, or one it relays);
//! - `UPSTREAM ROUTE`: the breaker (`default` for an upstream's own);
//! - `FINGERPRINT`: 16 lower-case hex digits (see [`super::fingerprint`]);
//! - `STATE`: `closed`, `half_open` or `open`;
//! - `AGE`: how long ago (ms, at sending) the origin formed this opinion; `SINCE`: how long
//!   ago its state began (never less than `AGE`). Times are ages, never timestamps, because
//!   instances' monotonic clocks share no origin;
//! - `REQUESTS FAILURES SLOW`: the origin's live window (failures and slow never exceed
//!   requests);
//! - `ROUND PROBE`: how many probes the fleet has started in the current open episode as the
//!   origin knows it, and how long ago the latest started (`-` exactly when the round is 0);
//! - `FLAGS`: `-`, or in this order any of `p` (the origin can probe now: open with traffic or
//!   with active probes), `r` (this closed state followed a probe: the origin saw the
//!   upstream recover), `f` (an operator forced this state: not evidence).
//!
//! Names are percent-encoded: bytes other than ASCII letters, digits and `-._~:[]/@+=,` are
//! written `%XX`, so that a name never holds a space, a line break or a control character.
//! Every message ends with a line break; a body that does not, or whose record count differs
//! from the header's, was cut short and is refused whole. A message holds at most one record
//! per (origin, upstream, route): one that repeats one is refused whole as well, since no
//! instance sends that (its own opinions and those it relays are one per breaker and origin),
//! and a receiver must not pay for the same record twice.
//!
//! On the wire a message is always followed by its `auth` line and verified before it is
//! parsed ([`super::auth`]); this module reads only what verified.

use std::collections::HashSet;
use std::fmt;
use std::fmt::Write as _;

use crate::snapshot::State;

/// The first word of every message.
pub const MAGIC: &str = "cbfleet";
/// The format's version; a message of any other version is refused ([`ErrorKind::Version`]).
pub const VERSION: u32 = 1;
/// The longest message accepted; the shell should stop reading a peer's answer here.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// The most records a message may hold.
pub const MAX_ENTRIES: usize = 4096;
/// The longest name (instance id, upstream, route), in bytes once decoded.
pub const MAX_NAME_BYTES: usize = 255;
/// The largest age (ms) or count accepted: 10^12 (31 years, a trillion requests), so that
/// sums over a whole message never overflow.
pub const MAX_NUMBER: u64 = 1_000_000_000_000;
const MAX_LINE_BYTES: usize = 3 * 3 * MAX_NAME_BYTES + 160;
const RECORD_FIELDS: usize = 13;
const HEADER_FIELDS: usize = 5;

/// What a record says about the origin's breaker besides its state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags {
    /// The origin could probe now (it is open and has traffic, or has active probes).
    pub can_probe: bool,
    /// The origin's breaker closed after a probe: it saw the upstream recover.
    pub recovered: bool,
    /// An operator forced the state: it is not evidence about the upstream.
    pub forced: bool,
}

impl Flags {
    /// The flags packed one per bit (`p` = 1, `r` = 2, `f` = 4), as stored.
    pub fn bits(self) -> u8 {
        u8::from(self.can_probe) | u8::from(self.recovered) << 1 | u8::from(self.forced) << 2
    }

    /// The flags from [`Flags::bits`] (other bits are ignored).
    pub fn from_bits(bits: u8) -> Flags {
        Flags {
            can_probe: bits & 1 != 0,
            recovered: bits & 2 != 0,
            forced: bits & 4 != 0,
        }
    }
}

/// One record: one instance's opinion of one breaker, with ages relative to the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireOpinion {
    /// The instance whose opinion this is.
    pub origin: String,
    /// The breaker's upstream.
    pub upstream: String,
    /// The breaker's route.
    pub route: String,
    /// The breaker's configuration fingerprint at the origin.
    pub fingerprint: u64,
    /// The origin's state.
    pub state: State,
    /// How long ago the origin formed this opinion (ms).
    pub age_ms: u64,
    /// How long ago the state began (ms), at least `age_ms`.
    pub since_ms: u64,
    /// Attempts in the origin's window.
    pub requests: u64,
    /// Of which failures.
    pub failures: u64,
    /// Of which slow.
    pub slow: u64,
    /// Probes the fleet started in this open episode, as the origin knows.
    pub round: u32,
    /// How long ago the latest of them started (ms): `Some` exactly when `round > 0`, and
    /// then at least `age_ms`.
    pub probe_ms: Option<u64>,
    /// See [`Flags`].
    pub flags: Flags,
}

/// A whole message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// The serving instance.
    pub sender: String,
    /// Added to every age in the records (ms).
    pub delay_ms: u64,
    /// The records.
    pub opinions: Vec<WireOpinion>,
}

/// Why a message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The 1-based line at fault; 0 for the message as a whole.
    pub line: usize,
    /// What was wrong.
    pub kind: ErrorKind,
}

/// What was wrong with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Longer than [`MAX_MESSAGE_BYTES`], or a line too long to be valid.
    TooLarge,
    /// Empty, or not ending in a line break: cut short.
    Unterminated,
    /// A byte that is not printable ASCII or a single space between fields.
    Bytes,
    /// Does not start with [`MAGIC`].
    Magic,
    /// A version this build does not speak.
    Version(u32),
    /// A header or record with the wrong number of fields.
    Fields,
    /// More records than [`MAX_ENTRIES`], or not as many as the header says.
    Count,
    /// A bad percent-encoding, an empty or too long name, or one that is not UTF-8.
    Name,
    /// Not 16 lower-case hex digits.
    Fingerprint,
    /// Not `closed`, `half_open` or `open`.
    State,
    /// Not a decimal number up to [`MAX_NUMBER`].
    Number,
    /// Numbers that cannot all be true: failures or slow over requests, a state older than
    /// its opinion, a probe without a round or a round without a probe.
    Inconsistent,
    /// Not `-` or `p`, `r`, `f` in that order.
    Flags,
    /// The sender is not the peer that was asked (see the store's `receive`).
    Sender,
    /// A second record of the same (origin, upstream, route).
    Duplicate,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::TooLarge => f.write_str("too large"),
            ErrorKind::Unterminated => f.write_str("cut short"),
            ErrorKind::Bytes => f.write_str("bad bytes"),
            ErrorKind::Magic => f.write_str("not a fleet message"),
            ErrorKind::Version(v) => write!(f, "version {v} not supported"),
            ErrorKind::Fields => f.write_str("wrong number of fields"),
            ErrorKind::Count => f.write_str("wrong number of records"),
            ErrorKind::Name => f.write_str("bad name"),
            ErrorKind::Fingerprint => f.write_str("bad fingerprint"),
            ErrorKind::State => f.write_str("bad state"),
            ErrorKind::Number => f.write_str("bad number"),
            ErrorKind::Inconsistent => f.write_str("inconsistent numbers"),
            ErrorKind::Flags => f.write_str("bad flags"),
            ErrorKind::Sender => f.write_str("unexpected sender"),
            ErrorKind::Duplicate => f.write_str("duplicate record"),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "line {}: {}", self.line, self.kind)
        }
    }
}

impl std::error::Error for ParseError {}

fn is_safe(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~:[]/@+=,".contains(&b)
}

/// Appends `name` percent-encoded (see the module's documentation).
pub fn encode_name(out: &mut String, name: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in name.as_bytes() {
        if is_safe(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes a percent-encoded name: 1..=[`MAX_NAME_BYTES`] bytes of UTF-8.
pub fn decode_name(field: &[u8]) -> Option<String> {
    if field.is_empty() || field.len() > 3 * MAX_NAME_BYTES {
        return None;
    }
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let b = field[i];
        if b == b'%' {
            let hi = hex_val(*field.get(i + 1)?)?;
            let lo = hex_val(*field.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else if is_safe(b) {
            out.push(b);
            i += 1;
        } else {
            return None;
        }
    }
    if out.len() > MAX_NAME_BYTES {
        return None;
    }
    String::from_utf8(out).ok()
}

fn state_word(s: State) -> &'static str {
    s.name()
}

/// Appends the header line.
pub fn render_header(out: &mut String, sender: &str, entries: usize, delay_ms: u64) {
    out.push_str(MAGIC);
    let _ = write!(out, " {VERSION} ");
    encode_name(out, sender);
    let _ = writeln!(out, " {entries} {delay_ms}");
}

/// Appends one record line.
pub fn render_record(out: &mut String, o: &WireOpinion) {
    encode_name(out, &o.origin);
    out.push(' ');
    encode_name(out, &o.upstream);
    out.push(' ');
    encode_name(out, &o.route);
    let _ = write!(
        out,
        " {:016x} {} {} {} {} {} {} {} ",
        o.fingerprint,
        state_word(o.state),
        o.age_ms,
        o.since_ms,
        o.requests,
        o.failures,
        o.slow,
        o.round
    );
    match o.probe_ms {
        Some(ms) => {
            let _ = write!(out, "{ms} ");
        }
        None => out.push_str("- "),
    }
    let f = o.flags;
    if f == Flags::default() {
        out.push('-');
    } else {
        for (on, c) in [(f.can_probe, 'p'), (f.recovered, 'r'), (f.forced, 'f')] {
            if on {
                out.push(c);
            }
        }
    }
    out.push('\n');
}

/// Renders a whole message. The output parses back to `m` when `m` is valid (names of
/// 1..=[`MAX_NAME_BYTES`] bytes, numbers up to [`MAX_NUMBER`], consistent as
/// [`ErrorKind::Inconsistent`] describes, at most [`MAX_ENTRIES`] records).
pub fn render(m: &Message) -> String {
    let mut out = String::with_capacity(64 + m.opinions.len() * 96);
    render_header(&mut out, &m.sender, m.opinions.len(), m.delay_ms);
    for o in &m.opinions {
        render_record(&mut out, o);
    }
    out
}

/// A rendered message, as served `extra_ms` after it was rendered: the same records with the
/// header's delay increased, so that every age stays true. `None` when `rendered` does not
/// start with a valid header (it should come from [`render`]).
pub fn delayed(rendered: &str, extra_ms: u64) -> Option<String> {
    let (header, records) = rendered.split_once('\n')?;
    let [magic, version, sender, entries, delay] = fields::<HEADER_FIELDS>(header.as_bytes())?;
    if magic != MAGIC.as_bytes() {
        return None;
    }
    let delay = number(delay).ok()?.saturating_add(extra_ms).min(MAX_NUMBER);
    let text = |b: &[u8]| std::str::from_utf8(b).ok().map(str::to_string);
    let mut out = String::with_capacity(rendered.len() + 8);
    let _ = writeln!(
        out,
        "{MAGIC} {} {} {} {delay}",
        text(version)?,
        text(sender)?,
        text(entries)?
    );
    out.push_str(records);
    Some(out)
}

/// Splits a line into exactly `N` fields separated by single spaces.
fn fields<const N: usize>(line: &[u8]) -> Option<[&[u8]; N]> {
    let mut out: [&[u8]; N] = [&[]; N];
    let mut parts = line.split(|&b| b == b' ');
    for field in out.iter_mut() {
        let p = parts.next()?;
        if p.is_empty() {
            return None;
        }
        *field = p;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(out)
}

fn number(field: &[u8]) -> Result<u64, ErrorKind> {
    // 13 digits already exceed MAX_NUMBER; refusing longer fields first keeps the loop short
    // and free of overflow.
    if field.is_empty() || field.len() > 13 || !field.iter().all(u8::is_ascii_digit) {
        return Err(ErrorKind::Number);
    }
    let v = field
        .iter()
        .fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
    if v > MAX_NUMBER {
        return Err(ErrorKind::Number);
    }
    Ok(v)
}

fn fingerprint(field: &[u8]) -> Result<u64, ErrorKind> {
    if field.len() != 16 {
        return Err(ErrorKind::Fingerprint);
    }
    field.iter().try_fold(0u64, |acc, &b| match b {
        b'0'..=b'9' | b'a'..=b'f' => Ok(acc << 4 | u64::from(hex_val(b).unwrap_or(0))),
        _ => Err(ErrorKind::Fingerprint),
    })
}

fn state(field: &[u8]) -> Result<State, ErrorKind> {
    match field {
        b"closed" => Ok(State::Closed),
        b"half_open" => Ok(State::HalfOpen),
        b"open" => Ok(State::Open),
        _ => Err(ErrorKind::State),
    }
}

fn flags(field: &[u8]) -> Result<Flags, ErrorKind> {
    if field == b"-" {
        return Ok(Flags::default());
    }
    let mut f = Flags::default();
    let mut rest = field;
    for (c, flag) in [
        (b'p', &mut f.can_probe),
        (b'r', &mut f.recovered),
        (b'f', &mut f.forced),
    ] {
        if let Some((&first, tail)) = rest.split_first() {
            if first == c {
                *flag = true;
                rest = tail;
            }
        }
    }
    if rest.is_empty() {
        Ok(f)
    } else {
        Err(ErrorKind::Flags)
    }
}

fn name(field: &[u8]) -> Result<String, ErrorKind> {
    decode_name(field).ok_or(ErrorKind::Name)
}

fn record(line: &[u8]) -> Result<WireOpinion, ErrorKind> {
    let [origin, upstream, route, fp, st, age, since, req, fail, slow, round, probe, fl] =
        fields::<RECORD_FIELDS>(line).ok_or(ErrorKind::Fields)?;
    let o = WireOpinion {
        origin: name(origin)?,
        upstream: name(upstream)?,
        route: name(route)?,
        fingerprint: fingerprint(fp)?,
        state: state(st)?,
        age_ms: number(age)?,
        since_ms: number(since)?,
        requests: number(req)?,
        failures: number(fail)?,
        slow: number(slow)?,
        round: u32::try_from(number(round)?).map_err(|_| ErrorKind::Number)?,
        probe_ms: if probe == b"-" {
            None
        } else {
            Some(number(probe)?)
        },
        flags: flags(fl)?,
    };
    let consistent = o.failures <= o.requests
        && o.slow <= o.requests
        && o.since_ms >= o.age_ms
        && match o.probe_ms {
            None => o.round == 0,
            Some(p) => o.round > 0 && p >= o.age_ms,
        };
    if consistent {
        Ok(o)
    } else {
        Err(ErrorKind::Inconsistent)
    }
}

/// Parses a message. Never panics, whatever the bytes; allocates at most about the input's
/// size; refuses the message whole on the first fault, so that a broken peer contributes
/// nothing rather than part of a lie.
pub fn parse(body: &[u8]) -> Result<Message, ParseError> {
    let whole = |kind| ParseError { line: 0, kind };
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(whole(ErrorKind::TooLarge));
    }
    let Some(body) = body.strip_suffix(b"\n") else {
        return Err(whole(ErrorKind::Unterminated));
    };
    let mut lines = body.split(|&b| b == b'\n');
    let at = |line: usize, kind| ParseError { line, kind };
    let check = |n: usize, line: &[u8]| {
        if line.len() > MAX_LINE_BYTES {
            Err(at(n, ErrorKind::TooLarge))
        } else if !line.iter().all(|&b| (0x20..0x7f).contains(&b)) {
            Err(at(n, ErrorKind::Bytes))
        } else {
            Ok(())
        }
    };
    let header = lines.next().unwrap_or_default();
    check(1, header)?;
    if header.split(|&b| b == b' ').next() != Some(MAGIC.as_bytes()) {
        return Err(at(1, ErrorKind::Magic));
    }
    // The version is read before the rest of the header, so that a newer peer whose header
    // grew is reported as a version mismatch rather than as garbage.
    let version = header.split(|&b| b == b' ').nth(1).unwrap_or_default();
    let version = number(version).map_err(|k| at(1, k))?;
    if version != u64::from(VERSION) {
        return Err(at(
            1,
            ErrorKind::Version(u32::try_from(version).unwrap_or(u32::MAX)),
        ));
    }
    let [_, _, sender, entries, delay] =
        fields::<HEADER_FIELDS>(header).ok_or(at(1, ErrorKind::Fields))?;
    let sender = name(sender).map_err(|k| at(1, k))?;
    let entries = number(entries).map_err(|k| at(1, k))?;
    let delay_ms = number(delay).map_err(|k| at(1, k))?;
    if entries > MAX_ENTRIES as u64 {
        return Err(at(1, ErrorKind::Count));
    }
    let entries = entries as usize;
    let mut opinions = Vec::with_capacity(entries);
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        if opinions.len() == entries {
            return Err(at(n, ErrorKind::Count));
        }
        check(n, line)?;
        opinions.push(record(line).map_err(|k| at(n, k))?);
    }
    if opinions.len() != entries {
        return Err(whole(ErrorKind::Count));
    }
    // Keyed by the decoded names (what the store keys opinions by), in one pass: a crafted
    // message cannot make the receiver weigh one record many times.
    let mut seen = HashSet::with_capacity(opinions.len());
    for (i, o) in opinions.iter().enumerate() {
        if !seen.insert((o.origin.as_str(), o.upstream.as_str(), o.route.as_str())) {
            return Err(at(i + 2, ErrorKind::Duplicate));
        }
    }
    drop(seen);
    Ok(Message {
        sender,
        delay_ms,
        opinions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Message {
        Message {
            sender: "10.0.0.5:8080".into(),
            delay_ms: 0,
            opinions: vec![
                WireOpinion {
                    origin: "10.0.0.5:8080".into(),
                    upstream: "api".into(),
                    route: "checkout".into(),
                    fingerprint: 0x9f3c_2a1b_00d4_e5f6,
                    state: State::Open,
                    age_ms: 0,
                    since_ms: 4100,
                    requests: 31,
                    failures: 29,
                    slow: 0,
                    round: 0,
                    probe_ms: None,
                    flags: Flags {
                        can_probe: true,
                        ..Flags::default()
                    },
                },
                WireOpinion {
                    origin: "10.0.0.7:8080".into(),
                    upstream: "api".into(),
                    route: "checkout".into(),
                    fingerprint: 0x9f3c_2a1b_00d4_e5f6,
                    state: State::HalfOpen,
                    age_ms: 850,
                    since_ms: 850,
                    requests: 0,
                    failures: 0,
                    slow: 0,
                    round: 1,
                    probe_ms: Some(850),
                    flags: Flags {
                        can_probe: true,
                        ..Flags::default()
                    },
                },
                WireOpinion {
                    origin: "edge fra/1".into(),
                    upstream: "api v2".into(),
                    route: "default".into(),
                    fingerprint: 0x0b5e_11c2_d4a7_f001,
                    state: State::Closed,
                    age_ms: 1900,
                    since_ms: 3200,
                    requests: 14,
                    failures: 9,
                    slow: 2,
                    round: 0,
                    probe_ms: None,
                    flags: Flags {
                        can_probe: false,
                        recovered: true,
                        forced: true,
                    },
                },
            ],
        }
    }

    #[test]
    fn a_message_reads_as_documented() {
        let text = render(&sample());
        assert_eq!(
            text,
            "cbfleet 1 10.0.0.5:8080 3 0\n\
             10.0.0.5:8080 api checkout 9f3c2a1b00d4e5f6 open 0 4100 31 29 0 0 - p\n\
             10.0.0.7:8080 api checkout 9f3c2a1b00d4e5f6 half_open 850 850 0 0 0 1 850 p\n\
             edge%20fra/1 api%20v2 default 0b5e11c2d4a7f001 closed 1900 3200 14 9 2 0 - rf\n"
        );
        assert_eq!(parse(text.as_bytes()), Ok(sample()));
    }

    #[test]
    fn a_message_served_later_carries_the_delay() {
        let text = render(&sample());
        let later = delayed(&text, 1500).unwrap();
        let m = parse(later.as_bytes()).unwrap();
        assert_eq!(m.delay_ms, 1500);
        assert_eq!(m.opinions, sample().opinions);
        assert_eq!(
            parse(delayed(&later, 1).unwrap().as_bytes())
                .unwrap()
                .delay_ms,
            1501
        );
        assert_eq!(delayed("nonsense\n", 5), None);
        assert_eq!(delayed("", 5), None);
    }

    #[test]
    fn an_empty_message_is_a_header_alone() {
        let m = Message {
            sender: "a".into(),
            delay_ms: 7,
            opinions: vec![],
        };
        assert_eq!(render(&m), "cbfleet 1 a 0 7\n");
        assert_eq!(parse(b"cbfleet 1 a 0 7\n"), Ok(m));
    }

    fn err(body: &str) -> ParseError {
        parse(body.as_bytes()).expect_err(body)
    }

    #[test]
    fn broken_messages_are_refused_with_the_reason() {
        let good = render(&sample());
        let rec = "10.0.0.5:8080 api checkout 9f3c2a1b00d4e5f6 open 0 4100 31 29 0 0 - p";
        let one = |r: &str| format!("cbfleet 1 s 1 0\n{r}\n");
        let cases: Vec<(String, ParseError)> = vec![
            (
                String::new(),
                ParseError {
                    line: 0,
                    kind: ErrorKind::Unterminated,
                },
            ),
            (
                good.trim_end().to_string(),
                ParseError {
                    line: 0,
                    kind: ErrorKind::Unterminated,
                },
            ),
            (
                good.replacen("3 0\n", "4 0\n", 1),
                ParseError {
                    line: 0,
                    kind: ErrorKind::Count,
                },
            ),
            (
                good.replacen("3 0\n", "2 0\n", 1),
                ParseError {
                    line: 4,
                    kind: ErrorKind::Count,
                },
            ),
            (
                "cbfleet 1 s 4097 0\n".into(),
                ParseError {
                    line: 1,
                    kind: ErrorKind::Count,
                },
            ),
            (
                "hello\n".into(),
                ParseError {
                    line: 1,
                    kind: ErrorKind::Magic,
                },
            ),
            (
                "cbfleet 2 s 0 0 extra\n".into(),
                ParseError {
                    line: 1,
                    kind: ErrorKind::Version(2),
                },
            ),
            (
                "cbfleet 1 s 0\n".into(),
                ParseError {
                    line: 1,
                    kind: ErrorKind::Fields,
                },
            ),
            (
                "cbfleet 1  s 0 0\n".into(),
                ParseError {
                    line: 1,
                    kind: ErrorKind::Fields,
                },
            ),
            (
                "cbfleet 1 s 0 0\r\n".into(),
                ParseError {
                    line: 1,
                    kind: ErrorKind::Bytes,
                },
            ),
            (
                "cbfleet 1 s 0 -1\n".into(),
                ParseError {
                    line: 1,
                    kind: ErrorKind::Number,
                },
            ),
            (
                "cbfleet 1 s 0 1000000000001\n".into(),
                ParseError {
                    line: 1,
                    kind: ErrorKind::Number,
                },
            ),
            (
                "cbfleet 1 s 0 99999999999999999999999\n".into(),
                ParseError {
                    line: 1,
                    kind: ErrorKind::Number,
                },
            ),
            (
                "cbfleet 1 s%zz 0 0\n".into(),
                ParseError {
                    line: 1,
                    kind: ErrorKind::Name,
                },
            ),
            (
                "cbfleet 1 %FF 0 0\n".into(),
                ParseError {
                    line: 1,
                    kind: ErrorKind::Name,
                },
            ),
            (
                one(&rec.replace(" p", " p x")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Fields,
                },
            ),
            (
                one(&rec.replace("9f3c2a1b00d4e5f6", "9F3C2A1B00D4E5F6")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Fingerprint,
                },
            ),
            (
                one(&rec.replace("9f3c2a1b00d4e5f6", "9f3c2a1b00d4e5f")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Fingerprint,
                },
            ),
            (
                one(&rec.replace("open", "opened")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::State,
                },
            ),
            (
                one(&rec.replace("31 29", "29 31")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Inconsistent,
                },
            ),
            (
                one(&rec.replace("0 4100", "5000 4100")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Inconsistent,
                },
            ),
            (
                one(&rec.replace("0 - p", "1 - p")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Inconsistent,
                },
            ),
            (
                one(&rec.replace("0 - p", "0 5 p")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Inconsistent,
                },
            ),
            (
                one(&rec.replace(" p", " pp")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Flags,
                },
            ),
            (
                one(&rec.replace(" p", " fp")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Flags,
                },
            ),
            (
                one(&rec.replace(" p", " x")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Flags,
                },
            ),
            (
                one(&rec.replace("api", &"a".repeat(256))),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Name,
                },
            ),
            (
                one(&rec.replace("api", "a\u{e9}")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Bytes,
                },
            ),
            (
                one(&rec.replace("api", &"a".repeat(4000))),
                ParseError {
                    line: 2,
                    kind: ErrorKind::TooLarge,
                },
            ),
            (
                one(&rec.replace(" 0 0 - p", " 0 4294967296 9 p")),
                ParseError {
                    line: 2,
                    kind: ErrorKind::Number,
                },
            ),
        ];
        // A record repeated, even under another fingerprint, state or encoding of its names,
        // is refused whole; another route is another record.
        let again = |r: &str| {
            format!(
                "cbfleet 1 s 3 0\n{rec}\n{}\n{r}\n",
                rec.replace("checkout", "cart")
            )
        };
        for r in [
            rec.to_string(),
            rec.replace("9f3c2a1b00d4e5f6 open", "0000000000000001 closed"),
            rec.replace(" api ", " %61pi "),
        ] {
            assert_eq!(
                err(&again(&r)),
                ParseError {
                    line: 4,
                    kind: ErrorKind::Duplicate
                },
                "{r}"
            );
        }
        assert!(parse(again(&rec.replace("checkout", "catalog")).as_bytes()).is_ok());
        for (body, want) in cases {
            assert_eq!(err(&body), want, "{body:?}");
        }
        let huge = vec![b'x'; MAX_MESSAGE_BYTES + 1];
        assert_eq!(
            parse(&huge),
            Err(ParseError {
                line: 0,
                kind: ErrorKind::TooLarge
            })
        );
    }

    #[test]
    fn names_round_trip_through_percent_encoding() {
        for n in ["api", "[::1]:8080", "a b", "100%", "é", "x\ny", "a%20b"] {
            let mut s = String::new();
            encode_name(&mut s, n);
            assert!(s.bytes().all(is_safe_or_percent), "{s}");
            assert_eq!(decode_name(s.as_bytes()).as_deref(), Some(n));
        }
        assert_eq!(decode_name(b""), None);
        assert_eq!(decode_name(b"%4"), None);
        assert_eq!(decode_name(b"a b"), None);
    }

    fn is_safe_or_percent(b: u8) -> bool {
        is_safe(b) || b == b'%'
    }

    #[test]
    fn flags_pack_into_bits() {
        for bits in 0..8u8 {
            assert_eq!(Flags::from_bits(bits).bits(), bits);
        }
    }

    #[test]
    fn errors_read_as_sentences() {
        assert_eq!(
            ParseError {
                line: 7,
                kind: ErrorKind::Duplicate
            }
            .to_string(),
            "line 7: duplicate record"
        );
        assert_eq!(
            ParseError {
                line: 3,
                kind: ErrorKind::Number
            }
            .to_string(),
            "line 3: bad number"
        );
        assert_eq!(
            ParseError {
                line: 0,
                kind: ErrorKind::Version(2)
            }
            .to_string(),
            "version 2 not supported"
        );
    }
}
