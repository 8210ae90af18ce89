//! `circuit_breaker_fleet`: the words of the directive parsed into a [`FleetSpec`], with
//! nginx's own error wording.
//!
//! ```text
//! circuit_breaker_fleet address ... id=address [interval=1s] [fanout=number]
//!                       [uri=/circuit_breaker] [secret=text];
//! ```
//!
//! Peers are socket addresses (`10.0.0.5:8080`, `[2001:db8::5]:8080`, or an IP alone for
//! port 80); the same list may be written on every instance, this one included. Each address
//! is kept in its canonical form (`[::1]:80` for `[0:0::1]`), which is also the instance's id
//! on the wire: `id=` must name this instance as the others list it.

use std::net::{IpAddr, SocketAddr};

use super::fingerprint::Fingerprint;
use super::store::{default_fanout, Policy};
use super::wire::MAX_NAME_BYTES;
use crate::breaker::BreakerConfig;
use crate::directive::{ConfError, ProbeSpec, Units};

const DIRECTIVE: &str = "circuit_breaker_fleet";

/// The shortest interval accepted: pulls every 100 ms already cost more than they give.
pub const MIN_INTERVAL_MS: u64 = 100;
/// The longest interval accepted: opinions older than a few intervals expire, and an hour
/// is already longer than any outage the fleet could help with.
pub const MAX_INTERVAL_MS: u64 = 3_600_000;
/// The peers' status location when `uri=` is not given (the README's).
pub const DEFAULT_URI: &str = "/circuit_breaker";
/// The header that carries `secret=`, sent with every pull and checked by the status
/// location's `?format=fleet`.
pub const SECRET_HEADER: &str = "X-Circuit-Breaker-Fleet-Secret";
/// The most peers one instance may list.
pub const MAX_PEERS: usize = 4096;
const MAX_URI_BYTES: usize = 2048;
const MAX_SECRET_BYTES: usize = 256;

/// Everything `circuit_breaker_fleet` sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetSpec {
    /// This instance's id: its address as the peers list it (canonical form).
    pub id: String,
    /// The peers, in the order given, without this instance, in canonical form.
    pub peers: Vec<SocketAddr>,
    /// Time between two rounds of pulls (ms).
    pub interval_ms: u64,
    /// Peers pulled from per round.
    pub fanout: usize,
    /// What to request from a peer: its status location with `format=fleet`.
    pub target: String,
    /// The shared secret sent in [`SECRET_HEADER`] and required from pullers, if any.
    pub secret: Option<String>,
}

impl FleetSpec {
    /// The peers' ids (their canonical addresses), as the store and the wire name them.
    pub fn peer_ids(&self) -> Vec<String> {
        self.peers.iter().map(SocketAddr::to_string).collect()
    }

    /// Instances in the fleet, this one included.
    pub fn instances(&self) -> usize {
        self.peers.len() + 1
    }
}

fn invalid(word: &str, reason: Option<&'static str>) -> ConfError {
    ConfError::InvalidValue {
        directive: DIRECTIVE,
        value: word.to_owned(),
        reason,
    }
}

/// An address as the directive takes it: `IP:port`, `[IPv6]:port`, or an IP alone (port 80).
/// Names are refused: the fleet resolves nothing.
pub fn parse_address(s: &str) -> Option<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return (a.port() != 0).then_some(a);
    }
    let ip = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s);
    ip.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 80))
}

