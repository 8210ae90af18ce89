//! The configuration: typed values for the http block, upstream blocks and locations, the
//! directives that fill them ([`directives`]), and what is derived once parsing is done
//! ([`setup`]): which upstreams have breakers, which routes reach them, and the breakers the
//! zone must hold.

pub mod directives;
mod fleet;
pub mod jitter;
mod local;
pub mod scheme;
pub mod setup;

use core::cell::{Cell, OnceCell};
use core::ptr::null_mut;
use std::collections::{HashMap, HashSet};

use circuit_breaker_core::breaker::{BreakerConfig, FailureSet};
pub use circuit_breaker_core::directive::EjectSetting;
use circuit_breaker_core::directive::{Legacy, ProbeSpec};
use circuit_breaker_core::fleet::FleetDirective;
use circuit_breaker_core::limit::LimitConfig;
use circuit_breaker_core::retry_budget::RetryBudgetConfig;
use nginx_sys::{
    ngx_flag_t, ngx_http_upstream_conf_t, ngx_http_upstream_init_peer_pt,
    ngx_http_upstream_srv_conf_t, ngx_shm_zone_t, NGX_CONF_UNSET,
};
use ngx::http::{
    HttpModule, HttpModuleLocationConf, HttpModuleMainConf, HttpModuleServerConf, Merge,
    MergeConfigError,
};

pub use local::UpstreamLocal;

use circuit_breaker_shell::eject;

use circuit_breaker_shell::ffi::{hash_name, key_hash};
use circuit_breaker_shell::zone::{Handle, Key, Kind, Zone, ZoneName, DEFAULT_ROUTE};

extern "C" {
    /// The module nginx loads, defined where the module is registered.
    #[allow(non_upper_case_globals)]
    static mut ngx_http_circuit_breaker_module: nginx_sys::ngx_module_t;
}

/// The module's type for ngx-rust's typed access to its confs and request ctx.
pub struct Module;

impl HttpModule for Module {
    fn module() -> &'static nginx_sys::ngx_module_t {
        // SAFETY: nginx writes the module (its index and ctx_index) only while loading it,
        // before any configuration is read or any request runs.
        unsafe { &*core::ptr::addr_of!(ngx_http_circuit_breaker_module) }
    }
}

impl Module {
    /// The module's main conf in a process that serves requests (a worker, or nginx without
    /// a master): `None` in the cache manager and loader, which run `init_process` too.
    pub fn serving_main_conf(cycle: &nginx_sys::ngx_cycle_t) -> Option<&MainConf> {
        // SAFETY: a plain integer nginx sets before init_process runs.
        let process = unsafe { nginx_sys::ngx_process } as u32;
        if process != nginx_sys::NGX_PROCESS_WORKER && process != nginx_sys::NGX_PROCESS_SINGLE {
            return None;
        }
        Module::main_conf(cycle)
    }
}

// SAFETY: the module's entry of the http main confs holds what `Module::create_main_conf` (ngx's default, registered
// in lib.rs) allocates: a `MainConf`.
unsafe impl HttpModuleMainConf for Module {
    type MainConf = MainConf;
}
// SAFETY: the module's entry of every srv conf holds what `Module::create_srv_conf` (registered in lib.rs)
// allocates: a `SrvConf`.
unsafe impl HttpModuleServerConf for Module {
    type ServerConf = SrvConf;
}
// SAFETY: the module's entry of every loc conf holds what `Module::create_loc_conf` (registered in lib.rs)
// allocates: a `LocConf`.
unsafe impl HttpModuleLocationConf for Module {
    type LocationConf = LocConf;
}

/// The module, as nginx's zone and context APIs take it.
pub fn module_ptr() -> *mut nginx_sys::ngx_module_t {
    core::ptr::addr_of_mut!(ngx_http_circuit_breaker_module)
}

