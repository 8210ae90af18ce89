//! The stream module's configuration: the zone (`circuit_breaker_zone` in `stream {}`), and
//! each upstream's breaker (`circuit_breaker` in `stream { upstream {} }`), found again from
//! the upstream's own conf when a session asks.

use core::cell::{Cell, UnsafeCell};
use core::ffi::{c_char, c_void};
use core::ptr::{null_mut, NonNull};

use circuit_breaker_core::directive::{
    self, parse_stream_breaker_args, parse_stream_probe_args, EjectSetting, StreamParams,
    StreamProbe,
};
use circuit_breaker_core::session::Lanes;
use circuit_breaker_shell::conf::{add_zone, fail, once, words, NginxUnits, MIN_ZONE_SIZE};
use circuit_breaker_shell::eject::{Pool as ServerPool, Pooled};
use circuit_breaker_shell::ffi::{hash_name, key_hash};
use circuit_breaker_shell::net::Peer;
use circuit_breaker_shell::zone::{Handle, Key, Kind, Wanted, Zone, ZoneName, DEFAULT_ROUTE};
use nginx_sys::{
    ngx_command_t, ngx_conf_t, ngx_cycle_t, ngx_event_t, ngx_shm_zone_t, ngx_stream_conf_ctx_t,
    ngx_stream_session_t, ngx_stream_upstream_init_peer_pt, ngx_stream_upstream_rr_peer_t,
    ngx_stream_upstream_srv_conf_t,
};
use ngx::core::{Pool, NGX_CONF_ERROR, NGX_CONF_OK};

/// The zone made when stream breakers exist and no `circuit_breaker_zone` was given in
/// `stream {}`: apart from the http block's (`circuit_breaker`), which another module owns.
pub const DEFAULT_ZONE_NAME: &str = "circuit_breaker_stream";
pub const DEFAULT_ZONE_SIZE: usize = 1024 * 1024;

/// The module's main conf (`stream {}`).
pub struct MainConf {
    pub zone: *mut ngx_shm_zone_t,
    /// The zone's name; the shm zone's `data` points here.
    pub zone_name: ZoneName,
    /// The upstreams with a breaker, in configuration order.
    pub upstreams: Vec<*mut SrvConf>,
    /// The zone generation this configuration took over; older workers create no breakers.
    pub generation: u64,
    /// This worker's sessions not judged yet (made on first use, after the fork).
    pub sessions: UnsafeCell<Option<crate::waiting::Waiting>>,
    /// This worker's one timer for their first-byte bounds (`session::arm`).
    pub sweeper: UnsafeCell<ngx_event_t>,
    /// Where sessions wait for a first byte: each upstream's lane, and each pool server's.
    pub lanes: Lanes,
}

impl MainConf {
    /// The zone, once laid out in this process.
    #[inline]
    pub fn zone(&self) -> Option<Zone> {
        // SAFETY: the zone this configuration registered, mapped in the processes that run
        // sessions and its init.
        unsafe { Zone::from_shm(self.zone) }
    }
}

impl Default for MainConf {
    fn default() -> Self {
        MainConf {
            zone: null_mut(),
            zone_name: ZoneName::default(),
            upstreams: Vec::new(),
            generation: 0,
            sessions: UnsafeCell::new(None),
            // SAFETY: an all-zero event is nginx's own starting state (ngx_pcalloc).
            sweeper: UnsafeCell::new(unsafe { core::mem::zeroed() }),
            lanes: Lanes::default(),
        }
    }
}

/// The module's conf of a `server {}` or an `upstream {}` block; only an upstream's is ever
/// set.
#[derive(Default)]
pub struct SrvConf {
    pub params: Option<StreamParams>,
    /// The upstream's index among the configuration's stream breakers.
    pub index: u16,
    /// The upstream's name, and the hash of its breaker's key.
    pub name: String,
    pub key_hash: u64,
    /// The balancer's own `peer.init`, which ours wraps.
    pub original_init: ngx_stream_upstream_init_peer_pt,
    /// Where this worker last found the breaker in the zone (a hint, checked on every use).
    pub handle: Cell<Handle>,
    /// `circuit_breaker_probe`: active probes while open.
    pub probe: Option<StreamProbe>,
    /// The servers its probes go to, in turn: the upstream's own, not `down`, no backups.
    pub servers: Vec<Peer>,
    /// `circuit_breaker_eject`, and the pool of servers it made.
    pub eject: EjectSetting,
    pub pool: Option<ServerPool<ngx_stream_upstream_rr_peer_t>>,
    /// Where the prober reaches each server of the pool, in the pool's order.
    pub pool_peers: Vec<Peer>,
    /// nginx's conf of the upstream block.
    pub uscf: Option<NonNull<ngx_stream_upstream_srv_conf_t>>,
}

