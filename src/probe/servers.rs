//! An upstream's servers, read from the round-robin peers nginx's own balancers keep
//! (round robin, `least_conn`, `hash`, `ip_hash`, `random`, with or without `zone`).

use nginx_sys::{ngx_http_upstream_rr_peers_t, ngx_http_upstream_srv_conf_t};

use crate::eject::PeersLock;
use crate::net::Peer;

/// The upstream's primary servers (backups are for when the primaries fail, not for
/// probes), each with whether it is marked `down`. `None` when `peer.data` holds something
/// else than round-robin peers (a third-party balancer): nothing to probe then.
///
/// # Safety
/// `uscf` must be an upstream block of this worker's configuration.
pub unsafe fn primaries(uscf: &ngx_http_upstream_srv_conf_t) -> Option<Vec<(Peer, bool)>> {
    let peers = uscf.peer.data.cast::<ngx_http_upstream_rr_peers_t>();
    // SAFETY: `uscf` is a live upstream block (this fn's contract): `peer.data` is null or its
    // balancer's; only `name` is read until it is known to be round robin's peers.
    if !is_round_robin(uscf, unsafe { peers.as_ref()? }) {
        return None;
    }
    // SAFETY: round-robin peers, live with the configuration; no reference to them is held
    // while the lock word changes.
    let _shared = unsafe { PeersLock::read(peers) };
    // SAFETY: `peers` is the live round-robin list just locked; its head pointer is only read.
    let mut peer = unsafe { (*peers).peer };
    let mut out = Vec::new();
    // SAFETY: the peer list of round-robin peers, read under their lock when they live in a
    // zone (`ngx_http_upstream_rr_peers_rlock`).
    while let Some(one) = unsafe { peer.as_ref() } {
        let (addr, len, name) = (one.sockaddr, one.socklen, one.name.as_bytes());
        // SAFETY: each peer's address and name are `socklen` and `name.len` bytes.
        if let Some(copy) = unsafe { Peer::from_raw(addr, len, name) } {
            out.push((copy, one.down != 0));
        }
        peer = one.next;
    }
    Some(out)
}

/// The peer with address `name`, among the primary servers and then the backups, whether
/// marked `down` or not (an ejected server is probed). `None` when there is none (a name
/// an upstream `zone` has not resolved yet) or the balancer keeps no round-robin peers.
///
/// # Safety
/// As for [`primaries`].
pub unsafe fn named(uscf: &ngx_http_upstream_srv_conf_t, name: &[u8]) -> Option<Peer> {
    let primary = uscf.peer.data.cast::<ngx_http_upstream_rr_peers_t>();
    // SAFETY: `uscf` is a live upstream block of this worker's configuration (this fn's contract):
    // `peer.data` is null or its balancer's; `is_round_robin` reads only `name`.
    if !is_round_robin(uscf, unsafe { primary.as_ref()? }) {
        return None;
    }
    // SAFETY: round-robin peers; the backup list, if any, is the primary's `next`.
    let backup = unsafe { (*primary).next };
    for list in [primary, backup] {
        if list.is_null() {
            continue;
        }
        // SAFETY: a live round-robin list (checked above), not referenced while locking.
        let _shared = unsafe { PeersLock::read(list) };
        // SAFETY: a list of round-robin peers, read under its own lock when it lives in a
        // zone.
        let mut peer = unsafe { (*list).peer };
        // SAFETY: `peer` walks the list's `next` links: round-robin peers, kept in place by the
        // read lock `_shared` holds (zone) or for the configuration's life (no zone).
        while let Some(one) = unsafe { peer.as_ref() } {
            if one.name.as_bytes() == name {
                // SAFETY: the peer's address and name are `socklen` and `name.len` bytes.
                return unsafe { Peer::from_raw(one.sockaddr, one.socklen, name) };
            }
            peer = one.next;
        }
    }
    None
}

/// nginx's round-robin init names its peers after the upstream block (`peers->name =
/// &us->host`); a zone keeps a copy of that name in shared memory.
fn is_round_robin(uscf: &ngx_http_upstream_srv_conf_t, p: &ngx_http_upstream_rr_peers_t) -> bool {
    if core::ptr::eq(p.name, &uscf.host) {
        return true;
    }
    #[cfg(ngx_http_upstream_zone)]
    if !p.shpool.is_null() && !uscf.shm_zone.is_null() {
        // SAFETY: zone peers keep their name in the zone, alive as long as the peers.
        return unsafe { p.name.as_ref() }.is_some_and(|n| n.as_bytes() == uscf.host.as_bytes());
    }
    false
}
