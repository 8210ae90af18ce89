//! Ejecting a bad server from a stream pool (`circuit_breaker_eject`), with the shell's
//! ejection (`circuit_breaker_shell::eject`, the http module's too) over the stream balancers'
//! round-robin peers: the pool configuration makes, and a session's outcome on its server.
//!
//! An ejected server returns through the module's own probes of it (`circuit_breaker_probe`,
//! `crate::probe`): no client's session is ever sent to an ejected server. A stream pool
//! ejects only with active probes, then by default.

use core::ptr::NonNull;

use circuit_breaker_core::breaker::{Attempt, Breaker, Classified, Ticket};
use circuit_breaker_core::directive::{EjectSetting, EjectSpec};
use circuit_breaker_core::eject::outlier::Relative;
use circuit_breaker_core::eject::{self as core_eject, max_ejected, server_config, Pool as Count};
use circuit_breaker_core::retry_budget::RetryBudget;
use circuit_breaker_core::settle::{self, Ended, Ledger, OnServer};
use circuit_breaker_shell::clock::{mono_ms, rnd};
use circuit_breaker_shell::eject::{self, Pool, Server, Upstream};
use circuit_breaker_shell::ffi::hash_name;
use circuit_breaker_shell::net::Peer;
use circuit_breaker_shell::zone::{Locked, Zone};
use nginx_sys::{
    ngx_log_t, ngx_str_t, ngx_stream_upstream_server_t, ngx_stream_upstream_srv_conf_t,
};

use crate::conf::{MainConf, SrvConf};

/// Gives `scf` its pool of servers, if it ejects; the error says why the configuration is
/// refused.
///
/// # Safety
/// During configuration, `uscf` the upstream whose module conf is `scf`, its balancer set.
pub unsafe fn configure(
    scf: &mut SrvConf,
    uscf: &mut ngx_stream_upstream_srv_conf_t,
) -> Result<(), &'static str> {
    scf.uscf = NonNull::new(uscf);
    let Some(params) = scf.params else {
        return Ok(());
    };
    let (spec, explicit) = match scf.eject {
        EjectSetting::Off => return Ok(()),
        EjectSetting::On(_) if scf.probe.is_none() => {
            return Err("\"circuit_breaker_eject\" requires \"circuit_breaker_probe\" in upstream")
        }
        EjectSetting::On(spec) => (spec, true),
        EjectSetting::Unset if scf.probe.is_none() => return Ok(()),
        EjectSetting::Unset => (EjectSpec::default(), false),
    };
    // SAFETY: during configuration, the upstream's balancer initialised (this fn's contract).
    let Some(list) = (unsafe { eject::configured(&*uscf) }) else {
        if explicit {
            return Err(
                "\"circuit_breaker_eject\" needs a balancer that keeps nginx's \
                        round-robin peers (round robin, least_conn, hash, random) in upstream",
            );
        }
        return Ok(());
    };
    // Each server with the address its probes go to: one the prober cannot reach (a name not
    // resolved at configuration time) stays out of the pool, never ejected.
    // SAFETY: during configuration (this fn's contract).
    let addresses = unsafe { configured_addresses(uscf, |_| true) };
    let (servers, peers): (Vec<Server>, Vec<Peer>) = list
        .into_iter()
        .filter_map(|(name, backup)| {
            let (_, peer) = addresses.iter().find(|(n, _)| *n == name)?;
            Some((Server::new(0, name, backup), peer.clone()))
        })
        .unzip();
    if servers.len() < 2 {
        return Ok(());
    }
    let upstream = hash_name(scf.name.as_bytes());
    let servers: Vec<Server> = servers
        .into_iter()
        .map(|s| Server::new(upstream, s.name, s.backup))
        .collect();
    scf.pool_peers = peers;
    // No session is passed over for a returning server's ramp: the stream module leaves the
    // balancer's picks alone (and the directive refuses `ramp=`).
    let spec = EjectSpec {
        ramp_ms: Some(0),
        ..spec
    };
    scf.pool = Some(Pool {
        cfg: server_config(&params.cfg, &spec),
        max_ejected: max_ejected(servers.len(), spec.max_ejected),
        relative: Relative::OFF,
        servers,
        local: Default::default(),
    });
    Ok(())
}

/// The addresses of the upstream's `server` lines that `keep` keeps, each by its name
/// (`10.0.0.7:6379`): its probes' and its pool's.
///
/// # Safety
/// During configuration, `uscf` a stream upstream of it.
pub unsafe fn configured_addresses(
    uscf: &ngx_stream_upstream_srv_conf_t,
    keep: impl Fn(&ngx_stream_upstream_server_t) -> bool,
) -> Vec<(String, Peer)> {
    // SAFETY: the upstream's servers, an array of `ngx_stream_upstream_server_t` (null when it
    // has none), each with `naddrs` addresses read at configuration time.
    unsafe {
        let Some(servers) = uscf.servers.as_ref() else {
            return Vec::new();
        };
        let servers: &[ngx_stream_upstream_server_t] = servers.as_slice();
        servers
            .iter()
            .filter(|s| !s.addrs.is_null() && keep(s))
            .flat_map(|s| core::slice::from_raw_parts(s.addrs, s.naddrs))
            .filter_map(|a| {
                let name = String::from_utf8_lossy(a.name.as_bytes()).into_owned();
                Peer::from_addr(a).map(|p| (name, p))
            })
            .collect()
    }
}

