//! A worker's latency samples since its last flush, merged under the zone's lock.

/// Latency samples of one worker since its last flush, merged under the lock. Merging is
/// associative and commutative, so flushes may come in any grouping and order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Samples {
    /// Sum of the latencies, milliseconds.
    pub sum_ms: u64,
    /// Latency samples: attempts the origin answered, and timeouts (their elapsed time is
    /// the clearest sign of a queue).
    pub count: u32,
    /// Smallest latency, milliseconds (`u32::MAX` while `count` is 0).
    pub min_ms: u32,
    /// Largest latency, milliseconds.
    pub max_ms: u32,
    /// Attempts that ended with no latency worth averaging (refused, reset, client abort):
    /// counted for the status page, never averaged, so that fast errors cannot drag the
    /// minimum down and throttle a healthy origin.
    pub drops: u32,
    /// The most requests in flight seen at an admission (the shell's counter just after its
    /// increment) or at a completion (just before its decrement): whether the limit was
    /// reached, how much of it was used, and whether the origin drained.
    pub inflight_max: u32,
    /// Latency samples (of `count`) of attempts that started after the pin of a pinned
    /// measurement was set ([`super::Limiter::clean_since`]): none is admitted before the queue of
    /// the older limit has drained below the pin, so these are answers the origin gave with
    /// no more than the pin in flight.
    pub clean: u32,
    /// Answers in which the origin said it is saturated — a `429`, a `503` with
    /// `Retry-After`, a gRPC `RESOURCE_EXHAUSTED` — whether or not their class counts as a
    /// breaker failure: no latency sample (the origin turned the work away), and the limit
    /// falls at once ([`super::Limiter::record`]).
    pub overloads: u32,
    /// Whom the overload signals were given: 0 nobody; a client's tag
    /// ([`super::share::Client::tag`]) while all went to that one client, others asking beside
    /// it; [`Samples::SEVERAL`] once they went to two clients, or to one that asked alone (or
    /// to clients not told apart).
    pub overload_to: u32,
    /// Requests of a lower class turned away below the limit, at their class's threshold
    /// ([`crate::class::Class::threshold`]): the limit bound demand then as surely as when in-flight
    /// reached it.
    pub reserved: u32,
    /// Requests of a heavy client turned away below the limit, at its cap
    /// ([`super::share::cap`]): demand the limit bound, but not one the others met.
    pub over_share: u32,
    /// Requests turned away with in-flight at the limit: the limit was full then, whichever
    /// worker's admission filled it (its `inflight_max` may come in a later flush).
    pub full: u32,
    /// Latency samples of heavy clients ([`super::share::Standing::Heavy`]), set apart from
    /// `count` and its figures ([`Samples::judged`]).
    pub heavy: u32,
    /// Their sum, milliseconds.
    pub heavy_sum_ms: u64,
    /// Their smallest (`u32::MAX` while `heavy` is 0) and largest, milliseconds.
    pub heavy_min_ms: u32,
    pub heavy_max_ms: u32,
}

impl Default for Samples {
    fn default() -> Self {
        Samples::EMPTY
    }
}

impl Samples {
    /// Nothing recorded.
    pub const EMPTY: Samples = Samples {
        sum_ms: 0,
        count: 0,
        min_ms: u32::MAX,
        max_ms: 0,
        drops: 0,
        inflight_max: 0,
        clean: 0,
        overloads: 0,
        overload_to: 0,
        reserved: 0,
        over_share: 0,
        full: 0,
        heavy: 0,
        heavy_sum_ms: 0,
        heavy_min_ms: u32::MAX,
        heavy_max_ms: 0,
    };

    /// Adds one latency sample. The sum and count wrap rather than saturate: a worker flushes
    /// its samples at 32, nowhere near either bound, and the controller's merge saturates
    /// (`scripts/bench-instructions`, closed_limit).
    #[inline]
    pub fn add(&mut self, latency_ms: u64) {
        let (sum, count, min, max) = (
            &mut self.sum_ms,
            &mut self.count,
            &mut self.min_ms,
            &mut self.max_ms,
        );
        fold(latency_ms, sum, count, min, max);
    }

    /// Adds one latency sample of an attempt that started after [`super::Limiter::clean_since`]
    /// (wrapping, as [`Samples::add`]).
    #[inline]
    pub fn add_clean(&mut self, latency_ms: u64) {
        self.add(latency_ms);
        self.clean = self.clean.wrapping_add(1);
    }

    /// Adds one latency sample of a heavy client's attempt (wrapping, as [`Samples::add`]).
    #[inline]
    pub fn add_heavy(&mut self, latency_ms: u64) {
        let (sum, count, min, max) = (
            &mut self.heavy_sum_ms,
            &mut self.heavy,
            &mut self.heavy_min_ms,
            &mut self.heavy_max_ms,
        );
        fold(latency_ms, sum, count, min, max);
    }

    /// Counts one attempt without a latency sample.
    #[inline]
    pub fn add_drop(&mut self) {
        self.drops = self.drops.saturating_add(1);
    }

    /// [`Samples::overload_to`] once the overload signals went to more than one client.
    pub const SEVERAL: u32 = u32::MAX;

    /// Counts one answer in which the origin said it is saturated (see
    /// [`Samples::overloads`]), given to the client of `tag` while others asked beside it
    /// (`None`: it asked alone, or clients are not told apart).
    #[inline]
    pub fn add_overload(&mut self, tag: Option<u16>) {
        self.overloads = self.overloads.saturating_add(1);
        let to = tag.map_or(Samples::SEVERAL, |t| u32::from(t.max(1)));
        self.overload_to = Samples::overload_join(self.overload_to, to);
    }

