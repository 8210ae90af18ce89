//! The balancer's side: nginx's round-robin peers (`ngx_http_upstream_rr_peers_t`, a primary
//! list and its `next`, the backup list), which round robin, `least_conn`, `hash`,
//! `ip_hash` and `random` all keep and all skip when `down`. Without an upstream `zone` each
//! worker has its own copy; with one they live in shared memory, changed under their own
//! lock, and (nginx 1.27.3 and later) a name resolved at run time may replace a peer.

use nginx_sys::{
    ngx_http_upstream_rr_peer_t, ngx_http_upstream_rr_peers_t, ngx_http_upstream_srv_conf_t,
    ngx_palloc, ngx_pool_t, ngx_str_t, ngx_uint_t, sockaddr, socklen_t,
};

use crate::conf::{PeerRef, Pool, PoolLocal};

/// The `down` value of a peer this module took out: true for every balancer, as `down` is,
/// and told apart from a configured `down` (1) or another module's, which are never cleared.
const EJECTED: ngx_uint_t = 0xe7;

/// The names of the servers of an upstream whose balancer keeps round-robin peers, in
/// configuration order, with whether each is a backup: one per address, configured `down`
/// ones left out (their state is the operator's), names resolved at run time too (they have
/// no address yet). `None` when the balancer keeps no such peers.
///
/// # Safety
/// During configuration, once every upstream's balancer is initialised.
pub unsafe fn configured(uscf: &ngx_http_upstream_srv_conf_t) -> Option<Vec<(String, bool)>> {
    let peers = uscf.peer.data.cast::<ngx_http_upstream_rr_peers_t>();
    // SAFETY: a balancer's peer data; round robin's starts with its peers list, whose `name`
    // is the upstream's own host (what tells it from another balancer's data).
    let peers = unsafe { peers.as_ref() }?;
    if !core::ptr::eq(peers.name, &uscf.host) {
        return None;
    }
    let mut out: Vec<(String, bool)> = Vec::new();
    // SAFETY: `peers.next` is null or round robin's backup list, built with `peers` during
    // configuration and live as long as it.
    for (list, backup) in [(Some(peers), false), (unsafe { peers.next.as_ref() }, true)] {
        let Some(list) = list else { continue };
        let mut p = list.peer;
        // SAFETY: a list of peers built at configuration time.
        while let Some(peer) = unsafe { p.as_ref() } {
            let name = String::from_utf8_lossy(peer.name.as_bytes()).into_owned();
            if peer.down == 0 && !out.iter().any(|(n, _)| *n == name) {
                out.push((name, backup));
            }
            p = peer.next;
        }
    }
    Some(out)
}

/// The peers lists of a live upstream: primary, then backup (null when none).
///
/// # Safety
/// `uscf` must be a live upstream conf whose balancer keeps round-robin peers.
unsafe fn lists(uscf: &ngx_http_upstream_srv_conf_t) -> [*mut ngx_http_upstream_rr_peers_t; 2] {
    let primary = uscf.peer.data.cast::<ngx_http_upstream_rr_peers_t>();
    // SAFETY: `uscf` is live and its `peer.data` round robin's (this fn's contract), so `primary`
    // is null or a live peers list; the backup list, if any, is its `next`.
    let backup = unsafe { primary.as_ref() }.map_or(core::ptr::null_mut(), |p| p.next);
    [primary, backup]
}

/// Whether an upstream `zone` changed its peers since the map was built.
///
/// # Safety
/// As for [`lists`].
#[inline]
pub unsafe fn moved(uscf: &ngx_http_upstream_srv_conf_t, local: &PoolLocal) -> bool {
    // SAFETY: `uscf` is live and keeps round-robin peers (this fn's contract): what `config` asks.
    unsafe { config(uscf) }.is_some_and(|c| c != local.peers_config.get())
}

