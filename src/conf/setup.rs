//! What is derived once the http block is parsed: each location's fixed upstream and route,
//! which upstreams have breakers (and their balancer's `peer.init`, to be wrapped), and the
//! breakers the zone must hold for this configuration.

use core::ffi::{c_char, c_void, CStr};

use circuit_breaker_core::breaker::{probe_within_presence, FailureSet};
use circuit_breaker_core::directive::{LIMIT_DIRECTIVE, PROBE_DIRECTIVE, RETRY_DIRECTIVE};
use nginx_sys::{
    ngx_conf_t, ngx_http_conf_ctx_t, ngx_http_core_loc_conf_t, ngx_http_upstream_conf_t,
    ngx_http_upstream_init_peer_pt, ngx_http_upstream_srv_conf_t, ngx_int_t, ngx_module_t,
    NGX_ERROR, NGX_LOG_EMERG, NGX_OK,
};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::http::{
    HttpModuleMainConf, HttpModuleServerConf, Merge, NgxHttpCoreModule, NgxHttpUpstreamModule,
};

use super::directives::{add_zone, DEFAULT_ZONE_NAME, DEFAULT_ZONE_SIZE};
use super::scheme::Pass;
use super::Module;
use super::{EjectSetting, LocConf, MainConf, Proxied, StatusMode};
use circuit_breaker_shell::ffi::{hash_name, key_hash};
use circuit_breaker_shell::zone::{Key, Kind, Wanted};

/// The content modules whose location conf starts with an `ngx_http_upstream_conf_t`: from
/// it a location's fixed upstream can be read. Found by name among the cycle's modules, so an
/// nginx built without one of them still loads this module.
const UPSTREAM_MODULES: [&CStr; 6] = [
    c"ngx_http_proxy_module",
    c"ngx_http_grpc_module",
    c"ngx_http_fastcgi_module",
    c"ngx_http_uwsgi_module",
    c"ngx_http_scgi_module",
    c"ngx_http_memcached_module",
];

