//! Kafka's transaction coordinator over one data directory (KIP-98, KIP-360, KIP-447), for the
//! embedded transactional producer (`py/transactions.rs`) and `kafkalite serve`'s
//! transaction APIs alike. There is no coordinator process: each operation on a transactional
//! id runs under that id's flock (`lock.rs`, bounded waits), reads the id's current metadata
//! from `__transaction_state` (`store.rs`: cached, only what was appended since is read), and
//! appends every state change there durably, in Kafka's record format (`state_log.rs`), before
//! its next step.
//!
//! Ending a transaction is two-phase, as Kafka's: the transaction's records are made durable
//! in every partition (`Log::open_txn_durable_tickets`: its producer may have left them in the
//! page cache, acks=1), then PrepareCommit / PrepareAbort is recorded, then a COMMIT / ABORT
//! marker (a control batch carrying the producer's epoch) goes to every partition of the
//! transaction (`Log::append_txn_marker`: durable before the next step, the COMMIT markers'
//! syncs all at once; skipped where the partition already holds it; `.txnindex` entry for an
//! abort), then CompleteCommit / CompleteAbort is recorded without
//! a sync of its own. Durability order, for a power loss: the records before the Prepare*
//! record (a durable PrepareCommit is completed by the next user, so the records it commits
//! must be there), the Prepare* record before the markers, the markers before the Complete*
//! record. The Complete* record is made durable by the next sync of its `__transaction_state`
//! partition (the id's next record); lost before that, the id is found in Prepare* and
//! completed again (its markers, already there, are skipped). `end_txn_decided_as` stops after
//! the decision (Kafka's coordinator answers EndTxn then; `kafkalite serve` writes the markers
//! right after its answer: `server/txn_ends.rs`) and `complete_decided` does the rest; the
//! embedded producers' `end_txn` does both before it returns. A process killed at any step
//! leaves a state that whoever next touches the id completes: every operation first finishes a Prepare* state it finds and
//! aborts an Ongoing transaction past its timeout (bumping the epoch, which fences the
//! producer that let it expire); `abort_expired_and_complete_pending` does the same for every
//! id whose lock is free. InitProducerId aborts any open transaction of the id and bumps the
//! epoch: the older producer's next coordinator call fails with PRODUCER_FENCED and its next
//! append with PRODUCER_FENCED (the markers bumped the partitions' epoch for it).
//!
//! A transaction's records are durable only from its end on (as a database's commit):
//! `kafkalite serve` answers transactional Produce before a sync (`server/durable.rs`), and an
//! embedded producer may send them with acks=1. A killed process leaves them in the page cache,
//! but an OS crash can lose them while their producer, on another host, lives on: so a server
//! starting after a restart of the machine (another boot id, `boot_id.rs`) aborts every
//! transaction still open before it answers anything (`abort_open_after_reboot`), fencing its
//! producer as a timeout does; the producer's commit fails and it re-initialises.
//!
//! Files: `metadata.rs` (TransactionMetadata, TransactionState), `state_log.rs` (the
//! `__transaction_state` codec), `store.rs` (reading and appending it), `lock.rs` (per-id
//! locks), `boot_id.rs` (whether the machine restarted since the server last started).
//! Markers are written by the partition (`log/transactional.rs`).
//!
//! Transaction version (Kafka's `transaction.version`), per request as Kafka's coordinator
//! takes it: at version 0 (`TV_0`: the embedded producers, clients before KIP-890 part 2) the
//! epoch is bumped by InitProducerId and by fencing, not at every EndTxn; at version 2 (`TV_2`,
//! KIP-890 part 2: `end_txn_as`, `add_partitions_as`, `txn_offset_commit_as`) every end bumps
//! it: Prepare* is recorded at epoch + 1, the markers carry that epoch (fencing, in every
//! partition, the producer's older epoch), and the producer continues at it (an exhausted epoch
//! moves to a new producer id at epoch 0 when Complete* is recorded, `next_producer_id` keeping
//! the new id meanwhile). The metadata records the version of its last add or end
//! (`client_transaction_version`); a fence's abort (InitProducerId, a timeout) bumps the epoch
//! once at either version. A retry of a version-2 end is recognised by its epoch one below the
//! id's (Kafka's `retryOnEpochBump`).
//! Coordinator epoch (in every marker) is 0: there is one coordinator.
//!
//! The public API (stable; added to, never renamed):
//! `Coordinator::open(data_dir)`, `with_lock_wait(Duration)`, `init_producer_id`,
//! `add_partitions`, `add_offsets`, `txn_offset_commit`, `end_txn` (and `add_partitions_as`,
//! `txn_offset_commit_as`, `end_txn_as` with a client's transaction version, `end_txn_decided_as`
//! and `complete_decided`: the end in two calls), `describe`, `list`,
//! `abort_expired_and_complete_pending`, `abort_open_after_reboot`, `record_boot`, `close`, `verify_partition`; errors are `Error::Transaction { kind, .. }` with
//! `TxnErrorKind::code()` Kafka's code, plus the engine's usual errors.

pub mod boot_id;
pub mod lock;
pub mod metadata;
pub mod state_log;
mod store;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::coordination::offsets_codec::{
    encode_key as offset_key, encode_value as offset_value, offsets_partition, OFFSETS_TOPIC,
};
use crate::coordination::producer_ids::ProducerIds;
use crate::storage::checkpoint::sync_dir;
use crate::storage::datadir::{log_config, DataDir};
use crate::storage::error::{Error, Result, TxnErrorKind};
use crate::storage::fsync_batch::{wait_all, Ticket};
use crate::storage::log::{DirDurable, Log};
use crate::storage::record::RecordInput;
use crate::storage::sync::lock_log;

