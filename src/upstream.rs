//! Upstream hooks: `peer.init` decides per request (pass, probe or short-circuit); `peer.get`
//! and `peer.free` wrap the balancer's own and record every attempt's outcome.

use core::cell::Cell;
use core::ffi::c_void;

use circuit_breaker_core::breaker::{Admission, Attempt, Ending as Transport, Ticket, Transition};
use circuit_breaker_core::snapshot::State;
use nginx_sys::{
    ngx_current_msec, ngx_http_request_t, ngx_http_upstream_srv_conf_t, ngx_http_upstream_t,
    ngx_int_t, ngx_list_t, ngx_msec_t, ngx_parse_http_time, ngx_peer_connection_t,
    ngx_pool_cleanup_add, ngx_table_elt_t, ngx_time, ngx_uint_t, NGX_DECLINED, NGX_ERROR,
    NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_LOG_ERR, NGX_LOG_WARN, NGX_OK, NGX_PEER_FAILED,
};
use ngx::http::{HttpModuleLocationConf, HttpModuleServerConf};

use crate::conf::{LocConf, MainConf, SrvConf};
use crate::util::{guard, hash_name, key_hash, now_ms, pid, process_alive, rnd};
use crate::zone::{Key, Missing, NodeRef, Zone, DEFAULT_ROUTE};
use crate::Module;

/// Per-request state: the balancer's callbacks we wrap, the breaker key, and what happened.
/// Also the request's module ctx, read by the header filter and the variables.
pub struct PeerData {
    original_get: nginx_sys::ngx_event_get_peer_pt,
    original_free: nginx_sys::ngx_event_free_peer_pt,
    original_notify: nginx_sys::ngx_event_notify_peer_pt,
    #[cfg(ngx_ssl)]
    original_set_session: nginx_sys::ngx_event_set_peer_session_pt,
    #[cfg(ngx_ssl)]
    original_save_session: nginx_sys::ngx_event_save_peer_session_pt,
    original_data: *mut c_void,
    request: *mut ngx_http_request_t,
    scf: *const SrvConf,
    route: &'static str,
    hash: u64,
    ticket: Ticket,
    attempt_started: ngx_msec_t,
    /// The breaker's state as this request last saw it; `None` when no breaker applied.
    pub state: Option<State>,
    /// Set when the PRECONTENT phase already asked the breaker.
    admitted: Option<Admitted>,
    /// The breaker, found again without a lookup when the attempt is recorded.
    node: NodeRef,
    /// The request was answered without touching the origin.
    pub short_circuited: bool,
    /// ... by letting nginx serve a stale cache entry.
    stale: bool,
    /// `X-Circuit-State` is already in the response headers.
    pub header_added: bool,
}

impl PeerData {
    /// The route name for `$circuit_breaker_route`.
    pub fn route(&self) -> &str {
        self.route
    }

    fn key(&self) -> Key<'_> {
        Key {
            hash: self.hash,
            // SAFETY: the upstream conf lives as long as the cycle the request runs in.
            upstream: unsafe { (*self.scf).name.as_bytes() },
            route: self.route.as_bytes(),
        }
    }

    fn zone(&self) -> Option<(Zone, &MainConf)> {
        // SAFETY: set in postconfiguration; lives for the cycle.
        let mcf = unsafe { (*self.scf).main.as_ref()? };
        // SAFETY: our own zone.
        let zone = unsafe { Zone::from_shm(mcf.zone)? };
        Some((zone, mcf))
    }

    fn name(&self) -> String {
        // SAFETY: as in `key`.
        format!("{}/{}", unsafe { &(*self.scf).name }, self.route)
    }

    fn log_transition(&self, t: &Transition) {
        // SAFETY: the request is live while its peer data is.
        let log = unsafe { (*(*self.request).connection).log };
        log_transition(log, &self.name(), t);
    }
}

/// One `warn` line per transition, with its numbers.
pub fn log_transition(log: *mut nginx_sys::ngx_log_t, name: &str, t: &Transition) {
    let verb = match t.to {
        State::Open => "opened",
        State::HalfOpen => "half-opened",
        State::Closed => "closed",
    };
    match &t.detail {
        Some(d) => {
            ngx::ngx_log_error!(
                NGX_LOG_WARN,
                log,
                "circuit breaker \"{}\" {}: {}, {}",
                name,
                verb,
                t.reason,
                d
            );
        }
        None => {
            ngx::ngx_log_error!(
                NGX_LOG_WARN,
                log,
                "circuit breaker \"{}\" {}: {}",
                name,
                verb,
                t.reason
            );
        }
    }
}

