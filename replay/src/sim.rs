//! The replay proper: every request of the log through the module's own breaker, once per
//! setting of the sweep, in one pass.
//!
//! nginx writes a line when its request ends, so lines come in order of end time (nearly:
//! workers interleave), while the module asks the breaker when a request *starts*
//! (`$msec - $request_time`) and records its outcome when it ends. Each line becomes two
//! events, an admission at its start and a record at its end, held in a reorder buffer and
//! run in time order once the log has moved `horizon` past them (ties in log order, a
//! request's admission before its own record). An event older than what already ran (a
//! request longer than the horizon, or a line that came that late) runs at once, its time
//! clamped, and is counted as late. The buffer holds `horizon` worth of requests, at most
//! `max_waiting` of them (past that its oldest events run early), so memory does not grow
//! with the log: a ring of one list per millisecond (a binary heap of the same events spent
//! 60 % of the replay's time sifting them).
//!
//! Nor with the names in it, which a client may choose (`proxy_pass http://$host`): at most
//! `max_breakers` breakers are made, a line of another one is counted and dropped, and as
//! many names without a breaker are remembered (others are looked up again each time).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;
use std::rc::Rc;

use circuit_breaker_core::breaker::jitter::JitterSource;
use circuit_breaker_core::breaker::{
    classify, Admission, Attempt, Breaker, BreakerConfig, Ending, OwnedBreaker, Ticket, Transition,
};
use circuit_breaker_core::class::{Class, Presence};
use circuit_breaker_core::retry_budget::RetryBudget;
use circuit_breaker_core::session::{self, Judged, Logged as Session};
use circuit_breaker_core::snapshot::State;

use crate::conf::Specs;
use crate::line::{Line, Retries};
use crate::pool::Pools;
use crate::stats::Stats;
use crate::timeline::Timeline;

/// One breaker under one setting.
pub struct Run {
    ob: OwnedBreaker,
    /// The configuration as given (the core runs it in dry run, to see what it would refuse).
    pub cfg: BreakerConfig,
    rng: u64,
    /// The live instance's seed and the breaker's upstream and route: its live draws.
    jitter: Option<([u8; 32], Box<str>, Box<str>)>,
    /// What it did.
    pub stats: Stats,
    /// Its per-second series, when asked for.
    pub timeline: Option<Timeline>,
    /// A stream breaker's `first_byte` (0: off).
    first_byte_ms: u32,
    /// A stream breaker's origin's last answer to a session this setting let through: as the
    /// zone keeps it, for `session::silence_counts`.
    answered_ms: u64,
}

impl Run {
    fn new(
        cfg: BreakerConfig,
        now_ms: u64,
        seed: u64,
        jitter: Option<([u8; 32], Box<str>, Box<str>)>,
    ) -> Run {
        let mut core_cfg = cfg;
        core_cfg.dry_run = true;
        Run {
            ob: OwnedBreaker::new(core_cfg, now_ms),
            jitter,
            cfg,
            rng: seed | 1,
            stats: Stats::default(),
            timeline: None,
            first_byte_ms: 0,
            answered_ms: 0,
        }
    }

    /// The jitter and the ramp's draws, fixed by the seed.
    fn rnd(&mut self) -> u32 {
        crate::draws::splitmix(&mut self.rng)
    }

    /// The breaker, drawing as the live one did when the seed is known.
    fn breaker(&mut self) -> Breaker<'_> {
        let b = self.ob.breaker();
        match &self.jitter {
            Some((seed, upstream, route)) => b.with_jitter(JitterSource {
                seed: *seed,
                upstream: upstream.as_bytes(),
                route: route.as_bytes(),
            }),
            None => b,
        }
    }

    /// The state now.
    pub fn state(&self) -> State {
        self.ob.hdr.state()
    }
}

/// A transition as the module logs it, with the log line of the request that made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logged {
    /// 1-based line number in its file.
    pub line: u64,
    /// When (the event's time, ms since the epoch).
    pub at_ms: u64,
    /// `"api/default"`, as the module's log lines write it ([`shown`]).
    pub breaker: String,
    /// What changed, and why.
    pub transition: Transition,
}

impl Logged {
    /// `circuit breaker "api/default" opened: …`, the module's own words.
    pub fn message(&self) -> String {
        let verb = match self.transition.to {
            State::Open => "opened",
            State::HalfOpen => "half-opened",
            State::Closed => "closed",
        };
        format!(
            "circuit breaker {} {}: {}",
            self.breaker,
            verb,
            self.transition.why()
        )
    }
}

