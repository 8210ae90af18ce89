//! The exchange worker: one worker of the instance keeps the fleet's opinion store on its
//! heap and, every quarter of the interval, in the background on its event loop:
//!
//! 1. reads every breaker from the zone into the store (under the lock, in batches);
//! 2. when a whole interval has passed since its last pull, or sooner while a local breaker
//!    fails without having opened yet (`FleetStore::hurry`), pulls `?format=fleet` from
//!    `fanout` peers at once, each within half the interval and 1 MiB, and merges what they
//!    say; a peer that is slow, down or lying only moves its counters;
//! 3. publishes its own message, the fleet's JSON object and Prometheus families into the
//!    fleet zone;
//! 4. writes each breaker's verdict beside it (under the lock): the suspicion deadline
//!    (`Breaker::suspect`), from when this instance may probe (the slot's fleet record, read
//!    by the locked admission path), and an early end of the cooldown once when peers report
//!    the upstream recovered (`Breaker::hasten`).
//!
//! No request ever waits for any of this: requests read the breaker and its slot as always.

use core::cell::RefCell;
use core::future::{poll_fn, Future};
use core::pin::Pin;
use core::task::Poll;
use core::time::Duration;
use std::rc::Rc;

use circuit_breaker_core::fleet::status::{self as fleet_status, Clocks};
use circuit_breaker_core::fleet::{wire, FleetSpec, FleetStore, LocalView};
use nginx_sys::NGX_LOG_INFO;
use ngx::log::ngx_cycle_log;

use super::shared::FleetZone;
use crate::clock::{mono_ms, rnd, wall_ms};
use crate::net::{self, Options, Peer, Request};
use crate::zone::{Key, Zone};

/// Breakers read or written per lock hold, as the status walk does.
const BATCH: usize = 256;

/// A breaker of the store, as the zone names it.
pub struct Tracked {
    pub hash: u64,
    pub upstream: String,
    pub route: String,
    /// It probes actively (needs no traffic to probe).
    pub active: bool,
    /// Peers reported recovery at the last round (the cooldown is cut short once per
    /// report, not at every round).
    pub recovered: bool,
}

/// Everything the exchange worker holds.
pub struct Exchange {
    pub store: FleetStore,
    pub spec: FleetSpec,
    /// By store peer index (the spec's peers, in order).
    pub peers: Vec<Peer>,
    /// By store breaker index.
    pub breakers: Vec<Tracked>,
    pub zone: Zone,
    pub shared: FleetZone,
    pub zone_name: String,
    last_pull: Option<u64>,
}

impl Exchange {
    pub fn new(
        store: FleetStore,
        spec: FleetSpec,
        breakers: Vec<Tracked>,
        zone: Zone,
        shared: FleetZone,
        zone_name: String,
    ) -> Exchange {
        let peers = spec.peers.iter().map(|&a| Peer::from(a)).collect();
        Exchange {
            store,
            spec,
            peers,
            breakers,
            zone,
            shared,
            zone_name,
            last_pull: None,
        }
    }

    /// The time between two rounds.
    pub fn tick(&self) -> Duration {
        Duration::from_millis((self.spec.interval_ms / 4).max(25))
    }

    fn key<'a>(t: &'a Tracked) -> Key<'a> {
        Key {
            hash: t.hash,
            upstream: t.upstream.as_bytes(),
            route: t.route.as_bytes(),
        }
    }

    /// Step 1: every breaker's state, as this round sees it.
    fn read_local(&mut self, now: u64) {
        for (batch, chunk) in self.breakers.chunks(BATCH).enumerate() {
            let mut views = Vec::with_capacity(chunk.len());
            {
                let mut locked = self.zone.lock();
                for (i, t) in chunk.iter().enumerate() {
                    // A breaker of a route met only at run time may not exist yet.
                    if let Some(b) = locked.find(&Self::key(t)) {
                        let v = LocalView::of_view(&b.view(now), t.active);
                        views.push((batch * BATCH + i, v));
                    }
                }
            }
            for (i, v) in views {
                self.store.update_local(now, i, v);
            }
        }
    }

    fn pull_due(&self, now: u64) -> bool {
        match self.last_pull {
            None => true,
            Some(t) => {
                let since = now.saturating_sub(t);
                since >= self.spec.interval_ms
                    || (since >= self.spec.interval_ms / 4 && self.store.hurry(now))
            }
        }
    }

    /// Step 3.
    fn publish(&self, now: u64) {
        let wire = self.store.render(now);
        let clocks = Clocks {
            mono_ms: now,
            wall_ms: self.zone.wall_clock(now, wall_ms()),
        };
        let json = fleet_status::render_json(&self.store, clocks);
        let prom = fleet_status::render_prometheus(&self.store, &self.zone_name, clocks);
        self.shared
            .publish(now, [wire.as_bytes(), json.as_bytes(), prom.as_bytes()]);
    }

    /// Step 4.
    fn apply(&mut self, now: u64) {
        let until = now.saturating_add(self.store.config().expire_ms);
        let verdicts: Vec<_> = (0..self.breakers.len())
            .map(|i| self.store.verdict(now, i))
            .collect();
        for (chunk, verdicts) in self.breakers.chunks_mut(BATCH).zip(verdicts.chunks(BATCH)) {
            let mut locked = self.zone.lock();
            for (t, &v) in chunk.iter_mut().zip(verdicts) {
                let Some(mut b) = locked.find(&Self::key(t)) else {
                    continue;
                };
                b.suspect(v.suspicious_until_ms.unwrap_or(0));
                let probe_from = if v.peers_recovered {
                    0
                } else {
                    v.probe_from_ms.unwrap_or(u64::MAX)
                };
                b.set_fleet_verdict(probe_from, until);
                if v.peers_recovered && !t.recovered && b.hasten(now) {
                    ngx::ngx_log_error!(
                        NGX_LOG_INFO,
                        ngx_cycle_log().as_ptr(),
                        "circuit breaker \"{}/{}\" probes early: peers report recovery",
                        t.upstream,
                        t.route
                    );
                }
                t.recovered = v.peers_recovered;
                // Dropping `b` publishes its gate: a hastened cooldown reaches requests now.
            }
        }
    }
}

