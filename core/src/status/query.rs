//! The status location's query string (`format`, `upstream`, `route`, `server` and `action`),
//! and the choice of output format from it and the `Accept` header ([`negotiate`]).

use super::{HTML_CONTENT_TYPE, JSON_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE};

/// An output format: asked for with `format=`, or chosen from `Accept` by [`negotiate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `format=json`, [`JSON_CONTENT_TYPE`]: the default.
    Json,
    /// `format=prometheus`, [`PROMETHEUS_CONTENT_TYPE`].
    Prometheus,
    /// `format=html`, [`HTML_CONTENT_TYPE`]: the live dashboard page (`GET`/`HEAD` only).
    Html,
    /// `format=fleet`: the fleet exchange's message, for peers (`crate::fleet::wire`); only
    /// ever asked for by name, never chosen from `Accept`.
    Fleet,
}

/// The request method, as far as [`negotiate`] cares (the handler refuses the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD`: negotiated as `GET`.
    Head,
    /// `POST`, a control request: its answer is one breaker, never the dashboard page.
    Post,
}

/// A control action asked for with `action=` (`POST` with `control=on` only; the handler
/// decides whether it is allowed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `action=force_open`: short-circuit everything until `reset`.
    ForceOpen,
    /// `action=force_close`: let everything through until `reset`.
    ForceClose,
    /// `action=reset`: drop any forced state and start afresh, closed.
    Reset,
    /// `action=eject` (with `server`): take a server out of its pool until `restore`.
    Eject,
    /// `action=restore` (with `server`): put a server back, with a fresh window.
    Restore,
}

impl Action {
    /// Whether the action is on one server (`eject`, `restore`) rather than a breaker.
    pub fn on_server(self) -> bool {
        matches!(self, Action::Eject | Action::Restore)
    }
}

/// A parsed query string; `None` for each parameter not given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    /// `format=json|prometheus|html|fleet`.
    pub format: Option<Format>,
    /// `upstream=NAME`: only that upstream's breakers (or, with `action`, the one to change).
    pub upstream: Option<String>,
    /// `route=NAME`: only breakers of that route; `default` is an upstream's own breaker.
    pub route: Option<String>,
    /// `action=force_open|force_close|reset|eject|restore`.
    pub action: Option<Action>,
    /// `server=ADDRESS`: the server of `upstream` to `eject` or `restore`.
    pub server: Option<String>,
    /// `history=1`: each breaker's (and server's) last minutes in the JSON
    /// (`crate::history`); `history=0`, the default, none.
    pub history: bool,
    /// `keys=open|all`: which keyed breakers are listed (see [`KeysShown`]).
    pub keys: KeysShown,
    /// `key_prefix=TEXT`: only keyed breakers whose key starts with it.
    pub key_prefix: Option<String>,
    /// `key_limit=N`: at most N keyed breakers listed ([`KEY_LIMIT`] if not given).
    pub key_limit: Option<usize>,
    /// `route` as a keyed breaker's route is written (`crate::keyed::name`): a key may be
    /// given as the page writes it or as it is; `None` when `route` names no key.
    pub route_key: Option<String>,
    /// `proxy=http|stream`: only the http block's breakers, or only the stream module's; with
    /// `action`, which of the two the breaker is (http unless given).
    pub proxy: Option<Proxy>,
}

/// The proxy a breaker serves: nginx's `http {}` or its `stream {}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proxy {
    Http,
    Stream,
}

impl Query {
    /// Whether the http block's breakers are asked for.
    pub fn wants_http(&self) -> bool {
        self.proxy != Some(Proxy::Stream)
    }

    /// Whether the stream module's breakers are asked for.
    pub fn wants_stream(&self) -> bool {
        self.proxy != Some(Proxy::Http)
    }
}

/// Which keyed breakers (`circuit_breaker_key`) the page lists: they come from clients, and
/// may be many.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeysShown {
    /// `keys=open`, the default: open, half-open and forced ones.
    #[default]
    Open,
    /// `keys=all`: closed ones too.
    All,
}

/// Keyed breakers listed when the query gives no `key_limit`.
pub const KEY_LIMIT: usize = 100;

/// The largest `key_limit`.
pub const KEY_LIMIT_MAX: usize = 100_000;

/// Whether `q` lists a keyed breaker of key `key` (the breaker's route) in `state`, `forced`
/// or not, before `key_limit` counts: the page's selection, and what the zone walk copies.
pub fn lists_key(q: &Query, key: &str, state: crate::snapshot::State, forced: bool) -> bool {
    lists_key_state(q, state, forced)
        && q.key_prefix.as_deref().map_or(true, |p| key.starts_with(p))
}

/// [`lists_key`]'s test of the state alone, which needs no name.
pub fn lists_key_state(q: &Query, state: crate::snapshot::State, forced: bool) -> bool {
    q.keys == KeysShown::All || forced || state != crate::snapshot::State::Closed
}

/// A key as given in a query, as the page writes it.
fn written_key(value: &str) -> Option<String> {
    crate::keyed::name::from_shown(value).map(|b| crate::keyed::name::shown(&b))
}

/// The longest parameter text quoted back in an error, in characters.
const QUOTE_MAX: usize = 64;

