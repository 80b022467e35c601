//! One partition: an ordered run of segments in a `<topic>-<partition>` directory.
//!
//! This file opens (with Kafka's recovery), appends, rolls and closes. Reads live in
//! `log_read.rs`, retention in `retention.rs`.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::checkpoint::{read_offset, sync_dir, write_atomically, KafkaCheckpoints};
use crate::error::{Error, IoContext, Result};
use crate::files::{
    parse_base_offset, segment_path, CLEANED_SUFFIX, CLEAN_SHUTDOWN_FILE, DELETED_SUFFIX, INDEX_SUFFIX, INDEX_SUFFIXES,
    KAFKA_LOG_START_OFFSET, KAFKA_RECOVERY_POINT, LOG_START_OFFSET_FILE, LOG_SUFFIX, TIME_INDEX_SUFFIX, TMP_SUFFIX,
};
use crate::lock::WriterLock;
use crate::options::{FlushPolicy, LogConfig};
use crate::record::header::{compute_crc, set_base_offset, BatchHeader, ATTR_TIMESTAMP_LOG_APPEND};
use crate::record::record::record_size_upper_bound;
use crate::record::scan::{next_batch, Next};
use crate::record::{for_each_record, record_area, BatchBuilder, RecordInput, TimestampType};
use crate::segment::{RecoveryReport, Segment, SegmentSettings};

/// How stale a follower's view of other writers' segment deletions may get.
const LISTING_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// Upper bound for the batches `append_records` builds, below `max_message_bytes`.
const TARGET_BATCH_BYTES: usize = 1 << 20;

/// Kafka's broker refuses keyless records on compacted topics the same way.
fn null_key_error() -> Error {
    Error::InvalidRecord(
        "the topic is compacted (cleanup.policy=compact), so every record needs a key; this one has a null key".into(),
    )
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// What `Log::segments` reports for one segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    pub base_offset: i64,
    pub next_offset: i64,
    pub size: u64,
    pub max_timestamp: i64,
}

pub struct Log {
    pub(crate) dir: PathBuf,
    pub(crate) config: LogConfig,
    /// Sorted by base offset; the last one is the active segment.
    pub(crate) segments: Vec<Segment>,
    pub(crate) start_offset: i64,
    lock: Option<WriterLock>,
    pub(crate) closed: bool,
    poisoned: Option<String>,
    unflushed_messages: u64,
    /// Position in the active segment up to which data is durable.
    flushed_position: usize,
    recovery: Vec<RecoveryReport>,
    /// The batch buffer, reused from one append to the next.
    scratch: Vec<u8>,
    /// The LogAppendTime stamp of the last built batch (None for CreateTime topics).
    last_log_append_time: Option<i64>,
    /// When `follow_segment_files` last listed the directory.
    last_listing: std::time::Instant,
    /// Identity of the start-offset file when last read (inode, mtime).
    start_offset_stamp: Option<(u64, i64, i64)>,
    /// The same for the data directory's `log-start-offset-checkpoint`.
    kafka_start_offset_stamp: Option<(u64, i64, i64)>,
    /// This partition's entries in its data directory's Kafka checkpoint files (None for a
    /// partition opened on its own).
    pub(crate) kafka_checkpoints: Option<KafkaCheckpoints>,
    /// The partition directory's (device, inode) at open; see `check_not_deleted`.
    dir_identity: (u64, u64),
    /// `open` finished: the segments were loaded (and recovered) completely.
    loaded: bool,
    /// Set by `close_within`: the append lock must be had by then.
    lock_deadline: Option<std::time::Instant>,
    /// The data directory's preallocation budget (writers only), held so the limit this log
    /// was opened with stays set while it is open (`prealloc.rs`).
    _prealloc_budget: Option<std::sync::Arc<crate::prealloc::Budget>>,
}

/// (device, inode) of a directory.
fn dir_identity(dir: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).map(|m| (m.dev(), m.ino()))
}

