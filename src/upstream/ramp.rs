//! A returning server's ramp at the balancer (`circuit_breaker_core::eject::ramp`): the first
//! attempt's pick of a server on its ramp that the draw turns down is given back to the
//! balancer as if the attempt had ended unsent, and the balancer is asked again. Round robin
//! and `least_conn` then skip that server, which their free left marked tried for the
//! request, as they skip one that failed; the try the free counted is given back.
//!
//! A kept-alive connection `keepalive` handed over with the pick is closed, as that module
//! closes one it drops. Should the balancer find no other server after all (nginx's own
//! `max_fails` or `max_conns` since the check), or, for a retry once the server it went to
//! failed, none or only a backup (the returning one is still marked tried), the attempt goes
//! to the returning server past the balancer while round robin could pick it (not `down`,
//! ejected, failed or full): a ramp never costs a request its server. Such an attempt is not
//! the balancer's, so neither its `conns` nor its `max_fails` count it, as with a probe.

use nginx_sys::{
    ngx_close_connection, ngx_connection_t, ngx_destroy_pool, ngx_http_upstream_srv_conf_t,
    ngx_int_t, ngx_peer_connection_t, NGX_BUSY, NGX_DONE, NGX_OK,
};

use crate::conf::Pool;
use crate::eject::{self, Upstream};
use crate::request::{RequestState, NO_SERVER};
use circuit_breaker_shell::clock::mono_ms;

/// A peer's address and name, copied for an attempt past the balancer.
pub(super) type Address = (
    *mut nginx_sys::sockaddr,
    nginx_sys::socklen_t,
    *mut nginx_sys::ngx_str_t,
);

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
    // SAFETY: `uscf` is the pool's live upstream conf, in a worker.
    if server == NO_SERVER || !unsafe { eject::passes_over(uscf, pool, server, now) } {
        return rc;
    }
    // SAFETY: the pick the balancer just made, in `peer.get` (this fn's contract).
    if !unsafe { give_back(state, pc) } {
        return rc;
    }
    // SAFETY: the balancer's own get, with its own data, for the same attempt.
    let again = unsafe { get(pc, state.balancer.data) };
    if again == NGX_OK as ngx_int_t || again == NGX_DONE as ngx_int_t {
        // SAFETY: the balancer just chose the peer `pc->name` names.
        state.attempts.server = unsafe { eject::server_of(pool, pc.name) }.unwrap_or(NO_SERVER);
        state.attempts.passed_over = server;
        return again;
    }
    // SAFETY: `uscf` is the pool's live upstream conf, in a worker.
    if let Some(address) = unsafe { address(state, uscf, pool, server) } {
        route(state, pc, server, address);
        return NGX_OK as ngx_int_t;
    }
    // No attempt: nothing of the pick given back may be freed again (nginx frees the peer
    // whose address is set).
    state.attempts.server = NO_SERVER;
    pc.sockaddr = core::ptr::null_mut();
    pc.socklen = 0;
    again
}

/// A retry's `peer.get` is done (`rc`), after the ramp passed over server `passed_over` for
/// the request's first attempt: when the balancer found no server, or only a backup, the
/// attempt goes to that server past it, once, while round robin could pick it; else `rc`.
///
/// # Safety
/// As for [`pick`], `pc` just given or refused by the balancer's `get` for a retry.
#[cold]
#[inline(never)]
pub(super) unsafe fn retry(
    state: &mut RequestState,
    pc: &mut ngx_peer_connection_t,
    rc: ngx_int_t,
    pool: &Pool,
) -> ngx_int_t {
    let server = core::mem::replace(&mut state.attempts.passed_over, NO_SERVER);
    let chosen = rc == NGX_OK as ngx_int_t || rc == NGX_DONE as ngx_int_t;
    let backup = pool
        .servers
        .get(usize::from(state.attempts.server))
        .is_some_and(|s| s.backup);
    if chosen && !backup || !chosen && rc != NGX_BUSY as ngx_int_t {
        return rc;
    }
    // SAFETY: null, or the request's upstream conf, set in peer.init and live in a worker.
    let Some(uscf) = (unsafe { state.judge.uscf.as_ref() }) else {
        return rc;
    };
    // What the pool is now: the retry may come long after the request began.
    if let Some((zone, _)) = state.judge.zone() {
        // SAFETY: the request's upstream conf, of this configuration, in a worker.
        let scf = unsafe { &*state.judge.srv_conf_ptr() };
        // SAFETY: `uscf` is `scf`'s upstream conf, in a worker.
        eject::follow(unsafe { Upstream::new(zone, scf, uscf) }, mono_ms());
    }
    let out = pool
        .servers
        .get(usize::from(server))
        .map_or(true, |s| s.local.out.get());
    if out {
        return rc;
    }
    // SAFETY: `uscf` is the pool's live upstream conf, in a worker.
    let Some(address) = (unsafe { address(state, uscf, pool, server) }) else {
        return rc;
    };
    // A backup while a primary is up: given back, as nginx would not have gone there.
    // SAFETY: the pick the balancer just made, in `peer.get` (this fn's contract).
    if chosen && !unsafe { give_back(state, pc) } {
        return rc;
    }
    route(state, pc, server, address);
    NGX_OK as ngx_int_t
}

