//! Typed breaker parameters as they live in shared memory.

/// A set of failure classes (`circuit_breaker_failure`), one bit per class.
///
/// Bits 0..=99 are `http_500`..`http_599`; the named classes follow, then the gRPC ones. Two `u64` words rather
/// than a `u128`, so that structs holding it need only 8-byte alignment (nginx pools give no
/// more).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FailureSet(pub [u64; 2]);

/// One outcome class of an upstream attempt that `circuit_breaker_failure` can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// Connect, reset or read errors (no usable response).
    Error,
    /// The upstream timed out.
    Timeout,
    /// The upstream sent an invalid or incomplete header.
    InvalidHeader,
    /// A 5xx status, 500..=599 (503 with `Retry-After` is [`FailureClass::Http503RetryAfter`]).
    Http5xx(u16),
    /// 429 Too Many Requests.
    Http429,
    /// A 503 that carried `Retry-After`.
    Http503RetryAfter,
    /// No live server in the pool (never named: always a failure, see
    /// [`Ending::NoLive`](super::Ending::NoLive)).
    NoLive,
    /// A gRPC answer whose `grpc-status` says the server failed (see [`GrpcCode`]).
    Grpc(GrpcCode),
}

/// The `grpc-status` codes a class may name: those that say the server (or what stands behind
/// it) failed. The others (`OK`, and those a client causes: `CANCELLED`,
/// `INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`, `PERMISSION_DENIED`,
/// `FAILED_PRECONDITION`, `ABORTED`, `OUT_OF_RANGE`, `UNIMPLEMENTED`, `UNAUTHENTICATED`)
/// never count against a server, whatever is configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrpcCode {
    /// 2 `UNKNOWN`: what gRPC servers answer for an unhandled exception.
    Unknown,
    /// 4 `DEADLINE_EXCEEDED`.
    DeadlineExceeded,
    /// 8 `RESOURCE_EXHAUSTED`: the server says it is saturated (an overload signal; not a
    /// failure by default).
    ResourceExhausted,
    /// 13 `INTERNAL`.
    Internal,
    /// 14 `UNAVAILABLE`.
    Unavailable,
    /// 15 `DATA_LOSS`.
    DataLoss,
}

impl GrpcCode {
    /// Every code a class names, with its number and its name in `circuit_breaker_failure`
    /// (the table [`GrpcCode::of_status`] follows; a test checks they agree).
    pub const ALL: [(GrpcCode, u8, &'static str); 6] = [
        (GrpcCode::Unknown, 2, "grpc_unknown"),
        (GrpcCode::DeadlineExceeded, 4, "grpc_deadline_exceeded"),
        (GrpcCode::ResourceExhausted, 8, "grpc_resource_exhausted"),
        (GrpcCode::Internal, 13, "grpc_internal"),
        (GrpcCode::Unavailable, 14, "grpc_unavailable"),
        (GrpcCode::DataLoss, 15, "grpc_data_loss"),
    ];

    /// The class of a `grpc-status` number; `None` for `OK` and for the codes a client causes.
    #[inline]
    pub fn of_status(code: u8) -> Option<GrpcCode> {
        Some(match code {
            2 => GrpcCode::Unknown,
            4 => GrpcCode::DeadlineExceeded,
            8 => GrpcCode::ResourceExhausted,
            13 => GrpcCode::Internal,
            14 => GrpcCode::Unavailable,
            15 => GrpcCode::DataLoss,
            _ => return None,
        })
    }

    /// The class's name in `circuit_breaker_failure` (`grpc_unavailable`).
    pub fn name(self) -> &'static str {
        GrpcCode::ALL
            .iter()
            .find(|(c, _, _)| *c == self)
            .map_or("grpc", |(_, _, n)| n)
    }

    fn bit(self) -> u32 {
        match self {
            GrpcCode::Unknown => 106,
            GrpcCode::DeadlineExceeded => 107,
            GrpcCode::ResourceExhausted => 108,
            GrpcCode::Internal => 109,
            GrpcCode::Unavailable => 110,
            GrpcCode::DataLoss => 111,
        }
    }
}

/// The names of the `grpc-status` codes a client causes, which no class may name.
pub const GRPC_CLIENT_CODES: [&str; 10] = [
    "grpc_cancelled",
    "grpc_invalid_argument",
    "grpc_not_found",
    "grpc_already_exists",
    "grpc_permission_denied",
    "grpc_failed_precondition",
    "grpc_aborted",
    "grpc_out_of_range",
    "grpc_unimplemented",
    "grpc_unauthenticated",
];

