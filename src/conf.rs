//! Directives: typed configuration for the http block, upstream blocks and locations, and the
//! post-configuration step that wraps each breaker-enabled upstream's `peer.init`.

use core::ffi::{c_char, c_void};
use core::ptr::null_mut;

use circuit_breaker_core::breaker::{BreakerConfig, FailureSet};
use circuit_breaker_core::directive::{self as config, ConfError, Units};
use nginx_sys::{
    ngx_array_t, ngx_command_t, ngx_conf_t, ngx_flag_t, ngx_http_upstream_conf_t,
    ngx_http_upstream_init_peer_pt, ngx_http_upstream_srv_conf_t, ngx_int_t, ngx_module_t,
    ngx_shared_memory_add, ngx_shm_zone_t, ngx_str_t, NGX_CONF_UNSET, NGX_ERROR, NGX_LOG_EMERG,
    NGX_OK,
};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::http::{
    HttpModuleLocationConf, HttpModuleMainConf, HttpModuleServerConf, Merge, MergeConfigError,
    NgxHttpCoreModule, NgxHttpUpstreamModule,
};
use ngx::ngx_conf_log_error;

use crate::util::hash_name;
use crate::Module;

/// The default zone, created when breakers exist but no `circuit_breaker_zone` was given.
const DEFAULT_ZONE_NAME: &str = "circuit_breaker";
const DEFAULT_ZONE_SIZE: usize = 1024 * 1024;
/// As `limit_req`: a slab pool needs a few pages to hold anything at all.
pub const MIN_ZONE_SIZE: u64 = 8 * 4096;

/// `http {}` level: the zone and every breaker-enabled upstream.
pub struct MainConf {
    pub zone: *mut ngx_shm_zone_t,
    pub zone_name: String,
    /// Breaker-enabled upstreams, filled in by `postconfiguration`.
    pub upstreams: Vec<*mut SrvConf>,
    /// (upstream conf, route) pairs seen in locations that pass to a fixed upstream.
    pairs: Vec<(*mut ngx_http_upstream_srv_conf_t, String)>,
    /// Routes of locations whose upstream is only known at run time (`proxy_pass http://$x`):
    /// they may meet any breaker-enabled upstream.
    pub dynamic_routes: Vec<String>,
    /// The zone generation this configuration created; older workers do not add breakers.
    pub generation: u64,
}

impl Default for MainConf {
    fn default() -> Self {
        MainConf {
            zone: null_mut(),
            zone_name: String::new(),
            upstreams: Vec::new(),
            pairs: Vec::new(),
            dynamic_routes: Vec::new(),
            generation: 0,
        }
    }
}

/// `upstream {}` level (nginx also creates one per `server {}`, unused there).
#[derive(Default)]
pub struct SrvConf {
    /// Set by `circuit_breaker`; the failure set is filled in after parsing.
    pub breaker: Option<BreakerConfig>,
    pub failures: Option<FailureSet>,
    /// Where `circuit_breaker_failure` stood, for the error when `circuit_breaker` is missing.
    failure_at: Option<(String, usize)>,
    /// The upstream's name and its hash, the first half of every breaker key.
    pub name: String,
    pub name_hash: u64,
    pub original_init: ngx_http_upstream_init_peer_pt,
    pub main: *mut MainConf,
    /// Routes whose locations pass to this upstream: their breakers exist from the start.
    pub routes: Vec<String>,
}

impl SrvConf {
    /// Whether (this upstream, `route`) names a breaker requests can reach.
    pub fn knows_route(&self, mcf: &MainConf, route: &str) -> bool {
        route == crate::zone::DEFAULT_ROUTE
            || self.routes.iter().any(|r| r == route)
            || mcf.dynamic_routes.iter().any(|r| r == route)
    }
}

/// A route, the second half of a breaker key.
#[derive(Clone, Debug)]
pub struct Route {
    pub name: String,
    pub hash: u64,
}

/// What the status location may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusMode {
    Off,
    ReadOnly,
    Control,
}

