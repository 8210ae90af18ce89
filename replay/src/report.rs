//! What the replay prints: a summary per breaker, a sweep's table, or JSON.

use std::fmt::Write as _;
use std::io::{self, Write};

use serde_json::{json, Value};

use circuit_breaker_core::class::Class;

use crate::sim::{Counts, Replay};
use crate::stats::{human_ms, Stats};

/// A line that did not parse: its number (`FILE:N` with several logs) and why.
pub type BadLine = (String, String);

fn counts_line(c: &Counts) -> String {
    // Lines a live breaker refused only when there are some: a dry run's report stays as it was.
    let refused = if c.refused_live > 0 {
        format!(" ({} refused live)", c.refused_live)
    } else {
        String::new()
    };
    let mut s = format!(
        "{} lines: {} replayed{refused}, {} unparseable, {} without an upstream attempt, {} of \
         upstreams without a breaker, {} events late",
        c.lines, c.replayed, c.bad, c.no_attempt, c.no_breaker, c.late
    );
    // The bounds' counts only when hit: an ordinary log's report stays as it was.
    if c.early > 0 {
        let _ = write!(s, " ({} run early: the reorder buffer was full)", c.early);
    }
    if c.too_long > 0 || c.over_max_breakers > 0 {
        let _ = write!(
            s,
            "; refused: {} longer than --max-line, {} of breakers past --max-breakers",
            c.too_long, c.over_max_breakers
        );
    }
    s
}

/// The log's classes (`$circuit_breaker_class`), when any line names one: each class's
/// requests and what live breakers and the live limit turned away. The adaptive limit is not
/// replayed: its decisions rest on requests in flight and on the latency of answers, and the
/// log has neither for the requests it shed.
fn classes_line(c: &Counts) -> Option<String> {
    if c.classes.iter().all(|k| k.requests == 0) {
        return None;
    }
    let parts: Vec<String> = Class::ALL
        .iter()
        .zip(&c.classes)
        .filter(|(_, k)| k.requests > 0)
        .map(|(class, k)| {
            format!(
                "{} {} ({} refused live, {} of them by the limit)",
                class.name(),
                k.requests,
                k.refused_live,
                k.limited_live
            )
        })
        .collect();
    Some(format!(
        "classes: {}; the retry budget, a ramp and half-open probes replayed by class, the \
         adaptive limit not replayed",
        parts.join(", ")
    ))
}

/// One breaker's figures by class, when any of its requests has one.
fn classes_text(s: &Stats) -> String {
    let parts: Vec<String> = Class::ALL
        .iter()
        .zip(&s.classes)
        .filter(|(_, k)| k.requests > 0 || k.retries_denied > 0)
        .map(|(class, k)| {
            format!(
                "{} {} requests, refused {}, {} would not have retried",
                class.name(),
                k.requests,
                k.refused,
                k.retries_denied
            )
        })
        .collect();
    if parts.is_empty() {
        return String::new();
    }
    format!("  by class: {}\n", parts.join("; "))
}

fn classes_json<T>(all: &[T; 3], f: impl Fn(&T) -> Option<Value>) -> Value {
    let map: serde_json::Map<String, Value> = Class::ALL
        .iter()
        .zip(all)
        .filter_map(|(class, k)| f(k).map(|v| (class.name().to_owned(), v)))
        .collect();
    Value::Object(map)
}

/// What the replay's times and draws are: the module's clock or the log's, the live jitter
/// draws or random ones.
fn clock_line(r: &Replay) -> String {
    let c = &r.counts;
    let clock = if c.replayed > 0 && c.module_clock == c.replayed {
        "times: the module's ($circuit_breaker_msec)".to_owned()
    } else if c.module_clock > 0 {
        format!(
            "times: the module's for {} of {} requests ($circuit_breaker_msec), the others moved \
             onto it",
            c.module_clock, c.replayed
        )
    } else {
        "times: the log's wall clock ($msec: no $circuit_breaker_msec), buckets may differ near \
         a second's edge"
            .to_owned()
    };
    let draws = if r.keyed() {
        "jitter: the live draws (circuit_breaker_jitter_key)"
    } else {
        "jitter: drawn at random, not the live draws (no --jitter-key)"
    };
    // Said only when there are stream breakers: an http replay's report stays as it was.
    let stream = if r.keyed() && r.stream.contains(&true) {
        ", but stream breakers' at random (the stream zone takes no key)"
    } else {
        ""
    };
    format!("{clock}; {draws}{stream}")
}

fn setting_label(set: &[(String, String)]) -> String {
    set.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One breaker's lines; `what` its traffic (`requests`, a stream breaker's `sessions`).
