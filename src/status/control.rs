//! The operator's control (`control=on`, `POST`): force_open / force_close / reset of one
//! breaker, eject / restore of one server, once the request shows it was sent on purpose
//! ([`guard::check_control`]); each answers with the breaker it changed and logs one line.

use circuit_breaker_core::breaker::Control;
use circuit_breaker_core::retry_budget::RetryBudgetView;
use circuit_breaker_core::snapshot::BreakerView;
use circuit_breaker_core::status::assemble::Upstreams;
use circuit_breaker_core::status::guard::{self, ControlRequest};
use circuit_breaker_core::status::query::{quote, Action, Format, Proxy, Query};
use circuit_breaker_core::status::{Entry, LimitStatus, ServerEntry};
use nginx_sys::{
    ngx_http_request_t, ngx_int_t, NGX_HTTP_BAD_REQUEST, NGX_HTTP_FORBIDDEN,
    NGX_HTTP_INSUFFICIENT_STORAGE, NGX_HTTP_NOT_FOUND, NGX_LOG_WARN,
};

use super::act::{control_of, done, log_control, send_entry, server_of};
use super::send::send_text;
use crate::conf::{MainConf, Route};
use crate::eject;
use circuit_breaker_shell::clock::{mono_ms, rnd, wall_ms};
use circuit_breaker_shell::zone::{Missing, Zone, DEFAULT_ROUTE};

/// A control request, answered in `format`: refused (`403`, and a `warn` line) unless its
/// headers say it was sent on purpose, else done.
pub fn control(r: &mut ngx_http_request_t, mcf: &MainConf, q: &Query, format: Format) -> ngx_int_t {
    if let Err(reason) = trusted_control(r) {
        log_refusal(r, &reason);
        return send_text(r, NGX_HTTP_FORBIDDEN, &reason);
    }
    // SAFETY: our own zone (or none), mapped in every worker.
    let zone = unsafe { Zone::from_shm(mcf.zone) };
    control_breaker(r, mcf, zone, q, format)
}

/// Whether a control request may change anything ([`guard::check_control`]): the
/// headers that say who sent it, read in one pass over the request's headers.
fn trusted_control(r: &ngx_http_request_t) -> Result<(), String> {
    let (mut marker, mut origin, mut site) = (Vec::new(), Vec::new(), Vec::new());
    // SAFETY: headers_in is the request's parsed headers list.
    let it = unsafe { ngx::http::list_iterator(&r.headers_in.headers) };
    for (k, v) in it {
        let k = k.as_bytes();
        if k.eq_ignore_ascii_case(guard::CONTROL_HEADER.as_bytes()) {
            marker.push(v.as_bytes());
        } else if k.eq_ignore_ascii_case(b"origin") {
            origin.push(v.as_bytes());
        } else if k.eq_ignore_ascii_case(b"sec-fetch-site") {
            site.push(v.as_bytes());
        }
    }
    // SAFETY: null, or the request's parsed Host header, live with the request.
    let host = unsafe { r.headers_in.host.as_ref() }.map(|h| h.value.as_bytes());
    // SAFETY: `r.connection` is the live request's client connection; `ssl` is null or
    // its TLS state.
    let tls = unsafe { !(*r.connection).ssl.is_null() };
    guard::check_control(&ControlRequest {
        marker: &marker,
        origin: &origin,
        sec_fetch_site: &site,
        host,
        tls,
    })
}

/// One `warn` line per refused control request, as for a done one: why (nginx adds the
/// client, server and request).
fn log_refusal(r: &ngx_http_request_t, reason: &str) {
    // SAFETY: `r.connection` is the live request's client connection, set for the request's life.
    let c = unsafe { &*r.connection };
    ngx::ngx_log_error!(NGX_LOG_WARN, c.log, "circuit breaker {}", reason);
}

