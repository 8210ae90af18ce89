//! What a client sends: `CONNECT`, `SUB`, `UNSUB`, `PUB`, `PING` and `PONG`, each built
//! whole, ready to write. Subjects are checked here, before they are sent: nats-server answers
//! a bad one with `-ERR` and keeps the connection, so a bad subject sent would be a message
//! lost without a word to the caller.

use serde_json::{Map, Value};

use super::error::{shown, ProtoError};

/// The longest subject (and queue group) sent, in bytes. NATS sets no hard limit, but its
/// documentation advises subjects under 256 characters; and with a reply subject of the same
/// bound, a `PUB` line stays far within nats-server's 4096-byte control line, which it closes
/// the connection over.
pub const MAX_SUBJECT_LEN: usize = 255;

/// `CONNECT`'s options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connect {
    /// `+OK` after every operation: costs a line each, and tells nothing `-ERR` does not.
    pub verbose: bool,
    /// Stricter checks by the server.
    pub pedantic: bool,
    /// The client insists on TLS.
    pub tls_required: bool,
    /// The connection's name, as the server's monitoring shows it.
    pub name: String,
    /// The client's language.
    pub lang: String,
    /// The client's version.
    pub version: String,
    /// 1: the server may send `INFO` again (cluster changes, lame duck mode).
    pub protocol: u8,
    /// Whether our own messages come back to our matching subscriptions.
    pub echo: bool,
    /// `HMSG` may be delivered. Without it, nats-server strips headers and delivers `MSG`.
    pub headers: bool,
    /// Requests to a subject nobody serves get a 503 status at once. Needs `headers`:
    /// nats-server refuses it without (`-ERR`, then closes).
    pub no_responders: bool,
    /// User name.
    pub user: Option<String>,
    /// Password.
    pub pass: Option<String>,
    /// Token.
    pub auth_token: Option<String>,
    /// Public nkey.
    pub nkey: Option<String>,
    /// The signature of INFO's nonce.
    pub sig: Option<String>,
    /// User JWT.
    pub jwt: Option<String>,
}

impl Default for Connect {
    /// The protocol's defaults, but not verbose (`+OK` lines are noise), protocol 1, and this
    /// crate's name and version.
    fn default() -> Self {
        Connect {
            verbose: false,
            pedantic: false,
            tls_required: false,
            name: String::new(),
            lang: "rust".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            protocol: 1,
            echo: true,
            headers: false,
            no_responders: false,
            user: None,
            pass: None,
            auth_token: None,
            nkey: None,
            sig: None,
            jwt: None,
        }
    }
}

