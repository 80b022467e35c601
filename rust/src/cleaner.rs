//! Log compaction (`cleanup.policy=compact`), Kafka's cleaner for one partition.
//!
//! Pass 1 maps every key in the dirty range `[first dirty, dirty end)` to its latest offset.
//! Pass 2 filters each sealed segment below the dirty end, keeping a record when no later
//! record has its key, dropping tombstones whose batch's delete horizon has passed, and
//! stamping a horizon on batches whose tombstones are kept for the first time. Offsets never
//! move. The active segment is never touched. As Kafka's cleaner (`groupSegmentsBySize`),
//! consecutive segments whose cleaned batches fit one segment are written as one segment named
//! by the first one's base offset, so cleaning shrinks the number of files.
//!
//! A group is swapped in so that a crash leaves the old or the new segments, never a gap:
//! `X.log.cleaned` is written and fsynced, renamed to `X.log.swap` (the commit point), `X.log`
//! is replaced by the new file, the other old segments are deleted oldest first and the swap
//! name is removed (`replace_group`). Opening a log finishes a swap that a crash interrupted,
//! Kafka's way (`finish_interrupted_swaps`). Readers that mapped the old files keep reading
//! them (rename and unlink leave a map intact); readers that look at the directory again reopen
//! a segment whose file was replaced (`Log::reopen_replaced_segments`).
//!
//! Where the partition lives in a data directory, the dirty end also goes to Kafka's
//! `cleaner-offset-checkpoint` (and a broker's entry there is where cleaning resumes).

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::path::Path;

use crate::checkpoint::{read_offset, remove_if_exists, sync_dir, write_atomically};
use crate::error::{Error, IoContext, Result};
use crate::files::{
    file_name, marked_path, segment_path, CLEANED_SUFFIX, CLEANER_OFFSET_FILE, INDEX_SUFFIX, KAFKA_CLEANER_OFFSET,
    LOG_SUFFIX, SEGMENT_SUFFIXES, SWAP_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
};
use crate::index::Entry;
use crate::log::Log;
use crate::record::filter::{filter_batch, FilterCounts, Filtered};
use crate::record::scan::verify_crc;
use crate::record::{for_each_record, record_area};
use crate::segment::Segment;
use crate::txn::TxnState;

/// A data batch of an aborted transaction.
fn aborted(txn: &TxnState, header: &crate::record::BatchHeader) -> bool {
    header.is_transactional() && !header.is_control() && txn.is_aborted(header.producer_id, header.base_offset)
}

/// What the cleaner needs from the topic config.
#[derive(Clone, Copy, Debug)]
pub struct CleanOptions {
    pub now_ms: i64,
    /// `delete.retention.ms`: how long tombstones stay readable after their first cleaning.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: records younger than this are not compacted.
    pub min_compaction_lag_ms: i64,
}

/// What one cleaning pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanStats {
    pub first_dirty_offset: i64,
    pub dirty_end_offset: i64,
    pub keys: u64,
    pub segments_rewritten: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub records_removed: u64,
    pub tombstones_removed: u64,
}

impl Log {
    /// Segments `[0, n)` are cleanable: sealed, and older than `min.compaction.lag.ms`.
    /// Returns (n, dirty end offset).
    fn cleanable(&self, options: &CleanOptions) -> (usize, i64) {
        let active = self.segments.len() - 1;
        let too_young = |s: &Segment| s.max_timestamp() > options.now_ms - options.min_compaction_lag_ms;
        let n = if options.min_compaction_lag_ms > 0 {
            self.segments[..active].iter().position(too_young).unwrap_or(active)
        } else {
            active
        };
        (n, self.segments[n].base_offset)
    }

    fn first_dirty_offset(&self, dirty_end: i64) -> i64 {
        // kafkalite's own file, or what a broker's cleaner left in the data directory.
        let kafka = self.kafka_checkpoints.as_ref().and_then(|k| k.read(KAFKA_CLEANER_OFFSET));
        let checkpoint = read_offset(&self.dir, CLEANER_OFFSET_FILE).max(kafka).unwrap_or(0);
        let first = checkpoint.max(self.start_offset);
        if first > dirty_end {
            self.start_offset
        } else {
            first
        }
    }

    /// Kafka's `min.cleanable.dirty.ratio` measure: dirty bytes over cleanable bytes.
    pub fn dirty_ratio(&self, options: &CleanOptions) -> f64 {
        if self.closed || self.segments.is_empty() {
            return 0.0;
        }
        let (n, dirty_end) = self.cleanable(options);
        let first_dirty = self.first_dirty_offset(dirty_end);
        let (mut clean, mut dirty) = (0u64, 0u64);
        for seg in &self.segments[..n] {
            if seg.next_offset() <= first_dirty {
                clean += seg.size() as u64;
            } else {
                dirty += seg.size() as u64;
            }
        }
        if clean + dirty == 0 {
            0.0
        } else {
            dirty as f64 / (clean + dirty) as f64
        }
    }

