//! Time and randomness for the breaker.
//!
//! Durations (windows, cooldowns, probe spacing, leases) run on nginx's cached monotonic
//! clock, `ngx_current_msec` (`CLOCK_MONOTONIC`, the same in every worker, as `limit_req`
//! relies on): a step of the wall clock changes none of them. The wall clock is read only to
//! show instants on the status page.

use core::sync::atomic::{AtomicU64, Ordering};

use nginx_sys::{ngx_current_msec, ngx_timeofday};

/// Milliseconds on the monotonic clock, as of this worker's last clock update.
#[inline]
pub fn mono_ms() -> u64 {
    // SAFETY: a plain integer that nginx's event loop updates in this process.
    unsafe { ngx_current_msec as u64 }
}

/// Unix milliseconds, as of this worker's last clock update.
#[inline]
pub fn wall_ms() -> u64 {
    let tp = ngx_timeofday();
    (tp.sec as u64).saturating_mul(1000) + tp.msec as u64
}

/// Unix seconds, as of this worker's last clock update: nginx's `ngx_time()`, which round
/// robin's `fail_timeout` is counted in.
#[inline]
pub fn unix_s() -> nginx_sys::time_t {
    ngx_timeofday().sec
}

/// The generator's state, per process (each worker has its own copy after fork). An atomic
/// rather than a thread-local, which costs a `__tls_get_addr` call in a loaded module.
static RNG: AtomicU64 = AtomicU64::new(0);

/// A uniform random number for jitter and shares: xorshift, seeded from the pid and both
/// clocks so that workers and fleet members spread differently.
#[inline]
pub fn rnd() -> u32 {
    let mut x = RNG.load(Ordering::Relaxed);
    if x == 0 {
        x = (u64::from(crate::ffi::pid()) << 32) ^ wall_ms() ^ mono_ms() ^ 0x2545_f491_4f6c_dd1d;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    RNG.store(x, Ordering::Relaxed);
    (x >> 32) as u32
}