/// A breaker's name as the module's log lines write it: `"api/default"`, or for a key's
/// breaker (`circuit_breaker_key`, whose name holds a `$`) `"$origin" key "10.0.0.1:80"`.
pub fn shown(upstream: &str, route: &str) -> String {
    if upstream.contains('$') {
        format!("\"{upstream}\" key \"{route}\"")
    } else {
        format!("\"{upstream}/{route}\"")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    at_ms: u64,
    /// Twice the line's sequence number, plus one for its record: log order on ties, and a
    /// request's admission before its own record.
    seq: u64,
    entry: u32,
}

/// A request in the reorder buffer, waiting for its admission or its end.
#[derive(Clone, Copy, Debug)]
struct Buffered {
    breaker: u32,
    attempt: Attempt,
    /// Attempts in all (its earlier ones, when more than one, are in `Replay::retried`).
    tries: u32,
    line: u64,
    /// A live breaker turned it away: no outcome to record.
    refused_live: bool,
    /// Its class (`$circuit_breaker_class`), when the log says one.
    class: Option<Class>,
    /// A stream session: what nginx logged of it, judged by each setting at its own instant.
    session: Option<Session>,
    /// When it started and ended (a session's instants count from its last try's start).
    start: u64,
    end: u64,
    /// Its record events not run yet: a session's settings may judge it at other instants.
    pending: u32,
}

/// What a request was told, per setting.
#[derive(Clone, Copy, Debug)]
struct Told {
    ticket: Ticket,
    refused: bool,
}

/// The end of a list in the wheel.
const NIL: u32 = u32::MAX;

const UNTOLD: Told = Told {
    ticket: Ticket::Normal,
    refused: false,
};

/// What the log says of one class's requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveClass {
    /// Requests replayed.
    pub requests: u64,
    /// Of which a live breaker turned away (open, half-open, a ramp, the limit).
    pub refused_live: u64,
    /// Of which the live adaptive limit shed (`limited`).
    pub limited_live: u64,
}

/// Line counts of the whole replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Lines read.
    pub lines: u64,
    /// Lines that did not parse.
    pub bad: u64,
    /// Requests with no upstream attempt.
    pub no_attempt: u64,
    /// Requests of an upstream with no breaker configured.
    pub no_breaker: u64,
    /// Requests replayed.
    pub replayed: u64,
    /// Of which, requests a live breaker had turned away.
    pub refused_live: u64,
    /// Requests replayed at the module's own times (`$circuit_breaker_msec`).
    pub module_clock: u64,
    /// Events that came after later ones had run (clamped to their time).
    pub late: u64,
    /// Lines longer than `--max-line`, not replayed (counted by the reader).
    pub too_long: u64,
    /// Per class (`Class::index`), of the requests replayed whose line names one.
    pub classes: [LiveClass; 3],
    /// Lines of a breaker past the first `max_breakers`, not replayed.
    pub over_max_breakers: u64,
    /// Events run before the log had moved the horizon past them: the buffer was full.
    pub early: u64,
    /// Events run in all (each request's admission and record), of which `late` were late.
    pub events: u64,
}

/// The default `--max-breakers`: far more breakers than a configuration has, few enough that
/// their memory (which grows with their window and the sweep's settings) is not the log's to
/// choose.
pub const DEFAULT_MAX_BREAKERS: usize = 10_000;

/// Requests the reorder buffer holds at most: `--reorder` worth at thousands of requests a
/// second; a log that crowds more into its horizon (all at one time, say) has its oldest run
/// early rather than all of it held.
pub const MAX_WAITING: usize = 1 << 17;

/// What a line's (upstream, route) is to the replay.
enum Found {
    Breaker(u32),
    NoBreaker,
    OverCap,
}

/// In `Replay::index`: a name without a breaker.
const NO_BREAKER: u32 = u32::MAX;

/// A stream breaker's name in the report and `--json`: apart from an http upstream of the same
/// name (whose names hold a `/`).
pub fn stream_key(name: &str) -> String {
    format!("stream {name}")
}

/// When a session's last try began, on the replay's clock: it ended with the session, its
/// length logged; else the session's start (its earlier tries and waits not known).
fn try_start(s: &Session, start: u64, end: u64) -> u64 {
    s.try_ms.map_or(start, |t| end.saturating_sub(t).max(start))
}

/// How a setting with this `first_byte` judges a session, and when: the instant (on the
/// replay's clock) no later than the session's end.
fn judged_at(s: &Session, start: u64, end: u64, first_byte_ms: u32) -> (u64, Judged) {
    let j = session::logged(s, first_byte_ms);
    let at = match j {
        // Its instants count from the last try's start, as nginx times that try.
        Judged::Answered { at_ms, .. } | Judged::Silent { at_ms, .. } => {
            try_start(s, start, end).saturating_add(at_ms).min(end)
        }
        Judged::Ended(_) | Judged::Nothing => end,
    };
    (at, j)
}

