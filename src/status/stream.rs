//! The stream module's breakers on this status location: its zones are found among the
//! cycle's shared zones by their tag (the stream module, looked up by name: it is another
//! `.so`, loaded or not), each read with this build's zone code once its layout checks, and
//! rendered as a page of its own, the page's `stream` member.

use circuit_breaker_core::snapshot::{BreakerView, Clocks, Kind};
use std::collections::HashMap;

use circuit_breaker_core::status::assemble::{assemble, copies, Snapshot, Upstreams};
use circuit_breaker_core::status::query::{lists_key_state, Query};
use circuit_breaker_core::status::query::{quote, Action, Format};
use circuit_breaker_core::status::{render_json, Entry, ServerEntry, ZoneView};
use nginx_sys::{ngx_http_request_t, ngx_int_t, NGX_HTTP_BAD_REQUEST, NGX_HTTP_NOT_FOUND};

use super::act::{control_of, done, log_control, send_entry, server_of};
use super::send::send_text;
use super::snapshot::snapshot;
use crate::conf::MainConf;
use crate::stream_zones;
use circuit_breaker_shell::clock::{mono_ms, rnd, wall_ms};
use circuit_breaker_shell::eject;
use circuit_breaker_shell::ffi::{nginx_version, MODULE_VERSION};
use circuit_breaker_shell::kin;
use circuit_breaker_shell::zone::{Key, DEFAULT_ROUTE};

/// A stream upstream's configuration is not the http block's: its pool's servers are those
/// the stream module lists (or, without its word, those the zone holds breakers for), and the
/// fleet's fingerprint is what the stream module told the http block (shown only in a fleet).
struct Stream<'a> {
    mcf: &'a MainConf,
    servers: HashMap<String, Vec<(String, bool)>>,
}

impl Stream<'_> {
    /// The servers of each pool, in configuration order with their backup flags, as the stream
    /// module says; without its word, those the zone holds breakers for, oldest first (the
    /// zone links a new breaker at its head).
    fn servers_of<'a>(mcf: &'a MainConf, taken: &Snapshot) -> Stream<'a> {
        let mut servers: HashMap<String, Vec<(String, bool)>> = HashMap::new();
        // SAFETY: the worker's running cycle.
        if let Some(pools) = unsafe { kin::stream_pools(nginx_sys::ngx_cycle) } {
            for (upstream, server, backup) in pools {
                servers.entry(upstream).or_default().push((server, backup));
            }
            return Stream { mcf, servers };
        }
        for r in taken
            .records
            .iter()
            .rev()
            .filter(|r| r.kind == Kind::Server)
        {
            servers
                .entry(r.upstream.clone())
                .or_default()
                .push((r.route.clone(), false));
        }
        Stream { mcf, servers }
    }
}

impl Upstreams for Stream<'_> {
    fn servers(&self, upstream: &str) -> impl Iterator<Item = (&str, bool)> {
        self.servers
            .get(upstream)
            .into_iter()
            .flatten()
            .map(|(s, b)| (s.as_str(), *b))
    }

    fn probe_uri(&self, _upstream: &str) -> Option<String> {
        None
    }

    fn fingerprint(&self, upstream: &str) -> Option<u64> {
        self.mcf.fleet.as_ref()?;
        let (_, fp) = self
            .mcf
            .fleet_stream
            .iter()
            .find(|(name, _)| name == upstream)?;
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
            let conf = Stream::servers_of(mcf, &taken);
            assemble(head, taken, q, clocks, &conf)
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
    if action.on_server() || q.server.is_some() {
        return control_server(r, q, upstream, action, format);
    }
    let Some(ctl) = control_of(action) else {
        return send_text(r, NGX_HTTP_BAD_REQUEST, "\"server\" goes with this action");
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
    let key = Key::own(upstream.as_bytes());
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

/// `POST ?proxy=stream&upstream=…&server=…&action=eject|restore`: takes one server out of a
/// stream pool (until `restore`) or puts it back with a fresh window, in whichever stream zone
/// holds its breaker; answers with the upstream's own breaker's JSON, the server under it.
/// Only a server of a pool (`circuit_breaker_eject`) has a breaker to find.
fn control_server(
    r: &mut ngx_http_request_t,
    q: &Query,
    upstream: &str,
    action: Action,
    format: Format,
) -> ngx_int_t {
    let server = match server_of(q, action) {
        Ok(server) => server,
        Err(why) => return send_text(r, NGX_HTTP_BAD_REQUEST, why),
    };
    let home = Key::own(upstream.as_bytes());
    let key = Key::server(upstream.as_bytes(), server.as_bytes());
    let eject = action == Action::Eject;
    let mono = mono_ms();
    for (zone_name, zone) in stream_zones::all() {
        let Some(mut view) = eject::control_key(&zone, &home, &key, eject, mono) else {
            continue;
        };
        let wall = zone.wall_clock(mono, wall_ms());
        view.on_wall_clock(mono, wall);
        let Some(mut own) = zone.lock().find(&home).map(|b| b.view(mono)) else {
            continue;
        };
        own.on_wall_clock(mono, wall);
        let verb = if eject { "ejected" } else { "restored" };
        log_control(
            r,
            format_args!("stream \"{upstream}\" server {server} {verb}"),
        );
        let entry = Entry {
            upstream: upstream.to_owned(),
            route: DEFAULT_ROUTE.to_owned(),
            view: own,
            servers: vec![ServerEntry {
                address: server.to_owned(),
                backup: is_backup(upstream, server),
                view,
            }],
            retry: None,
            probe_uri: None,
            fingerprint: None,
            limit: None,
        };
        return send_entry(r, &zone_name, &entry, format, q);
    }
    send_text(
        r,
        NGX_HTTP_NOT_FOUND,
        &format!(
            "no server {} in the pool of stream upstream {}",
            quote(server),
            quote(upstream)
        ),
    )
}

/// Whether `server` is a backup of the stream pool `upstream`, as the stream module says.
fn is_backup(upstream: &str, server: &str) -> bool {
    // SAFETY: the worker's running cycle.
    let pools = unsafe { kin::stream_pools(nginx_sys::ngx_cycle) };
    pools.is_some_and(|p| p.iter().any(|(u, s, b)| u == upstream && s == server && *b))
}