/// Parses the words after `circuit_breaker_fleet`.
pub fn parse_fleet_args<'a>(
    words: impl IntoIterator<Item = &'a str>,
    units: &dyn Units,
) -> Result<FleetSpec, ConfError> {
    let mut addresses: Vec<SocketAddr> = Vec::new();
    let mut id: Option<SocketAddr> = None;
    let mut interval_ms = 1000;
    let mut fanout: Option<usize> = None;
    let mut uri = DEFAULT_URI.to_owned();
    let mut secret = None;
    let mut seen = crate::directive::Seen::new();
    for word in words {
        let Some((key, v)) = word.split_once('=') else {
            let a = parse_address(word)
                .ok_or_else(|| invalid(word, Some("must be an address such as 10.0.0.5:8080")))?;
            if addresses.contains(&a) {
                return Err(invalid(word, Some("is listed twice")));
            }
            if addresses.len() == MAX_PEERS {
                return Err(invalid(word, Some("is one peer too many")));
            }
            addresses.push(a);
            continue;
        };
        if seen.has(key) {
            return Err(ConfError::Conflict(format!(
                "duplicate parameter \"{key}\" in \"{DIRECTIVE}\" directive"
            )));
        }
        match key {
            "id" => {
                id = Some(parse_address(v).ok_or_else(|| {
                    invalid(
                        word,
                        Some("must be this instance's address as its peers list it"),
                    )
                })?)
            }
            "interval" => {
                let ms = units.msec(v).ok_or_else(|| invalid(word, None))?;
                if !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&ms) {
                    return Err(invalid(word, Some("must be from 100ms to 1h")));
                }
                interval_ms = ms;
            }
            "fanout" => match v.parse::<usize>() {
                Ok(n) if n >= 1 && !v.starts_with('+') => fanout = Some(n),
                Ok(_) => return Err(invalid(word, Some("must be at least 1"))),
                Err(_) => return Err(invalid(word, None)),
            },
            "uri" => {
                if !v.starts_with('/')
                    || v.len() > MAX_URI_BYTES
                    || v.bytes().any(|b| b <= b' ' || b == 0x7f || b == b'#')
                {
                    return Err(invalid(word, Some("must be a path from \"/\"")));
                }
                uri = v.to_owned();
            }
            "secret" => {
                if v.is_empty()
                    || v.len() > MAX_SECRET_BYTES
                    || v.bytes().any(|b| !(b'!'..=b'~').contains(&b))
                {
                    return Err(invalid(
                        word,
                        Some("must be 1 to 256 visible ASCII characters"),
                    ));
                }
                secret = Some(v.to_owned());
            }
            _ => return Err(ConfError::InvalidParameter(word.to_owned())),
        }
        seen.push(key);
    }
    let Some(id) = id else {
        return Err(ConfError::Conflict(format!(
            "\"{DIRECTIVE}\" must have \"id\" parameter"
        )));
    };
    let peers: Vec<SocketAddr> = addresses.into_iter().filter(|&a| a != id).collect();
    if peers.is_empty() {
        return Err(ConfError::Conflict(format!(
            "\"{DIRECTIVE}\" must list at least one peer besides \"id\""
        )));
    }
    let id = id.to_string();
    debug_assert!(id.len() <= MAX_NAME_BYTES);
    let target = if uri
        .split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|p| p == "format=fleet"))
    {
        uri
    } else if uri.contains('?') {
        format!("{uri}&format=fleet")
    } else {
        format!("{uri}?format=fleet")
    };
    Ok(FleetSpec {
        id,
        fanout: fanout.unwrap_or_else(|| default_fanout(peers.len() + 1)),
        peers,
        interval_ms,
        target,
        secret,
    })
}

/// A breaker's fingerprint as the fleet compares it: every parameter of the breaker, and
/// with active probes what they ask and accept (two breakers probing different URIs do not
/// judge the same thing).
pub fn breaker_fingerprint(cfg: &BreakerConfig, probe: Option<&ProbeSpec>) -> u64 {
    let fp = Fingerprint::of_config(cfg);
    let fp = match probe.filter(|_| cfg.active) {
        Some(p) => {
            let mut fp = fp
                .str(&p.uri)
                .str(p.host.as_deref().unwrap_or(""))
                .u32(u32::from(p.host.is_some()))
                .u32(p.timeout_ms)
                .u32(p.statuses.len() as u32);
            for &(lo, hi) in &p.statuses {
                fp = fp.u32(u32::from(lo)).u32(u32::from(hi));
            }
            fp
        }
        None => fp,
    };
    fp.finish()
}

