//! The fleet's part of the status page: a JSON object for the page's `"fleet"` member and
//! Prometheus families, rendered from a [`FleetStore`] by the worker that owns it (or from a
//! copy it publishes). Instants become Unix seconds with millisecond precision, as elsewhere
//! on the status page; the store's own clock is monotonic.

use super::bus::BusStats;
use super::fingerprint::hex;
use super::store::{BreakerFleetView, Counters, FleetConfig, FleetStore, PeerStats};
use crate::snapshot::Clocks;

/// What the fleet's part of the status page shows, gathered once from the store and then
/// rendered as JSON and as Prometheus text: each peer's figures and each breaker's view
/// (its suspicion and probing order among them) are worked out once for both.
pub struct Figures<'a> {
    self_id: &'a str,
    cfg: FleetConfig,
    counters: Counters,
    keyed: usize,
    families: Vec<(&'a str, u64, u64)>,
    peers: Vec<PeerStats>,
    views: Vec<((&'a str, &'a str), BreakerFleetView)>,
}

impl<'a> Figures<'a> {
    /// The store's figures at `now_ms`.
    pub fn gather(s: &'a FleetStore, now_ms: u64) -> Self {
        Figures {
            self_id: s.self_id(),
            cfg: *s.config(),
            counters: s.counters(),
            keyed: s.keyed(),
            families: s.families(),
            peers: s.peer_stats(now_ms),
            views: s
                .breakers()
                .enumerate()
                .filter_map(|(b, names)| Some((names, s.breaker_view(now_ms, b)?)))
                .collect(),
        }
    }
}

fn push_u64(out: &mut String, v: u64) {
    out.push_str(itoa::Buffer::new().format(v));
}

fn push_bool(out: &mut String, v: bool) {
    out.push_str(if v { "true" } else { "false" });
}

fn json_str(out: &mut String, s: &str) {
    // What JSON requires escaping, as serde_json escapes it; most names need none.
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    // serde_json escapes exactly what JSON requires; a `&str` always serializes.
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
}

fn json_time(out: &mut String, t: Option<u64>, c: Clocks) {
    match t {
        Some(t) => {
            let w = c.wall(t);
            push_u64(out, w / 1000);
            let ms = w % 1000;
            out.push('.');
            out.push_str(if ms < 10 {
                "00"
            } else if ms < 100 {
                "0"
            } else {
                ""
            });
            push_u64(out, ms);
        }
        None => out.push_str("null"),
    }
}

/// `"key":value` after a comma, for a JSON object's numbers.
fn json_num(out: &mut String, key: &str, v: u64) {
    out.push_str(",\"");
    out.push_str(key);
    out.push_str("\":");
    push_u64(out, v);
}

/// `{"instance","interval_ms","fanout","expire_ms","pushes","dropped":{"unknown_origin",
/// "unknown_breaker","stale","keyed_left_out"},"keyed":{"held","families":[{"name",
/// "fingerprint","disagreeing"}]},"peers":[{"id","reachable","last_exchange","exchanges",
/// "failures","parse_errors","auth_failures","tls_failures","pokes","opinions",
/// "disagreements"}],"breakers":[{"upstream","route",
/// "fingerprint","suspicious","suspicious_until","peers_agreeing","peers_open",
/// "peers_disagreeing","peers_recovered","designated_prober","probe_from","round"}]}`.
///
/// `last_exchange`, `suspicious_until` and `probe_from` are Unix seconds or `null`;
/// `fingerprint` is 16 hex digits; `designated_prober` is an instance id or `null`. Keyed
/// breakers are counted (`"held"`), not listed: there may be a thousand; their families are,
/// with the records of peers whose family has another fingerprint (`"disagreeing"`).
fn families_json(out: &mut String, f: &Figures<'_>) {
    for (i, (name, fp, disagreeing)) in f.families.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        json_str(out, name);
        out.push_str(",\"fingerprint\":\"");
        out.push_str(&hex(*fp));
        out.push('"');
        json_num(out, "disagreeing", *disagreeing);
        out.push('}');
    }
}

