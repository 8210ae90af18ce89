//! ngx_http_circuit_breaker_module: registration, and the wiring between the rooms — the
//! configuration (`conf`), the shared zone (`zone`), a request's state (`request`), the
//! upstream hooks (`upstream`), what clients see (`respond`) and the status location
//! (`status`). Imports run one way: handlers → request → conf → zone → core.

mod conf;
pub mod eject;
mod filter;
mod fleet;
mod held;
mod judged;
mod keyed;
mod limit;
pub mod net;
mod probe;
mod request;
mod respond;
mod retry;
mod status;
mod stream_zones;
mod upstream;
mod variables;
mod wake;

use circuit_breaker_shell::{clock, zone};

use core::ffi::c_void;
use core::ptr::{addr_of, addr_of_mut, null_mut};

use nginx_sys::{
    ngx_command_t, ngx_conf_set_flag_slot, ngx_conf_t, ngx_cycle_t, ngx_http_module_t, ngx_int_t,
    ngx_module_t, ngx_uint_t, NGX_CONF_1MORE, NGX_CONF_ANY, NGX_CONF_FLAG, NGX_CONF_NOARGS,
    NGX_CONF_TAKE1, NGX_CONF_TAKE12, NGX_ERROR, NGX_HTTP_LOC_CONF, NGX_HTTP_LOC_CONF_OFFSET,
    NGX_HTTP_MAIN_CONF, NGX_HTTP_MAIN_CONF_OFFSET, NGX_HTTP_MODULE, NGX_HTTP_SRV_CONF,
    NGX_HTTP_SRV_CONF_OFFSET, NGX_HTTP_UPS_CONF, NGX_OK,
};
use ngx::http::{HttpModule, HttpModuleMainConf};
use ngx::ngx_string;

use crate::conf::{directives, scheme, setup, LocConf, Module};
use circuit_breaker_shell::ffi::guard;

unsafe extern "C" fn preconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: nginx passes the configuration being parsed, inside the http block.
    guard(NGX_ERROR as ngx_int_t, || unsafe {
        let rc = variables::add_variables(cf);
        if rc != NGX_OK as ngx_int_t {
            return rc;
        }
        let rc = setup::find_upstream_modules(cf);
        if rc != NGX_OK as ngx_int_t {
            return rc;
        }
        scheme::wrap_all(cf)
    })
}

unsafe extern "C" fn postconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
    // Postconfiguration runs after the upstream module's init_main_conf: every upstream's
    // balancer (and its peer.init) is set, as the callees ask.

    // SAFETY: nginx passes the configuration being parsed, inside the http block, with every
    // upstream's balancer set (above).
    guard(NGX_ERROR as ngx_int_t, || unsafe {
        // The http block is parsed: nginx's own `proxy_pass` and `grpc_pass` handlers back.
        scheme::unwrap_all();
        let rc = setup::collect_upstreams(cf, Some(upstream::init_peer));
        if rc != NGX_OK as ngx_int_t {
            return rc;
        }
        #[cfg(ngx_ssl)]
        scheme::choose_probe_tls(cf);
        let rc = eject::configure(cf);
        if rc != NGX_OK as ngx_int_t {
            return rc;
        }
        let rc = fleet::postconfiguration(cf);
        if rc != NGX_OK as ngx_int_t {
            return rc;
        }
        // An http block without a breaker judges no request: nothing on its requests' path,
        // whatever else of the module it uses (a status location, stream breakers).
        // (The keys' own step then only clears what a former configuration's keys set.)
        if !setup::judges_requests(cf) {
            return keyed::postconfiguration(cf);
        }
        filter::add_header_filter();
        held::add_body_filter();
        upstream::body::add_body_filter();
        let rc = setup::add_phase_handler(
            cf,
            nginx_sys::ngx_http_phases_NGX_HTTP_PRECONTENT_PHASE,
            Some(upstream::precontent::handler),
        );
        if rc != NGX_OK as ngx_int_t {
            return rc;
        }
        keyed::postconfiguration(cf)
    })
}

