//! The exchange worker: one worker of the instance keeps the fleet's opinion store on its
//! heap and runs, in the background on its event loop, one task that wakes every quarter of
//! the interval, at once when a request in this worker moves a breaker or records an outcome
//! (`wake::nudge`), when a pull ends, and with more than one worker every [`wake::POLL`], for
//! the others' signals:
//!
//! 1. **Rounds** (each quarter interval): reads every breaker from the zone into the store
//!    (under the lock, in batches); once per interval, or every quarter while a local breaker
//!    fails without having opened yet (`FleetStore::hurry`), pulls `fanout` random peers;
//!    publishes its message, the fleet's JSON object and Prometheus families into the fleet
//!    zone; writes each breaker's advice beside it (under the lock).
//! 2. **Pushes**: when a worker says a breaker moved, it reads the breakers again (at most
//!    once per push gap) and asks the store whether peers should know now
//!    (`FleetStore::take_push`); if so it publishes its message and pokes `fanout` random
//!    peers ("pull me now", authenticated), which pull it within a round trip.
//! 3. **Pulls** run beside the task, at most [`MAX_IN_FLIGHT`] at once (each answer at most
//!    1 MiB, so that a round's memory is bounded whatever the fanout), one per peer at a
//!    time; each carries a fresh nonce, and its answer is merged only once its MAC verifies
//!    (`FleetStore::receive_sealed`). A peer that pokes this instance is pulled at once, at
//!    most once per push gap. A peer that is slow, down, lying or unauthenticated only
//!    moves its counters.
//!
//! No request ever waits for any of this: requests read the breaker and its berth as always.

use core::cell::RefCell;
use core::time::Duration;
use std::rc::Rc;

use circuit_breaker_core::fleet::auth::{self, FleetKey, Kind, Nonce, HEADER, NONCE_BYTES};
use circuit_breaker_core::fleet::status as fleet_status;
use circuit_breaker_core::fleet::store::{keyed_weight, Push, Refused};
use circuit_breaker_core::fleet::{wire, FleetDirective, FleetStore, LocalView};
use circuit_breaker_core::snapshot::Clocks;
use nginx_sys::{NGX_LOG_INFO, NGX_LOG_WARN};
use ngx::log::ngx_cycle_log;

mod bus_step;

use super::nonce;
use super::shared::FleetZone;
use crate::net::{self, Error, Options, Peer, Request};
use crate::wake;
use circuit_breaker_shell::clock::{mono_ms, rnd, wall_ms};
use circuit_breaker_shell::zone::{Key, Kind as ZoneKind, Zone};

/// Breakers read or written per lock hold, as the status walk does.
const BATCH: usize = 256;
/// Pulls at once, whatever the fanout and the pokes: each answer holds at most
/// `wire::MAX_MESSAGE_BYTES`.
pub const MAX_IN_FLIGHT: usize = 16;
/// Pokes at once; more are not sent (the peers' own rounds still come).
const MAX_POKES_IN_FLIGHT: usize = 64;
/// The longest time between two publications of the status parts.
const STATUS_EVERY_MS: u64 = 1000;

/// A breaker of the store, as the zone names it.
pub struct Tracked {
    pub hash: u64,
    pub upstream: String,
    /// The route, or a key as the status page writes it.
    pub route: String,
    /// It probes actively (needs no traffic to probe).
    pub active: bool,
    /// A keyed breaker's key, as it is.
    pub key: Option<Vec<u8>>,
    /// Still in the store (a keyed breaker the store retired is not).
    pub live: bool,
    /// A stream breaker: in which of the stream module's zones.
    pub stream: Option<usize>,
}

impl Tracked {
    /// The breaker as its log lines name it.
    fn who(&self) -> String {
        match self.stream {
            Some(_) => format!("stream \"{}\"", self.upstream),
            None => format!("\"{}/{}\"", self.upstream, self.route),
        }
    }
}

