//! An upstream's servers, read from the round-robin peers nginx's own balancers keep
//! (round robin, `least_conn`, `hash`, `ip_hash`, `random`, with or without `zone`).

use nginx_sys::{ngx_http_upstream_rr_peers_t, ngx_http_upstream_srv_conf_t};

use crate::net::Peer;

/// The upstream's primary servers (backups are for when the primaries fail, not for
/// probes), each with whether it is marked `down`. `None` when `peer.data` holds something
/// else than round-robin peers (a third-party balancer): nothing to probe then.
///
/// # Safety
/// `uscf` must be an upstream block of this worker's configuration.
pub unsafe fn primaries(uscf: &ngx_http_upstream_srv_conf_t) -> Option<Vec<(Peer, bool)>> {
    let peers = uscf.peer.data.cast::<ngx_http_upstream_rr_peers_t>();
    // SAFETY: `uscf` is a live upstream block of this worker's configuration (this fn's contract),
    // so `peer.data` is null or what its balancer's init_upstream stored; only its `name` is read
    // until it is known to be round-robin peers.
    let p = unsafe { peers.as_ref()? };
    if !is_round_robin(uscf, p) {
        return None;
    }
    let _shared = ReadLock::new(peers);
    let mut out = Vec::new();
    let mut peer = p.peer;
    // SAFETY: the peer list of round-robin peers, read under their lock when they live in a
    // zone (`ngx_http_upstream_rr_peers_rlock`).
    while let Some(one) = unsafe { peer.as_ref() } {
        // SAFETY: each peer's address and name are `socklen` and `name.len` bytes.
        if let Some(copy) =
            unsafe { Peer::from_raw(one.sockaddr, one.socklen, one.name.as_bytes()) }
        {
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
        let _shared = ReadLock::new(list);
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

/// The read lock of peers that live in a zone, held until dropped.
struct ReadLock(*mut ngx_http_upstream_rr_peers_t);

impl ReadLock {
    fn new(peers: *mut ngx_http_upstream_rr_peers_t) -> ReadLock {
        #[cfg(ngx_http_upstream_zone)]
        // SAFETY: round-robin peers; their rwlock is in shared memory when `shpool` is set.
        unsafe {
            if !(*peers).shpool.is_null() {
                nginx_sys::ngx_rwlock_rlock(&mut (*peers).rwlock);
            }
        }
        ReadLock(peers)
    }
}

impl Drop for ReadLock {
    fn drop(&mut self) {
        #[cfg(ngx_http_upstream_zone)]
        // SAFETY: `self.0` is the live peers list `new` was given; the same `shpool` test as in
        // `new` releases exactly the read lock it took.
        unsafe {
            if !(*self.0).shpool.is_null() {
                nginx_sys::ngx_rwlock_unlock(&mut (*self.0).rwlock);
            }
        }
    }
}