/// `*peers->config`: bumped by an upstream `zone` whenever its peers change.
///
/// # Safety
/// As for [`lists`].
#[cfg(all(ngx_http_upstream_zone, ngx_zone_peers_config))]
#[inline]
unsafe fn config(uscf: &ngx_http_upstream_srv_conf_t) -> Option<usize> {
    let peers = uscf.peer.data.cast::<ngx_http_upstream_rr_peers_t>();
    // `config` is null, or a counter in the upstream zone that other workers change under the
    // peers' lock: read as an atomic word, and only compared.

    // SAFETY: `uscf.peer.data` is round robin's live, non-null peers list (this fn's
    // contract); `config`, if set, is a live, word-aligned `ngx_uint_t`, read atomically.
    unsafe {
        let c = (*peers).config;
        (!c.is_null()).then(|| {
            core::sync::atomic::AtomicUsize::from_ptr(c.cast())
                .load(core::sync::atomic::Ordering::Relaxed)
        })
    }
}

#[cfg(not(all(ngx_http_upstream_zone, ngx_zone_peers_config)))]
#[inline]
unsafe fn config(_uscf: &ngx_http_upstream_srv_conf_t) -> Option<usize> {
    None
}

/// A peers list's lock (an upstream `zone`'s rwlock; none without one), held until dropped.
/// A raw pointer, not a reference: other workers change the lock word while it is held.
pub struct PeersLock(*mut ngx_http_upstream_rr_peers_t);

impl PeersLock {
    /// Takes the read lock of `peers`.
    ///
    /// # Safety
    /// `peers` must be a live round-robin peers list, not referenced while the lock is taken
    /// (taking it writes the lock word), nor written through a reference while it is held.
    pub unsafe fn read(peers: *mut ngx_http_upstream_rr_peers_t) -> PeersLock {
        // SAFETY: this fn's contract is `take`'s.
        unsafe { PeersLock::take(peers, false) }
    }

    /// Takes the write lock of `peers`.
    ///
    /// # Safety
    /// `peers` must be a live round-robin peers list, not referenced while the lock is taken.
    unsafe fn write(peers: *mut ngx_http_upstream_rr_peers_t) -> PeersLock {
        // SAFETY: this fn's contract is `take`'s.
        unsafe { PeersLock::take(peers, true) }
    }

    /// # Safety
    /// `peers` must be a live round-robin peers list, not referenced while the lock is taken.
    unsafe fn take(peers: *mut ngx_http_upstream_rr_peers_t, write: bool) -> PeersLock {
        #[cfg(ngx_http_upstream_zone)]
        // SAFETY: `peers` is live (this fn's contract); its rwlock is in the upstream zone when
        // `shpool` is set, taken as nginx's own rlock and wlock macros do.
        unsafe {
            if !(*peers).shpool.is_null() {
                let lock = core::ptr::addr_of_mut!((*peers).rwlock);
                if write {
                    nginx_sys::ngx_rwlock_wlock(lock);
                } else {
                    nginx_sys::ngx_rwlock_rlock(lock);
                }
            }
        }
        #[cfg(not(ngx_http_upstream_zone))]
        let _ = write;
        PeersLock(peers)
    }
}

impl Drop for PeersLock {
    fn drop(&mut self) {
        #[cfg(ngx_http_upstream_zone)]
        // SAFETY: `self.0` is the live list `take` locked (its contract); the same `shpool`
        // test releases exactly the lock it took.
        unsafe {
            if !(*self.0).shpool.is_null() {
                nginx_sys::ngx_rwlock_unlock(core::ptr::addr_of_mut!((*self.0).rwlock));
            }
        }
    }
}