/// The fleet's view of a breaker's probing: user-request probes wait `open` (doubling up to
/// `max_open`) between fleet probes; active probes come every `probe_interval`.
pub fn breaker_policy(cfg: &BreakerConfig) -> Policy {
    let p = Policy::of_config(cfg);
    if cfg.active {
        let every = u64::from(cfg.probe_interval_ms.max(1));
        Policy {
            probe_base_ms: every,
            probe_max_ms: every,
            ..p
        }
    } else {
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TestUnits;

    impl Units for TestUnits {
        fn msec(&self, v: &str) -> Option<u64> {
            let (n, mul) = if let Some(n) = v.strip_suffix("ms") {
                (n, 1)
            } else if let Some(n) = v.strip_suffix('s') {
                (n, 1000)
            } else if let Some(n) = v.strip_suffix('h') {
                (n, 3_600_000)
            } else {
                (v, 1000)
            };
            n.parse::<u64>().ok().map(|n| n * mul)
        }

        fn size(&self, _v: &str) -> Option<u64> {
            None
        }
    }

    fn parse(line: &str) -> Result<FleetSpec, ConfError> {
        parse_fleet_args(line.split_whitespace(), &TestUnits)
    }

    fn err(line: &str) -> String {
        parse(line).unwrap_err().to_string()
    }

    #[test]
    fn a_shared_list_leaves_this_instance_out() {
        let s = parse("127.0.0.1:8081 127.0.0.1:8082 127.0.0.1:8083 id=127.0.0.1:8082").unwrap();
        assert_eq!(s.id, "127.0.0.1:8082");
        assert_eq!(s.peer_ids(), ["127.0.0.1:8081", "127.0.0.1:8083"]);
        assert_eq!(s.instances(), 3);
        assert_eq!(s.interval_ms, 1000);
        assert_eq!(s.fanout, 2, "every peer in a fleet of 4 or fewer");
        assert_eq!(s.target, "/circuit_breaker?format=fleet");
        assert_eq!(s.secret, None);
    }

    #[test]
    fn every_parameter() {
        let s = parse(
            "10.0.0.1:80 [::1]:8080 10.0.0.9 id=10.0.0.2:80 interval=500ms fanout=1 \
             uri=/cb?x=1 secret=s3cr3t",
        )
        .unwrap();
        assert_eq!(s.peer_ids(), ["10.0.0.1:80", "[::1]:8080", "10.0.0.9:80"]);
        assert_eq!(s.interval_ms, 500);
        assert_eq!(s.fanout, 1);
        assert_eq!(s.target, "/cb?x=1&format=fleet");
        assert_eq!(s.secret.as_deref(), Some("s3cr3t"));
        assert_eq!(
            parse("10.0.0.1:80 id=10.0.0.2:80 uri=/s?format=fleet")
                .unwrap()
                .target,
            "/s?format=fleet"
        );
    }

    #[test]
    fn addresses_are_canonical() {
        let s = parse("[0:0::1]:80 id=127.0.0.1").unwrap();
        assert_eq!(s.id, "127.0.0.1:80");
        assert_eq!(s.peer_ids(), ["[::1]:80"]);
        // The id written in another form is still this instance.
        let s = parse("[::1]:80 127.0.0.1:81 id=[0::1]").unwrap();
        assert_eq!(s.peer_ids(), ["127.0.0.1:81"]);
    }

    #[test]
    fn fingerprints_cover_the_probe() {
        let passive = BreakerConfig::default();
        let probe = ProbeSpec {
            uri: "/health".into(),
            host: None,
            statuses: vec![(200, 399)],
            timeout_ms: 1000,
        };
        // Without active probes the probe spec is not in force, so not in the fingerprint.
        assert_eq!(
            breaker_fingerprint(&passive, Some(&probe)),
            breaker_fingerprint(&passive, None)
        );
        let active = BreakerConfig {
            active: true,
            ..passive
        };
        let a = breaker_fingerprint(&active, Some(&probe));
        assert_ne!(a, breaker_fingerprint(&passive, None));
        let other = ProbeSpec {
            uri: "/ready".into(),
            ..probe.clone()
        };
        assert_ne!(a, breaker_fingerprint(&active, Some(&other)));
        let statuses = ProbeSpec {
            statuses: vec![(200, 299)],
            ..probe.clone()
        };
        assert_ne!(a, breaker_fingerprint(&active, Some(&statuses)));
        assert_eq!(a, breaker_fingerprint(&active, Some(&probe.clone())));
    }

    #[test]
    fn active_probes_pace_the_fleet_by_probe_interval() {
        let passive = BreakerConfig {
            open_ms: 30_000,
            max_open_ms: 300_000,
            probe_interval_ms: 2000,
            ..BreakerConfig::default()
        };
        let p = breaker_policy(&passive);
        assert_eq!((p.probe_base_ms, p.probe_max_ms), (30_000, 300_000));
        let a = breaker_policy(&BreakerConfig {
            active: true,
            ..passive
        });
        assert_eq!((a.probe_base_ms, a.probe_max_ms), (2000, 2000));
        assert_eq!(a.min_requests, p.min_requests);
    }

    #[test]
    fn errors_in_nginx_wording() {
        let d = "in \"circuit_breaker_fleet\" directive";
        assert_eq!(
            err("peer.example:80 id=127.0.0.1:80"),
            format!(
                "invalid value \"peer.example:80\" {d}, must be an address such as 10.0.0.5:8080"
            )
        );
        assert_eq!(
            err("127.0.0.1:1 127.0.0.1:1 id=127.0.0.1:2"),
            format!("invalid value \"127.0.0.1:1\" {d}, is listed twice")
        );
        assert_eq!(
            err("127.0.0.1:1"),
            "\"circuit_breaker_fleet\" must have \"id\" parameter"
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:1"),
            "\"circuit_breaker_fleet\" must list at least one peer besides \"id\""
        );
        assert_eq!(
            err("127.0.0.1:1 id=x"),
            format!(
                "invalid value \"id=x\" {d}, must be this instance's address as its peers list it"
            )
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 interval=50ms"),
            format!("invalid value \"interval=50ms\" {d}, must be from 100ms to 1h")
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 interval=2h"),
            format!("invalid value \"interval=2h\" {d}, must be from 100ms to 1h")
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 interval=fast"),
            format!("invalid value \"interval=fast\" {d}")
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 fanout=0"),
            format!("invalid value \"fanout=0\" {d}, must be at least 1")
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 fanout=x"),
            format!("invalid value \"fanout=x\" {d}")
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 uri=status"),
            format!("invalid value \"uri=status\" {d}, must be a path from \"/\"")
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 secret="),
            format!("invalid value \"secret=\" {d}, must be 1 to 256 visible ASCII characters")
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 bogus=1"),
            "invalid parameter \"bogus=1\""
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 id=127.0.0.1:3"),
            "duplicate parameter \"id\" in \"circuit_breaker_fleet\" directive"
        );
        assert_eq!(
            err("127.0.0.1:0 id=127.0.0.1:2"),
            format!("invalid value \"127.0.0.1:0\" {d}, must be an address such as 10.0.0.5:8080")
        );
    }
}