/// `http`, `server` and `location` level.
#[repr(C)]
pub struct LocConf {
    /// `circuit_breaker_header`, set by nginx's own flag slot.
    pub header: ngx_flag_t,
    pub route: Option<Route>,
    pub status: StatusMode,
    pub main: *mut MainConf,
    /// The upstream this location passes to, when fixed (`proxy_pass http://name`), else null.
    pub upstream: *mut ngx_http_upstream_srv_conf_t,
    /// The location caches upstream responses: a hit or a stale entry may answer while open.
    pub cached: bool,
    /// Where this location's breaker was last found in the zone (per worker: written after
    /// fork, in the worker's own copy of the configuration).
    pub node_hint: core::cell::Cell<crate::zone::NodeRef>,
}

impl Default for LocConf {
    fn default() -> Self {
        LocConf {
            header: NGX_CONF_UNSET as ngx_flag_t,
            route: None,
            status: StatusMode::Off,
            main: null_mut(),
            upstream: null_mut(),
            cached: false,
            node_hint: core::cell::Cell::new(crate::zone::NodeRef::NONE),
        }
    }
}

impl Merge for LocConf {
    fn merge(&mut self, prev: &LocConf) -> Result<(), MergeConfigError> {
        if self.header == NGX_CONF_UNSET as ngx_flag_t {
            self.header = if prev.header == NGX_CONF_UNSET as ngx_flag_t {
                0
            } else {
                prev.header
            };
        }
        if self.route.is_none() {
            self.route = prev.route.clone();
        }
        Ok(())
    }
}

impl Merge for SrvConf {
    fn merge(&mut self, _prev: &SrvConf) -> Result<(), MergeConfigError> {
        Ok(())
    }
}

/// The modules whose location conf starts with an `ngx_http_upstream_conf_t` (proxy, grpc,
/// fastcgi, uwsgi, scgi, memcached): from it a location's fixed upstream can be read. Looked
/// up by name, so that an nginx built without one of them still loads the module.
const UPSTREAM_MODULES: [&core::ffi::CStr; 6] = [
    c"ngx_http_proxy_module",
    c"ngx_http_grpc_module",
    c"ngx_http_fastcgi_module",
    c"ngx_http_uwsgi_module",
    c"ngx_http_scgi_module",
    c"ngx_http_memcached_module",
];

/// `merge_loc_conf`: inherits as usual, then notes which upstream each routed location passes
/// to. nginx points `cf->ctx`'s loc_conf at the location being merged, and the content
/// modules set their upstream while parsing, so it is known here.
pub unsafe extern "C" fn merge_loc_conf(
    cf: *mut ngx_conf_t,
    prev: *mut c_void,
    conf: *mut c_void,
) -> *mut c_char {
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
    // SAFETY: during a merge, cf->ctx is the http conf ctx of the location being merged.
    let ctx = unsafe { &*cfr.ctx.cast::<nginx_sys::ngx_http_conf_ctx_t>() };
    let mut fixed = 0;
    for name in UPSTREAM_MODULES {
        // SAFETY: dlsym with the default handle looks the symbol up in nginx itself; a found
        // symbol is that module's ngx_module_t.
        let m = unsafe { nginx_sys::dlsym(null_mut(), name.as_ptr()) }.cast::<ngx_module_t>();
        // SAFETY: as above.
        let Some(m) = (unsafe { m.as_ref() }) else {
            continue;
        };
        // SAFETY: loc_conf has a slot per HTTP module, and m is one.
        let slot = unsafe { *ctx.loc_conf.add(m.ctx_index) };
        // SAFETY: these modules' loc confs begin with their ngx_http_upstream_conf_t.
        let Some(ucf) = (unsafe { slot.cast::<ngx_http_upstream_conf_t>().as_ref() }) else {
            continue;
        };
        if ucf.upstream.is_null() {
            continue;
        }
        fixed += 1;
        lcf.upstream = ucf.upstream;
        lcf.cached = cached(ucf);
        if let Some(route) = lcf.route.as_ref() {
            if !mcf
                .pairs
                .iter()
                .any(|(u, r)| *u == ucf.upstream && *r == route.name)
            {
                mcf.pairs.push((ucf.upstream, route.name.clone()));
            }
        }
    }
    if fixed > 1 {
        // Several content modules name an upstream: leave the decision to peer.init.
        lcf.upstream = null_mut();
    }
    let Some(route) = lcf.route.as_ref() else {
        return NGX_CONF_OK;
    };
    // No fixed upstream: a content handler (other than ours) may pick one at run time.
    // SAFETY: the core module's loc conf of the same location.
    let clcf = unsafe {
        &*(*ctx.loc_conf.add(nginx_sys::ngx_http_core_module.ctx_index))
            .cast::<nginx_sys::ngx_http_core_loc_conf_t>()
    };
    let status_handler: unsafe extern "C" fn(
        *mut nginx_sys::ngx_http_request_t,
    ) -> nginx_sys::ngx_int_t = crate::status::handler;
    let runtime = clcf
        .handler
        .is_some_and(|h| h as usize != status_handler as usize);
    if fixed == 0 && runtime && !mcf.dynamic_routes.contains(&route.name) {
        mcf.dynamic_routes.push(route.name.clone());
    }
    NGX_CONF_OK
}

