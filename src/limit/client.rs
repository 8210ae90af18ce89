//! The client a request counts as under a limit's share (`circuit_breaker_core::limit::share`):
//! its address as nginx has it, after `real_ip`, under the zone's secret. A worker remembers
//! the last address it hashed: a keepalive connection's requests, and a busy client's, skip
//! the keyed hash (`scripts/bench-instructions`, closed_limit).

use core::cell::UnsafeCell;

use circuit_breaker_core::keyed::KeyHasher;
use circuit_breaker_core::limit::share::{address_key, Client};
use circuit_breaker_shell::zone::Zone;
use nginx_sys::ngx_http_request_t;

#[derive(Clone, Copy)]
struct Last {
    hasher: KeyHasher,
    len: usize,
    key: [u8; 9],
    client: Client,
}

struct Memo(UnsafeCell<Option<Last>>);

// SAFETY: a worker runs nginx's event loop on one thread, the only one that touches this.
unsafe impl Sync for Memo {}

static LAST: Memo = Memo(UnsafeCell::new(None));

/// The client of request `r` under `zone`'s secret; `None` for a UNIX-domain socket, whose
/// clients are not told apart.
///
/// # Safety
/// `r` must be a live request.
pub unsafe fn of(r: &ngx_http_request_t, zone: &Zone) -> Option<Client> {
    // SAFETY: a live request's connection, whose sockaddr lives as long as it does.
    let sa = unsafe { r.connection.as_ref() }?.sockaddr;
    // SAFETY: the connection's address, as long as its family says.
    let ip = unsafe { circuit_breaker_shell::ffi::ip_of(sa) }?;
    let (key, len) = address_key(ip);
    let hasher = zone.keyed_hasher();
    // SAFETY: single-threaded (above); no borrow outlives this function.
    let last = unsafe { &mut *LAST.0.get() };
    if let Some(l) = last {
        if l.len == len && l.key == key && l.hasher == hasher {
            return Some(l.client);
        }
    }
    let client = Client::of(hasher.client(&key[..len]));
    *last = Some(Last {
        hasher,
        len,
        key,
        client,
    });
    Some(client)
}
