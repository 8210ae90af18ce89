//! The reload's log of the breakers whose parameters changed: each named with its state, an
//! open (half-open, forced open) one at `warn` and first, a closed one at `notice`, up to
//! [`NAMED`] lines in all; then one line for the zone that counts them all, at `warn` when it
//! counts incidents left unnamed. A configuration of thousands of breakers changed at once
//! logs at most `NAMED + 1` lines.

use circuit_breaker_core::breaker::Retuned;
use nginx_sys::{ngx_log_t, NGX_LOG_NOTICE, NGX_LOG_WARN};

use super::reload::Reconciled;
use super::Kind;

/// Breakers named one by one per reload.
pub const NAMED: usize = 32;

/// One breaker retuned: its name as the log names it, and what was kept (`None`: its state
/// was lost, the zone too full to lay it out for its new window length).
#[derive(Debug)]
struct Line {
    who: String,
    what: Option<Retuned>,
}

/// The breakers a reload retuned: counted, the first of each kind named.
#[derive(Default, Debug)]
pub struct Retunes {
    /// Breakers whose parameters changed.
    pub count: usize,
    /// Of which turning requests away, or would be: open, half-open, forced open, or lost.
    pub incidents: usize,
    incident_lines: Vec<Line>,
    calm_lines: Vec<Line>,
}

impl Retunes {
    /// Whether the next breaker may still be named (naming costs an allocation: not for the
    /// thousandth).
    pub fn wants_name(&self) -> bool {
        self.incident_lines.len() < NAMED || self.calm_lines.len() < NAMED
    }

    /// Counts a retuned breaker, named `who` if [`Retunes::wants_name`] said so.
    pub fn note(&mut self, who: Option<String>, what: Option<Retuned>) {
        self.count += 1;
        let incident = what.map_or(true, |r| r.is_incident());
        self.incidents += usize::from(incident);
        let lines = if incident {
            &mut self.incident_lines
        } else {
            &mut self.calm_lines
        };
        if let Some(who) = who {
            if lines.len() < NAMED {
                lines.push(Line { who, what });
            }
        }
    }
}

/// A breaker as the log names it: `"up/route"`, or `"up" server 10.0.0.1:80`.
pub fn who(upstream: &[u8], route: &[u8], kind: Kind) -> String {
    let up = String::from_utf8_lossy(upstream);
    let route = String::from_utf8_lossy(route);
    match kind {
        Kind::Route => format!("\"{up}/{route}\""),
        Kind::Server => format!("\"{up}\" server {route}"),
    }
}

/// Logs what a reconciliation of a reused zone (`reused`: a reload, not the first start) did,
/// on the new cycle's log.
pub fn log_reconciled(log: *mut ngx_log_t, zone: &str, done: &Reconciled, reused: bool) {
    if !reused {
        return;
    }
    let r = &done.retuned;
    let calm_room = NAMED.saturating_sub(r.incident_lines.len());
    let named_incidents = r.incident_lines.len();
    for line in &r.incident_lines {
        match line.what {
            Some(what) => {
                ngx::ngx_log_error!(
                    NGX_LOG_WARN,
                    log,
                    "circuit breaker {}: {}",
                    line.who,
                    what.describe()
                );
            }
            None => {
                ngx::ngx_log_error!(
                    NGX_LOG_WARN,
                    log,
                    "circuit breaker {}: parameters changed on reload, its state lost: the zone \
                     is full, it starts afresh on its next request",
                    line.who
                );
            }
        }
    }
    let named_calm = r.calm_lines.len().min(calm_room);
    for line in r.calm_lines.iter().take(named_calm) {
        if let Some(what) = line.what {
            ngx::ngx_log_error!(
                NGX_LOG_NOTICE,
                log,
                "circuit breaker {}: {}",
                line.who,
                what.describe()
            );
        }
    }
    if done.dropped + r.count == 0 {
        return;
    }
    let unnamed = r.count - named_incidents - named_calm;
    let unnamed_incidents = r.incidents - named_incidents;
    let more = match unnamed {
        0 => String::new(),
        n => format!(
            ", {n} of them not named here ({unnamed_incidents} open, half-open or forced open)"
        ),
    };
    let level = if unnamed_incidents > 0 {
        NGX_LOG_WARN
    } else {
        NGX_LOG_NOTICE
    };
    ngx::ngx_log_error!(
        level,
        log,
        "circuit breaker zone \"{}\": {} breaker(s) dropped, {} retuned by the new configuration{}",
        zone,
        done.dropped,
        r.count,
        more
    );
}
