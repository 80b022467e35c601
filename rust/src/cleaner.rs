//! Log compaction (`cleanup.policy=compact`), Kafka's cleaner for one partition.
//!
//! Pass 1 maps every key in the dirty range `[first dirty, dirty end)` to its latest offset.
//! Pass 2 rewrites each sealed segment below the dirty end, keeping a record when no later
//! record has its key, dropping tombstones whose batch's delete horizon has passed, and
//! stamping a horizon on batches whose tombstones are kept for the first time. Offsets never
//! move. The active segment is never touched.
//!
//! A segment is swapped in so that a crash leaves the old or the new one, never a mix:
//! `X.log.cleaned` is written and fsynced, renamed to `X.log.swap` (the commit point), the old
//! indexes are removed and `X.log.swap` is renamed over `X.log`; the indexes are rebuilt from
//! it. Opening a log finishes a swap that a crash interrupted (`finish_interrupted_swaps`).
//! Readers that mapped the old file keep reading it (rename and unlink leave a map intact),
//! and both versions hold the same latest value for every key.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use crate::checkpoint::{read_offset, remove_if_exists, sync_dir, write_atomically, CLEANER_OFFSET_FILE};
use crate::error::{Error, IoContext, Result};
use crate::log::Log;
use crate::record::filter::{filter_batch, Filtered};
use crate::record::scan::{next_batch, verify_crc, Next};
use crate::record::{for_each_record, record_area};
use crate::segment::{file_name, Segment};

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
        let checkpoint = read_offset(&self.dir, CLEANER_OFFSET_FILE).unwrap_or(0);
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
        let (n, dirty_end) = self.cleanable(options);
        let first_dirty = self.first_dirty_offset(dirty_end);
        let mut stats =
            CleanStats { first_dirty_offset: first_dirty, dirty_end_offset: dirty_end, ..Default::default() };
        if n == 0 {
            return Ok(stats);
        }
        let latest = self.build_offset_map(n, first_dirty, dirty_end)?;
        stats.keys = latest.len() as u64;
        let horizon = options.now_ms.saturating_add(options.delete_retention_ms);
        for i in 0..n {
            self.clean_segment(i, &latest, options.now_ms, horizon, &mut stats)?;
        }
        write_atomically(&self.dir, CLEANER_OFFSET_FILE, dirty_end.to_string().as_bytes())?;
        Ok(stats)
    }

    /// Pass 1: the latest offset of every key in `[from, to)`.
    fn build_offset_map(&self, n: usize, from: i64, to: i64) -> Result<HashMap<Vec<u8>, i64>> {
        let mut latest: HashMap<Vec<u8>, i64> = HashMap::new();
        for seg in &self.segments[..n] {
            if seg.next_offset() <= from {
                continue;
            }
            for_each_batch(seg, |batch, header, _| {
                if header.is_control() || header.last_offset() < from {
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

    /// Pass 2 for segment `i`: rewrite it when something changes, then swap it in.
    fn clean_segment(
        &mut self,
        i: usize,
        latest: &HashMap<Vec<u8>, i64>,
        now: i64,
        horizon: i64,
        stats: &mut CleanStats,
    ) -> Result<()> {
        let seg = &self.segments[i];
        let base = seg.base_offset;
        let cleaned_path = self.dir.join(format!("{}.cleaned", file_name(base, "log")));
        let mut out = Vec::new();
        let mut changed = false;
        let (mut removed, mut tombstones) = (0u64, 0u64);
        for_each_batch(seg, |batch, header, _| {
            let expired = header.has_delete_horizon() && now >= header.base_timestamp;
            let (filtered, counts) = filter_batch(batch, header, horizon, |r| match r.key {
                None => false, // Kafka's cleaner drops records without a key
                Some(key) => {
                    let superseded = latest.get(key).is_some_and(|&newest| r.offset < newest);
                    !superseded && (r.value.is_some() || !expired)
                }
            })?;
            removed += counts.records_removed;
            tombstones += counts.tombstones_removed;
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
        if !changed {
            return Ok(());
        }
        stats.segments_rewritten += 1;
        stats.bytes_before += seg.size() as u64;
        stats.bytes_after += out.len() as u64;
        stats.records_removed += removed;
        stats.tombstones_removed += tombstones;
        let mut file = crate::nofollow::open(
            crate::nofollow::options().write(true).create(true).truncate(true),
            &cleaned_path,
            "cleaned segment",
        )?;
        crate::failpoint::hit("cleaner.write_cleaned")
            .and_then(|()| file.write_all(&out))
            .and_then(|()| file.sync_all())
            .context(|| format!("cannot write {}", cleaned_path.display()))?;
        drop(file);
        let swap_path = self.dir.join(format!("{}.swap", file_name(base, "log")));
        crate::failpoint::hit("cleaner.rename_swap")
            .and_then(|()| std::fs::rename(&cleaned_path, &swap_path))
            .context(|| format!("cannot rename {} to {}", cleaned_path.display(), swap_path.display()))?;
        sync_dir(&self.dir)?;
        finish_swap(&self.dir, base)?;
        let mut cleaned = Segment::open(&self.dir, base, true, self.settings(), crate::log::now_ms())?;
        cleaned.recover()?;
        cleaned.seal()?;
        cleaned.sync_all()?;
        self.segments[i] = cleaned;
        Ok(())
    }
}

/// Call `f(batch bytes, header, position)` for every batch of a sealed segment, CRC checked.
fn for_each_batch(
    seg: &Segment,
    mut f: impl FnMut(&[u8], &crate::record::BatchHeader, usize) -> Result<()>,
) -> Result<()> {
    let bytes = seg.bytes(0, seg.size());
    let mut pos = 0;
    while let Next::Batch(header) = next_batch(bytes, pos, false)? {
        let batch = &bytes[pos..pos + header.total_size()];
        verify_crc(batch, &header, pos)?;
        f(batch, &header, pos)?;
        pos += header.total_size();
    }
    Ok(())
}

/// After `X.log.swap` exists (the cleaned segment is durable): drop X's indexes (they
/// describe the old file; they are rebuilt) and rename the swap file over `X.log`.
fn finish_swap(dir: &Path, base: i64) -> Result<()> {
    crate::failpoint::hit("cleaner.remove_indexes").context(|| format!("cannot finish cleaning {}", dir.display()))?;
    for ext in ["index", "timeindex"] {
        remove_if_exists(&dir.join(file_name(base, ext)))?;
    }
    let swap = dir.join(format!("{}.swap", file_name(base, "log")));
    let log = dir.join(file_name(base, "log"));
    crate::failpoint::hit("cleaner.replace_log")
        .and_then(|()| std::fs::rename(&swap, &log))
        .context(|| format!("cannot rename {} to {}", swap.display(), log.display()))?;
    sync_dir(dir)
}

/// At open (writer): complete swaps a crash interrupted after their commit point.
pub(crate) fn finish_interrupted_swaps(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(base) = name.strip_suffix(".log.swap").and_then(|stem| stem.parse::<i64>().ok()) {
            finish_swap(dir, base)?;
        }
    }
    Ok(())
}
