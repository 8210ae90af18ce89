//! Small pieces every room of the shell needs at the nginx boundary: the panic barrier,
//! process and build identity, stable name hashes, and a laid-out shared zone's pool.

use core::panic::AssertUnwindSafe;

use nginx_sys::ngx_shm_zone_t;
use ngx::core::SlabPool;

/// Runs `f`, turning a panic into `err`, so that none crosses into nginx's C frames.
///
/// Always inlined: `catch_unwind` costs nothing on the way through, but a guard left out of
/// line reaches `f`'s captures through a pointer (`scripts/bench-instructions`, closed).
#[inline(always)]
pub fn guard<T>(err: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or(err)
}

/// The slab pool of a shm zone whose init callback has laid it out (its `data` set), and the
/// zone's size: what both of the module's zones start from.
///
/// # Safety
/// `shm` must be null or a shm zone registered by this module, in a process where it is
/// mapped (a worker, or the master between init and the next reload).
#[inline]
pub unsafe fn laid_out_pool(shm: *const ngx_shm_zone_t) -> Option<(SlabPool, usize)> {
    // SAFETY: `shm` is null or our registered, mapped shm zone (this fn's contract); `as_ref`
    // turns null into `None`.
    let shm = unsafe { shm.as_ref()? };
    // SAFETY: a mapped zone starts with its slab pool.
    let pool = unsafe { SlabPool::from_shm_zone(shm)? };
    if pool.as_ref().data.is_null() {
        return None;
    }
    Some((pool, shm.shm.size))
}

/// A variable's value as its bytes, `None` when not found. nginx-sys's accessors read the
/// value's bitfield (`len:28, valid, no_cacheable, not_found, escape`) one bit at a time
/// (`scripts/bench-instructions`, closed_limit_class); on a little-endian target this reads
/// it as the one 32-bit word it is, the fields from its low bits as C lays them out there.
///
/// # Safety
/// `v` must be a value nginx filled (a found one's `data` holds `len` bytes), and the bytes
/// must outlive the borrow of `v`: a request's variable, while the request lives.
#[inline]
pub unsafe fn variable_bytes(v: &nginx_sys::ngx_variable_value_t) -> Option<&[u8]> {
    #[cfg(target_endian = "little")]
    let (len, not_found) = {
        // SAFETY: the bitfield unit is the value's first 4 bytes, plain data.
        let raw: [u8; 4] = unsafe { core::mem::transmute(v._bitfield_1) };
        let bits = u32::from_le_bytes(raw);
        ((bits & 0x0fff_ffff) as usize, bits & (1 << 30) != 0)
    };
    #[cfg(not(target_endian = "little"))]
    let (len, not_found) = (v.len() as usize, v.not_found() != 0);
    if not_found {
        return None;
    }
    if len == 0 || v.data.is_null() {
        return Some(&[]);
    }
    // SAFETY: a found value's `data` holds `len` bytes for as long as the value lives (this
    // fn's contract).
    Some(unsafe { core::slice::from_raw_parts(v.data, len) })
}

/// The IP address of socket address `sa`, `None` for another family (a UNIX-domain socket).
///
/// # Safety
/// `sa` must be null or point to a socket address as long as its family says.
pub unsafe fn ip_of(sa: *const nginx_sys::sockaddr) -> Option<std::net::IpAddr> {
    // SAFETY: null or a socket address (the contract); its family is its first field.
    let family = u32::from(unsafe { sa.as_ref() }?.sa_family);
    if family == nginx_sys::AF_INET {
        // SAFETY: an AF_INET address is a sockaddr_in.
        let sin = unsafe { &*sa.cast::<nginx_sys::sockaddr_in>() };
        Some(std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()).into())
    } else if family == nginx_sys::AF_INET6 {
        // SAFETY: an AF_INET6 address is a sockaddr_in6; every view of its union is bytes.
        let sin6 = unsafe { &*sa.cast::<nginx_sys::sockaddr_in6>() };
        // SAFETY: as above.
        let octets = unsafe { sin6.sin6_addr.__in6_u.__u6_addr8 };
        Some(std::net::Ipv6Addr::from(octets).into())
    } else {
        None
    }
}

/// The module's version (the crate's), as the status page and the zone's notice show it.
pub const MODULE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The nginx version the module was built for; nginx loads it into no other.
pub fn nginx_version() -> &'static str {
    nginx_sys::NGINX_VERSION.to_str().unwrap_or("unknown")
}

/// This process's pid: the owner id of a probe it holds, and of its entry in a limit's owners
/// table.
#[inline]
pub fn pid() -> u32 {
    // SAFETY: `ngx_pid` is written once when the process starts, before any request.
    unsafe { nginx_sys::ngx_pid as u32 }
}

/// Whether a process (a probe's or a limit entry's owner) still exists.
pub fn process_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { nginx_sys::kill(pid as i32, 0) };
    rc == 0 || nginx_sys::ngx_errno() != nginx_sys::ESRCH as i32
}

/// FNV-1a: cheap, and stable across processes and reloads (hashes live in shared memory).
#[inline]
pub fn hash_name(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The hash of a breaker's key from the hashes of its two names.
#[inline]
pub fn key_hash(upstream: u64, route: u64) -> u64 {
    (upstream ^ route.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The hash of a server breaker's key: apart from every route's of the same upstream.
#[inline]
pub fn server_key_hash(upstream: u64, server: u64) -> u64 {
    key_hash(upstream, server ^ 0x5e12_7e12_5e12_7e12)
}

/// Whether this worker meets `tag` for the first time (4 096 remembered; past that, none is
/// new): what a log line said once per breaker, or per key family, asks.
pub fn first_time(tag: u64) -> bool {
    thread_local! {
        static SEEN: core::cell::RefCell<Vec<u64>> = const { core::cell::RefCell::new(Vec::new()) };
    }
    SEEN.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.contains(&tag) || s.len() >= 4096 {
            return false;
        }
        s.push(tag);
        true
    })
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_value_reads_as_nginx_sys_lays_it_out() {
        let bytes = *b"critical";
        for (len, found, valid, no_cacheable, escape) in [
            (8u32, true, true, false, false),
            (8, true, false, true, true),
            (0x0fff_ffff, true, true, true, true),
            (0, true, true, false, false),
            (5, false, true, true, true),
        ] {
            let mut v = nginx_sys::ngx_variable_value_t {
                _bitfield_align_1: [],
                _bitfield_1: Default::default(),
                data: bytes.as_ptr().cast_mut(),
            };
            v.set_len(len);
            v.set_valid(valid.into());
            v.set_no_cacheable(no_cacheable.into());
            v.set_not_found((!found).into());
            v.set_escape(escape.into());
            let got = if len as usize <= bytes.len() {
                // SAFETY: `data` holds `len` bytes here, which outlive `v`.
                unsafe { variable_bytes(&v) }.map(<[u8]>::to_vec)
            } else {
                // Too long to read here: its length and state only (no data: nothing read).
                let w = nginx_sys::ngx_variable_value_t {
                    data: core::ptr::null_mut(),
                    ..v
                };
                // SAFETY: a null `data` is never read.
                unsafe { variable_bytes(&w) }.map(|_| vec![])
            };
            let want = match (found, len as usize <= bytes.len()) {
                (false, _) => None,
                (true, true) => Some(bytes[..len as usize].to_vec()),
                (true, false) => Some(vec![]),
            };
            assert_eq!(got, want, "len {len} found {found}");
        }
    }
}
