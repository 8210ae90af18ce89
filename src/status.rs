//! The status location: JSON or Prometheus text of every breaker, or the dashboard page that
//! polls the JSON, and with `control=on` the operator's force_open / force_close / reset. Each breaker's view is taken under the zone
//! lock (in batches, see `Zone::visit`) and the page is rendered after the lock is released,
//! so a large page never holds the lock while formatting.

use circuit_breaker_core::breaker::Control;
use circuit_breaker_core::status::query::{self, parse_query, Action, Format, Method, Query};
use circuit_breaker_core::status::{
    self, Entry, ZoneView, DASHBOARD_HTML, HTML_CONTENT_TYPE, JSON_CONTENT_TYPE,
    PROMETHEUS_CONTENT_TYPE,
};
use nginx_sys::{
    ngx_buf_t, ngx_chain_t, ngx_create_temp_buf, ngx_http_discard_request_body,
    ngx_http_output_filter, ngx_http_request_t, ngx_http_send_header, ngx_int_t, ngx_uint_t,
    NGX_ERROR, NGX_HTTP_BAD_REQUEST, NGX_HTTP_GET, NGX_HTTP_HEAD, NGX_HTTP_INTERNAL_SERVER_ERROR,
    NGX_HTTP_NOT_ALLOWED, NGX_HTTP_NOT_FOUND, NGX_HTTP_OK, NGX_HTTP_POST, NGX_LOG_WARN, NGX_OK,
};
use ngx::http::HttpModuleLocationConf;

use crate::conf::{LocConf, MainConf, StatusMode};
use crate::util::{guard, hash_name, key_hash, now_ms, push_header, rnd, static_str};
use crate::zone::{Key, Zone, DEFAULT_ROUTE};
use crate::Module;

/// The content handler of `circuit_breaker_status`.
pub unsafe extern "C" fn handler(r: *mut ngx_http_request_t) -> ngx_int_t {
    guard(NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t, || {
        // SAFETY: nginx calls content handlers with a live request.
        unsafe { handle(&mut *r) }
    })
}

