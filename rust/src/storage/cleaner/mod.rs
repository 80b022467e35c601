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
//!
//! `cleaner/swap.rs` is the swap and its completion at open; this file decides what is kept.

use std::collections::{HashMap, VecDeque};

use crate::storage::checkpoint::{read_offset, write_atomically};
use crate::storage::error::{Error, Result};
use crate::storage::files::{CLEANER_OFFSET_FILE, KAFKA_CLEANER_OFFSET};
use crate::storage::index::Entry;
use crate::storage::log::Log;
use crate::storage::read_committed::TxnState;
use crate::storage::record::filter::{filter_batch, FilterCounts, Filtered};
use crate::storage::record::scan::verify_crc;
use crate::storage::record::{for_each_record, record_area};
use crate::storage::segment::Segment;

mod swap;

pub(crate) use swap::finish_interrupted_swaps;
/// A data batch of an aborted transaction.
fn aborted(txn: &TxnState, header: &crate::storage::record::BatchHeader) -> bool {
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
        let max_time_entries = self.config.max_index_bytes / crate::storage::index::TimestampOffset::SIZE;
        total <= self.config.segment_bytes as usize
            && index_entries <= max_time_entries
            && (next.bytes.is_empty() || next.upper - self.segments[first].base_offset <= i32::MAX as i64)
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

/// Call `f(batch bytes, header, position)` for every batch of a sealed segment, CRC checked.
fn for_each_batch(
    seg: &Segment,
    mut f: impl FnMut(&[u8], &crate::storage::record::BatchHeader, usize) -> Result<()>,
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
