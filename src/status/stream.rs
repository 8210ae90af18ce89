//! The stream module's breakers on this status location: its zones are found among the
//! cycle's shared zones by their tag (the stream module, looked up by name: it is another
//! `.so`, loaded or not), each read with this build's zone code once its layout checks, and
//! rendered as a page of its own, the page's `stream` member.

use circuit_breaker_core::snapshot::{BreakerView, Clocks, Kind};
use circuit_breaker_core::status::assemble::{assemble, copies, Upstreams};
use circuit_breaker_core::status::query::{lists_key_state, Query};
use circuit_breaker_core::status::{render_json, ZoneView};
use nginx_sys::ngx_shm_zone_t;

use super::snapshot::snapshot;
use crate::ffi::{nginx_version, MODULE_VERSION};
use crate::zone::Zone;

/// A stream upstream's configuration is not the http block's: nothing to add.
struct Stream;

impl Upstreams for Stream {
    fn servers(&self, _upstream: &str) -> impl Iterator<Item = (&str, bool)> {
        core::iter::empty()
    }

    fn probe_uri(&self, _upstream: &str) -> Option<String> {
        None
    }

    fn fingerprint(&self, _upstream: &str) -> Option<u64> {
        None
    }
}

/// Each stream zone's page, as `q` selects its breakers; `None` when nginx has none.
pub fn pages(q: &Query, clocks: Clocks) -> Option<Vec<Vec<u8>>> {
    let zones = zones();
    if zones.is_empty() {
        return None;
    }
    let keep = |upstream: &str, route: &str, kind: Kind, view: &BreakerView| {
        copies(q, upstream, route, kind, view)
    };
    let keep_key = |v: &BreakerView| lists_key_state(q, v.state, v.forced.is_some());
    let pages = zones
        .into_iter()
        .map(|(name, zone)| {
            let taken = snapshot(&zone, clocks.mono_ms, q.history, keep, keep_key);
            let head = ZoneView {
                name,
                module_version: MODULE_VERSION,
                nginx_version: nginx_version(),
                ..ZoneView::default()
            };
            let (view, entries) = assemble(head, taken, q, clocks, &Stream);
            render_json(&view, &entries)
        })
        .collect();
    Some(pages)
}

/// The stream module's zones in this process, by name.
fn zones() -> Vec<(String, Zone)> {
    // SAFETY: dlsym with a NUL-terminated name; null when no loaded object defines it (nginx
    // loads modules RTLD_GLOBAL).
    let tag = unsafe {
        libc::dlsym(
            libc::RTLD_DEFAULT,
            c"ngx_stream_circuit_breaker_module".as_ptr(),
        )
    };
    if tag.is_null() {
        return Vec::new();
    }
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
