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

use crate::conf;
use crate::session::{self as held, Mark};

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
    // SAFETY: nginx passes a live session to its filters.
    if let Mark::Held(id) = unsafe { held::mark(s) } {
        if carries_data(input) {
            guard((), || {
                // SAFETY: as above.
                unsafe { seen(s, id, from_upstream != 0) }
            });
        }
    }
    // SAFETY: the next filter, set when ours was put in front of it.
    match unsafe { NEXT_FILTER } {
        // SAFETY: nginx's own chain, with the arguments it gave us.
        Some(next) => unsafe { next(s, input, from_upstream) },
        None => NGX_ERROR as ngx_int_t,
    }
}

/// Bytes of a held session passing one way.
///
/// # Safety
/// `s` must be a live session.
unsafe fn seen(
    s: *mut ngx_stream_session_t,
    id: circuit_breaker_core::session::SessionId,
    up: bool,
) {
    // SAFETY: `s` is live.
    let Some(mcf) = (unsafe { conf::of_session(s) }) else {
        return;
    };
    let now = mono_ms();
    if up {
        let taken = held::with_table(mcf, |t| t.take(id));
        // SAFETY: `s` is live. Judged now, or already (its bound ran out): nothing more.
        unsafe { held::set_mark(s, Mark::None) };
        let Some(h) = taken else { return };
        // SAFETY: a live session, its connection and its upstream's last state.
        let (log, connect_ms) = unsafe {
            let s = &*s;
            let state = s.upstream.as_ref().and_then(|u| u.state.as_ref());
            let connect = state.map_or(0, |st| st.connect_time);
            (
                (*s.connection).log,
                if connect == ngx_msec_t::MAX {
                    0
                } else {
                    connect as u64
                },
            )
        };
        // How long the server took: from the client's last bytes (and the connect) when the
        // client spoke first, from the start when the server speaks first; a client's own
        // pause before it speaks is not the server's.
        let ms = if h.client_sent {
            now.saturating_sub(h.sent_ms).saturating_add(connect_ms)
        } else {
            now.saturating_sub(h.start_ms)
        };
        held::settle(mcf, &h, &session::answered(ms), log);
        return;
    }
    // SAFETY: `s` is live. Bytes the client sent (a PROXY protocol header nginx makes is
    // none of the client's).
    if unsafe { (*s).received } <= 0 {
        return;
    }
    match held::with_table(mcf, |t| t.client_sent(id, now)) {
        // SAFETY: `s` is live. Its bound ran out: nothing more.
        None => unsafe { held::set_mark(s, Mark::None) },
        Some(Some(deadline)) => held::arm(mcf, deadline),
        Some(None) => {}
    }
}

/// The log phase, ahead of the access log: a session the breaker refused gets its `503`; one
/// not judged yet is judged by how it ended.
pub unsafe extern "C" fn log_phase(s: *mut ngx_stream_session_t) -> ngx_int_t {
    guard(NGX_OK as ngx_int_t, || {
        // SAFETY: nginx passes a live session to its log phase handlers.
        let id = match unsafe { held::mark(s) } {
            Mark::None => return NGX_OK as ngx_int_t,
            Mark::Refused => {
                // SAFETY: as above.
                unsafe { (*s).status = NGX_STREAM_SERVICE_UNAVAILABLE as ngx_uint_t };
                return NGX_OK as ngx_int_t;
            }
            Mark::Held(id) => id,
        };
        // SAFETY: as above.
        let Some(mcf) = (unsafe { conf::of_session(s) }) else {
            return NGX_OK as ngx_int_t;
        };
        let Some(h) = held::with_table(mcf, |t| t.take(id)) else {
            return NGX_OK as ngx_int_t;
        };
        // SAFETY: as above.
        unsafe { held::set_mark(s, Mark::None) };
        // SAFETY: as above; the session's upstream and its last state, null or live in its pool.
        let (status, connected, tried, log) = unsafe {
            let s = &*s;
            let last = s.upstream.as_ref().and_then(|u| u.state.as_ref());
            (
                s.status,
                last.is_some_and(|st| st.connect_time != ngx_msec_t::MAX),
                tried(s),
                (*s.connection).log,
            )
        };
        let end = session::Ended {
            status: u16::try_from(status).unwrap_or(0),
            tried,
            connected,
            client_sent: h.client_sent,
            ms: mono_ms().saturating_sub(h.start_ms),
        };
        match session::ended(&end) {
            Some(a) => held::settle(mcf, &h, &a, log),
            None => held::unjudged(mcf, &h, log),
        }
        NGX_OK as ngx_int_t
    })
}

/// Whether nginx tried a server at all for the session: a balancer that finds every server
/// busy (`max_conns`) or down names the upstream itself as the state's peer, where a tried
/// connect names the server's address.
///
/// # Safety
/// `s` must be a live session, in its log phase.
unsafe fn tried(s: &ngx_stream_session_t) -> bool {
    // SAFETY: the session's upstream and its states, null or live in its pool.
    let (u, states) = unsafe {
        match (s.upstream.as_ref(), s.upstream_states.as_ref()) {
            (Some(u), Some(a)) => (u, a),
            _ => return false,
        }
    };
    // SAFETY: the upstream conf nginx found, of this configuration.
    let Some(host) = (unsafe { u.upstream.as_ref() }).map(|us| us.host.as_bytes()) else {
        return false;
    };
    // SAFETY: an array of `ngx_stream_upstream_state_t`, as the proxy pushes them.
    let states: &[nginx_sys::ngx_stream_upstream_state_t] = unsafe { states.as_slice() };
    states.iter().any(|st| {
        // SAFETY: null, or a name in the session's pool or the configuration's.
        unsafe { st.peer.as_ref() }.is_some_and(|p| p.as_bytes() != host)
    })
}
