//! A worker's table of the stream sessions it admitted and has not judged yet: each named by a
//! [`SessionId`] that nginx keeps in the session's context (a word, no allocation in the
//! session's pool), and, per upstream, the sessions that wait for a first byte in the order
//! their bounds run out — so that one timer of the worker's serves them all instead of one
//! timer per session.
//!
//! A session waits from the client's last bytes (its bound: the upstream's `first_byte`, which
//! each new chunk of the client's starts again, so that a slow upload is no silence), or from
//! its start when it is the probe (a probe must not be held by a client that says nothing: its
//! bound is `first_byte`, or the default when that is `off`). Every deadline of an upstream is
//! set at the time it is queued plus the same length, and a session moves to the tail when it
//! is set again, so each upstream's list is in deadline order by construction. A session whose
//! silence says nothing (UDP: nginx's `proxy_responses` judges it) waits only as a probe.

use crate::breaker::Ticket;
use crate::directive::DEFAULT_FIRST_BYTE_MS;

const NIL: u32 = u32::MAX;

/// A session the table holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// Its upstream's index among the configuration's stream breakers.
    pub upstream: u16,
    /// Its ticket on the upstream's breaker.
    pub ticket: Ticket,
    /// When nginx began connecting, on the worker's monotonic clock.
    pub start_ms: u64,
    /// The client's bytes went up.
    pub client_sent: bool,
    /// When the client's last bytes went up (its start until then).
    pub sent_ms: u64,
}

/// A session whose bound ran out before it was judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expired {
    /// The client's bytes went up and nothing came back: a failure.
    Silent(Held),
    /// A probe whose client sent nothing in time (or whose upstream counts no silence): its
    /// probe is given back without a verdict; the session goes on unjudged.
    Unjudged(Held),
}

/// Names a session in the table; stale once the session is judged (its place may hold another).
/// Its word never has either of the top two bits set (generations count to 2³⁰), which
/// [`super::Word`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionId {
    index: u32,
    generation: u32,
}

impl SessionId {
    /// As one non-zero word, for a pointer-sized context cell.
    #[inline]
    pub fn to_word(self) -> u64 {
        ((u64::from(self.generation) << 32) | u64::from(self.index)) + 1
    }

    /// The id a word of [`SessionId::to_word`] holds; `None` for 0.
    #[inline]
    pub fn from_word(w: u64) -> Option<SessionId> {
        let w = w.checked_sub(1)?;
        Some(SessionId {
            index: w as u32,
            generation: (w >> 32) as u32,
        })
    }
}

const HELD: u8 = 1;
const SENT: u8 = 2;
const QUEUED: u8 = 4;
const PROBE: u8 = 8;
const MUTE_OK: u8 = 16;

/// One place of the table: 40 bytes, a held session's fields spelled out (no `Option` of a
/// struct to move in and out).
#[derive(Clone, Debug)]
struct Place {
    ticket: u64,
    start_ms: u64,
    sent_ms: u64,
    deadline_ms: u64,
    generation: u32,
    prev: u32,
    next: u32,
    upstream: u16,
    flags: u8,
}

