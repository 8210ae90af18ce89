//! The wrapped `peer.init` of every stream upstream with a breaker: the session is asked of
//! the breaker before the balancer is, and a refused one never reaches a server — or, when the
//! upstream balances by round robin and has `backup` servers, is handed to them (as nginx does
//! once every primary server has failed), and never reaches a primary one.

use circuit_breaker_core::breaker::Admission;
use circuit_breaker_shell::clock::mono_ms;
use circuit_breaker_shell::eject;
use circuit_breaker_shell::ffi::guard;
use nginx_sys::{
    ngx_int_t, ngx_stream_session_t, ngx_stream_upstream_get_round_robin_peer,
    ngx_stream_upstream_rr_peer_data_t, ngx_stream_upstream_rr_peers_t,
    ngx_stream_upstream_srv_conf_t, ngx_uint_t, NGX_ERROR, NGX_OK,
};

use crate::conf::{self, SrvConf};
use circuit_breaker_core::session::{Plain, Refusal, Said, Word};

use crate::pool;
use crate::session;

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
    let refused = unsafe { ask(s, scf) };
    // SAFETY: the balancer's own init, with the arguments nginx gave us.
    if refused && unsafe { original_init(s, us) == NGX_OK as ngx_int_t && to_backup(s, us) } {
        // SAFETY: `s` is live. Not the breaker's to judge, nor refused.
        unsafe { session::set_mark(s, Word::Said(Said::Backup)) };
        return NGX_OK as ngx_int_t;
    }
    if refused {
        // nginx's stream proxy closes the session on an error from peer.init; the log phase
        // (`observe::log_phase`) gives it its `503`.
        return NGX_ERROR as ngx_int_t;
    }
    // A pool's peers follow the zone; an upstream without one costs a comparison.
    let zone = scf.pool.as_ref().and_then(|_| {
        // SAFETY: `s` is live (peer.init's contract).
        let mcf = unsafe { conf::of_session(s) }?;
        mcf.zone()
    });
    let up = zone.as_ref().and_then(|z| pool::upstream(z, scf));
    if let Some(up) = up {
        eject::follow(up, mono_ms());
    }
    // SAFETY: the balancer's own init, with the arguments nginx gave us.
    let rc = unsafe { original_init(s, us) };
    if up.is_some() && rc == NGX_OK as ngx_int_t {
        // Peers out of the pool are tries nginx would count but cannot make.
        let out = eject::downed(scf) as ngx_uint_t;
        // SAFETY: `s` is live, its upstream set up by the balancer's init.
        if let Some(u) = unsafe { (*s).upstream.as_mut() } {
            if out > 0 && u.peer.tries > 1 {
                u.peer.tries = u.peer.tries.saturating_sub(out).max(1);
            }
        }
    }
    rc
}

/// Points the balancer of a session nginx's round robin set up at the upstream's `backup`
/// servers alone; false when it has none, or another balancer picks its servers.
///
/// # Safety
/// `s` must be a live session whose balancer `us`'s own `peer.init` has just set up.
unsafe fn to_backup(s: *mut ngx_stream_session_t, us: *mut ngx_stream_upstream_srv_conf_t) -> bool {
    // SAFETY: the session's upstream, its peer data as the balancer set it, and the
    // upstream's peers as round robin's init_upstream made them (checked to be the same list
    // as the session's before anything is read as round robin's).
    unsafe {
        let Some(u) = (*s).upstream.as_ref() else {
            return false;
        };
        // Round robin's own: other balancers that build on its data (least_conn, hash,
        // random) pick peers their own way, which the backup list alone may not fit.
        // nginx's own function, one address in the process (the dynamic linker resolves it).
        let rr = ngx_stream_upstream_get_round_robin_peer as *const () as usize;
        if u.peer.get.map(|f| f as *const () as usize) != Some(rr) {
            return false;
        }
        let primary = (*us).peer.data.cast::<ngx_stream_upstream_rr_peers_t>();
        let rrp = u.peer.data.cast::<ngx_stream_upstream_rr_peer_data_t>();
        if primary.is_null() || rrp.is_null() || (*rrp).peers != primary {
            return false;
        }
        let backup = (*primary).next;
        if backup.is_null() || (*backup).number == 0 {
            return false;
        }
        (*rrp).peers = backup;
    }
    true
}

/// Asks the breaker about the session and marks the session with what it said; true when
/// it is refused.
///
/// # Safety
/// `s` must be a live session in `peer.init`.
unsafe fn ask(s: *mut ngx_stream_session_t, scf: &SrvConf) -> bool {
    // SAFETY: `s` is live.
    let Some(mcf) = (unsafe { conf::of_session(s) }) else {
        return false;
    };
    // SAFETY: `s` is live. A session passes through peer.init once per `proxy_pass`.
    if unsafe { session::bits(s) } != 0 {
        return false;
    }
    let Some(zone) = mcf.zone() else {
        return false;
    };
    // SAFETY: a live session's connection.
    let (log, udp) = unsafe {
        let c = &*(*s).connection;
        (
            c.log,
            c.type_ == nginx_sys::__socket_type_SOCK_DGRAM as core::ffi::c_int,
        )
    };
    let ticket = match session::admit(&zone, mcf, scf, log) {
        None => return false,
        Some((a @ (Admission::Reject { .. } | Admission::Recovering { .. }), state)) => {
            let why = Refusal::of(&a, state).unwrap_or(Refusal::Open);
            // SAFETY: `s` is live.
            unsafe { session::set_mark(s, Word::Refused(why)) };
            return true;
        }
        Some((Admission::Probe(t), _)) => t,
        Some((Admission::Pass { would_reject }, _)) => {
            // An ordinary session: its word says all there is. A UDP session's silence is
            // nginx's to judge (proxy_responses, proxy_timeout).
            let plain = Plain::new(usize::from(scf.index), mono_ms(), udp);
            if let Some(p) = plain.map(|p| if would_reject { p.would_refuse() } else { p }) {
                // SAFETY: `s` is live.
                unsafe { session::set_mark(s, Word::Plain(p)) };
            }
            return false;
        }
    };
    // The probe waits from its start, held in the worker's table with its ticket.
    let now = mono_ms();
    // SAFETY: the table's own step.
    let opened = unsafe {
        session::with_waiting(mcf, |w| {
            let id = w.probes.open(scf.index, ticket, now, !udp)?;
            Some((id, w.probes.next_deadline()))
        })
    };
    if let Some((id, due)) = opened {
        // SAFETY: `s` is live.
        unsafe { session::set_mark(s, Word::Probe(id)) };
        if let Some(due) = due {
            session::arm(mcf, due);
        }
    }
    false
}
