//! A probe a worker's prober holds while it is in flight, for the http and the stream
//! modules' probers alike: given back to its breaker if the probe ends without a verdict, or
//! if its task is dropped (the worker exits) before recording one, so that the instance's one
//! probe is never kept by a probe that went nowhere.

use core::cell::Cell;
use std::rc::Rc;

use circuit_breaker_core::breaker::Ticket;

use super::{Handle, Key, Zone};
use crate::clock::mono_ms;

/// What a prober probes: a breaker, found in the zone by its key.
pub trait Probed {
    /// Whether this worker's probe of it is in flight.
    fn in_flight(&self) -> &Cell<bool>;
    /// Where this worker last found the breaker (a hint, checked by the key).
    fn handle(&self) -> Handle;
    /// The breaker's key.
    fn key(&self) -> Key<'_>;
}

/// The probe of a target, held by this worker while in flight.
pub struct HeldProbe<T: Probed> {
    zone: Zone,
    pub target: Rc<T>,
    ticket: Option<Ticket>,
}

impl<T: Probed> HeldProbe<T> {
    /// Holds `t`'s probe, granted with `ticket`.
    pub fn new(zone: &Zone, t: &Rc<T>, ticket: Ticket) -> HeldProbe<T> {
        t.in_flight().set(true);
        HeldProbe {
            zone: zone.clone(),
            target: Rc::clone(t),
            ticket: Some(ticket),
        }
    }

    /// Lets go of the probe to record its verdict with the ticket (nothing is left to give
    /// back), and the zone to record it in.
    pub fn into_verdict(mut self) -> Option<(Ticket, Zone)> {
        let ticket = self.ticket.take()?;
        Some((ticket, self.zone.clone()))
    }
}

impl<T: Probed> Drop for HeldProbe<T> {
    fn drop(&mut self) {
        let t = &self.target;
        t.in_flight().set(false);
        if let Some(ticket) = self.ticket.take() {
            let mut locked = self.zone.lock();
            // By its ticket: a reload may have moved the breaker into other memory.
            if let Some(mut b) = locked.get_probe(t.handle(), &t.key(), ticket) {
                b.release(mono_ms(), ticket);
            };
        }
    }
}
