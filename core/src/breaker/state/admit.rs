//! Admission: whether a request passes, is a probe or is turned away, and the probe's grant.

use super::*;

/// Which request a caller holds: a normal one, or the probe of one grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ticket {
    /// A normal request (every [`Admission::Pass`]).
    Normal,
    /// The probe (a half-open user request, or an active probe): the ticket it was granted,
    /// unique in the zone's lifetime.
    Probe(u64),
}

/// Whether a request may go to the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Send it, with [`Ticket::Normal`]. `would_reject` is true only in dry run, where the
    /// breaker would have short-circuited it (or turned it away during the ramp).
    Pass {
        /// Dry run only: a real breaker would have rejected this request.
        would_reject: bool,
    },
    /// Send it as the half-open probe; report its outcome with this ticket.
    Probe(Ticket),
    /// Short-circuit it: the breaker is open or half-open (`X-Circuit-State: open` or
    /// `half_open`).
    Reject {
        /// Time until a probe may start, at least 1 ms (for `Retry-After`); with passive
        /// probes, until the end of the jitter's range that moment was drawn in (never
        /// before it: see [`Gate::Reject`]).
        retry_after_ms: u64,
    },
    /// Short-circuit it: the breaker is closed but ramping up after a recovery, and this
    /// request falls outside the share let through (`X-Circuit-State: recovering`).
    Recovering {
        /// [`RAMP_RETRY_AFTER_MS`] (for `Retry-After`).
        retry_after_ms: u64,
    },
}

/// The answer of [`Breaker::admit`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// What to do with the request.
    pub admission: Admission,
    /// The transition this call caused (open → half-open), to be logged once.
    pub transition: Option<Transition>,
}

/// What a request may be told without the zone lock, as of the breaker's last change: the
/// shell keeps it in atomics beside the breaker and refreshes it after every locked call, so
/// that the common cases — closed, ramping, and open — cost no lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Let every request through (closed, or forced closed); outcomes are still recorded.
    Pass,
    /// Closed and ramping up: let through the share of [`ramp::share`] at the time of asking,
    /// turn the rest away ([`Admission::Recovering`]); after `until_ms`, let everything
    /// through.
    Ramp {
        /// End of the ramp.
        until_ms: u64,
        /// Length of the ramp (`ramp_ms`).
        ramp_ms: u32,
        /// Share at its start (`ramp_start`).
        start: u32,
    },
    /// Short-circuit every request: until `until_ms` with `Retry-After` counting down to
    /// `announce_ms`, then with `Retry-After` = `wait_ms` — or, when `wait_ms` is 0, only
    /// [`Breaker::admit`] can tell (the cooldown of passive probes has ended). Open breakers;
    /// forced open is `until_ms = u64::MAX`, announcing `wait_ms`.
    ///
    /// With passive probes the first request after `until_ms` is the probe, so `until_ms` is
    /// never told: `announce_ms` is the end of the jitter's range it was drawn in, and a
    /// client that comes back when told finds the probe taken unless no one asked since.
    Reject {
        /// End of the cooldown, or time of the next active probe.
        until_ms: u64,
        /// What `Retry-After` counts down to before `until_ms`: at or after it (equal with
        /// active probes, or without jitter).
        announce_ms: u64,
        /// The wait to announce after `until_ms` (or forever when it is `u64::MAX`); 0: ask.
        wait_ms: u64,
    },
    /// Only [`Breaker::admit`], under the lock, can tell.
    Ask,
}

impl Gate {
    /// The admission this gate gives at `now_ms` to a request drawing the uniform `rnd`
    /// without the lock, or `None` when only [`Breaker::admit`] can tell. A rejection or a
    /// [`Admission::Recovering`] given here is not in the breaker's totals: the caller counts
    /// it (in `short_circuited` or `ramp_shed`).
    #[inline]
    pub fn admit(self, now_ms: u64, rnd: u32) -> Option<Admission> {
        match self {
            Gate::Pass => Some(Admission::Pass {
                would_reject: false,
            }),
            Gate::Ramp {
                until_ms,
                ramp_ms,
                start,
            } => Some(
                if ramp::lets_through(ramp::share(until_ms, ramp_ms, start, now_ms), rnd) {
                    Admission::Pass {
                        would_reject: false,
                    }
                } else {
                    Admission::Recovering {
                        retry_after_ms: RAMP_RETRY_AFTER_MS,
                    }
                },
            ),
            Gate::Reject {
                until_ms,
                announce_ms,
                wait_ms,
            } if now_ms < until_ms => Some(Admission::Reject {
                retry_after_ms: if until_ms == u64::MAX {
                    wait_ms.max(1)
                } else {
                    announce_ms.max(until_ms) - now_ms
                },
            }),
            Gate::Reject { wait_ms, .. } if wait_ms > 0 => Some(Admission::Reject {
                retry_after_ms: wait_ms,
            }),
            _ => None,
        }
    }
}

