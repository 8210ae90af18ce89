//! The status location's output, free of nginx: JSON and Prometheus rendering of breaker
//! snapshots, the live dashboard page ([`DASHBOARD_HTML`]), and parsing of the location's
//! query string and `Accept` header ([`query`]).
//!
//! The handler asks [`answer::answer`] what to answer (a format it picks with
//! [`query::negotiate`]). For JSON or Prometheus it copies every breaker into an
//! [`assemble::Record`] under the zone lock, releases the lock, puts the page's [`Entry`]s
//! together with [`assemble::assemble`], then renders with [`render_json`] or
//! [`render_prometheus`]; the page is a constant, which polls the JSON.
//! Control requests answer with [`render_breaker_json`] (or [`render_breaker_prometheus`]) of
//! the breaker they changed, once [`guard::check_control`] let them through. Every answer
//! carries [`headers::HARDENING`] and a Content-Security-Policy ([`headers`]).

use crate::eject::place_name;
use crate::snapshot::BreakerView;

pub mod answer;
pub mod assemble;
pub mod guard;
pub mod headers;
mod prometheus;
pub mod query;
mod view;

pub use view::{ClassFigures, Entry, KeysView, LimitStatus, ServerEntry, ZoneView};

/// The route name of an upstream's own breaker (the one without a `circuit_breaker_route`).
pub const DEFAULT_ROUTE: &str = "default";

/// `Content-Type` of [`render_json`] and [`render_breaker_json`] output.
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// `Content-Type` of [`render_prometheus`] output (text exposition format 0.0.4).
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `Content-Type` of [`DASHBOARD_HTML`].
pub const HTML_CONTENT_TYPE: &str = "text/html; charset=utf-8";

/// The live dashboard: one self-contained page (inline style and script, nothing fetched
/// from elsewhere, enforced by the Content-Security-Policy of [`headers::dashboard_csp`])
/// that polls this same location with `?format=json` every second and shows every breaker
/// with its upstream's servers under it, the limit, the retry budget and the fleet, worst
/// first; when the JSON says `"control":true` it offers force open / force close / reset
/// and eject / restore, each confirmed first and sent with [`guard::CONTROL_HEADER`].
pub const DASHBOARD_HTML: &str = include_str!("dashboard.html");

/// Renders the whole status page as JSON, in the base format's field order (0.1.0's page):
/// `{"zone","size","used","alloc_failures","module_version","breakers":[...]}` with one object
/// per entry, in the order given (see [`render_breaker_json`] for the breaker object), and
/// then `"fleet":{...}` when the zone view has [`ZoneView::fleet_json`].
/// `module_version` (added since) comes after the zone's own figures, which keep the base
/// format's bytes, and before the breakers, so the head of a long page still shows it. With
/// [`ZoneView::control`], `"control":true` follows it.
pub fn render_json(zone: &ZoneView, entries: &[Entry]) -> Vec<u8> {
    let per_entry: usize = entries.iter().map(json_size_hint).sum();
    let fleet = zone.fleet_json.as_ref().map_or(0, String::len);
    let mut out =
        Vec::with_capacity(128 + zone.name.len() + zone.module_version.len() + per_entry + fleet);
    out.extend_from_slice(b"{\"zone\":");
    json_str(&mut out, &zone.name);
    out.extend_from_slice(b",\"size\":");
    write_num(&mut out, Num::Int(zone.size));
    out.extend_from_slice(b",\"used\":");
    write_num(&mut out, Num::Int(zone.used));
    out.extend_from_slice(b",\"alloc_failures\":");
    write_num(&mut out, Num::Int(zone.alloc_failures));
    if let Some(k) = &zone.keys {
        out.extend_from_slice(b",\"keys\":{\"used\":");
        write_num(&mut out, Num::Int(k.used));
        out.extend_from_slice(b",\"capacity\":");
        write_num(&mut out, Num::Int(k.capacity));
        out.extend_from_slice(b",\"promoted\":");
        write_num(&mut out, Num::Int(k.promoted));
        out.extend_from_slice(b",\"listed\":");
        write_num(&mut out, Num::Int(k.listed));
        out.extend_from_slice(b",\"unlisted\":");
        write_num(&mut out, Num::Int(k.unlisted));
        out.extend_from_slice(b",\"open\":");
        write_num(&mut out, Num::Int(k.open));
        out.push(b'}');
    }
    out.extend_from_slice(b",\"module_version\":");
    json_str(&mut out, zone.module_version);
    if zone.control {
        out.extend_from_slice(b",\"control\":true");
    }
    out.extend_from_slice(b",\"breakers\":[");
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_breaker_json(&mut out, entry);
    }
    out.push(b']');
    if let Some(fleet) = &zone.fleet_json {
        out.extend_from_slice(b",\"fleet\":");
        out.extend_from_slice(fleet.as_bytes());
    }
    if let Some(zones) = &zone.stream_json {
        out.extend_from_slice(b",\"stream\":[");
        for (i, z) in zones.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(z);
        }
        out.push(b']');
    }
    out.push(b'}');
    out
}

/// Renders one breaker object, as found in the `breakers` array of [`render_json`]:
///
/// `{"upstream","route","state","state_code","dry_run","forced","since","retry_at",
/// "window":{"seconds","requests","failures","slow","failure_rate","slow_rate"},
/// "latency_ms":{"p50","p95","p99"},"cooldown_ms","consecutive_probe_successes",
/// "probes_needed","ramp_share","probe_uri",
/// "totals":{"requests","failures","short_circuited","probes","tls_errors","retry_after_503",
/// "opened","half_opened","closed","ramp_shed","explained"},"last_transition"}`.
///
/// `forced` is `null`, `"open"` or `"closed"`; `since` and `retry_at` are Unix seconds with
/// millisecond precision (`retry_at` is `null` when no probe is scheduled); rates are rounded to
/// 4 decimals; latency percentiles are `null` without samples, and so are the limit's
/// latencies before its first update (to the microsecond otherwise).
///
/// Recovery adds to the base object: `probes_needed` (good probes in a row that close it, 0
/// when closed), `ramp_share` (the share of requests let through, 0..1 with 4 decimals: below
/// 1 while a recovery ramp runs), `probe_uri` (what active probes request, `null` without
/// `probe_uri`) and `totals.ramp_shed` (requests the ramp turned away, not in
/// `short_circuited`); pools add `totals.explained` (failures their servers' ejection
/// explains, in `failures` but not in the window).
///
/// After `last_transition` comes `"tripped"`: while the breaker is open or half-open because
/// it tripped (not forced), `{"by":"failure_rate"|"slow_rate"|"consecutive"|"probe"|
/// "latency_outlier"|"failure_outlier",
/// "threshold","suspected","window":{…}}` — what opened it, its threshold (a rate 0..1;
/// `consecutive`'s run length; 0 for a server ejected by a failed probe), whether peers' suspicion
/// let it trip on `suspect_min` requests, and the window as it was on the request that
/// tripped it (the live window ages out during a long cooldown) — and `null` otherwise.
/// Then `"open_since"`: while open or half-open, when the episode began (Unix seconds, as
/// `since`: the trip out of closed, which a failed probe's reopen does not move), else
/// `null`; and, when the view has one (`history=1`), `"history":{…}` (see `write_history`).
/// A server has `"out_since"` (the same, for its time out of the pool) and its history after
/// its `tripped`.
/// While open or half-open, `latency_ms` counts the probes' response times too (they are
/// not the window's requests).
///
/// An upstream's own breaker adds, after `tripped`, `"servers":[…]` when ejection
/// is on — each `{"address","backup","state":"in"|"probing"|"ejected","forced","since",
/// "returns_at","ramp_share","window":{…},"latency_ms":{"p50","p90","p99"},"cooldown_ms",
/// "ejections","totals":{"requests","failures","probes","returns"},"last_transition",
/// "tripped"}`, `returns_at` being when the server may be probed (`null` while in),
/// `ramp_share` the share of its picks a returning server takes (below 1 on its ramp),
/// `tripped` the window that ejected it — and
/// `"retries":{"window":{"seconds","first_attempts","retries","allowance"},"total","denied"}`
/// with a retry budget.
///
/// In a fleet (the entry has a [`Entry::fingerprint`]) three members follow:
/// `"fingerprint"` (16 hex digits), `"suspicious"` (peers' evidence lowers the bar to open:
/// `suspect_min` local failures instead of `min_requests`) and `"suspicious_until"` (Unix
/// seconds, or `null`). A breaker with an adaptive limit ends with
/// `"limit":{"limit","in_flight","min_latency_ms","last_latency_ms","shed"}`.
pub fn render_breaker_json(entry: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(json_size_hint(entry));
    write_breaker_json(&mut out, entry);
    out
}