impl SrvConf {
    /// The key of the upstream's breaker in the zone.
    pub fn key(&self) -> Key<'_> {
        Key {
            hash: self.key_hash,
            upstream: self.name.as_bytes(),
            route: DEFAULT_ROUTE.as_bytes(),
            kind: Kind::Route,
        }
    }
}

impl Pooled for SrvConf {
    type Uscf = ngx_stream_upstream_srv_conf_t;

    fn pool(&self) -> Option<&ServerPool<ngx_stream_upstream_rr_peer_t>> {
        self.pool.as_ref()
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn home(&self) -> &Cell<Handle> {
        &self.handle
    }

    fn home_key(&self) -> Key<'_> {
        self.key()
    }
}

extern "C" {
    /// The module nginx loads, defined where the module is registered.
    #[allow(non_upper_case_globals)]
    static mut ngx_stream_circuit_breaker_module: nginx_sys::ngx_module_t;
}

/// This module's `ngx_module_t`.
pub fn module_ptr() -> *const nginx_sys::ngx_module_t {
    core::ptr::addr_of!(ngx_stream_circuit_breaker_module)
}

/// `ctx_index` of this module, for the confs nginx keeps per module.
pub fn ctx_index() -> usize {
    // SAFETY: nginx sets the index once, while loading the module, before any conf exists.
    unsafe { (*core::ptr::addr_of!(ngx_stream_circuit_breaker_module)).ctx_index }
}

/// The breaker conf of an upstream, if the module has one there.
///
/// # Safety
/// `uscf` must be a live stream upstream conf of the configuration this module is part of.
pub unsafe fn of_upstream<'a>(uscf: *const ngx_stream_upstream_srv_conf_t) -> Option<&'a SrvConf> {
    // SAFETY: an upstream conf's `srv_conf` holds every stream module's srv conf.
    unsafe {
        let confs = (*uscf).srv_conf;
        if confs.is_null() {
            return None;
        }
        (*confs.add(ctx_index())).cast::<SrvConf>().as_ref()
    }
}

/// The main conf a session's configuration holds.
///
/// # Safety
/// `s` must be a live session.
pub unsafe fn of_session<'a>(s: *const ngx_stream_session_t) -> Option<&'a MainConf> {
    // SAFETY: a session's `main_conf` holds every stream module's main conf.
    unsafe {
        (*(*s).main_conf.add(ctx_index()))
            .cast::<MainConf>()
            .as_ref()
    }
}

/// The module's main conf in `cycle`, if it has a stream block (being read, or read).
///
/// # Safety
/// `cycle` must be a cycle being configured or running; the conf lives as long as it.
pub unsafe fn of_cycle<'a>(cycle: *mut ngx_cycle_t) -> Option<&'a mut MainConf> {
    // SAFETY: the cycle's `conf_ctx` holds the stream block's context at the stream module's
    // index (null without a stream block), whose `main_conf` holds every stream module's.
    unsafe {
        let ctx = (*(*cycle)
            .conf_ctx
            .add((*core::ptr::addr_of!(nginx_sys::ngx_stream_module)).index))
        .cast::<ngx_stream_conf_ctx_t>();
        let ctx = ctx.as_ref()?;
        (*ctx.main_conf.add(ctx_index()))
            .cast::<MainConf>()
            .as_mut()
    }
}

/// `create_main_conf` and `create_srv_conf`: a default conf in the configuration's pool,
/// dropped with it.
pub unsafe extern "C" fn create_main_conf(cf: *mut ngx_conf_t) -> *mut c_void {
    // SAFETY: nginx passes the configuration being parsed; its pool outlives the conf.
    circuit_breaker_shell::ffi::guard(null_mut(), || unsafe {
        Pool::from_ngx_pool((*cf).pool)
            .allocate(MainConf::default())
            .cast()
    })
}

/// See [`create_main_conf`].
pub unsafe extern "C" fn create_srv_conf(cf: *mut ngx_conf_t) -> *mut c_void {
    // SAFETY: as for `create_main_conf`.
    circuit_breaker_shell::ffi::guard(null_mut(), || unsafe {
        Pool::from_ngx_pool((*cf).pool)
            .allocate(SrvConf::default())
            .cast()
    })
}

circuit_breaker_shell::directive_handlers!(
    set_zone => zone,
    set_breaker => breaker,
    set_probe => probe,
    set_eject => eject
);

