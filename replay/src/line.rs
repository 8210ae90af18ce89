//! One access-log line in the `circuit_breaker_replay` format (see the README), or a stream
//! session's in `circuit_breaker_stream_replay` (told apart by an unquoted third field:
//! see `parse_stream`). The http one:
//!
//! ```text
//! $msec $request_time "$circuit_breaker_upstream" "$circuit_breaker_route" "$upstream_addr"
//! "$upstream_status" "$upstream_response_time" "$upstream_header_time"
//! ["$circuit_breaker_state" "$circuit_breaker_msec" ["$circuit_breaker_class"]] [anything]
//! ```
//!
//! nginx escapes `"` inside a variable's value (`\x22`), so a quoted field ends at the next
//! `"`. The ninth and tenth fields are the module's, when they read as its values (a state
//! and `JUDGED[+ELAPSED]` or `-`); the format of an older log, or one captured before the
//! module was loaded (`$proxy_host` for the upstream), may go on with anything: fields that
//! do not read so are ignored, as all after them. Pure and total: any bytes give a line or
//! an error, never a panic.
//!
//! The upstream and route names are at most [`MAX_NAME`] bytes: the replay keeps the names it
//! has seen, and `$proxy_host` is the client's `Host` when nginx proxies to `http://$host`.

use circuit_breaker_core::breaker::{Attempt, Ending};
use circuit_breaker_core::class::Class;
use circuit_breaker_core::session::Logged;

/// A parsed line, borrowing the names from the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    /// When the request ended (`$msec`), milliseconds since the epoch.
    pub end_ms: u64,
    /// How long it took (`$request_time`), milliseconds.
    pub request_ms: u64,
    /// The upstream's name (`$proxy_host`).
    pub upstream: &'a str,
    /// The route; `default` when the field is empty or `-`.
    pub route: &'a str,
    /// The outcome of the request's last attempt, as the breaker judges it; `None` when the
    /// request made no upstream attempt (a cache hit, a `return`, a request a live breaker
    /// turned away).
    pub attempt: Option<Attempt>,
    /// The attempts of the request's upstream before its last, when there were any.
    pub retries: Retries,
    /// A breaker turned the request away (`$circuit_breaker_state` says so, and it made no
    /// upstream attempt): it never reached the origin.
    pub refused: bool,
    /// `$circuit_breaker_msec`: when the breaker judged the request and when it recorded its
    /// outcome (the same, for a request with none), on the module's monotonic clock.
    pub judged: Option<(u64, u64)>,
    /// A stream session's line (`circuit_breaker_stream_replay`): what nginx logged of it, for
    /// each breaker setting to judge (`session::logged`, with its `first_byte`). Its upstream
    /// is a stream one, its route `default`, and `attempt` a placeholder without a verdict.
    pub session: Option<Logged>,
    /// `$upstream_addr`, `$upstream_status`, `$upstream_response_time` and
    /// `$upstream_header_time` as logged (empty for a stream line): every attempt, for the
    /// replay of a pool's servers ([`Line::attempts`]).
    pub lists: [&'a str; 4],
    /// `$circuit_breaker_class`, after the module's two fields, when it names a class.
    pub class: Option<Class>,
    /// The live adaptive limit shed it (`$circuit_breaker_state` is `limited`).
    pub limited: bool,
}

impl<'a> Line<'a> {
    /// Each attempt of the request's last upstream with the address it went to, in order;
    /// an entry that is no address (nginx's upstream name when no server was live) or does
    /// not read as an attempt is left out.
    pub fn attempts(&self) -> impl Iterator<Item = (&'a str, Attempt)> + 'a {
        let [addr, status, time, header] = self.lists;
        let n = if addr.is_empty() || addr == "-" {
            0
        } else {
            group(addr).split(',').count()
        };
        (0..n).filter_map(move |i| {
            let a = entry(addr, i, false)?;
            if !is_address(a) {
                return None;
            }
            let got = judge(
                a,
                entry(status, i, false)?,
                entry(time, i, false)?,
                entry(header, i, false)?,
            );
            got.ok().map(|at| (a, at))
        })
    }
}

/// What a retry budget needs of a request's earlier attempts (in its last upstream).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retries {
    /// Attempts in all (0 or 1: no retry).
    pub tries: u32,
    /// The first attempt.
    pub first: Option<Attempt>,
    /// The one before the last (the first, with two).
    pub before_last: Option<Attempt>,
}

/// Why a line did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineError {
    /// Fewer than the eight fields.
    MissingField(&'static str),
    /// A field that is not what the format puts there.
    BadField(&'static str),
    /// A name longer than [`MAX_NAME`].
    TooLong(&'static str),
}

/// The longest upstream or route name: a host name and its port take at most 259 bytes.
pub const MAX_NAME: usize = 512;

impl core::fmt::Display for LineError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LineError::MissingField(name) => write!(f, "no {name}"),
            LineError::BadField(name) => write!(f, "invalid {name}"),
            LineError::TooLong(name) => write!(f, "{name} longer than {MAX_NAME} bytes"),
        }
    }
}