impl Log {
    /// Open (creating when writable) the partition directory `dir`.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Log> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        crate::nofollow::check_dir(&dir)?;
        if config.readonly {
            // A missing directory or a file in its place is an I/O error (FileNotFoundError,
            // NotADirectoryError in Python) naming the path, as opening any missing file is.
            let metadata = std::fs::metadata(&dir)
                .context_at(&dir, || format!("{} is not a partition directory", dir.display()))?;
            if !metadata.is_dir() {
                return Err(Error::io_at(
                    &dir,
                    format!("{} is not a partition directory", dir.display()),
                    std::io::Error::from_raw_os_error(rustix::io::Errno::NOTDIR.raw_os_error()),
                ));
            }
        } else {
            std::fs::create_dir_all(&dir).context_at(&dir, || format!("cannot create {}", dir.display()))?;
        }
        let identity = dir_identity(&dir).context_at(&dir, || format!("cannot stat {}", dir.display()))?;
        let kafka_checkpoints = KafkaCheckpoints::for_partition(&dir);
        let lock = match (config.readonly, config.shared_writers) {
            (true, _) => None,
            (false, false) => Some(WriterLock::exclusive(&dir)?),
            (false, true) => Some(WriterLock::shared(&dir)?),
        };
        let mut log = Log {
            dir,
            config,
            segments: Vec::new(),
            start_offset: 0,
            lock,
            closed: false,
            poisoned: None,
            unflushed_messages: 0,
            flushed_position: 0,
            recovery: Vec::new(),
            scratch: Vec::new(),
            last_log_append_time: None,
            last_listing: std::time::Instant::now(),
            start_offset_stamp: None,
            kafka_start_offset_stamp: None,
            kafka_checkpoints,
            dir_identity: identity,
            loaded: false,
            lock_deadline: None,
            _prealloc_budget: None,
        };
        if log.lock.is_some() {
            log._prealloc_budget =
                Some(crate::prealloc::Budget::of_partition(&log.dir, log.config.preallocate_budget_bytes));
        }
        match &log.lock {
            None => log.load_readonly()?,
            Some(lock) => {
                let alone = lock.alone();
                let _append = lock.enter(log.config.lock_timeout.map(|t| std::time::Instant::now() + t))?;
                // Alone: recover as the only writer. Otherwise other writers keep the partition
                // consistent, and this one follows what they wrote.
                if alone {
                    log.load_writable()?;
                } else {
                    log.catch_up()?;
                }
                log.lock.as_mut().expect("a writer has a lock").share()?;
            }
        }
        log.loaded = true;
        log.release_idle_descriptors();
        Ok(log)
    }

    /// Run `f` as the partition's writer: shared writers take the append lock and first catch
    /// up with what the others appended; an exclusive writer already holds everything.
    pub(crate) fn as_writer<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.check_writable()?;
        let Some(lock) = self.lock.as_ref().filter(|l| l.is_shared()) else {
            self.check_not_deleted()?;
            let result = f(self);
            self.release_idle_descriptors();
            return result;
        };
        let deadline = self.lock_deadline.or_else(|| self.config.lock_timeout.map(|t| std::time::Instant::now() + t));
        let _append = lock.enter(deadline)?;
        self.check_not_deleted()?;
        self.catch_up()?;
        f(self)
    }

    /// The only writer of the partition needs no `.log` descriptor for its active segment
    /// between operations: it writes through the map, and nobody else changes the file, so the
    /// descriptor is opened again only to reserve the next step, trim or fsync. An idle
    /// partition of small segments then costs its presence lock alone. (Shared writers and readers keep the
    /// active segment's descriptor: they stat and read it on every append or poll.)
    fn release_idle_descriptors(&mut self) {
        if self.lock.as_ref().is_some_and(|l| !l.is_shared()) {
            if let Some(active) = self.segments.last_mut() {
                active.release_log_descriptor();
            }
        }
    }

    pub(crate) fn settings(&self) -> SegmentSettings {
        SegmentSettings {
            segment_bytes: self.config.segment_bytes as usize,
            index_interval_bytes: self.config.index_interval_bytes as usize,
            max_index_bytes: self.config.max_index_bytes,
        }
    }

    /// Base offsets of the `.log` files in the directory, sorted.
    pub(crate) fn list_segment_files(&self) -> Result<Vec<i64>> {
        Ok(self.list_segment_inodes()?.into_iter().map(|(base, _)| base).collect())
    }

    /// (base offset, inode) of the `.log` files in the directory, sorted: a cleaner replaces a
    /// segment by renaming a new file over it, which shows as a new inode under the same name.
    /// (The inode comes with the directory entry: no stat per file.)
    fn list_segment_inodes(&self) -> Result<Vec<(i64, u64)>> {
        use std::os::unix::fs::DirEntryExt;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.dir).context(|| format!("cannot list {}", self.dir.display()))? {
            let entry = entry.context(|| format!("cannot list {}", self.dir.display()))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(base) = parse_base_offset(&name, LOG_SUFFIX) {
                found.push((base, entry.ino()));
            }
        }
        found.sort_unstable();
        Ok(found)
    }

    /// The segment files, for a follower: no segment missing below the newest one listed.
    /// `readdir` may return a name created while it runs yet miss another created during it
    /// (ext4 returns names in hash order), so one listing taken while a writer rolls twice can
    /// hold the newer segment without the one before it, and the follower would skip that
    /// segment's records for good. Every segment older than the newest one listed was created
    /// before it, so before a second listing starts: the second listing, cut at that newest
    /// base, holds them all. Only taken when segments newer than `known_last` appeared.
    fn list_complete_segment_inodes(&self, known_last: Option<i64>) -> Result<Vec<(i64, u64)>> {
        let first = self.list_segment_inodes()?;
        let Some(&(newest, _)) = first.last() else { return Ok(first) };
        if known_last.is_some_and(|k| newest <= k) {
            return Ok(first);
        }
        let mut second = self.list_segment_inodes()?;
        second.retain(|&(base, _)| base <= newest);
        Ok(second)
    }

    /// Kafka's temp-file cleanup: unfinished deletes and cleanings are removed, and index
    /// files without a `.log` are dropped.
    fn remove_leftovers(&self) -> Result<()> {
        for entry in std::fs::read_dir(&self.dir).context(|| format!("cannot list {}", self.dir.display()))? {
            let entry = entry.context(|| format!("cannot list {}", self.dir.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let orphan_index = INDEX_SUFFIXES.iter().any(|suffix| {
                name.strip_suffix(suffix).is_some_and(|stem| {
                    stem.parse::<i64>().is_ok() && !self.dir.join(format!("{stem}{LOG_SUFFIX}")).exists()
                })
            });
            let unfinished = [DELETED_SUFFIX, CLEANED_SUFFIX, TMP_SUFFIX].iter().any(|s| name.ends_with(s));
            if unfinished || orphan_index {
                std::fs::remove_file(entry.path()).context(|| format!("cannot remove {}", entry.path().display()))?;
            }
        }
        Ok(())
    }

    fn load_writable(&mut self) -> Result<()> {
        crate::cleaner::finish_interrupted_swaps(&self.dir)?;
        self.remove_leftovers()?;
        let marker = self.dir.join(CLEAN_SHUTDOWN_FILE);
        // As Kafka does: drop the marker first, so a crash while loading counts as unclean.
        let clean = marker.exists();
        if clean {
            std::fs::remove_file(&marker).context(|| format!("cannot remove {}", marker.display()))?;
            sync_dir(&self.dir)?;
        }
        let bases = self.list_segment_files()?;
        let now = now_ms();
        let settings = self.settings();
        // Kafka's rule: recover only what can be unsafe. A segment with a successor is sealed
        // (a roll seals the old segment before it creates the next, so a successor proves the
        // seal), so the recovery point is the last segment's base: only the active segment is
        // scanned and cut after an unclean shutdown, and after a clean one nothing is. A
        // sealed segment that fails its checks gets its indexes rebuilt, but its damage is
        // kept and reported on read (CorruptRecordError), never answered by cutting it or
        // deleting the intact segments after it.
        for (i, &base) in bases.iter().enumerate() {
            let is_last = i + 1 == bases.len();
            let indexes_present =
                [INDEX_SUFFIX, TIME_INDEX_SUFFIX].iter().all(|suffix| segment_path(&self.dir, base, suffix).exists());
            let mut seg = Segment::open(&self.dir, base, true, settings, now)?;
            let needs_recovery = !indexes_present || (is_last && !clean) || seg.load_trusted().is_err();
            if needs_recovery {
                // The active segment must end at a batch boundary to be appended to.
                let report = if is_last { seg.recover()? } else { seg.recover_sealed(bases[i + 1])? };
                let segment = self.dir.join(crate::files::file_name(base, crate::files::LOG_SUFFIX));
                if report.dropped_bytes > 0 || report.reason.is_some() {
                    ::log::warn!(
                        target: crate::LOG_TARGET,
                        "recovery cut {} (base offset {base}) to {} valid bytes, {} bytes dropped ({})",
                        segment.display(),
                        report.valid_bytes,
                        report.dropped_bytes,
                        report.reason.as_deref().unwrap_or("a torn tail")
                    );
                    self.recovery.push(report);
                } else if !indexes_present || !is_last || clean {
                    ::log::warn!(
                        target: crate::LOG_TARGET,
                        "rebuilt the indexes of {} (base offset {base}, {} valid bytes): they were missing or damaged",
                        segment.display(),
                        report.valid_bytes
                    );
                } else {
                    ::log::info!(
                        target: crate::LOG_TARGET,
                        "recovered {} after an unclean shutdown: all {} bytes valid",
                        segment.display(),
                        report.valid_bytes
                    );
                }
            }
            if !is_last {
                // Sealed and final: read through its map and in-memory index entries.
                seg.release_descriptors();
            }
            self.segments.push(seg);
        }
        let checkpoint = self.checkpointed_start_offset().unwrap_or(0);
        if let Some(last) = self.segments.last() {
            if last.next_offset() < checkpoint {
                for seg in self.segments.drain(..) {
                    seg.delete_files()?;
                }
            }
        }
        if self.segments.is_empty() {
            let start = checkpoint.max(0);
            self.segments.push(Segment::create(&self.dir, start, settings, now)?);
            self.sync_dir_if_always()?;
        }
        self.start_offset = checkpoint.max(self.segments[0].base_offset);
        // A writer that died between kafkalite's own file and Kafka's left them apart; Kafka
        // too writes its checkpoint from what the log knows.
        if let Some(kafka) = &self.kafka_checkpoints {
            let first_base = self.segments[0].base_offset;
            let wanted = (self.start_offset > first_base).then_some(self.start_offset);
            if kafka.read(KAFKA_LOG_START_OFFSET) != wanted {
                kafka.update(KAFKA_LOG_START_OFFSET, wanted)?;
            }
        }
        let active = self.segments.last_mut().unwrap();
        active.reopen_for_append()?;
        self.flushed_position = active.size();
        Ok(())
    }

    fn load_readonly(&mut self) -> Result<()> {
        self.follow_segment_files()
    }

    /// Under the append lock (shared writers): follow other writers' rolls, deletions and
    /// appends, then make the active segment ours to append to.
    /// Also how a shared writer joins live writers: it trusts the files they keep consistent.
    fn catch_up(&mut self) -> Result<()> {
        self.follow_segment_files()?;
        if self.segments.is_empty() {
            let start = self.checkpointed_start_offset().unwrap_or(0);
            self.segments.push(Segment::create(&self.dir, start, self.settings(), now_ms())?);
            self.sync_dir_if_always()?;
        }
        if !self.segments.last().unwrap().is_writable() {
            let base = self.segments.last().unwrap().base_offset;
            let mut seg = Segment::open(&self.dir, base, true, self.settings(), now_ms())?;
            seg.discover()?;
            *self.segments.last_mut().unwrap() = seg;
        }
        // follow_segment_files (or the open just above) discovered the active segment's tail.
        let max_batch = self.config.max_message_bytes;
        let active = self.segments.last_mut().unwrap();
        active.adopt_for_append(max_batch)?;
        self.flushed_position = self.flushed_position.min(active.size());
        Ok(())
    }

    /// Match `segments` to the directory (read-only opens): drop segments a writer deleted,
    /// learn the new batches of the newest known segment, and open segments created since.
    /// Every segment but the newest is sealed, trimmed and final, so it is trusted as it is.
    fn follow_segment_files(&mut self) -> Result<()> {
        // Listing the directory is the expensive part; it is needed only when the newest known
        // segment was sealed (someone rolled) or to notice other writers' deletions, which
        // only move the log start offset, so those are picked up within LISTING_INTERVAL.
        self.follow_start_offset();
        let discovered = self.segments.last().map(|s| s.base_offset);
        if let Some(last) = self.segments.last_mut() {
            last.discover()?;
            if !last.looks_sealed() && self.last_listing.elapsed() < LISTING_INTERVAL {
                return Ok(());
            }
        }
        self.last_listing = std::time::Instant::now();
        let listing = self.list_complete_segment_inodes(discovered)?;
        let bases: Vec<i64> = listing.iter().map(|&(b, _)| b).collect();
        self.segments.retain(|s| bases.binary_search(&s.base_offset).is_ok());
        self.reopen_replaced_segments(&listing)?;
        let known_last = self.segments.last().map(|s| s.base_offset);
        let newer: Vec<i64> = bases.into_iter().filter(|&b| known_last.is_none_or(|k| b > k)).collect();
        if let Some(last) = self.segments.last_mut() {
            // Read it again if it changed: it is not the one discovered above (that one was
            // deleted), or a newer segment appeared, so a writer may have appended its last
            // batches and sealed it after our first look.
            if Some(last.base_offset) != discovered || !newer.is_empty() {
                last.discover()?;
            }
            if !newer.is_empty() {
                last.mark_sealed();
            }
        }
        let settings = self.settings();
        let count = newer.len();
        let next_bases = newer.clone();
        for (i, base) in newer.into_iter().enumerate() {
            let mut seg = match Segment::open(&self.dir, base, false, settings, now_ms()) {
                Ok(seg) => seg,
                // Deleted by a writer's retention between listing and opening.
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if i + 1 < count {
                // Sealed: trusted, or (damaged) kept whole so that reads fail at the damage.
                if seg.load_trusted().is_err() {
                    seg.recover_sealed(next_bases[i + 1])?;
                }
                seg.mark_sealed();
            } else {
                seg.discover()?;
            }
            self.segments.push(seg);
        }
        let first_base = self.segments.first().map(|s| s.base_offset).unwrap_or(0);
        self.start_offset = self.start_offset.max(first_base);
        Ok(())
    }

    /// Sealed segments whose file a cleaner replaced (a merged, cleaned segment under the same
    /// name) are opened again: keeping the old file would hide the records the cleaner moved
    /// into it from the old segments it deleted.
    fn reopen_replaced_segments(&mut self, listing: &[(i64, u64)]) -> Result<()> {
        let settings = self.settings();
        for i in 0..self.segments.len() {
            let seg = &self.segments[i];
            let Ok(k) = listing.binary_search_by_key(&seg.base_offset, |&(b, _)| b) else { continue };
            if seg.is_writable() || listing[k].1 == seg.inode() {
                continue;
            }
            let base = seg.base_offset;
            let mut fresh = match Segment::open(&self.dir, base, false, settings, now_ms()) {
                Ok(seg) => seg,
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if i + 1 < self.segments.len() {
                if fresh.load_trusted().is_err() {
                    fresh.recover_sealed(self.segments[i + 1].base_offset)?;
                }
                fresh.mark_sealed();
            } else {
                fresh.discover()?;
            }
            self.segments[i] = fresh;
        }
        Ok(())
    }

    /// Another writer's DeleteRecords must be seen at once: one stat of the start-offset file
    /// (replaced by rename, so a change shows as a new inode or mtime), read only on change.
    fn follow_start_offset(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if let Some(kafka) = &self.kafka_checkpoints {
            let stamp = kafka.stamp(KAFKA_LOG_START_OFFSET);
            if stamp.is_some() && stamp != self.kafka_start_offset_stamp {
                self.kafka_start_offset_stamp = stamp;
                if let Some(checkpoint) = kafka.read(KAFKA_LOG_START_OFFSET) {
                    self.start_offset = self.start_offset.max(checkpoint);
                }
            }
        }
        let Ok(meta) = std::fs::metadata(self.dir.join(LOG_START_OFFSET_FILE)) else { return };
        let stamp = (meta.ino(), meta.mtime(), meta.mtime_nsec());
        if self.start_offset_stamp != Some(stamp) {
            self.start_offset_stamp = Some(stamp);
            if let Some(checkpoint) = read_offset(&self.dir, LOG_START_OFFSET_FILE) {
                self.start_offset = self.start_offset.max(checkpoint);
            }
        }
    }

    /// Reader side: pick up batches and segments a writer added since we last looked.
    pub fn refresh(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        if self.config.readonly || self.config.shared_writers {
            // Lock-free: only learn what is published; adopting the tail waits for the lock.
            self.follow_segment_files()
        } else {
            Ok(())
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Segments cut short by recovery at open, with what was dropped.
    pub fn recovery_reports(&self) -> &[RecoveryReport] {
        &self.recovery
    }

    /// The log end offset: the offset the next record will get.
    pub fn end_offset(&self) -> i64 {
        self.segments.last().map(|s| s.next_offset()).unwrap_or(self.start_offset)
    }

    /// The earliest offset still readable.
    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.segments
            .iter()
            .map(|s| SegmentInfo {
                base_offset: s.base_offset,
                next_offset: s.next_offset(),
                size: s.size() as u64,
                max_timestamp: s.max_timestamp(),
            })
            .collect()
    }

    /// Descriptors the segments hold now (the writer's locks aside): the active segment's at
    /// most, since sealed segments are read through their maps (issue 9, point 10).
    pub fn segment_descriptors(&self) -> usize {
        self.segments.iter().map(|s| s.descriptors_held()).sum()
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size() as u64).sum()
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed {
            return Err(Error::Closed(format!("the log {} is closed", self.dir.display())));
        }
        Ok(())
    }

    /// Deleting a topic renames its partition directories away (Kafka's `-delete` suffix) and
    /// removes them; re-creating it makes new directories of the same name. A writer opened
    /// before that must not acknowledge appends into the unlinked files: compare the
    /// directory's identity with the one at open. Shared writers call this holding the append
    /// lock, which the deleter also takes around its rename, so no append can pass the check
    /// and then land in a directory renamed meanwhile.
    fn check_not_deleted(&self) -> Result<()> {
        match dir_identity(&self.dir) {
            Ok(id) if id == self.dir_identity => Ok(()),
            Ok(_) => Err(Error::UnknownTopicOrPartition(format!(
                "{} was deleted and created again since this writer opened it; reopen it",
                self.dir.display()
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(Error::UnknownTopicOrPartition(format!("{} was deleted", self.dir.display())))
            }
            Err(e) => Err(Error::io(format!("cannot stat {}", self.dir.display()), e)),
        }
    }

    fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.config.readonly {
            return Err(Error::Closed(format!("the log {} was opened read-only", self.dir.display())));
        }
        if let Some(why) = &self.poisoned {
            return Err(Error::Poisoned(why.clone()));
        }
        Ok(())
    }

    fn log_append_time(&self) -> Option<i64> {
        match self.config.timestamp_type {
            TimestampType::LogAppendTime => Some(now_ms()),
            TimestampType::CreateTime => None,
        }
    }

    /// Append records, building batches of up to ~1 MiB. Returns (first, last) offset.
    pub fn append_records(&mut self, records: &[RecordInput<'_>]) -> Result<(i64, i64)> {
        if self.config.compact && records.iter().any(|r| r.key.is_none()) {
            return Err(null_key_error());
        }
        self.append_inputs(records.iter().copied(), records.len(), "append")
    }

    /// Append values with null keys and no headers, all stamped `timestamp`.
    pub fn append_values(&mut self, values: &[&[u8]], timestamp: i64) -> Result<(i64, i64)> {
        if self.config.compact {
            return Err(null_key_error());
        }
        let inputs = values.iter().map(|v| RecordInput { key: None, value: Some(v), headers: &[], timestamp });
        self.append_inputs(inputs, values.len(), "append_values")
    }

    /// Encode `count` records into batches that stay under the target size, and append them.
    fn append_inputs<'a>(
        &mut self,
        inputs: impl Iterator<Item = RecordInput<'a>>,
        count: usize,
        what: &str,
    ) -> Result<(i64, i64)> {
        self.check_writable()?;
        if count == 0 {
            return Err(Error::config(format!("{what} needs at least one record")));
        }
        self.as_writer(|log| log.append_inputs_locked(inputs, count))
    }

    fn append_inputs_locked<'a>(
        &mut self,
        inputs: impl Iterator<Item = RecordInput<'a>>,
        count: usize,
    ) -> Result<(i64, i64)> {
        let first = self.end_offset();
        let target = self.target_batch_bytes();
        let mut builder = self.new_builder(target);
        for r in inputs {
            if builder.count() > 0 && builder.size() + record_size_upper_bound(&r) > target {
                let empty = BatchBuilder::new(self.config.compression, None, 0);
                let full = std::mem::replace(&mut builder, empty);
                self.append_built(full)?;
                builder = self.new_builder(target);
            }
            builder.push(&r);
        }
        self.append_built(builder)?;
        self.after_append(count as u64)?;
        Ok((first, self.end_offset() - 1))
    }

    /// Append one batch a client built (a producer's per-partition buffer). Returns (first, last).
    pub fn append_builder(&mut self, builder: BatchBuilder) -> Result<(i64, i64)> {
        self.check_writable()?;
        let count = builder.count() as u64;
        if count == 0 {
            return Err(Error::config("cannot append an empty batch"));
        }
        self.as_writer(|log| {
            let first = log.end_offset();
            log.append_built(builder)?;
            log.after_append(count)?;
            Ok((first, log.end_offset() - 1))
        })
    }

    /// The LogAppendTime stamp given to the last batch this log built, if the topic uses it.
    pub fn last_log_append_time(&self) -> Option<i64> {
        self.last_log_append_time
    }

    /// Batches we build stay within max_message_bytes and within one segment.
    fn target_batch_bytes(&self) -> usize {
        TARGET_BATCH_BYTES.min(self.config.max_message_bytes).min(self.config.segment_bytes as usize)
    }

    fn new_builder(&mut self, capacity: usize) -> BatchBuilder {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.reserve(capacity + crate::record::header::HEADER_LEN);
        BatchBuilder::with_buffer(buf, self.config.compression, self.log_append_time())
    }

    fn append_built(&mut self, mut builder: BatchBuilder) -> Result<()> {
        self.last_log_append_time = self.log_append_time();
        if let Some(now) = self.last_log_append_time {
            builder.stamp_log_append_time(now);
        }
        let (bytes, header) = builder.finish(0)?;
        if self.config.compact {
            let area = record_area(&bytes, &header)?;
            for_each_record(&area, &header, |r| if r.key.is_none() { Err(null_key_error()) } else { Ok(()) })?;
        }
        self.append_batch(bytes, header)
    }

    /// Append pre-built v2 batches (from another Kafka client or broker): each is validated
    /// (CRC, structure, every record decodes), then given this log's next offsets. Control
    /// batches and batches whose offsets are not dense are refused. All or nothing: nothing
    /// is appended unless every batch is valid.
    pub fn append_raw_batches(&mut self, data: &[u8]) -> Result<(i64, i64)> {
        self.check_writable()?;
        let mut batches = Vec::new();
        let mut pos = 0;
        while pos < data.len() {
            let header = match next_batch(data, pos, true)? {
                Next::Batch(h) => h,
                _ => {
                    return Err(Error::corrupt(format!(
                        "{} bytes at position {pos} are not a whole record batch",
                        data.len() - pos
                    )))
                }
            };
            if header.is_control() {
                return Err(Error::config("control batches are written by brokers, not appended by clients"));
            }
            if header.records_count <= 0 || header.last_offset_delta + 1 != header.records_count {
                return Err(Error::corrupt(format!(
                    "batch at position {pos} has {} records but lastOffsetDelta {}; appended batches must have dense offsets",
                    header.records_count, header.last_offset_delta
                )));
            }
            let bytes = &data[pos..pos + header.total_size()];
            let area = record_area(bytes, &header)?;
            let compact = self.config.compact;
            for_each_record(
                &area,
                &header,
                |r| if compact && r.key.is_none() { Err(null_key_error()) } else { Ok(()) },
            )?;
            batches.push((bytes, header));
            pos += header.total_size();
        }
        if batches.is_empty() {
            return Err(Error::config("append_batches needs at least one record batch"));
        }
        self.as_writer(|log| log.append_validated_batches(batches))
    }

    fn append_validated_batches(&mut self, batches: Vec<(&[u8], BatchHeader)>) -> Result<(i64, i64)> {
        let first = self.end_offset();
        let mut count = 0u64;
        for (bytes, mut header) in batches {
            let mut bytes = bytes.to_vec();
            if let Some(now) = self.log_append_time() {
                // Broker behaviour for LogAppendTime: stamp maxTimestamp and bit 3, new CRC.
                header.attributes |= ATTR_TIMESTAMP_LOG_APPEND;
                header.max_timestamp = now;
                header.write(&mut bytes);
                header.crc = compute_crc(&bytes);
                header.write(&mut bytes);
            }
            count += header.records_count as u64;
            self.append_batch(bytes, header)?;
        }
        self.after_append(count)?;
        Ok((first, self.end_offset() - 1))
    }

    /// Give a finished batch this log's next offsets, roll if needed, and write it.
    fn append_batch(&mut self, mut bytes: Vec<u8>, mut header: BatchHeader) -> Result<()> {
        if bytes.len() > self.config.max_message_bytes {
            return Err(Error::RecordTooLarge { size: bytes.len(), max: self.config.max_message_bytes });
        }
        let base = self.end_offset();
        header.base_offset = base;
        set_base_offset(&mut bytes, base);
        self.maybe_roll(bytes.len(), &header)?;
        if let Err(e) = self.segments.last_mut().unwrap().append(&bytes, &header) {
            if let Error::Poisoned(why) = &e {
                self.poisoned = Some(why.clone());
            }
            return Err(e);
        }
        if bytes.capacity() > self.scratch.capacity() {
            self.scratch = bytes;
        }
        Ok(())
    }

    /// Kafka's `maybeRoll`: size, time, full index or relative-offset overflow.
    fn maybe_roll(&mut self, size: usize, header: &BatchHeader) -> Result<()> {
        let active = self.segments.last().unwrap();
        let by_time = self
            .config
            .segment_ms
            .is_some_and(|ms| active.size() > 0 && active.time_waited_for_roll(now_ms(), header.max_timestamp) > ms);
        if by_time || active.is_full_for(size, header.last_offset()) {
            self.roll_locked()?;
        }
        Ok(())
    }

    /// Seal the active segment and start a new one at the log end offset.
    pub fn roll(&mut self) -> Result<()> {
        self.as_writer(|log| log.roll_locked())
    }

    /// Seal the active segment, then create the next one. A roll that fails at any step, or
    /// whose writer dies between steps, leaves a log every writer can append to: until the next
    /// segment exists, the sealed one is still the newest segment in the directory, and the
    /// next append (ours after `unseal`, another shared writer's in `adopt_for_append`, or the
    /// next open's recovery) takes it as the active segment and reserves blocks for it again.
    /// (Creating the next segment first would leave, on failure, an unsealed segment with an
    /// empty successor; a shared writer would append to the old one unless it listed the
    /// directory on every append.)
    pub(crate) fn roll_locked(&mut self) -> Result<()> {
        let base = self.end_offset();
        if self.segments.last().is_none_or(|s| s.is_empty()) {
            return Ok(());
        }
        let dir = self.dir.clone();
        let settings = self.settings();
        let flush = self.config.flush;
        let active = self.segments.last_mut().unwrap();
        crate::failpoint::hit("roll.before_seal").context(|| format!("cannot roll {}", dir.display()))?;
        if let Err(e) = active.seal() {
            active.unseal();
            return Err(e);
        }
        if flush != FlushPolicy::Os {
            active.sync_all().inspect_err(|e| self.poisoned = Some(e.to_string()))?;
        }
        let created = crate::failpoint::hit("roll.after_seal")
            .context(|| format!("cannot roll {}", dir.display()))
            .and_then(|()| Segment::create(&dir, base, settings, now_ms()));
        let seg = match created {
            Ok(seg) => seg,
            Err(e) => {
                active.unseal();
                ::log::warn!(
                    target: crate::LOG_TARGET,
                    "could not roll {} at offset {base} ({e}); undone, appends continue in the current segment",
                    dir.display()
                );
                return Err(e);
            }
        };
        self.segments.push(seg);
        self.flushed_position = 0;
        crate::failpoint::hit("roll.after_create").context(|| format!("cannot roll {}", dir.display()))?;
        self.sync_dir_if_always()
    }

    /// Under flush="always", a new segment's directory entries (log and indexes) are made
    /// durable before anything is acknowledged in it; a failed directory fsync poisons the log.
    fn sync_dir_if_always(&mut self) -> Result<()> {
        if self.config.flush == FlushPolicy::Always {
            sync_dir(&self.dir).inspect_err(|e| self.poisoned = Some(e.to_string()))?;
        }
        Ok(())
    }

    fn after_append(&mut self, records: u64) -> Result<()> {
        self.unflushed_messages += records;
        let due = match self.config.flush {
            FlushPolicy::Os => false,
            FlushPolicy::Always => true,
            FlushPolicy::EveryMessages(n) => self.unflushed_messages >= n,
        };
        if due {
            self.flush_data()?;
        }
        Ok(())
    }

    /// Make every appended byte durable (msync of the new bytes of the active segment).
    fn flush_data(&mut self) -> Result<()> {
        let active = self.segments.last().unwrap();
        if let Err(e) = active.flush_range(self.flushed_position) {
            self.poisoned = Some(e.to_string());
            return Err(e);
        }
        self.flushed_position = active.size();
        self.unflushed_messages = 0;
        Ok(())
    }

    /// Flush everything to disk: data, indexes and the directory.
    pub fn flush(&mut self) -> Result<()> {
        self.check_open()?;
        if self.config.readonly {
            return Ok(());
        }
        self.flush_data()?;
        let active = self.segments.last().unwrap();
        active.sync_all().inspect_err(|e| self.poisoned = Some(e.to_string()))?;
        sync_dir(&self.dir)
    }

    /// Seal the active segment (final time entry, trimmed files), flush, and leave the
    /// clean-shutdown marker so the next open skips recovery. With shared writers only the
    /// last one to close does this; the others just leave. Idempotent.
    pub fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        // A log whose open failed part-way recovered nothing: it must not leave the marker
        // that tells the next writer to trust the files.
        let finish = match self.lock.as_mut() {
            Some(lock) => self.loaded && self.poisoned.is_none() && lock.last_one_out(),
            None => false,
        };
        let result = if finish { self.as_writer(|log| log.finish_partition()) } else { Ok(()) };
        // A deleted partition has nothing left to finish.
        let result = result.or_else(|e| if matches!(e, Error::UnknownTopicOrPartition(_)) { Ok(()) } else { Err(e) });
        self.closed = true;
        self.segments.clear();
        self.lock = None;
        result
    }

    /// `close`, giving up (with `Error::LockTimeout`) if the append lock it needs to finish
    /// the partition is not had by `deadline`; the log is closed either way.
    pub fn close_within(&mut self, deadline: Option<std::time::Instant>) -> Result<()> {
        self.lock_deadline = deadline;
        self.close()
    }

    fn finish_partition(&mut self) -> Result<()> {
        let Some(active) = self.segments.last_mut() else { return Ok(()) };
        active.seal()?;
        active.sync_all()?;
        // Everything below the log end is flushed now: Kafka's recovery point, for a broker
        // that opens this directory.
        if let Some(kafka) = &self.kafka_checkpoints {
            kafka.update(KAFKA_RECOVERY_POINT, Some(self.end_offset()))?;
        }
        crate::failpoint::hit("shutdown.before_marker").context(|| format!("cannot close {}", self.dir.display()))?;
        write_atomically(&self.dir, CLEAN_SHUTDOWN_FILE, b"")?;
        crate::failpoint::hit("shutdown.after_marker").context(|| format!("cannot close {}", self.dir.display()))
    }

    /// The log start offset the checkpoints hold: the larger of kafkalite's own file and the
    /// data directory's `log-start-offset-checkpoint` (what a broker's DeleteRecords or
    /// retention left). None when neither has one.
    fn checkpointed_start_offset(&self) -> Option<i64> {
        let own = read_offset(&self.dir, LOG_START_OFFSET_FILE);
        let kafka = self.kafka_checkpoints.as_ref().and_then(|k| k.read(KAFKA_LOG_START_OFFSET));
        own.max(kafka)
    }

    /// Move the log start offset and persist it: in kafkalite's own file and, in a data
    /// directory, in Kafka's `log-start-offset-checkpoint` (which, as Kafka writes it, lists a
    /// partition only while its start is above its first segment's base).
    pub(crate) fn set_start_offset(&mut self, offset: i64) -> Result<()> {
        self.start_offset = offset;
        let first_base = self.segments.first().map(|s| s.base_offset).unwrap_or(0);
        if offset > first_base || self.dir.join(LOG_START_OFFSET_FILE).exists() {
            write_atomically(&self.dir, LOG_START_OFFSET_FILE, offset.to_string().as_bytes())?;
        }
        if let Some(kafka) = &self.kafka_checkpoints {
            kafka.update(KAFKA_LOG_START_OFFSET, (offset > first_base).then_some(offset))?;
        }
        Ok(())
    }
}

/// What a caught panic said, for the error that replaces it.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("internal error in kafkalite (please report it): {what}")
}

impl Log {
    /// Whether this writer shares the partition with writers in other processes.
    pub(crate) fn lock_is_shared(&self) -> bool {
        self.lock.as_ref().is_some_and(|l| l.is_shared())
    }

    /// Look at the directory now (not within `LISTING_INTERVAL`): another process changed the
    /// sealed segments (a cleaner's swap it left unfinished was just completed).
    pub(crate) fn relist_segments(&mut self) -> Result<()> {
        if let Some(past) = std::time::Instant::now().checked_sub(LISTING_INTERVAL * 2) {
            self.last_listing = past;
        }
        self.follow_segment_files()
    }

    /// Refuse writes until the log is reopened (whose recovery finishes what `why` left).
    pub(crate) fn poison(&mut self, why: String) {
        self.poisoned = Some(why);
    }

    /// After a panic inside an operation the in-memory state may be half-updated: refuse
    /// writes from now on (reopening runs recovery) and describe the panic.
    pub fn poison_after_panic(&mut self, payload: &(dyn std::any::Any + Send)) -> Error {
        let why = panic_message(payload);
        self.poisoned = Some(why.clone());
        Error::Poisoned(why)
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        // Never unwind out of a destructor (Python's garbage collector runs it).
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.close()));
    }
}
