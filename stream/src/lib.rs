//! ngx_stream_circuit_breaker_module: the circuit breaker for `stream {}` upstreams (TCP and
//! UDP: databases, caches, brokers). Its own `.so`, so that the http module loads where nginx
//! has no stream module; the breaker, the zone and the log lines are the http module's
//! (`circuit_breaker_core`, `circuit_breaker_shell`). Imports run one way: registration →
//! hooks (`peer`, `observe`, `fleet`) → `session` → `pool` → `conf` → shell → core.

mod conf;
mod fleet;
mod observe;
mod peer;
mod pool;
mod probe;
mod session;
mod vars;
mod waiting;

use core::ffi::c_void;
use core::mem::offset_of;
use core::ptr::{addr_of, addr_of_mut, null_mut};

use circuit_breaker_core::session::Lanes;
use circuit_breaker_shell::clock::mono_ms;
use circuit_breaker_shell::ffi::guard;
use circuit_breaker_shell::net::Peer;
use circuit_breaker_shell::zone::log_reconciled;
use nginx_sys::{
    ngx_array_push, ngx_command_t, ngx_conf_t, ngx_cycle_t, ngx_int_t, ngx_module_t,
    ngx_stream_conf_ctx_t, ngx_stream_core_main_conf_t, ngx_stream_handler_pt, ngx_stream_module_t,
    ngx_stream_phases_NGX_STREAM_LOG_PHASE, ngx_stream_upstream_main_conf_t,
    ngx_stream_upstream_srv_conf_t, ngx_uint_t, NGX_CONF_ANY, NGX_CONF_TAKE1, NGX_ERROR,
    NGX_LOG_EMERG, NGX_OK, NGX_STREAM_MAIN_CONF, NGX_STREAM_MODULE, NGX_STREAM_UPS_CONF,
};
use ngx::ngx_string;

use crate::conf::MainConf;

/// A stream module's main conf in a configuration context.
///
/// # Safety
/// `ctx` must be a stream block's context and `module` a stream module of its cycle.
unsafe fn main_conf_of<T>(ctx: *const ngx_stream_conf_ctx_t, module: &ngx_module_t) -> *mut T {
    // SAFETY: a stream context's `main_conf` holds every stream module's main conf.
    unsafe { (*(*ctx).main_conf.add(module.ctx_index)).cast() }
}