fn stats_text(s: &Stats, what: &str) -> String {
    format!(
        "  opened {} time{} ({} more after a failed probe), {} flapping, open {} in all, \
         longest {}\n  {} {what}, {} bad; refused {}: {} failures spared, {} successes \
         lost{}\n",
        s.opens,
        if s.opens == 1 { "" } else { "s" },
        s.reopens,
        s.flaps,
        human_ms(s.open_ms),
        human_ms(s.longest_open_ms),
        s.requests,
        s.bad,
        s.refused,
        s.failures_spared,
        s.successes_lost,
        if s.refused_unjudged > 0 {
            format!(", {} without a verdict", s.refused_unjudged)
        } else {
            String::new()
        }
    ) + &if s.refused_live > 0 {
        format!(
            "  refused live {}: refused again by the replay {}, let through {} (never at the \
             origin: not recorded)\n",
            s.refused_live,
            s.refused_live - s.refused_live_let_through,
            s.refused_live_let_through
        )
    } else {
        String::new()
    } + &if s.retries > 0 {
        format!(
            "  {} retries in the log; {} requests would not have retried, {} rescues lost\n",
            s.retries, s.retries_denied, s.rescues_lost
        )
    } else {
        String::new()
    } + &classes_text(s)
}

/// The text report.
pub fn text(r: &Replay, bad: &[BadLine]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", counts_line(&r.counts));
    let c = &r.counts;
    if c.late > c.events / 100 {
        // Counted above, but easily read past: the results are wrong, not approximate. Here,
        // not on stderr, which scripts read with the JSON (`2>&1`).
        let _ = writeln!(
            out,
            "  warning: {} of {} events ran late, at later events' times: the input is out of \
             time order (logs concatenated? give each as its own LOG: they are merged by $msec), \
             or requests outlasted --reorder",
            c.late, c.events
        );
    }
    for (n, why) in bad {
        let _ = writeln!(out, "  line {n}: {why}");
    }
    let _ = writeln!(out, "{}", clock_line(r));
    if let Some(classes) = classes_line(c) {
        let _ = writeln!(out, "{classes}");
    }
    let sweep = r.sets().len() > 1;
    let mut total = vec![Stats::default(); r.sets().len()];
    let mut order: Vec<usize> = (0..r.names.len()).collect();
    order.sort_by(|&a, &b| r.names[a].cmp(&r.names[b]));
    for &i in &order {
        let runs = &r.runs[i];
        // A stream breaker is named apart from an http upstream of the same name.
        let (name, what) = match r.stream[i] {
            true => (format!("stream {}", r.shown[i]), "sessions"),
            false => (r.shown[i].to_string(), "requests"),
        };
        for (t, run) in total.iter_mut().zip(runs) {
            t.add(&run.stats);
        }
        if sweep {
            let _ = writeln!(out, "\nbreaker {name}");
            table(&mut out, r, runs.iter().map(|run| &run.stats));
        } else {
            let _ = writeln!(out, "\nbreaker {name}");
            out.push_str(&stats_text(&runs[0].stats, what));
        }
    }
    if sweep {
        let _ = writeln!(out, "\nall breakers");
        table(&mut out, r, total.iter());
    }
    if !r.pools.is_empty() {
        let moves = &r.pools.moves;
        let ejected = moves.iter().filter(|m| m.verb == "ejected").count();
        let _ = writeln!(
            out,
            "\npools (the configuration as given): {} attempts on servers, {ejected} \
             ejections, {} returns",
            r.pools.attempts,
            moves.len() - ejected
        );
        for m in moves.iter().take(SHOW_MOVES) {
            let _ = writeln!(out, "  line {}: {}", m.line, m.message());
        }
        if moves.len() > SHOW_MOVES {
            let _ = writeln!(
                out,
                "  ({} more: --transitions lists them all)",
                moves.len() - SHOW_MOVES
            );
        }
    }
    out
}

/// How many of the pools' moves the text report lists.
const SHOW_MOVES: usize = 20;

fn table<'a>(out: &mut String, r: &Replay, rows: impl Iterator<Item = &'a Stats>) {
    let labels: Vec<String> = r.sets().iter().map(|s| setting_label(s)).collect();
    let w = labels.iter().map(String::len).max().unwrap_or(0).max(7);
    let _ = writeln!(
        out,
        "  {:w$}  {:>6} {:>6} {:>6} {:>10} {:>10} {:>9} {:>9} {:>9}",
        "setting", "opens", "reopen", "flaps", "open", "longest", "refused", "spared", "lost"
    );
    for (label, s) in labels.iter().zip(rows) {
        let _ = writeln!(
            out,
            "  {:w$}  {:>6} {:>6} {:>6} {:>10} {:>10} {:>9} {:>9} {:>9}",
            label,
            s.opens,
            s.reopens,
            s.flaps,
            human_ms(s.open_ms),
            human_ms(s.longest_open_ms),
            s.refused,
            s.failures_spared,
            s.successes_lost
        );
    }
}

