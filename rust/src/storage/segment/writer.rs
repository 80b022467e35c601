//! The writer's side of a segment: appends through the shared map, growing the reserved
//! blocks ahead of them, taking over a segment others appended to, sealing and syncing.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use crate::storage::error::{Error, IoContext, Result};
use crate::storage::mmap::MappedFile;
use crate::storage::nofollow;
use crate::storage::record::header::{BatchHeader, HEADER_LEN, LOG_OVERHEAD};

use super::{read_at_most, Segment};

/// Reserve disk for the active segment in steps that follow what is written: the first is
/// `MIN_ALLOCATION_STEP`, each next one as large as what is reserved already (doubling), up to
/// `MAX_ALLOCATION_STEP` (and never past `segment_bytes`). A partition holding one record
/// costs 64-128 KiB of disk and page cache, not 16 MiB, while a busy one soon reserves in
/// 16 MiB steps again.
const MIN_ALLOCATION_STEP: usize = 64 << 10;
const MAX_ALLOCATION_STEP: usize = 16 << 20;
/// How much of the active segment a writer keeps resident around its write position: the
/// prefault helper faults in at most two windows ahead of it (a new window once less than
/// one is left), and the pages behind it are dropped each time it has moved a window on. The
/// reserve on disk still grows in whole allocation steps; only what is mapped in follows the
/// writer.
/// Prefaulting whole 16 MiB steps kept up to 32 MiB per busy partition resident: a server
/// taking 1 MiB batches for four partitions peaked over 100 MB (issue 13). A window costs one
/// helper thread per 2 MiB written. What all writers of the process keep faulted in ahead is
/// capped by `prealloc::FAULTED_AHEAD_LIMIT`.
const RESIDENT_WINDOW: usize = 2 << 20;
const PAGE: usize = 4096;

/// Batches at least this large are written with `pwrite` (`write_through_file`); smaller ones
/// are stored through the map, where a few pages' faults cost less than reopening the
/// descriptor an exclusive writer closes after each append (`release_log_descriptor`).
const WRITE_THROUGH_FILE_MIN: usize = 32 << 10;

impl Segment {
    /// Milliseconds the segment has been "open" by Kafka's `segment.ms` rule.
    pub fn time_waited_for_roll(&self, now_ms: i64, batch_max_ts: i64) -> i64 {
        match self.first_batch_timestamp {
            Some(first) if first >= 0 => batch_max_ts - first,
            _ => now_ms - self.created_ms,
        }
    }

    /// Make room for `extra` more bytes past the published end. Blocks are reserved with
    /// `fallocate` one step ahead of the writer, and the window just ahead of it is faulted in
    /// for writing on a helper thread (`slide_resident_window`), so the kernel's zero-filling of
    /// fresh pages overlaps with encoding instead of stalling every 4 KiB store. The step ahead
    /// comes out of the data directory's preallocation budget (`prealloc.rs`); once that is
    /// spent, only what this append needs is reserved, plus the rest of its last page (so the
    /// file always ends past the data, which is what tells readers the segment is still
    /// active, see `looks_sealed`).
    pub(super) fn ensure_capacity(&mut self, extra: usize) -> Result<()> {
        let needed = self.size + extra;
        let step = self.allocation_step();
        // What is written (or about to be) no longer counts against the budget.
        self.reservation.settle(self.allocated_len.saturating_sub(needed));
        let remap = self.map.is_none() || !self.map_writable;
        let must = needed >= self.allocated_len || remap;
        let roomy = needed < self.allocated_len && self.allocated_len - needed >= step / 2;
        if !must && roomy {
            return Ok(());
        }
        // A remap with room ahead (a reopen, or a take-over of the reserve another writer left)
        // maps what is there: a step more each time grew a segment reopened again and again (a
        // server closing and reopening partitions an embedded writer holds) without bound.
        let mut wanted = match (roomy, must) {
            (true, _) => self.allocated_len,
            (false, true) => needed.max(self.allocated_len + step),
            (false, false) => self.allocated_len + step,
        };
        if wanted - needed < step / 2 {
            wanted += step;
        }
        let floor = (needed + 1).next_multiple_of(4096).max(self.allocated_len);
        let granted = self.reservation.take(&self.dir, wanted.next_multiple_of(4096).saturating_sub(floor));
        let target = floor + granted;
        if target > self.allocated_len || remap {
            if let Err(e) = self.grow(target) {
                // Nothing was reserved: the budget taken for it goes back.
                self.reservation.settle(self.allocated_len.saturating_sub(needed));
                return Err(e);
            }
        }
        Ok(())
    }

