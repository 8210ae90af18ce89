//! What a NATS server sends, parsed incrementally: bytes go in as they arrive
//! ([`Parser::feed`]), whole operations come out ([`Parser::next`]).
//!
//! Every size is bounded, so that a server that misbehaves (or whatever else answers on its
//! port) costs at most [`Limits::buffer_bound`] bytes: a control line is refused as soon as
//! `max_control_line` bytes are buffered without its CRLF, and a message whose announced size
//! is above the `max_payload` in force is refused from its control line, before one byte of
//! it is buffered. Any error poisons the parser: the framing of the rest of the stream is
//! unknown, so the caller closes the connection.
//!
//! Driving it: after each read, [`Parser::feed`] the bytes, then call [`Parser::next`] until
//! it answers `None`; read at most [`Parser::room`] bytes at a time. What is left buffered
//! after `next` answers `None` is one incomplete operation, for which `room` is always enough.

use serde_json::{Map, Value};

use super::error::{shown, ProtoError};

/// The default [`Limits::max_control_line`]: nats-server's own default.
pub const DEFAULT_MAX_CONTROL_LINE: usize = 4096;
/// The default [`Limits::max_payload`] (1 MiB): nats-server's own default.
pub const DEFAULT_MAX_PAYLOAD: usize = 1 << 20;
/// The most `connect_urls` an [`Info`] keeps; the rest are dropped. A cluster has a few
/// servers; a list longer than this is a server gone wrong, not more places to connect to.
pub const MAX_CONNECT_URLS: usize = 64;

/// Above this capacity the buffer is given back whenever it empties: one large message must
/// not pin a megabyte per connection for the rest of its life.
const SHRINK_ABOVE: usize = 64 * 1024;

/// A parser's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest control line, its CRLF included.
    pub max_control_line: usize,
    /// The largest payload (an `HMSG`'s headers included) accepted before the server's INFO
    /// says less ([`Parser::set_max_payload`]); never raised by it.
    pub max_payload: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_control_line: DEFAULT_MAX_CONTROL_LINE,
            max_payload: DEFAULT_MAX_PAYLOAD,
        }
    }
}

impl Limits {
    /// The most bytes a parser ever holds: a control line, then a payload and its CRLF.
    pub fn buffer_bound(&self) -> usize {
        self.max_control_line
            .saturating_add(self.max_payload)
            .saturating_add(2)
    }
}

/// One operation from the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerOp {
    /// `INFO {json}`: at connection, and again when the cluster changes (`connect_urls`) or
    /// the server enters lame duck mode (`ldm`).
    Info(Info),
    /// `MSG` or `HMSG`: a message on one of our subscriptions.
    Msg(Msg),
    /// `PING`: the caller answers [`super::pong`] or the server drops it as stale.
    Ping,
    /// `PONG`: the answer to our `PING`.
    Pong,
    /// `+OK`: sent only to a client that said `verbose`.
    Ok,
    /// `-ERR 'text'`, the text without its quotes (at most a control line long).
    Err(String),
}

/// A message delivered on a subscription.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Msg {
    /// The subject it was published on. Any bytes that are not UTF-8 (another publisher's
    /// doing: the server passes them on) read as U+FFFD, rather than losing the connection
    /// over someone else's message.
    pub subject: String,
    /// The subscription it was delivered on.
    pub sid: u64,
    /// The subject to answer on, if the publisher gave one.
    pub reply: Option<String>,
    /// The payload; of an `HMSG`, what follows the headers (which are dropped).
    pub payload: Vec<u8>,
}

/// What a server says of itself in `INFO`. Fields it leaves out take their defaults; fields
/// this does not know are ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    /// The server's unique id.
    pub server_id: String,
    /// Its configured name (its id when none is configured).
    pub server_name: String,
    /// Its version, e.g. `2.9.10`.
    pub version: String,
    /// The protocol version it speaks; 1 and above send `INFO` again when the cluster changes.
    pub proto: i64,
    /// The largest payload it accepts from a client (1 MiB when left out; never 0).
    pub max_payload: usize,
    /// The client must upgrade to TLS before CONNECT.
    pub tls_required: bool,
    /// The client may upgrade to TLS.
    pub tls_available: bool,
    /// CONNECT must carry credentials.
    pub auth_required: bool,
    /// The server understands `HPUB`/`HMSG`.
    pub headers: bool,
    /// The challenge an nkey or JWT client signs (CONNECT's `sig`).
    pub nonce: Option<String>,
    /// The cluster's other client addresses, as `host:port` (at most [`MAX_CONNECT_URLS`]).
    pub connect_urls: Vec<String>,
    /// The server's id for this connection.
    pub client_id: Option<u64>,
    /// Lame duck mode: the server is about to shut down; reconnect elsewhere.
    pub ldm: bool,
}

impl Default for Info {
    fn default() -> Self {
        Info {
            server_id: String::new(),
            server_name: String::new(),
            version: String::new(),
            proto: 0,
            max_payload: DEFAULT_MAX_PAYLOAD,
            tls_required: false,
            tls_available: false,
            auth_required: false,
            headers: false,
            nonce: None,
            connect_urls: Vec::new(),
            client_id: None,
            ldm: false,
        }
    }
}

