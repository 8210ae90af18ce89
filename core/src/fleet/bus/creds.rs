//! The bus's own credentials (`nats_credentials=`): what this instance tells the NATS
//! server in its `CONNECT`, read from a file that nginx reads with its configuration. One of:
//!
//! ```text
//! # a user and a password
//! user edge-fra-1
//! password 7dcd…
//! ```
//!
//! or `token 7dcd…` alone (lines are `word value`; blank lines and `#` comments are
//! skipped); or an NKey seed alone (`SU…`, as `nsc` writes a user's `.nk` file); or a
//! `.creds` file as `nsc` writes one, a user's JWT and its NKey seed each between two fence
//! lines. With an NKey the server's nonce is signed ([`Credentials::connect_auth`]) with
//! NATS's own NKey library; the seed never leaves this instance. Nothing of a value appears
//! in an error.

use base64::Engine as _;
use nkeys::{KeyPair, KeyPairType};

/// The longest credentials file read (a `.creds` file's JWT grows with its permissions).
pub const MAX_FILE_BYTES: usize = 16 * 1024;
/// The longest user JWT taken.
const MAX_JWT_BYTES: usize = 12 * 1024;

/// What the file holds.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    UserPassword {
        user: String,
        password: String,
    },
    Token(String),
    /// An NKey user's seed: the public key and the nonce's signature are sent.
    Nkey {
        seed: String,
    },
    /// A user JWT and the seed of its NKey (a `.creds` file): the JWT and the nonce's
    /// signature are sent.
    Jwt {
        jwt: String,
        seed: String,
    },
}

impl core::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never a password, a token or a seed.
        match self {
            Credentials::UserPassword { user, .. } => write!(f, "UserPassword({user:?}, …)"),
            Credentials::Token(_) => f.write_str("Token(…)"),
            Credentials::Nkey { .. } => f.write_str("Nkey(…)"),
            Credentials::Jwt { .. } => f.write_str("Jwt(…)"),
        }
    }
}

/// What `CONNECT` carries of the credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConnectAuth {
    pub user: Option<String>,
    pub pass: Option<String>,
    pub auth_token: Option<String>,
    pub nkey: Option<String>,
    pub jwt: Option<String>,
    /// The server's nonce signed with the NKey, in base64url without padding.
    pub sig: Option<String>,
}

impl core::fmt::Debug for ConnectAuth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ConnectAuth")
            .field("user", &self.user)
            .field("nkey", &self.nkey)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Reads a credentials file's contents; the error says what is wrong, never a value.
    pub fn parse(contents: &[u8]) -> Result<Credentials, &'static str> {
        if contents.len() > MAX_FILE_BYTES {
            return Err("is longer than 16384 bytes");
        }
        let text = core::str::from_utf8(contents).map_err(|_| "is not UTF-8 text")?;
        if text.lines().any(is_fence) {
            return creds_file(text);
        }
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        if let [one] = lines.as_slice() {
            if one.starts_with('S') && !one.contains([' ', '\t']) {
                return Ok(Credentials::Nkey {
                    seed: user_seed(one)?,
                });
            }
        }
        word_values(&lines)
    }

    /// What `CONNECT` says to a server whose `INFO` gave `nonce`: a user and password, a
    /// token, or the NKey's public key (or the JWT) and the nonce signed with the seed. An
    /// NKey needs the nonce: a server that sent none is not answered.
    pub fn connect_auth(&self, nonce: Option<&str>) -> Result<ConnectAuth, &'static str> {
        let sign = |seed: &str| -> Result<(String, String), &'static str> {
            let nonce = nonce.ok_or("the server sent no nonce to sign with the NKey")?;
            let kp = KeyPair::from_seed(seed).map_err(|_| "the NKey seed does not decode")?;
            let sig = kp
                .sign(nonce.as_bytes())
                .map_err(|_| "the NKey could not sign the nonce")?;
            Ok((
                kp.public_key(),
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig),
            ))
        };
        Ok(match self {
            Credentials::UserPassword { user, password } => ConnectAuth {
                user: Some(user.clone()),
                pass: Some(password.clone()),
                ..ConnectAuth::default()
            },
            Credentials::Token(t) => ConnectAuth {
                auth_token: Some(t.clone()),
                ..ConnectAuth::default()
            },
            Credentials::Nkey { seed } => {
                let (public, sig) = sign(seed)?;
                ConnectAuth {
                    nkey: Some(public),
                    sig: Some(sig),
                    ..ConnectAuth::default()
                }
            }
            Credentials::Jwt { jwt, seed } => {
                let (_, sig) = sign(seed)?;
                ConnectAuth {
                    jwt: Some(jwt.clone()),
                    sig: Some(sig),
                    ..ConnectAuth::default()
                }
            }
        })
    }
}