#[cfg(ngx_http_cache)]
fn cached(ucf: &ngx_http_upstream_conf_t) -> bool {
    !ucf.cache_zone.is_null() || !ucf.cache_value.is_null()
}

#[cfg(not(ngx_http_cache))]
fn cached(_ucf: &ngx_http_upstream_conf_t) -> bool {
    false
}

/// nginx's own parsers for time and size values.
struct NginxUnits;

impl Units for NginxUnits {
    fn msec(&self, value: &str) -> Option<u64> {
        let mut s = ngx_str_t {
            len: value.len(),
            data: value.as_ptr().cast_mut(),
        };
        // SAFETY: nginx reads `len` bytes of a string that outlives the call.
        let v = unsafe { nginx_sys::ngx_parse_time(&mut s, 0) };
        u64::try_from(v).ok()
    }

    fn size(&self, value: &str) -> Option<u64> {
        let mut s = ngx_str_t {
            len: value.len(),
            data: value.as_ptr().cast_mut(),
        };
        // SAFETY: as above.
        let v = unsafe { nginx_sys::ngx_parse_size(&mut s) };
        u64::try_from(v).ok()
    }
}

/// The directive's arguments after its name.
///
/// # Safety
/// `cf` must be the configuration being parsed.
unsafe fn args<'a>(cf: *mut ngx_conf_t) -> &'a [ngx_str_t] {
    // SAFETY: nginx fills cf->args with the directive's words before calling its handler.
    let all: &[ngx_str_t] = unsafe { (*((*cf).args as *const ngx_array_t)).as_slice() };
    &all[1..]
}

/// Words as `&str`; nginx allows any bytes, our parameters are ASCII.
fn words(args: &[ngx_str_t]) -> Result<Vec<&str>, ConfError> {
    args.iter()
        .map(|a| {
            a.to_str().map_err(|_| {
                ConfError::InvalidParameter(String::from_utf8_lossy(a.as_bytes()).into_owned())
            })
        })
        .collect()
}

fn fail(cf: *mut ngx_conf_t, err: ConfError) -> *mut c_char {
    ngx_conf_log_error!(NGX_LOG_EMERG, cf, "{}", err);
    NGX_CONF_ERROR
}

/// `circuit_breaker_zone name:size`
pub unsafe extern "C" fn set_zone(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx passes our main conf for NGX_HTTP_MAIN_CONF_OFFSET.
    let mcf = unsafe { &mut *conf.cast::<MainConf>() };
    if !mcf.zone.is_null() {
        return c"is duplicate".as_ptr().cast_mut();
    }
    // SAFETY: called while parsing.
    let arg = unsafe { args(cf) }[0];
    let Ok(text) = arg.to_str() else {
        return fail(
            cf,
            ConfError::InvalidValue {
                directive: "circuit_breaker_zone",
                value: String::from_utf8_lossy(arg.as_bytes()).into_owned(),
                reason: None,
            },
        );
    };
    let (name, size) = match config::parse_zone(text, MIN_ZONE_SIZE, &NginxUnits) {
        Ok(v) => v,
        Err(e) => return fail(cf, e),
    };
    // SAFETY: called while parsing, with our main conf.
    match unsafe { add_zone(cf, mcf, name, size as usize) } {
        Ok(()) => NGX_CONF_OK,
        Err(()) => NGX_CONF_ERROR,
    }
}

