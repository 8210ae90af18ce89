//! `circuit_breaker_key $key`: a breaker per value of a key, for origins no `upstream {}`
//! block names (`proxy_pass http://$origin`) and for tenants. The request is judged in the
//! PRECONTENT phase — which every content handler follows, `proxy_pass`, `grpc_pass`,
//! `fastcgi_pass` and the rest alike — before any upstream breaker's judgement; its outcome
//! is settled off what nginx kept of the last upstream attempt
//! (`upstream::outcome::read_ended`): at the response header for a probe, a failure or a slow
//! call (before the client can see the answer), else in the log phase. The table is the
//! zone's (`zone::keyed`): a key stays a compact tally until its first failure or slow call
//! promotes it to a full breaker.
//!
//! A request carries what it was granted in a pool cleanup of its own (not the module's ctx,
//! which an upstream breaker's state holds): the cleanup frees a probe the request still
//! holds when it ends without a log phase. Subrequests are not judged.

use core::ffi::c_void;
use core::ptr::null_mut;

use circuit_breaker_core::breaker::{Admission, Classified, Ticket};
use circuit_breaker_core::keyed::{self, Take, MAX_KEY};
use circuit_breaker_core::snapshot::State;
use circuit_breaker_shell::ffi::variable_bytes;
use nginx_sys::{
    ngx_http_complex_value, ngx_http_request_t, ngx_int_t, ngx_log_t, ngx_str_t, NGX_DECLINED,
    NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_LOG_ERR, NGX_OK,
};

use crate::conf::{KeyedFamily, KeyedSetting, MainConf};
use crate::request::{self, Label};
use crate::respond;
use crate::upstream::{body, log_transition_of, outcome};
use circuit_breaker_shell::clock::{mono_ms, rnd};
use circuit_breaker_shell::ffi::{guard, pid, process_alive};

mod memo;
mod stale;

use circuit_breaker_shell::zone::{Missing, Zone};
use ngx::http::HttpModuleMainConf;
use stale::make_upstream as make_stale_upstream;

/// What a request was granted by its key's breaker, in its pool until the request ends.
struct Hold {
    request: *const ngx_http_request_t,
    main: *const MainConf,
    family: usize,
    /// The key's value (in the request pool), its hash, and its tally when it was judged.
    key: ngx_str_t,
    hash: u64,
    tally: usize,
    ticket: Ticket,
    /// What its key's breaker said of it (`$circuit_breaker_state`), when (on the module's
    /// clock), and when its outcome was recorded (0: not, or none).
    label: Label,
    judged_ms: u64,
    recorded_ms: u64,
    settled: bool,
    /// When the client's request body ended, if it was read after the key judged it (a body
    /// passed on as it arrives: the origin's time starts there).
    body_done_at: Option<nginx_sys::ngx_msec_t>,
    /// The location that judged it, and its content handler then (see `stale::learn`).
    lcf: *const crate::conf::LocConf,
    handler: nginx_sys::ngx_http_handler_pt,
    /// The module confs of the location that judged it (`r->loc_conf` then), and the upstream
    /// conf this module gave its upstream (`stale`), if it did: its outcome is the key's only
    /// if its attempt is that location's.
    loc_conf: *mut *mut c_void,
    own_conf: *mut c_void,
    /// An open key's answer from the cache, while it is being given.
    stale: Option<stale::Stale>,
    /// Its pool cleanup record, kept in the hold rather than allocated by
    /// `ngx_pool_cleanup_add`, as the hold itself is kept for reuse rather than allocated
    /// from the request pool (`scripts/bench-instructions`, closed_keyed).
    cleanup: nginx_sys::ngx_pool_cleanup_t,
}

/// Holds kept for reuse by this worker (at most [`MAX_SPARES`]), and one given back while
/// the list was full, freed at the next give-back: nginx still reads the `next` of its
/// cleanup record after its cleanup returns.
struct Spares(core::cell::UnsafeCell<Kept>);

struct Kept {
    // Boxed: a hold's address is its cleanup record's, which must not move.
    #[allow(clippy::vec_box)]
    list: Vec<Box<Hold>>,
    doomed: Option<Box<Hold>>,
}

// SAFETY: a worker runs nginx's event loop on one thread, the only one that touches this.
unsafe impl Sync for Spares {}

