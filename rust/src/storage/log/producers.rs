//! The partition's producer state (`producer_state.rs`) kept with the log, as Kafka's
//! `UnifiedLog` keeps its `ProducerStateManager`: loaded on first use (the latest `.snapshot`
//! at or below the log end, then a scan of the batch headers after it), told of every batch
//! this writer appends, caught up with what other writers appended before it is used, and
//! written as `<log end>.snapshot` at roll and at clean close once loaded. A log nobody
//! produces idempotently to never loads it, so embedded writers pay nothing for it.

use crate::storage::checkpoint::remove_if_exists;
use crate::storage::error::Result;
use crate::storage::files::SNAPSHOT_SUFFIX;
use crate::storage::producer_state::{
    delete_snapshots_outside, list_snapshots, load_latest_snapshot, write_snapshot, BatchMetadata, ProducerState,
    Refusal, Verdict, VerificationGuard,
};
use crate::storage::record::header::BatchHeader;

use super::{now_ms, Log};

/// What an idempotence-checked append did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Produced {
    /// Appended at these offsets (first, last).
    Appended(i64, i64),
    /// A retry of a batch already in the log, at its original offsets: nothing was written.
    Duplicate(BatchMetadata),
    /// Refused by the sequence or epoch checks: nothing was written.
    Refused(Refusal),
}

impl Log {
    /// Append client batches as Kafka's broker does for a produce request: validated as
    /// `append_raw_batches` does, then checked against the producer state (retries answered
    /// with their original offsets, sequence gaps and fenced epochs refused), then appended.
    pub fn append_produce(&mut self, data: &[u8]) -> Result<Produced> {
        self.check_writable()?;
        let batches = self.validate_raw_batches(data)?;
        let headers: Vec<BatchHeader> = batches.iter().map(|(_, h)| *h).collect();
        self.as_writer(|log| {
            if headers.iter().any(|h| h.producer_id >= 0) {
                let name = log.partition_name();
                match log.producers_caught_up()?.check(&headers, &name) {
                    Verdict::Append => {}
                    Verdict::Duplicate(b) => return Ok(Produced::Duplicate(b)),
                    Verdict::Refused(r) => return Ok(Produced::Refused(r)),
                }
            }
            let (first, last) = log.append_validated_batches(batches)?;
            Ok(Produced::Appended(first, last))
        })
    }

    /// The state of this partition's producers as of the log end (loading it if needed).
    /// Call as the writer (under the append lock for shared writers).
    pub fn producer_state(&mut self) -> Result<&ProducerState> {
        self.check_writable()?;
        self.as_writer(|log| log.producers_caught_up().map(|_| ()))?;
        Ok(self.producers.as_ref().expect("loaded just above"))
    }

    /// The guard of `producer_id`'s transactional batches about to be verified with the
    /// coordinator (`ProducerState::verification_guard`), taken from the state as of the log
    /// end. Call as the writer (under the append lock for shared writers).
    pub fn verification_guard(&mut self, producer_id: i64) -> Result<VerificationGuard> {
        self.check_writable()?;
        self.as_writer(|log| Ok(log.producers_caught_up()?.verification_guard(producer_id, now_ms())))
    }

