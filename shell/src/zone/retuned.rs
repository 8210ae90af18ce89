//! The reload's log of the breakers whose parameters changed (what it says and its bound:
//! `circuit_breaker_core::breaker::retunes`), on the new cycle's log.

use circuit_breaker_core::breaker::retunes::Line;
use nginx_sys::{ngx_log_t, NGX_LOG_NOTICE, NGX_LOG_WARN};

use super::reload::Reconciled;

/// Logs what a reconciliation of a reused zone (`reused`: a reload, not the first start) did.
pub fn log_reconciled(log: *mut ngx_log_t, zone: &str, done: &Reconciled, reused: bool) {
    if !reused {
        return;
    }
    let r = &done.retuned;
    for line in r.lines().iter().chain(&r.summary(zone, done.dropped)) {
        emit(log, line);
    }
}

fn emit(log: *mut ngx_log_t, line: &Line) {
    let level = if line.warn {
        NGX_LOG_WARN
    } else {
        NGX_LOG_NOTICE
    };
    ngx::ngx_log_error!(level, log, "{}", line.text);
}
