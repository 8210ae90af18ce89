//! What the module sees of a session it admitted: the bytes passing through nginx's stream
//! filters (the client's first bytes going up, the server's first byte coming back), and the
//! session's end in the log phase.

use circuit_breaker_core::session;
use circuit_breaker_shell::clock::mono_ms;
use circuit_breaker_shell::ffi::guard;
use nginx_sys::{
    ngx_chain_t, ngx_int_t, ngx_msec_t, ngx_stream_filter_pt, ngx_stream_session_t, ngx_uint_t,
    NGX_ERROR, NGX_OK, NGX_STREAM_SERVICE_UNAVAILABLE,
};

use crate::session as state;

/// The next filter in nginx's chain, set once while the configuration is read.
static mut NEXT_FILTER: ngx_stream_filter_pt = None;

/// Puts [`filter`] at the top of nginx's stream filters.
///
/// # Safety
/// Only while a configuration is read (one thread, nginx's master).
pub unsafe fn add_filter() {
    // SAFETY: the master reads configurations on one thread; nginx's own filters chain the
    // same way.
    unsafe {
        NEXT_FILTER = nginx_sys::ngx_stream_top_filter;
        nginx_sys::ngx_stream_top_filter = Some(filter);
    }
}

/// Whether a chain carries any byte.
fn carries_data(mut cl: *const ngx_chain_t) -> bool {
    // SAFETY: a chain nginx passes through its filters: null-terminated, its buffers live.
    while let Some(link) = unsafe { cl.as_ref() } {
        // SAFETY: as above.
        if let Some(b) = unsafe { link.buf.as_ref() } {
            if b.last > b.pos || (b.in_file() != 0 && b.file_last > b.file_pos) {
                return true;
            }
        }
        cl = link.next;
    }
    false
}

unsafe extern "C" fn filter(
    s: *mut ngx_stream_session_t,
    input: *mut ngx_chain_t,
    from_upstream: ngx_uint_t,
) -> ngx_int_t {
    guard((), || {
        // SAFETY: nginx passes a live session to its filters.
        let Some(st) = (unsafe { state::of(s) }) else {
            return;
        };
        if st.settled || !carries_data(input) {
            return;
        }
        if from_upstream != 0 {
            st.settle(&session::answered(mono_ms().saturating_sub(st.start_ms)));
        } else if !st.client_sent {
            st.client_sent = true;
            st.arm();
        }
    });
    // SAFETY: the next filter, set when ours was put in front of it.
    match unsafe { NEXT_FILTER } {
        // SAFETY: nginx's own chain, with the arguments it gave us.
        Some(next) => unsafe { next(s, input, from_upstream) },
        None => NGX_ERROR as ngx_int_t,
    }
}

/// The log phase, ahead of the access log: a session the breaker refused gets its `503`; one
/// not judged yet is judged by how it ended.
pub unsafe extern "C" fn log_phase(s: *mut ngx_stream_session_t) -> ngx_int_t {
    guard(NGX_OK as ngx_int_t, || {
        // SAFETY: nginx passes a live session to its log phase handlers.
        let Some(st) = (unsafe { state::of(s) }) else {
            return NGX_OK as ngx_int_t;
        };
        // SAFETY: as above.
        let s = unsafe { &mut *s };
        if st.refused {
            s.status = NGX_STREAM_SERVICE_UNAVAILABLE as ngx_uint_t;
            return NGX_OK as ngx_int_t;
        }
        // SAFETY: the session's upstream and its last state, null or live in its pool.
        let last = unsafe { s.upstream.as_ref().and_then(|u| u.state.as_ref()) };
        let connected = last.is_some_and(|st| st.connect_time != ngx_msec_t::MAX);
        let end = session::Ended {
            status: u16::try_from(s.status).unwrap_or(0),
            connected,
            client_sent: st.client_sent,
            ms: mono_ms().saturating_sub(st.start_ms),
        };
        st.settle_end(&end);
        NGX_OK as ngx_int_t
    })
}
