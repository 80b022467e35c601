//! The SASL/SCRAM users of a data directory (`kafkalite users`), as Kafka keeps SCRAM
//! credentials: per user and mechanism a random salt, the PBKDF2 iteration count, StoredKey and
//! ServerKey (RFC 5802 §3). The password itself is never stored, so a copy of the file does not
//! reveal it, and the server can check a client's proof without it.
//!
//! The file, `files::USERS_FILE` in the data directory, is JSON, readable by its owner only
//! (0600), replaced atomically under the data directory's admin lock:
//!
//! ```text
//! {"version": 1, "users": {"alice": {"SCRAM-SHA-256": {"salt": "<base64>", "iterations": 4096,
//!                                                     "stored_key": "<base64>", "server_key": "<base64>"}}}}
//! ```
//!
//! The server reads it again whenever it changed (`server::credentials`), so a user added or
//! deleted while it runs counts from the next authentication on (as Kafka applies credential
//! changes without a restart), whether by `kafkalite users` or by AlterUserScramCredentials
//! (`alter`) on any server of the directory.

use std::collections::BTreeMap;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256, Sha512};

use crate::storage::error::{Error, IoContext, Result};
use crate::storage::files::USERS_FILE;

/// Kafka's `ScramMechanism` minimum iteration count (RFC 7677 asks for at least 4096).
pub const MIN_ITERATIONS: u32 = 4096;
/// Kafka's `ScramMechanism` maximum iteration count.
pub const MAX_ITERATIONS: u32 = 16384;
/// What `kafkalite users add` uses unless told (Kafka's default, 4096).
pub const DEFAULT_ITERATIONS: u32 = 4096;
/// Bytes of random salt per credential.
pub const SALT_BYTES: usize = 32;
/// The longest user name accepted (Kafka has none; this keeps SCRAM messages small).
pub const MAX_USER_NAME: usize = 255;

/// The SASL mechanisms the server offers, by Kafka's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::ScramSha256, Mechanism::ScramSha512];

    /// Kafka's (and IANA's) name, as clients send it in SaslHandshake.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism named `name` exactly (SASL names are case-sensitive, as in Kafka).
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Bytes in one hash output (and so in StoredKey, ServerKey and a client proof).
    pub fn hash_len(self) -> usize {
        match self {
            Mechanism::ScramSha256 => 32,
            Mechanism::ScramSha512 => 64,
        }
    }

    /// H(data).
    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::ScramSha256 => Sha256::digest(data).to_vec(),
            Mechanism::ScramSha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// HMAC(key, data).
    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::ScramSha256 => mac::<Hmac<Sha256>>(key, data),
            Mechanism::ScramSha512 => mac::<Hmac<Sha512>>(key, data),
        }
    }

    /// Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC-H, one hash output long.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0; self.hash_len()];
        match self {
            Mechanism::ScramSha256 => pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out),
            Mechanism::ScramSha512 => pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out),
        }
        out
    }
}

fn mac<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length (RFC 2104: longer keys are hashed first), so this cannot fail.
    let mut m = <M as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// `n` bytes from the operating system's random source (salts, nonces).
pub fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let mut out = vec![0; n];
    getrandom::fill(&mut out)
        .map_err(|e| Error::io("cannot read random bytes from the operating system", std::io::Error::other(e)))?;
    Ok(out)
}

