//! Ejecting a bad server from a pool, the part the http and the stream modules share: the
//! pool of an upstream's servers as configuration made it and as each worker follows the
//! zone's moves (`pool`), nginx's round-robin peers, which both modules' balancers keep and
//! skip when `down` (`peers`), and what follows, judges and controls a pool (`pooled`), over
//! either module's types.

mod peers;
mod pool;
mod pooled;

pub use peers::{configured, PeersLock, RrPeer, RrPeers, RrUpstream};
pub use pool::{PeerRef, Pool, PoolLocal, Server, ServerLocal};
pub use pooled::{
    add_success, address_of, assess, assess_due, claim_probe, control, control_key, count, downed,
    follow, moved, passes_over, probe_due, ramping, record_probe, release, server_count, server_of,
    servers, with_server, PoolOf, Pooled, Probe, Upstream,
};
