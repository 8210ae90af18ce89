//! A request's state, in its features' parts: which breaker judges it, the balancer
//! callbacks it wraps, its attempts, its settlement, what it was told, the limit's slot. It is
//! kept for the request's pool, is the module's request ctx, and has a pool cleanup that
//! frees the probe or gives back a slot of the adaptive limit the request still holds — and
//! by which it is found again after an internal redirect cleared the ctx (as the realip
//! module does).

use circuit_breaker_core::class::Class;
use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::ptr::NonNull;

use circuit_breaker_core::breaker::{Attempt, BreakerConfig, Classified, Ticket};
use circuit_breaker_core::snapshot::State;
use nginx_sys::{
    ngx_event_free_peer_pt, ngx_event_get_peer_pt, ngx_event_notify_peer_pt, ngx_http_request_t,
    ngx_http_upstream_srv_conf_t, ngx_msec_t, ngx_palloc, ngx_pool_cleanup_t,
};

use crate::conf::Module;
use crate::conf::{default_route, LocConf, MainConf, Route, SrvConf};
use crate::limit::{self, Hold};
use circuit_breaker_shell::ffi::{guard, key_hash};
use circuit_breaker_shell::zone::{Handle, Key, Zone};

/// What `$circuit_breaker_state` and `X-Circuit-State` say of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    /// The breaker's state when the request last saw it.
    State(State),
    /// Turned away by the recovery ramp of a breaker that just closed.
    Recovering,
    /// Shed by the adaptive in-flight limit (the breaker is closed).
    Limited,
}

impl Label {
    pub fn name(self) -> &'static str {
        match self {
            Label::State(s) => s.name(),
            Label::Recovering => "recovering",
            Label::Limited => "limited",
        }
    }
}

/// The balancer's own callbacks and data, which ours wrap.
#[derive(Clone, Copy)]
pub struct Balancer {
    pub get: ngx_event_get_peer_pt,
    pub free: ngx_event_free_peer_pt,
    pub notify: ngx_event_notify_peer_pt,
    #[cfg(ngx_ssl)]
    pub set_session: nginx_sys::ngx_event_set_peer_session_pt,
    #[cfg(ngx_ssl)]
    pub save_session: nginx_sys::ngx_event_save_peer_session_pt,
    pub data: *mut c_void,
}

impl Balancer {
    const NONE: Balancer = Balancer {
        get: None,
        free: None,
        notify: None,
        #[cfg(ngx_ssl)]
        set_session: None,
        #[cfg(ngx_ssl)]
        save_session: None,
        data: core::ptr::null_mut(),
    };
}

/// One request's state, in the parts each feature reads: which breaker judges it
/// ([`Judge`]), the balancer it wraps ([`Balancer`]), its attempts ([`Attempts`]), what
/// settles it on its breaker ([`Settlement`]), what it was told ([`Told`]) and the adaptive
/// limit's slot ([`Hold`]).
///
/// The parts are cut so that none pads inside: the state is no larger than its fields laid
/// out flat, and it is filled whole for every request the breaker lets through
/// (`scripts/bench-instructions`, closed).
pub struct RequestState {
    /// The request this state belongs to: subrequests share the pool and its cleanups, so a
    /// state found there is this request's only if this matches.
    request: *const ngx_http_request_t,
    pub judge: Judge,
    pub balancer: Balancer,
    pub attempts: Attempts,
    pub settlement: Settlement,
    pub told: Told,
    /// A slot of the adaptive limit, until the request's last upstream attempt ends.
    pub limit: Hold,
    /// The pool cleanup record that releases this state, kept in the state rather than
    /// allocated by `ngx_pool_cleanup_add` (`scripts/bench-instructions`, closed).
    cleanup: ngx_pool_cleanup_t,
}

/// Which breaker judges a request: its upstream and route (its key), and where it was last
/// found in the zone. Set when the state is made; the handle follows the breaker.
pub struct Judge {
    scf: *const SrvConf,
    route: *const Route,
    pub key_hash: u64,
    /// Where the breaker was found, to find it again without a lookup.
    pub handle: Handle,
    /// nginx's conf of the upstream, set in `peer.init` (null before): what the pool's
    /// server probes and moves reach.
    pub uscf: *const ngx_http_upstream_srv_conf_t,
}

