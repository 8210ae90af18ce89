//! The breakers' parameters: from `nginx -T` output (every `upstream` block's
//! `circuit_breaker` and `circuit_breaker_failure`), from `--breaker` options, and the sweep's
//! `--set` values over them — all read by the module's own directive parser, so a setting
//! that `nginx -t` refuses is refused here with the same words.

use std::collections::HashMap;

use circuit_breaker_core::breaker::{BreakerConfig, FailureSet};
use circuit_breaker_core::directive::{
    parse_breaker_args, parse_eject_args, parse_failure_classes, parse_limit_args,
    parse_probe_args, parse_retry_budget_args, parse_stream_breaker_args, parse_stream_probe_args,
    stream_takes, ConfError, EjectSpec, StreamParams, BREAKER_PARAMETERS, LIMIT_DIRECTIVE,
    PROBE_DIRECTIVE, RETRY_DIRECTIVE,
};
use circuit_breaker_core::retry_budget::RetryBudgetConfig;

use crate::units::NginxUnits;

/// One breaker's words, as written, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The words after `circuit_breaker`.
    pub words: Vec<String>,
    /// The words after `circuit_breaker_failure`, if given.
    pub failures: Option<Vec<String>>,
    /// `FILE:LINE` of the directive, or `--breaker`.
    pub origin: String,
    /// Whose breaker it is.
    pub kind: Kind,
}

/// An http upstream's pool as its block configures it: its servers (each `server` line's
/// address, with its `backup` flag; `down` ones left out, as the module leaves them), how
/// its servers are ejected, and whether its balancer picks by a key or at random (`hash`,
/// `ip_hash`, `random`: the relative rules are then off unless asked for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    /// The addresses as nginx names its peers (`10.0.0.1:80` for `server 10.0.0.1;`).
    pub servers: Vec<(String, bool)>,
    /// `server` lines that name a host: nginx resolved them, so the log's addresses join the
    /// pool as they are seen (their `backup` flag unknown: taken as primaries).
    pub named: usize,
    pub eject: EjectSpec,
    pub keyed: bool,
    /// `FILE:LINE` of the upstream's `circuit_breaker`.
    pub origin: String,
}

/// What an upstream block says of its pool, as read.
#[derive(Default)]
struct PoolLines {
    servers: Vec<(String, bool)>,
    named: usize,
    eject: Option<(Vec<String>, String)>,
    keyed: bool,
}

/// Which module's breaker a [`Spec`] is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kind {
    /// An http upstream's (or a key's).
    #[default]
    Http,
    /// A stream upstream's: read by the stream module's parser, with `first_byte`; `active`
    /// with `circuit_breaker_probe`.
    Stream { active: bool },
    /// `--breaker` without a name: every other breaker of either kind, each taking the
    /// parameters its module takes.
    Any,
}

/// A parameter only the stream module's breaker takes.
fn stream_only(key: &str) -> bool {
    key == "first_byte"
}

/// A parameter only the http module's breaker takes (its companions').
fn http_only(key: &str) -> bool {
    BREAKER_PARAMETERS.contains(&key) && !stream_takes(key)
}

impl Spec {
    /// The words with `set` replacing the same keys; of a spec for either kind and of the
    /// sweep, those the other module alone takes are left out (a sweep of `first_byte` is
    /// the stream breakers', of `retry_budget` the http ones').
    fn words(&self, set: &[(String, String)], other: fn(&str) -> bool) -> Vec<String> {
        let any = self.kind == Kind::Any;
        let mut words: Vec<String> = self
            .words
            .iter()
            .filter(|w| !(any && other(key(w))))
            .filter(|w| !set.iter().any(|(k, _)| key(w) == k))
            .cloned()
            .collect();
        words.extend(
            set.iter()
                .filter(|(k, _)| !other(k))
                .map(|(k, v)| format!("{k}={v}")),
        );
        words
    }

    /// A stream breaker's parameters, with `set`, read by the stream module's parser.
    pub fn stream_params(&self, set: &[(String, String)]) -> Result<StreamParams, String> {
        let at = |e: ConfError| format!("{e} in {}", self.origin);
        if let (Kind::Stream { .. }, Some(_)) = (self.kind, &self.failures) {
            return Err(format!(
                "\"circuit_breaker_failure\" directive is not allowed here in {}",
                self.origin
            ));
        }
        let words = self.words(set, http_only);
        let mut p =
            parse_stream_breaker_args(words.iter().map(String::as_str), &NginxUnits).map_err(at)?;
        // With active probes, no client's session is the probe.
        p.cfg.active = matches!(self.kind, Kind::Stream { active: true });
        Ok(p)
    }

    /// Checks the spec under `set` with the parser of each module it is for.
    pub fn check(&self, set: &[(String, String)]) -> Result<(), String> {
        if !matches!(self.kind, Kind::Stream { .. }) {
            self.params(set)?;
        }
        if self.kind != Kind::Http {
            self.stream_params(set)?;
        }
        Ok(())
    }

    /// The breaker's parameters, with `set` (`key=value` words) replacing the same keys.
    pub fn config(&self, set: &[(String, String)]) -> Result<BreakerConfig, String> {
        self.params(set).map(|(cfg, _)| cfg)
    }

