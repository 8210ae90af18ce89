//! What is left of the `circuit_breaker` parameters that have a directive of their own now
//! (`crate::directive::family`): which were given, and the one deprecation warning that names
//! the new directives.

/// The `circuit_breaker` parameters given that have a directive of their own now: per
/// family, the parameter that names it best (the one that turns the companion on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Legacy {
    /// `probe_uri`, `probe_grpc` or a companion of theirs.
    pub probe: Option<&'static str>,
    /// `limit` or a `limit_*`; `limit_off` when only `limit=off` was given.
    pub limit: Option<&'static str>,
    /// `retry_budget` or `retry_min`; whether it was `retry_budget=off`.
    pub retry: Option<&'static str>,
    retry_off: bool,
    limit_off: bool,
}

/// Whether `key` is a parameter of `circuit_breaker` that belongs to a companion with a
/// directive of its own now (active probes, the adaptive limit, the retry budget): what the
/// deprecation names, and what a stream breaker, which has none of them, refuses.
pub(super) fn is_companions(key: &str) -> bool {
    (key.starts_with("probe_") && !BREAKER_OWN.contains(&key))
        || key == "limit"
        || key.starts_with("limit_")
        || key.starts_with("retry_")
}

impl Legacy {
    /// Notes `key=v` if it is a companion's parameter.
    pub(super) fn note(&mut self, key: &'static str, v: &str) {
        let lead = |first: &mut Option<&'static str>, is_lead: bool| {
            if first.is_none() || is_lead {
                *first = Some(key);
            }
        };
        if key.starts_with("probe_") && !BREAKER_OWN.contains(&key) {
            lead(&mut self.probe, key == "probe_uri" || key == "probe_grpc");
        } else if key == "limit" || key.starts_with("limit_") {
            lead(&mut self.limit, key == "limit");
            if key == "limit" {
                self.limit_off = v == "off";
            }
        } else if key.starts_with("retry_") {
            lead(&mut self.retry, key == "retry_budget");
            if key == "retry_budget" {
                self.retry_off = v == "off";
            }
        }
    }

    /// Whether any was given.
    pub fn any(&self) -> bool {
        self.probe.is_some() || self.limit.is_some() || self.retry.is_some()
    }

    /// The one `warn` a `circuit_breaker` with such parameters gets: `the "probe_uri"
    /// parameter of "circuit_breaker" is deprecated, use "circuit_breaker_probe uri=..."
    /// instead` (nginx's own words for `listen ... http2`). Written as it is logged, with no
    /// allocation (see `Seen`).
    pub fn warning(&self) -> Option<Deprecation<'_>> {
        self.any().then_some(Deprecation(self))
    }

    /// Per companion given: the old parameter named, and the new spelling.
    fn pairs(&self) -> [Option<(&'static str, &'static str)>; 3] {
        [
            self.probe.map(|k| {
                let new = if k == "probe_grpc" {
                    "\"circuit_breaker_probe grpc=...\""
                } else {
                    "\"circuit_breaker_probe uri=...\""
                };
                (k, new)
            }),
            self.limit.map(|k| {
                let new = if self.limit_off && k == "limit" {
                    "no \"circuit_breaker_limit\""
                } else {
                    "\"circuit_breaker_limit adaptive ...\""
                };
                (k, new)
            }),
            self.retry.map(|k| {
                let new = if self.retry_off {
                    "\"circuit_breaker_retry_budget off\""
                } else {
                    "\"circuit_breaker_retry_budget RATE ...\""
                };
                (k, new)
            }),
        ]
    }
}

/// The deprecation warning of a [`Legacy`], as `Display`.
pub struct Deprecation<'a>(&'a Legacy);

impl core::fmt::Display for Deprecation<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let pairs = self.0.pairs();
        let n = pairs.iter().flatten().count();
        // `a`, `a and b`, `a, b and c`.
        let list = |f: &mut core::fmt::Formatter<'_>, new: bool| -> core::fmt::Result {
            for (i, (old, spelling)) in pairs.iter().flatten().enumerate() {
                let sep = match i {
                    0 => "",
                    _ if i + 1 == n => " and ",
                    _ => ", ",
                };
                f.write_str(sep)?;
                if new {
                    f.write_str(spelling)?;
                } else {
                    write!(f, "\"{old}\"")?;
                }
            }
            Ok(())
        };
        f.write_str("the ")?;
        list(f, false)?;
        f.write_str(if n == 1 {
            " parameter of \"circuit_breaker\" is deprecated, use "
        } else {
            " parameters of \"circuit_breaker\" are deprecated, use "
        })?;
        list(f, true)?;
        f.write_str(" instead")
    }
}

/// The breaker's own parameters whose names start like a companion's.
const BREAKER_OWN: [&str; 3] = ["probe_interval", "probe_latency", "probes"];
