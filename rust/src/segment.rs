//! One segment: a `<base offset>.log` file of record batches and its two indexes.
//!
//! The active segment is written through a shared memory map over blocks reserved with
//! `fallocate`. Each batch is published by writing its body first and its 12-byte
//! offset/length prefix last, so a reader (in this or another process) that finds a
//! non-zero length also finds the whole batch; the CRC guards the rest. Sealing (roll or
//! close) adds the final time-index entry and trims the file to its valid length, leaving
//! exactly what Kafka writes.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use crate::checkpoint::remove_if_exists;
use crate::error::{Error, IoContext, Result};
use crate::files::{segment_path, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::index::{OffsetIndex, TimeIndex};
use crate::mmap::MappedFile;
use crate::nofollow;
use crate::record::header::{BatchHeader, HEADER_LEN, LOG_OVERHEAD};
use crate::record::scan::{next_batch, verify_crc, Batches, Next};

/// Reserve disk for the active segment in steps that follow what is written: the first is
/// `MIN_ALLOCATION_STEP`, each next one as large as what is reserved already (doubling), up to
/// `MAX_ALLOCATION_STEP` (and never past `segment_bytes`). A partition holding one record
/// costs 64-128 KiB of disk and page cache, not 16 MiB, while a busy one soon reserves in
/// 16 MiB steps again.
const MIN_ALLOCATION_STEP: usize = 64 << 10;
const MAX_ALLOCATION_STEP: usize = 16 << 20;

/// What recovery found in a segment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub base_offset: i64,
    pub valid_bytes: u64,
    /// Bytes after the last valid batch that held something other than zeros.
    pub dropped_bytes: u64,
    /// Why the scan stopped early, if it did.
    pub reason: Option<String>,
}

/// Settings a segment needs from its log.
#[derive(Clone, Copy, Debug)]
pub struct SegmentSettings {
    pub segment_bytes: usize,
    pub index_interval_bytes: usize,
    pub max_index_bytes: usize,
}

pub struct Segment {
    pub base_offset: i64,
    dir: PathBuf,
    /// The `.log` descriptor, opened on demand (`ensure_file`) and closed by
    /// `release_descriptors` / `release_log_descriptor`: a mapped segment needs none to be
    /// read (the map keeps the file alive), so a sealed segment holds no descriptor.
    file: Option<File>,
    writable: bool,
    map: Option<Arc<MappedFile>>,
    /// Bytes of address space mapped.
    mapped_len: usize,
    /// Bytes of the file backed by reserved blocks (writer only); stores stay below this.
    allocated_len: usize,
    /// The file length `discover` last saw: equal to `size` once the segment is sealed.
    file_len_seen: usize,
    /// Whether `map` may be written through (a writer's map, not one made by `discover`).
    map_writable: bool,
    /// The helper thread faulting in the newest reserved range.
    prefault: Option<std::thread::JoinHandle<()>>,
    /// The share of the data directory's preallocation budget that `allocated_len` holds
    /// beyond the written bytes (`prealloc.rs`).
    reservation: crate::prealloc::Reservation,
    /// Valid, published bytes: the end of the last complete batch.
    size: usize,
    /// One past the last offset stored here; `base_offset` when empty.
    next_offset: i64,
    pub offset_index: OffsetIndex,
    pub time_index: TimeIndex,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    /// maxTimestamp of the first batch: what `segment.ms` measures from.
    first_batch_timestamp: Option<i64>,
    bytes_since_last_index_entry: usize,
    created_ms: i64,
    sealed: bool,
    settings: SegmentSettings,
    /// The `.log` file's inode at open (a cleaner replaces files by rename; see `inode`).
    inode: u64,
}

impl Segment {
    fn paths(dir: &Path, base_offset: i64) -> (PathBuf, PathBuf, PathBuf) {
        (
            segment_path(dir, base_offset, LOG_SUFFIX),
            segment_path(dir, base_offset, INDEX_SUFFIX),
            segment_path(dir, base_offset, TIME_INDEX_SUFFIX),
        )
    }

