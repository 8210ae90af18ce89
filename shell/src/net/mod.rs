//! Outbound connections from a worker process, off the request path, on nginx's own
//! connections and event loop: what the http module's probes and fleet exchange and the stream
//! module's probes share. See the http module's `net` for HTTP over them.
//!
//! - **Connections** are nginx's own (`ngx_event_connect_peer`), so they count against
//!   `worker_connections`, use nginx's event method and appear in its debug log
//!   ([`stream::Stream`]).
//! - **Tasks** run on ngx's executor (`ngx::async_`): [`spawn`], [`every`].

pub mod stream;
mod task;

use core::fmt;
use core::mem;
use std::net::SocketAddr;

use nginx_sys::{ngx_addr_t, ngx_sockaddr_t, sockaddr, socklen_t};

pub use self::task::{every, exiting, spawn, within, Background};

/// Where to connect: a socket address and its name for log lines, copied so that a request
/// never depends on configuration memory.
#[derive(Clone)]
pub struct Peer {
    sockaddr: ngx_sockaddr_t,
    socklen: socklen_t,
    name: Box<[u8]>,
}

impl Peer {
    /// A copy of a socket address as nginx holds them (`ngx_http_upstream_rr_peer_t`'s
    /// `sockaddr`/`socklen`/`name`, `ngx_addr_t`, `ngx_url_t.addrs`). `None` if `socklen` does
    /// not fit a socket address.
    ///
    /// # Safety
    /// `sockaddr` must point to `socklen` readable bytes.
    pub unsafe fn from_raw(
        sockaddr: *const sockaddr,
        socklen: socklen_t,
        name: &[u8],
    ) -> Option<Peer> {
        let len = socklen as usize;
        if sockaddr.is_null() || len == 0 || len > mem::size_of::<ngx_sockaddr_t>() {
            return None;
        }
        // SAFETY: all-zero is a valid (unspecified-family) socket address.
        let mut storage: ngx_sockaddr_t = unsafe { mem::zeroed() };
        // SAFETY: the caller guarantees `len` readable bytes; `storage` has room for them.
        unsafe {
            core::ptr::copy_nonoverlapping(
                sockaddr.cast::<u8>(),
                core::ptr::addr_of_mut!(storage).cast::<u8>(),
                len,
            );
        }
        Some(Peer {
            sockaddr: storage,
            socklen,
            name: name.into(),
        })
    }

    /// A copy of an `ngx_addr_t`.
    ///
    /// # Safety
    /// `addr.sockaddr` must point to `addr.socklen` readable bytes, and `addr.name` to
    /// `addr.name.len` bytes (or be empty).
    pub unsafe fn from_addr(addr: &ngx_addr_t) -> Option<Peer> {
        let name: &[u8] = if addr.name.len == 0 || addr.name.data.is_null() {
            &[]
        } else {
            // SAFETY: the caller guarantees the name's bytes.
            unsafe { core::slice::from_raw_parts(addr.name.data, addr.name.len) }
        };
        // SAFETY: the caller guarantees the address's bytes.
        unsafe { Peer::from_raw(addr.sockaddr, addr.socklen, name) }
    }

    /// The peer's name, as log lines show it.
    pub fn name(&self) -> &[u8] {
        &self.name
    }
}

impl From<SocketAddr> for Peer {
    fn from(addr: SocketAddr) -> Peer {
        // SAFETY: all-zero is a valid socket address to fill in.
        let mut storage: ngx_sockaddr_t = unsafe { mem::zeroed() };
        let socklen = match addr {
            SocketAddr::V4(a) => {
                let sin = nginx_sys::sockaddr_in {
                    sin_family: nginx_sys::AF_INET as _,
                    sin_port: a.port().to_be(),
                    sin_addr: nginx_sys::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                storage.sockaddr_in = sin;
                mem::size_of::<nginx_sys::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = nginx_sys::sockaddr_in6 {
                    sin6_family: nginx_sys::AF_INET6 as _,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: nginx_sys::in6_addr {
                        __in6_u: nginx_sys::in6_addr__bindgen_ty_1 {
                            __u6_addr8: a.ip().octets(),
                        },
                    },
                    sin6_scope_id: a.scope_id(),
                };
                storage.sockaddr_in6 = sin6;
                mem::size_of::<nginx_sys::sockaddr_in6>()
            }
        };
        Peer {
            sockaddr: storage,
            socklen: socklen as socklen_t,
            name: addr.to_string().into_bytes().into(),
        }
    }
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.name))
    }
}

/// Why a request produced no response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The worker is exiting: the request was not started, or nginx closed its connection.
    Exiting,
    /// The request is malformed (method, target, `Host` or a header); nothing was sent.
    InvalidRequest(&'static str),
    /// nginx could not open a connection (no free `worker_connections`, no socket; nginx
    /// logged which).
    NoConnection,
    /// The server refused the connection.
    Refused,
    /// Connecting failed otherwise (errno: unreachable, ...).
    Connect(i32),
    /// The server reset the connection.
    Reset,
    /// The server closed the connection before a complete response.
    Closed,
    /// The overall deadline passed.
    Timeout,
    /// The response was not valid HTTP/1.x or HTTP/2 (hyper's or h2's description).
    Protocol(String),
    /// Another socket error (errno).
    Io(i32),
    /// The TLS handshake failed (nginx logged why).
    Tls,
    /// The server's certificate failed verification (OpenSSL's `X509_V_ERR_*` code).
    TlsVerify(i64),
    /// The server's certificate does not match the expected name.
    TlsName,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Exiting => f.write_str("worker is exiting"),
            Error::InvalidRequest(what) => write!(f, "invalid {what} in request"),
            Error::NoConnection => f.write_str("no connection available"),
            Error::Refused => f.write_str("connection refused"),
            Error::Connect(errno) => write!(f, "connect() failed ({errno})"),
            Error::Reset => f.write_str("connection reset by peer"),
            Error::Closed => f.write_str("prematurely closed connection"),
            Error::Timeout => f.write_str("timed out"),
            Error::Protocol(msg) => write!(f, "invalid response: {msg}"),
            Error::Io(errno) => write!(f, "socket error ({errno})"),
            Error::Tls => f.write_str("SSL handshake failed"),
            Error::TlsVerify(code) => write!(f, "SSL certificate verify error ({code})"),
            Error::TlsName => f.write_str("SSL certificate does not match the server name"),
        }
    }
}

impl std::error::Error for Error {}