/// How to reach one peer, and its pulls' state.
pub struct Link {
    pub peer: Peer,
    /// The `Host` header: the peer's address.
    pub host: String,
    #[cfg(ngx_ssl)]
    pub tls: Option<Rc<net::Tls>>,
    /// Listed as `https://` (with no TLS context in this build: never reached).
    pub https: bool,
    busy: bool,
    /// A pull is wanted (round, or poke) once the one in flight ends.
    wanted: bool,
    /// When its latest pull started.
    last_pull: Option<u64>,
}

impl Link {
    pub fn new(peer: Peer, host: String, https: bool) -> Link {
        Link {
            peer,
            host,
            #[cfg(ngx_ssl)]
            tls: None,
            https,
            busy: false,
            wanted: false,
            last_pull: None,
        }
    }
}

/// What a pull ended with.
enum Answer {
    Body(Vec<u8>),
    Status(u16),
    Failed(Error),
}

/// Everything the exchange worker holds.
pub struct Exchange {
    store: FleetStore,
    spec: FleetDirective,
    key: FleetKey,
    /// By store peer index (the directive's peers, in order).
    links: Vec<Link>,
    /// By store breaker index.
    breakers: Vec<Tracked>,
    /// Keyed breakers' families: (name, id).
    families: Vec<(String, u16)>,
    /// The http block's zone (or, without one, the first stream zone): keyed breakers, the
    /// wall clock.
    zone: Zone,
    /// `zone` is the http block's.
    http: bool,
    /// The stream module's zones.
    stream_zones: Vec<Zone>,
    shared: FleetZone,
    zone_name: String,
    poll: bool,
    next_round: u64,
    last_pull: Option<u64>,
    last_read: u64,
    moved_seen: u64,
    /// Breakers moved since they were last read.
    dirty: bool,
    push_at: Option<u64>,
    /// When the status parts were last published.
    last_status: u64,
    in_flight: usize,
    pokes_in_flight: usize,
    /// Answers that arrived since the task last ran: (peer, nonce, answer).
    done: Vec<(usize, Nonce, Answer)>,
    warned_nonce: bool,
    /// The last poke's sequence (see `auth::next_sequence`).
    poke_seq: u64,
    /// The bus, for a fleet on one (no links then).
    pub(super) bus: Option<super::bus::Bus>,
}

/// What an [`Exchange`] starts from.
pub struct Setup {
    pub store: FleetStore,
    pub spec: FleetDirective,
    pub key: FleetKey,
    pub links: Vec<Link>,
    pub breakers: Vec<Tracked>,
    pub families: Vec<(String, u16)>,
    pub zone: Zone,
    /// `zone` is the http block's.
    pub http: bool,
    pub stream_zones: Vec<Zone>,
    pub shared: FleetZone,
    pub zone_name: String,
    /// Other workers may signal: read their counter every [`wake::POLL`].
    pub poll: bool,
    pub bus: Option<super::bus::Bus>,
}

impl Exchange {
    pub fn new(s: Setup) -> Exchange {
        let moved_seen = s.shared.moved().load(core::sync::atomic::Ordering::Relaxed);
        Exchange {
            store: s.store,
            spec: s.spec,
            key: s.key,
            links: s.links,
            breakers: s.breakers,
            families: s.families,
            zone: s.zone,
            http: s.http,
            stream_zones: s.stream_zones,
            shared: s.shared,
            zone_name: s.zone_name,
            poll: s.poll,
            next_round: 0,
            last_pull: None,
            last_read: 0,
            moved_seen,
            dirty: false,
            push_at: None,
            last_status: 0,
            in_flight: 0,
            pokes_in_flight: 0,
            done: Vec::new(),
            warned_nonce: false,
            poke_seq: 0,
            bus: s.bus,
        }
    }

    /// This instance's id in the fleet.
    pub fn id(&self) -> &str {
        &self.spec.id
    }

    /// The fleet's interval.
    pub fn interval_ms(&self) -> u64 {
        self.spec.interval_ms
    }

    /// The time between two rounds.
    fn tick(&self) -> u64 {
        (self.spec.interval_ms / 4).max(25)
    }