impl Judge {
    /// The upstream's conf.
    pub fn srv_conf(&self) -> &SrvConf {
        // SAFETY: upstream confs live as long as the configuration the request runs under.
        unsafe { &*self.scf }
    }

    /// The upstream's conf, apart from the state's borrow: it lives as long as the
    /// configuration the request runs under, which outlives the state.
    pub fn srv_conf_ptr(&self) -> *const SrvConf {
        self.scf
    }

    /// The request's route.
    pub fn route(&self) -> &Route {
        // SAFETY: routes live in loc confs (or a static) for the configuration's lifetime.
        unsafe { &*self.route }
    }

    /// The breaker's key.
    pub fn key(&self) -> Key<'_> {
        self.srv_conf().key(self.route())
    }

    /// The zone and the main conf, when a zone exists.
    /// Both live as long as the configuration the request runs under, longer than any
    /// borrow of the request's state: their lifetime is not tied to it.
    #[inline]
    pub fn zone<'c>(&self) -> Option<(&'c Zone, &'c MainConf)> {
        // SAFETY: `scf` and its `main` are set from confs that live as long as the
        // configuration, which outlives every request run under it.
        let mcf: &'c MainConf = unsafe { (*self.scf).main.as_ref()? };
        Some((mcf.zone()?, mcf))
    }

    /// `a`, classified by the upstream's classes (which are its servers' too), once for every
    /// consumer of its outcome. Inline: a plain answer's verdict is then made in registers
    /// (`scripts/bench-instructions`, closed).
    #[inline(always)]
    pub fn classify(&self, a: Attempt) -> Classified {
        match &self.srv_conf().breaker {
            Some(cfg) => Classified::of(a, cfg),
            None => Classified::of(a, &BreakerConfig::default()),
        }
    }

    /// `upstream/route`, as log lines name a breaker.
    pub fn name(&self) -> String {
        format!("{}/{}", self.srv_conf().name, self.route().name)
    }
}

/// A request's attempts: the current one (its server, its ticket there, who routed it), how
/// many were started, and the retry's bookkeeping — whether the first attempt is in the
/// retry budget, and whether a pool cleanup stands in for a retry nginx said it would make
/// — with the client's body, by whose end they are timed. The attempt a retry waits on is
/// the [`Settlement`]'s: it is what the request's breaker records should the retry not come.
pub struct Attempts {
    /// The server of the current attempt ([`NO_SERVER`]: none of the pool's), and the
    /// attempt's ticket on that server's breaker.
    pub server: u16,
    pub server_ticket: Ticket,
    /// The current attempt was routed by this module, not the balancer: it probes an ejected
    /// server, or goes to a returning one whose pick the ramp passed over when the balancer
    /// found no other server (`crate::upstream::ramp`).
    pub routed: bool,
    /// The server whose pick the ramp passed over for the first attempt ([`NO_SERVER`]:
    /// none): a retry the balancer finds no server for goes there.
    pub passed_over: u16,
    /// Attempts started.
    pub started: u16,
    /// The request's first attempt is in the retry budget.
    pub counted_first: bool,
    /// A pool cleanup settles the request's pending attempt should the request end with it.
    pub settles_late: bool,
    /// The client's request body was still arriving when `peer.init` ran (an upload passed
    /// on as it arrives), and, once the body filter saw its end, when (`ngx_current_msec`):
    /// the origin's time starts there, not at the connect.
    pub body_arriving: bool,
    pub body_done_at: Option<ngx_msec_t>,
}

impl Attempts {
    /// When the client's body ended, if it was still arriving when nginx connected: as the
    /// body filter saw it, or now when it has not ended yet (the attempt ended first).
    #[inline(always)]
    pub fn body_end(&self) -> Option<ngx_msec_t> {
        self.body_arriving.then(|| {
            self.body_done_at.unwrap_or({
                // SAFETY: a plain global only this worker's event loop writes, and it runs us.
                unsafe { nginx_sys::ngx_current_msec }
            })
        })
    }

    /// Whether the client's body, still arriving when nginx connected, has not ended yet.
    #[inline(always)]
    pub fn body_open(&self) -> bool {
        self.body_arriving && self.body_done_at.is_none()
    }
}

