//! The breaker's state machine over a header and a ring of buckets in shared memory.
//!
//! # Life of a breaker
//!
//! - **Closed**: every request passes ([`Admission::Pass`]); every attempt's outcome enters the
//!   window ([`Breaker::record`]), and the one that makes failures (or slow calls) reach their
//!   rate with at least `min_requests` in the window opens it — unless the caller says it may
//!   not open now (`may_open`, the per-server `max_eject` cap), or the rate was reached without
//!   a single failure (or slow call).
//! - **Open**: requests are short-circuited ([`Admission::Reject`], `Retry-After` = time to the
//!   next probe). What happens next depends on `active`:
//!   - *Passive probes* (no `probe_uri`, as before): after the cooldown — the base cooldown
//!     (`open`, doubled after each failed probe, up to `max_open`), jittered, raised to the
//!     largest `Retry-After` an origin sent in the window, capped by `max_open` — the next
//!     request turns the breaker **half-open** and is the probe; at most one probe in flight
//!     and one started per `probe_interval` for the whole instance. A failed probe reopens it.
//!   - *Active probes* (`active`): the breaker stays **open** throughout. User requests are
//!     never probes; the shell asks [`Breaker::active_probe`] for the instance-wide probe slot
//!     and sends its own request when it gets it: first one cooldown after opening — here
//!     `probe_interval`, jittered (doubled on repeated trips with `repeat_backoff`), raised to
//!     an origin's `Retry-After`, capped by `max_open` — then every `probe_interval`,
//!     jittered. A failed active probe does not double anything (active probes are cheap): the
//!     next comes one `probe_interval` later, or after the `Retry-After` it carried (capped
//!     by `max_open`). So with active probes `open` is used only as the `Retry-After` of a
//!     breaker forced open, and `max_open` only caps an origin's `Retry-After` and the
//!     `repeat_backoff` doubling.
//!
//!   Either way, enough good probes in a row close the breaker: `probes` after a hard failure,
//!   more after a brownout (see [`judge`]). A probe slower than `probe_latency`
//!   failed.
//! - **Recovering**: a breaker closed by probes with `ramp_ms` set lets through a share of
//!   requests rising from `ramp_start` to 100 % over the ramp and turns the rest away
//!   ([`Admission::Recovering`], `Retry-After` 1 s). It is closed for every other purpose: the
//!   live window judges what passes and reopens it as usual.
//!
//! # Hooks for the fleet and for per-server breakers
//!
//! - [`Breaker::suspect`]: peers think the origin is failing; until then the breaker trips on
//!   `suspect_min` requests instead of `min_requests`, at the same rates, never without a
//!   local failure.
//! - `may_probe` in [`Breaker::admit`]: another fleet member is the designated prober; this
//!   instance stays open (or half-open) and starts no probe.
//! - [`Breaker::hasten`]: peers report recovery; the cooldown ends now.
//! - A breaker per server of an upstream uses the same machine (closed = in, open = ejected,
//!   half-open = probing), typically with `probes=1`, `repeat_backoff`, and `may_open`
//!   false in [`Breaker::record`] while `max_eject` servers are already out.

use std::mem::{align_of, size_of};

use super::classify::{class_name, classify, Attempt, Verdict};
use super::config::BreakerConfig;
use super::histogram::{Histogram, HistogramSum};
use super::judge;
use super::ramp::{self, RAMP_RETRY_AFTER_MS};
use super::reason::{self, REASON_BYTES};
use super::trip::{Trip, TripBy};
use super::window::{Bucket, Sums};
use crate::snapshot::{BreakerView, Forced, LatencyView, State, Totals, WindowView};

/// A probe slot held this long (milliseconds) is reclaimed even if its owner still lives.
pub const PROBE_LEASE_MS: u64 = 120_000;

const STATE_CLOSED: u8 = 0;
const STATE_HALF_OPEN: u8 = 1;
const STATE_OPEN: u8 = 2;
const FORCED_NONE: u8 = 0;
const FORCED_OPEN: u8 = 1;
const FORCED_CLOSED: u8 = 2;
/// `flags`: a good probe was seen since the trip (a failed one now is a relapse).
const GOOD_SEEN: u8 = 1;
/// `flags`: the current closed period began with a close by probes (for `repeat_backoff`).
const RECLOSED: u8 = 2;

