//! The bus's part of the fleet's status: the connection's state, the server in use, what
//! crossed it, the members heard and what was refused, as JSON (inside the fleet's object)
//! and Prometheus families.

use std::fmt::Write as _;

use super::Why;
use crate::snapshot::Clocks;

/// Where the connection to the bus stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BusState {
    /// Connecting to a server (or about to, after a failure).
    #[default]
    Connecting,
    /// Connected and subscribed.
    Connected,
    /// Waiting before the next try, every server having failed in turn.
    Down,
}

impl BusState {
    pub fn name(self) -> &'static str {
        match self {
            BusState::Connecting => "connecting",
            BusState::Connected => "connected",
            BusState::Down => "down",
        }
    }
}

/// What the exchange worker knows of its bus, for the status page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BusStats {
    pub state: BusState,
    /// The server in use (or last tried), as configured.
    pub server: Option<String>,
    /// Its `server_name` as it said in its INFO.
    pub server_name: Option<String>,
    /// Connected since (monotonic ms).
    pub since_ms: Option<u64>,
    pub messages_in: u64,
    pub messages_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Connections made, and lost or refused.
    pub connects: u64,
    pub failures: u64,
    /// Members heard within the expiry.
    pub members: usize,
    /// Messages whose seal did not verify, or whose form is wrong once verified.
    pub refused_auth: u64,
    pub refused_malformed: u64,
    /// Sealed messages on another member's subject than their sender's.
    pub refused_subject: u64,
    /// Sealed messages refused by the table of members, by reason.
    pub refused: Vec<(Why, u64)>,
    /// Messages not sent: the outgoing queue was full (the bus is slower than the fleet's
    /// news), or too large for the server.
    pub dropped_out: u64,
    /// Messages not taken: more arrived between two steps of the exchange than it keeps.
    pub dropped_in: u64,
    /// What the server refused to let this member publish or subscribe to (its permissions).
    pub denied: u64,
    /// The last error, in words.
    pub last_error: Option<String>,
}

fn json_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
}

fn json_opt(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => json_str(out, s),
        None => out.push_str("null"),
    }
}

/// `{"state","server","server_name","since","messages_in","messages_out","bytes_in",
/// "bytes_out","connects","failures","members","refused":{"auth","malformed","subject","replayed",
/// "ahead","unverified","unknown_nonce","members_full","own_id","stale"},"dropped_out",
/// "dropped_in","denied","last_error"}`.
pub fn render_json(b: &BusStats, c: Clocks) -> String {
    let mut out = String::with_capacity(512);
    let _ = write!(out, "{{\"state\":\"{}\",\"server\":", b.state.name());
    json_opt(&mut out, b.server.as_deref());
    out.push_str(",\"server_name\":");
    json_opt(&mut out, b.server_name.as_deref());
    out.push_str(",\"since\":");
    match b.since_ms {
        Some(t) => {
            let w = c.wall(t);
            let _ = write!(out, "{}.{:03}", w / 1000, w % 1000);
        }
        None => out.push_str("null"),
    }
    let _ = write!(
        out,
        ",\"messages_in\":{},\"messages_out\":{},\"bytes_in\":{},\"bytes_out\":{},\
         \"connects\":{},\"failures\":{},\"members\":{},\"refused\":{{\"auth\":{},\
         \"malformed\":{},\"subject\":{}",
        b.messages_in,
        b.messages_out,
        b.bytes_in,
        b.bytes_out,
        b.connects,
        b.failures,
        b.members,
        b.refused_auth,
        b.refused_malformed,
        b.refused_subject
    );
    for w in Why::ALL {
        let n = b
            .refused
            .iter()
            .find(|(x, _)| *x == w)
            .map_or(0, |(_, n)| *n);
        let _ = write!(out, ",\"{}\":{n}", w.name());
    }
    let _ = write!(
        out,
        "}},\"dropped_out\":{},\"dropped_in\":{},\"denied\":{},\"last_error\":",
        b.dropped_out, b.dropped_in, b.denied
    );
    json_opt(&mut out, b.last_error.as_deref());
    out.push('}');
    out
}

fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Prometheus families, prefix `nginx_circuit_breaker_fleet_bus_`, label `zone`:
/// `connected{server}` (1 while connected to that server), `messages_total{direction}`,
/// `bytes_total{direction}`, `connects_total`, `failures_total`, `dropped_out_total`,
/// `dropped_in_total`, `denied_total`, `members`, `refused_total{reason}`.
pub fn render_prometheus(b: &BusStats, zone: &str) -> String {
    let zone = label(zone);
    let mut out = String::with_capacity(2048);
    let family = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP nginx_circuit_breaker_fleet_bus_{name} {help}");
        let _ = writeln!(out, "# TYPE nginx_circuit_breaker_fleet_bus_{name} {kind}");
    };
    family(
        &mut out,
        "connected",
        "gauge",
        "1 while the exchange is connected to the bus through this server.",
    );
    let server = label(b.server.as_deref().unwrap_or(""));
    let _ = writeln!(
        out,
        "nginx_circuit_breaker_fleet_bus_connected{{zone=\"{zone}\",server=\"{server}\"}} {}",
        u8::from(b.state == BusState::Connected)
    );
    family(
        &mut out,
        "messages_total",
        "counter",
        "Messages taken off and put on the bus.",
    );
    for (d, n) in [("in", b.messages_in), ("out", b.messages_out)] {
        let _ = writeln!(
            out,
            "nginx_circuit_breaker_fleet_bus_messages_total{{zone=\"{zone}\",direction=\"{d}\"}} {n}"
        );
    }
    family(
        &mut out,
        "bytes_total",
        "counter",
        "Payload bytes taken off and put on the bus.",
    );
    for (d, n) in [("in", b.bytes_in), ("out", b.bytes_out)] {
        let _ = writeln!(
            out,
            "nginx_circuit_breaker_fleet_bus_bytes_total{{zone=\"{zone}\",direction=\"{d}\"}} {n}"
        );
    }
    for (name, help, n) in [
        ("connects_total", "Connections made to the bus.", b.connects),
        (
            "failures_total",
            "Connections to the bus refused or lost.",
            b.failures,
        ),
        (
            "dropped_out_total",
            "Messages not sent: the bus was slower than the news, or they were too large.",
            b.dropped_out,
        ),
        (
            "dropped_in_total",
            "Messages not taken: more arrived between two steps than the exchange keeps.",
            b.dropped_in,
        ),
        (
            "denied_total",
            "Publications and subscriptions the server's permissions refused this member.",
            b.denied,
        ),
    ] {
        family(&mut out, name, "counter", help);
        let _ = writeln!(
            out,
            "nginx_circuit_breaker_fleet_bus_{name}{{zone=\"{zone}\"}} {n}"
        );
    }
    family(
        &mut out,
        "members",
        "gauge",
        "Members heard within the expiry.",
    );
    let _ = writeln!(
        out,
        "nginx_circuit_breaker_fleet_bus_members{{zone=\"{zone}\"}} {}",
        b.members
    );
    family(
        &mut out,
        "refused_total",
        "counter",
        "Messages on the bus refused: not sealed with the fleet's key, malformed, or not news.",
    );
    let refused = [
        ("auth", b.refused_auth),
        ("malformed", b.refused_malformed),
        ("subject", b.refused_subject),
    ]
    .into_iter()
    .chain(Why::ALL.iter().map(|&w| {
        (
            w.name(),
            b.refused
                .iter()
                .find(|(x, _)| *x == w)
                .map_or(0, |(_, n)| *n),
        )
    }));
    for (reason, n) in refused {
        let _ = writeln!(
            out,
            "nginx_circuit_breaker_fleet_bus_refused_total{{zone=\"{zone}\",reason=\"{reason}\"}} {n}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOCKS: Clocks = Clocks {
        mono_ms: 10_000,
        wall_ms: 1_800_000_010_000,
    };

    fn stats() -> BusStats {
        BusStats {
            state: BusState::Connected,
            server: Some("127.0.0.1:4222".into()),
            server_name: Some("n\"1".into()),
            since_ms: Some(9_000),
            messages_in: 3,
            messages_out: 4,
            refused_auth: 2,
            refused_subject: 6,
            denied: 8,
            refused: vec![(Why::Replayed, 5)],
            members: 7,
            ..BusStats::default()
        }
    }

    #[test]
    fn json_parses_and_says_it_all() {
        let v: serde_json::Value = serde_json::from_str(&render_json(&stats(), CLOCKS)).unwrap();
        assert_eq!(v["state"], "connected");
        assert_eq!(v["server"], "127.0.0.1:4222");
        assert_eq!(v["server_name"], "n\"1");
        assert_eq!(v["since"].as_f64().unwrap(), 1_800_000_009.0);
        assert_eq!(v["members"], 7);
        assert_eq!(v["refused"]["auth"], 2);
        assert_eq!(v["refused"]["subject"], 6);
        assert_eq!(v["denied"], 8);
        assert_eq!(v["refused"]["replayed"], 5);
        assert_eq!(v["refused"]["own_id"], 0);
        assert_eq!(v["last_error"], serde_json::Value::Null);
        let d: serde_json::Value =
            serde_json::from_str(&render_json(&BusStats::default(), CLOCKS)).unwrap();
        assert_eq!(d["state"], "connecting");
        assert_eq!(d["since"], serde_json::Value::Null);
    }

    #[test]
    fn prometheus_has_a_sample_per_reason() {
        let p = render_prometheus(&stats(), "cb");
        assert!(p.contains(
            "nginx_circuit_breaker_fleet_bus_connected{zone=\"cb\",server=\"127.0.0.1:4222\"} 1"
        ));
        assert!(p.contains("bus_refused_total{zone=\"cb\",reason=\"replayed\"} 5"));
        assert!(p.contains("bus_refused_total{zone=\"cb\",reason=\"auth\"} 2"));
        assert!(p.contains("bus_refused_total{zone=\"cb\",reason=\"subject\"} 6"));
        assert!(p.contains("bus_members{zone=\"cb\"} 7"));
        assert!(p.contains("bus_dropped_out_total{zone=\"cb\"} 0"));
        assert!(p.contains("bus_dropped_in_total{zone=\"cb\"} 0"));
        assert!(p.contains("bus_denied_total{zone=\"cb\"} 8"));
        assert_eq!(p.matches("reason=").count(), 3 + Why::ALL.len());
    }
}
