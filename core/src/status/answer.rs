//! What the status location answers a request, decided before anything is read from the
//! zone: a refusal, the page, the fleet's message, the breakers in a format, or control's
//! answer. The handler gathers the method, the location's `control` and the request's query
//! and `Accept`, and matches on the [`Answer`].

use super::query::{negotiate, parse_query, Format, Method, Query};

/// What the status location answers a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `405`, with `allow` as the `Allow` header (RFC 9110 §15.5.6) and `reason` as the body.
    NotAllowed {
        allow: &'static str,
        reason: &'static str,
    },
    /// `400`, with this line as the body.
    BadRequest(String),
    /// A `POST` to a location with `control=on`: a change to one breaker or server, answered
    /// in this format once [`super::guard::check_control`] lets it through.
    Control(Format, Query),
    /// The dashboard page ([`super::DASHBOARD_HTML`]).
    Dashboard(Query),
    /// `format=fleet`: the fleet exchange's message for peers.
    Fleet(Query),
    /// Every breaker the query selects, as JSON or Prometheus text.
    Data(Format, Query),
}

/// Decides what to answer. `method` is `None` for a method other than `GET`, `HEAD` and
/// `POST`; `control` says whether the location has `control=on`; `args` is the raw query
/// string and `accept` every `Accept` field's value. The method is judged before the query is
/// read, so a refused method is refused whatever its query.
pub fn answer(method: Option<Method>, control: bool, args: &[u8], accept: &[&[u8]]) -> Answer {
    let method = match method {
        Some(Method::Post) if !control => None,
        m => m,
    };
    let Some(method) = method else {
        return not_allowed(control);
    };
    let query = match parse_query(args) {
        Ok(q) => q,
        Err(reason) => return Answer::BadRequest(reason),
    };
    let format = negotiate(&query, accept, method);
    if method == Method::Post {
        return Answer::Control(format, query);
    }
    if query.action.is_some() {
        return Answer::BadRequest(
            "\"action\" needs a POST request to a location with \"control=on\"".to_owned(),
        );
    }
    match format {
        Format::Html => Answer::Dashboard(query),
        Format::Fleet => Answer::Fleet(query),
        _ => Answer::Data(format, query),
    }
}

/// The `405` for a location with or without `control=on`: what it does answer.
fn not_allowed(control: bool) -> Answer {
    if control {
        Answer::NotAllowed {
            allow: "GET, HEAD, POST",
            reason: "the status location answers GET and HEAD, and POST for control",
        }
    } else {
        Answer::NotAllowed {
            allow: "GET, HEAD",
            reason: "the status location answers GET and HEAD (POST needs \"control=on\")",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Method::{Get, Head, Post};

    const READ_ONLY: Answer = Answer::NotAllowed {
        allow: "GET, HEAD",
        reason: "the status location answers GET and HEAD (POST needs \"control=on\")",
    };
    const WITH_CONTROL: Answer = Answer::NotAllowed {
        allow: "GET, HEAD, POST",
        reason: "the status location answers GET and HEAD, and POST for control",
    };

    fn query(args: &str) -> Query {
        parse_query(args.as_bytes()).unwrap()
    }

    #[test]
    fn other_methods_are_not_allowed_whatever_the_query() {
        for args in [&b""[..], b"format=json", b"nonsense=1"] {
            assert_eq!(answer(None, false, args, &[]), READ_ONLY);
            assert_eq!(answer(None, true, args, &[]), WITH_CONTROL);
            // A POST is a method like any other where control is off.
            assert_eq!(answer(Some(Post), false, args, &[]), READ_ONLY);
        }
    }

    #[test]
    fn a_bad_query_is_a_bad_request_for_every_allowed_method() {
        let want = Answer::BadRequest(
            "unknown parameter \"foo\", expected one of: format, upstream, route, action, \
             server, history, keys, key_prefix, key_limit, proxy"
                .to_owned(),
        );
        for (method, control) in [(Get, false), (Head, false), (Get, true), (Post, true)] {
            assert_eq!(answer(Some(method), control, b"foo=1", &[]), want);
        }
    }

    #[test]
    fn a_post_with_control_on_is_control_in_the_negotiated_format() {
        let args = b"upstream=api&action=reset";
        let q = query("upstream=api&action=reset");
        assert_eq!(
            answer(Some(Post), true, args, &[]),
            Answer::Control(Format::Json, q.clone())
        );
        assert_eq!(
            answer(Some(Post), true, args, &[b"text/plain"]),
            Answer::Control(Format::Prometheus, q.clone())
        );
        // The page is no answer to an action.
        assert_eq!(
            answer(Some(Post), true, args, &[b"text/html"]),
            Answer::Control(Format::Json, q)
        );
        // Missing parameters are control's to refuse, after the guard.
        assert_eq!(
            answer(Some(Post), true, b"", &[]),
            Answer::Control(Format::Json, Query::default())
        );
    }

    #[test]
    fn an_action_needs_a_post() {
        let want = Answer::BadRequest(
            "\"action\" needs a POST request to a location with \"control=on\"".to_owned(),
        );
        for (method, control) in [(Get, false), (Head, false), (Get, true), (Head, true)] {
            for args in [
                &b"upstream=api&action=reset"[..],
                b"format=html&action=eject",
            ] {
                assert_eq!(answer(Some(method), control, args, &[]), want);
            }
        }
    }

    #[test]
    fn the_page_the_fleet_and_the_data() {
        for method in [Get, Head] {
            for control in [false, true] {
                let r = |args: &str, accept: &[&[u8]]| {
                    answer(Some(method), control, args.as_bytes(), accept)
                };
                assert_eq!(
                    r("format=html", &[]),
                    Answer::Dashboard(query("format=html"))
                );
                assert_eq!(r("", &[b"text/html"]), Answer::Dashboard(Query::default()));
                assert_eq!(
                    r("format=fleet", &[b"text/html"]),
                    Answer::Fleet(query("format=fleet"))
                );
                assert_eq!(r("", &[]), Answer::Data(Format::Json, Query::default()));
                assert_eq!(
                    r("", &[b"text/plain"]),
                    Answer::Data(Format::Prometheus, Query::default())
                );
                assert_eq!(
                    r("format=prometheus&upstream=api&history=1", &[b"text/html"]),
                    Answer::Data(
                        Format::Prometheus,
                        query("format=prometheus&upstream=api&history=1")
                    )
                );
            }
        }
    }
}