    /// One full cleaning pass now. Appends wait while it runs (it holds the append lock).
    pub fn clean(&mut self, options: CleanOptions) -> Result<CleanStats> {
        self.check_open()?;
        if self.config.readonly {
            return Err(Error::Closed("the log was opened read-only".into()));
        }
        self.as_writer(|log| log.clean_locked(&options))
    }

    fn clean_locked(&mut self, options: &CleanOptions) -> Result<CleanStats> {
        // Under the append lock no other cleaner runs: a swap on disk is one whose cleaner died
        // (shared writers in other processes). Finish it first, or a later open would complete it
        // over the segments this pass writes.
        if self.lock_is_shared() && finish_interrupted_swaps(&self.dir)? {
            self.segments_changing()?;
            self.follow()?;
        }
        // Transactions, as Kafka's cleaner treats them: nothing at or past the last stable offset
        // is cleaned (an open transaction's records may still be aborted), and records of
        // aborted transactions neither supersede a key nor survive cleaning.
        let mut txn = TxnState::new();
        txn.update(self)?;
        let lso = txn.last_stable_offset(self);
        let (mut n, mut dirty_end) = self.cleanable(options);
        while n > 0 && self.segments[n - 1].next_offset() > lso {
            n -= 1;
            dirty_end = self.segments[n].base_offset;
        }
        let first_dirty = self.first_dirty_offset(dirty_end);
        let mut stats =
            CleanStats { first_dirty_offset: first_dirty, dirty_end_offset: dirty_end, ..Default::default() };
        if n == 0 {
            return Ok(stats);
        }
        let latest = self.build_offset_map(n, first_dirty, dirty_end, &txn)?;
        stats.keys = latest.len() as u64;
        let horizon = options.now_ms.saturating_add(options.delete_retention_ms);
        // Pass 2, group by group (Kafka's groupSegmentsBySize, measured on the cleaned bytes,
        // which we have before writing anything): consecutive segments whose cleaned batches
        // fit one segment become one segment, named by the first one's base offset, so
        // cleaning shrinks the number of files. A lone segment is rewritten only if it changed.
        let mut pos = 0;
        // Segments already filtered (from `pos` on) that the next group starts with.
        let mut carry: VecDeque<Cleaned> = VecDeque::new();
        while pos < n {
            let mut group: Vec<Cleaned> = Vec::new();
            let mut bytes = 0usize;
            let mut full = false;
            while pos + group.len() < n {
                let cleaned = match carry.pop_front() {
                    Some(c) => c,
                    None => self.filter_segment(pos + group.len(), &latest, options.now_ms, horizon, &txn)?,
                };
                if !group.is_empty() && !self.fits(pos, bytes, &cleaned) {
                    carry.push_front(cleaned);
                    full = true;
                    break;
                }
                bytes += cleaned.bytes.len();
                group.push(cleaned);
            }
            if full {
                // Members left empty at the end of a full group start the next one, so each
                // cleaned segment reaches up to its last member's records: recovery of an
                // interrupted swap deletes the old segments up to the swap's last offset.
                let next_upper = carry.front().map(|c| c.upper).unwrap_or(i64::MAX);
                while group.len() > 1 && group.last().is_some_and(|c| c.bytes.is_empty()) {
                    let base = self.segments[pos + group.len() - 1].base_offset;
                    if next_upper - base > i32::MAX as i64 {
                        break;
                    }
                    carry.push_front(group.pop().unwrap());
                }
            }
            let len = group.len();
            if len > 1 || group[0].changed {
                for c in &group {
                    stats.records_removed += c.counts.records_removed;
                    stats.tombstones_removed += c.counts.tombstones_removed;
                }
                self.replace_group(pos, group, &mut stats)?;
                n -= len - 1;
            }
            pos += 1;
        }
        write_atomically(&self.dir, CLEANER_OFFSET_FILE, dirty_end.to_string().as_bytes())?;
        if let Some(kafka) = &self.kafka_checkpoints {
            kafka.update(KAFKA_CLEANER_OFFSET, Some(dirty_end))?;
        }
        if stats.segments_rewritten > 0 {
            // Kafka's LogCleaner logs each cleaning with its sizes; a pass that changed nothing stays quiet.
            ::log::info!(
                target: crate::LOG_TARGET,
                "compacted {} up to offset {dirty_end}: {} segment(s) rewritten, {} -> {} bytes, {} record(s) and {} tombstone(s) removed",
                self.dir.display(),
                stats.segments_rewritten,
                stats.bytes_before,
                stats.bytes_after,
                stats.records_removed,
                stats.tombstones_removed
            );
        }
        Ok(stats)
    }

