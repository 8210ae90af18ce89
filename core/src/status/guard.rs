//! Who may change a breaker: a control request (`POST` with `action=`) is refused unless it
//! carries [`CONTROL_HEADER`] and nothing in it says it was sent by another site's page.
//!
//! A browser sends an operator's credentials (`auth_basic`, a client certificate, its own
//! address for `allow`/`deny`) with every request, whichever page made it; what another
//! site's page cannot make a browser send is a header of its own choosing: a form sends
//! none, `fetch(…, {mode: "no-cors"})` drops it, and a CORS request with it needs a preflight
//! (`OPTIONS`) that the status location refuses. So a request with [`CONTROL_HEADER`] comes
//! from this location's own page or from a client that is not a browser (`curl`, scripts).
//! Browsers also say where a request comes from (`Sec-Fetch-Site`, `Origin`); a request that
//! says "another site" is refused even with the header, in case a browser bug or a proxy
//! let one through.

use super::query::quote;

/// The request header a control request must carry, with the value [`CONTROL_VALUE`].
pub const CONTROL_HEADER: &str = "X-Circuit-Breaker-Control";

/// The value [`CONTROL_HEADER`] must have.
pub const CONTROL_VALUE: &str = "1";

/// What of a control request decides whether it may change a breaker. Each list holds every
/// value of that header in the request (usually one, or none).
#[derive(Clone, Copy, Debug, Default)]
pub struct ControlRequest<'a> {
    /// [`CONTROL_HEADER`]'s values.
    pub marker: &'a [&'a [u8]],
    /// `Origin`'s values.
    pub origin: &'a [&'a [u8]],
    /// `Sec-Fetch-Site`'s values.
    pub sec_fetch_site: &'a [&'a [u8]],
    /// The `Host` header's value, if any: the request's own authority (`host[:port]`).
    pub host: Option<&'a [u8]>,
    /// The request came over TLS to nginx (its own origin is `https://`).
    pub tls: bool,
}

/// Checks a control request. `Err` is the reason for the `403`, one line, with every value
/// the client sent quoted and cut.
///
/// - every `Sec-Fetch-Site` must be `same-origin` (or `none`, a user's own navigation):
///   `cross-site` and `same-site` are another site's page;
/// - every `Origin` must be the request's own: `http://` or `https://` and the `Host` header
///   (host names compared case-insensitively, a default port the same as none). An
///   `https://` origin of a plain request is the request's own too (TLS ended in front of
///   nginx, on the same authority); an `http://` origin of a TLS request is not;
///   `Origin: null` never is;
/// - [`CONTROL_HEADER`] must be there, every value [`CONTROL_VALUE`].
pub fn check_control(req: &ControlRequest<'_>) -> Result<(), String> {
    for site in req.sec_fetch_site {
        let site = trim(site);
        if !(site.eq_ignore_ascii_case(b"same-origin") || site.eq_ignore_ascii_case(b"none")) {
            return Err(format!(
                "control refused: \"Sec-Fetch-Site: {}\" is not this location's own page",
                unquoted(site)
            ));
        }
    }
    for origin in req.origin {
        let origin = trim(origin);
        if !same_origin(origin, req.host, req.tls) {
            return Err(format!(
                "control refused: \"Origin: {}\" is not this location's own origin",
                unquoted(origin)
            ));
        }
    }
    let marked = !req.marker.is_empty()
        && req
            .marker
            .iter()
            .all(|v| trim(v) == CONTROL_VALUE.as_bytes());
    if !marked {
        return Err(format!(
            "control needs the request header \"{CONTROL_HEADER}: {CONTROL_VALUE}\""
        ));
    }
    Ok(())
}

