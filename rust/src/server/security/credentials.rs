//! The SCRAM credentials a server checks clients against: the data directory's users file
//! (`crate::coordination::users`) kept parsed in memory, read again only when the file changed (another
//! process's `kafkalite users`, AlterUserScramCredentials on any server of the directory), as
//! Kafka keeps its credential cache updated on change. A client-first message costs one `stat`
//! and a map lookup, not a parse of every user, however many there are and however many
//! unauthenticated clients send one.
//!
//! A user that does not exist gets a made-up credential (`decoy`) that the exchange cannot tell
//! from a real one: its salt is derived from the name with a secret kept in the data directory
//! (`files::SCRAM_DECOY_KEY_FILE`, 0600, created once), so it is the same at every attempt,
//! restart and server of the directory; its iteration count and its salt's length and
//! alphabet are those of a real credential of that mechanism drawn stably per name (`Shape`;
//! 4096, Kafka's default, and 32 random bytes when there is none). The proof then fails like a
//! wrong password.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::coordination::users::{self, random_bytes, Credential, Mechanism, Users, DEFAULT_ITERATIONS, SALT_BYTES};
use crate::storage::checkpoint::{file_stamp, FileStamp};
use crate::storage::error::{Error, IoContext, Result};
use crate::storage::files::{SCRAM_DECOY_KEY_FILE, TMP_SUFFIX, USERS_FILE};

/// Bytes of the decoy secret.
const KEY_BYTES: usize = 32;

/// The users file as last read, and what the decoys draw their shapes from.
#[derive(Default)]
struct Parsed {
    users: Users,
    /// Per mechanism: the shapes of the real credentials, with how many users have each.
    shapes: BTreeMap<Mechanism, Vec<(Shape, u64)>>,
}

/// What a client sees of a credential before its proof: the iteration count, and the salt's
/// length and alphabet. Salts set by Kafka's own tools (AlterUserScramCredentials from its Admin
/// client, `kafka-configs`) are a 130-bit number in base 36 (`ScramFormatter.secureRandomBytes`,
/// 25 or 26 characters, never a leading 0, and a 26-character one always begins with 1),
/// `kafkalite users` ones 32 random bytes: a decoy of one shape among real users of the other
/// would tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Shape {
    iterations: u32,
    salt_len: usize,
    /// A base-36 salt's first character (Some), which is not uniform.
    base36: Option<u8>,
}

/// The alphabet of Java's `BigInteger.toString(Character.MAX_RADIX)`.
const BASE36: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

impl Shape {
    /// Kafka's default iteration count and `kafkalite users`' salts: when no real user has one.
    const DEFAULT: Shape = Shape { iterations: DEFAULT_ITERATIONS, salt_len: SALT_BYTES, base36: None };

    fn of(c: &Credential) -> Shape {
        let base36 = c.salt.iter().all(|b| BASE36.contains(b)).then(|| c.salt.first().copied()).flatten();
        Shape { iterations: c.iterations, salt_len: c.salt.len(), base36 }
    }
}

impl Parsed {
    fn of(users: Users) -> Parsed {
        let mut counts: BTreeMap<Mechanism, BTreeMap<Shape, u64>> = BTreeMap::new();
        for creds in users.values() {
            for (m, c) in creds {
                *counts.entry(*m).or_default().entry(Shape::of(c)).or_default() += 1;
            }
        }
        let shapes = counts.into_iter().map(|(m, c)| (m, c.into_iter().collect())).collect();
        Parsed { users, shapes }
    }
}

pub struct Credentials {
    dir: PathBuf,
    /// The decoy secret (empty while SASL is off: no exchange runs then).
    key: Vec<u8>,
    /// The stamp of the file (None: no file) and what was read from it; None before the first
    /// read. The stamp is taken before reading, so a change in between is read again next time.
    /// Consistent at any panic: replaced whole.
    seen: Mutex<Option<(Option<FileStamp>, Arc<Parsed>)>>,
    #[cfg(test)]
    parses: std::sync::atomic::AtomicU64,
    #[cfg(test)]
    decoys: std::sync::atomic::AtomicU64,
}

impl Credentials {
    /// `sasl`: the listener authenticates, so the decoy secret is read (created the first time).
    pub fn open(dir: &Path, sasl: bool) -> Result<Credentials> {
        let key = if sasl { decoy_key(dir)? } else { Vec::new() };
        Ok(Credentials {
            dir: dir.to_path_buf(),
            key,
            seen: Mutex::new(None),
            #[cfg(test)]
            parses: Default::default(),
            #[cfg(test)]
            decoys: Default::default(),
        })
    }

