//! What the status page shows of an upstream's configuration, for the core's assembly and
//! for a control request's answer.

use circuit_breaker_core::status::assemble::Upstreams;

use crate::conf::MainConf;
use crate::eject;
use crate::fleet;

impl Upstreams for MainConf {
    fn servers(&self, upstream: &str) -> impl Iterator<Item = (&str, bool)> {
        self.upstream(upstream).into_iter().flat_map(eject::servers)
    }

    fn probe_uri(&self, upstream: &str) -> Option<String> {
        let probe = self.upstream(upstream)?.probe.as_ref()?;
        Some(probe.uri.clone())
    }

    /// Shown only when the instance is in a fleet.
    fn fingerprint(&self, upstream: &str) -> Option<u64> {
        self.fleet.as_ref()?;
        fleet::fingerprint(self.upstream(upstream)?)
    }
}