static SPARES: Spares = Spares(core::cell::UnsafeCell::new(Kept {
    list: Vec::new(),
    doomed: None,
}));

const MAX_SPARES: usize = 1024;

impl Spares {
    /// A hold's memory, a spare one or a new box, with `held` in it.
    fn take(&self, held: Hold) -> Box<Hold> {
        // SAFETY: single-threaded (above); no borrow of the list outlives this call.
        let kept = unsafe { &mut *self.0.get() };
        match kept.list.pop() {
            Some(mut b) => {
                *b = held;
                b
            }
            None => Box::new(held),
        }
    }

    /// Gives a hold back; its memory stays as it is until the next `take` or `put`.
    fn put(&self, b: Box<Hold>) {
        // SAFETY: single-threaded (above); no borrow of the list outlives this call.
        let kept = unsafe { &mut *self.0.get() };
        drop(kept.doomed.take());
        if kept.list.len() < MAX_SPARES {
            kept.list.push(b);
        } else {
            kept.doomed = Some(b);
        }
    }
}

/// The PRECONTENT phase handler.
pub unsafe extern "C" fn precontent(r: *mut ngx_http_request_t) -> ngx_int_t {
    guard(NGX_DECLINED as ngx_int_t, || {
        // SAFETY: nginx runs phase handlers with a live request.
        let req = unsafe { &mut *r };
        decide(req)
    })
}

