//! The fleet: instances of nginx share their breakers' opinions off the request path, so
//! that a fleet does not pay for an outage once per instance (`circuit_breaker_fleet`; the
//! rules are pure, in `circuit_breaker_core::fleet`).
//!
//! - **Who exchanges.** Worker 0 of each instance ([`init_process`]), in the background on
//!   its event loop ([`exchange`]). nginx respawns a worker that died into the same slot
//!   with the same number, so a respawned worker 0 takes over (its store starts empty and
//!   refills from peers within a few intervals; the breakers in the zone are untouched);
//!   after a reload the new configuration's worker 0 does. With `master_process off` the
//!   single process does.
//! - **What requests see.** Only what the exchange worker writes beside each breaker, under
//!   the zone lock: a suspicion deadline (the breaker opens on `suspect_min` local failures
//!   instead of `min_requests`), from when this instance may start a probe (read on the
//!   locked admission path only), and a cooldown cut short once when peers report recovery.
//!   A verdict not refreshed within the expiry is ignored, so an instance whose exchange
//!   worker is gone acts alone. No request ever waits for a peer.
//! - **What peers see.** The status location answers `?format=fleet` with the message the
//!   exchange worker last published ([`shared`]), its ages advanced by the time since.

pub mod exchange;
mod shared;

use core::cell::RefCell;
use core::time::Duration;
use std::rc::Rc;

use circuit_breaker_core::fleet::conf::{breaker_fingerprint, breaker_policy, SECRET_HEADER};
use circuit_breaker_core::fleet::{
    default_expire_intervals, wire, FleetConfig, FleetSpec, FleetStore,
};
use nginx_sys::{
    ngx_conf_t, ngx_cycle_t, ngx_int_t, ngx_str_t, NGX_ERROR, NGX_LOG_EMERG, NGX_LOG_ERR,
    NGX_LOG_NOTICE, NGX_OK, NGX_PROCESS_SINGLE, NGX_PROCESS_WORKER,
};
use ngx::http::HttpModuleMainConf;
use ngx::log::ngx_cycle_log;

use self::exchange::{Exchange, Tracked};
use self::shared::{FleetZone, Part, ZONE_NAME};
use crate::conf::{setup, MainConf, Module, SrvConf};
use crate::ffi::guard;
use crate::zone::{Kind, Wanted, Zone};

/// `postconfiguration`, after the upstreams are collected: registers the fleet zone, sized
/// for this configuration's breakers and peers.
///
/// # Safety
/// `cf` must be the configuration being parsed, inside the http block.
pub unsafe fn postconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: `cf` is the configuration being parsed, inside the http block (this fn's contract),
    // so its http confs are set.
    let Some(mcf) = Module::main_conf_mut(unsafe { &*cf }) else {
        return NGX_ERROR as ngx_int_t;
    };
    let Some(spec) = mcf.fleet.as_ref() else {
        return NGX_OK as ngx_int_t;
    };
    let size = zone_size(spec, &setup::wanted(mcf), mcf.zone_name.0.len());
    let mut name = ngx_str_t {
        len: ZONE_NAME.len(),
        data: ZONE_NAME.as_ptr().cast_mut(),
    };
    // SAFETY: `cf` is live; the name is static, as nginx keeps it; the module static
    // outlives every cycle.
    let zone = unsafe {
        nginx_sys::ngx_shared_memory_add(cf, &mut name, size, crate::conf::module_ptr().cast())
    };
    // SAFETY: null or the zone nginx just registered.
    let Some(z) = (unsafe { zone.as_mut() }) else {
        return NGX_ERROR as ngx_int_t;
    };
    if !z.data.is_null() {
        ngx::ngx_log_error!(
            NGX_LOG_EMERG,
            // SAFETY: `cf` is live.
            unsafe { (*cf).log },
            "zone \"{}\" is already used",
            ZONE_NAME
        );
        return NGX_ERROR as ngx_int_t;
    }
    z.init = Some(shared::init_zone);
    // Marks the zone as ours; init reads nothing from it.
    z.data = core::ptr::from_mut(mcf).cast();
    mcf.fleet_zone = zone;
    NGX_OK as ngx_int_t
}