/// The fixed part of a breaker in shared memory; `window_s` [`Bucket`]s follow it (see
/// [`layout`]). Plain integers only, so any worker may read and write it under the zone lock.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BreakerHeader {
    cfg: BreakerConfig,
    totals: Totals,
    sums: Sums,
    /// The window that opened it, while open or half-open by a trip.
    trip: Trip,
    /// The latest clock reading seen; earlier readings are clamped to it.
    last_ms: u64,
    since_ms: u64,
    /// Open: when the cooldown ends (passive) or the next active probe is due (active).
    retry_at_ms: u64,
    next_probe_at_ms: u64,
    probe_granted_ms: u64,
    /// The current (jittered, floored, capped) cooldown.
    cooldown_ms: u32,
    /// The un-jittered cooldown: the first one (`open`, or `probe_interval` with active
    /// probes), doubled after each failed passive probe and, with `repeat_backoff`, on each
    /// repeated trip, up to `max_open`.
    base_cooldown_ms: u32,
    /// The last probe ticket handed out: the breaker's epoch in the high half, a counter in
    /// the low half (see [`BreakerHeader::new`]).
    probe_gen: u64,
    /// End of the recovery ramp; 0 when none was started since the last close.
    ramp_until_ms: u64,
    /// Until then, the breaker trips on `suspect_min` requests ([`Breaker::suspect`]).
    suspect_until_ms: u64,
    probe_owner: u32,
    /// Good probes in a row in the current open period.
    consecutive: u32,
    /// Failures in a row recorded in the window, for [`judge::is_hard`].
    fail_run: u32,
    /// Slow calls in a row recorded in the window, for [`judge::is_hard`].
    slow_run: u32,
    /// Gateway failures in a row recorded in the window, for `consecutive`.
    gateway_run: u32,
    /// Good probes in a row needed to close, set at the trip.
    needed: u32,
    /// The soft run of the current open period ([`judge::soft_run`]).
    soft_needed: u32,
    state: u8,
    forced: u8,
    probe_busy: u8,
    flags: u8,
    reason_len: u8,
    reason: [u8; REASON_BYTES],
}

impl BreakerHeader {
    /// A closed breaker with an empty window, created at `now_ms`. Its buckets must be filled
    /// with [`Bucket::EMPTY`].
    ///
    /// `epoch` must differ from that of every earlier breaker that lived in the same memory
    /// (the shell takes it from a counter in the zone), so that a probe ticket handed out
    /// before a reset or a reload is never taken for one handed out after.
    pub fn new(cfg: BreakerConfig, now_ms: u64, epoch: u32) -> Self {
        let base = first_cooldown(&cfg);
        BreakerHeader {
            cfg,
            totals: Totals::default(),
            sums: Sums {
                second: now_ms / 1000,
                ..Sums::default()
            },
            trip: Trip::NONE,
            last_ms: now_ms,
            since_ms: now_ms,
            retry_at_ms: 0,
            next_probe_at_ms: 0,
            probe_granted_ms: 0,
            cooldown_ms: base,
            base_cooldown_ms: base,
            probe_gen: u64::from(epoch) << 32,
            ramp_until_ms: 0,
            suspect_until_ms: 0,
            probe_owner: 0,
            consecutive: 0,
            fail_run: 0,
            slow_run: 0,
            gateway_run: 0,
            needed: 0,
            soft_needed: 0,
            state: STATE_CLOSED,
            forced: FORCED_NONE,
            probe_busy: 0,
            flags: 0,
            reason_len: 0,
            reason: [0; REASON_BYTES],
        }
    }

    /// The parameters this breaker was created with.
    pub fn config(&self) -> &BreakerConfig {
        &self.cfg
    }

    fn clear_runs(&mut self) {
        self.fail_run = 0;
        self.slow_run = 0;
        self.gateway_run = 0;
    }

    /// The current state (readable without the buckets).
    pub fn state(&self) -> State {
        match self.state {
            STATE_OPEN => State::Open,
            STATE_HALF_OPEN => State::HalfOpen,
            _ => State::Closed,
        }
    }

    /// The operator-forced state, if any.
    pub fn forced(&self) -> Option<Forced> {
        match self.forced {
            FORCED_OPEN => Some(Forced::Open),
            FORCED_CLOSED => Some(Forced::Closed),
            _ => None,
        }
    }

    /// Running totals.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// With active probes, when the next one is due (the shell arms its timer for it); `None`
    /// when none will be (closed, forced, or passive probes).
    pub fn active_probe_due_ms(&self) -> Option<u64> {
        (self.cfg.active && self.state == STATE_OPEN && self.forced == FORCED_NONE)
            .then_some(self.next_probe_at_ms)
    }
}

/// The first base cooldown: `open`, or `probe_interval` with active probes.
fn first_cooldown(cfg: &BreakerConfig) -> u32 {
    if cfg.active {
        cfg.probe_interval_ms
    } else {
        cfg.open_ms
    }
}

/// Size in bytes and alignment of a header followed by `window_s` buckets, for the shell's
/// allocator. The buckets start at [`tail_offset`].
pub fn layout(window_s: u32) -> (usize, usize) {
    let tail = (window_s as usize).saturating_mul(size_of::<Bucket>());
    let align = align_of::<BreakerHeader>().max(align_of::<Bucket>());
    (tail_offset().saturating_add(tail), align)
}

/// Offset in bytes of the first bucket after the header.
pub const fn tail_offset() -> usize {
    size_of::<BreakerHeader>().next_multiple_of(align_of::<Bucket>())
}

/// Which request a caller holds: a normal one, or the probe of a slot generation.
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
        /// Time until a probe may start, at least 1 ms (for `Retry-After`).
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

/// The answer of [`Breaker::record`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The transition this outcome caused, to be logged once.
    pub transition: Option<Transition>,
    /// The state after recording.
    pub state: State,
}

