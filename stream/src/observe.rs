//! What the module sees of a session it admitted: the bytes passing through nginx's stream
//! filters (the client's first bytes going up, the server's first byte coming back), and the
//! session's end in the log phase.

use circuit_breaker_core::breaker::classify::Ending;
use circuit_breaker_core::breaker::{Attempt, Ticket};
use circuit_breaker_core::session::{self, Held, Plain, Word};
use circuit_breaker_shell::clock::mono_ms;
use circuit_breaker_shell::ffi::guard;
use nginx_sys::{
    ngx_chain_t, ngx_int_t, ngx_log_t, ngx_msec_t, ngx_stream_filter_pt, ngx_stream_session_t,
    ngx_uint_t, NGX_ERROR, NGX_OK, NGX_STREAM_SERVICE_UNAVAILABLE,
};

use crate::conf::{self, MainConf, SrvConf};
use crate::pool;
use crate::session::{self as held};

/// The next filter in nginx's chain, set once while the configuration is read.
static mut NEXT_FILTER: ngx_stream_filter_pt = None;

/// Puts [`filter`] at the top of nginx's stream filters.
///
/// # Safety
/// Only while a configuration is read (one thread, nginx's master).
pub unsafe fn add_filter() {
    // SAFETY: the master reads configurations on one thread; nginx's own filters chain the
    // same way.
    unsafe {
        NEXT_FILTER = nginx_sys::ngx_stream_top_filter;
        nginx_sys::ngx_stream_top_filter = Some(filter);
    }
}

/// Whether a chain ends its stream (`last_buf`): from a UDP server, nginx's mark of a failed
/// receive (UDP has no end of stream), the datagram's refusal by the server's host.
fn ends_stream(mut cl: *const ngx_chain_t) -> bool {
    // SAFETY: as in `carries_data`.
    while let Some(link) = unsafe { cl.as_ref() } {
        // SAFETY: as above.
        if unsafe { link.buf.as_ref() }.is_some_and(|b| b.last_buf() != 0) {
            return true;
        }
        cl = link.next;
    }
    false
}

/// Whether a chain carries any byte.
fn carries_data(mut cl: *const ngx_chain_t) -> bool {
    // SAFETY: a chain nginx passes through its filters: null-terminated, its buffers live.
    while let Some(link) = unsafe { cl.as_ref() } {
        // SAFETY: as above.
        if let Some(b) = unsafe { link.buf.as_ref() } {
            if b.last > b.pos || (b.in_file() != 0 && b.file_last > b.file_pos) {
                return true;
            }
        }
        cl = link.next;
    }
    false
}

unsafe extern "C" fn filter(
    s: *mut ngx_stream_session_t,
    input: *mut ngx_chain_t,
    from_upstream: ngx_uint_t,
) -> ngx_int_t {
    // SAFETY: nginx passes a live session to its filters.
    let w = unsafe { held::bits(s) };
    if Word::held(w) {
        // SAFETY: as above.
        unsafe { bytes(s, input, w, from_upstream != 0) };
    } else if from_upstream != 0 {
        if let Some(lane) = Word::answered_lane(w) {
            // SAFETY: as above.
            unsafe { replied(s, input, lane) };
        }
    }
    // SAFETY: the next filter, set when ours was put in front of it.
    match unsafe { NEXT_FILTER } {
        // SAFETY: nginx's own chain, with the arguments it gave us.
        Some(next) => unsafe { next(s, input, from_upstream) },
        None => NGX_ERROR as ngx_int_t,
    }
}

/// Bytes passing one way for a session not judged yet (its word `w`), when there are any.
/// Out of line: most calls of the filter are for sessions judged already.
///
/// # Safety
/// `s` must be a live session, `input` the chain nginx passes with it.
#[inline(never)]
unsafe fn bytes(s: *mut ngx_stream_session_t, input: *mut ngx_chain_t, w: u64, up: bool) {
    if !carries_data(input) {
        // SAFETY: as above.
        if up && ends_stream(input) && unsafe { datagrams(s) } {
            // SAFETY: as above.
            unsafe { refused(s, w) };
        }
        return;
    }
    guard((), || {
        // SAFETY: as above.
        let Some(mcf) = (unsafe { conf::of_session(s) }) else {
            return;
        };
        let now = mono_ms();
        match (Word::from_bits(w), up) {
            // An ordinary session of an upstream without a pool: the common case.
            (Word::Plain(p), true) if !mcf.lanes.has_servers() => {
                // SAFETY: as above.
                unsafe { held::set_mark(s, Word::Plain(p).judged()) };
                // SAFETY: as above.
                let log = unsafe { nginx_log(s) };
                // SAFETY: as above.
                if let Some(ms) = unsafe { took(s, mcf, p, now, log) } {
                    held::answered(mcf, &plain_held(p, now), ms, now, log);
                }
            }
            (Word::Plain(p), false) if !mcf.lanes.has_servers() => {
                // SAFETY: as above.
                unsafe { client_sent(s, mcf, p, now) };
            }
            // SAFETY: as above.
            (word, up) => unsafe { seen(s, mcf, word, up, now) },
        }
    });
}