/// What the request's breaker holds of it until its outcome is settled: the request's
/// ticket (through which a half-open probe holds the probe), the attempt pending while nginx
/// decides to retry, and the two instants `$circuit_breaker_msec` gives — what a replay needs
/// to run the breaker at the same moments.
///
/// The retry's bookkeeping is the [`Attempts`]' (the budget counts attempts, and the cleanup
/// stands in for an attempt), and whether the PRECONTENT phase let the request through is
/// [`Told`] (`peer.init` reads it, the settlement never does).
pub struct Settlement {
    /// A probe ticket, while the request holds the probe.
    pub ticket: Ticket,
    /// The last attempt, which nginx retries: what the client gets should no retry be made
    /// after all.
    pub pending: Option<Classified>,
    /// When the breaker judged the request (`ngx_current_msec`, the time its admission was
    /// asked at, or the state made), and when its outcome was recorded (0: not yet).
    pub judged_ms: u64,
    pub recorded_ms: u64,
}

/// What the breaker told the request, and its client.
pub struct Told {
    /// For the variables and the header; `None` while no breaker has answered.
    pub label: Option<Label>,
    /// The PRECONTENT phase let the request through (its breaker closed) and made this
    /// state: `peer.init` does not ask the breaker again.
    pub passed: bool,
    /// Answered without touching the origin.
    pub short_circuited: bool,
    /// `X-Circuit-State` is already in the response headers.
    pub header_added: bool,
    /// The request's class once read (`crate::upstream::class::of`): `Some(None)` when it
    /// has none.
    pub class: Option<Option<Class>>,
}

/// No server of the pool.
pub const NO_SERVER: u16 = u16::MAX;

impl RequestState {
    /// Whether the current attempt is a half-open probe: of the request's breaker, or of its
    /// server's.
    #[inline(always)]
    pub fn probes(&self) -> bool {
        self.settlement.ticket != Ticket::Normal || self.attempts.server_ticket != Ticket::Normal
    }

    /// The request this state belongs to.
    pub fn request(&self) -> *const ngx_http_request_t {
        self.request
    }

    /// Whether this is the state of request `r`.
    pub fn belongs_to(&self, r: *const ngx_http_request_t) -> bool {
        core::ptr::eq(self.request, r)
    }
}

/// The route of a location: its `circuit_breaker_route`, or the upstream's own.
pub fn route_of(lcf: Option<&LocConf>) -> &Route {
    lcf.and_then(|l| l.route.as_ref())
        .unwrap_or_else(|| default_route())
}

/// States kept for reuse by this worker.
///
/// Hand-written rather than allocated from the request pool: a keepalive proxy request
/// nearly fills its 4 KiB pool, and the state's ~150 bytes make it allocate one more pool
/// block per request: a `malloc` in `ngx_palloc_block` and its `free`, most of what the
/// closed path would cost (`scripts/bench-instructions`, closed).
struct Spares(UnsafeCell<Kept>);

/// A fixed array rather than a `Vec`: no capacity to check or grow
/// (`scripts/bench-instructions`, closed).
struct Kept {
    /// The spares, `len` of them first.
    list: [*mut RequestState; MAX_SPARES],
    len: usize,
    /// A state given back while the list was full, freed at the next give-back: nginx still
    /// reads the `next` of its cleanup record after its cleanup returns.
    doomed: Option<NonNull<RequestState>>,
}

// SAFETY: a worker runs nginx's event loop on one thread, the only one that touches this.
unsafe impl Sync for Spares {}

static SPARES: Spares = Spares(UnsafeCell::new(Kept {
    list: [core::ptr::null_mut(); MAX_SPARES],
    len: 0,
    doomed: None,
}));

/// Most states kept for reuse: enough for a busy worker, bounded so a burst does not pin
/// memory.
const MAX_SPARES: usize = 1024;

impl Spares {
    /// A state's memory: a spare one, or a new box. Either way leaked to the caller, whose
    /// cleanup gives it back with [`Spares::put`].
    #[inline(always)]
    fn take(&self, fresh: RequestState) -> NonNull<RequestState> {
        match self.pop() {
            Some(p) => Self::fill(p, fresh),
            None => NonNull::from(Box::leak(Box::new(fresh))),
        }
    }