fn decide(req: &mut ngx_http_request_t) -> ngx_int_t {
    let declined = NGX_DECLINED as ngx_int_t;
    let main = core::ptr::eq(req.main, req);
    // A request a key judged that comes back to this phase was moved on by an internal
    // redirect (an `error_page`, `try_files`, `X-Accel-Redirect`, a named location): its
    // outcome is settled as it leaves, from the upstream it had — the key's — before another
    // location makes one of its own.
    let held = if main { hold_of(req) } else { None };
    if let Some(mut h) = held {
        // SAFETY: the hold lives until the request pool is destroyed; nothing else borrows it.
        settle_leaving(req, unsafe { h.as_mut() });
    }
    let Some(lcf) = request::loc_conf(req) else {
        return declined;
    };
    let Some(KeyedSetting::On {
        value,
        family,
        variable,
    }) = lcf.keyed
    else {
        return declined;
    };
    // SAFETY: set when merging from the main conf, which outlives every request.
    let Some(mcf) = (unsafe { lcf.main.as_ref() }) else {
        return declined;
    };
    // Only what an upstream module passes on is the key's: a file, a `return` or the status
    // location goes to no origin.
    let passes = req
        .content_handler
        .is_some_and(|h| mcf.upstream_handlers.iter().any(|&(p, _)| p == h as usize));
    if !passes {
        return declined;
    }
    // Judged once per request: a subrequest, or a request an internal redirect moved on, is
    // only refused while its key's breaker is open, never counted.
    let again = !main || held.is_some();
    let (Some(fam), Some(zone)) = (mcf.keyed.get(family), mcf.zone()) else {
        return declined;
    };
    let Some(key) = key_of(req, value, variable) else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    // An empty key judges nothing (as `limit_req`'s); nor one too long to keep.
    if key.len == 0 {
        return declined;
    }
    let log = crate::upstream::connection_log(req);
    if key.len > MAX_KEY {
        log_once(log, &fam.name, "longer than 256 bytes, not judged");
        return declined;
    }
    let hasher = zone.keyed_hasher();
    let remembered = memo::recall(&hasher, fam.id, key.as_bytes());
    let hash = remembered.map_or_else(|| hasher.hash(fam.id, key.as_bytes()), |(h, _)| h);
    let now = mono_ms();
    if again {
        return judged_again(req, zone, fam, hash, now);
    }
    // A key this worker found compact lately, and that its mark says is still there and
    // compact, passes without the lock while the mark is of this second — a use the mark
    // counts (its outcome is counted in the mark too, or under the lock if it is anything
    // but a success of the mark's second).
    if let Some((_, tally)) = remembered {
        let passes = zone
            .keyed_mark(tally)
            .is_some_and(|m| keyed::mark::pass(m, hash, now / 1000));
        if passes {
            let held = Hold::new(
                req,
                mcf,
                (family, key, hash, tally),
                (Ticket::Normal, Label::State(State::Closed)),
                now,
            );
            return hold(req, held);
        }
    }
    let decided = {
        let mut locked = zone.lock();
        let at = remembered
            .and_then(|(_, tally)| locked.keyed_use(&fam.as_zone(), tally, hash, now))
            .or_else(|| locked.keyed_place(&fam.as_zone(), hash, now));
        match at {
            None => Decided::NoRoom,
            Some(at) if at.promoted => admit(&mut locked, at.tally, hash, now, &*req),
            Some(at) => Decided::Admitted(
                at.tally,
                Admission::Pass {
                    would_reject: false,
                },
                State::Closed,
                None,
            ),
        }
    };
    let (tally, admission, state, transition) = match decided {
        Decided::Admitted(i, a, s, t) => {
            if remembered.map(|(_, at)| at) != Some(i) {
                memo::remember(&hasher, fam.id, key.as_bytes(), hash, i);
            }
            (i, a, s, t)
        }
        // A request whose body has not arrived is never the probe: its client would hold
        // it for as long as it takes. The body is read first, and the phase runs again.
        Decided::BodyFirst => return body::read_first(req),
        Decided::NoRoom => {
            log_once(
                log,
                &fam.name,
                "has no room in the zone, its requests pass unchecked",
            );
            return declined;
        }
    };
    if let Some(t) = &transition {
        let who = circuit_breaker_shell::zone::who(
            fam.name.as_bytes(),
            key.as_bytes(),
            circuit_breaker_shell::zone::Kind::Keyed,
        );
        log_transition_of(log, &who, t);
    }
    let (label, retry_after_ms) = match admission {
        Admission::Pass { .. } => {
            let held = Hold::new(
                req,
                mcf,
                (family, key, hash, tally),
                (Ticket::Normal, Label::State(state)),
                now,
            );
            return hold(req, held);
        }
        Admission::Probe(ticket) => {
            let held = Hold::new(
                req,
                mcf,
                (family, key, hash, tally),
                (ticket, Label::State(state)),
                now,
            );
            if lcf.keyed_background.get() && stale::may_answer(req, &lcf.keyed_cache) {
                let h = keep(req, held);
                return stale::probe(req, h);
            }
            return hold(req, held);
        }
        Admission::Reject { retry_after_ms } => (Label::State(state), retry_after_ms),
        Admission::Recovering { retry_after_ms } => (Label::Recovering, retry_after_ms),
    };
    // Judged: an `error_page` that moves the request on does not judge it again.
    let mut judged = Hold::new(
        req,
        mcf,
        (family, key, hash, tally),
        (Ticket::Normal, label),
        now,
    );
    judged.settled = true;
    if stale::may_answer(req, &lcf.keyed_cache) {
        let h = keep(req, judged);
        return stale::answer(req, h, label, retry_after_ms);
    }
    hold(req, judged);
    respond::answer(req, label, retry_after_ms)
}

/// A request its key may not count (see `decide`): refused while the key's breaker is open,
/// half-open or forced open, else let through with nothing kept.
fn judged_again(
    req: &mut ngx_http_request_t,
    zone: &Zone,
    fam: &KeyedFamily,
    hash: u64,
    now: u64,
) -> ngx_int_t {
    let refused = {
        let mut locked = zone.lock();
        match locked.keyed_find(&fam.as_zone(), hash) {
            Some(at) if at.promoted => locked
                .keyed_breaker(at.tally, hash, now)
                .and_then(|b| b.refuses_again(now).map(|wait| (b.state(), wait))),
            _ => None,
        }
    };
    match refused {
        Some((state, wait)) => respond::answer(req, Label::State(state), wait),
        None => NGX_DECLINED as ngx_int_t,
    }
}

