//! Each breaker's recent past for the dashboard (`circuit_breaker_core::history`): an
//! allocation of its own that hangs off the breaker's berth, made when the breaker first
//! serves a request or an operator's action, and, like berths, never freed — it passes from
//! tenant to tenant with the berth and starts afresh for each.
//!
//! A history is a convenience, a breaker is not: one is made only while a quarter of the
//! zone is still free, so histories never take the room a breaker would need.

use core::alloc::Layout;
use core::ptr::NonNull;

use circuit_breaker_core::breaker::Breaker;
use circuit_breaker_core::history::History;
use ngx::allocator::Allocator;

use super::berth::Berth;
use super::table::Locked;

impl Locked<'_> {
    /// The history of `berth`'s tenant `ident`, whose breaker is `b`: the berth's own if it
    /// follows this tenant, started afresh if it followed another, made if the berth has none
    /// and `make` says so and the zone has room to spare.
    pub(super) fn history_for(
        &mut self,
        berth: &Berth,
        ident: u64,
        b: &Breaker<'_>,
        make: bool,
    ) -> Option<NonNull<History>> {
        let fresh = || History::new(ident, b.last_ms(), b.totals(), b.state());
        if let Some(h) = NonNull::new(berth.history()) {
            // SAFETY: a history stays allocated once made, and is touched only under the
            // mutex, which `self` holds.
            let owned = unsafe { h.as_ref() }.owned_by(ident);
            if !owned {
                // SAFETY: as above.
                unsafe { h.as_ptr().write(fresh()) };
            }
            return Some(h);
        }
        let (used, size, _) = self.usage();
        if !make || size.saturating_sub(used) < size / 4 {
            return None;
        }
        let h = self
            .pool_mut()
            .allocate(Layout::new::<History>())
            .ok()?
            .cast::<History>();
        // SAFETY: a fresh allocation of a `History`'s layout, reachable by no one else until
        // the berth publishes it.
        unsafe { h.as_ptr().write(fresh()) };
        berth.set_history(h.as_ptr());
        Some(h)
    }
}