/// The replay over a set of settings.
pub struct Replay {
    specs: Specs,
    sets: Vec<Vec<(String, String)>>,
    seed: u64,
    /// The live instance's jitter seed (`circuit_breaker_jitter_key`), if given.
    jitter_seed: Option<[u8; 32]>,
    /// The wall clock minus the replay's, as of the last line that logged both: the
    /// module's clock when the log has `$circuit_breaker_msec`, else 0 (the log's own).
    pub wall_offset: i64,
    /// The wall-clock time of the first event, for `--transitions`.
    first_wall: Option<u64>,
    /// Whether the log has shown the module's clock.
    module_clock: bool,
    horizon_ms: u64,
    key: String,
    /// Each http name seen (`upstream/route`): its breaker's index, or `NO_BREAKER`.
    index: HashMap<Rc<str>, u32, BuildHasherDefault<Fnv>>,
    /// The same of each stream upstream, by its name alone: a map of its own, as a key of
    /// the other could be any name (http's `stream a`, route `b`, is stream's `a/b` prefixed).
    stream_index: HashMap<Rc<str>, u32, BuildHasherDefault<Fnv>>,
    /// Breaker names, `upstream/route`, by index.
    pub names: Vec<Rc<str>>,
    /// The same as the module's log lines write them (see [`shown`]), by index.
    pub shown: Vec<Rc<str>>,
    /// Whether each is a stream upstream's breaker, by index.
    pub stream: Vec<bool>,
    /// Per breaker, per setting.
    pub runs: Vec<Vec<Run>>,
    /// Per breaker: the classes of its requests seen lately (a half-open probe is left to a
    /// request of a lower class).
    presence: Vec<Presence>,
    /// At most this many breakers, and as many names without one remembered.
    pub max_breakers: usize,
    /// At most this many requests in the reorder buffer.
    pub max_waiting: usize,
    /// Each breaker's upstream (an index into `budgets`).
    upstream_of: Vec<u32>,
    upstreams: HashMap<String, u32, BuildHasherDefault<Fnv>>,
    /// Per upstream, per setting, its retry budget (`None`: `retry_budget=off`).
    budgets: Vec<Vec<Option<RetryBudget>>>,
    /// The reorder buffer: `wheel[ms % len]` heads the list (in `nodes`) of the events of
    /// millisecond `ms`, for `ms` from `cursor` on (and below `cursor + len`). Lists rather
    /// than a `Vec` per millisecond, whose capacities would creep up with the busiest
    /// millisecond each had seen: the nodes are as many as the events waiting, reused.
    wheel: Vec<u32>,
    nodes: Vec<(Event, u32)>,
    free_nodes: Vec<u32>,
    scratch: Vec<Event>,
    /// The first millisecond not yet run.
    cursor: u64,
    /// Events in the wheel.
    queued: usize,
    buffered: Vec<Buffered>,
    retried: Vec<Retries>,
    told: Vec<Told>,
    started: Vec<bool>,
    free: Vec<u32>,
    watermark: u64,
    newest: u64,
    seq: u64,
    /// The record instants of the line being fed (kept for its capacity).
    ends: Vec<u64>,
    /// Line counts.
    pub counts: Counts,
    /// Errors writing the timelines.
    pub errors: Vec<String>,
    timelines: Option<std::path::PathBuf>,
    /// The first setting's transitions go here as they happen.
    pub transitions: Option<Box<dyn Write>>,
    /// The pools' servers (`circuit_breaker_eject`), under the configuration as given.
    pub pools: Pools,
}

impl Replay {
    /// A replay of `specs` under each of `sets` (one empty set: the specs as given).
    pub fn new(specs: Specs, sets: Vec<Vec<(String, String)>>, seed: u64, horizon_ms: u64) -> Self {
        // Every spec was checked before the log is read: a pool's cannot fail here.
        let pools = Pools::new(&specs, seed).unwrap_or_default();
        Replay {
            pools,
            specs,
            sets,
            seed,
            jitter_seed: None,
            wall_offset: 0,
            first_wall: None,
            module_clock: false,
            horizon_ms,
            key: String::new(),
            index: HashMap::default(),
            stream_index: HashMap::default(),
            names: Vec::new(),
            shown: Vec::new(),
            presence: Vec::new(),
            stream: Vec::new(),
            runs: Vec::new(),
            max_breakers: DEFAULT_MAX_BREAKERS,
            max_waiting: MAX_WAITING,
            upstream_of: Vec::new(),
            upstreams: HashMap::default(),
            budgets: Vec::new(),
            wheel: vec![NIL; (horizon_ms + 2).next_power_of_two() as usize],
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            scratch: Vec::new(),
            cursor: 0,
            queued: 0,
            buffered: Vec::new(),
            retried: Vec::new(),
            told: Vec::new(),
            started: Vec::new(),
            free: Vec::new(),
            watermark: 0,
            newest: 0,
            seq: 0,
            ends: Vec::new(),
            counts: Counts::default(),
            errors: Vec::new(),
            timelines: None,
            transitions: None,
        }
    }