impl<'a> Breaker<'a> {
    /// What requests may be told without the lock until the breaker next changes (as of the
    /// latest clock reading it saw).
    pub fn gate(&self) -> Gate {
        let h = &*self.hdr;
        match h.forced() {
            Some(Forced::Closed) => return Gate::Pass,
            // A dry run counts what it would have rejected, under the lock; it never rejects.
            Some(Forced::Open) if h.cfg.dry_run => return Gate::Ask,
            Some(Forced::Open) => {
                return Gate::Reject {
                    until_ms: u64::MAX,
                    announce_ms: u64::MAX,
                    wait_ms: u64::from(h.cfg.open_ms),
                }
            }
            None => {}
        }
        match h.state() {
            // The prober asks under the lock for the question's probe, and each outcome is
            // recorded there anyway: the rates are at their thresholds.
            State::Closed if h.questioned() => Gate::Ask,
            State::Closed if h.ramp_until_ms > h.last_ms => {
                if h.cfg.dry_run {
                    // Counts its would-be turn-aways under the lock.
                    Gate::Ask
                } else {
                    Gate::Ramp {
                        until_ms: h.ramp_until_ms,
                        ramp_ms: h.cfg.ramp_ms,
                        start: h.cfg.ramp_start,
                    }
                }
            }
            State::Closed => Gate::Pass,
            // A dry run counts what it would have rejected, under the lock.
            _ if h.cfg.dry_run => Gate::Ask,
            // A deadline the clock saturated would read as forced open's `u64::MAX`.
            State::Open if h.retry_at_ms == u64::MAX => Gate::Ask,
            State::Open if h.cfg.active => Gate::Reject {
                until_ms: h.retry_at_ms,
                announce_ms: h.retry_at_ms,
                wait_ms: u64::from(h.cfg.probe_interval_ms).max(1),
            },
            State::Open => Gate::Reject {
                until_ms: h.retry_at_ms,
                announce_ms: h.told(h.retry_at_ms),
                wait_ms: 0,
            },
            State::HalfOpen => Gate::Ask,
        }
    }

    /// Decides whether a request goes to the upstream.
    ///
    /// `rnd` is a uniform random number (jitter, and the ramp's draw); `owner` identifies the
    /// caller (its worker) should it be granted the probe; `owner_alive` tells whether the
    /// probe's current holder still exists, so that a probe held by a vanished worker is
    /// reclaimed. `may_probe` false (another fleet member is the designated prober) keeps an
    /// open breaker open after its cooldown and a half-open one from starting a probe: the
    /// request is rejected with `Retry-After` = `probe_interval`.
    ///
    /// With active probes an open breaker rejects every request, `Retry-After` saying when
    /// the next active probe is due (`probe_interval` once it is due or in flight). With
    /// passive probes `Retry-After` says the end of the range the cooldown (or the probe
    /// spacing) was drawn in, not the moment drawn: the first request after that moment is
    /// the probe, and a client told the moment could be that request every time.
    pub fn admit(
        &mut self,
        now_ms: u64,
        rnd: u32,
        owner: u32,
        owner_alive: &dyn Fn(u32) -> bool,
        may_probe: bool,
    ) -> Decision {
        let now = self.clock(now_ms);
        let interval = u64::from(self.hdr.cfg.probe_interval_ms).max(1);
        match self.hdr.forced() {
            Some(Forced::Closed) => return self.pass(None),
            Some(Forced::Open) => {
                let wait = u64::from(self.hdr.cfg.open_ms).max(1);
                return self.reject(wait, None);
            }
            None => {}
        }
        let h = &*self.hdr;
        let transition = match h.state() {
            State::Closed => {
                let share = ramp::share(h.ramp_until_ms, h.cfg.ramp_ms, h.cfg.ramp_start, now);
                if ramp::lets_through(share, rnd) {
                    return self.pass(None);
                }
                return self.turn_away();
            }
            State::Open if h.cfg.active => {
                let wait = h.retry_at_ms.saturating_sub(now);
                return self.reject(if wait > 0 { wait } else { interval }, None);
            }
            State::Open if now < h.retry_at_ms => {
                return self.reject(h.told(h.retry_at_ms) - now, None)
            }
            State::Open | State::HalfOpen if !may_probe => return self.reject(interval, None),
            State::Open => Some(self.half_open_now(now)),
            State::HalfOpen => None,
        };
        if let Some(gen) = self.claim_probe(now, rnd, owner, owner_alive) {
            return Decision {
                admission: Admission::Probe(Ticket::Probe(gen)),
                transition,
            };
        }
        let wait = self.hdr.wait_ms(now, true);
        self.reject(wait.max(1), transition)
    }

