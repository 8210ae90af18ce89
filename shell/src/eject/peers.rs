//! The balancer's side: nginx's round-robin peers (a primary list and its `next`, the backup
//! list), which round robin, `least_conn`, `hash`, `ip_hash` and `random` all keep and all
//! skip when `down`, in the http and the stream modules alike (their types differ, their
//! fields do not: [`RrUpstream`], [`RrPeers`], [`RrPeer`]). Without an upstream `zone` each
//! worker has its own copy; with one they live in shared memory, changed under their own
//! lock, and (nginx 1.27.3 and later) a name resolved at run time may replace a peer.

use nginx_sys::{
    ngx_http_upstream_rr_peer_t, ngx_http_upstream_rr_peers_t, ngx_http_upstream_srv_conf_t,
    ngx_palloc, ngx_pool_t, ngx_str_t, ngx_stream_upstream_rr_peer_t,
    ngx_stream_upstream_rr_peers_t, ngx_stream_upstream_srv_conf_t, ngx_uint_t, sockaddr,
    socklen_t, time_t,
};

use super::pool::{PeerRef, Pool, PoolLocal};

/// The `down` value of a peer this module took out: true for every balancer, as `down` is,
/// and told apart from a configured `down` (1) or another module's, which are never cleared.
const EJECTED: ngx_uint_t = 0xe7;

/// An upstream block's conf, whose balancer may keep round-robin peers.
///
/// # Safety
/// Implemented only for nginx's upstream confs, whose `peer.data` is the balancer's.
pub unsafe trait RrUpstream {
    type Peers: RrPeers;
    /// The balancer's data: round robin's peers list, or another balancer's.
    fn peer_data(&self) -> *mut Self::Peers;
    /// The upstream's name.
    fn host(&self) -> &ngx_str_t;
}

/// A round-robin peers list (`ngx_*_upstream_rr_peers_t`).
///
/// # Safety
/// Implemented only for nginx's round-robin peers lists; each fn reads the field it names of
/// a live list.
pub unsafe trait RrPeers {
    type Peer: RrPeer;
    /// `peers->peer`, the first peer.
    ///
    /// # Safety
    /// `p` must be a live list.
    unsafe fn first(p: *mut Self) -> *mut Self::Peer;
    /// `peers->next`, the backup list (null when none).
    ///
    /// # Safety
    /// `p` must be a live list.
    unsafe fn backup(p: *mut Self) -> *mut Self;
    /// `peers->name`.
    ///
    /// # Safety
    /// `p` must be a live list.
    unsafe fn name(p: *mut Self) -> *const ngx_str_t;
    /// Takes the list's rwlock (only a list in an upstream `zone` has one), as nginx's own
    /// macros do.
    ///
    /// # Safety
    /// `p` must be a live list, not referenced while the lock word changes.
    unsafe fn lock(p: *mut Self, write: bool);
    /// Releases what [`RrPeers::lock`] took.
    ///
    /// # Safety
    /// `p` must be the live list `lock` locked.
    unsafe fn unlock(p: *mut Self);
    /// `*peers->config`, which an upstream `zone` bumps whenever its peers change; `None`
    /// without one (or before nginx 1.27.3).
    ///
    /// # Safety
    /// `p` must be a live list.
    unsafe fn config(p: *mut Self) -> Option<usize>;
}

/// A round-robin peer (`ngx_*_upstream_rr_peer_t`).
///
/// # Safety
/// Implemented only for nginx's round-robin peers.
pub unsafe trait RrPeer {
    fn sockaddr(&self) -> *mut sockaddr;
    fn socklen(&self) -> socklen_t;
    fn name(&self) -> &ngx_str_t;
    fn down(&self) -> ngx_uint_t;
    fn set_down(&mut self, down: ngx_uint_t);
    fn next(&self) -> *mut Self;
    /// Failures nginx's own `max_fails` counts (0: none since it last passed).
    fn fails(&self) -> ngx_uint_t;
    /// Whether round robin could pick it at `now` (Unix seconds): not `down`, not failed
    /// `max_fails` times within `fail_timeout`, not at `max_conns`.
    fn live(&self, now: time_t) -> bool;
}

