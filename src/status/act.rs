//! One control action, for the http and the stream pools alike: what its query names, what
//! it does to a breaker, its log line, and its answer.

use circuit_breaker_core::breaker::Control;
use circuit_breaker_core::status::query::{Action, Format, Query};
use circuit_breaker_core::status::{self, Entry, JSON_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE};
use circuit_breaker_shell::zone::DEFAULT_ROUTE;
use nginx_sys::{ngx_http_request_t, ngx_int_t, NGX_HTTP_OK, NGX_LOG_WARN};

use super::send::send;

/// The server an `eject` or `restore` names, or why the query is refused (`400`); for the
/// http and the stream pools alike.
pub(super) fn server_of(q: &Query, action: Action) -> Result<&str, &'static str> {
    if !action.on_server() {
        return Err("\"server\" goes with \"action=eject\" or \"action=restore\"");
    }
    let server = q.server.as_deref().ok_or("missing parameter \"server\"")?;
    if q.route.as_deref().is_some_and(|rt| rt != DEFAULT_ROUTE) {
        return Err("servers belong to the upstream's own breaker: \"route\" must be \"default\"");
    }
    Ok(server)
}

/// What a breaker's action does to it; `None` for a server's (`eject`, `restore`).
pub(super) fn control_of(action: Action) -> Option<Control> {
    match action {
        Action::ForceOpen => Some(Control::ForceOpen),
        Action::ForceClose => Some(Control::ForceClose),
        Action::Reset => Some(Control::Reset),
        Action::Eject | Action::Restore => None,
    }
}

/// A breaker's action as its log line says it was done.
pub(super) fn done(action: Action) -> &'static str {
    match action {
        Action::ForceOpen => "forced open",
        Action::ForceClose => "forced closed",
        _ => "reset",
    }
}

/// One `warn` line per operator action: what was done, by which client address.
pub(super) fn log_control(r: &ngx_http_request_t, what: core::fmt::Arguments<'_>) {
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
pub(super) fn send_entry(
    r: &mut ngx_http_request_t,
    zone_name: &str,
    entry: &Entry,
    format: Format,
    q: &Query,
) -> ngx_int_t {
    if format == Format::Prometheus {
        let body = status::render_breaker_prometheus(zone_name, entry);
        send(r, NGX_HTTP_OK, PROMETHEUS_CONTENT_TYPE, &body, q)
    } else {
        let body = status::render_breaker_json(entry);
        send(r, NGX_HTTP_OK, JSON_CONTENT_TYPE, &body, q)
    }
}