    /// Whether a request this breaker already judged, or one it may not count — a subrequest,
    /// or a request an internal redirect moved on — is refused at `now_ms`: while the breaker
    /// is forced open, open or half-open (never in a dry run, never when forced closed), with
    /// the wait clients are told. Such a request is never the probe and records nothing, so
    /// this changes nothing.
    pub fn refuses_again(&self, now_ms: u64) -> Option<u64> {
        let h = &*self.hdr;
        if h.cfg.dry_run {
            return None;
        }
        let now = now_ms.max(h.last_ms);
        match h.forced() {
            Some(Forced::Closed) => None,
            Some(Forced::Open) => Some(u64::from(h.cfg.open_ms).max(1)),
            None if h.state() == State::Closed => None,
            None => Some(h.wait_ms(now, true).max(1)),
        }
    }

    /// When a passive probe may start, from `now_ms`, as the breaker keeps it rather than as
    /// clients are told: for the shell's own schedule (an ejected server's next look), never
    /// for a client. 0 when closed, forced or past due.
    pub fn probe_wait_ms(&self, now_ms: u64) -> u64 {
        let h = &*self.hdr;
        if h.forced != FORCED_NONE {
            return 0;
        }
        h.wait_ms(now_ms.max(h.last_ms), false)
    }

    /// The draw a request of `class` makes when it asks, from the uniform `rnd`: closed, the
    /// draw is the ramp's only, as its class draws ([`ramp::draw_for`]); otherwise `rnd`.
    pub fn draw_for(&self, rnd: u32, class: Option<crate::class::Class>) -> u32 {
        if self.state() == State::Closed {
            ramp::draw_for(rnd, class)
        } else {
            rnd
        }
    }

    /// Whether a user-request probe that may start has waited at least one `probe_interval`
    /// at `now_ms` with no request to take it. The shell lets a request whose body is still
    /// arriving (which would hold the probe for as long as its client takes) be the probe
    /// only then, so that where every request streams its body (gRPC to an upstream named by
    /// a variable) the breaker still probes, one interval late.
    pub fn probe_overdue(&self, now_ms: u64) -> bool {
        let h = &*self.hdr;
        let now = now_ms.max(h.last_ms);
        let interval = u64::from(h.cfg.probe_interval_ms).max(1);
        if h.forced != FORCED_NONE || h.cfg.active {
            return false;
        }
        match h.state() {
            State::Open => now >= h.retry_at_ms.saturating_add(interval),
            State::HalfOpen => {
                h.probe_busy == 0 && now >= h.next_probe_at_ms.saturating_add(interval)
            }
            State::Closed => false,
        }
    }

    /// With active probes, grants the breaker's one probe to `owner` when a probe is due (its
    /// dead-owner reclaim and its lease are those of half-open probes): the
    /// caller sends its probe request and reports it with [`Breaker::record`] (or
    /// [`Breaker::release`]) and this ticket. `None`: no probe now — not open, forced, passive
    /// probes, not due yet ([`BreakerHeader::active_probe_due_ms`]), or one is in flight. A
    /// fleet member that is not the designated prober does not ask.
    pub fn active_probe(
        &mut self,
        now_ms: u64,
        rnd: u32,
        owner: u32,
        owner_alive: &dyn Fn(u32) -> bool,
    ) -> Option<Ticket> {
        let now = self.clock(now_ms);
        self.hdr.active_probe_due_ms()?;
        let gen = self.claim_probe(now, rnd, owner, owner_alive)?;
        let h = &mut *self.hdr;
        // (Closed, it is the question's deadline.)
        if h.state == STATE_OPEN {
            h.retry_at_ms = h.next_probe_at_ms;
        }
        Some(Ticket::Probe(gen))
    }