/// `http {}` level: the zone and every breaker-enabled upstream.
pub struct MainConf {
    pub zone: *mut ngx_shm_zone_t,
    /// The zone as this process sees it, once mapped (workers inherit the master's).
    zone_cache: OnceCell<Zone>,
    /// The zone's name; the shm zone's `data` points here.
    pub zone_name: ZoneName,
    /// Breaker-enabled upstreams, in configuration order (filled in by `setup`).
    pub upstreams: Vec<*mut SrvConf>,
    /// The same, by name.
    pub by_name: HashMap<String, *mut SrvConf>,
    /// (upstream conf, route) pairs of locations that pass to a fixed upstream, in
    /// configuration order (breakers are created in that order), and the same as a set.
    pairs: Vec<(usize, String)>,
    pair_set: HashSet<(usize, String)>,
    /// Routes of locations whose upstream is only known at run time (`proxy_pass http://$x`):
    /// they may meet any breaker-enabled upstream.
    pub dynamic_routes: Vec<String>,
    /// The zone generation this configuration took over; older workers create no breakers.
    pub generation: u64,
    /// `ctx_index` of the content modules whose location conf starts with an
    /// `ngx_http_upstream_conf_t` (proxy, grpc, fastcgi, uwsgi, scgi, memcached).
    pub(crate) upstream_modules: Vec<usize>,
    /// `ctx_index` of the proxy and gRPC modules (whose upstream conf carries their
    /// `*_ssl_*` settings), and the upstream conf of every location they pass to a fixed
    /// upstream (`(upstream srv conf, upstream conf)`): active probes take their TLS settings
    /// from them.
    pub(crate) proxy_module: Option<usize>,
    pub(crate) grpc_module: Option<usize>,
    pub proxied: Vec<Proxied>,
    /// Locations that pass to an upstream picked at run time over TLS
    /// (`proxy_pass https://$backend`): their upstream conf and name.
    pub(crate) dynamic_tls: Vec<(*mut ngx_http_upstream_conf_t, String)>,
    /// The scheme of each `proxy_pass` and `grpc_pass`, by the location conf it filled in
    /// (see `scheme`), while the http block is parsed.
    pub(crate) pass_schemes: HashMap<usize, scheme::Pass>,
    /// The content handlers the upstream modules' `*_pass` directives gave locations, each with
    /// its module's `ctx_index`: the requests a keyed breaker judges go to one of them.
    pub upstream_handlers: Vec<(usize, usize)>,
    /// `circuit_breaker_fleet`, and the shared memory where the exchange worker publishes
    /// (registered by `crate::fleet` once the http block is parsed).
    pub fleet: Option<FleetDirective>,
    pub fleet_zone: *mut ngx_shm_zone_t,
    /// The stream block's breakers (name, fingerprint), which the fleet carries too, as the
    /// stream module said once both blocks were read (`crate::fleet`).
    pub fleet_stream: Vec<(String, u64)>,
    /// The TLS context of the fleet's `https://` peers (null without one).
    #[cfg(ngx_ssl)]
    pub fleet_ssl: *mut nginx_sys::ngx_ssl_t,
    /// `nats_credentials=`, read.
    pub fleet_credentials: Option<circuit_breaker_core::fleet::bus::Credentials>,
    /// `circuit_breaker_key` families, in configuration order (a location names one by its
    /// index).
    pub keyed: Vec<KeyedFamily>,
    /// `circuit_breaker_zone`'s `keys=`: the keyed table's tallies, when given.
    pub keys: Option<usize>,
    /// The balancer an open key's request is handed to when its location's cache may answer
    /// it (see `crate::keyed`); null without keyed breakers.
    pub keyed_stale_upstream: *mut nginx_sys::ngx_http_upstream_srv_conf_t,
}

/// One `circuit_breaker_key` of the configuration: its key as written (`$host`), which names
/// its breakers, the 16 bits of that name's hash its tallies carry, and its parameters. Every
/// `circuit_breaker_key` with the same key is the same family, and must give the same
/// parameters.
pub struct KeyedFamily {
    pub name: String,
    pub id: u16,
    pub cfg: BreakerConfig,
}

impl KeyedFamily {
    /// As the zone takes it.
    pub fn as_zone(&self) -> circuit_breaker_shell::zone::Family<'_> {
        circuit_breaker_shell::zone::Family {
            name: self.name.as_bytes(),
            id: self.id,
            cfg: &self.cfg,
        }
    }
}

/// `circuit_breaker_key` in a location (or inherited from its server or http block).
#[derive(Clone, Copy)]
pub enum KeyedSetting {
    /// `circuit_breaker_key off`.
    Off,
    /// The key's value, computed per request (a complex value in the configuration's pool),
    /// and its family's index in [`MainConf::keyed`].
    On {
        value: *mut nginx_sys::ngx_http_complex_value_t,
        family: usize,
        /// The variable's index when the key is one variable (`$host`): read as it is,
        /// without the script engine or a copy.
        variable: Option<usize>,
    },
}

