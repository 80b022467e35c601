//! Reading a partition: zero-copy batch slices, decoded records and timestamp lookup.

use std::sync::Arc;

use crate::storage::error::{Error, Result};
use crate::storage::log::Log;
use crate::storage::mmap::MappedFile;
use crate::storage::record::header::BatchHeader;
use crate::storage::record::scan::verify_crc;
use crate::storage::record::{for_each_record, for_each_record_until, record_area, OwnedRecord, RecordRef};

/// Whole batches inside one segment's map: `[start, start + len)`. Holding it keeps the map
/// (and so the bytes) alive even after the segment is rolled, closed or deleted.
#[derive(Clone)]
pub struct BatchSlice {
    pub map: Option<Arc<MappedFile>>,
    pub start: usize,
    pub len: usize,
}

impl BatchSlice {
    pub fn bytes(&self) -> &[u8] {
        match &self.map {
            Some(m) => m.bytes(self.start, self.start + self.len),
            None => &[],
        }
    }
}

/// The smallest record a v2 batch can hold: a one-byte length, attributes, timestamp delta,
/// offset delta, key length, value length and header count (one varint byte each).
const MIN_RECORD_BYTES: usize = 7;

/// Receives decoded records; implemented by owned vectors, Arrow builders and the Python layer.
pub trait RecordSink {
    /// A batch of `records` records in `bytes` bytes (its record area) comes next: room for
    /// it can be made in one step. (Some of its records may be skipped.)
    fn reserve(&mut self, records: usize, bytes: usize) {
        let _ = (records, bytes);
    }

    fn push(&mut self, record: &RecordRef<'_>) -> Result<()>;
}

impl RecordSink for Vec<OwnedRecord> {
    fn push(&mut self, record: &RecordRef<'_>) -> Result<()> {
        Vec::push(self, OwnedRecord::from(record));
        Ok(())
    }
}

impl Log {
    fn check_range(&self, offset: i64) -> Result<()> {
        let end = self.end_offset();
        if offset < self.start_offset || offset > end {
            return Err(Error::OffsetOutOfRange { offset, start: self.start_offset, end });
        }
        Ok(())
    }

    /// Index of the segment that holds `offset` (the last with base <= offset).
    fn segment_index_for(&self, offset: i64) -> usize {
        self.segments.partition_point(|s| s.base_offset <= offset).saturating_sub(1)
    }

    /// The first batch at or after `offset` with lastOffset >= offset: (segment, position, header).
    fn locate(&self, offset: i64) -> Result<Option<(usize, usize, BatchHeader)>> {
        for i in self.segment_index_for(offset)..self.segments.len() {
            if let Some((pos, h)) = self.segments[i].translate_offset(offset)? {
                return Ok(Some((i, pos, h)));
            }
        }
        Ok(None)
    }

    /// Whole batches starting with the one that holds `offset`, up to `max_bytes` (at least one
    /// batch, as Kafka's fetch returns). Empty at the log end.
    pub fn read(&mut self, offset: i64, max_bytes: usize) -> Result<BatchSlice> {
        self.check_open()?;
        if offset >= self.end_offset() {
            self.follow()?;
        }
        self.check_range(offset)?;
        let Some((seg_idx, start, first)) = self.locate(offset)? else {
            return Ok(BatchSlice { map: None, start: 0, len: 0 });
        };
        let seg = &self.segments[seg_idx];
        let mut end = start + first.total_size();
        for batch in seg.batches_from(end) {
            let (_, h) = batch?;
            if end + h.total_size() - start > max_bytes {
                break;
            }
            end += h.total_size();
        }
        Ok(BatchSlice { map: seg.map().cloned(), start, len: end - start })
    }

    /// Decode records with offsets in `[start, end)` (end defaults to the log end), at most
    /// `max_records`, into `sink`. Control batches are skipped; every batch's CRC is checked.
    /// Returns the offset to continue from.
    pub fn scan_records(
        &mut self,
        start: i64,
        end: Option<i64>,
        max_records: usize,
        sink: &mut impl RecordSink,
    ) -> Result<i64> {
        self.check_open()?;
        if start >= self.end_offset() {
            self.follow()?;
        }
        self.check_range(start)?;
        let end = end.unwrap_or(i64::MAX).min(self.end_offset());
        let mut next = start;
        let mut taken = 0usize;
        if start >= end || max_records == 0 {
            return Ok(start);
        }
        let Some((mut seg_idx, mut pos, _)) = self.locate(start)? else {
            return Ok(end);
        };
        'segments: while seg_idx < self.segments.len() {
            let seg = &self.segments[seg_idx];
            let mut follows_from = seg.base_offset;
            let mut batches = seg.batches_from(pos);
            while let Some(item) = batches.next() {
                let (pos, header) = item?;
                check_batch_offsets(seg, pos, &header, follows_from)?;
                follows_from = header.next_offset();
                let batch = batches.batch_bytes(pos, &header);
                if header.base_offset >= end {
                    break 'segments;
                }
                if header.last_offset() < next || header.is_control() {
                    next = next.max(header.next_offset());
                    continue;
                }
                verify_crc(batch, &header, pos)?;
                let area = record_area(batch, &header)?;
                // The count is only a sizing hint, and a damaged batch (its CRC recomputed) can
                // declare 2^31 records: never more than the area's bytes can hold (a record is at
                // least MIN_RECORD_BYTES), or the sink's reservation aborts the process.
                let rows = (header.records_count.max(0) as usize).min(area.len() / MIN_RECORD_BYTES);
                sink.reserve(rows, area.len());
                let mut full = false;
                for_each_record(&area, &header, |r| {
                    if full || r.offset < next || r.offset >= end {
                        return Ok(());
                    }
                    sink.push(r)?;
                    taken += 1;
                    if taken >= max_records {
                        full = true;
                        next = r.offset + 1;
                    }
                    Ok(())
                })?;
                if full {
                    return Ok(next);
                }
                next = next.max(header.next_offset());
            }
            if batches.position() < seg.size() {
                // Never step over damage to the next segment: the caller would silently skip records.
                return Err(seg.not_a_batch(batches.position()));
            }
            seg_idx += 1;
            pos = 0;
        }
        Ok(next.min(end).max(start))
    }