    /// Pass 1: the latest offset of every key in `[from, to)`.
    fn build_offset_map(&self, n: usize, from: i64, to: i64, txn: &TxnState) -> Result<HashMap<Vec<u8>, i64>> {
        let mut latest: HashMap<Vec<u8>, i64> = HashMap::new();
        for seg in &self.segments[..n] {
            if seg.next_offset() <= from {
                continue;
            }
            for_each_batch(seg, |batch, header, _| {
                if header.is_control() || header.last_offset() < from || aborted(txn, header) {
                    return Ok(());
                }
                let area = record_area(batch, header)?;
                for_each_record(&area, header, |r| {
                    if let (Some(key), true) = (r.key, r.offset >= from && r.offset < to) {
                        match latest.get_mut(key) {
                            Some(offset) => *offset = r.offset,
                            None => {
                                latest.insert(key.to_vec(), r.offset);
                            }
                        }
                    }
                    Ok(())
                })
            })?;
        }
        Ok(latest)
    }

    /// Pass 2 for segment `i`: its batches with superseded records and expired tombstones
    /// removed (in memory; at most one segment's bytes).
    fn filter_segment(
        &self,
        i: usize,
        latest: &HashMap<Vec<u8>, i64>,
        now: i64,
        horizon: i64,
        txn: &TxnState,
    ) -> Result<Cleaned> {
        let seg = &self.segments[i];
        let mut out = Vec::new();
        let mut changed = false;
        let mut counts = FilterCounts::default();
        for_each_batch(seg, |batch, header, _| {
            let expired = header.has_delete_horizon() && now >= header.base_timestamp;
            let aborted = aborted(txn, header);
            let (filtered, c) = filter_batch(batch, header, horizon, |r| match r.key {
                _ if aborted => false,
                None => false, // Kafka's cleaner drops records without a key
                Some(key) => {
                    let superseded = latest.get(key).is_some_and(|&newest| r.offset < newest);
                    !superseded && (r.value.is_some() || !expired)
                }
            })?;
            counts.records_removed += c.records_removed;
            counts.tombstones_removed += c.tombstones_removed;
            match filtered {
                Filtered::Unchanged => out.extend_from_slice(batch),
                Filtered::Rewritten(bytes) => {
                    changed = true;
                    out.extend_from_slice(&bytes);
                }
                Filtered::Empty => changed = true,
            }
            Ok(())
        })?;
        // Segments `[0, n)` are cleanable and `n` <= the active segment's index, so `i + 1` exists.
        let upper = self.segments[i + 1].base_offset - 1;
        Ok(Cleaned { bytes: out, changed, counts, upper })
    }

    /// Whether `next` can join the group that starts at segment `first` and holds
    /// `group_bytes` cleaned bytes: the merged segment stays within `segment.bytes`, its
    /// indexes within `segment.index.bytes` (one offset entry per index interval at most, one
    /// time slot kept for the final entry), and its offsets within a relative (i32) offset of
    /// its base.
    fn fits(&self, first: usize, group_bytes: usize, next: &Cleaned) -> bool {
        let total = group_bytes + next.bytes.len();
        let interval = self.config.index_interval_bytes as usize;
        let index_entries = total / (interval + 1) + 2;
        let max_time_entries = self.config.max_index_bytes / crate::index::TimestampOffset::SIZE;
        total <= self.config.segment_bytes as usize
            && index_entries <= max_time_entries
            && (next.bytes.is_empty() || next.upper - self.segments[first].base_offset <= i32::MAX as i64)
    }