fn stats_json(s: &Stats) -> Value {
    let mut v = json!({
        "requests": s.requests,
        "bad": s.bad,
        "opens": s.opens,
        "reopens": s.reopens,
        "closes": s.closes,
        "flapping": s.flaps,
        "open_ms": s.open_ms,
        "longest_open_ms": s.longest_open_ms,
        "probes": s.probes,
        "refused_live": s.refused_live,
        "refused_live_let_through": s.refused_live_let_through,
        "refused": s.refused,
        "failures_spared": s.failures_spared,
        "successes_lost": s.successes_lost,
        "refused_without_verdict": s.refused_unjudged,
        "retries": s.retries,
        "retries_denied": s.retries_denied,
        "rescues_lost": s.rescues_lost,
    });
    // Only when the log names classes: a report without them stays as it was.
    let classes = classes_json(&s.classes, |k| {
        (k.requests > 0 || k.retries_denied > 0).then(|| {
            json!({"requests": k.requests, "refused": k.refused,
                   "retries_denied": k.retries_denied})
        })
    });
    if classes.as_object().is_some_and(|m| !m.is_empty()) {
        v["classes"] = classes;
    }
    v
}

/// Writes the JSON report: `{"bad_lines": […], "lines": {…}, "settings": [{"breakers":
/// {"api/default": {…}}, "set": {…}}]}`, pretty-printed, keys sorted. Written a breaker at a
/// time rather than built whole: a tree of every breaker's counters under every setting would
/// take more memory than the breakers themselves.
pub fn write_json(out: &mut impl Write, r: &Replay, bad: &[BadLine]) -> io::Result<()> {
    // A value as serde_json pretty-prints it, its lines after the first indented by `depth`.
    let pretty = |v: &Value, depth: usize| {
        let text = serde_json::to_string_pretty(v).unwrap_or_default();
        text.replace('\n', &format!("\n{}", "  ".repeat(depth)))
    };
    let c = &r.counts;
    let mut lines = json!({
        "read": c.lines,
        "replayed": c.replayed,
        "refused_live": c.refused_live,
        "module_clock": c.module_clock,
        "unparseable": c.bad,
        "no_attempt": c.no_attempt,
        "no_breaker": c.no_breaker,
        "late_events": c.late,
        "early_events": c.early,
        "too_long": c.too_long,
        "over_max_breakers": c.over_max_breakers,
    });
    let classes = classes_json(&c.classes, |k| {
        (k.requests > 0).then(|| {
            json!({"requests": k.requests, "refused_live": k.refused_live,
                   "limited_live": k.limited_live})
        })
    });
    if classes.as_object().is_some_and(|m| !m.is_empty()) {
        lines["classes"] = classes;
    }
    let bad: Vec<Value> = bad
        .iter()
        .map(|(n, why)| json!({"line": n, "error": why}))
        .collect();
    writeln!(out, "{{")?;
    writeln!(out, "  \"bad_lines\": {},", pretty(&Value::from(bad), 1))?;
    writeln!(out, "  \"lines\": {},", pretty(&lines, 1))?;
    let moves: Vec<Value> = r
        .pools
        .moves
        .iter()
        .map(|m| {
            json!({"line": m.line, "upstream": m.upstream, "server": m.server,
                   "move": m.verb, "why": m.why})
        })
        .collect();
    let pools = json!({"attempts": r.pools.attempts, "moves": moves});
    writeln!(out, "  \"pools\": {},", pretty(&pools, 1))?;
    writeln!(out, "  \"settings\": [")?;
    let mut order: Vec<usize> = (0..r.names.len()).collect();
    order.sort_by(|&a, &b| r.names[a].cmp(&r.names[b]));
    for (i, set) in r.sets().iter().enumerate() {
        writeln!(out, "    {{")?;
        if order.is_empty() {
            writeln!(out, "      \"breakers\": {{}},")?;
        } else {
            writeln!(out, "      \"breakers\": {{")?;
            for (k, &b) in order.iter().enumerate() {
                let comma = if k + 1 < order.len() { "," } else { "" };
                writeln!(
                    out,
                    "        {}: {}{comma}",
                    Value::from(&*r.names[b]),
                    pretty(&stats_json(&r.runs[b][i].stats), 4)
                )?;
            }
            writeln!(out, "      }},")?;
        }
        let set: serde_json::Map<String, Value> =
            set.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        writeln!(out, "      \"set\": {}", pretty(&Value::from(set), 3))?;
        let comma = if i + 1 < r.sets().len() { "," } else { "" };
        writeln!(out, "    }}{comma}")?;
    }
    writeln!(out, "  ]")?;
    writeln!(out, "}}")
}
