//! The PRECONTENT phase: in a location that passes to a fixed breaker-enabled upstream and
//! has no cache, an open breaker answers here, before the proxy module reads the body or
//! builds the upstream request — about as cheap as a `return 503`. This phase only ever
//! short-circuits or lets through (a closed breaker: it creates the request's state, which
//! `peer.init` takes without asking again): a probe is claimed in `peer.init`, and a request
//! that may become one, or take a slot of the adaptive limit, has its whole body read here
//! first (`body.rs`), so a slow upload never holds the probe or a slot — even where the body
//! would be passed on as it arrives (gRPC, `proxy_request_buffering off`). Locations with a
//! cache (a fresh hit or a stale entry may still answer) or an upstream chosen at run time
//! are decided in `peer.init`, where a request whose body is still arriving is never the
//! probe.

use crate::conf::ClassSetting;
use circuit_breaker_core::breaker::Admission;
use circuit_breaker_core::snapshot::State;
use nginx_sys::{ngx_http_request_t, ngx_int_t, NGX_DECLINED, NGX_HTTP_INTERNAL_SERVER_ERROR};

use crate::conf::LocConf;
use crate::request::{self, Label};
use crate::respond;
use circuit_breaker_shell::clock::mono_ms;
use circuit_breaker_shell::ffi::guard;
use circuit_breaker_shell::zone::{Handle, Zone};

use super::body;

/// No guard around the whole: this part only reads confs, the request's ctx and the gate,
/// and nothing in it can panic; each branch that does more has its own, and is `extern "C"`
/// (it cannot unwind), so that it is a tail call with nothing to save first
/// (`scripts/bench-instructions`, open_503).
pub unsafe extern "C" fn handler(r: *mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: nginx runs phase handlers with a live request.
    let req = unsafe { &mut *r };
    let Some(lcf) = request::loc_conf(req) else {
        return NGX_DECLINED as ngx_int_t;
    };
    // An upstream whose peer.init was not wrapped has no breaker's hint ever set: it finds no
    // gate below, and peer.init (nginx's own) decides.
    if lcf.precontent.is_null() || request::answered(req) {
        return NGX_DECLINED as ngx_int_t;
    }
    let handle = lcf.hint.get();
    // The gate read once, inline, and a pass told by its mode alone, rather than asking
    // `admit_unlocked` (`scripts/bench-instructions`, closed); a cooldown apart, from the
    // same reading. Until peer.init has found the breaker (the
    // hint), there is no gate, and peer.init asks.
    if let Some(g) = Zone::raw_gate(handle, lcf.key_hash) {
        if g.passes() {
            return passed(req, lcf, handle);
        }
        if let Some((until_ms, wait_ms)) = g.rejects() {
            return rejected(req, lcf, handle, until_ms, wait_ms);
        }
    }
    not_passing(req, lcf, handle)
}

/// An open breaker's request, from the gate's cooldown: short-circuited, or left to
/// peer.init once the cooldown is over (a probe may be due). The common case calls nothing,
/// and the rest are tail calls (`scripts/bench-instructions`, open_503).
#[inline(never)]
extern "C" fn rejected(
    req: &mut ngx_http_request_t,
    lcf: &LocConf,
    handle: Handle,
    until_ms: u64,
    wait_ms: u64,
) -> ngx_int_t {
    guard(NGX_DECLINED as ngx_int_t, || {
        let Some(Admission::Reject { retry_after_ms }) =
            Zone::admit_reject(handle, until_ms, wait_ms, mono_ms())
        else {
            // The cooldown is over: this request may be the probe.
            return asked_later(req, lcf);
        };
        if let Some(ClassSetting::On { .. }) = lcf.class {
            let log = super::connection_log(req);
            super::class::note_rejected(req, handle, log);
        }
        if lcf.redirects || respond::grpc_client(req) {
            return kept_short_circuit(req, lcf, retry_after_ms);
        }
        request::mark_open_here(req);
        match respond::reject_in_place(req, OPEN, retry_after_ms) {
            Some(rc) => rc,
            None => reject_headers(req, retry_after_ms),
        }
    })
}

const OPEN: Label = Label::State(State::Open);

/// [`rejected`] where the request's state must be kept in its pool (an `error_page` may
/// move the request on), or where a gRPC client gets its own answer.
#[cold]
#[inline(never)]
extern "C" fn kept_short_circuit(
    req: &mut ngx_http_request_t,
    lcf: &LocConf,
    retry_after_ms: u64,
) -> ngx_int_t {
    guard(NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t, || {
        short_circuit(req, lcf, OPEN, retry_after_ms)
    })
}

/// [`rejected`]'s headers where they cannot be written in place.
#[cold]
#[inline(never)]
extern "C" fn reject_headers(req: &mut ngx_http_request_t, retry_after_ms: u64) -> ngx_int_t {
    guard(NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t, || {
        respond::reject(req, OPEN, retry_after_ms)
    })
}

