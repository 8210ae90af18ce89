//! The status location: JSON or Prometheus text of every breaker (an upstream's servers under
//! its own breaker), or the dashboard page that polls the JSON, and with `control=on` the
//! operator's force_open / force_close / reset, and eject / restore of one server. Each
//! breaker's view is taken under the zone lock (in batches, see `Zone::visit`) and the page is
//! rendered after the lock is released, so a large page never holds the lock while formatting.

use std::collections::HashMap;

use circuit_breaker_core::breaker::Control;
use circuit_breaker_core::retry_budget::RetryBudgetView;
use circuit_breaker_core::snapshot::BreakerView;
use circuit_breaker_core::status::guard::{self, ControlRequest};
use circuit_breaker_core::status::headers::{self, DATA_CSP, HARDENING};
use circuit_breaker_core::status::query::{
    self, parse_query, quote, Action, Format, Method, Query,
};
use circuit_breaker_core::status::{
    self, Entry, LimitStatus, ServerEntry, ZoneView, DASHBOARD_HTML, HTML_CONTENT_TYPE,
    JSON_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE,
};
use nginx_sys::{
    ngx_buf_t, ngx_chain_t, ngx_create_temp_buf, ngx_http_discard_request_body,
    ngx_http_output_filter, ngx_http_request_t, ngx_http_send_header, ngx_int_t, ngx_str_t,
    ngx_uint_t, NGX_ERROR, NGX_HTTP_BAD_REQUEST, NGX_HTTP_FORBIDDEN, NGX_HTTP_GET, NGX_HTTP_HEAD,
    NGX_HTTP_INSUFFICIENT_STORAGE, NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_HTTP_NOT_ALLOWED,
    NGX_HTTP_NOT_FOUND, NGX_HTTP_NO_CONTENT, NGX_HTTP_OK, NGX_HTTP_POST,
    NGX_HTTP_SERVICE_UNAVAILABLE, NGX_LOG_WARN, NGX_OK,
};

use crate::clock::{mono_ms, rnd, wall_ms};
use crate::conf::{MainConf, Route, StatusMode};
use crate::eject;
use crate::ffi::{guard, nginx_version, MODULE_VERSION};
use crate::fleet::{self, NoMessage};
use crate::request;
use crate::respond::{push_header, static_value};
use crate::zone::{Kind, Missing, Zone, DEFAULT_ROUTE};

/// The content handler of `circuit_breaker_status`.
pub unsafe extern "C" fn handler(r: *mut ngx_http_request_t) -> ngx_int_t {
    guard(NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t, || {
        // SAFETY: nginx calls content handlers with a live request.
        unsafe { handle(&mut *r) }
    })
}

