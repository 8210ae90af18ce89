//! `cb-replay-gen LINES [BREAKERS]`: a made-up access log in the `circuit_breaker_replay`
//! format on stdout, for `scripts/bench-replay`. BREAKERS (default 100) breakers, ten routes
//! to an upstream, 2000 requests a second in all, 1 % background failures, and now and then
//! an incident on one of them (a minute of 80 % failures). The same seed gives the same log.

use std::io::{self, BufWriter, Write};

fn main() {
    let mut args = std::env::args().skip(1);
    let lines: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let breakers: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(100)
        .max(1);
    let mut rng: u64 = 0x5eed;
    let mut next = move || {
        // xorshift64*
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let out = io::stdout().lock();
    let mut w = BufWriter::with_capacity(1 << 16, out);
    let start_ms: u64 = 1_700_000_000_000;
    let names: Vec<(String, String)> = (0..breakers)
        .map(|i| (format!("up{}", i / 10), format!("r{}", i % 10)))
        .collect();
    for i in 0..lines {
        // 2000 a second: half a millisecond apart.
        let end = start_ms + i / 2;
        let r = next();
        let b = (r % breakers) as usize;
        let second = (end - start_ms) / 1000;
        // Every 10 minutes an incident of a minute on one breaker.
        let incident = (second / 600) % breakers == b as u64 && second % 600 < 60;
        let roll = (r >> 32) % 100;
        let (status, header) = match () {
            _ if incident && roll < 80 => ("502", "-"),
            _ if roll == 0 => ("500", "0.004"),
            _ => ("200", "0.004"),
        };
        let rt = 5 + (r >> 48) % 40;
        let (up, route) = &names[b];
        let ok = writeln!(
            w,
            "{}.{:03} 0.{:03} \"{up}\" \"{route}\" \"10.0.{}.{}:8080\" \"{status}\" \"0.{:03}\" \"{header}\"",
            end / 1000,
            end % 1000,
            rt,
            b / 10,
            b % 10 + 1,
            rt.saturating_sub(1),
        );
        if ok.is_err() {
            // The reader went away (a pipe closed): done.
            return;
        }
    }
    let _ = w.flush();
}