/// The query's parameters, its formats and its actions, as an error lists them.
const PARAMETERS: [&str; 10] = [
    "format",
    "upstream",
    "route",
    "action",
    "server",
    "history",
    "keys",
    "key_prefix",
    "key_limit",
    "proxy",
];
const PROXIES: [&str; 2] = ["http", "stream"];
const HISTORY: [&str; 2] = ["0", "1"];
const KEYS: [&str; 2] = ["open", "all"];
const FORMATS: [&str; 4] = ["json", "prometheus", "html", "fleet"];
const ACTIONS: [&str; 5] = ["force_open", "force_close", "reset", "eject", "restore"];

/// What would be valid instead of `given`: the list, and the nearest if it is near.
fn expected(given: &str, valid: &[&str]) -> String {
    let list = format!("expected one of: {}", valid.join(", "));
    if given.len() > QUOTE_MAX {
        return list;
    }
    match crate::directive::suggest(&given.to_ascii_lowercase(), valid) {
        Some(near) => format!("did you mean \"{near}\"? {list}"),
        None if valid.contains(&given.to_ascii_lowercase().as_str()) => {
            format!("names are lower case; {list}")
        }
        None => list,
    }
}

/// Parses the raw query string (nginx's `r->args`, without the `?`): `&`-separated
/// `name=value` pairs, percent-encoded, `+` meaning a space. Empty pairs (`a=1&&b=2`, a
/// trailing `&`) are ignored; empty `args` gives all `None`.
///
/// Errors are one line, fit for a `400` body: `unknown parameter "foo"`,
/// `duplicate parameter "upstream"`, `invalid value "xml" for "format"`,
/// `invalid value "explode" for "action"`, `empty value for "upstream"`,
/// `invalid percent-encoding in "upstream"`, `invalid UTF-8 in "route"`,
/// `invalid percent-encoding in a parameter name`. Quoted text is escaped (no raw control
/// characters) and cut at 64 characters.
pub fn parse_query(args: &[u8]) -> Result<Query, String> {
    let mut q = Query::default();
    let mut seen_history = false;
    let mut seen_keys = false;
    for pair in args.split(|&b| b == b'&') {
        if pair.is_empty() {
            continue;
        }
        let (raw_name, raw_value) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &pair[pair.len()..]),
        };
        let name = percent_decode(raw_name)
            .ok_or_else(|| "invalid percent-encoding in a parameter name".to_string())?;
        let name: &'static str = match name.as_slice() {
            b"format" => "format",
            b"upstream" => "upstream",
            b"route" => "route",
            b"action" => "action",
            b"server" => "server",
            b"history" => "history",
            b"keys" => "keys",
            b"key_prefix" => "key_prefix",
            b"key_limit" => "key_limit",
            b"proxy" => "proxy",
            _ => {
                let name = String::from_utf8_lossy(&name);
                return Err(format!(
                    "unknown parameter {}, {}",
                    quote(&name),
                    expected(&name, &PARAMETERS)
                ));
            }
        };
        let given = match name {
            "format" => q.format.is_some(),
            "upstream" => q.upstream.is_some(),
            "route" => q.route.is_some(),
            "server" => q.server.is_some(),
            "history" => seen_history,
            "keys" => seen_keys,
            "key_prefix" => q.key_prefix.is_some(),
            "key_limit" => q.key_limit.is_some(),
            "proxy" => q.proxy.is_some(),
            _ => q.action.is_some(),
        };
        if given {
            return Err(format!("duplicate parameter \"{name}\""));
        }
        let value = percent_decode(raw_value)
            .ok_or_else(|| format!("invalid percent-encoding in \"{name}\""))?;
        let value = String::from_utf8(value).map_err(|_| format!("invalid UTF-8 in \"{name}\""))?;
        let invalid = |valid: &[&str]| {
            format!(
                "invalid value {} for \"{name}\", {}",
                quote(&value),
                expected(&value, valid)
            )
        };
        match name {
            "format" => {
                q.format = Some(match value.as_str() {
                    "json" => Format::Json,
                    "prometheus" => Format::Prometheus,
                    "html" => Format::Html,
                    "fleet" => Format::Fleet,
                    _ => return Err(invalid(&FORMATS)),
                })
            }
            "history" => {
                seen_history = true;
                q.history = match value.as_str() {
                    "1" => true,
                    "0" => false,
                    _ => return Err(invalid(&HISTORY)),
                }
            }
            "action" => {
                q.action = Some(match value.as_str() {
                    "force_open" => Action::ForceOpen,
                    "force_close" => Action::ForceClose,
                    "reset" => Action::Reset,
                    "eject" => Action::Eject,
                    "restore" => Action::Restore,
                    _ => return Err(invalid(&ACTIONS)),
                })
            }
            "proxy" => {
                q.proxy = Some(match value.as_str() {
                    "http" => Proxy::Http,
                    "stream" => Proxy::Stream,
                    _ => return Err(invalid(&PROXIES)),
                })
            }
            "keys" => {
                seen_keys = true;
                q.keys = match value.as_str() {
                    "open" => KeysShown::Open,
                    "all" => KeysShown::All,
                    _ => return Err(invalid(&KEYS)),
                }
            }
            "key_limit" => {
                q.key_limit = Some(
                    value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=KEY_LIMIT_MAX).contains(n))
                        .ok_or_else(|| {
                            format!(
                                "invalid value {} for \"key_limit\", expected a number from 1 \
                                 to {KEY_LIMIT_MAX}",
                                quote(&value)
                            )
                        })?,
                )
            }
            _ if value.is_empty() => return Err(format!("empty value for \"{name}\"")),
            "key_prefix" => {
                q.key_prefix = Some(written_key(&value).ok_or_else(|| {
                    format!(
                        "invalid value {} for \"key_prefix\", a key is written \\xNN for a byte, \
                         with no other backslash",
                        quote(&value)
                    )
                })?)
            }
            "upstream" => q.upstream = Some(value),
            "server" => q.server = Some(value),
            _ => {
                q.route_key = written_key(&value);
                q.route = Some(value);
            }
        }
    }
    Ok(q)
}

