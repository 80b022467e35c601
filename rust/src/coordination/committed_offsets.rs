//! One group's committed offsets, read from its partition of `__consumer_offsets` as Kafka's
//! group coordinator replays it (`OffsetMetadataManager.replay`): the one reader of committed
//! offsets, used by the wire-protocol server (`server/offsets.rs`) and, through the binding
//! (`py/offsets.rs`), by the embedded groups (`python/kafkalite/offsets.py`).
//!
//! Plain commits (OffsetCommit, an embedded `commit`) apply at once, in log order. A
//! transactional commit (TxnOffsetCommit, `send_offsets_to_transaction`) is held per producer id
//! until that producer's marker (Kafka's `pendingTransactionalOffsets`, KIP-447): on COMMIT it
//! applies unless the partition already holds a commit written after it (Kafka compares the
//! records' log offsets), on ABORT it is dropped. A tombstone deletes the partition's offset and
//! the commits held for it. The partitions with held commits are the group's unstable ones
//! (OffsetFetch with `require_stable` answers them UNSTABLE_OFFSET_COMMIT).
//!
//! The reader is incremental: each `catch_up` walks only the batches appended since the last.
//!
//! What does not decode fails the read, as it fails Kafka's coordinator load: a batch whose CRC
//! does not match, an offset commit key or value that is damaged or of a newer version. Key
//! types that hold no offsets (group metadata, KIP-848 records) are skipped, as Kafka skips
//! record types it does not know.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::coordination::offsets_codec::{decode_key, decode_value};
use crate::storage::error::Result;
use crate::storage::log::Log;
use crate::storage::read_committed::{self, TxnBatch};
use crate::storage::record::scan::verify_crc;
use crate::storage::record::{for_each_record, record_area, RecordRef};

/// A group's committed offsets: (topic, partition) -> (offset, metadata).
pub type Offsets = BTreeMap<(String, i32), (i64, String)>;

/// A commit as read: the partition's (offset, metadata), or None for a tombstone (deleted).
type Commit = ((String, i32), Option<(i64, String)>);

/// One group's committed offsets, up to `read_to` of its offsets partition.
pub struct CommittedOffsets {
    group: String,
    offsets: Offsets,
    /// The log offset of the record each entry of `offsets` came from.
    written_at: HashMap<(String, i32), i64>,
    /// Transactional commits awaiting their producer's marker: producer id -> (record offset, commit).
    pending: HashMap<i64, Vec<(i64, Commit)>>,
    /// Batches below this offset have been read.
    read_to: i64,
}

impl CommittedOffsets {
    pub fn new(group: &str) -> Self {
        CommittedOffsets {
            group: group.to_string(),
            offsets: Offsets::new(),
            written_at: HashMap::new(),
            pending: HashMap::new(),
            read_to: 0,
        }
    }

    /// The group's committed offsets as of the last `catch_up`.
    pub fn offsets(&self) -> &Offsets {
        &self.offsets
    }

    /// The partitions with a transactional commit whose transaction has not ended yet.
    pub fn unstable(&self) -> BTreeSet<(String, i32)> {
        self.pending.values().flatten().map(|(_, (key, _))| key.clone()).collect()
    }

    /// Read what `log` (the group's offsets partition) gained since the last call, following
    /// other writers to its end first. A log shorter than what was read (truncated) is read
    /// again from its start. A read that fails leaves the reader empty, to read everything
    /// again next time: the commits of a batch read half way would otherwise be held twice.
    pub fn catch_up(&mut self, log: &mut Log) -> Result<()> {
        log.check_open()?;
        log.follow()?;
        let end = log.end_offset();
        if end < self.read_to {
            *self = CommittedOffsets::new(&self.group);
        }
        let from = self.read_to.max(log.start_offset());
        if from >= end {
            return Ok(());
        }
        if let Err(e) = self.read(log, (from, end)) {
            *self = CommittedOffsets::new(&self.group);
            return Err(e);
        }
        self.read_to = end;
        Ok(())
    }

    /// Read the batches of `[from, end)` (whole batches; `from` is where the last read ended).
    fn read(&mut self, log: &Log, (from, end): (i64, i64)) -> Result<()> {
        read_committed::walk_transactions(log, (from, end), |batch| {
            let (h, batch, pos) = match batch {
                TxnBatch::Marker { producer_id, commit, .. } => {
                    self.end_transaction(producer_id, commit);
                    return Ok(());
                }
                TxnBatch::Data(h, batch, pos) => (h, batch, pos),
            };
            verify_crc(batch, h, pos)?;
            let area = record_area(batch, h)?;
            let mut commits = Vec::new();
            for_each_record(&area, h, |r| {
                if r.offset >= from {
                    if let Some(c) = commit_of(&self.group, r)? {
                        commits.push((r.offset, c));
                    }
                }
                Ok(())
            })?;
            for (at, c) in commits {
                // A tombstone applies at once, transactional or not, as Kafka replays it.
                if h.is_transactional() && c.1.is_some() {
                    self.pending.entry(h.producer_id).or_default().push((at, c));
                } else {
                    self.apply(at, c);
                }
            }
            Ok(())
        })
    }

    /// A plain commit, or a committed transaction's: the latest record of a partition wins.
    fn apply(&mut self, at: i64, (key, value): Commit) {
        if self.written_at.get(&key).is_some_and(|&seen| seen > at) {
            return; // a later commit replaced it while this transaction was open
        }
        match value {
            Some(value) => {
                self.written_at.insert(key.clone(), at);
                self.offsets.insert(key, value);
            }
            None => {
                self.written_at.remove(&key);
                self.offsets.remove(&key);
                // Kafka drops the commits open transactions hold for a deleted partition.
                for held in self.pending.values_mut() {
                    held.retain(|(_, (k, _))| *k != key);
                }
                self.pending.retain(|_, held| !held.is_empty());
            }
        }
    }

    /// A producer's marker: its held commits applied (COMMIT) or dropped (ABORT).
    fn end_transaction(&mut self, producer_id: i64, commit: bool) {
        let held = self.pending.remove(&producer_id).unwrap_or_default();
        if commit {
            for (at, c) in held {
                self.apply(at, c);
            }
        }
    }
}

/// `group`'s commit in a record of the offsets topic, None if the record is another group's or
/// holds no offsets (another record type, no key).
fn commit_of(group: &str, record: &RecordRef<'_>) -> Result<Option<Commit>> {
    let Some(key) = record.key else { return Ok(None) };
    let Some((g, topic, partition)) = decode_key(key)? else { return Ok(None) };
    if g != group {
        return Ok(None);
    }
    let value = record.value.map(decode_value).transpose()?;
    Ok(Some(((topic, partition), value)))
}