    /// Draws cooldowns and probe spacings as the live instance whose jitter seed this is.
    pub fn set_jitter_seed(&mut self, seed: [u8; 32]) {
        self.jitter_seed = Some(seed);
    }

    /// Whether the draws are the live instance's (a jitter seed was given).
    pub fn keyed(&self) -> bool {
        self.jitter_seed.is_some()
    }

    /// Writes a per-second timeline of each breaker under the first setting into `dir`
    /// (`UPSTREAM_ROUTE.csv`).
    pub fn keep_timelines(&mut self, dir: std::path::PathBuf) {
        self.timelines = Some(dir);
    }

    /// The settings, as given.
    pub fn sets(&self) -> &[Vec<(String, String)>] {
        &self.sets
    }

    /// Requests in the reorder buffer.
    pub fn waiting(&self) -> usize {
        self.buffered.len() - self.free.len()
    }

    fn breaker(&mut self, l: &Line<'_>, now_ms: u64) -> Result<Found, String> {
        let stream = l.session.is_some();
        self.key.clear();
        if stream {
            self.key.push_str("stream ");
            self.key.push_str(l.upstream);
        } else {
            self.key.push_str(l.upstream);
            self.key.push('/');
            self.key.push_str(l.route);
        }
        let (index, key) = match stream {
            true => (&mut self.stream_index, l.upstream),
            false => (&mut self.index, self.key.as_str()),
        };
        if let Some(&i) = index.get(key) {
            return Ok(match i {
                NO_BREAKER => Found::NoBreaker,
                i => Found::Breaker(i),
            });
        }
        let spec = if stream {
            self.specs.find_stream(l.upstream)
        } else {
            self.specs.find(l.upstream, l.route)
        };
        let Some(spec) = spec else {
            let seen = self.index.len() + self.stream_index.len();
            if seen - self.names.len() < self.max_breakers {
                let (index, key) = match stream {
                    true => (&mut self.stream_index, l.upstream),
                    false => (&mut self.index, self.key.as_str()),
                };
                index.insert(Rc::from(key), NO_BREAKER);
            }
            return Ok(Found::NoBreaker);
        };
        if self.names.len() >= self.max_breakers {
            return Ok(Found::OverCap);
        }
        let i = self.names.len() as u32;
        let seed = self.seed ^ fnv(self.key.as_bytes());
        // The stream zone takes no jitter key: its draws are random, as the replay's.
        let jitter = self
            .jitter_seed
            .filter(|_| !stream)
            .map(|s| (s, Box::from(l.upstream), Box::from(l.route)));
        let mut runs = Vec::with_capacity(self.sets.len());
        for set in &self.sets {
            let mut run = if stream {
                let p = spec.stream_params(set)?;
                let mut run = Run::new(p.cfg, now_ms, seed, None);
                run.first_byte_ms = p.first_byte_ms;
                run
            } else {
                Run::new(spec.config(set)?, now_ms, seed, jitter.clone())
            };
            if let (Some(dir), true) = (&self.timelines, runs.is_empty()) {
                run.timeline = Some(Timeline::create(&dir.join(timeline_file(&self.key)))?);
            }
            runs.push(run);
        }
        let up = match self.upstreams.get(l.upstream) {
            // A stream upstream has one breaker and no retry budget: an entry of its own, apart
            // from an http upstream of the same name.
            _ if stream => {
                self.budgets.push(vec![None; self.sets.len()]);
                self.budgets.len() as u32 - 1
            }
            Some(&u) => u,
            None => {
                let u = self.budgets.len() as u32;
                // The upstream's own breaker's parameters hold its budget, as in the module.
                let mut budgets = Vec::with_capacity(self.sets.len());
                for set in &self.sets {
                    let retry = match self.specs.find(l.upstream, "default") {
                        Some(spec) => spec.params(set)?.1,
                        None => None,
                    };
                    budgets.push(retry.map(|cfg| RetryBudget::new(cfg, now_ms)));
                }
                self.budgets.push(budgets);
                self.upstreams.insert(l.upstream.to_owned(), u);
                u
            }
        };
        self.upstream_of.push(up);
        let name: Rc<str> = Rc::from(self.key.as_str());
        match stream {
            true => self.stream_index.insert(Rc::from(l.upstream), i),
            false => self.index.insert(name.clone(), i),
        };
        self.names.push(name);
        self.shown.push(Rc::from(if stream {
            format!("\"{}\"", l.upstream)
        } else {
            shown(l.upstream, l.route)
        }));
        self.stream.push(stream);
        self.runs.push(runs);
        self.presence.push(Presence::default());
        Ok(Found::Breaker(i))
    }