pub use metadata::{TransactionMetadata, TransactionState, TRANSACTION_VERSION_FEATURE, TV_0, TV_2};
pub use state_log::{state_partition, TRANSACTION_STATE_PARTITIONS, TRANSACTION_STATE_TOPIC};

/// What must be durable before a transaction's next step: sync tickets, and the partition
/// directories whose newest segment's entry may not be (a producer under acks=1, or the
/// server's flush="os" writer, rolled it without a directory sync).
#[derive(Default)]
struct Unsynced {
    tickets: Vec<Ticket>,
    dirs: Vec<(PathBuf, DirDurable)>,
}

impl Unsynced {
    /// The records of `producer_id`'s open transaction in `log`, from its first offset on.
    fn add_open_txn(&mut self, log: &mut Log, producer_id: i64) -> Result<()> {
        if let Some((tickets, dir)) = log.open_txn_durable_tickets(producer_id)? {
            self.add(tickets, dir, log.dir());
        }
        Ok(())
    }

    fn add(&mut self, tickets: Vec<Ticket>, dir: DirDurable, path: &Path) {
        self.tickets.extend(tickets);
        self.dirs.push((path.to_path_buf(), dir));
    }
}

/// Kafka's transaction.max.timeout.ms default: the longest transaction.timeout.ms accepted.
pub const MAX_TRANSACTION_TIMEOUT_MS: i32 = 900_000;
/// How long an operation waits for another holder of the id's lock (and the partitions'
/// append locks) before CONCURRENT_TRANSACTIONS.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(5);
/// The coordinator epoch written in markers (Kafka: the `__transaction_state` partition's
/// leader epoch; one coordinator here).
pub const COORDINATOR_EPOCH: i32 = 0;
/// Kafka's segment.bytes for `__transaction_state` (transaction.state.log.segment.bytes).
const STATE_SEGMENT_BYTES: &str = "104857600";

/// A partition log the coordinator writes to.
type SharedLog = Arc<Mutex<Log>>;

/// The coordinator of one data directory; cheap to open, safe to share between threads.
pub struct Coordinator {
    dir: DataDir,
    lock_wait: Duration,
    logs: Mutex<HashMap<(String, i32), SharedLog>>,
    store: store::StateStore,
    producer_ids: Mutex<ProducerIds>,
    /// Whether this coordinator recorded the current boot id (`record_boot`).
    boot_recorded: std::sync::atomic::AtomicBool,
}

fn fail_point(name: &'static str) -> Result<()> {
    crate::storage::failpoint::hit(name).map_err(|e| Error::io(format!("transaction coordinator step {name}"), e))
}

/// `epoch + 1`, or `epoch` when exhausted (Kafka fences at the same epoch then).
fn bumped(epoch: i16) -> i16 {
    epoch.saturating_add(1)
}

