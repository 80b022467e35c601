//! Committed offsets of network consumer groups, stored exactly as the embedded clients
//! store them (python/kafkalite/offsets.py): in the compacted topic `__consumer_offsets`
//! (50 partitions; a group lives in `abs(javaHash(group)) % 50`), with Kafka's binary
//! OffsetCommitKey v1 (group, topic, partition) and OffsetCommitValue v3 (offset, leader
//! epoch, metadata, commit timestamp), appended by a shared writer with flush always, so
//! `kafkalite groups describe` and `kafkalite.Consumer(group_id=...)` see them.
//!
//! The records' bytes are `offsets_codec`'s, the embedded clients' codec too. Compaction of
//! `__consumer_offsets` is left to the embedded committers' cleaner.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use super::broker::Broker;
use super::locks::{append_blocking, lock, lock_log};
use crate::error::{Error, Result};
use crate::log::{now_ms, Log};
use crate::log_read::RecordSink;
use crate::record::scan::verify_crc;
use crate::record::{for_each_record, record_area, RecordInput, RecordRef};
use crate::txn::{self, TxnBatch};

use crate::offsets_codec::{decode_key, decode_value, encode_key, encode_value};
pub use crate::offsets_codec::{offsets_partition, OFFSETS_PARTITIONS, OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIG};

/// Kafka's offset.metadata.max.bytes.
pub const MAX_METADATA_BYTES: usize = 4096;

/// A group's committed offsets: (topic, partition) -> (offset, metadata).
pub type Offsets = BTreeMap<(String, i32), (i64, String)>;

/// A commit as read: the partition's (offset, metadata), or None for a tombstone (deleted).
type Commit = ((String, i32), Option<(i64, String)>);

/// One group's committed offsets, kept up to date by reading what was appended since.
///
/// Transactional commits (TxnOffsetCommit, an embedded producer's `send_offsets_to_transaction`)
/// are held per producer id until that producer's marker, as Kafka's group coordinator holds
/// them (`pendingTransactionalOffsetCommits`): applied on COMMIT, unless a commit written after
/// them replaced the partition's offset already, dropped on ABORT.
#[derive(Default)]
struct GroupOffsets {
    offsets: Offsets,
    /// The log offset of the record each entry of `offsets` came from.
    written_at: HashMap<(String, i32), i64>,
    /// Transactional commits awaiting their producer's marker: producer id -> (record offset, commit).
    pending: HashMap<i64, Vec<(i64, Commit)>>,
    read_to: i64,
}

impl GroupOffsets {
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

    /// The partitions with a transactional commit not yet committed or aborted.
    fn unstable(&self) -> BTreeSet<(String, i32)> {
        self.pending.values().flatten().map(|(_, (key, _))| key.clone()).collect()
    }

    /// Read the batches of `[from, end)` (whole batches; `from` is where the last read ended).
    fn read(&mut self, log: &crate::log::Log, group: &str, (from, end): (i64, i64)) -> Result<()> {
        txn::walk_transactions(log, (from, end), |batch| {
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
                    if let Some(c) = commit_of(group, r) {
                        commits.push((r.offset, c));
                    }
                }
                Ok(())
            })?;
            if h.is_transactional() {
                self.pending.entry(h.producer_id).or_default().extend(commits);
            } else {
                for (at, c) in commits {
                    self.apply(at, c);
                }
            }
            Ok(())
        })
    }
}

/// `group`'s commit in a record of the offsets topic, if it is one. Other record types, and
/// keys that do not decode, are skipped (offsets.py raises); so is a newer or damaged value.
fn commit_of(group: &str, record: &RecordRef<'_>) -> Option<Commit> {
    let (g, topic, partition) = record.key.and_then(|k| decode_key(k).ok().flatten())?;
    if g != group {
        return None;
    }
    match record.value.map(decode_value) {
        None => Some(((topic, partition), None)),
        Some(Ok(value)) => Some(((topic, partition), Some(value))),
        Some(Err(_)) => None,
    }
}

/// The committed (group, topic, partition) keys of one partition of the offsets topic.
#[derive(Default)]
struct PartitionKeys {
    keys: BTreeSet<(String, String, i32)>,
    read_to: i64,
}

