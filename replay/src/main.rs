//! `cb-replay`: replays nginx access logs through the circuit breaker's core. See the
//! README's "Choosing the numbers".

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use cb_replay::conf::Specs;
use cb_replay::line;
use cb_replay::report::{self, BadLine};
use cb_replay::sim::Replay;
use cb_replay::units::parse_msec;

const USAGE: &str =
    "usage: cb-replay [--config NGINX_T_OUTPUT] [--breaker '[UPSTREAM[:ROUTE]=]PARAMS']...
                 [--set PARAM=V1,V2,...]... [--json] [--timeline DIR] [--transitions FILE|-]
                 [--seed N] [--reorder TIME] LOG... (plain or gzip; - for stdin)";

/// How many unparseable lines are shown.
const SHOW_BAD: usize = 5;

struct Args {
    specs: Specs,
    sets: Vec<(String, Vec<String>)>,
    json: bool,
    timeline: Option<PathBuf>,
    transitions: Option<String>,
    seed: u64,
    horizon_ms: u64,
    logs: Vec<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        specs: Specs::default(),
        sets: Vec::new(),
        json: false,
        timeline: None,
        transitions: None,
        seed: 1,
        horizon_ms: 30_000,
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
            "-h" | "--help" => return Err(USAGE.into()),
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
    Ok(a)
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

fn open(path: &str) -> Result<Box<dyn BufRead>, String> {
    let raw: Box<dyn Read> = if path == "-" {
        Box::new(io::stdin().lock())
    } else {
        Box::new(File::open(path).map_err(|e| format!("{path}: {e}"))?)
    };
    let mut r = BufReader::with_capacity(1 << 16, raw);
    let gz = r
        .fill_buf()
        .map_err(|e| format!("{path}: {e}"))?
        .starts_with(&[0x1f, 0x8b]);
    Ok(if gz {
        Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::bufread::MultiGzDecoder::new(r),
        ))
    } else {
        Box::new(r)
    })
}

fn replay(a: Args) -> Result<String, String> {
    let sets = combinations(&a.sets);
    for spec in a.specs.all() {
        for set in &sets {
            spec.config(set)?;
        }
    }
    let mut r = Replay::new(a.specs, sets, a.seed, a.horizon_ms);
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
    let mut buf = Vec::with_capacity(4096);
    for path in &a.logs {
        let mut input = open(path)?;
        let mut n = 0u64;
        loop {
            buf.clear();
            let got = input
                .read_until(b'\n', &mut buf)
                .map_err(|e| format!("{path}: {e}"))?;
            if got == 0 {
                break;
            }
            n += 1;
            r.counts.lines += 1;
            let bytes = buf.strip_suffix(b"\n").unwrap_or(&buf);
            let text = String::from_utf8_lossy(bytes);
            match line::parse(&text) {
                Ok(l) => r.feed(&l, n)?,
                Err(e) => {
                    r.counts.bad += 1;
                    if bad.len() < SHOW_BAD {
                        let at = if many {
                            format!("{path}:{n}")
                        } else {
                            n.to_string()
                        };
                        bad.push((at, e.to_string()));
                    }
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
    Ok(if a.json {
        format!("{:#}\n", report::json(&r, &bad))
    } else {
        report::text(&r, &bad)
    })
}

fn main() -> ExitCode {
    let result = args().and_then(replay);
    match result {
        Ok(out) => {
            let mut o = io::stdout().lock();
            if o.write_all(out.as_bytes()).and_then(|_| o.flush()).is_err() {
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
