//! The breaker's own log lines, worded the same by both modules.

use circuit_breaker_core::breaker::Transition;
use circuit_breaker_core::snapshot::State;
use nginx_sys::{ngx_log_t, NGX_LOG_ERR, NGX_LOG_WARN};

/// One `warn` line per transition, with its numbers, of the breaker `who` names (quoted as
/// `crate::zone::who` quotes it).
pub fn transition(log: *mut ngx_log_t, who: &str, t: &Transition) {
    let verb = match t.to {
        State::Open => "opened",
        State::HalfOpen => "half-opened",
        State::Closed => "closed",
    };
    ngx::ngx_log_error!(
        NGX_LOG_WARN,
        log,
        "circuit breaker {} {}: {}",
        who,
        verb,
        t.why()
    );
}

/// A breaker the full zone could not hold, said once per worker and breaker (`hash`): its
/// traffic passes unchecked.
pub fn not_created(log: *mut ngx_log_t, hash: u64, name: &str) {
    if crate::ffi::first_time(hash) {
        ngx::ngx_log_error!(
            NGX_LOG_ERR,
            log,
            "circuit breaker \"{}\" not created: the zone is full, its traffic passes unchecked",
            name
        );
    }
}
