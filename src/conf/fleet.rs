//! `circuit_breaker_fleet` at configuration time, past the words the core parses: the key
//! read from `secret_file=`, the bus's credentials from `nats_credentials=`, the warning of
//! `auth=off`, and the TLS context of the `https://` peers or `tls://` servers, built with
//! nginx's own `ngx_ssl` calls as `proxy_ssl_*` builds one.

use std::io::Read as _;

use circuit_breaker_core::fleet::auth::{FleetKey, MAX_SECRET_BYTES};
use circuit_breaker_core::fleet::bus::{creds, Credentials};
use circuit_breaker_core::fleet::conf::{Secret, TlsSpec};
use circuit_breaker_core::fleet::FleetDirective;
use nginx_sys::{ngx_conf_t, ngx_str_t, NGX_LOG_EMERG, NGX_LOG_WARN, NGX_OK};
use ngx::ngx_conf_log_error;

use super::MainConf;

/// Reads `secret_file=`, warns of `auth=off`, and builds the TLS context. `Err` once nginx's
/// error is logged.
///
/// # Safety
/// `cf` must be the configuration being parsed, at the `circuit_breaker_fleet` directive.
pub unsafe fn finish(
    cf: *mut ngx_conf_t,
    mcf: &mut MainConf,
    spec: &mut FleetDirective,
) -> Result<(), ()> {
    match &spec.secret {
        Secret::File(name) => {
            // SAFETY: as for this function.
            let key = unsafe { read_secret(cf, name) }?;
            spec.secret = Secret::Key(key);
        }
        Secret::Off if spec.bus.is_some() => {
            ngx_conf_log_error!(
                NGX_LOG_WARN,
                cf,
                "\"circuit_breaker_fleet\" with \"auth=off\" believes any message from anyone \
                 who can publish on the bus; use it in a lab only"
            );
        }
        Secret::Off => {
            ngx_conf_log_error!(
                NGX_LOG_WARN,
                cf,
                "\"circuit_breaker_fleet\" with \"auth=off\" believes any message from anyone \
                 who can reach a peer's status location; use it in a lab only"
            );
        }
        Secret::Key(_) => {}
    }
    if let Some(tls) = &spec.tls {
        // SAFETY: as for this function.
        unsafe { tls_context(cf, mcf, tls) }?;
    }
    if let Some(name) = spec.bus.as_ref().and_then(|b| b.credentials.as_deref()) {
        // SAFETY: as for this function.
        mcf.fleet_credentials = Some(unsafe { read_credentials(cf, name) }?);
    }
    if let Some(bus) = spec.bus.as_mut() {
        // Names are resolved now, as nginx resolves an upstream's servers: a worker never
        // waits on the resolver.
        if let Err((server, why)) = bus.resolve(lookup) {
            ngx_conf_log_error!(
                NGX_LOG_EMERG,
                cf,
                "{} in \"{}\" of the \"circuit_breaker_fleet\" directive",
                why,
                server
            );
            return Err(());
        }
    }
    Ok(())
}

/// The addresses of host `name`, by the system's resolver (`getaddrinfo`, as nginx's
/// `ngx_inet_resolve_host`), each once, in its order.
fn lookup(name: &str, port: u16) -> Result<Vec<std::net::IpAddr>, ()> {
    use std::net::ToSocketAddrs as _;
    let mut ips: Vec<std::net::IpAddr> = Vec::new();
    for a in (name, port).to_socket_addrs().map_err(|_| ())? {
        if !ips.contains(&a.ip()) {
            ips.push(a.ip());
        }
    }
    Ok(ips)
}

/// The key in `name` (relative to the configuration prefix): its first line. Errors name the
/// file, never what it holds.
///
/// # Safety
/// As for [`finish`].
unsafe fn read_secret(cf: *mut ngx_conf_t, name: &str) -> Result<FleetKey, ()> {
    // SAFETY: as for this function.
    let (path, mut contents) = unsafe { read_file(cf, name, "secret_file", MAX_SECRET_BYTES + 2) }?;
    let key = FleetKey::from_file(&contents);
    // The secret's bytes do not outlive the parse.
    contents.iter_mut().for_each(|b| *b = 0);
    key.map_err(|e| {
        ngx_conf_log_error!(
            NGX_LOG_EMERG,
            cf,
            "invalid secret in \"secret_file\" \"{}\": its first line {}",
            path,
            e
        );
    })
}

/// The bus's credentials in `name`. Errors name the file, never what it holds.
///
/// # Safety
/// As for [`finish`].
unsafe fn read_credentials(cf: *mut ngx_conf_t, name: &str) -> Result<Credentials, ()> {
    // SAFETY: as for this function.
    let (path, mut contents) =
        unsafe { read_file(cf, name, "nats_credentials", creds::MAX_FILE_BYTES + 1) }?;
    let got = Credentials::parse(&contents);
    contents.iter_mut().for_each(|b| *b = 0);
    got.map_err(|why| {
        ngx_conf_log_error!(
            NGX_LOG_EMERG,
            cf,
            "invalid \"nats_credentials\" \"{}\": the file {}",
            path,
            why
        );
    })
}