    /// The breaker's parameters and the upstream's retry budget (`None`: `retry_budget=off`).
    pub fn params(
        &self,
        set: &[(String, String)],
    ) -> Result<(BreakerConfig, Option<RetryBudgetConfig>), String> {
        let words = self.words(set, stream_only);
        let at = |e: ConfError| format!("{e} in {}", self.origin);
        let params =
            parse_breaker_args(words.iter().map(String::as_str), &NginxUnits).map_err(at)?;
        let mut cfg = params.cfg;
        cfg.failures = match &self.failures {
            Some(f) => parse_failure_classes(f.iter().map(String::as_str)).map_err(at)?,
            None => FailureSet::DEFAULT,
        };
        Ok((cfg, params.retry))
    }
}

fn key(word: &str) -> &str {
    word.split_once('=').map_or(word, |(k, _)| k)
}

/// Which spec a breaker takes: by (upstream, route), by upstream, else `*`; a stream
/// upstream's by its name among the stream ones, else `*`.
#[derive(Clone, Debug, Default)]
pub struct Specs {
    /// Each http upstream's pool of servers (`circuit_breaker_eject`), from `nginx -T`.
    pub pools: HashMap<String, PoolSpec>,
    by_route: HashMap<(String, String), Spec>,
    by_upstream: HashMap<String, Spec>,
    by_stream: HashMap<String, Spec>,
    any: Option<Spec>,
    /// The `include` patterns seen inside `stream {}` (true) or `http {}` (false): the files
    /// nginx -T prints apart are read in the block that includes them.
    includes: Vec<(String, bool)>,
}

/// A word of `--breaker` that is a parameter (the module's, or `failure`), so that
/// `--breaker 'window=10s …'` (no name) is told from `--breaker 'api=window=10s …'`.
fn is_param(word: &str) -> bool {
    word == "failure" || stream_only(word) || BREAKER_PARAMETERS.contains(&word)
}

/// How `--breaker` names a stream upstream: `stream:NAME`.
pub const STREAM_PREFIX: &str = "stream:";

impl Specs {
    /// The spec for (upstream, route), if any.
    pub fn find(&self, upstream: &str, route: &str) -> Option<&Spec> {
        self.by_route
            .get(&(upstream.to_owned(), route.to_owned()))
            .or_else(|| self.by_upstream.get(upstream))
            .or(self.any.as_ref())
    }

    /// The spec for the stream upstream `name`, if any.
    pub fn find_stream(&self, name: &str) -> Option<&Spec> {
        self.by_stream.get(name).or(self.any.as_ref())
    }

    /// Every spec, for checking them all before the log is read.
    pub fn all(&self) -> impl Iterator<Item = &Spec> {
        self.by_route
            .values()
            .chain(self.by_upstream.values())
            .chain(self.by_stream.values())
            .chain(self.any.iter())
    }

    /// `--breaker '[UPSTREAM[:ROUTE]=]PARAMS'`, or `stream:NAME=PARAMS` for a stream upstream;
    /// `failure=a,b` stands for `circuit_breaker_failure a b`. Replaces an earlier spec of the
    /// same name (one from `--config` too).
    pub fn add_option(&mut self, arg: &str) -> Result<(), String> {
        let head = arg.split_once('=').map_or(arg, |(h, _)| h).trim();
        let (name, params) = if is_param(head) || !arg.contains('=') {
            ("*", arg)
        } else {
            let (n, p) = arg.split_once('=').unwrap_or((arg, ""));
            (n.trim(), p)
        };
        let stream = name.strip_prefix(STREAM_PREFIX);
        let mut spec = Spec {
            words: Vec::new(),
            failures: None,
            origin: "--breaker".into(),
            kind: match (name, stream) {
                ("*", _) => Kind::Any,
                (_, Some(_)) => Kind::Stream { active: false },
                _ => Kind::Http,
            },
        };
        for w in params.split_ascii_whitespace() {
            match w.strip_prefix("failure=") {
                Some(list) => spec.failures = Some(list.split(',').map(str::to_owned).collect()),
                None => spec.words.push(w.to_owned()),
            }
        }
        if let Some(up) = stream {
            if up.is_empty() || up.contains(':') {
                return Err(format!(
                    "--breaker wants stream:NAME=PARAMETERS (a stream upstream has no routes): \
                     \"{arg}\""
                ));
            }
            // Its probes stay as --config gave them (the option replaces the parameters).
            if let Some(Spec {
                kind: Kind::Stream { active: true },
                ..
            }) = self.by_stream.get(up)
            {
                spec.kind = Kind::Stream { active: true };
            }
            spec.check(&[])?;
            self.by_stream.insert(up.to_owned(), spec);
            return Ok(());
        }
        spec.check(&[])?;
        match name.split_once(':') {
            _ if name == "*" => self.any = Some(spec),
            Some((u, r)) => {
                self.by_route.insert((u.to_owned(), r.to_owned()), spec);
            }
            None => {
                self.by_upstream.insert(name.to_owned(), spec);
            }
        }
        Ok(())
    }