/// One round (see the module's documentation); returns the delay until the next.
pub async fn round(ex: Rc<RefCell<Exchange>>) -> Option<Duration> {
    let now = mono_ms();
    let began = now;
    let pulls = {
        let mut e = ex.borrow_mut();
        e.read_local(now);
        if e.pull_due(now) {
            e.last_pull = Some(now);
            let picked = e.store.pick_peers(rnd);
            let timeout = Duration::from_millis((e.spec.interval_ms / 2).max(50));
            let host: Vec<String> = picked
                .iter()
                .map(|&i| String::from_utf8_lossy(e.peers[i].name()).into_owned())
                .collect();
            Some((
                picked
                    .iter()
                    .map(|&i| e.peers[i].clone())
                    .zip(host)
                    .collect::<Vec<_>>(),
                picked,
                e.spec.target.clone(),
                e.spec.secret.clone(),
                timeout,
            ))
        } else {
            None
        }
    };
    if let Some((peers, picked, target, secret, timeout)) = pulls {
        let answers = join_all(
            peers
                .iter()
                .map(|(peer, host)| pull(peer, host, &target, secret.as_deref(), timeout))
                .collect(),
        )
        .await;
        let now = mono_ms();
        let mut e = ex.borrow_mut();
        for (i, answer) in picked.into_iter().zip(answers) {
            match answer {
                Some(body) => {
                    if let Err(err) = e.store.receive(now, i, &body) {
                        ngx::ngx_log_error!(
                            NGX_LOG_INFO,
                            ngx_cycle_log().as_ptr(),
                            "circuit breaker fleet: message of peer \"{}\" refused: {}",
                            String::from_utf8_lossy(e.peers[i].name()),
                            err
                        );
                    }
                }
                None => e.store.peer_failed(now, i),
            }
        }
    }
    let now = mono_ms();
    let mut e = ex.borrow_mut();
    e.store.expire(now);
    e.publish(now);
    e.apply(now);
    // Rounds keep their pace while a pull waits out its timeout (longer than a round).
    Some(
        e.tick()
            .saturating_sub(Duration::from_millis(now.saturating_sub(began))),
    )
}

/// Pulls one peer's message: the body of a `200`, at most 1 MiB; `None` for anything else
/// (refused, timed out, another status). A body cut at the cap is handed on, and the
/// store's parser refuses it as cut short.
async fn pull(
    peer: &Peer,
    host: &str,
    target: &str,
    secret: Option<&str>,
    timeout: Duration,
) -> Option<Vec<u8>> {
    let headers: Vec<(&str, &str)> = secret
        .map(|s| (circuit_breaker_core::fleet::conf::SECRET_HEADER, s))
        .into_iter()
        .collect();
    let req = Request {
        method: "GET",
        target,
        host,
        headers: &headers,
        body: &[],
    };
    let opts = Options::new(timeout)
        .max_body(wire::MAX_MESSAGE_BYTES)
        .action("pulling circuit breaker fleet opinions");
    match net::fetch(peer, &req, &opts).await {
        Ok(r) if r.status == 200 => Some(r.body),
        _ => None,
    }
}

/// Runs every future at once on this task; their outputs in order.
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futures.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}
