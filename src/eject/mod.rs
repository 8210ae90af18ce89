//! Ejecting a bad server from a good pool. Each server of a breaker-enabled upstream has a
//! breaker in the zone (closed: in the pool, open: ejected, half-open: probing); every
//! attempt sent to a server is recorded on it. A server's breaker that opens takes it out of
//! the balancer in every worker, by the same means `server … down` does: the peer's `down`
//! flag, which round robin, `least_conn`, `hash`, `ip_hash` and `random` all honour.
//!
//! - **Following the zone.** The upstream's own breaker's berth carries a stamp that moves on
//!   every ejection and return. Each request reads it without the lock ([`follow`]); when
//!   it moved, the worker reads the servers' states under the lock and marks its peers (its
//!   own copy without an upstream `zone`; the shared ones, under their lock, with one).
//! - **Only our marks.** An ejected peer's `down` is set to [`EJECTED`], not 1, and only a
//!   `down` of that value is cleared: a configured `down`, another module's (lua's
//!   `set_peer_down`) and nginx's own `max_fails` state (which is not `down` at all) are
//!   left alone.
//! - **Probes.** Without `probe_uri`, once an ejected server's cooldown ends, one request of
//!   the whole instance is sent to it ([`claim_probe`]): the wrapped `peer.get` answers with
//!   that server's address instead of asking the balancer. With `probe_uri` the servers'
//!   breakers have active probes (`eject::server_config`): no request is ever sent to an
//!   ejected server; the prober (`crate::probe`) sends its own probe to the server and
//!   reports it with [`record_probe`], which returns the server as [`record`] does.

use core::cell::Cell;

use circuit_breaker_core::eject;
use circuit_breaker_core::eject::outlier::Relative;
use circuit_breaker_shell::eject as peers;
pub use circuit_breaker_shell::eject::{
    add_success, address_of, assess, assess_due, claim_probe, control, count, downed, follow,
    moved, passes_over, probe_due, ramping, record_probe, release, server_count, server_of,
    servers, with_server, PeersLock, Pooled,
};
use nginx_sys::{
    ngx_conf_t, ngx_http_upstream_srv_conf_t, ngx_int_t, ngx_uint_t, NGX_ERROR,
    NGX_HTTP_UPSTREAM_BACKUP, NGX_LOG_EMERG, NGX_OK,
};
use ngx::http::{HttpModuleMainConf, HttpModuleServerConf, NgxHttpUpstreamModule};

use crate::conf::{default_route, EjectSetting, Module, Pool, PoolLocal, Server, SrvConf};
use circuit_breaker_shell::zone::{Handle, Key};

/// A breaker-enabled http upstream as a worker sees it.
pub type Upstream<'a> = circuit_breaker_shell::eject::Upstream<'a, SrvConf>;

/// `postconfiguration`, after the breakers are collected: gives each breaker-enabled
/// upstream whose balancer keeps round-robin peers its pool of servers, unless
/// `circuit_breaker_eject off` (or fewer than two servers). An explicit
/// `circuit_breaker_eject` with a balancer that keeps no such peers is an error.
///
/// # Safety
/// `cf` must be the configuration being parsed, inside the http block, with every
/// upstream's balancer initialised.
pub unsafe fn configure(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: `cf` is the configuration being parsed, inside the http block (this fn's contract),
    // so its http confs are set.
    let cfr = unsafe { &*cf };
    let Some(umcf) = NgxHttpUpstreamModule::main_conf(cfr) else {
        return NGX_OK as ngx_int_t;
    };
    if Module::main_conf(cfr).is_none() {
        return NGX_ERROR as ngx_int_t;
    }
    // SAFETY: the upstream module's array holds pointers to its srv confs.
    let upstreams: &[*mut ngx_http_upstream_srv_conf_t] = unsafe { umcf.upstreams.as_slice() };
    for &uscf in upstreams {
        // SAFETY: each entry is an upstream block's srv conf, allocated from the configuration's
        // pool and live for the cycle.
        let uscf = unsafe { &mut *uscf };
        let Some(scf) = Module::server_conf_mut(uscf) else {
            continue;
        };
        let Some(cfg) = scf.breaker else { continue };
        if scf.original_init.is_none() {
            continue;
        }
        let spec = match scf.eject {
            EjectSetting::Off => continue,
            EjectSetting::On(spec) => spec,
            EjectSetting::Unset => Default::default(),
        };
        // SAFETY: during configuration the upstream's peer data is its balancer's.
        let Some(list) = (unsafe { peers::configured(uscf) }) else {
            if scf.eject != EjectSetting::Unset {
                // SAFETY: an upstream block's file name is a NUL-terminated string.
                let file = unsafe { core::ffi::CStr::from_ptr(uscf.file_name.cast()) };
                ngx::ngx_log_error!(
                    NGX_LOG_EMERG,
                    cfr.log,
                    "\"circuit_breaker_eject\" needs a balancer that keeps nginx's round-robin peers \
                     (round robin, least_conn, hash, ip_hash, random) in upstream \"{}\" in {}:{}",
                    scf.name,
                    file.to_string_lossy(),
                    uscf.line
                );
                return NGX_ERROR as ngx_int_t;
            }
            continue;
        };
        if list.len() < 2 {
            continue;
        }
        let servers: Vec<Server> = list
            .into_iter()
            .map(|(name, backup)| Server::new(scf.name_hash, name, backup))
            .collect();
        // A balancer that takes no `backup` servers picks by a key (`hash`, `ip_hash`) or at
        // random: with a key a client may choose, a client could make its server the
        // pool's outlier. The relative rules stay off there unless asked for. Nor does a
        // returning server ramp: a key's server passed over would move the key.
        let keyed = uscf.flags & NGX_HTTP_UPSTREAM_BACKUP as ngx_uint_t == 0;
        let relative = if keyed && !spec.relative.explicit {
            Relative::OFF
        } else {
            spec.relative_rules()
        };
        let mut spec = spec;
        if keyed {
            if spec.ramp_ms.is_some_and(|ms| ms > 0) {
                // SAFETY: an upstream block's file name is a NUL-terminated string.
                let file = unsafe { core::ffi::CStr::from_ptr(uscf.file_name.cast()) };
                ngx::ngx_log_error!(
                    NGX_LOG_EMERG,
                    cfr.log,
                    "\"ramp\" of \"circuit_breaker_eject\" needs round robin or least_conn, \
                     not a balancer that picks by a key or at random, in upstream \"{}\" in {}:{}",
                    scf.name,
                    file.to_string_lossy(),
                    uscf.line
                );
                return NGX_ERROR as ngx_int_t;
            }
            spec.ramp_ms = Some(0);
        }
        scf.pool = Some(Pool {
            cfg: eject::server_config(&cfg, &spec),
            max_ejected: eject::max_ejected(servers.len(), spec.max_ejected),
            relative,
            servers,
            local: PoolLocal::default(),
        });
    }
    NGX_OK as ngx_int_t
}

impl Pooled for SrvConf {
    type Uscf = ngx_http_upstream_srv_conf_t;

    fn pool(&self) -> Option<&Pool> {
        self.pool.as_ref()
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn home(&self) -> &Cell<Handle> {
        &self.local.home
    }

    fn home_key(&self) -> Key<'_> {
        self.key(default_route())
    }
}
