//! The zone as a settlement reaches it ([`Ledger`]): the breaker of a request (or of an
//! active probe), its upstream's pool of servers and retry budget, under the lock the
//! settlement holds.

use circuit_breaker_core::breaker::{Breaker, Ticket};
use circuit_breaker_core::eject::Pool;
use circuit_breaker_core::retry_budget::RetryBudget;
use circuit_breaker_core::settle::Ledger;

use crate::conf::{default_route, SrvConf};
use crate::eject::{self, Upstream};
use circuit_breaker_shell::zone::{Handle, Key, Locked};

/// One breaker's reach into the locked zone.
pub struct ZoneLedger<'l, 'z, 's> {
    pub locked: &'l mut Locked<'z>,
    /// The breaker: where it was last found, and its key.
    pub handle: Handle,
    pub key: Key<'s>,
    pub scf: &'s SrvConf,
    /// The upstream, when the request's attempts go to a pool of servers.
    pub up: Option<Upstream<'s>>,
    pub now: u64,
}

impl Ledger for ZoneLedger<'_, '_, '_> {
    fn own<R>(&mut self, ticket: Ticket, f: impl FnOnce(&mut Breaker<'_>) -> R) -> Option<R> {
        let mut b = match ticket {
            Ticket::Probe(_) => self.locked.get_probe(self.handle, &self.key, ticket),
            Ticket::Normal => self.locked.get(self.handle, self.key.hash),
        }?;
        Some(f(&mut b))
    }

    fn server<R>(&mut self, index: u16, f: impl FnOnce(&mut Breaker<'_>) -> R) -> Option<R> {
        eject::with_server(self.locked, self.scf, index, f)
    }

    fn servers(&self) -> u16 {
        eject::server_count(self.scf)
    }

    fn pool(&mut self) -> Pool {
        let count = self
            .up
            .and_then(|up| eject::count(self.locked, up, self.now));
        count.unwrap_or_default()
    }

    fn budget<R>(
        &mut self,
        f: impl FnOnce(&mut RetryBudget, Option<(u64, u32)>) -> R,
    ) -> Option<R> {
        let scf = self.scf;
        let mut home = self
            .locked
            .get_or_find(scf.local.home.get(), &scf.key(default_route()))?;
        scf.local.home.set(home.handle());
        let budget = home.retry_budget()?;
        Some(f(budget, scf.local.firsts.take()))
    }
}
