//! The PRECONTENT phase: in a location that passes to a fixed breaker-enabled upstream and
//! has no cache, an open breaker answers here, before the proxy module reads the body or
//! builds the upstream request — about as cheap as a `return 503`. This phase only ever
//! short-circuits: a probe is claimed in `peer.init`, once the body has been read, so a slow
//! upload never holds the instance's probe slot. Locations with a cache (a fresh hit or a
//! stale entry may still answer) or an upstream chosen at run time are decided in
//! `peer.init`.

use circuit_breaker_core::breaker::Admission;
use nginx_sys::{ngx_http_request_t, ngx_int_t, NGX_DECLINED, NGX_HTTP_INTERNAL_SERVER_ERROR};
use ngx::http::HttpModuleServerConf;

use super::admit::ask_unlocked;
use crate::conf::Module;
use crate::ffi::guard;
use crate::request::{self, Label};
use crate::respond;

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
        if scf.breaker.is_none() || scf.original_init.is_none() || request::here(req).is_some() {
            return NGX_DECLINED as ngx_int_t;
        }
        let route = request::route_of(Some(lcf));
        let hint = &lcf.hint;
        let Some(state) = request::attach(req, scf, route) else {
            return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
        };
        match ask_unlocked(state, Some(hint)) {
            Some(
                Admission::Reject { retry_after_ms } | Admission::Recovering { retry_after_ms },
            ) => {
                let label = state
                    .label
                    .unwrap_or(Label::State(circuit_breaker_core::snapshot::State::Open));
                respond::reject(req, label, retry_after_ms)
            }
            Some(Admission::Pass { .. }) => {
                state.passed_early = true;
                NGX_DECLINED as ngx_int_t
            }
            _ => NGX_DECLINED as ngx_int_t,
        }
    })
}
