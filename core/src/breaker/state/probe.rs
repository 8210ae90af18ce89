//! Probes' results: judging a probe (status, latency) and what a run of them does.

use super::*;

/// Why an active probe failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeFailure {
    /// It answered with a status outside `probe_status`.
    Status(u16),
    /// No answer within `probe_timeout`.
    Timeout,
    /// Refused, reset, closed early, unreachable.
    Error,
    /// Not an HTTP/1.x response head, or not a gRPC health answer.
    InvalidResponse,
    /// A gRPC health check answered with this `grpc-status`, not `OK`.
    GrpcStatus(u32),
    /// A gRPC health check answered with this serving status, not `SERVING`.
    NotServing(u64),
}

impl core::fmt::Display for ProbeFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ProbeFailure::Status(s) => write!(f, "status {s}"),
            ProbeFailure::Timeout => f.write_str("timeout"),
            ProbeFailure::Error => f.write_str("error"),
            ProbeFailure::InvalidResponse => f.write_str("invalid response"),
            ProbeFailure::GrpcStatus(code) => write!(f, "grpc-status {code}"),
            ProbeFailure::NotServing(s) => match crate::grpc::health::serving_name(*s) {
                Some(name) => f.write_str(name),
                None => write!(f, "serving status {s}"),
            },
        }
    }
}

/// What an active probe found (see [`Breaker::record_probe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeResult {
    /// Why it failed; `None`: healthy (a `probe_status` answer).
    pub failure: Option<ProbeFailure>,
    /// A TLS handshake or certificate failure: no verdict on the origin.
    pub tls: bool,
    /// The answer's `Retry-After`, in seconds (0 without one).
    pub retry_after_s: u32,
    /// How long it took.
    pub response_ms: u64,
}

impl ProbeResult {
    /// Why the probe failed, as a transition's reason says it (`probe failed: status 500`,
    /// `probe too slow: 912ms > 800ms` with a latency limit of `limit_ms`, 0 for none);
    /// `None` for a good probe, or a TLS failure (no verdict).
    pub fn failed(&self, limit_ms: u32) -> Option<String> {
        let limit = u64::from(limit_ms);
        match self.failure {
            _ if self.tls => None,
            Some(why) => Some(format!("probe failed: {why}")),
            None if limit > 0 && self.response_ms > limit => Some(format!(
                "probe too slow: {}ms > {}ms",
                self.response_ms, limit
            )),
            None => None,
        }
    }
}

impl<'a> Breaker<'a> {
    /// The probe holding `ticket` failed on a server the pool explains (see
    /// [`Breaker::record_explained`]): the probe is freed, no verdict, and the next probe
    /// may start now. Anything else is left alone.
    pub fn probe_explained(&mut self, now_ms: u64, ticket: Ticket) {
        let now = self.clock(now_ms);
        if !self.holds_probe(ticket) {
            return;
        }
        let h = &mut *self.hdr;
        h.probe_busy = 0;
        h.next_probe_at_ms = h.next_probe_at_ms.min(now);
        if h.state() == State::Open {
            h.retry_at_ms = h.next_probe_at_ms;
        }
    }

    pub(super) fn probe_outcome(
        &mut self,
        now: u64,
        rnd: u32,
        v: &Verdict,
        a: &Attempt,
        may_open: bool,
    ) -> Option<Transition> {
        let limit = u64::from(self.hdr.probe_limit_ms());
        let failed = match v.class {
            Some(class) if v.failure => Some(format!("probe failed: {}", class_name(class))),
            _ => None,
        };
        let slow = (limit > 0 && a.response_ms > limit)
            .then(|| format!("probe too slow: {}ms > {}ms", a.response_ms, limit));
        self.note_probe_latency(now, a.response_ms);
        self.judge_probe(now, rnd, failed.or(slow), v.retry_after_s, may_open)
    }