    /// Replace segments `[first, first + group.len())` with one segment holding their cleaned
    /// batches, named by the first one's base offset (Kafka's `replaceSegments`). Crash safe at
    /// every step, and never a gap for readers:
    /// 1. `X.log.cleaned` written and fsynced (a crash: it is deleted at open, nothing changed);
    /// 2. renamed to `X.log.swap`, directory fsynced: the commit point (a crash from here on:
    ///    the open completes the swap, Kafka's way: segments in `[X, the swap's next offset)`
    ///    are deleted and the swap renamed to `X.log`);
    /// 3. X's indexes removed, then `X.log` replaced by the new file (a second link to the swap,
    ///    renamed over it): readers now find the new X, and the old members after it still
    ///    hold the same latest values for their offsets;
    /// 4. the other members deleted, oldest first (so what a crash leaves beyond the swap's last
    ///    offset is a run of the newest members, whose records were all removed: consistent);
    /// 5. the swap name removed; the new segment's indexes are rebuilt.
    fn replace_group(&mut self, first: usize, group: Vec<Cleaned>, stats: &mut CleanStats) -> Result<()> {
        self.segments_changing()?;
        let members: Vec<i64> = self.segments[first..first + group.len()].iter().map(|s| s.base_offset).collect();
        let base = members[0];
        stats.segments_rewritten += members.len() as u64;
        stats.bytes_before += self.segments[first..first + group.len()].iter().map(|s| s.size() as u64).sum::<u64>();
        let txn = self.merged_txn_index(&members)?;
        let dir = self.dir.clone();
        let cleaned_path = marked_path(&dir, base, LOG_SUFFIX, CLEANED_SUFFIX);
        let swap_path = marked_path(&dir, base, LOG_SUFFIX, SWAP_SUFFIX);
        let cannot = |what: &str, p: &Path| format!("cannot {what} {}", p.display());
        let mut file = crate::nofollow::open(
            crate::nofollow::options().write(true).create(true).truncate(true),
            &cleaned_path,
            "cleaned segment",
        )?;
        let mut written = 0u64;
        crate::failpoint::hit("cleaner.write_cleaned")
            .and_then(|()| {
                for c in &group {
                    file.write_all(&c.bytes)?;
                    written += c.bytes.len() as u64;
                }
                file.sync_all()
            })
            .context(|| cannot("write", &cleaned_path))?;
        drop(file);
        drop(group);
        stats.bytes_after += written;
        if let Some(txn) = &txn {
            write_atomically(&dir, &format!("{}{CLEANED_SUFFIX}", file_name(base, TXN_INDEX_SUFFIX)), txn)?;
        }
        crate::failpoint::hit("cleaner.rename_swap")
            .and_then(|()| std::fs::rename(&cleaned_path, &swap_path))
            .context(|| cannot("commit", &swap_path))?;
        sync_dir(&dir)?;
        // Committed: a failure from here on leaves the rest to the next open (poisoned until
        // then); our old segments stay readable meanwhile (their maps outlive the files).
        self.finish_replace(first, &members, txn.is_some())
            .inspect_err(|e| self.poison(format!("cleaning stopped after its commit point: {e}")))
    }

