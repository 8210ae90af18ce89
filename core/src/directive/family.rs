//! The breaker's companions as directives of their own (`circuit_breaker_probe`,
//! `circuit_breaker_limit`, `circuit_breaker_retry_budget`), parsed by the same rules as the
//! `circuit_breaker` parameters they replace (what is left of those parameters is
//! `legacy.rs`).

use super::breaker::Parsed;
use super::*;

/// `circuit_breaker_probe uri=PATH | grpc=SERVICE [host=] [status=] [timeout=]`.
pub const PROBE_DIRECTIVE: &str = "circuit_breaker_probe";
/// `circuit_breaker_limit adaptive [min=] [max=] [initial=] [tolerance=] [interval=]
/// [samples=] [remeasure=]`.
pub const LIMIT_DIRECTIVE: &str = "circuit_breaker_limit";
/// `circuit_breaker_retry_budget RATE [min=N] | off`.
pub const RETRY_DIRECTIVE: &str = "circuit_breaker_retry_budget";

/// `circuit_breaker_probe`'s parameters, as the `circuit_breaker` parameters they replace.
const PROBE_PARAMS: [(&str, &str); 5] = [
    ("uri", "probe_uri"),
    ("grpc", "probe_grpc"),
    ("host", "probe_host"),
    ("status", "probe_status"),
    ("timeout", "probe_timeout"),
];

/// `circuit_breaker_limit`'s parameters after its mode, likewise.
const LIMIT_PARAMS: [(&str, &str); 7] = [
    ("min", "limit_min"),
    ("max", "limit_max"),
    ("initial", "limit_initial"),
    ("tolerance", "limit_tolerance"),
    ("interval", "limit_interval"),
    ("samples", "limit_samples"),
    ("remeasure", "limit_remeasure"),
];

/// `circuit_breaker_retry_budget`'s parameters after its rate, likewise.
const RETRY_PARAMS: [(&str, &str); 1] = [("min", "retry_min")];

/// Every parameter name of the three directives (to tell an operator who gives one to
/// `circuit_breaker` where it belongs).
pub(super) fn owner_of(key: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if key == "adaptive" || LIMIT_PARAMS.iter().any(|(n, _)| *n == key) {
        out.push(LIMIT_DIRECTIVE);
    }
    if PROBE_PARAMS.iter().any(|(n, _)| *n == key) {
        out.push(PROBE_DIRECTIVE);
    }
    if key == "budget" || RETRY_PARAMS.iter().any(|(n, _)| *n == key) {
        out.push(RETRY_DIRECTIVE);
    }
    out
}

/// Reads `name=value` words of directive `d` whose names `params` maps to the
/// `circuit_breaker` parameters they replace, each parsed by `parse`.
fn named_words<'a>(
    d: &'static str,
    words: impl IntoIterator<Item = &'a str>,
    params: &[(&'static str, &'static str)],
    p: &mut Parsed,
    seen: &mut Seen<'a>,
    mut parse: impl FnMut(&mut Parsed, &str, &'static str, &str) -> Result<bool, ConfError>,
) -> Result<(), ConfError> {
    // Only an error lists them: nothing is allocated while a good configuration is read
    // (see `Seen`).
    let names = || params.iter().map(|(n, _)| *n).collect::<Vec<&str>>();
    for word in words {
        let Some((name, v)) = word.split_once('=') else {
            let hint = if names().contains(&word) {
                format!("parameters are given as name=value, e.g. \"{word}=...\"")
            } else {
                hint::expected_names(word, &names())
            };
            return Err(ConfError::UnknownParameter {
                directive: d,
                word: word.to_owned(),
                hint,
            });
        };
        let Some(&(_, key)) = params.iter().find(|(n, _)| *n == name) else {
            // `probe_uri=` given to `circuit_breaker_probe`: its name here is `uri`.
            let old = params.iter().find(|(_, k)| *k == name).map(|(n, _)| *n);
            let hint = match old {
                Some(n) => format!("did you mean \"{n}\"?"),
                None => hint::expected_names(name, &names()),
            };
            return Err(ConfError::UnknownParameter {
                directive: d,
                word: word.to_owned(),
                hint,
            });
        };
        if seen.has(key) {
            return Err(ConfError::Conflict(format!(
                "duplicate parameter \"{name}\" in \"{d}\" directive"
            )));
        }
        parse(p, word, key, v)?;
        seen.push(key);
    }
    Ok(())
}