/// The request's key: its one variable's value as it is, or the complex value made.
/// `None` on nginx's failure (no memory).
fn key_of(
    req: &mut ngx_http_request_t,
    value: *mut nginx_sys::ngx_http_complex_value_t,
    variable: Option<usize>,
) -> Option<ngx_str_t> {
    let mut key = ngx_str_t {
        len: 0,
        data: null_mut(),
    };
    if let Some(i) = variable {
        // SAFETY: a live request and an index this configuration registered.
        let v = unsafe { nginx_sys::ngx_http_get_indexed_variable(req, i) };
        // SAFETY: null, or the variable's value, which lives as long as the request.
        let v = unsafe { v.as_ref() };
        // SAFETY: a value nginx filled, whose bytes live as long as the request.
        if let Some(bytes) = v.and_then(|v| unsafe { variable_bytes(v) }) {
            key = ngx_str_t {
                len: bytes.len(),
                data: bytes.as_ptr().cast_mut(),
            };
        }
        return Some(key);
    }
    // SAFETY: a live request and a complex value compiled for this configuration.
    let rc = unsafe { ngx_http_complex_value(req, value, &mut key) };
    (rc == NGX_OK as ngx_int_t).then_some(key)
}

/// What the key's breaker said (and where the key lives), once the lock is let go.
enum Decided {
    Admitted(
        usize,
        Admission,
        State,
        Option<circuit_breaker_core::breaker::Transition>,
    ),
    BodyFirst,
    NoRoom,
}

/// Asks the breaker of the promoted key at `tally` (a compact key's passes).
fn admit(
    locked: &mut circuit_breaker_shell::zone::Locked<'_>,
    tally: usize,
    hash: u64,
    now: u64,
    req: &ngx_http_request_t,
) -> Decided {
    let Some(mut b) = locked.keyed_breaker(tally, hash, now) else {
        return Decided::Admitted(
            tally,
            Admission::Pass {
                would_reject: false,
            },
            State::Closed,
            None,
        );
    };
    let may_be_probe =
        b.state() != State::Closed && b.forced().is_none() && b.probe_wait_ms(now) == 0;
    if may_be_probe && !b.config().dry_run && body::unread(req) {
        return Decided::BodyFirst;
    }
    let may_probe = b.state() == State::HalfOpen || b.may_probe(now);
    let d = b.admit(now, rnd(), pid(), &process_alive, may_probe);
    Decided::Admitted(tally, d.admission, b.state(), d.transition)
}

/// Records `c` on the breaker of the promoted key at `tally`, if it still has one.
fn record_promoted(
    locked: &mut circuit_breaker_shell::zone::Locked<'_>,
    tally: usize,
    hash: u64,
    now: u64,
    ticket: Ticket,
    c: &Classified,
) -> Option<circuit_breaker_core::breaker::Recorded> {
    let mut b = locked.keyed_breaker(tally, hash, now)?;
    Some(b.record_classified(now, rnd(), ticket, c, true))
}

impl Hold {
    /// A hold of what `req` was granted: its key (family, value, hash, tally) and ticket,
    /// judged at `now`.
    fn new(
        req: &ngx_http_request_t,
        mcf: &MainConf,
        (family, key, hash, tally): (usize, ngx_str_t, u64, usize),
        (ticket, label): (Ticket, Label),
        now: u64,
    ) -> Hold {
        Hold {
            request: req,
            main: mcf,
            lcf: request::loc_conf(req).map_or(core::ptr::null(), core::ptr::from_ref),
            handler: req.content_handler,
            loc_conf: req.loc_conf,
            own_conf: null_mut(),
            stale: None,
            family,
            key,
            hash,
            tally,
            ticket,
            label,
            judged_ms: now,
            recorded_ms: 0,
            settled: false,
            body_done_at: None,
            cleanup: nginx_sys::ngx_pool_cleanup_t {
                handler: Some(cleanup),
                data: null_mut(),
                next: null_mut(),
            },
        }
    }
}

impl Hold {
    /// Marks the hold settled: whether it was not yet (then the caller settles it).
    fn settle_now(&mut self) -> bool {
        if core::mem::replace(&mut self.settled, true) {
            return false;
        }
        if self.ticket != Ticket::Normal {
            PROBES.fetch_sub(1, core::sync::atomic::Ordering::Relaxed);
        }
        true
    }
}

/// Unsettled holds of a probe in this worker: without one, the header filter has nothing
/// to look for (`scripts/bench-instructions`, closed_keyed).
static PROBES: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

/// Keeps what the request was granted, for its log phase (or its end): the hold is linked
/// into the request pool's cleanups, as `ngx_pool_cleanup_add` links a record, first in the
/// list (nginx only walks it, running handlers and reading `next`, never freeing a record).
fn hold(req: &mut ngx_http_request_t, held: Hold) -> ngx_int_t {
    keep(req, held);
    NGX_DECLINED as ngx_int_t
}