fn lock_map<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Coordinator {
    pub fn open(data_dir: &Path) -> Result<Coordinator> {
        let dir = DataDir::new(data_dir)?;
        let producer_ids = Mutex::new(ProducerIds::new(dir.path()));
        Ok(Coordinator {
            dir,
            lock_wait: DEFAULT_LOCK_WAIT,
            logs: Mutex::new(HashMap::new()),
            store: store::StateStore::default(),
            producer_ids,
            boot_recorded: Default::default(),
        })
    }

    /// Bound waits for the id's lock and for partitions' append locks at `wait` (default
    /// `DEFAULT_LOCK_WAIT`).
    pub fn with_lock_wait(mut self, wait: Duration) -> Coordinator {
        self.lock_wait = wait;
        self
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The open log of a partition, opened as a shared writer with flush="always" (a marker or
    /// record is durable when its append returns); None when the topic or partition does not
    /// exist.
    fn partition(&self, topic: &str, partition: i32) -> Result<Option<SharedLog>> {
        let key = (topic.to_string(), partition);
        if let Some(log) = lock_map(&self.logs).get(&key) {
            return Ok(Some(Arc::clone(log)));
        }
        let Some(meta) = self.dir.topic(topic)? else { return Ok(None) };
        if partition < 0 || partition >= meta.partitions {
            return Ok(None);
        }
        let mut config = log_config(&self.dir.dir_config()?, &meta)?;
        config.readonly = false;
        config.shared_writers = true;
        config.flush = crate::storage::options::FlushPolicy::Always;
        config.lock_timeout = Some(self.lock_wait);
        let log = Log::open(self.dir.partition_path(topic, partition), config)?;
        let log = Arc::clone(lock_map(&self.logs).entry(key).or_insert_with(|| Arc::new(Mutex::new(log))));
        Ok(Some(log))
    }

    /// Drop a cached log after an error reopening may cure (its topic deleted and re-created).
    fn forget(&self, topic: &str, partition: i32) {
        lock_map(&self.logs).remove(&(topic.to_string(), partition));
    }

    fn ensure_topic(&self, topic: &str, partitions: i32) -> Result<()> {
        if self.dir.topic(topic)?.is_some() {
            return Ok(());
        }
        let config = BTreeMap::from([
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("segment.bytes".to_string(), STATE_SEGMENT_BYTES.to_string()),
        ]);
        self.dir.create_topic(topic, partitions, &config)?;
        Ok(())
    }

    fn state_log(&self, transactional_id: &str, create: bool) -> Result<Option<SharedLog>> {
        if create {
            self.ensure_topic(TRANSACTION_STATE_TOPIC, TRANSACTION_STATE_PARTITIONS)?;
        }
        self.partition(TRANSACTION_STATE_TOPIC, state_partition(transactional_id))
    }

    /// The id's metadata as `__transaction_state` holds it now.
    fn load(&self, transactional_id: &str) -> Result<Option<TransactionMetadata>> {
        let Some(log) = self.state_log(transactional_id, false)? else { return Ok(None) };
        let partition = state_partition(transactional_id);
        self.store.load(&log, partition, transactional_id)
    }

    /// Append the id's new metadata durably, with fail points before and after.
    fn write(&self, m: &TransactionMetadata, step: (&'static str, &'static str)) -> Result<()> {
        self.append_state(m, step, true)
    }

    /// Append the id's new metadata, durable (`sync`) or left for the partition's next sync.
    fn append_state(&self, m: &TransactionMetadata, step: (&'static str, &'static str), sync: bool) -> Result<()> {
        let log = self.state_log(&m.transactional_id, true)?.ok_or_else(|| {
            Error::UnknownTopicOrPartition(format!(
                "{TRANSACTION_STATE_TOPIC}-{}",
                state_partition(&m.transactional_id)
            ))
        })?;
        fail_point(step.0)?;
        self.store.append(&log, state_partition(&m.transactional_id), m, sync)?;
        fail_point(step.1)
    }

    fn check_timeout(timeout_ms: i32) -> Result<()> {
        if !(1..=MAX_TRANSACTION_TIMEOUT_MS).contains(&timeout_ms) {
            return Err(Error::txn(
                TxnErrorKind::InvalidTransactionTimeout,
                format!(
                    "transaction_timeout_ms must be between 1 and {MAX_TRANSACTION_TIMEOUT_MS} \
                     (transaction.max.timeout.ms), got {timeout_ms}"
                ),
            ));
        }
        Ok(())
    }

    fn lock(&self, transactional_id: &str) -> Result<lock::TxnLock> {
        if transactional_id.is_empty() {
            return Err(Error::config("transactional_id must not be empty"));
        }
        lock::lock(self.dir.path(), transactional_id, self.lock_wait)
    }

    /// The id's metadata with what a crash or a timeout left settled: a Prepare* state
    /// completed, an Ongoing transaction past its timeout (or any, with `abort_ongoing`)
    /// aborted with the epoch bumped. Call under the id's lock.
    fn settle(&self, m: TransactionMetadata, abort_ongoing: bool, now_ms: i64) -> Result<TransactionMetadata> {
        match m.state {
            TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                let id = m.transactional_id.clone();
                self.complete(m, now_ms).map_err(|e| match e {
                    // A partition's append lock held (a stopped writer) keeps the decided end's
                    // markers out: the id is busy, as a Kafka coordinator's is while its markers
                    // are pending (CONCURRENT_TRANSACTIONS, retriable).
                    Error::LockTimeout { .. } => Error::txn(
                        TxnErrorKind::ConcurrentTransactions,
                        format!("the decided end of transactional id {id:?} cannot write its markers yet: {e}"),
                    ),
                    e => e,
                })
            }
            TransactionState::Ongoing | TransactionState::PrepareEpochFence
                if abort_ongoing || m.expired(now_ms) || m.state == TransactionState::PrepareEpochFence =>
            {
                // One bump, whatever the transaction's version: the abort of a fence is at the
                // fenced epoch (a Kafka 4.1 broker's markers and epochs, test_server_java_transactions.py).
                let epoch = bumped(m.producer_epoch);
                if m.expired(now_ms) {
                    ::log::warn!(
                        target: crate::LOG_TARGET,
                        "aborting the transaction of {:?} (producer id {}): open for longer than its \
                         transaction.timeout.ms ({} ms); its producer is fenced",
                        m.transactional_id,
                        m.producer_id,
                        m.timeout_ms
                    );
                }
                self.end(m, false, epoch, now_ms, true)
            }
            _ => Ok(m),
        }
    }

    /// Two-phase end: the records durable, Prepare* (at `epoch`) recorded, then (`finish`) the
    /// markers and Complete*; without `finish` the id is left in Prepare* for `complete_decided`.
    fn end(
        &self,
        m: TransactionMetadata,
        commit: bool,
        epoch: i16,
        now_ms: i64,
        finish: bool,
    ) -> Result<TransactionMetadata> {
        self.sync_records(&m)?;
        let m = self.decide(m, commit, epoch, now_ms)?;
        if finish {
            self.complete(m, now_ms)
        } else {
            Ok(m)
        }
    }

    /// Record the decision, Prepare* at `epoch`, durably: from here on the transaction ends
    /// that way whoever completes it (`complete`, now or after a crash).
    fn decide(&self, mut m: TransactionMetadata, commit: bool, epoch: i16, now_ms: i64) -> Result<TransactionMetadata> {
        m.state = if commit { TransactionState::PrepareCommit } else { TransactionState::PrepareAbort };
        m.producer_epoch = epoch;
        m.last_update_ms = now_ms;
        self.write(&m, ("txn.prepare.before_record", "txn.prepare.after_record"))?;
        Ok(m)
    }

    /// A transaction version 2 end (KIP-890 part 2): Prepare* at epoch + 1, the markers at
    /// that epoch, Complete*. From Empty or Complete* (only an abort gets here) it ends an
    /// empty transaction, which only bumps the epoch. An exhausted epoch gets the next
    /// producer id now, recorded with Prepare* (Kafka's `nextProducerId`), taken at Complete*.
    fn end_bumped(
        &self,
        mut m: TransactionMetadata,
        commit: bool,
        now_ms: i64,
        finish: bool,
    ) -> Result<TransactionMetadata> {
        if m.producer_epoch >= i16::MAX - 1 {
            m.next_producer_id = lock_map(&self.producer_ids).allocate()?;
        }
        if m.state != TransactionState::Ongoing {
            m.partitions.clear();
            m.start_ms = now_ms;
        }
        m.client_transaction_version = TV_2;
        let epoch = bumped(m.producer_epoch);
        self.end(m, commit, epoch, now_ms, finish)
    }

    /// From a Prepare* state: the markers to every partition, then Complete*.
    fn complete(&self, mut m: TransactionMetadata, now_ms: i64) -> Result<TransactionMetadata> {
        let commit = m.state == TransactionState::PrepareCommit;
        let mut durable = Unsynced::default();
        for (topic, partition) in &m.partitions {
            fail_point("txn.marker.before")?;
            self.write_marker(topic, *partition, (m.producer_id, m.producer_epoch), commit, now_ms, &mut durable)?;
            fail_point("txn.marker.after")?;
        }
        // The COMMIT markers' syncs (and those of any records they commit that are still
        // unsynced), all partitions at once.
        self.make_durable(&m, durable)?;
        m.state = if commit { TransactionState::CompleteCommit } else { TransactionState::CompleteAbort };
        m.partitions.clear();
        m.last_update_ms = now_ms;
        if m.next_producer_id >= 0 {
            // A version-2 end that exhausted the epoch: the producer continues under the new id
            // at epoch 0 (Kafka's `prepareComplete`); the old id is kept to recognise a retry.
            m.previous_producer_id = m.producer_id;
            m.producer_id = m.next_producer_id;
            m.producer_epoch = 0;
            m.next_producer_id = -1;
        }
        // No sync of its own: the markers are durable already, so whenever this record becomes
        // durable nothing it claims is missing, and if a power loss drops it the id is in
        // Prepare* again and the next user completes it (see the module comment).
        self.append_state(&m, ("txn.complete.before_record", "txn.complete.after_record"), false)?;
        Ok(m)
    }

    /// Make the records of `m`'s open transaction durable in every partition it added, before
    /// its end is decided: one sync per partition holding unsynced records, the partitions in
    /// parallel (`fsync_batch::wait_all`), then the directory of any whose newest segment's
    /// entry is not known durable (a producer under acks=1 rolled it without a directory sync).
    fn sync_records(&self, m: &TransactionMetadata) -> Result<()> {
        let mut durable = Unsynced::default();
        for (topic, partition) in &m.partitions {
            let Some(log) = self.partition(topic, *partition)? else { continue };
            let mut log = lock_log(&log, || format!("{topic}-{partition}"))?;
            durable.add_open_txn(&mut log, m.producer_id).map_err(|e| self.forget_after(topic, *partition, e))?;
        }
        self.make_durable(m, durable)
    }

    /// Wait for `durable`'s syncs (the partitions in parallel), then sync the directories whose
    /// newest segment's entry is not known durable.
    fn make_durable(&self, m: &TransactionMetadata, durable: Unsynced) -> Result<()> {
        self.wait_durable(m, &durable.tickets)?;
        for (dir, entry) in durable.dirs {
            if !entry.load(Ordering::Acquire) {
                sync_dir(&dir)?;
                entry.store(true, Ordering::Release);
            }
        }
        Ok(())
    }

    /// Wait for the syncs of `tickets` (appends to `m`'s partitions), the partitions in parallel.
    fn wait_durable(&self, m: &TransactionMetadata, tickets: &[Ticket]) -> Result<()> {
        let deadline = Some(std::time::Instant::now() + self.lock_wait);
        if let Some(Err(e)) = wait_all(tickets, deadline).into_iter().find(Result::is_err) {
            // A failed sync poisons the writers of those partitions: open them again next time.
            m.partitions.iter().for_each(|(t, p)| self.forget(t, *p));
            return Err(e);
        }
        Ok(())
    }

    /// `e`, from a partition's writer; the cached writer is dropped first when reopening it may
    /// cure the error (its topic deleted and re-created, a failed sync).
    fn forget_after(&self, topic: &str, partition: i32, e: Error) -> Error {
        if matches!(
            e,
            Error::UnknownTopicOrPartition(_) | Error::Poisoned(_) | Error::LogPoisoned(_) | Error::Closed(_)
        ) {
            self.forget(topic, partition);
        }
        e
    }

    /// Append the marker to one partition. An ABORT is durable when this returns (its
    /// `.txnindex` entry is written once it is); a COMMIT returns the sync to wait for, so the
    /// partitions' markers are synced together (`wait_durable`) before Complete* is recorded.
    fn write_marker(
        &self,
        topic: &str,
        partition: i32,
        (pid, epoch): (i64, i16),
        commit: bool,
        now: i64,
        durable: &mut Unsynced,
    ) -> Result<()> {
        let Some(log) = self.partition(topic, partition)? else {
            ::log::warn!(
                target: crate::LOG_TARGET,
                "no marker for {topic}-{partition}: the partition no longer exists (its topic was deleted)"
            );
            return Ok(());
        };
        let mut log = lock_log(&log, || format!("{topic}-{partition}"))?;
        let written = if commit {
            // The records a COMMIT marker commits are made durable with it: `sync_records`
            // synced those appended before the end was decided, not a Produce that was in
            // flight then (its transaction already open in the partition, it needs no
            // verification) and landed since (`Log::append_commit_marker`).
            log.defer_durability(|log| log.append_commit_marker(pid, epoch, COORDINATOR_EPOCH, now)).map(
                |(written, ticket)| {
                    durable.tickets.extend(ticket);
                    if let Some((_, Some((tickets, dir)))) = written {
                        durable.add(tickets, dir, log.dir());
                    }
                },
            )
        } else {
            log.append_txn_marker(pid, epoch, commit, COORDINATOR_EPOCH, now).map(drop)
        };
        drop(log);
        written.map_err(|e| self.forget_after(topic, partition, e))
    }

    /// KIP-98/KIP-360 InitProducerId: a new transactional id gets a new producer id at epoch
    /// 0; a known one keeps its producer id at epoch + 1 (fencing the older producer), after
    /// its open transaction (if any) is aborted with markers written; an exhausted epoch gets
    /// a new producer id. `expected`: the (id, epoch) the client already has (KIP-360), which
    /// must be the id's current one, else PRODUCER_FENCED.
    pub fn init_producer_id(
        &self,
        transactional_id: &str,
        txn_timeout_ms: i32,
        expected: Option<(i64, i16)>,
        now_ms: i64,
    ) -> Result<(i64, i16)> {
        Self::check_timeout(txn_timeout_ms)?;
        let expected = expected.filter(|&(pid, epoch)| pid >= 0 || epoch >= 0);
        let _lock = self.lock(transactional_id)?;
        let current = self.load(transactional_id)?.filter(|m| m.state != TransactionState::Dead);
        let mut m = match current {
            None => {
                let pid = lock_map(&self.producer_ids).allocate()?;
                TransactionMetadata::new(transactional_id, pid, txn_timeout_ms, now_ms)
            }
            Some(m) => {
                if let Some((pid, epoch)) = expected {
                    if (pid, epoch) != (m.producer_id, m.producer_epoch) {
                        return Err(fenced(&m, pid, epoch));
                    }
                }
                let mut m = self.settle(m, true, now_ms)?;
                if m.producer_epoch >= i16::MAX - 1 {
                    m.producer_id = lock_map(&self.producer_ids).allocate()?;
                    m.producer_epoch = 0;
                } else {
                    m.producer_epoch += 1;
                }
                m
            }
        };
        m.state = TransactionState::Empty;
        m.partitions.clear();
        m.timeout_ms = txn_timeout_ms;
        m.last_update_ms = now_ms;
        m.start_ms = -1;
        self.write(&m, ("txn.init.before_record", "txn.init.after_record"))?;
        Ok((m.producer_id, m.producer_epoch))
    }

    /// The id's metadata, settled (see `settle`); INVALID_PRODUCER_ID_MAPPING for an unknown id.
    fn settled(&self, transactional_id: &str, now_ms: i64) -> Result<TransactionMetadata> {
        let m = self.load(transactional_id)?.filter(|m| m.state != TransactionState::Dead).ok_or_else(|| {
            Error::txn(
                TxnErrorKind::InvalidProducerIdMapping,
                format!("transactional id {transactional_id:?} is unknown: call init_transactions() first"),
            )
        })?;
        self.settle(m, false, now_ms)
    }

    /// The id's metadata, settled, checked against the caller's producer id and epoch.
    fn current(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        now_ms: i64,
    ) -> Result<TransactionMetadata> {
        let m = self.settled(transactional_id, now_ms)?;
        if m.producer_id != producer_id {
            return Err(not_its_producer(&m, producer_id));
        }
        if m.producer_epoch != epoch {
            return Err(fenced(&m, producer_id, epoch));
        }
        Ok(m)
    }

    /// AddPartitionsToTxn: the partitions join the producer's transaction (starting one).
    pub fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        now_ms: i64,
    ) -> Result<()> {
        self.add_partitions_as(transactional_id, producer_id, epoch, partitions, TV_0, now_ms)
    }

    /// `add_partitions` for a client at transaction version `client_version` (a Produce v12+
    /// adds its partitions at `TV_2`, as a Kafka 4 broker's verification does), recorded
    /// in the metadata: the transaction's end follows it.
    pub fn add_partitions_as(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        client_version: i16,
        now_ms: i64,
    ) -> Result<()> {
        let _lock = self.lock(transactional_id)?;
        let m = self.current(transactional_id, producer_id, epoch, now_ms)?;
        self.add_locked(m, partitions, client_version, now_ms).map(drop)
    }

    /// The partitions join `m`'s transaction (starting one), recorded durably; under the id's lock.
    fn add_locked(
        &self,
        mut m: TransactionMetadata,
        partitions: &[(String, i32)],
        client_version: i16,
        now_ms: i64,
    ) -> Result<TransactionMetadata> {
        let ongoing = m.state == TransactionState::Ongoing;
        let new: Vec<&(String, i32)> = partitions.iter().filter(|p| !ongoing || !m.partitions.contains(*p)).collect();
        if new.is_empty() && ongoing {
            return Ok(m);
        }
        for (topic, partition) in &new {
            if !self.dir.topic(topic)?.is_some_and(|t| (0..t.partitions).contains(partition)) {
                return Err(Error::UnknownTopicOrPartition(format!("{topic}-{partition}")));
            }
        }
        if !ongoing {
            m.partitions.clear();
            m.start_ms = now_ms;
        }
        m.state = TransactionState::Ongoing;
        m.partitions.extend(new.into_iter().cloned());
        m.last_update_ms = now_ms;
        m.client_transaction_version = client_version;
        self.write(&m, ("txn.add.before_record", "txn.add.after_record"))?;
        Ok(m)
    }

    /// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction.
    pub fn add_offsets(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group_id: &str,
        now_ms: i64,
    ) -> Result<()> {
        if group_id.is_empty() {
            return Err(Error::config("group_id must not be empty"));
        }
        self.ensure_topic(OFFSETS_TOPIC, crate::coordination::offsets_codec::OFFSETS_PARTITIONS)?;
        let partition = (OFFSETS_TOPIC.to_string(), offsets_partition(group_id));
        self.add_partitions(transactional_id, producer_id, epoch, &[partition], now_ms)
    }

    /// TxnOffsetCommit: `offsets` (topic, partition, offset, metadata) appended to
    /// `__consumer_offsets` as one transactional batch of this producer, durable: committed
    /// offsets readers see them after the COMMIT marker, never after an ABORT.
    pub fn txn_offset_commit(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group_id: &str,
        offsets: &[(String, i32, i64, Option<String>)],
        now_ms: i64,
    ) -> Result<()> {
        let admit = || Ok::<(), std::convert::Infallible>(());
        self.txn_offset_commit_as(transactional_id, producer_id, epoch, group_id, offsets, TV_0, now_ms, admit)
            .map(drop)
    }

    /// `txn_offset_commit` for a client at transaction version `client_version`: at `TV_2`
    /// (TxnOffsetCommit v5, KIP-890 part 2: no AddOffsetsToTxn before it) the group's offsets
    /// partition joins the transaction first, under the same lock. `admit` is the group's check
    /// of the commit, asked again right before the offsets are appended (the id's lock and the
    /// partition's log held), as Kafka's coordinator checks and writes in one step: a member
    /// fenced while the commit waited for the lock is turned away (`Ok(Err(_))`, nothing
    /// written) instead of leaving offsets its partitions' new owner did not see pending.
    #[allow(clippy::too_many_arguments)]
    pub fn txn_offset_commit_as<E>(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        group_id: &str,
        offsets: &[(String, i32, i64, Option<String>)],
        client_version: i16,
        now_ms: i64,
        admit: impl FnOnce() -> std::result::Result<(), E>,
    ) -> Result<std::result::Result<(), E>> {
        if group_id.is_empty() {
            return Err(Error::config("group_id must not be empty"));
        }
        let _lock = self.lock(transactional_id)?;
        let mut m = self.current(transactional_id, producer_id, epoch, now_ms)?;
        let partition = offsets_partition(group_id);
        let key = (OFFSETS_TOPIC.to_string(), partition);
        if client_version >= TV_2 && !(m.state == TransactionState::Ongoing && m.partitions.contains(&key)) {
            self.ensure_topic(OFFSETS_TOPIC, crate::coordination::offsets_codec::OFFSETS_PARTITIONS)?;
            m = self.add_locked(m, std::slice::from_ref(&key), client_version, now_ms)?;
        }
        if m.state != TransactionState::Ongoing || !m.partitions.contains(&key) {
            return Err(Error::txn(
                TxnErrorKind::InvalidTxnState,
                format!(
                    "TxnOffsetCommit for group {group_id:?} of transactional id {transactional_id:?}: the group's \
                     offsets partition was not added to an open transaction (AddOffsetsToTxn first); state {}",
                    m.state.name()
                ),
            ));
        }
        if offsets.is_empty() {
            return Ok(Ok(()));
        }
        let encoded: Vec<(Vec<u8>, Vec<u8>)> = offsets
            .iter()
            .map(|(t, p, o, meta)| {
                Ok((offset_key(group_id, t, *p)?, offset_value(*o, meta.as_deref().unwrap_or(""), now_ms)?))
            })
            .collect::<Result<_>>()?;
        let inputs: Vec<RecordInput<'_>> = encoded
            .iter()
            .map(|(k, v)| RecordInput { key: Some(k), value: Some(v), headers: &[], timestamp: now_ms })
            .collect();
        let log = self
            .partition(OFFSETS_TOPIC, partition)?
            .ok_or_else(|| Error::UnknownTopicOrPartition(format!("{OFFSETS_TOPIC}-{partition}")))?;
        fail_point("txn.offsets.before_append")?;
        {
            let mut log = lock_log(&log, || format!("{OFFSETS_TOPIC}-{partition}"))?;
            if let Err(refused) = admit() {
                return Ok(Err(refused));
            }
            log.set_transactional_producer(Some((producer_id, epoch)));
            let appended = log.append_records(&inputs);
            log.set_transactional_producer(None);
            appended?;
        }
        fail_point("txn.offsets.after_append").map(Ok)
    }

    /// EndTxn: commit or abort the producer's transaction (two-phase; see the module comment).
    /// A retry of an end that completed answers Ok.
    pub fn end_txn(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> Result<()> {
        self.end_txn_as(transactional_id, producer_id, epoch, commit, TV_0, now_ms).map(drop)
    }

    /// EndTxn of a client at transaction version `client_version`; returns the producer id and
    /// epoch the producer continues with (EndTxn v5 answers them). At `TV_0` the epoch stays
    /// and a retry is the same request again. At `TV_2` (KIP-890 part 2, Kafka's
    /// `endTransaction` table): every end bumps the epoch; a retry (the epoch one below the
    /// id's, the end done) answers the current pair; an abort with no transaction open ends an
    /// empty one (bumping the epoch); any other epoch is PRODUCER_FENCED.
    pub fn end_txn_as(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        client_version: i16,
        now_ms: i64,
    ) -> Result<(i64, i16)> {
        let m = self.end_txn_with(transactional_id, (producer_id, epoch), commit, client_version, now_ms, true)?;
        Ok((m.producer_id, m.producer_epoch))
    }

    /// `end_txn_as` up to the decision (Kafka's EndTxn answer: once PrepareCommit / PrepareAbort
    /// is durable, its records before it): the markers and Complete* are left to
    /// `complete_decided`, or, if this process dies first, to the next user of the id (any
    /// operation on it completes a Prepare* state first). `pending`: the id is in Prepare* and
    /// needs `complete_decided` (false when the request was a retry of a completed end).
    pub fn end_txn_decided_as(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        client_version: i16,
        now_ms: i64,
    ) -> Result<Decided> {
        let m = self.end_txn_with(transactional_id, (producer_id, epoch), commit, client_version, now_ms, false)?;
        // An exhausted epoch's producer continues under the next producer id at epoch 0, taken
        // when Complete* is recorded (`complete`).
        let (producer_id, producer_epoch) = match m.next_producer_id {
            next if m.state.is_prepare() && next >= 0 => (next, 0),
            _ => (m.producer_id, m.producer_epoch),
        };
        Ok(Decided { producer_id, producer_epoch, pending: m.state.is_prepare() })
    }

    /// The markers and Complete* of the id's decided end (`end_txn_decided_as`), under the id's
    /// lock; nothing when it is no longer in Prepare* (another operation on the id completed it).
    pub fn complete_decided(&self, transactional_id: &str, now_ms: i64) -> Result<()> {
        let _lock = self.lock(transactional_id)?;
        match self.load(transactional_id)? {
            Some(m) if m.state.is_prepare() => self.complete(m, now_ms).map(drop),
            _ => Ok(()),
        }
    }

    /// EndTxn's checks and its end, completed (`finish`) or left decided; the id's metadata after.
    fn end_txn_with(
        &self,
        transactional_id: &str,
        (producer_id, epoch): (i64, i16),
        commit: bool,
        client_version: i16,
        now_ms: i64,
        finish: bool,
    ) -> Result<TransactionMetadata> {
        use TransactionState::{CompleteAbort, CompleteCommit, Empty, Ongoing, PrepareAbort, PrepareCommit};
        let _lock = self.lock(transactional_id)?;
        let invalid = |m: &TransactionMetadata| {
            Error::txn(
                TxnErrorKind::InvalidTxnState,
                format!(
                    "cannot {} the transaction of {transactional_id:?}: it is {}",
                    if commit { "commit" } else { "abort" },
                    m.state.name()
                ),
            )
        };
        if client_version < TV_2 {
            let mut m = self.current(transactional_id, producer_id, epoch, now_ms)?;
            return match (m.state, commit) {
                (Ongoing, _) => {
                    m.client_transaction_version = client_version;
                    self.end(m, commit, epoch, now_ms, finish)
                }
                (CompleteCommit, true) | (CompleteAbort, false) => Ok(m),
                _ => Err(invalid(&m)),
            };
        }
        // A Prepare* state a crash left is completed first: a retry then finds it Complete*.
        let m = self.settled(transactional_id, now_ms)?;
        let retry_bump = i32::from(m.producer_epoch) == i32::from(epoch) + 1;
        let retry_overflow = m.previous_producer_id == producer_id && epoch == i16::MAX - 1 && m.producer_epoch == 0;
        if m.producer_id != producer_id && !retry_overflow {
            return Err(not_its_producer(&m, producer_id));
        }
        let valid = match m.state {
            CompleteCommit | CompleteAbort => retry_bump || retry_overflow || epoch == m.producer_epoch,
            PrepareCommit | PrepareAbort => retry_bump,
            _ => epoch == m.producer_epoch,
        };
        if !valid {
            return Err(fenced(&m, producer_id, epoch));
        }
        let retry = retry_bump || retry_overflow;
        match (m.state, commit) {
            (Ongoing, _) => self.end_bumped(m, commit, now_ms, finish),
            (CompleteCommit, true) | (CompleteAbort, false) if retry => Ok(m),
            (Empty | CompleteCommit | CompleteAbort, false) if !retry => self.end_bumped(m, false, now_ms, finish),
            _ => Err(invalid(&m)),
        }
    }

    /// Close every log this coordinator opened (a later call opens them again): a clean close
    /// trims their active segments, as any writer's close does.
    pub fn close(&self) -> Result<()> {
        let logs: Vec<SharedLog> = lock_map(&self.logs).drain().map(|(_, log)| log).collect();
        let mut first = Ok(());
        for log in logs {
            let closed =
                lock_log(&log, || "a partition log of the transaction coordinator".into()).and_then(|mut l| l.close());
            if first.is_ok() {
                first = closed;
            }
        }
        first
    }

    /// KIP-890 verification for a server's transactional produce: Ok when `(topic, partition)`
    /// is in the open transaction of `transactional_id` at this producer id and epoch; else
    /// PRODUCER_FENCED (another epoch), INVALID_PRODUCER_ID_MAPPING (another id) or
    /// INVALID_TXN_STATE (not added, or no open transaction). Read-only: takes no lock. Without
    /// it, a fenced producer's batch to a partition outside the current transaction would open
    /// a transaction no marker ever ends (a "hanging transaction": the LSO stuck).
    pub fn verify_partition(
        &self,
        transactional_id: &str,
        producer_id: i64,
        epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Result<()> {
        let m = self.load(transactional_id)?.ok_or_else(|| {
            Error::txn(
                TxnErrorKind::InvalidProducerIdMapping,
                format!("transactional id {transactional_id:?} is unknown"),
            )
        })?;
        if m.producer_id != producer_id {
            return Err(Error::txn(
                TxnErrorKind::InvalidProducerIdMapping,
                format!("producer id {producer_id} is not the producer id of transactional id {transactional_id:?}"),
            ));
        }
        if m.producer_epoch != epoch {
            return Err(fenced(&m, producer_id, epoch));
        }
        if m.state != TransactionState::Ongoing || !m.partitions.contains(&(topic.to_string(), partition)) {
            return Err(Error::txn(
                TxnErrorKind::InvalidTxnState,
                format!(
                    "{topic}-{partition} is not in an open transaction of {transactional_id:?} (state {}): \
                     AddPartitionsToTxn first",
                    m.state.name()
                ),
            ));
        }
        Ok(())
    }

    /// The id's metadata, as `__transaction_state` holds it (not settled).
    pub fn describe(&self, transactional_id: &str) -> Result<Option<TransactionMetadata>> {
        self.load(transactional_id)
    }

    /// Every transactional id's metadata (ids whose last record is a tombstone are gone).
    pub fn list(&self) -> Result<Vec<TransactionMetadata>> {
        if self.dir.topic(TRANSACTION_STATE_TOPIC)?.is_none() {
            return Ok(Vec::new());
        }
        let mut all = Vec::new();
        for partition in 0..TRANSACTION_STATE_PARTITIONS {
            if let Some(log) = self.partition(TRANSACTION_STATE_TOPIC, partition)? {
                all.extend(self.store.all(&log, partition)?);
            }
        }
        all.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(all)
    }

    /// Abort every transaction past its transaction.timeout.ms (bumping the epoch, as Kafka
    /// does) and complete every one a crash left in PrepareCommit / PrepareAbort, for ids whose
    /// lock is free now (a held lock means its holder is at work on it). Returns how many.
    pub fn abort_expired_and_complete_pending(&self, now_ms: i64) -> Result<usize> {
        let mut acted = 0;
        for m in self.list()? {
            if !(m.state.is_prepare() || m.expired(now_ms) || m.state == TransactionState::PrepareEpochFence) {
                continue;
            }
            let Some(_lock) = lock::try_lock(self.dir.path(), &m.transactional_id, Duration::ZERO)? else { continue };
            let Some(current) = self.load(&m.transactional_id)? else { continue };
            let before = (current.state, current.producer_epoch);
            let settled = self.settle(current, false, now_ms)?;
            acted += usize::from((settled.state, settled.producer_epoch) != before);
        }
        Ok(acted)
    }

    /// At a server's start, before it answers any request: when this machine restarted since
    /// the boot id was last recorded here (`boot_id`: another one, none, or none to compare),
    /// decide to abort every transaction still open, bumping its epoch (its producer is fenced,
    /// as by a timeout); then, if the directory has transactions, record the current boot id
    /// (`record_boot`). The server answers transactional Produce before a sync
    /// (`server::durable`), so after an OS crash an open transaction's acknowledged records may
    /// be gone: committing it would commit a transaction with records missing. Only the decision
    /// (PrepareAbort) is recorded here: an abort needs no record synced, and its markers (like a
    /// half-ended transaction's) are left to the next user of the id or
    /// `abort_expired_and_complete_pending`, so a partition's append lock held by a stopped
    /// embedded writer cannot keep the server from starting. Waits for each id's lock
    /// (`with_lock_wait`): an id held that long fails the start (the boot id is not recorded, so
    /// the next start tries again). Returns how many transactions it aborted.
    pub fn abort_open_after_reboot(&self, now_ms: i64) -> Result<usize> {
        let Some(why) = boot_id::rebooted(boot_id::current().as_deref(), &boot_id::recorded(self.dir.path())) else {
            self.boot_recorded.store(true, Ordering::Release);
            return Ok(0);
        };
        let all = self.list()?;
        let mut aborted = 0;
        let open = |m: &TransactionMetadata| {
            matches!(m.state, TransactionState::Ongoing | TransactionState::PrepareEpochFence)
        };
        for m in &all {
            if !open(m) {
                continue;
            }
            let _lock = self.lock(&m.transactional_id)?;
            let Some(current) = self.load(&m.transactional_id)?.filter(open) else { continue };
            if current.state == TransactionState::Ongoing {
                ::log::warn!(
                    target: crate::LOG_TARGET,
                    "aborting the transaction of {:?} (producer id {}), open at this start: {why}, and records \
                     it acknowledged before a sync may be lost; its producer is fenced",
                    current.transactional_id,
                    current.producer_id
                );
                aborted += 1;
            }
            let epoch = bumped(current.producer_epoch);
            self.decide(current, false, epoch, now_ms)?;
        }
        if !all.is_empty() {
            self.record_boot()?;
        }
        Ok(aborted)
    }

    /// Record the current boot id in the data directory, once per coordinator (the server calls
    /// it before its first transactional InitProducerId, and its start when transactions
    /// exist): a later start in the same boot then knows no open transaction lost records. The
    /// file only ever holds the boot id of the boot that wrote it, so it never vouches for
    /// records a restart lost; not writing it only costs needless aborts at the next start.
    pub fn record_boot(&self) -> Result<()> {
        if self.boot_recorded.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Some(id) = boot_id::current() {
            if boot_id::recorded(self.dir.path()) != boot_id::Recorded::Id(id.clone()) {
                boot_id::record(self.dir.path(), &id)?;
            }
        }
        self.boot_recorded.store(true, Ordering::Release);
        Ok(())
    }
}

/// What `Coordinator::end_txn_decided_as` answers: the producer id and epoch the producer
/// continues with, and whether the end's markers are still to be written (`complete_decided`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decided {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub pending: bool,
}

fn not_its_producer(m: &TransactionMetadata, producer_id: i64) -> Error {
    Error::txn(
        TxnErrorKind::InvalidProducerIdMapping,
        format!(
            "producer id {producer_id} is not the current producer id ({}) of transactional id {:?}",
            m.producer_id, m.transactional_id
        ),
    )
}

fn fenced(m: &TransactionMetadata, producer_id: i64, epoch: i16) -> Error {
    Error::txn(
        TxnErrorKind::ProducerFenced,
        format!(
            "producer {producer_id} at epoch {epoch} of transactional id {:?} is fenced: the id is now at producer id \
             {} epoch {} (a newer producer with the same transactional.id started, or its transaction timed out \
             and was aborted); close this producer",
            m.transactional_id, m.producer_id, m.producer_epoch
        ),
    )
}