/// Bytes for the fleet zone: its three texts for every breaker and peer of the
/// configuration, twice over (a text that grows is copied into a new buffer, and the slab
/// rounds sizes up), and 64 KiB beside.
fn zone_size(spec: &FleetSpec, wanted: &[Wanted<'_>], zone_name: usize) -> usize {
    let names = wanted
        .iter()
        .map(|w| w.key.upstream.len() + w.key.route.len())
        .max()
        .unwrap_or(0);
    let id = spec
        .peer_ids()
        .iter()
        .map(String::len)
        .chain([spec.id.len()])
        .max()
        .unwrap_or(0);
    let (n, p) = (wanted.len(), spec.peers.len());
    // Names are percent-encoded on the wire: up to three bytes each.
    let records = n.saturating_mul(p + 1).min(1024);
    let wire = 64 + records * (3 * (id + names) + 120);
    let json = 256 + p * (id + 220) + n * (names + 420);
    let prom = 8192 + p * 5 * (id + zone_name + 120) + n * 7 * (names + zone_name + 140);
    (2 * (wire + json + prom) + 65_536).next_multiple_of(4096)
}

/// The module's `init_process`: starts the exchange in worker 0 when a fleet is
/// configured. Never fails the worker: without its exchange an instance acts alone.
pub unsafe extern "C" fn init_process(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    guard(NGX_OK as ngx_int_t, || {
        // SAFETY: both are set before init_process runs (ngx_worker only in workers; a
        // cache manager keeps the 0 it started with, hence the process type first).
        let (process, worker) = unsafe { (nginx_sys::ngx_process, nginx_sys::ngx_worker) };
        let ours = process == NGX_PROCESS_SINGLE as usize
            || (process == NGX_PROCESS_WORKER as usize && worker == 0);
        if !ours {
            return NGX_OK as ngx_int_t;
        }
        // SAFETY: nginx passes the running cycle.
        let Some(mcf) = Module::main_conf(unsafe { &*cycle }) else {
            return NGX_OK as ngx_int_t;
        };
        let Some(spec) = mcf.fleet.clone() else {
            return NGX_OK as ngx_int_t;
        };
        let log = ngx_cycle_log().as_ptr();
        match start(mcf, spec) {
            Ok((id, peers, breakers)) => {
                ngx::ngx_log_error!(
                    NGX_LOG_NOTICE,
                    log,
                    "circuit breaker fleet: \"{}\" exchanges with {} peer(s) about {} breaker(s)",
                    id,
                    peers,
                    breakers
                );
            }
            Err(why) => {
                ngx::ngx_log_error!(
                    NGX_LOG_ERR,
                    log,
                    "circuit breaker fleet not started, this instance acts alone: {}",
                    why
                );
            }
        }
        NGX_OK as ngx_int_t
    })
}

fn start(mcf: &MainConf, spec: FleetSpec) -> Result<(String, usize, usize), String> {
    // SAFETY: our zones (or null), mapped in this worker.
    let zone = unsafe { Zone::from_shm(mcf.zone) }.ok_or("no breaker to exchange about")?;
    // SAFETY: `mcf.fleet_zone` is null or the fleet zone this module registered, mapped in this
    // worker (`start` runs from init_process).
    let shared = unsafe { FleetZone::from_shm(mcf.fleet_zone) }.ok_or("no fleet zone")?;
    let instances = spec.instances();
    let cfg = FleetConfig {
        fanout: spec.fanout,
        expire_ms: spec
            .interval_ms
            .saturating_mul(default_expire_intervals(instances, spec.fanout)),
        ..FleetConfig::for_fleet(spec.interval_ms, instances)
    };
    let ids = spec.peer_ids();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut store = FleetStore::new(&spec.id, &refs, cfg).map_err(|e| e.to_string())?;
    let mut breakers = Vec::new();
    // Servers' breakers stay out: peers judge an origin, not one instance's view of a server.
    for w in setup::wanted(mcf)
        .into_iter()
        .filter(|w| w.key.kind == Kind::Route)
    {
        let (Ok(upstream), Ok(route)) = (
            core::str::from_utf8(w.key.upstream),
            core::str::from_utf8(w.key.route),
        ) else {
            continue;
        };
        let probe = mcf.upstream(upstream).and_then(|s| s.probe.as_ref());
        let fp = breaker_fingerprint(&w.cfg, probe);
        match store.add_breaker(upstream, route, fp, breaker_policy(&w.cfg)) {
            Ok(_) => breakers.push(Tracked {
                hash: w.key.hash,
                upstream: upstream.to_owned(),
                route: route.to_owned(),
                active: w.cfg.active,
                recovered: false,
            }),
            Err(e) => {
                ngx::ngx_log_error!(
                    NGX_LOG_NOTICE,
                    ngx_cycle_log().as_ptr(),
                    "circuit breaker \"{}/{}\" stays out of the fleet: {}",
                    upstream,
                    route,
                    e
                );
            }
        }
    }
    let summary = (spec.id.clone(), spec.peers.len(), breakers.len());
    let ex = Exchange::new(store, spec, breakers, zone, shared, mcf.zone_name.0.clone());
    let ex = Rc::new(RefCell::new(ex));
    crate::net::every(Duration::from_millis(1), move || {
        exchange::round(ex.clone())
    })
    .detach();
    Ok(summary)
}

/// A breaker's fingerprint as the fleet compares it, for the status page.
pub fn fingerprint(scf: &SrvConf) -> Option<u64> {
    let cfg = scf.breaker.as_ref()?;
    Some(breaker_fingerprint(cfg, scf.probe.as_ref()))
}

/// Why `?format=fleet` has no message to serve.
pub enum NoMessage {
    /// This instance is in no fleet.
    NoFleet,
    /// The puller did not send the configured secret.
    Forbidden,
    /// The exchange worker has published nothing yet.
    NotYet,
}

/// The message served at `?format=fleet` at `now_ms`, for a puller that sent `secret`
/// (the value of its `X-Circuit-Breaker-Fleet-Secret` header, if any).
pub fn message(mcf: &MainConf, secret: Option<&[u8]>, now_ms: u64) -> Result<String, NoMessage> {
    let spec = mcf.fleet.as_ref().ok_or(NoMessage::NoFleet)?;
    if let Some(want) = &spec.secret {
        if !secret.is_some_and(|got| same_secret(got, want.as_bytes())) {
            return Err(NoMessage::Forbidden);
        }
    }
    // SAFETY: our fleet zone (or null), mapped in every worker.
    let shared = unsafe { FleetZone::from_shm(mcf.fleet_zone) }.ok_or(NoMessage::NotYet)?;
    let (at, body) = shared.read(Part::Wire).ok_or(NoMessage::NotYet)?;
    let body = String::from_utf8(body).map_err(|_| NoMessage::NotYet)?;
    wire::delayed(&body, now_ms.saturating_sub(at)).ok_or(NoMessage::NotYet)
}

/// The header a puller sends the secret in.
pub fn secret_header() -> &'static str {
    SECRET_HEADER
}