/// Parses `circuit_breaker_probe`'s words: an active probe of the upstream's servers while
/// its breaker is open.
pub fn parse_probe_args<'a>(
    words: impl IntoIterator<Item = &'a str>,
    units: &dyn Units,
) -> Result<ProbeSpec, ConfError> {
    let mut p = Parsed::new(PROBE_DIRECTIVE);
    let mut seen = Seen::new();
    named_words(
        PROBE_DIRECTIVE,
        words,
        &PROBE_PARAMS,
        &mut p,
        &mut seen,
        |p, word, key, v| p.probe_param(units, word, key, v),
    )?;
    if !seen.has("probe_uri") && !seen.has("probe_grpc") {
        return Err(ConfError::Conflict(format!(
            "\"{PROBE_DIRECTIVE}\" must have \"uri\" or \"grpc\" parameter, \
             e.g. \"{PROBE_DIRECTIVE} uri=/healthz\""
        )));
    }
    p.check_probe(&seen)?;
    Ok(p.probe.with_default_statuses())
}

/// Parses `circuit_breaker_limit`'s words: the adaptive in-flight limit.
pub fn parse_limit_args<'a>(
    words: impl IntoIterator<Item = &'a str>,
    units: &dyn Units,
) -> Result<LimitConfig, ConfError> {
    let mut words = words.into_iter();
    let mode_hint = "must be \"adaptive\"";
    match words.next() {
        Some("adaptive") => {}
        Some(other) => return Err(invalid(LIMIT_DIRECTIVE, other, Some(mode_hint))),
        None => {
            return Err(ConfError::Conflict(format!(
                "\"{LIMIT_DIRECTIVE}\" must have a mode, e.g. \"{LIMIT_DIRECTIVE} adaptive\""
            )))
        }
    }
    let mut p = Parsed::new(LIMIT_DIRECTIVE);
    p.adaptive = true;
    let mut seen = Seen::new();
    named_words(
        LIMIT_DIRECTIVE,
        words,
        &LIMIT_PARAMS,
        &mut p,
        &mut seen,
        |p, word, key, v| p.limit_param(units, word, key, v),
    )?;
    p.check_limit(&seen)?;
    Ok(p.limit)
}

/// Parses `circuit_breaker_retry_budget`'s words; `None` for `off`.
pub fn parse_retry_budget_args<'a>(
    words: impl IntoIterator<Item = &'a str>,
) -> Result<Option<RetryBudgetConfig>, ConfError> {
    let d = RETRY_DIRECTIVE;
    let mut words = words.into_iter().peekable();
    let mut p = Parsed::new(d);
    match words.next() {
        Some("off") => {
            return match words.next() {
                None => Ok(None),
                Some(w) => Err(ConfError::UnknownParameter {
                    directive: d,
                    word: w.to_owned(),
                    hint: "\"off\" takes no parameters".to_owned(),
                }),
            };
        }
        Some(budget) => {
            let reason = "must be a percentage from 0% to 100%, or \"off\"";
            let b = parse_rate(budget).ok_or_else(|| invalid(d, budget, Some(reason)))?;
            p.retry = Some(RetryBudgetConfig {
                budget: b,
                ..RetryBudgetConfig::default()
            });
        }
        None => {
            return Err(ConfError::Conflict(format!(
                "\"{d}\" must have a rate, e.g. \"{d} 20%\", or \"off\""
            )))
        }
    }
    let mut seen = Seen::new();
    named_words(
        d,
        words,
        &RETRY_PARAMS,
        &mut p,
        &mut seen,
        |p, word, key, v| p.retry_param(word, key, v),
    )?;
    p.check_retry()?;
    Ok(p.retry)
}

