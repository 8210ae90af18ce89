//! The exchange worker's connection to the fleet's bus (NATS), in the background on its event
//! loop: one task that connects to the configured servers in turn, upgrades to TLS for a
//! `tls://` one (or one that requires it), says who it is (`CONNECT`, with the bus's own
//! credentials), subscribes to the fleet's subjects, and then carries messages both ways
//! until the connection fails or the worker exits; then it waits (growing, jittered) and
//! tries the next server.
//!
//! It only carries: what a message means, and whether it is believed, is the exchange's
//! ([`super::exchange`], with the pure rules of `circuit_breaker_core::fleet::bus`). Messages
//! in wait in a bounded queue for the exchange's next step; messages out wait in a bounded
//! queue for this task, which the exchange wakes. Every size is bounded: a control line, a
//! payload (the server's `max_payload`, at most 1 MiB), both queues. A server that is down,
//! slow (no `PONG` to two `PING`s), or answers what does not parse costs a counter, one
//! `warn` per outage and a reconnect; nothing it sends reaches a breaker unverified.

use core::cell::RefCell;
use core::future::{poll_fn, Future};
use core::pin::pin;
use core::task::Poll;
use core::time::Duration;
use std::rc::Rc;

use circuit_breaker_core::fleet::bus::BusState;
use circuit_breaker_core::nats::{self, Backoff, Connect, Limits, Msg, Parser, Rotation, ServerOp};
use circuit_breaker_shell::net::stream::Stream;
use nginx_sys::{NGX_LOG_NOTICE, NGX_LOG_WARN};
use ngx::log::ngx_cycle_log;

use super::bus::{once_a_minute, MAX_OUTBOX_BYTES, MAX_PAYLOAD};
use super::exchange::Exchange;
use crate::net::{self, Error};
use crate::wake;
use circuit_breaker_shell::clock::{mono_ms, rnd};

/// The connection's read buffer.
const READ_BYTES: usize = 64 * 1024;
/// Unanswered `PING`s after which the connection is taken for dead.
const MAX_PINGS_OUT: u32 = 2;
/// Waits between tries after a failure, growing from the first to the last.
const BACKOFF_MIN_MS: u64 = 100;
const BACKOFF_MAX_MS: u64 = 5000;

/// Why a connection ended.
enum Ended {
    /// The worker is exiting.
    Exiting,
    /// It failed, as said.
    Failed(String),
}

impl From<Error> for Ended {
    fn from(e: Error) -> Ended {
        match e {
            Error::Exiting => Ended::Exiting,
            e => Ended::Failed(e.to_string()),
        }
    }
}

fn failed(what: impl Into<String>) -> Ended {
    Ended::Failed(what.into())
}

/// Runs the connection until the worker exits.
pub async fn run(ex: Rc<RefCell<Exchange>>) {
    let n = match ex.borrow().bus.as_ref() {
        Some(b) => b.servers.len(),
        None => return,
    };
    let Some(mut rotation) = Rotation::new(n, rnd() as usize % n.max(1)) else {
        return;
    };
    let mut backoff = Backoff::new(BACKOFF_MIN_MS, BACKOFF_MAX_MS);
    let mut failed_in_row = 0usize;
    loop {
        if net::exiting() {
            return;
        }
        let i = rotation.next();
        let shown = {
            let mut e = ex.borrow_mut();
            let Some(b) = e.bus.as_mut() else { return };
            b.stats.state = BusState::Connecting;
            b.stats.server = Some(b.servers[i].shown.clone());
            b.stats.server_name = None;
            b.servers[i].shown.clone()
        };
        let end = session(&ex, i).await;
        let why = match end {
            Ended::Exiting => return,
            Ended::Failed(why) => why,
        };
        if net::exiting() {
            return;
        }
        // Only a connection that stayed up (a ping interval, answering) ends an outage: one
        // dropped as soon as made (a flapping server, or someone knocking it down) goes on
        // backing off, and is warned of once.
        let steady = ex
            .borrow_mut()
            .bus
            .as_mut()
            .is_some_and(|b| core::mem::take(&mut b.steady));
        if steady {
            backoff.reset();
            failed_in_row = 0;
        } else {
            failed_in_row += 1;
        }
        {
            let mut e = ex.borrow_mut();
            let Some(b) = e.bus.as_mut() else { return };
            b.stats.failures += 1;
            b.stats.since_ms = None;
            b.stats.last_error = Some(format!("{shown}: {why}"));
            b.stats.state = if failed_in_row >= n {
                BusState::Down
            } else {
                BusState::Connecting
            };
            b.take_outbox();
            if !core::mem::replace(&mut b.warned, true) {
                ngx::ngx_log_error!(
                    NGX_LOG_WARN,
                    ngx_cycle_log().as_ptr(),
                    "circuit breaker fleet: bus server {}: {}; reconnecting (this instance \
                     acts alone while it hears no member)",
                    shown,
                    why
                );
            }
        }
        wake::kick();
        // A wait before every try, growing while tries fail (from the first again once a
        // connection held), so that neither a dead bus nor a flapping one is hammered.
        ngx::async_::sleep(Duration::from_millis(backoff.next(rnd()))).await;
    }
}