    /// A spare state's memory, if one is kept: to [`Spares::fill`] at once.
    #[inline(always)]
    fn pop(&self) -> Option<NonNull<RequestState>> {
        // SAFETY: single-threaded (see above), and no borrow of the list outlives this call.
        let kept = unsafe { &mut *self.0.get() };
        let last = kept.len.checked_sub(1)?;
        let p = kept.list.get(last).copied().and_then(NonNull::new)?;
        kept.len = last;
        Some(p)
    }

    #[inline(always)]
    fn fill(p: NonNull<RequestState>, fresh: RequestState) -> NonNull<RequestState> {
        // SAFETY: a spare came from `Box::leak` and nothing else refers to it; the state
        // holds no resources, so overwriting it drops nothing.
        unsafe { p.as_ptr().write(fresh) };
        p
    }

    /// Gives a state back. Its memory stays as it is until the next `take`, `pop` or `put`.
    ///
    /// # Safety
    /// `state` came from [`Spares::take`] or [`Spares::pop`], and nothing refers to it any
    /// more but the pool cleanup list being walked, which is done with it before the next
    /// `take`, `pop` or `put`.
    unsafe fn put(&self, state: NonNull<RequestState>) {
        // SAFETY: only this worker's event-loop thread touches `SPARES` (see its `Sync`), and no
        // other borrow of it is live during this call.
        let kept = unsafe { &mut *self.0.get() };
        if let Some(old) = kept.doomed.take() {
            // SAFETY: `old` is a leaked `Box` from `take`, and the cleanup walk that still read
            // it finished before this call (this fn's contract): nothing refers to it now.
            drop(unsafe { Box::from_raw(old.as_ptr()) });
        }
        if kept.len < MAX_SPARES {
            kept.list[kept.len] = state.as_ptr();
            kept.len += 1;
        } else {
            kept.doomed = Some(state);
        }
    }
}

/// Creates the request's state for (upstream `scf`, `route`), sets it as the module ctx and
/// registers its cleanup. Allocates nothing from the pool, so never `None` today (the
/// callers keep the check).
///
/// Always inlined into `peer.init` (`scripts/bench-instructions`, closed).
#[inline(always)]
pub fn attach<'r>(
    r: &'r mut ngx_http_request_t,
    scf: &SrvConf,
    route: &Route,
) -> Option<&'r mut RequestState> {
    let hash = key_hash(scf.name_hash, route.hash);
    attach_with(r, scf, route, hash, Handle::NONE, false)
}

/// [`attach`] for a request the PRECONTENT phase lets through, with the key hash of
/// (`scf`, `route`) and the breaker's handle it found.
#[inline(always)]
pub fn attach_passed<'r>(
    r: &'r mut ngx_http_request_t,
    scf: &SrvConf,
    route: &Route,
    key_hash: u64,
    handle: Handle,
) -> Option<&'r mut RequestState> {
    attach_with(r, scf, route, key_hash, handle, true)
}

/// [`attach_passed`] from a spare state only, with no call: false, with nothing done, when
/// this worker keeps none (the first requests of a worker, or after a burst).
#[inline(always)]
pub fn attach_passed_spare(
    r: &mut ngx_http_request_t,
    scf: &SrvConf,
    route: &Route,
    key_hash: u64,
    handle: Handle,
) -> bool {
    let Some(p) = SPARES.pop() else {
        return false;
    };
    let state = Spares::fill(p, fresh(r, scf, route, key_hash, handle, true));
    link(r, state.as_ptr());
    true
}

#[inline(always)]
fn attach_with<'r>(
    r: &'r mut ngx_http_request_t,
    scf: &SrvConf,
    route: &Route,
    key_hash: u64,
    handle: Handle,
    passed: bool,
) -> Option<&'r mut RequestState> {
    // Owned by the cleanup from here on. It runs when the request pool is destroyed, after
    // the log phase: it gives back what the request holds, then keeps the state for reuse.
    let state = SPARES
        .take(fresh(r, scf, route, key_hash, handle, passed))
        .as_ptr();
    link(r, state);
    // SAFETY: just written; the returned borrow is tied to the request's.
    Some(unsafe { &mut *state })
}

