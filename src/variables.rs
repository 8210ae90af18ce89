//! The module's variables, registered while the configuration is read: each is answered by
//! the room that knows its value (what a client was told, when its outcome was recorded, its
//! class).

use nginx_sys::{
    ngx_conf_t, ngx_http_add_variable, ngx_http_request_t, ngx_http_variable_value_t, ngx_int_t,
    ngx_str_t, ngx_uint_t, NGX_ERROR, NGX_HTTP_VAR_NOCACHEABLE, NGX_OK,
};
use ngx::ngx_string;

use crate::{judged, respond, upstream};

/// Registers `$circuit_breaker_state`, `$circuit_breaker_route`, `$circuit_breaker_upstream`,
/// `$circuit_breaker_msec` and `$circuit_breaker_class`.
///
/// # Safety
/// `cf` must be the configuration being parsed (preconfiguration).
pub unsafe fn add_variables(cf: *mut ngx_conf_t) -> ngx_int_t {
    type Handler = unsafe extern "C" fn(
        *mut ngx_http_request_t,
        *mut ngx_http_variable_value_t,
        usize,
    ) -> ngx_int_t;
    let vars: [(ngx_str_t, Handler, usize); 5] = [
        (ngx_string!("circuit_breaker_state"), respond::variable, 0),
        (ngx_string!("circuit_breaker_route"), respond::variable, 1),
        (
            ngx_string!("circuit_breaker_upstream"),
            respond::upstream_variable,
            0,
        ),
        (
            ngx_string!("circuit_breaker_msec"),
            judged::msec_variable,
            0,
        ),
        (
            ngx_string!("circuit_breaker_class"),
            upstream::class::variable,
            0,
        ),
    ];
    for (mut name, handler, data) in vars {
        let flags = NGX_HTTP_VAR_NOCACHEABLE as ngx_uint_t;
        // SAFETY: `cf` is live during preconfiguration.
        let v = unsafe { ngx_http_add_variable(cf, &mut name, flags) };
        // SAFETY: null or the variable record just added.
        let Some(v) = (unsafe { v.as_mut() }) else {
            return NGX_ERROR as ngx_int_t;
        };
        v.get_handler = Some(handler);
        v.data = data;
    }
    NGX_OK as ngx_int_t
}