const FIELDS: [&str; 8] = [
    "$msec",
    "$request_time",
    "upstream name",
    "route",
    "$upstream_addr",
    "$upstream_status",
    "$upstream_response_time",
    "$upstream_header_time",
];

/// Splits off the next field: a quoted one up to its closing quote, else up to a space.
fn field<'a>(rest: &mut &'a str, name: &'static str) -> Result<&'a str, LineError> {
    let s = rest.trim_start_matches(' ');
    if s.is_empty() {
        return Err(LineError::MissingField(name));
    }
    let (value, tail) = if let Some(q) = s.strip_prefix('"') {
        let end = q
            .bytes()
            .position(|c| c == b'"')
            .ok_or(LineError::BadField(name))?;
        (&q[..end], &q[end + 1..])
    } else {
        let end = s.bytes().position(|c| c == b' ').unwrap_or(s.len());
        (&s[..end], &s[end..])
    };
    if !(tail.is_empty() || tail.starts_with(' ')) {
        return Err(LineError::BadField(name));
    }
    *rest = tail;
    Ok(value)
}

/// `SECONDS[.FRACTION]` (nginx prints three decimals) in milliseconds.
pub fn parse_seconds(s: &str) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, "0"));
    if int.is_empty() || int.len() > 12 || frac.is_empty() || frac.len() > 3 {
        return None;
    }
    let digits = |d: &str| {
        d.bytes().try_fold(0u64, |n, c| {
            c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0'))
        })
    };
    let pad = [1000, 100, 10, 1][frac.len()];
    Some(digits(int)? * 1000 + digits(frac)? * pad)
}

/// The last group of a list as nginx writes it: `a, b : c` (`, ` between attempts, ` : `
/// before an internal redirect's, which went to another upstream).
fn group(list: &str) -> &str {
    // Byte scans: a `str` pattern search costs more to set up than these short lists take
    // to scan (a third of the parse, measured).
    match list.as_bytes().windows(3).rposition(|w| w == b" : ") {
        Some(i) => &list[i + 3..],
        None => list,
    }
}

/// The `i`-th entry of the last group (from the end when `back`). Entries are separated by
/// `,` (nginx writes `, `; no address, status or time holds a comma).
fn entry(list: &str, i: usize, back: bool) -> Option<&str> {
    let g = group(list);
    let e = if back {
        g.rsplit(',').nth(i)
    } else {
        g.split(',').nth(i)
    };
    e.map(|e| e.trim_matches(' '))
}

/// An entry of `$upstream_addr` that is an address: when no server was live, nginx writes
/// the upstream's name instead.
fn is_address(addr: &str) -> bool {
    addr.starts_with('[')
        || addr.starts_with("unix:")
        || addr
            .bytes()
            .all(|c| c.is_ascii_digit() || c == b'.' || c == b':')
}

/// One attempt from its entries of the four lists.
fn judge(addr: &str, status: &str, time: &str, header: &str) -> Result<Attempt, LineError> {
    let response_ms = match time {
        "-" => 0,
        t => parse_seconds(t).ok_or(LineError::BadField(FIELDS[6]))?,
    };
    let no_header = header == "-";
    Ok(match status {
        "-" => Attempt::ended(Ending::NoVerdict, response_ms),
        s => {
            let code: u16 = match s.parse() {
                Ok(c) if (100..=999).contains(&c) && s.len() == 3 => c,
                _ => return Err(LineError::BadField(FIELDS[5])),
            };
            match code {
                502 if no_header && !is_address(addr) => {
                    Attempt::ended(Ending::NoLive, response_ms)
                }
                502 if no_header => Attempt::ended(Ending::Error, response_ms),
                504 if no_header => Attempt::ended(Ending::Timeout, response_ms),
                _ => Attempt::http(code, response_ms),
            }
        }
    })
}

