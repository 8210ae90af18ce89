//! Bringing the zone in line with a newly loaded configuration, in time linear in the
//! breakers and without holding the lock for long: the walk lets the mutex go every
//! [`BATCH`] breakers, so workers still serving the old configuration never wait for more
//! than one batch.

use core::ptr::NonNull;
use std::collections::HashMap;

use circuit_breaker_core::breaker::retunes::Retunes;
use circuit_breaker_core::breaker::BreakerConfig;
use circuit_breaker_core::limit::LimitConfig;
use circuit_breaker_core::retry_budget::RetryBudgetConfig;

use super::node::Node;
use super::{who, Key, Kind, Locked, Zone};

/// Breakers handled per lock hold: about a millisecond of work.
const BATCH: usize = 512;

/// A breaker the configuration knows.
pub struct Wanted<'a> {
    pub key: Key<'a>,
    pub cfg: BreakerConfig,
    /// Created now (an upstream's own breaker, a route whose locations pass to it, or a
    /// server of an upstream), rather than on first use (a route that may meet the upstream
    /// at run time).
    pub eager: bool,
    /// The upstream's retry budget, which its own breaker carries; kept across a reload with
    /// the same parameters.
    pub retry: Option<RetryBudgetConfig>,
    /// The adaptive limit (`limit=adaptive`), kept beside the breaker.
    pub limit: Option<LimitConfig>,
}

/// What a reconciliation did.
#[derive(Default, Debug)]
pub struct Reconciled {
    pub generation: u64,
    pub dropped: usize,
    /// The breakers whose parameters changed, for the reload's log.
    pub retuned: Retunes,
}

impl Zone {
    /// Takes the zone over for a new configuration: a new generation (older workers create
    /// no breakers from now on), breakers the configuration no longer knows freed, those
    /// whose parameters changed retuned (state, episode, totals and, same length, window
    /// kept: see `Breaker::retune`), unchanged ones left alone, and every eager breaker
    /// created. Every stamp moves on, so that workers of the older configuration look again
    /// at what they follow.
    pub fn reconcile(&self, wanted: &[Wanted], now_ms: u64) -> Reconciled {
        let index: HashMap<(&[u8], &[u8], Kind), usize> = wanted
            .iter()
            .enumerate()
            .map(|(i, w)| ((w.key.upstream, w.key.route, w.key.kind), i))
            .collect();
        let mut seen = vec![false; wanted.len()];
        let mut out = Reconciled::default();
        let locked = self.lock();
        out.generation = locked.bump_generation();
        // Only this walk frees nodes (no other reconciliation runs meanwhile): it goes on
        // whatever happens between batches.
        let step = |locked: &mut Locked<'_>, n: NonNull<Node>| {
            // SAFETY: `n` is published (walk's promise); the names borrow `locked` and are done with
            // before `remove(n)`.
            let (upstream, route) = unsafe { locked.names_of(n) };
            // SAFETY: `n` is published (walk's promise); `kind` is fixed at creation.
            let kind = unsafe { n.as_ref() }.kind();
            let Some(&i) = index.get(&(upstream, route, kind)) else {
                // SAFETY: `n` is published (walk's promise) and no longer borrowed.
                unsafe { locked.remove(n) };
                out.dropped += 1;
                return;
            };
            seen[i] = true;
            let w = &wanted[i];
            // SAFETY: `n` is published (walk's promise), the lock held; the `BreakerMut` borrows
            // `locked` mutably and drops at the end of the arm.
            let current = match unsafe { locked.breaker_at(n) } {
                Some(b) => {
                    b.bump_stamp();
                    *b.config()
                }
                None => return,
            };
            let mut kept = Some(n);
            if current != w.cfg {
                let who = out
                    .retuned
                    .wants_name()
                    .then(|| who(w.key.upstream, w.key.route, kind));
                // SAFETY: `n` is published (walk's promise); `window_s` is fixed at creation.
                let retuned = if unsafe { super::Locked::window_of(n) } == w.cfg.window_s {
                    // SAFETY: `n` is published (walk's promise), the lock held; the
                    // `BreakerMut` drops (publishing the new gate) at the end of the block.
                    unsafe { locked.breaker_at(n) }.and_then(|mut b| b.retune(now_ms, w.cfg))
                } else {
                    // Another window length needs another allocation: the breaker moves into
                    // it, window emptied, the rest carried.
                    // SAFETY: `n` is published (walk's promise), the lock held; the
                    // `BreakerMut` is dropped before `remove(n)`.
                    let old = unsafe { locked.breaker_at(n) }.map(|mut b| b.carry_out());
                    // SAFETY: `n` is published (walk's promise) and no longer borrowed.
                    unsafe { locked.remove(n) };
                    kept = locked.create(&w.key, &w.cfg, now_ms);
                    match (kept, old) {
                        (Some(_), Some(old)) => {
                            locked.find(&w.key).map(|mut b| b.adopt(&old, now_ms))
                        }
                        _ => None,
                    }
                };
                out.retuned.note(who, retuned);
            }
            if let Some(n) = kept {
                // SAFETY: `n` is published (kept, or created just above).
                unsafe {
                    locked.set_retry(n, w.retry, now_ms);
                    locked.limit_reconcile(n, w.limit.as_ref(), now_ms);
                }
            }
        };
        let mut locked = self.walk(locked, BATCH, |_| true, step);
        let missing = wanted
            .iter()
            .zip(&seen)
            .filter(|(w, seen)| w.eager && !**seen);
        for (created, (w, _)) in missing.enumerate() {
            if created > 0 && created % BATCH == 0 {
                drop(locked);
                locked = self.lock();
            }
            if locked.find(&w.key).is_none() {
                if let Some(n) = locked.create(&w.key, &w.cfg, now_ms) {
                    // SAFETY: created and published just above.
                    unsafe {
                        locked.set_retry(n, w.retry, now_ms);
                        locked.limit_reconcile(n, w.limit.as_ref(), now_ms);
                    }
                }
            }
        }
        out
    }
}