unsafe fn handle(r: &mut ngx_http_request_t) -> ngx_int_t {
    let Some(lcf) = request::loc_conf(r) else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    // SAFETY: `r` is the request nginx passed this content handler, not yet finalized.
    let rc = unsafe { ngx_http_discard_request_body(r) };
    if rc != NGX_OK as ngx_int_t {
        return rc;
    }
    let method = r.method as u32;
    let control = method == NGX_HTTP_POST && lcf.status == StatusMode::Control;
    if method & (NGX_HTTP_GET | NGX_HTTP_HEAD) == 0 && !control {
        return not_allowed(r, lcf.status == StatusMode::Control);
    }
    // SAFETY: set in set_status; the main conf lives as long as the configuration.
    let Some(mcf) = (unsafe { lcf.main.as_ref() }) else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    let query = match parse_query(r.args.as_bytes()) {
        Ok(q) => q,
        Err(reason) => return send_text(r, NGX_HTTP_BAD_REQUEST, &reason),
    };
    let accept = accept_headers(r);
    let method = match method {
        NGX_HTTP_POST => Method::Post,
        NGX_HTTP_HEAD => Method::Head,
        _ => Method::Get,
    };
    let format = query::negotiate(&query, &accept, method);
    // SAFETY: our own zone (or none), mapped in every worker.
    let zone = unsafe { Zone::from_shm(mcf.zone) };
    if control {
        if let Err(reason) = trusted_control(r) {
            log_refusal(r, &reason);
            return send_text(r, NGX_HTTP_FORBIDDEN, &reason);
        }
        return control_breaker(r, mcf, zone, &query, format);
    }
    if query.action.is_some() {
        return send_text(
            r,
            NGX_HTTP_BAD_REQUEST,
            "\"action\" needs a POST request to a location with \"control=on\"",
        );
    }
    if format == Format::Html {
        let page = DASHBOARD_HTML.as_bytes();
        return send(r, NGX_HTTP_OK, HTML_CONTENT_TYPE, page, &query);
    }
    if format == Format::Fleet {
        return fleet_message(r, mcf, &query);
    }
    let mono = mono_ms();
    let wall = zone
        .as_ref()
        .map_or_else(wall_ms, |z| z.wall_clock(mono, wall_ms()));
    let on_wall = |t: u64| wall.saturating_sub(mono.saturating_sub(t));
    let mut zview = ZoneView {
        name: mcf.zone_name.0.clone(),
        module_version: MODULE_VERSION,
        nginx_version: nginx_version(),
        control: lcf.status == StatusMode::Control,
        ..ZoneView::default()
    };
    let mut entries = Vec::new();
    let mut servers: HashMap<(String, String), BreakerView> = HashMap::new();
    if let Some(zone) = zone {
        (zview.used, zview.size, zview.alloc_failures) = zone.visit(mono, query.history, |e| {
            let (u, rt) = (
                String::from_utf8_lossy(e.upstream),
                String::from_utf8_lossy(e.route),
            );
            let own = e.kind == Kind::Server || rt == DEFAULT_ROUTE;
            if !query::matches(&query, &u, if own { DEFAULT_ROUTE } else { &rt }) {
                return;
            }
            let mut view = e.view;
            view.on_wall_clock(mono, wall);
            if e.kind == Kind::Server {
                servers.insert((u.into_owned(), rt.into_owned()), view);
                return;
            }
            entries.push(Entry {
                probe_uri: probe_uri(mcf, &u),
                fingerprint: fingerprint_of(mcf, &u),
                upstream: u.into_owned(),
                route: rt.into_owned(),
                view,
                servers: Vec::new(),
                retry: e.retry,
                limit: e.limit,
            });
        });
    }
    // Oldest first: nodes are pushed at the head, so reverse for configuration order.
    entries.reverse();
    // Each server under its upstream's own breaker, in configuration order.
    for e in entries.iter_mut().filter(|e| e.route == DEFAULT_ROUTE) {
        let Some(scf) = mcf.upstream(&e.upstream) else {
            continue;
        };
        for (address, backup) in eject::servers(scf) {
            if let Some(view) = servers.remove(&(e.upstream.clone(), address.to_owned())) {
                e.servers.push(ServerEntry {
                    address: address.to_owned(),
                    backup,
                    view,
                });
            }
        }
    }
    if format == Format::Prometheus {
        let mut body = status::render_prometheus(&zview, &entries);
        if let Some(f) = fleet::status_prometheus(mcf, on_wall) {
            body.extend_from_slice(f.as_bytes());
        }
        send(r, NGX_HTTP_OK, PROMETHEUS_CONTENT_TYPE, &body, &query)
    } else {
        zview.fleet_json = fleet::status_json(mcf, on_wall);
        let body = status::render_json(&zview, &entries);
        send(r, NGX_HTTP_OK, JSON_CONTENT_TYPE, &body, &query)
    }
}

/// What active probes of `upstream`'s breakers request, if it has `probe_uri`.
fn probe_uri(mcf: &MainConf, upstream: &str) -> Option<String> {
    let probe = mcf.upstream(upstream)?.probe.as_ref()?;
    Some(probe.uri.clone())
}

/// The breaker's fingerprint, shown only when the instance is in a fleet.
fn fingerprint_of(mcf: &MainConf, upstream: &str) -> Option<u64> {
    mcf.fleet.as_ref()?;
    fleet::fingerprint(mcf.upstream(upstream)?)
}

