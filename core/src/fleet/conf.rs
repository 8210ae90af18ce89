//! `circuit_breaker_fleet`: the words of the directive parsed into a [`FleetDirective`], with
//! nginx's own error wording.
//!
//! ```text
//! circuit_breaker_fleet address ... id=address (secret=text | secret_file=file | auth=off)
//!                       [interval=1s] [fanout=number] [uri=/circuit_breaker]
//!                       [ssl_trusted_certificate=file] [ssl_certificate=file
//!                       ssl_certificate_key=file] [ssl_name=name];
//! ```
//!
//! Peers are socket addresses (`10.0.0.5:8080`, `[2001:db8::5]:8080`, or an IP alone for
//! port 80), or the same after `https://` (port 443 when none is given) for a peer reached
//! over TLS; the same list may be written on every instance, this one included. Each address
//! is kept in its canonical form (`[::1]:80` for `[0:0::1]`), which is also the instance's id
//! on the wire: `id=` must name this instance as the others list it.
//!
//! Or, instead of peers, the NATS servers of a bus the members share (`nats://` or, over
//! TLS, `tls://`, an address or a host name, port 4222 by default), several for failover:
//!
//! ```text
//! circuit_breaker_fleet nats://server ... id=name (secret=text | secret_file=file | auth=off)
//!                       [interval=1s] [subject=circuit_breaker.fleet]
//!                       [nats_credentials=file] [ssl_* as above, for tls:// servers];
//! ```
//!
//! On a bus the id is any name (letters, digits and `._:@[]-`, at most 64): members are
//! whoever speaks, and nobody lists them.
//!
//! Every fleet authenticates its messages ([`super::auth`]): `secret=` or `secret_file=` gives
//! the key, and a fleet without one is refused unless it says `auth=off` (a lab). Errors never
//! repeat a secret.

use std::net::{IpAddr, SocketAddr};

use super::auth::FleetKey;
use super::fingerprint::Fingerprint;
use super::store::{default_fanout, Policy};
use super::wire::MAX_NAME_BYTES;
use crate::breaker::BreakerConfig;
use crate::directive::{ConfError, ProbeSpec, StreamProbe, Units};

const DIRECTIVE: &str = "circuit_breaker_fleet";

/// The shortest interval accepted: pulls every 100 ms already cost more than they give.
pub const MIN_INTERVAL_MS: u64 = 100;
/// The longest interval accepted: opinions older than a few intervals expire, and an hour
/// is already longer than any outage the fleet could help with.
pub const MAX_INTERVAL_MS: u64 = 3_600_000;
/// The peers' status location when `uri=` is not given (the README's).
pub const DEFAULT_URI: &str = "/circuit_breaker";
/// The most peers one instance may list.
pub const MAX_PEERS: usize = 4096;
/// The largest `fanout`: peers pulled (and told of a move) at once. Each pull holds at most
/// [`super::wire::MAX_MESSAGE_BYTES`], so that a round never holds more than 16 MiB of
/// answers whatever the configuration; 16 already reaches 1000 instances in three rounds.
pub const MAX_FANOUT: usize = 16;
const MAX_URI_BYTES: usize = 2048;
/// The parameters besides the peers' addresses, as an unknown one's error lists them.
const PARAMETERS: [&str; 13] = [
    "id",
    "interval",
    "fanout",
    "uri",
    "secret",
    "secret_file",
    "auth",
    "ssl_trusted_certificate",
    "ssl_certificate",
    "ssl_certificate_key",
    "ssl_name",
    "subject",
    "nats_credentials",
];
const MAX_PATH_BYTES: usize = 4096;

/// Where the fleet's key comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Secret {
    /// `secret=`, or `secret_file=` once the shell has read it.
    Key(FleetKey),
    /// `secret_file=`, still to be read (relative to nginx's configuration prefix).
    File(String),
    /// `auth=off`: the lab's unauthenticated exchange.
    Off,
}

/// How to speak TLS to the `https://` peers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSpec {
    /// `ssl_trusted_certificate=`: the CA certificates peers' certificates must verify against.
    pub trusted_certificate: String,
    /// `ssl_certificate=` and `ssl_certificate_key=`: this instance's client certificate, for
    /// peers that ask for one (mutual TLS).
    pub certificate: Option<(String, String)>,
    /// `ssl_name=`: sent as SNI and checked against the peers' certificates; without it the
    /// certificate must carry the peer's IP address.
    pub name: Option<String>,
}

/// One peer: its address, and whether it is reached over TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr {
    /// Canonical socket address; its text is the peer's id.
    pub addr: SocketAddr,
    /// Listed as `https://`.
    pub tls: bool,
}

/// One NATS server of a bus, as listed: an address, or a host name that the shell resolves
/// when it reads the configuration ([`BusSpec::resolve`]), as nginx resolves an upstream's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BusServer {
    pub host: BusHost,
    pub port: u16,
    /// Listed as `tls://`.
    pub tls: bool,
}

/// A bus server's host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BusHost {
    Ip(IpAddr),
    /// A host name (lower case): its certificate is checked against it unless `ssl_name=`
    /// names another.
    Name(String),
}

impl BusServer {
    /// As listed, without its scheme: `10.0.0.5:4222`, `[::1]:4222`, `nats.example.net:4222`.
    pub fn shown(&self) -> String {
        match &self.host {
            BusHost::Ip(ip) => SocketAddr::new(*ip, self.port).to_string(),
            BusHost::Name(n) => format!("{n}:{}", self.port),
        }
    }

