//! Learning what other processes wrote to a partition: their rolls, appends, deletions,
//! cleanings and log start offset.

use crate::storage::checkpoint::read_offset;
use crate::storage::error::{Error, IoContext, Result};
use crate::storage::files::{KAFKA_LOG_START_OFFSET, LOG_START_OFFSET_FILE};
use crate::storage::segment::Segment;

use super::{generation, now_ms, Log};

/// Without a generation file: how stale a follower's view of other writers' segment deletions may get.
const LISTING_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

impl Log {
    /// Learn what other processes wrote to this partition since we last looked: their appends,
    /// rolls, deletions (retention, DeleteRecords), cleanings and log start offset. The one
    /// entry for it: readers and shared writers call it lock-free before they read; it only
    /// learns what is published (taking over the active segment to append waits for the append
    /// lock, `follow_and_take_tail`). A sole writer has nothing to learn.
    pub fn follow(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        if self.config.readonly || self.config.shared_writers {
            self.follow_files(false)
        } else {
            Ok(())
        }
    }

    /// `follow`, under the append lock (shared writers), then make the active segment ours to
    /// append to.
    /// Also how a shared writer joins live writers: it trusts the files they keep consistent.
    pub(super) fn follow_and_take_tail(&mut self) -> Result<()> {
        self.follow_files(true)?;
        if self.segments.is_empty() {
            // Every segment file was removed under us: followers that still hold one must list.
            self.segments_changing()?;
            let start = self.checkpointed_start_offset().unwrap_or(0);
            self.segments.push(Segment::create(&self.dir, start, self.settings(), now_ms())?);
            self.sync_dir_if_always()?;
            self.segments_changed();
        }
        if !self.segments.last().unwrap().is_writable() {
            let base = self.segments.last().unwrap().base_offset;
            let mut seg = Segment::open(&self.dir, base, true, self.settings(), now_ms())?;
            seg.follow()?;
            *self.segments.last_mut().unwrap() = seg;
        }
        // follow_files (or the open just above) discovered the active segment's tail.
        let max_batch = self.config.max_message_bytes;
        let active = self.segments.last_mut().unwrap();
        active.adopt_for_append(max_batch)?;
        self.flushed_position = self.flushed_position.min(active.size());
        Ok(())
    }

    /// `follow`'s work: match `segments` to the directory: drop segments a writer deleted,
    /// learn the new batches of the newest known segment, and open segments created since.
    /// Every segment but the newest is sealed, trimmed and final, so it is trusted as it is.
    /// `as_writer`: a shared writer under the append lock, which repairs a missing or damaged
    /// generation file (readers cannot: they may not write).
    fn follow_files(&mut self, as_writer: bool) -> Result<()> {
        self.follow_start_offset();
        // Listing the directory is the expensive part (milliseconds at thousands of segments);
        // it is needed only when a segment was deleted or replaced since we last listed, which
        // the generation tells (`generation.rs`). Rolls are found by name.
        let generation = generation::read(&self.dir);
        if generation.is_some() && generation == self.generation_seen && !self.segments.is_empty() {
            match self.follow_rolls() {
                // Our newest segment is gone, and we held no descriptor of it to read it
                // through (a shared writer whose roll failed after sealing it: `roll_locked`):
                // deleted since the generation we saw was read. The listing below drops it.
                Err(e) if deleted_under_us(&e) => {}
                done => return done,
            }
        }
        let discovered = self.segments.last().map(|s| s.base_offset);
        if let Some(last) = self.segments.last_mut() {
            let gone = match last.follow() {
                Ok(_) => false,
                // Deleted since we listed, and opened again by name (no descriptor held: see
                // above): list now, which drops it, instead of failing the reader.
                Err(e) if deleted_under_us(&e) => true,
                Err(e) => return Err(e),
            };
            // No generation (a directory a broker or an older kafkalite writes, or a damaged
            // file): list when the newest segment was sealed (someone rolled), and to notice
            // deletions, which only move the log start offset, within LISTING_INTERVAL.
            if !gone
                && generation.is_none()
                && !as_writer
                && !last.looks_sealed()
                && self.last_listing.elapsed() < LISTING_INTERVAL
            {
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
                last.follow()?;
            }
        }
        let settings = self.settings();
        let count = newer.len();
        let next_bases = newer.clone();
        for (i, base) in newer.into_iter().enumerate() {
            let opened = crate::storage::failpoint::hit("follow.open_segment")
                .context(|| format!("cannot open segment {base} of {}", self.dir.display()))
                .and_then(|()| Segment::open(&self.dir, base, false, settings, now_ms()));
            let mut seg = match opened {
                Ok(seg) => seg,
                // Deleted by a writer's retention between listing and opening.
                Err(e) if deleted_under_us(&e) => continue,
                Err(e) => return Err(e),
            };
            if i + 1 < count {
                // Sealed: trusted, or (damaged) kept whole so that reads fail at the damage.
                // (Marked sealed once a successor opened, below.)
                if seg.load_trusted().is_err() {
                    seg.recover_sealed(next_bases[i + 1])?;
                }
            } else {
                seg.follow()?;
            }
            // A successor opened: the segment before it is sealed and final, and keeps no
            // descriptor. Not before: should retention delete every successor the listing showed
            // before it opens, that segment stays our newest, and its descriptor is what the
            // next follow reads it through (reopened by name, the file would be gone).
            if let Some(previous) = self.segments.last_mut() {
                previous.mark_sealed();
            }
            self.segments.push(seg);
        }
        let first_base = self.segments.first().map(|s| s.base_offset).unwrap_or(0);
        self.start_offset = self.start_offset.max(first_base);
        // Read before the listing: a change after it moves the generation past this value.
        self.generation_seen = generation;
        if generation.is_none() && as_writer {
            // Listed just now under the append lock: a fresh file (new nonce) is true of what
            // we hold, and every other follower, seeing a value it never saw, lists once.
            // Unwritable: every follower goes on listing, as before the file existed.
            self.generation_seen = generation::bump(&self.dir).ok();
        }
        Ok(())
    }

