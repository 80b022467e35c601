//! The `.index` file: 8-byte entries `(i32 relativeOffset, i32 position)`. An entry (O, P)
//! says the batch that starts at byte P of the `.log` ends with offset `base + O`.

use crate::storage::error::Result;
use crate::storage::index::{Entry, IndexFile};
use std::path::Path;

/// One offset-index entry as stored: the offset relative to the segment's base offset (`lookup`
/// makes it absolute), and the batch's byte position in the `.log`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetPosition {
    pub relative_offset: u32,
    pub position: u32,
}

impl Entry for OffsetPosition {
    const SIZE: usize = 8;
    fn decode(b: &[u8]) -> Self {
        OffsetPosition {
            relative_offset: u32::from_be_bytes(b[0..4].try_into().unwrap()),
            position: u32::from_be_bytes(b[4..8].try_into().unwrap()),
        }
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
    }
    fn increases_from(&self, prev: &Self) -> bool {
        self.relative_offset > prev.relative_offset && self.position > prev.position
    }
}

/// A segment's offset index.
pub struct OffsetIndex {
    pub file: IndexFile<OffsetPosition>,
    pub base_offset: i64,
}

impl OffsetIndex {
    pub fn open(path: &Path, base_offset: i64, writable: bool, max_index_bytes: usize) -> Result<(Self, bool)> {
        let (file, damaged) = IndexFile::open(path, writable, max_index_bytes)?;
        Ok((OffsetIndex { file, base_offset }, damaged))
    }

    /// Kafka's `OffsetIndex.lookup`: the largest entry with offset <= target, as
    /// (absolute offset, position); `(base_offset, 0)` when there is none.
    pub fn lookup(&self, target: i64) -> (i64, u32) {
        let rel = target - self.base_offset;
        if rel < 0 {
            return (self.base_offset, 0);
        }
        let rel = rel.min(u32::MAX as i64) as u32;
        match self.file.floor_by(rel, |e| e.relative_offset) {
            Some(e) => (self.base_offset + e.relative_offset as i64, e.position),
            None => (self.base_offset, 0),
        }
    }

    /// Append (offset, position) if it increases both; Kafka's `append`.
    pub fn append(&mut self, offset: i64, position: u32) -> Result<()> {
        let e = OffsetPosition { relative_offset: (offset - self.base_offset) as u32, position };
        if self.file.last().is_none_or(|last| e.increases_from(last)) {
            self.file.push(e)?;
        }
        Ok(())
    }

    pub fn is_full(&self) -> bool {
        self.file.len() >= self.file.max_entries()
    }

    /// Kafka's sanity check: every entry within the segment and its log size.
    pub fn is_sane(&self, log_size: u64) -> bool {
        self.file.entries().iter().all(|e| (e.position as u64) < log_size)
    }
}
