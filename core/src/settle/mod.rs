//! Settling an attempt's end: one pure step that takes an attempt classified once
//! ([`Classified`]) and everything the request holds (its tickets, whether nginx retries it,
//! what was recorded without the lock), records it where it belongs, and returns a [`Plan`]
//! of what the caller must do outside the zone: log a server's move and make the balancer
//! follow it, refuse or keep the retry, log the breaker's transition.
//!
//! The order is the request's story:
//! 1. **The server.** The attempt goes on its server's breaker (the pool's ejection), unless a
//!    success was recorded there without the lock.
//! 2. **The retry.** nginx retries only while the request's breaker is closed (`dry_run`: the
//!    budget alone refuses) and within the upstream's retry budget, which counts every first
//!    attempt. A retry that may be made keeps the attempt pending: the next attempt settles
//!    the request.
//! 3. **The request.** Its last attempt goes on its breaker, unless recorded without the lock.
//!    A bad one on a server of a pool is first put to the pool: ejection explains it (it
//!    stays out of the upstream's window), or the pool says the upstream may not open yet; the
//!    probe of the upstream that fails on a server that may go ejects that server at once.
//!
//! The zone is reached through a [`Ledger`], which the nginx shell implements over its locked
//! zone and tests over breakers of their own: the caller holds the zone's lock for the whole
//! settlement, so it is one step for every other worker.

use crate::breaker::{Breaker, BreakerConfig, Classified, Recorded, Ticket};
use crate::class::Class;
use crate::eject::{self, Explained, Move, Standing};
use crate::retry_budget::RetryBudget;
use crate::snapshot::State;

/// The breakers a settlement touches, under the zone's lock.
pub trait Ledger {
    /// Runs `f` on the request's breaker: with a probe ticket, the breaker that holds it.
    fn own<R>(&mut self, ticket: Ticket, f: impl FnOnce(&mut Breaker<'_>) -> R) -> Option<R>;
    /// Runs `f` on the breaker of the pool's server `index`.
    fn server<R>(&mut self, index: u16, f: impl FnOnce(&mut Breaker<'_>) -> R) -> Option<R>;
    /// The pool's servers.
    fn servers(&self) -> u16;
    /// The servers out now and the cap, as the zone says (the caller's view brought up to
    /// date first).
    fn pool(&mut self) -> eject::Pool;
    /// Runs `f` on the upstream's retry budget with the first attempts this worker counted
    /// without the lock since it last handed them over (their second and number), which `f`
    /// then owns.
    fn budget<R>(&mut self, f: impl FnOnce(&mut RetryBudget, Option<(u64, u32)>) -> R)
        -> Option<R>;
}

/// The attempt's server in its upstream's pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnServer {
    /// Its index in the pool.
    pub index: u16,
    /// The attempt's ticket on the server's breaker (a probe of an ejected server).
    pub ticket: Ticket,
    /// Recorded on the server's breaker without the lock already.
    pub recorded: bool,
}

/// How an attempt ended, for its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended<'a> {
    /// The attempt, classified by the upstream's classes.
    pub attempt: &'a Classified,
    /// The upstream's breaker configuration (the pool's rates are measured against it).
    pub upstream: &'a BreakerConfig,
    /// The request's breaker's name, as log lines and reasons give it.
    pub name: &'a str,
    /// When, on the zone's clock.
    pub now_ms: u64,
    /// The request's ticket on its breaker.
    pub ticket: Ticket,
    /// The attempt's server, when it went to one of a pool's.
    pub server: Option<OnServer>,
    /// nginx will retry it (`proxy_next_upstream`), unless told no.
    pub retry: bool,
    /// The breaker is in `dry_run`: it never refuses a retry, its budget still does.
    pub dry_run: bool,
    /// The request's outcome was recorded on its breaker without the lock.
    pub recorded: bool,
    /// The upstream has a retry budget.
    pub budget: bool,
    /// The request's first attempt is in the budget already.
    pub first_counted: bool,
    /// The request's class (`None`: classes not in use): the budget refuses lower classes'
    /// retries first.
    pub class: Option<Class>,
}

/// What becomes of the retry nginx asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// None was asked: this attempt is the request's last.
    Unasked,
    /// It may be made: the attempt waits, and the next one settles the request.
    Made,
    /// Refused (the breaker is not closed, or the budget is spent): the client gets this
    /// attempt, which settles the request now.
    Refused,
}

/// What the caller does outside the zone once the settlement is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Servers that left, rejoined or stayed out of the pool, in order: each is logged, and
    /// when one [`Move::changes_pool`], every worker's balancer must follow.
    pub moves: Vec<(u16, Move)>,
    /// The retry.
    pub retry: Retry,
    /// The request's first attempt is in the budget now.
    pub first_counted: bool,
    /// The request's outcome on its breaker, when recorded now: its transition to log, its
    /// state to label the request with.
    pub recorded: Option<Recorded>,
}