/// Whether the session is UDP's.
///
/// # Safety
/// `s` must be a live session.
unsafe fn datagrams(s: *const ngx_stream_session_t) -> bool {
    // SAFETY: a live session's connection.
    unsafe { (*(*s).connection).type_ == nginx_sys::__socket_type_SOCK_DGRAM as core::ffi::c_int }
}

/// A UDP session not judged yet (its word `w`) whose server's host refused its datagram
/// (nothing on the server's port: an ICMP error, which nginx takes as the server's end of
/// stream, and a response, and ends the session as done): the server's failure, as a
/// refused TCP connect is, while it answers nobody else — judged as silence at the
/// first-byte bound ([`held::refused_later`]), a probe's at once ([`held::refused`]).
///
/// # Safety
/// `s` must be a live session.
#[cold]
#[inline(never)]
unsafe fn refused(s: *mut ngx_stream_session_t, w: u64) {
    guard((), || {
        // SAFETY: as for this function.
        let Some(mcf) = (unsafe { conf::of_session(s) }) else {
            return;
        };
        let now = mono_ms();
        // SAFETY: as for this function.
        let log = unsafe { nginx_log(s) };
        let word = Word::from_bits(w);
        let ejects = mcf.lanes.has_servers();
        let h = match word {
            // A UDP session never waits in the wheel (its word is mute): it goes in now.
            Word::Plain(p) => {
                // SAFETY: as for this function.
                unsafe { held::set_mark(s, word.judged()) };
                if ejects {
                    // SAFETY: as for this function; its tries are made.
                    unsafe { earlier_tries(s, mcf, p.lane(), log) };
                }
                if held::refused_later(mcf, p.lane(), now) {
                    return;
                }
                plain_held(p, now)
            }
            // SAFETY: the table's own step.
            Word::Probe(id) => match unsafe { held::with_waiting(mcf, |w| w.probes.take(id)) } {
                Some(h) => {
                    // SAFETY: as for this function.
                    unsafe { held::set_mark(s, word.judged()) };
                    h
                }
                None => return,
            },
            Word::Free | Word::Refused(_) | Word::Said(_) | Word::Answered(_) => return,
        };
        let ms = now.saturating_sub(h.sent_ms.min(h.start_ms));
        let server = if ejects {
            // SAFETY: as for this function.
            unsafe { server_now(s, mcf, h.upstream) }
        } else {
            None
        };
        held::refused(mcf, &h, server, &session::refused(ms), log);
    })
}

/// Bytes from the server of a session judged already, in lane `lane`: an answer, noted for
/// the silence rule ([`held::silent`]). An application's pooled connections are answered on
/// sessions judged long ago; without this, a server busy answering them looked hung to a
/// client's unfinished commands on new sessions. Out of line, as [`bytes`].
///
/// # Safety
/// `s` must be a live session, `input` the chain nginx passes with it.
#[inline(never)]
unsafe fn replied(s: *mut ngx_stream_session_t, input: *mut ngx_chain_t, lane: u16) {
    if !carries_data(input) {
        return;
    }
    guard((), || {
        // SAFETY: as above.
        if let Some(mcf) = unsafe { conf::of_session(s) } {
            held::replied(mcf, lane, mono_ms());
        }
    });
}

/// How long an ordinary session's server took to answer at `now`: from the client's last
/// bytes (and the connect) when the client spoke first, from the start when the server
/// speaks first (a client's own pause before it speaks is not the server's); `None` when its
/// bound ran out first (judged silent).
///
/// # Safety
/// `s` must be a live session.
#[inline(always)]
unsafe fn took(
    s: *mut ngx_stream_session_t,
    mcf: &MainConf,
    p: Plain,
    now: u64,
    log: *mut ngx_log_t,
) -> Option<u64> {
    let since = p.since(now);
    if !p.sent() {
        return Some(now.saturating_sub(since));
    }
    if !p.mute() && !held::leave(mcf, p.lane(), since, now, log) {
        return None;
    }
    // SAFETY: `s` is live.
    Some(
        now.saturating_sub(since)
            .saturating_add(unsafe { connect_ms(s) }),
    )
}

