//! Background tasks on the worker's event loop, the exit check they share, and a deadline.

use core::future::{poll_fn, Future};
use core::pin::{pin, Pin};
use core::ptr::addr_of;
use core::task::{Context, Poll};
use core::time::Duration;
use std::panic::{catch_unwind, AssertUnwindSafe};

use nginx_sys::NGX_LOG_ALERT;
use ngx::async_::Task;
use ngx::log::ngx_cycle_log;

use super::Error;

/// Whether the worker is shutting down (gracefully or not) or about to: no new work may start.
pub fn exiting() -> bool {
    // SAFETY: plain reads of process-wide flags; the quit/terminate ones are set by signal
    // handlers, hence the volatile reads.
    unsafe {
        addr_of!(nginx_sys::ngx_exiting).read_volatile() != 0
            || addr_of!(nginx_sys::ngx_terminate).read_volatile() != 0
            || addr_of!(nginx_sys::ngx_quit).read_volatile() != 0
    }
}

/// A running background task. Dropping it cancels the task: its future is dropped, which
/// closes any connection and deletes any timer it holds. [`Background::detach`] lets it run
/// to its end instead.
#[must_use = "dropping a Background cancels its task"]
pub struct Background(Option<Task<()>>);

impl Background {
    /// Lets the task run on its own until it ends.
    pub fn detach(mut self) {
        if let Some(task) = self.0.take() {
            task.detach();
        }
    }

    /// Whether the task has ended.
    pub fn is_finished(&self) -> bool {
        self.0.as_ref().map_or(true, Task::is_finished)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // Dropping an async_task handle cancels it; ngx's executor drops the future at once
        // when the task is not running.
        drop(self.0.take());
    }
}

/// Runs `future` on this worker's event loop; it starts at once (its first poll happens
/// inside this call). A panic inside it is caught, logged and ends the task, as none may
/// unwind into nginx's event handlers.
pub fn spawn(future: impl Future<Output = ()> + 'static) -> Background {
    Background(Some(ngx::async_::spawn(Guarded(Box::pin(future)))))
}

/// Runs `tick` after `first`, then again after each delay it returns, until it returns `None`,
/// the task is cancelled, or the worker starts exiting. Meant to be started from the module's
/// `init_process` hook (and detached): the pending sleep is a cancelable timer, so it never
/// delays a worker's exit, and no tick starts once the worker is exiting.
pub fn every<F, Fut>(first: Duration, mut tick: F) -> Background
where
    F: FnMut() -> Fut + 'static,
    Fut: Future<Output = Option<Duration>> + 'static,
{
    spawn(async move {
        let mut delay = first;
        loop {
            ngx::async_::sleep(delay).await;
            if exiting() {
                return;
            }
            match tick().await {
                Some(next) => delay = next,
                None => return,
            }
        }
    })
}

/// Turns a panic in a task's poll into the task's end.
struct Guarded(Pin<Box<dyn Future<Output = ()>>>);

impl Future for Guarded {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(_) => {
                ngx::ngx_log_error!(
                    NGX_LOG_ALERT,
                    ngx_cycle_log().as_ptr(),
                    "circuit breaker background task panicked, stopped"
                );
                Poll::Ready(())
            }
        }
    }
}

/// `work`'s result, or [`Error::Timeout`] once `timeout` has passed.
pub async fn within<T>(
    timeout: Duration,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let deadline = ngx::async_::sleep(timeout);
    let (mut work, mut deadline) = (pin!(work), pin!(deadline));
    poll_fn(|cx| {
        if let Poll::Ready(r) = work.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        if deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(Error::Timeout));
        }
        Poll::Pending
    })
    .await
}