/// `POST ?upstream=…&route=…&action=…`: changes one breaker and answers with its new JSON.
fn control_breaker(
    r: &mut ngx_http_request_t,
    mcf: &MainConf,
    zone: Option<Zone>,
    q: &Query,
    format: Format,
) -> ngx_int_t {
    let (Some(upstream), Some(action)) = (q.upstream.as_deref(), q.action) else {
        let missing = if q.upstream.is_none() {
            "upstream"
        } else {
            "action"
        };
        return send_text(
            r,
            NGX_HTTP_BAD_REQUEST,
            &format!("missing parameter \"{missing}\""),
        );
    };
    if q.proxy == Some(Proxy::Stream) {
        return super::stream::control(r, q, upstream, action, format);
    }
    if action.on_server() || q.server.is_some() {
        return control_server(r, mcf, zone, q, format);
    }
    if let Some(fam) = mcf.keyed.iter().find(|f| f.name == upstream) {
        return control_key(r, mcf, zone, fam, q, format);
    }
    let route = Route::new(q.route.as_deref().unwrap_or(DEFAULT_ROUTE));
    let not_found = |r: &mut ngx_http_request_t| {
        send_text(
            r,
            NGX_HTTP_NOT_FOUND,
            &format!(
                "no circuit breaker for upstream {} route {}",
                quote(upstream),
                quote(&route.name)
            ),
        )
    };
    // Known breakers: an upstream's own, and (upstream, route) where a location of that route
    // passes to that upstream (or to an upstream chosen at run time). Anything else is
    // unknown: a mistyped pair must not create a breaker no request can reach.
    let (Some(scf), Some(zone)) = (mcf.upstream(upstream), zone) else {
        return not_found(r);
    };
    let Some(cfg) = scf.breaker.as_ref() else {
        return not_found(r);
    };
    if !scf.knows_route(mcf, &route.name) {
        return not_found(r);
    }
    let ctl = control_of(action).unwrap_or(Control::Reset);
    let mono = mono_ms();
    let wall = zone.wall_clock(mono, wall_ms());
    let outcome = {
        let mut locked = zone.lock();
        locked
            .find_or_create(&scf.key(&route), cfg, mcf.generation, mono)
            .map(|mut b| {
                b.control(mono, rnd(), ctl);
                (b.view(mono), b.handle())
            })
            .map(|(view, handle)| (view, locked.limit_status(handle)))
    };
    // A forced breaker is news for the fleet's peers.
    crate::wake::nudge();
    let (mut view, limit) = match outcome {
        Ok(v) => v,
        Err(Missing::Stale) => return not_found(r),
        Err(Missing::Full) => {
            return send_text(
                r,
                NGX_HTTP_INSUFFICIENT_STORAGE,
                &format!(
                    "circuit breaker zone \"{}\" is full: no breaker for upstream {} route {}",
                    mcf.zone_name.0,
                    quote(upstream),
                    quote(&route.name)
                ),
            )
        }
    };
    view.on_wall_clock(mono, wall);
    let verb = done(action);
    log_control(r, format_args!("\"{upstream}/{}\" {verb}", route.name));
    let entry = Entry {
        fingerprint: mcf.fingerprint(upstream),
        upstream: upstream.to_owned(),
        route: route.name.clone(),
        view,
        servers: Vec::new(),
        retry: None,
        probe_uri: mcf.probe_uri(upstream),
        limit,
    };
    send_entry(r, &mcf.zone_name.0, &entry, format, q)
}

/// `POST ?upstream=$key&route=value&action=…`: changes the breaker of one value of a
/// `circuit_breaker_key` (its key as written is the "upstream", the value the "route"),
/// placing and promoting the key if it has none, and answers with its JSON.
fn control_key(
    r: &mut ngx_http_request_t,
    mcf: &MainConf,
    zone: Option<Zone>,
    fam: &crate::conf::KeyedFamily,
    q: &Query,
    format: Format,
) -> ngx_int_t {
    let (Some(written), Some(action), Some(zone)) = (q.route.as_deref(), q.action, zone) else {
        return send_text(
            r,
            NGX_HTTP_BAD_REQUEST,
            "missing parameter \"route\" (the key)",
        );
    };
    // As the status page writes it: `\xNN` a byte the key holds, the rest as it is.
    let Some(key) = circuit_breaker_core::keyed::name::from_shown(written) else {
        return send_text(
            r,
            NGX_HTTP_BAD_REQUEST,
            "a key is written as the status page shows it: \\xNN for a byte, no other backslash",
        );
    };
    let shown = circuit_breaker_core::keyed::name::shown(&key);
    if key.is_empty() || key.len() > circuit_breaker_core::keyed::MAX_KEY {
        return send_text(
            r,
            NGX_HTTP_BAD_REQUEST,
            "a key is 1 to 256 bytes: no breaker judges another",
        );
    }
    let Some(ctl) = control_of(action) else {
        return send_text(
            r,
            NGX_HTTP_BAD_REQUEST,
            "a key has no servers: \"action\" is force_open, force_close or reset",
        );
    };
    let mono = mono_ms();
    let wall = zone.wall_clock(mono, wall_ms());
    let hasher = zone.keyed_hasher();
    let outcome = zone
        .lock()
        .keyed_control(&fam.as_zone(), &hasher, &key, mono, mcf.generation)
        .map(|mut b| {
            b.control(mono, rnd(), ctl);
            b.view(mono)
        });
    crate::wake::nudge();
    let mut view = match outcome {
        Ok(v) => v,
        Err(Missing::Stale) => {
            return send_text(r, NGX_HTTP_NOT_FOUND, "no circuit breaker: reloading")
        }
        Err(Missing::Full) => {
            return send_text(
                r,
                NGX_HTTP_INSUFFICIENT_STORAGE,
                &format!(
                    "circuit breaker zone \"{}\" is full: no breaker for key {} of {}",
                    mcf.zone_name.0,
                    quote(&shown),
                    quote(&fam.name)
                ),
            )
        }
    };
    view.on_wall_clock(mono, wall);
    let verb = done(action);
    log_control(r, format_args!("\"{}\" key \"{shown}\" {verb}", fam.name));
    let entry = Entry {
        fingerprint: None,
        upstream: fam.name.clone(),
        route: shown,
        view,
        servers: Vec::new(),
        retry: None,
        probe_uri: None,
        limit: None,
    };
    send_entry(r, &mcf.zone_name.0, &entry, format, q)
}

