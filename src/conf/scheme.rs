//! What a location's `proxy_pass` (or `grpc_pass`) speaks: nginx keeps the scheme of its URL
//! inside the content module, where no public structure shows it. So while the http block is
//! parsed, the module's `proxy_pass` and `grpc_pass` handlers are wrapped: each call goes to
//! the module's own handler first, and then the URL's scheme is noted against the location
//! conf it filled in. Probes then speak TLS exactly where nginx's own traffic does, from the
//! first byte. The same wrap, on every upstream module's `*_pass`, notes the content handler
//! the directive gave its location: a keyed breaker judges requests that one of those passes
//! on (`crate::keyed`).
//!
//! The wrap lasts only while the http block is parsed: `preconfiguration` installs it and
//! `postconfiguration` puts the modules' handlers back (a cleanup of the configuration's pool
//! does too when the parse fails half way), so no pointer into this module outlives the
//! configuration that loaded it, and a reload that drops the module finds nginx's handlers.

use core::ffi::{c_char, c_void, CStr};
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use nginx_sys::{
    ngx_command_t, ngx_conf_t, ngx_int_t, ngx_module_t, ngx_pool_cleanup_add, ngx_str_t, NGX_ERROR,
    NGX_OK,
};
use ngx::core::NGX_CONF_OK;

use ngx::http::HttpModuleMainConf;

use super::Module;

/// What a location's URL speaks, as far as its literal prefix tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// `http://`, `grpc://`.
    Plain,
    /// `https://`, `grpcs://`.
    Tls,
}