#[inline(always)]
fn fresh(
    r: &mut ngx_http_request_t,
    scf: &SrvConf,
    route: &Route,
    key_hash: u64,
    handle: Handle,
    passed: bool,
) -> RequestState {
    RequestState {
        request: r,
        judge: Judge {
            scf,
            route,
            key_hash,
            handle,
            uscf: core::ptr::null(),
        },
        balancer: Balancer::NONE,
        attempts: Attempts {
            server: NO_SERVER,
            server_ticket: Ticket::Normal,
            routed: false,
            passed_over: NO_SERVER,
            started: 0,
            counted_first: false,
            settles_late: false,
            body_arriving: false,
            body_done_at: None,
        },
        settlement: Settlement {
            ticket: Ticket::Normal,
            pending: None,
            judged_ms: circuit_breaker_shell::clock::mono_ms(),
            recorded_ms: 0,
        },
        told: Told {
            label: None,
            passed,
            short_circuited: false,
            header_added: false,
            class: None,
        },
        limit: Hold::NONE,
        cleanup: ngx_pool_cleanup_t {
            handler: Some(release),
            data: core::ptr::null_mut(),
            next: core::ptr::null_mut(),
        },
    }
}

/// Links a state just taken into the request: its cleanup record and the module ctx.
#[inline(always)]
fn link(r: &mut ngx_http_request_t, state: *mut RequestState) {
    // The record is linked in as `ngx_pool_cleanup_add` links its own, first in the list,
    // which nginx only walks (running handlers, reading `next`), never freeing a record.

    // SAFETY: the request pool is live, and so is the state (it outlives the pool: see
    // `release`); the record is linked as nginx links its own (above).
    unsafe {
        (*state).cleanup.data = state.cast();
        (*state).cleanup.next = (*r.pool).cleanup;
        (*r.pool).cleanup = core::ptr::addr_of_mut!((*state).cleanup);
    }
    set_ctx(r, state);
}

/// What is kept of a request the PRECONTENT phase short-circuited: all that the variables
/// read of it (the header filter has nothing left to do, `X-Circuit-State` is already in).
///
/// Lighter than a [`RequestState`]: it holds nothing to give back, so it lives in the request
/// pool with its cleanup record, and its cleanup does nothing but let [`find`] find it after
/// an internal redirect, at less cost than a state (`scripts/bench-instructions`,
/// open_503).
pub struct Rejected {
    /// As [`RequestState::request`] (null in a shared record: see [`mark_rejected_here`]).
    request: *const ngx_http_request_t,
    /// Null in a shared record: the route of the request's location.
    route: *const Route,
    /// The breaker's upstream; null in a shared record: the location's.
    upstream: *const SrvConf,
    pub label: Label,
}

impl Rejected {
    /// The request's route; `None` for the route of the request's location.
    pub fn route(&self) -> Option<&Route> {
        // SAFETY: null, or a route in a loc conf (or a static), which lives for the
        // configuration's lifetime.
        unsafe { self.route.as_ref() }
    }

    /// The breaker's upstream; `None` for the upstream of the request's location.
    pub fn upstream(&self) -> Option<&SrvConf> {
        // SAFETY: null, or an upstream's conf, which lives for the configuration's lifetime.
        unsafe { self.upstream.as_ref() }
    }
}

/// A [`Rejected`] that no request owns, shared by every short-circuit with its label in a
/// location that no internal redirect leaves.
struct Shared(Rejected);

// SAFETY: never written, and its pointers are null.
unsafe impl Sync for Shared {}

static OPEN_HERE: Shared = Shared(Rejected {
    request: core::ptr::null(),
    route: core::ptr::null(),
    upstream: core::ptr::null(),
    label: Label::State(State::Open),
});

static RECOVERING_HERE: Shared = Shared(Rejected {
    request: core::ptr::null(),
    route: core::ptr::null(),
    upstream: core::ptr::null(),
    label: Label::Recovering,
});

/// Notes a PRECONTENT short-circuit with `label` in a location from which no internal
/// redirect (`error_page`, `post_action`) can follow: the module ctx, which then stays, is
/// all the variables need, and the route is the location's. A shared record, rather than
/// one in the pool with its cleanup (`scripts/bench-instructions`, open_503). False for a label without a shared record.
pub fn mark_rejected_here(r: &mut ngx_http_request_t, label: Label) -> bool {
    let shared = match label {
        Label::State(State::Open) => &OPEN_HERE,
        Label::Recovering => &RECOVERING_HERE,
        _ => return false,
    };
    mark_here(r, shared);
    true
}