    /// Feeds one parsed line (number `line` of its file).
    pub fn feed(&mut self, l: &Line<'_>, line: u64) -> Result<(), String> {
        let attempt = match l.attempt {
            Some(a) => a,
            // Never sent: the replayed breaker decides again, with no outcome to record.
            None if l.refused => Attempt::ended(Ending::NoVerdict, 0),
            None => {
                self.counts.no_attempt += 1;
                return Ok(());
            }
        };
        let (start, end) = self.times(l);
        if !self.pools.is_empty() {
            // A pool's moves are written as lines come, before the reorder buffer runs
            // their events: the replay starts at the first line's start.
            if self.first_wall.is_none() {
                self.first_wall = Some(self.wall(start));
            }
            let (wall, since) = self.stamp(end);
            let moves = self.pools.feed(l, line, (start, end));
            if let Some(w) = self.transitions.as_mut() {
                for m in moves {
                    write_transition(w.as_mut(), m.line, (wall, since), &m.message());
                }
            }
        }
        let b = match self.breaker(l, start)? {
            Found::Breaker(b) => b,
            Found::NoBreaker => {
                self.counts.no_breaker += 1;
                return Ok(());
            }
            Found::OverCap => {
                self.counts.over_max_breakers += 1;
                return Ok(());
            }
        };
        self.counts.replayed += 1;
        self.counts.refused_live += u64::from(l.refused);
        if let Some(c) = l.class {
            let k = &mut self.counts.classes[c.index()];
            k.requests += 1;
            k.refused_live += u64::from(l.refused);
            k.limited_live += u64::from(l.limited);
        }
        self.counts.module_clock += u64::from(l.judged.is_some());
        let n = self.sets.len();
        while self.free.is_empty() && self.buffered.len() >= self.max_waiting && self.queued > 0 {
            // Full: its oldest millisecond runs now, until a request's end frees an entry.
            let queued = self.queued;
            self.run_until(self.cursor + 1);
            self.counts.early += (queued - self.queued) as u64;
        }
        let entry = match self.free.pop() {
            Some(s) => s,
            None => {
                let s = self.buffered.len() as u32;
                self.buffered.push(Buffered {
                    breaker: 0,
                    attempt,
                    tries: 0,
                    line: 0,
                    refused_live: false,
                    class: None,
                    session: None,
                    start: 0,
                    end: 0,
                    pending: 0,
                });
                self.retried.push(Retries::default());
                self.started.push(false);
                self.told.resize(self.told.len() + n, UNTOLD);
                s
            }
        };
        // A session's settings judge it at their own instants (its first byte, their bounds
        // running out, its end): one record event for each distinct one.
        let mut ends = std::mem::take(&mut self.ends);
        ends.clear();
        match &l.session {
            Some(sess) if !l.refused => {
                ends.extend(
                    self.runs[b as usize]
                        .iter()
                        .map(|run| judged_at(sess, start, end, run.first_byte_ms).0),
                );
                ends.sort_unstable();
                ends.dedup();
            }
            _ => ends.push(end),
        }
        self.buffered[entry as usize] = Buffered {
            breaker: b,
            attempt,
            tries: l.retries.tries,
            line,
            refused_live: l.refused,
            // A key's breaker (`circuit_breaker_key`) takes no class, live.
            class: l.class.filter(|_| !l.upstream.contains('$')),
            session: l.session,
            start,
            end,
            pending: ends.len() as u32,
        };
        if l.retries.tries > 1 {
            // Apart: most requests make one attempt, and the entry stays small.
            self.retried[entry as usize] = l.retries;
        }
        self.started[entry as usize] = false;
        self.newest = self.newest.max(end);
        self.run_until(self.newest.saturating_sub(self.horizon_ms));
        let seq = self.seq;
        self.seq += 2;
        let events = std::iter::once((start, seq)).chain(ends.iter().map(|&at| (at, seq + 1)));
        for (at_ms, seq) in events {
            let e = Event { at_ms, seq, entry };
            if at_ms < self.cursor {
                // Behind what already ran: now.
                self.run(e);
            } else {
                let len = self.wheel.len() as u64;
                let head = &mut self.wheel[(at_ms % len) as usize];
                let node = match self.free_nodes.pop() {
                    Some(n) => {
                        self.nodes[n as usize] = (e, *head);
                        n
                    }
                    None => {
                        self.nodes.push((e, *head));
                        (self.nodes.len() - 1) as u32
                    }
                };
                *head = node;
                self.queued += 1;
            }
        }
        self.ends = ends;
        Ok(())
    }