/// Whether `origin` (`scheme "://" host [":" port]`) is the request's own.
fn same_origin(origin: &[u8], host: Option<&[u8]>, tls: bool) -> bool {
    let Some(host) = host.map(trim).filter(|h| !h.is_empty()) else {
        return false;
    };
    let (https, authority) = if let Some(a) = strip_prefix_ci(origin, b"https://") {
        (true, a)
    } else if let Some(a) = strip_prefix_ci(origin, b"http://") {
        (false, a)
    } else {
        return false;
    };
    // An http:// page is not this location's own when nginx itself speaks TLS.
    if tls && !https {
        return false;
    }
    let valid = |a: &[u8]| {
        !a.is_empty()
            && a.iter()
                .all(|&b| b.is_ascii_alphanumeric() || b"-._~:[]%".contains(&b))
    };
    if !valid(authority) || !valid(host) {
        return false;
    }
    let default = if https { &b":443"[..] } else { &b":80"[..] };
    let bare = |a: &'_ [u8]| -> Vec<u8> {
        let a = a.to_ascii_lowercase();
        match a.strip_suffix(default) {
            Some(s) if !s.is_empty() => s.to_vec(),
            _ => a,
        }
    };
    bare(authority) == bare(host)
}

fn strip_prefix_ci<'a>(s: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    (s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &s[prefix.len()..])
}