/// `?format=fleet`: to an authenticated pull, the message for peers as the exchange worker
/// last published it, sealed; to an authenticated poke, `204`.
fn fleet_message(r: &mut ngx_http_request_t, mcf: &MainConf, q: &Query) -> ngx_int_t {
    let auth = header(r, fleet::auth_header().as_bytes());
    match fleet::answer(mcf, auth, mono_ms()) {
        Ok(fleet::Answer::Message(body)) => send(r, NGX_HTTP_OK, "text/plain", &body, q),
        Ok(fleet::Answer::Poked) => send(r, NGX_HTTP_NO_CONTENT, "text/plain", b"", q),
        Err(NoMessage::NoFleet) => send_text(
            r,
            NGX_HTTP_NOT_FOUND,
            "no \"circuit_breaker_fleet\" is configured",
        ),
        Err(NoMessage::Forbidden) => send_text(
            r,
            NGX_HTTP_FORBIDDEN,
            &format!(
                "the fleet authentication is missing or wrong in \"{}\"",
                fleet::auth_header()
            ),
        ),
        Err(NoMessage::NotYet) => send_text(
            r,
            NGX_HTTP_SERVICE_UNAVAILABLE,
            "the fleet exchange has published nothing yet",
        ),
    }
}

/// `405` with `Allow` (RFC 9110 §15.5.6), as one of the location's own answers.
fn not_allowed(r: &mut ngx_http_request_t, control: bool) -> ngx_int_t {
    let allow = if control {
        "GET, HEAD, POST"
    } else {
        "GET, HEAD"
    };
    if !push_header(&mut r.headers_out.headers, "Allow", static_value(allow)) {
        return NGX_ERROR as ngx_int_t;
    }
    let reason = if control {
        "the status location answers GET and HEAD, and POST for control"
    } else {
        "the status location answers GET and HEAD (POST needs \"control=on\")"
    };
    send_text(r, NGX_HTTP_NOT_ALLOWED, reason)
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

/// The first request header called `name` (case-insensitively).
fn header<'r>(r: &'r ngx_http_request_t, name: &[u8]) -> Option<&'r [u8]> {
    // SAFETY: headers_in is the request's parsed headers list.
    let mut it = unsafe { ngx::http::list_iterator(&r.headers_in.headers) };
    it.find(|(k, _)| k.as_bytes().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_bytes())
}

/// Every `Accept` field's value: HTTP reads several as one comma-separated list.
fn accept_headers(r: &ngx_http_request_t) -> Vec<&[u8]> {
    // SAFETY: headers_in is the request's parsed headers list.
    let it = unsafe { ngx::http::list_iterator(&r.headers_in.headers) };
    it.filter(|(k, _)| k.as_bytes().eq_ignore_ascii_case(b"accept"))
        .map(|(_, v)| v.as_bytes())
        .collect()
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
    if action.on_server() || q.server.is_some() {
        return control_server(r, mcf, zone, q, format);
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
    let ctl = match action {
        Action::ForceOpen => Control::ForceOpen,
        Action::ForceClose => Control::ForceClose,
        Action::Reset | Action::Eject | Action::Restore => Control::Reset,
    };
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
    let verb = match action {
        Action::ForceOpen => "forced open",
        Action::ForceClose => "forced closed",
        _ => "reset",
    };
    log_control(r, format_args!("\"{upstream}/{}\" {verb}", route.name));
    let entry = Entry {
        fingerprint: fingerprint_of(mcf, upstream),
        upstream: upstream.to_owned(),
        route: route.name.clone(),
        view,
        servers: Vec::new(),
        retry: None,
        probe_uri: probe_uri(mcf, upstream),
        limit,
    };
    send_entry(r, mcf, &entry, format, q)
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
    if !action.on_server() {
        return send_text(
            r,
            NGX_HTTP_BAD_REQUEST,
            "\"server\" goes with \"action=eject\" or \"action=restore\"",
        );
    }
    let Some(server) = q.server.as_deref() else {
        return send_text(r, NGX_HTTP_BAD_REQUEST, "missing parameter \"server\"");
    };
    if q.route.as_deref().is_some_and(|rt| rt != DEFAULT_ROUTE) {
        return send_text(
            r,
            NGX_HTTP_BAD_REQUEST,
            "servers belong to the upstream's own breaker: \"route\" must be \"default\"",
        );
    }
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
        probe_uri: probe_uri(mcf, upstream),
        fingerprint: fingerprint_of(mcf, upstream),
        limit,
    };
    send_entry(r, mcf, &entry, format, q)
}