/// `POST ?upstream=…&server=…&action=eject|restore`: takes one server out of its pool (until
/// `restore`, whatever `max_ejected` says: the operator decides) or puts it back with a fresh
/// window; answers with the upstream's own breaker's JSON, with that server under it.
fn control_server(
    r: &mut ngx_http_request_t,
    mcf: &MainConf,
    zone: Option<Zone>,
    q: &Query,
    format: Format,
) -> ngx_int_t {
    let (Some(upstream), Some(action)) = (q.upstream.as_deref(), q.action) else {
        return send_text(r, NGX_HTTP_BAD_REQUEST, "missing parameter \"upstream\"");
    };
    let server = match server_of(q, action) {
        Ok(server) => server,
        Err(why) => return send_text(r, NGX_HTTP_BAD_REQUEST, why),
    };
    let (Some(scf), Some(zone)) = (mcf.upstream(upstream), zone) else {
        return send_text(
            r,
            NGX_HTTP_NOT_FOUND,
            &format!("no circuit breaker for upstream {}", quote(upstream)),
        );
    };
    let mono = mono_ms();
    let wall = zone.wall_clock(mono, wall_ms());
    let eject = action == Action::Eject;
    let Some(mut view) = eject::control(&zone, scf, server, eject, mono) else {
        return send_text(
            r,
            NGX_HTTP_NOT_FOUND,
            &format!(
                "no server {} in the pool of upstream {}",
                quote(server),
                quote(upstream)
            ),
        );
    };
    view.on_wall_clock(mono, wall);
    let verb = if eject { "ejected" } else { "restored" };
    log_control(r, format_args!("\"{upstream}\" server {server} {verb}"));
    let backup = eject::servers(scf).any(|(a, b)| a == server && b);
    let Some((home, retry, limit)) = home_view(&zone, scf, mono, wall) else {
        return send_text(
            r,
            NGX_HTTP_NOT_FOUND,
            &format!("no circuit breaker for upstream {}", quote(upstream)),
        );
    };
    let entry = Entry {
        upstream: upstream.to_owned(),
        route: DEFAULT_ROUTE.to_owned(),
        view: home,
        servers: vec![ServerEntry {
            address: server.to_owned(),
            backup,
            view,
        }],
        retry,
        probe_uri: mcf.probe_uri(upstream),
        fingerprint: mcf.fingerprint(upstream),
        limit,
    };
    send_entry(r, &mcf.zone_name.0, &entry, format, q)
}

/// The upstream's own breaker's view, its retry budget's and its limit's.
fn home_view(
    zone: &Zone,
    scf: &crate::conf::SrvConf,
    mono: u64,
    wall: u64,
) -> Option<(BreakerView, Option<RetryBudgetView>, Option<LimitStatus>)> {
    let mut locked = zone.lock();
    let (mut v, retry, handle) = {
        let mut b = locked.find(&scf.key(crate::conf::default_route()))?;
        let retry = b.retry_budget().map(|r| r.view(mono));
        (b.view(mono), retry, b.handle())
    };
    v.on_wall_clock(mono, wall);
    Some((v, retry, locked.limit_status(handle)))
}