/// Registers the shared zone with nginx; `zone::init` runs once the configuration is read.
unsafe fn add_zone(
    cf: *mut ngx_conf_t,
    mcf: &mut MainConf,
    name: &str,
    size: usize,
) -> Result<(), ()> {
    mcf.zone_name = name.to_owned();
    let mut zname = ngx_str_t {
        len: mcf.zone_name.len(),
        data: mcf.zone_name.as_ptr().cast_mut(),
    };
    // SAFETY: `cf` is live; the module static outlives every cycle; nginx copies nothing but
    // keeps `zname.data`, which lives in the main conf for the cycle's lifetime.
    let zone = unsafe {
        ngx_shared_memory_add(
            cf,
            &mut zname,
            size,
            core::ptr::addr_of_mut!(crate::ngx_http_circuit_breaker_module).cast(),
        )
    };
    if zone.is_null() {
        return Err(());
    }
    // SAFETY: non-null zone just returned by nginx.
    let z = unsafe { &mut *zone };
    if !z.data.is_null() {
        ngx_conf_log_error!(NGX_LOG_EMERG, cf, "zone \"{}\" is already used", name);
        return Err(());
    }
    z.init = Some(crate::zone::init);
    z.data = (mcf as *mut MainConf).cast();
    mcf.zone = zone;
    Ok(())
}

/// `circuit_breaker [param=value ...] [dry_run]`
pub unsafe extern "C" fn set_breaker(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx passes our upstream-level conf for NGX_HTTP_SRV_CONF_OFFSET.
    let scf = unsafe { &mut *conf.cast::<SrvConf>() };
    if scf.breaker.is_some() {
        return c"is duplicate".as_ptr().cast_mut();
    }
    // SAFETY: called while parsing.
    let parsed =
        words(unsafe { args(cf) }).and_then(|w| config::parse_breaker_args(w, &NginxUnits));
    let cfg = match parsed {
        Ok(c) => c,
        Err(e) => return fail(cf, e),
    };
    // SAFETY: `cf` is live; in an upstream block the upstream module's srv conf is set.
    let Some(uscf) = NgxHttpUpstreamModule::server_conf(unsafe { &*cf }) else {
        return NGX_CONF_ERROR;
    };
    let name = String::from_utf8_lossy(uscf.host.as_bytes()).into_owned();
    if name.len() > crate::zone::MAX_UPSTREAM_NAME {
        return fail(
            cf,
            ConfError::Conflict(format!(
                "upstream name \"{name}\" is too long for \"circuit_breaker\""
            )),
        );
    }
    scf.name_hash = hash_name(name.as_bytes());
    scf.name = name;
    scf.breaker = Some(cfg);
    NGX_CONF_OK
}

/// `circuit_breaker_failure class ...`
pub unsafe extern "C" fn set_failure(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx passes our upstream-level conf.
    let scf = unsafe { &mut *conf.cast::<SrvConf>() };
    if scf.failures.is_some() {
        return c"is duplicate".as_ptr().cast_mut();
    }
    // SAFETY: called while parsing.
    let parsed = words(unsafe { args(cf) }).and_then(config::parse_failure_classes);
    match parsed {
        Ok(set) => scf.failures = Some(set),
        Err(e) => return fail(cf, e),
    }
    // SAFETY: `cf` is live and its conf_file is set while parsing a file.
    scf.failure_at = unsafe { crate::util::conf_position(cf) };
    NGX_CONF_OK
}

/// `circuit_breaker_route name`
pub unsafe extern "C" fn set_route(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx passes our loc conf for NGX_HTTP_LOC_CONF_OFFSET.
    let lcf = unsafe { &mut *conf.cast::<LocConf>() };
    if lcf.route.is_some() {
        return c"is duplicate".as_ptr().cast_mut();
    }
    // SAFETY: called while parsing.
    let arg = unsafe { args(cf) }[0];
    let name = String::from_utf8_lossy(arg.as_bytes()).into_owned();
    if let Err(e) = config::check_route_name(&name) {
        return fail(cf, e);
    }
    if name == "default" {
        return fail(
            cf,
            ConfError::InvalidValue {
                directive: "circuit_breaker_route",
                value: name,
                reason: Some("\"default\" names the upstream's own breaker"),
            },
        );
    }
    lcf.route = Some(Route {
        hash: hash_name(name.as_bytes()),
        name,
    });
    NGX_CONF_OK
}

