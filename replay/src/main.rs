//! `cb-replay`: replays nginx access logs through the circuit breaker's core. See the
//! README's "Choosing the numbers".

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use cb_replay::conf::Specs;
use cb_replay::input::{self, Got, DEFAULT_MAX_LINE};
use cb_replay::line;
use cb_replay::report::{self, BadLine};
use cb_replay::sim::{Replay, DEFAULT_MAX_BREAKERS, MAX_WAITING};
use cb_replay::units::{parse_msec, parse_size};
use circuit_breaker_core::breaker::jitter;

const USAGE: &str =
    "usage: cb-replay [--config NGINX_T_OUTPUT] [--breaker '[UPSTREAM[:ROUTE]=]PARAMS']...
                 [--set PARAM=V1,V2,...]... [--jitter-key FILE] [--json] [--timeline DIR]
                 [--transitions FILE|-] [--seed N] [--reorder TIME] [--max-line SIZE]
                 [--max-breakers N] LOG...
       cb-replay --help | --version";

/// `--help`: the usage, every option, examples, and what the report says.
const HELP: &str = include_str!("help.txt");

/// How many unparseable lines are shown.
const SHOW_BAD: usize = 5;

struct Args {
    specs: Specs,
    sets: Vec<(String, Vec<String>)>,
    json: bool,
    timeline: Option<PathBuf>,
    transitions: Option<String>,
    seed: u64,
    jitter_key: Option<String>,
    horizon_ms: u64,
    max_line: usize,
    max_breakers: usize,
    logs: Vec<String>,
}

/// What the command line asks for.
enum Asked {
    Replay(Box<Args>),
    Help,
    Version,
}

/// The arguments.
fn args() -> Result<Asked, String> {
    let mut a = Args {
        specs: Specs::default(),
        sets: Vec::new(),
        json: false,
        timeline: None,
        transitions: None,
        seed: 1,
        jitter_key: None,
        horizon_ms: 30_000,
        max_line: DEFAULT_MAX_LINE,
        max_breakers: DEFAULT_MAX_BREAKERS,
        logs: Vec::new(),
    };
    let mut breakers = Vec::new();
    let mut config = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--config" => config = Some(value("--config")?),
            "--breaker" => breakers.push(value("--breaker")?),
            "--set" => {
                let v = value("--set")?;
                let (k, vs) = v
                    .split_once('=')
                    .ok_or(format!("--set wants PARAM=V1,V2,...: \"{v}\""))?;
                a.sets
                    .push((k.to_owned(), vs.split(',').map(str::to_owned).collect()));
            }
            "--json" => a.json = true,
            "--jitter-key" => a.jitter_key = Some(value("--jitter-key")?),
            "--timeline" => a.timeline = Some(value("--timeline")?.into()),
            "--transitions" => a.transitions = Some(value("--transitions")?),
            "--seed" => {
                a.seed = value("--seed")?
                    .parse()
                    .map_err(|_| "--seed wants a number".to_string())?
            }
            "--reorder" => {
                let v = value("--reorder")?;
                a.horizon_ms = parse_msec(&v).filter(|&ms| ms <= 600_000).ok_or(format!(
                    "--reorder wants a time up to 10m (\"30s\"): \"{v}\""
                ))?
            }
            "--max-line" => {
                let v = value("--max-line")?;
                a.max_line = parse_size(&v)
                    .filter(|&n| (1..=1 << 30).contains(&n))
                    .ok_or(format!(
                        "--max-line wants a size up to 1024m (\"64k\"): \"{v}\""
                    ))? as usize
            }
            "--max-breakers" => {
                let v = value("--max-breakers")?;
                a.max_breakers = v
                    .parse()
                    .ok()
                    .filter(|&n| (1..=1 << 24).contains(&n))
                    .ok_or(format!(
                        "--max-breakers wants a number from 1 to 16777216: \"{v}\""
                    ))?
            }
            "-h" | "--help" => return Ok(Asked::Help),
            "-V" | "--version" => return Ok(Asked::Version),
            s if s.starts_with("--") => return Err(format!("unknown option {s}\n{USAGE}")),
            _ => a.logs.push(arg),
        }
    }
    if let Some(path) = config {
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        let n = a.specs.add_nginx_t(&text)?;
        if n == 0 && breakers.is_empty() {
            return Err(format!("{path}: no upstream has \"circuit_breaker\""));
        }
        if a.jitter_key.is_none() {
            a.jitter_key = jitter_key_of(&text);
        }
    }
    for b in &breakers {
        a.specs.add_option(b)?;
    }
    if a.specs.all().next().is_none() {
        return Err(format!("no breaker: give --config or --breaker\n{USAGE}"));
    }
    if a.logs.is_empty() {
        return Err(format!("no log\n{USAGE}"));
    }
    // The logs are open together (merged): standard input twice would lock it twice.
    if a.logs.iter().filter(|l| *l == "-").count() > 1 {
        return Err("- (standard input) may be given once".to_owned());
    }
    Ok(Asked::Replay(Box::new(a)))
}

/// The file `circuit_breaker_jitter_key` names in `nginx -T`'s output, if any (the last one:
/// nginx refuses a second).
fn jitter_key_of(text: &str) -> Option<String> {
    text.lines().rev().find_map(|l| {
        let l = l.split('#').next()?.trim();
        let rest = l.strip_prefix("circuit_breaker_jitter_key")?;
        let path = rest.trim().strip_suffix(';')?.trim();
        let path = path.trim_matches(|c| c == '"' || c == '\'');
        (!path.is_empty() && rest.starts_with(char::is_whitespace)).then(|| path.to_owned())
    })
}

