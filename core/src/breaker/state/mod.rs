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
//!   next probe; with passive probes, to the end of the jitter's range, see below). What
//!   happens next depends on `active`:
//!   - *Passive probes* (no `probe_uri`, as before): after the cooldown — the base cooldown
//!     (`open`, doubled after each failed probe, up to `max_open`), jittered, raised to the
//!     largest `Retry-After` an origin sent in the window, capped by `max_open` — the next
//!     request turns the breaker **half-open** and is the probe; at most one probe in flight
//!     and one started per `probe_interval` for the whole instance. A failed probe reopens it.
//!     The probe is a user request, so the moment it becomes possible is never told: a client
//!     that came back exactly then would win it every time (and, asking for a URL the origin
//!     fails on, keep the breaker open). The cooldown and the probe spacing are drawn in
//!     their jitter's range, and `Retry-After` counts down to the range's end
//!     (`BreakerHeader::told`).
//!   - *Active probes* (`active`): the breaker stays **open** throughout. User requests are
//!     never probes; the shell asks [`Breaker::active_probe`] for the breaker's one probe,
//!     instance-wide, and sends its own request when granted it: first one cooldown after opening — here
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

use super::classified::Classified;
use super::classify::{class_name, Attempt, Verdict};
use super::config::BreakerConfig;
use super::histogram::{Histogram, HistogramSum};
use super::jitter::{JitterSource, Purpose};
use super::judge;
use super::ramp::{self, RAMP_RETRY_AFTER_MS};
use super::reason::{self, REASON_BYTES};
use super::trip::{Trip, TripBy};
use super::window::{Bucket, Sums};
use crate::class::PRESENT_MS;
use crate::snapshot::{BreakerView, Forced, LatencyView, State, Totals, WindowView};

mod admit;
mod probe;
mod record;
mod retune;
mod transition;
mod view;

pub use admit::{Admission, Decision, Gate, Ticket};
pub use probe::{ProbeFailure, ProbeResult};
pub use record::Recorded;
pub use retune::Retuned;
pub use transition::{Control, Transition};

/// A probe held this long (milliseconds) is reclaimed even if its owner still lives.
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
/// `flags`: closed, with a trip waiting on the breaker's own probe (`confirm_ms`).
const QUESTIONED: u8 = 4;
/// `flags`: a probe of the current question came back without a verdict (it could not
/// connect: a client that takes every connection can make it so), so its lapse is not
/// believed.
const UNANSWERED: u8 = 8;

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
    /// Closed and questioned ([`BreakerConfig::confirm_ms`]): when the question lapses
    /// unanswered.
    retry_at_ms: u64,
    next_probe_at_ms: u64,
    probe_granted_ms: u64,
    /// The current cooldown as clients are told it: with active probes the one drawn
    /// (jittered, floored, capped), with passive probes the end of the range it was drawn in
    /// (the one drawn is `retry_at_ms - since_ms`, kept from clients: see
    /// `BreakerHeader::told`).
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
    /// Open or half-open: how long before `since_ms` the episode began — the trip (or the
    /// operator's force open) that took it out of closed, which a failed probe's reopen
    /// does not move. Milliseconds, at most `u32::MAX` (49 days): 4 bytes keep a default
    /// breaker within the slab's 2 KiB class (here, beside the reason, in what was
    /// padding).
    episode_back_ms: u32,
}

impl BreakerHeader {
    /// A closed breaker with an empty window, created at `now_ms`. Its buckets must be filled
    /// with [`Bucket::EMPTY`].
    ///
    /// `epoch` must differ from that of every earlier breaker that lived in the same memory
    /// (the shell takes it from a counter in the zone), so that a probe ticket of a breaker
    /// a reload dropped is never taken for one of a breaker created after. (A reload that
    /// changes a breaker's parameters keeps its tickets: see [`Breaker::retune`].)
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
            episode_back_ms: 0,
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

