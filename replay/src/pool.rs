//! The replay of a pool's servers (`circuit_breaker_eject`): each server of an upstream the
//! configuration (`nginx -T`) gives a pool has a breaker of its own, fed every attempt the
//! log's `$upstream_addr` lists sent to it, with the module's own rules — the absolute rates
//! on each attempt, the relative ones ([`outlier`]) once a second, the cap, the doubling —
//! and the transitions are written in the module's words:
//!
//! ```text
//! circuit breaker "api" server 10.0.0.3:8080 ejected: latency p90 412ms is 5.2x the pool's 79ms, back in 10s
//! ```
//!
//! What the log cannot say is taken as the live instance did it: an attempt to a server the
//! replay has out is the probe live sent it once its time was over (a user request; with
//! `circuit_breaker_probe` the module's own probes are not in the log, so a server seen
//! serving again is taken as returned). Each attempt is recorded at its request's end, the
//! only instant the log has. The configuration as given, no sweep.

use std::collections::HashMap;

use circuit_breaker_core::breaker::{Admission, Attempt, BreakerConfig, OwnedBreaker, Ticket};
use circuit_breaker_core::directive::EjectSpec;
use circuit_breaker_core::eject::outlier::{self, Relative, Sample};
use circuit_breaker_core::eject::{self, Move, Pool};
use circuit_breaker_core::snapshot::State;

use crate::conf::{PoolSpec, Specs};
use crate::line::Line;

/// Servers a pool learns from the log beyond its configuration (names nginx resolved): at
/// most this many, so that a log cannot grow it.
const MAX_LEARNED: usize = 64;

/// How often the relative rules judge a pool, as the module does: in each second of its
/// clock, on the first attempt to end in it.
const ASSESS_MS: u64 = 1000;

/// One server of a replayed pool.
struct Server {
    address: String,
    backup: bool,
    ob: OwnedBreaker,
}

/// One upstream's pool.
struct PoolRun {
    name: String,
    cfg: BreakerConfig,
    rules: Relative,
    configured: usize,
    /// The cap's share (`max_ejected`), and whether resolved names add servers to count.
    share: u32,
    named: bool,
    servers: Vec<Server>,
    count: Pool,
    next_assess: u64,
    rng: u64,
}

/// A server's move, as the module logs it, with the line of the request that made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ejection {
    /// 1-based line number in its file.
    pub line: u64,
    /// When, on the replay's clock.
    pub at_ms: u64,
    pub upstream: String,
    pub server: String,
    /// `ejected` or `returned`.
    pub verb: &'static str,
    /// Why, with when it may return (`back in 10s`).
    pub why: String,
}

impl Ejection {
    /// `circuit breaker "api" server 10.0.0.3:8080 ejected: …`, the module's own words.
    pub fn message(&self) -> String {
        format!(
            "circuit breaker \"{}\" server {} {}: {}",
            self.upstream, self.server, self.verb, self.why
        )
    }

    fn of(line: u64, at_ms: u64, upstream: &str, server: &str, m: &Move) -> Ejection {
        let (verb, why) = m.words();
        Ejection {
            line,
            at_ms,
            upstream: upstream.to_owned(),
            server: server.to_owned(),
            verb,
            why,
        }
    }
}

/// Every pool of the configuration.
#[derive(Default)]
pub struct Pools {
    pools: HashMap<String, PoolRun>,
    /// Every move, in order.
    pub moves: Vec<Ejection>,
    /// Attempts recorded on a server's breaker.
    pub attempts: u64,
}

impl Pools {
    /// The pools `specs` has (from `--config`), each with its upstream's breaker parameters.
    pub fn new(specs: &Specs, seed: u64) -> Result<Pools, String> {
        let mut pools = HashMap::new();
        for (name, p) in &specs.pools {
            let Some(spec) = specs.find(name, "default") else {
                continue;
            };
            let cfg = spec.config(&[])?;
            pools.insert(name.clone(), PoolRun::new(name, &cfg, p, seed));
        }
        Ok(Pools {
            pools,
            ..Pools::default()
        })
    }

    /// Whether any upstream has a pool.
    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }

    /// Feeds the attempts of line `line` (begun at `start_ms` and ended at `end_ms` on the
    /// replay's clock); returns the moves it made.
    pub fn feed(&mut self, l: &Line<'_>, line: u64, (start_ms, end_ms): (u64, u64)) -> &[Ejection] {
        let before = self.moves.len();
        if l.session.is_none() {
            if let Some(p) = self.pools.get_mut(l.upstream) {
                let mut any = false;
                for (addr, a) in l.attempts() {
                    self.attempts += 1;
                    any = true;
                    p.attempt(addr, &a, (start_ms, end_ms), line, &mut self.moves);
                }
                // As the module: an attempt's end on a server judges the pool, when due.
                if any {
                    p.assess(end_ms, line, &mut self.moves);
                }
            }
        }
        &self.moves[before..]
    }
}

