//! What a refused word of `circuit_breaker` should have been: a near parameter's name, the
//! directive a companion's parameter moved to, the `name=value` form, or the list.

use super::family::{owner_of, LIMIT_DIRECTIVE, PROBE_DIRECTIVE, RETRY_DIRECTIVE};
use super::*;

/// Each parameter of `circuit_breaker` with a value it could take, for the `name=value`
/// form's example (the README's values).
const EXAMPLES: [(&str, &str); 30] = [
    ("window", "10s"),
    ("min_requests", "20"),
    ("failure_rate", "50%"),
    ("slow", "800ms"),
    ("slow_rate", "50%"),
    ("open", "30s"),
    ("max_open", "5m"),
    ("jitter", "20%"),
    ("probes", "3"),
    ("probe_interval", "1s"),
    ("probe_latency", "800ms"),
    ("consecutive", "10"),
    ("ramp", "10s"),
    ("ramp_start", "10%"),
    ("suspect_min", "5"),
    ("probe_uri", "/healthz"),
    ("probe_grpc", "pkg.Service"),
    ("probe_host", "api.internal"),
    ("probe_status", "200-399"),
    ("probe_timeout", "1s"),
    ("limit", "adaptive"),
    ("limit_min", "3"),
    ("limit_max", "1000"),
    ("limit_initial", "20"),
    ("limit_tolerance", "25%"),
    ("limit_interval", "100ms"),
    ("limit_samples", "20"),
    ("limit_remeasure", "10s"),
    ("retry_budget", "20%"),
    ("retry_min", "3"),
];

/// The breaker's own parameters, as the list of what is valid names them (the companions'
/// are named by their directives).
const OWN: [&str; 16] = [
    "window",
    "min_requests",
    "failure_rate",
    "slow",
    "slow_rate",
    "consecutive",
    "open",
    "max_open",
    "jitter",
    "probes",
    "probe_interval",
    "probe_latency",
    "ramp",
    "ramp_start",
    "suspect_min",
    "dry_run",
];

/// Parameters by the kind of value they take, for a value given without its name.
const RATES: [&str; 4] = ["failure_rate", "slow_rate", "jitter", "ramp_start"];
const TIMES: [&str; 7] = [
    "window",
    "slow",
    "open",
    "max_open",
    "probe_interval",
    "probe_latency",
    "ramp",
];
const COUNTS: [&str; 4] = ["min_requests", "probes", "consecutive", "suspect_min"];

fn unknown(word: &str, hint: String) -> ConfError {
    ConfError::UnknownParameter {
        directive: CB,
        word: word.to_owned(),
        hint,
    }
}

/// `a`, `a or b`, `a, b or c`, each quoted.
fn or_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
    match quoted.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// A known parameter of `circuit_breaker` given without `=value`.
pub(super) fn missing_value(word: &str) -> ConfError {
    let example = EXAMPLES
        .iter()
        .find(|(k, _)| *k == word)
        .map_or("...", |(_, v)| v);
    unknown(
        word,
        format!("parameters are given as name=value, e.g. \"{word}={example}\""),
    )
}

/// How a companion's parameter is spelled now: `probe_uri` → `circuit_breaker_probe uri=...`.
fn new_spelling(key: &str) -> Option<String> {
    if let Some(n) = key.strip_prefix("probe_") {
        if !["interval", "latency"].contains(&n) {
            return Some(format!("{PROBE_DIRECTIVE} {n}=..."));
        }
    }
    if key == "limit" {
        return Some(format!("{LIMIT_DIRECTIVE} adaptive"));
    }
    if let Some(n) = key.strip_prefix("limit_") {
        return Some(format!("{LIMIT_DIRECTIVE} adaptive {n}=..."));
    }
    match key {
        "retry_budget" => Some(format!("{RETRY_DIRECTIVE} RATE")),
        "retry_min" => Some(format!("{RETRY_DIRECTIVE} RATE min=...")),
        _ => None,
    }
}