unsafe extern "C" fn postconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
    // Postconfiguration runs after the upstream module's init_main_conf: every upstream's
    // balancer (and its peer.init) is set.

    // SAFETY: nginx passes the configuration being parsed, inside the stream block.
    guard(NGX_ERROR as ngx_int_t, || unsafe {
        let ctx = (*cf).ctx.cast::<ngx_stream_conf_ctx_t>();
        let mcf =
            &mut *main_conf_of::<MainConf>(ctx, &*addr_of!(ngx_stream_circuit_breaker_module));
        let umcf = &*main_conf_of::<ngx_stream_upstream_main_conf_t>(
            ctx,
            &*addr_of!(nginx_sys::ngx_stream_upstream_module),
        );
        let upstreams: &[*mut ngx_stream_upstream_srv_conf_t] = umcf.upstreams.as_slice();
        for &uscf in upstreams {
            let Some(scf) = conf::of_upstream(uscf).map(|s| core::ptr::from_ref(s).cast_mut())
            else {
                continue;
            };
            let scf = &mut *scf;
            if scf.probe.is_some() && scf.params.is_none() {
                emerg_at(
                    cf,
                    &*uscf,
                    "\"circuit_breaker_probe\" requires \"circuit_breaker\" in upstream",
                );
                return NGX_ERROR as ngx_int_t;
            }
            let Some(params) = scf.params.as_mut() else {
                continue;
            };
            // With active probes, no client's session is ever the probe.
            params.cfg.active = scf.probe.is_some();
            // Silence, which a client can shape, opens it only once its probe finds silence too:
            // a probe that asks for an answer (a TCP connect alone is answered by a server that
            // accepts and hangs).
            params.cfg.confirm_ms = match &scf.probe {
                Some(p) if p.udp || !p.expect.is_empty() => {
                    let interval = params.cfg.probe_interval_ms;
                    circuit_breaker_core::probe::question_ms(p.timeout_ms, interval)
                }
                _ => 0,
            };
            if scf.probe.is_some() {
                scf.servers = primary_servers(&*uscf);
                if scf.servers.is_empty() {
                    // Open, it would refuse every session for good: nothing could close it.
                    emerg_at(
                        cf,
                        &*uscf,
                        "\"circuit_breaker_probe\" has no server to probe (every one is down, \
                         a backup, or resolved at run time) in upstream",
                    );
                    return NGX_ERROR as ngx_int_t;
                }
            }
            conf::name(scf, (*uscf).host.as_bytes());
            if let Err(why) = pool::configure(scf, &mut *uscf) {
                emerg_at(cf, &*uscf, why);
                return NGX_ERROR as ngx_int_t;
            }
            let Ok(index) = u16::try_from(mcf.upstreams.len()) else {
                return NGX_ERROR as ngx_int_t;
            };
            scf.index = index;
            scf.original_init = (*uscf).peer.init;
            (*uscf).peer.init = Some(peer::init_peer);
            mcf.upstreams.push(scf);
        }
        if mcf.upstreams.is_empty() {
            return NGX_OK as ngx_int_t;
        }
        let pools: Vec<usize> = mcf
            .upstreams
            .iter()
            .map(|&s| (*s).pool.as_ref().map_or(0, |p| p.servers.len()))
            .collect();
        mcf.lanes = Lanes::new(&pools);
        if mcf.zone.is_null()
            && conf::register_zone(cf, mcf, conf::DEFAULT_ZONE_NAME, conf::DEFAULT_ZONE_SIZE)
                .is_none()
        {
            return NGX_ERROR as ngx_int_t;
        }
        let cmcf = &mut *main_conf_of::<ngx_stream_core_main_conf_t>(
            ctx,
            &*addr_of!(nginx_sys::ngx_stream_core_module),
        );
        // First in the log phase, ahead of the access log: a session the breaker refused
        // gets its `503` before anything logs it.
        let handlers = &mut cmcf.phases[ngx_stream_phases_NGX_STREAM_LOG_PHASE as usize].handlers;
        if ngx_array_push(handlers).is_null() {
            return NGX_ERROR as ngx_int_t;
        }
        let all: &mut [ngx_stream_handler_pt] = handlers.as_slice_mut();
        all.rotate_right(1);
        all[0] = Some(observe::log_phase);
        observe::add_filter();
        fleet::tell_http((*cf).cycle);
        NGX_OK as ngx_int_t
    })
}

/// `[emerg] WHAT "NAME" in FILE:LINE` of an upstream block, as nginx's own "no servers are
/// inside upstream" is said.
///
/// # Safety
/// `cf` must be the configuration being read, `uscf` one of its stream upstreams.
unsafe fn emerg_at(cf: *mut ngx_conf_t, uscf: &ngx_stream_upstream_srv_conf_t, what: &str) {
    // SAFETY: an upstream block's file name is a NUL-terminated string of the configuration.
    let file = unsafe { core::ffi::CStr::from_ptr(uscf.file_name.cast()) };
    ngx::ngx_log_error!(
        NGX_LOG_EMERG,
        // SAFETY: the configuration being read has its log.
        unsafe { (*cf).log },
        "{} \"{}\" in {}:{}",
        what,
        String::from_utf8_lossy(uscf.host.as_bytes()),
        file.to_string_lossy(),
        uscf.line
    );
}

/// The addresses of an upstream's servers that are neither `down` nor `backup`, for its
/// probes.
///
/// # Safety
/// `uscf` must be a stream upstream conf of the configuration being read.
unsafe fn primary_servers(uscf: &ngx_stream_upstream_srv_conf_t) -> Vec<Peer> {
    // SAFETY: during configuration (this fn's contract).
    let all = unsafe { pool::configured_addresses(uscf, |s| s.down == 0 && s.backup() == 0) };
    all.into_iter().map(|(_, peer)| peer).collect()
}

/// `preconfiguration`: the module's variables.
unsafe extern "C" fn preconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: nginx passes the configuration about to be parsed.
    guard(NGX_ERROR as ngx_int_t, || unsafe { vars::add(cf) })
}

