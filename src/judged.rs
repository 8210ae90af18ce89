//! `$circuit_breaker_msec`: when the breaker judged a request, on the module's own clock.
//!
//! The breaker's windows, cooldowns and probe spacings run on nginx's monotonic clock
//! (`ngx_current_msec`), which `$msec` (the wall clock) does not show; a replay that takes
//! its times from `$msec` puts requests near a second's edge in the neighbouring bucket. The
//! value is `JUDGED` or `JUDGED+ELAPSED`: the millisecond the breaker was asked about the
//! request (or let it through), and how many after it its outcome was recorded — the very
//! times the module passed to the breaker. A request turned away has no outcome: `JUDGED`
//! alone. Not found (`-`) when no breaker judged the request.

use nginx_sys::{
    ngx_http_request_t, ngx_http_variable_value_t, ngx_int_t, ngx_pnalloc, NGX_ERROR, NGX_OK,
};

use crate::request::{self, Answer};
use circuit_breaker_shell::clock::{mono_ms, wall_ms};
use circuit_breaker_shell::ffi::guard;

/// The variable's handler.
pub unsafe extern "C" fn msec_variable(
    r: *mut ngx_http_request_t,
    v: *mut ngx_http_variable_value_t,
    _data: usize,
) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes a live request and a value to fill.
        let (req, v) = unsafe { (&mut *r, &mut *v) };
        let started = u64::try_from(req.start_sec)
            .unwrap_or(0)
            .saturating_mul(1000)
            .saturating_add(req.start_msec as u64);
        let text = match request::find(req) {
            Some(Answer::State(s)) if s.told.label.is_some() => match s.settlement.recorded_ms {
                0 => s.settlement.judged_ms.to_string(),
                at => {
                    let judged = s.settlement.judged_ms;
                    format!("{}+{}", judged, at.saturating_sub(judged))
                }
            },
            // A short-circuit keeps no time (its record is shared, or as small as it can be):
            // it was turned away as it came, so its time is its start on the monotonic clock.
            Some(Answer::Rejected(_)) => mono_ms()
                .saturating_sub(wall_ms().saturating_sub(started))
                .to_string(),
            _ => match request::key_said(req) {
                // A key's breaker judged it, and no upstream's.
                Some(k) if k.recorded_ms == 0 => k.judged_ms.to_string(),
                Some(k) => format!(
                    "{}+{}",
                    k.judged_ms,
                    k.recorded_ms.saturating_sub(k.judged_ms)
                ),
                None => {
                    v.set_not_found(1);
                    return NGX_OK as ngx_int_t;
                }
            },
        };
        // SAFETY: the request pool is live; the value is used while the request lives.
        let p = unsafe { ngx_pnalloc(req.pool, text.len()) }.cast::<u8>();
        if p.is_null() {
            return NGX_ERROR as ngx_int_t;
        }
        // SAFETY: `p` holds `text.len()` bytes, fresh from the pool.
        unsafe { core::ptr::copy_nonoverlapping(text.as_ptr(), p, text.len()) };
        v.set_len(text.len() as u32);
        v.set_valid(1);
        v.set_no_cacheable(0);
        v.set_not_found(0);
        v.data = p;
        NGX_OK as ngx_int_t
    })
}
