//! One segment: a `<base offset>.log` file of record batches and its two indexes.
//!
//! The active segment is written through a shared memory map over blocks reserved with
//! `fallocate`. Each batch is published by writing its body first and its 12-byte
//! offset/length prefix last, so a reader (in this or another process) that finds a
//! non-zero length also finds the whole batch; the CRC guards the rest. Sealing (roll or
//! close) adds the final time-index entry and trims the file to its valid length, leaving
//! exactly what Kafka writes.
//!
//! One `impl Segment` per role: this file holds the struct, opening and the accessors every
//! role shares; `writer` appends, grows, seals and syncs through the map; `follower` learns
//! what other processes appended; `recovery` scans and cuts a segment at open.

mod follower;
mod recovery;
mod writer;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::storage::checkpoint::remove_if_exists;
use crate::storage::error::{Error, IoContext, Result};
use crate::storage::files::{segment_path, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::storage::index::{OffsetIndex, TimeIndex};
use crate::storage::mmap::MappedFile;
use crate::storage::nofollow;
use crate::storage::record::header::BatchHeader;
use crate::storage::record::scan::Batches;

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
    /// The file length `follow` last saw: equal to `size` once the segment is sealed.
    file_len_seen: usize,
    /// Whether `map` may be written through (a writer's map, not one made by `follow`).
    map_writable: bool,
    /// The helper thread faulting in the window ahead of the writer.
    prefault: Option<std::thread::JoinHandle<()>>,
    /// Where the window faulted in ahead of the writer ends (`slide_resident_window`).
    prefaulted: usize,
    /// Pages below this were dropped from the resident set behind the writer.
    released: usize,
    /// The share of the process's budget of pages faulted in ahead of writers that the window
    /// `[size, prefaulted)` holds (`prealloc::Reservation::faulted_ahead`).
    faulted_ahead: crate::storage::prealloc::Reservation,
    /// The last append was large enough to go through the file (`write_through_file`), so
    /// the next reserved range is not faulted in ahead of it.
    writes_through_file: bool,
    /// The share of the data directory's preallocation budget that `allocated_len` holds
    /// beyond the written bytes (`prealloc.rs`).
    reservation: crate::storage::prealloc::Reservation,
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
        crate::storage::failpoint::hit("segment.create.log").context(|| cannot(&log_path))?;
        let file = nofollow::open(nofollow::options().read(true).write(true).create(true), &log_path, "segment")?;
        let existing = file.metadata().context(|| cannot(&log_path))?.len();
        if existing > 0 {
            return Err(Error::corrupt(format!(
                "cannot create segment {}: a file of {existing} bytes is already there (the directory changed under this writer)",
                log_path.display()
            )));
        }
        crate::storage::failpoint::hit("segment.create.index").context(|| cannot(&index_path))?;
        nofollow::open(nofollow::options().write(true).create(true).truncate(true), &index_path, "index")?;
        crate::storage::failpoint::hit("segment.create.timeindex").context(|| cannot(&time_path))?;
        nofollow::open(nofollow::options().write(true).create(true).truncate(true), &time_path, "index")?;
        let mut seg = Self::open_files(dir, base_offset, file, true, settings, now_ms)?;
        seg.ensure_capacity(0)?;
        Ok(seg)
    }

    /// Open an existing segment. `size` is trusted when `trust_size` (a sealed segment of a
    /// cleanly closed log); otherwise call `recover` (writer) or `follow` (reader).
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
            prefaulted: 0,
            released: 0,
            faulted_ahead: crate::storage::prealloc::Reservation::faulted_ahead(),
            writes_through_file: false,
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

    pub(crate) fn log_path(&self) -> PathBuf {
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

    /// Remove the segment's files; maps already handed out stay readable.
    pub fn delete_files(&self) -> Result<()> {
        let (log_path, index_path, time_path) = Self::paths(&self.dir, self.base_offset);
        for p in [log_path, index_path, time_path] {
            remove_if_exists(&p)?;
        }
        Ok(())
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