/// The PRECONTENT phase for a breaker whose gate is neither a pass nor a cooldown: a ramp's
/// share, or nothing to tell without the lock (peer.init asks). The gate is read again:
/// rare enough that passing the first reading costs the common paths more.
#[inline(never)]
extern "C" fn not_passing(
    req: &mut ngx_http_request_t,
    lcf: &LocConf,
    handle: Handle,
) -> ngx_int_t {
    guard(NGX_DECLINED as ngx_int_t, || {
        // A slot is taken once the body is here: read it before the ramp's draw, so that the
        // request draws once.
        if body_first(req, lcf, true) {
            return body::read_first(req);
        }
        // A ramp lets a request through by its class.
        let class = match lcf.class {
            Some(ClassSetting::On { .. }) => {
                let log = super::connection_log(req);
                super::class::peek(req, log)
            }
            _ => None,
        };
        let answer = Zone::raw_gate(handle, lcf.key_hash)
            .and_then(|g| Zone::admit_raw_as(handle, g, mono_ms(), class));
        let (label, retry_after_ms) = match answer {
            Some(Admission::Pass { .. }) => return passed(req, lcf, handle),
            Some(Admission::Reject { retry_after_ms }) => (OPEN, retry_after_ms),
            Some(Admission::Recovering { retry_after_ms }) => (Label::Recovering, retry_after_ms),
            _ => return asked_later(req, lcf),
        };
        short_circuit(req, lcf, label, retry_after_ms)
    })
}

/// A request that `peer.init` decides, where it may become the probe: its body first.
fn asked_later(req: &mut ngx_http_request_t, lcf: &LocConf) -> ngx_int_t {
    if body_first(req, lcf, false) {
        return body::read_first(req);
    }
    NGX_DECLINED as ngx_int_t
}

/// Whether the request's body is read here first: it has one nobody has read, and it may
/// become the probe or (`for_slot`) take a slot of the limit. Never in a dry run, which
/// changes no request.
fn body_first(req: &ngx_http_request_t, lcf: &LocConf, for_slot: bool) -> bool {
    // SAFETY: null, or a fixed upstream's conf set when merging, which lives as long as the
    // configuration.
    let Some(scf) = (unsafe { lcf.precontent.as_ref() }) else {
        return false;
    };
    !scf.breaker.is_some_and(|c| c.dry_run)
        && (!for_slot || scf.limit.is_some())
        && body::unread(req)
}

/// A request the breaker lets through (closed, or a ramp's share): its state is created here,
/// with what this phase already found (the conf, the route, the breaker's handle), and
/// peer.init does not ask again, rather than leaving a mark that peer.init follows
/// (`scripts/bench-instructions`, closed).
#[inline(never)]
extern "C" fn passed(req: &mut ngx_http_request_t, lcf: &LocConf, handle: Handle) -> ngx_int_t {
    guard(NGX_DECLINED as ngx_int_t, || {
        // SAFETY: null, or a fixed upstream's conf set when merging, which lives as long as
        // the configuration (read again rather than passed: one register more for the gate).
        let Some(scf) = (unsafe { lcf.precontent.as_ref() }) else {
            return NGX_DECLINED as ngx_int_t;
        };
        // A slot of the limit goes to a request whose body is here.
        if scf.limit.is_some() && body_first(req, lcf, true) {
            return body::read_first(req);
        }
        // With no call (a spare state, the default route made): nothing to save first
        // (`scripts/bench-instructions`, closed).
        let route = lcf
            .route
            .as_ref()
            .or_else(|| crate::conf::default_route_made());
        match route {
            Some(route) if request::attach_passed_spare(req, scf, route, lcf.key_hash, handle) => {
                NGX_DECLINED as ngx_int_t
            }
            _ => passed_new(req, lcf, handle),
        }
    })
}

/// [`passed`] when this worker keeps no spare state (a new one), or before the default
/// route is made.
#[cold]
#[inline(never)]
extern "C" fn passed_new(req: &mut ngx_http_request_t, lcf: &LocConf, handle: Handle) -> ngx_int_t {
    guard(NGX_DECLINED as ngx_int_t, || {
        // SAFETY: as in `passed`.
        if let Some(scf) = unsafe { lcf.precontent.as_ref() } {
            let route = request::route_of(Some(lcf));
            request::attach_passed(req, scf, route, lcf.key_hash, handle);
        }
        NGX_DECLINED as ngx_int_t
    })
}

/// Answers a request the breaker turns away, keeping its state for the variables. Inline in
/// its one caller.
#[inline(always)]
fn short_circuit(
    req: &mut ngx_http_request_t,
    lcf: &LocConf,
    label: Label,
    retry_after_ms: u64,
) -> ngx_int_t {
    let kept = if lcf.redirects {
        request::attach_rejected(req, lcf.precontent, request::route_of(Some(lcf)), label)
    } else {
        request::mark_rejected_here(req, label)
            || request::attach_rejected(req, lcf.precontent, request::route_of(Some(lcf)), label)
    };
    if !kept {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    respond::answer(req, label, retry_after_ms)
}
