//! The exchange's steps for a fleet on a bus: what the messages the connection
//! ([`super::super::bus`]) took off the bus mean, and what this member says on it — its
//! opinions each interval and whenever a breaker moves, a hello when it (re)connects or
//! cannot believe a member yet, and the answers to others' hellos.

use circuit_breaker_core::fleet::auth::{self, Nonce};
use circuit_breaker_core::fleet::bus::frame::Sealer;
use circuit_breaker_core::fleet::bus::{
    self, frame, token, BusStats, Frame, FrameError, Headcount, Take, MAX_MEMBERS,
};
use nginx_sys::NGX_LOG_INFO;
use ngx::log::ngx_cycle_log;

use super::{fresh_nonce, Exchange};

/// Payload bytes a step verifies at most (each costs an HMAC): the rest waits for the next
/// step, so that a flood on the bus delays the exchange, never the worker's requests.
const STEP_BYTES: usize = 1 << 20;
use circuit_breaker_shell::clock::wall_ms;

impl Exchange {
    /// The fleet's key under its subjects' prefix, as every bus message is sealed.
    fn sealer(&self) -> Sealer<'_> {
        Sealer {
            key: &self.key,
            prefix: self.spec.bus.as_ref().map_or("", |b| b.prefix.as_str()),
        }
    }

    /// Takes what the bus brought since the last step; true when a breaker's opinions
    /// changed.
    pub(in crate::fleet) fn bus_take(&mut self, now: u64) -> bool {
        let Some(b) = self.bus.as_mut() else {
            return false;
        };
        let inbox = b.take_inbox(STEP_BYTES);
        let more = b.has_inbox();
        // The fleet's size: counted once per step, then kept up to date message by message.
        let mut members = b.members.headcount(now);
        let mut changed = false;
        for m in inbox {
            changed |= self.bus_one(now, &mut members, &m.subject, &m.payload);
        }
        if more {
            // The rest at the next step, after the requests waiting meanwhile.
            crate::wake::kick();
        }
        changed
    }

    /// One message off the bus, in a fleet of `members` (kept up to date).
    fn bus_one(
        &mut self,
        now: u64,
        members: &mut Headcount,
        subject: &str,
        payload: &[u8],
    ) -> bool {
        let now_us = wall_ms().saturating_mul(1000);
        let Some(b) = self.bus.as_mut() else {
            return false;
        };
        // The kind each subject carries, and who published on it, told at a glance before
        // any MAC is computed.
        let heard = b.subjects.read(subject);
        let opened = match heard {
            Some(h) if frame::looks_like(payload, h.kind) => frame::open(&self.sealer(), payload),
            _ => Err(FrameError::Header),
        };
        let f = match opened {
            Ok(f) => f,
            Err(e) => {
                let Some(b) = self.bus.as_mut() else {
                    return false;
                };
                let (count, told) = match e {
                    FrameError::Auth(_) => (&mut b.stats.refused_auth, &mut b.told_auth),
                    _ => (&mut b.stats.refused_malformed, &mut b.told_malformed),
                };
                *count += 1;
                refused_once(now, told, subject, &e);
                return false;
            }
        };
        let Some(b) = self.bus.as_mut() else {
            return false;
        };
        // Sealed by a holder of the key, but on another member's subject than the one it
        // names: where the bus pins each member's credentials to its own subjects, only the
        // member itself can publish there.
        if heard.is_some_and(|h| token(f.sender()) != h.from) {
            b.stats.refused_subject += 1;
            refused_once(
                now,
                &mut b.told_subject,
                subject,
                &"another member's subject",
            );
            return false;
        }
        let (take, every_ms, message) = match f {
            Frame::Opinions {
                sender,
                seq,
                every_ms,
                message,
            } => {
                let take = b.members.take_counted(members, now, &sender, |m| {
                    m.opinions(now, now_us, &sender, seq)
                });
                (take, every_ms, message)
            }
            Frame::Reply {
                sender,
                seq,
                nonce,
                every_ms,
                message,
            } => {
                let take = b.members.take_counted(members, now, &sender, |m| {
                    m.reply(now, now_us, &sender, seq, &nonce)
                });
                (take, every_ms, message)
            }
            Frame::Hello { sender, seq, nonce } => {
                if b.members.hello_from(now, now_us, &sender, seq) {
                    self.bus_answer(now, &sender, &nonce);
                }
                return false;
            }
        };
        match take {
            Take::Accept => {
                // A quiet member speaks less often: its word lasts as long as it says, within
                // what a fleet of this size could need.
                let lasts = bus::lasts_ms(every_ms, self.spec.interval_ms, members.get());
                b.members.lasts(&message.sender, lasts);
                let Some(p) = self.store.join(&message.sender, MAX_MEMBERS) else {
                    return false;
                };
                // A heartbeat that only renews opinions waits for the round's advice: with
                // N members, up to N - 1 of them arrive each interval.
                self.store
                    .take_message(now, p, &message, lasts)
                    .is_ok_and(|got| got.changed > 0)
            }
            Take::Refuse { ask: true, .. } => {
                let to = b.subjects.ask(&message.sender);
                self.bus_hello(now, &to, false);
                false
            }
            Take::Refuse { .. } => false,
        }
    }

    /// The next sequence of this member's messages.
    fn bus_seq(&mut self) -> u64 {
        let Some(b) = self.bus.as_mut() else { return 0 };
        b.seq = auth::next_sequence(b.seq, wall_ms().saturating_mul(1000));
        b.seq
    }

    /// Says hello on `subject` (`everyone`'s, or one member's), with a fresh nonce.
    fn bus_hello(&mut self, now: u64, subject: &str, everyone: bool) {
        let Some(nonce) = fresh_nonce(self) else {
            return;
        };
        let seq = self.bus_seq();
        let payload = frame::hello(&self.sealer(), &self.spec.id, seq, &nonce);
        if let Some(b) = self.bus.as_mut() {
            b.members.hello_sent(now, nonce, everyone);
            b.publish(subject, &payload);
        }
    }

    /// How often this member speaks while nothing moves: each interval, or less often while
    /// it is quiet, the more so the larger the fleet.
    fn bus_every(&self, now: u64) -> u64 {
        let members = self.bus.as_ref().map_or(0, |b| b.members.heard(now));
        bus::heartbeat_ms(self.spec.interval_ms, members, self.store.quiet(now))
    }

    /// Answers `sender`'s hello `nonce` on its reply subject: this member's opinions now.
    fn bus_answer(&mut self, now: u64, sender: &str, nonce: &Nonce) {
        let seq = self.bus_seq();
        let body = self.store.render(now);
        let every = self.bus_every(now);
        let payload = frame::reply(
            &self.sealer(),
            &self.spec.id,
            seq,
            nonce,
            every,
            body.as_bytes(),
        );
        if let Some(b) = self.bus.as_mut() {
            let to = b.subjects.reply(sender);
            b.publish(&to, &payload);
        }
    }

    /// Publishes this member's opinions to every member.
    pub(in crate::fleet) fn bus_publish(&mut self, now: u64) {
        if !self.bus.as_ref().is_some_and(|b| b.connected()) {
            return;
        }
        let seq = self.bus_seq();
        let body = self.store.render(now);
        let every = self.bus_every(now);
        let payload = frame::opinions(&self.sealer(), &self.spec.id, seq, every, body.as_bytes());
        if let Some(b) = self.bus.as_mut() {
            b.last_broadcast = Some(now);
            b.every_ms = every;
            let subject = b.subjects.opinions();
            b.publish(&subject, &payload);
        }
    }

    /// Once a connection is made: hello to everyone, and this member's opinions.
    pub(in crate::fleet) fn bus_say(&mut self, now: u64) {
        let due = match self.bus.as_mut() {
            Some(b) if b.connected() && b.hello_due => {
                b.hello_due = false;
                true
            }
            _ => false,
        };
        if due {
            let everyone = self.bus.as_ref().map(|b| b.subjects.hello());
            if let Some(to) = everyone {
                self.bus_hello(now, &to, true);
            }
            self.bus_publish(now);
        }
    }

    /// Each round: this member's opinions once per interval, or per its longer period while
    /// it stays quiet, never later than it said; members silent past what their word lasts
    /// part, their opinions with them.
    pub(in crate::fleet) fn bus_round(&mut self, now: u64) {
        let every = self.bus_every(now);
        let due = self.bus.as_ref().is_some_and(|b| {
            b.last_broadcast.map_or(true, |t| {
                bus::heartbeat_due(now.saturating_sub(t), every, b.every_ms)
            })
        });
        if due {
            self.bus_publish(now);
        }
        let gone = match self.bus.as_mut() {
            Some(b) => b.members.forget(now),
            None => Vec::new(),
        };
        for id in gone {
            self.store.part(&id);
        }
    }

    /// The bus's figures now, for the status page.
    pub(in crate::fleet) fn bus_stats(&self, now: u64) -> Option<BusStats> {
        let b = self.bus.as_ref()?;
        let mut s = b.stats.clone();
        s.members = b.members.heard(now);
        s.refused = b.members.refused().to_vec();
        Some(s)
    }
}

/// Logs a message's refusal at `info`, once a minute at most per kind of refusal (`told`): the
/// counters say how many.
fn refused_once(now: u64, told: &mut Option<u64>, subject: &str, why: &dyn core::fmt::Display) {
    if crate::fleet::bus::once_a_minute(told, now) {
        ngx::ngx_log_error!(
            NGX_LOG_INFO,
            ngx_cycle_log().as_ptr(),
            "circuit breaker fleet: a message on \"{}\" refused: {}",
            subject,
            why
        );
    }
}