/// Renders the status page in the Prometheus text exposition format 0.0.4.
///
/// Every metric is prefixed `nginx_circuit_breaker_`; zone metrics carry the label `zone`,
/// breaker metrics `zone`, `upstream` and `route`. Each family's `# HELP` and `# TYPE` come
/// once, followed by all its samples. Families:
///
/// | family | type | value |
/// |---|---|---|
/// | `build_info{version,nginx}` | gauge | always 1; the module's version and the nginx version it was built for (no `zone` label: it describes the binary) |
/// | `zone_size_bytes`, `zone_used_bytes` | gauge | zone size / bytes allocated |
/// | `zone_alloc_failures_total` | counter | breakers not created for lack of memory |
/// | `breakers` | gauge | number of breakers shown |
/// | `state` | gauge | 0 closed, 1 half-open, 2 open |
/// | `dry_run` | gauge | 1 when `dry_run` is set |
/// | `forced{state="open"\|"closed"}` | gauge | 1 for the forced state, else 0 (both always present; both 0 when not forced) |
/// | `state_since_seconds` | gauge | Unix time the current state began |
/// | `open_since_seconds` | gauge | Unix time the current episode began: the trip out of closed, which a failed probe's reopen does not move (absent while closed) |
/// | `retry_at_seconds` | gauge | Unix time the next probe may start (absent when none is scheduled) |
/// | `cooldown_seconds` | gauge | current cooldown |
/// | `consecutive_probe_successes` | gauge | good probes in a row |
/// | `probes_needed` | gauge | good probes in a row that close the breaker (0 when closed) |
/// | `ramp_share` | gauge | share of requests let through, 0..1 (below 1 while a recovery ramp runs) |
/// | `window_seconds`, `window_requests`, `window_failures`, `window_slow` | gauge | the live window |
/// | `failure_rate`, `slow_rate` | gauge | window ratios, rounded to 4 decimals |
/// | `latency_seconds{percentile="50"\|"95"\|"99"}` | gauge | window percentiles (absent without samples) |
/// | `requests_total`, `failures_total`, `slow_total`, `short_circuited_total`, `probes_total`, `tls_errors_total`, `retry_after_503_total` | counter | running totals |
/// | `transitions_total{to="open"\|"half_open"\|"closed"}` | counter | transitions |
/// | `retries_total`, `retries_denied_total` | counter | an upstream's retry budget (labels `zone`, `upstream`) |
/// | `server_state` | gauge | a server's place in its pool: 0 in, 1 probing, 2 ejected (labels `zone`, `upstream`, `server`, as every `server_` family) |
/// | `server_returns_at_seconds` | gauge | Unix time an ejected server may be probed (absent while in) |
/// | `server_cooldown_seconds` | gauge | the server's current ejection time |
/// | `server_window_requests`, `server_window_failures`, `server_failure_rate` | gauge | the server's window |
/// | `server_latency_seconds{percentile="50"\|"90"\|"99"}` | gauge | the server's response time percentiles over its window (the 90th: what relative ejection judges) |
/// | `server_requests_total`, `server_failures_total`, `server_ejections_total`, `server_returns_total` | counter | the server's totals |
/// | `ramp_shed_total` | counter | requests a recovery ramp turned away |
/// | `explained_total` | counter | failures of a pool's servers that their ejection explains (left out of the window) |
/// | `limit`, `in_flight` | gauge | the adaptive limit and the requests holding a slot (breakers with `limit=adaptive` only) |
/// | `limit_min_latency_seconds`, `limit_latency_seconds` | gauge | the minimum latency the limit works from, and the last interval's mean (absent before the first update) |
/// | `limited_total` | counter | requests shed by the limit (in dry run: that would have been) |
/// | `limit_capped_total` | counter | of those, requests of a client holding most of the limit, at its cap |
///
/// Breaker families with no sample at all (no breakers, or no breaker with a value) are left
/// out entirely.
pub fn render_prometheus(zone: &ZoneView, entries: &[Entry]) -> Vec<u8> {
    prometheus::render(&[(zone, entries)], true)
}

/// [`render_prometheus`] of several zones at once (the http block's and the stream module's),
/// each family once with every zone's samples, told apart by their `zone` label;
/// `zone_info`'s `module` label says which proxy a zone serves.
pub fn render_prometheus_zones(zones: &[(&ZoneView, &[Entry])]) -> Vec<u8> {
    prometheus::render(zones, true)
}

/// One breaker's families of [`render_prometheus`], without the zone's (`build_info`, `zone_*`,
/// `breakers`): the answer to a control request with `format=prometheus`.
pub fn render_breaker_prometheus(zone_name: &str, entry: &Entry) -> Vec<u8> {
    let zone = ZoneView {
        name: zone_name.into(),
        ..ZoneView::default()
    };
    prometheus::render(&[(&zone, std::slice::from_ref(entry))], false)
}

/// A generous guess at one breaker's JSON size, so that the output never reallocates (a
/// page of 10 000 breakers is megabytes: one reallocation copies it all again). Each part
/// that may be there counts (see `size_hints_cover_every_part`).
fn json_size_hint(entry: &Entry) -> usize {
    let tripped = |v: &BreakerView| if v.tripped.is_some() { 190 } else { 0 };
    // Each point: three counts of up to 10 digits, a state code and their commas.
    let history = |v: &BreakerView| v.history.as_ref().map_or(0, |h| 110 + 36 * h.points.len());
    let servers: usize = entry
        .servers
        .iter()
        .map(|s| {
            480 + s.address.len()
                + s.view.last_transition.len()
                + tripped(&s.view)
                + history(&s.view)
        })
        .sum();
    let limit = if entry.limit.is_some() { 160 } else { 0 };
    let retry = if entry.retry.is_some() { 160 } else { 0 };
    let fleet = if entry.fingerprint.is_some() { 100 } else { 0 };
    690 + limit
        + retry
        + fleet
        + tripped(&entry.view)
        + history(&entry.view)
        + entry.upstream.len()
        + entry.route.len()
        + entry.view.last_transition.len()
        + entry.probe_uri.as_ref().map_or(0, String::len)
        + servers
}