/// Whether a breaker passes the query's `upstream` and `route` filters (a filter not given
/// passes everything). `route` is the breaker's route name, `"default"` for an upstream's own
/// breaker, so `route=default` selects those.
pub fn matches(q: &Query, upstream: &str, route: &str) -> bool {
    q.upstream.iter().all(|u| u == upstream) && q.route.iter().all(|r| r == route)
}

/// Chooses the output format as RFC 9110 §12.5.1 says for `Accept`:
///
/// - An explicit `format=` wins over `Accept`. A `POST` (a control request) answers with one
///   breaker, so there `format=html` gives JSON: the page is no answer to an action.
/// - Otherwise every `Accept` field, taken together as one comma-separated list, is matched
///   against what the location serves: [`JSON_CONTENT_TYPE`], [`PROMETHEUS_CONTENT_TYPE`]
///   and, except for a `POST`, [`HTML_CONTENT_TYPE`]. Each format takes the weight (`q`) of the
///   most specific media range that matches it: `type/subtype` with parameters (more is more
///   specific), then without, then `type/*`, then `*/*`; of equally specific ranges the
///   highest weight counts. A range matches only if each of its parameters is one of the
///   format's own (`charset` compared case-insensitively), so `text/plain;version=1.0.0` is
///   not our Prometheus text and `application/openmetrics-text`, which is not served, never
///   selects it. `q=0` means "not acceptable". The highest weight wins; ties go to JSON, then
///   Prometheus, then HTML, so `*/*` gets JSON and a browser's `text/html,…,*/*;q=0.8` the
///   page.
/// - Malformed elements (`text`, `*/plain`, a parameter without `=`, a bad `q`) are skipped,
///   as if absent.
/// - No `Accept`, or one that allows nothing served here, gives JSON rather than `406`: RFC
///   9110 lets a server disregard the header, nginx's own modules do, and an operator's
///   `curl` or a monitoring probe gets an answer it can read instead of an error.
pub fn negotiate(q: &Query, accept: &[&[u8]], method: Method) -> Format {
    let page = method != Method::Post;
    match q.format {
        Some(Format::Html) if !page => Format::Json,
        Some(format) => format,
        None => {
            let ranges: Vec<MediaRange> = accept
                .iter()
                .flat_map(|field| split_unquoted(field, b','))
                .filter_map(MediaRange::parse)
                .collect();
            let offers = [
                (Format::Json, JSON_CONTENT_TYPE),
                (Format::Prometheus, PROMETHEUS_CONTENT_TYPE),
                (Format::Html, HTML_CONTENT_TYPE),
            ];
            let mut best = (Format::Json, 0);
            for (format, content_type) in offers {
                if format == Format::Html && !page {
                    continue;
                }
                let offer = MediaRange::parse(content_type.as_bytes())
                    .expect("our own content types parse");
                let weight = weight(&ranges, &offer);
                if weight > best.1 {
                    best = (format, weight);
                }
            }
            best.0
        }
    }
}

/// One element of `Accept` (or one of our content types): type and subtype in lower case,
/// parameters before the weight (names in lower case, values unquoted), and the weight in
/// thousandths.
#[derive(Debug)]
struct MediaRange {
    kind: Vec<u8>,
    subtype: Vec<u8>,
    params: Vec<(Vec<u8>, Vec<u8>)>,
    q: u16,
}

impl MediaRange {
    /// `type/subtype *( OWS ";" OWS name=value )`, where `q=` ends the media range's own
    /// parameters (what follows it are extensions, ignored). `None` for anything malformed.
    fn parse(element: &[u8]) -> Option<MediaRange> {
        let mut parts = split_unquoted(element, b';').into_iter();
        let range = trim(parts.next()?);
        let slash = range.iter().position(|&b| b == b'/')?;
        let (kind, subtype) = (&range[..slash], &range[slash + 1..]);
        if !is_token(kind) || !is_token(subtype) || (kind == b"*" && subtype != b"*") {
            return None;
        }
        let mut r = MediaRange {
            kind: kind.to_ascii_lowercase(),
            subtype: subtype.to_ascii_lowercase(),
            params: Vec::new(),
            q: 1000,
        };
        for param in parts {
            let param = trim(param);
            if param.is_empty() {
                continue;
            }
            let eq = param.iter().position(|&b| b == b'=')?;
            let (name, value) = (trim(&param[..eq]), trim(&param[eq + 1..]));
            if !is_token(name) {
                return None;
            }
            if name.eq_ignore_ascii_case(b"q") {
                r.q = qvalue(value)?;
                break;
            }
            r.params.push((name.to_ascii_lowercase(), unquote(value)?));
        }
        Some(r)
    }

