//! The opinion store: what this instance knows of its peers' breakers, merged from their
//! messages, and the three answers the shell needs from it (suspicion, the fleet's prober,
//! recovery seen elsewhere).
//!
//! Plain data on the heap of the one worker that runs the exchange, not in the shared zone:
//! names are of any length, and the request path needs only the [`FleetAdvice`] the worker
//! publishes next to each breaker (see [`super`]). A worker that dies takes the store with
//! it; the next one refills it from peers within a few intervals, and the breakers in the
//! zone are untouched meanwhile. The stored [`Opinion`] itself is a `#[repr(C)]`, `Copy`
//! record with no pointers, should a later design keep the table in the zone.
//!
//! Memory is bounded by construction: at most one opinion per (configured peer, local
//! breaker), and records about unknown origins or breakers are counted, not kept; after
//! [`FleetStore::expire`], only opinions received within the expiry remain (at most
//! `fanout` × (expiry / interval + 1) × [`wire::MAX_ENTRIES`]).
//!
//! Every stored time is on this instance's monotonic clock (`now_ms`, as the breakers use);
//! peers' times arrive as ages and become local instants on receipt, so no two instances
//! ever compare clocks. A `now_ms` earlier than one already seen is taken as the latest.
//!
//! A message's merge costs in proportion to its records and, once per breaker it changes that
//! is open here, that breaker's opinions (at most one per peer): each record is found and
//! stored in constant time, and each such breaker's fleet round is settled once, after the
//! last record ([`FleetStore::merge`]). [`FleetStore::work`] counts the steps taken, so that
//! tests bound the cost by the message's size rather than by a clock.

use std::cell::Cell;
use std::collections::HashMap;

use super::auth::{FleetKey, Nonce};
use super::fingerprint::{mix, Fingerprint};
use super::wire::{self, ErrorKind, Flags, Message, ParseError, WireOpinion};
use crate::snapshot::State;

mod config;
mod decide;
mod keyed;
mod merge;
mod outbound;
mod records;

pub use config::*;
pub use keyed::{weight as keyed_weight, KEYED_PER_MESSAGE, MAX_KEYED};
pub use records::*;
use records::{valid_name, Local, Opinions, Peer, Signal};

/// Everything this instance knows of the fleet. See the module's documentation.
#[derive(Clone, Debug)]
pub struct FleetStore {
    cfg: FleetConfig,
    self_id: String,
    peers: Vec<Peer>,
    peer_index: HashMap<String, usize>,
    breakers: Vec<Local>,
    breaker_index: HashMap<String, HashMap<String, usize>>,
    /// Keyed breakers' families (`circuit_breaker_key`), by name, and the indexes retired
    /// keyed breakers left (see [`keyed`]).
    families: HashMap<String, (u64, Policy)>,
    disagreeing: HashMap<String, u64>,
    free: Vec<usize>,
    keyed: usize,
    /// Keyed breakers a peer's record made, for the shell to look for in the zone.
    added: Vec<usize>,
    counters: Counters,
    last_now: u64,
    last_push_ms: Option<u64>,
    /// The fleet is on a bus: members join and part as they speak, and hear each other
    /// directly, so a message carries its sender's own opinions only.
    bus: bool,
    /// Steps taken (see [`FleetStore::work`]); a cell, so that the answers, which only read
    /// the store, count theirs too.
    work: Cell<u64>,
}