/// [`hold`], returning where the hold is.
fn keep(req: &mut ngx_http_request_t, held: Hold) -> core::ptr::NonNull<Hold> {
    if held.ticket != Ticket::Normal && !held.settled {
        PROBES.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    }
    let h = Box::into_raw(SPARES.take(held));
    // SAFETY: the request pool is live, and so is the hold: the cleanup, which runs when the
    // pool is destroyed, gives it back, and its memory stays until the walk has moved on.
    unsafe {
        (*h).cleanup.data = h.cast();
        (*h).cleanup.next = (*req.pool).cleanup;
        (*req.pool).cleanup = core::ptr::addr_of_mut!((*h).cleanup);
    }
    // SAFETY: a box's pointer is never null.
    unsafe { core::ptr::NonNull::new_unchecked(h) }
}

/// The request's hold, if its key's breaker judged it: in the request pool, apart from the
/// request.
fn hold_of(req: &ngx_http_request_t) -> Option<core::ptr::NonNull<Hold>> {
    let me: *const ngx_http_request_t = req;
    // SAFETY: the request pool's cleanup list, live with the request.
    let mut c = unsafe { (*req.pool).cleanup };
    // SAFETY: each record is live until the pool is destroyed; ours carry a `Hold`.
    while let Some(rec) = unsafe { c.as_ref() } {
        if rec
            .handler
            .is_some_and(|h| h as usize == cleanup as *const () as usize)
        {
            let h = core::ptr::NonNull::new(rec.data.cast::<Hold>())?;
            // SAFETY: a record with our handler holds a `Hold` (see `hold`); read only.
            if core::ptr::eq(unsafe { h.as_ref() }.request, me) {
                return Some(h);
            }
        }
        c = rec.next;
    }
    None
}

/// Whether a key's breaker judges `req` (`crate::held`): looked for only where some location
/// has a keyed breaker.
pub fn judges(req: &ngx_http_request_t) -> bool {
    ANY.load(core::sync::atomic::Ordering::Relaxed) && hold_of(req).is_some()
}

/// What the request's key said of it, if a key judged it (`request::key_said`).
fn said(req: &ngx_http_request_t) -> Option<request::KeySaid> {
    let h = hold_of(req)?;
    // SAFETY: the hold lives until the request pool is destroyed; only read.
    let h = unsafe { h.as_ref() };
    // SAFETY: the main conf outlives every request run under it.
    let fam = unsafe { h.main.as_ref() }?.keyed.get(h.family)?;
    Some(request::KeySaid {
        // SAFETY: the family's name lives in the configuration, longer than any request.
        family: unsafe { &*(fam.name.as_str() as *const str) },
        key: h.key,
        label: h.label,
        judged_ms: h.judged_ms,
        // The access log writes its line before this module's log phase settles the request:
        // its record is then made at this worker's clock as it reads now.
        recorded_ms: match (h.recorded_ms, h.settled) {
            (0, false) => mono_ms(),
            (at, _) => at,
        },
    })
}

/// Settles a request an internal redirect moved on, from the upstream it had when it left.
fn settle_leaving(req: &ngx_http_request_t, h: &mut Hold) {
    if !h.settle_now() {
        return;
    }
    // SAFETY: a live main request; its upstream, if any, is over (nginx redirects a request
    // only once the upstream that answered it is finalized).
    let attempt = unsafe { attempt_of(req, h) };
    let c = classified(h, attempt);
    settle(h, c.map(|c| (c, crate::upstream::connection_log(req))));
}

/// The log phase handler: settles the request's outcome on its key's breaker.
pub unsafe extern "C" fn log_phase(r: *mut ngx_http_request_t) -> ngx_int_t {
    guard(NGX_OK as ngx_int_t, || {
        // SAFETY: nginx runs phase handlers with a live request.
        let req = unsafe { &*r };
        let Some(mut h) = hold_of(req) else {
            return NGX_OK as ngx_int_t;
        };
        // SAFETY: the hold lives until the request pool is destroyed, after this phase;
        // nothing else borrows it while the handler runs.
        let h = unsafe { h.as_mut() };
        stale::learn(req, h);
        if !h.settle_now() {
            return NGX_OK as ngx_int_t;
        }
        // SAFETY: a live main request in its log phase.
        let attempt = unsafe { attempt_of(req, h) };
        let c = classified(h, attempt);
        settle(h, c.map(|c| (c, crate::upstream::connection_log(req))));
        NGX_OK as ngx_int_t
    })
}