/// The incremental parser of one connection's server-to-client stream.
#[derive(Debug)]
pub struct Parser {
    limits: Limits,
    /// The max_payload in force: the configured one, or the server's when lower.
    max_payload: usize,
    buf: Vec<u8>,
    /// Bytes at the front of `buf` already consumed (dropped at the next feed).
    start: usize,
    /// Bytes of the pending control line already searched for its LF, so that a line fed
    /// byte by byte is searched once, not once per byte.
    scanned: usize,
    /// A message whose control line has been read and whose payload is awaited.
    head: Option<Head>,
    /// The error that poisoned the parser.
    failed: Option<ProtoError>,
}

/// The control line of a `MSG` or `HMSG`.
#[derive(Debug)]
struct Head {
    subject: String,
    sid: u64,
    reply: Option<String>,
    /// The header block's size, for an `HMSG`.
    headers: Option<usize>,
    /// The payload's size, headers included.
    total: usize,
}

/// What one control line says.
enum Line {
    Op(ServerOp),
    Head(Head),
}

impl Parser {
    /// A parser within `limits`.
    pub fn new(limits: Limits) -> Self {
        Parser {
            limits,
            max_payload: limits.max_payload,
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            head: None,
            failed: None,
        }
    }

    /// Lower the largest payload accepted to the server's (its INFO's `max_payload`), or
    /// raise it back up to at most the configured limit: a server's word never widens our
    /// bound. A message already announced keeps the limit it was checked against.
    pub fn set_max_payload(&mut self, n: usize) {
        self.max_payload = n.min(self.limits.max_payload);
    }

    /// The largest payload accepted now.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Bytes held and not yet consumed.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// How many more bytes [`Parser::feed`] takes now.
    pub fn room(&self) -> usize {
        self.limits.buffer_bound() - self.buffered()
    }