/// A fence line of a `.creds` file: `-----BEGIN NATS USER JWT-----`, `------END …------`.
fn is_fence(line: &str) -> bool {
    let l = line.trim();
    l.len() >= 6 && l.starts_with("---") && l.ends_with("---")
}

/// A `.creds` file: the first fenced line is the JWT, the second the seed (as NATS's clients
/// read one).
fn creds_file(text: &str) -> Result<Credentials, &'static str> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut fenced = Vec::new();
    let mut i = 0;
    while i + 2 < lines.len() {
        if is_fence(lines[i]) && !is_fence(lines[i + 1]) && is_fence(lines[i + 2]) {
            fenced.push(lines[i + 1]);
            i += 3;
        } else {
            i += 1;
        }
    }
    let [jwt, seed] = fenced.as_slice() else {
        return Err("is not a .creds file: a JWT and an NKey seed, each between fence lines");
    };
    let jwt_ok = !jwt.is_empty()
        && jwt.len() <= MAX_JWT_BYTES
        && jwt.split('.').count() == 3
        && jwt
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.=".contains(&b));
    if !jwt_ok {
        return Err("has a JWT that is not one");
    }
    Ok(Credentials::Jwt {
        jwt: (*jwt).to_owned(),
        seed: user_seed(seed)?,
    })
}

/// An NKey seed that decodes to a user's key.
fn user_seed(seed: &str) -> Result<String, &'static str> {
    let kp = KeyPair::from_seed(seed).map_err(|_| "has an NKey seed that does not decode")?;
    if kp.key_pair_type() != KeyPairType::User {
        return Err("has an NKey seed that is not a user's (SU…)");
    }
    Ok(seed.to_owned())
}