struct Keys<'a> {
    into: &'a mut BTreeSet<(String, String, i32)>,
}

impl RecordSink for Keys<'_> {
    fn push(&mut self, record: &RecordRef<'_>) -> Result<()> {
        if let Some(key) = record.key.and_then(|k| decode_key(k).ok().flatten()) {
            if record.value.is_some() {
                self.into.insert(key);
            } else {
                self.into.remove(&key);
            }
        }
        Ok(())
    }
}

/// The committed offsets of every group this server has served.
#[derive(Default)]
pub struct OffsetStore {
    /// A cache of the offsets topic, consistent at any panic (so `lock` recovers it): `load`
    /// moves `read_to` only after the scan, so a scan a panic cut short is read again from
    /// there, and a commit read twice sets the same entry to the same value.
    groups: Mutex<HashMap<String, GroupOffsets>>,
    /// Which groups have committed offsets, per partition of the offsets topic (`groups`);
    /// consistent at any panic as `groups` is.
    index: Mutex<HashMap<i32, PartitionKeys>>,
}

/// Catch up on a partition of the offsets topic: follow other writers to its end, then read its
/// records from `read_to` (or its start, if later) to that end into `sink`. Returns the end, the
/// next call's `read_to`. A scan that stops moving (a damaged batch) ends there, as Kafka's
/// loader skips what it cannot read.
fn scan_to_end(log: &Mutex<Log>, read_to: i64, sink: &mut impl RecordSink) -> Result<i64> {
    let mut log = lock_log(log)?;
    log.follow()?;
    let mut next = read_to.max(log.start_offset());
    let end = log.end_offset();
    while next < end {
        let after = log.scan_records(next, Some(end), 100_000, sink)?;
        if after <= next {
            break;
        }
        next = after;
    }
    Ok(end)
}

