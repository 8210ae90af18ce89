//! The stream module's breakers on this status location: its zones are found among the
//! cycle's shared zones by their tag (the stream module, looked up by name: it is another
//! `.so`, loaded or not), each read with this build's zone code once its layout checks, and
//! rendered as a page of its own, the page's `stream` member.

use circuit_breaker_core::snapshot::{BreakerView, Clocks, Kind};
use circuit_breaker_core::status::assemble::{assemble, copies, Upstreams};
use circuit_breaker_core::status::query::{lists_key_state, Query};
use circuit_breaker_core::status::query::{quote, Action, Format};
use circuit_breaker_core::status::{render_json, Entry, ZoneView};
use nginx_sys::{ngx_http_request_t, ngx_int_t, NGX_HTTP_BAD_REQUEST, NGX_HTTP_NOT_FOUND};

use super::control::{control_of, done, log_control, send_entry};
use super::send::send_text;
use super::snapshot::snapshot;
use crate::clock::{mono_ms, rnd, wall_ms};
use crate::ffi::{hash_name, key_hash, nginx_version, MODULE_VERSION};
use crate::conf::MainConf;
use crate::stream_zones;
use crate::zone::{Key, DEFAULT_ROUTE};

/// A stream upstream's configuration is not the http block's: only the fleet's fingerprint,
/// which the stream module told the http block (shown only when the instance is in a fleet).
struct Stream<'a>(&'a MainConf);

impl Upstreams for Stream<'_> {
    fn servers(&self, _upstream: &str) -> impl Iterator<Item = (&str, bool)> {
        core::iter::empty()
    }

    fn probe_uri(&self, _upstream: &str) -> Option<String> {
        None
    }

    fn fingerprint(&self, upstream: &str) -> Option<u64> {
        self.0.fleet.as_ref()?;
        let (_, fp) = self.0.fleet_stream.iter().find(|(name, _)| name == upstream)?;
        Some(*fp)
    }
}

/// Each stream zone's view and breakers, as `q` selects them; `None` when nginx has none.
pub fn zones_taken(
    mcf: &MainConf,
    q: &Query,
    clocks: Clocks,
) -> Option<Vec<(ZoneView, Vec<Entry>)>> {
    let zones = stream_zones::all();
    if zones.is_empty() {
        return None;
    }
    let keep = |upstream: &str, route: &str, kind: Kind, view: &BreakerView| {
        copies(q, upstream, route, kind, view)
    };
    let keep_key = |v: &BreakerView| lists_key_state(q, v.state, v.forced.is_some());
    let taken = zones
        .into_iter()
        .map(|(name, zone)| {
            let taken = snapshot(&zone, clocks.mono_ms, q.history, keep, keep_key);
            let head = ZoneView {
                name,
                module_version: MODULE_VERSION,
                nginx_version: nginx_version(),
                stream: true,
                ..ZoneView::default()
            };
            assemble(head, taken, q, clocks, &Stream(mcf))
        })
        .collect();
    Some(taken)
}

/// Each stream zone's JSON page, the status page's `stream` member.
pub fn pages(taken: &[(ZoneView, Vec<Entry>)]) -> Vec<Vec<u8>> {
    taken
        .iter()
        .map(|(view, entries)| render_json(view, entries))
        .collect()
}

/// `POST ?proxy=stream&upstream=…&action=force_open|force_close|reset`: changes a stream
/// upstream's breaker, in whichever stream zone holds it, and answers with it. Only a breaker
/// the stream module made is found: a stream upstream's breaker is made by its first session.
pub fn control(
    r: &mut ngx_http_request_t,
    q: &Query,
    upstream: &str,
    action: Action,
    format: Format,
) -> ngx_int_t {
    let Some(ctl) = control_of(action).filter(|_| q.server.is_none()) else {
        return send_text(
            r,
            NGX_HTTP_BAD_REQUEST,
            "a stream breaker has no servers to eject or restore",
        );
    };
    if q.route
        .as_deref()
        .is_some_and(|route| route != DEFAULT_ROUTE)
    {
        return send_text(
            r,
            NGX_HTTP_BAD_REQUEST,
            "a stream breaker has no routes: \"route\" must be \"default\"",
        );
    }
    let key = Key {
        hash: key_hash(
            hash_name(upstream.as_bytes()),
            hash_name(DEFAULT_ROUTE.as_bytes()),
        ),
        upstream: upstream.as_bytes(),
        route: DEFAULT_ROUTE.as_bytes(),
        kind: Kind::Route,
    };
    let mono = mono_ms();
    for (name, zone) in stream_zones::all() {
        let found = {
            let mut locked = zone.lock();
            locked.find(&key).map(|mut b| {
                b.control(mono, rnd(), ctl);
                b.view(mono)
            })
        };
        let Some(mut view) = found else { continue };
        view.on_wall_clock(mono, zone.wall_clock(mono, wall_ms()));
        log_control(r, format_args!("stream \"{upstream}\" {}", done(action)));
        let entry = Entry {
            upstream: upstream.to_owned(),
            route: DEFAULT_ROUTE.to_owned(),
            view,
            servers: Vec::new(),
            retry: None,
            probe_uri: None,
            fingerprint: None,
            limit: None,
        };
        return send_entry(r, &name, &entry, format, q);
    }
    send_text(
        r,
        NGX_HTTP_NOT_FOUND,
        &format!("no circuit breaker for stream upstream {}", quote(upstream)),
    )
}