/// [`mark_rejected_here`] for an open breaker's short-circuit.
#[inline(always)]
pub fn mark_open_here(r: &mut ngx_http_request_t) {
    mark_here(r, &OPEN_HERE);
}

#[inline(always)]
fn mark_here(r: &mut ngx_http_request_t, shared: &'static Shared) {
    set_ctx(r, tagged(core::ptr::from_ref(&shared.0).cast_mut()));
}

/// Marks the module ctx that points at a [`Rejected`] rather than a [`RequestState`] (both
/// are at least 2-aligned, so the low bit is free).
const REJECTED_TAG: usize = 1;

fn tagged(rec: *mut Rejected) -> *mut Rejected {
    rec.cast::<u8>().wrapping_add(REJECTED_TAG).cast()
}

fn is_tagged(ctx: *mut c_void) -> bool {
    ctx as usize & REJECTED_TAG != 0
}

/// Keeps what the variables read of a request the PRECONTENT phase short-circuited with
/// `label` (its breaker that of `upstream` and `route`), sets it as the module ctx and
/// registers its cleanup. False when the pool is exhausted.
pub fn attach_rejected(
    r: &mut ngx_http_request_t,
    upstream: *const SrvConf,
    route: &Route,
    label: Label,
) -> bool {
    // SAFETY: the request pool is live; ngx_palloc aligns to NGX_ALIGNMENT (a word), enough
    // for the record's pointers.
    let kept = unsafe { ngx_palloc(r.pool, core::mem::size_of::<KeptRejected>()) };
    let Some(kept) = NonNull::new(kept.cast::<KeptRejected>()) else {
        return false;
    };
    let kept = kept.as_ptr();
    // Its cleanup record is linked in first, as `ngx_pool_cleanup_add` links its own (nginx
    // only walks the list, never frees a record).

    // SAFETY: a fresh pool allocation of a `KeptRejected`, living as long as the pool, which we
    // fill whole; its record linked as nginx links its own (above).
    unsafe {
        kept.write(KeptRejected {
            cleanup: ngx_pool_cleanup_t {
                handler: Some(rejected_kept),
                data: core::ptr::addr_of_mut!((*kept).rejected).cast(),
                next: (*r.pool).cleanup,
            },
            rejected: Rejected {
                request: r,
                route,
                upstream,
                label,
            },
        });
        (*r.pool).cleanup = core::ptr::addr_of_mut!((*kept).cleanup);
        set_ctx(r, tagged(core::ptr::addr_of_mut!((*kept).rejected)));
    }
    true
}

/// A [`Rejected`] and its pool cleanup record, in one pool allocation rather than
/// `ngx_pool_cleanup_add` with room for the record (`scripts/bench-instructions`, open_503).
#[repr(C)]
struct KeptRejected {
    cleanup: ngx_pool_cleanup_t,
    rejected: Rejected,
}

/// The cleanup of a [`Rejected`]: nothing to give back; it names the record for [`find`].
unsafe extern "C" fn rejected_kept(_data: *mut c_void) {}

fn set_ctx<T>(r: &mut ngx_http_request_t, state: *mut T) {
    // SAFETY: r->ctx has an entry per http module; ctx_index is ours.
    unsafe {
        *r.ctx
            .add(<Module as ngx::http::HttpModule>::module().ctx_index) = state.cast();
    }
}

fn ctx(r: &ngx_http_request_t) -> *mut c_void {
    // SAFETY: r->ctx has an entry per http module; ctx_index is ours.
    unsafe {
        *r.ctx
            .add(<Module as ngx::http::HttpModule>::module().ctx_index)
    }
}

/// The request's state, if its current location set it (the module ctx).
pub fn here(r: &mut ngx_http_request_t) -> Option<&mut RequestState> {
    let ctx = ctx(r);
    if is_tagged(ctx) {
        return None;
    }
    // SAFETY: only `set_ctx` writes our entry: a tagged `Rejected` (above), or a state that
    // lives as long as the request's pool. The borrow is tied to the request's.
    unsafe { ctx.cast::<RequestState>().as_mut() }
}