/// `circuit_breaker_class` in a location (or inherited from its server or http block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassSetting {
    /// `circuit_breaker_class off`: the location's requests have no class.
    Off,
    /// The index of the variable whose value names the class.
    On { variable: usize },
}

/// A location that passes to a fixed upstream, as active probes need it: their scheme and TLS
/// settings are those of the locations passing to the upstream they probe.
pub struct Proxied {
    pub upstream: *mut ngx_http_upstream_srv_conf_t,
    pub conf: *mut ngx_http_upstream_conf_t,
    /// Its `proxy_pass` speaks TLS (`https://`).
    pub tls: bool,
    /// The location's name, for a warning.
    pub location: String,
}

impl Default for MainConf {
    fn default() -> Self {
        MainConf {
            zone: null_mut(),
            zone_cache: OnceCell::new(),
            zone_name: ZoneName(String::new(), None),
            upstreams: Vec::new(),
            by_name: HashMap::new(),
            pairs: Vec::new(),
            pair_set: HashSet::new(),
            dynamic_routes: Vec::new(),
            generation: 0,
            upstream_modules: Vec::new(),
            proxy_module: None,
            grpc_module: None,
            proxied: Vec::new(),
            dynamic_tls: Vec::new(),
            pass_schemes: HashMap::new(),
            upstream_handlers: Vec::new(),
            fleet: None,
            fleet_zone: null_mut(),
            fleet_stream: Vec::new(),
            keyed: Vec::new(),
            keys: None,
            keyed_stale_upstream: null_mut(),
            #[cfg(ngx_ssl)]
            fleet_ssl: null_mut(),
            fleet_credentials: None,
        }
    }
}

impl MainConf {
    /// The keyed table's tallies: `keys=`, else as many as a quarter of the zone holds; none
    /// without `circuit_breaker_key`.
    pub fn keyed_capacity(&self) -> usize {
        if self.keyed.is_empty() {
            return 0;
        }
        if let Some(n) = self.keys {
            return n;
        }
        // SAFETY: null, or the shm zone `add_zone` registered, live for the configuration.
        let size = unsafe { self.zone.as_ref() }.map_or(0, |z| z.shm.size);
        circuit_breaker_core::keyed::Table::capacity_for(size / 4)
    }

    /// The zone, once nginx has mapped and laid it out.
    #[inline]
    pub fn zone(&self) -> Option<&Zone> {
        if let Some(z) = self.zone_cache.get() {
            return Some(z);
        }
        // SAFETY: our own zone, registered by conf; mapped in the master after its init
        // and in every worker.
        let z = unsafe { Zone::from_shm(self.zone)? };
        Some(self.zone_cache.get_or_init(|| z))
    }

    /// The breaker-enabled upstream called `name`.
    pub fn upstream(&self, name: &str) -> Option<&SrvConf> {
        // SAFETY: upstream confs live as long as this configuration.
        self.by_name.get(name).map(|&s| unsafe { &*s })
    }
}

