//! How the two modules, two `.so` files that may be loaded apart, reach each other: each is
//! found among the cycle's modules by its name, and a function it exports is looked up in its
//! own object (not by name across the process: after a reload that loaded the modules from
//! other paths, the old objects are still loaded while the new configuration is read, and an
//! old function would read the new configuration with the old layout). Each exported function
//! also checks that its own module is the cycle's. The http module's fleet carries the stream
//! breakers' opinions: it sizes its zone for them and learns their names and fingerprints here.

use core::ffi::{c_void, CStr};

use nginx_sys::{ngx_cycle_t, ngx_int_t, ngx_module_t};

/// The stream module's name: its `ngx_module_t` is the tag its zones carry.
pub const STREAM_MODULE: &CStr = c"ngx_stream_circuit_breaker_module";

/// The http module's name.
pub const HTTP_MODULE: &CStr = c"ngx_http_circuit_breaker_module";

/// `fn(cycle, visitor, ctx) -> ngx_int_t`, exported by the stream module: calls `visitor` with
/// each stream breaker of `cycle`'s configuration; returns how many, or -1 without a stream
/// block (not read yet, or none).
pub const STREAM_FLEET_VISIT: &CStr = c"ngx_stream_circuit_breaker_fleet_visit_v1";

/// `fn(cycle, visitor, ctx) -> ngx_int_t`, exported by the stream module: calls `visitor` with
/// each server of each stream pool of `cycle`'s configuration, in configuration order; returns
/// how many, or -1 without a stream block.
pub const STREAM_POOLS_VISIT: &CStr = c"ngx_stream_circuit_breaker_pools_visit_v1";

/// What [`STREAM_POOLS_VISIT`] calls for each server: its upstream's name and its address
/// (each `len` bytes, valid for the call), and whether it is a backup.
pub type PoolVisitor = unsafe extern "C" fn(
    ctx: *mut c_void,
    upstream: *const u8,
    upstream_len: usize,
    server: *const u8,
    server_len: usize,
    backup: bool,
);

/// The signature of [`STREAM_POOLS_VISIT`].
pub type StreamPoolsVisit = unsafe extern "C" fn(
    cycle: *mut ngx_cycle_t,
    visitor: PoolVisitor,
    ctx: *mut c_void,
) -> ngx_int_t;

/// `fn(cycle)`, exported by the http module: the stream block of `cycle` was read, and the
/// fleet's zone, if the http block registered one already, is sized again for its breakers.
pub const HTTP_FLEET_GROW: &CStr = c"ngx_http_circuit_breaker_fleet_grow_v1";

/// What [`STREAM_FLEET_VISIT`] calls for each breaker: its upstream's name (`len` bytes,
/// valid for the call) and its fingerprint as the fleet compares it.
pub type FleetVisitor =
    unsafe extern "C" fn(ctx: *mut c_void, name: *const u8, len: usize, fingerprint: u64);

/// The signature of [`STREAM_FLEET_VISIT`].
pub type StreamFleetVisit = unsafe extern "C" fn(
    cycle: *mut ngx_cycle_t,
    visitor: FleetVisitor,
    ctx: *mut c_void,
) -> ngx_int_t;

/// The signature of [`HTTP_FLEET_GROW`].
pub type HttpFleetGrow = unsafe extern "C" fn(cycle: *mut ngx_cycle_t);

/// The module named `name` among `cycle`'s modules.
///
/// # Safety
/// `cycle` must be a cycle being configured or running.
pub unsafe fn module_in(cycle: *const ngx_cycle_t, name: &CStr) -> Option<*mut ngx_module_t> {
    // SAFETY: a cycle's `modules` holds `modules_n` modules (null-terminated), each named by
    // nginx as it was added (static or loaded), the names NUL-terminated and static.
    unsafe {
        let c = &*cycle;
        if c.modules.is_null() {
            return None;
        }
        for i in 0..c.modules_n {
            let m = *c.modules.add(i);
            if m.is_null() {
                break;
            }
            if !(*m).name.is_null() && CStr::from_ptr((*m).name) == name {
                return Some(m);
            }
        }
    }
    None
}

/// Whether `module` is the module of its name in `cycle`: false in a copy of an object that a
/// reload replaced, which must not read the new configuration.
///
/// # Safety
/// As for [`module_in`]; `module` a loaded module.
pub unsafe fn is_current(cycle: *const ngx_cycle_t, module: *const ngx_module_t) -> bool {
    // SAFETY: `module` is a loaded module (this fn's contract): its name is set.
    let name = unsafe { (*module).name };
    if name.is_null() {
        return false;
    }
    // SAFETY: as this fn's contract; the name is NUL-terminated and static.
    unsafe { module_in(cycle, CStr::from_ptr(name)) }.is_some_and(|m| core::ptr::eq(m, module))
}