    /// When the breaker judged the request and recorded its outcome, on the replay's clock:
    /// the module's (`$circuit_breaker_msec`) once the log has shown it — a line without it
    /// is moved onto it by the last offset seen — else the log's wall clock (`$msec -
    /// $request_time` and `$msec`).
    fn times(&mut self, l: &Line<'_>) -> (u64, u64) {
        let wall_start = l.end_ms.saturating_sub(l.request_ms);
        if let Some((judged, recorded)) = l.judged {
            // The wall clock at the record is the line's end, nearly (the log phase follows).
            self.wall_offset = (l.end_ms as i64).wrapping_sub(recorded as i64);
            self.module_clock = true;
            return (judged, recorded);
        }
        let shift = |t: u64| (t as i64 - self.wall_offset).max(0) as u64;
        (shift(wall_start), shift(l.end_ms))
    }

    /// The wall-clock time of `now` on the replay's clock (milliseconds since the epoch).
    fn wall(&self, now: u64) -> u64 {
        (now as i64 + self.wall_offset).max(0) as u64
    }

    /// Runs every queued event before `until`, in order.
    fn run_until(&mut self, until: u64) {
        if self.queued == 0 {
            self.cursor = self.cursor.max(until);
            return;
        }
        let len = self.wheel.len() as u64;
        let mut bucket = std::mem::take(&mut self.scratch);
        while self.cursor < until && self.queued > 0 {
            let i = (self.cursor % len) as usize;
            let mut n = std::mem::replace(&mut self.wheel[i], NIL);
            while n != NIL {
                let (e, next) = self.nodes[n as usize];
                bucket.push(e);
                self.free_nodes.push(n);
                n = next;
            }
            if !bucket.is_empty() {
                // Log order within the millisecond (the list is newest first, and a late
                // line's event may come after later ones).
                bucket.sort_unstable();
                self.queued -= bucket.len();
                for e in bucket.drain(..) {
                    self.run(e);
                }
            }
            self.cursor += 1;
        }
        self.scratch = bucket;
        self.cursor = self.cursor.max(until);
    }

    /// Runs what is left in the buffer and closes the open episodes at the last event.
    pub fn finish(&mut self) {
        self.run_until(u64::MAX);
        let end = self.watermark;
        for runs in self.runs.iter_mut() {
            for run in runs {
                run.stats.end_episode(end);
                if let Some(e) = run.timeline.as_mut().and_then(Timeline::flush) {
                    self.errors.push(e);
                }
            }
        }
    }

    fn run(&mut self, e: Event) {
        if self.first_wall.is_none() {
            self.first_wall = Some(self.wall(e.at_ms));
        }
        self.counts.events += 1;
        let now = if e.at_ms < self.watermark {
            self.counts.late += 1;
            self.watermark
        } else {
            self.watermark = e.at_ms;
            e.at_ms
        };
        let entry = e.entry as usize;
        if e.seq & 1 == 0 {
            self.admit(entry, now);
        } else {
            if !self.started[entry] {
                self.admit(entry, now);
            }
            self.record(entry, now, e.at_ms);
            let p = &mut self.buffered[entry];
            p.pending = p.pending.saturating_sub(1);
            if p.pending == 0 {
                self.free.push(e.entry);
            }
        }
    }

    fn admit(&mut self, entry: usize, now: u64) {
        let stamp = self.stamp(now);
        self.started[entry] = true;
        let p = self.buffered[entry];
        let n = self.sets.len();
        let runs = &mut self.runs[p.breaker as usize];
        let presence = &mut self.presence[p.breaker as usize];
        // As the module: a request of a class leaves the probe to one of a lower class seen
        // lately (one instance here, where live each worker sees its own), unless the probe
        // is overdue; closed, the ramp draws as the class does.
        let leaves_probe = p.class.is_some_and(|c| presence.lower_present(c, now));
        if let Some(c) = p.class {
            presence.note(c, now);
        }
        for (v, run) in runs.iter_mut().enumerate() {
            let rnd = run.rnd();
            let d = {
                let mut b = run.breaker();
                let may_probe = !leaves_probe || b.probe_overdue(now);
                let draw = b.draw_for(rnd, p.class);
                b.admit(now, draw, 1, &|_| true, may_probe)
            };
            let told = match d.admission {
                Admission::Pass { would_reject } => Told {
                    ticket: Ticket::Normal,
                    refused: would_reject,
                },
                Admission::Probe(ticket) => {
                    run.stats.probes += 1;
                    Told {
                        ticket,
                        refused: false,
                    }
                }
                Admission::Reject { .. } | Admission::Recovering { .. } => Told {
                    ticket: Ticket::Normal,
                    refused: true,
                },
            };
            let mut told = told;
            if run.cfg.active && told.refused {
                // Active probes (`probe_uri`): when one is due, this request's outcome at the
                // origin stands for it (the log has no probe of its own).
                let rnd = run.rnd();
                if let Some(ticket) = run.breaker().active_probe(now, rnd, 1, &|_| true) {
                    run.stats.probes += 1;
                    told.ticket = ticket;
                }
            }
            self.told[entry * n + v] = told;
            if let Some(t) = d.transition {
                note(
                    &mut self.transitions,
                    v,
                    run,
                    &self.shown[p.breaker as usize],
                    p.line,
                    now,
                    stamp,
                    t,
                );
            }
        }
    }