/// What the server keeps of one user's password for one mechanism.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl Credential {
    /// The credential for `password` with `salt` (RFC 5802 §3: StoredKey = H(HMAC(SaltedPassword,
    /// "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")).
    pub fn derive(mechanism: Mechanism, password: &[u8], salt: &[u8], iterations: u32) -> Credential {
        let salted = mechanism.salted_password(password, salt, iterations);
        let client_key = mechanism.hmac(&salted, b"Client Key");
        Credential {
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(&salted, b"Server Key"),
        }
    }

    /// The credential for a salted password (Hi(password, salt, iterations)) computed by the
    /// client, as Kafka's AlterUserScramCredentials carries it: the password never travels.
    pub fn from_salted(
        mechanism: Mechanism,
        salt: &[u8],
        salted_password: &[u8],
        iterations: u32,
    ) -> Result<Credential> {
        check_iterations(iterations)?;
        if salt.is_empty() || salted_password.is_empty() {
            return Err(Error::config("the salt and the salted password must not be empty"));
        }
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        Ok(Credential {
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
        })
    }

    /// A new credential for `password` with a fresh random salt.
    pub fn new(mechanism: Mechanism, password: &[u8], iterations: u32) -> Result<Credential> {
        check_iterations(iterations)?;
        Ok(Credential::derive(mechanism, password, &random_bytes(SALT_BYTES)?, iterations))
    }

    fn to_json(&self) -> Value {
        json!({
            "salt": BASE64.encode(&self.salt),
            "iterations": self.iterations,
            "stored_key": BASE64.encode(&self.stored_key),
            "server_key": BASE64.encode(&self.server_key),
        })
    }

    fn from_json(mechanism: Mechanism, v: &Value) -> Option<Credential> {
        let bytes = |key: &str| v.get(key)?.as_str().and_then(|s| BASE64.decode(s).ok());
        let iterations = u32::try_from(v.get("iterations")?.as_u64()?).ok()?;
        let c = Credential {
            salt: bytes("salt")?,
            iterations,
            stored_key: bytes("stored_key")?,
            server_key: bytes("server_key")?,
        };
        let sane = !c.salt.is_empty()
            && (MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations)
            && c.stored_key.len() == mechanism.hash_len()
            && c.server_key.len() == mechanism.hash_len();
        sane.then_some(c)
    }
}

fn check_iterations(iterations: u32) -> Result<()> {
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
        return Err(Error::config(format!(
            "iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS} (Kafka's SCRAM limits), got {iterations}"
        )));
    }
    Ok(())
}

/// A user name SCRAM can carry: non-empty, at most `MAX_USER_NAME` bytes, no control characters
/// (',' and '=' are fine: SCRAM escapes them).
pub fn validate_user_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_USER_NAME || name.chars().any(char::is_control) {
        return Err(Error::config(format!(
            "user name {name:?} is not valid: use 1 to {MAX_USER_NAME} bytes without control characters"
        )));
    }
    Ok(())
}

/// Every user with the mechanisms it has a credential for (and their iteration counts).
pub fn list(dir: &Path) -> Result<BTreeMap<String, Vec<(Mechanism, u32)>>> {
    Ok(read(dir)?
        .into_iter()
        .map(|(user, creds)| (user, creds.into_iter().map(|(m, c)| (m, c.iterations)).collect()))
        .collect())
}

/// True when the data directory has at least one user (a non-loopback listener needs one).
pub fn any(dir: &Path) -> Result<bool> {
    Ok(!read(dir)?.is_empty())
}

/// `user`'s credential for `mechanism`, None when there is none.
pub fn credential(dir: &Path, user: &str, mechanism: Mechanism) -> Result<Option<Credential>> {
    Ok(read(dir)?.remove(user).and_then(|mut creds| creds.remove(&mechanism)))
}

/// Add `user` or replace its credential for each of `mechanisms` (its others are kept, as Kafka's
/// `alterUserScramCredentials` upserts per mechanism).
pub fn add(dir: &Path, user: &str, password: &[u8], mechanisms: &[Mechanism], iterations: u32) -> Result<()> {
    validate_user_name(user)?;
    check_iterations(iterations)?;
    if password.is_empty() {
        return Err(Error::config("the password is empty; give a non-empty password"));
    }
    if mechanisms.is_empty() {
        return Err(Error::config("no mechanism given: use SCRAM-SHA-256 and/or SCRAM-SHA-512"));
    }
    // The key derivation is the slow part (deliberately): done before the lock is taken.
    let mut made = Vec::new();
    for &m in mechanisms {
        made.push((m, Credential::new(m, password, iterations)?));
    }
    // Like `kafkalite serve`, the first user may come before the data directory exists.
    std::fs::create_dir_all(dir).context(|| format!("cannot create data directory {}", dir.display()))?;
    update(dir, |users| {
        users.entry(user.to_string()).or_default().extend(made);
        true
    })
}

/// Remove `user`; false when there was no such user.
pub fn delete(dir: &Path, user: &str) -> Result<bool> {
    if !dir.join(USERS_FILE).exists() {
        return Ok(false); // no users at all (perhaps no data directory either)
    }
    let mut found = false;
    update(dir, |users| {
        found = users.remove(user).is_some();
        found
    })?;
    Ok(found)
}

