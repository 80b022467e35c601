//! Kafka's `__consumer_offsets` records, the one codec every kafkalite writer and reader of
//! committed offsets uses (the wire-protocol server in `server/offsets.rs`, the embedded
//! clients through `python/kafkalite/offsets.py`), so the two can never disagree on a byte.
//!
//! A group lives in partition `abs(javaHash(group)) % 50` of the compacted topic. Keys start
//! with an int16 record type: 0 and 1 are offset commits (OffsetCommitKey: group, topic,
//! partition), 2 is group metadata, 3 and up are the KIP-848 consumer/share group records of
//! Kafka 4.x's coordinator; only offset commits hold offsets, so the others decode to `None`.
//! Values are OffsetCommitValue v0-v4 (Kafka's OffsetCommitValue.json: v1 adds
//! expireTimestamp, v3 leaderEpoch, v4 is flexible: compact string and tagged fields, as
//! Kafka 4.x writes). kafkalite writes key v1 and value v3 (offset, leader epoch -1, metadata,
//! commit timestamp), as Kafka 3.x brokers do.

use crate::storage::error::{Error, Result};

pub use crate::storage::datadir::OFFSETS_TOPIC;
/// Kafka's offsets.topic.num.partitions.
pub const OFFSETS_PARTITIONS: i32 = 50;
/// The offsets topic's config as it is created, by the server or the embedded groups: compacted,
/// with Kafka's offsets.topic.segment.bytes.
pub const OFFSETS_TOPIC_CONFIG: [(&str, &str); 2] = [("cleanup.policy", "compact"), ("segment.bytes", "104857600")];
/// Key record types that are offset commits (OffsetCommitKey v0 and v1).
pub const OFFSET_COMMIT_KEY_TYPES: [i16; 2] = [0, 1];
/// The newest OffsetCommitValue version Kafka has written (4, Kafka 4.x).
pub const MAX_OFFSET_COMMIT_VALUE_VERSION: i16 = 4;

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

pub(crate) fn put_string(out: &mut Vec<u8>, s: &str) -> Result<()> {
    let len = i16::try_from(s.len()).map_err(|_| {
        let head: String = s.chars().take(40).collect();
        Error::config(format!("{head:?}... is longer than Kafka's 32767-byte strings"))
    })?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// OffsetCommitKey v1: (type 1, group, topic, partition).
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

/// Reads big-endian fields; every failure says what did not fit where. Shared with the
/// `__transaction_state` codec (`transactions/state_log.rs`).
pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize, what: &str) -> std::result::Result<&'a [u8], String> {
        if self.buf.len() - self.pos < n {
            return Err(format!("{what} of {n} bytes at {} does not fit a {}-byte record", self.pos, self.buf.len()));
        }
        let head = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(head)
    }
    pub(crate) fn i16(&mut self) -> std::result::Result<i16, String> {
        Ok(i16::from_be_bytes(self.take(2, "an int16")?.try_into().expect("2 bytes")))
    }
    pub(crate) fn i32(&mut self) -> std::result::Result<i32, String> {
        Ok(i32::from_be_bytes(self.take(4, "an int32")?.try_into().expect("4 bytes")))
    }
    pub(crate) fn i64(&mut self) -> std::result::Result<i64, String> {
        Ok(i64::from_be_bytes(self.take(8, "an int64")?.try_into().expect("8 bytes")))
    }
    pub(crate) fn utf8(&mut self, n: usize) -> std::result::Result<String, String> {
        let at = self.pos;
        String::from_utf8(self.take(n, "a string")?.to_vec()).map_err(|_| format!("the string at {at} is not UTF-8"))
    }
    /// int16 length, then UTF-8 (a negative length would be a null string: not allowed here).
    pub(crate) fn string(&mut self) -> std::result::Result<String, String> {
        let at = self.pos;
        let n = self.i16()?;
        let n = usize::try_from(n).map_err(|_| format!("string at {at} has a negative length ({n})"))?;
        self.utf8(n)
    }
    /// An unsigned varint (Kafka's flexible versions: compact lengths, tagged fields).
    pub(crate) fn uvarint(&mut self) -> std::result::Result<u64, String> {
        let at = self.pos;
        let (mut value, mut shift) = (0u64, 0);
        loop {
            let byte = *self
                .take(1, "a varint byte")
                .map_err(|_| format!("bad unsigned varint at {at}"))?
                .first()
                .expect("1 byte");
            value |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
            if shift > 28 {
                return Err(format!("bad unsigned varint at {at}"));
            }
        }
    }
    /// Length + 1 as an unsigned varint (0 would be null: not allowed here), then UTF-8.
    pub(crate) fn compact_string(&mut self) -> std::result::Result<String, String> {
        let at = self.pos;
        let n = self.uvarint()?;
        let n = n.checked_sub(1).ok_or_else(|| format!("compact string at {at} is null"))?;
        self.utf8(n as usize)
    }
}

