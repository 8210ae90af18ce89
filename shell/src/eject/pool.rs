//! An upstream's pool of servers, each with a breaker of its own: what configuration made,
//! and what each worker keeps of the zone's moves (written only after fork, in the worker's
//! own copy of the configuration, and never read by another process).

use core::cell::{Cell, RefCell};

use circuit_breaker_core::breaker::BreakerConfig;
use circuit_breaker_core::eject::outlier::Relative;
use circuit_breaker_core::eject::ramp::ServerRamp;
use nginx_sys::ngx_str_t;

use crate::ffi::{hash_name, server_key_hash};
use crate::zone::{Handle, StampRef};

/// The servers of a breaker-enabled upstream whose balancer keeps nginx's round-robin peers
/// of type `P` (round robin, `least_conn`, `hash`, `ip_hash`, `random`), each with a breaker
/// of its own (`circuit_breaker_eject`).
pub struct Pool<P> {
    /// Each server's breaker parameters.
    pub cfg: BreakerConfig,
    /// How many servers may be out of the pool at once.
    pub max_ejected: u32,
    /// The rules that judge a server against the others (`relative=`).
    pub relative: Relative,
    /// The servers, in configuration order (primary, then backup), one per address.
    pub servers: Vec<Server>,
    /// Per worker: see [`PoolLocal`].
    pub local: PoolLocal<P>,
}

/// One server of a [`Pool`]: an address of a `server` line (`10.0.0.1:8080`).
pub struct Server {
    pub name: String,
    pub key_hash: u64,
    pub backup: bool,
    /// What this worker keeps of its breaker: see [`ServerLocal`].
    pub local: ServerLocal,
}

impl Server {
    pub fn new(upstream_hash: u64, name: String, backup: bool) -> Server {
        Server {
            key_hash: server_key_hash(upstream_hash, hash_name(name.as_bytes())),
            name,
            backup,
            local: ServerLocal::default(),
        }
    }
}

/// What a worker keeps for one server of a pool: where its breaker was last found, and
/// whether it is out of the pool, or returning on a ramp, as of the stamp this worker applied.
pub struct ServerLocal {
    pub handle: Cell<Handle>,
    pub out: Cell<bool>,
    pub ramp: Cell<ServerRamp>,
}

impl Default for ServerLocal {
    fn default() -> Self {
        ServerLocal {
            handle: Cell::new(Handle::NONE),
            out: Cell::new(false),
            ramp: Cell::new(ServerRamp::NONE),
        }
    }
}

/// What a worker keeps of its pool's state in the zone.
pub struct PoolLocal<P> {
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
    /// When this worker next judges the pool by its relative rules.
    pub next_assess: Cell<u64>,
    /// When the last of the servers' ramps ends (0: none runs).
    pub ramp_until: Cell<u64>,
    /// The balancer's peers, each with the server it is an address of (built when the
    /// worker first applies the pool's state, and again when an upstream `zone` changes its
    /// peers).
    pub peers: RefCell<Vec<PeerRef<P>>>,
    /// `*peers->config` of an upstream `zone` when `peers` was built.
    pub peers_config: Cell<usize>,
}

impl<P> Default for PoolLocal<P> {
    fn default() -> Self {
        PoolLocal {
            stamp: Cell::new(StampRef::NONE),
            applied: Cell::new(None),
            out: Cell::new(0),
            downed: Cell::new(0),
            next_due: Cell::new(u64::MAX),
            next_assess: Cell::new(0),
            ramp_until: Cell::new(0),
            peers: RefCell::new(Vec::new()),
            peers_config: Cell::new(0),
        }
    }
}

/// A balancer's peer and the [`Server`] it is an address of.
pub struct PeerRef<P> {
    pub peer: *mut P,
    /// `&peer->name`, which the balancer hands over as `pc->name`.
    pub name: *const ngx_str_t,
    pub server: u16,
}

impl<P> Clone for PeerRef<P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for PeerRef<P> {}
