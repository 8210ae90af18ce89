//! The NATS identities `t/84-fleet-nats-tls.t` gives a real nats-server and the instances, made
//! with NATS's own NKey library, as `nsc` (which Debian does not package) would make them:
//!
//! ```text
//! nats-keys nkey DIR NAME      DIR/NAME.nk, a user's NKey seed; prints its public key
//! nats-keys operator DIR       DIR/operator.jwt (an operator), DIR/account.pub and
//!                              DIR/account.jwt (an account it signed, for the server's
//!                              resolver), DIR/user.creds (a user of that account) and
//!                              DIR/stranger.creds (a user of an account the server does not
//!                              know)
//! ```
//!
//! A JWT is `base64url(header).base64url(claims).base64url(signature)`, the signature the
//! issuer's Ed25519 signature of the first two parts, with the claims NATS's JWT v2 reads.

use std::fs;
use std::path::Path;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use nkeys::KeyPair;
use serde_json::{json, Value};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let done = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["nkey", dir, name] => nkey(Path::new(dir), name),
        ["operator", dir] => operator(Path::new(dir)),
        _ => Err("usage: nats-keys nkey DIR NAME | nats-keys operator DIR".to_owned()),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nats-keys: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write(path: &Path, contents: &str) -> Result<(), String> {
    fs::write(path, contents).map_err(|e| format!("{}: {e}", path.display()))
}

fn seed(kp: &KeyPair) -> Result<String, String> {
    kp.seed().map_err(|e| e.to_string())
}

fn nkey(dir: &Path, name: &str) -> Result<(), String> {
    let user = KeyPair::new_user();
    write(
        &dir.join(format!("{name}.nk")),
        &format!("{}\n", seed(&user)?),
    )?;
    println!("{}", user.public_key());
    Ok(())
}

/// A JWT of `claims` (`nats` and `name`), about `subject`, signed by `issuer`.
fn jwt(issuer: &KeyPair, subject: &str, name: &str, nats: Value) -> Result<String, String> {
    let iat = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs();
    let header = json!({ "typ": "JWT", "alg": "ed25519-nkey" });
    let claims = json!({
        "jti": format!("{subject}{iat}"),
        "iat": iat,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let sig = issuer.sign(signed.as_bytes()).map_err(|e| e.to_string())?;
    Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig)))
}

fn account_claims() -> Value {
    json!({
        "limits": { "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                    "wildcards": true, "conn": -1, "leaf": -1 },
        "default_permissions": { "pub": {}, "sub": {} },
        "type": "account",
        "version": 2,
    })
}

/// A user of `account`, as a `.creds` file.
fn creds(account: &KeyPair, name: &str) -> Result<String, String> {
    let user = KeyPair::new_user();
    let nats = json!({ "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                       "type": "user", "version": 2 });
    let token = jwt(account, &user.public_key(), name, nats)?;
    Ok(format!(
        "-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n",
        seed(&user)?
    ))
}

fn operator(dir: &Path) -> Result<(), String> {
    let op = KeyPair::new_operator();
    let op_jwt = jwt(
        &op,
        &op.public_key(),
        "cb-test",
        json!({ "type": "operator", "version": 2 }),
    )?;
    let account = KeyPair::new_account();
    let acc_jwt = jwt(&op, &account.public_key(), "fleet", account_claims())?;
    write(&dir.join("operator.jwt"), &op_jwt)?;
    write(&dir.join("account.pub"), &account.public_key())?;
    write(&dir.join("account.jwt"), &acc_jwt)?;
    write(&dir.join("user.creds"), &creds(&account, "edge")?)?;
    write(
        &dir.join("stranger.creds"),
        &creds(&KeyPair::new_account(), "stranger")?,
    )?;
    Ok(())
}
