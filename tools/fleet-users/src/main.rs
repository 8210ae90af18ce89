//! The users of `scripts/fleet-measure`: for each port given, one thread that sends
//! `GET PATH?QUERY&i=I&t=MS` (I: the instance's index, MS: Unix milliseconds when sent) at
//! a fixed rate over one keep-alive connection, and logs each request as
//! `SENT STATUS MILLISECONDS` (status 0: no answer) to `DIR/users-I.log`.
//!
//! ```text
//! fleet-users --ports 20001,20002 --rate 200 --seconds 10 --query status=500 --log DIR
//!             [--path /u] [--first 3] [--spread]
//! ```
//!
//! One request at a time per instance, as a user behind it would: a request that is late
//! for its slot goes at once, and slots more than a second behind are dropped (and counted
//! on stderr), so that a stalled instance is not flooded afterwards. With `--spread` each
//! instance's first request comes at a random point of the first period, so that the
//! instances are not in step. A tool for measurements, not a test: it binds nothing and
//! only connects to 127.0.0.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

struct Opts {
    ports: Vec<u16>,
    rate: f64,
    seconds: f64,
    path: String,
    query: String,
    log: String,
    first: usize,
    spread: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: fleet-users --ports P,P,... --rate R --seconds S --query Q --log DIR \
         [--path /u] [--first I] [--spread]"
    );
    std::process::exit(2)
}

fn opts() -> Opts {
    let mut o = Opts {
        ports: Vec::new(),
        rate: 1.0,
        seconds: 10.0,
        path: "/u".into(),
        query: "x=1".into(),
        log: ".".into(),
        first: 0,
        spread: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--ports" => {
                o.ports = value()
                    .split(',')
                    .map(|p| p.parse().unwrap_or_else(|_| usage()))
                    .collect()
            }
            "--rate" => o.rate = value().parse().unwrap_or_else(|_| usage()),
            "--seconds" => o.seconds = value().parse().unwrap_or_else(|_| usage()),
            "--path" => o.path = value(),
            "--query" => o.query = value(),
            "--log" => o.log = value(),
            "--first" => o.first = value().parse().unwrap_or_else(|_| usage()),
            "--spread" => o.spread = true,
            _ => usage(),
        }
    }
    if o.ports.is_empty() || o.rate <= 0.0 {
        usage();
    }
    o
}

/// A number in [0, 1) from `seed` (splitmix64's finalizer): the first request's offset
/// needs no more.
fn jitter(seed: u64) -> f64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// One request on `conn` (opened if needed): the status, or `None` when there was no
/// whole answer (the connection is then dropped).
fn request(conn: &mut Option<BufReader<TcpStream>>, port: u16, target: &str) -> Option<u16> {
    if conn.is_none() {
        let s = TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_nodelay(true).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
        *conn = Some(BufReader::new(s));
    }
    let r = conn.as_mut()?;
    let head = format!("GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let answer = (|| {
        r.get_mut().write_all(head.as_bytes()).ok()?;
        let mut line = String::new();
        r.read_line(&mut line).ok()?;
        let status: u16 = line.split(' ').nth(1)?.parse().ok()?;
        let (mut length, mut close) = (0usize, false);
        loop {
            line.clear();
            if r.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let lower = l.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().ok()?;
            } else if lower.starts_with("connection:") && lower.contains("close") {
                close = true;
            }
        }
        let mut body = vec![0u8; length];
        r.read_exact(&mut body).ok()?;
        Some((status, close))
    })();
    match answer {
        Some((status, close)) => {
            if close {
                *conn = None;
            }
            Some(status)
        }
        None => {
            *conn = None;
            None
        }
    }
}

fn user(i: usize, port: u16, o: &Opts, start: Instant) -> u64 {
    let path = format!("{}/users-{i}.log", o.log);
    let mut log = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        Ok(f) => std::io::LineWriter::new(f),
        Err(e) => {
            eprintln!("fleet-users: {path}: {e}");
            return 0;
        }
    };
    let period = 1.0 / o.rate;
    let offset = if o.spread {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        jitter(now ^ (i as u64) << 48 ^ u64::from(port) << 32) * period
    } else {
        0.0
    };
    let mut conn = None;
    let mut dropped = 0u64;
    let mut k = 0u64;
    loop {
        let at = offset + k as f64 * period;
        if at >= o.seconds {
            break;
        }
        let now = start.elapsed().as_secs_f64();
        if now < at {
            std::thread::sleep(Duration::from_secs_f64(at - now));
        } else if now - at > 1.0 {
            // More than a second behind: give up the slots in between.
            let skip = ((now - at - 1.0) / period).ceil().max(1.0) as u64;
            dropped += skip;
            k += skip;
            continue;
        }
        let sent = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let target = format!("{}?{}&i={i}&t={}", o.path, o.query, sent.as_millis());
        let t0 = Instant::now();
        let status = request(&mut conn, port, &target).unwrap_or(0);
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        let _ = writeln!(log, "{:.3} {status} {ms:.3}", sent.as_secs_f64());
        k += 1;
    }
    dropped
}

fn main() {
    let o = opts();
    let start = Instant::now();
    let dropped: u64 = std::thread::scope(|s| {
        let o = &o;
        let handles: Vec<_> = o
            .ports
            .iter()
            .enumerate()
            .map(|(j, &port)| s.spawn(move || user(o.first + j, port, o, start)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
    });
    if dropped > 0 {
        eprintln!("fleet-users: {dropped} requests dropped, more than a second behind");
    }
}