/// How long to wait for a server's word: a connection, its `INFO`, its `PONG`.
fn patience(ex: &Rc<RefCell<Exchange>>) -> Duration {
    let interval = ex.borrow().interval_ms();
    Duration::from_millis((interval / 2).clamp(500, 5000))
}

/// One connection to server `i`, from connect to failure.
async fn session(ex: &Rc<RefCell<Exchange>>, i: usize) -> Ended {
    let wait = patience(ex);
    // One deadline for all of the handshake (a server that trickles can stretch none of it).
    let deadline = mono_ms() + 2 * wait.as_millis() as u64;
    let left = || Duration::from_millis(deadline.saturating_sub(mono_ms()).max(1));
    let (peer, tls, connect) = {
        let e = ex.borrow();
        let Some(b) = e.bus.as_ref() else {
            return Ended::Exiting;
        };
        let s = &b.servers[i];
        (s.peer.clone(), s.tls, connect_of(e.id()))
    };
    #[cfg(ngx_ssl)]
    let ssl = ex
        .borrow()
        .bus
        .as_ref()
        .and_then(|b| b.servers[i].ssl.clone());
    let stream = match net::within(wait, Stream::connect(&peer, "talking to the fleet's bus")).await
    {
        Ok(s) => s,
        Err(e) => return e.into(),
    };
    let mut parser = Parser::new(Limits {
        max_control_line: nats::parse::DEFAULT_MAX_CONTROL_LINE,
        max_payload: MAX_PAYLOAD,
    });
    let mut buf = vec![0u8; READ_BYTES];
    // The server speaks first.
    let info = match net::within(left(), next_op(&stream, &mut parser, &mut buf)).await {
        Ok(ServerOp::Info(info)) => info,
        Ok(other) => return failed(format!("expected INFO, got {}", op_name(&other))),
        Err(e) => return e.into(),
    };
    parser.set_max_payload(info.max_payload);
    if info.tls_required && !tls {
        return failed("the server requires TLS: list it as tls://");
    }
    if tls {
        #[cfg(ngx_ssl)]
        {
            let Some(ssl) = ssl else {
                return failed("no TLS context");
            };
            if let Err(e) = net::within(left(), net::start_tls(&stream, &ssl)).await {
                return e.into();
            }
        }
        #[cfg(not(ngx_ssl))]
        return failed("this nginx has no TLS");
    }
    // An NKey signs the nonce this server's INFO gave.
    let auth = ex
        .borrow()
        .bus
        .as_ref()
        .and_then(|b| b.credentials.as_ref())
        .map(|c| c.connect_auth(info.nonce.as_deref()))
        .transpose();
    let auth = match auth {
        Ok(a) => a.unwrap_or_default(),
        Err(e) => return failed(e),
    };
    let connect = Connect {
        tls_required: tls,
        user: auth.user,
        pass: auth.pass,
        auth_token: auth.auth_token,
        nkey: auth.nkey,
        sig: auth.sig,
        jwt: auth.jwt,
        ..connect
    };
    let mut hello = nats::connect(&connect);
    let subjects = match ex.borrow().bus.as_ref() {
        Some(b) => b.subjects.clone(),
        None => return Ended::Exiting,
    };
    for (sid, subject) in (1..).zip(subjects.subscriptions()) {
        match nats::subscribe(&subject, None, sid) {
            Ok(s) => hello.extend_from_slice(&s),
            Err(e) => return failed(e.to_string()),
        }
    }
    hello.extend_from_slice(nats::ping());
    if let Err(e) = net::within(left(), stream.send_all(&hello)).await {
        return e.into();
    }
    // Its PONG says it took all of the above (an error, such as a refused CONNECT, comes
    // first as -ERR).
    loop {
        match net::within(left(), next_op(&stream, &mut parser, &mut buf)).await {
            Ok(ServerOp::Pong) => break,
            Ok(ServerOp::Err(text)) if nats::err_keeps_connection(&text) => {
                ex.borrow_mut().bus_denied(&text)
            }
            Ok(ServerOp::Err(text)) => {
                return failed(format!("server said: {}", shown_text(&text)))
            }
            Ok(ServerOp::Ping) => {
                if let Err(e) = net::within(left(), stream.send_all(nats::pong())).await {
                    return e.into();
                }
            }
            Ok(ServerOp::Info(_) | ServerOp::Ok) => {}
            Ok(ServerOp::Msg(m)) => ex.borrow_mut().bus_message(m),
            Err(e) => return e.into(),
        }
    }
    {
        let mut e = ex.borrow_mut();
        let Some(b) = e.bus.as_mut() else {
            return Ended::Exiting;
        };
        b.stats.state = BusState::Connected;
        b.stats.connects += 1;
        b.stats.since_ms = Some(mono_ms());
        b.stats.server_name = Some(shown_text(&info.server_name)).filter(|n| !n.is_empty());
        b.max_payload = info.max_payload.min(MAX_PAYLOAD);
        // A hello asks every member for a reply: made when no member is known (the first
        // connection, or after an outage longer than every member's word lasts), not at every
        // reconnection: the members still known are heard again as they speak.
        b.hello_due = b.members.heard(mono_ms()) == 0;
        let first = b.stats.connects == 1;
        let shown = b.stats.server.clone().unwrap_or_default();
        drop(e);
        // The first connection is told now; one after an outage once it holds (`carry`).
        if first {
            ngx::ngx_log_error!(
                NGX_LOG_NOTICE,
                ngx_cycle_log().as_ptr(),
                "circuit breaker fleet: connected to the bus at {} (server \"{}\")",
                shown,
                shown_text(&info.server_name)
            );
        }
    }
    wake::kick();
    carry(ex, &stream, &mut parser, &mut buf).await
}