/// `CONNECT {json}\r\n`. The JSON is serde_json's, so that names and credentials are escaped;
/// options that are `None` are left out.
pub fn connect(c: &Connect) -> Vec<u8> {
    let mut o = Map::new();
    let mut flag = |k: &str, v: bool| o.insert(k.into(), Value::Bool(v));
    flag("verbose", c.verbose);
    flag("pedantic", c.pedantic);
    flag("tls_required", c.tls_required);
    flag("echo", c.echo);
    flag("headers", c.headers);
    flag("no_responders", c.no_responders);
    o.insert("protocol".into(), Value::from(c.protocol));
    for (k, v) in [
        ("name", &c.name),
        ("lang", &c.lang),
        ("version", &c.version),
    ] {
        o.insert(k.into(), Value::String(v.clone()));
    }
    for (k, v) in [
        ("user", &c.user),
        ("pass", &c.pass),
        ("auth_token", &c.auth_token),
        ("nkey", &c.nkey),
        ("sig", &c.sig),
        ("jwt", &c.jwt),
    ] {
        if let Some(v) = v {
            o.insert(k.into(), Value::String(v.clone()));
        }
    }
    let mut out = b"CONNECT ".to_vec();
    out.extend_from_slice(Value::Object(o).to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

/// `SUB <subject> [queue] <sid>\r\n`. The subject may hold wildcards.
pub fn subscribe(subject: &str, queue: Option<&str>, sid: u64) -> Result<Vec<u8>, ProtoError> {
    if !valid_subject(subject, true) {
        return Err(ProtoError::InvalidSubject(shown(subject.as_bytes())));
    }
    let mut out = Vec::with_capacity(subject.len() + queue.map_or(0, str::len) + 32);
    out.extend_from_slice(b"SUB ");
    out.extend_from_slice(subject.as_bytes());
    if let Some(q) = queue {
        if !valid_queue(q) {
            return Err(ProtoError::InvalidQueue(shown(q.as_bytes())));
        }
        out.push(b' ');
        out.extend_from_slice(q.as_bytes());
    }
    out.push(b' ');
    out.extend_from_slice(itoa::Buffer::new().format(sid).as_bytes());
    out.extend_from_slice(b"\r\n");
    Ok(out)
}

/// `UNSUB <sid> [max]\r\n`: with `max`, the server unsubscribes after that many messages in
/// all (those already delivered count).
pub fn unsubscribe(sid: u64, max: Option<u64>) -> Vec<u8> {
    let mut b = itoa::Buffer::new();
    let mut out = b"UNSUB ".to_vec();
    out.extend_from_slice(b.format(sid).as_bytes());
    if let Some(max) = max {
        out.push(b' ');
        out.extend_from_slice(b.format(max).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// `PUB <subject> [reply] <size>\r\n<payload>\r\n`. Neither subject may hold a wildcard, and
/// the payload must fit the server's `max_payload` (nats-server closes the connection over a
/// larger one).
pub fn publish(
    subject: &str,
    reply: Option<&str>,
    payload: &[u8],
    max_payload: usize,
) -> Result<Vec<u8>, ProtoError> {
    for s in std::iter::once(subject).chain(reply) {
        if !valid_subject(s, false) {
            return Err(ProtoError::InvalidSubject(shown(s.as_bytes())));
        }
    }
    if payload.len() > max_payload {
        return Err(ProtoError::PayloadTooLarge {
            size: payload.len() as u64,
            max: max_payload,
        });
    }
    let mut out =
        Vec::with_capacity(subject.len() + reply.map_or(0, str::len) + payload.len() + 32);
    out.extend_from_slice(b"PUB ");
    out.extend_from_slice(subject.as_bytes());
    if let Some(r) = reply {
        out.push(b' ');
        out.extend_from_slice(r.as_bytes());
    }
    out.push(b' ');
    out.extend_from_slice(itoa::Buffer::new().format(payload.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
    Ok(out)
}

/// `PING\r\n`: the client's keep-alive; the server answers `PONG`.
pub fn ping() -> &'static [u8] {
    b"PING\r\n"
}

/// `PONG\r\n`: the answer to the server's `PING` (unanswered ones get the connection closed as
/// stale).
pub fn pong() -> &'static [u8] {
    b"PONG\r\n"
}

/// Whether `s` is a subject this client sends: 1 to [`MAX_SUBJECT_LEN`] bytes of printable
/// ASCII (no blank, no control byte: either would split or end the control line), tokens
/// separated by `.`, none empty. With `wildcards` (subscribing), a token may be `*`, and the
/// last may be `>`; without (publishing), neither character may appear at all. nats-server
/// itself takes any non-blank bytes; printable ASCII is what its documentation advises for
/// subjects every client can use.
pub fn valid_subject(s: &str, wildcards: bool) -> bool {
    if s.is_empty() || s.len() > MAX_SUBJECT_LEN || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return false;
    }
    let mut tokens = s.split('.').peekable();
    while let Some(t) = tokens.next() {
        let ok = match t {
            "" => false,
            "*" => wildcards,
            ">" => wildcards && tokens.peek().is_none(),
            t => !t.contains(['*', '>']),
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Whether `q` is a queue group this client sends: 1 to [`MAX_SUBJECT_LEN`] bytes of printable
/// ASCII (a queue group is one field of the `SUB` line).
pub fn valid_queue(q: &str) -> bool {
    !q.is_empty() && q.len() <= MAX_SUBJECT_LEN && q.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a client sent, as a server reads it.
    #[derive(Debug, PartialEq, Eq)]
    enum ClientOp {
        Connect(Value),
        Pub {
            subject: String,
            reply: Option<String>,
            payload: Vec<u8>,
        },
        Sub {
            subject: String,
            queue: Option<String>,
            sid: u64,
        },
        Unsub {
            sid: u64,
            max: Option<u64>,
        },
        Ping,
        Pong,
    }

    /// A server's reader of whole client operations, strict where ours is: one space between
    /// fields, CRLF, sizes exact. Returns the operations and panics on anything else.
    fn read_client(mut bytes: &[u8]) -> Vec<ClientOp> {
        let mut ops = Vec::new();
        while !bytes.is_empty() {
            let end = bytes.windows(2).position(|w| w == b"\r\n").expect("CRLF");
            let line = std::str::from_utf8(&bytes[..end]).expect("ASCII line");
            assert!(!line.contains(['\r', '\n', '\t']), "{line:?}");
            bytes = &bytes[end + 2..];
            let (op, rest) = line.split_once(' ').unwrap_or((line, ""));
            let f: Vec<&str> = rest.split(' ').collect();
            ops.push(match op {
                "CONNECT" => ClientOp::Connect(serde_json::from_str(rest).expect("JSON")),
                "PING" => ClientOp::Ping,
                "PONG" => ClientOp::Pong,
                "UNSUB" => ClientOp::Unsub {
                    sid: f[0].parse().unwrap(),
                    max: f.get(1).map(|m| m.parse().unwrap()),
                },
                "SUB" => ClientOp::Sub {
                    subject: f[0].into(),
                    queue: (f.len() == 3).then(|| f[1].into()),
                    sid: f[f.len() - 1].parse().unwrap(),
                },
                "PUB" => {
                    assert!(f.len() == 2 || f.len() == 3, "{line:?}");
                    let n: usize = f[f.len() - 1].parse().unwrap();
                    assert_eq!(&bytes[n..n + 2], b"\r\n");
                    let payload = bytes[..n].to_vec();
                    bytes = &bytes[n + 2..];
                    ClientOp::Pub {
                        subject: f[0].into(),
                        reply: (f.len() == 3).then(|| f[1].into()),
                        payload,
                    }
                }
                _ => panic!("unknown {line:?}"),
            });
        }
        ops
    }

    #[test]
    fn publish_reads_back() {
        let out = publish("fleet.op", Some("_INBOX.a1"), b"x\r\ny", 1024).unwrap();
        assert_eq!(out, b"PUB fleet.op _INBOX.a1 4\r\nx\r\ny\r\n");
        let out2 = publish("a", None, b"", 0).unwrap();
        assert_eq!(out2, b"PUB a 0\r\n\r\n");
        assert_eq!(
            read_client(&[out, out2].concat()),
            [
                ClientOp::Pub {
                    subject: "fleet.op".into(),
                    reply: Some("_INBOX.a1".into()),
                    payload: b"x\r\ny".to_vec(),
                },
                ClientOp::Pub {
                    subject: "a".into(),
                    reply: None,
                    payload: Vec::new(),
                },
            ]
        );
    }

    #[test]
    fn publish_refuses_bad_subjects_and_large_payloads() {
        for s in [
            "", "a..b", "a b", "a.*", ">.a", "a.>", ".a", "a.", "a\tb", "a\r\nb", "é",
        ] {
            assert_eq!(
                publish(s, None, b"x", 10),
                Err(ProtoError::InvalidSubject(shown(s.as_bytes()))),
                "{s:?}"
            );
            assert!(publish("ok", Some(s), b"x", 10).is_err(), "reply {s:?}");
        }
        let long = "a".repeat(MAX_SUBJECT_LEN + 1);
        assert!(publish(&long, None, b"", 10).is_err());
        assert!(publish(&long[1..], None, b"", 10).is_ok());
        let e = publish("a", None, &[0; 11], 10).unwrap_err();
        assert_eq!(e, ProtoError::PayloadTooLarge { size: 11, max: 10 });
        assert_eq!(e.to_string(), "payload of 11 bytes above max_payload 10");
        assert_eq!(
            publish("a b", None, b"", 1).unwrap_err().to_string(),
            "invalid subject \"a b\""
        );
    }

    #[test]
    fn subjects_follow_the_token_rules() {
        for s in [
            "a",
            "a.b.c",
            "$SYS.x",
            "_INBOX.AbC123",
            "a-b_c~d",
            "a.b*.c>",
            "A:B/C",
        ] {
            let literal = !s.contains(['*', '>']);
            assert_eq!(valid_subject(s, false), literal, "{s:?}");
        }
        for s in ["a.*", "*", ">", "a.>", "*.*.>", "a.*.b"] {
            assert!(valid_subject(s, true), "{s:?}");
            assert!(!valid_subject(s, false), "{s:?}");
        }
        for s in [
            "", ".", "a..b", ".a", "a.", "a b", "a\tb", "a\0b", "a\x7fb", "é", ">.a", "a.>.b",
            "a*", "a.b>", "**", ">>",
        ] {
            assert!(!valid_subject(s, true), "{s:?}");
            assert!(!valid_subject(s, false), "{s:?}");
        }
        assert!(valid_subject(&"a".repeat(255), false));
        assert!(!valid_subject(&"a".repeat(256), true));
    }

    #[test]
    fn subscribe_and_unsubscribe() {
        let out = [
            subscribe("fleet.>", None, 1).unwrap(),
            subscribe("fleet.*.op", Some("workers"), u64::MAX).unwrap(),
            unsubscribe(1, None),
            unsubscribe(7, Some(3)),
            ping().to_vec(),
            pong().to_vec(),
        ]
        .concat();
        assert_eq!(
            read_client(&out),
            [
                ClientOp::Sub {
                    subject: "fleet.>".into(),
                    queue: None,
                    sid: 1
                },
                ClientOp::Sub {
                    subject: "fleet.*.op".into(),
                    queue: Some("workers".into()),
                    sid: u64::MAX
                },
                ClientOp::Unsub { sid: 1, max: None },
                ClientOp::Unsub {
                    sid: 7,
                    max: Some(3)
                },
                ClientOp::Ping,
                ClientOp::Pong,
            ]
        );
        assert_eq!(subscribe("a.b", None, 9).unwrap(), b"SUB a.b 9\r\n");
        assert_eq!(unsubscribe(9, Some(0)), b"UNSUB 9 0\r\n");
        assert!(matches!(
            subscribe(">.a", None, 1),
            Err(ProtoError::InvalidSubject(_))
        ));
        assert!(matches!(
            subscribe("a..b", None, 1),
            Err(ProtoError::InvalidSubject(_))
        ));
        for q in ["", "a b", "a\r\n", &"q".repeat(256)] {
            assert_eq!(
                subscribe("a", Some(q), 1),
                Err(ProtoError::InvalidQueue(shown(q.as_bytes())))
            );
        }
    }

    #[test]
    fn connect_escapes_strings_and_leaves_out_none() {
        let c = Connect {
            name: "nginx \"edge\" \\ 1\n".into(),
            user: Some("fleet".into()),
            pass: Some("p\"w".into()),
            headers: true,
            echo: false,
            ..Connect::default()
        };
        let out = connect(&c);
        assert!(out.starts_with(b"CONNECT {"));
        assert!(out.ends_with(b"}\r\n"));
        // One line: the newline in the name is escaped.
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
        let [ClientOp::Connect(v)] = &read_client(&out)[..] else {
            panic!("not one CONNECT")
        };
        let o = v.as_object().unwrap();
        assert_eq!(o["name"], "nginx \"edge\" \\ 1\n");
        assert_eq!(o["user"], "fleet");
        assert_eq!(o["pass"], "p\"w");
        assert_eq!(o["lang"], "rust");
        assert_eq!(o["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(o["protocol"], 1);
        assert_eq!(o["verbose"], false);
        assert_eq!(o["pedantic"], false);
        assert_eq!(o["tls_required"], false);
        assert_eq!(o["echo"], false);
        assert_eq!(o["headers"], true);
        assert_eq!(o["no_responders"], false);
        for k in ["auth_token", "nkey", "sig", "jwt"] {
            assert!(!o.contains_key(k), "{k}");
        }
        assert_eq!(o.len(), 12);
    }

    proptest! {
        #[test]
        fn any_publish_reads_back(
            subject in "[A-Za-z0-9_$-]{1,10}(\\.[A-Za-z0-9_$-]{1,10}){0,5}",
            reply in proptest::option::of("_INBOX\\.[A-Za-z0-9]{1,22}"),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let out = publish(&subject, reply.as_deref(), &payload, 300).unwrap();
            prop_assert_eq!(read_client(&out), [ClientOp::Pub { subject, reply, payload }]);
        }

        #[test]
        fn a_subject_either_is_refused_or_stays_one_field(s in "\\PC{0,12}", w in any::<bool>()) {
            if valid_subject(&s, w) {
                let sub = subscribe(&s, None, 1).unwrap();
                let read = read_client(&sub);
                let want = ClientOp::Sub { subject: s.clone(), queue: None, sid: 1 };
                prop_assert_eq!(read, [want]);
            } else {
                prop_assert!(publish(&s, None, b"", 1).is_err());
            }
        }
    }
}