    fn gap(&self) -> u64 {
        self.store.config().push_gap_ms
    }

    /// The zone a breaker is in: the http block's (`None`) or a stream one.
    fn zone_at(&self, stream: Option<usize>) -> Option<&Zone> {
        match stream {
            Some(i) => self.stream_zones.get(i),
            None => self.http.then_some(&self.zone),
        }
    }

    fn key_of(t: &Tracked) -> Key<'_> {
        match &t.key {
            Some(key) => Key {
                hash: t.hash,
                upstream: t.upstream.as_bytes(),
                route: key,
                kind: ZoneKind::Keyed,
            },
            None => Key {
                hash: t.hash,
                upstream: t.upstream.as_bytes(),
                route: t.route.as_bytes(),
                kind: ZoneKind::Route,
            },
        }
    }

    /// Every breaker's state, as the zone holds it now.
    fn read_local(&mut self, now: u64) {
        self.last_read = now;
        self.dirty = false;
        for (batch, chunk) in self.breakers.chunks(BATCH).enumerate() {
            let mut views = Vec::with_capacity(chunk.len());
            for z in zones_in(chunk) {
                let Some(zone) = self.zone_at(z) else {
                    continue;
                };
                let mut locked = zone.lock();
                for (i, t) in chunk.iter().enumerate() {
                    if t.key.is_some() || t.stream != z {
                        continue;
                    }
                    // A breaker of a route met only at run time may not exist yet.
                    if let Some(b) = locked.find(&Self::key_of(t)) {
                        let v = LocalView::of_view(&b.view(now), t.active);
                        views.push((batch * BATCH + i, v));
                    }
                }
            }
            for (i, v) in views {
                self.store.update_local(now, i, v);
            }
        }
        if !self.families.is_empty() {
            self.read_keyed(now);
        }
    }

    /// The keyed breakers of the zone worth a word (open, forced, failing, or that changed
    /// state within an expiry): those the store holds are brought up to date, the others
    /// added, weightiest first, while the store has room; a held key the walk did not meet
    /// is forgotten here (its breaker went, or has nothing to say).
    fn read_keyed(&mut self, now: u64) {
        let mut seen = Vec::new();
        let recent = self.store.config().expire_ms;
        self.zone.visit_keyed_worth(now, recent, |family, key, v| {
            if let Ok(family) = core::str::from_utf8(family) {
                seen.push((
                    family.to_owned(),
                    key.to_vec(),
                    LocalView::of_view(&v, false),
                ));
            }
        });
        let mut present = vec![false; self.breakers.len()];
        let mut new = Vec::new();
        for (family, key, view) in seen {
            let shown = circuit_breaker_core::keyed::name::shown(&key);
            match self.store.breaker_index(&family, &shown) {
                Some(i) => {
                    self.store.update_local(now, i, view);
                    mark(&mut present, i);
                }
                None => new.push((family, shown, key, view)),
            }
        }
        // Weightiest first: once one finds no room, lighter ones would not either (and each
        // try looks the store over). A key too long for the wire stays local.
        new.sort_by_key(|(.., v)| core::cmp::Reverse(keyed_weight(Some(v))));
        for (family, shown, key, view) in new {
            if shown.len() > wire::MAX_NAME_BYTES {
                continue;
            }
            let Some(i) = self.store.add_keyed(&family, &shown, Some(&view)) else {
                break;
            };
            self.track_keyed(i, &family, &shown, key);
            self.store.update_local(now, i, view);
            mark(&mut present, i);
        }
        for (i, t) in self.breakers.iter_mut().enumerate() {
            if t.key.is_none() {
                continue;
            }
            // The store's entry at `i` is this one's still (not retired, not another key's).
            t.live = self
                .store
                .names_of(i)
                .is_some_and(|(f, r)| self.store.is_keyed(i) && f == t.upstream && r == t.route);
            if t.live && !present.get(i).copied().unwrap_or(false) {
                self.store.forget_local(i);
            }
        }
    }

    /// The store holds the keyed breaker `i` of `family` for `shown` (its key written):
    /// where to find it in the zone.
    fn track_keyed(&mut self, i: usize, family: &str, shown: &str, key: Vec<u8>) {
        let Some(&(_, id)) = self.families.iter().find(|(name, _)| name == family) else {
            return;
        };
        let t = Tracked {
            hash: self.zone.keyed_hasher().hash(id, &key),
            upstream: family.to_owned(),
            route: shown.to_owned(),
            active: false,
            key: Some(key),
            live: true,
            stream: None,
        };
        if i < self.breakers.len() {
            self.breakers[i] = t;
        } else {
            // Indexes are handed out in order: a new one is the next.
            self.breakers.resize_with(i, || Tracked {
                hash: 0,
                upstream: String::new(),
                route: String::new(),
                active: false,
                key: Some(Vec::new()),
                live: false,
                stream: None,
            });
            self.breakers.push(t);
        }
    }

    /// Keyed breakers peers' records added to the store: found in the zone by their key.
    fn track_added(&mut self) {
        for i in self.store.take_added() {
            let Some((family, shown)) = self
                .store
                .names_of(i)
                .map(|(f, r)| (f.to_owned(), r.to_owned()))
            else {
                continue;
            };
            // The store takes only a key's written form, which reads back.
            if let Some(key) = circuit_breaker_core::keyed::name::from_shown(&shown) {
                self.track_keyed(i, &family, &shown, key);
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

    /// The message for peers, the JSON object and the Prometheus families.
    fn publish(&self, now: u64) {
        // Only listed peers may pull (`super::answer`): a member of a bus has none.
        let wire = match self.bus {
            Some(_) => String::new(),
            None => self.store.render(now),
        };
        let clocks = Clocks {
            mono_ms: now,
            wall_ms: self.zone.wall_clock(now, wall_ms()),
        };
        let bus = self.bus_stats(now);
        let figures = fleet_status::Figures::gather(&self.store, now);
        let json = fleet_status::render_json(&figures, clocks, bus.as_ref());
        let mut prom = fleet_status::render_prometheus(&figures, &self.zone_name);
        if let Some(b) = &bus {
            prom.push_str(
                &circuit_breaker_core::fleet::bus::status::render_prometheus(b, &self.zone_name),
            );
        }
        self.shared
            .publish(now, [wire.as_bytes(), json.as_bytes(), prom.as_bytes()]);
    }

    /// Each breaker's advice, written beside it.
    fn apply(&mut self, now: u64) {
        let until = now.saturating_add(self.store.config().expire_ms);
        let all: Vec<_> = (0..self.breakers.len())
            .map(|i| self.store.advice(now, i))
            .collect();
        for (batch, (chunk, advice)) in self
            .breakers
            .chunks(BATCH)
            .zip(all.chunks(BATCH))
            .enumerate()
        {
            for z in zones_in(chunk) {
                // A handle of its own: the store is written under the lock.
                let Some(zone) = self.zone_at(z).cloned() else {
                    continue;
                };
                let mut locked = zone.lock();
                for (k, (t, &v)) in chunk.iter().zip(advice).enumerate() {
                    if !t.live || t.stream != z {
                        continue;
                    }
                    let Some(mut b) = locked.find(&Self::key_of(t)) else {
                        continue;
                    };
                    b.suspect(v.suspicious_until_ms.unwrap_or(0));
                    let probe_from = if v.peers_recovered {
                        0
                    } else {
                        v.probe_from_ms.unwrap_or(u64::MAX)
                    };
                    b.set_fleet_advice(probe_from, until);
                    // Once per open episode, however the peers' reports come and go (the store
                    // counts it when it says so).
                    if v.peers_recovered
                        && self.store.take_hasten(now, batch * BATCH + k)
                        && b.hasten(now)
                    {
                        ngx::ngx_log_error!(
                            NGX_LOG_INFO,
                            ngx_cycle_log().as_ptr(),
                            "circuit breaker {} probes early: peers report recovery",
                            t.who()
                        );
                    }
                    // Dropping `b` publishes its gate: a hastened cooldown reaches requests now.
                }
            }
        }
    }

    fn peer_name(&self, i: usize) -> String {
        String::from_utf8_lossy(self.links[i].peer.name()).into_owned()
    }

    /// Merges (or counts) one pull's answer.
    fn take_answer(&mut self, now: u64, i: usize, nonce: &Nonce, answer: Answer) {
        let log = ngx_cycle_log().as_ptr();
        match answer {
            Answer::Body(body) => {
                match self.store.receive_sealed(now, i, &self.key, nonce, &body) {
                    Ok(_) => {}
                    Err(Refused::Auth { error, first }) => {
                        if first {
                            ngx::ngx_log_error!(
                                NGX_LOG_WARN,
                                log,
                                "circuit breaker fleet: answer of peer \"{}\" refused: {}; \
                                 its answers are refused until one verifies",
                                self.peer_name(i),
                                error
                            );
                        }
                    }
                    Err(Refused::Parse(e)) => {
                        ngx::ngx_log_error!(
                            NGX_LOG_INFO,
                            log,
                            "circuit breaker fleet: message of peer \"{}\" refused: {}",
                            self.peer_name(i),
                            e
                        );
                    }
                }
            }
            Answer::Failed(e @ (Error::Tls | Error::TlsVerify(_) | Error::TlsName)) => {
                if self.store.tls_failed(now, i) {
                    ngx::ngx_log_error!(
                        NGX_LOG_WARN,
                        log,
                        "circuit breaker fleet: pull from peer \"{}\" refused: {}; \
                         its answers are refused until one verifies",
                        self.peer_name(i),
                        e
                    );
                }
            }
            Answer::Status(403) => {
                // The peer did not take our authentication: another secret, most likely.
                if self.store.auth_failed(now, i) {
                    ngx::ngx_log_error!(
                        NGX_LOG_WARN,
                        log,
                        "circuit breaker fleet: peer \"{}\" refused this instance's pull (403): \
                         is its key the same, and does it allow this address?",
                        self.peer_name(i)
                    );
                }
            }
            Answer::Status(_) | Answer::Failed(_) => self.store.peer_failed(now, i),
        }
    }

    /// When the task should look again, at the latest.
    fn next_wake(&self, now: u64) -> Duration {
        let mut at = self.next_round.min(self.last_status + STATUS_EVERY_MS);
        if self.poll {
            at = at.min(now + wake::POLL.as_millis() as u64);
        }
        if let Some(p) = self.push_at {
            at = at.min(p);
        }
        if self.dirty {
            at = at.min(self.last_read + self.gap());
        }
        if self.links.iter().any(|l| l.wanted && !l.busy) {
            at = at.min(now + self.gap());
        }
        Duration::from_millis(at.saturating_sub(now).max(1))
    }
}

/// What one step decided to send, done once the exchange is no longer borrowed.
#[derive(Default)]
struct Sends {
    pulls: Vec<(usize, Nonce)>,
    pokes: Vec<(usize, Nonce)>,
}

/// Runs the exchange until the worker exits.
pub async fn run(ex: Rc<RefCell<Exchange>>) {
    loop {
        let now = mono_ms();
        let (sends, delay) = {
            let mut e = ex.borrow_mut();
            let sends = step(&mut e, now);
            (sends, e.next_wake(mono_ms()))
        };
        send(&ex, sends);
        // What the step queued for the bus, once nothing is borrowed.
        let bus = ex
            .borrow_mut()
            .bus
            .as_mut()
            .and_then(super::bus::Bus::take_waker);
        if let Some(w) = bus {
            w.wake();
        }
        wake::wait(delay).await;
        if net::exiting() {
            return;
        }
    }
}

/// Everything due at `now` (see the module's documentation).
fn step(e: &mut Exchange, now: u64) -> Sends {
    let mut changed = false;
    for (i, nonce, answer) in core::mem::take(&mut e.done) {
        e.take_answer(now, i, &nonce, answer);
        changed = true;
    }
    if e.bus.is_some() {
        changed |= e.bus_take(now);
    }
    e.track_added();
    let peers = e.links.len();
    for i in e.shared.take_pokes(peers) {
        e.store.poked(i);
        e.links[i].wanted = true;
    }
    let moved = e.shared.moved().load(core::sync::atomic::Ordering::Relaxed);
    if moved != e.moved_seen || wake::take_nudged() {
        e.moved_seen = moved;
        e.dirty = true;
    }
    let round = now >= e.next_round;
    if round || (e.dirty && now >= e.last_read + e.gap()) {
        e.read_local(now);
        changed = true;
    }
    if round {
        e.next_round = now + e.tick();
        if e.bus.is_some() {
            e.bus_round(now);
        } else if e.pull_due(now) {
            e.last_pull = Some(now);
            for i in e.store.pick_peers(rnd) {
                e.links[i].wanted = true;
            }
        }
        e.store.expire(now);
        for i in e.store.retire_idle(now) {
            if let Some(t) = e.breakers.get_mut(i) {
                t.live = false;
            }
        }
    }
    // The status page follows each round, and within a second whatever the interval (its
    // JSON and Prometheus texts grow with the peers: not at every answer).
    if round || now >= e.last_status + STATUS_EVERY_MS {
        e.last_status = now;
        e.publish(now);
    }
    if changed {
        e.apply(now);
    }
    let mut sends = Sends::default();
    if e.bus.is_some() {
        match e.store.take_push(now) {
            Push::Now => {
                e.push_at = None;
                e.bus_publish(now);
            }
            Push::At(t) => e.push_at = Some(t),
            Push::Nothing => e.push_at = None,
        }
        e.bus_say(now);
        return sends;
    }
    match e.store.take_push(now) {
        Push::Now => {
            e.push_at = None;
            // Peers pulling at once must find this news.
            e.shared.publish_wire(now, e.store.render(now).as_bytes());
            for i in e.store.pick_peers(rnd) {
                if e.pokes_in_flight + sends.pokes.len() >= MAX_POKES_IN_FLIGHT {
                    break;
                }
                if let Some(n) = poke_nonce(e) {
                    sends.pokes.push((i, n));
                }
            }
        }
        Push::At(t) => e.push_at = Some(t),
        Push::Nothing => e.push_at = None,
    }
    let gap = e.gap();
    for i in 0..e.links.len() {
        if e.in_flight + sends.pulls.len() >= MAX_IN_FLIGHT {
            break;
        }
        let l = &e.links[i];
        if !l.wanted || l.busy || l.last_pull.is_some_and(|t| now < t + gap) {
            continue;
        }
        let Some(n) = fresh_nonce(e) else { break };
        let l = &mut e.links[i];
        l.wanted = false;
        l.busy = true;
        l.last_pull = Some(now);
        sends.pulls.push((i, n));
    }
    e.in_flight += sends.pulls.len();
    e.pokes_in_flight += sends.pokes.len();
    sends
}

/// Marks `i` in `present`, growing it as needed.
/// The zones the breakers of `chunk` are in, each once.
fn zones_in(chunk: &[Tracked]) -> Vec<Option<usize>> {
    let mut zones: Vec<_> = chunk.iter().map(|t| t.stream).collect();
    zones.sort_unstable();
    zones.dedup();
    zones
}

fn mark(present: &mut Vec<bool>, i: usize) {
    if present.len() <= i {
        present.resize(i + 1, false);
    }
    present[i] = true;
}

/// A poke's nonce: the next sequence number (the wall clock in microseconds, increasing)
/// and fresh random bytes.
fn poke_nonce(e: &mut Exchange) -> Option<Nonce> {
    let n = fresh_nonce(e)?;
    e.poke_seq = auth::next_sequence(e.poke_seq, wall_ms().saturating_mul(1000));
    let mut random = [0u8; NONCE_BYTES - 8];
    random.copy_from_slice(&n.0[8..]);
    Some(Nonce::sequenced(e.poke_seq, random))
}

fn fresh_nonce(e: &mut Exchange) -> Option<Nonce> {
    let n = nonce::fresh();
    if n.is_none() && !core::mem::replace(&mut e.warned_nonce, true) {
        ngx::ngx_log_error!(
            nginx_sys::NGX_LOG_ALERT,
            ngx_cycle_log().as_ptr(),
            "circuit breaker fleet: getrandom() failed, nothing is sent to peers"
        );
    }
    n
}

/// Starts the pulls and pokes a step decided, each its own background task.
fn send(ex: &Rc<RefCell<Exchange>>, sends: Sends) {
    for (i, nonce) in sends.pulls {
        let ex2 = Rc::clone(ex);
        net::spawn(async move {
            let req = request(&ex2, i, Kind::Pull, &nonce);
            let answer = match req {
                // A message of the largest size, and its seal.
                Some(r) => r.send(wire::MAX_MESSAGE_BYTES + auth::SEAL_BYTES).await,
                None => Answer::Failed(Error::InvalidRequest("request")),
            };
            let mut e = ex2.borrow_mut();
            e.in_flight -= 1;
            e.links[i].busy = false;
            e.done.push((i, nonce, answer));
            drop(e);
            wake::kick();
        })
        .detach();
    }
    for (i, nonce) in sends.pokes {
        let ex2 = Rc::clone(ex);
        net::spawn(async move {
            if let Some(r) = request(&ex2, i, Kind::Poke, &nonce) {
                // A poke that fails costs nothing: the peer's rounds still come.
                let _ = r.send(0).await;
            }
            ex2.borrow_mut().pokes_in_flight -= 1;
        })
        .detach();
    }
}

/// One request to a peer, owning what it needs while it runs (the exchange is not borrowed
/// across a wait).
struct Outgoing {
    peer: Peer,
    host: String,
    target: String,
    header: String,
    timeout: Duration,
    #[cfg(ngx_ssl)]
    tls: Option<Rc<net::Tls>>,
    https: bool,
}

fn request(ex: &Rc<RefCell<Exchange>>, i: usize, kind: Kind, nonce: &Nonce) -> Option<Outgoing> {
    let e = ex.borrow();
    let l = e.links.get(i)?;
    let timeout = match kind {
        // Each pull must answer within half the interval.
        Kind::Pull => e.spec.interval_ms / 2,
        Kind::Poke => e.spec.interval_ms / 4,
    };
    Some(Outgoing {
        peer: l.peer.clone(),
        host: l.host.clone(),
        target: e.spec.target.clone(),
        header: e.key.request(kind, &e.spec.id, nonce),
        timeout: Duration::from_millis(timeout.max(50)),
        #[cfg(ngx_ssl)]
        tls: l.tls.clone(),
        https: l.https,
    })
}

impl Outgoing {
    /// The body of a `200` (at most `max_body`; a body cut there is refused by its MAC), or
    /// why there is none.
    async fn send(&self, max_body: usize) -> Answer {
        let headers = [(HEADER, self.header.as_str())];
        let req = Request {
            method: "GET",
            target: &self.target,
            host: &self.host,
            headers: &headers,
            body: &[],
        };
        let opts = Options::new(self.timeout)
            .max_body(max_body)
            .action("exchanging circuit breaker fleet opinions");
        #[cfg(ngx_ssl)]
        let opts = match &self.tls {
            Some(t) => opts.tls(t),
            None => opts,
        };
        #[cfg(ngx_ssl)]
        let unreachable = self.https && self.tls.is_none();
        #[cfg(not(ngx_ssl))]
        let unreachable = self.https;
        if unreachable {
            return Answer::Failed(Error::Tls);
        }
        match net::fetch(&self.peer, &req, &opts).await {
            Ok(r) if r.status == 200 => Answer::Body(r.body),
            Ok(r) => Answer::Status(r.status),
            Err(e) => Answer::Failed(e),
        }
    }
}