/// Logs a breaker that could not be allocated, once per worker and breaker.
fn log_full_once(log: *mut nginx_sys::ngx_log_t, hash: u64, name: &str) {
    thread_local! {
        static SEEN: core::cell::RefCell<Vec<u64>> = const { core::cell::RefCell::new(Vec::new()) };
    }
    let first = SEEN.with(|s| {
        let mut s = s.borrow_mut();
        if s.contains(&hash) || s.len() > 4096 {
            false
        } else {
            s.push(hash);
            true
        }
    });
    if first {
        ngx::ngx_log_error!(
            NGX_LOG_ERR,
            log,
            "circuit breaker \"{}\" not created: the zone is full, its traffic passes unchecked",
            name
        );
    }
}

/// The wrapped `peer.init`.
pub unsafe extern "C" fn init_peer(
    r: *mut ngx_http_request_t,
    us: *mut ngx_http_upstream_srv_conf_t,
) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx calls peer.init with a live request and its upstream's conf.
        unsafe { init_peer_inner(r, us) }
    })
}

/// What the breaker said about a request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// No breaker applies (zone full, or a worker of an older configuration).
    Unchecked,
    Pass,
    Probe,
    Reject(u64),
}

/// The route of the request's location: its name and name hash.
fn route_of(req: &ngx_http_request_t) -> (&'static str, u64) {
    match Module::location_conf(req).and_then(|l: &LocConf| l.route.as_ref()) {
        // SAFETY: loc confs live for the cycle the request runs in; 'static stands for that.
        Some(rt) => (unsafe { &*(rt.name.as_str() as *const str) }, rt.hash),
        None => (DEFAULT_ROUTE, hash_name(DEFAULT_ROUTE.as_bytes())),
    }
}

/// Most PeerData kept for reuse by this worker: enough for its busiest moment in most
/// setups, bounded so a burst does not pin memory.
const SPARE_PEER_DATA: usize = 1024;

thread_local! {
    /// Worker-local PeerData ready for reuse. Taking them from here rather than from the
    /// request pool keeps a proxied request within its first pool block (the request pool
    /// is 4 KiB and a keepalive proxy request nearly fills it): one malloc less per request.
    #[allow(clippy::vec_box)] // handed out by address (Box::leak), they come back whole
    static SPARE: core::cell::RefCell<Vec<Box<PeerData>>> =
        const { core::cell::RefCell::new(Vec::new()) };
}

/// The request's PeerData for (upstream, route): set as the module ctx, with a pool cleanup
/// that gives back a probe slot the request still holds and then recycles the PeerData.
fn attach(req: &mut ngx_http_request_t, scf: &SrvConf) -> Option<&'static mut PeerData> {
    let (route, route_hash) = route_of(req);
    // SAFETY: the request pool is live.
    let cln = unsafe { ngx_pool_cleanup_add(req.pool, 0) };
    // SAFETY: null or the cleanup record just added.
    let cln = unsafe { cln.as_mut() }?;
    let fresh = PeerData {
        original_get: None,
        original_free: None,
        original_notify: None,
        #[cfg(ngx_ssl)]
        original_set_session: None,
        #[cfg(ngx_ssl)]
        original_save_session: None,
        original_data: core::ptr::null_mut(),
        request: req,
        scf,
        route,
        hash: key_hash(scf.name_hash, route_hash),
        ticket: Ticket::Normal,
        attempt_started: 0,
        state: None,
        admitted: None,
        node: NodeRef::NONE,
        short_circuited: false,
        stale: false,
        header_added: false,
    };
    let spare = SPARE
        .try_with(|s| s.try_borrow_mut().ok()?.pop())
        .ok()
        .flatten();
    let pd = match spare {
        Some(mut b) => {
            *b = fresh;
            b
        }
        None => Box::new(fresh),
    };
    // Owned by the cleanup from here on: it runs when the request pool is destroyed, after
    // the last use of the request (log phase included).
    let pd = Box::leak(pd);
    cln.handler = Some(release_on_cleanup);
    cln.data = (pd as *mut PeerData).cast();
    crate::respond::set_ctx(req, pd);
    Some(pd)
}