/// `"transport"` says how the fleet exchanges (`"peers"`: pulls from a peer list; `"nats"`:
/// a bus), and a fleet on a bus has a `"bus"` member ([`super::bus::status::render_json`]),
/// its members listed as `"peers"`.
pub fn render_json(f: &Figures<'_>, c: Clocks, bus: Option<&BusStats>) -> String {
    let mut out = String::with_capacity(256 + 256 * f.peers.len() + 384 * f.views.len());
    out.push_str("{\"instance\":");
    json_str(&mut out, f.self_id);
    out.push_str(if bus.is_some() {
        ",\"transport\":\"nats\""
    } else {
        ",\"transport\":\"peers\""
    });
    let (cfg, k) = (&f.cfg, &f.counters);
    json_num(&mut out, "interval_ms", cfg.interval_ms);
    json_num(&mut out, "fanout", cfg.fanout as u64);
    json_num(&mut out, "expire_ms", cfg.expire_ms);
    json_num(&mut out, "pushes", k.pushes);
    out.push_str(",\"dropped\":{\"unknown_origin\":");
    push_u64(&mut out, k.unknown_origin);
    json_num(&mut out, "unknown_breaker", k.unknown_breaker);
    json_num(&mut out, "stale", k.stale);
    json_num(&mut out, "keyed_left_out", k.keyed_left_out);
    out.push_str("},\"keyed\":{\"held\":");
    push_u64(&mut out, f.keyed as u64);
    out.push_str(",\"families\":[");
    families_json(&mut out, f);
    out.push_str("]},\"peers\":[");
    for (i, p) in f.peers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"id\":");
        json_str(&mut out, &p.id);
        out.push_str(",\"reachable\":");
        push_bool(&mut out, p.reachable);
        out.push_str(",\"last_exchange\":");
        json_time(&mut out, p.counters.last_exchange_ms, c);
        let n = &p.counters;
        json_num(&mut out, "exchanges", n.exchanges);
        json_num(&mut out, "failures", n.failures);
        json_num(&mut out, "parse_errors", n.parse_errors);
        json_num(&mut out, "auth_failures", n.auth_failures);
        json_num(&mut out, "tls_failures", n.tls_failures);
        json_num(&mut out, "pokes", n.pokes);
        json_num(&mut out, "opinions", p.opinions as u64);
        json_num(&mut out, "disagreements", p.disagreements as u64);
        out.push('}');
    }
    out.push_str("],\"breakers\":[");
    for (i, ((upstream, route), v)) in f.views.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"upstream\":");
        json_str(&mut out, upstream);
        out.push_str(",\"route\":");
        json_str(&mut out, route);
        out.push_str(",\"fingerprint\":\"");
        out.push_str(&hex(v.fingerprint));
        out.push_str("\",\"suspicious\":");
        push_bool(&mut out, v.advice.suspicious_until_ms.is_some());
        out.push_str(",\"suspicious_until\":");
        json_time(&mut out, v.advice.suspicious_until_ms, c);
        json_num(&mut out, "peers_agreeing", v.agreeing_peers as u64);
        json_num(&mut out, "peers_open", v.open_peers as u64);
        json_num(&mut out, "peers_disagreeing", v.disagreeing_peers as u64);
        out.push_str(",\"peers_recovered\":");
        push_bool(&mut out, v.advice.peers_recovered);
        out.push_str(",\"designated_prober\":");
        match &v.designated {
            Some(d) => json_str(&mut out, d),
            None => out.push_str("null"),
        }
        out.push_str(",\"probe_from\":");
        json_time(&mut out, v.advice.probe_from_ms, c);
        json_num(&mut out, "round", u64::from(v.round));
        out.push('}');
    }
    out.push(']');
    if let Some(b) = bus {
        out.push_str(",\"bus\":");
        out.push_str(&super::bus::status::render_json(b, c));
    }
    out.push('}');
    out
}

fn escape_label(out: &mut String, v: &str) {
    if !v.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.push_str(v);
        return;
    }
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            _ => out.push(ch),
        }
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    for (what, text) in [("# HELP ", help), ("# TYPE ", kind)] {
        out.push_str(what);
        out.push_str("nginx_circuit_breaker_fleet_");
        out.push_str(name);
        out.push(' ');
        out.push_str(text);
        out.push('\n');
    }
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: u64) {
    out.push_str("nginx_circuit_breaker_fleet_");
    out.push_str(name);
    out.push('{');
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        escape_label(out, v);
        out.push('"');
    }
    out.push_str("} ");
    push_u64(out, value);
    out.push('\n');
}

