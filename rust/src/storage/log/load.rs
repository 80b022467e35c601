//! Opening a partition (Kafka's `LogLoader`): the directory is cleaned of unfinished
//! deletes and cleanings, segments are loaded, and those a crash may have left torn are recovered.

use std::path::Path;

use crate::storage::checkpoint::{sync_dir, KafkaCheckpoints};
use crate::storage::error::{Error, IoContext, Result};
use crate::storage::files::{
    parse_base_offset, segment_path, CLEANED_SUFFIX, CLEAN_SHUTDOWN_FILE, DELETED_SUFFIX, INDEX_SUFFIX, INDEX_SUFFIXES,
    KAFKA_LOG_START_OFFSET, LOG_SUFFIX, TIME_INDEX_SUFFIX, TMP_SUFFIX,
};
use crate::storage::lock::WriterLock;
use crate::storage::options::LogConfig;
use crate::storage::segment::Segment;

use super::{dir_identity, now_ms, Log};

impl Log {
    /// Open (creating when writable) the partition directory `dir`.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Log> {
        Log::open_within(dir, config, None)
    }

    /// `open`, a shared writer waiting for the append lock until `deadline` rather than for
    /// `lock_timeout` (a server request's own deadline); None: `lock_timeout`.
    pub fn open_within(dir: impl AsRef<Path>, config: LogConfig, deadline: Option<std::time::Instant>) -> Result<Log> {
        config.validate()?;
        let dir = dir.as_ref().to_path_buf();
        crate::storage::nofollow::check_dir(&dir)?;
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
            generation_seen: None,
            start_offset_stamp: None,
            kafka_start_offset_stamp: None,
            kafka_checkpoints,
            dir_identity: identity,
            loaded: false,
            group: None,
            durable_dir: None,
            pending_durable: None,
            deferred_durable: None,
            lock_deadline: None,
            append_held: false,
            _prealloc_budget: None,
            snapshots_swept_to: i64::MIN,
            producers: None,
            transactional: None,
        };
        if log.lock.is_some() {
            log._prealloc_budget =
                Some(crate::storage::prealloc::Budget::of_partition(&log.dir, log.config.preallocate_budget_bytes));
        }
        match &log.lock {
            None => log.follow()?,
            Some(lock) => {
                let alone = lock.alone();
                let deadline = deadline.or_else(|| log.config.lock_timeout.map(|t| std::time::Instant::now() + t));
                let _append = lock.enter(deadline)?;
                // Alone: recover as the only writer. Otherwise other writers keep the partition
                // consistent, and this one follows what they wrote.
                if alone {
                    log.load_writable()?;
                } else {
                    log.follow_and_take_tail()?;
                }
                log.start_group_commit(alone)?;
                log.lock.as_mut().expect("a writer has a lock").share()?;
            }
        }
        log.loaded = true;
        log.release_idle_descriptors();
        Ok(log)
    }

    /// Under the append lock at open: flush="always" writers join the partition's group commit.
    /// The writer that recovered the partition alone resets its state (whatever a writer before
    /// the crash published describes files recovery may have cut).
    fn start_group_commit(&mut self, alone: bool) -> Result<()> {
        let (base, end) = self.segments.last().map_or((self.start_offset, 0), |s| (s.base_offset, s.size()));
        if self.config.flush == crate::storage::options::FlushPolicy::Always {
            let group = crate::storage::fsync_batch::GroupCommit::open(&self.dir)?;
            if alone {
                group.reset(base, end);
            }
            self.group = Some(group);
        } else if alone {
            crate::storage::fsync_batch::reset_if_present(&self.dir, base, end)?;
        }
        Ok(())
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
    pub(super) fn list_complete_segment_inodes(&self, known_last: Option<i64>) -> Result<Vec<(i64, u64)>> {
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

    /// The only writer: recover the directory. Finishing a swap, dropping all segments below
    /// the checkpointed start, or cutting a torn tail changes what readers that follow this
    /// partition listed, so the segment generation moves around it.
    fn load_writable(&mut self) -> Result<()> {
        self.segments_changing()?;
        self.load_segments()?;
        self.segments_changed();
        Ok(())
    }

    fn load_segments(&mut self) -> Result<()> {
        crate::storage::cleaner::finish_interrupted_swaps(&self.dir)?;
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
                let segment = self.dir.join(crate::storage::files::file_name(base, crate::storage::files::LOG_SUFFIX));
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
        // Snapshots beyond the log end describe batches recovery cut (Kafka's truncateAndReload):
        // a writer that appends past them again must not take them for its own state.
        crate::storage::producer_state::delete_snapshots_outside(&self.dir, i64::MIN, self.end_offset())?;
        let active = self.segments.last_mut().unwrap();
        active.reopen_for_append()?;
        self.flushed_position = active.size();
        Ok(())
    }
}
