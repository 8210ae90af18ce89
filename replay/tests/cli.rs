//! The `cb-replay` binary as an operator runs it: gzip'd and plain logs, bad lines reported
//! by number, JSON, timelines, late lines, configuration errors in nginx's words, and the
//! bounds that keep a hostile log's memory flat (a line bomb, a flood of names).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output};

/// A scratch directory, removed when the test ends (passed or not).
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for Dir {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

fn dir(name: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("cb-replay-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cb-replay"))
        .args(args)
        .output()
        .unwrap()
}

fn line(ms: u64, status: u16) -> String {
    let ht = if status == 502 { "-" } else { "0.005" };
    format!(
        "{}.{:03} 0.010 \"api\" \"-\" \"10.0.0.1:80\" \"{status}\" \"0.010\" \"{ht}\"\n",
        ms / 1000,
        ms % 1000
    )
}

/// 40 good requests, 40 failing, 100 good, 100 ms apart, with seven bad lines among them.
fn log() -> String {
    let mut s = String::new();
    for i in 0..180u64 {
        if i % 25 == 3 {
            s.push_str("not a log line\n");
        }
        let status = if (40..80).contains(&i) { 502 } else { 200 };
        s.push_str(&line(1_700_000_000_000 + i * 100, status));
    }
    s
}

