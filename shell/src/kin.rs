//! How the two modules, two `.so` files that may be loaded apart, reach each other: by C
//! symbols each exports, looked up by name (nginx loads modules `RTLD_GLOBAL`), so that
//! neither needs the other to load. The http module's fleet carries the stream breakers'
//! opinions: it sizes its zone for them and learns their names and fingerprints here.

use core::ffi::{c_void, CStr};

use nginx_sys::{ngx_cycle_t, ngx_int_t};

/// The stream module's tag, the address of its `ngx_module_t`: its zones carry it.
pub const STREAM_MODULE: &CStr = c"ngx_stream_circuit_breaker_module";

/// `fn(cycle, visitor, ctx) -> ngx_int_t`, exported by the stream module: calls `visitor` with
/// each stream breaker of `cycle`'s configuration; returns how many, or -1 without a stream
/// block (not read yet, or none).
pub const STREAM_FLEET_VISIT: &CStr = c"ngx_stream_circuit_breaker_fleet_visit_v1";

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

/// The address of `name` in the loaded objects, if one defines it.
pub fn find(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with a NUL-terminated name; null when no loaded object defines it.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
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
    let f = find(STREAM_FLEET_VISIT)?;
    // SAFETY: the stream module exports this name with this signature (same build).
    let visit: StreamFleetVisit = unsafe { core::mem::transmute(f) };
    let mut out: Vec<(String, u64)> = Vec::new();
    // SAFETY: `cycle` as this fn's contract; `push` takes `ctx` as the vector it is.
    let n = unsafe { visit(cycle, push, core::ptr::from_mut(&mut out).cast()) };
    (n >= 0).then_some(out)
}