impl FleetStore {
    /// A store for instance `self_id` with these peers. `peers` may list `self_id` too (so
    /// that every instance can share one list); it is left out. Peers are numbered in the
    /// order given, without `self_id`.
    pub fn new(
        self_id: &str,
        peers: &[&str],
        mut cfg: FleetConfig,
    ) -> Result<FleetStore, FleetError> {
        valid_name(self_id)?;
        cfg.max_entries = cfg.max_entries.min(wire::MAX_ENTRIES);
        let mut store = FleetStore {
            cfg,
            self_id: self_id.to_string(),
            peers: Vec::new(),
            peer_index: HashMap::new(),
            breakers: Vec::new(),
            breaker_index: HashMap::new(),
            families: HashMap::new(),
            disagreeing: HashMap::new(),
            free: Vec::new(),
            keyed: 0,
            added: Vec::new(),
            counters: Counters::default(),
            last_now: 0,
            last_push_ms: None,
            bus: false,
            work: Cell::new(0),
        };
        for &p in peers.iter().filter(|&&p| p != self_id) {
            valid_name(p)?;
            if store.peer_index.contains_key(p) {
                return Err(FleetError::DuplicatePeer(p.to_string()));
            }
            store.peer_index.insert(p.to_string(), store.peers.len());
            store.peers.push(Peer {
                id: p.to_string(),
                live: true,
                counters: PeerCounters::default(),
                auth_told: false,
                tls_told: false,
                lasts_ms: 0,
            });
        }
        Ok(store)
    }

    /// A store for instance `self_id` of a fleet on a bus: no peer until one speaks
    /// ([`FleetStore::join`]).
    pub fn for_bus(self_id: &str, cfg: FleetConfig) -> Result<FleetStore, FleetError> {
        let mut store = FleetStore::new(self_id, &[], cfg)?;
        store.bus = true;
        Ok(store)
    }

    /// Whether the fleet is on a bus.
    pub fn is_bus(&self) -> bool {
        self.bus
    }

    /// The peer `id` of a fleet on a bus, made when it is new and fewer than `max` peers are
    /// live (a place a parted peer left is taken again); `None` for this instance's own id,
    /// an id the wire cannot carry, or no room.
    pub fn join(&mut self, id: &str, max: usize) -> Option<usize> {
        if let Some(&i) = self.peer_index.get(id) {
            return Some(i);
        }
        if id == self.self_id || valid_name(id).is_err() {
            return None;
        }
        if self.peers.iter().filter(|p| p.live).count() >= max {
            return None;
        }
        let peer = Peer {
            id: id.to_string(),
            live: true,
            counters: PeerCounters::default(),
            auth_told: false,
            tls_told: false,
            lasts_ms: 0,
        };
        let i = match self.peers.iter().position(|p| !p.live) {
            Some(i) => {
                self.peers[i] = peer;
                i
            }
            None => {
                self.peers.push(peer);
                self.peers.len() - 1
            }
        };
        self.peer_index.insert(id.to_string(), i);
        Some(i)
    }

    /// The peer `id` parted (a bus member silent past the expiry): its opinions go with it.
    pub fn part(&mut self, id: &str) {
        let Some(i) = self.peer_index.remove(id) else {
            return;
        };
        self.peers[i].live = false;
        let mut looked = 0u64;
        for l in &mut self.breakers {
            looked += 1;
            l.opinions.remove(&(i as u32));
        }
        self.work.set(self.work.get().wrapping_add(looked));
    }

    /// The configuration.
    pub fn config(&self) -> &FleetConfig {
        &self.cfg
    }

    /// This instance's id.
    pub fn self_id(&self) -> &str {
        &self.self_id
    }

    /// The peers' ids, by index.
    pub fn peer_ids(&self) -> impl Iterator<Item = &str> {
        self.peers.iter().filter(|p| p.live).map(|p| p.id.as_str())
    }

    /// Store-wide counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Opinions held, fresh or not yet expired: at most one per (peer, breaker).
    pub fn held(&self) -> usize {
        self.breakers.iter().map(|l| l.opinions.len()).sum()
    }

    /// Steps taken so far by the store's loops: a record read, an opinion looked at, a claim
    /// chained or compared in a sort, an instance ranked. The cost of a merge or an answer in
    /// units that no machine or load changes; tests bound a merge's by the message's size.
    pub fn work(&self) -> u64 {
        self.work.get()
    }

    fn step(&self) {
        self.work.set(self.work.get().wrapping_add(1));
    }

