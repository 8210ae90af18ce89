//! `circuit_breaker_jitter_key file;`: the instance's jitter seed, read from a file as
//! `ssl_session_ticket_key` reads its key, so that `cb-replay --seed-file` can make the live
//! draws again (see `circuit_breaker_core::breaker::jitter`). The seed stays out of the
//! configuration's text, which `nginx -T` prints and bug reports quote.

use core::ffi::{c_char, c_void};
use std::io::Read as _;

use circuit_breaker_core::breaker::jitter::parse_seed;
use nginx_sys::{ngx_array_t, ngx_command_t, ngx_conf_t, ngx_str_t, NGX_LOG_EMERG, NGX_OK};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::ngx_conf_log_error;

use super::MainConf;
use circuit_breaker_shell::ffi::guard;

/// The directive's handler.
pub unsafe extern "C" fn set_jitter_key(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    guard(NGX_CONF_ERROR, || {
        // SAFETY: nginx passes our main conf for NGX_HTTP_MAIN_CONF_OFFSET.
        let mcf = unsafe { &mut *conf.cast::<MainConf>() };
        if mcf.zone_name.1.is_some() {
            return c"is duplicate".as_ptr().cast_mut();
        }
        // SAFETY: nginx fills cf->args with the directive's words before calling its handler;
        // TAKE1: the name and one argument.
        let mut path: ngx_str_t = unsafe { (*((*cf).args as *const ngx_array_t)).as_slice() }[1];
        // SAFETY: `cf` is live; nginx rewrites `path` into the pool with the prefix when relative
        // (the words it hands over are NUL-terminated, as this call needs).
        if unsafe { nginx_sys::ngx_conf_full_name((*cf).cycle, &mut path, 1) } != NGX_OK as isize {
            return NGX_CONF_ERROR;
        }
        let name = String::from_utf8_lossy(path.as_bytes()).into_owned();
        match read_seed(&name) {
            Ok(seed) => {
                mcf.zone_name.1 = Some(seed);
                NGX_CONF_OK
            }
            Err(why) => {
                ngx_conf_log_error!(
                    NGX_LOG_EMERG,
                    cf,
                    "cannot use \"circuit_breaker_jitter_key\" \"{}\" {}",
                    name,
                    why
                );
                NGX_CONF_ERROR
            }
        }
    })
}

/// The seed in `path`: 32 bytes as they are (`openssl rand 32`), or 64 hexadecimal digits
/// (`openssl rand -hex 32`).
fn read_seed(path: &str) -> Result<[u8; 32], String> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut contents = Vec::new();
    // Without blocking, and only a regular file: opening a FIFO would wait for a writer, and
    // a device (`/dev/stdin`) reads whatever it gives, with the master in a reload.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .and_then(|f| {
            if f.metadata()?.is_file() {
                Ok(f)
            } else {
                Err(std::io::Error::other("not a regular file"))
            }
        })
        .and_then(|f| f.take(1024).read_to_end(&mut contents))
        .map_err(|e| match e.raw_os_error() {
            // As nginx says a file it cannot open: "(2: No such file or directory)".
            Some(n) => {
                let text = e.to_string();
                let why = text
                    .strip_suffix(&format!(" (os error {n})"))
                    .unwrap_or(&text);
                format!("({n}: {why})")
            }
            None => format!("({e})"),
        })?;
    let seed = match contents.len() {
        32 => {
            let mut s = [0u8; 32];
            s.copy_from_slice(&contents);
            Ok(s)
        }
        _ => core::str::from_utf8(&contents)
            .map_err(|_| "(it holds neither 32 bytes nor 64 hexadecimal digits)".to_owned())
            .and_then(|t| parse_seed(t).map_err(|e| format!("({e}, or 32 bytes)"))),
    };
    // The secret's bytes do not outlive the parse.
    contents.iter_mut().for_each(|b| *b = 0);
    seed
}