/// Prometheus families (text format 0.0.4), prefix `nginx_circuit_breaker_fleet_`, labels
/// `zone` plus `peer` or `upstream`/`route`: `peer_reachable`, `peer_exchanges_total`,
/// `peer_failures_total`, `peer_parse_errors_total`, `peer_auth_failures_total`,
/// `peer_tls_failures_total`, `peer_pokes_total`, `peer_disagreements`, `pushes_total`,
/// `dropped_total{reason}`, `fingerprint_info{fingerprint}` (always 1), `suspicious`,
/// `peers_open`, `peers_disagreeing`, `designated_prober` (1 when this instance is the one
/// to probe next), `round`.
pub fn render_prometheus(f: &Figures<'_>, zone: &str) -> String {
    let mut out = String::with_capacity(2048 + 800 * f.peers.len() + 700 * f.views.len());
    let peers = &f.peers;
    type PeerValue = fn(&PeerStats) -> u64;
    let per_peer: [(&str, &str, &str, PeerValue); 8] = [
        (
            "peer_reachable",
            "gauge",
            "1 when the latest exchange with the peer succeeded, within the expiry.",
            |p| u64::from(p.reachable),
        ),
        (
            "peer_exchanges_total",
            "counter",
            "Messages received from the peer and merged.",
            |p| p.counters.exchanges,
        ),
        (
            "peer_failures_total",
            "counter",
            "Pulls from the peer that failed (refused, timed out, bad status).",
            |p| p.counters.failures,
        ),
        (
            "peer_parse_errors_total",
            "counter",
            "Messages from the peer refused as malformed or misdirected.",
            |p| p.counters.parse_errors,
        ),
        (
            "peer_auth_failures_total",
            "counter",
            "Answers from the peer refused because their MAC did not verify.",
            |p| p.counters.auth_failures,
        ),
        (
            "peer_tls_failures_total",
            "counter",
            "Pulls from the peer refused at TLS (handshake or certificate).",
            |p| p.counters.tls_failures,
        ),
        (
            "peer_pokes_total",
            "counter",
            "Authenticated pokes from the peer that made this instance pull it at once.",
            |p| p.counters.pokes,
        ),
        (
            "peer_disagreements",
            "gauge",
            "Breakers the peer reports with another configuration fingerprint.",
            |p| p.disagreements as u64,
        ),
    ];
    for (name, kind, help, value) in per_peer {
        family(&mut out, name, kind, help);
        for p in peers {
            sample(&mut out, name, &[("zone", zone), ("peer", &p.id)], value(p));
        }
    }
    let k = f.counters;
    family(
        &mut out,
        "pushes_total",
        "counter",
        "Times this instance told its peers to pull it at once (a breaker moved).",
    );
    sample(&mut out, "pushes_total", &[("zone", zone)], k.pushes);
    family(
        &mut out,
        "keyed_held",
        "gauge",
        "Keyed breakers whose opinions the exchange holds (at most 1024).",
    );
    sample(&mut out, "keyed_held", &[("zone", zone)], f.keyed as u64);
    family(
        &mut out,
        "keyed_disagreeing_total",
        "counter",
        "Records of a key refused because the peer's family has another fingerprint.",
    );
    for &(name, _, d) in &f.families {
        sample(
            &mut out,
            "keyed_disagreeing_total",
            &[("zone", zone), ("family", name)],
            d,
        );
    }
    family(
        &mut out,
        "dropped_total",
        "counter",
        "Records received but not kept, by reason.",
    );
    for (reason, v) in [
        ("unknown_origin", k.unknown_origin),
        ("unknown_breaker", k.unknown_breaker),
        ("stale", k.stale),
        ("keyed_left_out", k.keyed_left_out),
    ] {
        sample(
            &mut out,
            "dropped_total",
            &[("zone", zone), ("reason", reason)],
            v,
        );
    }
    let views = &f.views;
    family(
        &mut out,
        "fingerprint_info",
        "gauge",
        "The breaker's configuration fingerprint, as a label.",
    );
    for ((u, r), v) in views {
        let fp = hex(v.fingerprint);
        sample(
            &mut out,
            "fingerprint_info",
            &[
                ("zone", zone),
                ("upstream", u),
                ("route", r),
                ("fingerprint", &fp),
            ],
            1,
        );
    }
    type BreakerValue = fn(&BreakerFleetView, &str) -> u64;
    let per_breaker: [(&str, &str, BreakerValue); 5] = [
        (
            "suspicious",
            "1 while peers' evidence lowers the bar for opening.",
            |v, _| u64::from(v.advice.suspicious_until_ms.is_some()),
        ),
        (
            "peers_open",
            "Peers with the same fingerprint reporting the breaker open or half-open.",
            |v, _| v.open_peers as u64,
        ),
        (
            "peers_disagreeing",
            "Peers reporting the breaker with another configuration fingerprint.",
            |v, _| v.disagreeing_peers as u64,
        ),
        (
            "designated_prober",
            "1 when this instance is the one the fleet expects to probe next.",
            |v, me| u64::from(v.designated.as_deref() == Some(me)),
        ),
        (
            "round",
            "Fleet probes started in the current open episode, as far as known.",
            |v, _| u64::from(v.round),
        ),
    ];
    for (name, help, value) in per_breaker {
        family(&mut out, name, "gauge", help);
        for ((u, r), v) in views {
            sample(
                &mut out,
                name,
                &[("zone", zone), ("upstream", u), ("route", r)],
                value(v, f.self_id),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::store::{FleetConfig, LocalView, Policy};
    use crate::fleet::wire::{Flags, Message, WireOpinion};
    use crate::snapshot::State;

    const MONO: u64 = 5_000_000;
    const CLOCKS: Clocks = Clocks {
        mono_ms: MONO,
        wall_ms: 1_764_484_800_000,
    };

    fn store() -> FleetStore {
        let cfg = FleetConfig {
            interval_ms: 1000,
            fanout: 3,
            expire_ms: 4000,
            max_entries: 1024,
            push_gap_ms: 10,
        };
        let mut s = FleetStore::new("a", &["a", "b\"q", "c"], cfg).unwrap();
        let policy = Policy {
            min_requests: 20,
            failure_rate: 5000,
            slow_rate: 0,
            suspect_min: 5,
            probe_base_ms: 30_000,
            probe_max_ms: 300_000,
        };
        s.add_breaker("api", "checkout", 0xab, policy).unwrap();
        s.update_local(
            MONO,
            0,
            LocalView {
                state: State::Closed,
                forced: false,
                since_ms: MONO - 1000,
                requests: 3,
                failures: 3,
                slow: 0,
                probe_starts: 0,
                short_circuited: 0,
                active_probes: false,
            },
        );
        let body = crate::fleet::wire::render(&Message {
            sender: "b\"q".into(),
            delay_ms: 0,
            opinions: vec![WireOpinion {
                origin: "b\"q".into(),
                upstream: "api".into(),
                route: "checkout".into(),
                fingerprint: 0xab,
                state: State::Open,
                age_ms: 250,
                since_ms: 2000,
                requests: 20,
                failures: 20,
                slow: 0,
                round: 0,
                probe_ms: None,
                flags: Flags::default(),
            }],
        });
        s.receive(MONO, 0, body.as_bytes()).unwrap();
        s.peer_failed(MONO, 1);
        s
    }

    #[test]
    fn json_shows_peers_and_breakers() {
        let s = store();
        let text = render_json(&Figures::gather(&s, MONO), CLOCKS, None);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["instance"], "a");
        assert_eq!(v["transport"], "peers");
        assert!(v.get("bus").is_none());
        let on_bus = render_json(
            &Figures::gather(&s, MONO),
            CLOCKS,
            Some(&BusStats::default()),
        );
        let b: serde_json::Value = serde_json::from_str(&on_bus).unwrap();
        assert_eq!(b["transport"], "nats");
        assert_eq!(b["bus"]["state"], "connecting");
        assert_eq!(v["peers"][0]["id"], "b\"q");
        assert_eq!(v["peers"][0]["reachable"], true);
        assert_eq!(v["peers"][0]["last_exchange"], 1_764_484_800.0);
        assert_eq!(v["peers"][1]["reachable"], false);
        assert_eq!(v["peers"][1]["failures"], 1);
        assert_eq!(v["peers"][1]["last_exchange"], serde_json::Value::Null);
        let b = &v["breakers"][0];
        assert_eq!(b["fingerprint"], "00000000000000ab");
        assert_eq!(b["suspicious"], true);
        assert_eq!(b["suspicious_until"], 1_764_484_803.75);
        assert_eq!(b["peers_open"], 1);
        assert_eq!(b["designated_prober"], serde_json::Value::Null);
    }

    #[test]
    fn prometheus_escapes_labels_and_types_every_family() {
        let s = store();
        let text = render_prometheus(&Figures::gather(&s, MONO), "cb");
        assert!(text.contains(
            "nginx_circuit_breaker_fleet_peer_reachable{zone=\"cb\",peer=\"b\\\"q\"} 1\n"
        ));
        assert!(text.contains(
            "nginx_circuit_breaker_fleet_fingerprint_info{zone=\"cb\",upstream=\"api\",\
             route=\"checkout\",fingerprint=\"00000000000000ab\"} 1\n"
        ));
        assert!(text.contains(
            "nginx_circuit_breaker_fleet_suspicious{zone=\"cb\",upstream=\"api\",route=\"checkout\"} 1\n"
        ));
        let helps = text.lines().filter(|l| l.starts_with("# HELP")).count();
        let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!((helps, types), (18, 18));
    }

    #[test]
    fn strings_and_times_are_written_as_json_and_format_write_them() {
        for t in [
            "",
            "a",
            "b\"q",
            "x\\y",
            "tab\there",
            "\u{7f}",
            "é-ü",
            "\u{1}",
        ] {
            let mut out = String::new();
            json_str(&mut out, t);
            assert_eq!(out, serde_json::to_string(t).unwrap(), "{t:?}");
        }
        for ms in [0, 7, 42, 999, 1_000, 1_764_484_800_005] {
            let c = Clocks {
                mono_ms: 0,
                wall_ms: ms,
            };
            let mut out = String::new();
            json_time(&mut out, Some(0), c);
            assert_eq!(out, format!("{}.{:03}", ms / 1000, ms % 1000));
        }
    }

    /// The whole texts, byte for byte, as the renderers made them before they were rewritten
    /// without `format!` (a scrape and a dashboard read them).
    #[test]
    fn whole_texts_are_unchanged() {
        let s = store();
        let f = Figures::gather(&s, MONO);
        assert_eq!(render_json(&f, CLOCKS, None), JSON);
        assert_eq!(
            render_json(&f, CLOCKS, Some(&BusStats::default())),
            JSON_BUS
        );
        assert_eq!(render_prometheus(&f, "c\"b"), PROMETHEUS);
    }

    const JSON: &str = r##"{"instance":"a","transport":"peers","interval_ms":1000,"fanout":3,"expire_ms":4000,"pushes":0,"dropped":{"unknown_origin":0,"unknown_breaker":0,"stale":0,"keyed_left_out":0},"keyed":{"held":0,"families":[]},"peers":[{"id":"b\"q","reachable":true,"last_exchange":1764484800.000,"exchanges":1,"failures":0,"parse_errors":0,"auth_failures":0,"tls_failures":0,"pokes":0,"opinions":1,"disagreements":0},{"id":"c","reachable":false,"last_exchange":null,"exchanges":0,"failures":1,"parse_errors":0,"auth_failures":0,"tls_failures":0,"pokes":0,"opinions":0,"disagreements":0}],"breakers":[{"upstream":"api","route":"checkout","fingerprint":"00000000000000ab","suspicious":true,"suspicious_until":1764484803.750,"peers_agreeing":1,"peers_open":1,"peers_disagreeing":0,"peers_recovered":false,"designated_prober":null,"probe_from":null,"round":0}]}"##;

    const JSON_BUS: &str = r##"{"instance":"a","transport":"nats","interval_ms":1000,"fanout":3,"expire_ms":4000,"pushes":0,"dropped":{"unknown_origin":0,"unknown_breaker":0,"stale":0,"keyed_left_out":0},"keyed":{"held":0,"families":[]},"peers":[{"id":"b\"q","reachable":true,"last_exchange":1764484800.000,"exchanges":1,"failures":0,"parse_errors":0,"auth_failures":0,"tls_failures":0,"pokes":0,"opinions":1,"disagreements":0},{"id":"c","reachable":false,"last_exchange":null,"exchanges":0,"failures":1,"parse_errors":0,"auth_failures":0,"tls_failures":0,"pokes":0,"opinions":0,"disagreements":0}],"breakers":[{"upstream":"api","route":"checkout","fingerprint":"00000000000000ab","suspicious":true,"suspicious_until":1764484803.750,"peers_agreeing":1,"peers_open":1,"peers_disagreeing":0,"peers_recovered":false,"designated_prober":null,"probe_from":null,"round":0}],"bus":{"state":"connecting","server":null,"server_name":null,"since":null,"messages_in":0,"messages_out":0,"bytes_in":0,"bytes_out":0,"connects":0,"failures":0,"members":0,"refused":{"auth":0,"malformed":0,"subject":0,"replayed":0,"ahead":0,"unverified":0,"unknown_nonce":0,"members_full":0,"own_id":0,"stale":0},"dropped_out":0,"dropped_in":0,"denied":0,"last_error":null}}"##;

    const PROMETHEUS: &str = r##"# HELP nginx_circuit_breaker_fleet_peer_reachable 1 when the latest exchange with the peer succeeded, within the expiry.
# TYPE nginx_circuit_breaker_fleet_peer_reachable gauge
nginx_circuit_breaker_fleet_peer_reachable{zone="c\"b",peer="b\"q"} 1
nginx_circuit_breaker_fleet_peer_reachable{zone="c\"b",peer="c"} 0
# HELP nginx_circuit_breaker_fleet_peer_exchanges_total Messages received from the peer and merged.
# TYPE nginx_circuit_breaker_fleet_peer_exchanges_total counter
nginx_circuit_breaker_fleet_peer_exchanges_total{zone="c\"b",peer="b\"q"} 1
nginx_circuit_breaker_fleet_peer_exchanges_total{zone="c\"b",peer="c"} 0
# HELP nginx_circuit_breaker_fleet_peer_failures_total Pulls from the peer that failed (refused, timed out, bad status).
# TYPE nginx_circuit_breaker_fleet_peer_failures_total counter
nginx_circuit_breaker_fleet_peer_failures_total{zone="c\"b",peer="b\"q"} 0
nginx_circuit_breaker_fleet_peer_failures_total{zone="c\"b",peer="c"} 1
# HELP nginx_circuit_breaker_fleet_peer_parse_errors_total Messages from the peer refused as malformed or misdirected.
# TYPE nginx_circuit_breaker_fleet_peer_parse_errors_total counter
nginx_circuit_breaker_fleet_peer_parse_errors_total{zone="c\"b",peer="b\"q"} 0
nginx_circuit_breaker_fleet_peer_parse_errors_total{zone="c\"b",peer="c"} 0
# HELP nginx_circuit_breaker_fleet_peer_auth_failures_total Answers from the peer refused because their MAC did not verify.
# TYPE nginx_circuit_breaker_fleet_peer_auth_failures_total counter
nginx_circuit_breaker_fleet_peer_auth_failures_total{zone="c\"b",peer="b\"q"} 0
nginx_circuit_breaker_fleet_peer_auth_failures_total{zone="c\"b",peer="c"} 0
# HELP nginx_circuit_breaker_fleet_peer_tls_failures_total Pulls from the peer refused at TLS (handshake or certificate).
# TYPE nginx_circuit_breaker_fleet_peer_tls_failures_total counter
nginx_circuit_breaker_fleet_peer_tls_failures_total{zone="c\"b",peer="b\"q"} 0
nginx_circuit_breaker_fleet_peer_tls_failures_total{zone="c\"b",peer="c"} 0
# HELP nginx_circuit_breaker_fleet_peer_pokes_total Authenticated pokes from the peer that made this instance pull it at once.
# TYPE nginx_circuit_breaker_fleet_peer_pokes_total counter
nginx_circuit_breaker_fleet_peer_pokes_total{zone="c\"b",peer="b\"q"} 0
nginx_circuit_breaker_fleet_peer_pokes_total{zone="c\"b",peer="c"} 0
# HELP nginx_circuit_breaker_fleet_peer_disagreements Breakers the peer reports with another configuration fingerprint.
# TYPE nginx_circuit_breaker_fleet_peer_disagreements gauge
nginx_circuit_breaker_fleet_peer_disagreements{zone="c\"b",peer="b\"q"} 0
nginx_circuit_breaker_fleet_peer_disagreements{zone="c\"b",peer="c"} 0
# HELP nginx_circuit_breaker_fleet_pushes_total Times this instance told its peers to pull it at once (a breaker moved).
# TYPE nginx_circuit_breaker_fleet_pushes_total counter
nginx_circuit_breaker_fleet_pushes_total{zone="c\"b"} 0
# HELP nginx_circuit_breaker_fleet_keyed_held Keyed breakers whose opinions the exchange holds (at most 1024).
# TYPE nginx_circuit_breaker_fleet_keyed_held gauge
nginx_circuit_breaker_fleet_keyed_held{zone="c\"b"} 0
# HELP nginx_circuit_breaker_fleet_keyed_disagreeing_total Records of a key refused because the peer's family has another fingerprint.
# TYPE nginx_circuit_breaker_fleet_keyed_disagreeing_total counter
# HELP nginx_circuit_breaker_fleet_dropped_total Records received but not kept, by reason.
# TYPE nginx_circuit_breaker_fleet_dropped_total counter
nginx_circuit_breaker_fleet_dropped_total{zone="c\"b",reason="unknown_origin"} 0
nginx_circuit_breaker_fleet_dropped_total{zone="c\"b",reason="unknown_breaker"} 0
nginx_circuit_breaker_fleet_dropped_total{zone="c\"b",reason="stale"} 0
nginx_circuit_breaker_fleet_dropped_total{zone="c\"b",reason="keyed_left_out"} 0
# HELP nginx_circuit_breaker_fleet_fingerprint_info The breaker's configuration fingerprint, as a label.
# TYPE nginx_circuit_breaker_fleet_fingerprint_info gauge
nginx_circuit_breaker_fleet_fingerprint_info{zone="c\"b",upstream="api",route="checkout",fingerprint="00000000000000ab"} 1
# HELP nginx_circuit_breaker_fleet_suspicious 1 while peers' evidence lowers the bar for opening.
# TYPE nginx_circuit_breaker_fleet_suspicious gauge
nginx_circuit_breaker_fleet_suspicious{zone="c\"b",upstream="api",route="checkout"} 1
# HELP nginx_circuit_breaker_fleet_peers_open Peers with the same fingerprint reporting the breaker open or half-open.
# TYPE nginx_circuit_breaker_fleet_peers_open gauge
nginx_circuit_breaker_fleet_peers_open{zone="c\"b",upstream="api",route="checkout"} 1
# HELP nginx_circuit_breaker_fleet_peers_disagreeing Peers reporting the breaker with another configuration fingerprint.
# TYPE nginx_circuit_breaker_fleet_peers_disagreeing gauge
nginx_circuit_breaker_fleet_peers_disagreeing{zone="c\"b",upstream="api",route="checkout"} 0
# HELP nginx_circuit_breaker_fleet_designated_prober 1 when this instance is the one the fleet expects to probe next.
# TYPE nginx_circuit_breaker_fleet_designated_prober gauge
nginx_circuit_breaker_fleet_designated_prober{zone="c\"b",upstream="api",route="checkout"} 0
# HELP nginx_circuit_breaker_fleet_round Fleet probes started in the current open episode, as far as known.
# TYPE nginx_circuit_breaker_fleet_round gauge
nginx_circuit_breaker_fleet_round{zone="c\"b",upstream="api",route="checkout"} 0
"##;
}