/// Compares without stopping at the first difference, so that the time taken says nothing
/// of how much of a guess was right.
fn same_secret(got: &[u8], want: &[u8]) -> bool {
    got.len() == want.len() && got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// The status page's `fleet` object: the exchange worker's, as last published, led by
/// `"published"` (Unix seconds; it stops moving when the exchange worker is gone). `wall`
/// turns a monotonic instant into Unix milliseconds.
pub fn status_json(mcf: &MainConf, wall: impl Fn(u64) -> u64) -> Option<String> {
    mcf.fleet.as_ref()?;
    // SAFETY: our fleet zone (or null), mapped in every worker.
    let shared = unsafe { FleetZone::from_shm(mcf.fleet_zone) };
    let Some((at, json)) = shared.as_ref().and_then(|s| s.read(Part::Json)) else {
        return Some("{\"published\":null}".to_owned());
    };
    let json = String::from_utf8(json).ok()?;
    let rest = json.strip_prefix('{')?;
    let w = wall(at);
    Some(format!(
        "{{\"published\":{}.{:03},{rest}",
        w / 1000,
        w % 1000
    ))
}

/// The fleet's Prometheus families, as last published, and when that was.
pub fn status_prometheus(mcf: &MainConf, wall: impl Fn(u64) -> u64) -> Option<String> {
    mcf.fleet.as_ref()?;
    // SAFETY: our fleet zone (or null), mapped in every worker.
    let shared = unsafe { FleetZone::from_shm(mcf.fleet_zone) }?;
    let (at, text) = shared.read(Part::Prometheus)?;
    let mut out = String::from_utf8(text).ok()?;
    let zone = mcf.zone_name.0.replace('\\', "\\\\").replace('"', "\\\"");
    let w = wall(at);
    out.push_str(&format!(
        "# HELP nginx_circuit_breaker_fleet_published_seconds Unix time the exchange worker last published.\n\
         # TYPE nginx_circuit_breaker_fleet_published_seconds gauge\n\
         nginx_circuit_breaker_fleet_published_seconds{{zone=\"{zone}\"}} {}.{:03}\n\
         # HELP nginx_circuit_breaker_fleet_publish_short_total Publications that did not fit the fleet zone.\n\
         # TYPE nginx_circuit_breaker_fleet_publish_short_total counter\n\
         nginx_circuit_breaker_fleet_publish_short_total{{zone=\"{zone}\"}} {}\n",
        w / 1000,
        w % 1000,
        shared.short()
    ));
    Some(out)
}
