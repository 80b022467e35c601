//! The state every connection shares: the data directory's topics (re-read when the
//! metadata file changes, so topics created by `Admin` in other processes appear), the
//! partitions open now (as shared writers, beside embedded producers; at most
//! `--max-open-partitions` unused ones, `open_logs`), and the append wake-up that long-polling
//! fetches wait on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};

use super::group::Coordinator;
use super::offsets::{OffsetStore, OFFSETS_TOPIC};
use super::open_logs::{Access, OpenLogs, OpenTurns, SharedLog};
use super::topic_creation::TopicCreation;
use super::waits::{self, BLOCKING_SLOTS, LOCK_WAIT};
use crate::coordination::producer_ids::ProducerIds;
use crate::server::config::ServerConfig;
use crate::server::network::frame::{QUEUED_MAX_REQUEST_BYTES, QUEUED_MAX_UNAUTHENTICATED_BYTES};
use crate::storage::datadir::{log_config, DataDir, TopicMeta};
use crate::storage::error::{Error, Result};
use crate::storage::files::NOTIFY_FILE;
use crate::storage::log::Log;
use crate::storage::notify::Notifier;
use crate::storage::options::LogConfig;

pub type Topics = Arc<BTreeMap<String, TopicMeta>>;

pub use super::locks::{append_blocking, lock, lock_log, try_lock_log};