/// A change of state, with the human reason and its numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// State before.
    pub from: State,
    /// State after.
    pub to: State,
    /// Why, e.g. `failure rate 55% (22/40) >= 50% in 10s`.
    pub reason: String,
    /// More, e.g. `retry in 30s` when opening, `ramp from 10% over 10s` when closing.
    pub detail: Option<String>,
}

impl Transition {
    /// The reason and its detail, for the log line.
    pub fn why(&self) -> reason::Why<'_> {
        reason::Why(&self.reason, self.detail.as_deref())
    }
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
    /// Short-circuit every request: until `until_ms` with `Retry-After` counting down to it,
    /// then with `Retry-After` = `wait_ms` — or, when `wait_ms` is 0, only [`Breaker::admit`]
    /// can tell (the cooldown of passive probes has ended). Open breakers; forced open is
    /// `until_ms = u64::MAX`, announcing `wait_ms`.
    Reject {
        /// End of the cooldown, or time of the next active probe.
        until_ms: u64,
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
            Gate::Reject { until_ms, wait_ms } if now_ms < until_ms => Some(Admission::Reject {
                retry_after_ms: if until_ms == u64::MAX {
                    wait_ms.max(1)
                } else {
                    until_ms - now_ms
                },
            }),
            Gate::Reject { wait_ms, .. } if wait_ms > 0 => Some(Admission::Reject {
                retry_after_ms: wait_ms,
            }),
            _ => None,
        }
    }
}

/// Why an active probe failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeFailure {
    /// It answered with a status outside `probe_status`.
    Status(u16),
    /// No answer within `probe_timeout`.
    Timeout,
    /// Refused, reset, closed early, unreachable.
    Error,
    /// Not an HTTP/1.x response head.
    InvalidResponse,
}

impl core::fmt::Display for ProbeFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ProbeFailure::Status(s) => write!(f, "status {s}"),
            ProbeFailure::Timeout => f.write_str("timeout"),
            ProbeFailure::Error => f.write_str("error"),
            ProbeFailure::InvalidResponse => f.write_str("invalid response"),
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

/// An operator action from the control endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Open and hold open until [`Control::Reset`].
    ForceOpen,
    /// Close and hold closed (never trips) until [`Control::Reset`].
    ForceClose,
    /// Back to a fresh closed breaker (totals kept).
    Reset,
}

/// A cooldown or probe spacing spread by `jitter` (hundredths of a percent): `base_ms` times
/// a factor in [1 - j, 1 + j] picked uniformly by `rnd`.
#[inline]
pub fn jittered(base_ms: u64, jitter: u32, rnd: u32) -> u64 {
    let j = u64::from(jitter.min(10_000));
    let offset = (u64::from(rnd) * (2 * j + 1)) >> 32;
    let factor = 10_000 - j + offset;
    // Split so that huge bases saturate instead of overflowing.
    (base_ms / 10_000)
        .saturating_mul(factor)
        .saturating_add((base_ms % 10_000) * factor / 10_000)
}

/// Whether `part` of `requests` reaches `rate` (hundredths of a percent); never without one
/// (a breaker never opens without a local failure or slow call, whatever the rate says).
#[inline]
fn at_rate(part: u64, rate: u32, requests: u64) -> bool {
    part > 0 && part.saturating_mul(10_000) >= u64::from(rate).saturating_mul(requests)
}

/// One breaker, borrowed from shared memory while the caller holds the zone lock.
#[derive(Debug)]
pub struct Breaker<'a> {
    hdr: &'a mut BreakerHeader,
    ring: &'a mut [Bucket],
}

