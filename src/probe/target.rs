//! What the prober watches, built once per worker from the configuration: each upstream with
//! `probe_uri` (how to probe it) and each of its breakers (where the zone keeps it): those of
//! its routes, and those of its servers when it ejects them.

use core::cell::Cell;
use std::rc::Rc;

use circuit_breaker_core::directive::ProbeSpec;
use circuit_breaker_core::probe::{next_server, tls_names};
use nginx_sys::{ngx_http_upstream_srv_conf_t, NGX_LOG_WARN};
use ngx::log::ngx_cycle_log;

use super::servers;
use crate::conf::{default_route, MainConf, Route, SrvConf};
use crate::eject;
use crate::net::Peer;
use circuit_breaker_shell::clock::rnd;
use circuit_breaker_shell::ffi::key_hash;
use circuit_breaker_shell::zone::{Handle, Key, Kind, Probed, Zone};

/// An upstream with `probe_uri`: how its probes are sent and judged.
pub struct Upstream {
    pub name: String,
    name_hash: u64,
    scf: *const SrvConf,
    uscf: *const ngx_http_upstream_srv_conf_t,
    pub spec: ProbeSpec,
    /// `probe_host`, or the upstream's name as `proxy_pass http://name` sends it.
    pub host: String,
    pub interval_ms: u32,
    /// `probe_latency` (0: off), to say why a probe failed.
    pub latency_ms: u32,
    /// Set: probes speak TLS, from the first byte.
    #[cfg(ngx_ssl)]
    pub tls: Option<crate::net::Tls>,
    /// The next server to try, rotating over the servers not marked down.
    cursor: Cell<usize>,
    /// Told once that its servers cannot be read.
    warned: Cell<bool>,
}

impl Upstream {
    /// The server the next probe goes to, or `None` when none can be probed (all marked
    /// `down`, or a balancer that keeps no round-robin peers).
    pub fn next_server(&self) -> Option<Peer> {
        // SAFETY: the upstream block lives as long as the configuration; this worker's.
        let list = unsafe { servers::primaries(&*self.uscf) };
        let Some(list) = list else {
            if !self.warned.replace(true) {
                ngx::ngx_log_error!(
                    NGX_LOG_WARN,
                    ngx_cycle_log().as_ptr(),
                    "circuit breaker: upstream \"{}\" keeps its servers in a way active probes cannot read, \"probe_uri\" is ignored",
                    self.name
                );
            }
            return None;
        };
        let down: Vec<bool> = list.iter().map(|(_, down)| *down).collect();
        let i = next_server(&down, self.cursor.get())?;
        self.cursor.set(i.wrapping_add(1));
        list.into_iter().nth(i).map(|(peer, _)| peer)
    }

    /// The server with address `name`, ejected or not, primary or backup.
    pub fn server(&self, name: &str) -> Option<Peer> {
        // SAFETY: `self.uscf` is an upstream block of this worker's configuration, live as long as
        // it: what `named` asks.
        unsafe { servers::named(&*self.uscf, name.as_bytes()) }
    }

    /// The index in the upstream's pool of the server `peer` is, when it ejects servers.
    pub fn index_of(&self, peer: &Peer) -> Option<u16> {
        // SAFETY: the module's conf lives as long as the configuration, this worker's.
        let pool = unsafe { &*self.scf }.pool.as_ref()?;
        let i = pool
            .servers
            .iter()
            .position(|s| s.name.as_bytes() == peer.name())?;
        u16::try_from(i).ok()
    }

    /// The module's conf of the upstream and nginx's, for the pool of servers.
    pub fn pool<'a>(&'a self, zone: &'a Zone) -> Option<eject::Upstream<'a>> {
        // SAFETY: both live as long as the configuration, this worker's; the module's conf is
        // that of `uscf`.
        let (scf, uscf) = unsafe { (&*self.scf, &*self.uscf) };
        scf.pool.as_ref()?;
        // SAFETY: `uscf` is live and `scf` its module conf, and the prober runs in a worker, where
        // `uscf`'s peer data is round robin's when `scf.pool` is set: what `Upstream::new` asks.
        Some(unsafe { eject::Upstream::new(zone, scf, uscf) })
    }
}

/// What a target is the breaker of.
pub enum Watched {
    /// An (upstream, route): probes go to the upstream's servers in turn.
    Route(Route),
    /// The upstream's server `index` (of its pool), at `address`: probes go to it alone.
    Server { index: u16, address: String },
}

/// One breaker of such an upstream.
pub struct Target {
    pub up: Rc<Upstream>,
    pub what: Watched,
    pub key_hash: u64,
    /// Where the zone keeps it, once found.
    pub handle: Cell<Handle>,
    /// When to look at it again (on the monotonic clock).
    pub next_look: Cell<u64>,
    /// This worker's probe of it is in flight.
    pub in_flight: Cell<bool>,
    /// Its probes fail in a way the operator must fix (TLS, a request that cannot be sent):
    /// said once at `error`, until the next answer.
    pub complained: Cell<bool>,
}

impl Probed for Target {
    fn in_flight(&self) -> &Cell<bool> {
        &self.in_flight
    }

    fn handle(&self) -> Handle {
        self.handle.get()
    }

    fn key(&self) -> Key<'_> {
        Target::key(self)
    }
}

