//! Directive plumbing both modules share: nginx's own value parsers, a directive's words,
//! nginx's `[emerg]` wording, and the "is duplicate" check.

use core::ffi::{c_char, c_void};

use circuit_breaker_core::directive::{ConfError, Units};
use nginx_sys::{
    ngx_array_t, ngx_conf_t, ngx_shared_memory_add, ngx_shm_zone_t, ngx_str_t, NGX_LOG_EMERG,
};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::ngx_conf_log_error;

use crate::zone::{init_zone, ZoneName};

/// Defines `extern "C"` directive handlers nginx can call (`name => parse`), each running its
/// parsing function with panics turned into a configuration error instead of crossing into
/// nginx.
#[macro_export]
macro_rules! directive_handlers {
    ($($name:ident => $inner:ident),+ $(,)?) => {$(
        pub unsafe extern "C" fn $name(
            cf: *mut ::nginx_sys::ngx_conf_t,
            cmd: *mut ::nginx_sys::ngx_command_t,
            conf: *mut ::core::ffi::c_void,
        ) -> *mut ::core::ffi::c_char {
            // SAFETY: nginx calls a directive's handler with the configuration being parsed,
            // the directive's command and the conf its offset names.
            $crate::ffi::guard(::ngx::core::NGX_CONF_ERROR, || unsafe { $inner(cf, cmd, conf) })
        }
    )+};
}

/// As `limit_req`: a slab pool needs a few pages to hold anything at all.
pub const MIN_ZONE_SIZE: u64 = 8 * 4096;

/// nginx's own parsers for time and size values, so that a value means here what it means
/// to nginx.
pub struct NginxUnits;

impl Units for NginxUnits {
    fn msec(&self, value: &str) -> Option<u64> {
        let mut s = ngx_str_t {
            len: value.len(),
            data: value.as_ptr().cast_mut(),
        };
        // SAFETY: nginx reads `len` bytes of a string that outlives the call.
        u64::try_from(unsafe { nginx_sys::ngx_parse_time(&mut s, 0) }).ok()
    }

    fn size(&self, value: &str) -> Option<u64> {
        let mut s = ngx_str_t {
            len: value.len(),
            data: value.as_ptr().cast_mut(),
        };
        // SAFETY: `s` points at `value`'s `len` bytes, which outlive the call; ngx_parse_size only
        // reads them.
        u64::try_from(unsafe { nginx_sys::ngx_parse_size(&mut s) }).ok()
    }
}

/// The directive's arguments after its name.
///
/// # Safety
/// `cf` must be the configuration being parsed.
pub unsafe fn args<'a>(cf: *mut ngx_conf_t) -> &'a [ngx_str_t] {
    // SAFETY: nginx fills cf->args with the directive's words before calling its handler.
    let all: &[ngx_str_t] = unsafe { (*((*cf).args as *const ngx_array_t)).as_slice() };
    &all[1..]
}

/// The directive's arguments as text, or an error naming the first that is not UTF-8. An
/// iterator rather than a `Vec`, so that parsing allocates nothing (see `directive::Seen`).
pub fn words(args: &[ngx_str_t]) -> Result<impl Iterator<Item = &str>, ConfError> {
    if let Some(bad) = args.iter().find(|a| a.to_str().is_err()) {
        let text = String::from_utf8_lossy(bad.as_bytes()).into_owned();
        return Err(ConfError::InvalidParameter(text));
    }
    Ok(args.iter().map(|a| a.to_str().unwrap_or_default()))
}

pub fn fail(cf: *mut ngx_conf_t, err: ConfError) -> *mut c_char {
    ngx_conf_log_error!(NGX_LOG_EMERG, cf, "{}", err);
    NGX_CONF_ERROR
}

/// What every handler starts with: the conf nginx passes it, refused with nginx's own "is
/// duplicate" when `is_set` says the directive was already given there, and the directive's
/// words.
///
/// # Safety
/// `cf` must be the configuration being parsed, at this directive, and `conf` the `C` its
/// command's offset names.
pub unsafe fn once<'a, C>(
    cf: *mut ngx_conf_t,
    conf: *mut c_void,
    is_set: impl FnOnce(&mut C) -> bool,
) -> Result<(&'a mut C, &'a [ngx_str_t]), *mut c_char> {
    // SAFETY: `conf` is a `C` (this fn's contract), which nginx keeps for the cycle.
    let c = unsafe { &mut *conf.cast::<C>() };
    if is_set(c) {
        return Err(c"is duplicate".as_ptr().cast_mut());
    }
    // SAFETY: `cf` is the configuration being parsed, at this directive: what `args` asks.
    Ok((c, unsafe { args(cf) }))
}

/// A directive whose words parse into one value, stored once in the field `field` picks.
///
/// # Safety
/// As [`once`].
pub unsafe fn set_once<C, T>(
    cf: *mut ngx_conf_t,
    conf: *mut c_void,
    field: impl Fn(&mut C) -> &mut Option<T>,
    parse: impl FnOnce(&[ngx_str_t]) -> Result<T, ConfError>,
) -> *mut c_char {
    // SAFETY: this fn's contract is `once`'s.
    let (c, raw) = match unsafe { once::<C>(cf, conf, |c| field(c).is_some()) } {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    match parse(raw) {
        Ok(v) => {
            *field(c) = Some(v);
            NGX_CONF_OK
        }
        Err(e) => fail(cf, e),
    }
}

/// Registers the shared zone `name` of `size` bytes for the module `tag` names, its `data`
/// the module's [`ZoneName`]; `None` (said at `emerg`) when nginx refuses it or the zone is
/// someone else's.
///
/// # Safety
/// `cf` must be the configuration being parsed; `zone_name` must live as long as the
/// configuration (nginx keeps pointers to its name and to it), `tag` as long as the module.
pub unsafe fn add_zone(
    cf: *mut ngx_conf_t,
    zone_name: &mut ZoneName,
    name: &str,
    size: usize,
    tag: *mut c_void,
) -> Option<*mut ngx_shm_zone_t> {
    // The seed `circuit_breaker_jitter_key` may have set stays.
    zone_name.0 = name.to_owned();
    let mut zname = ngx_str_t {
        len: zone_name.0.len(),
        data: zone_name.0.as_ptr().cast_mut(),
    };
    // SAFETY: `cf` is live; `tag` outlives every cycle; nginx keeps `zname.data`, which lives
    // in the module's conf for the cycle's lifetime (this fn's contract).
    let zone = unsafe { ngx_shared_memory_add(cf, &mut zname, size, tag) };
    // SAFETY: null or the zone nginx just registered.
    let z = unsafe { zone.as_mut() }?;
    if !z.data.is_null() {
        ngx_conf_log_error!(
            NGX_LOG_EMERG,
            cf,
            "zone \"{}\" is already used, give \"circuit_breaker_zone\" another name",
            name
        );
        return None;
    }
    z.init = Some(init_zone);
    z.data = core::ptr::from_mut(zone_name).cast();
    Some(zone)
}
