//! The status location (filled in below).
use nginx_sys::{ngx_http_request_t, ngx_int_t, NGX_HTTP_NOT_FOUND};

/// Placeholder handler until the status page lands.
pub unsafe extern "C" fn handler(_r: *mut ngx_http_request_t) -> ngx_int_t {
    NGX_HTTP_NOT_FOUND as ngx_int_t
}