unsafe fn handle(r: &mut ngx_http_request_t) -> ngx_int_t {
    let Some(lcf) = Module::location_conf(r) else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    let lcf: &LocConf = lcf;
    let method = r.method as u32;
    let control = method == NGX_HTTP_POST && lcf.status == StatusMode::Control;
    if method & (NGX_HTTP_GET | NGX_HTTP_HEAD) == 0 && !control {
        return NGX_HTTP_NOT_ALLOWED as ngx_int_t;
    }
    // SAFETY: live request.
    let rc = unsafe { ngx_http_discard_request_body(r) };
    if rc != NGX_OK as ngx_int_t {
        return rc;
    }
    // SAFETY: set in set_status; the main conf lives for the cycle.
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
    // SAFETY: our own zone (or none).
    let zone = unsafe { Zone::from_shm(mcf.zone) };
    if control {
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
        return send(
            r,
            NGX_HTTP_OK,
            HTML_CONTENT_TYPE,
            DASHBOARD_HTML.as_bytes(),
            &query,
        );
    }

    let now = now_ms();
    let mut zview = ZoneView {
        name: mcf.zone_name.clone(),
        control: lcf.status == StatusMode::Control,
        ..ZoneView::default()
    };
    let mut entries = Vec::new();
    if let Some(zone) = zone {
        (zview.used, zview.size, zview.alloc_failures) = zone.visit(|e| {
            let (u, rt) = (
                String::from_utf8_lossy(e.upstream),
                String::from_utf8_lossy(e.route),
            );
            if query::matches(&query, &u, &rt) {
                entries.push(Entry {
                    upstream: u.into_owned(),
                    route: rt.into_owned(),
                    view: e.breaker.view(now),
                });
            }
        });
    }
    // Oldest first: nodes are pushed at the head, so reverse for configuration order.
    entries.reverse();
    if format == Format::Prometheus {
        let body = status::render_prometheus(&zview, &entries);
        send(r, NGX_HTTP_OK, PROMETHEUS_CONTENT_TYPE, &body, &query)
    } else {
        let body = status::render_json(&zview, &entries);
        send(r, NGX_HTTP_OK, JSON_CONTENT_TYPE, &body, &query)
    }
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
    let route = q.route.as_deref().unwrap_or(DEFAULT_ROUTE);
    let not_found = |r: &mut ngx_http_request_t| {
        send_text(
            r,
            NGX_HTTP_NOT_FOUND,
            &format!("no circuit breaker for upstream \"{upstream}\" route \"{route}\""),
        )
    };
    // Known breakers: an upstream's own, and (upstream, route) where a location of that route
    // passes to that upstream (or to an upstream chosen at run time). Anything else is
    // unknown: a mistyped pair must not create a breaker no request can reach.
    let scf = mcf.upstreams.iter().find_map(|&s| {
        // SAFETY: upstream confs live for the cycle.
        let s = unsafe { &*s };
        (s.name == upstream).then_some(s)
    });
    let (Some(scf), Some(zone)) = (scf, zone) else {
        return not_found(r);
    };
    let Some(cfg) = scf.breaker.as_ref() else {
        return not_found(r);
    };
    let key = Key {
        hash: key_hash(scf.name_hash, hash_name(route.as_bytes())),
        upstream: upstream.as_bytes(),
        route: route.as_bytes(),
    };
    let ctl = match action {
        Action::ForceOpen => Control::ForceOpen,
        Action::ForceClose => Control::ForceClose,
        Action::Reset => Control::Reset,
    };
    let now = now_ms();
    let outcome = {
        let mut locked = zone.lock();
        let found = if scf.knows_route(mcf, route) {
            locked.find_or_create(&key, cfg, mcf.generation).ok()
        } else {
            locked.find(&key)
        };
        found.map(|mut b| {
            let t = b.control(now, rnd(), ctl);
            (t, b.view(now))
        })
    };
    let Some((transition, view)) = outcome else {
        return not_found(r);
    };
    // SAFETY: a live request's connection.
    let c = unsafe { &*r.connection };
    let client = String::from_utf8_lossy(c.addr_text.as_bytes());
    let verb = match action {
        Action::ForceOpen => "forced open",
        Action::ForceClose => "forced closed",
        Action::Reset => "reset",
    };
    ngx::ngx_log_error!(
        NGX_LOG_WARN,
        c.log,
        "circuit breaker \"{}/{}\" {} by {}",
        upstream,
        route,
        verb,
        client
    );
    let _ = transition; // the operator's line above says what happened
    let entry = Entry {
        upstream: upstream.to_owned(),
        route: route.to_owned(),
        view,
    };
    if format == Format::Prometheus {
        let body = status::render_breaker_prometheus(&mcf.zone_name, &entry);
        send(r, NGX_HTTP_OK, PROMETHEUS_CONTENT_TYPE, &body, q)
    } else {
        let body = status::render_breaker_json(&entry);
        send(r, NGX_HTTP_OK, JSON_CONTENT_TYPE, &body, q)
    }
}

fn send_text(r: &mut ngx_http_request_t, status: u32, line: &str) -> ngx_int_t {
    let mut body = line.as_bytes().to_vec();
    body.push(b'\n');
    send(r, status, "text/plain", &body, &Query::default())
}

/// Sends a whole response from one buffer, as the stub_status module does; with
/// `Vary: Accept` when the format came from `Accept` (no `format=` in `q`), so that a cache
/// does not hand the page to a scraper.
fn send(
    r: &mut ngx_http_request_t,
    status: u32,
    content_type: &'static str,
    body: &[u8],
    q: &Query,
) -> ngx_int_t {
    if status == NGX_HTTP_OK && q.format.is_none() {
        // SAFETY: headers_out.headers is the request's live list; the value is static.
        if !unsafe { push_header(&mut r.headers_out.headers, "Vary", static_str("Accept")) } {
            return NGX_ERROR as ngx_int_t;
        }
    }
    r.headers_out.status = status as ngx_uint_t;
    r.headers_out.content_type = static_str(content_type);
    r.headers_out.content_type_len = content_type.len();
    r.headers_out.content_length_n = body.len() as i64;
    // SAFETY: live request.
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