/// `upstream {}` level (nginx also creates one per `server {}`, unused there).
#[derive(Default)]
pub struct SrvConf {
    /// Set by `circuit_breaker`; the failure set is filled in by `setup`.
    pub breaker: Option<BreakerConfig>,
    pub failures: Option<FailureSet>,
    /// `circuit_breaker_probe` (or `probe_uri=` and companions): active probes while open.
    pub probe: Option<ProbeSpec>,
    /// `circuit_breaker_limit` (or `limit=adaptive`): the adaptive in-flight limit.
    pub limit: Option<LimitConfig>,
    /// The retry budget (`None` with `retry_budget=off`).
    pub retry: Option<RetryBudgetConfig>,
    /// `circuit_breaker_probe`, `circuit_breaker_limit` and `circuit_breaker_retry_budget`
    /// as given, in whatever order with `circuit_breaker`: `setup` moves them into `probe`,
    /// `limit` and `retry` once the http block is parsed.
    pub probe_directive: Option<ProbeSpec>,
    pub limit_directive: Option<LimitConfig>,
    pub retry_directive: Option<Option<RetryBudgetConfig>>,
    /// The deprecated `circuit_breaker` parameters that spelled them (one spelling only).
    pub legacy: Legacy,
    /// `circuit_breaker_eject`.
    pub eject: EjectSetting,
    /// The upstream's name and its hash, the first half of every breaker key.
    pub name: String,
    pub name_hash: u64,
    /// The balancer's `peer.init`, which ours wraps.
    pub original_init: ngx_http_upstream_init_peer_pt,
    /// The upstream block itself (its servers are what active probes reach).
    pub uscf: *mut ngx_http_upstream_srv_conf_t,
    /// The upstream conf of the location whose TLS settings active probes take; null: they
    /// speak plain HTTP (see `scheme::choose_probe_tls`).
    pub probe_tls: *mut ngx_http_upstream_conf_t,
    pub main: *const MainConf,
    /// Routes whose locations pass to this upstream, in configuration order.
    pub routes: Vec<String>,
    /// The servers, each with a breaker of its own, when ejection is on.
    pub pool: Option<Pool>,
    /// What this worker keeps of the zone for it: see [`UpstreamLocal`].
    pub local: UpstreamLocal,
    /// Its breaker may come to its probe within a class's presence of opening
    /// (`circuit_breaker_core::breaker::probe_within_presence`): the requests it admits note
    /// their class too (`crate::upstream::class::note_admitted`).
    pub presence_when_closed: bool,
}

impl SrvConf {
    /// Whether (this upstream, `route`) names a breaker requests can reach.
    pub fn knows_route(&self, mcf: &MainConf, route: &str) -> bool {
        route == DEFAULT_ROUTE
            || self.routes.iter().any(|r| r == route)
            || mcf.dynamic_routes.iter().any(|r| r == route)
    }

    /// The key of (this upstream, `route`).
    pub fn key<'a>(&'a self, route: &'a Route) -> Key<'a> {
        Key {
            hash: key_hash(self.name_hash, route.hash),
            upstream: self.name.as_bytes(),
            route: route.name.as_bytes(),
            kind: Kind::Route,
        }
    }

    /// The key hash of the upstream's own breaker.
    pub fn home_hash(&self) -> u64 {
        key_hash(self.name_hash, default_route().hash)
    }

    /// The key of the breaker of this upstream's server `server`.
    pub fn server_key<'a>(&'a self, server: &'a Server) -> Key<'a> {
        Key {
            hash: server.key_hash,
            upstream: self.name.as_bytes(),
            route: server.name.as_bytes(),
            kind: Kind::Server,
        }
    }
}

/// The servers of a breaker-enabled upstream (`circuit_breaker_eject`), over the http
/// balancers' round-robin peers.
pub type Pool = eject::Pool<nginx_sys::ngx_http_upstream_rr_peer_t>;
pub type PoolLocal = eject::PoolLocal<nginx_sys::ngx_http_upstream_rr_peer_t>;
pub use eject::Server;

/// A route, the second half of a breaker key.
#[derive(Clone, Debug)]
pub struct Route {
    pub name: String,
    pub hash: u64,
}

impl Route {
    pub fn new(name: &str) -> Route {
        Route {
            name: name.to_owned(),
            hash: hash_name(name.as_bytes()),
        }
    }
}

/// What the status location may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusMode {
    Off,
    ReadOnly,
    Control,
}

