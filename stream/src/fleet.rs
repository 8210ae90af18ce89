//! The stream breakers in the http module's fleet. The exchange is the http module's (its
//! `circuit_breaker_fleet`, its exchange worker, its status location): this module tells it
//! which breakers the stream block has and by which rules they judge ([`visit`]), and when
//! the stream block is read after the http block, asks it to size its zone again for them
//! ([`tell_http`]). The exchange finds the breakers themselves in this module's zone. The
//! status location learns the pools' servers here too
//! ([`ngx_stream_circuit_breaker_pools_visit_v1`]).

use core::ffi::c_void;

use circuit_breaker_core::fleet::conf::stream_breaker_fingerprint;
use circuit_breaker_shell::ffi::guard;
use circuit_breaker_shell::kin::{self, FleetVisitor, HttpFleetGrow, PoolVisitor, HTTP_FLEET_GROW};
use nginx_sys::{ngx_cycle_t, ngx_int_t};

use crate::conf;

/// [`kin::STREAM_FLEET_VISIT`]: calls `visitor` with each stream breaker of `cycle`'s
/// configuration, its upstream's name and its fingerprint; -1 without a stream block.
///
/// # Safety
/// `cycle` must be a cycle being configured or running, `visitor` callable with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn ngx_stream_circuit_breaker_fleet_visit_v1(
    cycle: *mut ngx_cycle_t,
    visitor: FleetVisitor,
    ctx: *mut c_void,
) -> ngx_int_t {
    guard(-1, || {
        // SAFETY: as this fn's contract.
        let Some(mcf) = (unsafe { current(cycle) }) else {
            return -1;
        };
        let mut n: ngx_int_t = 0;
        for &scf in &mcf.upstreams {
            // SAFETY: upstream confs live as long as the configuration.
            let scf = unsafe { &*scf };
            let Some(params) = scf.params.as_ref() else {
                continue;
            };
            let fp =
                stream_breaker_fingerprint(&params.cfg, params.first_byte_ms, scf.probe.as_ref());
            // SAFETY: the name's bytes live through the call; `ctx` is the visitor's.
            unsafe { visitor(ctx, scf.name.as_ptr(), scf.name.len(), fp) };
            n += 1;
        }
        n
    })
}

/// This module's conf in `cycle`, when this copy of the module is the cycle's (not one a reload
/// from other paths left loaded) and `cycle` has a stream block.
///
/// # Safety
/// `cycle` must be a cycle being configured or running.
unsafe fn current<'a>(cycle: *mut ngx_cycle_t) -> Option<&'a conf::MainConf> {
    // SAFETY: as this fn's contract; this module is loaded.
    if !unsafe { kin::is_current(cycle, conf::module_ptr()) } {
        return None;
    }
    // SAFETY: as this fn's contract.
    unsafe { conf::of_cycle(cycle) }.map(|m| &*m)
}

/// Tells the http module, if it is loaded and its block read already, that this stream
/// block's breakers are known: its fleet's zone is sized for them.
///
/// # Safety
/// `cycle` must be the cycle being configured, its stream block read.
pub unsafe fn tell_http(cycle: *mut ngx_cycle_t) {
    // SAFETY: as this fn's contract.
    let Some(f) = (unsafe { kin::find(cycle, kin::HTTP_MODULE, HTTP_FLEET_GROW) }) else {
        return;
    };
    // SAFETY: the http module exports this name with this signature (the `_v1` in the name
    // changes with it), in the object of the cycle's http module.
    let grow: HttpFleetGrow = unsafe { core::mem::transmute(f) };
    // SAFETY: as this fn's contract.
    unsafe { grow(cycle) };
}

/// [`kin::STREAM_POOLS_VISIT`]: calls `visitor` with each server of each pool of `cycle`'s
/// configuration (the http status location lists them); -1 without a stream block.
///
/// # Safety
/// `cycle` must be a cycle being configured or running, `visitor` callable with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn ngx_stream_circuit_breaker_pools_visit_v1(
    cycle: *mut ngx_cycle_t,
    visitor: PoolVisitor,
    ctx: *mut c_void,
) -> ngx_int_t {
    guard(-1, || {
        // SAFETY: as this fn's contract.
        let Some(mcf) = (unsafe { current(cycle) }) else {
            return -1;
        };
        let mut n: ngx_int_t = 0;
        for &scf in &mcf.upstreams {
            // SAFETY: upstream confs live as long as the configuration.
            let scf = unsafe { &*scf };
            for s in scf.pool.iter().flat_map(|p| &p.servers) {
                let (up, addr) = (scf.name.as_bytes(), s.name.as_bytes());
                // SAFETY: the names' bytes live through the call; `ctx` is the visitor's.
                unsafe {
                    visitor(
                        ctx,
                        up.as_ptr(),
                        up.len(),
                        addr.as_ptr(),
                        addr.len(),
                        s.backup,
                    )
                };
                n += 1;
            }
        }
        n
    })
}
