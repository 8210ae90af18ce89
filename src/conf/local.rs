//! What a worker keeps of the zone's breakers beside the configuration it serves: where
//! each breaker was last found, the first attempts it counted on its own, what it applied of
//! a pool's moves. Written only after fork, in the worker's own copy of the configuration,
//! and never read by another process; kept apart from what the configuration parsed.

use core::cell::Cell;

use circuit_breaker_shell::zone::Handle;

/// What a worker keeps for one breaker-enabled upstream.
#[derive(Default)]
pub struct UpstreamLocal {
    /// Where the upstream's own breaker was last found, which carries the retry budget and
    /// the pool's stamp.
    pub home: Cell<Handle>,
    /// This worker's first attempts not yet in the retry budget.
    pub firsts: Firsts,
}

/// First attempts to an upstream that a worker counted on its own, not yet in the retry
/// budget: those of one second, handed over at the worker's next lock hold that needs the
/// budget (a retry), and at the latest when the second changes. Counting costs no atomic
/// operation, and the budget lags by at most a second of other workers' first attempts
/// (fewer first attempts: a budget that errs on the side of fewer retries).
#[derive(Default)]
pub struct Firsts(Cell<(u64, u32)>);

impl Firsts {
    /// Counts a first attempt at `now_ms`; false when those of an earlier second wait (the
    /// caller takes the lock and hands them over with [`Firsts::take`]).
    #[inline]
    pub fn add(&self, now_ms: u64) -> bool {
        let (second, n) = self.0.get();
        let now_s = now_ms / 1000;
        if n > 0 && (second != now_s || n == u32::MAX) {
            return false;
        }
        self.0.set((now_s, n + 1));
        true
    }

    /// The first attempts waiting: their second and number.
    pub fn take(&self) -> Option<(u64, u32)> {
        let (second, n) = self.0.replace((0, 0));
        (n > 0).then_some((second, n))
    }
}