/// Parses one line (without its newline).
pub fn parse(line: &str) -> Result<Line<'_>, LineError> {
    let mut rest = line.strip_suffix('\r').unwrap_or(line);
    let mut f = [""; 8];
    // The times are checked as they come, so that a line of something else says so first.
    let end_ms =
        parse_seconds(field(&mut rest, FIELDS[0])?).ok_or(LineError::BadField(FIELDS[0]))?;
    let request_ms =
        parse_seconds(field(&mut rest, FIELDS[1])?).ok_or(LineError::BadField(FIELDS[1]))?;
    // An http line quotes its third field (the upstream); a stream line's is `$protocol`.
    let third = rest.trim_start_matches(' ');
    if !third.is_empty() && !third.starts_with('"') {
        return parse_stream(end_ms, request_ms, rest);
    }
    for (value, name) in f.iter_mut().zip(FIELDS).skip(2) {
        *value = field(&mut rest, name)?;
    }
    let upstream = f[2];
    if upstream.is_empty() || upstream == "-" {
        return Err(LineError::BadField(FIELDS[2]));
    }
    let route = match f[3] {
        "" | "-" => "default",
        r => r,
    };
    for (name, i) in [(FIELDS[2], 2), (FIELDS[3], 3)] {
        if f[i].len() > MAX_NAME {
            return Err(LineError::TooLong(name));
        }
    }
    let mut retries = Retries::default();
    let attempt = if f[4] == "-" || f[4].is_empty() {
        None
    } else {
        let at = |i: usize, back: bool| -> Option<Result<Attempt, LineError>> {
            Some(judge(
                entry(f[4], i, back)?,
                entry(f[5], i, back)?,
                entry(f[6], i, back)?,
                entry(f[7], i, back)?,
            ))
        };
        let last = at(0, true).ok_or(LineError::BadField(FIELDS[5]))??;
        let tries = group(f[5]).bytes().filter(|&c| c == b',').count() as u32 + 1;
        if tries > 1 {
            // The earlier attempts only matter to a retry budget; one nginx wrote badly is
            // taken for the last.
            retries = Retries {
                tries,
                first: Some(at(0, false).and_then(Result::ok).unwrap_or(last)),
                before_last: Some(at(1, true).and_then(Result::ok).unwrap_or(last)),
            };
        }
        Some(last)
    };
    let mut after = rest;
    let (state, judged, class) = match module_fields(&mut after) {
        Some((state, judged)) => (state, judged, class_field(after)),
        None => (None, None, None),
    };
    // A request a breaker let through, or none judged, made an attempt or ended otherwise
    // (a cache hit, a `return`); one without an attempt whose breaker was not closed was
    // turned away by it (open, half-open but not the probe, a ramp's share, the limit).
    let refused = attempt.is_none() && state.is_some_and(|s| s != "closed");
    Ok(Line {
        end_ms,
        request_ms,
        upstream,
        route,
        attempt,
        retries,
        refused,
        judged,
        session: None,
        lists: [f[4], f[5], f[6], f[7]],
        class,
        limited: attempt.is_none() && state == Some("limited"),
    })
}

/// `$circuit_breaker_class` from what follows the module's two fields, when the next field
/// names a class; `None` when it does not (no class, or another format's field).
fn class_field(mut rest: &str) -> Option<Class> {
    Class::parse(field(&mut rest, "$circuit_breaker_class").ok()?.as_bytes())
}

const STREAM_FIELDS: [&str; 9] = [
    "$protocol",
    "$status",
    "upstream name",
    "$upstream_addr",
    "$upstream_connect_time",
    "$upstream_first_byte_time",
    "$upstream_session_time",
    "$upstream_bytes_sent",
    "$upstream_bytes_received",
];

/// The values `$circuit_breaker_state` takes in `stream {}`.
const STREAM_STATES: [&str; 5] = ["closed", "open", "half_open", "recovering", "backup"];

/// A time of a stream list's last try: `-` when that stage was never reached.
fn last_time(list: &str, name: &'static str) -> Result<Option<u64>, LineError> {
    match list.rsplit(',').next().map(|e| e.trim_matches(' ')) {
        None | Some("-") | Some("") => Ok(None),
        Some(t) => parse_seconds(t).map(Some).ok_or(LineError::BadField(name)),
    }
}

/// The last try's `$upstream_session_time`. nginx writes every entry `SECONDS.MMM`, or `-`
/// (a try not ended, or the whole variable when no server was tried); each is checked as
/// such, so that a line of the format without this field (a byte count in its place) is
/// refused rather than read with a count for a time.
fn last_try_time(list: &str, name: &'static str) -> Result<Option<u64>, LineError> {
    let mut last = None;
    for e in list.split(',').map(|e| e.trim_matches(' ')) {
        last = match e {
            "-" => None,
            t if t.len() > 4 && t.as_bytes()[t.len() - 4] == b'.' => {
                Some(parse_seconds(t).ok_or(LineError::BadField(name))?)
            }
            _ => return Err(LineError::BadField(name)),
        };
    }
    Ok(last)
}