    /// The name its certificate must carry when `ssl_name=` says none: its host name.
    pub fn name(&self) -> Option<&str> {
        match &self.host {
            BusHost::Ip(_) => None,
            BusHost::Name(n) => Some(n),
        }
    }
}

/// One address to connect to: of the server `server` of [`BusSpec::servers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusAddr {
    pub addr: SocketAddr,
    pub server: usize,
}

/// The most addresses a bus's servers may come to, their names resolved.
pub const MAX_BUS_ADDRS: usize = 64;

/// A fleet on a bus: where to reach it, and under which subjects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BusSpec {
    /// The servers, in the order given.
    pub servers: Vec<BusServer>,
    /// Their addresses, tried in turn: filled by [`BusSpec::resolve`] when the configuration
    /// is read (a name's every address, in the resolver's order).
    pub addrs: Vec<BusAddr>,
    /// The prefix of the fleet's subjects (`subject=`).
    pub prefix: String,
    /// `nats_credentials=`: the file of the bus's own credentials (a user and password, or
    /// a token), read by the shell.
    pub credentials: Option<String>,
}

impl BusSpec {
    /// Fills [`BusSpec::addrs`]: each server's address, or every address `lookup` gives for
    /// its name (the shell's resolver, when the configuration is read), each once and at most
    /// [`MAX_BUS_ADDRS`] in all. `Err` names the server as listed and why, in nginx's words
    /// (`host not found`, whatever the resolver said, as nginx's own `ngx_parse_url`).
    pub fn resolve(
        &mut self,
        mut lookup: impl FnMut(&str, u16) -> Result<Vec<IpAddr>, ()>,
    ) -> Result<(), (String, String)> {
        let mut addrs: Vec<BusAddr> = Vec::new();
        for (i, s) in self.servers.iter().enumerate() {
            let ips = match &s.host {
                BusHost::Ip(ip) => vec![*ip],
                BusHost::Name(n) => {
                    let ips =
                        lookup(n, s.port).map_err(|()| (s.shown(), "host not found".to_owned()))?;
                    if ips.is_empty() {
                        return Err((s.shown(), "host not found".to_owned()));
                    }
                    ips
                }
            };
            for ip in ips {
                let addr = SocketAddr::new(ip, s.port);
                // The same address by the same way (scheme and name) once: listed otherwise,
                // it is another server to try.
                let same = |a: &BusAddr| {
                    let t = &self.servers[a.server];
                    a.addr == addr && t.tls == s.tls && t.name() == s.name()
                };
                if addrs.iter().any(same) {
                    continue;
                }
                if addrs.len() == MAX_BUS_ADDRS {
                    return Err((
                        s.shown(),
                        format!("too many addresses (more than {MAX_BUS_ADDRS} in all)"),
                    ));
                }
                addrs.push(BusAddr { addr, server: i });
            }
        }
        self.addrs = addrs;
        Ok(())
    }
}

/// The longest subject prefix: the fleet's subjects add at most 72 bytes to it (two members'
/// tokens, [`super::bus::MAX_PLAIN_TOKEN`] each).
pub const MAX_PREFIX_BYTES: usize = 128;
/// The longest id of a bus member.
pub const MAX_BUS_ID_BYTES: usize = 64;

/// Everything `circuit_breaker_fleet` sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetDirective {
    /// This instance's id: its address as the peers list it (canonical form).
    pub id: String,
    /// The peers, in the order given, without this instance, in canonical form.
    pub peers: Vec<PeerAddr>,
    /// Time between two rounds of pulls (ms).
    pub interval_ms: u64,
    /// Peers pulled from per round.
    pub fanout: usize,
    /// What to request from a peer: its status location with `format=fleet`.
    pub target: String,
    /// The key that authenticates every message.
    pub secret: Secret,
    /// TLS settings for the `https://` peers or the `tls://` servers (present exactly when
    /// there is one).
    pub tls: Option<TlsSpec>,
    /// The bus, instead of peers.
    pub bus: Option<BusSpec>,
}

impl FleetDirective {
    /// The peers' ids (their canonical addresses), as the store and the wire name them.
    pub fn peer_ids(&self) -> Vec<String> {
        self.peers.iter().map(|p| p.addr.to_string()).collect()
    }

    /// The key in force: `None` while `secret_file=` is unread.
    pub fn key(&self) -> Option<FleetKey> {
        match &self.secret {
            Secret::Key(k) => Some(k.clone()),
            Secret::Off => Some(FleetKey::unauthenticated()),
            Secret::File(_) => None,
        }
    }

    /// Instances in the fleet, this one included (on a bus: this one alone, as far as the
    /// configuration knows).
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
    parse_with_port(s, 80)
}

fn parse_with_port(s: &str, port: u16) -> Option<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return (a.port() != 0).then_some(a);
    }
    let ip = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s);
    ip.parse::<IpAddr>()
        .ok()
        .map(|ip| SocketAddr::new(ip, port))
}