/// What the worker holds of an ordinary session read at `now`.
#[inline(always)]
fn plain_held(p: Plain, now: u64) -> Held {
    Held {
        upstream: p.lane(),
        ticket: Ticket::Normal,
        start_ms: if p.sent() { now } else { p.since(now) },
        client_sent: p.sent(),
        sent_ms: if p.sent() { p.since(now) } else { now },
    }
}

/// An ordinary session's client's bytes went up at `now` (in its lane): it waits for a byte
/// back from now on; false when its bound ran out already (judged silent).
///
/// # Safety
/// `s` must be a live session.
#[inline(always)]
unsafe fn client_sent(s: *mut ngx_stream_session_t, mcf: &MainConf, p: Plain, now: u64) -> bool {
    // SAFETY: `s` is live. Bytes the client sent (a PROXY protocol header nginx makes is
    // none of the client's).
    if unsafe { (*s).received } <= 0 {
        return true;
    }
    let again = p.sent().then(|| p.since(now));
    if again == Some(now) {
        return true;
    }
    let waits = p.mute() || held::wait(mcf, p.lane(), again, now);
    let next = if waits {
        Word::Plain(p.sent_at(now))
    } else {
        Word::Plain(p).judged()
    };
    // SAFETY: `s` is live.
    unsafe { held::set_mark(s, next) };
    waits
}

/// Bytes of a session not judged yet passing one way, seen at `now`: the probe, or a session
/// of an upstream with a pool.
///
/// # Safety
/// `s` must be a live session.
#[inline(never)]
unsafe fn seen(s: *mut ngx_stream_session_t, mcf: &MainConf, word: Word, up: bool, now: u64) {
    // SAFETY: a live session's connection.
    let log = unsafe { nginx_log(s) };
    let ejects = mcf.lanes.has_servers();
    if up {
        // SAFETY: `s` is live. Judged now, or already (its bound ran out): nothing more.
        unsafe { held::set_mark(s, word.judged()) };
        let (h, ms) = match word {
            Word::Plain(p) => {
                if ejects {
                    // SAFETY: `s` is live, its tries made (its server answered).
                    unsafe { earlier_tries(s, mcf, p.lane(), log) };
                }
                // SAFETY: `s` is live.
                match unsafe { took(s, mcf, p, now, log) } {
                    Some(ms) => (plain_held(p, now), ms),
                    None => return,
                }
            }
            // SAFETY: the table's own step.
            Word::Probe(id) => match unsafe { held::with_waiting(mcf, |w| w.probes.take(id)) } {
                Some(h) => {
                    let ms = if h.client_sent {
                        // SAFETY: `s` is live.
                        let connect = unsafe { connect_ms(s) };
                        now.saturating_sub(h.sent_ms).saturating_add(connect)
                    } else {
                        now.saturating_sub(h.start_ms)
                    };
                    (h, ms)
                }
                None => return,
            },
            Word::Free | Word::Refused(_) | Word::Said(_) | Word::Answered(_) => return,
        };
        // SAFETY: `s` is live.
        let server = ejects
            .then(|| unsafe { server_now(s, mcf, h.upstream) })
            .flatten();
        held::settle(mcf, &h, server, &session::answered(ms), log);
        return;
    }
    match word {
        Word::Plain(p) => {
            // Its first bytes: it waits in its server's lane, when its upstream ejects.
            let p = if p.placed() || p.sent() || !ejects {
                p
            } else {
                // SAFETY: `s` is live.
                let server = unsafe { server_now(s, mcf, p.lane()) };
                let lane = server.and_then(|i| mcf.lanes.server(p.lane(), i));
                lane.map_or(p, |lane| p.place(lane))
            };
            // SAFETY: `s` is live.
            if !unsafe { client_sent(s, mcf, p, now) } && ejects {
                // Judged (its bound ran out): its tries are told now, once.
                // SAFETY: `s` is live, connected.
                unsafe { earlier_tries(s, mcf, p.lane(), log) };
            }
        }
        Word::Probe(id) => {
            // SAFETY: `s` is live. Bytes the client sent, as in `client_sent`.
            if unsafe { (*s).received } <= 0 {
                return;
            }
            // SAFETY: the table's own step.
            match unsafe { held::with_waiting(mcf, |w| w.probes.client_sent(id, now)) } {
                // SAFETY: `s` is live. Its bound ran out: nothing more.
                None => unsafe { held::set_mark(s, word.judged()) },
                Some(Some(deadline)) => held::arm(mcf, deadline),
                Some(None) => {}
            }
        }
        Word::Free | Word::Refused(_) | Word::Said(_) | Word::Answered(_) => {}
    }
}

