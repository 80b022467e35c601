//! Committed offsets of network consumer groups, stored exactly as the embedded clients
//! store them (python/kafkalite/offsets.py): in the compacted topic `__consumer_offsets`
//! (50 partitions; a group lives in `abs(javaHash(group)) % 50`), with Kafka's binary
//! OffsetCommitKey v1 (group, topic, partition) and OffsetCommitValue v3 (offset, leader
//! epoch, metadata, commit timestamp), appended by a shared writer with flush always, so
//! `kafkalite groups describe` and `kafkalite.Consumer(group_id=...)` see them.
//!
//! Compaction of `__consumer_offsets` is left to the embedded committers' cleaner.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::broker::{lock, Broker};
use crate::error::{Error, Result};
use crate::log::now_ms;
use crate::log_read::RecordSink;
use crate::record::{RecordInput, RecordRef};

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Kafka's offsets.topic.num.partitions.
pub const OFFSETS_PARTITIONS: i32 = 50;
/// Kafka's offsets.topic.segment.bytes; compacted, like offsets.py's OFFSETS_CONFIG.
const OFFSETS_SEGMENT_BYTES: &str = "104857600";
/// Kafka's offset.metadata.max.bytes.
pub const MAX_METADATA_BYTES: usize = 4096;

/// Java's `String.hashCode` over UTF-16 code units, 32-bit wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32))
}

/// Kafka's `GroupCoordinator.partitionFor`: `Utils.abs(groupId.hashCode) % 50`.
pub fn offsets_partition(group: &str) -> i32 {
    let h = java_string_hash(group);
    if h == i32::MIN {
        0
    } else {
        h.abs() % OFFSETS_PARTITIONS
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) -> Result<()> {
    let len = i16::try_from(s.len())
        .map_err(|_| Error::config(format!("{:.40}... is longer than Kafka's 32767-byte strings", s)))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// OffsetCommitKey v1.
pub fn encode_key(group: &str, topic: &str, partition: i32) -> Result<Vec<u8>> {
    let mut out = 1i16.to_be_bytes().to_vec();
    put_string(&mut out, group)?;
    put_string(&mut out, topic)?;
    out.extend_from_slice(&partition.to_be_bytes());
    Ok(out)
}

/// OffsetCommitValue v3: offset, leader epoch (-1), metadata, commit timestamp.
pub fn encode_value(offset: i64, metadata: &str, timestamp: i64) -> Result<Vec<u8>> {
    let mut out = 3i16.to_be_bytes().to_vec();
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&(-1i32).to_be_bytes());
    put_string(&mut out, metadata)?;
    out.extend_from_slice(&timestamp.to_be_bytes());
    Ok(out)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        let n = usize::try_from(self.i16()?).ok()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
    fn uvarint(&mut self) -> Option<u64> {
        let (mut value, mut shift) = (0u64, 0);
        loop {
            let byte = *self.take(1)?.first()?;
            value |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
            shift += 7;
            if shift > 28 {
                return None;
            }
        }
    }
    fn compact_string(&mut self) -> Option<String> {
        let n = usize::try_from(self.uvarint()?.checked_sub(1)?).ok()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

/// (group, topic, partition) of an offset commit key (types 0 and 1); None for the other
/// record types of `__consumer_offsets` or an undecodable key.
pub fn decode_key(key: &[u8]) -> Option<(String, String, i32)> {
    let mut r = Reader(key);
    if !matches!(r.i16()?, 0 | 1) {
        return None;
    }
    Some((r.string()?, r.string()?, r.i32()?))
}

/// (offset, metadata) of OffsetCommitValue v0-v4.
pub fn decode_value(value: &[u8]) -> Option<(i64, String)> {
    let mut r = Reader(value);
    let version = r.i16()?;
    if !(0..=4).contains(&version) {
        return None;
    }
    let offset = r.i64()?;
    if version >= 3 {
        r.i32()?;
    }
    let metadata = if version >= 4 { r.compact_string()? } else { r.string()? };
    Some((offset, metadata))
}

/// One group's committed offsets, kept up to date by reading what was appended since.
#[derive(Default)]
struct GroupOffsets {
    offsets: BTreeMap<(String, i32), (i64, String)>,
    read_to: i64,
}

struct Collect<'a> {
    group: &'a str,
    into: &'a mut BTreeMap<(String, i32), (i64, String)>,
}

impl RecordSink for Collect<'_> {
    fn push(&mut self, record: &RecordRef<'_>) -> Result<()> {
        let Some((group, topic, partition)) = record.key.and_then(decode_key) else { return Ok(()) };
        if group != self.group {
            return Ok(());
        }
        match record.value.map(decode_value) {
            None => {
                self.into.remove(&(topic, partition));
            }
            Some(Some(value)) => {
                self.into.insert((topic, partition), value);
            }
            Some(None) => {} // a newer value format: offsets.py raises; here the commit is skipped
        }
        Ok(())
    }
}

/// The committed offsets of every group this server has served.
#[derive(Default)]
pub struct OffsetStore {
    groups: Mutex<HashMap<String, GroupOffsets>>,
}

impl OffsetStore {
    fn ensure_topic(broker: &Broker) -> Result<()> {
        if broker.topics()?.contains_key(OFFSETS_TOPIC) {
            return Ok(());
        }
        let config = BTreeMap::from([
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("segment.bytes".to_string(), OFFSETS_SEGMENT_BYTES.to_string()),
        ]);
        broker.dir.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, &config)?;
        broker.topics_changed();
        Ok(())
    }

    /// The group's offsets, including commits by other processes.
    pub fn load(&self, broker: &Broker, group: &str) -> Result<BTreeMap<(String, i32), (i64, String)>> {
        let mut groups = lock(&self.groups);
        let state = groups.entry(group.to_string()).or_default();
        if !broker.topics()?.contains_key(OFFSETS_TOPIC) {
            return Ok(state.offsets.clone());
        }
        let Some(log) = broker.partition(OFFSETS_TOPIC, offsets_partition(group))? else {
            return Ok(state.offsets.clone());
        };
        let mut log = lock(&log);
        log.refresh()?;
        let mut next = state.read_to.max(log.start_offset());
        let end = log.end_offset();
        let mut sink = Collect { group, into: &mut state.offsets };
        while next < end {
            let after = log.scan_records(next, Some(end), 100_000, &mut sink)?;
            if after <= next {
                break;
            }
            next = after;
        }
        state.read_to = end;
        Ok(state.offsets.clone())
    }

    /// Append the commits durably, in one batch (all or nothing).
    pub fn commit(&self, broker: &Broker, group: &str, commits: &[(String, i32, i64, String)]) -> Result<()> {
        if commits.is_empty() {
            return Ok(());
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
            .partition(OFFSETS_TOPIC, offsets_partition(group))?
            .ok_or_else(|| Error::UnknownTopicOrPartition(format!("{OFFSETS_TOPIC}-{}", offsets_partition(group))))?;
        lock(&log).append_records(&inputs)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_kafka_and_offsets_py() {
        // Values computed with Java's String.hashCode / offsets.py.
        assert_eq!(
            java_string_hash("billing"),
            "billing".encode_utf16().fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(u as i32))
        );
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(offsets_partition("a"), 97 % 50);
        let key = encode_key("g", "t", 3).unwrap();
        assert_eq!(key, [0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 3]);
        assert_eq!(decode_key(&key), Some(("g".into(), "t".into(), 3)));
        let value = encode_value(42, "m", 7).unwrap();
        assert_eq!(decode_value(&value), Some((42, "m".into())));
        assert_eq!(value.len(), 2 + 8 + 4 + 3 + 8);
    }
}