/// Carries messages both ways until the connection fails.
async fn carry(
    ex: &Rc<RefCell<Exchange>>,
    stream: &Stream,
    parser: &mut Parser,
    buf: &mut [u8],
) -> Ended {
    let ping_every = ping_interval(ex);
    let write_wait = patience(ex);
    let mut next_ping = mono_ms() + ping_every.as_millis() as u64;
    let mut pings_out = 0u32;
    let mut reads = 0u64;
    let up_at = mono_ms();
    let mut steady = false;
    // A PONG came to a PING of this connection's: a server that completes the handshake and
    // then says nothing is not up.
    let mut ponged = false;
    loop {
        if net::exiting() {
            return Ended::Exiting;
        }
        let out = match ex.borrow_mut().bus.as_mut() {
            Some(b) => b.take_outbox(),
            None => return Ended::Exiting,
        };
        for frame in out {
            if let Err(e) = net::within(write_wait, stream.send_all(&frame)).await {
                return e.into();
            }
        }
        let now = mono_ms();
        if !steady && ponged && now >= up_at + ping_every.as_millis() as u64 && pings_out == 0 {
            // Up a whole ping interval, answering: the outage, if any, is over.
            steady = true;
            let told = ex.borrow_mut().bus.as_mut().and_then(|b| {
                b.steady = true;
                core::mem::replace(&mut b.warned, false).then(|| {
                    let name = b.stats.server_name.clone().unwrap_or_default();
                    (b.stats.server.clone().unwrap_or_default(), name)
                })
            });
            if let Some((server, name)) = told {
                ngx::ngx_log_error!(
                    NGX_LOG_NOTICE,
                    ngx_cycle_log().as_ptr(),
                    "circuit breaker fleet: connected to the bus at {} again (server \"{}\")",
                    server,
                    shown_text(&name)
                );
            }
        }
        if now >= next_ping {
            if pings_out >= MAX_PINGS_OUT {
                return failed("no PONG to two PINGs");
            }
            if let Err(e) = net::within(write_wait, stream.send_all(nats::ping())).await {
                return e.into();
            }
            pings_out += 1;
            next_ping = now + ping_every.as_millis() as u64;
        }
        let room = parser.room().clamp(1, buf.len());
        match wait_for(ex, stream, &mut buf[..room], next_ping.saturating_sub(now)).await {
            Woke::Read(Ok(0)) => return failed("the server closed the connection"),
            Woke::Read(Ok(n)) => {
                if let Err(e) = parser.feed(&buf[..n]) {
                    return failed(e.to_string());
                }
                let mut pong = false;
                loop {
                    match parser.next() {
                        Ok(None) => break,
                        Ok(Some(op)) => match op {
                            ServerOp::Msg(m) => ex.borrow_mut().bus_message(m),
                            // One PONG answers every PING of a read.
                            ServerOp::Ping => pong = true,
                            ServerOp::Pong => {
                                pings_out = 0;
                                ponged = true;
                            }
                            ServerOp::Ok => {}
                            ServerOp::Info(info) => {
                                parser.set_max_payload(info.max_payload);
                                if let Some(b) = ex.borrow_mut().bus.as_mut() {
                                    b.max_payload = info.max_payload.min(MAX_PAYLOAD);
                                }
                                if info.ldm {
                                    return failed("the server is shutting down (lame duck mode)");
                                }
                            }
                            ServerOp::Err(text) if nats::err_keeps_connection(&text) => {
                                ex.borrow_mut().bus_denied(&text)
                            }
                            ServerOp::Err(text) => {
                                return failed(format!("server said: {}", shown_text(&text)))
                            }
                        },
                        Err(e) => return failed(e.to_string()),
                    }
                }
                if pong {
                    if let Some(b) = ex.borrow_mut().bus.as_mut() {
                        if b.out_bytes + nats::pong().len() <= MAX_OUTBOX_BYTES {
                            b.queue(nats::pong().to_vec());
                        }
                    }
                }
                wake::kick();
                // Many reads in a row: let the worker's requests go first.
                reads += 1;
                if reads % 16 == 0 {
                    yield_now().await;
                }
            }
            Woke::Read(Err(e)) => return e.into(),
            Woke::Queued | Woke::Timer => {}
        }
    }
}