    /// Reads `nginx -T` output: each file follows a `# configuration file PATH:` line.
    /// Upstream blocks anywhere are read (a `circuit_breaker` in a file included inside an
    /// upstream block cannot be told apart from one outside: nginx -T prints files apart).
    pub fn add_nginx_t(&mut self, text: &str) -> Result<usize, String> {
        let mut found = 0;
        let mut file = "nginx -T";
        let mut section = String::new();
        let mut flush = |section: &mut String, file: &str| {
            let mut tokens = Vec::new();
            tokenize(section, &mut tokens).map_err(|(e, line)| format!("{e} in {file}:{line}"))?;
            section.clear();
            let base = self
                .includes
                .iter()
                .find(|(pattern, _)| included(pattern, file))
                .map(|&(_, stream)| stream);
            self.read_blocks(&tokens, file, base).map(|n| found += n)
        };
        for line in text.split_inclusive('\n') {
            if let Some(path) = line
                .trim_end()
                .strip_prefix("# configuration file ")
                .and_then(|p| p.strip_suffix(':'))
            {
                flush(&mut section, file)?;
                file = path;
                continue;
            }
            section.push_str(line);
        }
        flush(&mut section, file)?;
        Ok(found)
    }

    /// Reads one file's blocks. An upstream inside `stream {}` is a stream module's: checked by
    /// its parsers, and not replayed (its sessions are in no http log). One in a file that
    /// nginx -T printed apart (an `include`d file) is read as the http module's, unless only
    /// the stream module's parsers take its directives.
    fn read_blocks(
        &mut self,
        tokens: &[(Tok, usize, String)],
        file: &str,
        base: Option<bool>,
    ) -> Result<usize, String> {
        // Each open block: the upstream it is, if one, and whether it is inside `stream {}`
        // (`Some(false)`: inside `http {}`; `None`: neither is known).
        let mut stack: Vec<(Option<String>, Option<bool>)> = Vec::new();
        let mut words: Vec<&str> = Vec::new();
        type Directive = Option<(Vec<String>, String)>;
        // `circuit_breaker`, `circuit_breaker_failure`, the companions' directives (checked
        // once the block's proxy is known, then read as the `circuit_breaker` parameters they
        // replace, which the sweep's `--set` names), and whether the block is a stream one.
        type Local = (
            Directive,
            Directive,
            Vec<(String, Vec<String>, String)>,
            Option<bool>,
        );
        // By the upstream's name and whether it is inside `stream {}`: a stream upstream may
        // share an http one's name, and an http one's name could be any prefixed form.
        let mut local: HashMap<(bool, String), Local> = HashMap::new();
        let mut pools: HashMap<String, PoolLines> = HashMap::new();
        let mut keyed: HashMap<String, Spec> = HashMap::new();
        for (tok, line, text) in tokens {
            match tok {
                Tok::Word => {
                    words.push(text);
                }
                Tok::Open => {
                    let up = (words.first() == Some(&"upstream"))
                        .then(|| words.get(1).map(|s| s.to_string()))
                        .flatten();
                    let stream = match words.first() {
                        Some(&"stream") => Some(true),
                        Some(&"http") => Some(false),
                        _ => stack.last().map_or(base, |b| b.1),
                    };
                    stack.push((up, stream));
                    words.clear();
                }
                Tok::Close => {
                    stack.pop();
                    words.clear();
                }
                Tok::Semi => {
                    if let (Some(&"include"), Some(&pattern)) = (words.first(), words.get(1)) {
                        if let Some(stream) = stack.last().map_or(base, |b| b.1) {
                            self.includes.push((pattern.to_owned(), stream));
                        }
                    }
                    if let (Some(&"circuit_breaker_key"), Some(&family)) =
                        (words.first(), words.get(1))
                    {
                        // A key's breakers are named after the variable as written; every
                        // `circuit_breaker_key` of it gives the same parameters (nginx -t).
                        if family != "off" && !keyed.contains_key(family) {
                            let spec = Spec {
                                words: words[2..].iter().map(|s| s.to_string()).collect(),
                                failures: None,
                                origin: format!("{file}:{line}"),
                                kind: Kind::Http,
                            };
                            spec.config(&[])?;
                            keyed.insert(family.to_string(), spec);
                        }
                    }
                    if let (Some((Some(up), stream)), Some(&directive)) =
                        (stack.last(), words.first())
                    {
                        // nginx names the line that ends the directive.
                        let origin = format!("{file}:{line}");
                        let dup = || format!("\"{directive}\" directive is duplicate in {origin}");
                        let e = local
                            .entry((*stream == Some(true), up.clone()))
                            .or_default();
                        e.3 = *stream;
                        let args = || words[1..].iter().map(|s| s.to_string()).collect();
                        if *stream != Some(true) {
                            let p = pools.entry(up.clone()).or_default();
                            match directive {
                                "server" if !words.contains(&"down") => {
                                    match words.get(1).and_then(|a| peer_name(a)) {
                                        Some(addr) => {
                                            p.servers.push((addr, words.contains(&"backup")))
                                        }
                                        None => p.named += 1,
                                    }
                                }
                                "circuit_breaker_eject" if p.eject.is_some() => return Err(dup()),
                                "circuit_breaker_eject" => p.eject = Some((args(), origin.clone())),
                                "hash" | "ip_hash" | "random" => p.keyed = true,
                                _ => {}
                            }
                        }
                        match directive {
                            "circuit_breaker" if e.0.is_some() => return Err(dup()),
                            "circuit_breaker" => e.0 = Some((args(), origin)),
                            "circuit_breaker_failure" if e.1.is_some() => return Err(dup()),
                            "circuit_breaker_failure" => e.1 = Some((args(), origin)),
                            PROBE_DIRECTIVE | LIMIT_DIRECTIVE | RETRY_DIRECTIVE => {
                                e.2.push((directive.to_owned(), args(), origin));
                            }
                            _ => {}
                        }
                    }
                    words.clear();
                }
            }
        }
        let mut found = keyed.len();
        self.by_upstream.extend(keyed);
        for ((_, up), (cb, failures, raw, stream)) in local {
            let is_stream = match stream {
                Some(s) => s,
                None => looks_stream(cb.as_ref(), &raw),
            };
            if is_stream {
                if let Some((_, origin)) = &failures {
                    return Err(format!(
                        "\"circuit_breaker_failure\" directive is not allowed here in {origin}"
                    ));
                }
                check_stream(cb.as_ref(), &raw)?;
                if let Some((words, origin)) = cb {
                    let active = raw.iter().any(|(d, _, _)| d == PROBE_DIRECTIVE);
                    found += 1;
                    self.by_stream.insert(
                        up,
                        Spec {
                            words,
                            failures: None,
                            origin,
                            kind: Kind::Stream { active },
                        },
                    );
                }
                continue;
            }
            let mut companions = Vec::new();
            for (directive, args, origin) in &raw {
                let at = |e: ConfError| format!("{e} in {origin}");
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                companions.extend(companion(directive, &args).map_err(at)?);
            }
            // Checked in nginx's order: each directive as it comes.
            let mut order: Vec<&(Vec<String>, String)> = cb.iter().chain(failures.iter()).collect();
            order.sort_by_key(|(_, o)| {
                o.rsplit_once(':')
                    .and_then(|(_, l)| l.parse::<usize>().ok())
            });
            for (w, origin) in order {
                let probe = match cb.as_ref() {
                    Some((cw, _)) if std::ptr::eq(w, cw) => Spec {
                        words: w.clone(),
                        failures: None,
                        origin: origin.clone(),
                        kind: Kind::Http,
                    },
                    _ => Spec {
                        words: Vec::new(),
                        failures: Some(w.clone()),
                        origin: origin.clone(),
                        kind: Kind::Http,
                    },
                };
                probe.config(&[])?;
            }
            let Some((mut words, origin)) = cb else {
                continue;
            };
            if let Some(p) = pools.remove(&up) {
                let eject = match &p.eject {
                    None => Some(EjectSpec::default()),
                    Some((args, at)) => {
                        let args: Vec<&str> = args.iter().map(String::as_str).collect();
                        parse_eject_args(args, &NginxUnits).map_err(|e| format!("{e} in {at}"))?
                    }
                };
                if let (Some(eject), true) = (eject, p.servers.len() + p.named >= 2) {
                    self.pools.insert(
                        up.clone(),
                        PoolSpec {
                            servers: p.servers,
                            named: p.named,
                            eject,
                            keyed: p.keyed,
                            origin: origin.clone(),
                        },
                    );
                }
            }
            words.extend(companions);
            found += 1;
            self.by_upstream.insert(
                up,
                Spec {
                    words,
                    failures: failures.map(|(f, _)| f),
                    origin,
                    kind: Kind::Http,
                },
            );
        }
        Ok(found)
    }
}

