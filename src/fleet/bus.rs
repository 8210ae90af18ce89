//! The exchange worker's side of the fleet's bus (NATS): the configured servers, the
//! connection's counters, and the bounded queues between the exchange and the connection's
//! task (`bus_link`). Every size is bounded: a payload (the server's `max_payload`,
//! at most 1 MiB), both queues; what does not fit is dropped and counted.

use core::task::Waker;
use std::collections::VecDeque;

use circuit_breaker_core::fleet::bus::{BusState, BusStats, Credentials, Members, Subjects};
use circuit_breaker_core::fleet::conf::BusSpec;
use circuit_breaker_core::nats::{self, Msg};

use crate::net::Peer;

/// The largest payload taken from the bus, whatever a server allows: a fleet message and its
/// seal, with room to spare.
pub const MAX_PAYLOAD: usize = circuit_breaker_core::fleet::wire::MAX_MESSAGE_BYTES + 4096;
/// Messages in waiting for the exchange's next steps, and their payload bytes; more are
/// dropped (and counted).
const MAX_INBOX: usize = 4096;
const MAX_INBOX_BYTES: usize = 8 << 20;
/// Bytes out waiting for the connection; more are dropped (and counted).
pub(super) const MAX_OUTBOX_BYTES: usize = 4 << 20;

/// One configured server.
pub struct Server {
    pub peer: Peer,
    /// As configured (`10.0.0.5:4222`), for the status page and the log.
    pub shown: String,
    /// Listed as `tls://`.
    pub tls: bool,
    #[cfg(ngx_ssl)]
    pub ssl: Option<std::rc::Rc<crate::net::Tls>>,
}

/// The bus's side of the exchange: who this member is on it, the table of members, the
/// queues and the figures.
pub struct Bus {
    pub subjects: Subjects,
    pub members: Members,
    pub stats: BusStats,
    pub servers: Vec<Server>,
    pub credentials: Option<Credentials>,
    /// This member's sequence (see `auth::next_sequence`).
    pub seq: u64,
    /// A (re)connection was made: the exchange says hello and publishes at once.
    pub hello_due: bool,
    /// When this member last published its opinions, and the period it stated then.
    pub last_broadcast: Option<u64>,
    pub every_ms: u64,
    /// The server's `max_payload` on the current connection.
    pub max_payload: usize,
    inbox: VecDeque<Msg>,
    /// Payload bytes in `inbox`.
    in_bytes: usize,
    pub(super) outbox: VecDeque<Vec<u8>>,
    pub(super) out_bytes: usize,
    pub(super) waker: Option<Waker>,
    /// A `warn` was logged for the current outage.
    pub(super) warned: bool,
    /// The current connection has held for a ping interval.
    pub(super) steady: bool,
    /// When a refusal of a message, by its seal or its form, was last logged.
    pub told_auth: Option<u64>,
    pub told_malformed: Option<u64>,
    pub told_subject: Option<u64>,
    /// When a refusal by the server's permissions was last logged.
    pub(super) told_denied: Option<u64>,
}

impl Bus {
    pub fn new(
        spec: &BusSpec,
        id: &str,
        servers: Vec<Server>,
        credentials: Option<Credentials>,
        expire_ms: u64,
        pace_ms: u64,
    ) -> Bus {
        Bus {
            subjects: Subjects::new(&spec.prefix, id),
            members: Members::new(
                id,
                circuit_breaker_core::fleet::bus::MAX_MEMBERS,
                expire_ms,
                pace_ms,
            ),
            stats: BusStats::default(),
            servers,
            credentials,
            seq: 0,
            hello_due: false,
            last_broadcast: None,
            every_ms: 0,
            max_payload: MAX_PAYLOAD,
            inbox: VecDeque::new(),
            in_bytes: 0,
            outbox: VecDeque::new(),
            out_bytes: 0,
            waker: None,
            warned: false,
            steady: false,
            told_auth: None,
            told_malformed: None,
            told_subject: None,
            told_denied: None,
        }
    }

    /// Whether the connection is up (what is published now reaches the bus).
    pub fn connected(&self) -> bool {
        self.stats.state == BusState::Connected
    }

    /// Queues `payload` on `subject` for the connection; dropped (and counted) when the
    /// connection is down, the queue full, or the payload larger than the server takes.
    pub fn publish(&mut self, subject: &str, payload: &[u8]) {
        if !self.connected() {
            return;
        }
        let frame = match nats::publish(subject, None, payload, self.max_payload) {
            Ok(f) => f,
            Err(e) => {
                self.stats.dropped_out += 1;
                self.stats.last_error = Some(e.to_string());
                return;
            }
        };
        if self.out_bytes + frame.len() > MAX_OUTBOX_BYTES {
            self.stats.dropped_out += 1;
            return;
        }
        self.stats.messages_out += 1;
        self.stats.bytes_out += payload.len() as u64;
        self.queue(frame);
    }

    /// Queues protocol bytes for the connection; [`Bus::take_waker`] says whom to wake.
    pub(super) fn queue(&mut self, frame: Vec<u8>) {
        self.out_bytes += frame.len();
        self.outbox.push_back(frame);
    }

    /// The connection's task, when it waits while something is queued: to be woken once the
    /// exchange is no longer borrowed (a task woken outside itself runs at once).
    pub fn take_waker(&mut self) -> Option<Waker> {
        if self.outbox.is_empty() {
            return None;
        }
        self.waker.take()
    }

    /// A message off the bus, kept for the exchange's next step (dropped, and counted, past
    /// the bound).
    pub fn take_in(&mut self, m: Msg) {
        self.stats.bytes_in += m.payload.len() as u64;
        if self.inbox.len() >= MAX_INBOX || self.in_bytes + m.payload.len() > MAX_INBOX_BYTES {
            self.stats.dropped_in += 1;
            return;
        }
        self.stats.messages_in += 1;
        self.in_bytes += m.payload.len();
        self.inbox.push_back(m);
    }

    /// Messages taken off the bus, in order, up to `bytes` of payload (one at least).
    pub fn take_inbox(&mut self, bytes: usize) -> Vec<Msg> {
        let mut out = Vec::new();
        let mut taken = 0;
        while let Some(m) = self.inbox.front() {
            if !out.is_empty() && taken + m.payload.len() > bytes {
                break;
            }
            taken += m.payload.len();
            self.in_bytes -= m.payload.len();
            out.extend(self.inbox.pop_front());
        }
        out
    }

    /// Whether messages wait.
    pub fn has_inbox(&self) -> bool {
        !self.inbox.is_empty()
    }

    pub(super) fn take_outbox(&mut self) -> Vec<Vec<u8>> {
        self.out_bytes = 0;
        self.outbox.drain(..).collect()
    }
}

/// Whether what was last told at `told` may be told again at `now` (noting it): once a minute
/// at most for each kind of line, the counters saying how many.
pub(super) fn once_a_minute(told: &mut Option<u64>, now: u64) -> bool {
    let due = told.map_or(true, |t| now.saturating_sub(t) >= 60_000);
    if due {
        *told = Some(now);
    }
    due
}
