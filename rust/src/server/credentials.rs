//! The SCRAM credentials a server checks clients against: the data directory's users file
//! (`crate::users`) kept parsed in memory, read again only when the file changed (another
//! process's `kafkalite users`, AlterUserScramCredentials on any server of the directory), as
//! Kafka keeps its credential cache updated on change. A client-first message costs one `stat`
//! and a map lookup, not a parse of every user, however many there are and however many
//! unauthenticated clients send one.
//!
//! A user that does not exist gets a made-up credential (`decoy`) that the exchange cannot tell
//! from a real one: its salt is derived from the name with a secret kept in the data directory
//! (`files::SCRAM_DECOY_KEY_FILE`, 0600, created once), so it is the same at every attempt,
//! restart and server of the directory, and has a real salt's length; its iteration count is
//! drawn, stably per name, from the counts the real users of that mechanism have (4096, Kafka's
//! default, when there are none). The proof then fails like a wrong password.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::checkpoint::{file_stamp, FileStamp};
use crate::error::{Error, IoContext, Result};
use crate::files::{SCRAM_DECOY_KEY_FILE, TMP_SUFFIX, USERS_FILE};
use crate::users::{self, random_bytes, Credential, Mechanism, Users, DEFAULT_ITERATIONS, SALT_BYTES};

/// Bytes of the decoy secret.
const KEY_BYTES: usize = 32;

/// The users file as last read, and what the decoys draw their iteration counts from.
#[derive(Default)]
struct Parsed {
    users: Users,
    /// Per mechanism: (iterations, how many users have them), ascending.
    iterations: BTreeMap<Mechanism, Vec<(u32, u64)>>,
}

impl Parsed {
    fn of(users: Users) -> Parsed {
        let mut counts: BTreeMap<Mechanism, BTreeMap<u32, u64>> = BTreeMap::new();
        for creds in users.values() {
            for (m, c) in creds {
                *counts.entry(*m).or_default().entry(c.iterations).or_default() += 1;
            }
        }
        let iterations = counts.into_iter().map(|(m, c)| (m, c.into_iter().collect())).collect();
        Parsed { users, iterations }
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
                ::log::debug!(target: super::LOG_TARGET, "read the users file: {} users", parsed.users.len());
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
        let mut salt = derive("salt");
        salt.resize(SALT_BYTES, 0); // HMAC-SHA-256 gives 32 bytes, HMAC-SHA-512 64
        let iterations = match parsed.iterations.get(&m) {
            Some(counts) => {
                let total: u64 = counts.iter().map(|(_, n)| n).sum();
                let draw = derive("iterations");
                let mut at = u64::from_be_bytes(draw[..8].try_into().unwrap_or_default()) % total.max(1);
                let mut chosen = DEFAULT_ITERATIONS;
                for (iterations, n) in counts {
                    chosen = *iterations;
                    if at < *n {
                        break;
                    }
                    at -= n;
                }
                chosen
            }
            None => DEFAULT_ITERATIONS,
        };
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
        let mut opts = crate::nofollow::options();
        opts.write(true).create_new(true).mode(0o600);
        let mut f = crate::nofollow::open(&opts, &tmp, "the SCRAM decoy key")?;
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
    let read = crate::nofollow::open_read(path, "the SCRAM decoy key")
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
