//! Small helpers: time, randomness, names and nginx header lists.

use core::sync::atomic::{AtomicU64, Ordering};

use nginx_sys::{
    ngx_conf_t, ngx_list_push, ngx_list_t, ngx_pid, ngx_str_t, ngx_table_elt_t, ngx_timeofday,
};

/// FNV-1a: cheap, stable across processes and reloads (keys live in shared memory).
pub fn hash_name(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The key hash of (upstream, route), from their precomputed name hashes.
pub fn key_hash(upstream: u64, route: u64) -> u64 {
    (upstream ^ route.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// nginx's cached wall clock in Unix milliseconds. Workers' cached clocks differ by a few
/// milliseconds; the breaker clamps readings that go backwards.
pub fn now_ms() -> u64 {
    let tp = ngx_timeofday();
    (tp.sec as u64).saturating_mul(1000) + tp.msec as u64
}

/// The generator's state: process-local (each worker has its own copy after fork). An atomic
/// rather than a thread-local, which costs a `__tls_get_addr` call in a loaded module.
static RNG: AtomicU64 = AtomicU64::new(0);

/// A per-process xorshift generator for jitter; seeded from the pid and the clock so that
/// workers and fleet members spread differently.
pub fn rnd() -> u32 {
    let mut x = RNG.load(Ordering::Relaxed);
    if x == 0 {
        x = (u64::from(pid()) << 32) ^ now_ms() ^ 0x2545_f491_4f6c_dd1d;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    RNG.store(x, Ordering::Relaxed);
    (x >> 32) as u32
}

/// This worker's pid, the owner id of a probe slot.
pub fn pid() -> u32 {
    // SAFETY: ngx_pid is written once at process start.
    unsafe { ngx_pid as u32 }
}

/// Whether a process (a probe slot's owner) still exists.
pub fn process_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { nginx_sys::kill(pid as i32, 0) };
    rc == 0 || nginx_sys::ngx_errno() != nginx_sys::ESRCH as i32
}

/// The file and line being parsed, for messages emitted after parsing.
///
/// # Safety
/// `cf` must be the live configuration.
pub unsafe fn conf_position(cf: *mut ngx_conf_t) -> Option<(String, usize)> {
    // SAFETY: while parsing a file, conf_file is set.
    let file = unsafe { (*cf).conf_file.as_ref()? };
    Some((
        String::from_utf8_lossy(file.file.name.as_bytes()).into_owned(),
        file.line,
    ))
}

/// Appends a header to a headers list; `value` must outlive the request (pool or static).
///
/// # Safety
/// `list` must be a request's live headers list.
pub unsafe fn push_header(list: *mut ngx_list_t, key: &'static str, value: ngx_str_t) -> bool {
    // SAFETY: the caller passes a live list of ngx_table_elt_t.
    let h = unsafe { ngx_list_push(list) }.cast::<ngx_table_elt_t>();
    // SAFETY: non-null element just pushed.
    let Some(h) = (unsafe { h.as_mut() }) else {
        return false;
    };
    h.hash = 1;
    h.key = ngx_str_t {
        len: key.len(),
        data: key.as_ptr().cast_mut(),
    };
    h.value = value;
    h.lowcase_key = core::ptr::null_mut();
    #[cfg(ngx_table_elt_next)]
    {
        h.next = core::ptr::null_mut();
    }
    true
}

/// A static string as an ngx_str_t.
pub fn static_str(s: &'static str) -> ngx_str_t {
    ngx_str_t {
        len: s.len(),
        data: s.as_ptr().cast_mut(),
    }
}

/// Runs `f`, turning a panic into `err` so that none crosses into nginx's C frames.
pub fn guard<T>(err: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(err)
}
