//! The headers every answer of the status location carries, whatever its format or status:
//! no other page may frame it, sniff it into something else, keep it in a cache or learn
//! its address from a `Referer`; and a Content-Security-Policy under which the dashboard
//! runs its own inline script and style only (named by their SHA-256), and any other answer
//! runs nothing at all.

use std::sync::OnceLock;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::DASHBOARD_HTML;

/// Sent with every answer (with [`DATA_CSP`] or [`dashboard_csp`]).
pub const HARDENING: &[(&str, &str)] = &[
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-store"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
];

/// The Content-Security-Policy of every answer but the dashboard: JSON or text opened as a
/// document loads and runs nothing, and no page may frame it.
pub const DATA_CSP: &str =
    "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The dashboard's Content-Security-Policy: its one inline script and its one inline style,
/// each allowed by its SHA-256 (no `'unsafe-inline'`), requests to its own origin only
/// (the JSON it polls, the control requests it posts), no form, no base, no frame around it.
/// Computed once from [`DASHBOARD_HTML`] itself, so an edit of the page cannot leave a stale
/// hash behind.
pub fn dashboard_csp() -> &'static str {
    static CSP: OnceLock<String> = OnceLock::new();
    CSP.get_or_init(|| csp_for(DASHBOARD_HTML))
}

fn csp_for(page: &str) -> String {
    let hashes = |tag: &str| {
        inline_blocks(page, tag)
            .map(|text| {
                let digest = Sha256::digest(text.as_bytes());
                format!(
                    "'sha256-{}'",
                    base64::engine::general_purpose::STANDARD.encode(digest)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        hashes("script"),
        hashes("style")
    )
}

/// The text of each `<tag>…</tag>` element of `page` (written without attributes), exactly
/// as a browser hashes it for the policy.
fn inline_blocks<'a>(page: &'a str, tag: &str) -> impl Iterator<Item = &'a str> + 'a {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut rest = page;
    std::iter::from_fn(move || {
        let start = rest.find(&open)? + open.len();
        let len = rest[start..].find(&close)?;
        let text = &rest[start..start + len];
        rest = &rest[start + len + close.len()..];
        Some(text)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_sha256_in_base64() {
        // The CSP specification's example hash: script text `alert('Hello, world.');`.
        let csp = csp_for("<script>alert('Hello, world.');</script><style></style>");
        assert!(
            csp.contains("script-src 'sha256-qznLcsROx4GACP2dm0UCKCzCG+HiZ1guq6ZZDob/Tng=';"),
            "{csp}"
        );
        // The empty string's SHA-256.
        assert!(
            csp.contains("style-src 'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=';"),
            "{csp}"
        );
    }

    #[test]
    fn the_dashboard_is_allowed_by_hash_only() {
        let csp = dashboard_csp();
        assert!(!csp.contains("unsafe"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"));
        assert!(csp.starts_with("default-src 'none'; "));
        let lower = DASHBOARD_HTML.to_ascii_lowercase();
        for tag in ["script", "style"] {
            let blocks: Vec<_> = inline_blocks(DASHBOARD_HTML, tag).collect();
            assert_eq!(blocks.len(), 1, "one <{tag}>, written without attributes");
            assert_eq!(lower.matches(&format!("<{tag}")).count(), 1);
            let digest = Sha256::digest(blocks[0].as_bytes());
            let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
            assert!(csp.contains(&format!("{tag}-src 'sha256-{b64}';")), "{csp}");
        }
        // Nothing the policy would block: no inline handlers, no style attributes, no
        // javascript: links (the page sets styles through the CSSOM only).
        for needle in [
            " style=",
            " onclick=",
            " onload=",
            " oninput=",
            "javascript:",
        ] {
            assert!(!lower.contains(needle), "the page contains {needle:?}");
        }
    }

    #[test]
    fn data_answers_run_nothing() {
        assert!(DATA_CSP.starts_with("default-src 'none';"));
        assert!(DATA_CSP.contains("frame-ancestors 'none'"));
        let names: Vec<_> = HARDENING.iter().map(|(n, _)| *n).collect();
        for n in [
            "X-Frame-Options",
            "X-Content-Type-Options",
            "Cache-Control",
            "Referrer-Policy",
        ] {
            assert!(names.contains(&n), "{n}");
        }
    }
}
