//! The directives' handlers: nginx hands over the words, core parses them, and the typed
//! values land in the module's confs. Errors read like nginx's own (`[emerg]` with the
//! directive, the value, the file and the line).

use core::ffi::{c_char, c_void};

use circuit_breaker_core::directive::{
    self, ConfError, LIMIT_DIRECTIVE, PROBE_DIRECTIVE, RETRY_DIRECTIVE,
};
use circuit_breaker_core::fleet::conf as fleet_conf;
use nginx_sys::{
    ngx_command_t, ngx_conf_t, ngx_http_handler_pt, ngx_str_t, NGX_LOG_EMERG, NGX_LOG_WARN,
};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::http::{
    HttpModuleLocationConf, HttpModuleMainConf, HttpModuleServerConf, NgxHttpCoreModule,
    NgxHttpUpstreamModule,
};
use ngx::ngx_conf_log_error;

use super::Module;
use super::{
    ClassSetting, EjectSetting, KeyedFamily, KeyedSetting, LocConf, MainConf, Route, SrvConf,
    StatusMode,
};
use circuit_breaker_shell::conf::{
    add_zone as add_zone_for, fail, once, set_once, words, NginxUnits, MIN_ZONE_SIZE,
};
use circuit_breaker_shell::ffi::hash_name;
use circuit_breaker_shell::zone::{self, DEFAULT_ROUTE};

/// The default zone, created when breakers exist but no `circuit_breaker_zone` was given.
pub const DEFAULT_ZONE_NAME: &str = "circuit_breaker";
pub const DEFAULT_ZONE_SIZE: usize = 1024 * 1024;

circuit_breaker_shell::directive_handlers!(set_zone => zone, set_keyed => keyed, set_class => class, set_breaker => breaker, set_eject => eject, set_failure => failure, set_route => route, set_status => status, set_fleet => fleet, set_probe => probe, set_limit => limit, set_retry_budget => retry_budget);

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
    let variable = variable_name(&name).and_then(|v| {
        // SAFETY: `cf` is the configuration being parsed.
        unsafe { variable_index(cf, v) }
    });
    lcf.keyed = Some(KeyedSetting::On {
        value,
        family,
        variable,
    });
    NGX_CONF_OK
}

/// `circuit_breaker_class $variable | off` (http, server, location): the variable's value
/// (`critical`, `default`, `sheddable`) is the request's class under its upstream's adaptive
/// limit (`circuit_breaker_core::class::Class`). `off` turns an inherited one off.
unsafe fn class(cf: *mut ngx_conf_t, _cmd: *mut ngx_command_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes our loc conf for NGX_HTTP_LOC_CONF_OFFSET, at this directive.
    let (lcf, raw) = match unsafe { once::<LocConf>(cf, conf, |c| c.class.is_some()) } {
        Ok(v) => v,
        Err(dup) => return dup,
    };
    let word = String::from_utf8_lossy(raw[0].as_bytes()).into_owned();
    if word == "off" {
        lcf.class = Some(ClassSetting::Off);
        return NGX_CONF_OK;
    }
    let Some(name) = variable_name(&word) else {
        return fail(
            cf,
            ConfError::InvalidValue {
                directive: "circuit_breaker_class",
                value: word,
                reason: Some("the class must be one variable, such as $cb_class, or \"off\""),
            },
        );
    };
    if name.starts_with("circuit_breaker_") {
        // Those are what the breaker said of the request, and the class is read before it
        // says anything.
        return fail(
            cf,
            ConfError::InvalidValue {
                directive: "circuit_breaker_class",
                value: word,
                reason: Some("the class cannot be one of the module's own variables"),
            },
        );
    }
    // SAFETY: `cf` is the configuration being parsed.
    let Some(variable) = (unsafe { variable_index(cf, name) }) else {
        return NGX_CONF_ERROR;
    };
    lcf.class = Some(ClassSetting::On { variable });
    NGX_CONF_OK
}

/// The name of the one variable `text` is (`$host` → `host`): a name, not a regex capture
/// (`$1`, which has no index), nor text around it.
fn variable_name(text: &str) -> Option<&str> {
    text.strip_prefix('$').filter(|v| {
        v.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

/// The index of variable `name`, registered for this configuration.
///
/// # Safety
/// `cf` must be the configuration being parsed.
unsafe fn variable_index(cf: *mut ngx_conf_t, name: &str) -> Option<usize> {
    let mut s = ngx_str_t {
        len: name.len(),
        data: name.as_ptr().cast_mut(),
    };
    // SAFETY: `cf` is the configuration being parsed (this fn's contract); nginx copies the
    // name.
    let i = unsafe { nginx_sys::ngx_http_get_variable_index(cf, &mut s) };
    usize::try_from(i).ok()
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
    // SAFETY: `cf` is live; the module static outlives every cycle; the main conf lives for
    // the cycle's lifetime.
    let zone = unsafe {
        add_zone_for(
            cf,
            &mut mcf.zone_name,
            name,
            size,
            super::module_ptr().cast(),
        )
    };
    mcf.zone = zone.ok_or(())?;
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
