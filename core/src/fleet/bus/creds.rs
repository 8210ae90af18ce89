//! The bus's own credentials (`nats_credentials=`): what this instance tells the NATS
//! server in its `CONNECT`, read from a file that nginx reads with its configuration.
//!
//! ```text
//! # a user and a password
//! user edge-fra-1
//! password 7dcd…
//! ```
//!
//! or `token 7dcd…` alone. Lines are `word value`; blank lines and `#` comments are skipped.
//! Nothing of a value appears in an error.

/// The longest credentials file read.
pub const MAX_FILE_BYTES: usize = 4096;

/// What the file holds.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    UserPassword { user: String, password: String },
    Token(String),
}

impl core::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never a password or a token.
        match self {
            Credentials::UserPassword { user, .. } => write!(f, "UserPassword({user:?}, …)"),
            Credentials::Token(_) => f.write_str("Token(…)"),
        }
    }
}

impl Credentials {
    /// Reads a credentials file's contents; the error says what is wrong, never a value.
    pub fn parse(contents: &[u8]) -> Result<Credentials, &'static str> {
        if contents.len() > MAX_FILE_BYTES {
            return Err("is longer than 4096 bytes");
        }
        let text = core::str::from_utf8(contents).map_err(|_| "is not UTF-8 text")?;
        let (mut user, mut password, mut token) = (None, None, None);
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
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
}