    /// The common case, no segment deleted or replaced since we listed: learn the newest
    /// segment's new batches and, while it is sealed, open the one a roll created after it,
    /// named by its next offset. A sealed segment without that successor is one whose roll
    /// failed or died between sealing and creating (the next append adopts it again), or a
    /// broker's active segment, which is never preallocated. O(1) in the number of segments.
    fn follow_rolls(&mut self) -> Result<()> {
        let settings = self.settings();
        self.segments.last_mut().expect("followed a non-empty log").follow()?;
        loop {
            let last = self.segments.last().expect("followed a non-empty log");
            if !last.looks_sealed() || last.is_empty() {
                return Ok(());
            }
            let mut next = match Segment::open(&self.dir, last.next_offset(), false, settings, now_ms()) {
                Ok(seg) => seg,
                Err(e) if deleted_under_us(&e) => return Ok(()),
                Err(e) => return Err(e),
            };
            next.follow()?;
            self.segments.last_mut().expect("followed a non-empty log").mark_sealed();
            self.segments.push(next);
        }
    }

    /// Segments whose file a cleaner replaced (a merged, cleaned segment under the same name)
    /// are opened again: keeping the old file would hide the records the cleaner moved into it
    /// from the old segments it deleted, and a cleaning pass of ours would then write them away.
    /// That includes a segment this writer once appended to (still writable in our view):
    /// other writers may have sealed it since and cleaned it. (A cleaner never replaces the
    /// active segment, so the one we append to keeps its inode.)
    fn reopen_replaced_segments(&mut self, listing: &[(i64, u64)]) -> Result<()> {
        let settings = self.settings();
        for i in 0..self.segments.len() {
            let seg = &self.segments[i];
            let Ok(k) = listing.binary_search_by_key(&seg.base_offset, |&(b, _)| b) else { continue };
            if listing[k].1 == seg.inode() {
                continue;
            }
            let base = seg.base_offset;
            let mut fresh = match Segment::open(&self.dir, base, false, settings, now_ms()) {
                Ok(seg) => seg,
                Err(e) if deleted_under_us(&e) => continue,
                Err(e) => return Err(e),
            };
            if i + 1 < self.segments.len() {
                if fresh.load_trusted().is_err() {
                    fresh.recover_sealed(self.segments[i + 1].base_offset)?;
                }
                fresh.mark_sealed();
            } else {
                fresh.follow()?;
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
}

/// Whether `e` is a file of the partition that vanished while we held its name (listed it, or
/// derived it from a roll): a writer's retention, DeleteRecords or cleaner deleted a segment
/// (or its index) we knew before we opened it.
fn deleted_under_us(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}