    /// Create a new, empty active segment. All or nothing: if a step fails, the files this
    /// call created are removed again, so a failed roll leaves the directory as it was. A
    /// `.log` that already exists is taken over only when it is empty (what a writer killed
    /// mid-creation leaves); one holding data is never truncated.
    pub fn create(dir: &Path, base_offset: i64, settings: SegmentSettings, now_ms: i64) -> Result<Segment> {
        let (log_path, index_path, time_path) = Self::paths(dir, base_offset);
        let created = Self::create_files(dir, base_offset, settings, now_ms);
        if created.is_err() {
            for p in [&log_path, &index_path, &time_path] {
                let _ = remove_if_exists(p);
            }
        }
        created
    }

    fn create_files(dir: &Path, base_offset: i64, settings: SegmentSettings, now_ms: i64) -> Result<Segment> {
        let (log_path, index_path, time_path) = Self::paths(dir, base_offset);
        let cannot = |p: &Path| format!("cannot create segment {}", p.display());
        crate::failpoint::hit("segment.create.log").context(|| cannot(&log_path))?;
        let file = nofollow::open(nofollow::options().read(true).write(true).create(true), &log_path, "segment")?;
        let existing = file.metadata().context(|| cannot(&log_path))?.len();
        if existing > 0 {
            return Err(Error::corrupt(format!(
                "cannot create segment {}: a file of {existing} bytes is already there (the directory changed under this writer)",
                log_path.display()
            )));
        }
        crate::failpoint::hit("segment.create.index").context(|| cannot(&index_path))?;
        nofollow::open(nofollow::options().write(true).create(true).truncate(true), &index_path, "index")?;
        crate::failpoint::hit("segment.create.timeindex").context(|| cannot(&time_path))?;
        nofollow::open(nofollow::options().write(true).create(true).truncate(true), &time_path, "index")?;
        let mut seg = Self::open_files(dir, base_offset, file, true, settings, now_ms)?;
        seg.ensure_capacity(0)?;
        Ok(seg)
    }

    /// Open an existing segment. `size` is trusted when `trust_size` (a sealed segment of a
    /// cleanly closed log); otherwise call `recover` (writer) or `discover` (reader).
    pub fn open(
        dir: &Path,
        base_offset: i64,
        writable: bool,
        settings: SegmentSettings,
        now_ms: i64,
    ) -> Result<Segment> {
        let (log_path, _, _) = Self::paths(dir, base_offset);
        let file = nofollow::open(nofollow::options().read(true).write(writable), &log_path, "segment")?;
        Self::open_files(dir, base_offset, file, writable, settings, now_ms)
    }

    fn open_files(
        dir: &Path,
        base_offset: i64,
        file: File,
        writable: bool,
        settings: SegmentSettings,
        now_ms: i64,
    ) -> Result<Segment> {
        let (_, index_path, time_path) = Self::paths(dir, base_offset);
        let (offset_index, _) = OffsetIndex::open(&index_path, base_offset, writable, settings.max_index_bytes)?;
        let (time_index, _) = TimeIndex::open(&time_path, base_offset, writable, settings.max_index_bytes)?;
        let inode = file.metadata().map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap_or(0);
        let created_ms = file
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
            .unwrap_or(now_ms);
        Ok(Segment {
            base_offset,
            dir: dir.to_path_buf(),
            file: Some(file),
            writable,
            map: None,
            mapped_len: 0,
            allocated_len: 0,
            map_writable: false,
            file_len_seen: 0,
            prefault: None,
            reservation: Default::default(),
            size: 0,
            next_offset: base_offset,
            offset_index,
            time_index,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            first_batch_timestamp: None,
            bytes_since_last_index_entry: 0,
            created_ms,
            sealed: false,
            settings,
            inode,
        })
    }

    fn log_path(&self) -> PathBuf {
        segment_path(&self.dir, self.base_offset, LOG_SUFFIX)
    }

    /// Open the `.log` descriptor again if it was released (same mode as at open).
    fn ensure_file(&mut self) -> Result<()> {
        if self.file.is_none() {
            let opts = nofollow::options().read(true).write(self.writable).clone();
            self.file = Some(nofollow::open(&opts, &self.log_path(), "segment")?);
        }
        Ok(())
    }

    /// The `.log` descriptor; `ensure_file` must have run in this call.
    fn f(&self) -> &File {
        self.file.as_ref().expect("ensure_file opens the descriptor first")
    }

