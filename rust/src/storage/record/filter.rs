//! Rewriting one batch with some of its records removed: Kafka's `MemoryRecords.filterTo`,
//! as the log cleaner uses it. The batch keeps its baseOffset and its lastOffsetDelta (so
//! the log's offsets never move, and gaps appear), its codec, attributes, producer fields and
//! partition leader epoch. A batch that keeps every record and needs no delete horizon is
//! copied byte for byte.

use crate::storage::error::Result;
use crate::storage::record::compression::compress;
use crate::storage::record::header::{compute_crc, BatchHeader, ATTR_DELETE_HORIZON, HEADER_LEN, LOG_OVERHEAD};
use crate::storage::record::record::encode_record;
use crate::storage::record::{for_each_record, record_area, RecordInput, RecordRef, TimestampType};

/// What became of a batch.
#[derive(Debug, PartialEq, Eq)]
pub enum Filtered {
    /// Every record stays: copy the original bytes.
    Unchanged,
    /// The new batch's bytes (CRC set).
    Rewritten(Vec<u8>),
    /// No record stays: the batch disappears.
    Empty,
}

/// Counts for the cleaner's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterCounts {
    pub records_kept: u64,
    pub records_removed: u64,
    pub tombstones_removed: u64,
}

/// Keep the records of `batch` for which `keep` says so. When a kept record is a tombstone
/// (null value) and the batch has no delete horizon yet, the batch is rebuilt with attribute
/// bit 6 set and `baseTimestamp = stamp_horizon` (KIP-534), so later passes know when the
/// tombstone may go. Control batches are returned unchanged (they hold no keys).
pub fn filter_batch(
    batch: &[u8],
    header: &BatchHeader,
    stamp_horizon: i64,
    mut keep: impl FnMut(&RecordRef<'_>) -> bool,
) -> Result<(Filtered, FilterCounts)> {
    let mut counts = FilterCounts::default();
    if header.is_control() {
        counts.records_kept = header.records_count.max(0) as u64;
        return Ok((Filtered::Unchanged, counts));
    }
    let area = record_area(batch, header)?;
    let mut kept: Vec<RecordRef<'_>> = Vec::with_capacity(header.records_count.max(0) as usize);
    let mut tombstone_kept = false;
    for_each_record(&area, header, |r| {
        if keep(r) {
            tombstone_kept |= r.value.is_none();
            kept.push(r.clone());
        } else {
            counts.records_removed += 1;
            if r.value.is_none() {
                counts.tombstones_removed += 1;
            }
        }
        Ok(())
    })?;
    counts.records_kept = kept.len() as u64;
    if kept.is_empty() {
        return Ok((Filtered::Empty, counts));
    }
    let needs_horizon = tombstone_kept && !header.has_delete_horizon();
    if counts.records_removed == 0 && !needs_horizon {
        return Ok((Filtered::Unchanged, counts));
    }
    let horizon =
        if needs_horizon { Some(stamp_horizon) } else { header.has_delete_horizon().then_some(header.base_timestamp) };
    Ok((Filtered::Rewritten(rebuild(header, &kept, horizon)?), counts))
}

/// Encode `kept` as a batch shaped like `original`.
fn rebuild(original: &BatchHeader, kept: &[RecordRef<'_>], horizon: Option<i64>) -> Result<Vec<u8>> {
    let log_append = original.timestamp_type() == TimestampType::LogAppendTime;
    let base_timestamp = horizon.unwrap_or(kept[0].timestamp);
    let mut body = Vec::new();
    let mut max_timestamp = i64::MIN;
    for r in kept {
        let offset_delta = (r.offset - original.base_offset) as i32;
        let input = RecordInput { key: r.key, value: r.value, headers: &r.headers, timestamp: r.timestamp };
        encode_record(&mut body, offset_delta, r.timestamp.wrapping_sub(base_timestamp), &input);
        max_timestamp = max_timestamp.max(r.timestamp);
    }
    let codec = original.compression()?;
    let area = compress(codec, &body)?;
    let mut out = vec![0u8; HEADER_LEN];
    out.extend_from_slice(&area);
    let mut attributes = original.attributes;
    if horizon.is_some() {
        attributes |= ATTR_DELETE_HORIZON;
    }
    let mut header = BatchHeader {
        batch_length: (out.len() - LOG_OVERHEAD) as i32,
        attributes,
        base_timestamp,
        max_timestamp: if log_append { original.max_timestamp } else { max_timestamp },
        records_count: kept.len() as i32,
        crc: 0,
        ..*original
    };
    header.write(&mut out);
    header.crc = compute_crc(&out);
    header.write(&mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::record::scan::{next_batch, Next};
    use crate::storage::record::{BatchBuilder, Compression};

    fn batch(codec: Compression, values: &[Option<&[u8]>]) -> Vec<u8> {
        let mut b = BatchBuilder::new(codec, None, 1024);
        for (i, v) in values.iter().enumerate() {
            let key = [b'k', i as u8];
            b.push(&RecordInput { key: Some(&key), value: *v, headers: &[], timestamp: 1000 + i as i64 });
        }
        b.finish(100).unwrap().0
    }

    /// (offset, timestamp, value) of each record.
    type Decoded = Vec<(i64, i64, Option<Vec<u8>>)>;

    fn decode(bytes: &[u8]) -> (BatchHeader, Decoded) {
        let Next::Batch(h) = next_batch(bytes, 0, true).unwrap() else { panic!("no batch") };
        let area = record_area(bytes, &h).unwrap();
        let mut out = Vec::new();
        for_each_record(&area, &h, |r| {
            out.push((r.offset, r.timestamp, r.value.map(<[u8]>::to_vec)));
            Ok(())
        })
        .unwrap();
        (h, out)
    }

    #[test]
    fn removed_records_leave_gaps_and_keep_last_offset() {
        for codec in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let bytes = batch(codec, &[Some(b"a"), Some(b"b"), Some(b"c"), Some(b"d")]);
            let Next::Batch(h) = next_batch(&bytes, 0, true).unwrap() else { panic!() };
            let (out, counts) = filter_batch(&bytes, &h, 0, |r| r.offset == 101).unwrap();
            let Filtered::Rewritten(new) = out else { panic!("{out:?}") };
            let (nh, records) = decode(&new);
            assert_eq!((nh.base_offset, nh.last_offset(), nh.records_count), (100, 103, 1));
            assert_eq!(nh.compression().unwrap(), codec);
            assert_eq!(records, vec![(101, 1001, Some(b"b".to_vec()))]);
            assert_eq!(counts, FilterCounts { records_kept: 1, records_removed: 3, tombstones_removed: 0 });
        }
    }

    #[test]
    fn kept_tombstones_get_a_delete_horizon_once() {
        let bytes = batch(Compression::None, &[Some(b"a"), None]);
        let Next::Batch(h) = next_batch(&bytes, 0, true).unwrap() else { panic!() };
        let (out, _) = filter_batch(&bytes, &h, 9_999_999, |_| true).unwrap();
        let Filtered::Rewritten(new) = out else { panic!("{out:?}") };
        let (nh, records) = decode(&new);
        assert!(nh.has_delete_horizon());
        assert_eq!(nh.base_timestamp, 9_999_999);
        // Record timestamps survive the new base.
        assert_eq!(records.iter().map(|r| r.1).collect::<Vec<_>>(), vec![1000, 1001]);
        // A second pass keeps the stamped batch as it is.
        let (again, _) = filter_batch(&new, &nh, 12_345, |_| true).unwrap();
        assert_eq!(again, Filtered::Unchanged);
    }

    #[test]
    fn all_kept_is_unchanged_and_none_kept_is_empty() {
        let bytes = batch(Compression::None, &[Some(b"a"), Some(b"b")]);
        let Next::Batch(h) = next_batch(&bytes, 0, true).unwrap() else { panic!() };
        assert_eq!(filter_batch(&bytes, &h, 0, |_| true).unwrap().0, Filtered::Unchanged);
        assert_eq!(filter_batch(&bytes, &h, 0, |_| false).unwrap().0, Filtered::Empty);
    }
}