/// A `server` line's address as nginx names the peer (`$upstream_addr`): an IP address with
/// its port, 80 when none is given, or a `unix:` path; `None` for a host name, which nginx
/// resolves.
fn peer_name(addr: &str) -> Option<String> {
    if addr.starts_with("unix:") {
        return Some(addr.to_owned());
    }
    if let Some(rest) = addr.strip_prefix('[') {
        let (ip, tail) = rest.split_once(']')?;
        ip.parse::<std::net::Ipv6Addr>().ok()?;
        return Some(match tail {
            "" => format!("[{ip}]:80"),
            t if t.starts_with(':') => addr.to_owned(),
            _ => return None,
        });
    }
    let (host, port) = match addr.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => (h, Some(p)),
        _ => (addr, None),
    };
    host.parse::<std::net::Ipv4Addr>().ok()?;
    Some(format!("{host}:{}", port.unwrap_or("80")))
}

/// Whether `file` (as nginx -T names it, a full path) is one that `include pattern` takes: a
/// relative pattern names the path's last components. `*` and `?` as the shell's glob.
fn included(pattern: &str, file: &str) -> bool {
    let want: Vec<&str> = pattern.trim_start_matches('/').split('/').collect();
    let have: Vec<&str> = file.trim_start_matches('/').split('/').collect();
    if want.len() > have.len() || (pattern.starts_with('/') && want.len() != have.len()) {
        return false;
    }
    let tail = &have[have.len() - want.len()..];
    want.iter()
        .zip(tail)
        .all(|(w, h)| glob(w.as_bytes(), h.as_bytes()))
}

/// `*` and `?` over one path component.
fn glob(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
        (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => glob(&p[1..], &s[1..]),
        _ => false,
    }
}

