//! The replay of a pool's servers over made-up logs: the absolute rates and the relative
//! rules eject what the module ejects, in its words, from the `$upstream_addr` lists alone.

use cb_replay::conf::Specs;
use cb_replay::line::parse;
use cb_replay::sim::Replay;

const T0: u64 = 1_700_000_000_000;

fn conf(balancer: &str, eject: &str) -> String {
    format!(
        "# configuration file /etc/nginx/nginx.conf:\nhttp {{\n    upstream api {{\n        \
         {balancer}\n        server 10.0.0.1:80;\n        server 10.0.0.2:80;\n        \
         server 10.0.0.3:80;\n        server 10.0.0.4:80;\n        server 10.0.0.9:80 down;\n        \
         circuit_breaker;\n        {eject}\n    }}\n}}\n"
    )
}

/// `n` requests, 100 a second, in turn to the four servers; `answer(i, server)` gives the
/// status and milliseconds of request `i` at server `server` (0-based).
fn log(n: u64, answer: impl Fn(u64, u64) -> (u16, u64)) -> Vec<String> {
    (0..n)
        .map(|i| {
            let end = T0 + i * 10;
            let server = i % 4;
            let (status, ms) = answer(i, server);
            format!(
                "{}.{:03} {}.{:03} \"api\" \"-\" \"10.0.0.{}:80\" \"{status}\" \"{}.{:03}\" \"{}.{:03}\"",
                end / 1000,
                end % 1000,
                ms / 1000,
                ms % 1000,
                server + 1,
                ms / 1000,
                ms % 1000,
                ms / 1000,
                ms % 1000
            )
        })
        .collect()
}

fn replay(config: &str, lines: &[String]) -> Replay {
    let mut specs = Specs::default();
    specs.add_nginx_t(config).unwrap();
    let mut r = Replay::new(specs, vec![Vec::new()], 1, 30_000);
    for (n, l) in lines.iter().enumerate() {
        r.feed(&parse(l).unwrap(), n as u64 + 1).unwrap();
    }
    r.finish();
    r
}

/// Exponential-looking latencies around `mean` ms, fixed by `i`.
fn spread(i: u64, mean: u64) -> u64 {
    let u = ((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    (-(u.ln()) * mean as f64).round() as u64
}

#[test]
fn a_server_five_times_slower_is_ejected_as_a_latency_outlier() {
    let lines = log(3000, |i, s| (200, spread(i, if s == 2 { 100 } else { 20 })));
    let r = replay(&conf("", ""), &lines);
    let moves: Vec<String> = r.pools.moves.iter().map(|m| m.message()).collect();
    let first = &r.pools.moves[0];
    assert_eq!(
        (first.server.as_str(), first.verb),
        ("10.0.0.3:80", "ejected"),
        "{moves:?}"
    );
    assert!(
        first.why.starts_with("latency p90 ") && first.why.contains("x the pool's "),
        "{}",
        first.why
    );
    assert!(
        first.line < 1000,
        "within 10 s of traffic: line {}",
        first.line
    );
    assert!(
        r.pools.moves.iter().all(|m| m.server == "10.0.0.3:80"),
        "no other server: {moves:?}"
    );
    assert!(r.pools.attempts >= 2990);
}

#[test]
fn a_hash_pool_judges_nobody_relative_unless_asked() {
    let lines = log(3000, |i, s| (200, spread(i, if s == 2 { 100 } else { 20 })));
    assert!(replay(&conf("hash $arg_k;", ""), &lines)
        .pools
        .moves
        .is_empty());
    let asked = replay(
        &conf("hash $arg_k;", "circuit_breaker_eject relative=latency;"),
        &lines,
    );
    assert_eq!(asked.pools.moves[0].server, "10.0.0.3:80");
    let off = replay(&conf("", "circuit_breaker_eject relative=off;"), &lines);
    assert!(
        off.pools.moves.is_empty(),
        "only absolute rates: a slow server is no failure"
    );
}

#[test]
fn a_failing_server_is_ejected_by_its_rate_and_returned_by_its_probe() {
    // Server 2 answers 500 to its first 40 requests, then is healthy.
    let lines = log(6000, |i, s| (if s == 1 && i < 160 { 500 } else { 200 }, 10));
    let r = replay(&conf("", "circuit_breaker_eject time=2s;"), &lines);
    let moves: Vec<String> = r.pools.moves.iter().map(|m| m.message()).collect();
    assert!(
        moves.first().is_some_and(|m| m.starts_with(
            "circuit breaker \"api\" server 10.0.0.2:80 ejected: failure rate 100% (10/10) >= \
             50% in 10s, back in "
        )),
        "{moves:?}"
    );
    assert_eq!(
        r.pools.moves[0].line, 38,
        "the tenth failure: request 4 x 9 + 2"
    );
    assert!(
        moves.iter().any(|m| m.contains("10.0.0.2:80 returned: ")),
        "{moves:?}"
    );
}

#[test]
fn a_pool_uniformly_slow_or_without_a_pool_ejects_nobody() {
    let lines = log(3000, |i, _| (200, spread(i, 100)));
    assert!(replay(&conf("", ""), &lines).pools.moves.is_empty());
    let off = replay(&conf("", "circuit_breaker_eject off;"), &lines);
    assert!(off.pools.is_empty());
}

#[test]
fn the_report_lists_the_moves() {
    let lines = log(3000, |i, s| (200, spread(i, if s == 2 { 100 } else { 20 })));
    let r = replay(&conf("", ""), &lines);
    let text = cb_replay::report::text(&r, &[]);
    assert!(
        text.contains("pools (the configuration as given): ")
            && text.contains("server 10.0.0.3:80 ejected: latency p90"),
        "{text}"
    );
    let mut json = Vec::new();
    cb_replay::report::write_json(&mut json, &r, &[]).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(v["pools"]["moves"][0]["server"], "10.0.0.3:80");
    assert_eq!(v["pools"]["moves"][0]["move"], "ejected");
}

#[test]
fn with_active_probes_a_server_returns_once_seen_serving_after_its_first_probe() {
    // Server 2 answers 500 to its first 40 requests, then is healthy; each request takes
    // 30 ms, so those in flight when it is ejected end after the ejection.
    let lines = log(3000, |i, s| (if s == 1 && i < 160 { 500 } else { 200 }, 30));
    let config = conf("", "circuit_breaker_probe uri=/health;");
    let r = replay(&config, &lines);
    let moves: Vec<String> = r.pools.moves.iter().map(|m| m.message()).collect();
    assert!(
        moves[0].contains("10.0.0.2:80 ejected: failure rate"),
        "{moves:?}"
    );
    let back = &r.pools.moves[1];
    assert_eq!(
        (back.verb, back.why.as_str()),
        ("returned", "seen serving in the log"),
        "{moves:?}"
    );
    assert!(
        back.line > r.pools.moves[0].line + 4,
        "not the requests in flight at the ejection: {moves:?}"
    );
}
