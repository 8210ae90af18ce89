//! The adaptive in-flight limit at the upstream hooks: a request the breaker lets through
//! (closed) takes a slot in `peer.init`, just before the balancer is asked — after the
//! PRECONTENT phase and the request body, so a slow upload never holds one; each attempt is
//! a latency sample; the slot goes back when the request's last attempt ends.

use circuit_breaker_core::breaker::Attempt;
use nginx_sys::{
    ngx_http_request_t, ngx_http_upstream_t, ngx_log_t, ngx_peer_connection_t, ngx_uint_t,
};

use crate::limit::{self, Admit, Ask, Hold, Sample};
use crate::request::{self, Label, RequestState};

use super::outcome::{passes_trailers, retry_after};

/// `Retry-After` of a request the limit shed: HTTP's smallest. The limit moves every
/// interval (100 ms by default) and in-flight drops within a round trip of the origin, so a
/// slot is usually free again long before; a longer wait would only idle clients the origin
/// could serve.
pub const RETRY_AFTER_MS: u64 = 1000;

/// Takes a slot of the request's limit, if its upstream has one; false when the request is
/// shed (its label then says `limited`). A request already holding a slot (`peer.init`
/// again for the same request) keeps it. Inline: most upstreams have no limit, and then this
/// is one test in `peer.init`.
#[inline]
pub fn admit(r: &mut ngx_http_request_t, state: &mut RequestState, log: *mut ngx_log_t) -> bool {
    if state.judge.srv_conf().limit.is_none()
        || state.limit.is_held()
        || state.judge.handle.is_none()
    {
        return true;
    }
    take_slot(r, state, log)
}

/// [`admit`] for an upstream with a limit.
#[inline(never)]
fn take_slot(r: &mut ngx_http_request_t, state: &mut RequestState, log: *mut ngx_log_t) -> bool {
    // SAFETY: `r` is the live request this state belongs to, in peer.init.
    let class = unsafe { super::class::of(r, state, log) };
    let scf = state.judge.srv_conf();
    let Some(cfg) = scf.limit.as_ref() else {
        return true;
    };
    let dry_run = scf.breaker.is_some_and(|c| c.dry_run);
    let Some((zone, _)) = state.judge.zone() else {
        return true;
    };
    let ask = Ask {
        handle: state.judge.handle,
        class,
        // SAFETY: `r` is the live request this state belongs to, in peer.init.
        client: unsafe { limit::client::of(r, zone) },
    };
    match limit::acquire(zone, ask, cfg, dry_run, log, || state.judge.name()) {
        Admit::Slot(hold) => {
            state.limit = hold;
            true
        }
        Admit::Unlimited => true,
        Admit::Shed => {
            state.told.label = Some(Label::Limited);
            state.told.short_circuited = true;
            false
        }
    }
}

/// Gives the request's slot back, if it holds one.
pub fn release(state: &mut RequestState) {
    let hold = core::mem::replace(&mut state.limit, Hold::NONE);
    if hold.is_held() {
        limit::release(hold, state.told.class.flatten());
    }
}

/// An attempt of a request holding a slot ended (`peer.free`, after the balancer's free and
/// the breaker's record): its sample goes to the controller, and the slot goes back unless
/// nginx is about to retry on another server.
///
/// # Safety
/// `r`, `u` and `pc` must be the live request, its upstream and peer, in `peer.free`.
#[inline]
pub unsafe fn attempt_ended(
    state: &mut RequestState,
    r: &ngx_http_request_t,
    u: &ngx_http_upstream_t,
    pc: &ngx_peer_connection_t,
    ngx_state: ngx_uint_t,
    a: &Attempt,
) {
    if state.limit.is_held() {
        // SAFETY: `r`, `u`, `pc` are the live request, upstream and peer in peer.free (this fn's
        // contract), which is what `sample` asks.
        unsafe { sample(state, r, u, pc, ngx_state, a) };
    }
}

