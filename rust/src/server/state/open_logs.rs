//! The partition logs the server keeps open, at most `max_open` of those no request is using.
//!
//! Each open partition holds about `FDS_PER_PARTITION` file descriptors (its active segment's
//! `.log`, the `.kafkalite.writers` and `.kafkalite.lock` lock files, and with acks=all the
//! group-commit file `.kafkalite-durable`), and one request can
//! name every partition of the data directory (DescribeLogDirs with topics=null, a Fetch or
//! ListOffsets of thousands), so keeping every partition ever opened ran the process out of
//! descriptors: after that every open failed with EMFILE, producers' too, and new connections
//! could not be accepted. Here, opening one more partition than `max_open` closes the least
//! recently used log that no request holds (`Arc::strong_count == 1` under the map's lock: the
//! map is the only way to a log, so nothing can be appending to or reading it, nor pick it up
//! while it closes). A request that needs it again opens it again, which scans nothing when that
//! close could finish the partition (no other writer; `broker::close_all`). The price of a
//! workload that keeps touching more partitions than `max_open` is a close (with a sync) and an
//! open per partition touched, said once a minute at WARNING. When every open log is in use the
//! map goes over `max_open` rather than refuse a request, and comes back under it as those logs
//! are released.
//!
//! A log is kept as it was opened: read-only (a reader, like the embedded `Log(readonly=True)`:
//! it takes no lock, so reading a partition never waits for another writer) or as a shared
//! writer (a Produce, commit or DeleteRecords: its open waits for the append lock). A reader is
//! replaced by a writer when a write needs one (`insert`); a writer serves reads too.
//!
//! The default `max_open` is a share of the process's RLIMIT_NOFILE (`default_max_open`): the
//! rest is for connections, the files of groups and offsets, and the engine's short-lived opens.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Resource, Rlimit};

use super::locks::lock;
use crate::storage::log::Log;

/// An open partition log, shared by the requests that use it.
pub type SharedLog = Arc<Mutex<Log>>;

/// A partition: topic name and index.
type Key = (String, i32);

/// The identity of the folder a log was opened in (`Log::dir_identity`): a folder of the same
/// name with another is a topic deleted and created again.
pub type Identity = (u64, u64);

/// What a request does with a partition: a reader's open takes no lock; a writer's waits for
/// the partition's append lock (another writer may hold it, stopped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Descriptors one open partition holds (measured: the active segment's `.log`, the two lock
/// files, and the group-commit file once an acks=all produce (`--acks-all disk`, the default)
/// waited on it; sealed segments and indexes hold none once mapped or read).
pub const FDS_PER_PARTITION: u64 = 4;

/// The share of RLIMIT_NOFILE partition logs may take by default: half, the other half for
/// connections (each one descriptor) and everything else the server opens.
const SHARE_OF_LIMIT: u64 = 2;

/// The lowest RLIMIT_NOFILE the server starts under: the process itself takes about 16
/// descriptors (standard streams, the runtime's, the listeners, the append wake-up file), a
/// partition `FDS_PER_PARTITION`, each connection one; under this it could hold a handful of
/// partitions and connections at most, and would fail requests with EMFILE rather than serve.
pub const MIN_DESCRIPTOR_LIMIT: u64 = 64;

/// How often closing logs for want of room is said (WARNING): once, then at most this often.
const CHURN_WARNING_EVERY: Duration = Duration::from_secs(60);

/// The default `max_open` for a process whose RLIMIT_NOFILE (soft) is `limit` descriptors: its
/// share, however small (a floor above it would let open logs take the connections' half).
pub fn default_max_open(limit: u64) -> usize {
    ((limit / SHARE_OF_LIMIT / FDS_PER_PARTITION) as usize).max(1)
}

/// The most connections a process whose RLIMIT_NOFILE is `limit` (None: unlimited) can hold
/// beside `max_open` partition logs and `MIN_DESCRIPTOR_LIMIT` descriptors of its own (at least
/// one). `max.connections` is held to it: above it, accept fails (EMFILE) before the listener
/// is full, so no unauthenticated connection is ever closed to make room and a flood of them
/// locks every client out.
pub fn connections_fit(limit: Option<u64>, max_open: usize) -> usize {
    let Some(limit) = limit else { return usize::MAX };
    let logs = (max_open as u64).saturating_mul(FDS_PER_PARTITION);
    usize::try_from(limit.saturating_sub(logs).saturating_sub(MIN_DESCRIPTOR_LIMIT).max(1)).unwrap_or(usize::MAX)
}