    fn allocation_step(&self) -> usize {
        let step = self.allocated_len.clamp(MIN_ALLOCATION_STEP, MAX_ALLOCATION_STEP);
        step.min(self.settings.segment_bytes.max(4096)).next_multiple_of(4096)
    }

    /// Reserve blocks up to `target` bytes, map them (the map spans the whole segment size,
    /// so it is rarely replaced), and start prefaulting the new range.
    fn grow(&mut self, target: usize) -> Result<()> {
        let target = target.next_multiple_of(4096);
        let from = self.allocated_len;
        self.ensure_file()?;
        if target > from {
            crate::storage::failpoint::hit("segment.reserve")
                .and_then(|()| reserve_blocks(self.f(), from, target))
                .context_at(&self.log_path(), || {
                    format!("cannot reserve {target} bytes for {} (is the disk full?)", self.log_path().display())
                })?;
        }
        self.allocated_len = target.max(from);
        if self.map.is_none() || target > self.mapped_len || !self.map_writable {
            // Address space only: bytes past `allocated_len` are never touched (mmap invariant 3).
            let len = target.max(self.settings.segment_bytes.next_multiple_of(4096));
            self.map = Some(MappedFile::writable(self.f(), len, &self.log_path().display().to_string())?);
            self.map_writable = true;
            self.mapped_len = len;
            // Nothing of a new map is resident yet.
            self.finish_prefault();
            self.forget_window();
        }
        self.slide_resident_window();
        Ok(())
    }

    /// Keep the resident part of the map to a window around the write position (bounded
    /// resident set: issue 14 target 6, issue 13's server): once less than `RESIDENT_WINDOW`
    /// is faulted in ahead of the writer, drop the pages behind it (written: the page cache
    /// keeps them, and a reader faults them back in) and fault in up to two windows ahead on a
    /// helper thread, so the kernel's zero-filling of fresh pages overlaps with the appends.
    /// What is faulted in ahead comes out of the process's budget (`FAULTED_AHEAD_LIMIT`);
    /// once that is spent, this writer faults its pages in as it stores them.
    /// Called after every append and growth; most calls only compare a few numbers.
    fn slide_resident_window(&mut self) {
        // What the writer stored into its window is no longer ahead of it.
        self.settle_faulted_ahead();
        if self.prefaulted >= self.size + RESIDENT_WINDOW {
            return;
        }
        let Some(map) = self.map.as_ref().filter(|_| self.map_writable).map(Arc::clone) else {
            return;
        };
        let written = self.size / PAGE * PAGE; // the last partial page is still being written
        if written >= self.released + RESIDENT_WINDOW {
            // A helper the writer overtook (a loaded machine) would fault pages in behind it
            // again after they are dropped.
            self.finish_prefault();
            map.release(self.released, written - self.released);
            self.released = written;
        }
        if self.writes_through_file {
            // Appends that write through the file (`write_through_file`) fill their pages
            // themselves: faulting them in ahead would only add the kernel's zero-filling.
            return;
        }
        let from = self.prefaulted.max(written);
        let to = (self.size + 2 * RESIDENT_WINDOW).min(self.allocated_len) / PAGE * PAGE;
        if to < from + MIN_ALLOCATION_STEP {
            // A page or two (a spent budget's growth, the end of the reserve) is cheaper to
            // fault in by the append itself.
            return;
        }
        let granted = self.faulted_ahead.take(&self.dir, to - from);
        if granted < MIN_ALLOCATION_STEP {
            // Many partitions are busy at once and their windows hold the process's budget.
            self.settle_faulted_ahead();
            return;
        }
        self.finish_prefault();
        // Faulting in ahead is an optimisation: a process that cannot start a thread (its
        // RLIMIT_NPROC or the pids cgroup is spent) appends without it rather than panicking.
        match std::thread::Builder::new().spawn(move || map.prefault_for_write(from, granted)) {
            Ok(handle) => {
                self.prefault = Some(handle);
                self.prefaulted = from + granted;
            }
            Err(e) => {
                log::debug!("no prefault helper for {}: {e}", self.log_path().display());
                self.settle_faulted_ahead();
            }
        }
    }

    /// Hold of the process's budget exactly what is faulted in ahead of the writer now (giving
    /// back what it stored into, or a grant no helper thread used).
    fn settle_faulted_ahead(&mut self) {
        self.faulted_ahead.settle(self.prefaulted.saturating_sub(self.size));
    }

    /// The window is gone from the resident set (a new map, or all of it released): the next
    /// append faults in a new one, and the budget it held goes back.
    fn forget_window(&mut self) {
        (self.prefaulted, self.released) = (self.size / PAGE * PAGE, self.size / PAGE * PAGE);
        self.faulted_ahead.release();
    }