/// The seed in a `circuit_breaker_jitter_key` file, read as the module reads it: 32 bytes,
/// or 64 hexadecimal digits.
fn read_jitter_key(path: &str) -> Result<[u8; 32], String> {
    let bytes = std::fs::read(path).map_err(|e| format!("--jitter-key {path}: {e}"))?;
    if bytes.len() == 32 {
        let mut s = [0u8; 32];
        s.copy_from_slice(&bytes);
        return Ok(s);
    }
    std::str::from_utf8(&bytes)
        .map_err(|_| "not text".to_owned())
        .and_then(|t| jitter::parse_seed(t).map_err(str::to_owned))
        .map_err(|e| format!("--jitter-key {path}: {e}, or 32 bytes"))
}

/// Every combination of the `--set` values, the first parameter's varying slowest.
fn combinations(sets: &[(String, Vec<String>)]) -> Vec<Vec<(String, String)>> {
    let mut out = vec![Vec::new()];
    for (k, vs) in sets {
        out = out
            .into_iter()
            .flat_map(|c: Vec<(String, String)>| {
                vs.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((k.clone(), v.clone()));
                    c
                })
            })
            .collect();
    }
    out
}

/// Replays the logs; the replay, and the unparseable lines it shows.
fn replay(a: Args) -> Result<(Replay, Vec<BadLine>), String> {
    let sets = combinations(&a.sets);
    for spec in a.specs.all() {
        for set in &sets {
            spec.check(set)?;
        }
    }
    let mut r = Replay::new(a.specs, sets, a.seed, a.horizon_ms);
    r.max_breakers = a.max_breakers;
    if let Some(path) = &a.jitter_key {
        r.set_jitter_seed(read_jitter_key(path)?);
    }
    if let Some(dir) = a.timeline {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        r.keep_timelines(dir);
    }
    match a.transitions.as_deref() {
        Some("-") => r.transitions = Some(Box::new(io::BufWriter::new(io::stdout()))),
        Some(p) => {
            r.transitions = Some(Box::new(io::BufWriter::new(
                File::create(p).map_err(|e| format!("{p}: {e}"))?,
            )))
        }
        None => {}
    }
    let mut bad: Vec<BadLine> = Vec::new();
    let many = a.logs.len() > 1;
    // Each bound is said once, when first hit; the report counts every line it refused.
    let (mut said_long, mut said_cap, mut said_full) = (false, false, false);
    let inputs = a
        .logs
        .iter()
        .map(|p| input::open(p))
        .collect::<Result<_, _>>()?;
    // Read as one stream in time order: an http and a stream log of the same hours, read one
    // after the other, would run the second's events late, at the first's last instant.
    let mut merged = input::Merge::new(inputs, a.max_line);
    loop {
        let next = merged
            .next_line()
            .map_err(|(i, e)| format!("{}: {e}", a.logs[i]))?;
        let Some(input::Next { log, n, got, text }) = next else {
            break;
        };
        let at = |n: u64| {
            if many {
                format!("{}:{n}", a.logs[log])
            } else {
                n.to_string()
            }
        };
        r.counts.lines += 1;
        if got == Got::TooLong {
            r.counts.too_long += 1;
            if !said_long {
                said_long = true;
                eprintln!(
                    "cb-replay: line {} is longer than {} bytes (--max-line): not replayed, \
                     nor any other that long",
                    at(n),
                    a.max_line
                );
            }
            continue;
        }
        let text = String::from_utf8_lossy(text);
        match line::parse(&text) {
            Ok(l) => {
                r.feed(&l, n)?;
                if !said_cap && r.counts.over_max_breakers > 0 {
                    said_cap = true;
                    eprintln!(
                        "cb-replay: line {}: {:?} would be breaker {} (--max-breakers): not \
                         replayed, nor any line of a breaker not seen before",
                        at(n),
                        match l.session {
                            Some(_) => cb_replay::sim::stream_key(l.upstream),
                            None => format!("{}/{}", l.upstream, l.route),
                        },
                        a.max_breakers + 1
                    );
                }
                if !said_full && r.counts.early > 0 {
                    said_full = true;
                    eprintln!(
                        "cb-replay: line {}: {MAX_WAITING} requests within --reorder: the \
                         oldest run early from here on when there are more",
                        at(n)
                    );
                }
            }
            Err(e) => {
                r.counts.bad += 1;
                if bad.len() < SHOW_BAD {
                    bad.push((at(n), e.to_string()));
                }
            }
        }
    }
    r.finish();
    if let Some(w) = r.transitions.as_mut() {
        w.flush().map_err(|e| format!("transitions: {e}"))?;
    }
    if let Some(e) = r.errors.first() {
        return Err(format!("timeline: {e}"));
    }
    Ok((r, bad))
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(Asked::Replay(a)) => Ok(*a),
        Ok(Asked::Help) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Ok(Asked::Version) => {
            println!("cb-replay {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => Err(e),
    };
    let result = a.and_then(|a| {
        let json = a.json;
        replay(a).map(|(r, bad)| (json, r, bad))
    });
    match result {
        Ok((json, r, bad)) => {
            let mut o = io::BufWriter::new(io::stdout().lock());
            let written = if json {
                report::write_json(&mut o, &r, &bad)
            } else {
                o.write_all(report::text(&r, &bad).as_bytes())
            };
            if written.and_then(|_| o.flush()).is_err() {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cb-replay: {e}");
            ExitCode::FAILURE
        }
    }
}