/// The three traits for one module's types; `$zone` is the cfg under which its peers have an
/// upstream `zone`'s fields.
macro_rules! rr_layout {
    ($uscf:ty, $peers:ty, $peer:ty, $zone:meta) => {
        // SAFETY: nginx's upstream conf: `peer.data` is its balancer's.
        unsafe impl RrUpstream for $uscf {
            type Peers = $peers;
            fn peer_data(&self) -> *mut $peers {
                self.peer.data.cast()
            }
            fn host(&self) -> &ngx_str_t {
                &self.host
            }
        }

        // SAFETY: nginx's round-robin peers list; every fn reads a field of a live list (the
        // callers' contract).
        unsafe impl RrPeers for $peers {
            type Peer = $peer;
            unsafe fn first(p: *mut Self) -> *mut $peer {
                // SAFETY: `p` is a live list (this trait's contract).
                unsafe { (*p).peer }
            }
            unsafe fn backup(p: *mut Self) -> *mut Self {
                // SAFETY: as above.
                unsafe { (*p).next }
            }
            unsafe fn name(p: *mut Self) -> *const ngx_str_t {
                // SAFETY: as above.
                unsafe { (*p).name }
            }
            unsafe fn lock(p: *mut Self, write: bool) {
                #[cfg($zone)]
                // SAFETY: `p` is live; its rwlock is in the upstream zone when `shpool` is set,
                // taken as nginx's own rlock and wlock macros do.
                unsafe {
                    if !(*p).shpool.is_null() {
                        let lock = core::ptr::addr_of_mut!((*p).rwlock);
                        if write {
                            nginx_sys::ngx_rwlock_wlock(lock);
                        } else {
                            nginx_sys::ngx_rwlock_rlock(lock);
                        }
                    }
                }
                #[cfg(not($zone))]
                let _ = (p, write);
            }
            unsafe fn unlock(p: *mut Self) {
                #[cfg($zone)]
                // SAFETY: `p` is the live list `lock` locked; the same `shpool` test releases
                // exactly the lock it took.
                unsafe {
                    if !(*p).shpool.is_null() {
                        nginx_sys::ngx_rwlock_unlock(core::ptr::addr_of_mut!((*p).rwlock));
                    }
                }
                #[cfg(not($zone))]
                let _ = p;
            }
            unsafe fn config(p: *mut Self) -> Option<usize> {
                // `config` is null, or a counter in the upstream zone that other workers change
                // under the peers' lock: read as an atomic word, and only compared.
                #[cfg(all($zone, ngx_zone_peers_config))]
                // SAFETY: `p` is live; `config`, if set, is a live, word-aligned `ngx_uint_t`,
                // read atomically.
                unsafe {
                    let c = (*p).config;
                    (!c.is_null()).then(|| {
                        core::sync::atomic::AtomicUsize::from_ptr(c.cast())
                            .load(core::sync::atomic::Ordering::Relaxed)
                    })
                }
                #[cfg(not(all($zone, ngx_zone_peers_config)))]
                {
                    let _ = p;
                    None
                }
            }
        }

        // SAFETY: nginx's round-robin peer.
        unsafe impl RrPeer for $peer {
            fn sockaddr(&self) -> *mut sockaddr {
                self.sockaddr
            }
            fn socklen(&self) -> socklen_t {
                self.socklen
            }
            fn name(&self) -> &ngx_str_t {
                &self.name
            }
            fn down(&self) -> ngx_uint_t {
                self.down
            }
            fn set_down(&mut self, down: ngx_uint_t) {
                self.down = down;
            }
            fn next(&self) -> *mut Self {
                self.next
            }
            // Other workers write `fails`, `checked` and `conns` of a peer in an upstream
            // `zone` under its own lock, which a reader of the list does not take: read as
            // nginx reads them there, a word at a time, never cached.
            fn fails(&self) -> ngx_uint_t {
                // SAFETY: a field of a live peer, aligned; see above.
                unsafe { core::ptr::read_volatile(&self.fails) }
            }
            fn live(&self, now: time_t) -> bool {
                // SAFETY: fields of a live peer, aligned; see above.
                let (fails, checked, conns) = unsafe {
                    (
                        core::ptr::read_volatile(&self.fails),
                        core::ptr::read_volatile(&self.checked),
                        core::ptr::read_volatile(&self.conns),
                    )
                };
                let failed = self.max_fails != 0
                    && fails >= self.max_fails
                    && now - checked <= self.fail_timeout;
                let full = self.max_conns != 0 && conns >= self.max_conns;
                self.down() == 0 && !failed && !full
            }
        }
    };
}

rr_layout!(
    ngx_http_upstream_srv_conf_t,
    ngx_http_upstream_rr_peers_t,
    ngx_http_upstream_rr_peer_t,
    ngx_http_upstream_zone
);
rr_layout!(
    ngx_stream_upstream_srv_conf_t,
    ngx_stream_upstream_rr_peers_t,
    ngx_stream_upstream_rr_peer_t,
    ngx_stream_upstream_zone
);

