//! A reader's side of a segment another process writes: learning the batches it published
//! since we last looked, and that it sealed the segment.

use crate::storage::error::{Error, IoContext, Result};
use crate::storage::mmap::MappedFile;
use crate::storage::record::header::{BatchHeader, HEADER_LEN};
use crate::storage::record::scan::{next_batch, Next};

use super::{read_at_most, Segment};

impl Segment {
    /// `Log::follow` for one segment: find batches a writer published since we last looked. New ground is
    /// read with `pread`, never through the map, so a concurrent trim cannot fault us; only
    /// bytes proven to be whole, CRC-valid batches become part of `size`.
    pub(crate) fn follow(&mut self) -> Result<bool> {
        let before = self.size;
        self.offset_index.file.load_more()?;
        self.time_index.file.load_more()?;
        self.ensure_file()?;
        let file_len =
            self.f().metadata().context(|| format!("cannot stat {}", self.log_path().display()))?.len() as usize;
        self.file_len_seen = file_len;
        if self.size == 0 {
            self.skip_to_last_index_entry(file_len);
        }
        let scanned = self.scan_published(file_len);
        // Mapped before any error is returned: batches counted into `size` before a damaged one
        // must be inside the map, or the next read of them would index past it.
        if self.size > self.mapped_len {
            // The file holds at least `size` valid bytes and never shrinks below them.
            self.map = Some(MappedFile::readonly(self.f(), self.size, "segment")?);
            self.mapped_len = self.size;
            self.map_writable = false;
        }
        scanned?;
        Ok(self.size > before)
    }

    /// `follow`'s scan: add to `size` every whole, CRC-valid batch published after it.
    fn scan_published(&mut self, file_len: usize) -> Result<()> {
        let mut header_buf = [0u8; HEADER_LEN];
        let mut body = Vec::new();
        loop {
            let pos = self.size;
            let n = read_at_most(self.f(), &mut header_buf, pos as u64)?;
            let header = match next_batch(&header_buf[..n], 0, false) {
                Ok(Next::Batch(h)) => h,
                // A header alone cannot be "complete" unless the batch is header-only; any
                // End here just means "need the rest", checked below.
                Ok(Next::End) if n == HEADER_LEN => BatchHeader::parse(&header_buf)?,
                Ok(_) => break,
                Err(_) => break,
            };
            if header.batch_length < 49 || pos + header.total_size() > file_len {
                break;
            }
            body.resize(header.total_size(), 0);
            if read_at_most(self.f(), &mut body, pos as u64)? < body.len() {
                break;
            }
            // Whole and behind a prefix (which writers store last): the batch was published in
            // full, so a bad CRC or offsets that do not follow are damage, never "not yet
            // written". Stopping quietly here would let readers skip every later record.
            let follows = |h: &BatchHeader| {
                h.base_offset >= self.next_offset && h.last_offset() - self.base_offset <= i32::MAX as i64
            };
            match next_batch(&body, 0, true) {
                Ok(Next::Batch(h)) if !follows(&h) => {
                    return Err(Error::corrupt(format!(
                        "{} holds a batch at position {pos} with offsets {}..={} that do not follow offset {} (the file is damaged)",
                        self.log_path().display(),
                        h.base_offset,
                        h.last_offset(),
                        self.next_offset - 1
                    )))
                }
                Err(e) => {
                    return Err(Error::corrupt(format!(
                        "{} holds a damaged batch at position {pos}: {e}",
                        self.log_path().display()
                    )))
                }
                Ok(Next::Batch(h)) => {
                    self.size += h.total_size();
                    self.next_offset = h.next_offset();
                    self.observe_timestamps(&h);
                }
                _ => break,
            }
        }
        Ok(())
    }

    /// A reader's first look: everything before the last offset-index entry was published
    /// before that entry was written, so scanning can start there instead of at byte 0.
    fn skip_to_last_index_entry(&mut self, file_len: usize) {
        let Some(last) = self.offset_index.file.last().copied() else { return };
        let position = last.position as usize;
        if position == 0 || position >= file_len {
            return;
        }
        let mut first = [0u8; HEADER_LEN];
        if read_at_most(self.f(), &mut first, 0).ok() == Some(HEADER_LEN) {
            if let Ok(h) = BatchHeader::parse(&first) {
                self.first_batch_timestamp = Some(h.max_timestamp);
            }
        }
        self.take_max_timestamp_from_time_index();
        self.size = position;
    }

    /// Another writer sealed (and trimmed) this segment: it is final, so it keeps no descriptor.
    pub fn mark_sealed(&mut self) {
        self.sealed = true;
        self.release_descriptors();
    }
}