    /// The latency a passive probe (a user request) must stay within (0: none): the
    /// configuration's (`probe_latency`, or `slow`), or a latency outlier's limit, whichever
    /// is lower.
    fn probe_limit_ms(&self) -> u32 {
        match (self.cfg.probe_limit_ms(), self.trip.limit_ms()) {
            (0, o) => o,
            (c, 0) => c,
            (c, o) => c.min(o),
        }
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

    /// What clients are told a wait that ends at `due_ms` ends at: with active probes
    /// `due_ms` itself (clients never probe: nothing to hide); with passive probes the end of
    /// the jitter's range `due_ms` was drawn in, never before it — open, the cooldown's
    /// (`since_ms + cooldown_ms`); half-open, the probe spacing's, from the last probe's
    /// start (a good probe's run may bring the next one sooner, never later). The first
    /// request after `due_ms` is the probe: a client told `due_ms` itself could be that
    /// request every time. Half-open in a run of good probes longer than `probes` (a relapse's,
    /// a brownout's), whose probes come closer together than the spacing, the wait also covers
    /// twice the run's rest at its pace: a client told only the spacing's end came back in
    /// the middle of the run, where a probe was as often due as not, and a failure it made
    /// there doubled the run again (`t/21-probe-timing.t`: rounds of 88 to 144 s).
    fn told(&self, due_ms: u64) -> u64 {
        let end = match self.state {
            _ if self.cfg.active => due_ms,
            STATE_OPEN => self.since_ms.saturating_add(u64::from(self.cooldown_ms)),
            STATE_HALF_OPEN => {
                let interval = u64::from(self.cfg.probe_interval_ms);
                let spacing = jitter_range(interval, self.cfg.jitter).1;
                let run = if self.needed > self.cfg.probes {
                    let pace = judge::run_spacing(
                        self.cfg.probe_interval_ms,
                        self.cfg.probes,
                        self.needed,
                    );
                    let rest = u64::from(self.needed.saturating_sub(self.consecutive));
                    rest.saturating_mul(2 * jitter_range(pace, self.cfg.jitter).1)
                } else {
                    0
                };
                self.probe_granted_ms.saturating_add(spacing.max(run))
            }
            _ => due_ms,
        };
        end.max(due_ms)
    }

    /// A rejected request's wait at `now` (open or half-open, not forced): to the end of the
    /// cooldown, or of the probe spacing, `told` (as `BreakerHeader::told`) or not;
    /// while a probe is in flight, `probe_interval`, or told, at least the end of the spacing's
    /// range from now. 0 when none is due (closed).
    fn wait_ms(&self, now: u64, told: bool) -> u64 {
        let due = match self.state {
            STATE_OPEN => self.retry_at_ms,
            STATE_HALF_OPEN if self.probe_busy != 0 => {
                let interval = u64::from(self.cfg.probe_interval_ms);
                if !told {
                    return interval.max(1);
                }
                // A whole spacing's range from now at least: the probe may take long.
                let spacing = jitter_range(interval, self.cfg.jitter).1;
                return self
                    .told(self.next_probe_at_ms)
                    .saturating_sub(now)
                    .max(spacing)
                    .max(1);
            }
            STATE_HALF_OPEN => self.next_probe_at_ms,
            _ => return 0,
        };
        let due = if told { self.told(due) } else { due };
        due.saturating_sub(now)
    }

    /// With active probes, when the next one is due (the shell arms its timer for it); `None`
    /// when none will be (closed, forced, or passive probes).
    pub fn active_probe_due_ms(&self) -> Option<u64> {
        let asks = self.state == STATE_OPEN || self.questioned();
        (self.cfg.active && asks && self.forced == FORCED_NONE).then_some(self.next_probe_at_ms)
    }

    /// Closed, with a trip waiting on the breaker's own probe ([`BreakerConfig::confirm_ms`]),
    /// as of the latest clock reading: a question that lapsed, or that a reload's parameters
    /// no longer ask, waits on nothing (and a late answer is no probe's).
    pub fn questioned(&self) -> bool {
        self.questioned_at(self.last_ms)
    }

    /// [`BreakerHeader::questioned`] at `now_ms` (never before the latest clock reading).
    fn questioned_at(&self, now_ms: u64) -> bool {
        self.state == STATE_CLOSED
            && self.flags & QUESTIONED != 0
            && self.cfg.active
            && self.cfg.confirm_ms > 0
            && now_ms.max(self.last_ms) < self.retry_at_ms
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

/// Whether a breaker of `cfg`, probed by its own requests (no active probe), may come to its
/// probe sooner than [`PRESENT_MS`] after it opened: its first cooldown's jitter range starts
/// below it. The requests it turned away since it opened may then not have said which classes
/// come, and the classes of those it admitted just before must count too.
pub fn probe_within_presence(cfg: &BreakerConfig) -> bool {
    !cfg.active && jittered(u64::from(cfg.open_ms), cfg.jitter, 0) < PRESENT_MS
}

/// The range `[lo, hi]` of [`jittered`]: `base_ms` times `1 - j` and `1 + j`.
#[inline]
fn jitter_range(base_ms: u64, jitter: u32) -> (u64, u64) {
    (
        jittered(base_ms, jitter, 0),
        jittered(base_ms, jitter, u32::MAX),
    )
}

/// A wait drawn uniformly in `[lo, hi)` by `rnd` (`lo` when the range is empty): strictly
/// before `hi`, which is what clients are told, so that the two never coincide.
#[inline]
fn draw(lo: u64, hi: u64, rnd: u32) -> u64 {
    let span = u128::from(hi.saturating_sub(lo));
    lo + ((span * u128::from(rnd)) >> 32) as u64
}

/// The range a cooldown is drawn in, `[lo, hi)`: the base cooldown's jitter range, raised to
/// the origin's `Retry-After` (`floor_ms`) as a range of its own, `[floor, floor·(1+j))`, so
/// that the floor is not a moment a client could bet on either; both ends capped by
/// `max_ms`, where the range keeps `[max·(1-j), max)` rather than shrinking to a point. With
/// no jitter, a point: `max(base, floor)` capped.
fn cooldown_range(base_ms: u64, floor_ms: u64, jitter: u32, max_ms: u64) -> (u64, u64) {
    let (lo, hi) = jitter_range(base_ms, jitter);
    let hi = hi.max(jitter_range(floor_ms, jitter).1).min(max_ms);
    let lo = lo.max(floor_ms).min(jitter_range(max_ms, jitter).0);
    (lo.min(hi), hi)
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
    /// Where the draws that decide transitions come from ([`super::jitter`]); `None`: the
    /// random numbers the calls pass.
    jitter: Option<JitterSource<'a>>,
}

impl<'a> Breaker<'a> {
    /// Wraps a header and its `window_s` buckets.
    pub fn new(hdr: &'a mut BreakerHeader, buckets: &'a mut [Bucket]) -> Breaker<'a> {
        debug_assert_eq!(buckets.len(), hdr.cfg.window_s as usize);
        Breaker {
            hdr,
            ring: buckets,
            jitter: None,
        }
    }

    /// Draws cooldowns and probe spacings from `src` ([`super::jitter`]) rather than from the
    /// random numbers the calls pass.
    pub fn with_jitter(mut self, src: JitterSource<'a>) -> Breaker<'a> {
        self.jitter = Some(src);
        self
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.hdr.state()
    }

    /// Closed, with a trip waiting on the breaker's own probe ([`BreakerConfig::confirm_ms`]),
    /// at `now_ms`: whether a probe's outcome recorded then answers a question.
    pub fn questioned_at(&self, now_ms: u64) -> bool {
        self.hdr.questioned_at(now_ms)
    }

    /// The parameters the breaker runs with.
    pub fn config(&self) -> &BreakerConfig {
        &self.hdr.cfg
    }

    /// The operator-forced state, if any.
    pub fn forced(&self) -> Option<Forced> {
        self.hdr.forced()
    }

    fn clock(&mut self, now_ms: u64) -> u64 {
        let now = now_ms.max(self.hdr.last_ms);
        self.hdr.last_ms = now;
        now
    }
}

/// The uniform number of a draw for `purpose` at `now`: `jitter`'s, or `rnd`.
fn jitter_rnd(jitter: Option<JitterSource<'_>>, purpose: Purpose, now: u64, rnd: u32) -> u32 {
    jitter.map_or(rnd, |j| j.draw(purpose, now))
}