/// Whether the request has an answer of this module in its current location: a state or a
/// [`Rejected`].
pub fn answered(r: &ngx_http_request_t) -> bool {
    !ctx(r).is_null()
}

/// What the header filter has to do, told from the ctx.
pub enum AtHeader {
    /// Nothing: the PRECONTENT phase short-circuited the request in its current location
    /// (the header went in with its Retry-After), the module never saw it, or its state has
    /// the header or needs none and holds nothing.
    Nothing,
    /// For the state in the ctx: add `X-Circuit-State` (`header`), and give back at the
    /// header what it holds (`holds`: the half-open probe or a slot of the adaptive limit).
    Here { header: bool, holds: bool },
    /// After an internal redirect: [`find`] must look for the state first.
    Look,
}

/// [`AtHeader`] for `r`, told from the ctx, read once: most requests have nothing to do, and
/// the filter then calls nothing (`scripts/bench-instructions`, plain and closed).
#[inline(always)]
pub fn at_header(r: &ngx_http_request_t) -> AtHeader {
    let ctx = ctx(r);
    if is_tagged(ctx) {
        return AtHeader::Nothing;
    }
    // SAFETY: an untagged ctx is null or a state living as long as the request's pool.
    match unsafe { ctx.cast::<RequestState>().as_ref() } {
        None if r.internal() != 0 || r.filter_finalize() != 0 => AtHeader::Look,
        None => AtHeader::Nothing,
        Some(s) if wants_header(s, || header_on(r)) => AtHeader::Here {
            header: true,
            holds: holds(s),
        },
        Some(s) if holds(s) => AtHeader::Here {
            header: false,
            holds: true,
        },
        Some(_) => AtHeader::Nothing,
    }
}

/// Whether `r`'s state holds the half-open probe or a slot of the adaptive limit (told from
/// the ctx alone): what the header filter may give back at the header.
#[inline(always)]
pub fn holds_grant(r: &ngx_http_request_t) -> bool {
    let ctx = ctx(r);
    if is_tagged(ctx) {
        return false;
    }
    // SAFETY: an untagged ctx is null or a state living as long as the request's pool.
    let state = unsafe { ctx.cast::<RequestState>().as_ref() };
    state.is_some_and(holds)
}

#[inline(always)]
fn holds(s: &RequestState) -> bool {
    s.settlement.ticket != Ticket::Normal || s.limit.is_held()
}

/// Whether the state `s` still needs `X-Circuit-State`: it has a label, not the header yet,
/// and was short-circuited or its location has `circuit_breaker_header on` (`on`, asked
/// only when it matters).
#[inline(always)]
pub fn wants_header(s: &RequestState, on: impl FnOnce() -> bool) -> bool {
    !s.told.header_added && s.told.label.is_some() && (s.told.short_circuited || on())
}

/// Whether the request's location has `circuit_breaker_header on`.
#[inline(always)]
pub fn header_on(r: &ngx_http_request_t) -> bool {
    loc_conf(r).is_some_and(|l| l.header == 1)
}

/// What the module told a request: its state, or what is kept of a short-circuit.
pub enum Answer<'r> {
    State(&'r mut RequestState),
    Rejected(&'r Rejected),
}

/// The request's answer: the module ctx, or, after an internal redirect cleared it (an
/// `error_page`, say), the state or [`Rejected`] a pool cleanup holds for this very request.
/// The list is walked only for internal or filter-finalized requests, as the realip module
/// does.
pub fn find(r: &mut ngx_http_request_t) -> Option<Answer<'_>> {
    if !answered(r) && (r.internal() != 0 || r.filter_finalize() != 0) {
        let me: *const ngx_http_request_t = r;
        // SAFETY: the pool's cleanup list is a live singly linked list.
        let mut c = unsafe { (*r.pool).cleanup };
        // SAFETY: each link is null or a live cleanup record.
        while let Some(cl) = unsafe { c.as_ref() } {
            if let Some(h) = cl.handler {
                if h as usize == release as *const () as usize {
                    let state = cl.data.cast::<RequestState>();
                    // SAFETY: our handler's data is always a RequestState of this pool.
                    if unsafe { (*state).belongs_to(me) } {
                        set_ctx(r, state);
                        break;
                    }
                } else if h as usize == rejected_kept as *const () as usize {
                    let rec = cl.data.cast::<Rejected>();
                    // SAFETY: this handler's data is always a Rejected of this pool.
                    if core::ptr::eq(unsafe { (*rec).request }, me) {
                        set_ctx(r, tagged(rec));
                        break;
                    }
                }
            }
            c = cl.next;
        }
    }
    let ctx = ctx(r);
    if is_tagged(ctx) {
        // SAFETY: a tagged ctx is a Rejected that `attach_rejected` or the walk above set,
        // living as long as the request's pool; only read.
        return Some(Answer::Rejected(unsafe {
            &*ctx
                .cast::<u8>()
                .wrapping_sub(REJECTED_TAG)
                .cast::<Rejected>()
        }));
    }
    here(r).map(Answer::State)
}