    /// The users file as it is now: the copy in memory unless the file changed since.
    fn current(&self) -> Result<Arc<Parsed>> {
        let now = file_stamp(&self.dir.join(USERS_FILE));
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        match &*seen {
            Some((stamp, parsed)) if *stamp == now => Ok(Arc::clone(parsed)),
            _ => {
                let parsed = Arc::new(Parsed::of(users::read(&self.dir)?));
                #[cfg(test)]
                self.parses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                ::log::debug!(target: crate::server::log_target::LOG_TARGET, "read the users file: {} users", parsed.users.len());
                *seen = Some((now, Arc::clone(&parsed)));
                Ok(parsed)
            }
        }
    }

    /// `user`'s credential for `mechanism` and true; for a user without one, a decoy and false.
    pub fn lookup(&self, user: &str, mechanism: Mechanism) -> Result<(Credential, bool)> {
        let parsed = self.current()?;
        // Made for a real user too: the server-first of a real one came about a microsecond
        // sooner (no HMACs, no random keys), which a few thousand tries measure over loopback.
        let decoy = std::hint::black_box(self.decoy(&parsed, user, mechanism));
        match parsed.users.get(user).and_then(|creds| creds.get(&mechanism)) {
            Some(c) => Ok((c.clone(), true)),
            None => Ok((decoy, false)),
        }
    }

    /// The made-up credential of a user that does not exist (see the module's header); its keys
    /// are random, so no password matches.
    fn decoy(&self, parsed: &Parsed, user: &str, m: Mechanism) -> Credential {
        #[cfg(test)]
        self.decoys.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let derive = |what: &str| m.hmac(&self.key, format!("{what}\0{}\0{user}", m.name()).as_bytes());
        let shape = match parsed.shapes.get(&m) {
            Some(counts) => {
                let total: u64 = counts.iter().map(|(_, n)| n).sum();
                let draw = derive("iterations");
                let mut at = u64::from_be_bytes(draw[..8].try_into().unwrap_or_default()) % total.max(1);
                let mut chosen = Shape::DEFAULT;
                for (shape, n) in counts {
                    chosen = *shape;
                    if at < *n {
                        break;
                    }
                    at -= n;
                }
                chosen
            }
            None => Shape::DEFAULT,
        };
        // As many derived bytes as the salt is long (one HMAC gives 32 or 64).
        let mut salt = derive("salt");
        for block in 1.. {
            if salt.len() >= shape.salt_len {
                break;
            }
            salt.extend(derive(&format!("salt{block}")));
        }
        salt.truncate(shape.salt_len);
        if let Some(lead) = shape.base36 {
            for b in &mut salt {
                *b = BASE36[usize::from(*b) % BASE36.len()];
            }
            salt[0] = lead;
        }
        let iterations = shape.iterations;
        let keys = random_bytes(2 * m.hash_len()).unwrap_or_else(|_| vec![0; 2 * m.hash_len()]);
        let (stored_key, server_key) = keys.split_at(m.hash_len());
        Credential { salt, iterations, stored_key: stored_key.to_vec(), server_key: server_key.to_vec() }
    }
}