/// Whether an upstream block found outside any `http {}` or `stream {}` (a file nginx -T
/// printed apart) is a stream one: only the stream module's parsers take its directives.
fn looks_stream(cb: Option<&(Vec<String>, String)>, raw: &[(String, Vec<String>, String)]) -> bool {
    fn words(w: &[String]) -> Vec<&str> {
        w.iter().map(String::as_str).collect()
    }
    let http_takes = cb.map_or(true, |(w, _)| {
        parse_breaker_args(words(w), &NginxUnits).is_ok()
    }) && raw.iter().all(|(d, a, _)| companion(d, &words(a)).is_ok());
    !http_takes && check_stream(cb, raw).is_ok()
}

/// A stream upstream's `circuit_breaker` and `circuit_breaker_probe`, checked by the stream
/// module's parsers, with nginx's words; anything else of the http module's is refused as the
/// stream module refuses it.
fn check_stream(
    cb: Option<&(Vec<String>, String)>,
    raw: &[(String, Vec<String>, String)],
) -> Result<(), String> {
    if let Some((w, origin)) = cb {
        parse_stream_breaker_args(w.iter().map(String::as_str), &NginxUnits)
            .map_err(|e| format!("{e} in {origin}"))?;
    }
    for (directive, args, origin) in raw {
        if directive != PROBE_DIRECTIVE {
            return Err(format!(
                "\"{directive}\" directive is not allowed here in {origin}"
            ));
        }
        parse_stream_probe_args(args.iter().map(String::as_str), &NginxUnits)
            .map_err(|e| format!("{e} in {origin}"))?;
    }
    Ok(())
}