/// The peer type of an upstream conf's round-robin peers.
type PeerOf<U> = <<U as RrUpstream>::Peers as RrPeers>::Peer;
/// The names of the servers of an upstream whose balancer keeps round-robin peers, in
/// configuration order, with whether each is a backup: one per address, configured `down`
/// ones left out (their state is the operator's), names resolved at run time too (they have
/// no address yet). `None` when the balancer keeps no such peers.
///
/// # Safety
/// During configuration, once every upstream's balancer is initialised.
pub unsafe fn configured<U: RrUpstream>(uscf: &U) -> Option<Vec<(String, bool)>> {
    let peers = uscf.peer_data();
    if peers.is_null() {
        return None;
    }
    // SAFETY: a balancer's peer data; round robin's starts with its peers list, whose `name`
    // is the upstream's own host (what tells it from another balancer's data).
    if !core::ptr::eq(unsafe { U::Peers::name(peers) }, uscf.host()) {
        return None;
    }
    let mut out: Vec<(String, bool)> = Vec::new();
    // SAFETY: `peers` is round robin's; its backup is null or round robin's backup list, built
    // with it during configuration and live as long as it.
    for (list, backup) in [(peers, false), (unsafe { U::Peers::backup(peers) }, true)] {
        if list.is_null() {
            continue;
        }
        // SAFETY: a list of peers built at configuration time.
        let mut p = unsafe { U::Peers::first(list) };
        // SAFETY: a list of peers built at configuration time.
        while let Some(peer) = unsafe { p.as_ref() } {
            let name = String::from_utf8_lossy(peer.name().as_bytes()).into_owned();
            if peer.down() == 0 && !out.iter().any(|(n, _)| *n == name) {
                out.push((name, backup));
            }
            p = peer.next();
        }
    }
    Some(out)
}

/// The peers lists of a live upstream: primary, then backup (null when none).
///
/// # Safety
/// `uscf` must be a live upstream conf whose balancer keeps round-robin peers.
unsafe fn lists<U: RrUpstream>(uscf: &U) -> [*mut U::Peers; 2] {
    let primary = uscf.peer_data();
    if primary.is_null() {
        return [primary, core::ptr::null_mut()];
    }
    // SAFETY: `uscf` is live and its `peer.data` round robin's (this fn's contract), so `primary`
    // is a live peers list; the backup list, if any, is its `next`.
    [primary, unsafe { U::Peers::backup(primary) }]
}

/// Whether an upstream `zone` changed its peers since the map was built.
///
/// # Safety
/// As for [`lists`].
#[inline]
pub unsafe fn moved<U: RrUpstream>(uscf: &U, local: &PoolLocal<PeerOf<U>>) -> bool {
    // SAFETY: `uscf` is live and keeps round-robin peers (this fn's contract): what `config` asks.
    unsafe { config(uscf) }.is_some_and(|c| c != local.peers_config.get())
}

/// `*peers->config`: bumped by an upstream `zone` whenever its peers change.
///
/// # Safety
/// As for [`lists`].
#[inline]
unsafe fn config<U: RrUpstream>(uscf: &U) -> Option<usize> {
    let peers = uscf.peer_data();
    // SAFETY: null, or round robin's live peers list (this fn's contract).
    (!peers.is_null())
        .then(|| unsafe { U::Peers::config(peers) })
        .flatten()
}

/// A peers list's lock (an upstream `zone`'s rwlock; none without one), held until dropped.
/// A raw pointer, not a reference: other workers change the lock word while it is held.
pub struct PeersLock<L: RrPeers>(*mut L);

impl<L: RrPeers> PeersLock<L> {
    /// Takes the read lock of `peers`.
    ///
    /// # Safety
    /// `peers` must be a live round-robin peers list, not referenced while the lock is taken
    /// (taking it writes the lock word), nor written through a reference while it is held.
    pub unsafe fn read(peers: *mut L) -> PeersLock<L> {
        // SAFETY: this fn's contract is `lock`'s.
        unsafe { L::lock(peers, false) };
        PeersLock(peers)
    }

    /// Takes the write lock of `peers`.
    ///
    /// # Safety
    /// `peers` must be a live round-robin peers list, not referenced while the lock is taken.
    unsafe fn write(peers: *mut L) -> PeersLock<L> {
        // SAFETY: this fn's contract is `lock`'s.
        unsafe { L::lock(peers, true) };
        PeersLock(peers)
    }
}

impl<L: RrPeers> Drop for PeersLock<L> {
    fn drop(&mut self) {
        // SAFETY: `self.0` is the live list `read` or `write` locked.
        unsafe { L::unlock(self.0) };
    }
}