/// One change of Kafka's AlterUserScramCredentials.
#[derive(Clone, Debug)]
pub enum Alteration {
    /// Add or replace `user`'s credential for this mechanism (its others are kept).
    Upsert { user: String, mechanism: Mechanism, credential: Credential },
    /// Remove `user`'s credential for this mechanism; a user left without any is removed.
    Delete { user: String, mechanism: Mechanism },
}

/// Apply `changes` in one atomic write of the file (none when nothing changes). Returns, per
/// change, whether it applied: false for a Delete of a credential that does not exist (Kafka's
/// RESOURCE_NOT_FOUND), which changes nothing.
pub fn alter(dir: &Path, changes: &[Alteration]) -> Result<Vec<bool>> {
    for change in changes {
        match change {
            Alteration::Upsert { user, credential, .. } => {
                validate_user_name(user)?;
                check_iterations(credential.iterations)?;
            }
            Alteration::Delete { user, .. } => validate_user_name(user)?,
        }
    }
    let mut applied = Vec::with_capacity(changes.len());
    update(dir, |users| {
        for change in changes {
            applied.push(match change {
                Alteration::Upsert { user, mechanism, credential } => {
                    users.entry(user.clone()).or_default().insert(*mechanism, credential.clone());
                    true
                }
                Alteration::Delete { user, mechanism } => {
                    let found = users.get_mut(user).is_some_and(|creds| creds.remove(mechanism).is_some());
                    if users.get(user).is_some_and(BTreeMap::is_empty) {
                        users.remove(user);
                    }
                    found
                }
            });
        }
        applied.iter().any(|a| *a)
    })?;
    Ok(applied)
}

/// Every user's credentials, by mechanism.
pub type Users = BTreeMap<String, BTreeMap<Mechanism, Credential>>;

fn damaged(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::CorruptMetadata(format!(
        "the users file {} is damaged ({what}); delete it and add the users again with `kafkalite users add NAME`",
        path.display()
    ))
}

/// The users file, parsed and checked; empty when there is none. A server keeps it parsed
/// (`server::credentials`) and calls this again only when the file changed.
pub fn read(dir: &Path) -> Result<Users> {
    let path = dir.join(USERS_FILE);
    let Some(text) = crate::storage::nofollow::read_if_exists(&path, "the users file")? else {
        return Ok(Users::new());
    };
    let data: Value = serde_json::from_slice(&text).map_err(|e| damaged(&path, e))?;
    if data.get("version") != Some(&json!(1)) {
        return Err(damaged(&path, "its version is not 1"));
    }
    let users = data.get("users").and_then(Value::as_object).ok_or_else(|| damaged(&path, "no \"users\" object"))?;
    let mut out = Users::new();
    for (user, creds) in users {
        let creds = creds.as_object().ok_or_else(|| damaged(&path, format!("user {user:?} is not an object")))?;
        let mut parsed = BTreeMap::new();
        for (name, cred) in creds {
            let m = Mechanism::from_name(name)
                .ok_or_else(|| damaged(&path, format!("user {user:?} has an unknown mechanism {name:?}")))?;
            let c = Credential::from_json(m, cred)
                .ok_or_else(|| damaged(&path, format!("user {user:?} has a malformed {name} credential")))?;
            parsed.insert(m, c);
        }
        out.insert(user.clone(), parsed);
    }
    Ok(out)
}