    /// Append bytes read from the connection. Refused (and the parser poisoned) when they
    /// would make it hold more than [`Limits::buffer_bound`] bytes.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), ProtoError> {
        self.check()?;
        if bytes.len() > self.room() {
            let bound = self.limits.buffer_bound();
            return Err(self.fail(ProtoError::BufferFull { bound }));
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let want = self.buf.len() + bytes.len();
        if want > self.buf.capacity() {
            // Grow as a Vec does, but never past the bound: the bound is the most memory a
            // connection costs, capacity included.
            let target = want
                .max(self.buf.capacity().saturating_mul(2))
                .min(self.limits.buffer_bound());
            self.buf.reserve_exact(target - self.buf.len());
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    /// The next complete operation, consumed; `None` when more bytes are needed.
    // Not an Iterator: it can fail, and `None` means "not yet", not "never again".
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<ServerOp>, ProtoError> {
        self.check()?;
        match self.step() {
            Ok(op) => Ok(op),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn check(&self) -> Result<(), ProtoError> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn fail(&mut self, e: ProtoError) -> ProtoError {
        self.failed = Some(e.clone());
        self.buf = Vec::new();
        self.start = 0;
        self.head = None;
        e
    }

    fn step(&mut self) -> Result<Option<ServerOp>, ProtoError> {
        if self.head.is_none() {
            let Some(len) = self.find_line()? else {
                return Ok(None);
            };
            let line = parse_line(&self.buf[self.start..self.start + len], self.max_payload)?;
            self.start += len + 2;
            self.scanned = 0;
            match line {
                Line::Op(op) => {
                    self.release();
                    return Ok(Some(op));
                }
                Line::Head(head) => self.head = Some(head),
            }
        }
        let Some(head) = self.head.take() else {
            return Ok(None);
        };
        // Saturating: a configured max_payload near usize::MAX must not overflow here.
        if self.buffered() < head.total.saturating_add(2) {
            self.head = Some(head);
            return Ok(None);
        }
        let body = &self.buf[self.start..self.start + head.total];
        if self.buf[self.start + head.total..][..2] != *b"\r\n" {
            return Err(ProtoError::MissingCrlf);
        }
        let skip = match head.headers {
            Some(h) if body[..h].starts_with(b"NATS/1.0") => h,
            Some(_) => return Err(ProtoError::BadHeaders),
            None => 0,
        };
        let payload = body[skip..].to_vec();
        self.start += head.total + 2;
        self.release();
        Ok(Some(ServerOp::Msg(Msg {
            subject: head.subject,
            sid: head.sid,
            reply: head.reply,
            payload,
        })))
    }

    /// The length (without CRLF) of the control line at the front, once its CRLF is buffered.
    fn find_line(&mut self) -> Result<Option<usize>, ProtoError> {
        let max = self.limits.max_control_line;
        let avail = &self.buf[self.start..];
        // Only the first max bytes may hold the LF: past them the line is too long already,
        // whatever follows.
        let window = &avail[..avail.len().min(max)];
        let from = self.scanned.min(window.len());
        match window[from..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                let lf = from + i;
                // The protocol ends every control line in CRLF ("NATS uses CR followed by LF
                // to terminate protocol messages"). nats-server forgives a client a bare LF,
                // but never sends one: seen here it means the stream is out of step or not
                // NATS, and guessing would make the framing ambiguous.
                if lf == 0 || window[lf - 1] != b'\r' {
                    return Err(ProtoError::BareLineFeed);
                }
                Ok(Some(lf - 1))
            }
            None if avail.len() >= max => Err(ProtoError::ControlLineTooLong { max }),
            None => {
                self.scanned = window.len();
                Ok(None)
            }
        }
    }

    /// Forget consumed bytes once nothing is left after them (cheaper than at the next feed).
    fn release(&mut self) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            if self.buf.capacity() > SHRINK_ABOVE {
                self.buf
                    .shrink_to(self.limits.max_control_line.min(SHRINK_ABOVE));
            }
        }
    }
}

/// Space and tab separate fields; a run of them counts as one.
fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn trim_blanks(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !is_blank(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !is_blank(*last) {
            break;
        }
        s = rest;
    }
    s
}

fn fields(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(|&b| is_blank(b)).filter(|f| !f.is_empty())
}

/// A decimal number of at most 20 digits, without sign: what the server writes.
fn number(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    s.iter().try_fold(0u64, |n, &b| {
        if b.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

fn parse_line(line: &[u8], max_payload: usize) -> Result<Line, ProtoError> {
    let line = trim_blanks(line);
    let op_len = line.iter().position(|&b| is_blank(b)).unwrap_or(line.len());
    let (op, rest) = (&line[..op_len], trim_blanks(&line[op_len..]));
    // Names are case-insensitive; the most frequent first.
    let is = |name: &str| op.eq_ignore_ascii_case(name.as_bytes());
    let bare = |op: ServerOp, name: &'static str| {
        if rest.is_empty() {
            Ok(Line::Op(op))
        } else {
            Err(ProtoError::BadArguments(name))
        }
    };
    if is("MSG") {
        msg_head(rest, false, max_payload).map(Line::Head)
    } else if is("HMSG") {
        msg_head(rest, true, max_payload).map(Line::Head)
    } else if is("PING") {
        bare(ServerOp::Ping, "PING")
    } else if is("PONG") {
        bare(ServerOp::Pong, "PONG")
    } else if is("+OK") {
        bare(ServerOp::Ok, "+OK")
    } else if is("-ERR") {
        Ok(Line::Op(ServerOp::Err(err_text(rest))))
    } else if is("INFO") {
        parse_info(rest).map(|i| Line::Op(ServerOp::Info(i)))
    } else {
        Err(ProtoError::UnknownOperation(shown(op)))
    }
}

/// `MSG <subject> <sid> [reply] <size>` or `HMSG <subject> <sid> [reply] <hdr> <total>`.
fn msg_head(args: &[u8], hmsg: bool, max_payload: usize) -> Result<Head, ProtoError> {
    let what = if hmsg { "HMSG" } else { "MSG" };
    let bad = || ProtoError::BadArguments(what);
    let sizes = if hmsg { 2 } else { 1 };
    let mut f = [&b""[..]; 5];
    let mut n = 0;
    for field in fields(args) {
        if n == f.len() {
            return Err(bad());
        }
        f[n] = field;
        n += 1;
    }
    let reply = match n.checked_sub(sizes) {
        Some(2) => None,
        Some(3) => Some(f[2]),
        _ => return Err(bad()),
    };
    let total = number(f[n - 1]).ok_or_else(bad)?;
    if total > max_payload as u64 {
        return Err(ProtoError::PayloadTooLarge {
            size: total,
            max: max_payload,
        });
    }
    let total = total as usize; // at most max_payload: fits
    let headers = if hmsg {
        let h = number(f[n - 2]).ok_or_else(bad)?;
        if h > total as u64 {
            return Err(bad());
        }
        Some(h as usize)
    } else {
        None
    };
    Ok(Head {
        subject: String::from_utf8_lossy(f[0]).into_owned(),
        sid: number(f[1]).ok_or_else(bad)?,
        reply: reply.map(|r| String::from_utf8_lossy(r).into_owned()),
        headers,
        total,
    })
}

/// Whether a `-ERR`'s text is one after which nats-server keeps the connection open: a
/// publication or subscription its permissions refuse, or a subject it finds invalid. Every
/// other `-ERR` is followed by the server closing the connection.
pub fn err_keeps_connection(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.starts_with("permissions violation") || t.starts_with("invalid subject")
}

/// `-ERR 'text'`: the text between the quotes (as is when unquoted).
fn err_text(rest: &[u8]) -> String {
    let text = match rest {
        [b'\'', inner @ .., b'\''] => inner,
        _ => rest,
    };
    String::from_utf8_lossy(text).into_owned()
}

fn bad_info(why: impl Into<String>) -> ProtoError {
    ProtoError::BadInfo(why.into())
}

/// A field's value; a JSON `null` counts as left out.
fn field<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    o.get(key).filter(|v| !v.is_null())
}

fn string(o: &Map<String, Value>, key: &str) -> Result<Option<String>, ProtoError> {
    match field(o, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad_info(format!("\"{key}\" is not a string"))),
    }
}

fn flag(o: &Map<String, Value>, key: &str) -> Result<bool, ProtoError> {
    match field(o, key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad_info(format!("\"{key}\" is not a boolean"))),
    }
}

fn unsigned(o: &Map<String, Value>, key: &str) -> Result<Option<u64>, ProtoError> {
    match field(o, key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| bad_info(format!("\"{key}\" is not a non-negative integer"))),
    }
}

