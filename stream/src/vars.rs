//! The stream module's variables, for the stream access log: `$circuit_breaker_state`, what
//! the breaker said to the session (`closed`, `half_open`, `open`, `recovering`, `backup`; not
//! found when no breaker applied), and `$circuit_breaker_upstream`, the name of the upstream the
//! session went to (or that refused it), whether or not it has a breaker — the http module's
//! variables of the same names, for sessions.

use circuit_breaker_core::session::Word;
use circuit_breaker_shell::ffi::guard;
use nginx_sys::{
    ngx_conf_t, ngx_int_t, ngx_str_t, ngx_stream_add_variable, ngx_stream_session_t,
    ngx_stream_variable_value_t, ngx_uint_t, NGX_ERROR, NGX_OK, NGX_STREAM_VAR_NOCACHEABLE,
};
use ngx::ngx_string;

use crate::session;

/// Adds the variables (preconfiguration).
///
/// # Safety
/// `cf` must be the configuration being parsed.
pub unsafe fn add(cf: *mut ngx_conf_t) -> ngx_int_t {
    type Handler = unsafe extern "C" fn(
        *mut ngx_stream_session_t,
        *mut ngx_stream_variable_value_t,
        usize,
    ) -> ngx_int_t;
    let vars: [(ngx_str_t, Handler); 2] = [
        (ngx_string!("circuit_breaker_state"), state),
        (ngx_string!("circuit_breaker_upstream"), upstream),
    ];
    for (mut name, handler) in vars {
        // The state changes as the session goes on.
        let flags = NGX_STREAM_VAR_NOCACHEABLE as ngx_uint_t;
        // SAFETY: `cf` is live during preconfiguration.
        let v = unsafe { ngx_stream_add_variable(cf, &mut name, flags) };
        // SAFETY: null or the variable record just added.
        let Some(v) = (unsafe { v.as_mut() }) else {
            return NGX_ERROR as ngx_int_t;
        };
        v.get_handler = Some(handler);
    }
    NGX_OK as ngx_int_t
}

/// Sets `v` to `value` (static, or live as long as the session), or not found.
fn set(v: &mut ngx_stream_variable_value_t, value: Option<(*const u8, usize)>) {
    match value {
        Some((data, len)) => {
            v.set_len(len as u32);
            v.set_valid(1);
            v.set_no_cacheable(0);
            v.set_not_found(0);
            v.data = data.cast_mut();
        }
        None => v.set_not_found(1),
    }
}

unsafe extern "C" fn state(
    s: *mut ngx_stream_session_t,
    v: *mut ngx_stream_variable_value_t,
    _data: usize,
) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes a live session and the value to fill.
        let (word, v) = unsafe { (Word::from_bits(session::bits(s)), &mut *v) };
        set(v, word.state().map(|t| (t.as_ptr(), t.len())));
        NGX_OK as ngx_int_t
    })
}

unsafe extern "C" fn upstream(
    s: *mut ngx_stream_session_t,
    v: *mut ngx_stream_variable_value_t,
    _data: usize,
) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes a live session and the value to fill; the session's upstream is
        // null or live in its pool, its conf null or the configuration's, whose name lives as
        // long as the configuration.
        let (host, v) = unsafe {
            let host = (*s)
                .upstream
                .as_ref()
                .and_then(|u| u.upstream.as_ref())
                .map(|uscf| uscf.host)
                .filter(|h| h.len > 0 && !h.data.is_null());
            (host, &mut *v)
        };
        set(v, host.map(|h| (h.data.cast_const(), h.len)));
        NGX_OK as ngx_int_t
    })
}