/// Asks the breaker whether this request may go to the origin.
/// `hint`, when given, remembers where this location's breaker sits in the zone, so that the
/// next request skips the hash lookup.
fn admit(pd: &mut PeerData, req: &ngx_http_request_t, hint: Option<&Cell<NodeRef>>) -> Verdict {
    // SAFETY: the upstream conf lives for the cycle.
    let Some(cfg) = (unsafe { (*pd.scf).breaker.as_ref() }) else {
        return Verdict::Unchecked;
    };
    let Some((zone, mcf)) = pd.zone() else {
        return Verdict::Unchecked;
    };
    if let Some(h) = hint {
        // The common case, a closed breaker, needs no lock: it lets the request through, and
        // its outcome is recorded (under the lock) in peer.free.
        if zone.passes_closed(h.get()) {
            pd.node = h.get();
            pd.state = Some(State::Closed);
            return Verdict::Pass;
        }
    }
    let now = now_ms();
    let decision = {
        let mut locked = zone.lock();
        let found = match hint.and_then(|h| locked.by_ref(h.get())) {
            Some(node) => Ok(node),
            None => locked.find_or_create_ref(&pd.key(), cfg, mcf.generation),
        };
        match found {
            Ok((mut b, node)) => {
                if let Some(h) = hint {
                    h.set(node);
                }
                let d = b.admit(now, rnd(), pid(), &process_alive, true);
                let state = b.state();
                pd.node = node;
                Ok((d, state))
            }
            Err(e) => Err(e),
        }
    };
    let (decision, state) = match decision {
        Ok(d) => d,
        Err(Missing::Full) => {
            log_full_once(req.connection_log(), pd.hash, &pd.name());
            return Verdict::Unchecked;
        }
        Err(Missing::Stale) => return Verdict::Unchecked,
    };
    if let Some(t) = &decision.transition {
        pd.log_transition(t);
    }
    pd.state = Some(state);
    match decision.admission {
        // A dry run's would-be rejections are counted in the breaker's totals.
        Admission::Pass { .. } => Verdict::Pass,
        Admission::Probe(ticket) => {
            pd.ticket = ticket;
            Verdict::Probe
        }
        // The shell never sets a ramp yet, so `Recovering` does not occur; answered as a
        // rejection until the shell labels it `recovering`.
        Admission::Reject { retry_after_ms } | Admission::Recovering { retry_after_ms } => {
            pd.short_circuited = true;
            Verdict::Reject(retry_after_ms)
        }
    }
}

/// PRECONTENT phase: in a location that passes to a fixed breaker-enabled upstream and has no
/// cache, an open breaker answers here, before the proxy module builds the upstream request —
/// as cheap as a `return 503`. Locations with a cache (a fresh hit or a stale entry may still
/// answer) or an upstream chosen at run time are decided in `peer.init`.
pub unsafe extern "C" fn precontent(r: *mut ngx_http_request_t) -> ngx_int_t {
    guard(NGX_DECLINED as ngx_int_t, || {
        // SAFETY: nginx runs phase handlers with a live request.
        let req = unsafe { &mut *r };
        let Some(lcf) = Module::location_conf(req) else {
            return NGX_DECLINED as ngx_int_t;
        };
        let lcf: &LocConf = lcf;
        if lcf.upstream.is_null() || lcf.cached || crate::respond::ctx_here(req).is_some() {
            return NGX_DECLINED as ngx_int_t;
        }
        // SAFETY: a fixed upstream's conf lives for the cycle.
        let Some(scf) = Module::server_conf(unsafe { &*lcf.upstream }) else {
            return NGX_DECLINED as ngx_int_t;
        };
        if scf.breaker.is_none() || scf.original_init.is_none() {
            return NGX_DECLINED as ngx_int_t;
        }
        let Some(pd) = attach(req, scf) else {
            return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
        };
        let verdict = admit(pd, req, Some(&lcf.node_hint));
        match verdict {
            Verdict::Reject(retry_after_ms) => {
                let state = pd.state.unwrap_or(State::Open);
                // SAFETY: the request is live.
                unsafe { crate::respond::reject(req, state, retry_after_ms) }
            }
            v => {
                pd.admitted = Some(v.into());
                NGX_DECLINED as ngx_int_t
            }
        }
    })
}

/// What `precontent` decided, for `peer.init` to honour rather than ask twice.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    Unchecked,
    Pass,
    Probe,
}