impl Pass {
    /// The scheme of `url`, if its literal prefix names one (`$scheme://…` does not).
    pub fn of(url: &[u8]) -> Option<Pass> {
        let starts = |prefix: &[u8]| {
            url.get(..prefix.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
        };
        if starts(b"https://") || starts(b"grpcs://") {
            Some(Pass::Tls)
        } else if starts(b"http://") || starts(b"grpc://") {
            Some(Pass::Plain)
        } else {
            None
        }
    }
}

impl Wrapped {
    /// Whether its URL's scheme is noted (`proxy_pass`, `grpc_pass`).
    fn scheme(&self) -> bool {
        core::ptr::eq(self, &PROXY_PASS) || core::ptr::eq(self, &GRPC_PASS)
    }
}

type Set = unsafe extern "C" fn(*mut ngx_conf_t, *mut ngx_command_t, *mut c_void) -> *mut c_char;

/// A wrapped directive: which module and directive, and the module's own handler while
/// wrapped.
struct Wrapped {
    module: &'static CStr,
    directive: &'static [u8],
    original: AtomicPtr<c_void>,
    command: AtomicPtr<ngx_command_t>,
    wrapper: Set,
    /// The module's `ctx_index`, once wrapped.
    index: AtomicUsize,
}

static PROXY_PASS: Wrapped = Wrapped {
    module: c"ngx_http_proxy_module",
    directive: b"proxy_pass",
    original: AtomicPtr::new(core::ptr::null_mut()),
    command: AtomicPtr::new(core::ptr::null_mut()),
    wrapper: proxy_pass,
    index: AtomicUsize::new(usize::MAX),
};

static GRPC_PASS: Wrapped = Wrapped {
    module: c"ngx_http_grpc_module",
    directive: b"grpc_pass",
    original: AtomicPtr::new(core::ptr::null_mut()),
    command: AtomicPtr::new(core::ptr::null_mut()),
    wrapper: grpc_pass,
    index: AtomicUsize::new(usize::MAX),
};

/// A `*_pass` whose URL speaks no scheme of ours: wrapped only to note its handler.
macro_rules! other_pass {
    ($wrapped:ident, $wrapper:ident, $module:literal, $directive:literal) => {
        static $wrapped: Wrapped = Wrapped {
            module: $module,
            directive: $directive,
            original: AtomicPtr::new(core::ptr::null_mut()),
            command: AtomicPtr::new(core::ptr::null_mut()),
            wrapper: $wrapper,
            index: AtomicUsize::new(usize::MAX),
        };

        unsafe extern "C" fn $wrapper(
            cf: *mut ngx_conf_t,
            cmd: *mut ngx_command_t,
            conf: *mut c_void,
        ) -> *mut c_char {
            // SAFETY: as for `proxy_pass`.
            unsafe { pass(&$wrapped, cf, cmd, conf) }
        }
    };
}

other_pass!(
    FASTCGI_PASS,
    fastcgi_pass,
    c"ngx_http_fastcgi_module",
    b"fastcgi_pass"
);
other_pass!(
    UWSGI_PASS,
    uwsgi_pass,
    c"ngx_http_uwsgi_module",
    b"uwsgi_pass"
);
other_pass!(SCGI_PASS, scgi_pass, c"ngx_http_scgi_module", b"scgi_pass");
other_pass!(
    MEMCACHED_PASS,
    memcached_pass,
    c"ngx_http_memcached_module",
    b"memcached_pass"
);

static WRAPPED: [&Wrapped; 6] = [
    &PROXY_PASS,
    &GRPC_PASS,
    &FASTCGI_PASS,
    &UWSGI_PASS,
    &SCGI_PASS,
    &MEMCACHED_PASS,
];

unsafe extern "C" fn proxy_pass(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx calls a directive handler with the configuration being parsed, the command
    // and the location conf of the module the command belongs to.
    unsafe { pass(&PROXY_PASS, cf, cmd, conf) }
}

unsafe extern "C" fn grpc_pass(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: as for `proxy_pass`.
    unsafe { pass(&GRPC_PASS, cf, cmd, conf) }
}

/// The module's own handler, then the scheme noted against `conf`.
///
/// # Safety
/// As nginx calls a directive handler of `w`'s module.
unsafe fn pass(
    w: &Wrapped,
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    let original = w.original.load(Ordering::Relaxed);
    if original.is_null() {
        return ngx::core::NGX_CONF_ERROR;
    }
    // SAFETY: `original` is the module's own handler, saved when it was wrapped.
    let set: Set = unsafe { core::mem::transmute::<*mut c_void, Set>(original) };
    // SAFETY: the arguments nginx gave the wrapper are those the handler expects.
    let rv = unsafe { set(cf, cmd, conf) };
    if rv != NGX_CONF_OK {
        return rv;
    }
    circuit_breaker_shell::ffi::guard(rv, || {
        // SAFETY: `cf` is the configuration being parsed, inside the http block.
        let cfr = unsafe { &*cf };
        // SAFETY: its args array holds the directive's words, the URL second.
        let args: &[ngx_str_t] = unsafe { (*cfr.args).as_slice() };
        let scheme = args.get(1).and_then(|url| Pass::of(url.as_bytes()));
        let Some(mcf) = Module::main_conf_mut(cfr) else {
            return rv;
        };
        if let (Some(scheme), true) = (scheme, w.scheme()) {
            mcf.pass_schemes.insert(conf as usize, scheme);
        }
        // SAFETY: a location's directive: cf->ctx is its http conf ctx, whose loc_conf holds
        // the core module's conf of the location.
        let handler = unsafe {
            let ctx = &*cfr.ctx.cast::<nginx_sys::ngx_http_conf_ctx_t>();
            (*(*ctx.loc_conf.add(nginx_sys::ngx_http_core_module.ctx_index))
                .cast::<nginx_sys::ngx_http_core_loc_conf_t>())
            .handler
        };
        let index = w.index.load(Ordering::Relaxed);
        if let Some(h) = handler {
            if !mcf.upstream_handlers.iter().any(|&(p, _)| p == h as usize) {
                mcf.upstream_handlers.push((h as usize, index));
            }
        }
        rv
    })
}

/// `preconfiguration`: wraps the `proxy_pass` and `grpc_pass` handlers of the cycle's
/// modules (those it has), until [`unwrap_all`].
///
/// # Safety
/// `cf` must be the configuration being parsed, inside the http block.
pub unsafe fn wrap_all(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: `cf` is the configuration being parsed (this fn's contract).
    let cfr = unsafe { &*cf };
    // SAFETY: the cycle being configured has its module list set before parsing begins.
    let cycle = unsafe { &*cfr.cycle };
    let (first, n) = (cycle.modules, cycle.modules_n);
    // SAFETY: `modules` holds `modules_n` module pointers.
    let modules: &[*mut ngx_module_t] = unsafe { core::slice::from_raw_parts(first, n) };
    for w in WRAPPED {
        let Some(&m) = modules.iter().find(|&&m| {
            // SAFETY: every entry is a loaded module with a NUL-terminated name.
            (unsafe { CStr::from_ptr((*m).name) }) == w.module
        }) else {
            continue;
        };
        // SAFETY: a module's command list ends with an entry of an empty name.
        let Some(cmd) = (unsafe { find_command(m, w.directive) }) else {
            continue;
        };
        // SAFETY: `cmd` is in the module's static command table, written only here and in
        // `unwrap_all` while nginx parses (single-threaded); the handler saved is the module's.
        unsafe {
            let Some(own) = (*cmd).set else { continue };
            if own as usize == w.wrapper as usize {
                continue;
            }
            w.original.store(own as *mut c_void, Ordering::Relaxed);
            w.index.store((*m).ctx_index, Ordering::Relaxed);
            w.command.store(cmd, Ordering::Relaxed);
            (*cmd).set = Some(w.wrapper);
        }
    }
    // Should the parse fail before postconfiguration, the pool's cleanup unwraps.
    // SAFETY: the configuration's pool lives until the cycle it builds is done with.
    let cln = unsafe { ngx_pool_cleanup_add(cfr.pool, 0) };
    // SAFETY: a fresh cleanup record, or null.
    match unsafe { cln.as_mut() } {
        Some(cln) => {
            cln.handler = Some(unwrap_cleanup);
            NGX_OK as ngx_int_t
        }
        None => {
            unwrap_all();
            NGX_ERROR as ngx_int_t
        }
    }
}

unsafe extern "C" fn unwrap_cleanup(_data: *mut c_void) {
    unwrap_all();
}

/// Puts the modules' own handlers back. Idempotent.
pub fn unwrap_all() {
    for w in WRAPPED {
        let cmd = w.command.swap(core::ptr::null_mut(), Ordering::Relaxed);
        let original = w.original.swap(core::ptr::null_mut(), Ordering::Relaxed);
        if cmd.is_null() || original.is_null() {
            continue;
        }
        // SAFETY: `original` was the module's own handler of `cmd`, an entry of its static
        // command table, which lives as long as the process; nginx is not parsing.
        unsafe { (*cmd).set = Some(core::mem::transmute::<*mut c_void, Set>(original)) };
    }
}

/// The command `name` of module `m`.
///
/// # Safety
/// `m` must be a loaded module.
unsafe fn find_command(m: *mut ngx_module_t, name: &[u8]) -> Option<*mut ngx_command_t> {
    // SAFETY: `m` is a loaded module (this fn's contract); its commands, if any, end with an
    // entry whose name is empty.
    let mut cmd = unsafe { (*m).commands };
    if cmd.is_null() {
        return None;
    }
    loop {
        // SAFETY: `cmd` walks the table up to its terminating entry.
        let c = unsafe { &*cmd };
        if c.name.len == 0 {
            return None;
        }
        if c.name.as_bytes() == name {
            return Some(cmd);
        }
        // SAFETY: not past the terminating entry (checked above).
        cmd = unsafe { cmd.add(1) };
    }
}

/// `postconfiguration`: which location's TLS settings each upstream with active probes
/// takes (`SrvConf::probe_tls`). Its probes speak TLS when a location passing to it by name
/// does (`proxy_pass https://`), or — with none passing to it by name — one that picks its
/// upstream at run time over TLS. When several such locations differ in their settings, the
/// strictest wins: one with `proxy_ssl_verify on` over one without, then one that sends SNI,
/// then the first; a `warn` line names the one chosen.
///
/// # Safety
/// `cf` must be the configuration being parsed, inside the http block, its locations merged.
#[cfg(ngx_ssl)]
pub unsafe fn choose_probe_tls(cf: *mut ngx_conf_t) {
    use nginx_sys::{ngx_http_upstream_conf_t, NGX_LOG_WARN};
    // SAFETY: `cf` is the configuration being parsed (this fn's contract).
    let cfr = unsafe { &*cf };
    let Some(mcf) = Module::main_conf_mut(cfr) else {
        return;
    };
    for &s in &mcf.upstreams {
        // SAFETY: the module's upstream confs live as long as the configuration, which is being
        // set up by this process alone.
        let scf = unsafe { &mut *s };
        scf.probe_tls = core::ptr::null_mut();
        if scf.probe.is_none() || scf.uscf.is_null() {
            continue;
        }
        let named: Vec<_> = mcf
            .proxied
            .iter()
            .filter(|p| p.upstream == scf.uscf)
            .collect();
        let candidates: Vec<(*mut ngx_http_upstream_conf_t, &str)> = if named.is_empty() {
            mcf.dynamic_tls
                .iter()
                .map(|(c, n)| (*c, n.as_str()))
                .collect()
        } else {
            named
                .iter()
                .filter(|p| p.tls)
                .map(|p| (p.conf, p.location.as_str()))
                .collect()
        };
        // SAFETY: upstream confs of this configuration's locations.
        let settings = |c: *mut ngx_http_upstream_conf_t| unsafe {
            let c = &*c;
            (c.ssl_verify != 0, c.ssl_server_name != 0, c.ssl, c.ssl_name)
        };
        let Some(&(best, location)) = candidates
            .iter()
            .enumerate()
            .max_by_key(|&(i, &(c, _))| {
                let (verify, sni, _, _) = settings(c);
                (verify, sni, core::cmp::Reverse(i))
            })
            .map(|(_, c)| c)
        else {
            continue;
        };
        if candidates
            .iter()
            .any(|&(c, _)| settings(c) != settings(best))
        {
            let (verify, sni, _, _) = settings(best);
            ngx::ngx_log_error!(
                NGX_LOG_WARN,
                cfr.log,
                "circuit breaker: locations passing to upstream \"{}\" over TLS differ in their \"proxy_ssl_*\" settings, its probes take those of location \"{}\" (proxy_ssl_verify {}, proxy_ssl_server_name {})",
                scf.name,
                location,
                if verify { "on" } else { "off" },
                if sni { "on" } else { "off" }
            );
        }
        scf.probe_tls = best;
    }
}
