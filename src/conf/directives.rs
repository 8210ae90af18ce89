//! The directives' handlers: nginx hands over the words, core parses them, and the typed
//! values land in the module's confs. Errors read like nginx's own (`[emerg]` with the
//! directive, the value, the file and the line).

use core::ffi::{c_char, c_void};

use circuit_breaker_core::directive::{
    self, ConfError, Units, LIMIT_DIRECTIVE, PROBE_DIRECTIVE, RETRY_DIRECTIVE,
};
use circuit_breaker_core::fleet::conf as fleet_conf;
use nginx_sys::{
    ngx_array_t, ngx_command_t, ngx_conf_t, ngx_http_handler_pt, ngx_shared_memory_add, ngx_str_t,
    NGX_LOG_EMERG, NGX_LOG_WARN,
};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::http::{
    HttpModuleLocationConf, HttpModuleMainConf, HttpModuleServerConf, NgxHttpCoreModule,
    NgxHttpUpstreamModule,
};
use ngx::ngx_conf_log_error;

use super::Module;
use super::{
    EjectSetting, KeyedFamily, KeyedSetting, LocConf, MainConf, Route, SrvConf, StatusMode,
};
use crate::ffi::{guard, hash_name};
use crate::zone::{self, DEFAULT_ROUTE};

/// The default zone, created when breakers exist but no `circuit_breaker_zone` was given.
pub const DEFAULT_ZONE_NAME: &str = "circuit_breaker";
pub const DEFAULT_ZONE_SIZE: usize = 1024 * 1024;
/// As `limit_req`: a slab pool needs a few pages to hold anything at all.
const MIN_ZONE_SIZE: u64 = 8 * 4096;

/// A directive handler nginx can call: the parsing function behind it, with panics turned
/// into a configuration error instead of crossing into nginx.
macro_rules! handler {
    ($($name:ident => $inner:ident),+ $(,)?) => {$(
        pub unsafe extern "C" fn $name(
            cf: *mut ngx_conf_t,
            cmd: *mut ngx_command_t,
            conf: *mut c_void,
        ) -> *mut c_char {
            // SAFETY: nginx calls a directive's handler with the configuration being parsed,
            // the directive's command and the conf its offset names.
            guard(NGX_CONF_ERROR, || unsafe { $inner(cf, cmd, conf) })
        }
    )+};
}

handler!(set_zone => zone, set_keyed => keyed, set_breaker => breaker, set_eject => eject, set_failure => failure, set_route => route, set_status => status, set_fleet => fleet, set_probe => probe, set_limit => limit, set_retry_budget => retry_budget);

/// nginx's own parsers for time and size values, so that a value means here what it means
/// to nginx.
struct NginxUnits;

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
unsafe fn args<'a>(cf: *mut ngx_conf_t) -> &'a [ngx_str_t] {
    // SAFETY: nginx fills cf->args with the directive's words before calling its handler.
    let all: &[ngx_str_t] = unsafe { (*((*cf).args as *const ngx_array_t)).as_slice() };
    &all[1..]
}

/// The directive's arguments as text, or an error naming the first that is not UTF-8. An
/// iterator rather than a `Vec`, so that parsing allocates nothing (see `directive::Seen`).
fn words(args: &[ngx_str_t]) -> Result<impl Iterator<Item = &str>, ConfError> {
    if let Some(bad) = args.iter().find(|a| a.to_str().is_err()) {
        let text = String::from_utf8_lossy(bad.as_bytes()).into_owned();
        return Err(ConfError::InvalidParameter(text));
    }
    Ok(args.iter().map(|a| a.to_str().unwrap_or_default()))
}