/// [`attempt_ended`] for a request holding a slot.
///
/// # Safety
/// As for [`attempt_ended`].
#[inline(never)]
unsafe fn sample(
    state: &mut RequestState,
    r: &ngx_http_request_t,
    u: &ngx_http_upstream_t,
    pc: &ngx_peer_connection_t,
    ngx_state: ngx_uint_t,
    a: &Attempt,
) {
    // SAFETY: `r`, `u`, `pc` are the live request, upstream and peer in peer.free (this fn's
    // contract), which is what `retry_follows` asks.
    let last = !unsafe { retry_follows(r, u, pc, ngx_state, a) };
    let class = state.told.class.flatten();
    limit::attempt_ended(
        state.limit,
        class,
        Sample::of(a, state.attempts.started > 1),
        last,
    );
    if last {
        state.limit = Hold::NONE;
    }
}

/// The response header of a request holding a slot goes to its client, passed on as it
/// arrives (`proxy_buffering off`, `proxy_max_temp_file_size 0`, or a `101` that turns the
/// connection into a tunnel): the
/// origin's part is its header (the rest waits on the client, `breaker::timing`), so the
/// sample is taken and the slot given back now, and a client that reads slowly, or keeps a
/// WebSocket open, holds no slot. Not for gRPC (its status, an overload signal
/// among them, comes in trailers), nor an answer nginx reads whole.
///
/// # Safety
/// `r` must be the live request, in the header filter.
pub unsafe fn header_passed(r: &mut ngx_http_request_t) {
    // SAFETY: the request's upstream, null or live while it runs.
    let Some(u) = (unsafe { r.upstream.as_ref() }) else {
        return;
    };
    // SAFETY: the location's upstream conf, live for the configuration.
    let conf = unsafe { u.conf.as_ref() };
    match conf {
        Some(c)
            if (u.buffering() == 0 || u.upgrade() != 0 || c.max_temp_file_size == 0)
                && !u.peer.connection.is_null()
                && !passes_trailers(c) => {}
        _ => return,
    }
    // SAFETY: the attempt's state record, null or live.
    let Some(st) = (unsafe { u.state.as_ref() }) else {
        return;
    };
    if st.header_time == nginx_sys::ngx_msec_t::MAX {
        return;
    }
    let status = st.status as u16;
    let Some(state) = request::here(r) else {
        return;
    };
    if !state.limit.is_held() {
        return;
    }
    let since = state
        .attempts
        .body_end()
        .map_or(0, |t| t.saturating_sub(u.start_time) as u64);
    let header_ms = st.header_time as u64;
    if since > header_ms {
        // The answer came before the client's body ended: no time of the origin's to learn.
        limit::attempt_ended(state.limit, state.told.class.flatten(), Sample::Drop, true);
        state.limit = Hold::NONE;
        return;
    }
    let ms = header_ms - since;
    let a = Attempt {
        retry_after_s: if status == 503 {
            // SAFETY: the upstream's parsed headers.
            unsafe { retry_after(&u.headers_in.headers) }
        } else {
            None
        },
        ..Attempt::http(status, ms)
    };
    limit::attempt_ended(
        state.limit,
        state.told.class.flatten(),
        Sample::of(&a, state.attempts.started > 1),
        true,
    );
    state.limit = Hold::NONE;
}

/// Whether nginx will make another attempt for this request after this `peer.free`: the
/// conditions of `ngx_http_upstream_next` ([`crate::retry::follows`]). A free from the
/// request's finalization (state 0) is the last. When this says yes and nginx still gives
/// up, the pool cleanup returns the slot.
///
/// # Safety
/// As for [`attempt_ended`].
unsafe fn retry_follows(
    r: &ngx_http_request_t,
    u: &ngx_http_upstream_t,
    pc: &ngx_peer_connection_t,
    ngx_state: ngx_uint_t,
    a: &Attempt,
) -> bool {
    // SAFETY: `r`, `u`, `pc` are the live request, upstream and peer in peer.free (this fn's
    // contract), which is what `crate::retry::follows` asks.
    ngx_state != 0 && unsafe { crate::retry::follows(r, u, pc, a) }
}