impl OffsetStore {
    fn ensure_topic(broker: &Broker) -> Result<()> {
        if broker.topics()?.contains_key(OFFSETS_TOPIC) {
            return Ok(());
        }
        let config = OFFSETS_TOPIC_CONFIG.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        broker.dir.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, &config)?;
        broker.topics_changed();
        Ok(())
    }

    /// The group's offsets, including commits by other processes.
    pub fn load(&self, broker: &Broker, group: &str) -> Result<Offsets> {
        self.load_with_unstable(broker, group).map(|(offsets, _)| offsets)
    }

    /// `load`, and the partitions whose offsets a transaction not yet ended is committing
    /// (OffsetFetch with `require_stable` answers them UNSTABLE_OFFSET_COMMIT, KIP-447).
    pub fn load_with_unstable(&self, broker: &Broker, group: &str) -> Result<(Offsets, BTreeSet<(String, i32)>)> {
        // Opened before the groups are locked: an open may wait for another writer's append lock.
        let log = match broker.topics()?.contains_key(OFFSETS_TOPIC) {
            true => broker.partition(OFFSETS_TOPIC, offsets_partition(group))?,
            false => None,
        };
        let mut groups = lock(&self.groups);
        let state = groups.entry(group.to_string()).or_default();
        let Some(log) = log else {
            return Ok((state.offsets.clone(), state.unstable()));
        };
        let mut log = lock_log(&log)?;
        log.follow()?;
        let next = state.read_to.max(log.start_offset());
        let end = log.end_offset();
        if next < end {
            if let Err(e) = state.read(&log, group, (next, end)) {
                // Read again from the start next time: commits of a batch read half way would
                // be held twice.
                *state = GroupOffsets::default();
                return Err(e);
            }
            state.read_to = end;
        }
        Ok((state.offsets.clone(), state.unstable()))
    }

    /// Delete the group's committed offsets (DeleteGroups, as offsets.py's `OffsetStore.delete`),
    /// or only those of `only` (OffsetDelete): one tombstone per committed partition, appended
    /// durably in one batch. Returns how many.
    ///
    /// `admit` as `commit`'s: the caller's verdict (no live member subscribes to what is deleted)
    /// again under the log and append lock, so a member that joins while the tombstones wait for
    /// another writer's append lock turns them away. `Ok(Err(code))`: refused, nothing written.
    pub fn delete(
        &self,
        broker: &Broker,
        group: &str,
        only: Option<&[(String, i32)]>,
        admit: impl Fn() -> std::result::Result<(), i16>,
    ) -> Result<std::result::Result<usize, i16>> {
        let committed = self.load(broker, group)?;
        let doomed: Vec<&(String, i32)> =
            committed.keys().filter(|k| only.is_none_or(|wanted| wanted.contains(k))).collect();
        if doomed.is_empty() {
            return Ok(Ok(0));
        }
        let now = now_ms();
        let keys: Vec<Vec<u8>> = doomed.iter().map(|(t, p)| encode_key(group, t, *p)).collect::<Result<_>>()?;
        let inputs: Vec<RecordInput<'_>> =
            keys.iter().map(|k| RecordInput { key: Some(k), value: None, headers: &[], timestamp: now }).collect();
        let log = broker
            .partition_to_write(OFFSETS_TOPIC, offsets_partition(group))?
            .ok_or_else(|| Error::UnknownTopicOrPartition(format!("{OFFSETS_TOPIC}-{}", offsets_partition(group))))?;
        if let Err(code) = append_blocking(&log, |log| match admit() {
            Ok(()) => log.append_records(&inputs).map(|_| Ok(())),
            Err(code) => Ok(Err(code)),
        })? {
            return Ok(Err(code));
        }
        // Read again from the start next time (the tombstones remove the entries).
        lock(&self.groups).remove(group);
        Ok(Ok(doomed.len()))
    }

    /// Every group id with a committed offset in `__consumer_offsets` (ListGroups lists them as
    /// Kafka lists a group that only stores offsets: Empty). Read incrementally, one partition
    /// of the topic at a time, as `load` reads one group.
    pub fn groups(&self, broker: &Broker) -> Result<BTreeSet<String>> {
        if !broker.topics()?.contains_key(OFFSETS_TOPIC) {
            return Ok(BTreeSet::new());
        }
        let mut index = lock(&self.index);
        for partition in 0..OFFSETS_PARTITIONS {
            let Some(log) = broker.partition(OFFSETS_TOPIC, partition)? else { continue };
            let state = index.entry(partition).or_default();
            state.read_to = scan_to_end(&log, state.read_to, &mut Keys { into: &mut state.keys })?;
        }
        Ok(index.values().flat_map(|s| s.keys.iter().map(|(g, _, _)| g.clone())).collect())
    }

    /// Append the commits durably, in one batch (all or nothing).
    /// Append the group's commits, once `admit` (the coordinator's verdict on the committer)
    /// says yes while this server holds the partition's log and append lock: a rebalance that
    /// completes while the commit waits for another writer's append lock (up to `LOCK_WAIT`)
    /// turns it away instead of letting it land after the new owner fetched the old offset, and
    /// the new owner's OffsetFetch (`load`, which locks the same log) sees every commit admitted
    /// before it. `Ok(Err(code))`: refused by `admit`, nothing written.
    pub fn commit(
        &self,
        broker: &Broker,
        group: &str,
        commits: &[(String, i32, i64, String)],
        admit: impl Fn() -> std::result::Result<(), i16>,
    ) -> Result<std::result::Result<(), i16>> {
        if commits.is_empty() {
            return Ok(Ok(()));
        }
        Self::ensure_topic(broker)?;
        let now = now_ms();
        let encoded: Vec<(Vec<u8>, Vec<u8>)> = commits
            .iter()
            .map(|(t, p, o, m)| Ok((encode_key(group, t, *p)?, encode_value(*o, m, now)?)))
            .collect::<Result<_>>()?;
        let inputs: Vec<RecordInput<'_>> = encoded
            .iter()
            .map(|(k, v)| RecordInput { key: Some(k), value: Some(v), headers: &[], timestamp: now })
            .collect();
        let log = broker
            .partition_to_write(OFFSETS_TOPIC, offsets_partition(group))?
            .ok_or_else(|| Error::UnknownTopicOrPartition(format!("{OFFSETS_TOPIC}-{}", offsets_partition(group))))?;
        append_blocking(&log, |log| match admit() {
            Ok(()) => log.append_records(&inputs).map(|_| Ok(())),
            Err(code) => Ok(Err(code)),
        })
    }
}