    /// Adds a breaker this instance has; returns its index for the other calls.
    pub fn add_breaker(
        &mut self,
        upstream: &str,
        route: &str,
        fingerprint: u64,
        policy: Policy,
    ) -> Result<usize, FleetError> {
        self.insert(upstream, route, fingerprint, policy, false)
    }

    fn insert(
        &mut self,
        upstream: &str,
        route: &str,
        fingerprint: u64,
        policy: Policy,
        keyed: bool,
    ) -> Result<usize, FleetError> {
        valid_name(upstream)?;
        valid_name(route)?;
        if self.breaker_index(upstream, route).is_some() {
            return Err(FleetError::DuplicateBreaker(upstream.into(), route.into()));
        }
        let local = Local {
            upstream: upstream.to_string(),
            route: route.to_string(),
            fingerprint,
            policy,
            view: None,
            episode_start_ms: 0,
            episode_probes: 0,
            recovered: false,
            round: 0,
            probe_at_ms: 0,
            settled: (0, 0),
            last_refused_ms: None,
            opinions: Opinions::default(),
            pushed: Signal::default(),
            hastened: false,
            touched: false,
            keyed,
            retired: false,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                self.breakers[i] = local;
                i
            }
            None => {
                self.breakers.push(local);
                self.breakers.len() - 1
            }
        };
        self.breaker_index
            .entry(upstream.to_string())
            .or_default()
            .insert(route.to_string(), idx);
        Ok(idx)
    }

    /// The breakers added, as (upstream, route), by index (a retired keyed breaker's names
    /// are empty).
    pub fn breakers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.breakers
            .iter()
            .map(|l| (l.upstream.as_str(), l.route.as_str()))
    }

    /// The index of a breaker added with [`FleetStore::add_breaker`].
    pub fn breaker_index(&self, upstream: &str, route: &str) -> Option<usize> {
        self.breaker_index.get(upstream)?.get(route).copied()
    }

    fn clock(&mut self, now_ms: u64) -> u64 {
        self.last_now = self.last_now.max(now_ms);
        self.last_now
    }

    /// Records the local breaker's state, read from shared memory; call it for every breaker
    /// before serving, merging or asking (once per interval is enough). Notices the start of
    /// an open episode, this instance's probes (which advance the fleet's round) and a close
    /// after a probe (which peers learn as a recovery).
    pub fn update_local(&mut self, now_ms: u64, breaker: usize, v: LocalView) {
        let now = self.clock(now_ms);
        let Some(l) = self.breakers.get(breaker) else {
            return;
        };
        let known_round = self.fleet_round(now, l).0;
        let expire = self.cfg.expire_ms;
        let Some(l) = self.breakers.get_mut(breaker) else {
            return;
        };
        let prev = l.view;
        let was_open = prev.is_some_and(|p| p.state != State::Closed);
        let is_open = v.state != State::Closed;
        if is_open && !was_open {
            l.episode_start_ms = v.since_ms.min(now);
            l.episode_probes = v.probe_starts;
            l.recovered = false;
            l.round = 0;
            l.probe_at_ms = 0;
            l.settled = (0, 0);
            l.hastened = false;
        }
        if let Some(p) = prev {
            if is_open && v.probe_starts > p.probe_starts {
                // The probe's own start is the half-open's `since`; after a failed probe the
                // reopening's `since` is within a probe's duration of it.
                l.round = known_round.saturating_add(1);
                l.probe_at_ms = v.since_ms.min(now);
            }
            if v.short_circuited > p.short_circuited {
                l.last_refused_ms = Some(now);
            }
        }
        if was_open && !is_open {
            l.recovered = !v.forced && v.probe_starts > l.episode_probes;
            l.round = 0;
            l.probe_at_ms = 0;
        }
        if v.forced {
            l.recovered = false;
        }
        if l.last_refused_ms
            .is_some_and(|t| t.saturating_add(expire) < now)
        {
            l.last_refused_ms = None;
        }
        l.view = Some(v);
        self.settle_round(now, breaker);
    }
}