    /// When `now` was, for `--transitions`: its wall-clock time and seconds since the first
    /// event.
    fn stamp(&self, now: u64) -> (u64, u64) {
        let wall = self.wall(now);
        (wall, wall.saturating_sub(self.first_wall.unwrap_or(wall)))
    }

    /// Records the outcome of the request in `entry` under each setting whose record instant
    /// is `at` (a session's may differ by setting; a request's is its end).
    fn record(&mut self, entry: usize, now: u64, at: u64) {
        let stamp = self.stamp(now);
        let p = self.buffered[entry];
        let n = self.sets.len();
        let runs = &mut self.runs[p.breaker as usize];
        let budgets = &mut self.budgets[self.upstream_of[p.breaker as usize] as usize];
        let retried = if p.tries > 1 {
            self.retried[entry]
        } else {
            Retries::default()
        };
        for (v, run) in runs.iter_mut().enumerate() {
            let told = self.told[entry * n + v];
            if p.refused_live {
                // Never at the origin: nothing to record, whatever this breaker decided; a
                // probe it would have sent is given back without a verdict.
                let s = &mut run.stats;
                s.refused_live += 1;
                if let (true, Some(c)) = (told.refused, p.class) {
                    s.classes[c.index()].refused += 1;
                }
                if told.refused {
                    s.refused += 1;
                    s.refused_unjudged += 1;
                } else {
                    s.refused_live_let_through += 1;
                }
                if let Some(t) = run.timeline.as_mut() {
                    t.count(now, false, false, told.refused);
                }
                if told.ticket != Ticket::Normal {
                    run.breaker().release(now, told.ticket);
                }
                continue;
            }
            // A breaker that refuses never sees the outcome (but that of the active probe it
            // stands for); one in dry run sends the request, as the module does.
            let sent = !told.refused || run.cfg.dry_run || told.ticket != Ticket::Normal;
            let last = match &p.session {
                None => p.attempt,
                Some(sess) => {
                    let (when, judged) = judged_at(sess, p.start, p.end, run.first_byte_ms);
                    if when != at {
                        continue;
                    }
                    let from = try_start(sess, p.start, p.end);
                    session_attempt(judged, from, told, sent, run, now)
                }
            };
            let attempt = if sent {
                outcome(last, &retried, told, run, budgets[v].as_mut(), p.class, now)
            } else {
                last
            };
            let verdict = classify(&attempt, &run.cfg);
            let s = &mut run.stats;
            s.requests += 1;
            if let Some(c) = p.class {
                let k = &mut s.classes[c.index()];
                k.requests += 1;
                k.refused += u64::from(told.refused);
            }
            s.bad += u64::from(verdict.is_bad());
            if let Some(t) = run.timeline.as_mut() {
                t.count(now, verdict.is_bad(), verdict.slow, told.refused);
            }
            if told.refused {
                s.refused += 1;
                match (verdict.counted && !verdict.tls, verdict.is_bad()) {
                    (false, _) => s.refused_unjudged += 1,
                    (true, true) => s.failures_spared += 1,
                    (true, false) => s.successes_lost += 1,
                }
            }
            if !sent {
                continue;
            }
            let rnd = run.rnd();
            let r = run.breaker().record(now, rnd, told.ticket, &attempt, true);
            if let Some(t) = r.transition {
                note(
                    &mut self.transitions,
                    v,
                    run,
                    &self.shown[p.breaker as usize],
                    p.line,
                    now,
                    stamp,
                    t,
                );
            }
        }
    }
}