/// The state behind a peer callback's `data`.
///
/// # Safety
/// `data` must be the `peer.data` our `peer.init` set, and no other borrow of that state may
/// be live.
pub unsafe fn from_peer_data<'a>(data: *mut c_void) -> &'a mut RequestState {
    // SAFETY: `data` is the `RequestState` our peer.init set as `peer.data`, alive until the
    // request's pool cleanup, and no other borrow of it is live (this fn's contract).
    unsafe { &mut *data.cast::<RequestState>() }
}

/// Pool cleanup: the probe the request still holds (it ended before its attempt was
/// recorded) is freed without a verdict, and a slot of the adaptive limit goes back (the
/// client went away before any attempt, or nginx ended the request after a failed attempt
/// without a last `peer.free`); the state is kept for reuse.
unsafe extern "C" fn release(data: *mut c_void) {
    let Some(ptr) = NonNull::new(data.cast::<RequestState>()) else {
        return;
    };
    // SAFETY: `attach` handed this state to the cleanup, which runs once, last.
    let state = unsafe { ptr.as_ref() };
    if state.limit.is_held() || state.settlement.ticket != Ticket::Normal {
        give_back(state);
    }
    // SAFETY: the request is gone: nothing refers to its state any more but the pool's
    // cleanup list, whose walk reads this record's `next` right after this returns.
    unsafe { SPARES.put(ptr) };
}

/// What [`release`] gives back, apart, so that a request holding nothing (most) costs less
/// (`scripts/bench-instructions`, closed).
#[cold]
#[inline(never)]
fn give_back(state: &RequestState) {
    guard((), || {
        if state.limit.is_held() {
            limit::release(state.limit, state.told.class.flatten());
        }
        let (judge, ticket) = (&state.judge, state.settlement.ticket);
        if let Ticket::Probe(_) = ticket {
            if let Some((zone, _)) = judge.zone() {
                let mut locked = zone.lock();
                let found = locked.get_probe(judge.handle, &judge.key(), ticket);
                if let Some(mut b) = found {
                    b.release(circuit_breaker_shell::clock::mono_ms(), ticket);
                }
            }
        }
    });
}

/// The location conf of a request.
pub fn loc_conf(r: &ngx_http_request_t) -> Option<&'static LocConf> {
    use ngx::http::HttpModuleLocationConf;
    Module::location_conf(r)
}

/// What a key's breaker said of a request (`crate::keyed`), for the module's variables when
/// no upstream's breaker judged it: its family (the variable as written), the key, what it
/// said and when.
pub struct KeySaid {
    pub family: &'static str,
    pub key: nginx_sys::ngx_str_t,
    pub label: Label,
    pub judged_ms: u64,
    pub recorded_ms: u64,
}

type KeySaidFn = fn(&ngx_http_request_t) -> Option<KeySaid>;

/// Who answers [`key_said`]: the keyed breakers, once a configuration has one.
static KEY_SAID: std::sync::OnceLock<KeySaidFn> = std::sync::OnceLock::new();

/// Lets `f` answer [`key_said`] (the keyed breakers, which live above this module).
pub fn answer_key_said(f: KeySaidFn) {
    let _ = KEY_SAID.set(f);
}

/// What the request's key said of it, if a key judged it.
pub fn key_said(req: &ngx_http_request_t) -> Option<KeySaid> {
    KEY_SAID.get().and_then(|f| f(req))
}
