//! ngx_http_circuit_breaker_module: registration only. Directives live in `conf`, the shared
//! zone in `zone`, the upstream hooks in `upstream`, responses and variables in `respond`, and
//! the status location in `status`.

mod conf;
mod respond;
mod status;
mod upstream;
mod util;
mod zone;

use core::ffi::c_void;
use core::ptr::{addr_of, addr_of_mut, null_mut};

use nginx_sys::{
    ngx_command_t, ngx_conf_set_flag_slot, ngx_conf_t, ngx_http_module_t, ngx_int_t, ngx_module_t,
    ngx_uint_t, NGX_CONF_1MORE, NGX_CONF_ANY, NGX_CONF_FLAG, NGX_CONF_NOARGS, NGX_CONF_TAKE1,
    NGX_HTTP_LOC_CONF, NGX_HTTP_LOC_CONF_OFFSET, NGX_HTTP_MAIN_CONF, NGX_HTTP_MAIN_CONF_OFFSET,
    NGX_HTTP_MODULE, NGX_HTTP_SRV_CONF, NGX_HTTP_SRV_CONF_OFFSET, NGX_HTTP_UPS_CONF,
};
use ngx::http::{HttpModule, HttpModuleLocationConf, HttpModuleMainConf, HttpModuleServerConf};
use ngx::ngx_string;

use crate::conf::{LocConf, MainConf, SrvConf};

/// The module's type for ngx-rust's configuration helpers.
pub(crate) struct Module;

impl HttpModule for Module {
    fn module() -> &'static ngx_module_t {
        // SAFETY: the module static is only written by nginx while loading, before any request.
        unsafe { &*addr_of!(ngx_http_circuit_breaker_module) }
    }

    unsafe extern "C" fn preconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
        respond::add_variables(cf)
    }

    unsafe extern "C" fn postconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
        conf::postconfiguration(cf)
    }
}

// SAFETY: the types match the create_*_conf functions in the module context below.
unsafe impl HttpModuleMainConf for Module {
    type MainConf = MainConf;
}
// SAFETY: as above.
unsafe impl HttpModuleServerConf for Module {
    type ServerConf = SrvConf;
}
// SAFETY: as above.
unsafe impl HttpModuleLocationConf for Module {
    type LocationConf = LocConf;
}

static NGX_HTTP_CIRCUIT_BREAKER_MODULE_CTX: ngx_http_module_t = ngx_http_module_t {
    preconfiguration: Some(Module::preconfiguration),
    postconfiguration: Some(Module::postconfiguration),
    create_main_conf: Some(Module::create_main_conf),
    init_main_conf: None,
    create_srv_conf: Some(Module::create_srv_conf),
    merge_srv_conf: None,
    create_loc_conf: Some(Module::create_loc_conf),
    merge_loc_conf: Some(conf::merge_loc_conf),
};

const fn cmd(
    name: nginx_sys::ngx_str_t,
    type_: u32,
    set: unsafe extern "C" fn(*mut ngx_conf_t, *mut ngx_command_t, *mut c_void) -> *mut i8,
    conf: usize,
    offset: usize,
) -> ngx_command_t {
    ngx_command_t {
        name,
        type_: type_ as ngx_uint_t,
        set: Some(set),
        conf,
        offset,
        post: null_mut(),
    }
}

static mut NGX_HTTP_CIRCUIT_BREAKER_COMMANDS: [ngx_command_t; 7] = [
    cmd(
        ngx_string!("circuit_breaker_zone"),
        NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        conf::set_zone,
        NGX_HTTP_MAIN_CONF_OFFSET,
        0,
    ),
    cmd(
        ngx_string!("circuit_breaker"),
        NGX_HTTP_UPS_CONF | NGX_CONF_ANY,
        conf::set_breaker,
        NGX_HTTP_SRV_CONF_OFFSET,
        0,
    ),
    cmd(
        ngx_string!("circuit_breaker_failure"),
        NGX_HTTP_UPS_CONF | NGX_CONF_1MORE,
        conf::set_failure,
        NGX_HTTP_SRV_CONF_OFFSET,
        0,
    ),
    cmd(
        ngx_string!("circuit_breaker_route"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
        conf::set_route,
        NGX_HTTP_LOC_CONF_OFFSET,
        0,
    ),
    cmd(
        ngx_string!("circuit_breaker_status"),
        NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS | NGX_CONF_TAKE1,
        conf::set_status,
        NGX_HTTP_LOC_CONF_OFFSET,
        0,
    ),
    cmd(
        ngx_string!("circuit_breaker_header"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
        ngx_conf_set_flag_slot,
        NGX_HTTP_LOC_CONF_OFFSET,
        core::mem::offset_of!(LocConf, header),
    ),
    ngx_command_t::empty(),
];

ngx::ngx_modules!(ngx_http_circuit_breaker_module);

/// The module nginx loads.
#[used]
#[allow(non_upper_case_globals)]
pub static mut ngx_http_circuit_breaker_module: ngx_module_t = ngx_module_t {
    ctx: addr_of!(NGX_HTTP_CIRCUIT_BREAKER_MODULE_CTX) as _,
    // SAFETY: only the address is taken; nginx reads the table while loading.
    commands: unsafe { addr_of_mut!(NGX_HTTP_CIRCUIT_BREAKER_COMMANDS[0]) },
    type_: NGX_HTTP_MODULE as _,
    init_module: Some(zone::init_module),
    ..ngx_module_t::default()
};
