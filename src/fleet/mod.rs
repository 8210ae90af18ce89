//! The fleet: instances of nginx share their breakers' opinions off the request path, so
//! that a fleet does not pay for an outage once per instance (`circuit_breaker_fleet`; the
//! rules are pure, in `circuit_breaker_core::fleet`).
//!
//! - **Who exchanges.** Worker 0 of each instance ([`init_process`]), in the background on
//!   its event loop ([`exchange`]). nginx respawns a worker that died with the same number,
//!   so a respawned worker 0 takes over (its store starts empty and refills from peers
//!   within a few intervals; the breakers in the zone are untouched);
//!   after a reload the new configuration's worker 0 does. With `master_process off` the
//!   single process does.
//! - **What requests see.** Only what the exchange worker writes beside each breaker, under
//!   the zone lock: a suspicion deadline (the breaker opens on `suspect_min` local failures
//!   instead of `min_requests`), from when this instance may start a probe (read on the
//!   locked admission path only), and a cooldown cut short once per open episode when peers
//!   report recovery.
//!   Advice not refreshed within the expiry is ignored, so an instance whose exchange
//!   worker is gone acts alone. No request ever waits for a peer.
//! - **What peers see.** The status location answers an authenticated pull at
//!   `?format=fleet` with the message the exchange worker last published ([`shared`]), its
//!   ages advanced by the time since, sealed with the puller's nonce; an authenticated poke
//!   makes the exchange worker pull its sender at once.

pub mod bus;
mod bus_link;
pub mod exchange;
mod nonce;
mod shared;

use crate::net::Peer;
use core::cell::RefCell;
use std::rc::Rc;

use circuit_breaker_core::fleet::auth::{Kind as AuthKind, HEADER};
use circuit_breaker_core::fleet::bus::EXPIRE_INTERVALS;
use circuit_breaker_core::fleet::conf::{breaker_fingerprint, breaker_policy, MAX_PEERS};
use circuit_breaker_core::fleet::{
    default_expire_intervals, wire, FleetConfig, FleetDirective, FleetStore, STREAM_PREFIX,
};
use nginx_sys::{
    ngx_conf_t, ngx_cycle_t, ngx_int_t, ngx_str_t, NGX_ERROR, NGX_LOG_EMERG, NGX_LOG_ERR,
    NGX_LOG_NOTICE, NGX_OK, NGX_PROCESS_SINGLE, NGX_PROCESS_WORKER,
};
use ngx::http::HttpModuleMainConf;
use ngx::log::ngx_cycle_log;

use self::exchange::{Exchange, Link, Setup, Tracked};
use self::shared::{FleetZone, Part, ZONE_NAME};
use crate::conf::{setup, MainConf, Module, SrvConf};
use crate::stream_zones;
use crate::wake;
use circuit_breaker_shell::ffi::guard;
use circuit_breaker_shell::kin;
use circuit_breaker_shell::zone::{Key, Kind, Wanted, Zone, DEFAULT_ROUTE};

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
    // SAFETY: `cf` is live; its cycle is the one being configured.
    mcf.fleet_stream = unsafe { kin::stream_breakers((*cf).cycle) }.unwrap_or_default();
    let size = fleet_zone_size(mcf, spec);
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

/// Bytes for the fleet zone of `mcf`, whose fleet is `spec`.
fn fleet_zone_size(mcf: &MainConf, spec: &FleetDirective) -> usize {
    let stream = mcf.fleet_stream.iter().map(|(name, _)| name.len());
    zone_size(
        spec,
        &setup::wanted(mcf),
        stream,
        mcf.zone_name.0.len(),
        !mcf.keyed.is_empty(),
    )
}

/// [`kin::HTTP_FLEET_GROW`]: the stream block of `cycle` was read after the http block; the
/// fleet's zone, if the http block registered one, is sized again with its breakers (nginx
/// maps zones only once every block is read).
///
/// # Safety
/// `cycle` must be the cycle being configured.
#[no_mangle]
pub unsafe extern "C" fn ngx_http_circuit_breaker_fleet_grow_v1(cycle: *mut ngx_cycle_t) {
    guard((), || {
        // SAFETY: as this fn's contract; this module is loaded.
        if !unsafe { kin::is_current(cycle, crate::conf::module_ptr()) } {
            return;
        }
        // SAFETY: the cycle being configured: its http confs are set once its block was read.
        let Some(mcf) = Module::main_conf_mut(unsafe { &*cycle }) else {
            return;
        };
        let Some(spec) = mcf.fleet.clone() else {
            return;
        };
        // SAFETY: as this fn's contract.
        mcf.fleet_stream = unsafe { kin::stream_breakers(cycle) }.unwrap_or_default();
        let size = fleet_zone_size(mcf, &spec);
        // SAFETY: null or the zone this configuration registered, not mapped yet.
        if let Some(z) = unsafe { mcf.fleet_zone.as_mut() } {
            z.shm.size = z.shm.size.max(size);
        }
    });
}