/// The log phase, ahead of the access log: a session the breaker refused gets its `503`; one
/// not judged yet is judged by how it ended.
pub unsafe extern "C" fn log_phase(s: *mut ngx_stream_session_t) -> ngx_int_t {
    // SAFETY: nginx passes a live session to its log phase handlers.
    let w = unsafe { held::bits(s) };
    if !Word::held(w) {
        if let Word::Refused(_) = Word::from_bits(w) {
            // SAFETY: as above.
            unsafe { (*s).status = NGX_STREAM_SERVICE_UNAVAILABLE as ngx_uint_t };
        }
        return NGX_OK as ngx_int_t;
    }
    // SAFETY: as above.
    unsafe { ended(s, w) }
}

/// A session not judged yet (its word `w`) ended: judged by how.
///
/// # Safety
/// `s` must be a live session, in its log phase.
#[inline(never)]
unsafe fn ended(s: *mut ngx_stream_session_t, w: u64) -> ngx_int_t {
    guard(NGX_OK as ngx_int_t, || {
        let word = Word::from_bits(w);
        if let Word::Free | Word::Refused(_) | Word::Said(_) | Word::Answered(_) = word {
            return NGX_OK as ngx_int_t;
        }
        // SAFETY: as above.
        let Some(mcf) = (unsafe { conf::of_session(s) }) else {
            return NGX_OK as ngx_int_t;
        };
        // SAFETY: as above.
        unsafe { held::set_mark(s, word.judged()) };
        let now = mono_ms();
        // SAFETY: as above; the session's upstream and its last state, null or live in its pool.
        let (status, connected, tried, log, started) = unsafe {
            let s = &*s;
            let u = s.upstream.as_ref();
            let last = u.and_then(|u| u.state.as_ref());
            (
                s.status,
                last.is_some_and(|st| st.connect_time != ngx_msec_t::MAX),
                tried(s),
                (*s.connection).log,
                u.map_or(now, |u| u.peer.start_time as u64),
            )
        };
        let mute = matches!(word, Word::Plain(p) if p.mute());
        let ejects = mcf.lanes.has_servers();
        if let (Word::Plain(p), true) = (word, ejects) {
            // SAFETY: as above; its tries are made.
            unsafe { earlier_tries(s, mcf, p.lane(), log) };
        }
        let h = match word {
            Word::Plain(p) => {
                if p.sent() && !p.mute() && !held::leave(mcf, p.lane(), p.since(now), now, log) {
                    return NGX_OK as ngx_int_t;
                }
                Held {
                    upstream: p.lane(),
                    ticket: Ticket::Normal,
                    start_ms: if p.sent() { started } else { p.since(now) },
                    client_sent: p.sent(),
                    sent_ms: p.since(now),
                }
            }
            // SAFETY: the table's own step.
            Word::Probe(id) => match unsafe { held::with_waiting(mcf, |w| w.probes.take(id)) } {
                Some(h) => h,
                None => return NGX_OK as ngx_int_t,
            },
            Word::Free | Word::Refused(_) | Word::Said(_) | Word::Answered(_) => {
                return NGX_OK as ngx_int_t
            }
        };
        let end = session::Ended {
            status: u16::try_from(status).unwrap_or(0),
            tried,
            connected,
            client_sent: h.client_sent,
            ms: now.saturating_sub(h.start_ms),
        };
        // SAFETY: `s` is live, in its log phase.
        let server = ejects
            .then(|| unsafe { server_now(s, mcf, h.upstream) })
            .flatten();
        match session::ended(&end) {
            // Nothing came back after the client's bytes (a UDP server's missing responses,
            // a connection that failed after them): silence, which a client can cause (a
            // datagram the server drops, a command it holds), judged as the bound's is — a
            // failure only while the upstream answered nobody, a probe's no verdict; and a
            // UDP server's unanswered datagrams are never its own failure.
            Some(a) if a.ending == Ending::Timeout => {
                held::silence(mcf, &h, server.filter(|_| tried), !mute, &a, log)
            }
            // The last try's server, connected or not (a refused connect is its failure).
            Some(a) => held::settle(mcf, &h, server.filter(|_| tried), &a, log),
            None => held::unjudged(mcf, &h, log),
        }
        NGX_OK as ngx_int_t
    })
}

