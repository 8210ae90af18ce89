//! The stream module's zones, found among the cycle's shared zones by their tag (the stream
//! module, found among the cycle's modules by its name: it is another `.so`, loaded or not), each read with this build's
//! zone code once its layout checks: the status location shows their breakers, the fleet
//! carries their opinions.

use nginx_sys::ngx_shm_zone_t;

use circuit_breaker_shell::kin;
use circuit_breaker_shell::zone::Zone;

/// The stream module's zones in this process, by name.
pub fn all() -> Vec<(String, Zone)> {
    // SAFETY: the worker's running cycle.
    let Some(tag) = (unsafe { kin::module_in(nginx_sys::ngx_cycle, kin::STREAM_MODULE) }) else {
        return Vec::new();
    };
    let tag = tag.cast::<core::ffi::c_void>();
    let mut out = Vec::new();
    // SAFETY: the worker's cycle, whose shared zones live as long as it.
    let mut part = unsafe { &(*nginx_sys::ngx_cycle).shared_memory.part };
    loop {
        if !part.elts.is_null() {
            // SAFETY: a list part's elts hold nelts shm zones.
            let zones: &[ngx_shm_zone_t] =
                unsafe { core::slice::from_raw_parts(part.elts.cast(), part.nelts) };
            for z in zones.iter().filter(|z| z.tag == tag) {
                // SAFETY: a zone the stream module registered, mapped in this worker.
                if let Some(zone) = unsafe { Zone::from_kin_shm(z) } {
                    out.push((
                        String::from_utf8_lossy(z.shm.name.as_bytes()).into_owned(),
                        zone,
                    ));
                }
            }
        }
        // SAFETY: next is null or the next live part.
        match unsafe { part.next.as_ref() } {
            Some(p) => part = p,
            None => return out,
        }
    }
}
