//! The `.timeindex` file: 12-byte entries `(i64 timestamp, i32 relativeOffset)`. An entry
//! (T, O) says the largest timestamp in the segment up to offset `base + O` is T.

use crate::storage::error::Result;
use crate::storage::index::{Entry, IndexFile};
use std::path::Path;

/// One time-index entry as the file stores it: the offset is relative to the segment's base
/// (`lookup` returns it made absolute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub relative_offset: u32,
}

impl Entry for TimestampOffset {
    const SIZE: usize = 12;
    fn decode(b: &[u8]) -> Self {
        TimestampOffset {
            timestamp: i64::from_be_bytes(b[0..8].try_into().unwrap()),
            relative_offset: u32::from_be_bytes(b[8..12].try_into().unwrap()),
        }
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
    }
    fn increases_from(&self, prev: &Self) -> bool {
        self.timestamp > prev.timestamp && self.relative_offset >= prev.relative_offset
    }
}

/// A segment's time index.
pub struct TimeIndex {
    pub file: IndexFile<TimestampOffset>,
    pub base_offset: i64,
}

impl TimeIndex {
    pub fn open(path: &Path, base_offset: i64, writable: bool, max_index_bytes: usize) -> Result<(Self, bool)> {
        let (file, damaged) = IndexFile::open(path, writable, max_index_bytes)?;
        Ok((TimeIndex { file, base_offset }, damaged))
    }

    /// Kafka's `maybeAppend`: only when the timestamp grows. The last slot is kept for the
    /// final entry of a roll unless `skip_full_check`.
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64, skip_full_check: bool) -> Result<()> {
        if !skip_full_check && self.is_full() {
            return Ok(());
        }
        let e = TimestampOffset { timestamp, relative_offset: (offset - self.base_offset) as u32 };
        // Kafka compares with its last entry, which for an empty index is (-1, base): an empty
        // segment (max timestamp -1) gets no entry, never a (-1, -1) pair.
        if e.timestamp > self.file.last().map_or(-1, |last| last.timestamp) {
            self.file.push(e)?;
        }
        Ok(())
    }

    /// Kafka's `TimeIndex.lookup`: the largest entry with timestamp <= ts, as
    /// (timestamp, absolute offset); `(-1, base_offset)` when there is none.
    pub fn lookup(&self, ts: i64) -> (i64, i64) {
        match self.file.floor_by(ts, |e| e.timestamp) {
            Some(e) => (e.timestamp, self.base_offset + e.relative_offset as i64),
            None => (-1, self.base_offset),
        }
    }

    /// Full one slot early, keeping room for the final entry (Kafka: `entries >= max - 1`).
    pub fn is_full(&self) -> bool {
        self.file.len() + 1 >= self.file.max_entries()
    }
}