impl PoolRun {
    fn new(name: &str, upstream: &BreakerConfig, p: &PoolSpec, seed: u64) -> PoolRun {
        // A returning server's ramp decides where requests go, which the log already says.
        let spec = EjectSpec {
            ramp_ms: Some(0),
            ..p.eject
        };
        let cfg = eject::server_config(upstream, &spec);
        let rules = if p.keyed && !p.eject.relative.explicit {
            Relative::OFF
        } else {
            p.eject.relative_rules()
        };
        let mut run = PoolRun {
            name: name.to_owned(),
            cfg,
            rules,
            configured: p.servers.len(),
            share: p.eject.max_ejected,
            named: p.named > 0,
            servers: Vec::new(),
            count: Pool {
                out: 0,
                max: eject::max_ejected(p.servers.len(), p.eject.max_ejected),
            },
            next_assess: 0,
            rng: seed | 1,
        };
        for (address, backup) in &p.servers {
            run.add(address, *backup, 0);
        }
        run
    }

    fn add(&mut self, address: &str, backup: bool, now: u64) -> usize {
        self.servers.push(Server {
            address: address.to_owned(),
            backup,
            ob: OwnedBreaker::new(self.cfg, now),
        });
        self.servers.len() - 1
    }

    fn rnd(&mut self) -> u32 {
        crate::draws::splitmix(&mut self.rng)
    }

    fn server(&mut self, addr: &str, now: u64) -> Option<usize> {
        if let Some(i) = self.servers.iter().position(|s| s.address == addr) {
            return Some(i);
        }
        if self.servers.len() >= self.configured + MAX_LEARNED {
            return None;
        }
        // A name the configuration gave, resolved by nginx: the address joins the pool,
        // and counts towards the cap as the module's resolved peers do.
        let i = self.add(addr, false, now);
        if self.named {
            self.count.max = eject::max_ejected(self.servers.len(), self.share);
        }
        Some(i)
    }

    /// An attempt of a request that began at `started` and ended at `now`.
    fn attempt(
        &mut self,
        addr: &str,
        a: &Attempt,
        (started, now): (u64, u64),
        line: u64,
        out: &mut Vec<Ejection>,
    ) {
        let Some(i) = self.server(addr, now) else {
            return;
        };
        let rnd = self.rnd();
        let (cfg, mut count) = (self.cfg, self.count);
        let s = &mut self.servers[i];
        let mut b = s.ob.breaker();
        let m = if !eject::is_out(b.state()) {
            eject::record(&mut b, &mut count, now, rnd, Ticket::Normal, a).1
        } else if cfg.active {
            // Its probes are not in the log. A request that began after the first probe was
            // due was sent to it once live had returned it; one begun earlier was in flight
            // when it went.
            let first_probe = b
                .since_ms()
                .saturating_add(u64::from(cfg.probe_interval_ms));
            if started < first_probe {
                None
            } else {
                let t = b.close_as_probed(now, "seen serving in the log".to_owned());
                let m = t.map(Move::Returned);
                if m.is_some() {
                    count.out = count.out.saturating_sub(1);
                }
                m
            }
        } else {
            let ticket = match b.admit(now, rnd, 1, &|_| true, true).admission {
                Admission::Probe(t) => t,
                _ => Ticket::Normal,
            };
            eject::record(&mut b, &mut count, now, rnd, ticket, a).1
        };
        self.count = count;
        if let Some(m) = m {
            out.push(Ejection::of(line, now, &self.name, &s.address, &m));
        }
    }

    fn assess(&mut self, now: u64, line: u64, out: &mut Vec<Ejection>) {
        if !self.rules.is_on() || now < self.next_assess {
            return;
        }
        // As the module: on the first attempt to end in each second of its clock.
        self.next_assess = (now / ASSESS_MS)
            .saturating_add(1)
            .saturating_mul(ASSESS_MS);
        let samples: Vec<Sample> = self
            .servers
            .iter_mut()
            .map(|s| {
                let mut b = s.ob.breaker();
                let eligible = !s.backup && b.state() == State::Closed && b.forced().is_none();
                let (requests, failures, latency) = b.sample(now);
                Sample::of(eligible, requests, failures, &latency)
            })
            .collect();
        let factor = self.rules.latency_factor;
        if let Some(pool_ms) = outlier::pool_latency(&samples, &self.rules) {
            let limit = outlier::limit_of(pool_ms, factor);
            for s in &mut self.servers {
                if eject::is_out(s.ob.hdr.state()) {
                    s.ob.breaker().set_outlier_limit(limit);
                }
            }
        }
        for (i, o) in outlier::assess(&samples, &self.rules) {
            if !self.count.may_eject() {
                break;
            }
            let rnd = self.rnd();
            let s = &mut self.servers[i];
            let m =
                eject::eject_outlier(&mut s.ob.breaker(), &mut self.count, now, rnd, &o, factor);
            if let Some(m) = m {
                out.push(Ejection::of(line, now, &self.name, &s.address, &m));
            }
        }
    }
}