/// A peer as the directive lists it: an address, or `http://` or `https://` and an address
/// (port 443 by default for `https://`).
pub fn parse_peer(s: &str) -> Option<PeerAddr> {
    let (rest, tls, port) = if let Some(r) = s.strip_prefix("https://") {
        (r, true, 443)
    } else if let Some(r) = s.strip_prefix("http://") {
        (r, false, 80)
    } else {
        (s, false, 80)
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    parse_with_port(rest, port).map(|addr| PeerAddr { addr, tls })
}

fn path(word: &str, v: &str) -> Result<String, ConfError> {
    if v.is_empty() || v.len() > MAX_PATH_BYTES || v.bytes().any(|b| b < b' ' || b == 0x7f) {
        return Err(invalid(word, Some("must be a file name")));
    }
    Ok(v.to_owned())
}

fn conflict(msg: &str) -> ConfError {
    ConfError::Conflict(format!("\"{DIRECTIVE}\" {msg}"))
}

/// A NATS server as the directive lists it: `nats://` or `tls://` and an address (port 4222
/// by default).
pub fn parse_bus_server(s: &str) -> Option<BusServer> {
    let (rest, tls) = if let Some(r) = s.strip_prefix("tls://") {
        (r, true)
    } else {
        (s.strip_prefix("nats://")?, false)
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if let Some(a) = parse_with_port(rest, 4222) {
        return Some(BusServer {
            host: BusHost::Ip(a.ip()),
            port: a.port(),
            tls,
        });
    }
    let (name, port) = match rest.rsplit_once(':') {
        Some((n, p)) => (n, p.parse::<u16>().ok().filter(|&p| p != 0)?),
        None => (rest, 4222),
    };
    valid_host_name(name).then(|| BusServer {
        host: BusHost::Name(name.to_ascii_lowercase()),
        port,
        tls,
    })
}

/// A DNS name as nginx takes one in a URL: labels of letters, digits, `-` and `_` joined by
/// dots, none empty or longer than 63 bytes, at most 253 bytes in all; not all digits and
/// dots (an address that did not parse).
fn valid_host_name(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 253
        && !v.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && v.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
        })
}

/// Whether `v` may prefix the fleet's subjects: tokens of letters, digits, `_` and `-`,
/// joined by dots.
fn valid_prefix(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_PREFIX_BYTES
        && v.split('.').all(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
        })
}

fn valid_bus_id(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_BUS_ID_BYTES
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:@[]-".contains(&b))
}

/// Parses the words after `circuit_breaker_fleet`.
pub fn parse_fleet_args<'a>(
    words: impl IntoIterator<Item = &'a str>,
    units: &dyn Units,
) -> Result<FleetDirective, ConfError> {
    let mut addresses: Vec<PeerAddr> = Vec::new();
    let mut id: Option<SocketAddr> = None;
    let mut interval_ms = 1000;
    let mut fanout: Option<usize> = None;
    let mut uri = DEFAULT_URI.to_owned();
    let mut secret: Option<Secret> = None;
    let mut trusted = None;
    let mut certificate = None;
    let mut certificate_key = None;
    let mut ssl_name = None;
    let mut servers: Vec<BusServer> = Vec::new();
    let mut bus_id: Option<String> = None;
    let mut prefix: Option<String> = None;
    let mut credentials = None;
    let mut seen = crate::directive::Seen::new();
    for word in words {
        if word.starts_with("nats://") || word.starts_with("tls://") {
            let srv = parse_bus_server(word).ok_or_else(|| {
                invalid(
                    word,
                    Some(
                        "must be a server such as nats://10.0.0.5:4222 or nats://nats.example.net",
                    ),
                )
            })?;
            if servers
                .iter()
                .any(|s| s.host == srv.host && s.port == srv.port)
            {
                return Err(invalid(word, Some("is listed twice")));
            }
            if servers.len() == MAX_PEERS {
                return Err(invalid(word, Some("is one server too many")));
            }
            servers.push(srv);
            continue;
        }
        let scheme = word.starts_with("http://") || word.starts_with("https://");
        let Some((key, v)) = word.split_once('=').filter(|_| !scheme) else {
            let a = parse_peer(word)
                .ok_or_else(|| invalid(word, Some("must be an address such as 10.0.0.5:8080")))?;
            if addresses.iter().any(|p| p.addr == a.addr) {
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
                // Read once the list says whether it is a bus's.
                bus_id = Some(v.to_owned());
                id = parse_peer(v).map(|p| p.addr);
            }
            "subject" => {
                if !valid_prefix(v) {
                    return Err(invalid(
                        word,
                        Some("must be subject tokens of letters, digits, \"_\" and \"-\" joined by dots"),
                    ));
                }
                prefix = Some(v.to_owned());
            }
            "nats_credentials" => credentials = Some(path(word, v)?),
            "interval" => {
                let ms = units
                    .msec(v)
                    .ok_or_else(|| invalid(word, Some(crate::directive::TIME_EXPECTED)))?;
                if !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&ms) {
                    return Err(invalid(word, Some("must be from 100ms to 1h")));
                }
                interval_ms = ms;
            }
            "fanout" => match v.parse::<usize>() {
                Ok(n) if (1..=MAX_FANOUT).contains(&n) && !v.starts_with('+') => fanout = Some(n),
                Ok(_) => return Err(invalid(word, Some("must be from 1 to 16"))),
                Err(_) => return Err(invalid(word, Some("must be from 1 to 16"))),
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
            "secret" | "secret_file" | "auth" if secret.is_some() => {
                return Err(conflict(
                    "takes one of \"secret\", \"secret_file\" and \"auth=off\"",
                ));
            }
            "secret" => {
                // The error names the parameter, never its value.
                let k = FleetKey::new(v.as_bytes()).map_err(|e| {
                    ConfError::Conflict(format!(
                        "invalid \"secret\" in \"{DIRECTIVE}\" directive, {e}"
                    ))
                })?;
                secret = Some(Secret::Key(k));
            }
            "secret_file" => secret = Some(Secret::File(path(word, v)?)),
            "auth" if v == "off" => secret = Some(Secret::Off),
            "auth" => return Err(invalid(word, Some("must be \"off\""))),
            "ssl_trusted_certificate" => trusted = Some(path(word, v)?),
            "ssl_certificate" => certificate = Some(path(word, v)?),
            "ssl_certificate_key" => certificate_key = Some(path(word, v)?),
            "ssl_name" => {
                if v.is_empty()
                    || v.len() > 253
                    || !v
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-._*".contains(&b))
                {
                    return Err(invalid(word, Some("must be a host name")));
                }
                ssl_name = Some(v.to_ascii_lowercase());
            }
            // An unknown parameter is named without its value: a mistyped `secret=` must not
            // print the key.
            _ => {
                let named = match word.split_once('=') {
                    Some((k, _)) => format!("{k}="),
                    None => word.to_owned(),
                };
                let hint = match crate::directive::suggest(key, &PARAMETERS) {
                    Some(near) => format!("did you mean \"{near}\"?"),
                    None => format!(
                        "expected peer addresses (or nats:// servers) and one of: {}",
                        PARAMETERS.join(", ")
                    ),
                };
                return Err(ConfError::UnknownParameter {
                    directive: DIRECTIVE,
                    word: named,
                    hint,
                });
            }
        }
        seen.push(key);
    }
    if !servers.is_empty() {
        return bus(
            servers,
            addresses,
            bus_id,
            secret,
            interval_ms,
            prefix,
            credentials,
            &seen,
            (trusted, certificate, certificate_key, ssl_name),
        );
    }
    for p in ["subject", "nats_credentials"] {
        if seen.has(p) {
            return Err(conflict(&format!(
                "has \"{p}\" parameter but no nats:// server"
            )));
        }
    }
    let Some(id) = id else {
        return Err(match bus_id {
            Some(v) => invalid(
                &format!("id={v}"),
                Some("must be this instance's address as its peers list it"),
            ),
            None => conflict("must have \"id\" parameter"),
        });
    };
    let Some(secret) = secret else {
        return Err(conflict(
            "must have \"secret\" or \"secret_file\" parameter (or \"auth=off\" in a lab)",
        ));
    };
    let peers: Vec<PeerAddr> = addresses.into_iter().filter(|p| p.addr != id).collect();
    if peers.is_empty() {
        return Err(conflict("must list at least one peer besides \"id\""));
    }
    if let Some(n) = fanout.filter(|&n| n > peers.len()) {
        return Err(ConfError::Conflict(format!(
            "invalid value \"fanout={n}\" in \"{DIRECTIVE}\" directive, \
             must be at most the {} peer(s) listed",
            peers.len()
        )));
    }
    let tls = tls_spec(
        peers.iter().any(|p| p.tls),
        ("\"https://\" peers", "\"https://\" peer"),
        &seen,
        (trusted, certificate, certificate_key, ssl_name),
    )?;
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
    Ok(FleetDirective {
        id,
        fanout: fanout.unwrap_or_else(|| default_fanout(peers.len() + 1)),
        peers,
        interval_ms,
        target,
        secret,
        tls,
        bus: None,
    })
}