pub struct Broker {
    pub dir: DataDir,
    /// The server's own switch; the data directory's `auto.create.topics.enable` must agree.
    auto_create_topics: bool,
    /// `num.partitions` unless the data directory sets it.
    default_partitions: i32,
    advertised: (String, i32),
    /// Consistent at any panic: only ever replaced whole.
    topics: Mutex<Option<(Option<crate::storage::datadir::MetadataStamp>, Topics)>>,
    /// The partitions open now, at most `max_open` unused ones.
    partitions: OpenLogs,
    /// Whose turn it is to open a partition to write (`partition_within`).
    writer_opens: OpenTurns,
    /// Bumped (with every other process's producers) after each append.
    notifier: Arc<Notifier>,
    /// Woken whenever the notifier moves: what long-polling fetches wait on.
    pub appended: Arc<Notify>,
    /// Network topic creation, under the controller mutation quota.
    pub topic_creation: TopicCreation,
    /// Slots for blocking work off the request workers (`waits::off_workers`).
    pub blocking: Arc<Semaphore>,
    /// Request bytes buffered by all connections together.
    pub request_budget: Arc<Semaphore>,
    /// Request bytes buffered by the connections not authenticated yet (`frame`).
    pub unauthenticated_budget: Arc<Semaphore>,
    /// `fetch.max.bytes` and the response budget of fetches.
    pub fetch_limits: crate::server::state::fetch_limits::Limits,
    /// The transactions of the partitions read_committed clients read (`committed`).
    pub read_committed: super::committed::ReadCommitted,
    /// When Produce's acks=all is answered (`--acks-all`).
    pub acks_all: crate::server::config::AcksAll,
    /// Committed offsets of network consumer groups.
    pub offsets: OffsetStore,
    /// The classic group coordinator for network members.
    pub groups: Coordinator,
    /// The consumer group protocol's (KIP-848) coordinator.
    pub consumer_groups: crate::server::state::kip848_coordinator::Coordinator,
    /// The data directory's transaction coordinator (shared with embedded producers through
    /// the files and per-id locks), its waits bounded at `LOCK_WAIT`.
    pub transactions: crate::coordination::transactions::Coordinator,
    /// Ended transactions whose markers are still being written after their EndTxn's answer.
    pub txn_ends: super::txn_ends::PendingEnds,
    /// InitProducerId's ids, reserved in blocks in the data directory. Consistent at any panic:
    /// `allocate` moves its counters in one assignment after the file write (a panic before it
    /// at worst leaves a reserved block unused, as a kill does).
    pub producer_ids: Mutex<ProducerIds>,
    stopping: Arc<AtomicBool>,
    /// What `kafkalite serve --metrics` reports (`metrics`).
    pub metrics: super::metrics::Metrics,
    /// The ACLs and who they apply to (`authorizer`).
    pub acls: crate::server::security::authorizer::Authorizer,
    /// The SCRAM users SASL checks clients against (`credentials`).
    pub credentials: crate::server::security::credentials::Credentials,
    /// The client quotas and the rates they are enforced on (`quotas`).
    pub quotas: super::quotas::QuotaManager,
    bridge: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Broker {
    pub fn open(config: &ServerConfig, advertised: (String, i32)) -> Result<Broker> {
        // Finishes a topic delete a kill interrupted, as every embedded client's open does.
        let dir = DataDir::open(&config.data_dir)?;
        // A damaged metadata file stops the start with the error Admin gives for it, rather
        // than failing every request later.
        dir.topics()?;
        let groups = Coordinator::new(dir.path(), &format!("{}:{}", advertised.0, advertised.1));
        let consumer_groups = crate::server::state::kip848_coordinator::Coordinator::new(
            dir.path(),
            &format!("{}:{}", advertised.0, advertised.1),
            config.consumer_session_timeout,
            config.consumer_heartbeat_interval,
        );
        let producer_ids = Mutex::new(ProducerIds::new(dir.path()));
        let transactions = crate::coordination::transactions::Coordinator::open(dir.path())?.with_lock_wait(LOCK_WAIT);
        let notifier = Arc::new(Notifier::open(&dir.path().join(NOTIFY_FILE))?);
        let appended = Arc::new(Notify::new());
        let stopping = Arc::new(AtomicBool::new(false));
        let bridge = spawn_bridge(notifier.clone(), appended.clone(), stopping.clone())?;
        Ok(Broker {
            dir,
            auto_create_topics: config.auto_create_topics,
            default_partitions: config.default_partitions,
            advertised,
            topics: Mutex::new(None),
            partitions: OpenLogs::new(config.max_open_partitions.unwrap_or(usize::MAX)),
            writer_opens: OpenTurns::default(),
            notifier,
            appended,
            topic_creation: TopicCreation::new(config.controller_mutation_rate),
            blocking: Arc::new(Semaphore::new(BLOCKING_SLOTS)),
            request_budget: Arc::new(Semaphore::new(QUEUED_MAX_REQUEST_BYTES)),
            unauthenticated_budget: Arc::new(Semaphore::new(QUEUED_MAX_UNAUTHENTICATED_BYTES)),
            fetch_limits: crate::server::state::fetch_limits::Limits::new(config.fetch_max_bytes),
            read_committed: Default::default(),
            acks_all: config.acks_all,
            offsets: OffsetStore::default(),
            groups,
            consumer_groups,
            transactions,
            txn_ends: Default::default(),
            producer_ids,
            stopping,
            metrics: Default::default(),
            acls: crate::server::security::authorizer::Authorizer::open(
                &config.data_dir,
                config.authorizer,
                crate::server::network::listen::resolve(&config.listen)?.1,
                &config.super_users,
            )?,
            credentials: crate::server::security::credentials::Credentials::open(&config.data_dir, config.sasl)?,
            quotas: super::quotas::QuotaManager::open(&config.data_dir)?,
            bridge: Mutex::new(Some(bridge)),
        })
    }

    /// Whether Metadata may create topics: the server's setting and the data directory's
    /// `auto.create.topics.enable` (changed at run time by `kafkalite config` or
    /// IncrementalAlterConfigs on broker 0, as a dynamic broker config).
    pub fn auto_create_topics(&self) -> bool {
        let set = self.dir.dir_config().ok().and_then(|c| c.get("auto.create.topics.enable").and_then(|v| v.as_bool()));
        self.auto_create_topics && set.unwrap_or(true)
    }

    /// The partitions of a topic created without a count: the data directory's
    /// `num.partitions` when it sets one, else the server's.
    pub fn default_partitions(&self) -> i32 {
        let set = self.dir.dir_config().ok().and_then(|c| c.get("num.partitions").and_then(|v| v.as_i64()));
        set.map_or(self.default_partitions, |n| n as i32)
    }

    pub fn advertised(&self) -> (String, i32) {
        self.advertised.clone()
    }

    /// The topics, re-read when the metadata changed (`datadir::metadata_stamp`).
    pub fn topics(&self) -> Result<Topics> {
        let stamp = crate::storage::datadir::metadata_stamp(self.dir.path()).ok();
        let mut cache = lock(&self.topics);
        if let Some((seen, topics)) = cache.as_ref() {
            if *seen == stamp && stamp.is_some_and(|s| s.exists()) {
                return Ok(topics.clone());
            }
        }
        let topics = Arc::new(self.dir.topics()?);
        *cache = Some((stamp, topics.clone()));
        Ok(topics)
    }

    /// Forget the cached topics (after this process changed them).
    pub fn topics_changed(&self) {
        *lock(&self.topics) = None;
    }

    /// The open log of one partition, if this server has it open already for `access` (a writer
    /// serves reads too).
    fn open_partition(&self, topic: &str, partition: i32, access: Access) -> Option<SharedLog> {
        let (log, opened, kept_for) = self.partitions.get(topic, partition)?;
        // Another process (`Admin.delete_topic`, another server) may have deleted the topic
        // and created it again: a reader's open segments would keep serving the deleted
        // records (reads follow other writers only at the log end), so reopen.
        match crate::storage::log::dir_identity(&self.dir.partition_path(topic, partition)) {
            Ok(now) if now == opened => (access == Access::Read || kept_for == Access::Write).then_some(log),
            _ => {
                self.forget_partition(topic, partition);
                None
            }
        }
    }

    /// The log of a partition this server has open now, without checking its folder is still the
    /// one it was opened from (`open_partition` does): for the later reads of a request that
    /// checked it already.
    pub fn cached_partition(&self, topic: &str, partition: i32) -> Option<SharedLog> {
        self.partitions.get(topic, partition).map(|(log, _, _)| log)
    }

    /// `partition` or `partition_to_write` (by `access`) for a request on the async workers:
    /// opening a partition (a reader's open follows the files; a writer's waits for another
    /// writer's append lock, at most `LOCK_WAIT`) runs off them (`waits::off_workers`); a
    /// partition already open is answered at once. One writer's open of a partition runs at a
    /// time: the other requests that need it wait for that one here, asynchronously, rather
    /// than each take a slot of the blocking pool to wait for the same held lock.
    pub async fn partition_within(
        self: &Arc<Self>,
        (topic, partition): (&str, i32),
        access: Access,
        deadline: Instant,
    ) -> Result<Option<SharedLog>> {
        if let Some(log) = self.open_partition(topic, partition, access) {
            return Ok(Some(log));
        }
        let started = Instant::now();
        let timed_out = |holder: &str| Error::LockTimeout {
            path: self.dir.partition_path(topic, partition),
            waited_ms: started.elapsed().as_millis() as u64,
            holder: holder.into(),
        };
        let turn = (access == Access::Write).then(|| self.writer_opens.turn(topic, partition));
        let _turn = match &turn {
            None => None,
            Some(turn) => match waits::within(deadline, turn.lock_owned()).await {
                Some(held) => Some(held),
                None => return Err(timed_out("another request of this server opening it to write, itself waiting")),
            },
        };
        if let Some(log) = self.open_partition(topic, partition, access) {
            return Ok(Some(log));
        }
        let name = topic.to_string();
        match waits::off_workers(self, deadline, move |broker| {
            broker.partition_for(&name, partition, access, Some(deadline))
        })
        .await
        {
            Ok(opened) => opened,
            Err(waits::NotDone::Busy) => Err(timed_out("none: every slot for blocking work stayed busy")),
            Err(waits::NotDone::Stopped) => Err(timed_out("none: the server is stopping")),
            Err(waits::NotDone::Panicked) => {
                Err(Error::Poisoned(format!("opening {topic}-{partition} panicked (a bug); retry")))
            }
        }
    }

    /// The open log of one partition, to read, opening it read-only on first use (no lock: a
    /// stopped writer holding the partition's append lock does not delay it). `Ok(None)`: no such
    /// partition. Blocking (an open reads the files): async callers use `partition_within`.
    pub fn partition(&self, topic: &str, partition: i32) -> Result<Option<SharedLog>> {
        self.partition_for(topic, partition, Access::Read, None)
    }

    /// The open log of one partition, to append to: opened as a shared writer on first use (or
    /// when it is open only to read), which recovers it when no other writer is alive and waits
    /// up to `LOCK_WAIT` for another writer's append lock. `Ok(None)`: no such partition.
    /// Blocking: async callers use `partition_within`.
    pub fn partition_to_write(&self, topic: &str, partition: i32) -> Result<Option<SharedLog>> {
        self.partition_for(topic, partition, Access::Write, None)
    }

    /// `deadline`: when a writer's open stops waiting for the append lock (None: `LOCK_WAIT`).
    fn partition_for(
        &self,
        topic: &str,
        partition: i32,
        access: Access,
        deadline: Option<Instant>,
    ) -> Result<Option<SharedLog>> {
        if let Some(log) = self.open_partition(topic, partition, access) {
            return Ok(Some(log));
        }
        let log = match self.with_descriptors(|| self.open_log(topic, partition, access, deadline)) {
            // The open makes the folder (a writer) or found it (a reader) first: a file of it
            // missing later is the topic deleted meanwhile (`Admin.delete_topic` renames the
            // folder away), which is not a storage failure.
            // So is the writer's `create_dir_all` failing with EEXIST while no file stands in the
            // folder's place: the folder was created and removed again between its mkdir and
            // its check (a delete racing a re-create).
            Err((_, Error::Io { source, path, .. }))
                if source.kind() == std::io::ErrorKind::NotFound
                    || (source.kind() == std::io::ErrorKind::AlreadyExists
                        && path.as_deref().is_some_and(|p| !p.is_file())) =>
            {
                return Err(Error::UnknownTopicOrPartition(format!(
                    "{topic}-{partition} was deleted while it was being opened ({source})"
                )))
            }
            Err((closed, e)) => return Err(self.out_of_descriptors(&format!("open {topic}-{partition}"), closed, e)),
            Ok(log) => log,
        };
        let Some(log) = log else { return Ok(None) };
        let opened = log.dir_identity();
        let (log, evicted) = self.partitions.insert(topic, partition, (log, access), opened);
        close_all(evicted);
        Ok(Some(log))
    }

    /// `f` (something that opens files), and once more after every log no request holds gave
    /// its descriptors back if `f` found none (EMFILE, ENFILE). `Err`: how many logs were closed
    /// for it (0: `f` failed otherwise), and `f`'s error.
    pub fn with_descriptors<T>(&self, mut f: impl FnMut() -> Result<T>) -> std::result::Result<T, (usize, Error)> {
        match f() {
            Err(e) if out_of_descriptors(&e) => {
                let freed = self.partitions.evict_unused();
                let closed = freed.len();
                close_all(freed);
                f().map_err(|e| (closed, e))
            }
            done => done.map_err(|e| (0, e)),
        }
    }

    /// Open a partition's log as this server keeps it (not yet kept): read-only for `Read`, a
    /// shared writer for `Write`. `Ok(None)`: no such partition.
    fn open_log(&self, topic: &str, partition: i32, access: Access, deadline: Option<Instant>) -> Result<Option<Log>> {
        let topics = self.topics()?;
        let Some(meta) = topics.get(topic) else { return Ok(None) };
        if partition < 0 || partition >= meta.partitions {
            return Ok(None);
        }
        // The data directory's defaults count as they do for Python's clients (one resolution).
        let mut config = log_config(&self.dir.dir_config()?, meta)?;
        let writable = !config.readonly;
        // A request's wait for another writer's append lock (an open, a commit) ends at
        // `LOCK_WAIT`, not at the embedded clients' 60 s: see `waits`.
        config.lock_timeout = Some(LOCK_WAIT);
        if topic == OFFSETS_TOPIC {
            // Commits are durable when acknowledged, as offsets.py writes them.
            config.flush = crate::storage::options::FlushPolicy::Always;
        }
        let path = self.dir.partition_path(topic, partition);
        if access == Access::Read {
            // A reader takes no lock: what a stopped writer holds does not delay it.
            let reader = LogConfig { readonly: true, shared_writers: false, ..config.clone() };
            match Log::open(&path, reader) {
                // No folder yet (no writer made it): a writer's open makes it, and no other
                // writer can hold the lock of a folder that did not exist.
                Err(Error::Io { source, .. }) if writable && source.kind() == std::io::ErrorKind::NotFound => {}
                opened => return opened.map(Some),
            }
        }
        // Embedded producers in other processes append to the same partitions.
        config.shared_writers = writable;
        Log::open_within(path, config, deadline).map(Some)
    }

    /// The error of an open (`what`: "open t-0", "sync the directory of ...") that failed for want
    /// of file descriptors even after `closed` unused logs were closed: every open log is in use
    /// by a request. Logged at WARNING (with what the
    /// operator can change); the request gets KAFKA_STORAGE_ERROR, which Kafka's clients retry.
    pub fn out_of_descriptors(&self, what: &str, closed: usize, e: Error) -> Error {
        if !out_of_descriptors(&e) {
            return e;
        }
        let (open, in_use) = self.partitions.counts();
        let limit = super::open_logs::descriptor_limit().map_or("unknown".to_string(), |l| l.to_string());
        ::log::warn!(
            target: "kafkalite::server",
            "cannot {what}: the server is out of file descriptors (RLIMIT_NOFILE {limit}; {open} \
             partitions open, {in_use} of them in use by requests, {closed} unused ones just closed): answered \
             KAFKA_STORAGE_ERROR, which clients retry; raise `ulimit -n` or lower --max-open-partitions ({}) ({e})",
            self.partitions.max_open()
        );
        e
    }

    /// `e`, a read's error, as UNKNOWN_TOPIC_OR_PARTITION when it is a file of the partition's
    /// folder missing and the folder is gone or another one: the topic was deleted while the
    /// read followed it (a reader lists the folder), which is no storage failure.
    pub fn deleted_meanwhile(&self, (topic, partition): (&str, i32), e: Error) -> Error {
        let missing = matches!(&e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound);
        let kept = self.partitions.get(topic, partition).map(|(_, identity, _)| identity);
        let now = crate::storage::log::dir_identity(&self.dir.partition_path(topic, partition)).ok();
        if missing && (now.is_none() || now != kept) {
            return Error::UnknownTopicOrPartition(format!("{topic}-{partition} was deleted while it was read ({e})"));
        }
        e
    }

    /// Drop a partition whose log failed in a way reopening may cure (topic deleted and
    /// created again, poisoned by a failed flush).
    pub fn forget_partition(&self, topic: &str, partition: i32) {
        self.partitions.remove(topic, partition);
        self.read_committed.forget(topic, partition);
    }

    /// Drop the pages of every open partition from the resident set (`Log::release_resident`).
    /// A partition busy with a request is skipped (`try_lock`): this runs on the server's
    /// threads and must not wait behind an append that waits for another writer's lock.
    pub fn release_resident_pages(&self) {
        for log in self.partitions.all() {
            if let Ok(mut log) = log.try_lock() {
                log.release_resident();
            }
        }
    }

    /// Tell fetchers here and consumers in other processes that data arrived.
    pub fn announce_append(&self) {
        self.notifier.notify();
    }

    /// Stop the wake-up bridge and close every open partition.
    pub fn close(&self) {
        if self.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        self.notifier.notify();
        if let Some(handle) = lock(&self.bridge).take() {
            let _ = handle.join();
        }
        for log in self.partitions.drain() {
            // A poisoned log is closed too (as not clean): it still holds its partition's locks.
            let mut log = lock_log(&log).unwrap_or_else(|_| log.lock().unwrap_or_else(|e| e.into_inner()));
            let _ = log.close();
        }
    }
}

/// One thread turns the cross-process futex wake-ups into a tokio `Notify`, so a fetch
/// waits for appends by this server and by embedded producers alike, without polling.
fn spawn_bridge(
    notifier: Arc<Notifier>,
    appended: Arc<Notify>,
    stopping: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("kafkalite-append-wakeups".into())
        .spawn(move || {
            let mut seen = notifier.sequence();
            while !stopping.load(Ordering::SeqCst) {
                // The timeout only bounds how long `close` waits for this thread.
                if notifier.wait(seen, Duration::from_millis(500)) {
                    seen = notifier.sequence();
                    appended.notify_waiters();
                }
            }
        })
        .map_err(|e| Error::io("cannot start the append wake-up thread", e))
}

/// Whether an open failed because the process (EMFILE) or the system (ENFILE) has no file
/// descriptor left.
fn out_of_descriptors(e: &Error) -> bool {
    let code = match e {
        // A fail point's injected errno counts as the real one (`failpoint::errno`).
        Error::Io { source, .. } => crate::storage::failpoint::errno(source),
        _ => None,
    };
    code == Some(rustix::io::Errno::MFILE.raw_os_error()) || code == Some(rustix::io::Errno::NFILE.raw_os_error())
}

/// Close logs `OpenLogs` let go of (no request holds them). Finishing a partition needs its
/// append lock: tried once, not waited for, so a request never waits here for another process's
/// writer (a partition left unfinished is recovered by its next open).
fn close_all(logs: Vec<Mutex<Log>>) {
    for log in logs {
        let mut log = log.into_inner().unwrap_or_else(|poisoned| {
            let mut log = poisoned.into_inner();
            log.poison("a request panicked while it was using the log".into());
            log
        });
        if let Err(e) = log.close_within(Some(Instant::now())) {
            ::log::debug!(target: "kafkalite::server", "closing {} left it unfinished: {e}", log.dir().display());
        }
    }
}

impl waits::Slots for Broker {
    fn slots(&self) -> &Arc<Semaphore> {
        &self.blocking
    }
}