    /// Grants the probe to `owner` if it is free (or its holder died, or its lease ran out)
    /// and a probe may start now; returns the ticket.
    pub(super) fn claim_probe(
        &mut self,
        now: u64,
        rnd: u32,
        owner: u32,
        owner_alive: &dyn Fn(u32) -> bool,
    ) -> Option<u64> {
        let jitter = self.jitter;
        let h = &mut *self.hdr;
        if h.probe_busy != 0
            && (now.saturating_sub(h.probe_granted_ms) >= PROBE_LEASE_MS
                || !owner_alive(h.probe_owner))
        {
            h.probe_busy = 0;
        }
        if h.probe_busy != 0 || now < h.next_probe_at_ms {
            return None;
        }
        h.probe_busy = 1;
        // The low half counts; the epoch in the high half stays.
        h.probe_gen =
            (h.probe_gen & !0xffff_ffff) | u64::from((h.probe_gen as u32).wrapping_add(1));
        h.probe_owner = owner;
        h.probe_granted_ms = now;
        // Drawn below the top of its range, which is what clients are told until the next
        // probe (a good probe's run may bring it sooner, never later: see `judge_probe`).
        let (lo, hi) = jitter_range(u64::from(h.cfg.probe_interval_ms), h.cfg.jitter);
        let rnd = jitter_rnd(jitter, Purpose::ProbeSpacing, now, rnd);
        h.next_probe_at_ms = now.saturating_add(draw(lo, hi, rnd));
        h.totals.probes = h.totals.probes.saturating_add(1);
        Some(h.probe_gen)
    }

    pub(super) fn pass(&self, transition: Option<Transition>) -> Decision {
        Decision {
            admission: Admission::Pass {
                would_reject: false,
            },
            transition,
        }
    }

    pub(super) fn reject(
        &mut self,
        retry_after_ms: u64,
        transition: Option<Transition>,
    ) -> Decision {
        let t = &mut self.hdr.totals;
        t.short_circuited = t.short_circuited.saturating_add(1);
        let admission = if self.hdr.cfg.dry_run {
            Admission::Pass { would_reject: true }
        } else {
            Admission::Reject { retry_after_ms }
        };
        Decision {
            admission,
            transition,
        }
    }

    /// A request the ramp turns away (a dry run only counts it).
    pub(super) fn turn_away(&mut self) -> Decision {
        let t = &mut self.hdr.totals;
        t.ramp_shed = t.ramp_shed.saturating_add(1);
        let admission = if self.hdr.cfg.dry_run {
            Admission::Pass { would_reject: true }
        } else {
            Admission::Recovering {
                retry_after_ms: RAMP_RETRY_AFTER_MS,
            }
        };
        Decision {
            admission,
            transition: None,
        }
    }

    /// Whether `ticket` is the probe this breaker waits for (half-open, or an active probe).
    pub fn holds_probe(&self, ticket: Ticket) -> bool {
        let h = &*self.hdr;
        let probing = h.state == STATE_HALF_OPEN
            || ((h.state == STATE_OPEN || h.questioned())
                && h.cfg.active
                && h.forced == FORCED_NONE);
        matches!(ticket, Ticket::Probe(gen)
            if h.probe_busy != 0 && gen == h.probe_gen && probing)
    }

    /// The request holding `ticket` ended without an outcome: frees the probe, if it holds it.
    pub fn release(&mut self, now_ms: u64, ticket: Ticket) {
        let now = self.clock(now_ms);
        if self.holds_probe(ticket) {
            self.free_probe(now);
        }
    }

    /// Frees the probe, which ended without a verdict on the origin: a
    /// half-open breaker's next request may be the probe at once, since this one spent no
    /// probe of the origin's (an active probe keeps its spacing).
    pub(super) fn free_probe(&mut self, now: u64) {
        let h = &mut *self.hdr;
        h.probe_busy = 0;
        if h.questioned() {
            // It waits on a verdict: asked again at once, and not believed should it lapse.
            h.flags |= UNANSWERED;
            h.next_probe_at_ms = h.next_probe_at_ms.min(now);
        } else if h.state == STATE_HALF_OPEN && !h.cfg.active {
            h.next_probe_at_ms = h.next_probe_at_ms.min(now);
        }
    }
}