/// A word `circuit_breaker` does not take: what it may have meant.
pub(super) fn unknown_breaker_parameter(word: &str, units: &dyn Units) -> ConfError {
    let (key, value) = match word.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (word, None),
    };
    if value.is_none() {
        // A value without its name: the parameters that take such a value.
        let names: &[&str] = if parse_rate(word).is_some() {
            &RATES
        } else if !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit()) {
            &COUNTS
        } else if units.msec(word).is_some() {
            &TIMES
        } else {
            &[]
        };
        if !names.is_empty() {
            let forms: Vec<String> = names.iter().map(|n| format!("{n}={word}")).collect();
            return unknown(
                word,
                format!("parameters are given as name=value: {}", or_list(&forms)),
            );
        }
    }
    let owners = owner_of(key);
    if !owners.is_empty() {
        let example = |d: &str| match (d, value) {
            (_, None) if d == LIMIT_DIRECTIVE => format!("{d} adaptive"),
            (_, Some(v)) if key == "budget" => format!("{d} {v}"),
            (_, None) => format!("{d} ..."),
            (_, Some(_)) if d == LIMIT_DIRECTIVE => format!("{d} adaptive {word}"),
            (_, Some(_)) if d == RETRY_DIRECTIVE => format!("{d} RATE {word}"),
            _ => format!("{d} {word}"),
        };
        let forms: Vec<String> = owners.iter().map(|d| example(d)).collect();
        return unknown(
            word,
            format!(
                "\"{key}\" is a parameter of its own directive: {}",
                or_list(&forms)
            ),
        );
    }
    if let Some(near) = suggest(key, BREAKER_PARAMETERS) {
        let meant = new_spelling(near).unwrap_or_else(|| near.to_owned());
        return unknown(word, format!("did you mean \"{meant}\"?"));
    }
    unknown(word, format!("expected one of: {}", OWN.join(", ")))
}

