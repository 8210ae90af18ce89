//! The fleet's part of the status page: a JSON object for the page's `"fleet"` member and
//! Prometheus families, rendered from a [`FleetStore`] by the worker that owns it (or from a
//! copy it publishes). Instants become Unix seconds with millisecond precision, as elsewhere
//! on the status page; the store's own clock is monotonic.

use std::fmt::Write as _;

use super::bus::BusStats;
use super::fingerprint::hex;
use super::store::FleetStore;
use crate::snapshot::Clocks;

fn json_str(out: &mut String, s: &str) {
    // serde_json escapes exactly what JSON requires; a `&str` always serializes.
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
}

fn json_time(out: &mut String, t: Option<u64>, c: Clocks) {
    match t {
        Some(t) => {
            let w = c.wall(t);
            let _ = write!(out, "{}.{:03}", w / 1000, w % 1000);
        }
        None => out.push_str("null"),
    }
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
fn families_json(s: &FleetStore) -> String {
    let mut out = String::new();
    for (i, (name, fp, disagreeing)) in s.families().into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        json_str(&mut out, name);
        let _ = write!(
            out,
            ",\"fingerprint\":\"{}\",\"disagreeing\":{disagreeing}}}",
            hex(fp)
        );
    }
    out
}

/// `"transport"` says how the fleet exchanges (`"peers"`: pulls from a peer list; `"nats"`:
/// a bus), and a fleet on a bus has a `"bus"` member ([`super::bus::status::render_json`]),
/// its members listed as `"peers"`.
pub fn render_json(s: &FleetStore, c: Clocks, bus: Option<&BusStats>) -> String {
    let now = c.mono_ms;
    let cfg = s.config();
    let mut out = String::with_capacity(256);
    out.push_str("{\"instance\":");
    json_str(&mut out, s.self_id());
    out.push_str(if bus.is_some() {
        ",\"transport\":\"nats\""
    } else {
        ",\"transport\":\"peers\""
    });
    let k = s.counters();
    let _ = write!(
        out,
        ",\"interval_ms\":{},\"fanout\":{},\"expire_ms\":{},\"pushes\":{},\"dropped\":{{\
         \"unknown_origin\":{},\"unknown_breaker\":{},\"stale\":{},\"keyed_left_out\":{}}},\
         \"keyed\":{{\"held\":{},\"families\":[{}]}},\"peers\":[",
        cfg.interval_ms,
        cfg.fanout,
        cfg.expire_ms,
        k.pushes,
        k.unknown_origin,
        k.unknown_breaker,
        k.stale,
        k.keyed_left_out,
        s.keyed(),
        families_json(s)
    );
    for (i, p) in s.peer_stats(now).iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"id\":");
        json_str(&mut out, &p.id);
        let _ = write!(out, ",\"reachable\":{},\"last_exchange\":", p.reachable);
        json_time(&mut out, p.counters.last_exchange_ms, c);
        let _ = write!(
            out,
            ",\"exchanges\":{},\"failures\":{},\"parse_errors\":{},\"auth_failures\":{},\
             \"tls_failures\":{},\"pokes\":{},\"opinions\":{},\"disagreements\":{}}}",
            p.counters.exchanges,
            p.counters.failures,
            p.counters.parse_errors,
            p.counters.auth_failures,
            p.counters.tls_failures,
            p.counters.pokes,
            p.opinions,
            p.disagreements
        );
    }
    out.push_str("],\"breakers\":[");
    let mut first = true;
    for (b, (upstream, route)) in s.breakers().enumerate() {
        let Some(v) = s.breaker_view(now, b) else {
            continue;
        };
        if !core::mem::replace(&mut first, false) {
            out.push(',');
        }
        out.push_str("{\"upstream\":");
        json_str(&mut out, upstream);
        out.push_str(",\"route\":");
        json_str(&mut out, route);
        let _ = write!(
            out,
            ",\"fingerprint\":\"{}\",\"suspicious\":{},\"suspicious_until\":",
            hex(v.fingerprint),
            v.advice.suspicious_until_ms.is_some()
        );
        json_time(&mut out, v.advice.suspicious_until_ms, c);
        let _ = write!(
            out,
            ",\"peers_agreeing\":{},\"peers_open\":{},\"peers_disagreeing\":{},\
             \"peers_recovered\":{},\"designated_prober\":",
            v.agreeing_peers, v.open_peers, v.disagreeing_peers, v.advice.peers_recovered
        );
        match &v.designated {
            Some(d) => json_str(&mut out, d),
            None => out.push_str("null"),
        }
        out.push_str(",\"probe_from\":");
        json_time(&mut out, v.advice.probe_from_ms, c);
        let _ = write!(out, ",\"round\":{}}}", v.round);
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
    let _ = writeln!(out, "# HELP nginx_circuit_breaker_fleet_{name} {help}");
    let _ = writeln!(out, "# TYPE nginx_circuit_breaker_fleet_{name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: u64) {
    let _ = write!(out, "nginx_circuit_breaker_fleet_{name}{{");
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"");
        escape_label(out, v);
        out.push('"');
    }
    let _ = writeln!(out, "}} {value}");
}

/// Prometheus families (text format 0.0.4), prefix `nginx_circuit_breaker_fleet_`, labels
/// `zone` plus `peer` or `upstream`/`route`: `peer_reachable`, `peer_exchanges_total`,
/// `peer_failures_total`, `peer_parse_errors_total`, `peer_auth_failures_total`,
/// `peer_tls_failures_total`, `peer_pokes_total`, `peer_disagreements`, `pushes_total`,
/// `dropped_total{reason}`, `fingerprint_info{fingerprint}` (always 1), `suspicious`,
/// `peers_open`, `peers_disagreeing`, `designated_prober` (1 when this instance is the one
/// to probe next), `round`.
pub fn render_prometheus(s: &FleetStore, zone: &str, c: Clocks) -> String {
    let now = c.mono_ms;
    let mut out = String::with_capacity(1024);
    let peers = s.peer_stats(now);
    type PeerValue = fn(&super::store::PeerStats) -> u64;
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
        for p in &peers {
            sample(&mut out, name, &[("zone", zone), ("peer", &p.id)], value(p));
        }
    }
    let k = s.counters();
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
    sample(&mut out, "keyed_held", &[("zone", zone)], s.keyed() as u64);
    family(
        &mut out,
        "keyed_disagreeing_total",
        "counter",
        "Records of a key refused because the peer's family has another fingerprint.",
    );
    for (name, _, d) in s.families() {
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
    let views: Vec<_> = s
        .breakers()
        .enumerate()
        .filter_map(|(b, names)| Some((names, s.breaker_view(now, b)?)))
        .collect();
    family(
        &mut out,
        "fingerprint_info",
        "gauge",
        "The breaker's configuration fingerprint, as a label.",
    );
    for ((u, r), v) in &views {
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
    type BreakerValue = fn(&super::store::BreakerFleetView, &str) -> u64;
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
        for ((u, r), v) in &views {
            sample(
                &mut out,
                name,
                &[("zone", zone), ("upstream", u), ("route", r)],
                value(v, s.self_id()),
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
        let text = render_json(&store(), CLOCKS, None);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["instance"], "a");
        assert_eq!(v["transport"], "peers");
        assert!(v.get("bus").is_none());
        let on_bus = render_json(&store(), CLOCKS, Some(&BusStats::default()));
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
        let text = render_prometheus(&store(), "cb", CLOCKS);
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
}
