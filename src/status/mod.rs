//! The status location: JSON or Prometheus text of every breaker (an upstream's servers under
//! its own breaker), or the dashboard page that polls the JSON, and with `control=on` the
//! operator's force_open / force_close / reset, and eject / restore of one server
//! ([`control`]). What a request gets is the core's choice ([`answer`]); the breakers are
//! copied out under the zone lock ([`snapshot`]), put together by the core ([`assemble`]) and
//! rendered after the lock is released, so a large page never holds the lock while formatting.

mod act;
mod control;
mod send;
mod snapshot;
mod stream;
mod upstreams;

use circuit_breaker_core::snapshot::Clocks;
use circuit_breaker_core::status::answer::{answer, Answer};
use circuit_breaker_core::status::assemble::{assemble, copies};
use circuit_breaker_core::status::query::{Format, Method, Query};
use circuit_breaker_core::status::{
    self, ZoneView, DASHBOARD_HTML, HTML_CONTENT_TYPE, JSON_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE,
};
use nginx_sys::{
    ngx_http_discard_request_body, ngx_http_request_t, ngx_int_t, NGX_HTTP_BAD_REQUEST,
    NGX_HTTP_FORBIDDEN, NGX_HTTP_GET, NGX_HTTP_HEAD, NGX_HTTP_INTERNAL_SERVER_ERROR,
    NGX_HTTP_NOT_FOUND, NGX_HTTP_NO_CONTENT, NGX_HTTP_OK, NGX_HTTP_POST,
    NGX_HTTP_SERVICE_UNAVAILABLE, NGX_OK,
};

use crate::conf::{MainConf, StatusMode};
use crate::fleet::{self, NoMessage};
use crate::request;
use circuit_breaker_shell::clock::{mono_ms, wall_ms};
use circuit_breaker_shell::ffi::{guard, nginx_version, MODULE_VERSION};
use circuit_breaker_shell::zone::Zone;
use send::{not_allowed, send, send_text};
use snapshot::snapshot;

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
    // SAFETY: set in set_status; the main conf lives as long as the configuration.
    let Some(mcf) = (unsafe { lcf.main.as_ref() }) else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    let control = lcf.status == StatusMode::Control;
    let method = match r.method as u32 {
        NGX_HTTP_GET => Some(Method::Get),
        NGX_HTTP_HEAD => Some(Method::Head),
        NGX_HTTP_POST => Some(Method::Post),
        _ => None,
    };
    let accept = accept_headers(r);
    match answer(method, control, r.args.as_bytes(), &accept) {
        Answer::NotAllowed { allow, reason } => not_allowed(r, allow, reason),
        Answer::BadRequest(reason) => send_text(r, NGX_HTTP_BAD_REQUEST, &reason),
        Answer::Control(format, q) => control::control(r, mcf, &q, format),
        Answer::Dashboard(q) => send(
            r,
            NGX_HTTP_OK,
            HTML_CONTENT_TYPE,
            DASHBOARD_HTML.as_bytes(),
            &q,
        ),
        Answer::Fleet(q) => fleet_message(r, mcf, &q),
        Answer::Data(format, q) => breakers(r, mcf, control, format, &q),
    }
}

/// The breakers `q` selects, in `format` (JSON or Prometheus), with the fleet's part: copied
/// out of the zone, put together and rendered once the lock is let go.
fn breakers(
    r: &mut ngx_http_request_t,
    mcf: &MainConf,
    control: bool,
    format: Format,
    q: &Query,
) -> ngx_int_t {
    // SAFETY: our own zone (or none), mapped in every worker.
    let zone = unsafe { Zone::from_shm(mcf.zone) };
    let mono = mono_ms();
    let wall = zone
        .as_ref()
        .map_or_else(wall_ms, |z| z.wall_clock(mono, wall_ms()));
    // Only what the query selects is copied: a poll of one upstream would otherwise copy
    // every breaker of the zone.
    let keep = |upstream: &str, route: &str, kind, view: &_| {
        q.wants_http() && copies(q, upstream, route, kind, view)
    };
    let keep_key = |v: &circuit_breaker_core::snapshot::BreakerView| {
        q.wants_http()
            && circuit_breaker_core::status::query::lists_key_state(q, v.state, v.forced.is_some())
    };
    let taken = zone
        .as_ref()
        .map(|z| snapshot(z, mono, q.history, keep, keep_key))
        .unwrap_or_default();
    let head = ZoneView {
        name: mcf.zone_name.0.clone(),
        module_version: MODULE_VERSION,
        nginx_version: nginx_version(),
        control,
        ..ZoneView::default()
    };
    let clocks = Clocks {
        mono_ms: mono,
        wall_ms: wall,
    };
    let (mut zview, entries) = assemble(head, taken, q, clocks, mcf);
    let on_wall = |t: u64| wall.saturating_sub(mono.saturating_sub(t));
    let streams = if q.wants_stream() {
        stream::zones_taken(mcf, q, clocks).unwrap_or_default()
    } else {
        Vec::new()
    };
    if format == Format::Prometheus {
        // The http block's zone, unless it has none or only the stream module's breakers are
        // asked for (and some exist): no series for a zone that is not there.
        let http = streams.is_empty() || (zone.is_some() && q.wants_http());
        let mut zones = Vec::with_capacity(1 + streams.len());
        if http {
            zones.push((&zview, &entries[..]));
        }
        zones.extend(streams.iter().map(|(v, e)| (v, &e[..])));
        let mut body = status::render_prometheus_zones(&zones);
        if let Some(f) = fleet::status_prometheus(mcf, on_wall) {
            body.extend_from_slice(f.as_bytes());
        }
        send(r, NGX_HTTP_OK, PROMETHEUS_CONTENT_TYPE, &body, q)
    } else {
        zview.fleet_json = fleet::status_json(mcf, on_wall);
        zview.stream_json = (!streams.is_empty()).then(|| stream::pages(&streams));
        let body = status::render_json(&zview, &entries);
        send(r, NGX_HTTP_OK, JSON_CONTENT_TYPE, &body, q)
    }
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