    /// A probe's response time joins the window's percentiles (the status page's origin
    /// latency while open or half-open), not its counts.
    pub(super) fn note_probe_latency(&mut self, now: u64, response_ms: u64) {
        let h = &mut *self.hdr;
        h.sums.advance(self.ring, now / 1000);
        h.sums.note_latency(self.ring, now / 1000, response_ms);
    }

    /// Judges the probe: `failed` says why it failed, `None` for a good one. A question's
    /// probe answers the question, which opens the breaker only if it `may_open`.
    pub(super) fn judge_probe(
        &mut self,
        now: u64,
        rnd: u32,
        failed: Option<String>,
        retry_after_s: u32,
        may_open: bool,
    ) -> Option<Transition> {
        if self.hdr.questioned() {
            return self.answer_question(now, rnd, failed, may_open);
        }
        let jitter = self.jitter;
        let h = &mut *self.hdr;
        h.probe_busy = 0;
        let Some(text) = failed else {
            h.consecutive = h.consecutive.saturating_add(1);
            h.flags |= GOOD_SEEN;
            let needed = h.needed.max(1);
            if h.consecutive < needed {
                // The rest of the run comes at its own pace (see `judge::run_spacing`), sooner
                // than the spacing drawn at the claim, never later. What clients are told
                // stays the top of that spacing's range: the pace's own range is too narrow
                // (±33 ms at 166 ms) to hide the moment from a client told its end.
                let pace = jittered(
                    judge::run_spacing(h.cfg.probe_interval_ms, h.cfg.probes, needed),
                    h.cfg.jitter,
                    jitter_rnd(jitter, Purpose::ProbeSpacing, now, rnd),
                );
                h.next_probe_at_ms = h.next_probe_at_ms.min(now.saturating_add(pace));
                if h.state() == State::Open {
                    h.retry_at_ms = h.next_probe_at_ms;
                }
                return None;
            }
            let text = if needed == 1 {
                "1 good probe".to_string()
            } else {
                format!("{needed} good probes")
            };
            return Some(self.close_now(now, text, true));
        };
        if h.flags & GOOD_SEEN != 0 {
            h.needed = judge::relapse(h.needed.max(1), h.soft_needed.max(1));
        }
        h.consecutive = 0;
        let max = u64::from(h.cfg.max_open_ms);
        if h.cfg.active {
            // Stays open; the next probe is one spacing away (set when this one was granted),
            // or later if the origin asked for it.
            let floor = now.saturating_add((u64::from(retry_after_s) * 1000).min(max));
            h.next_probe_at_ms = h.next_probe_at_ms.max(floor);
            h.retry_at_ms = h.next_probe_at_ms;
            return None;
        }
        h.base_cooldown_ms = h.base_cooldown_ms.saturating_mul(2).min(h.cfg.max_open_ms);
        Some(self.open_now(now, rnd, text, retry_after_s))
    }

    /// Records the outcome of an active probe sent with `ticket`. An active probe is judged
    /// by what the operator said healthy means (`probe_status`), not by the failure classes
    /// that judge user requests; an origin's `Retry-After` delays the next probe, and a probe
    /// slower than `probe_latency` fails too. A TLS failure is no verdict on the origin:
    /// counted apart, the probe freed.
    pub fn record_probe(
        &mut self,
        now_ms: u64,
        rnd: u32,
        ticket: Ticket,
        probe: &ProbeResult,
    ) -> Recorded {
        let now = self.clock(now_ms);
        let held = self.holds_probe(ticket);
        let t = &mut self.hdr.totals;
        let transition = if probe.tls {
            t.tls_errors = t.tls_errors.saturating_add(1);
            if held {
                self.hdr.probe_busy = 0;
            }
            None
        } else if held {
            // A health check's latency is not the traffic's: a latency outlier's limit
            // judges its user requests (passive probes) only.
            let failed = probe.failed(self.hdr.cfg.probe_limit_ms());
            self.note_probe_latency(now, probe.response_ms);
            self.judge_probe(now, rnd, failed, probe.retry_after_s, true)
        } else {
            None
        };
        Recorded {
            transition,
            state: self.hdr.state(),
        }
    }
}