    /// Drop every page of this segment from the process's resident set (the page cache keeps
    /// them: the map is shared over the file, so later reads and appends fault them back in with
    /// the same bytes). For a long-running process with many idle partitions, each of which
    /// would otherwise keep its last window resident. The prefault helper is finished
    /// first so that it does not touch the pages again behind this call.
    pub fn release_resident(&mut self) {
        self.finish_prefault();
        if let Some(map) = &self.map {
            map.release(0, map.len());
        }
        self.forget_window();
    }

    /// Wait for the helper thread (before the file is trimmed, or the segment dropped).
    pub(super) fn finish_prefault(&mut self) {
        if let Some(handle) = self.prefault.take() {
            let _ = handle.join();
        }
    }

    /// Append one batch at `header.base_offset`, the offset assigned to it: the batch's own
    /// baseOffset field is not read, so a client's batch is written from the request's bytes
    /// as they are (no copy to re-offset it; the CRC does not cover the field). Returns its
    /// file position.
    pub fn append(&mut self, batch: &[u8], header: &BatchHeader) -> Result<usize> {
        if !self.writable || self.sealed {
            return Err(Error::Closed(format!("segment {} is not writable", self.log_path().display())));
        }
        self.writes_through_file = batch.len() >= WRITE_THROUGH_FILE_MIN;
        if self.writes_through_file {
            // A truncation by another process raises no SIGBUS on this path, and both reserving
            // blocks and the pwrite itself (past the shrunk end) would lengthen the file again,
            // a hole then a batch nobody acknowledges: look before either. The check after the
            // write (`write_through_file`) catches a truncation meanwhile.
            self.check_not_truncated()?;
        }
        self.ensure_capacity(batch.len())?;
        let pos = self.size;
        let mut prefix = [0u8; LOG_OVERHEAD];
        prefix[..8].copy_from_slice(&header.base_offset.to_be_bytes());
        prefix[8..].copy_from_slice(&batch[8..LOG_OVERHEAD]);
        if self.writes_through_file {
            self.write_through_file(pos, &prefix, &batch[LOG_OVERHEAD..])?;
        } else {
            let map = self.map.as_ref().expect("ensure_capacity maps");
            // Body first, then the offset/length prefix: the prefix is what makes a batch visible.
            map.write(pos + LOG_OVERHEAD, &batch[LOG_OVERHEAD..]);
            fence(Ordering::Release);
            map.write(pos, &prefix);
            // Another process shrank the file under our map: these stores may have gone to a
            // zero page (a SIGBUS: `is_damaged`) or past the new end inside its last page (no
            // SIGBUS; the bytes are dropped), so the batch must not be acknowledged.
            self.check_not_truncated()?;
        }
        self.size += batch.len();
        self.slide_resident_window();
        self.after_batch(pos, header)?;
        Ok(pos)
    }

    /// Copy a large batch into the file with `pwrite` rather than through the map: a store into
    /// a mapped page the page cache does not hold yet faults it in first, and for reserved
    /// (unwritten) blocks the kernel zero-fills the whole page before our copy overwrites it,
    /// which made a mapped append cost about twice a plain `write()` of the same bytes. `pwrite`
    /// fills the page cache directly, as `write()` does; readers see the same page cache through
    /// their maps. Same order as the map path: body, then the prefix that publishes it.
    fn write_through_file(&mut self, pos: usize, prefix: &[u8; LOG_OVERHEAD], body: &[u8]) -> Result<()> {
        self.ensure_file()?;
        let path = self.log_path();
        self.f()
            .write_all_at(body, (pos + LOG_OVERHEAD) as u64)
            .context(|| format!("cannot write a batch to {}", path.display()))?;
        // Nothing is published yet: a failed body write leaves the log as it was. A failed or
        // partial prefix write may have published a damaged batch, so it stops appends.
        self.f()
            .write_all_at(prefix, pos as u64)
            .map_err(|e| Error::Poisoned(format!("cannot publish a batch in {}: {e}", path.display())))?;
        self.check_not_truncated()
    }

    /// Whether another process shrank the file under this writer: its length against the
    /// blocks this writer reserved, and the SIGBUS a map store past the new end raised
    /// (`sigbus.rs`). Neither alone suffices: `pwrite` raises no SIGBUS (it lengthens the file
    /// again, after a hole), nor does a map store past the new end inside its last page.
    fn check_not_truncated(&self) -> Result<()> {
        if (self.file_len()? as usize) < self.allocated_len || self.map.as_ref().is_some_and(|m| m.is_damaged()) {
            return Err(self.truncated_error());
        }
        Ok(())
    }