/// `circuit_breaker_status [control=on|off]`
pub unsafe extern "C" fn set_status(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx passes our loc conf.
    let lcf = unsafe { &mut *conf.cast::<LocConf>() };
    if lcf.status != StatusMode::Off {
        return c"is duplicate".as_ptr().cast_mut();
    }
    // SAFETY: called while parsing.
    let a = unsafe { args(cf) };
    lcf.status = match a.first().map(|s| s.as_bytes()) {
        None | Some(b"control=off") => StatusMode::ReadOnly,
        Some(b"control=on") => StatusMode::Control,
        Some(other) => {
            return fail(
                cf,
                ConfError::InvalidParameter(String::from_utf8_lossy(other).into_owned()),
            )
        }
    };
    // SAFETY: `cf` is live inside a location.
    let Some(clcf) = NgxHttpCoreModule::location_conf_mut(unsafe { &*cf }) else {
        return NGX_CONF_ERROR;
    };
    clcf.handler = Some(crate::status::handler);
    // SAFETY: `cf` is live inside the http block.
    if let Some(mcf) = Module::main_conf_mut(unsafe { &*cf }) {
        lcf.main = mcf;
    }
    NGX_CONF_OK
}

/// After the http block is parsed and every upstream has its balancer's `peer.init`: wrap it
/// (as the keepalive module does, but late enough that directive order never matters), and
/// make sure a zone exists.
pub unsafe fn postconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: `cf` is live inside the http block.
    let cfr = unsafe { &*cf };
    let Some(mcf) = Module::main_conf_mut(cfr) else {
        return NGX_ERROR as ngx_int_t;
    };
    let Some(umcf) = NgxHttpUpstreamModule::main_conf(cfr) else {
        return NGX_OK as ngx_int_t;
    };
    // SAFETY: the upstream module's array holds pointers to its srv confs.
    let upstreams: &[*mut ngx_http_upstream_srv_conf_t] = unsafe { umcf.upstreams.as_slice() };
    for &uscf in upstreams {
        // SAFETY: entries are valid for the cycle.
        let uscf = unsafe { &mut *uscf };
        let Some(scf) = Module::server_conf_mut(uscf) else {
            continue; // an implicit upstream (proxy_pass to a host) has no srv confs
        };
        let Some(cfg) = scf.breaker.as_mut() else {
            if let Some((file, line)) = &scf.failure_at {
                ngx::ngx_log_error!(
                    NGX_LOG_EMERG,
                    cfr.log,
                    "\"circuit_breaker_failure\" requires \"circuit_breaker\" in upstream \"{}\" in {}:{}",
                    String::from_utf8_lossy(uscf.host.as_bytes()),
                    file,
                    line
                );
                return NGX_ERROR as ngx_int_t;
            }
            continue;
        };
        cfg.failures = scf.failures.unwrap_or(FailureSet::DEFAULT);
        if uscf.peer.init.is_none() {
            continue;
        }
        scf.original_init = uscf.peer.init;
        uscf.peer.init = Some(crate::upstream::init_peer);
        scf.main = mcf;
        let uscf_ptr: *mut ngx_http_upstream_srv_conf_t = uscf;
        scf.routes = mcf
            .pairs
            .iter()
            .filter(|(u, _)| *u == uscf_ptr)
            .map(|(_, r)| r.clone())
            .collect();
        mcf.upstreams.push(scf);
    }
    if !mcf.upstreams.is_empty() && mcf.zone.is_null() {
        // SAFETY: still inside configuration parsing.
        if unsafe { add_zone(cf, mcf, DEFAULT_ZONE_NAME, DEFAULT_ZONE_SIZE) }.is_err() {
            return NGX_ERROR as ngx_int_t;
        }
    }
    // SAFETY: filter registration happens once per http block, as nginx's filters do.
    unsafe { crate::respond::add_header_filter() };
    let Some(cmcf) = NgxHttpCoreModule::main_conf_mut(cfr) else {
        return NGX_ERROR as ngx_int_t;
    };
    let phase = &mut cmcf.phases[nginx_sys::ngx_http_phases_NGX_HTTP_PRECONTENT_PHASE as usize];
    // SAFETY: the phase's handler array, during configuration.
    let h = unsafe { nginx_sys::ngx_array_push(&mut phase.handlers) }
        .cast::<nginx_sys::ngx_http_handler_pt>();
    // SAFETY: a fresh element of the handlers array.
    match unsafe { h.as_mut() } {
        Some(h) => *h = Some(crate::upstream::precontent),
        None => return NGX_ERROR as ngx_int_t,
    }
    NGX_OK as ngx_int_t
}