#[cfg(test)]
mod tests {
    use super::super::tests::Fixed;
    use super::*;

    #[test]
    fn the_new_directives_mean_what_the_old_parameters_meant() {
        let old = parse_breaker_args(
            "probe_uri=/h probe_host=api probe_status=200,204 probe_timeout=300ms \
             limit=adaptive limit_min=2 limit_max=50 limit_interval=200ms limit_remeasure=5s \
             retry_budget=10% retry_min=1"
                .split(' '),
            &Fixed,
        )
        .unwrap();
        let probe = parse_probe_args(
            "uri=/h host=api status=200,204 timeout=300ms".split(' '),
            &Fixed,
        )
        .unwrap();
        assert_eq!(Some(probe), old.probe);
        let limit = parse_limit_args(
            "adaptive min=2 max=50 interval=200ms remeasure=5s".split(' '),
            &Fixed,
        )
        .unwrap();
        assert_eq!(Some(limit), old.limit);
        let retry = parse_retry_budget_args("10% min=1".split(' ')).unwrap();
        assert_eq!(retry, old.retry);
        assert_eq!(parse_retry_budget_args(["off"]).unwrap(), None);
        let grpc = parse_probe_args(["grpc=pkg.Svc", "timeout=1s"], &Fixed).unwrap();
        assert_eq!(grpc.grpc.as_deref(), Some("pkg.Svc"));
        assert_eq!(
            parse_limit_args(["adaptive"], &Fixed).unwrap(),
            LimitConfig::default()
        );
        assert_eq!(
            parse_limit_args(["adaptive", "max=10"], &Fixed)
                .unwrap()
                .limit_initial,
            10,
            "the start follows a lower cap, as with limit_max="
        );
    }

