//! The wrapped `peer.init` of every stream upstream with a breaker: the session is asked of
//! the breaker before the balancer is, and a refused one never reaches a server.

use circuit_breaker_core::breaker::{Admission, Ticket};
use circuit_breaker_shell::clock::mono_ms;
use circuit_breaker_shell::ffi::guard;
use circuit_breaker_shell::zone::Zone;
use nginx_sys::{
    ngx_event_t, ngx_int_t, ngx_pool_cleanup_add, ngx_stream_session_t,
    ngx_stream_upstream_srv_conf_t, NGX_ERROR,
};

use crate::conf::{self, SrvConf};
use crate::session::{self, Session};

/// `peer.init` of an upstream with a breaker.
pub unsafe extern "C" fn init_peer(
    s: *mut ngx_stream_session_t,
    us: *mut ngx_stream_upstream_srv_conf_t,
) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx calls peer.init with a live session and its upstream's conf.
        unsafe { init_peer_inner(s, us) }
    })
}

unsafe fn init_peer_inner(
    s: *mut ngx_stream_session_t,
    us: *mut ngx_stream_upstream_srv_conf_t,
) -> ngx_int_t {
    // SAFETY: the upstream conf nginx passed, of this configuration.
    let Some(scf) = (unsafe { conf::of_upstream(us) }) else {
        return NGX_ERROR as ngx_int_t;
    };
    let Some(original_init) = scf.original_init else {
        return NGX_ERROR as ngx_int_t;
    };
    // SAFETY: `s` is live (peer.init's contract).
    if let Some(a) = unsafe { ask(s, scf) } {
        if matches!(a, Admission::Reject { .. } | Admission::Recovering { .. }) {
            // nginx's stream proxy closes the session on an error from peer.init; the log
            // phase (`observe::log_phase`) gives it its `503`.
            return NGX_ERROR as ngx_int_t;
        }
    }
    // SAFETY: the balancer's own init, with the arguments nginx gave us.
    unsafe { original_init(s, us) }
}

/// Asks the breaker about the session, and keeps what it said in the session's context;
/// `None` when no breaker applies.
///
/// # Safety
/// `s` must be a live session in `peer.init`.
unsafe fn ask(s: *mut ngx_stream_session_t, scf: &SrvConf) -> Option<Admission> {
    // SAFETY: `s` is live.
    let mcf = unsafe { conf::of_session(s) }?;
    // SAFETY: the zone this configuration registered, mapped in a worker.
    let zone = unsafe { Zone::from_shm(mcf.zone) }?;
    // SAFETY: a live session's connection.
    let c = unsafe { &mut *(*s).connection };
    // A session passes through peer.init once per `proxy_pass`; a later call (none today)
    // keeps the first verdict.
    // SAFETY: `s` is live.
    if unsafe { session::of(s) }.is_some() {
        return None;
    }
    let a = session::admit(&zone, mcf, scf, c.log)?;
    let ticket = match a {
        Admission::Probe(t) => t,
        _ => Ticket::Normal,
    };
    let refused = matches!(a, Admission::Reject { .. } | Admission::Recovering { .. });
    let state = Session {
        scf,
        zone,
        ticket,
        start_ms: mono_ms(),
        client_sent: false,
        settled: refused,
        refused,
        // SAFETY: an all-zero event is nginx's own starting state (ngx_pcalloc).
        silence: unsafe { core::mem::zeroed::<ngx_event_t>() },
        log: c.log,
    };
    // SAFETY: the connection's pool lives as long as the session.
    let cln = unsafe { ngx_pool_cleanup_add(c.pool, core::mem::size_of::<Session>()) };
    // SAFETY: null, or a cleanup whose data is room for a `Session`.
    let cln = unsafe { cln.as_mut() }?;
    let at = cln.data.cast::<Session>();
    // SAFETY: room for a `Session` (above), written once before anything reads it; the pool
    // frees the memory without dropping it, and a `Session` owns nothing that needs a drop.
    unsafe { at.write(state) };
    cln.handler = Some(session::cleanup);
    // SAFETY: a session's `ctx` has a cell per stream module; this one is ours.
    unsafe { *(*s).ctx.add(conf::ctx_index()) = at.cast() };
    Some(a)
}