/// What ended a wait.
enum Woke {
    Read(Result<usize, Error>),
    /// The exchange queued something to send.
    Queued,
    Timer,
}

/// Waits for bytes from the server, something to send, or `ms` to pass.
async fn wait_for(ex: &Rc<RefCell<Exchange>>, stream: &Stream, buf: &mut [u8], ms: u64) -> Woke {
    let read = stream.recv(buf);
    let timer = ngx::async_::sleep(Duration::from_millis(ms.max(1)));
    let (mut read, mut timer) = (pin!(read), pin!(timer));
    poll_fn(|cx| {
        if let Poll::Ready(r) = read.as_mut().poll(cx) {
            return Poll::Ready(Woke::Read(r));
        }
        match ex.borrow_mut().bus.as_mut() {
            Some(b) if !b.outbox.is_empty() => return Poll::Ready(Woke::Queued),
            Some(b) => b.waker = Some(cx.waker().clone()),
            None => return Poll::Ready(Woke::Timer),
        }
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Woke::Timer);
        }
        Poll::Pending
    })
    .await
}

/// Reads until the parser has an operation.
async fn next_op(stream: &Stream, parser: &mut Parser, buf: &mut [u8]) -> Result<ServerOp, Error> {
    loop {
        match parser.next() {
            Ok(Some(op)) => return Ok(op),
            Ok(None) => {}
            Err(e) => return Err(Error::Protocol(e.to_string())),
        }
        let room = parser.room().clamp(1, buf.len());
        let n = stream.recv(&mut buf[..room]).await?;
        if n == 0 {
            return Err(Error::Closed);
        }
        parser
            .feed(&buf[..n])
            .map_err(|e| Error::Protocol(e.to_string()))?;
    }
}

/// What a server says, fit for a log line: control characters escaped, at most 200 bytes.
fn shown_text(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if out.len() >= 200 {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Lets the worker's event loop run once before going on (a task that wakes itself is run
/// again from the next loop iteration).
async fn yield_now() {
    let mut yielded = false;
    poll_fn(|cx| {
        if core::mem::replace(&mut yielded, true) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

fn op_name(op: &ServerOp) -> &'static str {
    match op {
        ServerOp::Info(_) => "INFO",
        ServerOp::Msg(_) => "MSG",
        ServerOp::Ping => "PING",
        ServerOp::Pong => "PONG",
        ServerOp::Ok => "+OK",
        ServerOp::Err(_) => "-ERR",
    }
}

/// How often to ask the server whether it is still there: each interval, between 1 and 30
/// seconds, so that a dead connection is found within a few intervals.
fn ping_interval(ex: &Rc<RefCell<Exchange>>) -> Duration {
    Duration::from_millis(ex.borrow().interval_ms().clamp(1000, 30_000))
}

/// The `CONNECT` of member `id`: quiet (no `+OK`), no echo of its own messages; its
/// credentials are added once the server's `INFO` is read.
fn connect_of(id: &str) -> Connect {
    Connect {
        name: format!("nginx circuit breaker {id}"),
        // Its own messages are nothing to it.
        echo: false,
        ..Connect::default()
    }
}

impl Exchange {
    /// The server refused a publication or a subscription of this member's (its permissions
    /// do not grant the subject): counted, and said at `warn` once a minute at most; the
    /// connection stays.
    fn bus_denied(&mut self, text: &str) {
        let Some(b) = self.bus.as_mut() else { return };
        b.stats.denied += 1;
        if once_a_minute(&mut b.told_denied, mono_ms()) {
            ngx::ngx_log_error!(
                NGX_LOG_WARN,
                ngx_cycle_log().as_ptr(),
                "circuit breaker fleet: bus server {} said: {}; the bus user's permissions \
                 must grant this member's subjects",
                b.stats.server.as_deref().unwrap_or(""),
                shown_text(text)
            );
        }
    }

    /// A message off the bus, for the next step (dropped, and counted, past the bound).
    pub(super) fn bus_message(&mut self, m: Msg) {
        if let Some(b) = self.bus.as_mut() {
            b.take_in(m);
        }
    }
}