/// Bytes for the fleet zone: its three texts for every breaker and peer of the
/// configuration (and, with keyed breakers, the keyed records a message may carry), twice
/// over (a text that grows is copied into a new buffer, and the slab rounds sizes up), and
/// 64 KiB beside.
fn zone_size(
    spec: &FleetDirective,
    wanted: &[Wanted<'_>],
    stream: impl Iterator<Item = usize> + Clone,
    zone_name: usize,
    keyed: bool,
) -> usize {
    // A stream breaker's name is `stream:NAME`, its route `default`.
    let names = wanted
        .iter()
        .map(|w| w.key.upstream.len() + w.key.route.len())
        .chain(
            stream
                .clone()
                .map(|n| STREAM_PREFIX.len() + n + DEFAULT_ROUTE.len()),
        )
        .max()
        .unwrap_or(0);
    let id = spec
        .peer_ids()
        .iter()
        .map(String::len)
        .chain([spec.id.len()])
        .chain(
            spec.bus
                .as_ref()
                .map(|_| circuit_breaker_core::fleet::conf::MAX_BUS_ID_BYTES),
        )
        .max()
        .unwrap_or(0);
    // A bus's members are whoever speaks, up to its bound; its own figures are a few lines.
    let p = match &spec.bus {
        Some(_) => circuit_breaker_core::fleet::bus::MAX_MEMBERS,
        None => spec.peers.len(),
    };
    let (n, bus) = (
        wanted.len() + stream.count(),
        4096 * usize::from(spec.bus.is_some()),
    );
    // Names are percent-encoded on the wire: up to three bytes each.
    let records = n.saturating_mul(p + 1).min(1024);
    // Keyed records, own and relayed: a family and a key of up to a name's length each.
    let keyed = if keyed {
        2 * circuit_breaker_core::fleet::KEYED_PER_MESSAGE
            * (3 * (id + 2 * wire::MAX_NAME_BYTES) + 120)
    } else {
        0
    };
    let wire = 64 + records * (3 * (id + names) + 120) + keyed;
    let json = 256 + p * (id + 220) + n * (names + 420);
    let prom = 8192 + p * 5 * (id + zone_name + 120) + n * 7 * (names + zone_name + 140);
    // The header's per-peer poke sequences: 8 bytes for each peer the zone can name.
    let header = MAX_PEERS * 8;
    (2 * (wire + json + prom + bus) + header + 65_536).next_multiple_of(4096)
}

/// The module's `init_process`: in every worker of a fleet, where to signal the exchange;
/// in worker 0, the exchange itself. Never fails the worker: without its exchange an
/// instance acts alone.
pub unsafe extern "C" fn init_process(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    guard(NGX_OK as ngx_int_t, || {
        // SAFETY: nginx passes the running cycle.
        let Some(mcf) = Module::main_conf(unsafe { &*cycle }) else {
            return NGX_OK as ngx_int_t;
        };
        let Some(spec) = mcf.fleet.clone() else {
            return NGX_OK as ngx_int_t;
        };
        // SAFETY: both are set before init_process runs (ngx_worker only in workers; a
        // cache manager keeps the 0 it started with, hence the process type first).
        let (process, worker) = unsafe { (nginx_sys::ngx_process, nginx_sys::ngx_worker) };
        let single = process == NGX_PROCESS_SINGLE as usize;
        if !(single || process == NGX_PROCESS_WORKER as usize) {
            return NGX_OK as ngx_int_t;
        }
        // SAFETY: our fleet zone (or null), mapped in this worker.
        if let Some(shared) = unsafe { FleetZone::from_shm(mcf.fleet_zone) } {
            wake::install(shared.moved());
        }
        if !(single || worker == 0) {
            return NGX_OK as ngx_int_t;
        }
        // SAFETY: the running cycle's core conf, set before any process starts.
        let workers = unsafe { worker_processes(cycle) };
        let log = ngx_cycle_log().as_ptr();
        match start(mcf, spec.clone(), !single && workers > 1) {
            Ok((id, _, breakers)) if spec.bus.is_some() => {
                ngx::ngx_log_error!(
                    NGX_LOG_NOTICE,
                    log,
                    "circuit breaker fleet: \"{}\" exchanges on the bus about {} breaker(s)",
                    id,
                    breakers
                );
            }
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

/// `worker_processes` of the running configuration.
///
/// # Safety
/// `cycle` must be the running cycle.
unsafe fn worker_processes(cycle: *mut ngx_cycle_t) -> isize {
    // SAFETY: the core module's conf is the first thing a cycle's configuration holds; its
    // index is fixed at build time.
    unsafe {
        let ctx = (*cycle).conf_ctx;
        let ccf = *ctx.add(nginx_sys::ngx_core_module.index) as *const nginx_sys::ngx_core_conf_t;
        ccf.as_ref().map_or(1, |c| c.worker_processes)
    }
}

/// Why an http breaker or key family named `stream:…` stays out of the fleet: the name is how
/// the fleet names a stream breaker.
const RESERVED: &str = "names beginning with \"stream:\" are the stream breakers'";

/// Starts the exchange; `poll`: other workers may signal it (it reads their counter every
/// `wake::POLL`).
fn start(
    mcf: &MainConf,
    spec: FleetDirective,
    poll: bool,
) -> Result<(String, usize, usize), String> {
    // SAFETY: our zones (or null), mapped in this worker.
    let http_zone = unsafe { Zone::from_shm(mcf.zone) };
    let stream_zones: Vec<Zone> = if mcf.fleet_stream.is_empty() {
        Vec::new()
    } else {
        stream_zones::all().into_iter().map(|(_, z)| z).collect()
    };
    let zone = http_zone
        .clone()
        .or_else(|| stream_zones.first().cloned())
        .ok_or("no breaker to exchange about")?;
    // SAFETY: `mcf.fleet_zone` is null or the fleet zone this module registered, mapped in this
    // worker (`start` runs from init_process).
    let shared = unsafe { FleetZone::from_shm(mcf.fleet_zone) }.ok_or("no fleet zone")?;
    let instances = spec.instances();
    let cfg = match &spec.bus {
        // Every member hears every other directly.
        Some(_) => FleetConfig {
            fanout: 0,
            expire_ms: spec.interval_ms.saturating_mul(EXPIRE_INTERVALS),
            ..FleetConfig::for_fleet(spec.interval_ms, instances)
        },
        None => FleetConfig {
            fanout: spec.fanout,
            expire_ms: spec
                .interval_ms
                .saturating_mul(default_expire_intervals(instances, spec.fanout)),
            ..FleetConfig::for_fleet(spec.interval_ms, instances)
        },
    };
    let key = spec.key().ok_or("no key")?;
    let ids = spec.peer_ids();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut store = match &spec.bus {
        Some(_) => FleetStore::for_bus(&spec.id, cfg),
        None => FleetStore::new(&spec.id, &refs, cfg),
    }
    .map_err(|e| e.to_string())?;
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
        let added = if upstream.starts_with(STREAM_PREFIX) {
            Err(RESERVED.to_owned())
        } else {
            store
                .add_breaker(upstream, route, fp, breaker_policy(&w.cfg))
                .map_err(|e| e.to_string())
        };
        match added {
            Ok(_) => breakers.push(Tracked {
                hash: w.key.hash,
                upstream: upstream.to_owned(),
                route: route.to_owned(),
                active: w.cfg.active,
                key: None,
                live: true,
                stream: None,
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
    add_stream_breakers(mcf, &stream_zones, &mut store, &mut breakers);
    // Keyed breakers come and go with their keys: the exchange learns each family's rules
    // now, its keys as they fail (here or at a peer).
    let mut families = Vec::new();
    for fam in mcf.keyed.iter().filter(|_| http_zone.is_some()) {
        let fp = breaker_fingerprint(&fam.cfg, None);
        let added = if fam.name.starts_with(STREAM_PREFIX) {
            Err(RESERVED.to_owned())
        } else {
            store
                .add_family(&fam.name, fp, breaker_policy(&fam.cfg))
                .map_err(|e| e.to_string())
        };
        match added {
            Ok(()) => families.push((fam.name.clone(), fam.id)),
            Err(e) => {
                ngx::ngx_log_error!(
                    NGX_LOG_NOTICE,
                    ngx_cycle_log().as_ptr(),
                    "circuit breaker key \"{}\" stays out of the fleet: {}",
                    fam.name,
                    e
                );
            }
        }
    }
    let summary = (spec.id.clone(), spec.peers.len(), breakers.len());
    let links = links(mcf, &spec)?;
    let on_bus = match &spec.bus {
        Some(b) => Some(bus::Bus::new(
            b,
            &spec.id,
            servers(mcf, &spec, b)?,
            mcf.fleet_credentials.clone(),
            cfg.expire_ms,
            (spec.interval_ms / 4).max(100),
        )),
        None => None,
    };
    let has_bus = on_bus.is_some();
    let ex = Exchange::new(Setup {
        store,
        spec,
        key,
        links,
        breakers,
        families,
        zone,
        http: http_zone.is_some(),
        stream_zones,
        shared,
        zone_name: mcf.zone_name.0.clone(),
        poll,
        bus: on_bus,
    });
    let ex = Rc::new(RefCell::new(ex));
    wake::exchange_here();
    if has_bus {
        crate::net::spawn(bus_link::run(Rc::clone(&ex))).detach();
    }
    crate::net::spawn(exchange::run(ex)).detach();
    Ok(summary)
}

/// How to reach each address of the bus's servers (a name's resolved when the configuration
/// was read): for a `tls://` one the TLS to speak (`ssl_name=` as SNI and the name its
/// certificate must carry, else the host name it was listed by, else its IP address).
fn servers(
    mcf: &MainConf,
    spec: &FleetDirective,
    b: &circuit_breaker_core::fleet::conf::BusSpec,
) -> Result<Vec<bus::Server>, String> {
    #[cfg(not(ngx_ssl))]
    let _ = (mcf, spec);
    let mut out = Vec::with_capacity(b.addrs.len());
    for a in &b.addrs {
        let Some(s) = b.servers.get(a.server) else {
            continue;
        };
        #[cfg(ngx_ssl)]
        let ssl = if s.tls {
            // `ssl_name=`, else the host name the server was listed by, else its address.
            let name = spec
                .tls
                .as_ref()
                .and_then(|t| t.name.as_deref())
                .or(s.name());
            let tls = match name {
                // SAFETY: the fleet's context, built at configuration time, lives as long as it.
                Some(name) => unsafe {
                    crate::net::Tls::new(
                        mcf.fleet_ssl,
                        name.as_bytes(),
                        Some(name.as_bytes()),
                        true,
                    )
                },
                // SAFETY: as above.
                None => unsafe { crate::net::Tls::for_ip(mcf.fleet_ssl, &a.addr.ip().to_string()) },
            };
            Some(Rc::new(tls.ok_or("no TLS context")?))
        } else {
            None
        };
        out.push(bus::Server {
            peer: Peer::from(a.addr),
            shown: a.addr.to_string(),
            tls: s.tls,
            #[cfg(ngx_ssl)]
            ssl,
        });
    }
    Ok(out)
}

/// The stream block's breakers, found in the stream module's zones, named `stream:NAME` in
/// the store (see [`STREAM_PREFIX`]).
fn add_stream_breakers(
    mcf: &MainConf,
    zones: &[Zone],
    store: &mut FleetStore,
    breakers: &mut Vec<Tracked>,
) {
    for (name, fp) in &mcf.fleet_stream {
        let key = Key::own(name.as_bytes());
        let found = zones.iter().enumerate().find_map(|(i, z)| {
            let mut locked = z.lock();
            locked.find(&key).map(|b| (i, *b.config()))
        });
        let shown = format!("{STREAM_PREFIX}{name}");
        let added = match found {
            Some((i, cfg)) => store
                .add_breaker(&shown, DEFAULT_ROUTE, *fp, breaker_policy(&cfg))
                .map(|_| (i, cfg))
                .map_err(|e| e.to_string()),
            None => Err("not in the stream zone".to_owned()),
        };
        match added {
            Ok((i, cfg)) => breakers.push(Tracked {
                hash: key.hash,
                upstream: name.clone(),
                route: DEFAULT_ROUTE.to_owned(),
                active: cfg.active,
                key: None,
                live: true,
                stream: Some(i),
            }),
            Err(e) => {
                ngx::ngx_log_error!(
                    NGX_LOG_NOTICE,
                    ngx_cycle_log().as_ptr(),
                    "circuit breaker stream \"{}\" stays out of the fleet: {}",
                    name,
                    e
                );
            }
        }
    }
}

/// How to reach each peer: its address, and for an `https://` one the TLS to speak
/// (`ssl_name=` as SNI and the name its certificate must carry, else its IP address).
fn links(mcf: &MainConf, spec: &FleetDirective) -> Result<Vec<Link>, String> {
    #[cfg(ngx_ssl)]
    let named = match spec.tls.as_ref().and_then(|t| t.name.as_deref()) {
        Some(name) => {
            let sni = name.as_bytes();
            // SAFETY: the fleet's context, built at configuration time, lives as long as it.
            let tls = unsafe { crate::net::Tls::new(mcf.fleet_ssl, sni, Some(sni), true) };
            Some(Rc::new(tls.ok_or("no TLS context")?))
        }
        None => None,
    };
    #[cfg(not(ngx_ssl))]
    let _ = mcf;
    let mut out = Vec::with_capacity(spec.peers.len());
    for p in &spec.peers {
        #[allow(unused_mut)]
        let mut link = Link::new(Peer::from(p.addr), p.addr.to_string(), p.tls);
        #[cfg(ngx_ssl)]
        if p.tls {
            link.tls = match &named {
                Some(t) => Some(Rc::clone(t)),
                None => Some(Rc::new(
                    // SAFETY: as above.
                    unsafe { crate::net::Tls::for_ip(mcf.fleet_ssl, &p.addr.ip().to_string()) }
                        .ok_or("no TLS context")?,
                )),
            };
        }
        out.push(link);
    }
    Ok(out)
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
    /// The request's authentication is missing or wrong, or names no peer.
    Forbidden,
    /// The exchange worker has published nothing yet.
    NotYet,
}

/// What `?format=fleet` answers an authenticated request.
pub enum Answer {
    /// A pull: the message, sealed with the puller's nonce.
    Message(Vec<u8>),
    /// A poke: the exchange worker pulls the sender at once.
    Poked,
}

/// The answer at `now_ms` to a request whose [`HEADER`] is `auth`.
pub fn answer(mcf: &MainConf, auth: Option<&[u8]>, now_ms: u64) -> Result<Answer, NoMessage> {
    let spec = mcf.fleet.as_ref().ok_or(NoMessage::NoFleet)?;
    let key = spec.key().ok_or(NoMessage::Forbidden)?;
    let req = key.check_request(auth).map_err(|_| NoMessage::Forbidden)?;
    // Only a peer may ask (its own id is among the peers, never this instance's). Ids are
    // canonical addresses, so comparing the parsed address compares the ids.
    let from: std::net::SocketAddr = req.from.parse().map_err(|_| NoMessage::Forbidden)?;
    let peer = spec
        .peers
        .iter()
        .position(|p| p.addr == from && p.addr.to_string() == req.from)
        .ok_or(NoMessage::Forbidden)?;
    // SAFETY: our fleet zone (or null), mapped in every worker.
    let shared = unsafe { FleetZone::from_shm(mcf.fleet_zone) }.ok_or(NoMessage::NotYet)?;
    match req.kind {
        AuthKind::Poke => {
            // A poke replayed (its sequence not above the last taken), or dated too far ahead
            // of this clock, is answered the same and moves nothing.
            let now_us = circuit_breaker_shell::clock::wall_ms().saturating_mul(1000);
            if shared.poke_if_new(peer, req.nonce.sequence(), now_us) {
                wake::kick();
            }
            Ok(Answer::Poked)
        }
        AuthKind::Pull => {
            let (at, body) = shared.read(Part::Wire).ok_or(NoMessage::NotYet)?;
            let body = String::from_utf8(body).map_err(|_| NoMessage::NotYet)?;
            let body = wire::delayed(&body, now_ms.saturating_sub(at)).ok_or(NoMessage::NotYet)?;
            Ok(Answer::Message(key.seal(&req.nonce, body.as_bytes())))
        }
    }
}

/// The header that carries a pull's or a poke's authentication.
pub fn auth_header() -> &'static str {
    HEADER
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
    let auth = match mcf.fleet.as_ref().and_then(FleetDirective::key) {
        Some(k) if k.is_authenticated() => "hmac-sha256",
        _ => "off",
    };
    Some(format!(
        "{{\"published\":{}.{:03},\"auth\":\"{auth}\",{rest}",
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