    #[test]
    fn the_new_directives_errors_name_them_and_their_parameters() {
        let probe = |w: &str| {
            parse_probe_args(w.split(' '), &Fixed)
                .unwrap_err()
                .to_string()
        };
        let limit = |w: &str| {
            parse_limit_args(w.split(' '), &Fixed)
                .unwrap_err()
                .to_string()
        };
        let retry = |w: &str| {
            parse_retry_budget_args(w.split(' ').filter(|w| !w.is_empty()))
                .unwrap_err()
                .to_string()
        };
        let cases = [
            (probe("host=a"), "\"circuit_breaker_probe\" must have \"uri\" or \"grpc\" parameter, e.g. \"circuit_breaker_probe uri=/healthz\""),
            (probe("uri=health"), "invalid value \"uri=health\" in \"circuit_breaker_probe\" directive, must be a path from \"/\""),
            (probe("uri=/h timeout=3sec"), "invalid value \"timeout=3sec\" in \"circuit_breaker_probe\" directive, a time is expected (e.g. 30s, 500ms, 2m; units: ms, s, m, h, d, w)"),
            (probe("uri=/h grpc=x"), "\"uri\" and \"grpc\" are mutually exclusive in \"circuit_breaker_probe\" directive, a probe is HTTP or gRPC"),
            (probe("grpc= status=200"), "\"status\" does not apply to \"grpc\" in \"circuit_breaker_probe\" directive, a gRPC probe is judged by its serving status"),
            (probe("probe_uri=/h"), "invalid parameter \"probe_uri=/h\" in \"circuit_breaker_probe\" directive, did you mean \"uri\"?"),
            (probe("uri=/h tiemout=1s"), "invalid parameter \"tiemout=1s\" in \"circuit_breaker_probe\" directive, did you mean \"timeout\"?"),
            (probe("uri=/h port=80"), "invalid parameter \"port=80\" in \"circuit_breaker_probe\" directive, expected one of: uri, grpc, host, status, timeout"),
            (probe("uri /h"), "invalid parameter \"uri\" in \"circuit_breaker_probe\" directive, parameters are given as name=value, e.g. \"uri=...\""),
            (probe("uri=/h uri=/i"), "duplicate parameter \"uri\" in \"circuit_breaker_probe\" directive"),
            (limit("static"), "invalid value \"static\" in \"circuit_breaker_limit\" directive, must be \"adaptive\""),
            (limit("adaptive min=10 max=5"), "\"max\" must be between \"min\" and 16777215 in \"circuit_breaker_limit\" directive"),
            (limit("adaptive interval=1s remeasure=5s"), "\"remeasure\" must be at least ten \"interval\"s in \"circuit_breaker_limit\" directive"),
            (limit("adaptive limit_max=5"), "invalid parameter \"limit_max=5\" in \"circuit_breaker_limit\" directive, did you mean \"max\"?"),
            (limit("adaptive tolerance=x"), "invalid value \"tolerance=x\" in \"circuit_breaker_limit\" directive, must be a percentage from 0% to 100%"),
            (retry("lots"), "invalid value \"lots\" in \"circuit_breaker_retry_budget\" directive, must be a percentage from 0% to 100%, or \"off\""),
            (retry("20% min=x"), "invalid value \"min=x\" in \"circuit_breaker_retry_budget\" directive, a whole number of retries per second is expected"),
            (retry("off min=3"), "invalid parameter \"min=3\" in \"circuit_breaker_retry_budget\" directive, \"off\" takes no parameters"),
            (retry("20% retry_min=3"), "invalid parameter \"retry_min=3\" in \"circuit_breaker_retry_budget\" directive, did you mean \"min\"?"),
            (retry("20% min=100000000"), "invalid value \"min=100000000\" in \"circuit_breaker_retry_budget\" directive, must be at most 100000"),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
        assert!(parse_limit_args([], &Fixed).is_err());
        assert!(parse_retry_budget_args([]).is_err());
    }

    #[test]
    fn one_warning_names_each_new_directive() {
        let warn = |w: &str| {
            parse_breaker_args(w.split(' '), &Fixed)
                .unwrap()
                .legacy
                .warning()
                .map(|w| w.to_string())
        };
        assert_eq!(warn("window=5s"), None);
        assert_eq!(
            warn("probe_timeout=1s probe_uri=/h probes=2 probe_interval=1s"),
            Some(
                "the \"probe_uri\" parameter of \"circuit_breaker\" is deprecated, \
                 use \"circuit_breaker_probe uri=...\" instead"
                    .into()
            ),
            "the parameter that turns probes on is named, probes= is the breaker's own"
        );
        assert_eq!(
            warn("probe_grpc= limit=adaptive retry_budget=off"),
            Some(
                "the \"probe_grpc\", \"limit\" and \"retry_budget\" parameters of \
                 \"circuit_breaker\" are deprecated, use \"circuit_breaker_probe grpc=...\", \
                 \"circuit_breaker_limit adaptive ...\" and \"circuit_breaker_retry_budget off\" \
                 instead"
                    .into()
            )
        );
        assert_eq!(
            warn("retry_min=1"),
            Some(
                "the \"retry_min\" parameter of \"circuit_breaker\" is deprecated, \
                 use \"circuit_breaker_retry_budget RATE ...\" instead"
                    .into()
            )
        );
        assert_eq!(
            warn("limit=off"),
            Some(
                "the \"limit\" parameter of \"circuit_breaker\" is deprecated, \
                 use no \"circuit_breaker_limit\" instead"
                    .into()
            )
        );
        assert!(!parse_breaker_args(
            ["probes=2", "probe_interval=1s", "probe_latency=1s"],
            &Fixed
        )
        .unwrap()
        .legacy
        .any());
    }
}