/// The data directory's decoy secret, created the first time: written (0600) to a temp file of
/// this process, then hard-linked to its name, which fails if another server got there first
/// (its key is then used), so every server of the directory agrees on one key and none ever
/// reads a half-written one. Not through `checkpoint`: its fail points belong to the files the
/// tests kill writes of.
fn decoy_key(dir: &Path) -> Result<Vec<u8>> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(SCRAM_DECOY_KEY_FILE);
    if let Some(key) = read_key(&path)? {
        return Ok(key);
    }
    let tmp = dir.join(format!("{SCRAM_DECOY_KEY_FILE}.{}{TMP_SUFFIX}", std::process::id()));
    let _ = std::fs::remove_file(&tmp); // left by a crash of a process with this pid
    let written = (|| {
        let mut opts = crate::storage::nofollow::options();
        opts.write(true).create_new(true).mode(0o600);
        let mut f = crate::storage::nofollow::open(&opts, &tmp, "the SCRAM decoy key")?;
        f.write_all(&random_bytes(KEY_BYTES)?)
            .and_then(|()| f.sync_all())
            .context(|| format!("cannot write {}", tmp.display()))?;
        match std::fs::hard_link(&tmp, &path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                Err(e).context(|| format!("cannot create {}", path.display()))
            }
            _ => {
                std::fs::File::open(dir).and_then(|d| d.sync_all()).context(|| format!("cannot sync {}", dir.display()))
            }
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    written?;
    read_key(&path)?.ok_or_else(|| Error::config(format!("{} vanished while the server started", path.display())))
}

fn read_key(path: &Path) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut key = Vec::new();
    let read = crate::storage::nofollow::open_read(path, "the SCRAM decoy key")
        .and_then(|mut f| f.read_to_end(&mut key).context(|| format!("cannot read {}", path.display())));
    match read {
        Ok(_) if key.len() == KEY_BYTES => Ok(Some(key)),
        Ok(_) => Err(Error::CorruptMetadata(format!(
            "{} is damaged (not {KEY_BYTES} bytes); delete it (unknown SCRAM users then get other made-up salts)",
            path.display()
        ))),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iterations_of(c: &Credentials, user: &str, m: Mechanism) -> u32 {
        let (decoy, known) = c.lookup(user, m).unwrap();
        assert!(!known);
        decoy.iterations
    }

    #[test]
    fn a_real_user_costs_the_same_work_as_an_unknown_one() {
        // The decoy is what an unknown name costs more; a real user's lookup makes one too.
        let dir = tempfile::tempdir().unwrap();
        let m = Mechanism::ScramSha256;
        users::add(dir.path(), "alice", b"pw", &[m], 4096).unwrap();
        let c = Credentials::open(dir.path(), true).unwrap();
        assert!(c.lookup("alice", m).unwrap().1);
        assert_eq!(c.decoys.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!(!c.lookup("mallory", m).unwrap().1);
        assert_eq!(c.decoys.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[test]
    fn decoys_take_the_salts_of_kafkas_tools_among_their_users() {
        // Users set by Kafka's Admin client have 25-26 base-36 characters of salt; a decoy with
        // 32 random bytes among them told every unknown name from a real one.
        let m = Mechanism::ScramSha256;
        let kafka_salt = b"3k7xq0c9m2v8t1a6p4w5z0r7yb";
        let mut users = Users::new();
        for name in ["alice", "bob"] {
            users.entry(name.to_string()).or_default().insert(m, Credential::derive(m, b"pw", kafka_salt, 8192));
        }
        let dir = tempfile::tempdir().unwrap();
        let c = Credentials::open(dir.path(), true).unwrap();
        let parsed = Parsed::of(users);
        for name in ["mallory", "trudy", "eve"] {
            let decoy = c.decoy(&parsed, name, m);
            assert_eq!((decoy.salt.len(), decoy.iterations), (kafka_salt.len(), 8192), "{name}");
            assert!(decoy.salt.iter().all(|b| BASE36.contains(b)), "{:?}", decoy.salt);
            assert_eq!(decoy.salt[0], b'3', "the real salts' first character");
            assert_eq!(c.decoy(&parsed, name, m).salt, decoy.salt, "stable");
        }
        let long = Credential::derive(Mechanism::ScramSha512, b"pw", &[7; 100], 4096);
        let mut users = Users::new();
        users.entry("carol".to_string()).or_default().insert(Mechanism::ScramSha512, long);
        assert_eq!(c.decoy(&Parsed::of(users), "x", Mechanism::ScramSha512).salt.len(), 100, "longer than one HMAC");
    }

    #[test]
    fn decoys_are_stable_and_drawn_from_the_real_counts() {
        let dir = tempfile::tempdir().unwrap();
        let m = Mechanism::ScramSha256;
        users::add(dir.path(), "alice", b"pw", &[m], 8192).unwrap();
        users::add(dir.path(), "bob", b"pw", &[m], 8192).unwrap();
        let c = Credentials::open(dir.path(), true).unwrap();
        let (first, _) = c.lookup("mallory", m).unwrap();
        assert_eq!(first.salt.len(), SALT_BYTES);
        assert_eq!(first.iterations, 8192, "every real user has 8192");
        let key = dir.path().join(SCRAM_DECOY_KEY_FILE);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(!names.iter().any(|n| n.to_string_lossy().ends_with(TMP_SUFFIX)), "{names:?}");
        let again = Credentials::open(dir.path(), true).unwrap(); // a restart
        assert_eq!(again.lookup("mallory", m).unwrap().0.salt, first.salt);
        assert_ne!(again.lookup("trudy", m).unwrap().0.salt, first.salt);
        assert_eq!(iterations_of(&c, "x", Mechanism::ScramSha512), DEFAULT_ITERATIONS, "no SHA-512 user");
        let (real, known) = c.lookup("alice", m).unwrap();
        assert!(known && real.iterations == 8192);
        assert_eq!(
            c.parses.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "one parse for every lookup while the file is unchanged"
        );
        users::add(dir.path(), "carol", b"pw", &[m], 4096).unwrap();
        assert!(c.lookup("carol", m).unwrap().1, "a change is read");
        assert_eq!(c.parses.load(std::sync::atomic::Ordering::Relaxed), 2);
        // Both counts drawn, by name.
        let drawn: std::collections::BTreeSet<u32> = (0..64).map(|i| iterations_of(&c, &format!("u{i}"), m)).collect();
        assert_eq!(drawn, [4096, 8192].into());
    }
}