impl Plan {
    /// Whether a move changed the pool, which every worker's balancer must follow.
    pub fn pool_changed(&self) -> bool {
        self.moves.iter().any(|(_, m)| m.changes_pool())
    }
}

/// Settles `end` on the breakers `ledger` reaches; `rnd` draws what the breakers' cooldowns
/// need.
pub fn settle(ledger: &mut impl Ledger, end: &Ended<'_>, rnd: &mut impl FnMut() -> u32) -> Plan {
    let now = end.now_ms;
    let mut plan = Plan {
        moves: Vec::new(),
        retry: if end.retry {
            Retry::Made
        } else {
            Retry::Unasked
        },
        first_counted: end.first_counted,
        recorded: None,
    };
    let mut pool = None;
    if let Some(s) = end.server.filter(|s| !s.recorded) {
        let count = pool.get_or_insert_with(|| ledger.pool());
        let m = ledger.server(s.index, |b| {
            eject::record_classified(b, count, now, rnd(), s.ticket, end.attempt).1
        });
        if let Some(m) = m.flatten() {
            plan.moves.push((s.index, m));
        }
    }
    if plan.retry == Retry::Made && !end.dry_run {
        let closed = ledger
            .own(Ticket::Normal, |b| b.state() == State::Closed)
            .unwrap_or(true);
        if !closed {
            plan.retry = Retry::Refused;
        }
    }
    if end.budget {
        let retry = plan.retry == Retry::Made;
        let first = !end.first_counted;
        let spent = ledger.budget(|budget, firsts| {
            if let Some((second, n)) = firsts {
                budget.record_firsts(second.saturating_mul(1000), n);
            }
            if first {
                budget.record_first(now);
            }
            retry && !budget.take_retry_of(now, end.class)
        });
        if let Some(spent) = spent {
            plan.first_counted = true;
            if spent {
                plan.retry = Retry::Refused;
            }
        }
    }
    if plan.retry == Retry::Made || end.recorded {
        return plan;
    }
    let assessed = end.server.map(|s| {
        let why = end.attempt.why_bad();
        let probe = why.is_some()
            && end.ticket != Ticket::Normal
            && ledger
                .own(end.ticket, |b| b.holds_probe(end.ticket))
                .unwrap_or(false);
        let probe = why.as_deref().filter(|_| probe).map(|why| (end.name, why));
        let a = assess(
            ledger,
            end.upstream,
            s.index,
            probe,
            now,
            &mut pool,
            &mut plan.moves,
            rnd,
        );
        Assessment {
            explained: a.explained && why.is_some(),
            ..a
        }
    });
    let c = end.attempt;
    plan.recorded = ledger.own(end.ticket, |b| match assessed {
        Some(a) if a.explained => b.record_explained_classified(now, rnd(), end.ticket, c),
        a => b.record_classified(now, rnd(), end.ticket, c, a.map_or(true, |a| a.may_open)),
    });
    plan
}

/// What the pool says of a bad outcome on one of its servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Assessment {
    /// Ejection fixes it: it stays out of the upstream's window.
    pub explained: bool,
    /// The upstream's breaker may open on its window now.
    pub may_open: bool,
}

/// The pool's word on an outcome on server `server` (see [`eject::explain`] and
/// [`eject::may_open`]), after the attempt went on the server's breaker, for an upstream
/// whose breaker has the `upstream` configuration. `probe`: the outcome was the upstream's
/// probe and failed — the breaker's name and why; the server is then ejected at once if the
/// pool may lose it (its move pushed on `moves`). `pool` is the count of servers out, fetched
/// on first need and kept in step. A good outcome is never explained (the caller says which
/// are bad), but the upstream may still not open on it: its window moving on can raise its
/// rates.
#[allow(clippy::too_many_arguments)]
pub fn assess(
    ledger: &mut impl Ledger,
    upstream: &BreakerConfig,
    server: u16,
    probe: Option<(&str, &str)>,
    now: u64,
    pool: &mut Option<eject::Pool>,
    moves: &mut Vec<(u16, Move)>,
    rnd: &mut impl FnMut() -> u32,
) -> Assessment {
    let standings: Vec<Standing> = (0..ledger.servers())
        .map(|i| {
            ledger
                .server(i, |b| Standing::of(b, now, upstream))
                .unwrap_or_default()
        })
        .collect();
    let count = *pool.get_or_insert_with(|| ledger.pool());
    let may_open = eject::may_open(&standings, count.max);
    let explanation = eject::explain(&standings, usize::from(server), count.max, probe.is_some());
    let explained = match (explanation, probe) {
        (Explained::No, _) | (Explained::Eject, None) => false,
        (Explained::Yes, _) => true,
        (Explained::Eject, Some((name, why))) => {
            let count = pool.get_or_insert(count);
            let reason = format!("probe of \"{name}\" failed: {why}");
            let m = ledger.server(server, |b| eject::eject_now(b, count, now, rnd(), reason));
            match m.flatten() {
                Some(m) => {
                    moves.push((server, m));
                    true
                }
                None => false,
            }
        }
    };
    Assessment {
        explained,
        may_open,
    }
}