impl From<Verdict> for Admitted {
    fn from(v: Verdict) -> Admitted {
        match v {
            Verdict::Probe => Admitted::Probe,
            Verdict::Pass => Admitted::Pass,
            _ => Admitted::Unchecked,
        }
    }
}

unsafe fn init_peer_inner(
    r: *mut ngx_http_request_t,
    us: *mut ngx_http_upstream_srv_conf_t,
) -> ngx_int_t {
    // SAFETY: per the caller.
    let (req, uscf) = unsafe { (&mut *r, &mut *us) };
    let Some(scf) = Module::server_conf(uscf) else {
        return NGX_ERROR as ngx_int_t;
    };
    let Some(original_init) = scf.original_init else {
        return NGX_ERROR as ngx_int_t;
    };
    if scf.breaker.is_none() {
        // SAFETY: the balancer's own init, with the arguments nginx gave us.
        return unsafe { original_init(r, us) };
    }
    // SAFETY: peer.init runs with the request's upstream set up.
    let Some(u) = (unsafe { req.upstream.as_mut() }) else {
        return NGX_ERROR as ngx_int_t;
    };
    let (_, route_hash) = route_of(req);
    let early = crate::respond::ctx_here(req).filter(|pd| {
        pd.admitted.is_some()
            && core::ptr::eq(pd.scf, scf)
            && pd.hash == key_hash(scf.name_hash, route_hash)
    });
    let pd = match early {
        Some(pd) => pd,
        None => match attach(req, scf) {
            Some(pd) => pd,
            None => return NGX_ERROR as ngx_int_t,
        },
    };
    let verdict = match pd.admitted.take() {
        Some(Admitted::Pass) => Verdict::Pass,
        Some(Admitted::Probe) => Verdict::Probe,
        Some(Admitted::Unchecked) => Verdict::Unchecked,
        None => admit(pd, req, None),
    };

    if let Verdict::Reject(retry_after_ms) = verdict {
        // Short-circuited: the balancer is never asked (its init would only allocate), and
        // no connection is made; get_peer answers NGX_DECLINED on the stale path.
        u.peer.data = (pd as *mut PeerData).cast();
        u.peer.get = Some(get_peer);
        u.peer.free = Some(free_peer);
        u.peer.tries = 0;
        // SAFETY: request and upstream are live.
        if unsafe { crate::respond::can_serve_stale(req, u) } {
            pd.stale = true;
            return NGX_OK as ngx_int_t;
        }
        let state = pd.state.unwrap_or(State::Open);
        // SAFETY: as above; see respond::short_circuit for the request accounting.
        return unsafe { crate::respond::short_circuit(req, u, state, retry_after_ms) };
    }

    // SAFETY: the balancer's own init, with the arguments nginx gave us.
    let rc = unsafe { original_init(r, us) };
    if rc != NGX_OK as ngx_int_t {
        return rc;
    }
    pd.original_get = u.peer.get;
    pd.original_free = u.peer.free;
    pd.original_notify = u.peer.notify;
    #[cfg(ngx_ssl)]
    {
        pd.original_set_session = u.peer.set_session;
        pd.original_save_session = u.peer.save_session;
    }
    pd.original_data = u.peer.data;
    u.peer.data = (pd as *mut PeerData).cast();
    u.peer.get = Some(get_peer);
    u.peer.free = Some(free_peer);
    if pd.original_notify.is_some() {
        u.peer.notify = Some(notify_peer);
    }
    #[cfg(ngx_ssl)]
    {
        u.peer.set_session = Some(set_session);
        u.peer.save_session = Some(save_session);
    }
    if verdict == Verdict::Probe {
        // One probe is one attempt: no proxy_next_upstream retry on its behalf.
        u.peer.tries = 1;
    }
    NGX_OK as ngx_int_t
}

trait ConnectionLog {
    fn connection_log(&self) -> *mut nginx_sys::ngx_log_t;
}

impl ConnectionLog for ngx_http_request_t {
    fn connection_log(&self) -> *mut nginx_sys::ngx_log_t {
        // SAFETY: a live request has a live connection.
        unsafe { (*self.connection).log }
    }
}

