//! Deleting old data, Kafka's way: the log start offset moves forward, and whole segments
//! are removed oldest first (never part of a segment). Files are unlinked, so readers that
//! still map a deleted segment keep reading it safely.

use crate::storage::error::{Error, Result};
use crate::storage::log::{now_ms, Log};

impl Log {
    /// Kafka's DeleteRecords: make `offset` the new log start offset. Segments entirely
    /// below it are deleted. Returns the new log start offset.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64> {
        self.check_open()?;
        if self.config.readonly {
            return Err(Error::Closed("the log was opened read-only".into()));
        }
        let end = self.end_offset();
        if offset > end || offset < 0 {
            return Err(Error::OffsetOutOfRange { offset, start: self.start_offset, end });
        }
        self.as_writer(|log| {
            if offset > log.start_offset {
                log.set_start_offset(offset)?;
                log.delete_segments_where(|_, _, _| false)?;
            }
            Ok(log.start_offset)
        })
    }

    /// Apply `retention.bytes` and `retention.ms` now (and the log start offset). Returns
    /// how many segments were deleted.
    pub fn enforce_retention(&mut self) -> Result<usize> {
        self.enforce_retention_at(now_ms())
    }

    /// `enforce_retention` with an explicit clock, for tests.
    pub fn enforce_retention_at(&mut self, now: i64) -> Result<usize> {
        self.check_open()?;
        if self.config.readonly {
            return Err(Error::Closed("the log was opened read-only".into()));
        }
        self.as_writer(|log| log.enforce_retention_locked(now))
    }

    fn enforce_retention_locked(&mut self, now: i64) -> Result<usize> {
        let retention_bytes = self.config.retention_bytes;
        let retention_ms = self.config.retention_ms;
        let mut excess = retention_bytes.map(|limit| self.size_bytes() as i64 - limit as i64).unwrap_or(-1);
        self.delete_segments_where(|size, max_ts, mtime| {
            if retention_bytes.is_some() && excess - size as i64 >= 0 {
                excess -= size as i64;
                return true;
            }
            let largest = if max_ts >= 0 { max_ts } else { mtime };
            retention_ms.is_some_and(|ms| now - largest > ms)
        })
    }

    /// Delete segments oldest first while they breach the log start offset or `extra`
    /// says so; stop at the first one that stays. The active segment is rolled first when it
    /// must go, so that one segment always remains.
    fn delete_segments_where(&mut self, mut extra: impl FnMut(u64, i64, i64) -> bool) -> Result<usize> {
        let mut count = 0;
        loop {
            let n = self.segments.len();
            let seg = &self.segments[0];
            if seg.is_empty() && n == 1 {
                break;
            }
            let upper = if n > 1 { self.segments[1].base_offset } else { self.end_offset() };
            let mtime = std::fs::metadata(
                self.dir.join(crate::storage::files::file_name(seg.base_offset, crate::storage::files::LOG_SUFFIX)),
            )
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
            let breach = upper <= self.start_offset;
            if !(breach || extra(seg.size() as u64, seg.max_timestamp(), mtime)) {
                break;
            }
            if n == 1 {
                self.roll_locked()?;
            }
            if count == 0 {
                self.segments_changing()?; // followers list again, even if this process dies here
            }
            let seg = self.segments.remove(0);
            seg.delete_files()?;
            ::log::info!(
                target: crate::LOG_TARGET,
                "deleted segment {} of {} (offsets [{}, {upper})): {}",
                crate::storage::files::file_name(seg.base_offset, crate::storage::files::LOG_SUFFIX),
                self.dir.display(),
                seg.base_offset,
                if breach { "below the log start offset" } else { "retention limit reached" }
            );
            count += 1;
        }
        if count > 0 {
            self.segments_changed();
            let first = self.segments[0].base_offset;
            if first > self.start_offset {
                self.set_start_offset(first)?;
            }
            self.delete_snapshots_below(first)?;
        }
        Ok(count)
    }
}