/// `http`, `server` and `location` level.
#[repr(C)]
pub struct LocConf {
    /// `circuit_breaker_header`, set by nginx's own `ngx_conf_set_flag_slot`.
    pub header: ngx_flag_t,
    pub route: Option<Route>,
    pub status: StatusMode,
    /// The content handler `circuit_breaker_status` installed, and where the directive
    /// stood, to refuse another content handler in the same location.
    pub status_handler: nginx_sys::ngx_http_handler_pt,
    pub status_at: (String, usize),
    /// The http block's conf (set when merging).
    pub main: *const MainConf,
    /// The upstream this location passes to, when fixed (`proxy_pass http://name`).
    pub upstream: *mut ngx_http_upstream_srv_conf_t,
    /// The key hash of (that upstream, this location's route), when fixed.
    pub key_hash: u64,
    /// The location caches upstream responses: a hit or a stale entry may answer while open.
    pub cached: bool,
    /// The fixed upstream's conf when it has a breaker and the location no cache: the
    /// PRECONTENT phase answers for such a location. Set when merging, so that the phase
    /// finds it in one read instead of five (`scripts/bench-instructions`, closed and
    /// open_503).
    pub precontent: *const SrvConf,
    /// An `error_page` or `post_action` may move the request on with a new module ctx after
    /// this location answered.
    pub redirects: bool,
    /// Where this location's breaker was last found (per worker: written after fork, in the
    /// worker's own copy of the configuration).
    pub hint: Cell<Handle>,
    /// What its `proxy_pass` speaks (inherited by an `if` block inside it, as the proxy
    /// module's own settings are).
    pub pass: Option<scheme::Pass>,
    /// `circuit_breaker_key`, if given here or above.
    pub keyed: Option<KeyedSetting>,
    /// `circuit_breaker_class`, if given here or above.
    pub class: Option<ClassSetting>,
    /// Whether this location's content handler makes an upstream with a cache, as this worker
    /// has seen: an open key's requests may then be answered from it.
    pub keyed_cache: Cell<Learned>,
    /// ... and whether that cache updates expired entries in the background
    /// (`proxy_cache_background_update`): a key's probe then goes through it with those off.
    pub keyed_background: Cell<bool>,
}

/// Whether a location's content handler makes an upstream with a cache (`crate::keyed`'s
/// stale answers): known from its own `*_pass`, or seen by a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Learned {
    #[default]
    Unknown,
    /// It makes an upstream whose conf has a cache.
    Caches,
    /// It makes an upstream without one.
    NoCache,
}

impl Default for LocConf {
    fn default() -> Self {
        LocConf {
            header: NGX_CONF_UNSET as ngx_flag_t,
            route: None,
            status: StatusMode::Off,
            status_handler: None,
            status_at: (String::new(), 0),
            main: null_mut(),
            upstream: null_mut(),
            key_hash: 0,
            cached: false,
            precontent: core::ptr::null(),
            redirects: false,
            hint: Cell::new(Handle::NONE),
            pass: None,
            keyed: None,
            class: None,
            keyed_cache: Cell::new(Learned::Unknown),
            keyed_background: Cell::new(false),
        }
    }
}

impl LocConf {
    /// Notes whether its content handler's upstream conf `ucf` has a cache, and whether that
    /// cache updates entries in the background.
    pub fn learn_cache(&self, ucf: &nginx_sys::ngx_http_upstream_conf_t) {
        self.keyed_background.set(setup::background(ucf));
        self.keyed_cache.set(if setup::cached(ucf) {
            Learned::Caches
        } else {
            Learned::NoCache
        });
    }

    /// Whether the status handler is still this location's content handler.
    pub fn owns_content(&self, clcf: &nginx_sys::ngx_http_core_loc_conf_t) -> bool {
        match (clcf.handler, self.status_handler) {
            (Some(a), Some(b)) => a as usize == b as usize,
            _ => false,
        }
    }
}

impl Merge for LocConf {
    fn merge(&mut self, prev: &LocConf) -> Result<(), MergeConfigError> {
        if self.header == NGX_CONF_UNSET as ngx_flag_t {
            self.header = if prev.header == NGX_CONF_UNSET as ngx_flag_t {
                0
            } else {
                prev.header
            };
        }
        if self.route.is_none() {
            self.route = prev.route.clone();
        }
        if self.pass.is_none() {
            self.pass = prev.pass;
        }
        if self.keyed.is_none() {
            self.keyed = prev.keyed;
        }
        if self.class.is_none() {
            self.class = prev.class;
        }
        Ok(())
    }
}

impl Merge for SrvConf {
    fn merge(&mut self, _prev: &SrvConf) -> Result<(), MergeConfigError> {
        Ok(())
    }
}

static DEFAULT: std::sync::OnceLock<Route> = std::sync::OnceLock::new();

/// The route of requests without `circuit_breaker_route`.
pub fn default_route() -> &'static Route {
    DEFAULT.get_or_init(|| Route::new(DEFAULT_ROUTE))
}

/// [`default_route`] once made (configuration makes it), with no call.
#[inline(always)]
pub fn default_route_made() -> Option<&'static Route> {
    DEFAULT.get()
}