/// Gives the balancer's pick back as an attempt that ended unsent: its free with no
/// connection and no failure, the try it counts restored, a kept-alive connection it handed
/// over closed. False when the balancer has no free.
///
/// # Safety
/// The balancer's `get` just chose `pc`'s peer for the request whose state is `state`.
unsafe fn give_back(state: &mut RequestState, pc: &mut ngx_peer_connection_t) -> bool {
    let Some(free) = state.balancer.free else {
        return false;
    };
    let cached = core::mem::replace(&mut pc.connection, core::ptr::null_mut());
    let tries = pc.tries;
    // SAFETY: the balancer's own free, with its own data, of the pick it just made (this fn's
    // contract); with no connection and no failure it only gives the pick back.
    unsafe { free(pc, state.balancer.data, 0) };
    pc.tries = tries;
    pc.set_cached(0);
    if !cached.is_null() {
        // SAFETY: a kept-alive connection the balancer handed over, now this module's alone.
        unsafe { close_cached(cached) };
    }
    true
}

/// A peer of server `server` that round robin could pick now, its address copied into the
/// request's pool; `None` when there is none (or the peers just changed).
///
/// # Safety
/// `uscf` must be the pool's live upstream conf, in a worker; `state` the live request's.
unsafe fn address(
    state: &RequestState,
    uscf: &ngx_http_upstream_srv_conf_t,
    pool: &Pool,
    server: u16,
) -> Option<Address> {
    // SAFETY: `uscf` is the pool's live upstream conf (this fn's contract); the request's pool
    // is live.
    unsafe { eject::address_of(uscf, pool, server, (*state.request()).pool, true) }
}

/// Points the attempt at `address`, a peer of server `server`, past the balancer (a server's
/// probe, a ramp's last resort): the balancer never sees it, so its free is not called for it.
pub(super) fn route(
    state: &mut RequestState,
    pc: &mut ngx_peer_connection_t,
    server: u16,
    (sockaddr, socklen, name): Address,
) {
    state.attempts.routed = true;
    state.attempts.server = server;
    pc.sockaddr = sockaddr;
    pc.socklen = socklen;
    pc.name = name;
    pc.connection = core::ptr::null_mut();
    pc.set_cached(0);
}

/// Closes a kept-alive connection to an upstream as nginx's keepalive module closes one it
/// drops: TLS without a `close_notify` sent or awaited, then its pool and the connection. Its
/// logs were the request's (keepalive's `get` set them): the cycle's from now on.
///
/// # Safety
/// `c` must be a live upstream connection no one else holds.
unsafe extern "C" fn close_cached(c: *mut ngx_connection_t) {
    // SAFETY: `c` is live (this fn's contract), its events and pool with it.
    unsafe {
        let log = (*nginx_sys::ngx_cycle).log;
        (*c).log = log;
        (*(*c).read).log = log;
        (*(*c).write).log = log;
        if !(*c).pool.is_null() {
            (*(*c).pool).log = log;
        }
    }
    #[cfg(ngx_ssl)]
    // SAFETY: `c` is live (this fn's contract); its TLS state, when it has one, written
    // through the pointer `ngx_ssl_shutdown` writes through too.
    unsafe {
        let ssl = (*c).ssl;
        if !ssl.is_null() {
            (*ssl).set_no_wait_shutdown(1);
            (*ssl).set_no_send_shutdown(1);
            if nginx_sys::ngx_ssl_shutdown(c) == nginx_sys::NGX_AGAIN as ngx_int_t {
                (*ssl).handler = Some(close_cached);
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