/// What the client of a request sent to the origin gets under this setting: the log's last
/// attempt, unless a retry it shows would not have been made — denied by the upstream's
/// retry budget, or none at all while the breaker is not closed (unless in dry run) or for
/// its probe, as in the module. The budget counts the request's first attempt and is asked
/// for each retry, at the request's end (the log says when requests end, not attempts).
fn outcome(
    last: Attempt,
    r: &Retries,
    told: Told,
    run: &mut Run,
    budget: Option<&mut RetryBudget>,
    class: Option<Class>,
    now: u64,
) -> Attempt {
    let (first, before_last) = match (r.first, r.before_last) {
        (Some(f), Some(b)) if r.tries > 1 => (f, b),
        _ => {
            if let Some(b) = budget {
                b.record_first(now);
            }
            return last;
        }
    };
    let s = &mut run.stats;
    s.retries += u64::from(r.tries - 1);
    let rescued = !classify(&last, &run.cfg).is_bad();
    let cut = |s: &mut Stats, to: Attempt| {
        s.retries_denied += 1;
        if let Some(c) = class {
            s.classes[c.index()].retries_denied += 1;
        }
        if rescued && classify(&to, &run.cfg).is_bad() {
            s.rescues_lost += 1;
        }
        to
    };
    let probe = told.ticket != Ticket::Normal;
    if probe || (!run.cfg.dry_run && run.ob.hdr.state() != State::Closed) {
        if let Some(b) = budget {
            b.record_first(now);
        }
        return cut(s, first);
    }
    let Some(b) = budget else {
        return last;
    };
    b.record_first(now);
    for k in 1..r.tries {
        if !b.take_retry_of(now, class) {
            return cut(&mut run.stats, if k == 1 { first } else { before_last });
        }
    }
    last
}

/// What a session judged so says under a setting, as the module settles it: an answer is
/// noted as the origin's last (when the session reached it), and silence counts only when
/// the origin answered no session since the client's bytes — and never against the probe,
/// which is given back. `from`: the last try's start, whence its instants count.
fn session_attempt(
    judged: Judged,
    from: u64,
    told: Told,
    sent: bool,
    run: &mut Run,
    now: u64,
) -> Attempt {
    let nothing = Attempt::ended(Ending::NoVerdict, 0);
    match judged {
        Judged::Answered { attempt, .. } => {
            if sent {
                run.answered_ms = run.answered_ms.max(now);
            }
            attempt
        }
        Judged::Silent {
            attempt, sent_ms, ..
        } => {
            let counts = session::silence_counts(run.answered_ms, from.saturating_add(sent_ms));
            if counts && told.ticket == Ticket::Normal {
                attempt
            } else {
                nothing
            }
        }
        Judged::Ended(attempt) => attempt,
        Judged::Nothing => nothing,
    }
}

#[allow(clippy::too_many_arguments)]
fn note(
    out: &mut Option<Box<dyn Write>>,
    setting: usize,
    run: &mut Run,
    name: &str,
    line: u64,
    now: u64,
    (wall, since): (u64, u64),
    t: Transition,
) {
    run.stats.transition(now, &t, run.cfg.max_open_ms);
    if let Some(tl) = run.timeline.as_mut() {
        tl.state(now, t.to);
    }
    if setting == 0 {
        if let Some(w) = out.as_mut() {
            let l = Logged {
                line,
                at_ms: wall,
                breaker: name.to_owned(),
                transition: t,
            };
            write_transition(w, l.line, (wall, since), &l.message());
        }
    }
}

/// One line of `--transitions`: `LINE TIME +SECONDS MESSAGE`.
fn write_transition(w: &mut dyn Write, line: u64, (wall, since): (u64, u64), message: &str) {
    // A transitions file that cannot be written is reported when it is flushed.
    let _ = writeln!(
        w,
        "{} {} +{}.{:03} {}",
        line,
        crate::clock::local_iso(wall),
        since / 1000,
        since % 1000,
        message
    );
}

/// A breaker's timeline file: its name with what a file name should not hold replaced, cut
/// short (with its hash, to keep it apart) when a file system might refuse its length.
fn timeline_file(key: &str) -> String {
    const MAX: usize = 200;
    let mut file: String = key
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' => c,
            _ => '_',
        })
        .collect();
    if file.len() > MAX {
        let hash = fnv(key.as_bytes());
        file.truncate(MAX);
        file = format!("{file}-{hash:016x}");
    }
    file + ".csv"
}

/// FNV-1a: a breaker's own seed from its name, the same on every run.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// FNV-1a as the names' hasher: short keys, hashed once a line (SipHash's guard against
/// chosen collisions buys nothing against one's own log).
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        self.0 = bytes
            .iter()
            .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn names_as_the_module_writes_them() {
        assert_eq!(shown("api", "default"), "\"api/default\"");
        assert_eq!(
            shown("$origin", "10.0.0.1:80"),
            "\"$origin\" key \"10.0.0.1:80\""
        );
        assert_eq!(
            shown("$scheme://$host", "a/b"),
            "\"$scheme://$host\" key \"a/b\""
        );
    }
}