/// Refuse to start under an RLIMIT_NOFILE (soft, after the raise) below `MIN_DESCRIPTOR_LIMIT`.
pub fn check_descriptor_limit(limit: Option<u64>) -> crate::storage::error::Result<()> {
    match limit {
        Some(limit) if limit < MIN_DESCRIPTOR_LIMIT => Err(crate::storage::error::Error::config(format!(
            "the open-file limit (RLIMIT_NOFILE) is {limit}, too few to serve: kafkalite serve needs at least \
             {MIN_DESCRIPTOR_LIMIT} (about 16 for itself, {FDS_PER_PARTITION} per open partition, one per \
             connection); raise `ulimit -n`"
        ))),
        _ => Ok(()),
    }
}

/// The process's RLIMIT_NOFILE soft limit (None: unlimited).
pub fn descriptor_limit() -> Option<u64> {
    rustix::process::getrlimit(Resource::Nofile).current
}

/// Raise the process's RLIMIT_NOFILE soft limit to its hard limit, as Kafka's operations guide
/// asks of a broker's `ulimit -n` and as the JVM itself does at start (`-XX:+MaxFDLimit`): the
/// soft limit is often 1024 where the hard one is far higher. Returns the soft limit after
/// (None: unlimited) and the error of a raise that failed (the old limit then stands).
pub fn raise_descriptor_limit() -> (Option<u64>, Option<String>) {
    let limit = rustix::process::getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return (limit.current, None);
    }
    let raised = Rlimit { current: limit.maximum, maximum: limit.maximum };
    match rustix::process::setrlimit(Resource::Nofile, raised) {
        Ok(()) => (descriptor_limit(), None),
        Err(e) => (limit.current, Some(e.to_string())),
    }
}

pub struct OpenLogs {
    max_open: usize,
    /// Consistent at any panic: each operation's steps (hashing a `String`, comparing `u64`s,
    /// moving values) cannot panic, so both maps always describe the same logs.
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    logs: HashMap<Key, Open>,
    /// The keys of `logs` by their last use, least recent first.
    by_use: BTreeMap<u64, Key>,
    /// The last use handed out.
    clock: u64,
    /// When closing logs for want of room was last said.
    warned: Option<Instant>,
}

struct Open {
    log: SharedLog,
    identity: Identity,
    /// What the log was opened for: a `Read` one cannot append.
    access: Access,
    used: u64,
}

impl Inner {
    fn touch(&mut self, key: &Key) -> Option<&Open> {
        self.clock += 1;
        let now = self.clock;
        let open = self.logs.get_mut(key)?;
        let key = self.by_use.remove(&open.used)?;
        open.used = now;
        self.by_use.insert(now, key);
        Some(open)
    }

    fn remove(&mut self, key: &Key) -> Option<SharedLog> {
        let open = self.logs.remove(key)?;
        self.by_use.remove(&open.used);
        Some(open.log)
    }

    /// Take out least recently used logs no request holds until at most `keep` are open.
    fn evict_to(&mut self, keep: usize) -> Vec<Mutex<Log>> {
        let mut evicted = Vec::new();
        let mut unused = Vec::new();
        for (_, key) in self.by_use.iter() {
            if self.logs.len() - unused.len() <= keep {
                break;
            }
            if Arc::strong_count(&self.logs[key].log) == 1 {
                unused.push(key.clone());
            }
        }
        for key in unused {
            if let Some(log) = self.remove(&key) {
                // Strong count 1 under this lock, and out of the map: no one else can have it.
                evicted.extend(Arc::into_inner(log));
            }
        }
        evicted
    }
}

impl OpenLogs {
    pub fn new(max_open: usize) -> OpenLogs {
        OpenLogs { max_open: max_open.max(1), inner: Mutex::new(Inner::default()) }
    }

    pub fn max_open(&self) -> usize {
        self.max_open
    }

    /// How many logs are open, and how many of them requests are using now.
    pub fn counts(&self) -> (usize, usize) {
        let inner = lock(&self.inner);
        (inner.logs.len(), inner.logs.values().filter(|o| Arc::strong_count(&o.log) > 1).count())
    }

    /// The open log of `topic`-`partition`, the identity of the folder it was opened in and
    /// what it was opened for, now its most recently used.
    pub fn get(&self, topic: &str, partition: i32) -> Option<(SharedLog, Identity, Access)> {
        let mut inner = lock(&self.inner);
        inner.touch(&(topic.to_string(), partition)).map(|o| (o.log.clone(), o.identity, o.access))
    }