/// `circuit_breaker_zone name:size` in `stream {}`.
unsafe fn zone(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes our main conf (NGX_STREAM_MAIN_CONF_OFFSET) at this directive.
    let (mcf, raw) = match unsafe { once::<MainConf>(cf, conf, |c| !c.zone.is_null()) } {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    let text = match words(raw) {
        Ok(mut w) => w.next().unwrap_or_default(),
        Err(e) => return fail(cf, e),
    };
    let (name, size) = match directive::parse_zone(text, MIN_ZONE_SIZE, &NginxUnits) {
        Ok(v) => v,
        Err(e) => return fail(cf, e),
    };
    // SAFETY: `cf` is being parsed; the main conf lives as long as the configuration, the
    // module static as long as the process.
    match unsafe { register_zone(cf, mcf, name, size as usize) } {
        Some(()) => NGX_CONF_OK,
        None => NGX_CONF_ERROR,
    }
}

/// Registers the zone `mcf` names.
///
/// # Safety
/// `cf` must be the configuration being parsed and `mcf` its main conf.
pub unsafe fn register_zone(
    cf: *mut ngx_conf_t,
    mcf: &mut MainConf,
    name: &str,
    size: usize,
) -> Option<()> {
    let tag = core::ptr::addr_of_mut!(ngx_stream_circuit_breaker_module).cast();
    // SAFETY: this fn's contract, and the module static outlives every cycle.
    mcf.zone = unsafe { add_zone(cf, &mut mcf.zone_name, name, size, tag) }?;
    Some(())
}

/// `circuit_breaker [parameters]` in a stream `upstream {}`.
unsafe fn breaker(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes our srv conf of the upstream block (NGX_STREAM_SRV_CONF_OFFSET).
    let (scf, raw) = match unsafe { once::<SrvConf>(cf, conf, |c| c.params.is_some()) } {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    let parsed = words(raw).and_then(|w| parse_stream_breaker_args(w, &NginxUnits));
    match parsed {
        Ok(p) => {
            scf.params = Some(p);
            NGX_CONF_OK
        }
        Err(e) => fail(cf, e),
    }
}

/// `circuit_breaker_probe [send=] [expect=] [timeout=]` in a stream `upstream {}`.
unsafe fn probe(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes our srv conf of the upstream block (NGX_STREAM_SRV_CONF_OFFSET).
    let (scf, raw) = match unsafe { once::<SrvConf>(cf, conf, |c| c.probe.is_some()) } {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    match words(raw).and_then(|w| parse_stream_probe_args(w, &NginxUnits)) {
        Ok(p) => {
            scf.probe = Some(p);
            NGX_CONF_OK
        }
        Err(e) => fail(cf, e),
    }
}

/// `circuit_breaker_eject [param=value ...] | off` in a stream `upstream {}`.
unsafe fn eject(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes our srv conf of the upstream block (NGX_STREAM_SRV_CONF_OFFSET).
    let (scf, raw) = match unsafe { once::<SrvConf>(cf, conf, |c| c.eject != EjectSetting::Unset) }
    {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    // A session's time to the origin's first byte is the client's to shape (it sends first
    // in most protocols): no pool is judged by it, nor by its failures against the others.
    let parsed = words(raw)
        .and_then(|w| directive::parse_eject_args(w, &NginxUnits))
        .and_then(|spec| match spec {
            Some(s) if s.relative.explicit && s.relative_rules().is_on() => {
                Err(directive::ConfError::Conflict(
                    "\"relative\" and \"latency_factor\" of \"circuit_breaker_eject\" are not \
                 supported in stream: a session's time to the first byte is the client's to shape"
                        .to_owned(),
                ))
            }
            Some(s) if s.ramp_ms.is_some_and(|ms| ms > 0) => Err(directive::ConfError::Conflict(
                "\"ramp\" of \"circuit_breaker_eject\" is not supported in stream: a returning \
                 server takes its share of sessions at once"
                    .to_owned(),
            )),
            other => Ok(other),
        });
    match parsed {
        Ok(spec) => {
            scf.eject = spec.map_or(EjectSetting::Off, EjectSetting::On);
            NGX_CONF_OK
        }
        Err(e) => fail(cf, e),
    }
}

/// The breakers this configuration knows: each upstream's own, and each pool server's.
pub fn wanted(mcf: &MainConf) -> Vec<Wanted<'_>> {
    let mut out = Vec::new();
    for &s in &mcf.upstreams {
        // SAFETY: upstream confs live as long as the configuration.
        let s = unsafe { &*s };
        let Some(params) = s.params else { continue };
        out.push(Wanted {
            key: s.key(),
            cfg: params.cfg,
            eager: true,
            retry: None,
            limit: None,
        });
        for server in s.pool.iter().flat_map(|p| &p.servers) {
            out.push(Wanted {
                key: s.server_key(server),
                cfg: s.pool.as_ref().map_or(params.cfg, |p| p.cfg),
                eager: true,
                retry: None,
                limit: None,
            });
        }
    }
    out
}

/// Names an upstream's breaker once the stream block is parsed.
pub fn name(scf: &mut SrvConf, host: &[u8]) {
    scf.name = String::from_utf8_lossy(host).into_owned();
    scf.key_hash = key_hash(
        hash_name(scf.name.as_bytes()),
        hash_name(DEFAULT_ROUTE.as_bytes()),
    );
}