    /// The `.log` file's length now: through the descriptor when it is open, else by path, so
    /// that the check after each small append opens no descriptor (an idle partition holds
    /// none). A file that is gone, or is no longer a regular file, holds none of our batches.
    fn file_len(&self) -> Result<u64> {
        let path = || self.log_path();
        let meta = match &self.file {
            Some(f) => f.metadata(),
            None => std::fs::symlink_metadata(path()),
        };
        match meta {
            Ok(meta) if meta.file_type().is_file() => Ok(meta.len()),
            Ok(_) => Err(Error::Poisoned(format!("{} is no longer a regular file; appends stop", path().display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::Poisoned(format!(
                "{} was deleted while this writer appended to it; appends stop",
                path().display()
            ))),
            Err(e) => Err(Error::Poisoned(format!("cannot stat {}: {e}", path().display()))),
        }
    }

    /// Another process shrank the file under this writer: what it wrote since may be lost, so
    /// nothing more is acknowledged.
    fn truncated_error(&self) -> Error {
        Error::Poisoned(format!(
            "{} was truncated by another process while this writer had it mapped; appends stop",
            self.log_path().display()
        ))
    }

    /// Index bookkeeping for a batch at `pos`, shared by append and recovery (Kafka's
    /// `LogSegment.append` / `recover`: one index entry per `index_interval_bytes`).
    pub(super) fn after_batch(&mut self, pos: usize, header: &BatchHeader) -> Result<()> {
        // In-memory state first, and nothing here can fail: the batch is already published, so
        // the next offset must move past it even if an index write below fails (a stale next
        // offset would give the next batch the same offsets).
        self.observe_timestamps(header);
        let index_due = self.bytes_since_last_index_entry > self.settings.index_interval_bytes;
        let since = if index_due { 0 } else { self.bytes_since_last_index_entry };
        self.bytes_since_last_index_entry = since + header.total_size();
        self.next_offset = header.next_offset();
        // A failed index write leaves the index sparser (still correct: entries are hints that
        // reads verify) and is reported; the batch itself stays in the log.
        if index_due {
            self.offset_index.append(header.last_offset(), pos as u32)?;
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, false)?;
        }
        Ok(())
    }

    /// Kafka's `shouldRoll` size and index conditions for a batch of `size` bytes ending at `last_offset`.
    pub fn is_full_for(&self, size: usize, last_offset: i64) -> bool {
        self.size > 0 && self.size > self.settings.segment_bytes.saturating_sub(size)
            || self.offset_index.is_full()
            || self.time_index.is_full()
            || last_offset - self.base_offset > i32::MAX as i64
    }

    /// Reopen a trusted or recovered segment for appending (the active segment of a writer).
    pub fn reopen_for_append(&mut self) -> Result<()> {
        self.bytes_since_last_index_entry = self.bytes_after_last_index_entry();
        self.map = None;
        self.mapped_len = 0;
        self.allocated_len = self.size;
        self.ensure_capacity(0)
    }

    /// Shared writers, under the append lock: take over the active segment after others
    /// appended to it. Learns their batches, clears the torn body a writer that died mid-append
    /// may have left (its 12-byte prefix is never written, so no reader saw it), and maps the
    /// segment for writing from the file's current reserved length.
    /// `follow` must have run just before, under the same lock.
    pub(crate) fn adopt_for_append(&mut self, max_batch: usize) -> Result<()> {
        // The length now, under the append lock (no writer can change it until we leave).
        self.ensure_file()?;
        let file_len =
            self.f().metadata().context(|| format!("cannot stat {}", self.log_path().display()))?.len() as usize;
        if file_len < self.size {
            return Err(Error::corrupt(format!(
                "{} is {file_len} bytes, shorter than the {} bytes of batches already read from it (truncated by another process?)",
                self.log_path().display(),
                self.size
            )));
        }
        let mut probe = [0u8; HEADER_LEN];
        let n = read_at_most(self.f(), &mut probe, self.size as u64)?;
        let prefix = &probe[..n.min(LOG_OVERHEAD)];
        if prefix.iter().any(|&b| b != 0) {
            // The offset/length prefix is written last, so a batch with one was published in
            // full. `follow` stopped before it, so it does not follow this log's offsets (or is
            // damaged): writing here would destroy records that may have been acknowledged.
            return Err(Error::corrupt(format!(
                "{} holds a batch at position {} that does not follow offset {}; refusing to write over it",
                self.log_path().display(),
                self.size,
                self.next_offset - 1
            )));
        }
        if probe[..n].iter().any(|&b| b != 0) {
            // A torn body: a writer died after copying a batch's body and before its prefix.
            let end = file_len.min(self.size + max_batch + HEADER_LEN);
            let zeros = vec![0u8; end - self.size];
            self.f()
                .write_all_at(&zeros, self.size as u64)
                .context(|| format!("cannot clear a torn batch in {}", self.log_path().display()))?;
        }
        self.bytes_since_last_index_entry = self.bytes_after_last_index_entry();
        // Only the file's current length is backed by blocks: another writer may have sealed
        // (trimmed) this segment since we last wrote it, and then failed or died before it
        // created the next one. Our old allocation and map are stale; storing below them but
        // past the file's end would be lost, or raise SIGBUS (mmap invariant 3).
        self.allocated_len = file_len;
        // What was faulted in past a trimmed end is gone from the map.
        self.prefaulted = self.prefaulted.min(file_len);
        self.sealed = false;
        self.ensure_capacity(0)
    }

    /// Seal the segment: final time-index entry, log trimmed to its valid length.
    pub fn seal(&mut self) -> Result<()> {
        if self.sealed || !self.writable {
            self.sealed = true;
            return Ok(());
        }
        if self.max_timestamp >= 0 {
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, true)?;
        }
        self.finish_prefault();
        // Trimming never cuts below `size`, so maps handed to readers stay valid (mmap invariant 1).
        let cannot = || format!("cannot trim {}", self.log_path().display());
        crate::storage::failpoint::hit("segment.seal.trim").context(cannot)?;
        self.ensure_file()?;
        self.f().set_len(self.size as u64).context(|| format!("cannot trim {}", self.log_path().display()))?;
        // Blocks past `size` are gone: a later append (after a failed roll) must reserve again.
        self.allocated_len = self.size;
        self.reservation.release();
        self.faulted_ahead.release(); // the pages past `size` went with the trim
        self.sealed = true;
        // Final: read through the map from now on. (`sync_all` and an `unseal`ed segment's next
        // append reopen what they need.)
        self.release_descriptors();
        Ok(())
    }

