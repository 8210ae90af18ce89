//! TLS over a [`Stream`] with nginx's own OpenSSL glue: the SSL context is one nginx built from
//! configuration (for `proxy_pass https://`, the proxying location's `proxy_ssl_*` context),
//! the handshake is `ngx_ssl_handshake`, and reads and writes go through `c->recv`/`c->send`,
//! which the handshake switches to `ngx_ssl_recv`/`ngx_ssl_write`.

use core::ffi::c_void;
use core::future::poll_fn;
use core::ptr::NonNull;
use core::task::Poll;
use std::ffi::CString;

use nginx_sys::{
    ngx_connection_t, ngx_create_pool, ngx_int_t, ngx_ssl_check_host, ngx_ssl_create_connection,
    ngx_ssl_handshake, ngx_ssl_t, ngx_str_t, SSL_ctrl, SSL_get_verify_result, SSL_set_alpn_protos,
    TLSEXT_NAMETYPE_host_name, NGX_AGAIN, NGX_OK, NGX_SSL_CLIENT, SSL_CTRL_SET_TLSEXT_HOSTNAME,
    X509_V_OK,
};

use super::Error;
use circuit_breaker_shell::net::stream::Stream;

/// Room for the `ngx_ssl_connection_t` nginx allocates from the connection's pool.
const POOL_SIZE: usize = 1024;

/// How to speak TLS to a server.
pub struct Tls {
    ssl: NonNull<ngx_ssl_t>,
    /// Checked against the certificate when verifying.
    name: Option<CString>,
    /// Sent as SNI.
    sni: Option<CString>,
    /// Without a name: the server's IP address, checked against the certificate's IP
    /// addresses when verifying (no SNI: it carries host names only).
    ip: Option<CString>,
    verify: bool,
}

impl Tls {
    /// TLS with nginx's SSL context `ssl`, sending `sni` (if any). With `verify`, the
    /// certificate must pass the context's verification (`proxy_ssl_trusted_certificate`) and
    /// match `name`, as `proxy_ssl_verify on` requires. Returns `None` for a null context or a
    /// name with a NUL byte.
    ///
    /// # Safety
    /// `ssl` must be null or an initialised `ngx_ssl_t` (its `ctx` set) from configuration
    /// memory, alive for the worker's life.
    pub unsafe fn new(
        ssl: *mut ngx_ssl_t,
        name: &[u8],
        sni: Option<&[u8]>,
        verify: bool,
    ) -> Option<Tls> {
        let ssl = NonNull::new(ssl)?;
        let name = match name {
            [] => None,
            n => Some(CString::new(n).ok()?),
        };
        let sni = match sni {
            Some(n) => Some(CString::new(n).ok()?),
            None => None,
        };
        Some(Tls {
            ssl,
            name,
            sni,
            ip: None,
            verify,
        })
    }

    /// Verified TLS with nginx's SSL context `ssl` to a server known by its IP address: the
    /// certificate must pass the context's verification and carry `ip` (text form) among
    /// its IP addresses. No SNI is sent.
    ///
    /// # Safety
    /// As for [`Tls::new`].
    pub unsafe fn for_ip(ssl: *mut ngx_ssl_t, ip: &str) -> Option<Tls> {
        Some(Tls {
            ssl: NonNull::new(ssl)?,
            name: None,
            sni: None,
            ip: Some(CString::new(ip).ok()?),
            verify: true,
        })
    }
}

/// The application protocol a handshake offers (ALPN).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Alpn {
    /// None offered (unless the context offers one): HTTP/1.1, as `proxy_pass https://`.
    Default,
    /// HTTP/2, which gRPC over TLS requires, as `grpc_pass grpcs://` offers it.
    H2,
}