/// The address and name of the mapped peer `peer`, copied into `pool` under the peers'
/// read locks: an upstream `zone` that resolves names at run time (nginx 1.27.3 and later)
/// may free a peer whenever its name changes, so a request that bypasses the balancer
/// connects to its own copy. `None` when the peers changed since the map was built (the
/// next [`super::follow`] rebuilds it), when the pool is out of memory, or, with `live_at`
/// (Unix seconds), when round robin could not pick the peer then ([`RrPeer::live`]).
///
/// # Safety
/// As for [`lists`], in a worker; `peer` from this upstream's map, `pool` the request's.
pub unsafe fn copy_peer<U: RrUpstream>(
    uscf: &U,
    local: &PoolLocal<PeerOf<U>>,
    peer: &PeerRef<PeerOf<U>>,
    pool: *mut ngx_pool_t,
    live_at: Option<time_t>,
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
    let (addr, len, name) = (p.sockaddr(), p.socklen() as usize, p.name());
    if addr.is_null() || live_at.is_some_and(|now| !p.live(now)) {
        return None;
    }
    // One block: the name's `ngx_str_t` first (ngx_palloc aligns it), then the address (at
    // 16 bytes, aligned for any sockaddr), then the name's bytes.
    let head = core::mem::size_of::<ngx_str_t>();
    // SAFETY: `pool` is the live request's pool (this fn's contract).
    let block = unsafe { ngx_palloc(pool, head + len + name.len) }.cast::<u8>();
    if block.is_null() {
        return None;
    }
    // SAFETY: `block` has room for the three parts laid out above; the peer's address is
    // `socklen` bytes and its name `name.len`, both live under the locks.
    unsafe {
        let to = block.add(head);
        let text = to.add(len);
        core::ptr::copy_nonoverlapping(addr.cast::<u8>(), to, len);
        core::ptr::copy_nonoverlapping(name.data, text, name.len);
        let copy = block.cast::<ngx_str_t>();
        copy.write(ngx_str_t {
            len: name.len,
            data: text,
        });
        Some((to.cast(), p.socklen(), copy))
    }
}

/// Whether a pick of server `server` may be passed over for its ramp: no peer of it is under
/// nginx's own `max_fails` watch (round robin's free of a pick it passes over would clear
/// that), and another primary peer could take the request at `now` (Unix seconds), so that
/// asking the balancer again finds one. Read under the primary list's read lock; false when
/// the map is not built.
///
/// # Safety
/// As for [`lists`], in a worker.
pub unsafe fn may_pass_over<U: RrUpstream>(
    uscf: &U,
    local: &PoolLocal<PeerOf<U>>,
    server: u16,
    now: time_t,
) -> bool {
    let Ok(map) = local.peers.try_borrow() else {
        return false;
    };
    // SAFETY: `uscf` is live and keeps round-robin peers (this fn's contract).
    let [primary, _] = unsafe { lists(uscf) };
    if primary.is_null() || map.is_empty() {
        return false;
    }
    // SAFETY: a live peers list, not referenced while locked.
    let _r = unsafe { PeersLock::read(primary) };
    // SAFETY: the map's peers are live while the peers did not change since it was built,
    // checked under the lock that keeps them so.
    if unsafe { moved(uscf, local) } {
        return false;
    }
    let (mut watched, mut other) = (false, false);
    // SAFETY: the list is locked; its head pointer is only read.
    let mut p = unsafe { U::Peers::first(primary) };
    // SAFETY: the list's peers, which its lock (held) keeps in place; only read.
    while let Some(peer) = unsafe { p.as_ref() } {
        let mine = map
            .iter()
            .any(|m| m.server == server && core::ptr::eq(m.peer, peer));
        if mine {
            watched |= peer.fails() != 0;
        } else {
            other |= peer.live(now);
        }
        p = peer.next();
    }
    !watched && other
}

/// Marks each peer of a server that is out `down` ([`EJECTED`]) and clears the mark of each
/// that is back in (a dry run marks nothing), rebuilding the map of peers to servers first
/// when there is none or an upstream `zone` changed its peers; counts the peers left out.
///
/// # Safety
/// As for [`lists`], in a worker.
pub unsafe fn apply<U: RrUpstream>(uscf: &U, pool: &Pool<PeerOf<U>>) {
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
        let mut p = unsafe { U::Peers::first(list) };
        // SAFETY: the list's peers, which its lock (held) keeps in place.
        while let Some(peer) = unsafe { p.as_mut() } {
            let name = peer.name().as_bytes();
            let server = pool.servers.iter().position(|s| s.name.as_bytes() == name);
            if let Some(i) = server {
                if rebuild {
                    map.push(PeerRef {
                        name: peer.name(),
                        peer: core::ptr::from_mut(peer),
                        server: i as u16,
                    });
                }
                let out = pool.servers[i].local.out.get() && !pool.cfg.dry_run;
                if out && peer.down() == 0 {
                    peer.set_down(EJECTED);
                } else if !out && peer.down() == EJECTED {
                    peer.set_down(0);
                }
                downed += u32::from(peer.down() == EJECTED);
            }
            p = peer.next();
        }
    }
    local.downed.set(downed);
}
