//! Prometheus text exposition format 0.0.4 (see [`super::render_prometheus`] for the families).

use super::{
    latency_s, ratio, secs, share, write_num, Entry, LimitStatus, Num, ServerEntry, ZoneView,
};
use crate::retry_budget::RetryBudgetView;
use crate::snapshot::BreakerView;

const PREFIX: &str = "nginx_circuit_breaker_";

fn flag(b: bool) -> Num {
    Num::Int(u64::from(b))
}

#[derive(Clone, Copy)]
enum Kind {
    Gauge,
    Counter,
}

/// An extra label of a family with several samples per breaker: its name, and its values.
type Split = (&'static str, &'static [&'static str]);

struct Renderer<'a> {
    out: Vec<u8>,
    /// Every zone's entries, back to back.
    entries: &'a [&'a Entry],
    /// Every label set, escaped, back to back: each zone's `zone="…"`, each entry's
    /// `zone="…",upstream="…",route="…"`, and those of servers and budgets.
    labels: Vec<u8>,
    /// Each zone's label set in `labels`, and the zone's count of entries.
    zones: Vec<((usize, usize), u64)>,
    /// Each entry's label set in `labels`.
    spans: Vec<(usize, usize)>,
    /// Every server of every entry, with its label set (`zone`, `upstream`, `server`) as a
    /// span of `labels`, after the entries' own.
    servers: Vec<(&'a ServerEntry, (usize, usize))>,
    /// Every retry budget, with its label set (`zone`, `upstream`).
    budgets: Vec<(&'a RetryBudgetView, (usize, usize))>,
}

/// Renders each zone's entries, after the zones' own families when `with_zone`; every family
/// once, with the samples of every zone (the text format wants a family's samples together).
pub(super) fn render(zones: &[(&ZoneView, &[Entry])], with_zone: bool) -> Vec<u8> {
    let all: Vec<&Entry> = zones.iter().flat_map(|(_, e)| e.iter()).collect();
    let mut labels = Vec::with_capacity(
        zones
            .iter()
            .map(|(z, entries)| {
                32 + z.name.len()
                    + entries
                        .iter()
                        .map(|e| 32 + z.name.len() + e.upstream.len() + e.route.len())
                        .sum::<usize>()
            })
            .sum(),
    );
    let mut spans = Vec::with_capacity(all.len());
    let mut zone_spans = Vec::with_capacity(zones.len());
    let (mut servers, mut budgets) = (Vec::new(), Vec::new());
    for (zone, entries) in zones {
        let start = labels.len();
        labels.extend_from_slice(b"zone=\"");
        escape_label_value(&mut labels, &zone.name);
        labels.push(b'"');
        let zone_label = (start, labels.len());
        zone_spans.push((zone_label, entries.len() as u64));
        for e in entries.iter() {
            let start = labels.len();
            labels.extend_from_within(zone_label.0..zone_label.1);
            labels.extend_from_slice(b",upstream=\"");
            escape_label_value(&mut labels, &e.upstream);
            labels.extend_from_slice(b"\",route=\"");
            escape_label_value(&mut labels, &e.route);
            labels.push(b'"');
            spans.push((start, labels.len()));
        }
        for e in entries.iter() {
            let start = labels.len();
            labels.extend_from_within(zone_label.0..zone_label.1);
            labels.extend_from_slice(b",upstream=\"");
            escape_label_value(&mut labels, &e.upstream);
            labels.push(b'"');
            let upstream = (start, labels.len());
            if let Some(r) = &e.retry {
                budgets.push((r, upstream));
            }
            for s in &e.servers {
                let start = labels.len();
                labels.extend_from_within(upstream.0..upstream.1);
                labels.extend_from_slice(b",server=\"");
                escape_label_value(&mut labels, &s.address);
                labels.push(b'"');
                servers.push((s, (start, labels.len())));
            }
        }
    }

    // Each breaker yields up to 30 samples of about 40 bytes plus its labels and value.
    let per_sample = labels.len() + all.len() * 56;
    let mut r = Renderer {
        out: Vec::with_capacity(8192 + 30 * per_sample + servers.len() * 600),
        entries: &all,
        labels,
        zones: zone_spans,
        spans,
        servers,
        budgets,
    };
    if with_zone {
        r.zone_families(zones);
    }
    r.breaker_families();
    r.out
}

impl Renderer<'_> {
    fn zone_families(&mut self, zones: &[(&ZoneView, &[Entry])]) {
        use Kind::{Counter, Gauge};

        if let Some((zone, _)) = zones.first() {
            self.build_info(zone);
        }
        self.zone_info(zones);
        self.zone_family(
            "zone_size_bytes",
            Gauge,
            "Size of the shared memory zone in bytes.",
            zones,
            |_, z| Some(Num::Int(z.size)),
        );
        self.zone_family(
            "zone_used_bytes",
            Gauge,
            "Bytes allocated from the shared memory zone.",
            zones,
            |_, z| Some(Num::Int(z.used)),
        );
        self.zone_family(
            "zone_alloc_failures_total",
            Counter,
            "Breakers not created because the zone was full (they fail open).",
            zones,
            |_, z| Some(Num::Int(z.alloc_failures)),
        );
        self.zone_family(
            "zone_keys",
            Gauge,
            "Keys of circuit_breaker_key in the zone's table.",
            zones,
            |_, z| z.keys.map(|k| Num::Int(k.used)),
        );
        self.zone_family(
            "zone_keys_capacity",
            Gauge,
            "Keys the zone's table of keys can hold.",
            zones,
            |_, z| z.keys.map(|k| Num::Int(k.capacity)),
        );
        self.zone_family(
            "zone_keys_promoted",
            Gauge,
            "Keys with a breaker of their own.",
            zones,
            |_, z| z.keys.map(|k| Num::Int(k.promoted)),
        );
        self.zone_family(
            "zone_keys_unlisted",
            Gauge,
            "Keys with a breaker of their own that this scrape has no series for (closed, \
             or past key_limit).",
            zones,
            |_, z| z.keys.map(|k| Num::Int(k.unlisted)),
        );
        self.zone_family(
            "zone_keys_open",
            Gauge,
            "Keys whose breaker is open or half-open, listed or not.",
            zones,
            |_, z| z.keys.map(|k| Num::Int(k.open)),
        );
        let counts: Vec<u64> = self.zones.iter().map(|z| z.1).collect();
        self.zone_family(
            "breakers",
            Gauge,
            "Number of breakers shown (all in the zone unless filtered).",
            zones,
            |i, _| Some(Num::Int(counts[i])),
        );
    }

    fn breaker_families(&mut self) {
        use Kind::{Counter, Gauge};
        self.family(
            "state",
            Gauge,
            "Breaker state: 0 closed, 1 half-open, 2 open.",
            |v| Some(Num::Int(u64::from(v.state.code()))),
        );
        self.family(
            "dry_run",
            Gauge,
            "1 when the breaker only reports what it would do.",
            |v| Some(flag(v.dry_run)),
        );
        self.split_family(
            "forced",
            Gauge,
            "1 for the state an operator forced the breaker into, 0 otherwise.",
            ("state", &["open", "closed"]),
            |v, i| {
                let name = v.forced.map(|f| f.name());
                Some(flag(name == Some(["open", "closed"][i])))
            },
        );
        self.family(
            "state_since_seconds",
            Gauge,
            "Unix time the current state began.",
            |v| Some(secs(v.since_ms)),
        );
        self.family(
            "open_since_seconds",
            Gauge,
            "Unix time the current episode began: the trip out of closed, which a failed probe's reopen does not move (absent while closed).",
            |v| v.episode_ms.map(secs),
        );
        self.family(
            "retry_at_seconds",
            Gauge,
            "Unix time the next probe may start (open or half-open only).",
            |v| v.retry_at_ms.map(secs),
        );
        self.family(
            "cooldown_seconds",
            Gauge,
            "Current cooldown in seconds (doubles after each failed probe).",
            |v| Some(secs(v.cooldown_ms)),
        );
        self.family(
            "consecutive_probe_successes",
            Gauge,
            "Good probes in a row in the current half-open period.",
            |v| Some(Num::Int(u64::from(v.consecutive_probe_successes))),
        );
        // Recovery.
        self.family(
            "probes_needed",
            Gauge,
            "Good probes in a row that close the breaker (0 when closed).",
            |v| Some(Num::Int(u64::from(v.probes_needed))),
        );
        self.family(
            "ramp_share",
            Gauge,
            "Share of requests let through, 0 to 1: below 1 while a recovery ramp runs.",
            |v| Some(share(v.ramp_share)),
        );
        self.family(
            "window_seconds",
            Gauge,
            "Length of the sliding window in seconds.",
            |v| Some(Num::Int(u64::from(v.window.seconds))),
        );
        self.family(
            "window_requests",
            Gauge,
            "Attempts recorded in the window.",
            |v| Some(Num::Int(v.window.requests)),
        );
        self.family(
            "window_failures",
            Gauge,
            "Failures recorded in the window.",
            |v| Some(Num::Int(v.window.failures)),
        );
        self.family(
            "window_slow",
            Gauge,
            "Slow calls recorded in the window.",
            |v| Some(Num::Int(v.window.slow)),
        );
        self.family(
            "failure_rate",
            Gauge,
            "Failures per attempt in the window (0 when empty).",
            |v| Some(ratio(v.window.failures, v.window.requests)),
        );
        self.family(
            "slow_rate",
            Gauge,
            "Slow calls per attempt in the window (0 when empty).",
            |v| Some(ratio(v.window.slow, v.window.requests)),
        );
        self.split_family(
            "latency_seconds",
            Gauge,
            "Upstream response time percentiles over the window in seconds (a gauge per \
             percentile: the window's histogram has no sum, so it is not a summary).",
            ("percentile", &["50", "95", "99"]),
            |v, i| [v.latency.p50, v.latency.p95, v.latency.p99][i].map(secs),
        );
        self.family("requests_total", Counter, "Attempts recorded.", |v| {
            Some(Num::Int(v.totals.requests))
        });
        self.family(
            "failures_total",
            Counter,
            "Attempts classified as failures.",
            |v| Some(Num::Int(v.totals.failures)),
        );
        self.family("slow_total", Counter, "Slow attempts.", |v| {
            Some(Num::Int(v.totals.slow))
        });
        self.family(
            "short_circuited_total",
            Counter,
            "Requests answered without touching the origin (in dry run: that would have been).",
            |v| Some(Num::Int(v.totals.short_circuited)),
        );
        self.family("probes_total", Counter, "Probes started.", |v| {
            Some(Num::Int(v.totals.probes))
        });
        self.family(
            "tls_errors_total",
            Counter,
            "TLS handshake or certificate failures (not counted as origin failures).",
            |v| Some(Num::Int(v.totals.tls_errors)),
        );
        self.family(
            "retry_after_503_total",
            Counter,
            "503 responses that carried Retry-After.",
            |v| Some(Num::Int(v.totals.retry_after_503)),
        );
        self.split_family(
            "transitions_total",
            Counter,
            "State transitions, by the state entered.",
            ("to", &["open", "half_open", "closed"]),
            |v, i| {
                let t = &v.totals;
                Some(Num::Int([t.opened, t.half_opened, t.closed][i]))
            },
        );
        // Recovery.
        self.family(
            "ramp_shed_total",
            Counter,
            "Requests a recovery ramp turned away (not in short_circuited_total).",
            |v| Some(Num::Int(v.totals.ramp_shed)),
        );
        self.family(
            "explained_total",
            Counter,
            "Failures of a pool's servers that their ejection explains, left out of the window.",
            |v| Some(Num::Int(v.totals.explained)),
        );

        self.limit_family(
            "limit",
            Gauge,
            "Adaptive in-flight limit: requests admitted while fewer than this are in flight.",
            |l| Some(Num::Int(u64::from(l.limit))),
        );
        self.limit_family(
            "in_flight",
            Gauge,
            "Requests holding a slot of the adaptive limit (all workers).",
            |l| Some(Num::Int(u64::from(l.in_flight))),
        );
        self.limit_family(
            "limit_min_latency_seconds",
            Gauge,
            "Minimum latency the adaptive limit works from (mean of a drained interval).",
            |l| latency_s(l.min_latency_ms),
        );
        self.limit_family(
            "limit_latency_seconds",
            Gauge,
            "Mean upstream latency of the adaptive limit's last interval.",
            |l| latency_s(l.last_latency_ms),
        );
        self.limit_family(
            "limited_total",
            Counter,
            "Requests shed by the adaptive limit (in dry run: that would have been).",
            |l| Some(Num::Int(l.shed)),
        );
        self.limit_family(
            "limit_capped_total",
            Counter,
            "Of those, requests of a client holding most of the limit, turned away at its cap.",
            |l| Some(Num::Int(l.capped)),
        );
        self.class_family(
            "limit_class_admitted_total",
            Counter,
            "Requests of a class the adaptive limit admitted (circuit_breaker_class).",
            |f| Num::Int(f.admitted),
        );
        self.class_family(
            "limit_class_shed_total",
            Counter,
            "Requests of a class the adaptive limit shed (in dry run: that would have been).",
            |f| Num::Int(f.shed),
        );
        self.class_family(
            "limit_class_in_flight",
            Gauge,
            "Requests of a class holding a slot of the adaptive limit (all workers).",
            |f| Num::Int(u64::from(f.in_flight)),
        );

        self.budget_family(
            "retries_total",
            "Retries the upstream's retry budget let through.",
            |r| r.retries_total,
        );
        self.budget_family(
            "retries_denied_total",
            "Retries the upstream's retry budget denied (the client got the failed attempt's answer).",
            |r| r.retries_denied_total,
        );

        self.server_family(
            "server_state",
            Gauge,
            "A server's place in its upstream's pool: 0 in, 1 probing, 2 ejected.",
            |v| Some(Num::Int(u64::from(v.state.code()))),
        );
        self.server_family(
            "server_returns_at_seconds",
            Gauge,
            "Unix time an ejected server may be probed to return (absent while in).",
            |v| v.retry_at_ms.map(secs),
        );
        self.server_family(
            "server_ramp_share",
            Gauge,
            "Share of its picks a returning server takes, 0..1 (below 1 on its ramp).",
            |v| Some(share(v.ramp_share)),
        );
        self.server_family(
            "server_cooldown_seconds",
            Gauge,
            "A server's current ejection time in seconds (doubles on repeated ejections).",
            |v| Some(secs(v.cooldown_ms)),
        );
        self.server_family(
            "server_window_requests",
            Gauge,
            "Attempts sent to the server in the window.",
            |v| Some(Num::Int(v.window.requests)),
        );
        self.server_family(
            "server_window_failures",
            Gauge,
            "Failed attempts of the server in the window.",
            |v| Some(Num::Int(v.window.failures)),
        );
        self.server_split_family(
            "server_latency_seconds",
            Gauge,
            "A server's response time percentiles over its window in seconds; the 90th is what \
             its pool's relative rules judge it by.",
            ("percentile", &["50", "90", "99"]),
            |v, i| [v.latency.p50, v.latency.p90, v.latency.p99][i].map(secs),
        );
        self.server_family(
            "server_failure_rate",
            Gauge,
            "Failures per attempt of the server in the window (0 when empty).",
            |v| Some(ratio(v.window.failures, v.window.requests)),
        );
        self.server_family(
            "server_requests_total",
            Counter,
            "Attempts sent to the server.",
            |v| Some(Num::Int(v.totals.requests)),
        );
        self.server_family(
            "server_failures_total",
            Counter,
            "Failed attempts of the server.",
            |v| Some(Num::Int(v.totals.failures)),
        );
        self.server_family(
            "server_ejections_total",
            Counter,
            "Times the server was taken out of the pool (again after a failed probe).",
            |v| Some(Num::Int(v.totals.opened)),
        );
        self.server_family(
            "server_returns_total",
            Counter,
            "Times the server returned to the pool.",
            |v| Some(Num::Int(v.totals.closed)),
        );
    }

    /// A family with one sample per server (labels `zone`, `upstream`, `server`).
    fn server_family(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        value: impl Fn(&BreakerView) -> Option<Num>,
    ) {
        let head = [PREFIX, name, "{"].concat();
        let mut headed = false;
        for i in 0..self.servers.len() {
            let (s, labels) = self.servers[i];
            let Some(v) = value(&s.view) else { continue };
            if !headed {
                self.header(name, kind, help);
                headed = true;
            }
            self.sample(head.as_bytes(), labels, b"} ", v);
        }
    }

    /// A family with a sample for each server and each value of `split`'s label.
    fn server_split_family(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        split: Split,
        value: impl Fn(&BreakerView, usize) -> Option<Num>,
    ) {
        let rows: Vec<_> = self.servers.iter().map(|(s, l)| (&s.view, *l)).collect();
        self.split_rows(name, kind, help, split, &rows, value);
    }

    /// A family with a sample for each breaker that has an adaptive limit.
    fn limit_family(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        value: impl Fn(&LimitStatus) -> Option<Num>,
    ) {
        let head = [PREFIX, name, "{"].concat();
        let mut headed = false;
        let entries = self.entries;
        for (i, e) in entries.iter().enumerate() {
            let Some(v) = e.limit.as_ref().and_then(&value) else {
                continue;
            };
            if !headed {
                self.header(name, kind, help);
                headed = true;
            }
            self.sample(head.as_bytes(), self.spans[i], b"} ", v);
        }
    }

    /// A family with one sample per class of each limit whose classes are in use (labels
    /// `zone`, `upstream`, `route`, `class`).
    fn class_family(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        value: impl Fn(&crate::status::ClassFigures) -> Num,
    ) {
        let head = [PREFIX, name, "{"].concat();
        let mut headed = false;
        let entries = self.entries;
        for (i, e) in entries.iter().enumerate() {
            let Some(classes) = e.limit.as_ref().and_then(|l| l.classes.as_ref()) else {
                continue;
            };
            if !headed {
                self.header(name, kind, help);
                headed = true;
            }
            for (c, f) in crate::class::Class::ALL.iter().zip(classes) {
                let tail = [",class=\"", c.name(), "\"} "].concat();
                self.sample(head.as_bytes(), self.spans[i], tail.as_bytes(), value(f));
            }
        }
    }

    /// A counter family with one sample per upstream with a retry budget (labels `zone`,
    /// `upstream`).
    fn budget_family(&mut self, name: &str, help: &str, value: impl Fn(&RetryBudgetView) -> u64) {
        let head = [PREFIX, name, "{"].concat();
        for i in 0..self.budgets.len() {
            if i == 0 {
                self.header(name, Kind::Counter, help);
            }
            let (r, labels) = self.budgets[i];
            self.sample(head.as_bytes(), labels, b"} ", Num::Int(value(r)));
        }
    }

    fn header(&mut self, name: &str, kind: Kind, help: &str) {
        let out = &mut self.out;
        out.extend_from_slice(b"# HELP ");
        out.extend_from_slice(PREFIX.as_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(b' ');
        // Help texts are constants free of `\` and newlines, which would need escaping.
        out.extend_from_slice(help.as_bytes());
        out.extend_from_slice(b"\n# TYPE ");
        out.extend_from_slice(PREFIX.as_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(match kind {
            Kind::Gauge => b" gauge\n",
            Kind::Counter => b" counter\n",
        });
    }

    /// One sample: `head` (`nginx_circuit_breaker_NAME{`), the label set, `tail` (`} ` or
    /// `,split="value"} `), the value.
    fn sample(&mut self, head: &[u8], labels: (usize, usize), tail: &[u8], v: Num) {
        let out = &mut self.out;
        out.extend_from_slice(head);
        out.extend_from_slice(&self.labels[labels.0..labels.1]);
        out.extend_from_slice(tail);
        write_num(out, v);
        out.push(b'\n');
    }

    /// `build_info{version="…",nginx="…"} 1`, the usual way to export versions: a dashboard
    /// joins on it or counts the fleet by version.
    fn build_info(&mut self, zone: &ZoneView) {
        self.header(
            "build_info",
            Kind::Gauge,
            "The module's version and the nginx version it was built for, as labels (always 1).",
        );
        let out = &mut self.out;
        out.extend_from_slice(PREFIX.as_bytes());
        out.extend_from_slice(b"build_info{version=\"");
        escape_label_value(out, zone.module_version);
        out.extend_from_slice(b"\",nginx=\"");
        escape_label_value(out, zone.nginx_version);
        out.extend_from_slice(b"\"} 1\n");
    }

    /// `zone_info{zone="…",module="http"|"stream"} 1`: which proxy's breakers each zone
    /// keeps, for a dashboard to join on.
    fn zone_info(&mut self, zones: &[(&ZoneView, &[Entry])]) {
        self.header(
            "zone_info",
            Kind::Gauge,
            "The proxy whose breakers the zone keeps, as the label module (http or stream; \
             always 1).",
        );
        let head = [PREFIX, "zone_info{"].concat();
        for (i, (zone, _)) in zones.iter().enumerate() {
            let tail: &[u8] = if zone.stream {
                b",module=\"stream\"} "
            } else {
                b",module=\"http\"} "
            };
            self.sample(head.as_bytes(), self.zones[i].0, tail, Num::Int(1));
        }
    }

    /// A family with a sample per zone, given the zone's index (`None`: none for that zone).
    fn zone_family(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        zones: &[(&ZoneView, &[Entry])],
        value: impl Fn(usize, &ZoneView) -> Option<Num>,
    ) {
        let head = [PREFIX, name, "{"].concat();
        let mut headed = false;
        for (i, (zone, _)) in zones.iter().enumerate() {
            let Some(v) = value(i, zone) else { continue };
            if !headed {
                self.header(name, kind, help);
                headed = true;
            }
            self.sample(head.as_bytes(), self.zones[i].0, b"} ", v);
        }
    }

    /// A family with at most one sample per breaker (`None`: no sample for that breaker).
    fn family(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        value: impl Fn(&BreakerView) -> Option<Num>,
    ) {
        self.split_family(name, kind, help, ("", &[""]), |v, _| value(v));
    }

    /// A family with one sample per breaker and value of the `split` label (`None`: no
    /// sample; split label values are constants needing no escaping). `HELP` and `TYPE` are written before the first sample, so a family without
    /// samples is left out.
    fn split_family(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        split: Split,
        value: impl Fn(&BreakerView, usize) -> Option<Num>,
    ) {
        let entries = self.entries;
        let rows: Vec<_> = entries
            .iter()
            .zip(self.spans.iter())
            .map(|(e, l)| (&e.view, *l))
            .collect();
        self.split_rows(name, kind, help, split, &rows, value);
    }

    /// The samples of `rows` (a view and its label set), one per value of `split`'s label.
    fn split_rows(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        split: Split,
        rows: &[(&BreakerView, (usize, usize))],
        value: impl Fn(&BreakerView, usize) -> Option<Num>,
    ) {
        let head = [PREFIX, name, "{"].concat();
        let tails: Vec<String> = split
            .1
            .iter()
            .map(|value| match split.0 {
                "" => "} ".to_string(),
                label => format!(",{label}=\"{value}\"}} "),
            })
            .collect();
        let mut headed = false;
        for &(view, labels) in rows {
            for (j, tail) in tails.iter().enumerate() {
                let Some(v) = value(view, j) else { continue };
                if !headed {
                    self.header(name, kind, help);
                    headed = true;
                }
                self.sample(head.as_bytes(), labels, tail.as_bytes(), v);
            }
        }
    }
}

/// Escapes a label value as the text format requires: `\` → `\\`, `"` → `\"`, newline → `\n`.
fn escape_label_value(out: &mut Vec<u8>, value: &str) {
    let bytes = value.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escaped: &[u8] = match b {
            b'\\' => b"\\\\",
            b'"' => b"\\\"",
            b'\n' => b"\\n",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escaped);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

#[cfg(test)]
mod tests {
    use super::super::tests::{
        closed_entry, example_entry, example_zone, limited_entry, many_entries, pool_entry,
    };
    use super::super::{render_breaker_prometheus, render_prometheus, Entry, ZoneView};
    use crate::snapshot::Forced;
    use std::collections::{HashMap, HashSet};

    fn render(zone: &ZoneView, entries: &[Entry]) -> String {
        String::from_utf8(render_prometheus(zone, entries)).expect("UTF-8")
    }

    /// A parsed sample: metric name, labels in order, value.
    #[derive(Debug)]
    struct Sample {
        name: String,
        labels: Vec<(String, String)>,
        value: f64,
    }

    fn is_metric_name(s: &str) -> bool {
        let mut chars = s.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }

    fn is_label_name(s: &str) -> bool {
        let mut chars = s.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    }

    /// Parses `{a="x",b="y"}` at the start of `s`, unescaping values; returns the rest.
    fn parse_labels(mut s: &str) -> (Vec<(String, String)>, &str) {
        let mut labels = Vec::new();
        s = s.strip_prefix('{').expect("{");
        loop {
            if let Some(rest) = s.strip_prefix('}') {
                return (labels, rest);
            }
            let eq = s.find('=').expect("=");
            let name = &s[..eq];
            assert!(is_label_name(name), "label name {name:?}");
            s = s[eq + 1..].strip_prefix('"').expect("opening quote");
            let mut value = String::new();
            let mut chars = s.char_indices();
            let end = loop {
                match chars.next().expect("closing quote") {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next().expect("escape").1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        c => panic!("bad escape \\{c}"),
                    },
                    (_, '\n') => panic!("raw newline in label value"),
                    (_, c) => value.push(c),
                }
            };
            labels.push((name.to_string(), value));
            s = &s[end + 1..];
            s = s.strip_prefix(',').unwrap_or(s);
        }
    }

    /// A small validator of the text format: every sample's family has `# HELP` then
    /// `# TYPE` before it, each family once and contiguous, valid names, values parse as
    /// f64, no duplicate series. Returns the samples and each family's type.
    fn validate(text: &str) -> (Vec<Sample>, HashMap<String, String>) {
        assert!(text.ends_with('\n'), "ends with a newline");
        let mut samples = Vec::new();
        let mut types = HashMap::new();
        let mut helped = HashSet::new();
        let mut finished = HashSet::new();
        let mut current: Option<String> = None;
        let mut series = HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect("HELP text");
                assert!(is_metric_name(name), "{line}");
                assert!(!help.is_empty());
                assert!(helped.insert(name.to_string()), "HELP twice: {line}");
                assert!(!finished.contains(name), "family not contiguous: {line}");
                if let Some(prev) = current.replace(name.to_string()) {
                    finished.insert(prev);
                }
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE kind");
                assert_eq!(
                    current.as_deref(),
                    Some(name),
                    "TYPE right after HELP: {line}"
                );
                assert!(matches!(kind, "gauge" | "counter"), "{line}");
                assert!(
                    types.insert(name.to_string(), kind.to_string()).is_none(),
                    "TYPE twice: {line}"
                );
            } else {
                assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
                let brace = line.find('{').expect("labelled sample");
                let name = &line[..brace];
                assert!(is_metric_name(name), "{line}");
                assert_eq!(current.as_deref(), Some(name), "sample outside its family");
                assert!(types.contains_key(name), "sample before TYPE: {line}");
                let (labels, rest) = parse_labels(&line[brace..]);
                let value = rest.strip_prefix(' ').expect("space before value");
                let value: f64 = value.parse().unwrap_or_else(|_| panic!("value: {line}"));
                assert!(value.is_finite());
                if types[name] == "counter" {
                    assert!(name.ends_with("_total"), "{line}");
                }
                assert!(
                    series.insert(format!("{name}{labels:?}")),
                    "duplicate series {line}"
                );
                samples.push(Sample {
                    name: name.to_string(),
                    labels,
                    value,
                });
            }
        }
        (samples, types)
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn example_line_by_line() {
        let text = render(&example_zone(), &[example_entry()]);
        let l = r#"{zone="cb",upstream="api",route="checkout"}"#;
        let p = "nginx_circuit_breaker_";
        let mut expected = vec![
            format!("# HELP {p}build_info The module's version and the nginx version it was built for, as labels (always 1)."),
            format!("# TYPE {p}build_info gauge"),
            format!(r#"{p}build_info{{version="1.2.3",nginx="1.28.3"}} 1"#),
            format!(
                "# HELP {p}zone_info The proxy whose breakers the zone keeps, as the label \
                 module (http or stream; always 1)."
            ),
            format!("# TYPE {p}zone_info gauge"),
            format!(r#"{p}zone_info{{zone="cb",module="http"}} 1"#),
            format!("# HELP {p}zone_size_bytes Size of the shared memory zone in bytes."),
            format!("# TYPE {p}zone_size_bytes gauge"),
            format!(r#"{p}zone_size_bytes{{zone="cb"}} 10485760"#),
            format!("# HELP {p}zone_used_bytes Bytes allocated from the shared memory zone."),
            format!("# TYPE {p}zone_used_bytes gauge"),
            format!(r#"{p}zone_used_bytes{{zone="cb"}} 8192"#),
        ];
        expected.extend([
            format!("# HELP {p}zone_alloc_failures_total Breakers not created because the zone was full (they fail open)."),
            format!("# TYPE {p}zone_alloc_failures_total counter"),
            format!(r#"{p}zone_alloc_failures_total{{zone="cb"}} 0"#),
            format!("# HELP {p}breakers Number of breakers shown (all in the zone unless filtered)."),
            format!("# TYPE {p}breakers gauge"),
            format!(r#"{p}breakers{{zone="cb"}} 1"#),
        ]);
        let samples = [
            ("state", "gauge", "2"),
            ("dry_run", "gauge", "0"),
            ("forced", "gauge", r#"{state="open"} 0"#),
            ("", "", r#"{state="closed"} 0"#),
            ("state_since_seconds", "gauge", "1764484800.123"),
            ("open_since_seconds", "gauge", "1764484790.5"),
            ("retry_at_seconds", "gauge", "1764484830.5"),
            ("cooldown_seconds", "gauge", "30.0"),
            ("consecutive_probe_successes", "gauge", "0"),
            ("probes_needed", "gauge", "3"),
            ("ramp_share", "gauge", "1.0"),
            ("window_seconds", "gauge", "10"),
            ("window_requests", "gauge", "40"),
            ("window_failures", "gauge", "22"),
            ("window_slow", "gauge", "3"),
            ("failure_rate", "gauge", "0.55"),
            ("slow_rate", "gauge", "0.075"),
            ("latency_seconds", "gauge", r#"{percentile="50"} 0.041"#),
            ("", "", r#"{percentile="95"} 0.612"#),
            ("", "", r#"{percentile="99"} 0.9"#),
            ("requests_total", "counter", "123456"),
            ("failures_total", "counter", "812"),
            ("slow_total", "counter", "77"),
            ("short_circuited_total", "counter", "5120"),
            ("probes_total", "counter", "4"),
            ("tls_errors_total", "counter", "0"),
            ("retry_after_503_total", "counter", "0"),
            ("transitions_total", "counter", r#"{to="open"} 3"#),
            ("", "", r#"{to="half_open"} 2"#),
            ("", "", r#"{to="closed"} 1"#),
            ("ramp_shed_total", "counter", "0"),
            ("explained_total", "counter", "0"),
        ];
        let mut family = "";
        for (name, kind, value) in samples {
            if !name.is_empty() {
                family = name;
                expected.push(format!("# HELP {p}{name} <help>"));
                expected.push(format!("# TYPE {p}{name} {kind}"));
            }
            if let Some(split) = value.strip_prefix('{') {
                let inner = &l[..l.len() - 1];
                expected.push(format!("{p}{family}{inner},{split}"));
            } else {
                expected.push(format!("{p}{family}{l} {value}"));
            }
        }
        let got: Vec<&str> = text.lines().collect();
        assert_eq!(got.len(), expected.len(), "{text}");
        for (got, want) in got.iter().zip(&expected) {
            if let Some(prefix) = want.strip_suffix("<help>") {
                assert!(
                    got.starts_with(prefix) && got.len() > prefix.len() + 3,
                    "{got}"
                );
            } else {
                assert_eq!(got, want);
            }
        }
        validate(&text);
    }

    #[test]
    fn limit_families_only_for_limited_breakers() {
        let text = render(&example_zone(), &[example_entry(), limited_entry()]);
        let (samples, types) = validate(&text);
        let l = r#"{zone="cb",upstream="backend",route="default"}"#;
        let p = "nginx_circuit_breaker_";
        for (name, kind, value) in [
            ("limit", "gauge", "12"),
            ("in_flight", "gauge", "7"),
            ("limit_min_latency_seconds", "gauge", "0.00525"),
            ("limit_latency_seconds", "gauge", "0.031"),
            ("limited_total", "counter", "4321"),
            ("limit_capped_total", "counter", "21"),
        ] {
            assert_eq!(types[&format!("{p}{name}")], kind);
            assert!(
                text.contains(&format!("\n{p}{name}{l} {value}\n")),
                "{name}"
            );
            let n = samples.iter().filter(|s| s.name == format!("{p}{name}"));
            assert_eq!(n.count(), 1, "{name}: the breaker without a limit has none");
        }
        let json: serde_json::Value =
            serde_json::from_slice(&super::super::render_breaker_json(&limited_entry())).unwrap();
        assert_eq!(json["limit"]["min_latency_ms"].as_f64(), Some(5.25));
        // Before the first update the latencies are absent, the counts present.
        let mut fresh = limited_entry();
        fresh.limit.as_mut().unwrap().min_latency_ms = 0.0;
        fresh.limit.as_mut().unwrap().last_latency_ms = 0.0;
        let text = render(&example_zone(), &[fresh]);
        validate(&text);
        assert!(!text.contains("limit_min_latency_seconds") && !text.contains("limit_latency"));
        assert!(text.contains(&format!("{p}in_flight{l} 7\n")));
        // Without limits, no family.
        assert!(!render(&example_zone(), &[example_entry()]).contains("in_flight"));
    }

    #[test]
    fn class_families_once_classes_are_in_use() {
        let mut classed = limited_entry();
        classed.limit.as_mut().unwrap().classes = Some([
            crate::status::ClassFigures {
                admitted: 90,
                shed: 0,
                in_flight: 3,
            },
            Default::default(),
            crate::status::ClassFigures {
                admitted: 40,
                shed: 17,
                in_flight: 4,
            },
        ]);
        let text = render(&example_zone(), &[example_entry(), classed]);
        let (_, types) = validate(&text);
        let p = "nginx_circuit_breaker_limit_class_";
        let l = r#"{zone="cb",upstream="backend",route="default",class="#;
        assert_eq!(types[&format!("{p}shed_total")], "counter");
        assert_eq!(types[&format!("{p}in_flight")], "gauge");
        for want in [
            format!("{p}admitted_total{l}\"critical\"}} 90"),
            format!("{p}shed_total{l}\"sheddable\"}} 17"),
            format!("{p}shed_total{l}\"default\"}} 0"),
            format!("{p}in_flight{l}\"sheddable\"}} 4"),
        ] {
            assert!(text.contains(&format!("\n{want}\n")), "{want}\n{text}");
        }
        assert_eq!(text.matches(&format!("{p}admitted_total{{")).count(), 3);
        assert!(!render(&example_zone(), &[limited_entry()]).contains("limit_class"));
    }

    #[test]
    fn servers_and_retry_budgets_have_their_own_labels() {
        let text = render(&example_zone(), &[example_entry(), pool_entry()]);
        let (samples, types) = validate(&text);
        assert_eq!(types["nginx_circuit_breaker_retries_total"], "counter");
        assert_eq!(types["nginx_circuit_breaker_server_state"], "gauge");
        let find = |name: &str, server: Option<&str>| {
            samples
                .iter()
                .filter(|s| s.name == format!("nginx_circuit_breaker_{name}"))
                .filter(|s| server.map_or(true, |a| s.labels.iter().any(|l| l.1 == a)))
                .map(|s| {
                    let labels: Vec<&str> = s.labels.iter().map(|l| l.0.as_str()).collect();
                    (labels.join(","), s.value)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            find("retries_total", None),
            [("zone,upstream".to_string(), 30.0)]
        );
        assert_eq!(
            find("retries_denied_total", None),
            [("zone,upstream".to_string(), 4.0)]
        );
        let one = Some("10.0.0.1:8080");
        assert_eq!(
            find("server_state", one),
            [("zone,upstream,server".to_string(), 2.0)]
        );
        assert_eq!(find("server_state", Some("10.0.0.2:8080"))[0].1, 0.0);
        assert_eq!(find("server_returns_at_seconds", one)[0].1, 1_764_484_810.0);
        assert!(find("server_returns_at_seconds", Some("10.0.0.2:8080")).is_empty());
        assert_eq!(find("server_window_requests", one)[0].1, 10.0);
        assert_eq!(find("server_failure_rate", one)[0].1, 0.6);
        assert_eq!(find("server_ejections_total", one)[0].1, 2.0);
        assert_eq!(find("server_returns_total", one)[0].1, 1.0);
        assert_eq!(find("server_cooldown_seconds", one)[0].1, 10.0);
        assert_eq!(find("server_ramp_share", one)[0].1, 1.0);
        // Without servers or budgets, the families are left out.
        let text = render(&example_zone(), &[example_entry()]);
        assert!(!text.contains("server_") && !text.contains("retries_"));
    }

    #[test]
    fn families_are_valid_and_grouped() {
        let text = render(&example_zone(), &many_entries(50));
        let (samples, types) = validate(&text);
        // Every family is present (the example breakers have latency and retry_at).
        assert_eq!(types.len(), 6 + 27);
        let count = |name: &str| {
            samples
                .iter()
                .filter(|s| s.name == format!("nginx_circuit_breaker_{name}"))
                .count()
        };
        assert_eq!(count("build_info"), 1);
        assert_eq!(count("breakers"), 1);
        assert_eq!(count("state"), 50);
        assert_eq!(count("forced"), 100);
        assert_eq!(count("transitions_total"), 150);
        // Only the 25 open example breakers have latency and a probe time.
        assert_eq!(count("latency_seconds"), 75);
        assert_eq!(count("retry_at_seconds"), 25);
        for s in samples.iter().filter(|s| !s.name.ends_with("_build_info")) {
            assert_eq!(s.labels[0].0, "zone");
            if !s.name.contains("zone_") && !s.name.ends_with("_breakers") {
                assert_eq!(s.labels[1].0, "upstream");
                assert_eq!(s.labels[2].0, "route");
            }
        }
    }

    #[test]
    fn none_values_are_omitted_and_empty_families_dropped() {
        let text = render(&example_zone(), &[closed_entry()]);
        let (samples, types) = validate(&text);
        assert!(!text.contains("retry_at_seconds"));
        assert!(!text.contains("latency_seconds"));
        assert_eq!(types.len(), 6 + 24);
        let l = labels(&[
            ("zone", "cb"),
            ("upstream", "backend"),
            ("route", "default"),
        ]);
        let find = |name: &str| {
            samples
                .iter()
                .find(|s| s.name == format!("nginx_circuit_breaker_{name}"))
                .unwrap()
        };
        assert_eq!(find("state").labels, l);
        assert_eq!(find("state").value, 0.0);
        assert_eq!(find("dry_run").value, 1.0);
        assert_eq!(find("failure_rate").value, 0.0);
        assert_eq!(find("state_since_seconds").value, 1_764_484_000.0);
        assert!(text.contains("nginx_circuit_breaker_failure_rate{zone=\"cb\",upstream=\"backend\",route=\"default\"} 0.0\n"));

        // No breakers at all: build and zone families only.
        let text = render(&example_zone(), &[]);
        let (samples, types) = validate(&text);
        assert_eq!(types.len(), 6);
        assert_eq!(samples.len(), 6);
        assert!(text.contains("nginx_circuit_breaker_breakers{zone=\"cb\"} 0\n"));
    }

    #[test]
    fn the_stream_zones_share_every_family() {
        let http = example_zone();
        let stream = ZoneView {
            name: "circuit_breaker_stream".into(),
            stream: true,
            ..example_zone()
        };
        let mut db = closed_entry();
        db.upstream = "db".into();
        let (h, s) = ([example_entry()], [db]);
        let text = crate::status::render_prometheus_zones(&[(&http, &h[..]), (&stream, &s[..])]);
        let text = String::from_utf8(text).unwrap();
        // Each family once (validate refuses a second HELP), with both zones' samples.
        let (samples, _) = validate(&text);
        let zones_of = |name: &str| {
            samples
                .iter()
                .filter(|x| x.name == format!("nginx_circuit_breaker_{name}"))
                .map(|x| x.labels[0].1.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(zones_of("state"), ["cb", "circuit_breaker_stream"]);
        assert_eq!(
            zones_of("zone_size_bytes"),
            ["cb", "circuit_breaker_stream"]
        );
        assert_eq!(zones_of("build_info").len(), 1);
        assert!(text.contains(
            "nginx_circuit_breaker_zone_info{zone=\"circuit_breaker_stream\",module=\"stream\"} 1\n"
        ));
        assert!(text.contains("nginx_circuit_breaker_zone_info{zone=\"cb\",module=\"http\"} 1\n"));
        assert!(text.contains(
            "nginx_circuit_breaker_state{zone=\"circuit_breaker_stream\",upstream=\"db\",route=\"default\"} 0\n"
        ));
        assert!(
            text.contains("nginx_circuit_breaker_breakers{zone=\"circuit_breaker_stream\"} 1\n")
        );
    }

    #[test]
    fn one_breaker_without_zone_families() {
        let e = example_entry();
        let one = String::from_utf8(render_breaker_prometheus("cb", &e)).expect("UTF-8");
        let (samples, _) = validate(&one);
        assert!(!one.contains("zone_"), "{one}");
        assert!(!one.contains("nginx_circuit_breaker_breakers"), "{one}");
        assert!(samples.iter().all(|s| s.labels[..3]
            == labels(&[("zone", "cb"), ("upstream", "api"), ("route", "checkout")])));
        // Exactly the breaker part of the whole page for that breaker.
        let page = render(&example_zone(), &[e]);
        let from = page.find("# HELP nginx_circuit_breaker_state ").unwrap();
        assert_eq!(one, page[from..]);
    }

    #[test]
    fn forced_and_partial_latency() {
        let mut e = example_entry();
        e.view.forced = Some(Forced::Open);
        e.view.latency.p95 = None;
        let text = render(&example_zone(), &[e.clone()]);
        validate(&text);
        let l = r#"zone="cb",upstream="api",route="checkout""#;
        assert!(text.contains(&format!(
            "nginx_circuit_breaker_forced{{{l},state=\"open\"}} 1\nnginx_circuit_breaker_forced{{{l},state=\"closed\"}} 0\n"
        )));
        assert!(text.contains(&format!(
            "nginx_circuit_breaker_latency_seconds{{{l},percentile=\"50\"}} 0.041\nnginx_circuit_breaker_latency_seconds{{{l},percentile=\"99\"}} 0.9\n"
        )));
        e.view.forced = Some(Forced::Closed);
        let text = render(&example_zone(), &[e]);
        assert!(text.contains(&format!(
            "nginx_circuit_breaker_forced{{{l},state=\"open\"}} 0\nnginx_circuit_breaker_forced{{{l},state=\"closed\"}} 1\n"
        )));
    }

    #[test]
    fn label_values_are_escaped() {
        let mut e = closed_entry();
        e.upstream = "a\\b\"c\nd\té💥{}=,".into();
        e.route = "\"".into();
        let zone = ZoneView {
            name: "z\\".into(),
            ..example_zone()
        };
        let text = render(&zone, &[e]);
        let (samples, _) = validate(&text);
        assert!(text.contains(r#"{zone="z\\",upstream="a\\b\"c\nd	é💥{}=,",route="\""}"#));
        for s in samples.iter().filter(|s| !s.name.ends_with("_build_info")) {
            assert_eq!(s.labels[0], ("zone".to_string(), "z\\".to_string()));
        }
        let state = samples
            .iter()
            .find(|s| s.name == "nginx_circuit_breaker_state")
            .unwrap();
        assert_eq!(
            state.labels,
            labels(&[
                ("zone", "z\\"),
                ("upstream", "a\\b\"c\nd\té💥{}=,"),
                ("route", "\""),
            ])
        );
    }

    #[test]
    fn build_info_comes_first_with_both_versions() {
        let zone = ZoneView {
            module_version: "0.2.0",
            nginx_version: "1.22.1",
            ..example_zone()
        };
        let text = render(&zone, &[closed_entry()]);
        let (samples, types) = validate(&text);
        assert_eq!(types["nginx_circuit_breaker_build_info"], "gauge");
        let info = &samples[0];
        assert_eq!(info.name, "nginx_circuit_breaker_build_info");
        assert_eq!(
            info.labels,
            labels(&[("version", "0.2.0"), ("nginx", "1.22.1")])
        );
        assert_eq!(info.value, 1.0);
        // A version is never expected to hold them, but the label stays valid if it does.
        let odd = ZoneView {
            module_version: "1\"\\\n",
            ..zone
        };
        let (samples, _) = validate(&render(&odd, &[]));
        assert_eq!(samples[0].labels[0].1, "1\"\\\n");
    }

    #[test]
    fn values_agree_with_json() {
        let mut e = example_entry();
        e.view.window.requests = 3;
        e.view.window.failures = 2;
        e.view.window.slow = 1;
        e.view.since_ms = 1_764_484_830_050;
        let json: serde_json::Value =
            serde_json::from_slice(&super::super::render_breaker_json(&e)).unwrap();
        let text = render(&example_zone(), &[e]);
        let (samples, _) = validate(&text);
        let value = |name: &str| {
            samples
                .iter()
                .find(|s| s.name == format!("nginx_circuit_breaker_{name}"))
                .unwrap()
                .value
        };
        assert_eq!(
            value("failure_rate"),
            json["window"]["failure_rate"].as_f64().unwrap()
        );
        assert_eq!(
            value("slow_rate"),
            json["window"]["slow_rate"].as_f64().unwrap()
        );
        assert_eq!(
            value("state_since_seconds"),
            json["since"].as_f64().unwrap()
        );
        assert_eq!(
            value("retry_at_seconds"),
            json["retry_at"].as_f64().unwrap()
        );
        assert!(text.contains("} 0.6667\n") && text.contains("} 0.3333\n"));
        assert!(text.contains("} 1764484830.05\n"));
    }

    #[test]
    fn recovery_families() {
        let mut e = closed_entry();
        e.view.ramp_share = 2550;
        e.view.totals.ramp_shed = 12;
        e.view.totals.explained = 9;
        let text = render(&example_zone(), &[e]);
        validate(&text);
        let l = r#"{zone="cb",upstream="backend",route="default"}"#;
        for line in [
            format!("nginx_circuit_breaker_probes_needed{l} 0\n"),
            format!("nginx_circuit_breaker_ramp_share{l} 0.255\n"),
            format!("nginx_circuit_breaker_ramp_shed_total{l} 12\n"),
            format!("nginx_circuit_breaker_explained_total{l} 9\n"),
            "# TYPE nginx_circuit_breaker_ramp_shed_total counter\n".to_string(),
            "# TYPE nginx_circuit_breaker_ramp_share gauge\n".to_string(),
        ] {
            assert!(text.contains(&line), "{line}");
        }
    }

    #[test]
    fn write_num_forms() {
        use super::super::{write_num, Num};
        for (v, s) in [
            (Num::Int(0), "0"),
            (Num::Int(u64::MAX), "18446744073709551615"),
            (Num::Scaled(0, 4), "0.0"),
            (Num::Scaled(10_000, 4), "1.0"),
            (Num::Scaled(5_500, 4), "0.55"),
            (Num::Scaled(1, 4), "0.0001"),
            (Num::Scaled(750, 4), "0.075"),
            (Num::Scaled(1_764_484_800_123, 3), "1764484800.123"),
            (Num::Scaled(1_764_484_800_020, 3), "1764484800.02"),
            (Num::Scaled(1_764_484_800_000, 3), "1764484800.0"),
        ] {
            let mut out = Vec::new();
            write_num(&mut out, v);
            assert_eq!(std::str::from_utf8(&out).unwrap(), s);
        }
    }

    #[test]
    fn prometheus_renders_ten_thousand_breakers() {
        let entries = many_entries(10_000);
        let zone = example_zone();
        // Timing lives in `cargo bench -p circuit-breaker-core --bench status`.
        let out = render_prometheus(&zone, &entries);
        let (samples, _) = validate(std::str::from_utf8(&out).unwrap());
        assert_eq!(samples.len(), 6 + 10_000 * 27 + 5_000 * 5);
    }
}
