//! Committed offsets of network consumer groups, stored exactly as the embedded clients
//! store them (python/kafkalite/offsets.py): in the compacted topic `__consumer_offsets`
//! (50 partitions; a group lives in `abs(javaHash(group)) % 50`), with Kafka's binary
//! OffsetCommitKey v1 (group, topic, partition) and OffsetCommitValue v3 (offset, leader
//! epoch, metadata, commit timestamp), appended by a shared writer with flush always, so
//! `kafkalite groups describe` and `kafkalite.Consumer(group_id=...)` see them.
//!
//! The records' bytes are `offsets_codec`'s, and a group's offsets are read by
//! `committed_offsets` (Kafka's transactional rules): the embedded clients' codec and reader
//! too. Compaction of
//! `__consumer_offsets` is left to the embedded committers' cleaner.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use super::broker::Broker;
use super::locks::{append_blocking, lock, lock_log};
use crate::coordination::committed_offsets::CommittedOffsets;
pub use crate::coordination::committed_offsets::Offsets;
use crate::storage::error::{Error, Result};
use crate::storage::log::{now_ms, Log};
use crate::storage::log_read::RecordSink;
use crate::storage::record::{RecordInput, RecordRef};

use crate::coordination::offsets_codec::{decode_key, encode_key, encode_value};
pub use crate::coordination::offsets_codec::{
    offsets_partition, OFFSETS_PARTITIONS, OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIG,
};

/// Kafka's offset.metadata.max.bytes.
pub const MAX_METADATA_BYTES: usize = 4096;

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
    groups: Mutex<HashMap<String, CommittedOffsets>>,
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
        let state = groups.entry(group.to_string()).or_insert_with(|| CommittedOffsets::new(group));
        if let Some(log) = log {
            state.catch_up(&mut *lock_log(&log)?)?;
        }
        Ok((state.offsets().clone(), state.unstable()))
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