fn parse_info(json: &[u8]) -> Result<Info, ProtoError> {
    // serde_json bounds its recursion (128 levels), and the line is bounded: no deeper cost.
    let v: Value = serde_json::from_slice(json).map_err(|e| bad_info(e.to_string()))?;
    let Value::Object(o) = v else {
        return Err(bad_info("not a JSON object"));
    };
    let proto = match field(&o, "proto") {
        None => 0,
        Some(v) => v
            .as_i64()
            .ok_or_else(|| bad_info("\"proto\" is not an integer"))?,
    };
    let max_payload = match unsigned(&o, "max_payload")? {
        None => DEFAULT_MAX_PAYLOAD,
        // A server that takes no payload at all cannot carry the exchange: refuse it now
        // rather than fail every publish later.
        Some(0) => return Err(bad_info("max_payload of 0")),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    };
    let connect_urls = match field(&o, "connect_urls") {
        None => Vec::new(),
        Some(Value::Array(urls)) => urls
            .iter()
            .take(MAX_CONNECT_URLS)
            .map(|u| match u {
                Value::String(s) => Ok(s.clone()),
                _ => Err(bad_info("\"connect_urls\" holds a non-string")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad_info("\"connect_urls\" is not an array")),
    };
    Ok(Info {
        server_id: string(&o, "server_id")?.unwrap_or_default(),
        server_name: string(&o, "server_name")?.unwrap_or_default(),
        version: string(&o, "version")?.unwrap_or_default(),
        proto,
        max_payload,
        tls_required: flag(&o, "tls_required")?,
        tls_available: flag(&o, "tls_available")?,
        auth_required: flag(&o, "auth_required")?,
        headers: flag(&o, "headers")?,
        nonce: string(&o, "nonce")?,
        connect_urls,
        client_id: unsigned(&o, "client_id")?,
        ldm: flag(&o, "ldm")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An INFO line as nats-server 2.9.10 sends it at connection (note the blank before CRLF).
    const INFO_2_9: &[u8] = b"INFO {\"server_id\":\"NCQLBUFJQWSQRB573LXKBJ2BATHHK25ZRUOJZ2OAYRXVT\
        344WIXUNGWW\",\"server_name\":\"NCQLBUFJQWSQRB573LXKBJ2BATHHK25ZRUOJZ2OAYRXVT344WIXUNGWW\
        \",\"version\":\"2.9.10\",\"proto\":1,\"go\":\"go1.19.8\",\"host\":\"127.0.0.1\",\"port\
        \":14222,\"headers\":true,\"max_payload\":1048576,\"client_id\":4,\"client_ip\":\"127.0.\
        0.1\"} \r\n";

    /// Every operation of `stream`, fed as the shell does: as much as there is room for, then
    /// every operation taken, and again.
    fn all(limits: Limits, stream: &[u8]) -> Result<Vec<ServerOp>, ProtoError> {
        let mut p = Parser::new(limits);
        drive(&mut p, stream)
    }

    fn drive(p: &mut Parser, mut bytes: &[u8]) -> Result<Vec<ServerOp>, ProtoError> {
        let mut ops = Vec::new();
        loop {
            let n = p.room().min(bytes.len());
            p.feed(&bytes[..n])?;
            assert!(p.buffered() <= p.limits.buffer_bound());
            bytes = &bytes[n..];
            ops.extend(drain(p)?);
            if bytes.is_empty() {
                return Ok(ops);
            }
        }
    }

    fn drain(p: &mut Parser) -> Result<Vec<ServerOp>, ProtoError> {
        let mut ops = Vec::new();
        while let Some(op) = p.next()? {
            ops.push(op);
        }
        Ok(ops)
    }

    fn one(stream: &[u8]) -> Result<ServerOp, ProtoError> {
        let ops = all(Limits::default(), stream)?;
        assert_eq!(ops.len(), 1, "{ops:?}");
        Ok(ops.into_iter().next().unwrap())
    }

    fn msg(subject: &str, sid: u64, reply: Option<&str>, payload: &[u8]) -> ServerOp {
        ServerOp::Msg(Msg {
            subject: subject.into(),
            sid,
            reply: reply.map(Into::into),
            payload: payload.to_vec(),
        })
    }

    fn small() -> Limits {
        Limits {
            max_control_line: 64,
            max_payload: 100,
        }
    }

    #[test]
    fn every_op_is_parsed() {
        let stream = [
            INFO_2_9,
            b"+OK\r\n",
            b"PING\r\n",
            b"PONG\r\n",
            b"MSG foo.bar 9 5\r\nhello\r\n",
            b"MSG foo.bar 9 _INBOX.x.y 2\r\nhi\r\n",
            b"HMSG foo 1 18 23\r\nNATS/1.0\r\nA: b\r\n\r\nhello\r\n",
            b"-ERR 'Unknown Protocol Operation'\r\n",
        ]
        .concat();
        let ops = all(Limits::default(), &stream).unwrap();
        assert_eq!(ops.len(), 8);
        assert!(matches!(&ops[0], ServerOp::Info(i) if i.version == "2.9.10"));
        assert_eq!(
            ops[1..],
            [
                ServerOp::Ok,
                ServerOp::Ping,
                ServerOp::Pong,
                msg("foo.bar", 9, None, b"hello"),
                msg("foo.bar", 9, Some("_INBOX.x.y"), b"hi"),
                msg("foo", 1, None, b"hello"),
                ServerOp::Err("Unknown Protocol Operation".into()),
            ]
        );
    }

    #[test]
    fn payloads_may_be_empty_or_hold_crlf() {
        assert_eq!(one(b"MSG a 1 0\r\n\r\n").unwrap(), msg("a", 1, None, b""));
        assert_eq!(
            one(b"MSG a 1 r 8\r\nx\r\nMSG y\r\n").unwrap(),
            msg("a", 1, Some("r"), b"x\r\nMSG y")
        );
        // A payload of CRLF only, and one that ends in CRLF.
        assert_eq!(
            one(b"MSG a 1 2\r\n\r\n\r\n").unwrap(),
            msg("a", 1, None, b"\r\n")
        );
        assert_eq!(
            one(b"MSG a 1 3\r\nz\r\n\r\n").unwrap(),
            msg("a", 1, None, b"z\r\n")
        );
    }

    #[test]
    fn hmsg_drops_its_headers_and_checks_them() {
        // The server's "no responders" status is a header block and no payload.
        assert_eq!(
            one(b"HMSG inbox 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n").unwrap(),
            msg("inbox", 1, None, b"")
        );
        assert_eq!(
            one(b"HMSG s 2 reply.to 12 14\r\nNATS/1.0\r\n\r\nok\r\n").unwrap(),
            msg("s", 2, Some("reply.to"), b"ok")
        );
        assert_eq!(
            one(b"HMSG s 2 12 11\r\nNATS/1.0\r\n\r\n\r\n"),
            Err(ProtoError::BadArguments("HMSG"))
        );
        assert_eq!(
            one(b"HMSG s 2 12 14\r\nHTTP/1.1\r\n\r\nok\r\n"),
            Err(ProtoError::BadHeaders)
        );
        assert_eq!(one(b"HMSG s 2 0 2\r\nok\r\n"), Err(ProtoError::BadHeaders));
        assert_eq!(
            one(b"HMSG s 2 14\r\n"),
            Err(ProtoError::BadArguments("HMSG"))
        );
    }

    #[test]
    fn op_names_ignore_case_and_fields_split_on_runs_of_blanks() {
        let stream = b"ping\r\nPoNg\r\n+ok\r\nmsg\t a  \t7 \t3 \r\nabc\r\nhmsg a 7 10 10\r\n\
            NATS/1.0\r\n\r\n-err 'x'\r\n";
        assert_eq!(
            all(Limits::default(), stream).unwrap(),
            [
                ServerOp::Ping,
                ServerOp::Pong,
                ServerOp::Ok,
                msg("a", 7, None, b"abc"),
                msg("a", 7, None, b""),
                ServerOp::Err("x".into()),
            ]
        );
    }

    #[test]
    fn err_text_loses_its_quotes() {
        assert_eq!(
            one(b"-ERR 'Authorization Violation'\r\n").unwrap(),
            ServerOp::Err("Authorization Violation".into())
        );
        assert_eq!(
            one(b"-ERR 'Permissions Violation for Publish to \"no.x\"'\r\n").unwrap(),
            ServerOp::Err("Permissions Violation for Publish to \"no.x\"".into())
        );
        assert_eq!(
            one(b"-ERR  unquoted \r\n").unwrap(),
            ServerOp::Err("unquoted".into())
        );
        assert_eq!(one(b"-ERR\r\n").unwrap(), ServerOp::Err(String::new()));
        assert_eq!(one(b"-ERR '\r\n").unwrap(), ServerOp::Err("'".into()));
    }

    #[test]
    fn only_a_refused_subject_keeps_the_connection() {
        for keeps in [
            "Permissions Violation for Publish to \"a.b\"",
            "Permissions Violation for Subscription to \"a.*\"",
            "Invalid Subject",
        ] {
            assert!(err_keeps_connection(keeps), "{keeps}");
        }
        for closes in [
            "Authorization Violation",
            "Stale Connection",
            "Maximum Payload Violation",
            "Unknown Protocol Operation",
            "",
        ] {
            assert!(!err_keeps_connection(closes), "{closes}");
        }
    }

    #[test]
    fn bad_arguments_are_refused() {
        for (line, op) in [
            (&b"MSG a 1\r\n"[..], "MSG"),
            (b"MSG a 1 r s 2\r\n", "MSG"),
            (b"MSG a x 2\r\n", "MSG"),
            (b"MSG a 1 -2\r\n", "MSG"),
            (b"MSG a 1 +2\r\n", "MSG"),
            (b"MSG a 18446744073709551616 2\r\n", "MSG"),
            (b"MSG a 1 123456789012345678901\r\n", "MSG"),
            (b"MSG\r\n", "MSG"),
            (b"PING x\r\n", "PING"),
            (b"PONG 1\r\n", "PONG"),
            (b"+OK ok\r\n", "+OK"),
        ] {
            assert_eq!(one(line), Err(ProtoError::BadArguments(op)), "{line:?}");
        }
        assert_eq!(one(b"PING \t\r\n").unwrap(), ServerOp::Ping);
    }

    #[test]
    fn unknown_operations_are_named() {
        assert_eq!(
            one(b"FOO bar\r\n"),
            Err(ProtoError::UnknownOperation("FOO".into()))
        );
        assert_eq!(
            one(b"PINGX\r\n"),
            Err(ProtoError::UnknownOperation("PINGX".into()))
        );
        assert_eq!(
            one(b"\r\n"),
            Err(ProtoError::UnknownOperation(String::new()))
        );
        // HPUB is a client's: a server never sends it.
        assert_eq!(
            one(b"HPUB a 1 2\r\n").unwrap_err().to_string(),
            "unknown operation \"HPUB\""
        );
    }

    #[test]
    fn a_bare_lf_is_refused() {
        assert_eq!(one(b"PING\n"), Err(ProtoError::BareLineFeed));
        assert_eq!(one(b"\n"), Err(ProtoError::BareLineFeed));
        // After a complete op, and with the CR in an earlier feed.
        let mut p = Parser::new(Limits::default());
        p.feed(b"PONG\r\nPI\r").unwrap();
        assert_eq!(p.next(), Ok(Some(ServerOp::Pong)));
        assert_eq!(p.next(), Ok(None));
        p.feed(b"NG\n").unwrap();
        assert_eq!(p.next(), Err(ProtoError::BareLineFeed));
    }

    #[test]
    fn a_payload_without_crlf_is_refused() {
        assert_eq!(one(b"MSG a 1 2\r\nabc\r\n"), Err(ProtoError::MissingCrlf));
        assert_eq!(one(b"MSG a 1 2\r\nab\n\r"), Err(ProtoError::MissingCrlf));
    }

    #[test]
    fn an_over_long_control_line_is_refused_after_exactly_max_bytes() {
        let limits = small();
        let mut p = Parser::new(limits);
        p.feed(&[b'a'; 63]).unwrap();
        assert_eq!(p.next(), Ok(None));
        p.feed(b"a").unwrap();
        let e = ProtoError::ControlLineTooLong { max: 64 };
        assert_eq!(p.next(), Err(e.clone()));
        assert_eq!(e.to_string(), "control line longer than 64 bytes");

        // Fed byte by byte, the same.
        let mut p = Parser::new(limits);
        for i in 0..64 {
            p.feed(b"M").unwrap();
            let want = if i < 63 { Ok(None) } else { Err(e.clone()) };
            assert_eq!(p.next(), want, "after {} bytes", i + 1);
        }

        // A line whose CRLF ends at byte 64 fits; one byte more does not, even when its CRLF
        // is already buffered.
        let subject = "s".repeat(64 - "MSG  1 0\r\n".len());
        let fits = format!("MSG {subject} 1 0\r\n\r\n");
        assert_eq!(all(limits, fits.as_bytes()).unwrap().len(), 1);
        let over = format!("MSG {subject}x 1 0\r\n\r\n");
        assert_eq!(all(limits, over.as_bytes()), Err(e));

        // The default is nats-server's.
        let mut p = Parser::new(Limits::default());
        p.feed(&[b'x'; 4096]).unwrap();
        assert_eq!(
            p.next().unwrap_err().to_string(),
            "control line longer than 4096 bytes"
        );
    }

    #[test]
    fn an_oversized_message_is_refused_before_its_payload() {
        let mut p = Parser::new(Limits::default());
        p.feed(b"MSG a 1 2000000\r\n").unwrap();
        let e = p.next().unwrap_err();
        assert_eq!(
            e,
            ProtoError::PayloadTooLarge {
                size: 2_000_000,
                max: 1 << 20
            }
        );
        assert_eq!(
            e.to_string(),
            "payload of 2000000 bytes above max_payload 1048576"
        );
        assert_eq!(p.buffered(), 0);
        // HMSG: its total counts, headers included.
        assert!(matches!(
            all(small(), b"HMSG a 1 12 101\r\n"),
            Err(ProtoError::PayloadTooLarge {
                size: 101,
                max: 100
            })
        ));
    }

    #[test]
    fn the_servers_max_payload_lowers_the_bound_but_never_raises_it() {
        let mut p = Parser::new(Limits::default());
        p.set_max_payload(100);
        p.feed(b"MSG a 1 100\r\n").unwrap();
        p.feed(&[b'x'; 100]).unwrap();
        p.feed(b"\r\n").unwrap();
        assert!(matches!(p.next(), Ok(Some(ServerOp::Msg(m))) if m.payload.len() == 100));
        p.feed(b"MSG a 1 101\r\n").unwrap();
        assert_eq!(
            p.next(),
            Err(ProtoError::PayloadTooLarge {
                size: 101,
                max: 100
            })
        );

        let mut p = Parser::new(small());
        p.set_max_payload(1 << 30);
        assert_eq!(p.max_payload(), 100);
        p.set_max_payload(0);
        assert_eq!(p.max_payload(), 0);
        let e = all(small(), b"MSG a 1 101\r\n").unwrap_err();
        assert_eq!(e.to_string(), "payload of 101 bytes above max_payload 100");
    }

    #[test]
    fn an_error_poisons_the_parser() {
        let mut p = Parser::new(Limits::default());
        p.feed(b"PING\r\nFOO\r\nPONG\r\n").unwrap();
        assert_eq!(p.next(), Ok(Some(ServerOp::Ping)));
        let e = ProtoError::UnknownOperation("FOO".into());
        assert_eq!(p.next(), Err(e.clone()));
        assert_eq!(p.next(), Err(e.clone()));
        assert_eq!(p.feed(b"PING\r\n"), Err(e.clone()));
        assert_eq!(p.next(), Err(e));
        assert_eq!(p.buffered(), 0);
    }

    #[test]
    fn feed_refuses_more_than_the_bound() {
        let limits = small();
        let bound = limits.buffer_bound();
        assert_eq!(bound, 64 + 100 + 2);
        let mut p = Parser::new(limits);
        assert_eq!(p.room(), bound);
        p.feed(b"MSG a 1 100\r\n").unwrap();
        assert_eq!(p.next(), Ok(None));
        // The control line is consumed: the whole payload fits, and then some.
        assert_eq!(p.room(), bound);
        p.feed(&[b'x'; 100]).unwrap();
        assert_eq!(p.room(), bound - 100);
        assert_eq!(
            p.feed(&vec![b'y'; bound - 99]),
            Err(ProtoError::BufferFull { bound })
        );
        assert_eq!(p.next(), Err(ProtoError::BufferFull { bound }));
    }

    #[test]
    fn info_from_nats_server_2_9_reads_back() {
        let ServerOp::Info(info) = one(INFO_2_9).unwrap() else {
            panic!("not INFO")
        };
        assert_eq!(
            info,
            Info {
                server_id: "NCQLBUFJQWSQRB573LXKBJ2BATHHK25ZRUOJZ2OAYRXVT344WIXUNGWW".into(),
                server_name: "NCQLBUFJQWSQRB573LXKBJ2BATHHK25ZRUOJZ2OAYRXVT344WIXUNGWW".into(),
                version: "2.9.10".into(),
                proto: 1,
                max_payload: 1_048_576,
                headers: true,
                client_id: Some(4),
                ..Info::default()
            }
        );

        // With credentials required (an nkey user): auth_required and a nonce.
        let line = b"INFO {\"server_id\":\"NBYL\",\"server_name\":\"NBYL\",\"version\":\"2.9.10\",\
            \"proto\":1,\"go\":\"go1.19.8\",\"host\":\"127.0.0.1\",\"port\":14224,\"headers\":true,\
            \"auth_required\":true,\"max_payload\":1048576,\"client_id\":4,\"client_ip\":\
            \"127.0.0.1\",\"nonce\":\"MNrt84sed-REBCg\"} \r\n";
        let ServerOp::Info(info) = one(line).unwrap() else {
            panic!("not INFO")
        };
        assert!(info.auth_required);
        assert_eq!(info.nonce.as_deref(), Some("MNrt84sed-REBCg"));

        // What a member of a cluster sends when the cluster changes, then in lame duck mode.
        let line = b"INFO {\"server_id\":\"NBEK\",\"server_name\":\"c1\",\"version\":\"2.9.10\",\
            \"proto\":1,\"headers\":true,\"max_payload\":1048576,\"client_id\":4,\"cluster\":\"t\",\
            \"connect_urls\":[\"127.0.0.1:14232\"],\"ldm\":true} \r\n";
        let ServerOp::Info(info) = one(line).unwrap() else {
            panic!("not INFO")
        };
        assert_eq!(info.server_name, "c1");
        assert_eq!(info.connect_urls, ["127.0.0.1:14232"]);
        assert!(info.ldm);
    }

    #[test]
    fn info_fields_left_out_take_defaults() {
        assert_eq!(
            one(b"INFO {}\r\n").unwrap(),
            ServerOp::Info(Info::default())
        );
        let ServerOp::Info(info) =
            one(b"info\t{\"max_payload\":100,\"tls_required\":true,\"nonce\":null}\r\n").unwrap()
        else {
            panic!("not INFO")
        };
        assert_eq!(info.max_payload, 100);
        assert!(info.tls_required && !info.tls_available);
        assert_eq!(info.nonce, None);
    }

    #[test]
    fn bad_info_is_refused() {
        for (json, why) in [
            ("", "EOF while parsing a value at line 1 column 0"),
            ("{\"a\":", "EOF while parsing a value at line 1 column 5"),
            ("{} {}", "trailing characters at line 1 column 4"),
            ("[1]", "not a JSON object"),
            ("\"x\"", "not a JSON object"),
            ("{\"max_payload\":0}", "max_payload of 0"),
            (
                "{\"max_payload\":-1}",
                "\"max_payload\" is not a non-negative integer",
            ),
            (
                "{\"max_payload\":1.5}",
                "\"max_payload\" is not a non-negative integer",
            ),
            ("{\"proto\":\"1\"}", "\"proto\" is not an integer"),
            ("{\"headers\":1}", "\"headers\" is not a boolean"),
            ("{\"version\":2}", "\"version\" is not a string"),
            (
                "{\"connect_urls\":\"a\"}",
                "\"connect_urls\" is not an array",
            ),
            (
                "{\"connect_urls\":[1]}",
                "\"connect_urls\" holds a non-string",
            ),
        ] {
            let line = format!("INFO {json}\r\n");
            assert_eq!(
                one(line.as_bytes()),
                Err(ProtoError::BadInfo(why.into())),
                "{json}"
            );
        }
        assert_eq!(
            one(b"INFO {\"max_payload\":0}\r\n")
                .unwrap_err()
                .to_string(),
            "bad INFO: max_payload of 0"
        );
    }

    #[test]
    fn connect_urls_are_capped() {
        let urls: Vec<String> = (0..100).map(|i| format!("\"10.0.0.{i}:4222\"")).collect();
        let line = format!("INFO {{\"connect_urls\":[{}]}}\r\n", urls.join(","));
        let ServerOp::Info(info) = all(
            Limits {
                max_control_line: 8192,
                ..Limits::default()
            },
            line.as_bytes(),
        )
        .unwrap()
        .remove(0) else {
            panic!("not INFO")
        };
        assert_eq!(info.connect_urls.len(), MAX_CONNECT_URLS);
        assert_eq!(info.connect_urls[63], "10.0.0.63:4222");
    }

    #[test]
    fn non_utf8_subjects_do_not_cost_the_connection() {
        assert_eq!(
            one(b"MSG a.\xff 1 r\xfe 0\r\n\r\n").unwrap(),
            msg("a.\u{fffd}", 1, Some("r\u{fffd}"), b"")
        );
    }

    #[test]
    fn a_large_message_gives_its_memory_back() {
        let mut p = Parser::new(Limits::default());
        p.feed(b"MSG a 1 500000\r\n").unwrap();
        p.feed(&vec![b'x'; 500_000]).unwrap();
        p.feed(b"\r\n").unwrap();
        assert!(matches!(p.next(), Ok(Some(ServerOp::Msg(_)))));
        assert!(p.buf.capacity() <= SHRINK_ABOVE);
    }

    /// A stream of valid operations of every kind, and what they parse to.
    fn valid_stream() -> impl Strategy<Value = (Vec<u8>, Vec<ServerOp>)> {
        let op = prop_oneof![
            Just((b"PING\r\n".to_vec(), ServerOp::Ping)),
            Just((b"pong\r\n".to_vec(), ServerOp::Pong)),
            Just((b"+OK\r\n".to_vec(), ServerOp::Ok)),
            "[a-z ]{0,20}".prop_map(|t| {
                let line = format!("-ERR '{t}'\r\n").into_bytes();
                (line, ServerOp::Err(t))
            }),
            (0u64..1000).prop_map(|id| {
                let line = format!("INFO {{\"client_id\":{id},\"max_payload\":64}} \r\n");
                let info = Info {
                    client_id: Some(id),
                    max_payload: 64,
                    ..Info::default()
                };
                (line.into_bytes(), ServerOp::Info(info))
            }),
            (
                "[a-z]{1,8}(\\.[a-z*>]{1,3}){0,3}",
                any::<u64>(),
                proptest::option::of("_INBOX\\.[A-Za-z0-9]{1,10}"),
                proptest::collection::vec(
                    prop_oneof![Just(b'\r'), Just(b'\n'), any::<u8>()],
                    0..50
                ),
                any::<bool>(),
            )
                .prop_map(|(subject, sid, reply, payload, headers)| {
                    let r = reply.as_ref().map(|r| format!(" {r}")).unwrap_or_default();
                    let mut line = if headers {
                        let h = b"NATS/1.0\r\nK: v\r\n\r\n";
                        let n = h.len() + payload.len();
                        let mut l =
                            format!("HMSG {subject} {sid}{r} {} {n}\r\n", h.len()).into_bytes();
                        l.extend_from_slice(h);
                        l
                    } else {
                        format!("MSG {subject}  {sid}{r}\t{}\r\n", payload.len()).into_bytes()
                    };
                    line.extend_from_slice(&payload);
                    line.extend_from_slice(b"\r\n");
                    let m = Msg {
                        subject,
                        sid,
                        reply,
                        payload,
                    };
                    (line, ServerOp::Msg(m))
                }),
        ];
        proptest::collection::vec(op, 0..12).prop_map(|ops| {
            let (bytes, ops): (Vec<_>, Vec<_>) = ops.into_iter().unzip();
            (bytes.concat(), ops)
        })
    }

    proptest! {
        #[test]
        fn any_split_of_a_valid_stream_yields_the_same_ops(
            (stream, want) in valid_stream(),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..20),
        ) {
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
            cuts.push(0);
            cuts.push(stream.len());
            cuts.sort_unstable();
            let limits = Limits { max_control_line: 200, max_payload: 100 };
            let mut p = Parser::new(limits);
            let mut got = Vec::new();
            for w in cuts.windows(2) {
                got.extend(drive(&mut p, &stream[w[0]..w[1]]).unwrap());
            }
            prop_assert_eq!(p.buffered(), 0);
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(all(limits, &stream).unwrap(), want);
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_stay_bounded(
            chunks in proptest::collection::vec(
                proptest::collection::vec(
                    prop_oneof![
                        4 => any::<u8>(),
                        2 => Just(b'\r'),
                        2 => Just(b'\n'),
                        2 => Just(b' '),
                        1 => Just(b'9'),
                    ],
                    0..80,
                ).prop_flat_map(|noise| (Just(noise), prop_oneof![
                    Just(&b""[..]), Just(&b"MSG a 1 "[..]), Just(&b"HMSG a 1 9 "[..]),
                    Just(&b"PING\r\n"[..]), Just(&b"INFO {"[..]), Just(&b"NATS/1.0\r\n"[..]),
                    Just(&b"-ERR '"[..]), Just(&b"msg a 1 r 3\r\n"[..]),
                ])).prop_map(|(noise, word)| [word, &noise[..]].concat()),
                0..20,
            ),
            max_control_line in 1usize..80,
            max_payload in 0usize..60,
            lower in proptest::option::of(0usize..100),
        ) {
            let limits = Limits { max_control_line, max_payload };
            let mut p = Parser::new(limits);
            if let Some(n) = lower {
                p.set_max_payload(n);
            }
            let mut failed = None;
            for chunk in &chunks {
                let r = p.feed(chunk);
                prop_assert!(p.buffered() <= limits.buffer_bound());
                prop_assert!(p.buf.capacity() <= limits.buffer_bound().max(SHRINK_ABOVE));
                if let Err(e) = r {
                    failed = Some(e);
                    break;
                }
                match drain(&mut p) {
                    Ok(ops) => {
                        for op in ops {
                            if let ServerOp::Msg(m) = op {
                                prop_assert!(m.payload.len() <= max_payload);
                            }
                        }
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
                prop_assert!(p.buffered() < limits.buffer_bound().max(1));
            }
            if let Some(e) = failed {
                prop_assert_eq!(p.next(), Err(e.clone()));
                prop_assert_eq!(p.feed(b"PING\r\n"), Err(e));
            }
        }
    }
}
