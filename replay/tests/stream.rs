//! `cb-replay` over stream access logs (`circuit_breaker_stream_replay`), end to end: sessions
//! judged as the stream module judges them, through the same core breaker, apart from the
//! http breakers of one run.

use std::path::PathBuf;
use std::process::Command;

/// A scratch directory, removed when the test ends.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dir(name: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("cb-replay-stream-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

/// Runs the binary on `log` (written to a file); its stdout, after checking it succeeded.
fn run(d: &Dir, log: &str, args: &[&str]) -> String {
    let path = d.0.join("stream.log");
    std::fs::write(&path, log).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cb-replay"))
        .args(args)
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8(out.stdout).unwrap()
}

const T0: u64 = 1_700_000_000_000;

fn secs(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

fn time(ms: Option<u64>) -> String {
    ms.map_or("-".into(), secs)
}

/// One session of `kv` at 10.0.0.7:6379 starting at `start`, as nginx logs it: one try, from
/// the session's start.
fn session(
    start: u64,
    took: u64,
    status: u16,
    connect: Option<u64>,
    fb: Option<u64>,
    sent: u64,
) -> (u64, String) {
    let end = start + took;
    let line = format!(
        "{} {} TCP {status} \"kv\" \"10.0.0.7:6379\" \"{}\" \"{}\" \"{}\" \"{sent}\" \"{}\" \"closed\"\n",
        secs(end),
        secs(took),
        time(connect),
        time(fb),
        secs(took),
        if fb.is_some() { 7 } else { 0 }
    );
    (end, line)
}

/// Sessions written in the order they ended, as nginx writes them.
fn log(mut sessions: Vec<(u64, String)>) -> String {
    sessions.sort_by_key(|s| s.0);
    sessions.into_iter().map(|s| s.1).collect()
}

/// `PING`s answered in 2 ms, one every `every` ms from `from`, `n` of them.
fn answered(from: u64, every: u64, n: u64) -> Vec<(u64, String)> {
    (0..n)
        .map(|i| session(from + i * every, 5, 200, Some(1), Some(2), 14))
        .collect()
}

/// Sessions whose client sent a command and heard nothing, held `took` ms (its own timeout).
fn hung(from: u64, every: u64, n: u64, took: u64) -> Vec<(u64, String)> {
    (0..n)
        .map(|i| session(from + i * every, took, 200, Some(1), None, 14))
        .collect()
}

const BREAKER: &str = "stream:kv=min_requests=5 failure_rate=50% first_byte=1s";

/// The count after `opened` in a breaker's report section.
fn opened(report: &str, breaker: &str) -> u64 {
    let at = report
        .find(&format!("breaker {breaker}\n"))
        .unwrap_or_else(|| panic!("no {breaker} in {report}"));
    let rest = &report[at..];
    let n = rest.split("opened ").nth(1).unwrap();
    n.split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_hung_server_opens_within_min_requests() {
    let d = dir("hung");
    // Answered sessions well before, then a server that accepts and never answers.
    let mut s = answered(T0, 100, 10);
    s.extend(hung(T0 + 30_000, 200, 20, 5_000));
    let text = log(s);
    let out = run(&d, &text, &["--breaker", BREAKER, "--transitions", "-"]);
    // The fifth silent session (line 15) opens it, in the stream module's words.
    let first = out.lines().find(|l| l.contains("opened")).expect(&out);
    assert!(first.starts_with("15 "), "{first}");
    assert!(
        first.contains("circuit breaker \"kv\" opened: failure rate 100% (5/5)"),
        "{first}"
    );
    assert!(out.contains("\nbreaker stream \"kv\"\n"), "{out}");
    assert!(
        out.contains("30 lines: 30 replayed, 0 unparseable"),
        "{out}"
    );
    assert!(opened(&out, "stream \"kv\"") >= 1, "{out}");
}

#[test]
fn the_same_silence_while_others_are_answered_opens_nothing() {
    let d = dir("answered");
    // The same silent sessions (a client's unfinished command, a blocking pop), two in three
    // of the traffic, while the server answers another session within each one's bound: not
    // hung. Were the silences counted, 20 of 30 would open it.
    let mut s = answered(T0, 900, 10);
    s.extend(hung(T0 + 1_000, 200, 20, 5_000));
    let out = run(&d, &log(s.clone()), &["--breaker", BREAKER]);
    assert_eq!(opened(&out, "stream \"kv\""), 0, "{out}");
    assert!(out.contains("30 sessions, 0 bad"), "{out}");
    // Without those answers within the bounds (every 2 s instead), it opens.
    let mut s = answered(T0, 2_000, 5);
    s.extend(hung(T0 + 1_000, 200, 20, 5_000));
    let out = run(&d, &log(s), &["--breaker", BREAKER]);
    assert!(opened(&out, "stream \"kv\"") >= 1, "{out}");
}

#[test]
fn idle_subscriptions_and_silent_clients_open_nothing() {
    let d = dir("idle");
    let mut s = Vec::new();
    for i in 0..40 {
        // SUBSCRIBE answered at once, then held for ten minutes (past proxy_timeout).
        s.push(session(T0 + i * 50, 600_000, 200, Some(1), Some(3), 30));
        // A pooled connection that never said anything, closed by the idle timeout.
        s.push(session(T0 + i * 50 + 10, 600_000, 200, Some(1), None, 0));
        // A client that sent and left before the bound.
        s.push(session(T0 + i * 50 + 20, 500, 200, Some(1), None, 14));
    }
    let out = run(&d, &log(s), &["--breaker", BREAKER]);
    assert_eq!(opened(&out, "stream \"kv\""), 0, "{out}");
    assert!(out.contains("120 sessions, 0 bad"), "{out}");
}

/// A line of `kv` ending at `end`, its fields as given (each try's times, `, ` apart).
fn tried(end: u64, took: u64, connect: &str, fb: &str, tries: &str, sent: &str) -> (u64, String) {
    let line = format!(
        "{} {} TCP 200 \"kv\" \"10.0.0.7:6379, 10.0.0.8:6379\" \"{connect}\" \"{fb}\" \
         \"{tries}\" \"{sent}\" \"0, 7\" \"closed\"\n",
        secs(end),
        secs(took)
    );
    (end, line)
}

#[test]
fn long_sessions_with_short_last_tries_are_not_silent() {
    let d = dir("tries");
    // The server answered, well before; then sessions that the live module judged nothing
    // of, each far longer than connect + first_byte from the session's start.
    let mut s = answered(T0, 100, 10);
    for i in 0..10u64 {
        let end = T0 + 30_000 + i * 200;
        // A first try that hit the 5 s connect timeout, then a second whose client sent a
        // command and left after 100 ms.
        s.push(tried(
            end,
            5_101,
            "-, 0.001",
            "-, -",
            "5.000, 0.100",
            "0, 14",
        ));
        // One try, after a client that waited 4 s before its ClientHello (ssl_preread).
        s.push((
            end + 50,
            format!(
                "{} 4.100 TCP 200 \"kv\" \"10.0.0.7:6379\" \"0.001\" \"-\" \"0.099\" \
                 \"14\" \"0\" \"closed\"\n",
                secs(end + 50)
            ),
        ));
    }
    let out = run(&d, &log(s), &["--breaker", BREAKER]);
    assert!(
        out.contains("30 lines: 30 replayed, 0 unparseable"),
        "{out}"
    );
    assert!(out.contains("30 sessions, 0 bad"), "{out}");
    assert_eq!(opened(&out, "stream \"kv\""), 0, "{out}");
}

#[test]
fn a_last_try_s_instants_count_from_its_own_start() {
    let d = dir("from");
    // Silent sessions, each while another session is answered within its bound: not hung.
    // The answered ones waited 4 s before their connect (ssl_preread): their answers came
    // 2 ms after it, not 2 ms after their sessions began (4 s before the silences).
    let mut s = hung(T0 + 5_000, 900, 20, 5_000);
    for i in 0..20u64 {
        let answer = T0 + 5_000 + i * 900 + 500;
        let end = answer + 3;
        s.push((
            end,
            format!(
                "{} 4.005 TCP 200 \"kv\" \"10.0.0.7:6379\" \"0.001\" \"0.002\" \"0.005\" \
                 \"14\" \"7\" \"closed\"\n",
                secs(end)
            ),
        ));
    }
    let out = run(&d, &log(s), &["--breaker", BREAKER]);
    assert!(out.contains("40 sessions, 0 bad"), "{out}");
    assert_eq!(opened(&out, "stream \"kv\""), 0, "{out}");
}

#[test]
fn refused_connects_open_it() {
    let d = dir("refused");
    let mut s = answered(T0, 100, 10);
    // Connection refused, on every try: nginx's 502, no connect time.
    s.extend((0..10).map(|i| session(T0 + 30_000 + i * 100, 1, 502, None, None, 0)));
    let out = run(&d, &log(s), &["--breaker", BREAKER, "--transitions", "-"]);
    let first = out.lines().find(|l| l.contains("opened")).expect(&out);
    assert!(first.starts_with("15 "), "{first}");
    // No server tried (every one busy at max_conns): nothing.
    let busy: String = (0..10)
        .map(|i| {
            format!(
                "{} 0.000 TCP 502 \"kv\" \"kv\" \"-\" \"-\" \"0.000\" \"0\" \"0\" \"closed\"\n",
                secs(T0 + i * 100)
            )
        })
        .collect();
    let out = run(&d, &busy, &["--breaker", BREAKER]);
    assert_eq!(opened(&out, "stream \"kv\""), 0, "{out}");
}

#[test]
fn http_and_stream_lines_in_one_run_keep_their_breakers_apart() {
    let d = dir("mixed");
    let mut s = Vec::new();
    for i in 0..40u64 {
        let at = T0 + i * 100;
        // An http upstream named kv too, always answering.
        s.push((
            at + 10,
            format!(
                "{} 0.010 \"kv\" \"-\" \"10.0.0.1:80\" \"200\" \"0.010\" \"0.005\"\n",
                secs(at + 10)
            ),
        ));
        s.push(session(at, 1, 502, None, None, 0));
    }
    let text = log(s);
    let out = run(
        &d,
        &text,
        &["--breaker", "min_requests=5", "--transitions", "-"],
    );
    assert!(out.contains("80 lines: 80 replayed"), "{out}");
    assert_eq!(opened(&out, "\"kv/default\""), 0, "{out}");
    assert!(opened(&out, "stream \"kv\"") >= 1, "{out}");
    assert!(out.contains("  40 requests, 0 bad"), "{out}");
    assert!(out.contains("  40 sessions, "), "{out}");
    assert!(!out.contains("\"kv/default\" opened"), "{out}");
    // JSON names them apart too; the timelines have files of their own.
    let tl = d.0.join("tl");
    let json = run(
        &d,
        &text,
        &[
            "--breaker",
            "min_requests=5",
            "--json",
            "--timeline",
            tl.to_str().unwrap(),
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let b = &v["settings"][0]["breakers"];
    assert_eq!(b["kv/default"]["opens"], 0, "{json}");
    assert!(b["stream kv"]["opens"].as_u64().unwrap() >= 1, "{json}");
    assert!(tl.join("stream_kv.csv").exists() && tl.join("kv_default.csv").exists());
}

/// Runs the binary on `logs` (each written to its own file, given in this order); its stdout
/// and stderr, after checking it succeeded.
fn run_logs(d: &Dir, logs: &[&str], args: &[&str]) -> (String, String) {
    let paths: Vec<PathBuf> = (0..logs.len())
        .map(|i| d.0.join(format!("{i}.log")))
        .collect();
    for (p, log) in paths.iter().zip(logs) {
        std::fs::write(p, log).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_cb-replay"))
        .args(args)
        .args(&paths)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8(out.stdout).unwrap(), stderr)
}

#[test]
fn an_http_and_a_stream_log_are_merged_in_time() {
    let d = dir("merge");
    // Ten minutes of both: the http upstream answers throughout, the stream one is refused
    // every connect in the first minute, then answers.
    let (mut http, mut stream) = (Vec::new(), Vec::new());
    for i in 0..600u64 {
        let at = T0 + i * 1_000;
        http.push((
            at + 10,
            format!(
                "{} 0.010 \"api\" \"-\" \"10.0.0.1:80\" \"200\" \"0.010\" \"0.005\"\n",
                secs(at + 10)
            ),
        ));
        let status = if i < 60 { 502 } else { 200 };
        let (connect, fb) = if i < 60 {
            (None, None)
        } else {
            (Some(1), Some(2))
        };
        stream.push(session(at, 5, status, connect, fb, 14));
    }
    let (http, stream) = (log(http), log(stream));
    let both = log(http
        .lines()
        .chain(stream.lines())
        .map(|l| {
            let ms = (l.split(' ').next().unwrap().parse::<f64>().unwrap() * 1000.0) as u64;
            (ms, format!("{l}\n"))
        })
        .collect());
    let args = ["--breaker", "min_requests=5 open=10s"];
    let (one, _) = run_logs(&d, &[&both], &args);
    assert!(one.contains(", 0 events late"), "{one}");
    // Given apart, in either order: the same replay as the one log in time order.
    for logs in [[&*http, &*stream], [&*stream, &*http]] {
        let (out, err) = run_logs(&d, &logs, &args);
        assert_eq!(out, one, "{err}");
        assert!(err.is_empty(), "{err}");
    }
    // Concatenated, the stream sessions run at the http log's last instant: said loudly.
    let (out, _) = run_logs(&d, &[&format!("{http}{stream}")], &args);
    assert_ne!(out, one);
    let warning = out.lines().nth(1).unwrap();
    assert!(
        warning.starts_with("  warning: 1138 of 2400 events ran late"),
        "{out}"
    );
    assert!(warning.contains("logs concatenated?"), "{out}");
    assert!(!one.contains("warning"), "{one}");
}

#[test]
fn a_stream_upstream_is_apart_from_any_http_name() {
    let d = dir("names");
    let mut s = Vec::new();
    for i in 0..40u64 {
        let at = T0 + i * 100;
        // http upstream `stream a`, route `b`, always answering; stream upstream `a/b`,
        // refused on every connect: "stream a/b" both, were they keyed by one string.
        s.push((
            at + 10,
            format!(
                "{} 0.010 \"stream a\" \"b\" \"10.0.0.1:80\" \"200\" \"0.010\" \"0.005\"\n",
                secs(at + 10)
            ),
        ));
        s.push((
            at,
            format!(
                "{} 0.001 TCP 502 \"a/b\" \"10.0.0.7:6379\" \"-\" \"-\" \"0.001\" \"0\" \"0\"\n",
                secs(at)
            ),
        ));
    }
    let out = run(&d, &log(s), &["--breaker", "min_requests=5"]);
    assert!(out.contains("80 lines: 80 replayed"), "{out}");
    assert_eq!(opened(&out, "\"stream a/b\""), 0, "{out}");
    assert!(opened(&out, "stream \"a/b\"") >= 1, "{out}");
    assert!(out.contains("  40 requests, 0 bad"), "{out}");
    assert!(out.contains("  40 sessions, 40 bad"), "{out}");
}

#[test]
fn config_s_stream_upstreams_are_replayed_and_first_byte_swept() {
    let d = dir("config");
    let conf = d.0.join("nginx-T.txt");
    std::fs::write(
        &conf,
        "# configuration file /etc/nginx/nginx.conf:\n\
         http { upstream kv { server 10.0.0.1:80; circuit_breaker min_requests=50; } }\n\
         stream { upstream kv { server 10.0.0.7:6379;\n\
         circuit_breaker min_requests=5 failure_rate=50% first_byte=1s; } }\n",
    )
    .unwrap();
    // Sessions silent for 2 s: past a 1 s bound, short of a 5 s one.
    let text = log(hung(T0, 200, 20, 2_000));
    let conf = conf.to_str().unwrap();
    let out = run(&d, &text, &["--config", conf]);
    assert!(opened(&out, "stream \"kv\"") >= 1, "{out}");
    let out = run(&d, &text, &["--config", conf, "--set", "first_byte=1s,5s"]);
    let row = |setting: &str| -> u64 {
        let l = out
            .lines()
            .find(|l| l.trim_start().starts_with(setting))
            .expect(&out);
        l.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    assert!(row("first_byte=1s") >= 1, "{out}");
    assert_eq!(row("first_byte=5s"), 0, "{out}");
}

#[test]
fn sessions_refused_live_or_sent_to_backups_record_nothing() {
    let d = dir("live");
    let mut text = String::new();
    for i in 0..20u64 {
        let at = secs(T0 + i * 100);
        text.push_str(&format!(
            "{at} 0.000 TCP 503 \"kv\" \"-\" \"-\" \"-\" \"-\" \"-\" \"-\" \"open\"\n"
        ));
        text.push_str(&format!(
            "{at} 0.010 TCP 502 \"kv\" \"10.0.0.9:6379\" \"-\" \"-\" \"0.010\" \"0\" \"0\" \"backup\"\n"
        ));
    }
    let out = run(&d, &text, &["--breaker", BREAKER]);
    assert!(out.contains("40 replayed (40 refused live)"), "{out}");
    // The replayed breaker decided again (closed: let through), and nothing was recorded.
    assert!(out.contains("  0 sessions, 0 bad"), "{out}");
    assert!(out.contains("refused live 40: refused again by the replay 0, let through 40"));
    assert_eq!(opened(&out, "stream \"kv\""), 0, "{out}");
}

#[test]
fn help_says_the_stream_format() {
    let out = Command::new(env!("CARGO_BIN_EXE_cb-replay"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for said in [
        "log_format circuit_breaker_stream_replay",
        "$upstream_first_byte_time\" \"$upstream_session_time\"",
        "--breaker 'stream:NAME=PARAMETERS'",
        "first_byte",
    ] {
        assert!(text.contains(said), "--help does not say {said}:\n{text}");
    }
}
