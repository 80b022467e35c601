//! Opening a segment: the scan-and-cut of a segment that cannot be trusted (Kafka's
//! `LogSegment.recover`), and the index check of one that can.

use crate::storage::error::{Error, IoContext, Result};
use crate::storage::mmap::MappedFile;
use crate::storage::record::scan::{next_batch, verify_crc, Batches, Next};

use super::{RecoveryReport, Segment};

/// A scan drops the pages it has read from the process's resident set every this many bytes
/// (they stay in the page cache): a server that recovers several large active segments at once
/// after a kill -9 would otherwise hold all of them resident (the server soak saw 318 MB).
const SCAN_RELEASE_STEP: usize = 8 << 20;

/// Drop `[*released, upto)` (whole pages) of `map` from the resident set once it spans a step.
fn release_scanned(map: Option<&MappedFile>, released: &mut usize, upto: usize) {
    let upto = upto / 4096 * 4096;
    if let Some(map) = map.filter(|_| upto >= *released + SCAN_RELEASE_STEP) {
        map.release(*released, upto - *released);
        *released = upto;
    }
}

impl Segment {
    /// Scan the whole file, keep the valid prefix, rebuild both indexes (Kafka's
    /// `LogSegment.recover`). The writer calls this for segments it cannot trust.
    pub fn recover(&mut self) -> Result<RecoveryReport> {
        self.rescan(None)
    }

    /// A sealed segment (one with a successor) that failed the trusted load: rebuild its
    /// indexes from its valid batches, never cutting data. A zero tail (a roll that died before
    /// trimming) is trimmed; anything else after the valid batches is damage and stays: the
    /// segment keeps its whole length and ends at `next_base`, so reading that range fails
    /// with `Error::Corrupt` instead of skipping to the next segment, and the intact segments
    /// after it stay (Kafka trusts segments below its recovery point).
    pub fn recover_sealed(&mut self, next_base: i64) -> Result<RecoveryReport> {
        self.rescan(Some(next_base))
    }