impl Target {
    pub fn key(&self) -> Key<'_> {
        let (route, kind) = match &self.what {
            Watched::Route(r) => (r.name.as_bytes(), Kind::Route),
            Watched::Server { address, .. } => (address.as_bytes(), Kind::Server),
        };
        Key {
            hash: self.key_hash,
            upstream: self.up.name.as_bytes(),
            route,
            kind,
        }
    }

    /// `upstream/route` as log lines name a breaker, or `upstream` for a server's (its lines
    /// name the server).
    pub fn name(&self) -> String {
        match &self.what {
            Watched::Route(r) => format!("{}/{}", self.up.name, r.name),
            Watched::Server { .. } => self.up.name.clone(),
        }
    }

    /// Where its next probe goes: the upstream's next server not marked down, or the server.
    pub fn peer(&self) -> Option<Peer> {
        match &self.what {
            Watched::Route(_) => self.up.next_server(),
            Watched::Server { address, .. } => self.up.server(address),
        }
    }

    fn new(up: &Rc<Upstream>, what: Watched, key_hash: u64) -> Target {
        Target {
            up: Rc::clone(up),
            what,
            key_hash,
            handle: Cell::new(Handle::NONE),
            next_look: Cell::new(0),
            in_flight: Cell::new(false),
            complained: Cell::new(false),
        }
    }
}

/// Every breaker of every upstream with `probe_uri`: the upstream's own, those of the routes
/// that pass to it, those of routes that pick their upstream at run time (found once they
/// exist), and those of its servers when it ejects them (their breakers then have active
/// probes: `eject::server_config`).
pub fn collect(mcf: &MainConf) -> Vec<Rc<Target>> {
    let mut out = Vec::new();
    for &s in &mcf.upstreams {
        // SAFETY: upstream confs live as long as the configuration.
        let s = unsafe { &*s };
        let (Some(cfg), Some(spec)) = (s.breaker, s.probe.as_ref()) else {
            continue;
        };
        if s.uscf.is_null() {
            continue;
        }
        #[cfg(ngx_ssl)]
        // SAFETY: `probe_tls` was set to a location's conf of this configuration, or null.
        let tls = unsafe { tls_of(s) };
        #[cfg(ngx_ssl)]
        if tls.is_none() && !s.probe_tls.is_null() {
            // A TLS location without a context nginx built: never probe it in plain HTTP.
            ngx::ngx_log_error!(
                NGX_LOG_WARN,
                ngx_cycle_log().as_ptr(),
                "circuit breaker: upstream \"{}\" is reached over TLS, but its probes cannot speak it, \"probe_uri\" is ignored",
                s.name
            );
            continue;
        }
        let up = Rc::new(Upstream {
            name: s.name.clone(),
            name_hash: s.name_hash,
            scf: s,
            uscf: s.uscf,
            spec: spec.clone(),
            host: spec.host.clone().unwrap_or_else(|| s.name.clone()),
            interval_ms: cfg.probe_interval_ms,
            latency_ms: cfg.probe_limit_ms(),
            #[cfg(ngx_ssl)]
            tls,
            // Workers start their rotations at different servers.
            cursor: Cell::new(rnd() as usize),
            warned: Cell::new(false),
        });
        let dynamic = mcf.dynamic_routes.iter().filter(|r| !s.routes.contains(r));
        let routes = core::iter::once(&default_route().name)
            .chain(&s.routes)
            .chain(dynamic);
        for name in routes {
            let route = Route::new(name);
            let key_hash = key_hash(up.name_hash, route.hash);
            out.push(Rc::new(Target::new(&up, Watched::Route(route), key_hash)));
        }
        let servers = s.pool.iter().filter(|p| p.cfg.active);
        for (i, server) in servers.flat_map(|p| p.servers.iter().enumerate()) {
            let what = Watched::Server {
                index: i as u16,
                address: server.name.clone(),
            };
            out.push(Rc::new(Target::new(&up, what, server.key_hash)));
        }
    }
    out
}

/// The TLS settings of the location `scheme::choose_probe_tls` chose for the upstream's
/// probes: its context, the name checked and the SNI sent as nginx makes them for that
/// location's traffic (`proxy_ssl_name` when it holds no variables, else the upstream's name;
/// SNI with `proxy_ssl_server_name on`), and whether to verify. `None`: plain HTTP.
///
/// # Safety
/// `scf.probe_tls` must be null or a live upstream conf of this configuration.
#[cfg(ngx_ssl)]
unsafe fn tls_of(scf: &SrvConf) -> Option<crate::net::Tls> {
    // SAFETY: null or a location's upstream conf, live for this configuration (this fn's
    // contract).
    let ucf = unsafe { scf.probe_tls.as_ref() }?;
    // SAFETY: null or the location's SSL settings, from configuration memory.
    let ssl = unsafe { ucf.ssl.as_ref() }?;
    if ssl.ctx.is_null() {
        return None;
    }
    // SAFETY: null or a compiled complex value from configuration memory.
    let fixed_name = unsafe { ucf.ssl_name.as_ref() }
        .filter(|cv| cv.lengths.is_null())
        .map(|cv| cv.value.as_bytes());
    let (name, sni) = tls_names(
        fixed_name.unwrap_or(scf.name.as_bytes()),
        ucf.ssl_server_name != 0,
    );
    // SAFETY: an initialised context (ctx set) in configuration memory.
    unsafe { crate::net::Tls::new(ucf.ssl, &name, sni.as_deref(), ucf.ssl_verify != 0) }
}
