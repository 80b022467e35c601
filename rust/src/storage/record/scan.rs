//! Finding batch boundaries in a run of bytes, with the rules of Kafka's
//! `FileLogInputStream.nextBatch` and `DefaultRecordBatch.ensureValid`.

use crate::storage::error::{Error, Result};
use crate::storage::record::header::{compute_crc, BatchHeader, HEADER_LEN, LOG_OVERHEAD, MAGIC_V2, MIN_BATCH_LENGTH};

/// What lies at a position of a log file.
#[derive(Debug)]
pub enum Next {
    /// A complete batch with a valid header (and CRC, when checked).
    Batch(BatchHeader),
    /// No complete batch starts here: 17 bytes or fewer remain, or the batch runs past the end.
    /// For a reader this is the end of the data; for recovery, where to truncate.
    End,
    /// Zero-filled bytes (a preallocated tail, or a length of 0): the end of written data.
    Zeros,
}

/// Examine the bytes at `buf[pos..]`, Kafka's way.
///
/// `check_crc` verifies the CRC-32C of the batch, as every read and recovery should.
/// An invalid batch is an `Error::Corrupt`; magic 0/1 is `Error::Unsupported`.
pub fn next_batch(buf: &[u8], pos: usize, check_crc: bool) -> Result<Next> {
    let remaining = buf.len().saturating_sub(pos);
    // Kafka: `if (position >= end - HEADER_SIZE_UP_TO_MAGIC) return null` with 17 bytes.
    if remaining <= LOG_OVERHEAD + 5 {
        return Ok(Next::End);
    }
    let at = &buf[pos..];
    let batch_length = i32::from_be_bytes(at[8..12].try_into().unwrap());
    if batch_length == 0 && at[..LOG_OVERHEAD].iter().all(|&b| b == 0) {
        return Ok(Next::Zeros);
    }
    if batch_length < MIN_BATCH_LENGTH {
        return Err(Error::corrupt(format!(
            "batch at position {pos} declares length {batch_length}, below the minimum of {MIN_BATCH_LENGTH}"
        )));
    }
    let size = LOG_OVERHEAD + batch_length as usize;
    if size > remaining {
        return Ok(Next::End);
    }
    let magic = at[16] as i8;
    if magic != MAGIC_V2 {
        return Err(Error::Unsupported(format!(
            "batch at position {pos} has magic {magic}; only v2 record batches (Kafka 0.11+) are supported"
        )));
    }
    if size < HEADER_LEN {
        return Err(Error::corrupt(format!("v2 batch at position {pos} is {size} bytes, below the 61-byte header")));
    }
    let header = BatchHeader::parse(&at[..size])?;
    if header.last_offset_delta < 0 || header.records_count < 0 {
        return Err(Error::corrupt(format!(
            "batch at position {pos} has a negative lastOffsetDelta ({}) or record count ({})",
            header.last_offset_delta, header.records_count
        )));
    }
    // Offsets are non-negative and the batch's next offset must exist (hostile bytes otherwise
    // overflow offset arithmetic).
    if header.base_offset < 0 || header.base_offset.checked_add(header.last_offset_delta as i64 + 1).is_none() {
        return Err(Error::corrupt(format!(
            "batch at position {pos} has offsets {} + {} outside Kafka's range",
            header.base_offset, header.last_offset_delta
        )));
    }
    if check_crc {
        verify_crc(&at[..size], &header, pos)?;
    }
    Ok(Next::Batch(header))
}

/// Check a whole batch's stored CRC-32C; `pos` is only for the message.
pub fn verify_crc(batch: &[u8], header: &BatchHeader, pos: usize) -> Result<()> {
    let actual = compute_crc(batch);
    if actual != header.crc {
        return Err(Error::corrupt(format!(
            "batch at position {pos} (offsets {}..={}) fails its CRC-32C check: stored {:#010x}, computed {actual:#010x}",
            header.base_offset,
            header.last_offset(),
            header.crc
        )));
    }
    Ok(())
}

/// The batches of a run of bytes from a position on (Kafka's `FileRecords.batchesFrom`):
/// yields `(position, header)` for each complete batch with a valid header (the CRC is left to
/// the caller, who may not need the body), and ends at the first position where no batch
/// starts: a torn tail (a batch that runs past the end), a zero tail (preallocated space) or
/// the end of the bytes. A header that is invalid is yielded once as the error and ends the
/// iteration. `position()` then says where it stopped, so a caller can tell "the end of the
/// data" from "bytes that are not a batch".
#[derive(Clone)]
pub struct Batches<'a> {
    bytes: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> Batches<'a> {
    pub fn new(bytes: &'a [u8], pos: usize) -> Batches<'a> {
        Batches { bytes, pos, done: false }
    }

    /// Where the next batch would start: after the iteration, the end of the last whole batch.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The whole bytes of a batch this iterator yielded.
    pub fn batch_bytes(&self, pos: usize, header: &BatchHeader) -> &'a [u8] {
        &self.bytes[pos..pos + header.total_size()]
    }
}

impl Iterator for Batches<'_> {
    type Item = Result<(usize, BatchHeader)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match next_batch(self.bytes, self.pos, false) {
            Ok(Next::Batch(h)) => {
                let at = self.pos;
                self.pos += h.total_size();
                Some(Ok((at, h)))
            }
            Ok(Next::End | Next::Zeros) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