/// (group, topic, partition) of an offset commit key; `None` for the other record types
/// (group metadata and the newer group records), which hold no offsets. An offset commit key
/// that does not decode is `Error::Corrupt`.
pub fn decode_key(key: &[u8]) -> Result<Option<(String, String, i32)>> {
    let mut r = Reader { buf: key, pos: 0 };
    let corrupt = |e: String| Error::corrupt(format!("{OFFSETS_TOPIC} holds a record key that does not decode: {e}"));
    let record_type = r.i16().map_err(corrupt)?;
    if !OFFSET_COMMIT_KEY_TYPES.contains(&record_type) {
        return Ok(None);
    }
    let fields = (|| Ok::<_, String>((r.string()?, r.string()?, r.i32()?)))();
    fields
        .map(Some)
        .map_err(|e| Error::corrupt(format!("{OFFSETS_TOPIC} holds an offset commit key that does not decode: {e}")))
}

/// (offset, metadata) of OffsetCommitValue v0-v4. A newer version is `Error::Unsupported`
/// (upgrade kafkalite), damaged bytes `Error::Corrupt`.
pub fn decode_value(value: &[u8]) -> Result<(i64, String)> {
    let corrupt =
        |e: String| Error::corrupt(format!("{OFFSETS_TOPIC} holds an OffsetCommitValue that does not decode: {e}"));
    let mut r = Reader { buf: value, pos: 0 };
    let version = r.i16().map_err(corrupt)?;
    if !(0..=MAX_OFFSET_COMMIT_VALUE_VERSION).contains(&version) {
        return Err(Error::Unsupported(format!(
            "{OFFSETS_TOPIC} holds an OffsetCommitValue of version {version}; kafkalite reads versions \
             0-{MAX_OFFSET_COMMIT_VALUE_VERSION} (a newer Kafka wrote it: upgrade kafkalite)"
        )));
    }
    let fields = (|| {
        let offset = r.i64()?;
        if version >= 3 {
            r.i32()?; // leaderEpoch
        }
        let metadata = if version >= 4 { r.compact_string()? } else { r.string()? };
        Ok::<_, String>((offset, metadata))
    })();
    fields.map_err(corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_of_a_group_is_kafkas() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        // Java hashes UTF-16 code units: a character outside the BMP counts as its two surrogates.
        assert_eq!(java_string_hash("\u{1F600}"), 0xD83D * 31 + 0xDE00);
        assert_eq!(offsets_partition("a"), 97 % 50);
    }

    #[test]
    fn keys_and_values_round_trip() {
        let key = encode_key("g", "t", 3).unwrap();
        assert_eq!(key, [0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 3]);
        assert_eq!(decode_key(&key).unwrap(), Some(("g".into(), "t".into(), 3)));
        let value = encode_value(42, "m", 7).unwrap();
        assert_eq!(value.len(), 2 + 8 + 4 + 3 + 8);
        assert_eq!(decode_value(&value).unwrap(), (42, "m".into()));
    }

    #[test]
    fn other_record_types_hold_no_offsets_and_damage_is_typed() {
        assert_eq!(decode_key(&[0, 2, 0, 1, b'g']).unwrap(), None);
        assert!(matches!(decode_key(&[0]), Err(Error::Corrupt(_))));
        assert!(matches!(decode_key(&[0, 1, 0, 9, b'g']), Err(Error::Corrupt(_))));
        assert!(matches!(decode_value(&[0, 5]), Err(Error::Unsupported(_))));
        assert!(matches!(decode_value(&[0, 3, 0]), Err(Error::Corrupt(_))));
        assert!(matches!(encode_key(&"x".repeat(40_000), "t", 0), Err(Error::InvalidConfig(_))));
    }
}