/// The wrapped `peer.get`: no connection at all while short-circuited to stale.
unsafe extern "C" fn get_peer(pc: *mut ngx_peer_connection_t, data: *mut c_void) -> ngx_int_t {
    guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: data is our PeerData, set in init_peer; pc is the request's peer.
        let (pd, pc) = unsafe { (&mut *data.cast::<PeerData>(), &mut *pc) };
        if pd.stale {
            // NGX_DECLINED makes nginx take its "error" path without a log line; with
            // tries at 0 that path serves the stale entry (proxy_cache_use_stale error).
            pc.tries = 0;
            return NGX_DECLINED as ngx_int_t;
        }
        let Some(get) = pd.original_get else {
            return NGX_ERROR as ngx_int_t;
        };
        // SAFETY: the current msec counter is maintained by nginx's event loop.
        pd.attempt_started = unsafe { ngx_current_msec };
        // SAFETY: the balancer's own get with its own data.
        unsafe { get(pc, pd.original_data) }
    })
}

/// The wrapped `peer.free`: records the attempt's outcome, then stops retries when the breaker
/// is no longer closed.
unsafe extern "C" fn free_peer(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
    state: ngx_uint_t,
) {
    guard((), || {
        // SAFETY: as in get_peer.
        let (pd, pcr) = unsafe { (&mut *data.cast::<PeerData>(), &mut *pc) };
        // SAFETY: the request and its upstream are live during free.
        let attempt = unsafe { attempt_of(pd, pcr, state) };
        if let Some(free) = pd.original_free {
            // SAFETY: the balancer's own free with its own data.
            unsafe { free(pc, pd.original_data, state) };
        }
        let Some((zone, _)) = pd.zone() else { return };
        let ticket = core::mem::replace(&mut pd.ticket, Ticket::Normal);
        let recorded = {
            let mut locked = zone.lock();
            locked
                .find_by_ref(pd.node, &pd.key())
                .map(|mut b| b.record(now_ms(), rnd(), ticket, &attempt, true))
        };
        let Some(recorded) = recorded else {
            return;
        };
        if attempt.ending == Transport::Tls {
            // SAFETY: the request is live during free.
            let log = unsafe { (*pd.request).connection_log() };
            ngx::ngx_log_error!(
                NGX_LOG_ERR,
                log,
                "circuit breaker \"{}\": TLS failure with the upstream, counted apart, not as an origin failure",
                pd.name()
            );
        }
        // SAFETY: the upstream conf lives for the cycle.
        let dry_run = unsafe { (*pd.scf).breaker.is_some_and(|c| c.dry_run) };
        if let Some(t) = &recorded.transition {
            pd.log_transition(t);
        }
        pd.state = Some(recorded.state);
        if recorded.state != State::Closed && !dry_run {
            // No proxy_next_upstream retries while open or half-open.
            pcr.tries = 0;
        }
    })
}

/// What one attempt amounted to, read off the upstream state at `free` time: nginx calls
/// `free` before it closes the upstream connection, so the event flags are still there.
///
/// # Safety
/// `pd.request` must be live with an upstream.
unsafe fn attempt_of(pd: &PeerData, pc: &ngx_peer_connection_t, state: ngx_uint_t) -> Attempt {
    // SAFETY: per the contract.
    let u = unsafe { &*(*pd.request).upstream };
    // SAFETY: see above; ngx_current_msec is maintained by nginx.
    let elapsed = unsafe { ngx_current_msec }.saturating_sub(pd.attempt_started) as u64;
    // SAFETY: u.state is the current attempt's state record.
    let status = unsafe { u.state.as_ref() }.map_or(0, |s| s.status) as u16;
    let failed = state & NGX_PEER_FAILED as ngx_uint_t != 0;
    let transport = if status != 0 {
        if failed && status < 400 {
            // A status line, then headers nginx refused.
            Transport::InvalidHeader
        } else {
            Transport::Response
        }
    } else if !failed {
        // Freed with no response and no failure: the client went away first.
        Transport::NoVerdict
    } else {
        // SAFETY: the connection, when present, is still open during free.
        match unsafe { pc.connection.as_ref() } {
            // SAFETY: events of a live connection.
            Some(c) if unsafe { (*c.read).timedout() != 0 || (*c.write).timedout() != 0 } => {
                Transport::Timeout
            }
            Some(c) if tls_failed(c, u) => Transport::Tls,
            _ if u.buffer.start.is_null() || u.buffer.last == u.buffer.start => Transport::Error,
            // Bytes arrived but made no valid header.
            _ => Transport::InvalidHeader,
        }
    };
    let retry_after_s = if status == 503 {
        // SAFETY: the upstream's parsed headers list.
        unsafe { retry_after(&u.headers_in.headers) }
    } else {
        None
    };
    Attempt {
        ending: transport,
        status: if transport == Transport::Response {
            status
        } else {
            0
        },
        retry_after_s,
        response_ms: elapsed,
    }
}

