//! Whether a retry nginx is about to make may be made: a `proxy_next_upstream` retry is
//! refused while the upstream's breaker is open or half-open, and beyond the retry budget of
//! the upstream's own breaker (which counts every first attempt, retried or not).

use circuit_breaker_core::snapshot::State;
use nginx_sys::ngx_peer_connection_t;

use crate::conf::{default_route, SrvConf};
use crate::request::RequestState;
use crate::zone::Locked;

/// Counts the request's first attempt in the budget and, when `retry` holds the peer of an
/// attempt nginx will retry, refuses the retry (its tries set to none, and `retry` emptied)
/// if the breaker is not closed (`dry_run`: only the budget refuses) or the budget is spent.
/// Under the zone lock, in the hold that records the attempt.
pub fn allow(
    locked: &mut Locked<'_>,
    scf: &SrvConf,
    state: &mut RequestState,
    retry: &mut Option<&mut ngx_peer_connection_t>,
    dry_run: bool,
    now: u64,
) {
    if retry.is_some() && !dry_run {
        let closed = locked
            .get(state.handle, state.key_hash)
            .map_or(true, |b| b.state() == State::Closed);
        if !closed {
            refuse(retry);
        }
    }
    if scf.retry.is_none() {
        return;
    }
    let Some(mut home) = locked.get_or_find(scf.home.get(), &scf.key(default_route())) else {
        return;
    };
    scf.home.set(home.handle());
    let Some(budget) = home.retry_budget() else {
        return;
    };
    // This worker's first attempts, then this one's if not counted yet.
    if let Some((second, n)) = scf.firsts.take() {
        budget.record_firsts(second.saturating_mul(1000), n);
    }
    if !core::mem::replace(&mut state.counted_first, true) {
        budget.record_first(now);
    }
    if retry.is_some() && !budget.take_retry(now) {
        // Over budget: the client gets what this attempt produced.
        refuse(retry);
    }
}

/// No more tries: nginx's `ngx_http_upstream_next` finalizes with this attempt's answer.
fn refuse(retry: &mut Option<&mut ngx_peer_connection_t>) {
    if let Some(pc) = retry.take() {
        pc.tries = 0;
    }
}