/// The rest of a `circuit_breaker_stream_replay` line, after `$msec $session_time`:
///
/// ```text
/// $protocol $status "$circuit_breaker_upstream" "$upstream_addr" "$upstream_connect_time"
/// "$upstream_first_byte_time" "$upstream_session_time" "$upstream_bytes_sent"
/// "$upstream_bytes_received" ["$circuit_breaker_state"] [anything]
/// ```
///
/// nginx's lists hold one entry per server tried (`, ` between them; the last is the final
/// try), a time `-` when its stage was never reached, and the whole variable `-` when no
/// server was tried. A try's three times count from its own start (its connect).
fn parse_stream(end_ms: u64, session_ms: u64, mut rest: &str) -> Result<Line<'_>, LineError> {
    let mut f = [""; 9];
    for (value, name) in f.iter_mut().zip(STREAM_FIELDS) {
        *value = field(&mut rest, name)?;
    }
    let udp = match f[0] {
        "TCP" => false,
        "UDP" => true,
        _ => return Err(LineError::BadField(STREAM_FIELDS[0])),
    };
    let status = match f[1].parse::<u16>() {
        Ok(c) if (100..=999).contains(&c) && f[1].len() == 3 => c,
        _ => return Err(LineError::BadField(STREAM_FIELDS[1])),
    };
    let upstream = f[2];
    if upstream.len() > MAX_NAME {
        return Err(LineError::TooLong(STREAM_FIELDS[2]));
    }
    let connect_ms = last_time(f[4], STREAM_FIELDS[4])?;
    let first_byte_ms = last_time(f[5], STREAM_FIELDS[5])?;
    let try_ms = last_try_time(f[6], STREAM_FIELDS[6])?;
    // Whether the last try's count is not 0 (all the replay needs of it), each checked.
    let nonzero = |list: &str, name| -> Result<bool, LineError> {
        let mut last = false;
        for e in list.split(',').map(|e| e.trim_matches(' ')) {
            last = match e {
                "-" | "" => false,
                d if d.len() <= 20 && d.bytes().all(|c| c.is_ascii_digit()) => {
                    d.bytes().any(|c| c != b'0')
                }
                _ => return Err(LineError::BadField(name)),
            };
        }
        Ok(last)
    };
    let sent = nonzero(f[7], STREAM_FIELDS[7])?;
    nonzero(f[8], STREAM_FIELDS[8])?;
    // A balancer that found no server free names the upstream itself, as the module tells.
    let tried = f[3]
        .split(',')
        .map(|e| e.trim_matches(' '))
        .any(|a| !a.is_empty() && a != "-" && a != upstream);
    let state = field(&mut rest, "$circuit_breaker_state")
        .ok()
        .filter(|s| STREAM_STATES.contains(s));
    let none = Line {
        end_ms,
        request_ms: session_ms,
        upstream,
        route: "default",
        attempt: None,
        retries: Retries::default(),
        refused: false,
        judged: None,
        session: None,
        lists: [""; 4],
        class: None,
        limited: false,
    };
    if upstream.is_empty() || upstream == "-" {
        // No upstream (`return`, or an address without an upstream block): no breaker's.
        return Ok(none);
    }
    // Refused live: no server tried, the module's 503; or handed to the backup servers while
    // the breaker was open (the primary breaker refused it: what they said is not its).
    let refused = match state {
        Some("backup") => true,
        Some("open" | "half_open" | "recovering") => !tried && status == 503,
        _ => false,
    };
    Ok(Line {
        attempt: Some(Attempt::ended(Ending::NoVerdict, 0)),
        refused,
        session: Some(Logged {
            udp,
            status,
            tried,
            connect_ms,
            first_byte_ms,
            client_sent: sent,
            try_ms,
        }),
        ..none
    })
}

/// The values `$circuit_breaker_state` takes.
const STATES: [&str; 5] = ["closed", "open", "half_open", "recovering", "limited"];