    /// Whom two sets of overload signals went to together ([`Samples::overload_to`]): nobody
    /// is the identity, one client stays one, two are several. A signal is the origin's word
    /// on its load rather than on one client's own quota when it went to several: an origin
    /// that rate-limits a client answers that client alone `429`, and a cut then would shed
    /// every other client for one client's excess.
    #[inline]
    pub fn overload_join(a: u32, b: u32) -> u32 {
        match (a, b) {
            (0, x) | (x, 0) => x,
            (x, y) if x == y => x,
            _ => Samples::SEVERAL,
        }
    }

    /// Counts one request turned away at the full limit (see [`Samples::full`]).
    #[inline]
    pub fn add_full(&mut self) {
        self.full = self.full.saturating_add(1);
    }

    /// Counts one request its class's reserve turned away (see [`Samples::reserved`]).
    #[inline]
    pub fn add_reserved(&mut self) {
        self.reserved = self.reserved.saturating_add(1);
    }

    /// Counts one request a heavy client's cap turned away (see [`Samples::over_share`]).
    #[inline]
    pub fn add_over_share(&mut self) {
        self.over_share = self.over_share.saturating_add(1);
    }

    /// Whether the limit bound demand: in-flight reached `limit`, a class's threshold
    /// turned a request away below it, or a heavy client's cap did.
    #[inline]
    pub fn reached(&self, limit: u32) -> bool {
        self.reached_by_all(limit) || self.over_share > 0
    }

    /// Whether the limit bound demand other than a heavy client's: in-flight reached `limit`,
    /// or a class's threshold turned a request away below it.
    #[inline]
    pub fn reached_by_all(&self, limit: u32) -> bool {
        self.inflight_max >= limit || self.reserved > 0
    }

    /// Every latency sample, the heavy clients' with the others'.
    pub fn all(&self) -> u32 {
        self.count.saturating_add(self.heavy)
    }

    /// The samples the limit is judged by: the others' alone when they are at least
    /// `enough`, so that a client's own slow requests do not read as a queue; all of them
    /// otherwise (a heavy client and a trickle of others: too few to judge by).
    pub fn judged(&self, enough: u32) -> Samples {
        let mut s = *self;
        if s.count < enough && s.heavy > 0 {
            s.sum_ms = s.sum_ms.saturating_add(s.heavy_sum_ms);
            s.count = s.count.saturating_add(s.heavy);
            s.min_ms = s.min_ms.min(s.heavy_min_ms);
            s.max_ms = s.max_ms.max(s.heavy_max_ms);
            s.heavy = 0;
            s.heavy_sum_ms = 0;
            s.heavy_min_ms = u32::MAX;
            s.heavy_max_ms = 0;
        }
        s
    }

    /// Notes the in-flight count seen at an admission (after the increment) or a completion
    /// (before the decrement).
    #[inline]
    pub fn note_inflight(&mut self, inflight: u32) {
        self.inflight_max = self.inflight_max.max(inflight);
    }

    /// Adds `other` to `self`.
    #[inline]
    pub fn merge(&mut self, other: &Samples) {
        self.sum_ms = self.sum_ms.saturating_add(other.sum_ms);
        self.count = self.count.saturating_add(other.count);
        self.min_ms = self.min_ms.min(other.min_ms);
        self.max_ms = self.max_ms.max(other.max_ms);
        self.drops = self.drops.saturating_add(other.drops);
        self.inflight_max = self.inflight_max.max(other.inflight_max);
        self.clean = self.clean.saturating_add(other.clean);
        self.overloads = self.overloads.saturating_add(other.overloads);
        self.overload_to = Samples::overload_join(self.overload_to, other.overload_to);
        self.reserved = self.reserved.saturating_add(other.reserved);
        self.over_share = self.over_share.saturating_add(other.over_share);
        self.full = self.full.saturating_add(other.full);
        self.heavy = self.heavy.saturating_add(other.heavy);
        self.heavy_sum_ms = self.heavy_sum_ms.saturating_add(other.heavy_sum_ms);
        self.heavy_min_ms = self.heavy_min_ms.min(other.heavy_min_ms);
        self.heavy_max_ms = self.heavy_max_ms.max(other.heavy_max_ms);
    }

    /// Whether nothing was recorded but sheds at the full limit ([`Samples::full`]): those
    /// matter only beside an interval's answers, and a worker that sheds flushes them anyway.
    pub fn is_empty(&self) -> bool {
        self.count == 0
            && self.drops == 0
            && self.inflight_max == 0
            && self.overloads == 0
            && self.reserved == 0
            && self.over_share == 0
            && self.heavy == 0
    }

    /// Mean latency in milliseconds, `None` without samples.
    pub fn mean_ms(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ms as f64 / f64::from(self.count))
    }
}

/// Adds one latency to a sum, count, least and most (wrapping, as [`Samples::add`] says).
#[inline]
fn fold(latency_ms: u64, sum: &mut u64, count: &mut u32, min: &mut u32, max: &mut u32) {
    let ms = u32::try_from(latency_ms).unwrap_or(u32::MAX);
    *sum = sum.wrapping_add(latency_ms);
    *count = count.wrapping_add(1);
    *min = (*min).min(ms);
    *max = (*max).max(ms);
}