/// The path of `name` (relative to the configuration prefix) and at most `max` bytes of it;
/// an error names the parameter `what` and the file.
///
/// # Safety
/// As for [`finish`].
unsafe fn read_file(
    cf: *mut ngx_conf_t,
    name: &str,
    what: &str,
    max: usize,
) -> Result<(String, Vec<u8>), ()> {
    // SAFETY: as for this function; the path is copied to the pool, NUL-terminated.
    let Some(mut full) = (unsafe { pool_str(cf, name) }) else {
        return Err(());
    };
    // SAFETY: `cf` is live; nginx rewrites `full` into the pool with the prefix when relative.
    if unsafe { nginx_sys::ngx_conf_full_name((*cf).cycle, &mut full, 1) } != NGX_OK as isize {
        return Err(());
    }
    let path = String::from_utf8_lossy(full.as_bytes()).into_owned();
    let mut contents = Vec::new();
    let read =
        std::fs::File::open(&path).and_then(|f| f.take(max as u64).read_to_end(&mut contents));
    if let Err(e) = read {
        let errno = e.raw_os_error().unwrap_or(0);
        // SAFETY: strerror's text is valid until the next call, which this thread does not make
        // before the copy.
        let why = unsafe { core::ffi::CStr::from_ptr(libc::strerror(errno)) }.to_string_lossy();
        ngx_conf_log_error!(
            NGX_LOG_EMERG,
            cf,
            "cannot read \"{}\" \"{}\" ({}: {})",
            what,
            path,
            errno,
            why
        );
        return Err(());
    }
    Ok((path, contents))
}

/// `s` copied into the configuration's pool, NUL-terminated (nginx's file calls want C
/// strings).
///
/// # Safety
/// As for [`finish`].
unsafe fn pool_str(cf: *mut ngx_conf_t, s: &str) -> Option<ngx_str_t> {
    // SAFETY: `cf` is live; its pool outlives the configuration.
    let p = unsafe { nginx_sys::ngx_pnalloc((*cf).pool, s.len() + 1) }.cast::<u8>();
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` holds `s.len() + 1` bytes.
    unsafe {
        core::ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
        *p.add(s.len()) = 0;
    }
    Some(ngx_str_t {
        len: s.len(),
        data: p,
    })
}

/// The context every pull and push to an `https://` peer uses: TLS 1.2 or 1.3, this
/// instance's client certificate if given, and the trusted CA certificates the peers'
/// certificates are verified against (chains of up to three CA certificates).
///
/// # Safety
/// As for [`finish`].
#[cfg(ngx_ssl)]
unsafe fn tls_context(cf: *mut ngx_conf_t, mcf: &mut MainConf, tls: &TlsSpec) -> Result<(), ()> {
    use nginx_sys::{ngx_ssl_t, NGX_SSL_TLSv1_2, NGX_SSL_TLSv1_3};

    // SAFETY: `cf` is live; a zeroed ngx_ssl_t is what ngx_ssl_create fills in.
    let ssl = unsafe { nginx_sys::ngx_pcalloc((*cf).pool, core::mem::size_of::<ngx_ssl_t>()) }
        .cast::<ngx_ssl_t>();
    if ssl.is_null() {
        return Err(());
    }
    // SAFETY: `ssl` is a zeroed context in the pool; nginx logs its own failures.
    if unsafe {
        nginx_sys::ngx_ssl_create(
            ssl,
            (NGX_SSL_TLSv1_2 | NGX_SSL_TLSv1_3) as usize,
            core::ptr::null_mut(),
        )
    } != NGX_OK as isize
    {
        return Err(());
    }
    // Freed with the configuration, as proxy_ssl's context is.
    // SAFETY: `cf` is live.
    let cln = unsafe { nginx_sys::ngx_pool_cleanup_add((*cf).pool, 0) };
    // SAFETY: null or a cleanup record of the pool.
    let Some(cln) = (unsafe { cln.as_mut() }) else {
        // SAFETY: the context just created, freed once.
        unsafe { nginx_sys::ngx_ssl_cleanup_ctx(ssl.cast()) };
        return Err(());
    };
    cln.handler = Some(nginx_sys::ngx_ssl_cleanup_ctx);
    cln.data = ssl.cast();
    if let Some((cert, key)) = &tls.certificate {
        // SAFETY: as for this function.
        let c = unsafe { pool_str(cf, cert) };
        // SAFETY: as for this function.
        let k = unsafe { pool_str(cf, key) };
        let (Some(mut c), Some(mut k)) = (c, k) else {
            return Err(());
        };
        // SAFETY: `ssl` is created; nginx reads both files (relative to the prefix).
        if unsafe { nginx_sys::ngx_ssl_certificate(cf, ssl, &mut c, &mut k, core::ptr::null_mut()) }
            != NGX_OK as isize
        {
            return Err(());
        }
    }
    // SAFETY: as for this function.
    let Some(mut ca) = (unsafe { pool_str(cf, &tls.trusted_certificate) }) else {
        return Err(());
    };
    // SAFETY: `ssl` is created; nginx loads the file and keeps verification for after the
    // handshake, where `net::tls` checks it.
    if unsafe { nginx_sys::ngx_ssl_trusted_certificate(cf, ssl, &mut ca, 3) } != NGX_OK as isize {
        return Err(());
    }
    mcf.fleet_ssl = ssl;
    Ok(())
}

#[cfg(not(ngx_ssl))]
unsafe fn tls_context(cf: *mut ngx_conf_t, _mcf: &mut MainConf, _tls: &TlsSpec) -> Result<(), ()> {
    ngx_conf_log_error!(
        NGX_LOG_EMERG,
        cf,
        "\"circuit_breaker_fleet\" has \"https://\" peers or \"tls://\" servers, but nginx is \
         built without SSL"
    );
    Err(())
}