/// Apply `change` under the admin lock; write the file (0600, atomically) when it returns true.
fn update(dir: &Path, change: impl FnOnce(&mut Users) -> bool) -> Result<()> {
    let lock = crate::storage::datadir::admin_lock(dir)?;
    let mut users = read(dir)?;
    if change(&mut users) {
        let users: Map<String, Value> = users
            .iter()
            .map(|(user, creds)| {
                let creds: Map<String, Value> =
                    creds.iter().map(|(m, c)| (m.name().to_string(), c.to_json())).collect();
                (user.clone(), Value::Object(creds))
            })
            .collect();
        let text = serde_json::to_string_pretty(&json!({"version": 1, "users": users}))
            .map_err(|e| Error::config(format!("cannot encode the users file: {e}")))?;
        crate::storage::checkpoint::write_private_atomically(dir, USERS_FILE, text.as_bytes())?;
    }
    drop(lock);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 §3's example: user "user", password "pencil", salt "W22ZaJ0SNY7soEsUEjb6gQ==",
    /// 4096 iterations; the server signature it shows is HMAC(ServerKey, AuthMessage).
    #[test]
    fn rfc7677_credential() {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let c = Credential::derive(Mechanism::ScramSha256, b"pencil", &salt, 4096);
        let auth = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                    s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let server_signature = Mechanism::ScramSha256.hmac(&c.server_key, auth.as_bytes());
        assert_eq!(BASE64.encode(server_signature), "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        let client_signature = Mechanism::ScramSha256.hmac(&c.stored_key, auth.as_bytes());
        let proof = BASE64.decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=").unwrap();
        let client_key: Vec<u8> = proof.iter().zip(&client_signature).map(|(a, b)| a ^ b).collect();
        assert_eq!(Mechanism::ScramSha256.hash(&client_key), c.stored_key);
    }

    #[test]
    fn store_round_trip_private_and_without_password() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        assert!(!any(dir.path()).unwrap());
        add(dir.path(), "alice", b"s3cret-password", &Mechanism::ALL, 4096).unwrap();
        add(dir.path(), "bob", b"other", &[Mechanism::ScramSha512], 8192).unwrap();
        let users = list(dir.path()).unwrap();
        assert_eq!(users["alice"], vec![(Mechanism::ScramSha256, 4096), (Mechanism::ScramSha512, 4096)]);
        assert_eq!(users["bob"], vec![(Mechanism::ScramSha512, 8192)]);
        let c = credential(dir.path(), "alice", Mechanism::ScramSha256).unwrap().unwrap();
        assert_eq!(c, Credential::derive(Mechanism::ScramSha256, b"s3cret-password", &c.salt, 4096));
        let path = dir.path().join(USERS_FILE);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        assert!(delete(dir.path(), "alice").unwrap());
        assert!(!delete(dir.path(), "alice").unwrap());
        assert_eq!(list(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn alterations_per_mechanism() {
        let dir = tempfile::tempdir().unwrap();
        let m = Mechanism::ScramSha512;
        let salted = m.salted_password(b"pw", b"salt", 8192);
        let credential = Credential::from_salted(m, b"salt", &salted, 8192).unwrap();
        assert_eq!(credential, Credential::derive(m, b"pw", b"salt", 8192), "the client's salting is RFC 5802's");
        assert!(Credential::from_salted(m, b"salt", &salted, 4095).is_err());
        assert!(Credential::from_salted(m, b"", &salted, 4096).is_err());
        add(dir.path(), "alice", b"pw", &[Mechanism::ScramSha256], 4096).unwrap();
        let upsert = Alteration::Upsert { user: "alice".into(), mechanism: m, credential };
        let missing = Alteration::Delete { user: "bob".into(), mechanism: m };
        assert_eq!(alter(dir.path(), &[upsert, missing]).unwrap(), vec![true, false]);
        assert_eq!(list(dir.path()).unwrap()["alice"], vec![(Mechanism::ScramSha256, 4096), (m, 8192)]);
        let both = [Mechanism::ScramSha256, m].map(|mechanism| Alteration::Delete { user: "alice".into(), mechanism });
        assert_eq!(alter(dir.path(), &both).unwrap(), vec![true, true]);
        assert!(list(dir.path()).unwrap().is_empty(), "a user without credentials is gone");
    }

    #[test]
    fn refuses_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        assert!(add(dir.path(), "", b"p", &Mechanism::ALL, 4096).is_err());
        assert!(add(dir.path(), "a\nb", b"p", &Mechanism::ALL, 4096).is_err());
        assert!(add(dir.path(), "a", b"", &Mechanism::ALL, 4096).is_err());
        assert!(add(dir.path(), "a", b"p", &Mechanism::ALL, 4095).is_err());
        assert!(add(dir.path(), "a", b"p", &[], 4096).is_err());
        std::fs::write(dir.path().join(USERS_FILE), "{\"version\": 1, \"users\": {\"a\": 3}}").unwrap();
        let err = list(dir.path()).unwrap_err().to_string();
        assert!(err.contains("kafkalite users add"), "{err}");
    }
}