    /// Keep `log`, just opened for `access`, as `topic`-`partition`'s, unless another request
    /// opened it meanwhile for as much (then that one is kept and `log` is to be closed); a
    /// writer replaces a reader (which closes when the last request using it lets go). Returns
    /// the log to use and those the caller must close (`close`), off this lock: the least
    /// recently used ones no request holds, past `max_open`.
    pub fn insert(
        &self,
        topic: &str,
        partition: i32,
        (log, access): (Log, Access),
        identity: Identity,
    ) -> (SharedLog, Vec<Mutex<Log>>) {
        let key = (topic.to_string(), partition);
        let mut inner = lock(&self.inner);
        if let Some(open) = inner.touch(&key) {
            if open.access == Access::Write || access == Access::Read {
                let kept = open.log.clone();
                return (kept, vec![Mutex::new(log)]);
            }
        }
        let replaced = inner.remove(&key);
        inner.clock += 1;
        let used = inner.clock;
        let shared = Arc::new(Mutex::new(log));
        inner.logs.insert(key.clone(), Open { log: shared.clone(), identity, access, used });
        inner.by_use.insert(used, key);
        let mut evicted = inner.evict_to(self.max_open);
        // The reader a writer replaced, if no request holds it (else it closes with the last one).
        evicted.extend(replaced.and_then(Arc::into_inner));
        if !evicted.is_empty() && inner.warned.is_none_or(|at| at.elapsed() >= CHURN_WARNING_EVERY) {
            inner.warned = Some(Instant::now());
            ::log::warn!(
                target: crate::server::log_target::LOG_TARGET,
                "more partitions are in use than --max-open-partitions ({}): the least recently used are closed and \
                 reopened when needed, which costs each a sync; raise `ulimit -n` (the default is a share of it) or \
                 --max-open-partitions (said at most once a minute)",
                self.max_open
            );
        }
        (shared, evicted)
    }

    /// Take out every log no request holds, to be closed: after an open failed for want of
    /// descriptors, what can be given back.
    pub fn evict_unused(&self) -> Vec<Mutex<Log>> {
        lock(&self.inner).evict_to(0)
    }

    /// Forget a partition's log (it closes when the last request using it lets go).
    pub fn remove(&self, topic: &str, partition: i32) {
        let removed = lock(&self.inner).remove(&(topic.to_string(), partition));
        drop(removed); // after the lock: the last reference closes the log
    }

    /// Every open log.
    pub fn all(&self) -> Vec<SharedLog> {
        lock(&self.inner).logs.values().map(|o| o.log.clone()).collect()
    }

    /// Take out every log, to be closed.
    pub fn drain(&self) -> Vec<SharedLog> {
        let mut inner = lock(&self.inner);
        inner.by_use.clear();
        inner.logs.drain().map(|(_, o)| o.log).collect()
    }
}

/// One turn per partition for opening it to write: a writer's open may wait up to `LOCK_WAIT`
/// for an append lock a stopped process holds, and the requests that need the same partition
/// wait for that one open (asynchronously, on the turn) rather than each take a slot of the
/// blocking pool to wait for the same lock, which would leave none for other partitions.
#[derive(Default)]
pub struct OpenTurns {
    /// Consistent at any panic: one map operation per lock.
    turns: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

/// A partition's turn, while a request waits for it or holds it; the partition's entry goes
/// when the last one lets go.
pub struct Turn<'a> {
    turns: &'a OpenTurns,
    key: Key,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl OpenTurns {
    pub fn turn(&self, topic: &str, partition: i32) -> Turn<'_> {
        let key = (topic.to_string(), partition);
        let turn = lock(&self.turns).entry(key.clone()).or_default().clone();
        Turn { turns: self, key, turn }
    }
}

