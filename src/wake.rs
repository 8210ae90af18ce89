//! Waking the fleet's exchange worker when a breaker moves, without putting its work on the
//! request path: what the request path (`upstream/`, `status/`) calls, below every room that
//! calls it; the fleet (`fleet/`) installs it and waits on it.
//!
//! A worker whose request records an outcome or moves a breaker calls [`nudge`]: it bumps
//! the fleet zone's counter (read by the exchange worker every [`POLL`] when there are other
//! workers), and in the exchange worker itself posts an event to nginx's posted queue, so
//! that the exchange looks at once — after the request's own work, at the end of the event
//! loop's iteration, never inside it. [`wait`] is what the exchange task sleeps on: a
//! deadline, or that event.

use core::cell::{Cell, UnsafeCell};
use core::future::{poll_fn, Future};
use core::pin::pin;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use core::task::{Poll, Waker};
use core::time::Duration;

use nginx_sys::{ngx_event_t, ngx_post_event, ngx_posted_events};
use ngx::log::ngx_cycle_log;

/// How often the exchange worker reads the counter other workers bump.
pub const POLL: Duration = Duration::from_millis(10);

/// The fleet zone's counter in this worker's mapping; null without a fleet.
static MOVED: AtomicPtr<AtomicU64> = AtomicPtr::new(ptr::null_mut());

/// The event posted in the exchange worker; its handler wakes the exchange task.
struct Posted(UnsafeCell<ngx_event_t>);

// SAFETY: touched only from the worker's one thread (nginx's event loop).
unsafe impl Sync for Posted {}

static EVENT: Posted = Posted(UnsafeCell::new(
    // SAFETY: an all-zero event is nginx's initial state (no timer, not posted).
    unsafe { core::mem::zeroed() },
));

thread_local! {
    /// The exchange task waiting in [`wait`], when this worker runs the exchange.
    static WAITER: Cell<Option<Waker>> = const { Cell::new(None) };
    /// This worker runs the exchange.
    static HERE: Cell<bool> = const { Cell::new(false) };
    /// Nudged since the exchange last looked.
    static NUDGED: Cell<bool> = const { Cell::new(false) };
}

/// Where this worker bumps the counter (every worker of a fleet, at `init_process`).
pub fn install(moved: &AtomicU64) {
    MOVED.store(ptr::from_ref(moved).cast_mut(), Ordering::Relaxed);
}

/// This worker runs the exchange: [`nudge`] wakes it directly.
pub fn exchange_here() {
    HERE.with(|h| h.set(true));
}

/// A breaker moved or recorded an outcome: the exchange should look again. Cheap, and
/// nothing when no fleet is configured.
#[inline]
pub fn nudge() {
    let moved = MOVED.load(Ordering::Relaxed);
    if moved.is_null() {
        return;
    }
    // SAFETY: set by `install` to the fleet zone's counter, mapped for the worker's life.
    unsafe { &*moved }.fetch_add(1, Ordering::Relaxed);
    kick();
}

/// Wakes the exchange task soon, from the posted queue, if it runs in this worker.
pub fn kick() {
    if !HERE.with(Cell::get) {
        return;
    }
    NUDGED.with(|n| n.set(true));
    let ev = EVENT.0.get();
    // SAFETY: the worker's one thread; the event is ours, posted at most once (nginx checks
    // `posted`); its log is the cycle's, valid while the worker runs.
    unsafe {
        if (*ev).handler.is_none() {
            (*ev).handler = Some(on_posted);
            (*ev).data = ev.cast();
        }
        (*ev).log = ngx_cycle_log().as_ptr();
        ngx_post_event(ev, ptr::addr_of_mut!(ngx_posted_events));
    }
}

/// Whether [`nudge`] or [`kick`] was called in this worker since the last call.
pub fn take_nudged() -> bool {
    NUDGED.with(|n| n.replace(false))
}

unsafe extern "C" fn on_posted(_ev: *mut ngx_event_t) {
    circuit_breaker_shell::ffi::guard((), || {
        if let Some(w) = WAITER.with(Cell::take) {
            w.wake();
        }
    });
}

/// Sleeps `delay`, or less if the exchange is kicked meanwhile.
pub async fn wait(delay: Duration) {
    let mut sleep = pin!(ngx::async_::sleep(delay));
    poll_fn(|cx| {
        if NUDGED.with(Cell::get) {
            return Poll::Ready(());
        }
        if sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        WAITER.with(|w| w.set(Some(cx.waker().clone())));
        Poll::Pending
    })
    .await;
    WAITER.with(|w| drop(w.take()));
}
