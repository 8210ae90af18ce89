//! The `cb-replay` binary as an operator runs it: gzip'd and plain logs, bad lines reported
//! by number, JSON, timelines, late lines, and configuration errors in nginx's words.

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
