//! What a worker keeps of the zone's breakers beside the configuration it serves: where
//! each breaker was last found, the first attempts it counted on its own, what it applied of
//! a pool's moves. Written only after fork, in the worker's own copy of the configuration,
//! and never read by another process; kept apart from what the configuration parsed.

use core::cell::{Cell, RefCell};

use crate::zone::{Handle, StampRef};

/// What a worker keeps for one breaker-enabled upstream.
#[derive(Default)]
pub struct UpstreamLocal {
    /// Where the upstream's own breaker was last found, which carries the retry budget and
    /// the pool's stamp.
    pub home: Cell<Handle>,
    /// This worker's first attempts not yet in the retry budget.
    pub firsts: Firsts,
}

/// What a worker keeps for one server of a pool: where its breaker was last found, and
/// whether it is out of the pool as of the stamp this worker applied.
pub struct ServerLocal {
    pub handle: Cell<Handle>,
    pub out: Cell<bool>,
}

impl Default for ServerLocal {
    fn default() -> Self {
        ServerLocal {
            handle: Cell::new(Handle::NONE),
            out: Cell::new(false),
        }
    }
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

/// What a worker keeps of its pool's state in the zone.
pub struct PoolLocal {
    /// The upstream's own breaker's stamp, which moves whenever a server leaves or rejoins
    /// the pool.
    pub stamp: Cell<StampRef>,
    /// The stamp of the pool's state this worker applied to its peers (`None`: not yet).
    pub applied: Cell<Option<u64>>,
    /// Servers out of the pool, and peers this worker's balancer skips because of it.
    pub out: Cell<u32>,
    pub downed: Cell<u32>,
    /// When an ejected server may be probed next (`u64::MAX`: none is out).
    pub next_due: Cell<u64>,
    /// The balancer's peers, each with the server it is an address of (built when the
    /// worker first applies the pool's state, and again when an upstream `zone` changes its
    /// peers).
    pub peers: RefCell<Vec<PeerRef>>,
    /// `*peers->config` of an upstream `zone` when `peers` was built.
    pub peers_config: Cell<usize>,
}

impl Default for PoolLocal {
    fn default() -> Self {
        PoolLocal {
            stamp: Cell::new(StampRef::NONE),
            applied: Cell::new(None),
            out: Cell::new(0),
            downed: Cell::new(0),
            next_due: Cell::new(u64::MAX),
            peers: RefCell::new(Vec::new()),
            peers_config: Cell::new(0),
        }
    }
}

/// A balancer's peer and the [`Server`] it is an address of.
#[derive(Clone, Copy)]
pub struct PeerRef {
    pub peer: *mut nginx_sys::ngx_http_upstream_rr_peer_t,
    /// `&peer->name`, which the balancer hands over as `pc->name`.
    pub name: *const nginx_sys::ngx_str_t,
    pub server: u16,
}