/// The address and name of the mapped peer `peer`, copied into `pool` under the peers'
/// read locks: an upstream `zone` that resolves names at run time (nginx 1.27.3 and later)
/// may free a peer whenever its name changes, so a request that bypasses the balancer
/// connects to its own copy. `None` when the peers changed since the map was built (the
/// next [`super::follow`] rebuilds it) or when the pool is out of memory.
///
/// # Safety
/// As for [`lists`], in a worker; `peer` from this upstream's map, `pool` the request's.
pub unsafe fn copy_peer(
    uscf: &ngx_http_upstream_srv_conf_t,
    local: &PoolLocal,
    peer: &PeerRef,
    pool: *mut ngx_pool_t,
) -> Option<(*mut sockaddr, socklen_t, *mut ngx_str_t)> {
    // SAFETY: `uscf` is live and keeps round-robin peers (this fn's contract), so both lists
    // are null or live.
    let lists = unsafe { lists(uscf) };
    // SAFETY: each list is null (skipped) or live, and nothing here writes it through a
    // reference.
    let _locks = lists.map(|l| (!l.is_null()).then(|| unsafe { PeersLock::read(l) }));
    // SAFETY: `uscf` keeps round-robin peers (this fn's contract); read under the locks, so no
    // change slips in between this check and the copy.
    if unsafe { moved(uscf, local) } {
        return None;
    }
    // SAFETY: the peers did not change since the map was built and cannot while the locks
    // are held, so `peer.peer` is still a live peer; only read.
    let p = unsafe { &*peer.peer };
    let len = p.socklen as usize;
    if p.sockaddr.is_null() {
        return None;
    }
    // One block: the name's `ngx_str_t` first (ngx_palloc aligns it), then the address (at
    // 16 bytes, aligned for any sockaddr), then the name's bytes.
    let head = core::mem::size_of::<ngx_str_t>();
    // SAFETY: `pool` is the live request's pool (this fn's contract).
    let block = unsafe { ngx_palloc(pool, head + len + p.name.len) }.cast::<u8>();
    if block.is_null() {
        return None;
    }
    // SAFETY: `block` has room for the three parts laid out above; the peer's address is
    // `socklen` bytes and its name `name.len`, both live under the locks.
    unsafe {
        let addr = block.add(head);
        let text = addr.add(len);
        core::ptr::copy_nonoverlapping(p.sockaddr.cast::<u8>(), addr, len);
        core::ptr::copy_nonoverlapping(p.name.data, text, p.name.len);
        let name = block.cast::<ngx_str_t>();
        name.write(ngx_str_t {
            len: p.name.len,
            data: text,
        });
        Some((addr.cast(), p.socklen, name))
    }
}

/// Marks each peer of a server that is out `down` ([`EJECTED`]) and clears the mark of each
/// that is back in (a dry run marks nothing), rebuilding the map of peers to servers first
/// when there is none or an upstream `zone` changed its peers; counts the peers left out.
///
/// # Safety
/// As for [`lists`], in a worker.
pub unsafe fn apply(uscf: &ngx_http_upstream_srv_conf_t, pool: &Pool) {
    let local = &pool.local;
    let Ok(mut map) = local.peers.try_borrow_mut() else {
        return;
    };
    // SAFETY: `uscf` is live and keeps round-robin peers (this fn's contract): what `config` asks.
    let config = unsafe { config(uscf) };
    let rebuild = map.is_empty() || config.is_some_and(|c| c != local.peers_config.get());
    if rebuild {
        map.clear();
        local.peers_config.set(config.unwrap_or(0));
    }
    let mut downed = 0;
    // SAFETY: `uscf` is live and keeps round-robin peers (this fn's contract): what `lists` asks.
    for list in unsafe { lists(uscf) } {
        if list.is_null() {
            continue;
        }
        // SAFETY: a peers list of the upstream, which lives as long as its configuration;
        // other workers change it only under this lock; no reference to it is held.
        let _w = unsafe { PeersLock::write(list) };
        // SAFETY: the list is locked; its head pointer is only read.
        let mut p = unsafe { (*list).peer };
        // SAFETY: the list's peers, which its lock (held) keeps in place.
        while let Some(peer) = unsafe { p.as_mut() } {
            let name = peer.name.as_bytes();
            let server = pool.servers.iter().position(|s| s.name.as_bytes() == name);
            if let Some(i) = server {
                if rebuild {
                    map.push(PeerRef {
                        peer: core::ptr::from_mut::<ngx_http_upstream_rr_peer_t>(peer),
                        name: &peer.name,
                        server: i as u16,
                    });
                }
                let out = pool.servers[i].local.out.get() && !pool.cfg.dry_run;
                if out && peer.down == 0 {
                    peer.down = EJECTED;
                } else if !out && peer.down == EJECTED {
                    peer.down = 0;
                }
                downed += u32::from(peer.down == EJECTED);
            }
            p = peer.next;
        }
    }
    local.downed.set(downed);
}
