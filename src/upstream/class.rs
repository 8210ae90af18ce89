//! A request's class (`circuit_breaker_class`), read once per request from its variable and
//! kept in its state; and which classes each breaker has seen lately in this worker, so that
//! a half-open breaker's probe is a request of the lowest class present
//! (`circuit_breaker_core::class::Presence`).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

use circuit_breaker_core::class::{Class, Presence};
use circuit_breaker_core::keyed::name::shown;
use nginx_sys::{
    ngx_http_request_t, ngx_http_variable_value_t, ngx_int_t, ngx_log_t, NGX_ERROR, NGX_LOG_WARN,
    NGX_OK,
};

use circuit_breaker_shell::ffi::variable_bytes;

use crate::conf::ClassSetting;
use crate::request::{self, RequestState};
use circuit_breaker_shell::zone::Handle;

/// The request's class: `None` without `circuit_breaker_class` (or with `off`); else its
/// variable's value, or `default` when the value is empty or names no class (said once per
/// worker at `warn`). Read once, then kept in the state.
///
/// # Safety
/// `r` must be the live request `state` belongs to.
pub unsafe fn of(
    r: *mut ngx_http_request_t,
    state: &mut RequestState,
    log: *mut ngx_log_t,
) -> Option<Class> {
    if let Some(c) = state.told.class {
        return c;
    }
    // SAFETY: `r` is live (this fn's contract).
    let c = unsafe { read(r, log) };
    state.told.class = Some(c);
    c
}

/// The request's class, read from its variable without keeping it (a request answered
/// before it has a state: the ramp's share, an open breaker's rejection).
pub fn peek(r: &mut ngx_http_request_t, log: *mut ngx_log_t) -> Option<Class> {
    // SAFETY: a live request, borrowed for the call.
    unsafe { read(r, log) }
}

/// Reads the class through a raw pointer: the variable's evaluation writes only the
/// request's variables array and its pool, outside the request's own struct, which callers
/// may hold a shared reference to.
///
/// # Safety
/// `r` must be a live request.
unsafe fn read(r: *mut ngx_http_request_t, log: *mut ngx_log_t) -> Option<Class> {
    // SAFETY: a live request (this fn's contract), borrowed only for the lookup.
    let setting = request::loc_conf(unsafe { &*r }).and_then(|l| l.class);
    let Some(ClassSetting::On { variable }) = setting else {
        return None;
    };
    // SAFETY: a live request and an index this configuration registered.
    let v = unsafe { nginx_sys::ngx_http_get_indexed_variable(r, variable) };
    // SAFETY: null, or the variable's value, which lives as long as the request.
    let v = unsafe { v.as_ref() };
    // SAFETY: a value nginx filled, whose bytes live as long as the request.
    let value = match v.and_then(|v| unsafe { variable_bytes(v) }) {
        Some(value) if !value.is_empty() => value,
        _ => return Some(Class::Default),
    };
    Some(Class::parse(value).unwrap_or_else(|| {
        unknown(log, value);
        Class::Default
    }))
}

/// Says once per worker that a class's value names none (the value as a client may have
/// sent it: written as keys are, and cut at 32 bytes).
#[cold]
fn unknown(log: *mut ngx_log_t, value: &[u8]) {
    static TOLD: AtomicBool = AtomicBool::new(false);
    if TOLD.swap(true, Ordering::Relaxed) {
        return;
    }
    ngx::ngx_log_error!(
        NGX_LOG_WARN,
        log,
        "circuit breaker class \"{}\" is not \"critical\", \"default\" or \"sheddable\": \
         the request's class is \"default\" (said once per worker)",
        shown(&value[..value.len().min(32)])
    );
}

/// Each breaker's classes seen lately in this worker, by berth index.
struct Seen(UnsafeCell<Vec<Option<(Handle, Presence)>>>);

// SAFETY: a worker runs nginx's event loop on one thread, the only one that touches this.
unsafe impl Sync for Seen {}

static SEEN: Seen = Seen(UnsafeCell::new(Vec::new()));

/// Runs `f` on `handle`'s presence in this worker (made on first use).
fn with_presence<T>(handle: Handle, f: impl FnOnce(&mut Presence) -> T) -> T {
    // SAFETY: single-threaded (above), and no call here re-enters: the borrow ends with `f`.
    let seen = unsafe { &mut *SEEN.0.get() };
    let i = handle.berth_index();
    if seen.len() <= i {
        seen.resize(i + 1, None);
    }
    let slot = &mut seen[i];
    if !slot.is_some_and(|(h, _)| h == handle) {
        *slot = Some((handle, Presence::default()));
    }
    let (_, p) = slot.as_mut().expect("set above");
    f(p)
}

/// A request of `class` came to `handle`'s breaker at `now_ms`.
pub fn note(handle: Handle, class: Option<Class>, now_ms: u64) {
    if let (Some(c), false) = (class, handle.is_none()) {
        with_presence(handle, |p| p.note(c, now_ms));
    }
}

/// A request its breaker admitted, of an upstream whose probe may come within a class's
/// presence of opening (`SrvConf::presence_when_closed`): its class is noted, since the
/// requests turned away before such a probe may not have said which classes come.
///
/// # Safety
/// `r` must be the live request `state` belongs to.
#[cold]
#[inline(never)]
pub unsafe fn note_admitted(
    r: *mut ngx_http_request_t,
    state: &mut RequestState,
    log: *mut ngx_log_t,
) {
    // SAFETY: `r` is live (this fn's contract).
    let class = unsafe { of(r, state, log) };
    note(
        state.judge.handle,
        class,
        circuit_breaker_shell::clock::mono_ms(),
    );
}

/// A request of an open breaker, answered without a state of its own: its class is read and
/// noted, so that the probe, once due, can be left to the lowest class present.
pub fn note_rejected(r: &mut ngx_http_request_t, handle: Handle, log: *mut ngx_log_t) {
    note(
        handle,
        peek(r, log),
        circuit_breaker_shell::clock::mono_ms(),
    );
}

/// Whether a request of `class` may take `handle`'s probe: it has no class, or no request
/// of a lower class came lately (see `Presence::lower_present`).
pub fn may_probe(handle: Handle, class: Option<Class>, now_ms: u64) -> bool {
    match class {
        Some(c) if !handle.is_none() => with_presence(handle, |p| !p.lower_present(c, now_ms)),
        _ => true,
    }
}

/// `$circuit_breaker_class`: the request's class (`critical`, `default`, `sheddable`), as the
/// module took it (or, for a request it did not judge, as its variable says now); not found
/// (`-` in a log) without `circuit_breaker_class`.
///
/// # Safety
/// nginx calls it with a live request and a value to fill.
pub unsafe extern "C" fn variable(
    r: *mut ngx_http_request_t,
    v: *mut ngx_http_variable_value_t,
    _data: usize,
) -> ngx_int_t {
    circuit_breaker_shell::ffi::guard(NGX_ERROR as ngx_int_t, || {
        // SAFETY: nginx passes a live request and a value to fill.
        let (req, v) = unsafe { (&mut *r, &mut *v) };
        let kept = request::here(req).and_then(|s| s.told.class);
        let class = match kept {
            Some(c) => c,
            None => {
                let log = super::connection_log(req);
                peek(req, log)
            }
        };
        match class {
            Some(c) => {
                let name = c.name();
                v.set_len(name.len() as u32);
                v.set_valid(1);
                v.set_no_cacheable(0);
                v.set_not_found(0);
                v.data = name.as_ptr().cast_mut();
            }
            None => v.set_not_found(1),
        }
        NGX_OK as ngx_int_t
    })
}