/// Milliseconds as a float, to the microsecond; `None` for 0 (nothing measured yet).
fn latency_ms(ms: f64) -> Option<Num> {
    (ms > 0.0 && ms.is_finite()).then(|| Num::Scaled((ms * 1000.0).round() as u64, 3))
}

/// Milliseconds as seconds, to the microsecond; `None` for 0 (nothing measured yet).
fn latency_s(ms: f64) -> Option<Num> {
    (ms > 0.0 && ms.is_finite()).then(|| Num::Scaled((ms * 1000.0).round() as u64, 6))
}

/// `part / whole` rounded half-up to 4 decimals (0 when `whole` is 0), as a count of
/// ten-thousandths; computed in integers so that the rounding is exact.
fn rate_e4(part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return 0;
    }
    let (part, whole) = (u128::from(part), u128::from(whole));
    ((part * 20_000 + whole) / (2 * whole)) as u64
}

/// A number as both formats print it: an integer, or `n / 10^scale` (Unix milliseconds as
/// seconds, rates in ten-thousandths) written exactly in decimal.
#[derive(Clone, Copy, Debug)]
enum Num {
    Int(u64),
    Scaled(u64, u32),
}

/// Unix milliseconds as seconds.
fn secs(ms: u64) -> Num {
    Num::Scaled(ms, 3)
}

/// A share in hundredths of a percent (10 000 is all) as a ratio with 4 decimals.
fn share(hundredths_of_percent: u32) -> Num {
    Num::Scaled(u64::from(hundredths_of_percent.min(10_000)), 4)
}

/// A ratio rounded to 4 decimals.
fn ratio(part: u64, whole: u64) -> Num {
    Num::Scaled(rate_e4(part, whole), 4)
}

