//! A zone of breakers for the settlement ([`Ledger`]): an upstream's breaker, its pool of
//! servers, its retry budget and a worker's batch of first attempts, each owned by the test.

use circuit_breaker_core::breaker::{Breaker, BreakerConfig, OwnedBreaker, Ticket};
use circuit_breaker_core::directive::EjectSpec;
use circuit_breaker_core::eject::{self, Pool};
use circuit_breaker_core::retry_budget::{RetryBudget, RetryBudgetConfig};
use circuit_breaker_core::settle::Ledger;

pub struct Zone {
    pub upstream: OwnedBreaker,
    pub servers: Vec<OwnedBreaker>,
    pub max: u32,
    pub budget: Option<RetryBudget>,
    /// The worker's first attempts not yet handed over: their second and number.
    pub firsts: Option<(u64, u32)>,
}

impl Zone {
    /// An upstream with `cfg` and a pool of `servers` with the default ejection.
    pub fn new(cfg: BreakerConfig, servers: usize, now: u64) -> Zone {
        let spec = EjectSpec::default();
        let scfg = eject::server_config(&cfg, &spec);
        Zone {
            upstream: OwnedBreaker::new(cfg, now),
            servers: (0..servers).map(|_| OwnedBreaker::new(scfg, now)).collect(),
            max: eject::max_ejected(servers, spec.max_ejected),
            budget: None,
            firsts: None,
        }
    }

    pub fn with_budget(mut self, cfg: RetryBudgetConfig, now: u64) -> Zone {
        self.budget = Some(RetryBudget::new(cfg, now));
        self
    }

    pub fn out(&mut self) -> u32 {
        let mut out = 0;
        for s in &mut self.servers {
            out += u32::from(eject::is_out(s.breaker().state()));
        }
        out
    }
}

impl Ledger for Zone {
    fn own<R>(&mut self, _ticket: Ticket, f: impl FnOnce(&mut Breaker<'_>) -> R) -> Option<R> {
        Some(f(&mut self.upstream.breaker()))
    }

    fn server<R>(&mut self, index: u16, f: impl FnOnce(&mut Breaker<'_>) -> R) -> Option<R> {
        let s = self.servers.get_mut(usize::from(index))?;
        Some(f(&mut s.breaker()))
    }

    fn servers(&self) -> u16 {
        self.servers.len() as u16
    }

    fn pool(&mut self) -> Pool {
        Pool {
            out: self.out(),
            max: self.max,
        }
    }

    fn budget<R>(
        &mut self,
        f: impl FnOnce(&mut RetryBudget, Option<(u64, u32)>) -> R,
    ) -> Option<R> {
        let b = self.budget.as_mut()?;
        Some(f(b, self.firsts.take()))
    }
}