    /// Undo `seal` after the roll that sealed this segment failed to create the next one:
    /// it is still the newest segment, so it stays the active one. Its blocks are reserved
    /// again by the next append (`ensure_capacity`), which fails with an error, not a store
    /// past the end of the file, while the disk is full.
    pub fn unseal(&mut self) {
        if self.writable {
            self.allocated_len = self.allocated_len.min(self.size);
            self.reservation.settle(self.allocated_len - self.size);
            self.sealed = false;
        }
    }

    /// The writable map of the active segment (group commit syncs through it, after a roll too).
    pub(crate) fn write_map(&self) -> Option<Arc<MappedFile>> {
        self.map.as_ref().filter(|_| self.writable && self.map_writable).cloned()
    }

    /// Make `[from, size)` durable. Every byte below `size` is written and appends only write
    /// past it (`MappedFile::sync_appended`).
    pub fn flush_range(&self, from: usize) -> Result<()> {
        if let Some(map) = &self.map {
            if self.writable && self.size > from {
                map.sync_appended(from, self.size)
                    .map_err(|e| Error::Poisoned(format!("msync of {} failed: {e}", self.log_path().display())))?;
            }
        }
        Ok(())
    }

    /// fdatasync the log file and both indexes.
    pub fn sync_all(&self) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        self.flush_range(0)?;
        // A released descriptor is reopened for the fsync: it flushes the file's dirty pages
        // whichever descriptor (or map) wrote them.
        let temporary;
        let file = match &self.file {
            Some(f) => f,
            None => {
                temporary = nofollow::open_read(&self.log_path(), "segment")?;
                &temporary
            }
        };
        file.sync_data().map_err(|e| Error::Poisoned(format!("fsync of {} failed: {e}", self.log_path().display())))?;
        self.offset_index.file.sync()?;
        self.time_index.file.sync()
    }
}

/// Reserve real blocks for `[from, to)` and extend the file to `to`. Falls back to writing
/// zeros where the filesystem has no `fallocate`.
fn reserve_blocks(file: &File, from: usize, to: usize) -> std::io::Result<()> {
    use rustix::fs::{fallocate, FallocateFlags};
    match fallocate(file, FallocateFlags::empty(), from as u64, (to - from) as u64) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP) => {
            let zeros = vec![0u8; 1 << 20];
            let mut at = from;
            while at < to {
                let n = (to - at).min(zeros.len());
                file.write_all_at(&zeros[..n], at as u64)?;
                at += n;
            }
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}