/// `ssl_trusted_certificate`, `ssl_certificate`, `ssl_certificate_key`, `ssl_name`.
type SslWords = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The TLS settings, required when `needed` (for `what`), refused when not.
fn tls_spec(
    needed: bool,
    (what, one): (&str, &str),
    seen: &crate::directive::Seen,
    (trusted, certificate, certificate_key, ssl_name): SslWords,
) -> Result<Option<TlsSpec>, ConfError> {
    Ok(match (needed, trusted) {
        (true, Some(trusted_certificate)) => Some(TlsSpec {
            trusted_certificate,
            certificate: match (certificate, certificate_key) {
                (Some(c), Some(k)) => Some((c, k)),
                (None, None) => None,
                _ => {
                    return Err(conflict(
                        "needs both \"ssl_certificate\" and \"ssl_certificate_key\"",
                    ))
                }
            },
            name: ssl_name,
        }),
        (true, None) => {
            return Err(conflict(&format!(
                "must have \"ssl_trusted_certificate\" parameter for {what}"
            )))
        }
        (false, _)
            if seen.has("ssl_trusted_certificate")
                || seen.has("ssl_certificate")
                || seen.has("ssl_certificate_key")
                || seen.has("ssl_name") =>
        {
            return Err(conflict(&format!("has \"ssl_*\" parameters but no {one}")));
        }
        (false, _) => None,
    })
}