    /// Close the `.log` descriptor. The segment stays fully usable: its map (if any) serves
    /// reads and writes, and the few calls that need the descriptor (reserving the next
    /// step, trimming, stat, fsync) open it again. An exclusive writer calls this after each
    /// operation, so an idle partition of one record holds only its lock. The index handles
    /// stay: they are opened only once the segment has an entry (4 KiB of data), and
    /// reopening them per entry would cost the small-append path an open per 4 KiB.
    /// (The prefault helper thread works through the map.)
    pub fn release_log_descriptor(&mut self) {
        self.file = None;
    }

    /// A sealed segment is final and keeps no descriptor: 10,000 of them cost none.
    pub fn release_descriptors(&mut self) {
        self.finish_prefault();
        self.release_log_descriptor();
        self.offset_index.file.release();
        self.time_index.file.release();
    }

    /// Descriptors this segment holds now (log and indexes), for tests and diagnostics.
    pub fn descriptors_held(&self) -> usize {
        self.file.is_some() as usize
            + self.offset_index.file.holds_descriptor() as usize
            + self.time_index.file.holds_descriptor() as usize
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }

    /// The map holding the published bytes (None while the segment is empty).
    pub fn map(&self) -> Option<&Arc<MappedFile>> {
        self.map.as_ref()
    }