    pub(super) fn partition_name(&self) -> String {
        self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// Load the state if needed and apply the batches other writers appended since.
    pub(super) fn producers_caught_up(&mut self) -> Result<&mut ProducerState> {
        let end = self.end_offset();
        let stale = self.producers.as_ref().is_none_or(|p| p.map_end() > end);
        if stale {
            // Never loaded, or the log was cut below what we had learnt: start again from disk.
            let state = self.load_producers()?;
            self.producers = Some(state);
        }
        let mut state = self.producers.take().expect("loaded above");
        self.scan_producers(&mut state);
        Ok(self.producers.insert(state))
    }

    /// Kafka's `loadProducerState`: the latest usable snapshot at or below the log end (damaged
    /// ones are logged and deleted), expired producers dropped; without one, the log is scanned
    /// from its start.
    fn load_producers(&mut self) -> Result<ProducerState> {
        let end = self.end_offset();
        delete_snapshots_outside(&self.dir, i64::MIN, end)?;
        // The oldest snapshot there: where a roll's removal by name stops (`try_snapshot_producers`).
        self.snapshots_swept_to = list_snapshots(&self.dir)?.first().copied().unwrap_or(end);
        let (loaded, _) = load_latest_snapshot(&self.dir, end)?;
        let mut state = loaded.unwrap_or_else(|| ProducerState::empty(self.start_offset));
        state.expire(now_ms());
        Ok(state)
    }

    /// Apply every batch from `state.map_end()` to the log end. A batch the walk cannot read
    /// (damage in a sealed segment, reported on read) ends the scan with a warning: producers
    /// whose batches are lost count as unknown, as after retention.
    fn scan_producers(&self, state: &mut ProducerState) {
        let end = self.end_offset();
        let from = state.map_end().max(self.start_offset);
        if from >= end {
            return;
        }
        let walked = self.walk_batches(from, |h, _, _| {
            if h.last_offset() >= from {
                state.apply(h);
            }
            Ok(true)
        });
        if let Err(e) = walked {
            ::log::warn!(
                target: crate::LOG_TARGET,
                "could not read the batches of {} after offset {} to rebuild its producer state ({e}); \
                 producers whose last batches are there count as unknown",
                self.dir.display(),
                state.map_end()
            );
        }
        // Past what was read too: the next catch-up starts at the log end, not at the damage.
        state.apply_end(end);
    }

    /// A batch this writer just appended at its final offsets.
    pub(super) fn producers_note(&mut self, header: &BatchHeader) {
        if let Some(state) = self.producers.as_mut() {
            // Only when nothing was missed; otherwise the next catch-up reads it from the log.
            if state.map_end() == header.base_offset {
                state.apply(header);
            }
        }
    }

    /// Kafka's `takeSnapshot` at roll and at clean close, for a loaded state: `<log end>.snapshot`,
    /// then the snapshots below the second newest segment (Kafka's `minSnapshotsOffsetToRetain`)
    /// and above the log end are deleted.
    /// A failed snapshot costs a longer scan at the next load, not the roll or the close: it is
    /// logged.
    pub(super) fn snapshot_producers(&mut self, at_roll: bool) {
        if self.producers.is_some() {
            if let Err(e) = self.try_snapshot_producers(at_roll) {
                ::log::warn!(
                    target: crate::LOG_TARGET,
                    "could not snapshot the producer state of {} at offset {}: {e}",
                    self.dir.display(),
                    self.end_offset()
                );
            }
        }
    }

    fn try_snapshot_producers(&mut self, at_roll: bool) -> Result<()> {
        let end = self.end_offset();
        self.producers_caught_up()?;
        let state = self.producers.as_mut().expect("loaded above");
        state.expire(now_ms());
        write_snapshot(&self.dir, state)?;
        let n = self.segments.len();
        let keep_from = self.segments.get(n.saturating_sub(2)).map_or(end, |s| s.base_offset);
        if !at_roll {
            return delete_snapshots_outside(&self.dir, keep_from, end);
        }
        // A roll's snapshots are named by the segment bases (`<log end>` at the roll), so the
        // ones a roll makes obsolete are at the bases of the segments that left the window
        // since this writer last looked (other writers rolled meanwhile): removed by name, not
        // by listing the directory, which cost a listing per roll at thousands of segments.
        // Snapshots elsewhere (a clean close's, at its log end) go at the next close or
        // load, or with their segment (retention).
        for seg in self.segments[..n.saturating_sub(2)].iter().rev() {
            if seg.base_offset < self.snapshots_swept_to {
                break;
            }
            remove_if_exists(&crate::storage::files::segment_path(&self.dir, seg.base_offset, SNAPSHOT_SUFFIX))?;
        }
        self.snapshots_swept_to = keep_from;
        Ok(())
    }

    /// Segments below `first_base` were deleted: so are their snapshots (Kafka deletes a
    /// segment's snapshot with it).
    pub(crate) fn delete_snapshots_below(&self, first_base: i64) -> Result<()> {
        delete_snapshots_outside(&self.dir, first_base, i64::MAX)
    }
}