/// A TLS connection that failed before the request could be sent: the handshake did not
/// complete, or it did and the certificate check refused the peer (nginx verifies after the
/// handshake and sets `request_sent` only past both). A handshake that timed out is a timeout.
#[cfg(ngx_ssl)]
fn tls_failed(c: &nginx_sys::ngx_connection_t, u: &ngx_http_upstream_t) -> bool {
    !c.ssl.is_null() && u.request_sent() == 0
}

#[cfg(not(ngx_ssl))]
fn tls_failed(_c: &nginx_sys::ngx_connection_t, _u: &ngx_http_upstream_t) -> bool {
    false
}

/// `Retry-After` in seconds: delta-seconds or an HTTP date.
///
/// # Safety
/// `list` must be a live headers list.
unsafe fn retry_after(list: &ngx_list_t) -> Option<u32> {
    let mut part = &list.part;
    loop {
        // SAFETY: a list part's elts hold nelts table elements.
        let elts =
            unsafe { core::slice::from_raw_parts(part.elts.cast::<ngx_table_elt_t>(), part.nelts) };
        for h in elts {
            if h.hash != 0 && h.key.as_bytes().eq_ignore_ascii_case(b"retry-after") {
                let v = h.value.as_bytes();
                if let Some(n) = core::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok())
                {
                    return Some(n);
                }
                // SAFETY: nginx's parser reads exactly len bytes.
                let t = unsafe { ngx_parse_http_time(h.value.data, h.value.len) };
                if t > 0 {
                    return Some((t - ngx_time()).clamp(0, i64::from(u32::MAX)) as u32);
                }
                return None;
            }
        }
        // SAFETY: next is null or the next live part.
        match unsafe { part.next.as_ref() } {
            Some(p) => part = p,
            None => return None,
        }
    }
}

unsafe extern "C" fn notify_peer(
    pc: *mut ngx_peer_connection_t,
    data: *mut c_void,
    ty: ngx_uint_t,
) {
    // SAFETY: our PeerData; the balancer's own notify with its own data.
    unsafe {
        let pd = &*data.cast::<PeerData>();
        if let Some(f) = pd.original_notify {
            f(pc, pd.original_data, ty);
        }
    }
}

#[cfg(ngx_ssl)]
unsafe extern "C" fn set_session(pc: *mut ngx_peer_connection_t, data: *mut c_void) -> ngx_int_t {
    // SAFETY: as in notify_peer.
    unsafe {
        let pd = &*data.cast::<PeerData>();
        match pd.original_set_session {
            Some(f) => f(pc, pd.original_data),
            None => NGX_OK as ngx_int_t,
        }
    }
}

#[cfg(ngx_ssl)]
unsafe extern "C" fn save_session(pc: *mut ngx_peer_connection_t, data: *mut c_void) {
    // SAFETY: as in notify_peer.
    unsafe {
        let pd = &*data.cast::<PeerData>();
        if let Some(f) = pd.original_save_session {
            f(pc, pd.original_data);
        }
    }
}

/// Request pool cleanup: a probe slot still held (the request ended before any attempt was
/// recorded) goes back without a verdict.
unsafe extern "C" fn release_on_cleanup(data: *mut c_void) {
    // SAFETY: `attach` leaked this box into the cleanup, which runs once.
    let pd = unsafe { Box::from_raw(data.cast::<PeerData>()) };
    guard((), || {
        if let Ticket::Probe(_) = pd.ticket {
            if let Some((zone, _)) = pd.zone() {
                let mut locked = zone.lock();
                if let Some(mut b) = locked.find_by_ref(pd.node, &pd.key()) {
                    b.release(now_ms(), pd.ticket);
                }
            }
        }
    });
    // try_with: at process exit the list may already be gone; the box is then just freed.
    let _ = SPARE.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            if s.len() < SPARE_PEER_DATA {
                s.push(pd);
            }
        }
    });
}

/// The cleanup handler's address, to find a request's PeerData after an internal redirect
/// cleared the module ctx (as the realip module does).
pub fn cleanup_handler() -> unsafe extern "C" fn(*mut c_void) {
    release_on_cleanup
}