/// `$circuit_breaker_state` and `$circuit_breaker_msec` from what follows the eighth field,
/// when the next two read as such (the state may be empty, the time `-`: no breaker judged
/// the request); `None` when they do not (an older format going on with other fields).
#[allow(clippy::type_complexity)]
fn module_fields<'a>(rest: &mut &'a str) -> Option<(Option<&'a str>, Option<(u64, u64)>)> {
    let state = field(rest, "$circuit_breaker_state").ok()?;
    let msec = field(rest, "$circuit_breaker_msec").ok()?;
    let state = match state {
        "" | "-" => None,
        s if STATES.contains(&s) => Some(s),
        _ => return None,
    };
    let judged = match msec {
        "-" | "" => None,
        m => {
            let (at, elapsed) = m.split_once('+').unwrap_or((m, "0"));
            // At most 15 digits (31 000 years of milliseconds): the replay's clock arithmetic
            // then never overflows, whatever a corrupt or hostile line says.
            let num = |d: &str| -> Option<u64> {
                if d.is_empty() || d.len() > 15 || !d.bytes().all(|c| c.is_ascii_digit()) {
                    return None;
                }
                d.parse().ok()
            };
            let at = num(at)?;
            Some((at, at.saturating_add(num(elapsed)?)))
        }
    };
    if state.is_none() && judged.is_some() {
        return None;
    }
    Some((state, judged))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NEW: &str = r#"1700000000.123 0.015 "api" "checkout" "10.0.0.1:80" "200" "0.014" "0.010" "closed" "81234567+15""#;

    #[test]
    fn the_module_fields() {
        let l = parse(NEW).unwrap();
        assert_eq!(l.judged, Some((81_234_567, 81_234_582)));
        assert!(!l.refused);
        assert!(l.attempt.is_some());
    }

    #[test]
    fn the_class_follows_the_module_fields() {
        for (tail, class) in [
            (r#" "critical""#, Some(Class::Critical)),
            (r#" "sheddable" more"#, Some(Class::Sheddable)),
            (" default", Some(Class::Default)),
            (r#" """#, None),
            (r#" "-""#, None),
            // Another format's field (the lab's `$connection`), or none at all.
            (" 12345 abc", None),
            ("", None),
            (r#" "CRITICAL""#, None),
        ] {
            let text = format!("{NEW}{tail}");
            let l = parse(&text).unwrap();
            assert_eq!(l.class, class, "{tail:?}");
            assert!(!l.limited);
        }
        // Without the module's two fields, nothing after them is read as a class.
        let old = r#"1700000000.123 0.015 "api" "checkout" "10.0.0.1:80" "200" "0.014" "0.010" "critical""#;
        assert_eq!(parse(old).unwrap().class, None);
        let shed = r#"1700000000.123 0.000 "api" "default" "-" "-" "-" "-" "limited" "81234567" "sheddable""#;
        let l = parse(shed).unwrap();
        assert!(l.limited && l.refused);
        assert_eq!(l.class, Some(Class::Sheddable));
    }

    #[test]
    fn a_refused_line_is_refused() {
        for state in ["open", "half_open", "recovering", "limited"] {
            let text = format!(
                r#"1700000000.123 0.000 "api" "default" "-" "-" "-" "-" "{state}" "81234567""#
            );
            let l = parse(&text).unwrap();
            assert!(l.refused, "{state}");
            assert_eq!(l.upstream, "api");
            assert_eq!(l.attempt, None);
            assert_eq!(l.judged, Some((81_234_567, 81_234_567)));
        }
        // Let through in a dry run: an attempt, so not refused, whatever the state says.
        let dry =
            r#"1700000000.123 0.015 "api" "default" "10.0.0.1:80" "502" "0.014" "-" "open" "5+14""#;
        assert!(!parse(dry).unwrap().refused);
        // No breaker judged it (a `return`): nothing refused.
        let none = r#"1700000000.123 0.000 "api" "default" "-" "-" "-" "-" "" "-""#;
        let l = parse(none).unwrap();
        assert!(!l.refused);
        assert_eq!(l.judged, None);
    }

    #[test]
    fn other_fields_after_the_eighth_are_not_the_module_s() {
        for tail in [
            r#" "/a/?n=1""#,
            r#" "open" "soon""#,
            r#" "GET" "-""#,
            " 12 13",
            "",
        ] {
            let text = format!("{OK}{tail}");
            let l = parse(&text).unwrap();
            assert!(!l.refused, "{tail}");
            assert_eq!(l.judged, None, "{tail}");
        }
        let text = format!("{NEW} \"/a/?n=1\"");
        let l = parse(&text).unwrap();
        assert_eq!(l.judged, Some((81_234_567, 81_234_582)));
        // Times past 15 digits are not the module's (its clock is nginx's monotonic
        // milliseconds): read as an older format's own fields, never as times.
        for msec in [
            "1234567890123456789",
            "1+9999999999999999999",
            "9999999999999999",
        ] {
            let text = format!("{OK} \"open\" \"{msec}\"");
            let l = parse(&text).unwrap();
            assert_eq!(l.judged, None, "{msec}");
            assert!(!l.refused, "{msec}");
        }
    }

    const OK: &str = r#"1700000000.123 0.015 "api" "checkout" "10.0.0.1:80" "200" "0.014" "0.010""#;

    #[test]
    fn a_good_line() {
        let l = parse(OK).unwrap();
        assert_eq!(l.end_ms, 1_700_000_000_123);
        assert_eq!(l.request_ms, 15);
        assert_eq!((l.upstream, l.route), ("api", "checkout"));
        assert_eq!(l.attempt, Some(Attempt::http(200, 14)));
        // Trailing fields are the operator's.
        assert_eq!(parse(&format!("{OK} \"GET / HTTP/1.1\" x")).unwrap(), l);
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("0.001"), Some(1));
        assert_eq!(parse_seconds("1.5"), Some(1500));
        assert_eq!(parse_seconds("1.25"), Some(1250));
        assert_eq!(parse_seconds("12"), Some(12_000));
        for bad in ["", ".5", "1.2345", "1,5", "-1", "1e3", "1.x"] {
            assert_eq!(parse_seconds(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_last_attempt_counts() {
        let l = parse(r#"1.000 0.100 "api" "-" "10.0.0.1:80, 10.0.0.2:80" "502, 200" "0.050, 0.040" "-, 0.030""#).unwrap();
        assert_eq!(l.route, "default");
        assert_eq!(l.attempt, Some(Attempt::http(200, 40)));
        let l = parse(r#"1.000 0.100 "api" "" "10.0.0.1:80 : 10.0.0.2:80" "200 : 503" "0.010 : 0.020" "0.005 : 0.020""#).unwrap();
        assert_eq!(l.attempt, Some(Attempt::http(503, 20)));
    }

    #[test]
    fn retries_of_the_last_upstream() {
        let l = parse(r#"1.000 0.100 "api" "-" "a:1 : 10.0.0.1:80, unix:/s, 10.0.0.3:80" "200 : 502, 504, 200" "0.001 : 0.010, 1.000, 0.020" "0.001 : -, -, 0.010""#).unwrap();
        assert_eq!(l.attempt, Some(Attempt::http(200, 20)));
        assert_eq!(l.retries.tries, 3);
        assert_eq!(l.retries.first, Some(Attempt::ended(Ending::Error, 10)));
        assert_eq!(
            l.retries.before_last,
            Some(Attempt::ended(Ending::Timeout, 1000))
        );
        let one = parse(OK).unwrap();
        assert_eq!(one.retries, Retries::default());
        // A unix socket is an address, not "no live upstreams".
        let l = parse(r#"1.000 0.100 "api" "-" "unix:/run/app.sock" "502" "0.001" "-""#).unwrap();
        assert_eq!(l.attempt, Some(Attempt::ended(Ending::Error, 1)));
    }

    #[test]
    fn endings_without_a_header() {
        let at = |addr: &str, st: &str, ht: &str| {
            parse(&format!(
                r#"1.000 1.000 "api" "-" "{addr}" "{st}" "1.000" "{ht}""#
            ))
            .unwrap()
            .attempt
            .unwrap()
        };
        assert_eq!(at("127.0.0.1:1", "502", "-").ending, Ending::Error);
        assert_eq!(at("[::1]:1", "504", "-").ending, Ending::Timeout);
        assert_eq!(at("api", "502", "-").ending, Ending::NoLive);
        assert_eq!(at("127.0.0.1:1", "502", "0.500"), Attempt::http(502, 1000));
        assert_eq!(at("127.0.0.1:1", "-", "-").ending, Ending::NoVerdict);
        // No attempt at all: not the breaker's.
        let l = parse(r#"1.000 0.000 "api" "-" "-" "-" "-" "-""#).unwrap();
        assert_eq!(l.attempt, None);
    }

    #[test]
    fn bad_lines_say_why() {
        assert_eq!(parse(""), Err(LineError::MissingField("$msec")));
        assert_eq!(parse("not a log line"), Err(LineError::BadField("$msec")));
        assert_eq!(
            parse("1.0 0.1 \"api"),
            Err(LineError::BadField("upstream name"))
        );
        assert_eq!(
            parse(r#"x 0.1 "api" "-" "a" "200" "0.1" "0.1""#),
            Err(LineError::BadField("$msec"))
        );
        assert_eq!(
            parse(r#"1.0 0.1 "api" "-" "a" "2000" "0.1" "0.1""#),
            Err(LineError::BadField("$upstream_status"))
        );
        assert_eq!(
            parse(r#"1.0 0.1 "api" "-" "a" "200""#),
            Err(LineError::MissingField("$upstream_response_time"))
        );
        assert_eq!(
            parse(r#"1.0 0.1 "api"x "-" "a" "200" "0.1" "0.1""#),
            Err(LineError::BadField("upstream name"))
        );
    }

    #[test]
    fn names_are_bounded() {
        let with = |up: &str, route: &str| {
            parse(&format!(
                r#"1.0 0.1 "{up}" "{route}" "a" "200" "0.1" "0.1""#
            ))
            .err()
        };
        let long = "h".repeat(MAX_NAME);
        assert_eq!(with(&long, &long), None);
        let longer = "h".repeat(MAX_NAME + 1);
        assert_eq!(
            with(&longer, "-"),
            Some(LineError::TooLong("upstream name"))
        );
        assert_eq!(with("api", &longer), Some(LineError::TooLong("route")));
        assert_eq!(
            LineError::TooLong("route").to_string(),
            "route longer than 512 bytes"
        );
    }

    const KV: &str = r#"1700000010.500 0.250 TCP 200 "kv" "10.0.0.7:6379" "0.001" "0.002" "0.240" "14" "7" "closed""#;

    #[test]
    fn a_stream_line() {
        let l = parse(KV).unwrap();
        assert_eq!((l.end_ms, l.request_ms), (1_700_000_010_500, 250));
        assert_eq!((l.upstream, l.route), ("kv", "default"));
        assert!(!l.refused && l.judged.is_none() && l.retries == Retries::default());
        assert_eq!(
            l.session,
            Some(Logged {
                udp: false,
                status: 200,
                tried: true,
                connect_ms: Some(1),
                first_byte_ms: Some(2),
                client_sent: true,
                try_ms: Some(240),
            })
        );
        // Trailing fields are the operator's; the state may be left out.
        assert_eq!(parse(&format!("{KV} \"x\" 12")).unwrap(), l);
        let bare = KV.strip_suffix(r#" "closed""#).unwrap();
        assert_eq!(parse(bare).unwrap(), l);
    }

    #[test]
    fn a_stream_line_s_last_try_counts() {
        // Refused by the first server, silent on the second; UDP.
        let l = parse(r#"1.000 5.000 UDP 502 "dns" "10.0.0.1:53, 10.0.0.2:53" "-, 0.000" "-, -" "0.001, 4.999" "0, 40" "0, 0" "closed""#).unwrap();
        let s = l.session.unwrap();
        assert!(s.udp && s.tried && s.client_sent);
        assert_eq!(
            (s.connect_ms, s.first_byte_ms, s.try_ms, s.status),
            (Some(0), None, Some(4_999), 502)
        );
        // Connect refused on the last try, nothing sent.
        let l =
            parse(r#"1.000 0.001 TCP 502 "kv" "10.0.0.7:6379" "-" "-" "0.001" "0" "0" "closed""#)
                .unwrap();
        let s = l.session.unwrap();
        assert_eq!((s.connect_ms, s.client_sent, s.tried), (None, false, true));
        // No server free (max_conns): the balancer names the upstream, no address.
        let l = parse(r#"1.000 0.000 TCP 502 "kv" "kv" "-" "-" "0.000" "0" "0" "closed""#).unwrap();
        assert!(!l.session.unwrap().tried);
        // A try not ended when logged, and earlier tries' times: only the last one's counts.
        let l = parse(
            r#"1.000 9.000 TCP 200 "kv" "a:1, b:2" "-, 0.001" "-, -" "5.000, -" "0, 9" "0, 0""#,
        )
        .unwrap();
        assert_eq!(l.session.unwrap().try_ms, None);
    }

    #[test]
    fn stream_lines_refused_live() {
        for state in ["open", "half_open", "recovering"] {
            let text = format!(r#"1.000 0.000 TCP 503 "kv" "-" "-" "-" "-" "-" "-" "{state}""#);
            let l = parse(&text).unwrap();
            assert!(l.refused, "{state}");
            assert!(!l.session.unwrap().tried);
        }
        // Handed to a backup server while open: the primary breaker refused it.
        let l = parse(
            r#"1.000 0.100 TCP 200 "kv" "10.0.0.9:6379" "0.001" "0.002" "0.100" "14" "7" "backup""#,
        )
        .unwrap();
        assert!(l.refused);
        // Let through in a dry run: a server tried, so not refused.
        let l = parse(
            r#"1.000 0.100 TCP 200 "kv" "10.0.0.7:6379" "0.001" "0.002" "0.100" "14" "7" "open""#,
        )
        .unwrap();
        assert!(!l.refused);
        // nginx's own 503 (limit_conn), no breaker's state: not refused by a breaker.
        let l = parse(r#"1.000 0.000 TCP 503 "kv" "-" "-" "-" "-" "-" "-" "-""#).unwrap();
        assert!(!l.refused && l.session.is_some());
    }

    #[test]
    fn stream_lines_without_an_upstream_or_badly_written() {
        let l = parse(r#"1.000 0.000 TCP 200 "-" "-" "-" "-" "-" "-" "-" "-""#).unwrap();
        assert_eq!((l.attempt, l.session), (None, None));
        let bad = |t: &str| parse(t).unwrap_err();
        assert_eq!(
            bad(r#"1.000 0.100 SCTP 200 "kv" "a" "-" "-" "-" "0" "0""#),
            LineError::BadField("$protocol")
        );
        assert_eq!(
            bad(r#"1.000 0.100 TCP 20 "kv" "a" "-" "-" "-" "0" "0""#),
            LineError::BadField("$status")
        );
        assert_eq!(
            bad(r#"1.000 0.100 TCP 200 "kv" "a" "x" "-" "-" "0" "0""#),
            LineError::BadField("$upstream_connect_time")
        );
        assert_eq!(
            bad(r#"1.000 0.100 TCP 200 "kv" "a" "-" "1.2.3" "-" "0" "0""#),
            LineError::BadField("$upstream_first_byte_time")
        );
        for t in ["1", "0.10", "1.0001", ".100", "x.100", "0.100, ", "1.2.3"] {
            assert_eq!(
                bad(&format!(
                    r#"1.000 0.100 TCP 200 "kv" "a" "-" "-" "{t}" "0" "0""#
                )),
                LineError::BadField("$upstream_session_time"),
                "{t}"
            );
        }
        assert_eq!(
            bad(r#"1.000 0.100 TCP 200 "kv" "a" "-" "-" "-" "-1" "0""#),
            LineError::BadField("$upstream_bytes_sent")
        );
        assert_eq!(
            bad(r#"1.000 0.100 TCP 200 "kv" "a" "-" "-" "-" "0""#),
            LineError::MissingField("$upstream_bytes_received")
        );
        // The format without $upstream_session_time: a byte count in its place, refused
        // rather than read as a time.
        assert_eq!(
            bad(r#"1.000 0.250 TCP 200 "kv" "a" "0.001" "0.002" "14" "7" "closed""#),
            LineError::BadField("$upstream_session_time")
        );
        let long = "k".repeat(MAX_NAME + 1);
        assert_eq!(
            bad(&format!(
                r#"1.000 0.1 TCP 200 "{long}" "a" "-" "-" "-" "0" "0""#
            )),
            LineError::TooLong("upstream name")
        );
        let ok = "k".repeat(MAX_NAME);
        assert!(parse(&format!(
            r#"1.000 0.1 TCP 200 "{ok}" "a" "-" "-" "-" "0" "0""#
        ))
        .is_ok());
        // An http line is still told by its quoted third field.
        assert!(parse(OK).unwrap().session.is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Nothing panics, whatever the bytes (lossily decoded, as the reader does).
        #[test]
        fn any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&String::from_utf8_lossy(&bytes));
        }

        /// Nor lines made of the format's own pieces, shuffled and cut.
        #[test]
        fn format_pieces(parts in proptest::collection::vec(
            prop::sample::select(vec![
                " ", "\"", "-", ",", " : ", ":", ".", "0", "9", "999999999999999", "502",
                "504", "200", "api", "1700000000.123", "0.015", "[::1]:80", "\r", "é",
            ]), 0..40)) {
            let line: String = parts.concat();
            let _ = parse(&line);
        }

        /// Nor stream lines made of their format's pieces.
        #[test]
        fn stream_pieces(parts in proptest::collection::vec(
            prop::sample::select(vec![
                " ", "\"", "-", ", ", ",", "TCP", "UDP", "200", "502", "503", "0.001",
                "99999999999999999999", "18446744073709551616", "kv", "open", "backup", "é",
                "1700000000.123", "\r",
            ]), 0..40)) {
            let line: String = parts.concat();
            let _ = parse(&format!("1.000 0.5 {line}"));
            let _ = parse(&line);
        }

        /// A well-formed stream line always parses, to what was written.
        #[test]
        fn stream_round_trip(end in 0u64..10_000_000_000_000, st in 0u64..100_000_000,
                             c in proptest::option::of(0u64..100_000),
                             fb in proptest::option::of(0u64..100_000),
                             tr in proptest::option::of(0u64..100_000_000),
                             sent in 0u64..u64::MAX, udp: bool,
                             up in "[a-z][a-z0-9_.-]{0,20}") {
            let t = |v: Option<u64>| {
                v.map_or("-".to_owned(), |v| format!("{}.{:03}", v / 1000, v % 1000))
            };
            let line = format!(
                "{}.{:03} {}.{:03} {} 200 \"{up}\" \"10.0.0.1:1, 10.0.0.2:2\" \"-, {}\" \"-, {}\" \"1.000, {}\" \"0, {sent}\" \"0, 1\" \"closed\"",
                end / 1000, end % 1000, st / 1000, st % 1000, if udp { "UDP" } else { "TCP" },
                t(c), t(fb), t(tr));
            let l = parse(&line).unwrap();
            let s = l.session.unwrap();
            prop_assert_eq!((l.end_ms, l.request_ms, l.upstream), (end, st, up.as_str()));
            prop_assert_eq!((s.udp, s.connect_ms, s.first_byte_ms, s.try_ms), (udp, c, fb, tr));
            prop_assert_eq!(s.client_sent, sent > 0);
        }

        /// A well-formed line always parses, to what was written.
        #[test]
        fn round_trip(end in 0u64..10_000_000_000_000, rt in 0u64..100_000_000,
                      status in 100u16..600, up in "[a-z][a-z0-9_.-]{0,20}") {
            let line = format!(
                "{}.{:03} {}.{:03} \"{up}\" \"-\" \"10.0.0.1:80\" \"{status}\" \"0.001\" \"0.001\"",
                end / 1000, end % 1000, rt / 1000, rt % 1000);
            let l = parse(&line).unwrap();
            prop_assert_eq!(l.end_ms, end);
            prop_assert_eq!(l.request_ms, rt);
            prop_assert_eq!(l.upstream, up.as_str());
            prop_assert_eq!(l.attempt.map(|a| a.status), Some(status));
        }
    }
}