/// One `warn` line per operator action: what was done, by which client address.
fn log_control(r: &ngx_http_request_t, what: core::fmt::Arguments<'_>) {
    // SAFETY: `r.connection` is the live request's client connection, set for the request's life.
    let c = unsafe { &*r.connection };
    ngx::ngx_log_error!(
        NGX_LOG_WARN,
        c.log,
        "circuit breaker {} by {}",
        what,
        String::from_utf8_lossy(c.addr_text.as_bytes())
    );
}

/// Answers a control request with one entry, in the format asked for.
fn send_entry(
    r: &mut ngx_http_request_t,
    mcf: &MainConf,
    entry: &Entry,
    format: Format,
    q: &Query,
) -> ngx_int_t {
    if format == Format::Prometheus {
        let body = status::render_breaker_prometheus(&mcf.zone_name.0, entry);
        send(r, NGX_HTTP_OK, PROMETHEUS_CONTENT_TYPE, &body, q)
    } else {
        let body = status::render_breaker_json(entry);
        send(r, NGX_HTTP_OK, JSON_CONTENT_TYPE, &body, q)
    }
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

fn send_text(r: &mut ngx_http_request_t, status: u32, line: &str) -> ngx_int_t {
    let mut body = line.as_bytes().to_vec();
    body.push(b'\n');
    send(r, status, "text/plain", &body, &Query::default())
}

/// Sends a whole response from one buffer, as the stub_status module does, with the
/// hardening headers ([`HARDENING`] and a Content-Security-Policy: the dashboard's own, or
/// [`DATA_CSP`]); with `Vary: Accept` when the format came from `Accept` (no `format=` in
/// `q`), so that a cache does not hand the page to a scraper.
fn send(
    r: &mut ngx_http_request_t,
    status: u32,
    content_type: &'static str,
    body: &[u8],
    q: &Query,
) -> ngx_int_t {
    let csp = if content_type == HTML_CONTENT_TYPE {
        headers::dashboard_csp()
    } else {
        DATA_CSP
    };
    let list = &mut r.headers_out.headers;
    let hardened = HARDENING
        .iter()
        .chain(core::iter::once(&("Content-Security-Policy", csp)))
        .all(|&(name, value)| push_header(list, name, static_value(value)));
    if !hardened {
        return NGX_ERROR as ngx_int_t;
    }
    if status == NGX_HTTP_OK
        && q.format.is_none()
        && !push_header(&mut r.headers_out.headers, "Vary", static_value("Accept"))
    {
        return NGX_ERROR as ngx_int_t;
    }
    r.headers_out.status = status as ngx_uint_t;
    r.headers_out.content_type = ngx_str_t {
        len: content_type.len(),
        data: content_type.as_ptr().cast_mut(),
    };
    r.headers_out.content_type_len = content_type.len();
    r.headers_out.content_length_n = body.len() as i64;
    // SAFETY: `r` is the status handler's live request (all callers of `send`), not finalized.
    let rc = unsafe { ngx_http_send_header(r) };
    if rc == NGX_ERROR as ngx_int_t || rc > NGX_OK as ngx_int_t || r.header_only() != 0 {
        return rc;
    }
    // SAFETY: the request pool is live; the buffer gets exactly body.len() bytes.
    unsafe {
        let b: *mut ngx_buf_t = ngx_create_temp_buf(r.pool, body.len().max(1));
        if b.is_null() {
            return NGX_ERROR as ngx_int_t;
        }
        core::ptr::copy_nonoverlapping(body.as_ptr(), (*b).last, body.len());
        (*b).last = (*b).last.add(body.len());
        (*b).set_last_buf(u32::from(core::ptr::eq(r.main, r)));
        (*b).set_last_in_chain(1);
        let mut out = ngx_chain_t {
            buf: b,
            next: core::ptr::null_mut(),
        };
        ngx_http_output_filter(r, &mut out)
    }
}