impl FailureClass {
    fn bit(self) -> u32 {
        match self {
            FailureClass::Http5xx(code) => u32::from(code.clamp(500, 599) - 500),
            FailureClass::Http429 => 100,
            FailureClass::Error => 101,
            FailureClass::Timeout => 102,
            FailureClass::InvalidHeader => 103,
            FailureClass::Http503RetryAfter => 104,
            FailureClass::NoLive => 105,
            FailureClass::Grpc(code) => code.bit(),
        }
    }

    /// Parses a class name as written in `circuit_breaker_failure`.
    pub fn parse(name: &str) -> Option<FailureClass> {
        Some(match name {
            "error" => FailureClass::Error,
            "timeout" => FailureClass::Timeout,
            "invalid_header" => FailureClass::InvalidHeader,
            "http_429" => FailureClass::Http429,
            "http_503_retry_after" => FailureClass::Http503RetryAfter,
            _ if name.starts_with("grpc_") => FailureClass::Grpc(
                GrpcCode::ALL
                    .iter()
                    .find(|(_, _, n)| *n == name)
                    .map(|(c, _, _)| *c)?,
            ),
            _ => {
                let code: u16 = name.strip_prefix("http_")?.parse().ok()?;
                if !(500..=599).contains(&code) || name.len() != 8 {
                    return None;
                }
                FailureClass::Http5xx(code)
            }
        })
    }
}

impl FailureSet {
    /// `error timeout invalid_header http_500 http_502 http_503 http_504 grpc_unknown
    /// grpc_deadline_exceeded grpc_unavailable grpc_data_loss`: what nginx itself answers
    /// with a 502 or 504 is a failure (an invalid header becomes nginx's own 502), and so are
    /// the gRPC answers that say the same of a server (only `grpc_pass` answers carry
    /// `grpc-status`; `RESOURCE_EXHAUSTED` is an overload signal, not an outage). Not
    /// `INTERNAL`: gRPC's own libraries answer it to a request message they cannot parse or
    /// decompress (gRPC's status code table: "Error parsing request proto"), so any client
    /// could send it; `grpc_internal` names it for an origin whose own code says it.
    pub const DEFAULT: FailureSet = FailureSet::from_bits(
        (1 << 101)
            | (1 << 102)
            | (1 << 103)
            | (1 << 0)
            | (1 << 2)
            | (1 << 3)
            | (1 << 4)
            | (1 << 106)
            | (1 << 107)
            | (1 << 110)
            | (1 << 111),
    );

    /// The empty set.
    pub const EMPTY: FailureSet = FailureSet([0, 0]);

    /// The set with these bits (see the type's documentation for the bit order).
    pub const fn from_bits(bits: u128) -> FailureSet {
        FailureSet([bits as u64, (bits >> 64) as u64])
    }

    /// The set's bits.
    pub const fn bits(self) -> u128 {
        self.0[0] as u128 | ((self.0[1] as u128) << 64)
    }

    /// Adds one class.
    pub fn insert(&mut self, class: FailureClass) {
        *self = FailureSet::from_bits(self.bits() | 1u128 << class.bit());
    }

    /// Whether the set holds this class.
    pub fn contains(self, class: FailureClass) -> bool {
        self.bits() & (1u128 << class.bit()) != 0
    }
}