fn fail(cf: *mut ngx_conf_t, err: ConfError) -> *mut c_char {
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
unsafe fn once<'a, C>(
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
unsafe fn set_once<C, T>(
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

/// `circuit_breaker_zone name:size`
unsafe fn zone(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes our main conf for NGX_HTTP_MAIN_CONF_OFFSET, at this directive.
    let (mcf, raw) = match unsafe { once::<MainConf>(cf, conf, |c| !c.zone.is_null()) } {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    let arg = raw[0];
    let Ok(text) = arg.to_str() else {
        return fail(
            cf,
            ConfError::InvalidValue {
                directive: "circuit_breaker_zone",
                value: String::from_utf8_lossy(arg.as_bytes()).into_owned(),
                reason: None,
            },
        );
    };
    let (name, size) = match directive::parse_zone(text, MIN_ZONE_SIZE, &NginxUnits) {
        Ok(v) => v,
        Err(e) => return fail(cf, e),
    };
    if let Some(keys) = raw.get(1) {
        match parse_keys(keys.as_bytes(), size) {
            Ok(n) => mcf.keys = Some(n),
            Err(e) => return fail(cf, e),
        }
    }
    // SAFETY: `cf` is the configuration being parsed and `mcf` its main conf (this handler's
    // `conf`): what `add_zone` asks.
    match unsafe { add_zone(cf, mcf, name, size as usize) } {
        Ok(()) => NGX_CONF_OK,
        Err(()) => NGX_CONF_ERROR,
    }
}

/// `circuit_breaker_key $key [parameters]` (http, server, location): requests are judged
/// by a breaker of their own key's value as well (see `crate::keyed`). `off` turns an
/// inherited one off. The parameters are `circuit_breaker`'s own (not its deprecated
/// companions': active probes, the limit and the retry budget are an upstream's); every
/// `circuit_breaker_key` with the same key must give the same ones.
unsafe fn keyed(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes our loc conf for NGX_HTTP_LOC_CONF_OFFSET, at this directive.
    let (lcf, raw) = match unsafe { once::<LocConf>(cf, conf, |c| c.keyed.is_some()) } {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    let name = String::from_utf8_lossy(raw[0].as_bytes()).into_owned();
    if name == "off" {
        if raw.len() > 1 {
            return fail(
                cf,
                ConfError::Conflict("\"off\" takes no parameters".into()),
            );
        }
        lcf.keyed = Some(KeyedSetting::Off);
        return NGX_CONF_OK;
    }
    if !name.contains('$') {
        return fail(
            cf,
            ConfError::InvalidValue {
                directive: "circuit_breaker_key",
                value: name,
                reason: Some("the key must name a variable, such as $host"),
            },
        );
    }
    let parsed = words(&raw[1..]).and_then(|w| directive::parse_breaker_args(w, &NginxUnits));
    let params = match parsed {
        Ok(p) => p,
        Err(e) => return fail(cf, e),
    };
    if let Some(word) = params
        .legacy
        .probe
        .or(params.legacy.limit)
        .or(params.legacy.retry)
    {
        return fail(
            cf,
            ConfError::Conflict(format!(
                "\"{word}\" is an upstream's, not a parameter of \"circuit_breaker_key\""
            )),
        );
    }
    // SAFETY: `cf` is the configuration being parsed.
    let Some(mcf) = Module::main_conf_mut(unsafe { &*cf }) else {
        return NGX_CONF_ERROR;
    };
    let family = match mcf.keyed.iter().position(|f| f.name == name) {
        Some(i) if mcf.keyed[i].cfg != params.cfg => {
            return fail(
                cf,
                ConfError::Conflict(format!(
                    "\"circuit_breaker_key {name}\" is given with other parameters elsewhere: \
                     every \"circuit_breaker_key {name}\" judges the same breakers, \
                     give them the same parameters"
                )),
            )
        }
        Some(i) => i,
        None => {
            let id = hash_name(name.as_bytes()) as u16;
            if mcf.keyed.iter().any(|f| f.id == id) {
                return fail(
                    cf,
                    ConfError::Conflict(format!(
                        "\"circuit_breaker_key {name}\" cannot be told apart from another \
                         key in the zone, write it otherwise (e.g. \"${{{}}}\")",
                        name.trim_start_matches('$')
                    )),
                );
            }
            mcf.keyed.push(KeyedFamily {
                name: name.clone(),
                id,
                cfg: params.cfg,
            });
            mcf.keyed.len() - 1
        }
    };
    // SAFETY: `cf` is live; its pool outlives the configuration, which uses the value.
    let value = match unsafe { complex_value(cf, &raw[0]) } {
        Some(v) => v,
        None => return NGX_CONF_ERROR,
    };
    // One variable, the usual key, is read by its index.
    let variable = name
        .strip_prefix('$')
        .filter(|v| {
            // A name, not a regex capture (`$1`), which has no index.
            v.bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
        .and_then(|v| {
            let mut s = ngx_str_t {
                len: v.len(),
                data: v.as_ptr().cast_mut(),
            };
            // SAFETY: `cf` is the configuration being parsed; nginx copies the name.
            let i = unsafe { nginx_sys::ngx_http_get_variable_index(cf, &mut s) };
            usize::try_from(i).ok()
        });
    lcf.keyed = Some(KeyedSetting::On {
        value,
        family,
        variable,
    });
    NGX_CONF_OK
}

/// Compiles `text` (variables and all) into a complex value in the configuration's pool.
///
/// # Safety
/// `cf` must be the configuration being parsed.
unsafe fn complex_value(
    cf: *mut ngx_conf_t,
    text: &ngx_str_t,
) -> Option<*mut nginx_sys::ngx_http_complex_value_t> {
    // SAFETY: `cf` is live (this fn's contract); its pool lives as long as the configuration.
    let cv = unsafe {
        nginx_sys::ngx_pcalloc(
            (*cf).pool,
            core::mem::size_of::<nginx_sys::ngx_http_complex_value_t>(),
        )
    }
    .cast::<nginx_sys::ngx_http_complex_value_t>();
    if cv.is_null() {
        return None;
    }
    let mut value = *text;
    // SAFETY: all-zero is the C initialiser nginx's own modules use for this struct.
    let mut ccv: nginx_sys::ngx_http_compile_complex_value_t = unsafe { core::mem::zeroed() };
    ccv.cf = cf;
    ccv.value = &mut value;
    ccv.complex_value = cv;
    // SAFETY: `ccv` is filled as nginx asks; nginx logs its own error when it fails.
    let rc = unsafe { nginx_sys::ngx_http_compile_complex_value(&mut ccv) };
    (rc == nginx_sys::NGX_OK as nginx_sys::ngx_int_t).then_some(cv)
}

/// `circuit_breaker_zone`'s `keys=N`: the keyed table's places for `N` keys (20 for 17, in
/// whole buckets), which may take half of the zone at most (promoted keys' breakers never
/// take its last quarter).
fn parse_keys(word: &[u8], size: u64) -> Result<usize, ConfError> {
    let text = String::from_utf8_lossy(word).into_owned();
    let Some(n) = text.strip_prefix("keys=") else {
        return Err(ConfError::UnknownParameter {
            directive: "circuit_breaker_zone",
            word: text,
            hint: "expected \"keys=N\"".into(),
        });
    };
    let keys = n
        .parse::<usize>()
        .ok()
        .filter(|&k| (circuit_breaker_core::keyed::BUCKET..=1 << 24).contains(&k))
        .map(circuit_breaker_core::keyed::Table::places_for)
        .ok_or_else(|| ConfError::InvalidValue {
            directive: "circuit_breaker_zone",
            value: text.clone(),
            reason: Some("must be a number of keys from 8 to 16777216"),
        })?;
    let bytes = keys * circuit_breaker_core::keyed::Table::PLACE_BYTES;
    if bytes as u64 > size / 2 {
        return Err(ConfError::Conflict(format!(
            "\"{text}\" needs {} KiB, more than half of the zone: give the zone at least {}k",
            bytes / 1024,
            bytes / 1024 * 2
        )));
    }
    Ok(keys)
}

/// Registers the shared zone with nginx; `zone::init_zone` runs once the configuration is
/// read.
///
/// # Safety
/// `cf` must be the configuration being parsed and `mcf` its main conf.
pub unsafe fn add_zone(
    cf: *mut ngx_conf_t,
    mcf: &mut MainConf,
    name: &str,
    size: usize,
) -> Result<(), ()> {
    // The seed `circuit_breaker_jitter_key` may have set stays.
    mcf.zone_name.0 = name.to_owned();
    let mut zname = ngx_str_t {
        len: mcf.zone_name.0.len(),
        data: mcf.zone_name.0.as_ptr().cast_mut(),
    };
    // SAFETY: `cf` is live; the module static outlives every cycle; nginx keeps
    // `zname.data`, which lives in the main conf for the cycle's lifetime.
    let zone = unsafe { ngx_shared_memory_add(cf, &mut zname, size, super::module_ptr().cast()) };
    // SAFETY: null or the zone nginx just registered.
    let Some(z) = (unsafe { zone.as_mut() }) else {
        return Err(());
    };
    if !z.data.is_null() {
        ngx_conf_log_error!(
            NGX_LOG_EMERG,
            cf,
            "zone \"{}\" is already used, give \"circuit_breaker_zone\" another name",
            name
        );
        return Err(());
    }
    z.init = Some(zone::init_zone);
    z.data = core::ptr::from_mut(&mut mcf.zone_name).cast();
    mcf.zone = zone;
    Ok(())
}

/// `circuit_breaker_fleet address ... id=address (secret= | secret_file= | auth=off) [...]`
unsafe fn fleet(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes our main conf for NGX_HTTP_MAIN_CONF_OFFSET, at this directive.
    let (mcf, raw) = match unsafe { once::<MainConf>(cf, conf, |c| c.fleet.is_some()) } {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    // A secret that is not UTF-8 is refused without being repeated.
    if raw
        .iter()
        .any(|a| a.as_bytes().starts_with(b"secret=") && a.to_str().is_err())
    {
        ngx_conf_log_error!(
            NGX_LOG_EMERG,
            cf,
            "invalid \"secret\" in \"circuit_breaker_fleet\" directive, must be visible ASCII characters"
        );
        return NGX_CONF_ERROR;
    }
    let mut spec = match words(raw).and_then(|w| fleet_conf::parse_fleet_args(w, &NginxUnits)) {
        Ok(spec) => spec,
        Err(e) => return fail(cf, e),
    };
    // SAFETY: `cf` is the configuration being parsed, at this directive.
    if unsafe { super::fleet::finish(cf, mcf, &mut spec) }.is_err() {
        return NGX_CONF_ERROR;
    }
    mcf.fleet = Some(spec);
    NGX_CONF_OK
}

/// `circuit_breaker [param=value ...] [dry_run]`
unsafe fn breaker(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes our upstream-level conf for NGX_HTTP_SRV_CONF_OFFSET, at this
    // directive.
    let (scf, raw) = match unsafe { once::<SrvConf>(cf, conf, |c| c.breaker.is_some()) } {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    let parsed = words(raw).and_then(|w| directive::parse_breaker_args(w, &NginxUnits));
    let params = match parsed {
        Ok(p) => p,
        Err(e) => return fail(cf, e),
    };
    // One spelling per companion: the old parameter and the new directive both given is
    // refused, whichever came first.
    let both = [
        (
            params.legacy.probe,
            scf.probe_directive.is_some(),
            PROBE_DIRECTIVE,
        ),
        (
            params.legacy.limit,
            scf.limit_directive.is_some(),
            LIMIT_DIRECTIVE,
        ),
        (
            params.legacy.retry,
            scf.retry_directive.is_some(),
            RETRY_DIRECTIVE,
        ),
    ];
    for (old, new, d) in both {
        if let (Some(old), true) = (old, new) {
            return fail(
                cf,
                ConfError::Conflict(format!(
                    "the \"{old}\" parameter of \"circuit_breaker\" duplicates \"{d}\", \
                     keep \"{d}\" only"
                )),
            );
        }
    }
    if let Some(warning) = params.legacy.warning() {
        ngx_conf_log_error!(NGX_LOG_WARN, cf, "{}", warning);
    }
    // SAFETY: `cf` is live; in an upstream block the upstream module's srv conf is set.
    let Some(uscf) = NgxHttpUpstreamModule::server_conf(unsafe { &*cf }) else {
        return NGX_CONF_ERROR;
    };
    let name = String::from_utf8_lossy(uscf.host.as_bytes()).into_owned();
    if name.len() > zone::MAX_NAME {
        return fail(
            cf,
            ConfError::Conflict(format!(
                "upstream name \"{name}\" is too long for \"circuit_breaker\", \
                 it must be at most {} bytes",
                zone::MAX_NAME
            )),
        );
    }
    scf.name_hash = hash_name(name.as_bytes());
    scf.name = name;
    scf.breaker = Some(params.cfg);
    scf.probe = params.probe;
    scf.limit = params.limit;
    scf.retry = params.retry;
    scf.legacy = params.legacy;
    NGX_CONF_OK
}

/// A companion directive (`circuit_breaker_probe`, `_limit`, `_retry_budget`): refused as
/// nginx refuses a repeated directive, and when the deprecated `circuit_breaker` parameter
/// `old` picks says the same; `setup` joins it to the breaker once the http block is parsed.
///
/// # Safety
/// As [`once`], with `conf` a `SrvConf`.
unsafe fn companion<T>(
    cf: *mut ngx_conf_t,
    conf: *mut c_void,
    d: &'static str,
    field: impl Fn(&mut SrvConf) -> &mut Option<T>,
    old: impl Fn(&SrvConf) -> Option<&'static str>,
    parse: impl FnOnce(&[ngx_str_t]) -> Result<T, ConfError>,
) -> *mut c_char {
    // SAFETY: this fn's contract is `once`'s.
    let (scf, raw) = match unsafe { once::<SrvConf>(cf, conf, |c| field(c).is_some()) } {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    if let Some(old) = old(scf) {
        return fail(
            cf,
            ConfError::Conflict(format!(
                "\"{d}\" duplicates the \"{old}\" parameter of \"circuit_breaker\", \
                 keep \"{d}\" only"
            )),
        );
    }
    match parse(raw) {
        Ok(v) => {
            *field(scf) = Some(v);
            NGX_CONF_OK
        }
        Err(e) => fail(cf, e),
    }
}

/// `circuit_breaker_probe uri=PATH | grpc=SERVICE [host=] [status=] [timeout=]`
unsafe fn probe(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    let parse =
        |raw: &[ngx_str_t]| words(raw).and_then(|w| directive::parse_probe_args(w, &NginxUnits));
    // SAFETY: nginx passes our `SrvConf` (NGX_HTTP_SRV_CONF_OFFSET), at this directive.
    unsafe {
        companion(
            cf,
            conf,
            PROBE_DIRECTIVE,
            |c| &mut c.probe_directive,
            |c| c.legacy.probe,
            parse,
        )
    }
}

/// `circuit_breaker_limit adaptive [min=] [max=] [initial=] [tolerance=] [interval=]
/// [samples=] [remeasure=]`
unsafe fn limit(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    let parse =
        |raw: &[ngx_str_t]| words(raw).and_then(|w| directive::parse_limit_args(w, &NginxUnits));
    // SAFETY: nginx passes our `SrvConf` (NGX_HTTP_SRV_CONF_OFFSET), at this directive.
    unsafe {
        companion(
            cf,
            conf,
            LIMIT_DIRECTIVE,
            |c| &mut c.limit_directive,
            |c| c.legacy.limit,
            parse,
        )
    }
}

/// `circuit_breaker_retry_budget RATE [min=N] | off`
unsafe fn retry_budget(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    let parse = |raw: &[ngx_str_t]| words(raw).and_then(directive::parse_retry_budget_args);
    // SAFETY: nginx passes our `SrvConf` (NGX_HTTP_SRV_CONF_OFFSET), at this directive.
    unsafe {
        companion(
            cf,
            conf,
            RETRY_DIRECTIVE,
            |c| &mut c.retry_directive,
            |c| c.legacy.retry,
            parse,
        )
    }
}

/// `circuit_breaker_eject [param=value ...] | off`
unsafe fn eject(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes our `SrvConf` (the command is registered with
    // NGX_HTTP_SRV_CONF_OFFSET), at this directive.
    let given = unsafe { once::<SrvConf>(cf, conf, |c| c.eject != EjectSetting::Unset) };
    let (c, raw) = match given {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    match words(raw).and_then(|w| directive::parse_eject_args(w, &NginxUnits)) {
        Ok(spec) => {
            c.eject = spec.map_or(EjectSetting::Off, EjectSetting::On);
            NGX_CONF_OK
        }
        Err(e) => fail(cf, e),
    }
}

/// `circuit_breaker_failure class ...`
unsafe fn failure(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    let parse = |raw: &[ngx_str_t]| words(raw).and_then(directive::parse_failure_classes);
    // SAFETY: nginx passes our `SrvConf` (the command is registered with
    // NGX_HTTP_SRV_CONF_OFFSET), at this directive.
    unsafe { set_once(cf, conf, |c: &mut SrvConf| &mut c.failures, parse) }
}

/// `circuit_breaker_route name`
unsafe fn route(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes our loc conf for NGX_HTTP_LOC_CONF_OFFSET, at this directive.
    unsafe { set_once(cf, conf, |c: &mut LocConf| &mut c.route, route_name) }
}

/// `circuit_breaker_route`'s name, checked: "default" is the upstream's own breaker.
fn route_name(raw: &[ngx_str_t]) -> Result<Route, ConfError> {
    let name = String::from_utf8_lossy(raw[0].as_bytes()).into_owned();
    directive::check_route_name(&name)?;
    if name == DEFAULT_ROUTE {
        return Err(ConfError::InvalidValue {
            directive: "circuit_breaker_route",
            value: name,
            reason: Some("\"default\" names the upstream's own breaker"),
        });
    }
    Ok(Route::new(&name))
}

/// `circuit_breaker_status [control=on|off]`: the command's `post` is the content handler
/// to install (set where the module is registered).
unsafe fn status(cf: *mut ngx_conf_t, cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes our `LocConf` (the command is registered with
    // NGX_HTTP_LOC_CONF_OFFSET), at this directive.
    let (lcf, a) = match unsafe { once::<LocConf>(cf, conf, |c| c.status != StatusMode::Off) } {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    lcf.status = match a.first().map(|s| s.as_bytes()) {
        None | Some(b"control=off") => StatusMode::ReadOnly,
        Some(b"control=on") => StatusMode::Control,
        Some(other) => {
            return fail(
                cf,
                ConfError::UnknownParameter {
                    directive: "circuit_breaker_status",
                    word: String::from_utf8_lossy(other).into_owned(),
                    hint: "expected \"control=on\" or \"control=off\"".into(),
                },
            )
        }
    };
    // SAFETY: `cf` is live inside a location.
    let Some(clcf) = NgxHttpCoreModule::location_conf_mut(unsafe { &*cf }) else {
        return NGX_CONF_ERROR;
    };
    if clcf.handler.is_some() {
        // Another content handler (proxy_pass, return…) already claims this location.
        return fail(
            cf,
            ConfError::Conflict(
                "\"circuit_breaker_status\" cannot share a location with another content handler, \
                 give it a location of its own"
                    .into(),
            ),
        );
    }
    // SAFETY: `cmd` is our command, whose `post` the registration set to the handler.
    let post = unsafe { (*cmd).post };
    // SAFETY: `post` is a handler function pointer, stored as `void *` by the registration.
    let handler = unsafe { core::mem::transmute::<*mut c_void, ngx_http_handler_pt>(post) };
    clcf.handler = handler;
    lcf.status_handler = handler;
    // SAFETY: while parsing a file, conf_file is set.
    if let Some(file) = unsafe { (*cf).conf_file.as_ref() } {
        lcf.status_at = (
            String::from_utf8_lossy(file.file.name.as_bytes()).into_owned(),
            file.line,
        );
    }
    // SAFETY: `cf` is parsing a location inside the http block, so its context holds the http main
    // confs.
    if let Some(mcf) = Module::main_conf(unsafe { &*cf }) {
        lcf.main = mcf;
    }
    NGX_CONF_OK
}