/// Performs the TLS handshake on a connected stream.
pub(super) async fn handshake(stream: &Stream, tls: &Tls, alpn: Alpn) -> Result<(), Error> {
    let c = stream.raw()?;
    // nginx allocates the SSL connection state from `c->pool`, which a fresh peer connection
    // lacks; Shared::close destroys it after closing.

    // SAFETY: `c` is the stream's open connection, with our log; the pool made here is its own
    // (above).
    unsafe {
        let pool = ngx_create_pool(POOL_SIZE, (*c).log);
        if pool.is_null() {
            return Err(Error::NoConnection);
        }
        (*c).pool = pool;
        if ngx_ssl_create_connection(tls.ssl.as_ptr(), c, NGX_SSL_CLIENT as usize)
            != NGX_OK as ngx_int_t
        {
            return Err(Error::Tls);
        }
        if let Some(name) = &tls.sni {
            // SSL_set_tlsext_host_name is this SSL_ctrl call (a macro in OpenSSL's headers).
            if SSL_ctrl(
                (*(*c).ssl).connection,
                SSL_CTRL_SET_TLSEXT_HOSTNAME as i32,
                TLSEXT_NAMETYPE_host_name as _,
                name.as_ptr().cast_mut().cast::<c_void>(),
            ) != 1
            {
                return Err(Error::Tls);
            }
        }
        // In the protocol-name-list form: each name after its length.
        if alpn == Alpn::H2
            && SSL_set_alpn_protos((*(*c).ssl).connection, b"\x02h2".as_ptr(), 3) != 0
        {
            return Err(Error::Tls);
        }
    }

    poll_fn(|cx| {
        let c = match stream.raw() {
            Ok(c) => c,
            Err(e) => return Poll::Ready(Err(e)),
        };
        // SAFETY: `c` is open and has `c->ssl` (created above).
        let rc = unsafe { ngx_ssl_handshake(c) };
        // SAFETY: ngx_ssl_handshake may install its own event handlers; ours drive the task.
        unsafe { Stream::restore_handlers(c) };
        if rc == NGX_AGAIN as ngx_int_t {
            stream.wait_any(cx);
            return Poll::Pending;
        }
        if rc != NGX_OK as ngx_int_t {
            // nginx logged why ("SSL_do_handshake() failed ...").
            return Poll::Ready(Err(match stream.raw() {
                Ok(_) => Error::Tls,
                Err(e) => e,
            }));
        }
        Poll::Ready(verify(c, tls))
    })
    .await
}

/// The checks `proxy_ssl_verify on` makes after a handshake: the chain verified, the name
/// matches.
fn verify(c: *mut ngx_connection_t, tls: &Tls) -> Result<(), Error> {
    if !tls.verify {
        return Ok(());
    }
    // SAFETY: `c` is open with a completed TLS handshake.
    let rc = unsafe { SSL_get_verify_result((*(*c).ssl).connection) };
    if rc != X509_V_OK as core::ffi::c_long {
        return Err(Error::TlsVerify(rc as i64));
    }
    let Some(name) = &tls.name else {
        return match &tls.ip {
            Some(ip) => check_ip(c, ip),
            None => Ok(()),
        };
    };
    let bytes = name.as_bytes();
    let mut name = ngx_str_t {
        len: bytes.len(),
        data: bytes.as_ptr().cast_mut(),
    };
    // SAFETY: `c` is open with a completed handshake; nginx only reads the name.
    if unsafe { ngx_ssl_check_host(c, &mut name) } != NGX_OK as ngx_int_t {
        return Err(Error::TlsName);
    }
    Ok(())
}

/// The certificate carries `ip` among its IP addresses (`X509_check_ip_asc`).
fn check_ip(c: *mut ngx_connection_t, ip: &CString) -> Result<(), Error> {
    // SAFETY: `c` is open with a completed handshake; the certificate, when there is one, is
    // ours to free.
    unsafe {
        let cert = nginx_sys::SSL_get1_peer_certificate((*(*c).ssl).connection);
        if cert.is_null() {
            return Err(Error::TlsName);
        }
        let rc = nginx_sys::X509_check_ip_asc(cert, ip.as_ptr(), 0);
        nginx_sys::X509_free(cert);
        if rc == 1 {
            Ok(())
        } else {
            Err(Error::TlsName)
        }
    }
}