/// The rest of a fleet on a bus, once the words are read.
#[allow(clippy::too_many_arguments)]
fn bus(
    servers: Vec<BusServer>,
    peers: Vec<PeerAddr>,
    id: Option<String>,
    secret: Option<Secret>,
    interval_ms: u64,
    prefix: Option<String>,
    credentials: Option<String>,
    seen: &crate::directive::Seen,
    ssl: SslWords,
) -> Result<FleetDirective, ConfError> {
    if let Some(p) = peers.first() {
        return Err(invalid(
            &p.addr.to_string(),
            Some("is a peer, and the fleet is on a bus (its nats:// servers): one or the other"),
        ));
    }
    for p in ["fanout", "uri"] {
        if seen.has(p) {
            return Err(conflict(&format!(
                "has \"{p}\" parameter, which a fleet on a bus has no use for"
            )));
        }
    }
    let Some(id) = id else {
        return Err(conflict("must have \"id\" parameter"));
    };
    if !valid_bus_id(&id) {
        return Err(invalid(
            &format!("id={id}"),
            Some("must be a name of letters, digits and \"._:@[]-\", at most 64"),
        ));
    }
    let Some(secret) = secret else {
        return Err(conflict(
            "must have \"secret\" or \"secret_file\" parameter (or \"auth=off\" in a lab)",
        ));
    };
    let tls = tls_spec(
        servers.iter().any(|s| s.tls),
        ("\"tls://\" servers", "\"tls://\" server"),
        seen,
        ssl,
    )?;
    Ok(FleetDirective {
        id,
        peers: Vec::new(),
        interval_ms,
        fanout: 0,
        target: String::new(),
        secret,
        tls,
        bus: Some(BusSpec {
            servers,
            addrs: Vec::new(),
            prefix: prefix.unwrap_or_else(|| super::bus::DEFAULT_PREFIX.to_owned()),
            credentials,
        }),
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
            // Only a gRPC probe adds to it, so that an HTTP probe's stays what it was.
            match &p.grpc {
                Some(service) => fp.str("grpc").str(service),
                None => fp,
            }
        }
        None => fp,
    };
    fp.finish()
}