fn word_values(lines: &[&str]) -> Result<Credentials, &'static str> {
    let (mut user, mut password, mut token) = (None, None, None);
    for line in lines {
        let (word, value) = line
            .split_once([' ', '\t'])
            .map(|(w, v)| (w, v.trim()))
            .ok_or("has a line without a value")?;
        if value.is_empty() || value.chars().any(char::is_control) {
            return Err("has an empty value or one with control characters");
        }
        let slot = match word {
            "user" => &mut user,
            "password" => &mut password,
            "token" => &mut token,
            _ => return Err("has a line other than \"user\", \"password\" or \"token\""),
        };
        if slot.replace(value.to_owned()).is_some() {
            return Err("names a word twice");
        }
    }
    match (user, password, token) {
        (Some(user), Some(password), None) => Ok(Credentials::UserPassword { user, password }),
        (None, None, Some(t)) => Ok(Credentials::Token(t)),
        (None, None, None) => Err("is empty"),
        (_, _, Some(_)) => Err("has a token and a user or password: one or the other"),
        _ => Err("needs both \"user\" and \"password\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_a_user_and_password_or_a_token() {
        assert_eq!(
            Credentials::parse(b"# edge\nuser  a\n\npassword p w\n"),
            Ok(Credentials::UserPassword {
                user: "a".into(),
                password: "p w".into()
            })
        );
        assert_eq!(
            Credentials::parse(b"token t\r\n"),
            Ok(Credentials::Token("t".into()))
        );
        for (bad, why) in [
            (&b""[..], "is empty"),
            (b"user a\n", "needs both \"user\" and \"password\""),
            (
                b"token t\nuser a\n",
                "has a token and a user or password: one or the other",
            ),
            (b"token t\ntoken u\n", "names a word twice"),
            (
                b"secret s\n",
                "has a line other than \"user\", \"password\" or \"token\"",
            ),
            (b"token\n", "has a line without a value"),
            (b"\xff\n", "is not UTF-8 text"),
        ] {
            assert_eq!(Credentials::parse(bad), Err(why), "{bad:?}");
        }
        let shown = format!(
            "{:?}",
            Credentials::parse(b"user a\npassword hunter2").unwrap()
        );
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!format!("{:?}", Credentials::Token("hunter2".into())).contains("hunter2"));
    }

    fn creds(jwt: &str, seed: &str) -> String {
        format!(
            "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n"
        )
    }

    #[test]
    fn an_nkey_signs_the_server_s_nonce() {
        let user = KeyPair::new_user();
        let seed = user.seed().unwrap();
        let c = Credentials::parse(format!("# fra-edge-1\n{seed}\n").as_bytes()).unwrap();
        assert_eq!(c, Credentials::Nkey { seed: seed.clone() });
        let a = c.connect_auth(Some("MNrt84sed-REBCg")).unwrap();
        assert_eq!(a.nkey.as_deref(), Some(user.public_key().as_str()));
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(a.sig.unwrap())
            .unwrap();
        // The server verifies it with the public key alone.
        let public = KeyPair::from_public_key(&user.public_key()).unwrap();
        assert!(public.verify(b"MNrt84sed-REBCg", &sig).is_ok());
        assert!(public.verify(b"another nonce", &sig).is_err());
        assert!((a.user, a.pass, a.jwt, a.auth_token) == (None, None, None, None));
        assert_eq!(
            c.connect_auth(None),
            Err("the server sent no nonce to sign with the NKey")
        );
        // Never the seed in what is shown.
        assert!(!format!("{c:?}").contains(&seed));
        // An account's seed, or one altered, is refused.
        let account = KeyPair::new_account().seed().unwrap();
        assert_eq!(
            Credentials::parse(account.as_bytes()),
            Err("has an NKey seed that is not a user's (SU…)")
        );
        let mut bad = seed.clone().into_bytes();
        bad[10] = if bad[10] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            Credentials::parse(&bad),
            Err("has an NKey seed that does not decode")
        );
    }

    #[test]
    fn a_creds_file_gives_its_jwt_and_signs_with_its_seed() {
        let user = KeyPair::new_user();
        let seed = user.seed().unwrap();
        let jwt = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJzdWIiOiJVIn0.c2ln";
        let c = Credentials::parse(creds(jwt, &seed).as_bytes()).unwrap();
        assert_eq!(
            c,
            Credentials::Jwt {
                jwt: jwt.into(),
                seed: seed.clone()
            }
        );
        let a = c.connect_auth(Some("nonce")).unwrap();
        assert_eq!(a.jwt.as_deref(), Some(jwt));
        assert_eq!(a.nkey, None);
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(a.sig.unwrap())
            .unwrap();
        assert!(user.verify(b"nonce", &sig).is_ok());
        assert!(!format!("{c:?}").contains(&seed) && !format!("{c:?}").contains(jwt));
        for (bad, why) in [
            (creds("not a jwt", &seed), "has a JWT that is not one"),
            (creds("a.b", &seed), "has a JWT that is not one"),
            (
                creds(jwt, "SUnotaseed"),
                "has an NKey seed that does not decode",
            ),
            (
                "-----BEGIN NATS USER JWT-----\nx.y.z\n------END NATS USER JWT------\n".into(),
                "is not a .creds file: a JWT and an NKey seed, each between fence lines",
            ),
        ] {
            assert_eq!(Credentials::parse(bad.as_bytes()), Err(why), "{bad}");
        }
        assert_eq!(
            Credentials::parse(&vec![b'a'; MAX_FILE_BYTES + 1]),
            Err("is longer than 16384 bytes")
        );
    }
}
