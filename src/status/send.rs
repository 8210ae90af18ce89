//! How the status location sends an answer: one buffer with the hardening headers, as the
//! stub_status module sends its page; its refusals are one line of plain text.

use circuit_breaker_core::status::headers::{self, DATA_CSP, HARDENING};
use circuit_breaker_core::status::query::Query;
use circuit_breaker_core::status::HTML_CONTENT_TYPE;
use nginx_sys::{
    ngx_buf_t, ngx_chain_t, ngx_create_temp_buf, ngx_http_output_filter, ngx_http_request_t,
    ngx_http_send_header, ngx_int_t, ngx_str_t, ngx_uint_t, NGX_ERROR, NGX_HTTP_NOT_ALLOWED,
    NGX_HTTP_OK, NGX_OK,
};

use crate::respond::{push_header, static_value};

/// `405` with `Allow` (RFC 9110 §15.5.6), as one of the location's own answers.
pub fn not_allowed(r: &mut ngx_http_request_t, allow: &'static str, reason: &str) -> ngx_int_t {
    if !push_header(&mut r.headers_out.headers, "Allow", static_value(allow)) {
        return NGX_ERROR as ngx_int_t;
    }
    send_text(r, NGX_HTTP_NOT_ALLOWED, reason)
}

/// `status` with one line of text.
pub fn send_text(r: &mut ngx_http_request_t, status: u32, line: &str) -> ngx_int_t {
    let mut body = line.as_bytes().to_vec();
    body.push(b'\n');
    send(r, status, "text/plain", &body, &Query::default())
}

/// Sends a whole response from one buffer, as the stub_status module does, with the
/// hardening headers ([`HARDENING`] and a Content-Security-Policy: the dashboard's own, or
/// [`DATA_CSP`]); with `Vary: Accept` when the format came from `Accept` (no `format=` in
/// `q`), so that a cache does not hand the page to a scraper.
pub fn send(
    r: &mut ngx_http_request_t,
    status: u32,
    content_type: &'static str,
    body: &[u8],
    q: &Query,
) -> ngx_int_t {
    let csp = if content_type == HTML_CONTENT_TYPE {
        headers::dashboard_csp()
    } else {
        DATA_CSP
    };
    let list = &mut r.headers_out.headers;
    let hardened = HARDENING
        .iter()
        .chain(core::iter::once(&("Content-Security-Policy", csp)))
        .all(|&(name, value)| push_header(list, name, static_value(value)));
    if !hardened {
        return NGX_ERROR as ngx_int_t;
    }
    if status == NGX_HTTP_OK
        && q.format.is_none()
        && !push_header(&mut r.headers_out.headers, "Vary", static_value("Accept"))
    {
        return NGX_ERROR as ngx_int_t;
    }
    r.headers_out.status = status as ngx_uint_t;
    r.headers_out.content_type = ngx_str_t {
        len: content_type.len(),
        data: content_type.as_ptr().cast_mut(),
    };
    r.headers_out.content_type_len = content_type.len();
    r.headers_out.content_length_n = body.len() as i64;
    // SAFETY: `r` is the status handler's live request (all callers of `send`), not finalized.
    let rc = unsafe { ngx_http_send_header(r) };
    if rc == NGX_ERROR as ngx_int_t || rc > NGX_OK as ngx_int_t || r.header_only() != 0 {
        return rc;
    }
    // SAFETY: the request pool is live; the buffer gets exactly body.len() bytes.
    unsafe {
        let b: *mut ngx_buf_t = ngx_create_temp_buf(r.pool, body.len().max(1));
        if b.is_null() {
            return NGX_ERROR as ngx_int_t;
        }
        core::ptr::copy_nonoverlapping(body.as_ptr(), (*b).last, body.len());
        (*b).last = (*b).last.add(body.len());
        (*b).set_last_buf(u32::from(core::ptr::eq(r.main, r)));
        (*b).set_last_in_chain(1);
        let mut out = ngx_chain_t {
            buf: b,
            next: core::ptr::null_mut(),
        };
        ngx_http_output_filter(r, &mut out)
    }
}
