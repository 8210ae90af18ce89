//! A returning server's ramp at the balancer (`circuit_breaker_core::eject::ramp`): the first
//! attempt's pick of a server on its ramp that the draw turns down is given back to the
//! balancer as if the attempt had ended unsent, and the balancer is asked again. Round robin
//! and `least_conn` then skip that server, which their free left marked tried for the
//! request, as they skip one that failed; the try the free counted is given back.
//!
//! A kept-alive connection `keepalive` handed over with the pick is closed, as that module
//! closes one it drops. Should the balancer find no other server after all (nginx's own
//! `max_fails` or `max_conns` since the check), or none for a retry once the server it went
//! to failed (the returning one is still marked tried), the attempt goes to the returning
//! server past the balancer: a ramp never costs a request its server.

use nginx_sys::{
    ngx_close_connection, ngx_connection_t, ngx_destroy_pool, ngx_http_upstream_srv_conf_t,
    ngx_int_t, ngx_peer_connection_t, NGX_DONE, NGX_OK,
};

use crate::conf::Pool;
use crate::eject;
use crate::request::{RequestState, NO_SERVER};

/// The balancer's `peer.get`.
type Get = unsafe extern "C" fn(*mut ngx_peer_connection_t, *mut core::ffi::c_void) -> ngx_int_t;

/// After the balancer chose (`rc`) server `state.attempts.server` for the request's first
/// attempt, while a server of `pool` ramps: the pick as it stands, or the balancer's next one
/// when the ramp passes it over; the answer for nginx.
///
/// # Safety
/// `state` must be the request's, `pc` its peer, just given by `get` (the balancer's, whose
/// data is `state.balancer.data`), in `peer.get`.
#[cold]
#[inline(never)]
pub(super) unsafe fn pick(
    state: &mut RequestState,
    pc: &mut ngx_peer_connection_t,
    get: Get,
    rc: ngx_int_t,
    pool: &Pool,
    now: u64,
) -> ngx_int_t {
    let server = state.attempts.server;
    // SAFETY: null, or the request's upstream conf, set in peer.init and live in a worker.
    let Some(uscf) = (unsafe { state.judge.uscf.as_ref() }) else {
        return rc;
    };
    let Some(free) = state.balancer.free else {
        return rc;
    };
    // SAFETY: `uscf` is the pool's live upstream conf, in a worker.
    if server == NO_SERVER || !unsafe { eject::passes_over(uscf, pool, server, now) } {
        return rc;
    }
    let data = state.balancer.data;
    let cached = core::mem::replace(&mut pc.connection, core::ptr::null_mut());
    let tries = pc.tries;
    // SAFETY: the balancer's own free, with its own data, of the pick it just made; with no
    // connection and no failure it only gives the pick back (and counts the try, restored).
    unsafe { free(pc, data, 0) };
    pc.tries = tries;
    if !cached.is_null() {
        // SAFETY: a kept-alive connection the balancer handed over, now this module's alone.
        unsafe { close_cached(cached) };
    }
    pc.set_cached(0);
    // SAFETY: the balancer's own get, with its own data, for the same attempt.
    let again = unsafe { get(pc, data) };
    if again == NGX_OK as ngx_int_t || again == NGX_DONE as ngx_int_t {
        // SAFETY: the balancer just chose the peer `pc->name` names.
        state.attempts.server = unsafe { eject::server_of(pool, pc.name) }.unwrap_or(NO_SERVER);
        state.attempts.passed_over = server;
        return again;
    }
    // SAFETY: `uscf` is the pool's live upstream conf, in a worker.
    match unsafe { route(state, pc, uscf, pool, server) } {
        true => NGX_OK as ngx_int_t,
        false => {
            state.attempts.server = NO_SERVER;
            again
        }
    }
}

/// A retry the balancer found no server for (`rc`), after the ramp passed a pick over for
/// the first attempt: the passed-over server, past the balancer, once (unless it left the
/// pool since); else `rc`.
///
/// # Safety
/// As for [`pick`], `pc` just refused by the balancer's `get` for a retry.
#[cold]
#[inline(never)]
pub(super) unsafe fn retry(
    state: &mut RequestState,
    pc: &mut ngx_peer_connection_t,
    rc: ngx_int_t,
    pool: &Pool,
) -> ngx_int_t {
    let server = core::mem::replace(&mut state.attempts.passed_over, NO_SERVER);
    // SAFETY: null, or the request's upstream conf, set in peer.init and live in a worker.
    let Some(uscf) = (unsafe { state.judge.uscf.as_ref() }) else {
        return rc;
    };
    // Not when it left the pool since.
    let live = pool
        .servers
        .get(server as usize)
        .is_some_and(|s| !s.local.out.get());
    // SAFETY: `uscf` is the pool's live upstream conf, in a worker.
    if live && unsafe { route(state, pc, uscf, pool, server) } {
        return NGX_OK as ngx_int_t;
    }
    rc
}

/// Points the attempt at server `server` past the balancer; false when its address cannot be
/// had (the peers just changed).
///
/// # Safety
/// `uscf` must be the pool's live upstream conf, in a worker; `pc` the request's peer.
unsafe fn route(
    state: &mut RequestState,
    pc: &mut ngx_peer_connection_t,
    uscf: &ngx_http_upstream_srv_conf_t,
    pool: &Pool,
    server: u16,
) -> bool {
    // SAFETY: `uscf` is the pool's live upstream conf (this fn's contract); the request's pool
    // is live.
    let address = unsafe { eject::address_of(uscf, pool, server, (*state.request()).pool) };
    let Some((sockaddr, socklen, name)) = address else {
        return false;
    };
    state.attempts.routed = true;
    state.attempts.server = server;
    pc.sockaddr = sockaddr;
    pc.socklen = socklen;
    pc.name = name;
    pc.connection = core::ptr::null_mut();
    pc.set_cached(0);
    true
}

/// Closes a kept-alive connection to an upstream as nginx's keepalive module closes one it
/// drops: TLS without a `close_notify` sent or awaited, then its pool and the connection.
///
/// # Safety
/// `c` must be a live upstream connection no one else holds.
unsafe extern "C" fn close_cached(c: *mut ngx_connection_t) {
    #[cfg(ngx_ssl)]
    // SAFETY: `c` is live (this fn's contract); its TLS state, when it has one, with it.
    unsafe {
        if let Some(ssl) = (*c).ssl.as_mut() {
            ssl.set_no_wait_shutdown(1);
            ssl.set_no_send_shutdown(1);
            if nginx_sys::ngx_ssl_shutdown(c) == nginx_sys::NGX_AGAIN as ngx_int_t {
                ssl.handler = Some(close_cached);
                return;
            }
        }
    }
    // SAFETY: `c` is live and no one else's; an upstream connection's pool is its own.
    unsafe {
        if !(*c).pool.is_null() {
            ngx_destroy_pool((*c).pool);
        }
        ngx_close_connection(c);
    }
}