/// The function `symbol` of the object that holds the module named `module` in `cycle`.
///
/// # Safety
/// As for [`module_in`].
pub unsafe fn find(cycle: *const ngx_cycle_t, module: &CStr, symbol: &CStr) -> Option<*mut c_void> {
    // SAFETY: as this fn's contract.
    let m = unsafe { module_in(cycle, module) }?;
    // SAFETY: `info` is written by dladdr; the object's file name it gives is NUL-terminated and
    // lives while the object is loaded; RTLD_NOLOAD only finds the object nginx loaded (its
    // count, raised by dlopen, is lowered again by dlclose: nginx still holds it).
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(m.cast_const().cast(), &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let object = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if object.is_null() {
            return None;
        }
        let f = libc::dlsym(object, symbol.as_ptr());
        libc::dlclose(object);
        (!f.is_null()).then_some(f)
    }
}

/// Each stream breaker of `cycle`'s configuration, as (name, fingerprint); `None` when the
/// stream module is not loaded or `cycle` has no stream block (yet).
///
/// # Safety
/// `cycle` must be a cycle being configured or running.
pub unsafe fn stream_breakers(cycle: *mut ngx_cycle_t) -> Option<Vec<(String, u64)>> {
    unsafe extern "C" fn push(ctx: *mut c_void, name: *const u8, len: usize, fingerprint: u64) {
        // SAFETY: `ctx` is the vector below, `name` `len` bytes for this call (the visit's
        // contract).
        unsafe {
            let out = &mut *ctx.cast::<Vec<(String, u64)>>();
            let name = core::slice::from_raw_parts(name, len);
            out.push((String::from_utf8_lossy(name).into_owned(), fingerprint));
        }
    }
    // SAFETY: as this fn's contract.
    let f = unsafe { find(cycle, STREAM_MODULE, STREAM_FLEET_VISIT) }?;
    // SAFETY: the stream module exports this name with this signature (the `_v1` in the name
    // changes with it), in the object of the cycle's stream module.
    let visit: StreamFleetVisit = unsafe { core::mem::transmute(f) };
    let mut out: Vec<(String, u64)> = Vec::new();
    // SAFETY: `cycle` as this fn's contract; `push` takes `ctx` as the vector it is.
    let n = unsafe { visit(cycle, push, core::ptr::from_mut(&mut out).cast()) };
    (n >= 0).then_some(out)
}

/// Each server of each stream pool of `cycle`'s configuration, as (upstream, address, backup),
/// in configuration order; `None` when the stream module is not loaded or has no stream block.
///
/// # Safety
/// `cycle` must be a cycle being configured or running.
pub unsafe fn stream_pools(cycle: *mut ngx_cycle_t) -> Option<Vec<(String, String, bool)>> {
    unsafe extern "C" fn push(
        ctx: *mut c_void,
        upstream: *const u8,
        upstream_len: usize,
        server: *const u8,
        server_len: usize,
        backup: bool,
    ) {
        // SAFETY: `ctx` is the vector below; the names are the given lengths, for this call
        // (the visit's contract).
        unsafe {
            let out = &mut *ctx.cast::<Vec<(String, String, bool)>>();
            let up = core::slice::from_raw_parts(upstream, upstream_len);
            let server = core::slice::from_raw_parts(server, server_len);
            out.push((
                String::from_utf8_lossy(up).into_owned(),
                String::from_utf8_lossy(server).into_owned(),
                backup,
            ));
        }
    }
    // SAFETY: as this fn's contract.
    let f = unsafe { find(cycle, STREAM_MODULE, STREAM_POOLS_VISIT) }?;
    // SAFETY: the stream module exports this name with this signature (the `_v1` in the name
    // changes with it), in the object of the cycle's stream module.
    let visit: StreamPoolsVisit = unsafe { core::mem::transmute(f) };
    let mut out: Vec<(String, String, bool)> = Vec::new();
    // SAFETY: `cycle` as this fn's contract; `push` takes `ctx` as the vector it is.
    let n = unsafe { visit(cycle, push, core::ptr::from_mut(&mut out).cast()) };
    (n >= 0).then_some(out)
}