static NGX_HTTP_CIRCUIT_BREAKER_MODULE_CTX: ngx_http_module_t = ngx_http_module_t {
    preconfiguration: Some(preconfiguration),
    postconfiguration: Some(postconfiguration),
    create_main_conf: Some(Module::create_main_conf),
    init_main_conf: None,
    create_srv_conf: Some(Module::create_srv_conf),
    merge_srv_conf: None,
    create_loc_conf: Some(Module::create_loc_conf),
    merge_loc_conf: Some(setup::merge_loc_conf),
};

const fn cmd(
    name: nginx_sys::ngx_str_t,
    type_: u32,
    set: unsafe extern "C" fn(*mut ngx_conf_t, *mut ngx_command_t, *mut c_void) -> *mut i8,
    conf: usize,
    offset: usize,
    post: *mut c_void,
) -> ngx_command_t {
    ngx_command_t {
        name,
        type_: type_ as ngx_uint_t,
        set: Some(set),
        conf,
        offset,
        post,
    }
}

static mut NGX_HTTP_CIRCUIT_BREAKER_COMMANDS: [ngx_command_t; 15] = [
    cmd(
        ngx_string!("circuit_breaker_zone"),
        NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE12,
        directives::set_zone,
        NGX_HTTP_MAIN_CONF_OFFSET,
        0,
        null_mut(),
    ),
    cmd(
        ngx_string!("circuit_breaker_key"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_1MORE,
        directives::set_keyed,
        NGX_HTTP_LOC_CONF_OFFSET,
        0,
        null_mut(),
    ),
    cmd(
        ngx_string!("circuit_breaker_class"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
        directives::set_class,
        NGX_HTTP_LOC_CONF_OFFSET,
        0,
        null_mut(),
    ),
    cmd(
        ngx_string!("circuit_breaker"),
        NGX_HTTP_UPS_CONF | NGX_CONF_ANY,
        directives::set_breaker,
        NGX_HTTP_SRV_CONF_OFFSET,
        0,
        null_mut(),
    ),
    cmd(
        ngx_string!("circuit_breaker_probe"),
        NGX_HTTP_UPS_CONF | NGX_CONF_1MORE,
        directives::set_probe,
        NGX_HTTP_SRV_CONF_OFFSET,
        0,
        null_mut(),
    ),
    cmd(
        ngx_string!("circuit_breaker_limit"),
        NGX_HTTP_UPS_CONF | NGX_CONF_1MORE,
        directives::set_limit,
        NGX_HTTP_SRV_CONF_OFFSET,
        0,
        null_mut(),
    ),
    cmd(
        ngx_string!("circuit_breaker_retry_budget"),
        NGX_HTTP_UPS_CONF | NGX_CONF_1MORE,
        directives::set_retry_budget,
        NGX_HTTP_SRV_CONF_OFFSET,
        0,
        null_mut(),
    ),
    cmd(
        ngx_string!("circuit_breaker_eject"),
        NGX_HTTP_UPS_CONF | NGX_CONF_ANY,
        directives::set_eject,
        NGX_HTTP_SRV_CONF_OFFSET,
        0,
        null_mut(),
    ),
    cmd(
        ngx_string!("circuit_breaker_failure"),
        NGX_HTTP_UPS_CONF | NGX_CONF_1MORE,
        directives::set_failure,
        NGX_HTTP_SRV_CONF_OFFSET,
        0,
        null_mut(),
    ),
    cmd(
        ngx_string!("circuit_breaker_route"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
        directives::set_route,
        NGX_HTTP_LOC_CONF_OFFSET,
        0,
        null_mut(),
    ),
    cmd(
        ngx_string!("circuit_breaker_status"),
        NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS | NGX_CONF_TAKE1,
        directives::set_status,
        NGX_HTTP_LOC_CONF_OFFSET,
        0,
        // The content handler the directive installs.
        status::handler as *mut c_void,
    ),
    cmd(
        ngx_string!("circuit_breaker_fleet"),
        NGX_HTTP_MAIN_CONF | NGX_CONF_1MORE,
        directives::set_fleet,
        NGX_HTTP_MAIN_CONF_OFFSET,
        0,
        null_mut(),
    ),
    cmd(
        ngx_string!("circuit_breaker_jitter_key"),
        NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        conf::jitter::set_jitter_key,
        NGX_HTTP_MAIN_CONF_OFFSET,
        0,
        null_mut(),
    ),
    cmd(
        ngx_string!("circuit_breaker_header"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
        ngx_conf_set_flag_slot,
        NGX_HTTP_LOC_CONF_OFFSET,
        core::mem::offset_of!(LocConf, header),
        null_mut(),
    ),
    ngx_command_t::empty(),
];

/// `init_module`, where a new configuration is committed (nginx exits rather than fall back
/// after this point): the zone's breakers are brought in line with it.
unsafe extern "C" fn init_module(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes the cycle being committed.
        let cycle = unsafe { &*cycle };
        let Some(mcf) = <Module as HttpModuleMainConf>::main_conf_mut(cycle) else {
            return NGX_OK as ngx_int_t; // no http block
        };
        // SAFETY: our own zone, initialised and mapped in the master by now.
        let Some(zone) = (unsafe { zone::Zone::from_shm(mcf.zone) }) else {
            return NGX_OK as ngx_int_t;
        };
        let reused = zone.generation() > 0;
        let now = clock::mono_ms();
        let mut done = zone.reconcile(&setup::wanted(mcf), now);
        let families: Vec<_> = mcf.keyed.iter().map(|f| f.as_zone()).collect();
        // Never an error here: nginx exits when a module's init fails, and on a reload that
        // would take the master down. Keyed breakers without a table pass, said here.
        if !zone.keyed_reconcile(mcf.keyed_capacity(), &families, now, &mut done) {
            ngx::ngx_log_error!(
                nginx_sys::NGX_LOG_ALERT,
                cycle.log,
                "circuit breaker zone \"{}\" has no room for a table of {} keys: \
                 \"circuit_breaker_key\" keeps the table it had, if any, and keys without one \
                 pass unchecked",
                mcf.zone_name.0,
                mcf.keyed_capacity()
            );
        }
        mcf.generation = done.generation;
        zone::log_reconciled(cycle.log, &mcf.zone_name.0, &done, reused);
        NGX_OK as ngx_int_t
    })
}

/// `init_process`: worker 0 starts the fleet exchange, and every worker the active prober
/// and sizes its tables of the adaptive limit.
unsafe extern "C" fn init_process(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    // SAFETY: nginx passes the worker's cycle, which the fleet's hook takes as it is.
    let rc = unsafe { fleet::init_process(cycle) };
    guard(NGX_OK as ngx_int_t, || {
        // SAFETY: `cycle` is the worker's live cycle nginx passed to init_process.
        probe::start(unsafe { &*cycle });
        // SAFETY: `cycle` is the worker's live cycle nginx passed to init_process.
        limit::init_process(unsafe { &*cycle });
        rc
    })
}

ngx::ngx_modules!(ngx_http_circuit_breaker_module);

/// The module nginx loads (exported by name: `conf::Module` refers to it).
#[used]
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mut ngx_http_circuit_breaker_module: ngx_module_t = ngx_module_t {
    ctx: addr_of!(NGX_HTTP_CIRCUIT_BREAKER_MODULE_CTX) as _,
    // SAFETY: only the address is taken; nginx reads the table while loading.
    commands: unsafe { addr_of_mut!(NGX_HTTP_CIRCUIT_BREAKER_COMMANDS[0]) },
    type_: NGX_HTTP_MODULE as _,
    init_module: Some(init_module),
    init_process: Some(init_process),
    ..ngx_module_t::default()
};