impl<'a> Breaker<'a> {
    /// Wraps a header and its `window_s` buckets.
    pub fn new(hdr: &'a mut BreakerHeader, buckets: &'a mut [Bucket]) -> Breaker<'a> {
        debug_assert_eq!(buckets.len(), hdr.cfg.window_s as usize);
        Breaker { hdr, ring: buckets }
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.hdr.state()
    }

    /// The parameters the breaker runs with.
    pub fn config(&self) -> &BreakerConfig {
        &self.hdr.cfg
    }

    /// The second (of the monotonic clock) during which successes — counted attempts of
    /// normal requests that neither fail nor are slow — may be gathered without the lock and
    /// absorbed later with [`Breaker::absorb_successes`], until the breaker next changes; `None`
    /// when every outcome must be recorded under the lock.
    ///
    /// Some while closed with the window's rates below their thresholds: a success only
    /// lowers a rate, so none of them could open the breaker — as long as no second leaves
    /// the window meanwhile, which is why it holds for the window's latest second only.
    pub fn successes_lock_free(&self) -> Option<u64> {
        let h = &*self.hdr;
        if h.state != STATE_CLOSED || h.forced == FORCED_OPEN {
            return None;
        }
        let s = &h.sums;
        let below = |part: u64, rate: u32| {
            part == 0 || part.saturating_mul(10_000) < u64::from(rate).saturating_mul(s.requests)
        };
        let ok = below(s.failures, h.cfg.failure_rate)
            && (h.cfg.slow_ms == 0 || below(s.slow, h.cfg.slow_rate));
        ok.then_some(s.second)
    }

    /// Absorbs `count` successes gathered without the lock in monotonic second `second`,
    /// with their latencies: as if each had been recorded, in the order they happened, before
    /// whatever this call is followed by.
    pub fn absorb_successes(&mut self, second: u64, count: u32, latency: &Histogram) {
        if count == 0 {
            return;
        }
        let h = &mut *self.hdr;
        h.totals.requests = h.totals.requests.saturating_add(u64::from(count));
        if h.state == STATE_CLOSED {
            h.sums.absorb(self.ring, second, count, latency);
            h.clear_runs();
        }
    }

    /// The operator-forced state, if any.
    pub fn forced(&self) -> Option<Forced> {
        self.hdr.forced()
    }

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
                    wait_ms: u64::from(h.cfg.open_ms),
                }
            }
            None => {}
        }
        match h.state() {
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
                wait_ms: u64::from(h.cfg.probe_interval_ms).max(1),
            },
            State::Open => Gate::Reject {
                until_ms: h.retry_at_ms,
                wait_ms: 0,
            },
            State::HalfOpen => Gate::Ask,
        }
    }

    fn clock(&mut self, now_ms: u64) -> u64 {
        let now = now_ms.max(self.hdr.last_ms);
        self.hdr.last_ms = now;
        now
    }

    /// Decides whether a request goes to the upstream.
    ///
    /// `rnd` is a uniform random number (jitter, and the ramp's draw); `owner` identifies the
    /// caller (its worker) should it get the probe slot; `owner_alive` tells whether the
    /// current holder of the slot still exists, so that a slot of a vanished worker is
    /// reclaimed. `may_probe` false (another fleet member is the designated prober) keeps an
    /// open breaker open after its cooldown and a half-open one from starting a probe: the
    /// request is rejected with `Retry-After` = `probe_interval`.
    ///
    /// With active probes an open breaker rejects every request, `Retry-After` saying when
    /// the next active probe is due (`probe_interval` once it is due or in flight).
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
            State::Open if now < h.retry_at_ms => return self.reject(h.retry_at_ms - now, None),
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
        let h = &*self.hdr;
        let wait = if h.probe_busy != 0 {
            interval
        } else {
            h.next_probe_at_ms - now
        };
        self.reject(wait.max(1), transition)
    }

    /// With active probes, hands the instance-wide probe slot to `owner` when a probe is due
    /// (the slot, its dead-owner reclaim and its lease are those of half-open probes): the
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
        h.retry_at_ms = h.next_probe_at_ms;
        Some(Ticket::Probe(gen))
    }

    /// Gives the probe slot to `owner` if it is free (or its holder died, or its lease ran
    /// out) and a probe may start now; returns the ticket.
    fn claim_probe(
        &mut self,
        now: u64,
        rnd: u32,
        owner: u32,
        owner_alive: &dyn Fn(u32) -> bool,
    ) -> Option<u64> {
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
        let spacing = jittered(u64::from(h.cfg.probe_interval_ms), h.cfg.jitter, rnd);
        h.next_probe_at_ms = now.saturating_add(spacing);
        h.totals.probes = h.totals.probes.saturating_add(1);
        Some(h.probe_gen)
    }

    fn pass(&self, transition: Option<Transition>) -> Decision {
        Decision {
            admission: Admission::Pass {
                would_reject: false,
            },
            transition,
        }
    }

    fn reject(&mut self, retry_after_ms: u64, transition: Option<Transition>) -> Decision {
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
    fn turn_away(&mut self) -> Decision {
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
            || (h.state == STATE_OPEN && h.cfg.active && h.forced == FORCED_NONE);
        matches!(ticket, Ticket::Probe(gen)
            if h.probe_busy != 0 && gen == h.probe_gen && probing)
    }

    /// Records the outcome of an attempt admitted with `ticket`.
    ///
    /// In closed state a normal outcome enters the window and may open the breaker — unless
    /// `may_open` is false (the per-server `max_eject` cap: the window keeps recording, and a
    /// later outcome trips it once it may); the current probe's outcome (half-open, or an
    /// active probe) may close it, and a failed half-open probe reopens it whatever
    /// `may_open` says (the breaker was out already); anything else (a stale probe ticket, a
    /// normal request finishing while not closed) only counts in the totals.
    pub fn record(
        &mut self,
        now_ms: u64,
        rnd: u32,
        ticket: Ticket,
        attempt: &Attempt,
        may_open: bool,
    ) -> Recorded {
        let now = self.clock(now_ms);
        let v = classify(attempt, &self.hdr.cfg);
        let probe = self.holds_probe(ticket);
        let t = &mut self.hdr.totals;
        if v.tls {
            t.tls_errors = t.tls_errors.saturating_add(1);
        } else if v.counted {
            t.requests = t.requests.saturating_add(1);
            t.failures = t.failures.saturating_add(u64::from(v.failure));
            t.slow = t.slow.saturating_add(u64::from(v.slow));
            t.retry_after_503 = t
                .retry_after_503
                .saturating_add(u64::from(v.retry_after_503));
        }
        let transition = if !v.counted || v.tls {
            // No verdict on the origin: a probe that got none just frees its slot.
            if probe {
                self.hdr.probe_busy = 0;
            }
            None
        } else if probe {
            self.probe_outcome(now, rnd, &v, attempt)
        } else if ticket == Ticket::Normal && self.hdr.state == STATE_CLOSED {
            let now_s = now / 1000;
            let h = &mut *self.hdr;
            h.sums.advance(self.ring, now_s);
            if h.sums.requests == 0 {
                // The window emptied: a run that began before is no evidence now.
                h.clear_runs();
            }
            h.sums.record(
                self.ring,
                now_s,
                v.failure,
                v.slow,
                v.retry_after_s,
                attempt.response_ms,
            );
            let next = |run: u32, bad: bool| if bad { run.saturating_add(1) } else { 0 };
            h.fail_run = next(h.fail_run, v.failure);
            h.slow_run = next(h.slow_run, v.slow);
            h.gateway_run = next(h.gateway_run, v.gateway);
            if h.forced == FORCED_NONE && may_open {
                self.check_trip(now, rnd, &v)
            } else {
                None
            }
        } else {
            None
        };
        Recorded {
            transition,
            state: self.hdr.state(),
        }
    }

    /// The request holding `ticket` ended without an outcome: frees its probe slot, if any.
    pub fn release(&mut self, now_ms: u64, ticket: Ticket) {
        self.clock(now_ms);
        if self.holds_probe(ticket) {
            self.hdr.probe_busy = 0;
        }
    }

    /// Peers report the origin failing: until `until_ms` (on this breaker's clock), the window
    /// trips on `suspect_min` requests instead of `min_requests`, at the same rates, and never
    /// without a local failure (or slow call). Each call replaces the previous deadline (0
    /// ends the suspicion).
    pub fn suspect(&mut self, until_ms: u64) {
        self.hdr.suspect_until_ms = until_ms;
    }

    /// Peers report the origin recovered: an open breaker (not forced) ends its cooldown now,
    /// so that the next request (passive) or the next [`Breaker::active_probe`] (active)
    /// probes at once; a half-open one waiting out its probe spacing may start its next probe
    /// now. The probes still decide. Returns whether anything moved.
    pub fn hasten(&mut self, now_ms: u64) -> bool {
        let now = self.clock(now_ms);
        let h = &mut *self.hdr;
        if h.forced != FORCED_NONE {
            return false;
        }
        match h.state {
            STATE_OPEN if h.retry_at_ms > now || (h.cfg.active && h.next_probe_at_ms > now) => {
                h.retry_at_ms = h.retry_at_ms.min(now);
                if h.cfg.active {
                    h.next_probe_at_ms = h.next_probe_at_ms.min(now);
                }
                true
            }
            STATE_HALF_OPEN if h.probe_busy == 0 && h.next_probe_at_ms > now => {
                h.next_probe_at_ms = now;
                true
            }
            _ => false,
        }
    }

    fn check_trip(&mut self, now: u64, rnd: u32, last: &Verdict) -> Option<Transition> {
        let (cfg, s) = (&self.hdr.cfg, &self.hdr.sums);
        let run = self.hdr.gateway_run;
        if cfg.consecutive > 0 && run >= cfg.consecutive {
            // Certain evidence that needs no rate: a hard outage, closed by `probes` probes.
            let last = last.class.map_or_else(String::new, class_name);
            let text = format!("{run} gateway failures in a row, the last: {last}");
            let probes = cfg.probes.max(1);
            let trip = Trip::new(&self.hdr.sums, TripBy::Consecutive, false);
            return Some(self.open_period(now, rnd, text, trip, probes, true));
        }
        let suspected = now < self.hdr.suspect_until_ms;
        let min = cfg.min_requests.max(1);
        let min = if suspected {
            cfg.suspect_min.clamp(1, min)
        } else {
            min
        };
        if s.requests < u64::from(min) {
            return None;
        }
        let reaches = |part: u64, rate: u32| at_rate(part, rate, s.requests);
        let fail_at = reaches(s.failures, cfg.failure_rate);
        let slow_at = cfg.slow_ms > 0 && reaches(s.slow, cfg.slow_rate);
        let (what, part, rate) = if fail_at {
            ("failure", s.failures, cfg.failure_rate)
        } else if slow_at {
            ("slow", s.slow, cfg.slow_rate)
        } else {
            return None;
        };
        let by = if what == "slow" {
            TripBy::SlowRate
        } else {
            TripBy::FailureRate
        };
        let trip = Trip::new(s, by, suspected);
        let text = format!(
            "{what} rate {}% ({part}/{}) >= {}% in {}s{}",
            reason::percent(part, s.requests),
            s.requests,
            reason::rate(rate),
            cfg.window_s,
            if suspected { " while suspected" } else { "" }
        );
        // Hard only when every kind of bad call at its rate came in one unbroken run: slow
        // calls mixed with scattered errors are a brownout of errors too.
        let h = &*self.hdr;
        let (mut soft, mut hard) = (h.cfg.probes.max(1), true);
        for (at, run, part, rate) in [
            (fail_at, h.fail_run, s.failures, cfg.failure_rate),
            (slow_at, h.slow_run, s.slow, cfg.slow_rate),
        ] {
            if at {
                soft = soft.max(judge::soft_run(rate, h.cfg.probes));
                hard &= judge::is_hard(run, part, rate);
            }
        }
        Some(self.open_period(now, rnd, text, trip, soft, hard))
    }

    /// Opens a closed breaker for a new open period: how many good probes will close it
    /// (`probes` after a hard trip, `soft` otherwise), and with `repeat_backoff` whether the
    /// cooldown doubles.
    fn open_period(
        &mut self,
        now: u64,
        rnd: u32,
        text: String,
        trip: Trip,
        soft: u32,
        hard: bool,
    ) -> Transition {
        let h = &mut *self.hdr;
        h.trip = trip;
        h.soft_needed = soft;
        h.needed = if hard { h.cfg.probes.max(1) } else { soft };
        h.flags &= !GOOD_SEEN;
        if h.cfg.repeat_backoff {
            let soon = h.flags & RECLOSED != 0
                && now.saturating_sub(h.since_ms) < u64::from(h.cfg.max_open_ms);
            h.base_cooldown_ms = if soon {
                h.base_cooldown_ms.saturating_mul(2).min(h.cfg.max_open_ms)
            } else {
                first_cooldown(&h.cfg)
            };
        }
        h.flags &= !RECLOSED;
        self.open_now(now, rnd, text, 0)
    }

    /// Opens a closed breaker at once, whatever its window says, as after a hard failure
    /// (`probes` good probes close it): a server that failed the probe of its upstream's open
    /// breaker (see [`mod@crate::eject::explain`]). `None`, and nothing changes, when it is not
    /// closed or is forced.
    pub fn trip(&mut self, now_ms: u64, rnd: u32, reason: String) -> Option<Transition> {
        let now = self.clock(now_ms);
        if self.hdr.state != STATE_CLOSED || self.hdr.forced != FORCED_NONE {
            return None;
        }
        let probes = self.hdr.cfg.probes.max(1);
        let trip = Trip::new(&self.hdr.sums, TripBy::Probe, false);
        Some(self.open_period(now, rnd, reason, trip, probes, true))
    }

    /// Whether the live window at `now_ms` holds failures at `failure_rate` or slow calls at
    /// `slow_rate` (with `slow` set), `min_requests` reached or not: with the breaker's own
    /// rates, a server whose breaker is about to eject it.
    pub fn reaches(&mut self, now_ms: u64, failure_rate: u32, slow_rate: u32) -> bool {
        let now = self.clock(now_ms);
        let h = &mut *self.hdr;
        h.sums.advance(self.ring, now / 1000);
        let s = &h.sums;
        at_rate(s.failures, failure_rate, s.requests)
            || (h.cfg.slow_ms > 0 && at_rate(s.slow, slow_rate, s.requests))
    }

    /// Records the bad outcome (a failure, or a slow call) of an attempt admitted with
    /// `ticket` that the pool explains: its server is out of the pool, or on its way out (see
    /// [`mod@crate::eject::explain`]). The totals count it (it is what the client got), and
    /// `explained` too, but never the window: ejection fixes it, so it must not open this
    /// breaker. The probe's outcome says nothing of the upstream either: its slot is given
    /// back, no verdict, and the next probe may start at once, for another server. An outcome
    /// that is not bad is recorded as [`Breaker::record`] does.
    pub fn record_explained(
        &mut self,
        now_ms: u64,
        rnd: u32,
        ticket: Ticket,
        attempt: &Attempt,
    ) -> Recorded {
        let v = classify(attempt, &self.hdr.cfg);
        if !v.counted || v.tls || !(v.failure || v.slow) {
            return self.record(now_ms, rnd, ticket, attempt, true);
        }
        let now = self.clock(now_ms);
        let t = &mut self.hdr.totals;
        t.requests = t.requests.saturating_add(1);
        t.failures = t.failures.saturating_add(u64::from(v.failure));
        t.slow = t.slow.saturating_add(u64::from(v.slow));
        t.retry_after_503 = t
            .retry_after_503
            .saturating_add(u64::from(v.retry_after_503));
        t.explained = t.explained.saturating_add(1);
        self.probe_explained(now, ticket);
        Recorded {
            transition: None,
            state: self.hdr.state(),
        }
    }

    /// The probe holding `ticket` failed on a server the pool explains (see
    /// [`Breaker::record_explained`]): its slot is given back, no verdict, and the next probe
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

    fn probe_outcome(
        &mut self,
        now: u64,
        rnd: u32,
        v: &Verdict,
        a: &Attempt,
    ) -> Option<Transition> {
        let limit = u64::from(self.hdr.cfg.probe_limit_ms());
        let failed = match v.class {
            Some(class) if v.failure => Some(format!("probe failed: {}", class_name(class))),
            _ => None,
        };
        let slow = (limit > 0 && a.response_ms > limit)
            .then(|| format!("probe too slow: {}ms > {}ms", a.response_ms, limit));
        self.note_probe_latency(now, a.response_ms);
        self.probe_verdict(now, rnd, failed.or(slow), v.retry_after_s)
    }

    /// A probe's response time joins the window's percentiles (the status page's origin
    /// latency while open or half-open), not its counts.
    fn note_probe_latency(&mut self, now: u64, response_ms: u64) {
        let h = &mut *self.hdr;
        h.sums.advance(self.ring, now / 1000);
        h.sums.note_latency(self.ring, now / 1000, response_ms);
    }

    /// Judges the probe: `failed` says why it failed, `None` for a good one.
    fn probe_verdict(
        &mut self,
        now: u64,
        rnd: u32,
        failed: Option<String>,
        retry_after_s: u32,
    ) -> Option<Transition> {
        let h = &mut *self.hdr;
        h.probe_busy = 0;
        let Some(text) = failed else {
            h.consecutive = h.consecutive.saturating_add(1);
            h.flags |= GOOD_SEEN;
            let needed = h.needed.max(1);
            if h.consecutive < needed {
                // The rest of the run comes at its own pace (see `judge::run_spacing`).
                let pace = jittered(
                    judge::run_spacing(h.cfg.probe_interval_ms, h.cfg.probes, needed),
                    h.cfg.jitter,
                    rnd,
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
    /// counted apart, the slot freed.
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
            let failed = probe.failed(self.hdr.cfg.probe_limit_ms());
            self.note_probe_latency(now, probe.response_ms);
            self.probe_verdict(now, rnd, failed, probe.retry_after_s)
        } else {
            None
        };
        Recorded {
            transition,
            state: self.hdr.state(),
        }
    }
    fn set_state(&mut self, now: u64, to: u8, reason: &str) -> State {
        let h = &mut *self.hdr;
        let from = h.state();
        if h.state != to {
            h.since_ms = now;
            let t = &mut h.totals;
            let counter = match to {
                STATE_OPEN => &mut t.opened,
                STATE_HALF_OPEN => &mut t.half_opened,
                _ => &mut t.closed,
            };
            *counter = counter.saturating_add(1);
        }
        h.state = to;
        h.consecutive = 0;
        h.probe_busy = 0;
        h.ramp_until_ms = 0;
        h.reason_len = reason::store(&mut h.reason, reason);
        from
    }

    /// Opens with the current base cooldown, jittered, raised to the largest `Retry-After` in
    /// the window (or `retry_after_s` of the outcome at hand), capped at `max_open`. With
    /// active probes the first one is due when that cooldown ends.
    fn open_now(&mut self, now: u64, rnd: u32, reason: String, retry_after_s: u32) -> Transition {
        let live = self.hdr.sums.live(self.ring, now / 1000, None);
        let h = &mut *self.hdr;
        let floor = u64::from(live.retry_after_s.max(retry_after_s)) * 1000;
        let cooldown = jittered(u64::from(h.base_cooldown_ms), h.cfg.jitter, rnd)
            .max(floor)
            .min(u64::from(h.cfg.max_open_ms));
        // At most `max_open`, a `u32`.
        h.cooldown_ms = u32::try_from(cooldown).unwrap_or(u32::MAX);
        h.retry_at_ms = now.saturating_add(cooldown);
        h.next_probe_at_ms = h.retry_at_ms;
        let from = self.set_state(now, STATE_OPEN, &reason);
        Transition {
            from,
            to: State::Open,
            reason,
            detail: Some(format!("retry in {}s", reason::secs_ceil(cooldown))),
        }
    }

    fn half_open_now(&mut self, now: u64) -> Transition {
        let reason = format!(
            "cooldown {}s elapsed",
            reason::secs_ceil(u64::from(self.hdr.cooldown_ms))
        );
        let from = self.set_state(now, STATE_HALF_OPEN, &reason);
        self.hdr.next_probe_at_ms = now;
        Transition {
            from,
            to: State::HalfOpen,
            reason,
            detail: None,
        }
    }

    /// Closes with a fresh window. `by_probes`: a recovery, which starts the ramp and, with
    /// `repeat_backoff`, keeps the base cooldown for a trip soon after; otherwise (an
    /// operator's reset) the base cooldown is back at the first one and no ramp starts.
    fn close_now(&mut self, now: u64, reason: String, by_probes: bool) -> Transition {
        let h = &mut *self.hdr;
        h.sums.clear(self.ring, now / 1000);
        h.trip = Trip::NONE;
        h.clear_runs();
        h.needed = 0;
        h.soft_needed = 0;
        h.flags = if by_probes { RECLOSED } else { 0 };
        if !(by_probes && h.cfg.repeat_backoff) {
            h.base_cooldown_ms = first_cooldown(&h.cfg);
        }
        h.cooldown_ms = h.base_cooldown_ms;
        let from = self.set_state(now, STATE_CLOSED, &reason);
        let h = &mut *self.hdr;
        let ramp = by_probes && h.cfg.ramp_ms > 0 && h.cfg.ramp_start < 10_000;
        let detail = ramp.then(|| {
            h.ramp_until_ms = now.saturating_add(u64::from(h.cfg.ramp_ms));
            format!(
                "ramp from {}% over {}s",
                reason::rate(h.cfg.ramp_start),
                reason::secs_ceil(u64::from(h.cfg.ramp_ms))
            )
        });
        Transition {
            from,
            to: State::Closed,
            reason,
            detail,
        }
    }

    /// Applies an operator action. Always returns the transition (possibly with `from == to`,
    /// e.g. forcing open an open breaker) so that every operator action is logged; the
    /// `opened`/`closed` totals count only real changes of state.
    ///
    /// `ForceOpen` holds the breaker open (no half-open, no active probes) and `ForceClose`
    /// holds it closed (outcomes still recorded, never trips, no ramp), both until `Reset`,
    /// which returns to a fresh closed breaker with an empty window, the first cooldown and no
    /// ramp; totals are kept. Any outstanding probe ticket becomes stale.
    pub fn control(&mut self, now_ms: u64, _rnd: u32, action: Control) -> Option<Transition> {
        let now = self.clock(now_ms);
        let (forced, reason) = match action {
            Control::ForceOpen => (FORCED_OPEN, "forced open"),
            Control::ForceClose => (FORCED_CLOSED, "forced closed"),
            Control::Reset => (FORCED_NONE, "reset"),
        };
        self.hdr.forced = forced;
        // A forced state is no trip.
        self.hdr.trip = Trip::NONE;
        let t = match action {
            Control::ForceOpen => {
                let from = self.set_state(now, STATE_OPEN, reason);
                Transition {
                    from,
                    to: State::Open,
                    reason: reason.into(),
                    detail: None,
                }
            }
            Control::ForceClose => {
                let from = self.set_state(now, STATE_CLOSED, reason);
                Transition {
                    from,
                    to: State::Closed,
                    reason: reason.into(),
                    detail: None,
                }
            }
            Control::Reset => {
                let t = self.close_now(now, reason.into(), false);
                self.hdr.since_ms = now;
                t
            }
        };
        Some(t)
    }

    /// The window's running sums at `now_ms` (advancing it first), as used for decisions.
    pub fn window(&mut self, now_ms: u64) -> WindowView {
        let now = self.clock(now_ms);
        let h = &mut *self.hdr;
        h.sums.advance(self.ring, now / 1000);
        WindowView {
            seconds: h.cfg.window_s,
            requests: h.sums.requests,
            failures: h.sums.failures,
            slow: h.sums.slow,
        }
    }

    /// Everything the status page shows, computed from the live buckets at `now_ms`.
    pub fn view(&self, now_ms: u64) -> BreakerView {
        let h = &*self.hdr;
        let now = now_ms.max(h.last_ms);
        let mut hist = HistogramSum::default();
        let live = h.sums.live(self.ring, now / 1000, Some(&mut hist));
        let state = h.state();
        let forced = h.forced();
        // When the next probe may start: while one is in flight, not before one spacing from
        // now (what a turned-away request's Retry-After says too).
        let spacing = now.saturating_add(u64::from(h.cfg.probe_interval_ms));
        let retry_at_ms = match state {
            State::Open if forced.is_none() && h.cfg.active && h.probe_busy != 0 => {
                Some(h.retry_at_ms.max(spacing))
            }
            State::Open if forced.is_none() => Some(h.retry_at_ms),
            State::HalfOpen if h.probe_busy != 0 => Some(h.next_probe_at_ms.max(spacing)),
            State::HalfOpen => Some(h.next_probe_at_ms),
            _ => None,
        };
        let unforced_closed = state == State::Closed && forced.is_none();
        BreakerView {
            state,
            dry_run: h.cfg.dry_run,
            forced,
            since_ms: h.since_ms,
            retry_at_ms,
            window: WindowView {
                seconds: h.cfg.window_s,
                requests: live.requests,
                failures: live.failures,
                slow: live.slow,
            },
            latency: LatencyView {
                p50: hist.percentile(500),
                p95: hist.percentile(950),
                p99: hist.percentile(990),
            },
            cooldown_ms: u64::from(h.cooldown_ms),
            consecutive_probe_successes: h.consecutive,
            probes_needed: if state == State::Closed || forced.is_some() {
                0
            } else {
                h.needed.max(1)
            },
            ramp_share: if unforced_closed {
                ramp::share(h.ramp_until_ms, h.cfg.ramp_ms, h.cfg.ramp_start, now)
            } else {
                10_000
            },
            suspect_until_ms: (now < h.suspect_until_ms).then_some(h.suspect_until_ms),
            totals: h.totals,
            last_transition: reason::load(&h.reason, h.reason_len).to_string(),
            tripped: if state == State::Closed || forced.is_some() {
                None
            } else {
                h.trip.view(&h.cfg)
            },
        }
    }
}
