use super::*;
use crate::breaker::histogram::Histogram;

const ON: Relative = Relative {
    latency_factor: 300,
    failures: true,
    min_requests: 10,
};

fn server(requests: u64, failures: u64, ms: u64) -> Sample {
    Sample {
        eligible: true,
        requests,
        failures,
        latency_ms: Some(ms),
        latency_low_ms: Some(ms),
    }
}

fn pool(ms: &[u64]) -> Vec<Sample> {
    ms.iter().map(|&m| server(100, 0, m)).collect()
}

#[test]
fn a_server_five_times_slower_than_its_three_siblings_is_an_outlier() {
    let got = assess(&pool(&[40, 200, 42, 38]), &ON);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, 1);
    assert_eq!(
        got[0].1,
        Outlier::Latency {
            ms: 200,
            pool_ms: 41
        }
    );
    assert_eq!(
        got[0].1.to_string(),
        "latency p90 200ms is 4.9x the pool's 41ms"
    );
    assert_eq!(got[0].1.probe_limit_ms(300), Some(123));
}

#[test]
fn a_pool_uniformly_slow_or_twice_as_slow_in_one_server_has_no_outlier() {
    assert!(assess(&pool(&[400, 420, 380, 410]), &ON).is_empty());
    assert!(assess(&pool(&[40, 80, 42, 38]), &ON).is_empty(), "2x");
    assert!(
        assess(&pool(&[40, 200, 210, 38]), &ON).is_empty(),
        "half the pool slow moves the median"
    );
    let five = assess(&pool(&[40, 200, 210, 38, 41]), &ON);
    assert_eq!(five.iter().map(|o| o.0).collect::<Vec<_>>(), [2, 1]);
}

#[test]
fn fewer_than_three_servers_with_enough_attempts_judge_nothing() {
    assert!(assess(&pool(&[40, 400]), &ON).is_empty());
    let mut p = pool(&[40, 400, 41]);
    p[2].requests = MIN_REQUESTS - 1;
    assert!(assess(&p, &ON).is_empty(), "min 20, whatever min_requests");
    p[2].requests = MIN_REQUESTS;
    assert_eq!(assess(&p, &ON).len(), 1);
    p[2].eligible = false;
    assert!(
        assess(&p, &ON).is_empty(),
        "an ejected server is no yardstick"
    );
    let strict = Relative {
        min_requests: 50,
        ..ON
    };
    assert!(assess(&pool(&[40, 400, 41])[..], &strict).len() == 1);
    let mut p = pool(&[40, 400, 41]);
    p[0].requests = 49;
    assert!(assess(&p, &strict).is_empty());
}

#[test]
fn a_gap_of_a_few_milliseconds_is_never_an_outlier() {
    assert!(assess(&pool(&[1, 4, 1, 1]), &ON).is_empty());
    assert!(assess(&pool(&[0, 4, 0, 0]), &ON).is_empty());
    assert_eq!(assess(&pool(&[1, 6, 1, 1]), &ON).len(), 1);
    assert_eq!(limit_of(0, 300), MIN_GAP_MS);
}

#[test]
fn the_latency_rule_may_be_off() {
    let off = Relative {
        latency_factor: 0,
        ..ON
    };
    assert!(assess(&pool(&[40, 400, 41]), &off).is_empty());
    assert!(assess(&pool(&[40, 400, 41]), &Relative::OFF).is_empty());
    let wide = Relative {
        latency_factor: 1000,
        ..ON
    };
    assert!(assess(&pool(&[40, 399, 41]), &wide).is_empty());
    assert_eq!(assess(&pool(&[40, 410, 41]), &wide).len(), 1);
}

#[test]
fn one_server_of_five_failing_five_percent_against_a_tenth_of_a_percent_goes() {
    let mut p: Vec<Sample> = (0..5).map(|_| server(200, 0, 40)).collect();
    p[0].failures = 1;
    p[3].failures = 10;
    assert!(
        assess(&p, &ON).is_empty(),
        "10 of 11 failures where 1 in 5 is chance: not yet"
    );
    p[3].failures = 12;
    let got = assess(&p, &ON);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, 3);
    assert_eq!(
        got[0].1.to_string(),
        "failure rate 6.0% (12/200) is 24.1x the pool's 0.1%"
    );
    assert_eq!(got[0].1.probe_limit_ms(300), None);
}

#[test]
fn five_servers_all_failing_five_percent_eject_nobody() {
    let p: Vec<Sample> = [8, 12, 10, 14, 9]
        .iter()
        .map(|&f| server(200, f, 40))
        .collect();
    assert!(assess(&p, &ON).is_empty());
}

#[test]
fn a_second_bad_server_does_not_hide_the_first() {
    let mut p: Vec<Sample> = (0..5).map(|_| server(300, 0, 40)).collect();
    p[1].failures = 15;
    p[4].failures = 16;
    let got: Vec<usize> = assess(&p, &ON).iter().map(|o| o.0).collect();
    assert_eq!(got, [4, 1]);
}

#[test]
fn too_few_failures_are_no_evidence() {
    let mut p: Vec<Sample> = (0..4).map(|_| server(20, 0, 40)).collect();
    p[2].failures = 9;
    assert!(
        assess(&p, &ON).is_empty(),
        "9 of 20 against 0 of 60: 0.25^9 is 4e-6"
    );
    p[2].failures = 10;
    assert_eq!(assess(&p, &ON).len(), 1, "10 of 20 against 0 of 60: 1e-6");
    let no = Relative {
        failures: false,
        ..ON
    };
    assert!(assess(&p, &no).is_empty());
}

#[test]
fn the_divergence_is_zero_at_equal_rates_and_grows_with_the_gap() {
    assert!(kl(0.05, 0.05).abs() < 1e-12);
    assert!(kl(0.1, 0.05) > kl(0.07, 0.05));
    assert!(kl(1.0, 0.5) > 0.69 && kl(1.0, 0.5) < 0.70);
    assert!(kl(0.0, 0.5) > 0.69);
}

#[test]
fn a_few_slow_calls_of_few_are_no_evidence() {
    assert_eq!(low_permille(0), 900);
    assert_eq!(low_permille(20), 698);
    assert_eq!(low_permille(250), 843);
    assert_eq!(low_permille(100_000), 897);
    let mut p = pool(&[40, 400, 41, 39]);
    p[1].latency_low_ms = Some(122);
    assert!(
        assess(&p, &ON).is_empty(),
        "p90 400ms, but perhaps only 122ms: under 3x 41ms"
    );
    p[1].latency_low_ms = Some(123);
    assert_eq!(
        assess(&p, &ON)[0].1,
        Outlier::Latency {
            ms: 400,
            pool_ms: 41
        }
    );
}

#[test]
fn a_sample_reads_its_window() {
    let mut h = Histogram::EMPTY;
    for ms in 1..=100 {
        h.add(ms);
    }
    let mut sum = HistogramSum::default();
    sum.merge(&h);
    let s = Sample::of(true, 100, 3, &sum);
    assert_eq!((s.requests, s.failures), (100, 3));
    let (p90, low) = (s.latency_ms.unwrap(), s.latency_low_ms.unwrap());
    assert!((70..=105).contains(&p90), "{p90}");
    assert!(low <= p90 && low >= 55, "{low}: the same bin, or one below");
    let empty = Sample::of(true, 0, 0, &HistogramSum::default());
    assert_eq!((empty.latency_ms, empty.latency_low_ms), (None, None));
}