/// Strips HTTP's optional whitespace (spaces and tabs) from both ends.
fn trim(s: &[u8]) -> &[u8] {
    let ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = s.iter().position(|b| !ows(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !ows(b)).map_or(start, |i| i + 1);
    &s[start..end]
}

/// A header value as [`quote`] prints it, without its outer quotes (the message quotes the
/// whole `Name: value`).
fn unquoted(v: &[u8]) -> String {
    let q = quote(&String::from_utf8_lossy(v));
    match q.strip_prefix('"') {
        Some(rest) => match rest.strip_suffix('"') {
            Some(inner) => inner.to_string(),
            // cut: `"…"...`
            None => rest.replacen("\"...", "...", 1),
        },
        None => q,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(
        marker: &'a [&'a [u8]],
        origin: &'a [&'a [u8]],
        site: &'a [&'a [u8]],
        host: Option<&'a [u8]>,
        tls: bool,
    ) -> ControlRequest<'a> {
        ControlRequest {
            marker,
            origin,
            sec_fetch_site: site,
            host,
            tls,
        }
    }

    const MARK: &[&[u8]] = &[b"1"];
    const HOST: Option<&[u8]> = Some(b"127.0.0.1:8080");

    #[test]
    fn curl_with_the_header_passes() {
        assert_eq!(check_control(&req(MARK, &[], &[], HOST, false)), Ok(()));
        // No Host at all (HTTP/1.0): nothing to compare, nothing that needs it.
        assert_eq!(check_control(&req(MARK, &[], &[], None, false)), Ok(()));
        assert_eq!(
            check_control(&req(&[b" 1\t"], &[], &[], HOST, false)),
            Ok(())
        );
    }

    #[test]
    fn the_dashboard_passes() {
        let same: &[&[u8]] = &[b"same-origin"];
        let origin: &[&[u8]] = &[b"http://127.0.0.1:8080"];
        assert_eq!(check_control(&req(MARK, origin, same, HOST, false)), Ok(()));
        assert_eq!(
            check_control(&req(MARK, &[b"HTTP://127.0.0.1:8080"], same, HOST, false)),
            Ok(())
        );
        assert_eq!(
            check_control(&req(
                MARK,
                &[b"https://ops.example"],
                same,
                Some(b"OPS.example:443"),
                true
            )),
            Ok(())
        );
        assert_eq!(
            check_control(&req(
                MARK,
                &[b"http://ops.example:80"],
                &[],
                Some(b"ops.example"),
                false
            )),
            Ok(())
        );
        assert_eq!(
            check_control(&req(
                MARK,
                &[b"http://[::1]:8080"],
                &[],
                Some(b"[::1]:8080"),
                false
            )),
            Ok(())
        );
        // TLS ended in front of nginx: the page is https://, the request plain.
        assert_eq!(
            check_control(&req(
                MARK,
                &[b"https://ops.example"],
                same,
                Some(b"ops.example"),
                false
            )),
            Ok(())
        );
        assert_eq!(
            check_control(&req(MARK, &[], &[b"none"], HOST, false)),
            Ok(())
        );
    }

    #[test]
    fn another_sites_page_is_refused() {
        let e = check_control(&req(MARK, &[], &[b"cross-site"], HOST, false)).unwrap_err();
        assert_eq!(
            e,
            "control refused: \"Sec-Fetch-Site: cross-site\" is not this location's own page"
        );
        let e = check_control(&req(MARK, &[], &[b"same-site"], HOST, false)).unwrap_err();
        assert!(e.contains("same-site"), "{e}");
        assert!(check_control(&req(
            MARK,
            &[],
            &[b"same-origin", b"cross-site"],
            HOST,
            false
        ))
        .is_err());
        assert!(check_control(&req(MARK, &[], &[b"bogus"], HOST, false)).is_err());
        let e = check_control(&req(MARK, &[b"http://evil.example"], &[], HOST, false)).unwrap_err();
        assert_eq!(
            e,
            "control refused: \"Origin: http://evil.example\" is not this location's own origin"
        );
        for bad in [
            &b"null"[..],
            b"",
            b"http://127.0.0.1:8081",
            b"http://127.0.0.1",
            b"http://127.0.0.1:8080/",
            b"http://127.0.0.1:8080.evil.example",
            b"http://evil.example@127.0.0.1:8080",
            b"ftp://127.0.0.1:8080",
            b"127.0.0.1:8080",
            b"http://",
        ] {
            assert!(
                check_control(&req(MARK, &[bad], &[], HOST, false)).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // An http:// page is not a TLS location's own.
        assert!(check_control(&req(
            MARK,
            &[b"http://ops.example"],
            &[],
            Some(b"ops.example"),
            true
        ))
        .is_err());
        // Several Origin fields: each must be ours.
        assert!(check_control(&req(
            MARK,
            &[b"http://127.0.0.1:8080", b"http://evil.example"],
            &[],
            HOST,
            false
        ))
        .is_err());
        // An Origin cannot be checked without a Host.
        assert!(check_control(&req(MARK, &[b"http://127.0.0.1:8080"], &[], None, false)).is_err());
    }

    #[test]
    fn the_header_is_needed() {
        let want = "control needs the request header \"X-Circuit-Breaker-Control: 1\"";
        let same: &[&[u8]] = &[b"same-origin"];
        let origin: &[&[u8]] = &[b"http://127.0.0.1:8080"];
        assert_eq!(
            check_control(&req(&[], origin, same, HOST, false)),
            Err(want.into())
        );
        assert_eq!(
            check_control(&req(&[], &[], &[], HOST, false)),
            Err(want.into())
        );
        assert_eq!(
            check_control(&req(&[b"0"], &[], &[], HOST, false)),
            Err(want.into())
        );
        assert_eq!(
            check_control(&req(&[b""], &[], &[], HOST, false)),
            Err(want.into())
        );
        assert_eq!(
            check_control(&req(&[b"1", b"2"], &[], &[], HOST, false)),
            Err(want.into())
        );
    }

    #[test]
    fn echoed_values_are_quoted_and_cut() {
        let long = [b'a'; 300];
        let mut origin = b"http://".to_vec();
        origin.extend_from_slice(&long);
        let e = check_control(&req(MARK, &[&origin], &[], HOST, false)).unwrap_err();
        assert!(e.len() < 160, "{e}");
        assert!(e.contains("aaa...\" is not"), "{e}");
        let e =
            check_control(&req(MARK, &[b"http://x\"\n<script>"], &[], HOST, false)).unwrap_err();
        assert!(!e.contains('\n'), "{e}");
        assert!(e.contains(r#"http://x\"\n<script>"#), "{e}");
        let e = check_control(&req(MARK, &[], &[b"\x01\xff"], HOST, false)).unwrap_err();
        assert!(!e.bytes().any(|b| b < 0x20), "{e}");
    }
}