#[test]
fn gzip_and_plain_alike_with_bad_lines_by_number() {
    let d = dir("gz");
    let plain = d.join("a.log");
    std::fs::write(&plain, log()).unwrap();
    let gz = d.join("a.log.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    enc.write_all(log().as_bytes()).unwrap();
    enc.finish().unwrap();
    let args = |p: &PathBuf| {
        let o = run(&["--breaker", "open=2s", p.to_str().unwrap()]);
        assert!(o.status.success(), "{o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let (a, b) = (args(&plain), args(&gz));
    assert_eq!(a, b);
    assert!(
        a.starts_with("188 lines: 180 replayed, 8 unparseable"),
        "{a}"
    );
    // The first five, by line number.
    for n in [4, 30, 56, 82, 108] {
        assert!(a.contains(&format!("  line {n}: ")), "{a}");
    }
    assert!(!a.contains("line 134:"), "{a}");
    assert!(
        a.contains("breaker \"api/default\"\n  opened 1 time"),
        "{a}"
    );
}

#[test]
fn json_and_timelines() {
    let d = dir("json");
    let p = d.join("a.log");
    std::fs::write(&p, log()).unwrap();
    let tl = d.join("tl");
    let o = run(&[
        "--breaker",
        "api=open=2s",
        "--set",
        "min_requests=5,100",
        "--json",
        "--timeline",
        tl.to_str().unwrap(),
        p.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["lines"]["replayed"], 180);
    assert_eq!(v["bad_lines"][0]["line"], "4");
    let s = v["settings"].as_array().unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(s[0]["set"]["min_requests"], "5");
    let a = &s[0]["breakers"]["api/default"];
    assert_eq!(a["opens"], 1);
    assert_eq!(
        a["refused"].as_u64().unwrap(),
        a["failures_spared"].as_u64().unwrap() + a["successes_lost"].as_u64().unwrap()
    );
    // The timeline: 18 seconds, each one row, the state open where the failures were.
    let csv = std::fs::read_to_string(tl.join("api_default.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], "second,requests,bad,slow,refused,state");
    assert_eq!(rows.len(), 19, "{csv}");
    assert_eq!(rows[1], "1700000000,10,0,0,0,closed");
    assert!(rows.iter().any(|r| r.ends_with(",open")), "{csv}");
    assert!(rows.last().unwrap().ends_with(",closed"), "{csv}");
}

#[test]
fn a_request_longer_than_the_horizon_is_late() {
    let d = dir("late");
    let p = d.join("a.log");
    let mut s = line(1_700_000_000_000, 200);
    s.push_str(&line(1_700_000_005_000, 200));
    // Past the 1 s horizon: the request that ended at 5 s is run.
    s.push_str(&line(1_700_000_007_000, 200));
    // Started 4.9 s before it ended, before that one: late (its admission, not its record).
    s.push_str("1700000007.100 4.900 \"api\" \"-\" \"10.0.0.1:80\" \"200\" \"4.900\" \"4.000\"\n");
    std::fs::write(&p, s).unwrap();
    let o = run(&["--breaker", "api=", "--reorder", "1s", p.to_str().unwrap()]);
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(
        out.starts_with("4 lines: 4 replayed, 0 unparseable"),
        "{out}"
    );
    assert!(out.contains(", 1 events late"), "{out}");
}

#[test]
fn refused_settings_in_nginx_words() {
    let d = dir("conf");
    let p = d.join("a.log");
    std::fs::write(&p, log()).unwrap();
    let conf = d.join("nginx-T.conf");
    std::fs::write(
        &conf,
        "# configuration file /etc/nginx/nginx.conf:\nhttp {\n    upstream api {\n        \
         server 10.0.0.1:80;\n        circuit_breaker failure_rate=0%;\n    }\n}\n",
    )
    .unwrap();
    let o = run(&["--config", conf.to_str().unwrap(), p.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(
        err.trim_end(),
        "cb-replay: invalid value \"failure_rate=0%\" in \"circuit_breaker\" directive, must be \
         more than 0% in /etc/nginx/nginx.conf:4"
    );
    // A sweep value is checked the same way, before the log is read.
    let o = run(&[
        "--breaker",
        "api=",
        "--set",
        "window=0s,10s",
        p.to_str().unwrap(),
    ]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(
        err.starts_with("cb-replay: invalid value \"window=0s\" in \"circuit_breaker\""),
        "{err}"
    );
}

/// A well-formed line of `up` at `ms`, with `tail` as the operator's own fields after the
/// eighth (which the replay ignores, whatever their length).
fn line_of(ms: u64, up: &str, tail: &str) -> String {
    format!(
        "{}.{:03} 0.010 \"{up}\" \"-\" \"10.0.0.1:80\" \"200\" \"0.010\" \"0.005\"{tail}\n",
        ms / 1000,
        ms % 1000
    )
}

fn gzip(path: &PathBuf, text: &[u8]) {
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::fast(),
    );
    enc.write_all(text).unwrap();
    enc.finish().unwrap();
}

#[test]
fn a_line_bomb_is_refused_said_once_and_counted() {
    let d = dir("bomb");
    let t0 = 1_700_000_000_000;
    let mut s = String::new();
    for i in 0..10 {
        s.push_str(&line_of(t0 + i * 100, "api", ""));
    }
    // Line 11: 4 MB, line 22: just past the bound; both well-formed.
    s.push_str(&line_of(
        t0 + 1000,
        "api",
        &format!(" \"{}\"", "x".repeat(4 << 20)),
    ));
    for i in 0..10 {
        s.push_str(&line_of(t0 + 1100 + i * 100, "api", ""));
    }
    let pad = 65_536 - line_of(t0, "api", " \"\"").len() + 2;
    s.push_str(&line_of(
        t0 + 2100,
        "api",
        &format!(" \"{}\"", "x".repeat(pad)),
    ));
    // At the bound exactly: kept (without its newline).
    let pad = 65_536 - line_of(t0, "api", " \"\"").len() + 1;
    let at_bound = line_of(t0 + 2200, "api", &format!(" \"{}\"", "x".repeat(pad)));
    assert_eq!(at_bound.len(), 65_537);
    s.push_str(&at_bound);
    let plain = d.join("a.log");
    std::fs::write(&plain, &s).unwrap();
    let gz = d.join("a.log.gz");
    gzip(&gz, s.as_bytes());
    let mut outs = Vec::new();
    for p in [&plain, &gz] {
        let o = run(&["--breaker", "open=2s", p.to_str().unwrap()]);
        assert!(o.status.success(), "{o:?}");
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(
            err,
            "cb-replay: line 11 is longer than 65536 bytes (--max-line): not replayed, nor any \
             other that long\n"
        );
        outs.push(String::from_utf8(o.stdout).unwrap());
    }
    assert_eq!(outs[0], outs[1]);
    assert!(
        outs[0].starts_with(
            "23 lines: 21 replayed, 0 unparseable, 0 without an upstream attempt, 0 of upstreams \
             without a breaker, 0 events late; refused: 2 longer than --max-line, 0 of breakers \
             past --max-breakers\n"
        ),
        "{}",
        outs[0]
    );
    assert!(outs[0].contains("\n  21 requests, 0 bad"), "{}", outs[0]);
    let o = run(&["--breaker", "open=2s", "--json", gz.to_str().unwrap()]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["lines"]["too_long"], 2);
    assert_eq!(v["lines"]["replayed"], 21);
    // A longer bound takes them all, and says nothing.
    let o = run(&[
        "--breaker",
        "open=2s",
        "--max-line",
        "8m",
        gz.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    assert!(o.stderr.is_empty(), "{o:?}");
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.starts_with("23 lines: 23 replayed,"), "{out}");
    assert!(!out.contains("refused: "), "{out}");
    let o = run(&[
        "--breaker",
        "open=2s",
        "--max-line",
        "0",
        gz.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
}

#[test]
fn names_past_max_breakers_are_refused_said_once_and_counted() {
    let d = dir("names");
    let t0 = 1_700_000_000_000;
    let mut s = String::new();
    // 20 names, each twice: the first five make breakers, and keep being replayed.
    for round in 0..2 {
        for i in 0..20 {
            s.push_str(&line_of(t0 + round * 1000 + i * 10, &format!("h{i}"), ""));
        }
    }
    let p = d.join("a.log");
    std::fs::write(&p, &s).unwrap();
    let p = p.to_str().unwrap();
    let o = run(&["--breaker", "open=2s", "--max-breakers", "5", p]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        String::from_utf8(o.stderr).unwrap(),
        "cb-replay: line 6: \"h5/default\" would be breaker 6 (--max-breakers): not replayed, \
         nor any line of a breaker not seen before\n"
    );
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(
        out.starts_with(
            "40 lines: 10 replayed, 0 unparseable, 0 without an upstream attempt, 0 of upstreams \
             without a breaker, 0 events late; refused: 0 longer than --max-line, 30 of breakers \
             past --max-breakers\n"
        ),
        "{out}"
    );
    assert_eq!(out.matches("\nbreaker \"").count(), 5, "{out}");
    assert!(out.contains("breaker \"h4/default\"\n"), "{out}");
    let o = run(&[
        "--breaker",
        "open=2s",
        "--max-breakers",
        "5",
        "--set",
        "min_requests=5,10",
        "--json",
        p,
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["lines"]["over_max_breakers"], 30);
    for set in v["settings"].as_array().unwrap() {
        assert_eq!(set["breakers"].as_object().unwrap().len(), 5, "{set}");
    }
    // Names without a breaker take no breaker's place: "api" still gets its own.
    s.push_str(&line_of(t0 + 3000, "api", ""));
    std::fs::write(p, &s).unwrap();
    let o = run(&["--breaker", "api=open=2s", "--max-breakers", "5", p]);
    assert!(o.status.success(), "{o:?}");
    assert!(o.stderr.is_empty(), "{o:?}");
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(
        out.starts_with("41 lines: 1 replayed, 0 unparseable, 0 without an upstream attempt, 40 of upstreams without a breaker, 0 events late\n"),
        "{out}"
    );
    assert!(out.contains("breaker \"api/default\"\n"), "{out}");
    let o = run(&["--breaker", "open=2s", "--max-breakers", "none", p]);
    assert!(!o.status.success());
}

#[test]
fn timelines_of_many_breakers_and_long_names() {
    let d = dir("many-timelines");
    let t0 = 1_700_000_000_000;
    let mut s = String::new();
    for i in 0..100 {
        s.push_str(&line_of(t0 + i * 10, &format!("h{i}"), ""));
    }
    // Longer than a file name may be, but not than a name may be.
    let long = "l".repeat(500);
    s.push_str(&line_of(t0 + 1000, &long, ""));
    s.push_str(&line_of(t0 + 2000, &long, ""));
    // Longer than a name may be.
    s.push_str(&line_of(t0 + 2000, &"l".repeat(513), ""));
    let p = d.join("a.log");
    std::fs::write(&p, &s).unwrap();
    let tl = d.join("tl");
    // Fewer files open at once than there are breakers.
    let o = Command::new("sh")
        .args(["-c", "ulimit -n 32 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_cb-replay"))
        .args(["--breaker", "open=2s", "--timeline"])
        .args([&tl, &p])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(
        out.starts_with("103 lines: 102 replayed, 1 unparseable"),
        "{out}"
    );
    assert!(
        out.contains("  line 103: upstream name longer than 512 bytes\n"),
        "{out}"
    );
    let files: Vec<String> = std::fs::read_dir(&tl)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files.len(), 101);
    let csv = std::fs::read_to_string(tl.join("h7_default.csv")).unwrap();
    assert_eq!(
        csv,
        "second,requests,bad,slow,refused,state\n1700000000,1,0,0,0,closed\n"
    );
    let long_file = files.iter().find(|f| f.starts_with("lll")).unwrap();
    assert!(long_file.len() < 255, "{long_file}");
    let csv = std::fs::read_to_string(tl.join(long_file)).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
}

#[test]
fn help_says_every_option_and_succeeds() {
    let o = run(&["--help"]);
    assert!(o.status.success(), "{o:?}");
    let text = String::from_utf8(o.stdout).unwrap();
    for option in [
        "--config",
        "--breaker",
        "--set",
        "--jitter-key",
        "--json",
        "--transitions",
        "--timeline",
        "--seed",
        "--reorder",
        "--max-line",
        "--max-breakers",
        "log_format circuit_breaker_replay",
        "$circuit_breaker_msec",
        "refused live",
        "Examples:",
    ] {
        assert!(
            text.contains(option),
            "--help does not say {option}:\n{text}"
        );
    }
    assert_eq!(run(&["-h"]).stdout, text.as_bytes());
    // help2man makes the Debian package's manual page from this: its synopsis is the
    // "Usage:" line, its options the indented "--" lines.
    assert!(text.starts_with("Usage: cb-replay "), "{text}");
    assert!(text.contains("--version"), "{text}");
}

#[test]
fn version_is_the_release() {
    for flag in ["--version", "-V"] {
        let o = run(&[flag]);
        assert!(o.status.success(), "{o:?}");
        assert_eq!(
            String::from_utf8(o.stdout).unwrap(),
            format!("cb-replay {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}

/// A line of the full format: judged at `at` (the module's clock), recorded `took` ms later;
/// refused (no attempt, the breaker open) when `status` is 0.
fn module_line(at: u64, took: u64, status: u16) -> String {
    let wall = 1_700_000_000_000 + at + took;
    if status == 0 {
        return format!(
            "{}.{:03} 0.000 \"api\" \"-\" \"-\" \"-\" \"-\" \"-\" \"open\" \"{at}\"\n",
            wall / 1000,
            wall % 1000
        );
    }
    let ht = if status == 502 { "-" } else { "0.005" };
    format!(
        "{}.{:03} 0.{took:03} \"api\" \"-\" \"10.0.0.1:80\" \"{status}\" \"0.{took:03}\" \"{ht}\" \
         \"closed\" \"{at}+{took}\"\n",
        wall / 1000,
        wall % 1000
    )
}

#[test]
fn refused_lines_are_counted_as_refused_not_unparseable() {
    let d = dir("refused");
    let mut s = String::new();
    // 20 good, 20 failing: the live breaker opens; 30 refused; then good again.
    for i in 0..40u64 {
        s.push_str(&module_line(
            5_000 + i * 100,
            10,
            if i < 20 { 200 } else { 502 },
        ));
    }
    for i in 40..70u64 {
        s.push_str(&module_line(5_000 + i * 100, 0, 0));
    }
    for i in 70..200u64 {
        s.push_str(&module_line(5_000 + i * 100, 10, 200));
    }
    let log = d.join("a.log");
    std::fs::write(&log, s).unwrap();
    let o = run(&[
        "--breaker",
        "open=5s jitter=0%",
        "--json",
        log.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["lines"]["unparseable"], 0, "{v}");
    assert_eq!(v["lines"]["refused_live"], 30, "{v}");
    assert_eq!(v["lines"]["replayed"], 200, "{v}");
    assert_eq!(v["lines"]["no_attempt"], 0, "{v}");
    assert_eq!(v["lines"]["module_clock"], 200, "{v}");
    let b = &v["settings"][0]["breakers"]["api/default"];
    assert_eq!(b["refused_live"], 30, "{b}");
    // The replayed breaker opens as the live one did and refuses them too.
    assert_eq!(b["refused_live_let_through"], 0, "{b}");
    assert_eq!(b["opens"], 1, "{b}");
    // Only requests that reached the origin are recorded.
    assert_eq!(b["requests"], 170, "{b}");
    let text =
        String::from_utf8(run(&["--breaker", "open=5s jitter=0%", log.to_str().unwrap()]).stdout)
            .unwrap();
    assert!(
        text.starts_with("200 lines: 200 replayed (30 refused live), 0 unparseable"),
        "{text}"
    );
    assert!(
        text.contains("times: the module's ($circuit_breaker_msec)"),
        "{text}"
    );
    assert!(
        text.contains("refused live 30: refused again by the replay 30, let through 0"),
        "{text}"
    );
}

#[test]
fn transitions_in_local_time_with_seconds_since_the_start() {
    let d = dir("times");
    let log = d.join("a.log");
    std::fs::write(&log, log_text()).unwrap();
    let out = d.join("t.txt");
    let o = Command::new(env!("CARGO_BIN_EXE_cb-replay"))
        .env("TZ", "UTC")
        .args(["--breaker", "open=2s jitter=0%", "--transitions"])
        .arg(&out)
        .arg(&log)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let t = std::fs::read_to_string(&out).unwrap();
    let first = t.lines().next().unwrap();
    // The 10th failure in a row (line 50 of 180 plus two bad lines before): 4.9 s after the
    // first request's start (0.010 s before its end).
    let words: Vec<&str> = first.splitn(4, ' ').collect();
    assert_eq!(words[1], "2023-11-14T22:13:24.900+00:00", "{t}");
    assert_eq!(words[2], "+4.910", "{t}");
    assert!(
        words[3].starts_with("circuit breaker \"api/default\" opened:"),
        "{t}"
    );
}

fn log_text() -> String {
    log()
}

/// A log of an outage at the module's times, with probes: the transitions a seed gives.
fn jittered_log() -> String {
    let mut s = String::new();
    for i in 0..1200u64 {
        let status = if (100..700).contains(&i) { 502 } else { 200 };
        s.push_str(&module_line(5_000 + i * 50, 10, status));
    }
    s
}

fn transitions_with(d: &Dir, extra: &[&str]) -> String {
    let log = d.join("j.log");
    std::fs::write(&log, jittered_log()).unwrap();
    let out = d.join("t.txt");
    let mut args = vec![
        "--breaker",
        "open=2s jitter=50% probe_interval=500ms probes=2",
    ];
    args.extend_from_slice(extra);
    let o = Command::new(env!("CARGO_BIN_EXE_cb-replay"))
        .args(&args)
        .arg("--transitions")
        .arg(&out)
        .arg(&log)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    std::fs::read_to_string(&out).unwrap()
}

#[test]
fn a_jitter_key_fixes_the_draws_and_another_moves_them() {
    let d = dir("seed");
    let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    std::fs::write(d.join("hex.key"), format!("{hex}\n")).unwrap();
    let raw: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(0x11) ^ (i >> 4)).collect();
    std::fs::write(d.join("raw.key"), &raw).unwrap();
    std::fs::write(d.join("other.key"), "ff".repeat(32)).unwrap();
    let key = |name: &str| d.join(name).to_str().unwrap().to_owned();
    let a = transitions_with(&d, &["--jitter-key", &key("hex.key")]);
    // The same key: the same draws, whatever the replay's own --seed.
    assert_eq!(
        a,
        transitions_with(&d, &["--jitter-key", &key("hex.key"), "--seed", "7"])
    );
    assert!(a.lines().count() >= 4, "{a}");
    // Another key draws other cooldowns (and so transitions at other times).
    assert_ne!(
        a,
        transitions_with(&d, &["--jitter-key", &key("other.key")])
    );
    // 32 bytes as they are do as well as hex.
    let r = transitions_with(&d, &["--jitter-key", &key("raw.key")]);
    assert!(r.lines().count() >= 4, "{r}");
    // Without a key, the replay's own --seed draws.
    assert_ne!(
        transitions_with(&d, &["--seed", "1"]),
        transitions_with(&d, &["--seed", "2"])
    );
    // A bad key file is refused, saying what it should hold.
    std::fs::write(d.join("bad.key"), "0011").unwrap();
    let log = d.join("j.log");
    let o = run(&[
        "--breaker",
        "open=2s",
        "--jitter-key",
        &key("bad.key"),
        log.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains("64 hexadecimal digits"), "{err}");
}

#[test]
fn the_jitter_key_nginx_t_names_is_read() {
    let d = dir("seed-conf");
    std::fs::write(d.join("k.key"), "ab".repeat(32)).unwrap();
    let conf = format!(
        "# configuration file {0}/nginx.conf:\nhttp {{\n    circuit_breaker_jitter_key {0}/k.key;\n    \
         upstream api {{\n        server 127.0.0.1:1;\n        circuit_breaker open=2s jitter=50% \
         probe_interval=500ms probes=2;\n    }}\n}}\n",
        d.display()
    );
    std::fs::write(d.join("t.conf"), conf).unwrap();
    let log = d.join("j.log");
    std::fs::write(&log, jittered_log()).unwrap();
    let by_conf = d.join("c.txt");
    let o = run(&[
        "--config",
        d.join("t.conf").to_str().unwrap(),
        "--transitions",
        by_conf.to_str().unwrap(),
        log.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("jitter: the live draws"), "{text}");
    let by_option = d.join("o.txt");
    let o = run(&[
        "--config",
        d.join("t.conf").to_str().unwrap(),
        "--jitter-key",
        d.join("k.key").to_str().unwrap(),
        "--transitions",
        by_option.to_str().unwrap(),
        log.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        std::fs::read_to_string(by_conf).unwrap(),
        std::fs::read_to_string(by_option).unwrap()
    );
}