/// `scf`'s upstream as a worker follows its pool.
pub fn upstream<'a>(zone: &'a Zone, scf: &'a SrvConf) -> Option<Upstream<'a, SrvConf>> {
    scf.pool.as_ref()?;
    let uscf = scf.uscf?;
    // SAFETY: the upstream conf `scf` was made for, live as long as the configuration, in a
    // worker; its balancer keeps round-robin peers (it has a pool).
    Some(unsafe { Upstream::new(zone, scf, &*uscf.as_ptr()) })
}

/// The server of `scf`'s pool whose peer is named `name` (the balancer's `pc->name`).
///
/// # Safety
/// `name` must be null or the name of the peer the balancer chose.
pub unsafe fn server_of(scf: &SrvConf, name: *const ngx_str_t) -> Option<u16> {
    // SAFETY: as this fn's contract.
    scf.pool
        .as_ref()
        .and_then(|p| unsafe { eject::server_of(p, name) })
}

/// A session's reach into the locked zone: its upstream's breaker and pool.
struct SessionLedger<'l, 'z, 's> {
    locked: &'l mut Locked<'z>,
    up: Upstream<'s, SrvConf>,
    now: u64,
}

impl Ledger for SessionLedger<'_, '_, '_> {
    fn own<R>(&mut self, ticket: Ticket, f: impl FnOnce(&mut Breaker<'_>) -> R) -> Option<R> {
        let scf = self.up.scf;
        let mut b = match ticket {
            Ticket::Probe(_) => self.locked.get_probe(scf.handle.get(), &scf.key(), ticket),
            Ticket::Normal => self.locked.get_or_find(scf.handle.get(), &scf.key()),
        }?;
        scf.handle.set(b.handle());
        Some(f(&mut b))
    }

    fn server<R>(&mut self, index: u16, f: impl FnOnce(&mut Breaker<'_>) -> R) -> Option<R> {
        eject::with_server(self.locked, self.up.scf, index, f)
    }

    fn servers(&self) -> u16 {
        eject::server_count(self.up.scf)
    }

    fn pool(&mut self) -> Count {
        eject::count(self.locked, self.up, self.now).unwrap_or_default()
    }

    fn budget<R>(
        &mut self,
        _f: impl FnOnce(&mut RetryBudget, Option<(u64, u32)>) -> R,
    ) -> Option<R> {
        None
    }
}

/// Settles a session's outcome `c` on its server `server` of `up`'s pool and, when
/// `on_upstream`, on its upstream's breaker, as an http attempt is: a failure the server
/// explains (ejected, or ejectable) stays out of the upstream's window. Logs the moves and the
/// transition, and makes this worker's balancer follow.
#[allow(clippy::too_many_arguments)]
pub fn settle(
    up: Upstream<'_, SrvConf>,
    server: u16,
    ticket: Ticket,
    c: &Classified,
    recorded_on_server: bool,
    on_upstream: bool,
    now: u64,
    log: *mut ngx_log_t,
) {
    let scf = up.scf;
    let Some(params) = scf.params else { return };
    let mut locked = up.zone.lock();
    let plan = {
        let mut ledger = SessionLedger {
            locked: &mut locked,
            up,
            now,
        };
        if !on_upstream {
            // The server alone: its upstream answered others meanwhile.
            let mut count = ledger.pool();
            let m = ledger.server(server, |b| {
                core_eject::record_classified(b, &mut count, now, rnd(), Ticket::Normal, c).1
            });
            m.flatten()
                .map(|m| vec![(server, m)])
                .map(|moves| (moves, None))
        } else {
            let end = Ended {
                attempt: c,
                upstream: &params.cfg,
                name: &scf.name,
                now_ms: now,
                ticket,
                server: Some(OnServer {
                    index: server,
                    ticket: Ticket::Normal,
                    recorded: recorded_on_server,
                }),
                retry: false,
                dry_run: params.cfg.dry_run,
                recorded: false,
                budget: false,
                first_counted: false,
                class: None,
            };
            let plan = settle::settle(&mut ledger, &end, &mut || rnd());
            Some((plan.moves, plan.recorded.and_then(|r| r.transition)))
        }
    };
    let Some((moves, transition)) = plan else {
        return;
    };
    eject::moved(&mut locked, up, &moves, now, log);
    drop(locked);
    if let Some(t) = &transition {
        circuit_breaker_shell::log::transition(log, &format!("\"{}\"", scf.name), t);
    }
}

/// A failure of server `i` of `scf`'s pool alone (a try nginx moved on from).
pub fn failed(mcf: &MainConf, scf: &SrvConf, i: u16, attempt: &Attempt, log: *mut ngx_log_t) {
    let Some(params) = scf.params else { return };
    let Some(zone) = mcf.zone() else {
        return;
    };
    let Some(up) = upstream(&zone, scf) else {
        return;
    };
    let c = Classified::of(*attempt, &params.cfg);
    settle(up, i, Ticket::Normal, &c, false, false, mono_ms(), log);
}
