//! One partition: an ordered run of segments in a `<topic>-<partition>` directory.
//!
//! One `impl Log` per role: this file holds the struct, its accessors, flush and close;
//! `load` opens the directory (Kafka's LogLoader: leftovers, recovery); `follow` learns what
//! other processes wrote, listing the directory only when `generation` says segments were
//! deleted or replaced; `append` appends and rolls. Reads live in `log_read.rs`, retention in
//! `retention.rs`.

mod append;
mod follow;
mod generation;
mod load;
mod producers;
mod transactional;

pub use append::{DirDurable, RollHold, TryAppend};
pub use producers::Produced;
pub use transactional::MarkerWritten;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::storage::checkpoint::{read_offset, sync_dir, write_atomically, KafkaCheckpoints};
use crate::storage::error::{Error, IoContext, Result};
use crate::storage::files::{CLEAN_SHUTDOWN_FILE, KAFKA_LOG_START_OFFSET, KAFKA_RECOVERY_POINT, LOG_START_OFFSET_FILE};
use crate::storage::lock::WriterLock;
use crate::storage::options::LogConfig;
use crate::storage::segment::{RecoveryReport, Segment, SegmentSettings};

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
    /// When `follow` last listed the directory.
    last_listing: std::time::Instant,
    /// The segment generation (`generation.rs`) read before that listing; None: unknown (no
    /// valid file then, or this writer is changing segments), so the next `follow` lists.
    generation_seen: Option<generation::Generation>,
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
    /// Group commit of flush="always" writers (`fsync_batch.rs`); None for others.
    group: Option<std::sync::Arc<crate::storage::fsync_batch::GroupCommit>>,
    /// `durable_tickets`: the newest segment whose directory entry a caller syncs, and whether
    /// a sync of the directory since its creation returned (`DirDurable`).
    durable_dir: Option<(i64, crate::storage::log::DirDurable)>,
    /// What the current append waits for under flush="always", taken by `as_writer`.
    pending_durable: Option<crate::storage::fsync_batch::Ticket>,
    /// Inside `defer_durability`: where `as_writer` leaves the ticket instead of waiting.
    deferred_durable: Option<Option<crate::storage::fsync_batch::Ticket>>,
    /// Set by `close_within`: the append lock must be had by then.
    lock_deadline: Option<std::time::Instant>,
    /// True inside `try_with_append_lock` and the producer's `try_append_builder_deferred` and
    /// `append_rolling`: the append lock is already held for this writer, so
    /// `as_writer_locked` does not take it again.
    append_held: bool,
    /// The data directory's preallocation budget (writers only), held so the limit this log
    /// was opened with stays set while it is open (`prealloc.rs`).
    _prealloc_budget: Option<std::sync::Arc<crate::storage::prealloc::Budget>>,
    /// Snapshots below this offset were removed by this writer's last roll (`producers.rs`).
    snapshots_swept_to: i64,
    /// Kafka's producer state, once something needed it (`producers.rs`).
    producers: Option<crate::storage::producer_state::ProducerState>,
    /// The transactional producer (id, epoch) this writer appends for, if any: every batch it
    /// builds is stamped with it and its next sequence and marked transactional
    /// (`transactional.rs`).
    transactional: Option<(i64, i16)>,
}

/// (device, inode) of a directory.
pub(crate) fn dir_identity(dir: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).map(|m| (m.dev(), m.ino()))
}

impl Log {
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

    /// Drop this log's mapped pages from the process's resident set (they stay in the page
    /// cache). `kafkalite serve` calls it for its open partitions from time to time, so its
    /// memory does not grow with the number of partitions it has written or read.
    pub fn release_resident(&mut self) {
        for segment in &mut self.segments {
            segment.release_resident();
        }
    }

    /// (device, inode) of the partition folder this log opened; a folder of the same name with
    /// another identity is a topic deleted and created again since.
    pub fn dir_identity(&self) -> (u64, u64) {
        self.dir_identity
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
        if let Some(why) = self.group.as_ref().and_then(|g| g.failure()) {
            return Err(Error::Poisoned(why));
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
        // A failed group sync poisons the writer as a failed flush does (its waiters may have
        // been another thread's, so `poisoned` may not say it).
        let poisoned = self.poisoned.is_some() || self.group.as_ref().is_some_and(|g| g.failure().is_some());
        let finish = match self.lock.as_mut() {
            Some(lock) => self.loaded && !poisoned && lock.last_one_out(),
            None => false,
        };
        let result = if finish { self.as_writer(|log| log.finish_partition()) } else { Ok(()) };
        // A deleted partition has nothing left to finish.
        let result = result.or_else(|e| if matches!(e, Error::UnknownTopicOrPartition(_)) { Ok(()) } else { Err(e) });
        self.closed = true;
        self.segments.clear();
        self.producers = None;
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
        // Kafka snapshots producer state at clean shutdown, so the next open scans nothing.
        self.snapshot_producers(false);
        crate::storage::failpoint::hit("shutdown.before_marker")
            .context(|| format!("cannot close {}", self.dir.display()))?;
        write_atomically(&self.dir, CLEAN_SHUTDOWN_FILE, b"")?;
        crate::storage::failpoint::hit("shutdown.after_marker")
            .context(|| format!("cannot close {}", self.dir.display()))
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