    /// Walk the batches from the one that holds `from` to the log end, in order, handing `f`
    /// each header with its whole batch bytes and position (records are not decoded, nor the
    /// CRC checked); `f` returns false to stop. The transaction bookkeeping of `read_committed.rs` reads
    /// the log this way.
    pub(crate) fn walk_batches(
        &self,
        from: i64,
        mut f: impl FnMut(&BatchHeader, &[u8], usize) -> Result<bool>,
    ) -> Result<()> {
        let Some((mut seg_idx, mut pos, _)) = self.locate(from)? else { return Ok(()) };
        while seg_idx < self.segments.len() {
            let seg = &self.segments[seg_idx];
            let batches = seg.batches_from(pos);
            let mut walk = batches.clone();
            for batch in walk.by_ref() {
                let (pos, h) = batch?;
                if !f(&h, batches.batch_bytes(pos, &h), pos)? {
                    return Ok(());
                }
            }
            if walk.position() < seg.size() {
                // As `scan_records`: stepping over damage to the next segment would skip its batches
                // silently (a committed offset read as an older one, a marker missed).
                return Err(seg.not_a_batch(walk.position()));
            }
            seg_idx += 1;
            pos = 0;
        }
        Ok(())
    }

    /// The headers of the batches from the one holding `from` (which must lie in the log), at
    /// most `max_batches`, following other writers first; records are not decoded nor CRCs
    /// checked. How a writer finds its own batches again by their producer fields.
    pub fn batch_headers(&mut self, from: i64, max_batches: usize) -> Result<Vec<BatchHeader>> {
        self.check_open()?;
        self.follow()?;
        self.check_range(from)?;
        let mut out = Vec::new();
        self.walk_batches(from, |h, _, _| {
            if h.last_offset() >= from {
                out.push(*h);
            }
            Ok(out.len() < max_batches)
        })?;
        Ok(out)
    }

    /// Kafka's ListOffsets by timestamp: the earliest offset whose record timestamp >= ts,
    /// with that timestamp, or None. Searches the first segment whose largest timestamp >= ts,
    /// from its time-index hint.
    pub fn offset_for_timestamp(&mut self, ts: i64) -> Result<Option<(i64, i64)>> {
        self.check_open()?;
        self.follow()?;
        let start_offset = self.start_offset;
        for seg in &self.segments {
            if seg.max_timestamp() < ts || seg.next_offset() <= start_offset {
                continue;
            }
            let batches = seg.batches_from(seg.timestamp_search_start(ts, start_offset)?);
            for batch in batches.clone() {
                let (pos, h) = batch?;
                let batch = batches.batch_bytes(pos, &h);
                if h.max_timestamp < ts || h.is_control() || h.last_offset() < start_offset {
                    continue;
                }
                verify_crc(batch, &h, pos)?;
                let area = record_area(batch, &h)?;
                let mut found = None;
                for_each_record_until(&area, &h, |r| {
                    if r.timestamp >= ts && r.offset >= start_offset {
                        found = Some((r.offset, r.timestamp));
                    }
                    Ok(found.is_some())
                })?;
                if found.is_some() {
                    return Ok(found);
                }
            }
        }
        Ok(None)
    }
}

/// A batch of `seg` at `pos` must lie inside the segment's offsets and after the batch before
/// it. The CRC does not cover baseOffset, so a damaged one is caught here: without this check a
/// read that meets it skips or misnumbers records silently.
fn check_batch_offsets(
    seg: &crate::storage::segment::Segment,
    pos: usize,
    h: &BatchHeader,
    follows_from: i64,
) -> Result<()> {
    if h.base_offset < follows_from || h.last_offset() >= seg.next_offset() {
        return Err(Error::corrupt(format!(
            "batch at position {pos} of segment {} claims offsets {}..={}, outside [{follows_from}, {}) (the file is damaged)",
            seg.base_offset,
            h.base_offset,
            h.last_offset(),
            seg.next_offset()
        )));
    }
    Ok(())
}