    fn finish_replace(&mut self, first: usize, members: &[i64], txn: bool) -> Result<()> {
        let base = members[0];
        let dir = self.dir.clone();
        let cleaned_path = marked_path(&dir, base, LOG_SUFFIX, CLEANED_SUFFIX);
        let swap_path = marked_path(&dir, base, LOG_SUFFIX, SWAP_SUFFIX);
        let log_path = segment_path(&dir, base, LOG_SUFFIX);
        let cannot = |what: &str, p: &Path| format!("cannot {what} {}", p.display());
        crate::failpoint::hit("cleaner.remove_indexes").context(|| cannot("finish cleaning", &dir))?;
        for ext in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            remove_if_exists(&segment_path(&dir, base, ext))?;
        }
        crate::failpoint::hit("cleaner.replace_log")
            .and_then(|()| std::fs::hard_link(&swap_path, &cleaned_path))
            .and_then(|()| std::fs::rename(&cleaned_path, &log_path))
            .context(|| cannot("replace", &log_path))?;
        if txn {
            let from = marked_path(&dir, base, TXN_INDEX_SUFFIX, CLEANED_SUFFIX);
            std::fs::rename(&from, segment_path(&dir, base, TXN_INDEX_SUFFIX)).context(|| cannot("rename", &from))?;
        }
        sync_dir(&dir)?;
        for &member in &members[1..] {
            crate::failpoint::hit("cleaner.delete_old").context(|| cannot("delete an old segment of", &dir))?;
            delete_segment_files(&dir, member)?;
        }
        crate::failpoint::hit("cleaner.remove_swap")
            .and_then(|()| std::fs::remove_file(&swap_path))
            .context(|| cannot("remove", &swap_path))?;
        sync_dir(&dir)?;
        let mut cleaned = Segment::open(&dir, base, true, self.settings(), crate::log::now_ms())?;
        cleaned.recover()?;
        cleaned.seal()?;
        cleaned.sync_all()?;
        self.segments.splice(first..first + members.len(), [cleaned]);
        self.segments_changed();
        Ok(())
    }

    /// The members' `.txnindex` entries (offsets only, so still true after cleaning) as one
    /// file's bytes; None when no member has one.
    fn merged_txn_index(&self, members: &[i64]) -> Result<Option<Vec<u8>>> {
        let mut merged = Vec::new();
        let mut any = false;
        for &m in members {
            let path = segment_path(&self.dir, m, TXN_INDEX_SUFFIX);
            match crate::nofollow::open_read(&path, "transaction index") {
                Ok(mut f) => {
                    any = true;
                    f.read_to_end(&mut merged).context(|| format!("cannot read {}", path.display()))?;
                }
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        merged.truncate(merged.len() / 34 * 34);
        Ok(any.then_some(merged))
    }
}

/// One segment's cleaned batches.
struct Cleaned {
    bytes: Vec<u8>,
    /// Something was removed or rewritten.
    changed: bool,
    counts: FilterCounts,
    /// The last offset the segment covers (the next segment's base - 1).
    upper: i64,
}

/// Delete one segment's files (the log first: index files without a log are dropped at open).
fn delete_segment_files(dir: &Path, base: i64) -> Result<()> {
    for ext in SEGMENT_SUFFIXES {
        remove_if_exists(&segment_path(dir, base, ext))?;
    }
    Ok(())
}

/// Call `f(batch bytes, header, position)` for every batch of a sealed segment, CRC checked.
fn for_each_batch(
    seg: &Segment,
    mut f: impl FnMut(&[u8], &crate::record::BatchHeader, usize) -> Result<()>,
) -> Result<()> {
    let batches = seg.batches_from(0);
    for batch in batches.clone() {
        let (pos, header) = batch?;
        let batch = batches.batch_bytes(pos, &header);
        verify_crc(batch, &header, pos)?;
        f(batch, &header, pos)?;
    }
    Ok(())
}

/// At open (the only writer): complete the swaps a crash interrupted after their commit point,
/// as Kafka's `LogLoader` does: every segment file in `[X, next offset of X.log.swap)` is
/// deleted (X's own indexes too: they are rebuilt) and the swap renamed to `X.log`.
/// Returns whether there was one.
pub(crate) fn finish_interrupted_swaps(dir: &Path) -> Result<bool> {
    let mut swaps = Vec::new();
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir).context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(base) =
            name.strip_suffix(&format!("{LOG_SUFFIX}{SWAP_SUFFIX}")).and_then(|stem| stem.parse::<i64>().ok())
        {
            swaps.push(base);
        } else if let Some(base) = name.split('.').next().and_then(|stem| stem.parse::<i64>().ok()) {
            if !name.ends_with(SWAP_SUFFIX) && !name.ends_with(CLEANED_SUFFIX) {
                bases.push(base);
            }
        }
    }
    let mut found = false;
    for base in swaps {
        let swap = marked_path(dir, base, LOG_SUFFIX, SWAP_SUFFIX);
        let next = next_offset_of(&swap, base)?;
        for &b in bases.iter().filter(|&&b| b > base && b < next) {
            delete_segment_files(dir, b)?;
        }
        for ext in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            remove_if_exists(&segment_path(dir, base, ext))?;
        }
        let log = segment_path(dir, base, LOG_SUFFIX);
        if same_file(&swap, &log) {
            // Interrupted after X.log became the new file (a second link to the swap): rename
            // between two links of one file does nothing, so drop the swap name.
            std::fs::remove_file(&swap).context(|| format!("cannot remove {}", swap.display()))?;
        } else {
            std::fs::rename(&swap, &log)
                .context(|| format!("cannot rename {} to {}", swap.display(), log.display()))?;
        }
        sync_dir(dir)?;
        found = true;
    }
    Ok(found)
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// One past the last offset of the whole batches in a segment file (its base when it has none):
/// Kafka's `readNextOffset`, from the batch headers alone.
fn next_offset_of(path: &Path, base: i64) -> Result<i64> {
    use std::os::unix::fs::FileExt;
    let file = crate::nofollow::open_read(path, "segment")?;
    let len = file.metadata().context(|| format!("cannot stat {}", path.display()))?.len();
    let (mut pos, mut next) = (0u64, base);
    let mut head = [0u8; 27];
    while pos + 61 <= len {
        file.read_exact_at(&mut head, pos).context(|| format!("cannot read {}", path.display()))?;
        let base_offset = i64::from_be_bytes(head[0..8].try_into().unwrap());
        let length = i32::from_be_bytes(head[8..12].try_into().unwrap());
        let last_delta = i32::from_be_bytes(head[23..27].try_into().unwrap());
        if length < 49 || pos + 12 + length as u64 > len {
            break;
        }
        next = next.max(base_offset + last_delta as i64 + 1);
        pos += 12 + length as u64;
    }
    Ok(next)
}