/// The outcome of the request's last upstream attempt, if that upstream is the one of the
/// location its key judged it in: one an internal redirect's location made (an `error_page`
/// passed to another origin) is not the key's.
///
/// # Safety
/// `req` is a live main request whose upstream is over (its header, or its end).
unsafe fn attempt_of(
    req: &ngx_http_request_t,
    h: &Hold,
) -> Option<circuit_breaker_core::breaker::Attempt> {
    // SAFETY: null, or the request's upstream, live with the request.
    let conf = unsafe { req.upstream.as_ref() }?.conf.cast::<c_void>();
    // SAFETY: the main conf outlives every request run under it.
    let mcf = unsafe { h.main.as_ref() }?;
    let judged_here = conf == h.own_conf
        || mcf.upstream_handlers.iter().any(|&(_, index)| {
            // SAFETY: the judged location's loc_conf array has an entry per HTTP module.
            unsafe { *h.loc_conf.add(index) == conf }
        });
    if !judged_here {
        return None;
    }
    // SAFETY: as for this function.
    unsafe { outcome::read_ended(req, h.body_done_at) }
}

/// `attempt` classified under its key's family's classes (`None`: no verdict on the origin).
fn classified(
    h: &Hold,
    attempt: Option<circuit_breaker_core::breaker::Attempt>,
) -> Option<Classified> {
    // SAFETY: the main conf outlives every request run under it.
    let fam = unsafe { h.main.as_ref() }?.keyed.get(h.family)?;
    Some(Classified::of(attempt?, &fam.cfg))
}

/// Records the request's classified outcome (`None`: no verdict on the origin) on its key.
fn settle(h: &mut Hold, outcome: Option<(Classified, *mut ngx_log_t)>) {
    // SAFETY: the main conf outlives every request run under it.
    let Some(mcf) = (unsafe { h.main.as_ref() }) else {
        return;
    };
    let (Some(fam), Some(zone)) = (mcf.keyed.get(h.family), mcf.zone()) else {
        return;
    };
    let Some((c, log)) = outcome else {
        release(zone, fam, h.hash, h.ticket);
        return;
    };
    let now = mono_ms();
    h.recorded_ms = now;
    // A success of a compact key is counted in its mark, without the lock, while the mark is
    // of this second (its first success of a second takes the lock and moves the mark on).
    let counted = h.ticket == Ticket::Normal
        && keyed::take(&c) == Take::Success
        && zone
            .keyed_mark(h.tally)
            .is_some_and(|m| keyed::mark::count(m, h.hash, now / 1000));
    if counted {
        return;
    }
    let key = h.key.as_bytes();
    let recorded = {
        let mut locked = zone.lock();
        let at = locked
            .keyed_use(&fam.as_zone(), h.tally, h.hash, now)
            .or_else(|| locked.keyed_place(&fam.as_zone(), h.hash, now));
        let Some(at) = at else {
            return;
        };
        let promoted = if at.promoted {
            record_promoted(&mut locked, at.tally, h.hash, now, h.ticket, &c)
        } else {
            None
        };
        match (promoted, keyed::take(&c)) {
            (Some(rec), _) => Ok(rec),
            (None, Take::Success) => {
                locked.keyed_success(at.tally, now, fam.cfg.window_s);
                return;
            }
            (None, Take::Nothing) => return,
            (None, Take::Promote) => locked
                .keyed_promote(&fam.as_zone(), at.tally, h.hash, key, now, mcf.generation)
                .map(|mut b| b.record_classified(now, rnd(), Ticket::Normal, &c, true)),
        }
    };
    match recorded {
        Ok(rec) => {
            if let Some(t) = &rec.transition {
                let who = circuit_breaker_shell::zone::who(
                    fam.name.as_bytes(),
                    key,
                    circuit_breaker_shell::zone::Kind::Keyed,
                );
                log_transition_of(log, &who, t);
            } else if !c.is_success() {
                // A failure the fleet may need to hear of at once.
                crate::wake::nudge();
            }
        }
        Err(Missing::Full) => log_once(
            log,
            &fam.name,
            "has no room in the zone for its breaker, its requests pass unchecked",
        ),
        Err(Missing::Stale) => {}
    }
}

