//! The PRECONTENT phase: in a location that passes to a fixed breaker-enabled upstream and
//! has no cache, an open breaker answers here, before the proxy module reads the body or
//! builds the upstream request — about as cheap as a `return 503`. This phase only ever
//! short-circuits or lets through (a closed breaker: it creates the request's state, which
//! `peer.init` takes without asking again): a probe is claimed in `peer.init`, once the body
//! has been read, so a slow upload never holds the instance's probe slot. Locations with a
//! cache (a fresh hit or a stale entry may still answer) or an upstream chosen at run time
//! are decided in `peer.init`.

use circuit_breaker_core::breaker::Admission;
use nginx_sys::{ngx_http_request_t, ngx_int_t, NGX_DECLINED, NGX_HTTP_INTERNAL_SERVER_ERROR};
use ngx::http::HttpModuleServerConf;

use crate::clock::mono_ms;
use crate::conf::Module;
use crate::conf::{LocConf, SrvConf};
use crate::ffi::guard;
use crate::request::{self, Label};
use crate::respond;
use crate::zone::{Handle, RawGate, Zone};

pub unsafe extern "C" fn handler(r: *mut ngx_http_request_t) -> ngx_int_t {
    guard(NGX_DECLINED as ngx_int_t, || {
        // SAFETY: nginx runs phase handlers with a live request.
        let req = unsafe { &mut *r };
        let Some(lcf) = request::loc_conf(req) else {
            return NGX_DECLINED as ngx_int_t;
        };
        if lcf.upstream.is_null() || lcf.cached {
            return NGX_DECLINED as ngx_int_t;
        }
        // SAFETY: a fixed upstream's conf lives as long as the configuration.
        let Some(scf) = Module::server_conf(unsafe { &*lcf.upstream }) else {
            return NGX_DECLINED as ngx_int_t;
        };
        if scf.breaker.is_none() || scf.original_init.is_none() || request::answered(req) {
            return NGX_DECLINED as ngx_int_t;
        }
        // SAFETY: the main conf outlives the requests run under its configuration.
        let Some(zone) = (unsafe { scf.main.as_ref() }).and_then(|m| m.zone()) else {
            return NGX_DECLINED as ngx_int_t;
        };
        // The common case, a closed breaker: the state is created here, with what this phase
        // already found (the conf, the route, the breaker's handle), and peer.init does not
        // ask again. 40 instructions per closed request less than a mark that peer.init
        // follows (`scripts/bench-instructions`, closed).
        let handle = lcf.hint.get();
        // The gate read once, inline, and a pass told by its mode alone: 34 instructions per
        // closed request less than asking `admit_unlocked` (`scripts/bench-instructions`);
        // any other answer apart, from the same reading.
        let raw = zone.raw_gate(handle, lcf.key_hash);
        if raw.is_some_and(|g| g.passes()) {
            let route = request::route_of(Some(lcf));
            request::attach_passed(req, scf, route, lcf.key_hash, handle);
            return NGX_DECLINED as ngx_int_t;
        }
        not_passing(req, lcf, scf, zone, handle, raw)
    })
}

/// The PRECONTENT phase for a breaker whose gate is not a plain pass: a ramp's share, a
/// rejection, or nothing to tell without the lock (peer.init asks). Apart from the pass:
/// 35 instructions per short-circuit less (`scripts/bench-instructions`, open_503); from the
/// gate the pass's test read, 21 less again.
#[inline(never)]
fn not_passing(
    req: &mut ngx_http_request_t,
    lcf: &LocConf,
    scf: &SrvConf,
    zone: &Zone,
    handle: Handle,
    raw: Option<RawGate>,
) -> ngx_int_t {
    let answer = raw.and_then(|g| zone.admit_raw(handle, g, mono_ms()));
    let (label, retry_after_ms) = match answer {
        Some(Admission::Pass { .. }) => return ramp_passed(req, lcf, scf, handle),
        Some(Admission::Reject { retry_after_ms }) => (
            Label::State(circuit_breaker_core::snapshot::State::Open),
            retry_after_ms,
        ),
        Some(Admission::Recovering { retry_after_ms }) => (Label::Recovering, retry_after_ms),
        _ => return NGX_DECLINED as ngx_int_t,
    };
    short_circuit(req, lcf, label, retry_after_ms)
}

/// A request a ramp lets through: as a pass, apart from the short-circuit.
#[cold]
#[inline(never)]
fn ramp_passed(
    req: &mut ngx_http_request_t,
    lcf: &LocConf,
    scf: &SrvConf,
    handle: Handle,
) -> ngx_int_t {
    let route = request::route_of(Some(lcf));
    request::attach_passed(req, scf, route, lcf.key_hash, handle);
    NGX_DECLINED as ngx_int_t
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
        request::attach_rejected(req, request::route_of(Some(lcf)), label)
    } else {
        request::mark_rejected_here(req, label)
            || request::attach_rejected(req, request::route_of(Some(lcf)), label)
    };
    if !kept {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    respond::reject(req, label, retry_after_ms)
}