/// Writes a number: integers as is, scaled values as an exact decimal with trailing zeros
/// trimmed but at least one decimal (`1764484800.123`, `1764484830.5`, `0.55`, `0.0`), so a
/// scaled value is always a float to JSON readers.
fn write_num(out: &mut Vec<u8>, v: Num) {
    let mut buf = itoa::Buffer::new();
    match v {
        Num::Int(n) => out.extend_from_slice(buf.format(n).as_bytes()),
        Num::Scaled(n, scale) => {
            let div = 10u64.pow(scale);
            out.extend_from_slice(buf.format(n / div).as_bytes());
            out.push(b'.');
            let mut frac = n % div;
            let mut digits = scale as usize;
            while digits > 1 && frac % 10 == 0 {
                frac /= 10;
                digits -= 1;
            }
            let s = buf.format(frac);
            out.extend(std::iter::repeat(b'0').take(digits - s.len()));
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// Writes `v`, or `null`.
fn write_opt(out: &mut Vec<u8>, v: Option<Num>) {
    match v {
        Some(v) => write_num(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

/// Writes a JSON string, quoted and escaped (by serde_json: `"`, `\` and control characters).
fn json_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(out, s).expect("writing a string to a Vec cannot fail");
}

/// Writes `key` then the integer `n`.
fn int(out: &mut Vec<u8>, key: &[u8], n: u64) {
    out.extend_from_slice(key);
    write_num(out, Num::Int(n));
}

/// Writes a forced state's name as a string, or `null`.
fn write_forced(out: &mut Vec<u8>, forced: Option<crate::snapshot::Forced>) {
    match forced {
        Some(f) => json_str(out, f.name()),
        None => out.extend_from_slice(b"null"),
    }
}

/// Writes `,"window":{…` up to the slow rate (the caller closes the object).
fn write_window(out: &mut Vec<u8>, w: &crate::snapshot::WindowView) {
    int(out, b",\"window\":{\"seconds\":", u64::from(w.seconds));
    int(out, b",\"requests\":", w.requests);
    int(out, b",\"failures\":", w.failures);
    int(out, b",\"slow\":", w.slow);
    out.extend_from_slice(b",\"failure_rate\":");
    write_num(out, ratio(w.failures, w.requests));
    out.extend_from_slice(b",\"slow_rate\":");
    write_num(out, ratio(w.slow, w.requests));
}

/// Writes one breaker object; keys and punctuation are written as constant runs.
fn write_breaker_json(out: &mut Vec<u8>, entry: &Entry) {
    let v = &entry.view;
    let (w, l, t) = (&v.window, &v.latency, &v.totals);
    out.extend_from_slice(b"{\"upstream\":");
    json_str(out, &entry.upstream);
    out.extend_from_slice(b",\"route\":");
    json_str(out, &entry.route);
    out.extend_from_slice(b",\"state\":\"");
    out.extend_from_slice(v.state.name().as_bytes());
    out.push(b'"');
    int(out, b",\"state_code\":", u64::from(v.state.code()));
    out.extend_from_slice(match v.dry_run {
        true => b",\"dry_run\":true,\"forced\":",
        false => b",\"dry_run\":false,\"forced\":",
    });
    write_forced(out, v.forced);
    out.extend_from_slice(b",\"since\":");
    write_num(out, secs(v.since_ms));
    out.extend_from_slice(b",\"retry_at\":");
    write_opt(out, v.retry_at_ms.map(secs));
    write_window(out, w);
    write_latency(out, &[(b"p50", l.p50), (b"p95", l.p95), (b"p99", l.p99)]);
    int(out, b",\"cooldown_ms\":", v.cooldown_ms);
    int(
        out,
        b",\"consecutive_probe_successes\":",
        u64::from(v.consecutive_probe_successes),
    );
    // Recovery: added to the base object.
    int(out, b",\"probes_needed\":", u64::from(v.probes_needed));
    out.extend_from_slice(b",\"ramp_share\":");
    write_num(out, share(v.ramp_share));
    out.extend_from_slice(b",\"probe_uri\":");
    match &entry.probe_uri {
        Some(uri) => json_str(out, uri),
        None => out.extend_from_slice(b"null"),
    }
    // The base `totals` has no `slow`: slow calls show in the window and in Prometheus.
    int(out, b",\"totals\":{\"requests\":", t.requests);
    int(out, b",\"failures\":", t.failures);
    int(out, b",\"short_circuited\":", t.short_circuited);
    int(out, b",\"probes\":", t.probes);
    int(out, b",\"tls_errors\":", t.tls_errors);
    int(out, b",\"retry_after_503\":", t.retry_after_503);
    int(out, b",\"opened\":", t.opened);
    int(out, b",\"half_opened\":", t.half_opened);
    int(out, b",\"closed\":", t.closed);
    // Recovery: added to the base totals.
    int(out, b",\"ramp_shed\":", t.ramp_shed);
    // Pools: failures their servers' ejection explains, left out of the window.
    int(out, b",\"explained\":", t.explained);
    out.extend_from_slice(b"},\"last_transition\":");
    json_str(out, &v.last_transition);
    write_tripped(out, v.tripped.as_ref());
    out.extend_from_slice(b",\"open_since\":");
    write_opt(out, v.episode_ms.map(secs));
    write_history(out, v.history.as_ref());
    if !entry.servers.is_empty() {
        out.extend_from_slice(b",\"servers\":[");
        for (i, s) in entry.servers.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_server_json(out, s);
        }
        out.push(b']');
    }
    if let Some(r) = &entry.retry {
        int(
            out,
            b",\"retries\":{\"window\":{\"seconds\":",
            u64::from(r.window_s),
        );
        int(out, b",\"first_attempts\":", r.firsts);
        int(out, b",\"retries\":", r.retries);
        int(out, b",\"allowance\":", r.allowance);
        int(out, b"},\"total\":", r.retries_total);
        int(out, b",\"denied\":", r.retries_denied_total);
        out.push(b'}');
    }
    if let Some(fp) = entry.fingerprint {
        out.extend_from_slice(b",\"fingerprint\":\"");
        out.extend_from_slice(crate::fleet::fingerprint::hex(fp).as_bytes());
        out.extend_from_slice(match v.suspect_until_ms {
            Some(_) => b"\",\"suspicious\":true,\"suspicious_until\":",
            None => b"\",\"suspicious\":false,\"suspicious_until\":",
        });
        write_opt(out, v.suspect_until_ms.map(secs));
    }
    if let Some(l) = &entry.limit {
        int(out, b",\"limit\":{\"limit\":", u64::from(l.limit));
        int(out, b",\"in_flight\":", u64::from(l.in_flight));
        out.extend_from_slice(b",\"min_latency_ms\":");
        write_opt(out, latency_ms(l.min_latency_ms));
        out.extend_from_slice(b",\"last_latency_ms\":");
        write_opt(out, latency_ms(l.last_latency_ms));
        int(out, b",\"shed\":", l.shed);
        int(out, b",\"capped\":", l.capped);
        if let Some(classes) = &l.classes {
            out.extend_from_slice(b",\"classes\":{");
            for (c, f) in crate::class::Class::ALL.iter().zip(classes) {
                if c.index() > 0 {
                    out.push(b',');
                }
                out.push(b'"');
                out.extend_from_slice(c.name().as_bytes());
                int(out, b"\":{\"admitted\":", f.admitted);
                int(out, b",\"shed\":", f.shed);
                int(out, b",\"in_flight\":", u64::from(f.in_flight));
                out.push(b'}');
            }
            out.push(b'}');
        }
        out.push(b'}');
    }
    out.push(b'}');
}

/// Closes the window's object and writes `,"latency_ms":{…}` with these percentiles (`null`
/// without samples).
fn write_latency(out: &mut Vec<u8>, percentiles: &[(&[u8], Option<u64>)]) {
    out.extend_from_slice(b"},\"latency_ms\":{");
    for (i, (key, v)) in percentiles.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(key);
        out.extend_from_slice(b"\":");
        write_opt(out, v.map(Num::Int));
    }
    out.push(b'}');
}

/// Writes one server object (see [`render_breaker_json`]).
fn write_server_json(out: &mut Vec<u8>, s: &ServerEntry) {
    let v = &s.view;
    let (w, t) = (&v.window, &v.totals);
    out.extend_from_slice(b"{\"address\":");
    json_str(out, &s.address);
    out.extend_from_slice(match s.backup {
        true => b",\"backup\":true,\"state\":\"",
        false => b",\"backup\":false,\"state\":\"",
    });
    out.extend_from_slice(place_name(v.state).as_bytes());
    out.extend_from_slice(b"\",\"forced\":");
    write_forced(out, v.forced);
    out.extend_from_slice(b",\"since\":");
    write_num(out, secs(v.since_ms));
    out.extend_from_slice(b",\"returns_at\":");
    write_opt(out, v.retry_at_ms.map(secs));
    out.extend_from_slice(b",\"ramp_share\":");
    write_num(out, share(v.ramp_share));
    write_window(out, w);
    let l = &v.latency;
    write_latency(out, &[(b"p50", l.p50), (b"p90", l.p90), (b"p99", l.p99)]);
    int(out, b",\"cooldown_ms\":", v.cooldown_ms);
    int(out, b",\"ejections\":", t.opened);
    int(out, b",\"totals\":{\"requests\":", t.requests);
    int(out, b",\"failures\":", t.failures);
    int(out, b",\"probes\":", t.probes);
    int(out, b",\"returns\":", t.closed);
    out.extend_from_slice(b"},\"last_transition\":");
    json_str(out, &v.last_transition);
    write_tripped(out, v.tripped.as_ref());
    out.extend_from_slice(b",\"out_since\":");
    write_opt(out, v.episode_ms.map(secs));
    write_history(out, v.history.as_ref());
    out.push(b'}');
}

/// Writes `,"history":{…}` when the view has one: `start` (Unix seconds, when the first
/// point's interval began), `step` (seconds) and, per point oldest first (the last one the
/// current interval, still filling), `requests`, `failures`, `slow` and `state_codes` (the
/// worst state seen, as `state_code`).
fn write_history(out: &mut Vec<u8>, h: Option<&crate::history::HistoryView>) {
    let Some(h) = h else { return };
    out.extend_from_slice(b",\"history\":{\"start\":");
    write_num(out, secs(h.start_ms));
    int(out, b",\"step\":", h.step_ms / 1000);
    let column = |out: &mut Vec<u8>, key: &[u8], f: &dyn Fn(&crate::history::Point) -> u64| {
        out.extend_from_slice(key);
        for (i, p) in h.points.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_num(out, Num::Int(f(p)));
        }
        out.push(b']');
    };
    column(out, b",\"requests\":[", &|p| u64::from(p.requests));
    column(out, b",\"failures\":[", &|p| u64::from(p.failures));
    column(out, b",\"slow\":[", &|p| u64::from(p.slow));
    column(out, b",\"state_codes\":[", &|p| u64::from(p.state));
    out.push(b'}');
}

/// Writes `,"tripped":` and the window that opened the breaker, or `null`.
fn write_tripped(out: &mut Vec<u8>, t: Option<&crate::snapshot::TripView>) {
    let Some(t) = t else {
        out.extend_from_slice(b",\"tripped\":null");
        return;
    };
    out.extend_from_slice(b",\"tripped\":{\"by\":\"");
    out.extend_from_slice(t.cause.name().as_bytes());
    out.extend_from_slice(b"\",\"threshold\":");
    if t.cause.is_rate() {
        write_num(out, share(t.threshold));
    } else {
        int(out, b"", u64::from(t.threshold));
    }
    out.extend_from_slice(match t.suspected {
        true => b",\"suspected\":true",
        false => b",\"suspected\":false",
    });
    write_window(out, &t.window);
    out.extend_from_slice(b"}}");
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::retry_budget::RetryBudgetView;
    use crate::snapshot::{Forced, LatencyView, State, Totals, TripCause, TripView, WindowView};
    use serde_json::Value;

    /// docs/status.md's example breaker (Status location).
    pub(crate) fn example_entry() -> Entry {
        Entry {
            upstream: "api".into(),
            route: "checkout".into(),
            view: BreakerView {
                state: State::Open,
                dry_run: false,
                forced: None,
                since_ms: 1_764_484_800_123,
                episode_ms: Some(1_764_484_790_500),
                retry_at_ms: Some(1_764_484_830_500),
                window: WindowView {
                    seconds: 10,
                    requests: 40,
                    failures: 22,
                    slow: 3,
                },
                latency: LatencyView {
                    p50: Some(41),
                    p90: Some(400),
                    p95: Some(612),
                    p99: Some(900),
                },
                cooldown_ms: 30_000,
                consecutive_probe_successes: 0,
                probes_needed: 3,
                ramp_share: 10_000,
                suspect_until_ms: None,
                totals: Totals {
                    requests: 123_456,
                    failures: 812,
                    slow: 77,
                    short_circuited: 5120,
                    probes: 4,
                    tls_errors: 0,
                    retry_after_503: 0,
                    opened: 3,
                    half_opened: 2,
                    closed: 1,
                    ramp_shed: 0,
                    explained: 0,
                },
                last_transition: "failure rate 55% (22/40) >= 50% in 10s".into(),
                tripped: Some(TripView {
                    cause: TripCause::FailureRate,
                    threshold: 5000,
                    suspected: false,
                    window: WindowView {
                        seconds: 10,
                        requests: 40,
                        failures: 22,
                        slow: 3,
                    },
                }),
                history: None,
            },
            servers: Vec::new(),
            retry: None,
            probe_uri: None,
            fingerprint: None,
            limit: None,
        }
    }

    /// A fresh closed breaker: no latency samples, no probe scheduled.
    pub(crate) fn closed_entry() -> Entry {
        Entry {
            upstream: "backend".into(),
            route: DEFAULT_ROUTE.into(),
            view: BreakerView {
                state: State::Closed,
                dry_run: true,
                forced: None,
                since_ms: 1_764_484_000_000,
                episode_ms: None,
                retry_at_ms: None,
                window: WindowView {
                    seconds: 30,
                    ..WindowView::default()
                },
                latency: LatencyView::default(),
                cooldown_ms: 5000,
                consecutive_probe_successes: 0,
                probes_needed: 0,
                ramp_share: 10_000,
                suspect_until_ms: None,
                totals: Totals::default(),
                last_transition: String::new(),
                tripped: None,
                history: None,
            },
            servers: Vec::new(),
            retry: None,
            probe_uri: None,
            fingerprint: None,
            limit: None,
        }
    }

    /// A closed breaker with an adaptive limit that has measured its origin.
    pub(crate) fn limited_entry() -> Entry {
        Entry {
            limit: Some(LimitStatus {
                limit: 12,
                in_flight: 7,
                min_latency_ms: 5.25,
                last_latency_ms: 31.0,
                shed: 4321,
                capped: 21,
                classes: None,
            }),
            ..closed_entry()
        }
    }

    /// An upstream's own breaker with two servers, one of them ejected, and a retry budget.
    pub(crate) fn pool_entry() -> Entry {
        let mut e = closed_entry();
        e.upstream = "api".into();
        e.view.dry_run = false;
        let mut out = example_entry().view;
        out.window = WindowView {
            seconds: 10,
            requests: 10,
            failures: 6,
            slow: 0,
        };
        out.cooldown_ms = 10_000;
        out.retry_at_ms = Some(1_764_484_810_000);
        out.totals.opened = 2;
        out.totals.closed = 1;
        out.last_transition = "failure rate 60% (6/10) >= 50% in 10s".into();
        e.servers = vec![
            ServerEntry {
                address: "10.0.0.1:8080".into(),
                backup: false,
                view: out,
            },
            ServerEntry {
                address: "10.0.0.2:8080".into(),
                backup: true,
                view: closed_entry().view,
            },
        ];
        e.retry = Some(RetryBudgetView {
            window_s: 10,
            firsts: 400,
            retries: 12,
            allowance: 110,
            retries_total: 30,
            retries_denied_total: 4,
            firsts_total: 9000,
        });
        e
    }

    #[test]
    fn json_shows_servers_and_retries_under_the_upstream() {
        let e = pool_entry();
        let v = parse(&render_breaker_json(&e));
        let s = &v["servers"];
        assert_eq!(s.as_array().unwrap().len(), 2);
        assert_eq!(s[0]["address"], "10.0.0.1:8080");
        assert_eq!(s[0]["backup"], false);
        assert_eq!(s[0]["state"], "ejected");
        assert!(s[0]["forced"].is_null());
        assert_eq!(s[0]["returns_at"].as_f64(), Some(1_764_484_810.0));
        assert_eq!(s[0]["window"]["requests"], 10);
        assert_eq!(s[0]["window"]["failure_rate"].as_f64(), Some(0.6));
        assert_eq!(s[0]["cooldown_ms"], 10_000);
        assert_eq!(s[0]["ejections"], 2);
        assert_eq!(s[0]["totals"]["returns"], 1);
        assert_eq!(
            s[0]["last_transition"],
            "failure rate 60% (6/10) >= 50% in 10s"
        );
        assert_eq!(s[0]["latency_ms"]["p90"], 400);
        assert_eq!(s[0]["latency_ms"]["p99"], 900);
        assert_eq!(s[0].as_object().unwrap().len(), 15);
        assert_eq!(s[0]["ramp_share"].as_f64(), Some(1.0));
        // An ejected server shows the window that ejected it, an in server none.
        assert_eq!(s[0]["tripped"]["by"], "failure_rate");
        assert_eq!(s[0]["tripped"]["window"]["failures"], 22);
        assert!(s[1]["tripped"].is_null());
        assert_eq!(s[1]["state"], "in");
        assert_eq!(s[1]["backup"], true);
        assert!(s[1]["returns_at"].is_null());
        let r = &v["retries"];
        assert_eq!(r["window"]["seconds"], 10);
        assert_eq!(r["window"]["first_attempts"], 400);
        assert_eq!(r["window"]["retries"], 12);
        assert_eq!(r["window"]["allowance"], 110);
        assert_eq!(
            (r["total"].as_u64(), r["denied"].as_u64()),
            (Some(30), Some(4))
        );
        // The breaker's own fields come first, unchanged.
        assert_eq!(v.as_object().unwrap().len(), 21);
        let mut half = pool_entry();
        half.servers[0].view.state = crate::snapshot::State::HalfOpen;
        half.retry = None;
        let v = parse(&render_breaker_json(&half));
        assert_eq!(v["servers"][0]["state"], "probing");
        assert!(v.get("retries").is_none());
    }

    pub(crate) fn example_zone() -> ZoneView {
        ZoneView {
            name: "cb".into(),
            size: 10_485_760,
            used: 8192,
            alloc_failures: 0,
            keys: None,
            module_version: "1.2.3",
            nginx_version: "1.28.3",
            control: false,
            fleet_json: None,
            stream: false,
            stream_json: None,
        }
    }

    /// The base format's example (0.1.0's page), whitespace removed.
    const BASE_EXAMPLE: &str = r#"{"zone":"cb","size":10485760,"used":8192,"alloc_failures":0,
 "breakers":[{"upstream":"api","route":"checkout","state":"open","state_code":2,
   "dry_run":false,"forced":null,"since":1764484800.123,"retry_at":1764484830.5,
   "window":{"seconds":10,"requests":40,"failures":22,"slow":3,"failure_rate":0.55,"slow_rate":0.075},
   "latency_ms":{"p50":41,"p95":612,"p99":900},
   "cooldown_ms":30000,"consecutive_probe_successes":0,
   "totals":{"requests":123456,"failures":812,"short_circuited":5120,"probes":4,
             "tls_errors":0,"retry_after_503":0,"opened":3,"half_opened":2,"closed":1},
   "last_transition":"failure rate 55% (22/40) >= 50% in 10s"}]}"#;

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).expect("valid JSON")
    }

    /// The base example, with `module_version` where the page adds it.
    #[test]
    fn json_matches_the_base_example_byte_for_byte() {
        let out = render_json(&example_zone(), &[example_entry()]);
        let spec: String = BASE_EXAMPLE
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>()
            .concat();
        let expected = spec
            .replacen(
                r#""alloc_failures":0,"breakers""#,
                r#""alloc_failures":0,"module_version":"1.2.3","breakers""#,
                1,
            )
            .replacen(
                r#""consecutive_probe_successes":0,"totals""#,
                r#""consecutive_probe_successes":0,"probes_needed":3,"ramp_share":1.0,"probe_uri":null,"totals""#,
                1,
            )
            .replacen(
                r#""closed":1},"#,
                r#""closed":1,"ramp_shed":0,"explained":0},"#,
                1,
            )
            .replacen(
                r#">= 50% in 10s"}]}"#,
                concat!(
                    r#">= 50% in 10s","tripped":{"by":"failure_rate","threshold":0.5,"#,
                    r#""suspected":false,"window":{"seconds":10,"requests":40,"failures":22,"#,
                    r#""slow":3,"failure_rate":0.55,"slow_rate":0.075}},"#,
                    r#""open_since":1764484790.5}]}"#
                ),
                1,
            );
        assert_eq!(
            expected.len(),
            spec.len() + 25 + 52 + 14 + 14 + 165 + 26,
            "every addition made"
        );
        assert_eq!(std::str::from_utf8(&out).unwrap(), expected);
    }

    #[test]
    fn keys_say_how_many_are_open_listed_or_not() {
        let zone = ZoneView {
            keys: Some(KeysView {
                used: 9,
                capacity: 1024,
                promoted: 5,
                listed: 1,
                unlisted: 4,
                open: 3,
            }),
            ..example_zone()
        };
        let v = parse(&render_json(&zone, &[]));
        let k = &v["keys"];
        assert_eq!(k.as_object().unwrap().len(), 6);
        assert_eq!(
            (&k["listed"], &k["unlisted"], &k["open"]),
            (&1.into(), &4.into(), &3.into())
        );
        let text = String::from_utf8(render_prometheus(&zone, &[])).unwrap();
        assert!(
            text.lines()
                .any(|l| l == r#"nginx_circuit_breaker_zone_keys_open{zone="cb"} 3"#),
            "{text}"
        );
    }

    #[test]
    fn json_open_breaker_field_by_field() {
        let v = parse(&render_json(&example_zone(), &[example_entry()]));
        assert_eq!(v["zone"], "cb");
        assert_eq!(v["size"], 10_485_760);
        assert_eq!(v["used"], 8192);
        assert_eq!(v["alloc_failures"], 0);
        assert_eq!(v["module_version"], "1.2.3");
        assert_eq!(v.as_object().unwrap().len(), 6);
        let b = &v["breakers"][0];
        assert_eq!(v["breakers"].as_array().unwrap().len(), 1);
        assert_eq!(b["upstream"], "api");
        assert_eq!(b["route"], "checkout");
        assert_eq!(b["state"], "open");
        assert_eq!(b["state_code"], 2);
        assert_eq!(b["dry_run"], false);
        assert!(b["forced"].is_null());
        assert_eq!(b["since"].as_f64(), Some(1_764_484_800.123));
        assert_eq!(b["retry_at"].as_f64(), Some(1_764_484_830.5));
        let w = &b["window"];
        assert_eq!(w["seconds"], 10);
        assert_eq!(w["requests"], 40);
        assert_eq!(w["failures"], 22);
        assert_eq!(w["slow"], 3);
        assert_eq!(w["failure_rate"].as_f64(), Some(0.55));
        assert_eq!(w["slow_rate"].as_f64(), Some(0.075));
        assert_eq!(b["latency_ms"]["p50"], 41);
        assert_eq!(b["latency_ms"]["p95"], 612);
        assert_eq!(b["latency_ms"]["p99"], 900);
        assert_eq!(b["cooldown_ms"], 30_000);
        assert_eq!(b["consecutive_probe_successes"], 0);
        let t = &b["totals"];
        assert_eq!(t["requests"], 123_456);
        assert_eq!(t["failures"], 812);
        assert_eq!(t["short_circuited"], 5120);
        assert_eq!(t["probes"], 4);
        assert_eq!(t["tls_errors"], 0);
        assert_eq!(t["retry_after_503"], 0);
        assert_eq!(t["opened"], 3);
        assert_eq!(t["half_opened"], 2);
        assert_eq!(t["closed"], 1);
        assert_eq!(t["ramp_shed"], 0);
        assert_eq!(t["explained"], 0);
        assert_eq!(t.as_object().unwrap().len(), 11);
        assert_eq!(
            b["last_transition"],
            "failure rate 55% (22/40) >= 50% in 10s"
        );
        assert_eq!(b["probes_needed"], 3);
        assert_eq!(b["ramp_share"].as_f64(), Some(1.0));
        assert!(b["probe_uri"].is_null());
        let tr = &b["tripped"];
        assert_eq!(tr["by"], "failure_rate");
        assert_eq!(tr["threshold"].as_f64(), Some(0.5));
        assert_eq!(tr["suspected"], false);
        assert_eq!(tr["window"], b["window"], "tripped by this very window");
        assert_eq!(tr.as_object().unwrap().len(), 4);
        assert_eq!(b.as_object().unwrap().len(), 19);
        assert_eq!(b["open_since"].as_f64(), Some(1_764_484_790.5));
    }

    #[test]
    fn json_closed_breaker_field_by_field() {
        let v = parse(&render_breaker_json(&closed_entry()));
        assert_eq!(v["upstream"], "backend");
        assert_eq!(v["route"], "default");
        assert_eq!(v["state"], "closed");
        assert_eq!(v["state_code"], 0);
        assert_eq!(v["dry_run"], true);
        assert!(v["forced"].is_null());
        assert_eq!(v["since"].as_f64(), Some(1_764_484_000.0));
        assert!(v["since"].is_f64(), "since stays a float for whole seconds");
        assert!(v["retry_at"].is_null());
        let w = &v["window"];
        assert_eq!(w["seconds"], 30);
        assert_eq!(w["requests"], 0);
        assert_eq!(w["failure_rate"].as_f64(), Some(0.0));
        assert_eq!(w["slow_rate"].as_f64(), Some(0.0));
        assert!(v["latency_ms"]["p50"].is_null());
        assert!(v["latency_ms"]["p95"].is_null());
        assert!(v["latency_ms"]["p99"].is_null());
        assert_eq!(v["cooldown_ms"], 5000);
        assert_eq!(v["totals"]["requests"], 0);
        assert_eq!(v["totals"]["closed"], 0);
        assert_eq!(v["last_transition"], "");
    }

    #[test]
    fn json_half_open_forced_partial_latency() {
        let mut e = example_entry();
        e.view.state = State::HalfOpen;
        e.view.forced = Some(Forced::Closed);
        e.view.latency.p99 = None;
        e.view.consecutive_probe_successes = 2;
        let v = parse(&render_breaker_json(&e));
        assert_eq!(v["state"], "half_open");
        assert_eq!(v["state_code"], 1);
        assert_eq!(v["forced"], "closed");
        assert_eq!(v["latency_ms"]["p50"], 41);
        assert!(v["latency_ms"]["p99"].is_null());
        assert_eq!(v["consecutive_probe_successes"], 2);
        e.view.forced = Some(Forced::Open);
        assert_eq!(parse(&render_breaker_json(&e))["forced"], "open");
    }

    #[test]
    fn json_recovery_fields() {
        let mut e = closed_entry();
        e.view.ramp_share = 1234;
        e.view.totals.ramp_shed = 77;
        e.view.totals.explained = 12;
        e.probe_uri = Some("/health?deep=\"1\"".into());
        let v = parse(&render_breaker_json(&e));
        assert_eq!(v["probes_needed"], 0);
        assert_eq!(v["ramp_share"].as_f64(), Some(0.1234));
        assert_eq!(v["probe_uri"], "/health?deep=\"1\"");
        assert_eq!(v["totals"]["ramp_shed"], 77);
        assert_eq!(v["totals"]["explained"], 12);
        e.view.ramp_share = 0;
        let out = String::from_utf8(render_breaker_json(&e)).unwrap();
        assert!(out.contains(r#""ramp_share":0.0,"#), "{out}");
        e.view.ramp_share = 500;
        let out = String::from_utf8(render_breaker_json(&e)).unwrap();
        assert!(out.contains(r#""ramp_share":0.05,"#), "{out}");
    }

    #[test]
    fn breaker_json_is_the_array_element() {
        let entries = [example_entry(), closed_entry()];
        let page = render_json(&example_zone(), &entries);
        let v = parse(&page);
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(v["breakers"][i], parse(&render_breaker_json(e)));
        }
        let text = std::str::from_utf8(&page).unwrap();
        let one = String::from_utf8(render_breaker_json(&entries[1])).unwrap();
        assert!(text.contains(&one));
    }

    #[test]
    fn json_empty_breakers() {
        let mut zone = ZoneView {
            name: "z".into(),
            size: 1,
            used: 2,
            alloc_failures: 3,
            keys: None,
            module_version: "0.2.0-rc.1+g\"x\"",
            nginx_version: "1.22.1",
            control: false,
            fleet_json: None,
            stream: false,
            stream_json: None,
        };
        assert_eq!(
            std::str::from_utf8(&render_json(&zone, &[])).unwrap(),
            r#"{"zone":"z","size":1,"used":2,"alloc_failures":3,"module_version":"0.2.0-rc.1+g\"x\"","breakers":[]}"#
        );
        zone.control = true;
        assert_eq!(
            std::str::from_utf8(&render_json(&zone, &[])).unwrap(),
            r#"{"zone":"z","size":1,"used":2,"alloc_failures":3,"module_version":"0.2.0-rc.1+g\"x\"","control":true,"breakers":[]}"#
        );
    }

    #[test]
    fn json_control_flag() {
        let zone = ZoneView {
            control: true,
            ..example_zone()
        };
        let v = parse(&render_json(&zone, &[example_entry()]));
        assert_eq!(v["control"], true);
        assert_eq!(
            v["breakers"][0],
            parse(&render_breaker_json(&example_entry()))
        );
        let v = parse(&render_json(&example_zone(), &[example_entry()]));
        assert!(v.get("control").is_none(), "left out without control=on");
    }

    #[test]
    fn dashboard_is_self_contained() {
        let page = DASHBOARD_HTML;
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.len() < 48 * 1024, "{} bytes", page.len());
        let lower = page.to_ascii_lowercase();
        // Nothing fetched from elsewhere: no absolute or scheme-relative address anywhere, no
        // element that loads a file, and a policy that forbids it even if one slipped in.
        for needle in [
            "http://",
            "https://",
            "src=\"//",
            "href=\"//",
            "src='//",
            "href='//",
            "url(",
            "@import",
            "<link",
            "<iframe",
            "<img",
            "<object",
            "<embed",
            "<script src",
            "import(",
            "websocket",
        ] {
            assert!(!lower.contains(needle), "the page contains {needle:?}");
        }
        assert_eq!(lower.matches("<script").count(), 1, "one inline script");
        // Its policy comes in a header (see `headers`): a <meta> one cannot forbid framing.
        assert!(!lower.contains("http-equiv"));
        // It polls this same location, whatever its path, and posts control requests there.
        assert!(page.contains("'format', 'json'"));
        assert!(page.contains("method: 'POST'"));
        assert!(page.contains("confirm("));
        // Its control requests carry what another site's page cannot send.
        assert!(page.contains(&format!(
            "'{}': '{}'",
            guard::CONTROL_HEADER,
            guard::CONTROL_VALUE
        )));
    }

    #[test]
    fn json_with_the_stream_zones() {
        let stream = render_json(
            &ZoneView {
                name: "circuit_breaker_stream".into(),
                ..example_zone()
            },
            &[example_entry()],
        );
        let zone = ZoneView {
            stream_json: Some(vec![stream.clone(), stream]),
            ..example_zone()
        };
        let v = parse(&render_json(&zone, &[closed_entry()]));
        assert_eq!(v["stream"][1]["zone"], "circuit_breaker_stream");
        assert_eq!(v["stream"][0]["breakers"][0]["state"], "open");
        assert_eq!(v["breakers"][0]["state"], "closed");
        // Without stream breakers, no stream member.
        assert!(parse(&render_json(&example_zone(), &[]))
            .get("stream")
            .is_none());
    }

    #[test]
    fn json_in_a_fleet() {
        let mut e = example_entry();
        e.fingerprint = Some(0x9f3c_2a1b_00d4_e5f6);
        e.view.suspect_until_ms = Some(1_764_484_801_250);
        let mut closed = closed_entry();
        closed.fingerprint = Some(1);
        let zone = ZoneView {
            fleet_json: Some(r#"{"instance":"10.0.0.5:80","peers":[]}"#.into()),
            ..example_zone()
        };
        let out = render_json(&zone, &[e, closed]);
        let text = std::str::from_utf8(&out).unwrap();
        assert!(
            text.ends_with(r#"}],"fleet":{"instance":"10.0.0.5:80","peers":[]}}"#),
            "{text}"
        );
        assert!(text.contains(
            r#"0.075}},"open_since":1764484790.5,"fingerprint":"9f3c2a1b00d4e5f6","suspicious":true,"suspicious_until":1764484801.25}"#
        ), "{text}");
        let v = parse(&out);
        assert_eq!(v["breakers"][1]["fingerprint"], "0000000000000001");
        assert_eq!(v["breakers"][1]["suspicious"], false);
        assert!(v["breakers"][1]["suspicious_until"].is_null());
        assert_eq!(v["fleet"]["instance"], "10.0.0.5:80");
        // Outside a fleet the page is the base format: no fleet member, no fingerprint.
        let alone = parse(&render_json(&example_zone(), &[example_entry()]));
        assert!(alone.get("fleet").is_none());
        assert!(alone["breakers"][0].get("fingerprint").is_none());
        assert!(alone["breakers"][0].get("suspicious").is_none());
    }

    #[test]
    fn json_escapes_odd_names() {
        let odd = "we\"ird\\na\nme\t\u{1}\u{7f}é💥</script>";
        let mut e = closed_entry();
        e.upstream = odd.into();
        e.route = "r\"\r\n".into();
        e.view.last_transition = "line1\nline2 \"quoted\" \\".into();
        let zone = ZoneView {
            name: "z\"one\\".into(),
            ..example_zone()
        };
        let out = render_json(&zone, &[e]);
        assert!(!out.iter().any(|&b| b < 0x20), "no raw control bytes");
        let v = parse(&out);
        assert_eq!(v["zone"], "z\"one\\");
        assert_eq!(v["breakers"][0]["upstream"], odd);
        assert_eq!(v["breakers"][0]["route"], "r\"\r\n");
        assert_eq!(
            v["breakers"][0]["last_transition"],
            "line1\nline2 \"quoted\" \\"
        );
    }

    #[test]
    fn json_limit_classes_once_in_use() {
        let mut e = limited_entry();
        let l = e.limit.as_mut().unwrap();
        l.classes = Some([
            ClassFigures {
                admitted: 90,
                shed: 0,
                in_flight: 3,
            },
            ClassFigures::default(),
            ClassFigures {
                admitted: 40,
                shed: 4321,
                in_flight: 4,
            },
        ]);
        let out = String::from_utf8(render_breaker_json(&e)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let c = &v["limit"]["classes"];
        assert_eq!(c["critical"]["admitted"], 90);
        assert_eq!(c["critical"]["in_flight"], 3);
        assert_eq!(c["default"]["shed"], 0);
        assert_eq!(c["sheddable"]["shed"], 4321);
        assert_eq!(c.as_object().unwrap().len(), 3);
    }

    #[test]
    fn json_limit_object_follows_the_breaker() {
        let out = String::from_utf8(render_breaker_json(&limited_entry())).unwrap();
        assert!(
            out.ends_with(r#","last_transition":"","tripped":null,"open_since":null,"limit":{"limit":12,"in_flight":7,"min_latency_ms":5.25,"last_latency_ms":31.0,"shed":4321,"capped":21}}"#),
            "{out}"
        );
        let v = parse(out.as_bytes());
        assert_eq!(
            v.as_object().unwrap().len(),
            15 + 3 + 1 + 1,
            "with the recovery fields and tripped"
        );
        let mut fresh = limited_entry();
        fresh.limit = Some(LimitStatus {
            limit: 20,
            ..LimitStatus::default()
        });
        let v = parse(&render_breaker_json(&fresh));
        assert!(
            v["limit"]["min_latency_ms"].is_null(),
            "nothing measured yet"
        );
        assert!(v["limit"]["last_latency_ms"].is_null());
        assert_eq!(v["limit"]["limit"], 20);
        let v = parse(&render_breaker_json(&closed_entry()));
        assert!(v.get("limit").is_none(), "no limit, no object");
    }

    fn rate(part: u64, whole: u64) -> f64 {
        rate_e4(part, whole) as f64 / 10_000.0
    }

    #[test]
    fn rates_round_to_four_decimals() {
        assert_eq!(rate(0, 0), 0.0);
        assert_eq!(rate(22, 40), 0.55);
        assert_eq!(rate(3, 40), 0.075);
        assert_eq!(rate(1, 3), 0.3333);
        assert_eq!(rate(2, 3), 0.6667);
        assert_eq!(rate(1, 20_000), 0.0001); // exactly half a unit rounds up
        assert_eq!(rate(1, 20_001), 0.0);
        assert_eq!(rate(7, 7), 1.0);
        assert_eq!(rate(u64::MAX, u64::MAX), 1.0);
        assert_eq!(rate(u64::MAX / 3, u64::MAX), 0.3333);
        let mut e = closed_entry();
        e.view.window.requests = 3;
        e.view.window.failures = 2;
        e.view.window.slow = 1;
        let out = String::from_utf8(render_breaker_json(&e)).unwrap();
        assert!(
            out.contains(r#""failure_rate":0.6667,"slow_rate":0.3333"#),
            "{out}"
        );
    }

    #[test]
    fn seconds_keep_millisecond_precision() {
        for (ms, text) in [
            (0, "0.0"),
            (1, "0.001"),
            (1_764_484_800_123, "1764484800.123"),
            (1_764_484_830_500, "1764484830.5"),
            (1_764_484_830_050, "1764484830.05"),
            (1_764_484_830_000, "1764484830.0"),
            (4_102_444_800_999, "4102444800.999"),
        ] {
            let mut e = closed_entry();
            e.view.since_ms = ms;
            e.view.retry_at_ms = Some(ms);
            let out = String::from_utf8(render_breaker_json(&e)).unwrap();
            assert!(
                out.contains(&format!(r#""since":{text},"retry_at":{text},"#)),
                "{ms}: {out}"
            );
        }
    }

    #[test]
    fn json_history_when_asked_for() {
        let mut e = example_entry();
        let out = String::from_utf8(render_breaker_json(&e)).unwrap();
        assert!(!out.contains("history"), "none unless asked for");
        let p = |requests, failures, state| crate::history::Point {
            requests,
            failures,
            slow: 1,
            state,
        };
        e.view.history = Some(crate::history::HistoryView {
            start_ms: 1_764_484_770_000,
            step_ms: 10_000,
            points: vec![p(40, 2, 0), p(35, 20, 2), p(0, 0, 2)],
        });
        let out = String::from_utf8(render_breaker_json(&e)).unwrap();
        assert!(
            out.ends_with(concat!(
                r#""open_since":1764484790.5,"history":{"start":1764484770.0,"step":10,"#,
                r#""requests":[40,35,0],"failures":[2,20,0],"slow":[1,1,1],"#,
                r#""state_codes":[0,2,2]}}"#
            )),
            "{out}"
        );
        let mut pool = pool_entry();
        pool.servers[0].view.history = e.view.history.clone();
        let v = parse(&render_breaker_json(&pool));
        assert_eq!(v["servers"][0]["history"]["requests"][1], 35);
        assert!(v["servers"][1].get("history").is_none());
    }

    #[test]
    fn size_hints_cover_every_part() {
        let mut fleet = pool_entry();
        fleet.fingerprint = Some(u64::MAX);
        fleet.view.suspect_until_ms = Some(u64::MAX);
        fleet.limit = limited_entry().limit;
        fleet.view.tripped = example_entry().view.tripped;
        fleet.probe_uri = Some("/health".into());
        let full = crate::history::HistoryView {
            start_ms: u64::MAX,
            step_ms: 10_000,
            points: vec![
                crate::history::Point {
                    requests: u32::MAX,
                    failures: u32::MAX,
                    slow: u32::MAX,
                    state: 2,
                };
                crate::history::POINTS
            ],
        };
        fleet.view.history = Some(full.clone());
        for s in &mut fleet.servers {
            s.view.history = Some(full.clone());
        }
        for e in [
            example_entry(),
            closed_entry(),
            limited_entry(),
            pool_entry(),
            fleet,
        ] {
            let out = render_breaker_json(&e);
            assert!(
                out.len() <= json_size_hint(&e),
                "{} bytes, hint {}: {}",
                out.len(),
                json_size_hint(&e),
                String::from_utf8_lossy(&out)
            );
        }
    }

    /// Many breakers, as a full zone might hold.
    pub(crate) fn many_entries(n: usize) -> Vec<Entry> {
        (0..n)
            .map(|i| {
                let mut e = if i % 2 == 0 {
                    example_entry()
                } else {
                    closed_entry()
                };
                e.upstream = format!("upstream_{}", i / 10);
                e.route = if i % 10 == 0 {
                    DEFAULT_ROUTE.into()
                } else {
                    format!("route_{i}")
                };
                e.view.totals.requests += i as u64;
                e
            })
            .collect()
    }

    #[test]
    fn json_renders_ten_thousand_breakers() {
        let entries = many_entries(10_000);
        let zone = example_zone();
        // Timing lives in `cargo bench -p circuit-breaker-core --bench status`.
        let out = render_json(&zone, &entries);
        let v = parse(&out);
        let breakers = v["breakers"].as_array().unwrap();
        assert_eq!(breakers.len(), 10_000);
        assert_eq!(breakers[9_999]["route"], "route_9999");
        assert_eq!(breakers[10]["route"], "default");
        assert_eq!(breakers[10]["upstream"], "upstream_1");
    }
}