/// Frees the probe `ticket` holds on `key`'s breaker, if it holds it.
fn release(zone: &Zone, fam: &KeyedFamily, hash: u64, ticket: Ticket) {
    if ticket == Ticket::Normal {
        return;
    }
    let now = mono_ms();
    let mut locked = zone.lock();
    let Some(at) = locked.keyed_find(&fam.as_zone(), hash) else {
        return;
    };
    if let Some(mut b) = locked.keyed_breaker(at.tally, hash, now) {
        b.release(now, ticket);
    };
}

/// The pool cleanup of a hold: a request that ended unsettled (no log phase) gives its probe
/// back; the hold is kept for reuse.
unsafe extern "C" fn cleanup(data: *mut c_void) {
    guard((), || {
        if data.is_null() {
            return;
        }
        // SAFETY: the data of a record `hold` linked: a hold boxed by `Spares::take`, which
        // the pool's cleanup list alone refers to now, and runs this once.
        let mut h = unsafe { Box::from_raw(data.cast::<Hold>()) };
        if let Some(s) = h.stale.as_mut() {
            stale::header_written(s);
        }
        if h.settle_now() {
            settle(&mut h, None);
        }
        SPARES.put(h);
    })
}

/// Logs a family's trouble once per worker: a flood of keys must not flood the log.
fn log_once(log: *mut ngx_log_t, family: &str, what: &'static str) {
    // Apart from the breakers' keys `first_time` also holds (their hashes mix differently).
    let tag = circuit_breaker_shell::ffi::hash_name(family.as_bytes())
        ^ circuit_breaker_shell::ffi::hash_name(what.as_bytes()).rotate_left(17);
    if circuit_breaker_shell::ffi::first_time(tag) {
        ngx::ngx_log_error!(
            NGX_LOG_ERR,
            log,
            "circuit breaker key \"{}\": a key {}",
            family,
            what
        );
    }
}

/// Whether some location has a keyed breaker: the header filter looks for a hold only then.
pub static ANY: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// The shortest `slow` of the keyed breakers (`u64::MAX`: none judges slow calls): a response
/// header later than it may be a slow call, settled at the header.
static MIN_SLOW_MS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(u64::MAX);

/// At the response header: a probe is settled now, from the origin's header or nginx's
/// error, rather than once a client that reads slowly has taken the whole answer; and so is a
/// failure or a slow call, before the client can see it — another worker may serve the
/// client's next request before this one reaches its log phase, and must find the failure
/// counted (a success waits for the log phase: the body may still fail).
///
/// # Safety
/// `r` is a live request, in the header filter.
pub unsafe fn at_header(r: *mut ngx_http_request_t) {
    guard((), || {
        // SAFETY: as for this function.
        let req = unsafe { &mut *r };
        if !core::ptr::eq(req.main, req) || req.upstream.is_null() {
            return;
        }
        // SAFETY: the request's upstream, live with the request; its state null or live.
        let header_ms = unsafe { (*req.upstream).state.as_ref() }.map_or(0, |s| s.header_time);
        let min_slow = MIN_SLOW_MS.load(core::sync::atomic::Ordering::Relaxed);
        let may_fail = req.headers_out.status >= 400 || (header_ms as u64) >= min_slow;
        let probes = PROBES.load(core::sync::atomic::Ordering::Relaxed);
        let due = stale::DUE.load(core::sync::atomic::Ordering::Relaxed);
        if probes == 0 && due == 0 && !may_fail {
            return;
        }
        let Some(mut h) = hold_of(req) else {
            return;
        };
        // SAFETY: the hold lives until the request pool is destroyed; nothing else borrows it meanwhile.
        let h = unsafe { h.as_mut() };
        if let Some(s) = h.stale.as_mut() {
            stale::add_header(req, s);
            return;
        }
        if h.settled {
            return;
        }
        // SAFETY: a live main request whose upstream's header (or failure) is known.
        let attempt = unsafe { attempt_of(req, h) };
        let c = classified(h, attempt);
        let fails = c.as_ref().is_some_and(|c| keyed::take(c) == Take::Promote);
        if h.ticket == Ticket::Normal && !fails {
            return;
        }
        h.settle_now();
        settle(h, c.map(|c| (c, crate::upstream::connection_log(req))));
    })
}