/// The parameters of one breaker (`circuit_breaker` directive), durations in milliseconds and
/// rates in hundredths of a percent (`5000` is 50 %), so that they fit shared memory as plain
/// integers and compare exactly on reload.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Classes that count as failures.
    pub failures: FailureSet,
    /// Rolling window length in seconds (1-second buckets), 1..=[`MAX_WINDOW_S`].
    pub window_s: u32,
    /// No decision on fewer requests than this in the window (>= 1).
    pub min_requests: u32,
    /// Open when failures / requests reach this, 0..=10000.
    pub failure_rate: u32,
    /// A call slower than this is slow; 0 disables the slow-call rule.
    pub slow_ms: u32,
    /// Open when slow / requests reach this (only when `slow_ms` > 0), 0..=10000.
    pub slow_rate: u32,
    /// First cooldown before a probe.
    pub open_ms: u32,
    /// Cap for the doubling cooldown (>= `open_ms`).
    pub max_open_ms: u32,
    /// Random spread of cooldowns and probe spacing, 0..=10000.
    pub jitter: u32,
    /// Consecutive good probes needed to close (>= 1).
    pub probes: u32,
    /// At most one probe started per this interval.
    pub probe_interval_ms: u32,
    /// A probe slower than this fails: 0 follows `slow_ms` (a probe slower than `slow` is a
    /// bad probe; none is without `slow`), [`PROBE_LATENCY_OFF`] judges probes by their answer
    /// alone. See [`BreakerConfig::probe_limit_ms`].
    pub probe_latency_ms: u32,
    /// Recovery ramp: after the breaker closes by probes, the share of requests let through
    /// rises linearly from `ramp_start` to 100 % over this many milliseconds; the rest are
    /// turned away as when open ([`Admission::Recovering`](super::Admission::Recovering)).
    /// 0 disables the ramp. An operator's `reset` or `force_close` never ramps.
    pub ramp_ms: u32,
    /// The share let through when a ramp begins, 0..=10000. The default, 10 %, is Envoy's
    /// `slow_start` `min_weight_percent`: at 400 requests/s it still sends 40 a second, so the
    /// fresh window reaches a `min_requests` of 20 within half a second and a relapse reopens
    /// the breaker quickly, while a false recovery costs a tenth of the traffic.
    pub ramp_start: u32,
    /// While suspected by peers ([`Breaker::suspect`](super::Breaker::suspect)), the window
    /// needs only this many requests (at most `min_requests`, at least 1) to trip at the same
    /// rates, and never trips without a local failure (or slow call). The default, 5, is "a
    /// handful": at a 50 % rate it takes 3 local failures out of 5, which a healthy path
    /// with a 1 % background error rate produces by chance about once in 10 000 windows
    /// (`C(5,3) · 0.01³`), and it is a quarter of the default `min_requests`.
    pub suspect_min: u32,
    /// Active probes (`probe_uri`): while open, no user request is ever let through as a
    /// probe; the shell sends its own whenever
    /// [`Breaker::active_probe`](super::Breaker::active_probe) grants it the probe, every
    /// `probe_interval` (jittered), and the breaker stays open until enough of them succeed.
    /// See [`Breaker`](super::Breaker) for how `open` and `max_open` apply then.
    pub active: bool,
    /// The cooldown survives a return to closed: a breaker that trips again less than
    /// `max_open` after it closed by probes waits twice its last base cooldown (up to
    /// `max_open`, jittered as always); one that stayed closed at least `max_open` starts
    /// again from the first cooldown. For per-server breakers ("a jittered cooldown that
    /// doubles on each repeated ejection, capped"): a server that flaps is kept out longer
    /// each time, like Envoy's ejection time growing with the ejection count. Doubling matches
    /// what a failed probe already does, and `max_open` of good standing — as long as the
    /// longest ejection — earns a fresh start without another parameter.
    pub repeat_backoff: bool,
    /// Gateway failures in a row (connect errors, resets, timeouts, "no live upstreams",
    /// `502`–`504`; see [`Verdict::gateway`](super::Verdict::gateway)) that open the breaker
    /// at once, whatever the window's rate; 0 disables.
    pub consecutive: u32,
    /// With active probes, a trip first asks the breaker's own probe, at once, whether the
    /// origin answers, and waits up to this long for it (milliseconds; 0: trips at once). A
    /// stream upstream's silence is the one signal a client can shape (an unfinished command,
    /// a datagram its server drops), so with `circuit_breaker_probe` its breaker opens on a
    /// window only once its probe fails too: a good probe clears the window instead. The
    /// breaker stays closed meanwhile.
    pub confirm_ms: u32,
    /// Evaluate and report, never short-circuit.
    pub dry_run: bool,
}

/// `probe_latency=off`: probes are judged by their answer alone, even with `slow`.
pub const PROBE_LATENCY_OFF: u32 = u32::MAX;

impl BreakerConfig {
    /// The latency above which a probe is a bad one (milliseconds; 0: none): `probe_latency`
    /// when set, else `slow`. A breaker that judges its traffic by latency judges its way back
    /// by it too: an origin still slower than `slow` would trip it again on the slow rate.
    pub fn probe_limit_ms(&self) -> u32 {
        match self.probe_latency_ms {
            PROBE_LATENCY_OFF => 0,
            0 => self.slow_ms,
            ms => ms,
        }
    }
}

/// The longest window a breaker may keep (one bucket per second).
pub const MAX_WINDOW_S: u32 = 300;

/// The default `consecutive`: ten gateway failures in a row, 25 ms of an origin that refuses
/// or hangs at 400 requests/s; scattered gateway errors make such a run once in 10²⁰ requests
/// at 1 %, once in 10¹⁰ at 10 % (HAProxy's `error-limit` is 10 too; Envoy's 5 would trip a
/// 10 % origin every 10⁵ requests).
pub const DEFAULT_CONSECUTIVE: u32 = 10;

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures: FailureSet::DEFAULT,
            window_s: 10,
            min_requests: 20,
            failure_rate: 5000,
            slow_ms: 0,
            slow_rate: 10000,
            open_ms: 30_000,
            max_open_ms: 300_000,
            jitter: 2000,
            probes: 3,
            probe_interval_ms: 1000,
            probe_latency_ms: 0,
            ramp_ms: 0,
            ramp_start: 1000,
            suspect_min: 5,
            active: false,
            repeat_backoff: false,
            consecutive: DEFAULT_CONSECUTIVE,
            confirm_ms: 0,
            dry_run: false,
        }
    }
}