    fn rescan(&mut self, keep_damage_until: Option<i64>) -> Result<RecoveryReport> {
        self.finish_prefault();
        self.ensure_file()?;
        let file_len =
            self.f().metadata().context(|| format!("cannot stat {}", self.log_path().display()))?.len() as usize;
        self.offset_index.file.clear()?;
        self.time_index.file.clear()?;
        self.size = 0;
        self.next_offset = self.base_offset;
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = -1;
        self.first_batch_timestamp = None;
        self.bytes_since_last_index_entry = 0;
        let map = if file_len > 0 { Some(MappedFile::readonly(self.f(), file_len, "segment")?) } else { None };
        let bytes = map.as_ref().map(|m| m.bytes(0, file_len)).unwrap_or(&[]);
        // Recovery's checks on top of the iterator: every CRC, and offsets that follow.
        let mut pos = 0usize;
        let mut released = 0usize;
        let mut reason = None;
        for batch in Batches::new(bytes, 0) {
            release_scanned(map.as_deref(), &mut released, pos);
            let checked = batch.and_then(|(at, h)| verify_crc(&bytes[at..at + h.total_size()], &h, at).map(|()| h));
            match checked {
                Ok(h) => {
                    if h.base_offset < self.next_offset || h.last_offset() - self.base_offset > i32::MAX as i64 {
                        reason = Some(format!(
                            "batch at position {pos} has offsets {}..={} that do not follow offset {} in a segment based at {}",
                            h.base_offset,
                            h.last_offset(),
                            self.next_offset - 1,
                            self.base_offset
                        ));
                        break;
                    }
                    self.after_batch(pos, &h)?;
                    pos += h.total_size();
                    self.size = pos;
                }
                Err(e) => {
                    reason = Some(e.to_string());
                    break;
                }
            }
        }
        // The tail past the valid batches (zeros of the reserve, or damage), counted a step at a
        // time so that it too leaves the resident set as it is read.
        let mut dropped_bytes = 0u64;
        for (i, chunk) in bytes[pos..].chunks(SCAN_RELEASE_STEP).enumerate() {
            dropped_bytes += chunk.iter().filter(|&&b| b != 0).count() as u64;
            release_scanned(map.as_deref(), &mut released, (pos + (i + 1) * SCAN_RELEASE_STEP).min(file_len));
        }
        if reason.is_none() && dropped_bytes > 0 {
            reason = Some(format!("incomplete batch at position {pos}"));
        }
        let dropped_span = if dropped_bytes > 0 { (file_len - pos) as u64 } else { 0 };
        drop(map);
        if let (Some(next_base), true) = (keep_damage_until, dropped_span > 0) {
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, true)?;
            let first_damaged = self.next_offset;
            self.size = file_len;
            self.next_offset = next_base.max(self.next_offset);
            self.allocated_len = file_len;
            self.map = Some(MappedFile::readonly(self.f(), file_len, "segment")?);
            self.mapped_len = file_len;
            self.sealed = true;
            return Ok(RecoveryReport {
                base_offset: self.base_offset,
                valid_bytes: file_len as u64,
                dropped_bytes: 0,
                reason: Some(format!(
                    "{dropped_span} damaged bytes from position {pos} ({}) were kept, not recovered: the segment is \
                     sealed, so reading offsets {first_damaged} to {} raises CorruptRecordError and the later \
                     segments are intact",
                    reason.as_deref().unwrap_or("not a record batch"),
                    self.next_offset - 1
                )),
            });
        }
        if self.writable && file_len != pos {
            self.f().set_len(pos as u64).context(|| format!("cannot truncate {}", self.log_path().display()))?;
        }
        self.mapped_len = 0;
        self.allocated_len = self.size;
        self.map = None;
        if self.size > 0 {
            self.map = Some(MappedFile::readonly(self.f(), self.size, "segment")?);
            self.mapped_len = self.size;
        }
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, true)?;
        Ok(RecoveryReport {
            base_offset: self.base_offset,
            valid_bytes: pos as u64,
            dropped_bytes: dropped_span,
            reason: if dropped_span > 0 { reason } else { None },
        })
    }

    /// Trust a cleanly closed segment: its file length is its valid size. Reads the last
    /// batch headers (from the last index entry) to learn the next offset and max timestamp.
    pub fn load_trusted(&mut self) -> Result<()> {
        self.ensure_file()?;
        let file_len =
            self.f().metadata().context(|| format!("cannot stat {}", self.log_path().display()))?.len() as usize;
        if !self.offset_index.is_sane(file_len as u64) {
            return Err(Error::corrupt(format!("offset index of {} points past its log", self.log_path().display())));
        }
        self.size = file_len;
        if file_len > 0 {
            self.map = Some(MappedFile::readonly(self.f(), file_len, "segment")?);
            self.mapped_len = file_len;
        }
        let (_, start) = self.offset_index.lookup(i64::MAX);
        let bytes = self.map.as_ref().map(|m| m.bytes(0, file_len)).unwrap_or(&[]);
        let mut last_header = None;
        let mut follows_from = self.base_offset;
        let mut batches = Batches::new(bytes, start as usize);
        for batch in batches.by_ref() {
            let (pos, h) = batch?;
            // baseOffset is outside the CRC: a damaged one must not become this segment's end.
            if h.base_offset < follows_from || h.last_offset() - self.base_offset > i32::MAX as i64 {
                return Err(Error::corrupt(format!(
                    "{} holds a batch at position {pos} with offsets {}..={} that do not follow offset {}",
                    self.log_path().display(),
                    h.base_offset,
                    h.last_offset(),
                    follows_from - 1
                )));
            }
            follows_from = h.next_offset();
            last_header = Some(h);
        }
        let pos = batches.position();
        if pos != file_len {
            return Err(Error::corrupt(format!(
                "{} has {} bytes after its last batch",
                self.log_path().display(),
                file_len - pos
            )));
        }
        if let Some(h) = &last_header {
            self.next_offset = h.next_offset();
        }
        self.check_indexes(bytes)?;
        let first_batch_timestamp = Batches::new(bytes, 0).next().and_then(|b| b.ok()).map(|(_, h)| h.max_timestamp);
        if !self.take_max_timestamp_from_time_index() {
            if let Some(h) = &last_header {
                self.max_timestamp = h.max_timestamp;
                self.offset_of_max_timestamp = h.last_offset();
            }
        }
        self.first_batch_timestamp = first_batch_timestamp;
        Ok(())
    }

    /// Every offset-index entry must point at a batch that ends with the entry's offset, and
    /// time-index entries must stay inside the segment; otherwise the indexes are rebuilt.
    fn check_indexes(&self, bytes: &[u8]) -> Result<()> {
        let bad = |what: &str| Error::corrupt(format!("{} of segment {} {what}", "index", self.base_offset));
        for e in self.offset_index.file.entries() {
            match next_batch(bytes, e.position as usize, false) {
                Ok(Next::Batch(h)) if h.last_offset() == self.base_offset + e.relative_offset as i64 => {}
                _ => return Err(bad("has an entry that does not match its batch")),
            }
        }
        let last_relative = self.next_offset - self.base_offset;
        if self.time_index.file.entries().iter().any(|e| e.relative_offset as i64 >= last_relative.max(1)) {
            return Err(bad("has a time entry past the segment's last offset"));
        }
        Ok(())
    }
}