static mut NEXT_BODY_FILTER: nginx_sys::ngx_http_request_body_filter_pt = None;

/// The request body filter, where some location has a keyed breaker: notes when the body of
/// a request its key judged ends (the origin's time starts there).
unsafe extern "C" fn body_filter(
    r: *mut ngx_http_request_t,
    chain: *mut nginx_sys::ngx_chain_t,
) -> ngx_int_t {
    guard(nginx_sys::NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx runs the filter with a live request and a chain (or null) of live
        // links.
        let req = unsafe { &*r };
        // SAFETY: as above.
        if core::ptr::eq(req.main, req) && unsafe { body::ends(chain) } {
            if let Some(mut h) = hold_of(req) {
                // SAFETY: the hold lives until the request pool is destroyed; nothing else borrows it now.
                let h = unsafe { h.as_mut() };
                if h.body_done_at.is_none() {
                    // SAFETY: a plain global only this worker's event loop writes.
                    h.body_done_at = Some(unsafe { nginx_sys::ngx_current_msec });
                }
            }
        }
        // SAFETY: the next filter, set at configuration, read on the one thread that runs.
        match unsafe { NEXT_BODY_FILTER } {
            // SAFETY: the next filter in nginx's chain, with the request and chain it is given.
            Some(next) => unsafe { next(r, chain) },
            None => nginx_sys::NGX_ERROR as ngx_int_t,
        }
    })
}

/// Installs the phase handlers where some location has a keyed breaker: the PRECONTENT one
/// after the upstream breakers' (nginx runs a phase's handlers last added first, so a
/// request is judged by its key first), and the log phase's; and the request body filter.
///
/// # Safety
/// Only from postconfiguration, with the configuration being parsed.
pub unsafe fn postconfiguration(cf: *mut nginx_sys::ngx_conf_t) -> ngx_int_t {
    // SAFETY: `cf` is the configuration being parsed (this fn's contract).
    let mcf = crate::conf::Module::main_conf(unsafe { &*cf });
    let any = mcf.is_some_and(|m| !m.keyed.is_empty());
    ANY.store(any, core::sync::atomic::Ordering::Relaxed);
    let min_slow = mcf
        .iter()
        .flat_map(|m| m.keyed.iter())
        .map(|f| u64::from(f.cfg.slow_ms))
        .filter(|&ms| ms > 0)
        .min()
        .unwrap_or(u64::MAX);
    MIN_SLOW_MS.store(min_slow, core::sync::atomic::Ordering::Relaxed);
    if !any {
        return NGX_OK as ngx_int_t;
    }
    request::answer_key_said(said);
    // SAFETY: as for this function; the pool lives as long as the configuration.
    let (pool, mcf) = unsafe { ((*cf).pool, crate::conf::Module::main_conf_mut(&*cf)) };
    if let Some(mcf) = mcf {
        // SAFETY: the configuration's pool.
        mcf.keyed_stale_upstream = unsafe { make_stale_upstream(pool) };
        if mcf.keyed_stale_upstream.is_null() {
            return nginx_sys::NGX_ERROR as ngx_int_t;
        }
    }
    // SAFETY: nginx's filter chains are only modified during configuration, single-threaded.
    unsafe {
        NEXT_BODY_FILTER = nginx_sys::ngx_http_top_request_body_filter;
        nginx_sys::ngx_http_top_request_body_filter = Some(body_filter);
    }
    // SAFETY: as for this function.
    let rc = unsafe {
        crate::conf::setup::add_phase_handler(
            cf,
            nginx_sys::ngx_http_phases_NGX_HTTP_PRECONTENT_PHASE,
            Some(precontent),
        )
    };
    if rc != NGX_OK as ngx_int_t {
        return rc;
    }
    // SAFETY: as for this function.
    unsafe {
        crate::conf::setup::add_phase_handler(
            cf,
            nginx_sys::ngx_http_phases_NGX_HTTP_LOG_PHASE,
            Some(log_phase),
        )
    }
}
