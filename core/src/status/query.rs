//! The status location's query string: `format`, `upstream`, `route` and `action`.

/// The output format asked for with `format=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `format=json`.
    Json,
    /// `format=prometheus`.
    Prometheus,
    /// `format=fleet`: the fleet exchange's message, for peers (`crate::fleet::wire`).
    Fleet,
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
}

/// A parsed query string; `None` for each parameter not given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    /// `format=json|prometheus|fleet`.
    pub format: Option<Format>,
    /// `upstream=NAME`: only that upstream's breakers (or, with `action`, the one to change).
    pub upstream: Option<String>,
    /// `route=NAME`: only breakers of that route; `default` is an upstream's own breaker.
    pub route: Option<String>,
    /// `action=force_open|force_close|reset`.
    pub action: Option<Action>,
}

/// The longest parameter text quoted back in an error, in characters.
const QUOTE_MAX: usize = 64;

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
            _ => {
                return Err(format!(
                    "unknown parameter {}",
                    quote(&String::from_utf8_lossy(&name))
                ))
            }
        };
        let given = match name {
            "format" => q.format.is_some(),
            "upstream" => q.upstream.is_some(),
            "route" => q.route.is_some(),
            _ => q.action.is_some(),
        };
        if given {
            return Err(format!("duplicate parameter \"{name}\""));
        }
        let value = percent_decode(raw_value)
            .ok_or_else(|| format!("invalid percent-encoding in \"{name}\""))?;
        let value = String::from_utf8(value).map_err(|_| format!("invalid UTF-8 in \"{name}\""))?;
        let invalid = || format!("invalid value {} for \"{name}\"", quote(&value));
        match name {
            "format" => {
                q.format = Some(match value.as_str() {
                    "json" => Format::Json,
                    "prometheus" => Format::Prometheus,
                    "fleet" => Format::Fleet,
                    _ => return Err(invalid()),
                })
            }
            "action" => {
                q.action = Some(match value.as_str() {
                    "force_open" => Action::ForceOpen,
                    "force_close" => Action::ForceClose,
                    "reset" => Action::Reset,
                    _ => return Err(invalid()),
                })
            }
            _ if value.is_empty() => return Err(format!("empty value for \"{name}\"")),
            "upstream" => q.upstream = Some(value),
            _ => q.route = Some(value),
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

/// Whether to answer in Prometheus text rather than JSON: `format=` decides when given;
/// otherwise an `Accept` header naming `text/plain` and not `application/json` (compared
/// case-insensitively, as Prometheus scrapers send) asks for Prometheus. JSON is the default.
pub fn wants_prometheus(q: &Query, accept: Option<&[u8]>) -> bool {
    match q.format {
        Some(Format::Prometheus) => true,
        Some(Format::Json | Format::Fleet) => false,
        None => accept.is_some_and(|a| {
            contains_ignore_case(a, b"text/plain") && !contains_ignore_case(a, b"application/json")
        }),
    }
}

fn contains_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
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

/// `"text"` with quotes, backslashes and control characters escaped, cut at [`QUOTE_MAX`]
/// characters (marked with `...`), so that an error stays one short line.
fn quote(text: &str) -> String {
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
        }
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
            (b"foo=1", r#"unknown parameter "foo""#),
            (b"foo", r#"unknown parameter "foo""#),
            (b"=x", r#"unknown parameter """#),
            (b"Format=json", r#"unknown parameter "Format""#),
            (b"upstream=a&foo=1", r#"unknown parameter "foo""#),
            (b"fo%22o=1", r#"unknown parameter "fo\"o""#),
            (b"a%0Ab=1", r#"unknown parameter "a\nb""#),
            (b"%ff=1", "unknown parameter \"\u{fffd}\""),
            (b"%zz=1", "invalid percent-encoding in a parameter name"),
            (b"format=xml", r#"invalid value "xml" for "format""#),
            (b"format=", r#"invalid value "" for "format""#),
            (b"format", r#"invalid value "" for "format""#),
            (b"format=JSON", r#"invalid value "JSON" for "format""#),
            (b"action=explode", r#"invalid value "explode" for "action""#),
            (b"action=", r#"invalid value "" for "action""#),
            (
                b"action=force+open",
                r#"invalid value "force open" for "action""#,
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
            err.starts_with(r#"invalid value "x\nx\n"#) && err.ends_with(r#""... for "format""#)
        );
        let err = parse_query(b"a%0D%0Ab%00=1").unwrap_err();
        assert_eq!(err, r#"unknown parameter "a\r\nb\0""#);
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

    #[test]
    fn prometheus_negotiation() {
        let none = Query::default();
        let json = parse_query(b"format=json").unwrap();
        let prom = parse_query(b"format=prometheus").unwrap();
        let scraper: &[u8] = b"application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(!wants_prometheus(&none, None));
        assert!(wants_prometheus(&none, Some(scraper)));
        assert!(wants_prometheus(&none, Some(b"text/plain")));
        assert!(wants_prometheus(&none, Some(b"Text/Plain; charset=utf-8")));
        assert!(!wants_prometheus(&none, Some(b"*/*")));
        assert!(!wants_prometheus(&none, Some(b"")));
        assert!(!wants_prometheus(&none, Some(b"application/json")));
        assert!(!wants_prometheus(
            &none,
            Some(b"application/json, text/plain, */*")
        ));
        assert!(!wants_prometheus(
            &none,
            Some(b"text/html,application/xhtml+xml,*/*;q=0.8")
        ));
        assert!(wants_prometheus(&prom, None));
        assert!(wants_prometheus(&prom, Some(b"application/json")));
        assert!(!wants_prometheus(&json, Some(scraper)));
        // The fleet's format is its own, whatever a scraper accepts.
        let fleet = parse_query(b"format=fleet").unwrap();
        assert!(!wants_prometheus(&fleet, Some(scraper)));
        assert!(!wants_prometheus(&json, Some(b"text/plain")));
    }
}