/// A stream upstream's breaker's fingerprint: as an http one's, with the session's own
/// rules — the first-byte bound, and with active probes what they send, expect and wait —
/// and a word of its own, so that it never agrees with an http breaker's.
pub fn stream_breaker_fingerprint(
    cfg: &BreakerConfig,
    first_byte_ms: u32,
    probe: Option<&StreamProbe>,
) -> u64 {
    let fp = Fingerprint::of_config(cfg).str("stream").u32(first_byte_ms);
    let fp = match probe.filter(|_| cfg.active) {
        // A word for UDP only when set: a TCP probe's fingerprint stays what it was.
        Some(p) if p.udp => fp
            .bytes(&p.send)
            .bytes(&p.expect)
            .u32(p.timeout_ms)
            .str("udp"),
        Some(p) => fp.bytes(&p.send).bytes(&p.expect).u32(p.timeout_ms),
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

    const KEY: &str = "secret=0123456789abcdef0123456789abcdef";

    fn parse(line: &str) -> Result<FleetDirective, ConfError> {
        parse_fleet_args(line.split_whitespace(), &TestUnits)
    }

    /// `line` with a secret.
    fn keyed(line: &str) -> Result<FleetDirective, ConfError> {
        parse(&format!("{line} {KEY}"))
    }

    fn err(line: &str) -> String {
        keyed(line).unwrap_err().to_string()
    }

    fn key() -> FleetKey {
        FleetKey::new(b"0123456789abcdef0123456789abcdef").unwrap()
    }

    #[test]
    fn a_shared_list_leaves_this_instance_out() {
        let s = keyed("127.0.0.1:8081 127.0.0.1:8082 127.0.0.1:8083 id=127.0.0.1:8082").unwrap();
        assert_eq!(s.id, "127.0.0.1:8082");
        assert_eq!(s.peer_ids(), ["127.0.0.1:8081", "127.0.0.1:8083"]);
        assert_eq!(s.instances(), 3);
        assert_eq!(s.interval_ms, 1000);
        assert_eq!(s.fanout, 2, "every peer in a fleet of 4 or fewer");
        assert_eq!(s.target, "/circuit_breaker?format=fleet");
        assert_eq!(s.secret, Secret::Key(key()));
        assert_eq!(s.key(), Some(key()));
        assert_eq!(s.tls, None);
        assert!(s.peers.iter().all(|p| !p.tls));
    }

    #[test]
    fn every_parameter() {
        let s = parse(
            "10.0.0.1:80 [::1]:8080 10.0.0.9 id=10.0.0.2:80 interval=500ms fanout=1 \
             uri=/cb?x=1 secret_file=fleet.key",
        )
        .unwrap();
        assert_eq!(s.peer_ids(), ["10.0.0.1:80", "[::1]:8080", "10.0.0.9:80"]);
        assert_eq!(s.interval_ms, 500);
        assert_eq!(s.fanout, 1);
        assert_eq!(s.target, "/cb?x=1&format=fleet");
        assert_eq!(s.secret, Secret::File("fleet.key".into()));
        assert_eq!(s.key(), None, "read by the shell");
        assert_eq!(
            keyed("10.0.0.1:80 id=10.0.0.2:80 uri=/s?format=fleet")
                .unwrap()
                .target,
            "/s?format=fleet"
        );
        let off = parse("10.0.0.1:80 id=10.0.0.2:80 auth=off").unwrap();
        assert_eq!(off.secret, Secret::Off);
        assert_eq!(off.key(), Some(FleetKey::unauthenticated()));
    }

    #[test]
    fn https_peers_and_their_tls() {
        let s = keyed(
            "https://10.0.0.1:8443 https://[::1] http://10.0.0.3:8080 10.0.0.4:80 \
             id=https://10.0.0.4 ssl_trusted_certificate=/etc/fleet/ca.crt \
             ssl_certificate=edge.crt ssl_certificate_key=edge.key ssl_name=Fleet.Example",
        )
        .unwrap();
        assert_eq!(s.id, "10.0.0.4:443");
        assert_eq!(
            s.peer_ids(),
            ["10.0.0.1:8443", "[::1]:443", "10.0.0.3:8080", "10.0.0.4:80"]
        );
        assert_eq!(
            s.peers.iter().map(|p| p.tls).collect::<Vec<_>>(),
            [true, true, false, false]
        );
        assert_eq!(
            s.tls,
            Some(TlsSpec {
                trusted_certificate: "/etc/fleet/ca.crt".into(),
                certificate: Some(("edge.crt".into(), "edge.key".into())),
                name: Some("fleet.example".into()),
            })
        );
        let plain = keyed("https://10.0.0.1 id=10.0.0.2:80 ssl_trusted_certificate=ca.crt");
        assert_eq!(plain.unwrap().tls.unwrap().certificate, None);
    }

    #[test]
    fn addresses_are_canonical() {
        let s = keyed("[0:0::1]:80 id=127.0.0.1").unwrap();
        assert_eq!(s.id, "127.0.0.1:80");
        assert_eq!(s.peer_ids(), ["[::1]:80"]);
        // The id written in another form is still this instance.
        let s = keyed("[::1]:80 127.0.0.1:81 id=[0::1]").unwrap();
        assert_eq!(s.peer_ids(), ["127.0.0.1:81"]);
        // http:// and https:// list the same instance: its id is its address.
        assert_eq!(
            err("http://127.0.0.1:81 https://127.0.0.1:81 id=127.0.0.1:82"),
            "invalid value \"https://127.0.0.1:81\" in \"circuit_breaker_fleet\" directive, \
             is listed twice"
        );
    }

    #[test]
    fn fingerprints_cover_the_probe() {
        let passive = BreakerConfig::default();
        let probe = ProbeSpec {
            uri: "/health".into(),
            grpc: None,
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
        let grpc = |service: &str| ProbeSpec {
            uri: crate::grpc::health::PATH.into(),
            grpc: Some(service.into()),
            ..probe.clone()
        };
        let g = breaker_fingerprint(&active, Some(&grpc("")));
        assert_ne!(g, a);
        assert_ne!(g, breaker_fingerprint(&active, Some(&grpc("pkg.Svc"))));
        assert_eq!(g, breaker_fingerprint(&active, Some(&grpc(""))));
        assert_eq!(a, breaker_fingerprint(&active, Some(&probe.clone())));
    }

    #[test]
    fn a_stream_fingerprint_covers_the_session_rules() {
        let cfg = BreakerConfig::default();
        let fp = stream_breaker_fingerprint(&cfg, 3_000, None);
        assert_ne!(
            fp,
            breaker_fingerprint(&cfg, None),
            "never an http breaker's"
        );
        assert_ne!(fp, stream_breaker_fingerprint(&cfg, 1_000, None));
        assert_eq!(fp, stream_breaker_fingerprint(&cfg, 3_000, None));
        let probe = StreamProbe {
            send: b"PING\r\n".to_vec(),
            expect: b"+PONG".to_vec(),
            timeout_ms: 1_000,
            udp: false,
        };
        // Not in force without active probes.
        assert_eq!(fp, stream_breaker_fingerprint(&cfg, 3_000, Some(&probe)));
        let active = BreakerConfig {
            active: true,
            ..cfg
        };
        let a = stream_breaker_fingerprint(&active, 3_000, Some(&probe));
        assert_ne!(a, stream_breaker_fingerprint(&active, 3_000, None));
        // Where the send ends and the expect begins is part of it.
        let moved = StreamProbe {
            send: b"PING\r\n+".to_vec(),
            expect: b"PONG".to_vec(),
            ..probe.clone()
        };
        assert_ne!(a, stream_breaker_fingerprint(&active, 3_000, Some(&moved)));
        let slower = StreamProbe {
            timeout_ms: 2_000,
            ..probe.clone()
        };
        assert_ne!(a, stream_breaker_fingerprint(&active, 3_000, Some(&slower)));
        let datagram = StreamProbe { udp: true, ..probe };
        assert_ne!(
            a,
            stream_breaker_fingerprint(&active, 3_000, Some(&datagram))
        );
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
    fn a_bus_takes_servers_a_name_and_a_subject() {
        let s = parse(
            "nats://127.0.0.1 tls://[::1]:4443 nats://10.0.0.5:4223/ id=edge-fra.1 \
                    secret=0123456789abcdef subject=cb.prod-eu ssl_trusted_certificate=ca.pem \
                    nats_credentials=nats.cred interval=2s",
        )
        .unwrap();
        let bus = s.bus.as_ref().unwrap();
        assert_eq!(
            bus.servers
                .iter()
                .map(|b| (b.shown(), b.tls))
                .collect::<Vec<_>>(),
            [
                ("127.0.0.1:4222".to_owned(), false),
                ("[::1]:4443".to_owned(), true),
                ("10.0.0.5:4223".to_owned(), false)
            ]
        );
        assert_eq!(bus.prefix, "cb.prod-eu");
        assert_eq!(bus.credentials.as_deref(), Some("nats.cred"));
        assert_eq!(s.id, "edge-fra.1");
        assert_eq!((s.interval_ms, s.peers.len(), s.fanout), (2000, 0, 0));
        assert_eq!(s.tls.unwrap().trusted_certificate, "ca.pem");
        let d = parse("nats://127.0.0.1:4222 id=10.0.0.5:8080 auth=off").unwrap();
        assert_eq!(d.bus.unwrap().prefix, "circuit_breaker.fleet");
        assert!(parse("127.0.0.1:1 id=127.0.0.2:1 auth=off")
            .unwrap()
            .bus
            .is_none());
    }

    #[test]
    fn a_bus_server_may_be_named_and_is_resolved_when_the_configuration_is_read() {
        let s = parse(
            "nats://NATS-1.example.net tls://nats-2.example.net:7422/ nats://10.0.0.9 \
             nats://nats-1.example.net:4223 id=a auth=off ssl_trusted_certificate=ca.pem",
        )
        .unwrap();
        let mut bus = s.bus.unwrap();
        assert_eq!(
            bus.servers
                .iter()
                .map(|b| (b.shown(), b.name().map(str::to_owned), b.tls))
                .collect::<Vec<_>>(),
            [
                (
                    "nats-1.example.net:4222".to_owned(),
                    Some("nats-1.example.net".to_owned()),
                    false
                ),
                (
                    "nats-2.example.net:7422".into(),
                    Some("nats-2.example.net".into()),
                    true
                ),
                ("10.0.0.9:4222".into(), None, false),
                (
                    "nats-1.example.net:4223".into(),
                    Some("nats-1.example.net".into()),
                    false
                ),
            ]
        );
        // Every address of a name, in the resolver's order, each once per way to reach it.
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut asked = Vec::new();
        bus.resolve(|name, port| {
            asked.push(format!("{name}:{port}"));
            Ok(match name {
                "nats-1.example.net" => vec![ip("10.0.0.1"), ip("10.0.0.9")],
                _ => vec![ip("2001:db8::2")],
            })
        })
        .unwrap();
        assert_eq!(
            asked,
            [
                "nats-1.example.net:4222",
                "nats-2.example.net:7422",
                "nats-1.example.net:4223"
            ]
        );
        assert_eq!(
            bus.addrs
                .iter()
                .map(|a| (a.addr.to_string(), a.server))
                .collect::<Vec<_>>(),
            [
                ("10.0.0.1:4222".to_owned(), 0),
                ("10.0.0.9:4222".into(), 0),
                ("[2001:db8::2]:7422".into(), 1),
                // The same address listed by another name (or none) is another server.
                ("10.0.0.9:4222".into(), 2),
                ("10.0.0.1:4223".into(), 3),
                ("10.0.0.9:4223".into(), 3),
            ]
        );
        // A name that does not resolve, or to nothing, names the server.
        assert_eq!(
            bus.resolve(|_, _| Err(())),
            Err((
                "nats-1.example.net:4222".to_owned(),
                "host not found".to_owned()
            ))
        );
        assert_eq!(
            bus.resolve(|_, _| Ok(Vec::new())).unwrap_err().1,
            "host not found"
        );
        // Too many addresses in all.
        let many = |_: &str, _: u16| Ok((0..=64u8).map(|i| ip(&format!("10.1.0.{i}"))).collect());
        assert_eq!(
            bus.resolve(many).unwrap_err().1,
            "too many addresses (more than 64 in all)"
        );
        // Not names.
        for bad in [
            "nats://-a.example",
            "nats://a..b",
            "nats://a.example:0",
            "nats://a.example:x",
            "nats://a b",
            "nats://1.2.3",
            "nats://a/b",
            "nats://a:1:2",
        ] {
            assert!(parse_bus_server(bad).is_none(), "{bad}");
        }
        assert!(parse("nats://a.example nats://A.example:4222 id=a auth=off").is_err());
    }

    #[test]
    fn a_bus_refuses_what_it_has_no_use_for() {
        let d = "in \"circuit_breaker_fleet\" directive";
        let f = "\"circuit_breaker_fleet\"";
        for (args, want) in [
            (
                "nats://127.0.0.1 127.0.0.1:8080 id=a auth=off",
                format!(
                    "invalid value \"127.0.0.1:8080\" {d}, is a peer, and the fleet is on a bus \
                     (its nats:// servers): one or the other"
                ),
            ),
            (
                "nats://127.0.0.1 id=a auth=off fanout=2",
                format!("{f} has \"fanout\" parameter, which a fleet on a bus has no use for"),
            ),
            (
                "nats://127.0.0.1 id=edge/1 auth=off",
                format!(
                    "invalid value \"id=edge/1\" {d}, must be a name of letters, digits and \
                     \"._:@[]-\", at most 64"
                ),
            ),
            (
                "nats://127.0.0.1 auth=off",
                format!("{f} must have \"id\" parameter"),
            ),
            (
                "tls://127.0.0.1 id=a auth=off",
                format!(
                    "{f} must have \"ssl_trusted_certificate\" parameter for \"tls://\" servers"
                ),
            ),
            (
                "nats://127.0.0.1 id=a auth=off ssl_name=x",
                format!("{f} has \"ssl_*\" parameters but no \"tls://\" server"),
            ),
            (
                "nats://127.0.0.1 id=a auth=off subject=a..b",
                format!(
                    "invalid value \"subject=a..b\" {d}, must be subject tokens of letters, \
                     digits, \"_\" and \"-\" joined by dots"
                ),
            ),
            (
                "nats://127.0.0.1 id=a auth=off subject=a.*",
                format!(
                    "invalid value \"subject=a.*\" {d}, must be subject tokens of letters, \
                     digits, \"_\" and \"-\" joined by dots"
                ),
            ),
            (
                "nats://127.0.0.1 nats://127.0.0.1:4222 id=a auth=off",
                format!("invalid value \"nats://127.0.0.1:4222\" {d}, is listed twice"),
            ),
            (
                "nats://name..example:4222 id=a auth=off",
                format!(
                    "invalid value \"nats://name..example:4222\" {d}, must be a server such \
                     as nats://10.0.0.5:4222 or nats://nats.example.net"
                ),
            ),
            (
                "127.0.0.1:1 id=127.0.0.2:1 auth=off subject=x",
                format!("{f} has \"subject\" parameter but no nats:// server"),
            ),
            (
                "nats://127.0.0.1 id=a",
                format!(
                "{f} must have \"secret\" or \"secret_file\" parameter (or \"auth=off\" in a lab)"
            ),
            ),
        ] {
            assert_eq!(parse(args).unwrap_err().to_string(), want, "{args}");
        }
    }

    #[test]
    fn errors_in_nginx_wording() {
        let d = "in \"circuit_breaker_fleet\" directive";
        // a mistyped secret= is named without its value
        let e = err("127.0.0.1:1 id=127.0.0.2:1 secrte=0123456789abcdef-not-shown");
        assert!(e.contains("\"secrte=\"") && !e.contains("not-shown"), "{e}");
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
            format!(
                "invalid value \"interval=fast\" {d}, {}",
                crate::directive::TIME_EXPECTED
            )
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 fanout=0"),
            format!("invalid value \"fanout=0\" {d}, must be from 1 to 16")
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 fanout=17"),
            format!("invalid value \"fanout=17\" {d}, must be from 1 to 16")
        );
        assert_eq!(
            err("127.0.0.1:1 127.0.0.1:3 id=127.0.0.1:2 fanout=3"),
            format!("invalid value \"fanout=3\" {d}, must be at most the 2 peer(s) listed")
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 fanout=x"),
            format!("invalid value \"fanout=x\" {d}, must be from 1 to 16")
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 uri=status"),
            format!("invalid value \"uri=status\" {d}, must be a path from \"/\"")
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 bogus=1"),
            "invalid parameter \"bogus=\" in \"circuit_breaker_fleet\" directive, expected peer \
             addresses (or nats:// servers) and one of: id, interval, fanout, uri, secret, \
             secret_file, auth, ssl_trusted_certificate, ssl_certificate, ssl_certificate_key, \
             ssl_name, subject, nats_credentials"
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 secrte=0123456789abcdef"),
            "invalid parameter \"secrte=\" in \"circuit_breaker_fleet\" directive, \
             did you mean \"secret\"?",
            "the value, a key perhaps, is not repeated"
        );
        assert_eq!(
            err("127.0.0.1:1 id=127.0.0.1:2 id=127.0.0.1:3"),
            "duplicate parameter \"id\" in \"circuit_breaker_fleet\" directive"
        );
        assert_eq!(
            err("127.0.0.1:0 id=127.0.0.1:2"),
            format!("invalid value \"127.0.0.1:0\" {d}, must be an address such as 10.0.0.5:8080")
        );
        assert_eq!(
            err("https://name.example id=127.0.0.1:2"),
            format!(
                "invalid value \"https://name.example\" {d}, must be an address such as 10.0.0.5:8080"
            )
        );
    }

    #[test]
    fn every_fleet_is_authenticated_and_its_secret_never_shown() {
        let line = "127.0.0.1:1 id=127.0.0.1:2";
        let no = |l: &str| parse(l).unwrap_err().to_string();
        assert_eq!(
            no(line),
            "\"circuit_breaker_fleet\" must have \"secret\" or \"secret_file\" parameter \
             (or \"auth=off\" in a lab)"
        );
        for (secret, why) in [
            ("s3cr3t", "must be 16 to 1024 characters"),
            ("", "must be 16 to 1024 characters"),
            ("0123456789abcdef\u{e9}", "must be visible ASCII characters"),
        ] {
            let e = no(&format!("{line} secret={secret}"));
            assert_eq!(
                e,
                format!("invalid \"secret\" in \"circuit_breaker_fleet\" directive, {why}")
            );
            if !secret.is_empty() {
                assert!(!e.contains(secret), "{e}");
            }
        }
        assert_eq!(
            no(&format!("{line} auth=on")),
            "invalid value \"auth=on\" in \"circuit_breaker_fleet\" directive, must be \"off\""
        );
        assert_eq!(
            no(&format!("{line} auth=off {KEY}")),
            "\"circuit_breaker_fleet\" takes one of \"secret\", \"secret_file\" and \"auth=off\""
        );
        assert_eq!(
            no(&format!("{line} secret_file=")),
            "invalid value \"secret_file=\" in \"circuit_breaker_fleet\" directive, \
             must be a file name"
        );
        let e = format!("{:?}", keyed(line).unwrap());
        assert!(!e.contains("0123456789abcdef"), "{e}");
    }

    #[test]
    fn tls_needs_a_trusted_certificate() {
        let no = |l: &str| err(l);
        assert_eq!(
            no("https://127.0.0.1:1 id=127.0.0.1:2"),
            "\"circuit_breaker_fleet\" must have \"ssl_trusted_certificate\" parameter for \
             \"https://\" peers"
        );
        assert_eq!(
            no("https://127.0.0.1:1 id=127.0.0.1:2 ssl_trusted_certificate=ca ssl_certificate=c"),
            "\"circuit_breaker_fleet\" needs both \"ssl_certificate\" and \"ssl_certificate_key\""
        );
        assert_eq!(
            no("127.0.0.1:1 id=127.0.0.1:2 ssl_trusted_certificate=ca"),
            "\"circuit_breaker_fleet\" has \"ssl_*\" parameters but no \"https://\" peer"
        );
        assert_eq!(
            no("https://127.0.0.1:1 id=127.0.0.1:2 ssl_trusted_certificate=ca ssl_name=a/b"),
            "invalid value \"ssl_name=a/b\" in \"circuit_breaker_fleet\" directive, \
             must be a host name"
        );
    }
}