/// `preconfiguration`: finds the upstream content modules among the cycle's modules.
///
/// # Safety
/// `cf` must be the configuration being parsed, inside the http block.
pub unsafe fn find_upstream_modules(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: `cf` is the configuration being parsed, inside the http block (this fn's contract),
    // so its http confs are set.
    let cfr = unsafe { &*cf };
    let Some(mcf) = Module::main_conf_mut(cfr) else {
        return NGX_ERROR as ngx_int_t;
    };
    // SAFETY: the cycle being configured has its module list set before parsing begins.
    let cycle = unsafe { &*cfr.cycle };
    let (first, n) = (cycle.modules, cycle.modules_n);
    // SAFETY: `modules` holds `modules_n` module pointers.
    let modules: &[*mut ngx_module_t] = unsafe { core::slice::from_raw_parts(first, n) };
    mcf.upstream_modules.clear();
    for &m in modules {
        // SAFETY: every entry is a loaded module; `name` is a NUL-terminated string.
        let (m, name) = unsafe { (&*m, CStr::from_ptr((*m).name)) };
        if UPSTREAM_MODULES.contains(&name) {
            mcf.upstream_modules.push(m.ctx_index);
        }
        if name == UPSTREAM_MODULES[0] {
            mcf.proxy_module = Some(m.ctx_index);
        }
        if name == UPSTREAM_MODULES[1] {
            mcf.grpc_module = Some(m.ctx_index);
        }
    }
    NGX_OK as ngx_int_t
}

/// `merge_loc_conf`: inherits as usual, then notes which upstream each location passes to.
/// nginx points `cf->ctx`'s loc_conf at the location being merged, and the content modules
/// set their upstream while parsing, so it is known here.
pub unsafe extern "C" fn merge_loc_conf(
    cf: *mut ngx_conf_t,
    prev: *mut c_void,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx merges with the configuration being parsed and two of our loc confs.
    circuit_breaker_shell::ffi::guard(NGX_CONF_ERROR, || unsafe { merge(cf, prev, conf) })
}

unsafe fn merge(cf: *mut ngx_conf_t, prev: *mut c_void, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes two of our loc confs.
    let (prev, lcf) = unsafe { (&*prev.cast::<LocConf>(), &mut *conf.cast::<LocConf>()) };
    if lcf.merge(prev).is_err() {
        return NGX_CONF_ERROR;
    }
    // SAFETY: `cf` is live while merging.
    let cfr = unsafe { &*cf };
    let Some(mcf) = Module::main_conf_mut(cfr) else {
        return NGX_CONF_OK;
    };
    lcf.main = mcf;
    // SAFETY: during a merge, cf->ctx is the http conf ctx of the location being merged.
    let ctx = unsafe { &*cfr.ctx.cast::<ngx_http_conf_ctx_t>() };
    // SAFETY: the core module's loc conf of the same location.
    let clcf = unsafe {
        &*(*ctx.loc_conf.add(nginx_sys::ngx_http_core_module.ctx_index))
            .cast::<ngx_http_core_loc_conf_t>()
    };
    if lcf.status != StatusMode::Off && !lcf.owns_content(clcf) {
        ngx::ngx_log_error!(
            NGX_LOG_EMERG,
            cfr.log,
            "\"circuit_breaker_status\" cannot share a location with another content handler, \
             give it a location of its own in {}:{}",
            lcf.status_at.0,
            lcf.status_at.1
        );
        return NGX_CONF_ERROR;
    }
    // The core module merged first: its error pages include those inherited.
    lcf.redirects = !clcf.error_pages.is_null() || clcf.post_action.len != 0;
    // Whether an open key's requests may be answered from this location's cache: known when
    // its own `*_pass` gave it its handler (an `if` block inside it learns it at run time).
    if let Some(&(_, index)) = clcf.handler.and_then(|h| {
        mcf.upstream_handlers
            .iter()
            .find(|&&(p, _)| p == h as usize)
    }) {
        // SAFETY: loc_conf has an entry per HTTP module, and `index` is an upstream module's,
        // whose loc conf begins with its ngx_http_upstream_conf_t.
        let ucf = unsafe {
            (*ctx.loc_conf.add(index))
                .cast::<ngx_http_upstream_conf_t>()
                .as_ref()
        };
        if let Some(ucf) = ucf {
            lcf.learn_cache(ucf);
        }
    }
    let mut fixed = None;
    let mut several = false;
    for &index in &mcf.upstream_modules {
        // SAFETY: loc_conf has an entry per HTTP module, and `index` is one's ctx_index.
        let conf = unsafe { *ctx.loc_conf.add(index) };
        // SAFETY: these modules' loc confs begin with their ngx_http_upstream_conf_t.
        let Some(ucf) = (unsafe { conf.cast::<ngx_http_upstream_conf_t>().as_ref() }) else {
            continue;
        };
        // Its own `proxy_pass` (or `grpc_pass`) says what it speaks; an `if` block inside a
        // location has the location's, as the module's own settings do.
        if let Some(&pass) = mcf.pass_schemes.get(&(conf as usize)) {
            lcf.pass = Some(pass);
        }
        let tls = lcf.pass == Some(Pass::Tls);
        // proxy_pass and grpc_pass: the modules that speak TLS to an upstream.
        let proxy = mcf.proxy_module == Some(index) || mcf.grpc_module == Some(index);
        let ucf_ptr = core::ptr::from_ref(ucf).cast_mut();
        if ucf.upstream.is_null() {
            if proxy && tls {
                mcf.dynamic_tls.push((ucf_ptr, location_name(clcf)));
            }
            continue;
        }
        if proxy {
            mcf.proxied.push(Proxied {
                upstream: ucf.upstream,
                conf: ucf_ptr,
                tls,
                location: location_name(clcf),
            });
        }
        several |= fixed.is_some();
        fixed = Some(ucf);
        if let Some(route) = lcf.route.as_ref() {
            let pair = (ucf.upstream as usize, route.name.clone());
            if !mcf.pair_set.contains(&pair) {
                mcf.pair_set.insert(pair.clone());
                mcf.pairs.push(pair);
            }
        }
    }
    match fixed {
        // Several content modules name an upstream: leave the decision to peer.init.
        Some(_) if several => {}
        Some(ucf) => {
            lcf.upstream = ucf.upstream;
            lcf.cached = cached(ucf);
            // SAFETY: the upstream's conf lives as long as the configuration; every upstream
            // block has been parsed by the time locations are merged.
            if let Some(scf) = Module::server_conf(unsafe { &*ucf.upstream }) {
                let route = lcf.route.as_ref().unwrap_or_else(|| super::default_route());
                lcf.key_hash = circuit_breaker_shell::ffi::key_hash(scf.name_hash, route.hash);
                if scf.breaker.is_some() && !lcf.cached {
                    lcf.precontent = scf;
                }
            }
        }
        None => {
            // No fixed upstream, but a content handler (other than ours) may pick one at
            // run time.
            let runtime = clcf.handler.is_some() && lcf.status == StatusMode::Off;
            if let (true, Some(route)) = (runtime, lcf.route.as_ref()) {
                if !mcf.dynamic_routes.contains(&route.name) {
                    mcf.dynamic_routes.push(route.name.clone());
                }
            }
        }
    }
    NGX_CONF_OK
}

fn location_name(clcf: &ngx_http_core_loc_conf_t) -> String {
    String::from_utf8_lossy(clcf.name.as_bytes()).into_owned()
}

#[cfg(ngx_http_cache)]
pub(crate) fn cached(ucf: &ngx_http_upstream_conf_t) -> bool {
    !ucf.cache_zone.is_null() || !ucf.cache_value.is_null()
}

#[cfg(not(ngx_http_cache))]
pub(crate) fn cached(_ucf: &ngx_http_upstream_conf_t) -> bool {
    false
}

/// Whether the location's cache updates expired entries in the background.
#[cfg(ngx_http_cache)]
pub(crate) fn background(ucf: &ngx_http_upstream_conf_t) -> bool {
    cached(ucf) && ucf.cache_background_update != 0
}

#[cfg(not(ngx_http_cache))]
pub(crate) fn background(_ucf: &ngx_http_upstream_conf_t) -> bool {
    false
}

/// After the http block is parsed and every upstream has its balancer's `peer.init`: records
/// each breaker-enabled upstream, hands its `peer.init` to `wrap` (as the keepalive module
/// wraps it, but late enough that directive order never matters), and makes sure a zone
/// exists.
///
/// # Safety
/// `cf` must be the configuration being parsed, inside the http block.
pub unsafe fn collect_upstreams(
    cf: *mut ngx_conf_t,
    wrap: ngx_http_upstream_init_peer_pt,
) -> ngx_int_t {
    // SAFETY: `cf` is the configuration being parsed, inside the http block (this fn's contract),
    // so its http confs are set.
    let cfr = unsafe { &*cf };
    let Some(mcf) = Module::main_conf_mut(cfr) else {
        return NGX_ERROR as ngx_int_t;
    };
    // Every location is merged: the schemes went into their confs.
    drop(core::mem::take(&mut mcf.pass_schemes));
    let Some(umcf) = NgxHttpUpstreamModule::main_conf(cfr) else {
        return NGX_OK as ngx_int_t;
    };
    let mut routes: std::collections::HashMap<usize, Vec<String>> = Default::default();
    mcf.pair_set.clear();
    for (u, r) in mcf.pairs.drain(..) {
        routes.entry(u).or_default().push(r);
    }
    // SAFETY: the upstream module's array holds pointers to its srv confs.
    let upstreams: &[*mut ngx_http_upstream_srv_conf_t] = unsafe { umcf.upstreams.as_slice() };
    for &uscf in upstreams {
        // SAFETY: each entry is an upstream block's srv conf, allocated from the configuration's
        // pool and live for the cycle.
        let uscf = unsafe { &mut *uscf };
        let Some(scf) = Module::server_conf_mut(uscf) else {
            continue; // an implicit upstream (proxy_pass to a host) has no srv confs
        };
        let Some(cfg) = scf.breaker.as_mut() else {
            let alone = [
                (scf.failures.is_some(), "circuit_breaker_failure"),
                (scf.eject != EjectSetting::Unset, "circuit_breaker_eject"),
                (scf.probe_directive.is_some(), PROBE_DIRECTIVE),
                (scf.limit_directive.is_some(), LIMIT_DIRECTIVE),
                (scf.retry_directive.is_some(), RETRY_DIRECTIVE),
            ];
            if let Some((_, d)) = alone.iter().find(|(given, _)| *given) {
                // SAFETY: an upstream block's file name is a NUL-terminated string.
                let file = unsafe { CStr::from_ptr(uscf.file_name.cast()) };
                ngx::ngx_log_error!(
                    NGX_LOG_EMERG,
                    cfr.log,
                    "\"{}\" requires \"circuit_breaker\" in upstream \"{}\" in {}:{}",
                    d,
                    String::from_utf8_lossy(uscf.host.as_bytes()),
                    file.to_string_lossy(),
                    uscf.line
                );
                return NGX_ERROR as ngx_int_t;
            }
            continue;
        };
        cfg.failures = scf.failures.unwrap_or(FailureSet::DEFAULT);
        // The companions' own directives, given before or after `circuit_breaker`.
        if let Some(probe) = scf.probe_directive.take() {
            cfg.active = true;
            scf.probe = Some(probe);
        }
        if let Some(limit) = scf.limit_directive.take() {
            scf.limit = Some(limit);
        }
        if let Some(retry) = scf.retry_directive.take() {
            scf.retry = retry;
        }
        scf.presence_when_closed = probe_within_presence(cfg);
        if uscf.peer.init.is_none() {
            continue;
        }
        scf.original_init = uscf.peer.init;
        scf.uscf = &mut *uscf as *mut _;
        uscf.peer.init = wrap;
        scf.main = mcf;
        let key = uscf as *mut ngx_http_upstream_srv_conf_t as usize;
        scf.routes = routes
            .remove(&key)
            .unwrap_or_default()
            .into_iter()
            .collect();
        let ptr: *mut super::SrvConf = scf;
        mcf.upstreams.push(ptr);
        mcf.by_name.insert(scf.name.clone(), ptr);
    }
    if (!mcf.upstreams.is_empty() || !mcf.keyed.is_empty()) && mcf.zone.is_null() {
        // SAFETY: still inside configuration parsing.
        if unsafe { add_zone(cf, mcf, DEFAULT_ZONE_NAME, DEFAULT_ZONE_SIZE) }.is_err() {
            return NGX_ERROR as ngx_int_t;
        }
    }
    if !mcf.keyed.is_empty() {
        let cap = mcf.keyed_capacity();
        let place = circuit_breaker_core::keyed::Table::PLACE_BYTES;
        let kib = cap * place / 1024;
        // SAFETY: `cf` is live while configuration is parsed.
        let log = unsafe { (*cf).log };
        ngx::ngx_log_error!(
            nginx_sys::NGX_LOG_NOTICE,
            log,
            "circuit breaker zone \"{}\" keeps {} keys for \"circuit_breaker_key\" ({} places \
             of {} bytes, {} KiB)",
            mcf.zone_name.0,
            circuit_breaker_core::keyed::Table::keys_kept(cap),
            cap,
            place,
            kib
        );
        if cap == 0 {
            ngx::ngx_log_error!(
                nginx_sys::NGX_LOG_EMERG,
                log,
                "circuit breaker zone \"{}\" is too small for \"circuit_breaker_key\"",
                mcf.zone_name.0
            );
            return NGX_ERROR as ngx_int_t;
        }
    }
    NGX_OK as ngx_int_t
}

/// Whether a breaker of this http block judges requests: an upstream's (collected by
/// [`collect_upstreams`]) or a key's.
///
/// # Safety
/// `cf` must be the configuration being parsed, inside the http block, after
/// [`collect_upstreams`].
pub unsafe fn judges_requests(cf: *mut ngx_conf_t) -> bool {
    // SAFETY: as for this function.
    Module::main_conf(unsafe { &*cf })
        .is_some_and(|m| !m.upstreams.is_empty() || !m.keyed.is_empty())
}

/// Appends a handler to an http phase.
///
/// # Safety
/// `cf` must be the configuration being parsed, during postconfiguration.
pub unsafe fn add_phase_handler(
    cf: *mut ngx_conf_t,
    phase: nginx_sys::ngx_http_phases,
    handler: nginx_sys::ngx_http_handler_pt,
) -> ngx_int_t {
    // SAFETY: `cf` is the configuration being parsed, in postconfiguration (this fn's contract), so
    // the core module's main conf is set.
    let Some(cmcf) = NgxHttpCoreModule::main_conf_mut(unsafe { &*cf }) else {
        return NGX_ERROR as ngx_int_t;
    };
    let phase = &mut cmcf.phases[phase as usize];
    // SAFETY: the phase's handler array, during configuration.
    let h = unsafe { nginx_sys::ngx_array_push(&mut phase.handlers) }
        .cast::<nginx_sys::ngx_http_handler_pt>();
    // SAFETY: null or a fresh element of the handlers array.
    match unsafe { h.as_mut() } {
        Some(h) => {
            *h = handler;
            NGX_OK as ngx_int_t
        }
        None => NGX_ERROR as ngx_int_t,
    }
}

/// The breakers this configuration knows: each upstream's own (with its retry budget), one
/// per route whose locations pass to it and one per server when ejection is on (created now),
/// and those of routes that may meet any upstream at run time (kept if they exist, created
/// on first use).
pub fn wanted(mcf: &MainConf) -> Vec<Wanted<'_>> {
    let mut out = Vec::new();
    for &s in &mcf.upstreams {
        // SAFETY: upstream confs live as long as the configuration.
        let s = unsafe { &*s };
        let Some(cfg) = s.breaker else { continue };
        let default = super::default_route();
        let fixed = s.routes.iter().map(|r| (r.as_str(), true));
        let dynamic = mcf
            .dynamic_routes
            .iter()
            .filter(|r| !s.routes.contains(r))
            .map(|r| (r.as_str(), false));
        for (route, eager) in [(default.name.as_str(), true)]
            .into_iter()
            .chain(fixed)
            .chain(dynamic)
        {
            let own = route == default.name;
            out.push(Wanted {
                key: Key {
                    hash: key_hash(s.name_hash, hash_name(route.as_bytes())),
                    upstream: s.name.as_bytes(),
                    route: route.as_bytes(),
                    kind: Kind::Route,
                },
                cfg,
                eager,
                retry: if own { s.retry } else { None },
                limit: s.limit,
            });
        }
        for server in s
            .pool
            .iter()
            .flat_map(|p| p.servers.iter().map(move |v| (p, v)))
        {
            out.push(Wanted {
                key: s.server_key(server.1),
                cfg: server.0.cfg,
                eager: true,
                retry: None,
                limit: None,
            });
        }
    }
    out
}