static NGX_STREAM_CIRCUIT_BREAKER_MODULE_CTX: ngx_stream_module_t = ngx_stream_module_t {
    preconfiguration: Some(preconfiguration),
    postconfiguration: Some(postconfiguration),
    create_main_conf: Some(conf::create_main_conf),
    init_main_conf: None,
    create_srv_conf: Some(conf::create_srv_conf),
    merge_srv_conf: None,
};

const fn cmd(
    name: nginx_sys::ngx_str_t,
    type_: u32,
    set: unsafe extern "C" fn(*mut ngx_conf_t, *mut ngx_command_t, *mut c_void) -> *mut i8,
    conf: usize,
) -> ngx_command_t {
    ngx_command_t {
        name,
        type_: type_ as ngx_uint_t,
        set: Some(set),
        conf,
        offset: 0,
        post: null_mut(),
    }
}

static mut NGX_STREAM_CIRCUIT_BREAKER_COMMANDS: [ngx_command_t; 5] = [
    cmd(
        ngx_string!("circuit_breaker_zone"),
        NGX_STREAM_MAIN_CONF | NGX_CONF_TAKE1,
        conf::set_zone,
        offset_of!(ngx_stream_conf_ctx_t, main_conf),
    ),
    cmd(
        ngx_string!("circuit_breaker"),
        NGX_STREAM_UPS_CONF | NGX_CONF_ANY,
        conf::set_breaker,
        offset_of!(ngx_stream_conf_ctx_t, srv_conf),
    ),
    cmd(
        ngx_string!("circuit_breaker_probe"),
        NGX_STREAM_UPS_CONF | NGX_CONF_ANY,
        conf::set_probe,
        offset_of!(ngx_stream_conf_ctx_t, srv_conf),
    ),
    cmd(
        ngx_string!("circuit_breaker_eject"),
        NGX_STREAM_UPS_CONF | NGX_CONF_ANY,
        conf::set_eject,
        offset_of!(ngx_stream_conf_ctx_t, srv_conf),
    ),
    ngx_command_t::empty(),
];

/// `init_module`, where a new configuration is committed: the zone's breakers are brought
/// in line with it.
unsafe extern "C" fn init_module(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes the cycle being committed.
        let Some(mcf) = (unsafe { conf::of_cycle(cycle) }) else {
            return NGX_OK as ngx_int_t;
        };
        let Some(zone) = mcf.zone() else {
            return NGX_OK as ngx_int_t;
        };
        let reused = zone.generation() > 0;
        let done = zone.reconcile(&conf::wanted(mcf), mono_ms());
        mcf.generation = done.generation;
        // SAFETY: the cycle nginx passed.
        log_reconciled(unsafe { (*cycle).log }, &mcf.zone_name.0, &done, reused);
        NGX_OK as ngx_int_t
    })
}

/// `init_process`: a worker starts its prober, if any upstream has active probes.
unsafe extern "C" fn init_process(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    guard(NGX_OK as ngx_int_t, || {
        // SAFETY: nginx passes the worker's cycle, which lives as long as the worker.
        let Some(mcf) = (unsafe { conf::of_cycle(cycle) }) else {
            return NGX_OK as ngx_int_t;
        };
        let mcf: &'static MainConf = mcf;
        // SAFETY: the process's type, set before init_process. Workers probe (a single
        // process too); cache managers and loaders never do.
        let process = unsafe { nginx_sys::ngx_process } as u32;
        if process == nginx_sys::NGX_PROCESS_WORKER || process == nginx_sys::NGX_PROCESS_SINGLE {
            probe::start(mcf);
        }
        NGX_OK as ngx_int_t
    })
}

ngx::ngx_modules!(ngx_stream_circuit_breaker_module);

/// The module nginx loads.
#[used]
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mut ngx_stream_circuit_breaker_module: ngx_module_t = ngx_module_t {
    ctx: addr_of!(NGX_STREAM_CIRCUIT_BREAKER_MODULE_CTX) as _,
    // SAFETY: only the address is taken; nginx reads the table while loading.
    commands: unsafe { addr_of_mut!(NGX_STREAM_CIRCUIT_BREAKER_COMMANDS[0]) },
    type_: NGX_STREAM_MODULE as _,
    init_module: Some(init_module),
    init_process: Some(init_process),
    ..ngx_module_t::default()
};