impl Place {
    #[inline]
    fn held(&self) -> Held {
        Held {
            upstream: self.upstream,
            ticket: if self.flags & PROBE != 0 {
                Ticket::Probe(self.ticket)
            } else {
                Ticket::Normal
            },
            start_ms: self.start_ms,
            client_sent: self.flags & SENT != 0,
            sent_ms: self.sent_ms,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct List {
    head: u32,
    tail: u32,
}

/// See the module's documentation.
#[derive(Clone, Debug)]
pub struct Table {
    places: Vec<Place>,
    free: u32,
    lists: Vec<List>,
    bounds: Vec<u32>,
    held: usize,
}

impl Table {
    /// A table for upstreams whose `first_byte` bounds are `bounds` (0: off), by index.
    pub fn new(bounds: Vec<u32>) -> Table {
        Table {
            places: Vec::new(),
            free: NIL,
            lists: vec![
                List {
                    head: NIL,
                    tail: NIL
                };
                bounds.len()
            ],
            bounds,
            held: 0,
        }
    }

    /// Sessions held now.
    pub fn len(&self) -> usize {
        self.held
    }

    /// Whether no session is held.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// A session of `upstream` admitted with `ticket` at `now_ms`; `silence` false when its
    /// silence says nothing (UDP). `None` for an upstream the table was not made for.
    #[inline]
    pub fn open(
        &mut self,
        upstream: u16,
        ticket: Ticket,
        now_ms: u64,
        silence: bool,
    ) -> Option<SessionId> {
        let bound = *self.bounds.get(usize::from(upstream))?;
        let (mut flags, value) = match ticket {
            Ticket::Normal => (HELD, 0),
            Ticket::Probe(t) => (HELD | PROBE, t),
        };
        if !silence {
            flags |= MUTE_OK;
        }
        let index = if self.free != NIL {
            let i = self.free;
            self.free = self.places[i as usize].next;
            i
        } else {
            self.places.push(Place {
                ticket: 0,
                start_ms: 0,
                sent_ms: 0,
                deadline_ms: 0,
                generation: 0,
                prev: NIL,
                next: NIL,
                upstream: 0,
                flags: 0,
            });
            (self.places.len() - 1) as u32
        };
        let p = &mut self.places[index as usize];
        p.ticket = value;
        p.start_ms = now_ms;
        p.sent_ms = now_ms;
        p.upstream = upstream;
        p.flags = flags;
        self.held += 1;
        let id = SessionId {
            index,
            generation: p.generation,
        };
        if flags & PROBE != 0 {
            let wait = if bound > 0 {
                bound
            } else {
                DEFAULT_FIRST_BYTE_MS
            };
            self.enqueue(index, now_ms.saturating_add(u64::from(wait)));
        }
        Some(id)
    }

    /// The client's bytes went up at `now_ms`: the session waits for a byte back from now on,
    /// if its upstream counts silence (again, if it waited already: the bound starts at the
    /// client's last bytes). `None` when the table no longer holds it (judged: its bound ran
    /// out); else the deadline it waits for now, if any.
    #[inline]
    pub fn client_sent(&mut self, id: SessionId, now_ms: u64) -> Option<Option<u64>> {
        let index = self.live(id)?;
        let p = &mut self.places[index as usize];
        p.flags |= SENT;
        p.sent_ms = now_ms;
        let bound = self.bounds[usize::from(p.upstream)];
        if bound == 0 || p.flags & MUTE_OK != 0 {
            return Some(None);
        }
        let deadline = now_ms.saturating_add(u64::from(bound));
        if p.flags & QUEUED != 0 {
            if p.deadline_ms == deadline {
                return Some(None);
            }
            self.unlink(index);
        }
        self.enqueue(index, deadline);
        Some(Some(deadline))
    }

    /// The session, judged (its first byte, or its end): it leaves the table.
    #[inline]
    pub fn take(&mut self, id: SessionId) -> Option<Held> {
        let index = self.live(id)?;
        Some(self.release(index))
    }

    /// The session, if it is still held.
    #[inline]
    pub fn get(&self, id: SessionId) -> Option<Held> {
        let index = self.live(id)?;
        Some(self.places[index as usize].held())
    }

    /// Takes every session whose bound ran out by `now_ms` into `out`, earliest first within
    /// each upstream.
    pub fn expire(&mut self, now_ms: u64, out: &mut Vec<Expired>) {
        for u in 0..self.lists.len() {
            loop {
                let head = self.lists[u].head;
                if head == NIL || self.places[head as usize].deadline_ms > now_ms {
                    break;
                }
                let mute_ok = self.places[head as usize].flags & MUTE_OK != 0;
                let h = self.release(head);
                out.push(if h.client_sent && self.bounds[u] > 0 && !mute_ok {
                    Expired::Silent(h)
                } else {
                    Expired::Unjudged(h)
                });
            }
        }
    }

    /// When the next bound runs out, if any session waits.
    pub fn next_deadline(&self) -> Option<u64> {
        self.lists
            .iter()
            .filter(|l| l.head != NIL)
            .map(|l| self.places[l.head as usize].deadline_ms)
            .min()
    }

    #[inline]
    fn live(&self, id: SessionId) -> Option<u32> {
        let p = self.places.get(id.index as usize)?;
        (p.generation == id.generation && p.flags & HELD != 0).then_some(id.index)
    }

    #[inline]
    fn enqueue(&mut self, index: u32, deadline_ms: u64) {
        let u = usize::from(self.places[index as usize].upstream);
        let tail = self.lists[u].tail;
        let p = &mut self.places[index as usize];
        p.deadline_ms = deadline_ms;
        p.flags |= QUEUED;
        p.prev = tail;
        p.next = NIL;
        if tail == NIL {
            self.lists[u].head = index;
        } else {
            self.places[tail as usize].next = index;
        }
        self.lists[u].tail = index;
    }

    /// Takes a queued place out of its upstream's list.
    #[inline]
    fn unlink(&mut self, index: u32) {
        let p = &mut self.places[index as usize];
        let (prev, next, u) = (p.prev, p.next, usize::from(p.upstream));
        p.flags &= !QUEUED;
        match prev {
            NIL => self.lists[u].head = next,
            _ => self.places[prev as usize].next = next,
        }
        match next {
            NIL => self.lists[u].tail = prev,
            _ => self.places[next as usize].prev = prev,
        }
    }

    /// Frees a held place; what it held.
    #[inline]
    fn release(&mut self, index: u32) -> Held {
        if self.places[index as usize].flags & QUEUED != 0 {
            self.unlink(index);
        }
        let p = &mut self.places[index as usize];
        let held = p.held();
        p.flags = 0;
        p.generation = (p.generation + 1) & 0x3fff_ffff;
        p.next = self.free;
        self.free = index;
        self.held -= 1;
        held
    }
}