/// How long nginx took to connect the session's last try (0 when it did not).
///
/// # Safety
/// `s` must be a live session.
#[inline]
unsafe fn connect_ms(s: *const ngx_stream_session_t) -> u64 {
    // SAFETY: a live session's upstream and its last state, null or live in its pool.
    let state = unsafe { (*s).upstream.as_ref().and_then(|u| u.state.as_ref()) };
    match state.map_or(0, |st| st.connect_time) {
        ngx_msec_t::MAX => 0,
        connect => connect as u64,
    }
}

/// The session's log.
///
/// # Safety
/// `s` must be a live session.
unsafe fn nginx_log(s: *mut ngx_stream_session_t) -> *mut ngx_log_t {
    // SAFETY: a live session's connection.
    unsafe { (*(*s).connection).log }
}

/// The server of a pool the session of lane `lane` is connected to (or last tried), when its
/// upstream ejects.
///
/// # Safety
/// `s` must be a live session.
unsafe fn server_now(s: *mut ngx_stream_session_t, mcf: &MainConf, lane: u16) -> Option<u16> {
    let scf = pooled(mcf, lane)?;
    // SAFETY: a live session's upstream, null or in its pool; `peer.name` is null or the name
    // of the peer the balancer chose.
    unsafe {
        let u = (*s).upstream.as_ref()?;
        pool::server_of(scf, u.peer.name)
    }
}

/// The conf of the upstream of lane `lane`, when it ejects.
#[inline]
fn pooled(mcf: &MainConf, lane: u16) -> Option<&SrvConf> {
    if !mcf.lanes.has_servers() {
        return None;
    }
    let (upstream, _) = mcf.lanes.owner(lane);
    // SAFETY: upstream confs live as long as the configuration.
    let scf = unsafe { &**mcf.upstreams.get(usize::from(upstream))? };
    scf.pool.as_ref().map(|_| scf)
}

/// Each try before the session's last failed to connect (nginx moves on to the next server
/// only then): a failure of that server, and of it alone (the session has one verdict).
/// Told once: when the session is judged (its server's first byte, or its end).
///
/// # Safety
/// `s` must be a live session, its tries made.
unsafe fn earlier_tries(
    s: *mut ngx_stream_session_t,
    mcf: &MainConf,
    lane: u16,
    log: *mut ngx_log_t,
) {
    let Some(scf) = pooled(mcf, lane) else {
        return;
    };
    // SAFETY: the session's states, null or an array of `ngx_stream_upstream_state_t` in its
    // pool, as the proxy pushes them.
    let states: &[nginx_sys::ngx_stream_upstream_state_t] = unsafe {
        match (*s).upstream_states.as_ref() {
            Some(a) => a.as_slice(),
            None => return,
        }
    };
    let Some((_, earlier)) = states.split_last() else {
        return;
    };
    for st in earlier {
        // SAFETY: null, or the name of the peer that try went to.
        if let Some(i) = unsafe { pool::server_of(scf, st.peer) } {
            let ms = if st.response_time == ngx_msec_t::MAX {
                0
            } else {
                st.response_time as u64
            };
            pool::failed(mcf, scf, i, &Attempt::ended(Ending::Error, ms), log);
        }
    }
}

/// Whether nginx tried a server at all for the session: a balancer that finds every server
/// busy (`max_conns`) or down names the upstream itself as the state's peer, where a tried
/// connect names the server's address.
///
/// # Safety
/// `s` must be a live session, in its log phase.
unsafe fn tried(s: &ngx_stream_session_t) -> bool {
    // SAFETY: the session's upstream and its states, null or live in its pool.
    let (u, states) = unsafe {
        match (s.upstream.as_ref(), s.upstream_states.as_ref()) {
            (Some(u), Some(a)) => (u, a),
            _ => return false,
        }
    };
    // SAFETY: the upstream conf nginx found, of this configuration.
    let Some(host) = (unsafe { u.upstream.as_ref() }).map(|us| us.host.as_bytes()) else {
        return false;
    };
    // SAFETY: an array of `ngx_stream_upstream_state_t`, as the proxy pushes them.
    let states: &[nginx_sys::ngx_stream_upstream_state_t] = unsafe { states.as_slice() };
    states.iter().any(|st| {
        // SAFETY: null, or a name in the session's pool or the configuration's.
        unsafe { st.peer.as_ref() }.is_some_and(|p| p.as_bytes() != host)
    })
}