    /// The published batches from `pos` on (Kafka's `FileRecords.batchesFrom`), ending cleanly
    /// at the end of the data; see `Batches`.
    pub fn batches_from(&self, pos: usize) -> Batches<'_> {
        Batches::new(self.bytes(0, self.size), pos.min(self.size))
    }

    /// Published bytes `[start, end)`.
    pub fn bytes(&self, start: usize, end: usize) -> &[u8] {
        assert!(end <= self.size);
        match &self.map {
            Some(m) => m.bytes(start, end),
            None => &[],
        }
    }

    /// Milliseconds the segment has been "open" by Kafka's `segment.ms` rule.
    pub fn time_waited_for_roll(&self, now_ms: i64, batch_max_ts: i64) -> i64 {
        match self.first_batch_timestamp {
            Some(first) if first >= 0 => batch_max_ts - first,
            _ => now_ms - self.created_ms,
        }
    }

    /// Make room for `extra` more bytes past the published end. Blocks are reserved with
    /// `fallocate` one step ahead of the writer, and each new step is faulted in for writing
    /// on a helper thread, so the kernel's zero-filling of fresh pages overlaps with encoding
    /// instead of stalling every 4 KiB store. The step ahead comes out of the data directory's
    /// preallocation budget (`prealloc.rs`); once that is spent, only what this append needs is
    /// reserved, plus the rest of its last page (so the file always ends past the data, which
    /// is what tells readers the segment is still active, see `looks_sealed`).
    fn ensure_capacity(&mut self, extra: usize) -> Result<()> {
        let needed = self.size + extra;
        let step = self.allocation_step();
        // What is written (or about to be) no longer counts against the budget.
        self.reservation.settle(self.allocated_len.saturating_sub(needed));
        let remap = self.map.is_none() || !self.map_writable;
        let must = needed >= self.allocated_len || remap;
        if !must && self.allocated_len - needed >= step / 2 {
            return Ok(());
        }
        let mut wanted = if must { needed.max(self.allocated_len + step) } else { self.allocated_len + step };
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
            crate::failpoint::hit("segment.reserve")
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
        }
        self.finish_prefault();
        let map = Arc::clone(self.map.as_ref().unwrap());
        // Bounded resident set (issue 14 target 6): pages more than one step behind the write
        // position were written and are not needed mapped here (page cache keeps them).
        map.release(0, self.size.saturating_sub(self.allocation_step()) / 4096 * 4096);
        if target >= from + MIN_ALLOCATION_STEP {
            // A page or two (a spent budget's growth) is cheaper to fault in by the append itself.
            self.prefault = Some(std::thread::spawn(move || map.prefault_for_write(from, target - from)));
        }
        Ok(())
    }

    /// Wait for the helper thread (before the file is trimmed, or the segment dropped).
    fn finish_prefault(&mut self) {
        if let Some(handle) = self.prefault.take() {
            let _ = handle.join();
        }
    }

    /// Append one batch whose offsets are already assigned. Returns its file position.
    pub fn append(&mut self, batch: &[u8], header: &BatchHeader) -> Result<usize> {
        if !self.writable || self.sealed {
            return Err(Error::Closed(format!("segment {} is not writable", self.log_path().display())));
        }
        self.ensure_capacity(batch.len())?;
        let pos = self.size;
        let map = self.map.as_ref().expect("ensure_capacity maps");
        // Body first, then the offset/length prefix: the prefix is what makes a batch visible.
        map.write(pos + LOG_OVERHEAD, &batch[LOG_OVERHEAD..]);
        fence(Ordering::Release);
        map.write(pos, &batch[..LOG_OVERHEAD]);
        if map.is_damaged() {
            // Another process shrank the file under our map: these stores may have gone to a
            // zero page instead of the file, so the batch must not be acknowledged.
            return Err(Error::Poisoned(format!(
                "{} was truncated by another process while this writer had it mapped; appends stop",
                self.log_path().display()
            )));
        }
        self.size += batch.len();
        self.after_batch(pos, header)?;
        Ok(pos)
    }

    /// Index bookkeeping for a batch at `pos`, shared by append and recovery (Kafka's
    /// `LogSegment.append` / `recover`: one index entry per `index_interval_bytes`).
    fn after_batch(&mut self, pos: usize, header: &BatchHeader) -> Result<()> {
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

    /// The one place a batch's timestamp enters the segment's bookkeeping (append, recovery and
    /// a reader's discovery): the largest timestamp with its offset (Kafka's
    /// `maxTimestampAndOffsetSoFar`), and the first batch's, which `segment.ms` measures from.
    fn observe_timestamps(&mut self, header: &BatchHeader) {
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_of_max_timestamp = header.last_offset();
        }
        if self.first_batch_timestamp.is_none() {
            self.first_batch_timestamp = Some(header.max_timestamp);
        }
    }

    /// The largest timestamp as the time index's last entry holds it (a segment loaded without
    /// scanning all its batches: `load_trusted`, a reader's first look).
    fn take_max_timestamp_from_time_index(&mut self) -> bool {
        match self.time_index.file.last() {
            Some(e) => {
                self.max_timestamp = e.timestamp;
                self.offset_of_max_timestamp = self.base_offset + e.relative_offset as i64;
                true
            }
            None => false,
        }
    }

    /// Kafka's `shouldRoll` size and index conditions for a batch of `size` bytes ending at `last_offset`.
    pub fn is_full_for(&self, size: usize, last_offset: i64) -> bool {
        self.size > 0 && self.size > self.settings.segment_bytes.saturating_sub(size)
            || self.offset_index.is_full()
            || self.time_index.is_full()
            || last_offset - self.base_offset > i32::MAX as i64
    }

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
        let mut reason = None;
        for batch in Batches::new(bytes, 0) {
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
        if reason.is_none() && pos < file_len && bytes[pos..].iter().any(|&b| b != 0) {
            reason = Some(format!("incomplete batch at position {pos}"));
        }
        let dropped_bytes = bytes[pos..].iter().filter(|&&b| b != 0).count() as u64;
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

    /// Reopen a trusted or recovered segment for appending (the active segment of a writer).
    pub fn reopen_for_append(&mut self) -> Result<()> {
        self.bytes_since_last_index_entry = self.bytes_after_last_index_entry();
        self.map = None;
        self.mapped_len = 0;
        self.allocated_len = self.size;
        self.ensure_capacity(0)
    }

    /// Reader side: find batches a writer published since we last looked. New ground is
    /// read with `pread`, never through the map, so a concurrent trim cannot fault us; only
    /// bytes proven to be whole, CRC-valid batches become part of `size`.
    pub fn discover(&mut self) -> Result<bool> {
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
        if self.size > self.mapped_len {
            // The file holds at least `size` valid bytes and never shrinks below them.
            self.map = Some(MappedFile::readonly(self.f(), self.size, "segment")?);
            self.mapped_len = self.size;
            self.map_writable = false;
        }
        Ok(self.size > before)
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

    /// Bytes appended since the last offset-index entry's batch started (Kafka's
    /// `bytesSinceLastIndexEntry`, rebuilt when a writer takes over a segment).
    fn bytes_after_last_index_entry(&self) -> usize {
        match self.offset_index.file.last() {
            Some(e) if (e.position as usize) < self.size => self.size - e.position as usize,
            _ => self.size,
        }
    }

    /// The inode of the `.log` file this segment reads: another one under the same name means
    /// the file was replaced (by a cleaner).
    pub fn inode(&self) -> u64 {
        self.inode
    }

    /// Whether this segment's files were opened for writing.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// True when the file ends exactly at the valid data: a writer sealed (trimmed) it, since
    /// an active segment always has blocks reserved past its end. (A broker's active segment,
    /// which is never preallocated, also looks sealed; that only costs a directory listing.)
    pub fn looks_sealed(&self) -> bool {
        self.file_len_seen <= self.size
    }

    /// Another writer sealed (and trimmed) this segment: it is final, so it keeps no descriptor.
    pub fn mark_sealed(&mut self) {
        self.sealed = true;
        self.release_descriptors();
    }

    /// Shared writers, under the append lock: take over the active segment after others
    /// appended to it. Learns their batches, clears the torn body a writer that died mid-append
    /// may have left (its 12-byte prefix is never written, so no reader saw it), and maps the
    /// segment for writing from the file's current reserved length.
    /// `discover` must have run just before, under the same lock.
    pub fn adopt_for_append(&mut self, max_batch: usize) -> Result<()> {
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
            // full. `discover` stopped before it, so it does not follow this log's offsets (or is
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
        self.sealed = false;
        self.ensure_capacity(0)
    }

    /// Position of the first batch whose last offset >= `target` (Kafka's `translateOffset`),
    /// with its header; None if no batch here reaches `target`.
    pub fn translate_offset(&self, target: i64) -> Result<Option<(usize, BatchHeader)>> {
        let (_, start) = self.offset_index.lookup(target);
        let mut batches = self.batches_from(start as usize);
        for batch in batches.by_ref() {
            let (pos, h) = batch?;
            if h.last_offset() >= target {
                return Ok(Some((pos, h)));
            }
        }
        if batches.position() < self.size {
            return Err(self.not_a_batch(batches.position()));
        }
        Ok(None)
    }

    /// Published bytes at `pos` that do not start a batch: damage a reader must not step over.
    pub fn not_a_batch(&self, pos: usize) -> Error {
        Error::corrupt(format!(
            "{} holds {} bytes at position {pos} that are not a record batch (the file is damaged)",
            self.log_path().display(),
            self.size - pos
        ))
    }

    /// The first position at or after `pos` of a batch whose maxTimestamp >= ts, starting
    /// from the time index hint (Kafka's `findOffsetByTimestamp`, batch part).
    pub fn timestamp_search_start(&self, ts: i64, starting_offset: i64) -> Result<usize> {
        let (_, hinted_offset) = self.time_index.lookup(ts);
        let (_, pos) = self.offset_index.lookup(hinted_offset.max(starting_offset));
        Ok(pos as usize)
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
        crate::failpoint::hit("segment.seal.trim").context(cannot)?;
        self.ensure_file()?;
        self.f().set_len(self.size as u64).context(|| format!("cannot trim {}", self.log_path().display()))?;
        // Blocks past `size` are gone: a later append (after a failed roll) must reserve again.
        self.allocated_len = self.size;
        self.reservation.release();
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

    /// Make `[from, size)` durable.
    pub fn flush_range(&self, from: usize) -> Result<()> {
        if let Some(map) = &self.map {
            if self.writable && self.size > from {
                map.flush_range(from, self.size - from)
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

    /// Remove the segment's files; maps already handed out stay readable.
    pub fn delete_files(&self) -> Result<()> {
        let (log_path, index_path, time_path) = Self::paths(&self.dir, self.base_offset);
        for p in [log_path, index_path, time_path] {
            remove_if_exists(&p)?;
        }
        Ok(())
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

/// `pread` as many bytes as the file has, up to `buf.len()`.
fn read_at_most(file: &File, buf: &mut [u8], at: u64) -> Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("cannot read segment", e)),
        }
    }
    Ok(done)
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.finish_prefault();
    }
}