    /// `*/*` 0, `type/*` 1, `type/subtype` 2, plus one per parameter.
    fn specificity(&self) -> usize {
        match (self.kind.as_slice(), self.subtype.as_slice()) {
            (b"*", _) => 0,
            (_, b"*") => 1,
            _ => 2 + self.params.len(),
        }
    }

    fn matches(&self, offer: &MediaRange) -> bool {
        (self.kind == b"*" || self.kind == offer.kind)
            && (self.subtype == b"*" || self.subtype == offer.subtype)
            && self.params.iter().all(|(name, value)| {
                offer.params.iter().any(|(n, v)| {
                    n == name
                        && match name.as_slice() {
                            b"charset" => v.eq_ignore_ascii_case(value),
                            _ => v == value,
                        }
                })
            })
    }
}

/// The weight `ranges` give `offer`, in thousandths: that of the most specific range that
/// matches it (the highest of equally specific ones), 0 when none does.
fn weight(ranges: &[MediaRange], offer: &MediaRange) -> u16 {
    ranges
        .iter()
        .filter(|r| r.matches(offer))
        .map(|r| (r.specificity(), r.q))
        .max()
        .map_or(0, |(_, q)| q)
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths.
fn qvalue(v: &[u8]) -> Option<u16> {
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (&v[..dot], &v[dot + 1..]),
        None => (v, &v[v.len()..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let thousandths = frac
        .iter()
        .chain(std::iter::repeat(&b'0'))
        .take(3)
        .fold(0, |n, &d| n * 10 + u16::from(d - b'0'));
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Splits at `sep` outside quoted strings (`"a,b"`, with `\"` escapes inside).
fn split_unquoted(s: &[u8], sep: u8) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, &b) in s.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if b == sep && !quoted {
            parts.push(&s[start..i]);
            start = i + 1;
        }
    }
    parts.push(&s[start..]);
    parts
}

/// Strips HTTP's optional whitespace (spaces and tabs) from both ends.
fn trim(s: &[u8]) -> &[u8] {
    let ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = s.iter().position(|b| !ows(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !ows(b)).map_or(start, |i| i + 1);
    &s[start..end]
}

/// A parameter value: a token, or a quoted string with its escapes undone.
fn unquote(v: &[u8]) -> Option<Vec<u8>> {
    match v {
        [b'"', inner @ .., b'"'] => {
            let mut out = Vec::with_capacity(inner.len());
            let mut it = inner.iter();
            while let Some(&b) = it.next() {
                match b {
                    b'\\' => out.push(*it.next()?),
                    b'"' => return None,
                    _ => out.push(b),
                }
            }
            Some(out)
        }
        _ if is_token(v) => Some(v.to_vec()),
        _ => None,
    }
}

/// RFC 9110's `token`: one or more `tchar`.
fn is_token(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Decodes `%XX` escapes and `+`; `None` on a `%` not followed by two hex digits.
fn percent_decode(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'%' => {
                let hi = hex(*raw.get(i + 1)?)?;
                let lo = hex(*raw.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(out)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `"text"` with quotes, backslashes and control characters escaped, cut at `QUOTE_MAX`
/// characters (marked with `...`), so that an error stays one short line.
pub fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_MAX) {
        Some((cut, _)) => format!("{:?}...", &text[..cut]),
        None => format!("{text:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(
        format: Option<Format>,
        upstream: Option<&str>,
        route: Option<&str>,
        action: Option<Action>,
    ) -> Query {
        Query {
            format,
            upstream: upstream.map(String::from),
            route: route.map(String::from),
            action,
            server: None,
            history: false,
            route_key: route.and_then(written_key),
            ..Query::default()
        }
    }

    #[test]
    fn keys_are_listed_open_by_default_and_all_on_request() {
        use crate::snapshot::State::{Closed, HalfOpen, Open};
        let d = parse_query(b"").unwrap();
        assert_eq!(
            (d.keys, d.key_prefix.clone(), d.key_limit),
            (KeysShown::Open, None, None)
        );
        assert!(lists_key(&d, "acme", Open, false) && lists_key(&d, "acme", HalfOpen, false));
        assert!(!lists_key(&d, "acme", Closed, false));
        assert!(
            lists_key(&d, "acme", Closed, true),
            "a forced close is listed"
        );
        let all = parse_query(b"keys=all&key_prefix=ac&key_limit=5").unwrap();
        assert_eq!(all.key_limit, Some(5));
        assert!(lists_key(&all, "acme", Closed, false));
        assert!(
            !lists_key(&all, "globex", Open, false),
            "outside the prefix"
        );
        let err = |a: &[u8]| parse_query(a).unwrap_err();
        assert_eq!(
            err(b"keys=some"),
            r#"invalid value "some" for "keys", expected one of: open, all"#
        );
        for bad in [
            &b"key_limit=0"[..],
            b"key_limit=100001",
            b"key_limit=-1",
            b"key_limit=x",
        ] {
            assert!(
                err(bad).contains("expected a number from 1 to 100000"),
                "{bad:?}"
            );
        }
        assert_eq!(err(b"key_prefix="), r#"empty value for "key_prefix""#);
        assert_eq!(err(b"keys=all&keys=open"), r#"duplicate parameter "keys""#);
        assert_eq!(
            err(b"key_limit=1&key_limit=2"),
            r#"duplicate parameter "key_limit""#
        );
        assert!(err(b"key_limt=3").contains(r#"did you mean "key_limit"?"#));
        // A key as the page writes it, or as it is, names the same key.
        let raw = parse_query("key_prefix=caf%C3%A9&route=t%5Cxffz".as_bytes()).unwrap();
        assert_eq!(raw.key_prefix.as_deref(), Some("caf\\xc3\\xa9"));
        assert_eq!(raw.route_key.as_deref(), Some("t\\xffz"));
        assert!(err(b"key_prefix=a%5Cq").contains("no other backslash"));
    }

    #[test]
    fn history_is_asked_for_with_1() {
        assert!(parse_query(b"format=json&history=1").unwrap().history);
        assert!(!parse_query(b"history=0").unwrap().history);
        assert!(!parse_query(b"format=json").unwrap().history);
        assert_eq!(
            parse_query(b"history=yes").unwrap_err(),
            r#"invalid value "yes" for "history", expected one of: 0, 1"#
        );
        assert_eq!(
            parse_query(b"history=0&history=1").unwrap_err(),
            r#"duplicate parameter "history""#
        );
    }

    #[test]
    fn server_actions() {
        let e = parse_query(b"upstream=api&action=eject&server=10.0.0.1%3A8080").unwrap();
        assert_eq!(e.action, Some(Action::Eject));
        assert_eq!(e.server.as_deref(), Some("10.0.0.1:8080"));
        assert!(e.action.unwrap().on_server());
        let r = parse_query(b"action=restore&server=[::1]:80&upstream=api").unwrap();
        assert_eq!(
            (r.action, r.server.as_deref()),
            (Some(Action::Restore), Some("[::1]:80"))
        );
        assert!(!Action::Reset.on_server());
        assert_eq!(
            parse_query(b"server=a&server=b").unwrap_err(),
            r#"duplicate parameter "server""#
        );
        assert_eq!(
            parse_query(b"server=").unwrap_err(),
            r#"empty value for "server""#
        );
    }

    #[test]
    fn proxy_selects_either_proxy() {
        let p = |args: &[u8]| parse_query(args).unwrap();
        assert!(p(b"").wants_http() && p(b"").wants_stream());
        assert_eq!(p(b"proxy=stream").proxy, Some(Proxy::Stream));
        assert!(!p(b"proxy=stream").wants_http() && p(b"proxy=stream").wants_stream());
        assert!(p(b"proxy=http").wants_http() && !p(b"proxy=http").wants_stream());
    }

    #[test]
    fn good_queries() {
        use Action::*;
        use Format::*;
        let cases: &[(&[u8], Query)] = &[
            (b"", Query::default()),
            (b"&", Query::default()),
            (b"&&", Query::default()),
            (b"format=json", q(Some(Json), None, None, None)),
            (b"format=prometheus", q(Some(Prometheus), None, None, None)),
            (b"format=fleet", q(Some(Fleet), None, None, None)),
            (b"upstream=api", q(None, Some("api"), None, None)),
            (b"route=default", q(None, None, Some("default"), None)),
            (
                b"upstream=api&route=checkout&action=force_open",
                q(None, Some("api"), Some("checkout"), Some(ForceOpen)),
            ),
            (
                b"action=force_close&route=default&upstream=api",
                q(None, Some("api"), Some("default"), Some(ForceClose)),
            ),
            (b"action=reset", q(None, None, None, Some(Reset))),
            (
                b"format=prometheus&upstream=a&route=b&action=reset",
                q(Some(Prometheus), Some("a"), Some("b"), Some(Reset)),
            ),
            (b"&upstream=api&&", q(None, Some("api"), None, None)),
            (b"upstream=my+api", q(None, Some("my api"), None, None)),
            (b"upstream=a%2Bb", q(None, Some("a+b"), None, None)),
            (b"upstream=a%26b%3Dc", q(None, Some("a&b=c"), None, None)),
            (
                b"upstream=%c3%a9%F0%9F%92%A5",
                q(None, Some("é💥"), None, None),
            ),
            (b"upstream=a=b", q(None, Some("a=b"), None, None)),
            (b"upstream=a%0Ab", q(None, Some("a\nb"), None, None)),
            (
                b"upstream=unix:/tmp/s.sock",
                q(None, Some("unix:/tmp/s.sock"), None, None),
            ),
            (b"%66ormat=%6Ason", q(Some(Json), None, None, None)),
            (b"route=%22", q(None, None, Some("\""), None)),
        ];
        for (args, want) in cases {
            assert_eq!(
                parse_query(args).as_ref(),
                Ok(want),
                "{}",
                String::from_utf8_lossy(args)
            );
        }
    }

    #[test]
    fn bad_queries() {
        let cases: &[(&[u8], &str)] = &[
            (b"proxy=tcp", r#"invalid value "tcp" for "proxy", expected one of: http, stream"#),
            (b"proxy=Stream", r#"invalid value "Stream" for "proxy", names are lower case; expected one of: http, stream"#),
            (b"proxy=http&proxy=stream", r#"duplicate parameter "proxy""#),
            (b"foo=1", r#"unknown parameter "foo", expected one of: format, upstream, route, action, server, history, keys, key_prefix, key_limit, proxy"#),
            (b"foo", r#"unknown parameter "foo", expected one of: format, upstream, route, action, server, history, keys, key_prefix, key_limit, proxy"#),
            (b"=x", r#"unknown parameter "", expected one of: format, upstream, route, action, server, history, keys, key_prefix, key_limit, proxy"#),
            (b"Format=json", r#"unknown parameter "Format", names are lower case; expected one of: format, upstream, route, action, server, history, keys, key_prefix, key_limit, proxy"#),
            (b"upstream=a&foo=1", r#"unknown parameter "foo", expected one of: format, upstream, route, action, server, history, keys, key_prefix, key_limit, proxy"#),
            (b"fo%22o=1", r#"unknown parameter "fo\"o", expected one of: format, upstream, route, action, server, history, keys, key_prefix, key_limit, proxy"#),
            (b"a%0Ab=1", r#"unknown parameter "a\nb", expected one of: format, upstream, route, action, server, history, keys, key_prefix, key_limit, proxy"#),
            (b"%ff=1", "unknown parameter \"\u{fffd}\", expected one of: format, upstream, route, action, server, history, keys, key_prefix, key_limit, proxy"),
            (b"%zz=1", "invalid percent-encoding in a parameter name"),
            (b"format=xml", r#"invalid value "xml" for "format", expected one of: json, prometheus, html, fleet"#),
            (b"format=", r#"invalid value "" for "format", expected one of: json, prometheus, html, fleet"#),
            (b"format", r#"invalid value "" for "format", expected one of: json, prometheus, html, fleet"#),
            (b"format=JSON", r#"invalid value "JSON" for "format", names are lower case; expected one of: json, prometheus, html, fleet"#),
            (b"action=explode", r#"invalid value "explode" for "action", expected one of: force_open, force_close, reset, eject, restore"#),
            (b"action=", r#"invalid value "" for "action", expected one of: force_open, force_close, reset, eject, restore"#),
            (b"action=rest", r#"invalid value "rest" for "action", did you mean "reset"? expected one of: force_open, force_close, reset, eject, restore"#),
            (b"format=promethus", r#"invalid value "promethus" for "format", did you mean "prometheus"? expected one of: json, prometheus, html, fleet"#),
            (b"acton=reset", r#"unknown parameter "acton", did you mean "action"? expected one of: format, upstream, route, action, server, history, keys, key_prefix, key_limit, proxy"#),
            (
                b"action=force+open",
                r#"invalid value "force open" for "action", did you mean "force_open"? expected one of: force_open, force_close, reset, eject, restore"#,
            ),
            (
                b"format=json&format=json",
                r#"duplicate parameter "format""#,
            ),
            (
                b"upstream=a&upstream=b",
                r#"duplicate parameter "upstream""#,
            ),
            (b"route=a&route=a", r#"duplicate parameter "route""#),
            (
                b"action=reset&action=reset",
                r#"duplicate parameter "action""#,
            ),
            (b"upstream=", r#"empty value for "upstream""#),
            (b"upstream", r#"empty value for "upstream""#),
            (b"route=", r#"empty value for "route""#),
            (
                b"upstream=a%zzb",
                r#"invalid percent-encoding in "upstream""#,
            ),
            (b"upstream=a%", r#"invalid percent-encoding in "upstream""#),
            (b"route=a%4", r#"invalid percent-encoding in "route""#),
            (b"format=%g0", r#"invalid percent-encoding in "format""#),
            (b"upstream=%ff", r#"invalid UTF-8 in "upstream""#),
            (b"route=%c3", r#"invalid UTF-8 in "route""#),
        ];
        for (args, want) in cases {
            assert_eq!(
                parse_query(args),
                Err(want.to_string()),
                "{}",
                String::from_utf8_lossy(args)
            );
        }
    }

    #[test]
    fn errors_are_one_short_line() {
        let long = format!("format={}", "x\n".repeat(1000));
        let err = parse_query(long.as_bytes()).unwrap_err();
        assert!(!err.contains('\n') && err.len() < 200, "{err}");
        assert!(
            err.starts_with(r#"invalid value "x\nx\n"#)
                && err.ends_with(
                    r#""... for "format", expected one of: json, prometheus, html, fleet"#
                )
        );
        let err = parse_query(b"a%0D%0Ab%00=1").unwrap_err();
        assert_eq!(
            err,
            r#"unknown parameter "a\r\nb\0", expected one of: format, upstream, route, action, server, history, keys, key_prefix, key_limit, proxy"#
        );
    }

    #[test]
    fn filters() {
        let all = Query::default();
        assert!(matches(&all, "api", "default"));
        assert!(matches(&all, "api", "checkout"));
        let api = parse_query(b"upstream=api").unwrap();
        assert!(matches(&api, "api", "default"));
        assert!(matches(&api, "api", "checkout"));
        assert!(!matches(&api, "apis", "default"));
        assert!(!matches(&api, "API", "default"));
        let own = parse_query(b"route=default").unwrap();
        assert!(matches(&own, "api", "default"));
        assert!(matches(&own, "web", "default"));
        assert!(!matches(&own, "api", "checkout"));
        let one = parse_query(b"upstream=api&route=checkout").unwrap();
        assert!(matches(&one, "api", "checkout"));
        assert!(!matches(&one, "api", "default"));
        assert!(!matches(&one, "web", "checkout"));
    }

    /// [`negotiate`] for a `GET` without `format=`, one `Accept` field.
    fn accept(value: &str) -> Format {
        negotiate(&Query::default(), &[value.as_bytes()], Method::Get)
    }

    #[test]
    fn the_fleet_format_is_only_asked_for_by_name() {
        let fleet = parse_query(b"format=fleet").unwrap();
        for method in [Method::Get, Method::Head, Method::Post] {
            assert_eq!(negotiate(&fleet, &[b"text/html"], method), Format::Fleet);
        }
        for value in ["*/*", "text/plain", "text/*", "application/json"] {
            assert_ne!(accept(value), Format::Fleet, "Accept: {value}");
        }
    }

    #[test]
    fn negotiation_without_accept_is_json() {
        for method in [Method::Get, Method::Head, Method::Post] {
            assert_eq!(negotiate(&Query::default(), &[], method), Format::Json);
        }
    }

    #[test]
    fn negotiation_picks_what_is_asked_for() {
        use Format::*;
        let prometheus_2 = "text/plain;version=0.0.4;q=1,*/*;q=0.1";
        let prometheus_2_om = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let prometheus_3 = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        let firefox = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
        let chrome = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7";
        let cases: &[(&str, Format)] = &[
            ("*/*", Json),
            ("", Json),
            (" , ,", Json),
            ("application/json", Json),
            ("application/*", Json),
            ("Application/JSON", Json),
            ("text/plain", Prometheus),
            ("TEXT/PLAIN", Prometheus),
            ("text/plain; charset=UTF-8", Prometheus),
            ("text/plain;version=0.0.4", Prometheus),
            ("text/plain;version=\"0.0.4\"", Prometheus),
            ("text/plain ; version=0.0.4 ; charset=utf-8", Prometheus),
            ("\ttext/plain\t;\tq=0.5\t", Prometheus),
            (prometheus_2, Prometheus),
            (prometheus_2_om, Prometheus),
            (prometheus_3, Prometheus),
            ("text/html", Html),
            ("text/html; charset=utf-8", Html),
            (firefox, Html),
            (chrome, Html),
            // Equal weights: JSON, then Prometheus, then HTML.
            ("application/json, text/plain, */*", Json),
            ("text/plain, application/json", Json),
            ("text/html, text/plain", Prometheus),
            ("text/*", Prometheus),
            (
                "text/html;q=0.5, text/plain;q=0.5, application/json;q=0.5",
                Json,
            ),
            // Higher weight wins.
            ("application/json;q=0.5, text/plain;q=0.6", Prometheus),
            ("application/json;q=0.9, text/html", Html),
            ("text/plain;q=0.001, */*;q=0", Prometheus),
            ("text/html;q=0.3, */*;q=0.2", Html),
        ];
        for (value, want) in cases {
            assert_eq!(accept(value), *want, "Accept: {value}");
        }
    }

    #[test]
    fn negotiation_is_not_a_substring_match() {
        use Format::*;
        for (value, want) in [
            ("text/plainx", Json),
            ("text/plain+x", Json),
            ("xtext/plain", Json),
            ("text/html5", Json),
            ("application/jsonx, text/plain", Prometheus),
            ("application/openmetrics-text", Json),
            ("application/openmetrics-text;version=1.0.0", Json),
            ("text/plain;version=1.0.0", Json),
            ("text/plain;version=1.0.0;escaping=allow-utf-8", Json),
            ("text/plain;charset=iso-8859-1", Json),
            ("text/plain;format=flowed", Json),
            ("text/html;level=1", Json),
            ("image/png", Json),
        ] {
            assert_eq!(accept(value), want, "Accept: {value}");
        }
    }

    #[test]
    fn negotiation_q_zero_is_not_acceptable() {
        use Format::*;
        for (value, want) in [
            ("text/plain;q=0", Json),
            ("text/plain;q=0.000", Json),
            ("text/plain;Q=0", Json),
            ("text/plain;q=0.", Json),
            ("text/plain;q=0, */*", Json),
            ("text/html;q=0", Json),
            ("text/html;q=0, text/plain;q=0.1", Prometheus),
            ("*/*;q=0", Json),
            ("*/*;q=0, text/html", Html),
            ("application/json;q=0, */*", Prometheus),
            ("application/json;q=0, text/plain;q=0, */*", Html),
            ("application/json;q=0, text/*;q=0", Json),
        ] {
            assert_eq!(accept(value), want, "Accept: {value}");
        }
    }

    #[test]
    fn negotiation_most_specific_range_wins() {
        use Format::*;
        for (value, want) in [
            // A range with parameters beats one without, which beats type/*, then */*.
            ("text/plain;q=0, text/plain;version=0.0.4", Prometheus),
            ("text/plain;version=0.0.4;q=0, text/plain", Json),
            (
                "text/plain;version=0.0.4;q=0.1, text/plain;q=1, application/json;q=0.5",
                Json,
            ),
            (
                "text/plain;version=0.0.4;charset=utf-8;q=0.9, text/plain;version=0.0.4;q=0",
                Prometheus,
            ),
            ("text/*;q=0, text/plain", Prometheus),
            ("text/plain, text/*;q=0", Prometheus),
            ("*/*, text/*;q=0", Json),
            ("text/html, text/*;q=0", Html),
            ("*/*;q=0.1, application/*;q=0", Prometheus),
            ("application/*;q=0.2, */*;q=0.9", Prometheus),
            // Equally specific: the highest weight counts.
            (
                "text/plain;q=0.2, text/plain;q=0.8, application/json;q=0.5",
                Prometheus,
            ),
            ("text/plain, text/plain;q=0", Prometheus),
            // Parameters after q are extensions, not part of the range.
            ("text/plain;q=0.5;version=1.0.0", Prometheus),
        ] {
            assert_eq!(accept(value), want, "Accept: {value}");
        }
    }

    #[test]
    fn negotiation_skips_malformed_elements() {
        use Format::*;
        for (value, want) in [
            ("text", Json),
            ("*/plain", Json),
            ("/plain", Json),
            ("text/", Json),
            ("text/plain/x", Json),
            ("te xt/plain", Json),
            ("text/plain;foo", Json),
            ("text/plain;=1", Json),
            ("text/plain;q=2", Json),
            ("text/plain;q=1.5", Json),
            ("text/plain;q=1.001", Json),
            ("text/plain;q=0.5000", Json),
            ("text/plain;q=.5", Json),
            ("text/plain;q=", Json),
            ("text/plain;q=-0", Json),
            ("text/plain;q=0x1", Json),
            ("text/plain;version=\"0.0.4", Json),
            ("text/plain;version=a\"b", Json),
            ("garbage, text/plain;q=2, text/html;q=0.4, */*;q=0.3", Html),
            ("text/plain;q=1.000", Prometheus),
            ("text/plain;q=1.", Prometheus),
            ("text/plain;;q=0.7;", Prometheus),
            ("text/plain;version=\"0.0.\\4\"", Prometheus),
        ] {
            assert_eq!(accept(value), want, "Accept: {value}");
        }
        // A comma inside a quoted string does not end the element.
        assert_eq!(
            accept("application/json;q=0.5;ext=\"a, text/plain;q=1, b\""),
            Json
        );
    }

    #[test]
    fn negotiation_reads_every_accept_field() {
        use Format::*;
        let none = Query::default();
        let fields = |values: &[&'static str]| -> Vec<&'static [u8]> {
            values.iter().map(|v| v.as_bytes()).collect()
        };
        for (values, want) in [
            (&["application/json;q=0.1", "text/plain"][..], Prometheus),
            (&["text/plain;q=0", "application/json"], Json),
            (&["application/json", "text/plain;q=0"], Json),
            (&["", "text/plain"], Prometheus),
            (&["text/plain", ""], Prometheus),
            (&["*/*;q=0.1", "text/html", "text/plain;q=0.9"], Html),
            (&["text/*;q=0", "text/plain"], Prometheus),
            (&["text/plain, */*;q=0.1", "text/plain;q=0"], Prometheus),
        ] {
            assert_eq!(
                negotiate(&none, &fields(values), Method::Get),
                want,
                "Accept: {values:?}"
            );
        }
    }

    #[test]
    fn negotiation_explicit_format_wins() {
        use Format::*;
        let format = |f: &str| parse_query(format!("format={f}").as_bytes()).unwrap();
        let (json, prom, html) = (format("json"), format("prometheus"), format("html"));
        let all: &[&[u8]] = &[
            b"text/plain",
            b"application/json",
            b"text/html",
            b"*/*;q=0",
            b"application/openmetrics-text",
        ];
        for method in [Method::Get, Method::Head, Method::Post] {
            for a in all {
                let a = &[*a][..];
                assert_eq!(negotiate(&json, a, method), Json);
                assert_eq!(negotiate(&prom, a, method), Prometheus);
                let page = if method == Method::Post { Json } else { Html };
                assert_eq!(negotiate(&html, a, method), page);
            }
            assert_eq!(negotiate(&prom, &[], method), Prometheus);
        }
    }

    #[test]
    fn negotiation_for_a_control_post() {
        use Format::*;
        let none = Query::default();
        let post = |value: &str| negotiate(&none, &[value.as_bytes()], Method::Post);
        assert_eq!(post("*/*"), Json);
        assert_eq!(post("text/plain"), Prometheus);
        // The page is never the answer to an action: a browser's form post gets JSON.
        assert_eq!(post("text/html"), Json);
        assert_eq!(
            post("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
            Json
        );
        assert_eq!(post("text/html, text/plain;q=0.1"), Prometheus);
        // HEAD is negotiated as GET.
        let head = negotiate(&none, &[b"text/html".as_slice()], Method::Head);
        assert_eq!(head, Html);
    }

    #[test]
    fn negotiation_offers_our_own_content_types() {
        for (ct, want) in [
            (JSON_CONTENT_TYPE, Format::Json),
            (PROMETHEUS_CONTENT_TYPE, Format::Prometheus),
            (HTML_CONTENT_TYPE, Format::Html),
        ] {
            assert_eq!(accept(ct), want, "{ct}");
        }
        assert_eq!(
            parse_query(b"format=html").unwrap().format,
            Some(Format::Html)
        );
    }
}
