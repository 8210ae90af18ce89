//! A worker's count of the ordinary sessions that wait for a first byte, by when their bound
//! runs out: per upstream, a ring of buckets a grain wide, each counting the sessions whose
//! deadline falls in it. Nothing per session is kept here — a session's context word holds
//! when its client's last bytes went up ([`super::Plain`]), which says its bucket — so a
//! session costs an increment when it starts to wait and a decrement when it is answered, and
//! one timer of the worker's serves every upstream.
//!
//! A bucket is swept once its grain is past: its sessions were silent past their bound (each
//! late by less than a grain). A session learns that it was judged so from its own word: its
//! bucket is at or before the upstream's last swept one ([`Left::Judged`]); one that leaves
//! after its bound ran out but before the sweep is told so ([`Left::Late`]), so that a reply
//! or an end a little after the bound is judged as silence, as the bound says.
//!
//! The probe keeps its own place in the [`super::Table`]: a ticket to give back is more than
//! a count.

/// Buckets per ring: a bound spans [`GRAINS`] of them, so a timer up to this many more late
/// still finds every bucket in place.
const RING: u64 = 32;
/// A grain is the power of two next to a sixteenth of the bound (a bucket is then a shift
/// away): a silent session is judged less than an eighth of its bound late, and a bound spans
/// at most 16 grains.
const GRAINS: u64 = 16;

#[derive(Clone, Debug)]
struct Ring {
    /// The bound (0: off) and the grain, in milliseconds, and the grain's log₂.
    bound_ms: u64,
    grain_ms: u64,
    shift: u32,
    /// Every bucket up to this one (a number of grains since 0) has been swept.
    swept: u64,
    counts: [u32; RING as usize],
    /// The latest a session of each bucket began to wait.
    latest: [u64; RING as usize],
    waiting: u32,
}

impl Ring {
    #[inline]
    fn bucket(&self, sent_ms: u64) -> u64 {
        (sent_ms + self.bound_ms + self.grain_ms - 1) >> self.shift
    }
}

/// Sessions whose bound ran out in one bucket, silent since no later than `sent_ms` (the
/// latest any session of the bucket began to wait: an answer to anyone after that, and every
/// one of them had an answer to wait for after its own last bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Silence {
    /// The upstream's index.
    pub upstream: u16,
    /// How many sessions.
    pub sessions: u32,
    /// The latest their clients' last bytes went up.
    pub sent_ms: u64,
}

/// How a waiting session left the wheel ([`Wheel::leave`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// Before its bound ran out: judge it by what it says.
    InTime,
    /// After its bound ran out, before its bucket was swept: it kept silent past its bound.
    Late,
    /// Its bucket was swept: [`Wheel::expire`] judged it silent already.
    Judged,
}

/// What [`Wheel::wait`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// The session waits; the wheel must be swept by this instant.
    Until(u64),
    /// The upstream counts no silence (`first_byte=off`, or not one the wheel was made for).
    Off,
    /// The wheel was not swept for longer than its ring spans: sweep it, then wait again.
    Behind,
}

/// See the module's documentation.
#[derive(Clone, Debug)]
pub struct Wheel {
    rings: Vec<Ring>,
}

impl Wheel {
    /// A wheel for upstreams whose `first_byte` bounds are `bounds` (0: off), by index.
    pub fn new(bounds: &[u32]) -> Wheel {
        Wheel {
            rings: bounds
                .iter()
                .map(|&b| {
                    let grain = u64::from(b).div_ceil(GRAINS).max(1).next_power_of_two();
                    Ring {
                        bound_ms: u64::from(b),
                        grain_ms: grain,
                        shift: grain.trailing_zeros(),
                        swept: 0,
                        counts: [0; RING as usize],
                        latest: [0; RING as usize],
                        waiting: 0,
                    }
                })
                .collect(),
        }
    }

    /// A session of `upstream` whose client's last bytes went up at `sent_ms` (the worker's
    /// clock now) starts to wait for a byte back.
    #[inline]
    pub fn wait(&mut self, upstream: u16, sent_ms: u64) -> Waited {
        let Some(r) = self.rings.get_mut(usize::from(upstream)) else {
            return Waited::Off;
        };
        if r.bound_ms == 0 {
            return Waited::Off;
        }
        if r.waiting == 0 {
            // Nothing to sweep: the ring may as well be swept up to now.
            r.swept = r.swept.max(sent_ms >> r.shift);
        }
        let b = r.bucket(sent_ms);
        if b <= r.swept || b - r.swept >= RING {
            return Waited::Behind;
        }
        let i = (b % RING) as usize;
        r.counts[i] += 1;
        r.latest[i] = r.latest[i].max(sent_ms);
        r.waiting += 1;
        Waited::Until(b * r.grain_ms)
    }

    /// The session that began to wait at `sent_ms` was answered, or ended, or its client sent
    /// again, at `now_ms`: it leaves, and says whether it was in time.
    #[inline]
    pub fn leave(&mut self, upstream: u16, sent_ms: u64, now_ms: u64) -> Left {
        let Some(r) = self.rings.get_mut(usize::from(upstream)) else {
            return Left::InTime;
        };
        if r.bound_ms == 0 {
            return Left::InTime;
        }
        let b = r.bucket(sent_ms);
        if b <= r.swept {
            return Left::Judged;
        }
        let c = &mut r.counts[(b % RING) as usize];
        if *c > 0 {
            *c -= 1;
            r.waiting -= 1;
        }
        // A count of 0 is a session this wheel did not count (a word from before it was
        // made): it is judged as any other.
        if now_ms >= sent_ms + r.bound_ms {
            Left::Late
        } else {
            Left::InTime
        }
    }

    /// Sweeps every bucket whose grain is past at `now_ms` into `out`, each upstream's in
    /// order.
    pub fn expire(&mut self, now_ms: u64, out: &mut Vec<Silence>) {
        for (u, r) in self.rings.iter_mut().enumerate() {
            if r.bound_ms == 0 {
                continue;
            }
            let to = now_ms >> r.shift;
            if to <= r.swept {
                continue;
            }
            // Every bucket in use lies within a ring's span after the last swept one.
            let mut b = r.swept + 1;
            while b <= to && b <= r.swept + RING && r.waiting > 0 {
                let c = core::mem::take(&mut r.counts[(b % RING) as usize]);
                let latest = core::mem::take(&mut r.latest[(b % RING) as usize]);
                if c > 0 {
                    r.waiting -= c;
                    out.push(Silence {
                        upstream: u as u16,
                        sessions: c,
                        sent_ms: latest,
                    });
                }
                b += 1;
            }
            r.swept = to;
        }
    }

    /// When the earliest waiting session's bucket is due, if any session waits.
    pub fn next_due(&self) -> Option<u64> {
        self.rings
            .iter()
            .filter(|r| r.waiting > 0)
            .filter_map(|r| {
                (r.swept + 1..=r.swept + RING)
                    .find(|&b| r.counts[(b % RING) as usize] > 0)
                    .map(|b| b * r.grain_ms)
            })
            .min()
    }

    /// Sessions waiting now.
    pub fn len(&self) -> usize {
        self.rings.iter().map(|r| r.waiting as usize).sum()
    }

    /// Whether no session waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