/// The hint for a word a companion directive does not take: a near name, or its names.
pub(super) fn expected_names(word: &str, names: &[&str]) -> String {
    match suggest(word, names) {
        Some(near) => format!("did you mean \"{near}\"?"),
        None => format!("expected one of: {}", names.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Fixed;
    use super::*;

    fn err(words: &str) -> String {
        parse_breaker_args(words.split(' '), &Fixed)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_tables_cover_every_parameter() {
        for p in BREAKER_PARAMETERS {
            assert!(
                *p == "dry_run" || EXAMPLES.iter().any(|(k, _)| k == p),
                "{p} has no example"
            );
            assert!(
                OWN.contains(p) || new_spelling(p).is_some(),
                "{p} is neither the breaker's nor a companion's"
            );
        }
        for (k, v) in EXAMPLES {
            let word = format!("{k}={v}");
            let extra: &[&str] = match k {
                "slow_rate" => &["slow=1s"],
                "ramp_start" => &["ramp=10s"],
                "probe_host" | "probe_status" | "probe_timeout" => &["probe_uri=/h"],
                _ if k.starts_with("limit_") => &["limit=adaptive"],
                _ => &[],
            };
            let words = extra.iter().copied().chain([word.as_str()]);
            assert!(parse_breaker_args(words, &Fixed).is_ok(), "{word}");
        }
    }

    #[test]
    fn unknown_words_say_what_was_meant() {
        let cb = "in \"circuit_breaker\" directive";
        let cases = [
            ("failure_rte=20%", format!("invalid parameter \"failure_rte=20%\" {cb}, did you mean \"failure_rate\"?")),
            ("windw=5s", format!("invalid parameter \"windw=5s\" {cb}, did you mean \"window\"?")),
            ("dry", format!("invalid parameter \"dry\" {cb}, did you mean \"dry_run\"?")),
            ("probe_ur=/h", format!("invalid parameter \"probe_ur=/h\" {cb}, did you mean \"circuit_breaker_probe uri=...\"?")),
            ("limit_mx=5", format!("invalid parameter \"limit_mx=5\" {cb}, did you mean \"circuit_breaker_limit adaptive max=...\"?")),
            ("retry_budgt=5%", format!("invalid parameter \"retry_budgt=5%\" {cb}, did you mean \"circuit_breaker_retry_budget RATE\"?")),
            ("uri=/h", format!("invalid parameter \"uri=/h\" {cb}, \"uri\" is a parameter of its own directive: \"circuit_breaker_probe uri=/h\"")),
            ("tolerance=10%", format!("invalid parameter \"tolerance=10%\" {cb}, \"tolerance\" is a parameter of its own directive: \"circuit_breaker_limit adaptive tolerance=10%\"")),
            ("adaptive", format!("invalid parameter \"adaptive\" {cb}, \"adaptive\" is a parameter of its own directive: \"circuit_breaker_limit adaptive\"")),
            ("min=3", format!("invalid parameter \"min=3\" {cb}, \"min\" is a parameter of its own directive: \"circuit_breaker_limit adaptive min=3\" or \"circuit_breaker_retry_budget RATE min=3\"")),
            ("budget=20%", format!("invalid parameter \"budget=20%\" {cb}, \"budget\" is a parameter of its own directive: \"circuit_breaker_retry_budget 20%\"")),
            ("colour=red", format!("invalid parameter \"colour=red\" {cb}, expected one of: window, min_requests, failure_rate, slow, slow_rate, consecutive, open, max_open, jitter, probes, probe_interval, probe_latency, ramp, ramp_start, suspect_min, dry_run")),
            ("failure_rate", format!("invalid parameter \"failure_rate\" {cb}, parameters are given as name=value, e.g. \"failure_rate=50%\"")),
            ("open", format!("invalid parameter \"open\" {cb}, parameters are given as name=value, e.g. \"open=30s\"")),
            ("20%", format!("invalid parameter \"20%\" {cb}, parameters are given as name=value: \"failure_rate=20%\", \"slow_rate=20%\", \"jitter=20%\" or \"ramp_start=20%\"")),
            ("30s", format!("invalid parameter \"30s\" {cb}, parameters are given as name=value: \"window=30s\", \"slow=30s\", \"open=30s\", \"max_open=30s\", \"probe_interval=30s\", \"probe_latency=30s\" or \"ramp=30s\"")),
            ("20", format!("invalid parameter \"20\" {cb}, parameters are given as name=value: \"min_requests=20\", \"probes=20\", \"consecutive=20\" or \"suspect_min=20\"")),
            ("dry_run=on", format!("invalid value \"dry_run=on\" {cb}, \"dry_run\" takes no value")),
        ];
        for (words, want) in cases {
            assert_eq!(err(words), want, "{words}");
        }
    }

    #[test]
    fn values_say_what_is_valid() {
        let cb = "in \"circuit_breaker\" directive";
        let time = "a time is expected (e.g. 30s, 500ms, 2m; units: ms, s, m, h, d, w)";
        let cases = [
            ("open=30sec", format!("invalid value \"open=30sec\" {cb}, {time}")),
            ("probe_interval=1y", format!("invalid value \"probe_interval=1y\" {cb}, {time}")),
            ("slow=fast", format!("invalid value \"slow=fast\" {cb}, a time (e.g. 800ms, 30s; units: ms, s, m, h, d, w) or \"off\" is expected")),
            ("window=abc", format!("invalid value \"window=abc\" {cb}, must be whole seconds from 1s to 300s")),
            ("probes=x", format!("invalid value \"probes=x\" {cb}, a whole number of at least 1 is expected")),
            ("consecutive=0", format!("invalid value \"consecutive=0\" {cb}, must be a number of at least 1, or \"off\"")),
            ("open=1m max_open=30s", format!("\"max_open\" must not be less than \"open\" {cb}, or be left out to follow \"open\"")),
            ("probe_uri=/h probe_host=a\tb", format!("invalid value \"probe_host=a\tb\" {cb}, must be a host name")),
            ("retry_min=-1", format!("invalid value \"retry_min=-1\" {cb}, a whole number of retries per second is expected")),
        ];
        for (words, want) in cases {
            assert_eq!(err(words), want, "{words}");
        }
    }
}