impl Turn<'_> {
    /// Wait for the partition's turn; held until the guard is dropped.
    pub async fn lock_owned(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.turn.clone().lock_owned().await
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut turns = lock(&self.turns.turns);
        // The map's and this one: no other request waits for or holds the turn.
        if Arc::strong_count(&self.turn) == 2 {
            turns.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_held_to_what_the_descriptor_limit_leaves() {
        // 1,024 descriptors: 128 partitions take 512, the server 64, connections the rest.
        assert_eq!(connections_fit(Some(1024), default_max_open(1024)), 448);
        assert_eq!(connections_fit(Some(1024), 10_000), 1, "at least one");
        assert_eq!(connections_fit(None, 10_000), usize::MAX);
    }
    use crate::storage::options::LogConfig;

    fn open(dir: &std::path::Path, name: &str) -> (Log, Access) {
        // Shared writers, as the server opens partitions: a second open of one is allowed.
        (Log::open(dir.join(name), LogConfig { shared_writers: true, ..LogConfig::default() }).unwrap(), Access::Write)
    }

    fn open_to_read(dir: &std::path::Path, name: &str) -> (Log, Access) {
        (Log::open(dir.join(name), LogConfig { readonly: true, ..LogConfig::default() }).unwrap(), Access::Read)
    }

    #[test]
    fn keeps_at_most_max_open_unused_logs_least_recently_used_out_first() {
        let dir = tempfile::tempdir().unwrap();
        let logs = OpenLogs::new(2);
        let (_, closed) = logs.insert("t", 0, open(dir.path(), "t-0"), (0, 0));
        assert!(closed.is_empty());
        let (_, closed) = logs.insert("t", 1, open(dir.path(), "t-1"), (0, 1));
        assert!(closed.is_empty());
        assert!(logs.get("t", 0).is_some()); // t-0 is now more recent than t-1
        let (_, closed) = logs.insert("t", 2, open(dir.path(), "t-2"), (0, 2));
        assert_eq!(closed.len(), 1);
        assert!(logs.get("t", 1).is_none(), "the least recently used log is the one closed");
        assert_eq!(logs.counts(), (2, 0));
    }

    #[test]
    fn a_log_in_use_is_never_closed_and_the_map_shrinks_once_it_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let logs = OpenLogs::new(1);
        let (held, _) = logs.insert("t", 0, open(dir.path(), "t-0"), (0, 0));
        let (also_held, closed) = logs.insert("t", 1, open(dir.path(), "t-1"), (0, 1));
        assert!(closed.is_empty(), "both are in use: over the cap rather than close one mid-request");
        assert_eq!(logs.counts(), (2, 2));
        drop((held, also_held));
        assert_eq!(logs.counts(), (2, 0));
        let (_, closed) = logs.insert("t", 2, open(dir.path(), "t-2"), (0, 2));
        assert_eq!(closed.len(), 2);
        assert_eq!(logs.counts(), (1, 0));
        assert_eq!(logs.evict_unused().len(), 1);
        assert_eq!(logs.counts(), (0, 0));
    }

    #[test]
    fn a_second_open_of_the_same_partition_keeps_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let logs = OpenLogs::new(4);
        let (first, _) = logs.insert("t", 0, open(dir.path(), "t-0"), (0, 0));
        let (kept, closed) = logs.insert("t", 0, open(dir.path(), "t-0"), (0, 0));
        assert!(Arc::ptr_eq(&first, &kept));
        assert_eq!(closed.len(), 1);
    }

    #[test]
    fn a_writer_replaces_a_reader_and_a_reader_never_replaces_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let logs = OpenLogs::new(4);
        drop(open(dir.path(), "t-0")); // the folder, for the reader
        let (reader, _) = logs.insert("t", 0, open_to_read(dir.path(), "t-0"), (0, 0));
        let (writer, closed) = logs.insert("t", 0, open(dir.path(), "t-0"), (0, 0));
        assert!(!Arc::ptr_eq(&reader, &writer));
        assert!(closed.is_empty(), "the reader is still in use: it closes when let go");
        assert_eq!(
            logs.get("t", 0).map(|(log, _, access)| (Arc::ptr_eq(&log, &writer), access)),
            Some((true, Access::Write))
        );
        let (kept, closed) = logs.insert("t", 0, open_to_read(dir.path(), "t-0"), (0, 0));
        assert!(Arc::ptr_eq(&kept, &writer) && closed.len() == 1);
        drop(reader);
        assert_eq!(logs.counts(), (1, 1));
    }

    #[test]
    fn the_default_is_a_share_of_the_descriptor_limit() {
        assert_eq!(default_max_open(1024), 128);
        assert_eq!(default_max_open(1_048_576), 131_072);
        assert_eq!(default_max_open(64), 8);
        assert_eq!(default_max_open(20), 2, "the share, not a floor above it");
        assert!(check_descriptor_limit(Some(MIN_DESCRIPTOR_LIMIT - 1)).is_err());
        assert!(check_descriptor_limit(Some(MIN_DESCRIPTOR_LIMIT)).is_ok() && check_descriptor_limit(None).is_ok());
    }
}