/// A companion directive's words, checked by the module's own parser, as the
/// `circuit_breaker` parameters they stand for (`circuit_breaker_probe uri=/h` is
/// `probe_uri=/h`).
fn companion(directive: &str, args: &[&str]) -> Result<Vec<String>, ConfError> {
    let args = args.iter().copied();
    let named = |prefix: &str, words: &mut dyn Iterator<Item = &str>| -> Vec<String> {
        words.map(|w| format!("{prefix}{w}")).collect()
    };
    let mut rest = args.clone();
    Ok(match directive {
        PROBE_DIRECTIVE => {
            parse_probe_args(args, &NginxUnits)?;
            named("probe_", &mut rest)
        }
        LIMIT_DIRECTIVE => {
            parse_limit_args(args, &NginxUnits)?;
            rest.next();
            let mut out = vec!["limit=adaptive".to_owned()];
            out.extend(named("limit_", &mut rest));
            out
        }
        _ => {
            parse_retry_budget_args(args)?;
            let rate = rest.next().unwrap_or("off");
            let mut out = vec![format!("retry_budget={rate}")];
            out.extend(named("retry_", &mut rest));
            out
        }
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    Word,
    Open,
    Close,
    Semi,
}

/// nginx's configuration syntax: words, `"…"` and `'…'` (which may span lines) with `\`
/// escapes, `#` comments, `{`, `}`, `;`; each token with its line. An error gives the line
/// where it was found.
fn tokenize(text: &str, out: &mut Vec<(Tok, usize, String)>) -> Result<(), (String, usize)> {
    let mut n = 1;
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            '\n' => {
                n += 1;
                chars.next();
            }
            c if c.is_whitespace() => {
                chars.next();
            }
            '#' => while chars.next_if(|&x| x != '\n').is_some() {},
            '{' | '}' | ';' => {
                chars.next();
                let t = match c {
                    '{' => Tok::Open,
                    '}' => Tok::Close,
                    _ => Tok::Semi,
                };
                out.push((t, n, String::new()));
            }
            '"' | '\'' => {
                chars.next();
                let start = n;
                let mut w = String::new();
                loop {
                    match chars.next() {
                        None => {
                            return Err(("unexpected end of file in a quoted string".into(), start))
                        }
                        Some('\\') => w.extend(chars.next()),
                        Some(q) if q == c => break,
                        Some(x) => {
                            n += usize::from(x == '\n');
                            w.push(x);
                        }
                    }
                }
                out.push((Tok::Word, n, w));
            }
            _ => {
                let mut w = String::new();
                while let Some(x) =
                    chars.next_if(|&x| !x.is_whitespace() && !matches!(x, '{' | '}' | ';'))
                {
                    w.push(x);
                }
                out.push((Tok::Word, n, w));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "# configuration file /etc/nginx/nginx.conf:
http {
    upstream api {   # the API
        server 127.0.0.1:8081;
        circuit_breaker window=20s min_requests=10
                        failure_rate=25% 'open=10s';
        circuit_breaker_failure error timeout http_500;
    }
    upstream plain { server 127.0.0.1:8082; }
    server { location / { proxy_pass http://api; } }
}
";

    #[test]
    fn peers_are_named_as_nginx_names_them() {
        assert_eq!(peer_name("10.0.0.1").as_deref(), Some("10.0.0.1:80"));
        assert_eq!(peer_name("10.0.0.1:8080").as_deref(), Some("10.0.0.1:8080"));
        assert_eq!(peer_name("[::1]").as_deref(), Some("[::1]:80"));
        assert_eq!(peer_name("[::1]:81").as_deref(), Some("[::1]:81"));
        assert_eq!(
            peer_name("unix:/run/a.sock").as_deref(),
            Some("unix:/run/a.sock")
        );
        assert_eq!(
            peer_name("api.internal:8080"),
            None,
            "a name nginx resolves"
        );
        assert_eq!(peer_name("localhost"), None);
        let mut s = Specs::default();
        s.add_nginx_t(
            "# configuration file /etc/nginx/nginx.conf:\nhttp {\n    upstream api {\n        \
             server 10.0.0.1;\n        server 10.0.0.2:81 backup;\n        server a.internal;\n        \
             server 10.0.0.3 down;\n        circuit_breaker;\n    }\n    upstream off {\n        \
             server 10.0.0.1;\n        server 10.0.0.2;\n        circuit_breaker;\n        \
             circuit_breaker_eject off;\n    }\n    upstream one {\n        server 10.0.0.1;\n        \
             circuit_breaker;\n    }\n}\n",
        )
        .unwrap();
        let p = &s.pools["api"];
        assert_eq!(
            p.servers,
            [
                ("10.0.0.1:80".to_owned(), false),
                ("10.0.0.2:81".to_owned(), true)
            ]
        );
        assert_eq!((p.named, p.keyed), (1, false));
        assert!(!s.pools.contains_key("off") && !s.pools.contains_key("one"));
    }

    #[test]
    fn reads_upstream_blocks() {
        let mut s = Specs::default();
        assert_eq!(s.add_nginx_t(T), Ok(1));
        let spec = s.find("api", "checkout").unwrap();
        assert_eq!(spec.origin, "/etc/nginx/nginx.conf:5");
        let cfg = spec.config(&[]).unwrap();
        assert_eq!(
            (cfg.window_s, cfg.min_requests, cfg.failure_rate),
            (20, 10, 2500)
        );
        assert_eq!(cfg.open_ms, 10_000);
        assert!(!cfg
            .failures
            .contains(circuit_breaker_core::breaker::FailureClass::Http5xx(502)));
        assert!(s.find("plain", "default").is_none());
        // The sweep replaces a key.
        let swept = spec
            .config(&[("failure_rate".into(), "50%".into())])
            .unwrap();
        assert_eq!(swept.failure_rate, 5000);
    }

    #[test]
    fn stream_upstreams_are_read_by_the_stream_parser_apart() {
        let text = "# configuration file /etc/nginx/nginx.conf:
http {
    upstream redis { server 127.0.0.1:8081; circuit_breaker min_requests=3; }
}
stream {
    upstream redis {
        server 127.0.0.1:6379;
        circuit_breaker first_byte=2s;
        circuit_breaker_probe send=PING\\r\\n expect=+PONG;
    }
    include /etc/nginx/streams-enabled/*;
}
# configuration file /etc/nginx/streams-enabled/db:
upstream db {
    server 127.0.0.1:5432;
    circuit_breaker slow=1s first_byte=5s;
    circuit_breaker_probe expect=N send=\\x00\\x00\\x00\\x08\\x04\\xd2\\x16\\x2f;
}
";
        let mut s = Specs::default();
        assert_eq!(s.add_nginx_t(text), Ok(3));
        // Each with its own parameters, an http upstream apart from a stream one of its name.
        let cfg = s.find("redis", "default").unwrap().config(&[]).unwrap();
        assert_eq!(cfg.min_requests, 3);
        assert!(s.find("db", "default").is_none());
        let redis = s.find_stream("redis").unwrap().stream_params(&[]).unwrap();
        assert_eq!((redis.first_byte_ms, redis.cfg.min_requests), (2_000, 20));
        assert!(redis.cfg.active, "circuit_breaker_probe");
        let db = s.find_stream("db").unwrap();
        assert_eq!(db.origin, "/etc/nginx/streams-enabled/db:3");
        let db = db.stream_params(&[]).unwrap();
        assert_eq!((db.first_byte_ms, db.cfg.slow_ms), (5_000, 1_000));
        // The sweep re-parses them: first_byte is swept.
        let swept = s.find_stream("db").unwrap();
        let set = [("first_byte".to_owned(), "off".to_owned())];
        assert_eq!(swept.stream_params(&set).unwrap().first_byte_ms, 0);
        assert!(s.find_stream("web").is_none());
        // What the stream module refuses is refused with its words.
        let bad = "# configuration file /x.conf:\nstream { upstream r { circuit_breaker first_byte=0; } }\n";
        let e = Specs::default().add_nginx_t(bad).unwrap_err();
        assert!(e.starts_with("invalid value \"first_byte=0\""), "{e}");
        let bad = "# configuration file /x.conf:\nstream { upstream r { circuit_breaker; circuit_breaker_limit adaptive; } }\n";
        let e = Specs::default().add_nginx_t(bad).unwrap_err();
        assert!(
            e.starts_with("\"circuit_breaker_limit\" directive is not allowed here"),
            "{e}"
        );
        let bad = "# configuration file /x.conf:\nstream { upstream r { circuit_breaker; \
                   circuit_breaker_failure error; } }\n";
        let e = Specs::default().add_nginx_t(bad).unwrap_err();
        assert!(
            e.starts_with("\"circuit_breaker_failure\" directive is not allowed here"),
            "{e}"
        );
        // An included file's block that both could take is read as the http module's,
        // unless the file is one a `stream {}` block includes.
        let both = "# configuration file /y.conf:\nupstream u { circuit_breaker window=5s; }\n";
        let mut s = Specs::default();
        assert_eq!(s.add_nginx_t(both), Ok(1));
        let text = "# configuration file /etc/nginx/nginx.conf:
http { upstream redis { circuit_breaker min_requests=3; } include conf.d/*.conf; }
stream { include streams-enabled/*; }
# configuration file /etc/nginx/conf.d/a.conf:
upstream web { circuit_breaker min_requests=7; }
# configuration file /etc/nginx/streams-enabled/r:
upstream redis { circuit_breaker min_requests=50; }
";
        let mut s = Specs::default();
        assert_eq!(s.add_nginx_t(text), Ok(3));
        let min = |s: &Specs, u: &str| s.find(u, "default").unwrap().config(&[]).unwrap();
        assert_eq!(min(&s, "redis").min_requests, 3);
        assert_eq!(min(&s, "web").min_requests, 7);
        let r = s.find_stream("redis").unwrap().stream_params(&[]).unwrap();
        assert_eq!(r.cfg.min_requests, 50);
    }

    #[test]
    fn an_http_upstream_named_stream_colon_is_not_a_stream_one() {
        // An http upstream literally named `stream:redis` beside stream `redis`: two breakers,
        // neither taken for the other (nor a duplicate `circuit_breaker` of one).
        let text = "# configuration file /etc/nginx/nginx.conf:
http { upstream stream:redis { circuit_breaker min_requests=7; } }
stream { upstream redis { circuit_breaker min_requests=5 first_byte=1s; } }
";
        let mut s = Specs::default();
        assert_eq!(s.add_nginx_t(text), Ok(2));
        let http = s
            .find("stream:redis", "default")
            .unwrap()
            .config(&[])
            .unwrap();
        assert_eq!(http.min_requests, 7);
        let stream = s.find_stream("redis").unwrap().stream_params(&[]).unwrap();
        assert_eq!((stream.cfg.min_requests, stream.first_byte_ms), (5, 1_000));
        assert!(s.find("redis", "default").is_none());
        assert!(s.find_stream("stream:redis").is_none());
        // Nor, in a file read apart, one of that name that only the stream module takes: it
        // keeps its whole name.
        let apart =
            "# configuration file /y.conf:\nupstream stream:r { circuit_breaker first_byte=1s; }\n";
        let mut s = Specs::default();
        assert_eq!(s.add_nginx_t(apart), Ok(1));
        assert!(s.find_stream("stream:r").is_some() && s.find_stream("r").is_none());
    }

    #[test]
    fn includes_name_the_files_they_take() {
        assert!(included(
            "streams-enabled/*",
            "/etc/nginx/streams-enabled/redis"
        ));
        assert!(included(
            "/etc/nginx/conf.d/*.conf",
            "/etc/nginx/conf.d/a.conf"
        ));
        assert!(included("s?.conf", "/etc/nginx/s1.conf"));
        assert!(!included("conf.d/*.conf", "/etc/nginx/conf.d/a.txt"));
        assert!(!included("/etc/nginx/conf.d/*", "/srv/etc/nginx/conf.d/a"));
        assert!(!included(
            "streams-enabled/*",
            "/etc/nginx/sites-enabled/redis"
        ));
    }

    #[test]
    fn reads_key_families_wherever_they_are() {
        let text = "# configuration file /etc/nginx/nginx.conf:
http {
    circuit_breaker_key $http_x_tenant min_requests=3 open=1h;
    server {
        location /o/ {
            circuit_breaker_key $origin window=20s failure_rate=25%;
            proxy_pass http://$origin;
        }
        location /p/ {
            circuit_breaker_key $origin window=20s failure_rate=25%;
        }
        location /q/ {
            circuit_breaker_key off;
        }
    }
}
";
        let mut s = Specs::default();
        assert_eq!(s.add_nginx_t(text), Ok(2));
        let origin = s
            .find("$origin", "10.0.0.1:80")
            .unwrap()
            .config(&[])
            .unwrap();
        assert_eq!((origin.window_s, origin.failure_rate), (20, 2500));
        let tenant = s.find("$http_x_tenant", "acme").unwrap();
        assert_eq!(tenant.origin, "/etc/nginx/nginx.conf:2");
        assert_eq!(tenant.config(&[]).unwrap().min_requests, 3);
        assert!(s.find("off", "x").is_none());
        let bad = text.replace("open=1h", "window=500ms");
        assert!(Specs::default()
            .add_nginx_t(&bad)
            .unwrap_err()
            .ends_with("in /etc/nginx/nginx.conf:2"));
    }

    #[test]
    fn refuses_what_nginx_refuses_with_its_words() {
        let mut s = Specs::default();
        let bad = T.replace("window=20s", "window=500ms");
        assert_eq!(
            s.add_nginx_t(&bad),
            Err(
                "invalid value \"window=500ms\" in \"circuit_breaker\" directive, must be whole \
                 seconds from 1s to 300s in /etc/nginx/nginx.conf:5"
                    .into()
            )
        );
        let bad = T.replace("http_500", "http_600");
        assert_eq!(
            s.add_nginx_t(&bad),
            Err(format!(
                "invalid value \"http_600\" in \"circuit_breaker_failure\" directive, {} in \
                     /etc/nginx/nginx.conf:6",
                circuit_breaker_core::directive::FAILURE_CLASSES
            ))
        );
        let e = Specs::default()
            .add_option("api=open=10s max_open=5s")
            .unwrap_err();
        assert_eq!(
            e,
            "\"max_open\" must not be less than \"open\" in \"circuit_breaker\" directive, or be \
             left out to follow \"open\" in --breaker"
        );
    }

    #[test]
    fn reads_the_companions_directives() {
        let text = "# configuration file /etc/nginx/nginx.conf:
upstream api {
    circuit_breaker_retry_budget 50% min=1;
    circuit_breaker window=5s;
    circuit_breaker_probe uri=/health timeout=1s;
    circuit_breaker_limit adaptive max=10;
}
";
        let mut s = Specs::default();
        assert_eq!(s.add_nginx_t(text), Ok(1));
        let (cfg, retry) = s.find("api", "default").unwrap().params(&[]).unwrap();
        assert!(cfg.active, "active probes");
        let retry = retry.unwrap();
        assert_eq!((retry.budget, retry.min_per_s), (5000, 1));
        let off = text.replace("50% min=1", "off");
        let mut s = Specs::default();
        s.add_nginx_t(&off).unwrap();
        assert_eq!(
            s.find("api", "default").unwrap().params(&[]).unwrap().1,
            None
        );
        let bad = text.replace("uri=/health", "url=/health");
        assert_eq!(
            Specs::default().add_nginx_t(&bad),
            Err(
                "invalid parameter \"url=/health\" in \"circuit_breaker_probe\" directive, \
                 did you mean \"uri\"? in /etc/nginx/nginx.conf:4"
                    .into()
            )
        );
    }

    #[test]
    fn quotes_across_lines_and_files_apart() {
        let mut s = Specs::default();
        let text = "# configuration file /etc/nginx/nginx.conf:
http {
    log_format x 'a
                  b';   # a comment; with { braces
    include conf.d/*.conf;
}

# configuration file /etc/nginx/conf.d/api.conf:
upstream api {
    circuit_breaker
        window=5s;
}
";
        assert_eq!(s.add_nginx_t(text), Ok(1));
        let spec = s.find("api", "default").unwrap();
        assert_eq!(spec.origin, "/etc/nginx/conf.d/api.conf:3");
        assert_eq!(spec.config(&[]).unwrap().window_s, 5);
        let bad = "# configuration file /x.conf:\nupstream api { circuit_breaker 'open=1s; }\n";
        assert_eq!(
            Specs::default().add_nginx_t(bad),
            Err("unexpected end of file in a quoted string in /x.conf:1".into())
        );
    }

    #[test]
    fn breaker_options() {
        let mut s = Specs::default();
        s.add_option("window=5s").unwrap();
        s.add_option("api=min_requests=5 failure=http_502").unwrap();
        s.add_option("api:checkout=min_requests=7").unwrap();
        let mr = |u, r| s.find(u, r).unwrap().config(&[]).unwrap().min_requests;
        assert_eq!(
            (
                mr("api", "checkout"),
                mr("api", "x"),
                mr("other", "default")
            ),
            (7, 5, 20)
        );
        assert_eq!(
            s.find("other", "x").unwrap().config(&[]).unwrap().window_s,
            5
        );
    }

    #[test]
    fn stream_breaker_options() {
        let mut s = Specs::default();
        s.add_option("stream:kv=first_byte=1s min_requests=4")
            .unwrap();
        let kv = s.find_stream("kv").unwrap().stream_params(&[]).unwrap();
        assert_eq!((kv.first_byte_ms, kv.cfg.min_requests), (1_000, 4));
        // Not an http upstream's: neither "kv" nor "stream" with a route "kv".
        assert!(s.find("kv", "default").is_none() && s.find("stream", "kv").is_none());
        // first_byte is the stream module's: refused elsewhere with the http module's words.
        let e = s.add_option("api=first_byte=1s").unwrap_err();
        assert!(e.starts_with("invalid parameter \"first_byte=1s\""), "{e}");
        // And what only the http module takes is refused as the stream module refuses it.
        let e = s.add_option("stream:kv=retry_budget=20%").unwrap_err();
        assert!(e.contains("is for http upstreams only"), "{e}");
        let e = s.add_option("stream:kv=failure=error").unwrap_err();
        assert!(
            e.starts_with("\"circuit_breaker_failure\" directive is not allowed"),
            "{e}"
        );
        assert!(s.add_option("stream:kv:r=window=5s").is_err());
        // No name: every other breaker of either kind, each taking what its module takes.
        s.add_option("window=5s first_byte=2s retry_budget=20% failure=error")
            .unwrap();
        let any = s.find_stream("other").unwrap();
        let p = any.stream_params(&[]).unwrap();
        assert_eq!((p.cfg.window_s, p.first_byte_ms), (5, 2_000));
        let (cfg, retry) = s.find("other", "default").unwrap().params(&[]).unwrap();
        assert_eq!(cfg.window_s, 5);
        assert!(retry.is_some());
        // A sweep of first_byte is the stream breakers'; the http ones ignore it.
        let set = [("first_byte".to_owned(), "500ms".to_owned())];
        assert_eq!(any.stream_params(&set).unwrap().first_byte_ms, 500);
        assert!(s.find("other", "default").unwrap().check(&set).is_ok());
        // The default bound, for a stream breaker given no first_byte.
        let mut s = Specs::default();
        s.add_option("window=5s").unwrap();
        let p = s.find_stream("x").unwrap().stream_params(&[]).unwrap();
        assert_eq!(p.first_byte_ms, 3_000);
    }
}
