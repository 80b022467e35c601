//! Decoding a whole v2 batch into records, and building new batches.

use std::borrow::Cow;

use crate::storage::error::{Error, Result};
use crate::storage::record::compression::{compress, decompress, Compression};
use crate::storage::record::header::{
    compute_crc, BatchHeader, ProducerStamp, TimestampType, ATTR_TIMESTAMP_LOG_APPEND, HEADER_LEN, LOG_OVERHEAD,
    MAGIC_V2,
};
use crate::storage::record::record::{decode_record, EncodeRecord, RecordInput, RecordRef};

/// The record area of a batch (bytes 61..), decompressed when the batch is compressed.
pub fn record_area<'a>(batch: &'a [u8], header: &BatchHeader) -> Result<Cow<'a, [u8]>> {
    let raw = batch
        .get(HEADER_LEN..header.total_size())
        .ok_or_else(|| Error::corrupt("batch is shorter than its declared length"))?;
    match header.compression()? {
        Compression::None => Ok(Cow::Borrowed(raw)),
        codec => Ok(Cow::Owned(decompress(codec, raw)?)),
    }
}

/// Decode every record of a batch from its record area, calling `f` for each.
/// Checks what Kafka's `DefaultRecord.readFrom` checks: each record's declared length,
/// the count in the header, and that nothing is left over.
pub fn for_each_record<'a>(
    area: &'a [u8],
    header: &BatchHeader,
    mut f: impl FnMut(&RecordRef<'a>) -> Result<()>,
) -> Result<()> {
    for_each_record_until(area, header, |r| f(r).map(|()| false))
}

/// `for_each_record`, stopping early when `f` returns true (the rest is not decoded).
pub fn for_each_record_until<'a>(
    area: &'a [u8],
    header: &BatchHeader,
    mut f: impl FnMut(&RecordRef<'a>) -> Result<bool>,
) -> Result<()> {
    let log_append_time = match header.timestamp_type() {
        TimestampType::LogAppendTime => Some(header.max_timestamp),
        TimestampType::CreateTime => None,
    };
    let mut pos = 0usize;
    for _ in 0..header.records_count {
        if pos >= area.len() {
            return Err(Error::corrupt(format!(
                "batch at offset {} declares {} records but its data ends early",
                header.base_offset, header.records_count
            )));
        }
        let rec = decode_record(area, &mut pos, header.base_offset, header.base_timestamp, log_append_time)?;
        if rec.offset < header.base_offset || rec.offset > header.last_offset() {
            return Err(Error::corrupt(format!(
                "record offset {} lies outside its batch's range {}..={}",
                rec.offset,
                header.base_offset,
                header.last_offset()
            )));
        }
        // By reference: moving the record into `f` copied it twice per record (a store-forwarding
        // stall that cost as much as decoding it).
        if f(&rec)? {
            return Ok(());
        }
    }
    if header.records_count > 0 && pos != area.len() {
        return Err(Error::corrupt(format!(
            "batch at offset {} has {} bytes left over after its {} records",
            header.base_offset,
            area.len() - pos,
            header.records_count
        )));
    }
    Ok(())
}

/// Decode all records of a (CRC-checked) batch into owned values; the simple, slower path.
pub fn decode_batch_owned(batch: &[u8], header: &BatchHeader) -> Result<Vec<OwnedRecord>> {
    let area = record_area(batch, header)?;
    let mut out = Vec::with_capacity((header.records_count.max(0) as usize).min(area.len()));
    for_each_record(&area, header, |r| {
        out.push(OwnedRecord::from(r));
        Ok(())
    })?;
    Ok(out)
}

/// A record that owns its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl From<&RecordRef<'_>> for OwnedRecord {
    fn from(r: &RecordRef<'_>) -> Self {
        OwnedRecord {
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key.map(<[u8]>::to_vec),
            value: r.value.map(<[u8]>::to_vec),
            headers: r.headers.iter().map(|(k, v)| (k.to_string(), v.map(<[u8]>::to_vec))).collect(),
        }
    }
}

/// Builds one v2 batch. Records are encoded straight after a header placeholder, so an
/// uncompressed batch is assembled with no extra copy.
pub struct BatchBuilder {
    buf: Vec<u8>,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    compression: Compression,
    log_append_time: Option<i64>,
    producer: ProducerStamp,
    /// Extra attribute bits: `ATTR_TRANSACTIONAL` (a transactional producer's batch) and
    /// `ATTR_CONTROL` (a transaction marker), set by `set_transactional` / `set_control`.
    flags: i16,
}

impl BatchBuilder {
    /// `log_append_time`: `Some(now)` stamps every record with `now` (LogAppendTime).
    pub fn new(compression: Compression, log_append_time: Option<i64>, capacity: usize) -> Self {
        Self::with_buffer(Vec::with_capacity(HEADER_LEN + capacity), compression, log_append_time)
    }

    /// Build into `buf` (cleared first), reusing its allocation: the append path hands the
    /// same buffer back after every batch instead of allocating a fresh megabyte.
    pub fn with_buffer(mut buf: Vec<u8>, compression: Compression, log_append_time: Option<i64>) -> Self {
        buf.clear();
        buf.resize(HEADER_LEN, 0);
        BatchBuilder {
            buf,
            count: 0,
            base_timestamp: -1,
            max_timestamp: -1,
            compression,
            log_append_time,
            producer: ProducerStamp::NONE,
            flags: 0,
        }
    }

    /// Mark the batch as a transactional producer's (attribute bit 4).
    pub fn set_transactional(&mut self) {
        self.flags |= crate::storage::record::header::ATTR_TRANSACTIONAL;
    }

    /// Mark the batch as a control batch (a transaction marker: bits 4 and 5).
    pub fn set_control(&mut self) {
        self.flags |= crate::storage::record::header::ATTR_TRANSACTIONAL | crate::storage::record::header::ATTR_CONTROL;
    }

    /// Number of records so far.
    pub fn count(&self) -> usize {
        self.count as usize
    }

    /// Encoded size so far (uncompressed).
    pub fn size(&self) -> usize {
        self.buf.len()
    }

    /// The newest record timestamp so far (-1 before the first record).
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }

    /// At least the size `finish` will give: the encoded size, plus for a compressed batch
    /// the most a codec adds to incompressible bytes (snappy's bound, the largest of the
    /// four: a sixth of the input plus 32 bytes; zstd, lz4 and gzip add under 1%).
    pub fn size_upper_bound(&self) -> usize {
        match self.compression {
            Compression::None => self.size(),
            _ => self.size() + self.size() / 6 + 64,
        }
    }

    pub fn push(&mut self, r: &RecordInput<'_>) {
        self.push_encoded(r);
    }

    /// Add any record kind the batch can encode (`EncodeRecord`).
    #[inline(always)]
    pub fn push_encoded(&mut self, r: &impl EncodeRecord) {
        let ts = self.log_append_time.unwrap_or(r.timestamp());
        if self.count == 0 {
            self.base_timestamp = ts;
            self.max_timestamp = ts;
        }
        self.max_timestamp = self.max_timestamp.max(ts);
        let delta = ts.wrapping_sub(self.base_timestamp);
        r.encode(&mut self.buf, self.count, delta);
        self.count += 1;
    }

    /// Make this a LogAppendTime batch stamped `now` (the log's clock at append), as a broker
    /// does for topics with `message.timestamp.type=LogAppendTime`.
    pub fn stamp_log_append_time(&mut self, now: i64) {
        self.log_append_time = Some(now);
        self.max_timestamp = now;
    }

    /// Stamp the batch as an idempotent producer's: its id, epoch and the sequence number of
    /// the batch's first record (Kafka's producerId, producerEpoch, baseSequence).
    pub fn set_producer(&mut self, producer: ProducerStamp) {
        self.producer = producer;
    }

    /// Whether `r` should start a new batch: this one has records and `r` could take it past
    /// `target` bytes (a record larger than `target` gets a batch of its own).
    fn is_full_for(&self, r: &impl EncodeRecord, target: usize) -> bool {
        self.count > 0 && self.size() + r.size_upper_bound() > target
    }

    /// Finish the batch with offsets starting at `base_offset`. Returns the bytes and header.
    pub fn finish(mut self, base_offset: i64) -> Result<(Vec<u8>, BatchHeader)> {
        if self.count == 0 {
            return Err(Error::config("a record batch needs at least one record"));
        }
        if self.compression != Compression::None {
            let compressed = compress(self.compression, &self.buf[HEADER_LEN..])?;
            self.buf.truncate(HEADER_LEN);
            self.buf.extend_from_slice(&compressed);
        }
        let mut attributes = self.compression as i16 | self.flags;
        if self.log_append_time.is_some() {
            attributes |= ATTR_TIMESTAMP_LOG_APPEND;
        }
        let mut header = BatchHeader {
            base_offset,
            batch_length: (self.buf.len() - LOG_OVERHEAD) as i32,
            partition_leader_epoch: 0,
            magic: MAGIC_V2,
            crc: 0,
            attributes,
            last_offset_delta: self.count - 1,
            base_timestamp: self.base_timestamp,
            max_timestamp: self.max_timestamp,
            producer_id: self.producer.producer_id,
            producer_epoch: self.producer.producer_epoch,
            base_sequence: self.producer.base_sequence,
            records_count: self.count,
        };
        header.write(&mut self.buf);
        header.crc = compute_crc(&self.buf);
        header.write(&mut self.buf);
        Ok((self.buf, header))
    }
}

/// Push `inputs` into batches of at most `target` bytes (before compression): `builder` takes
/// records until the next would take it past `target`, then `next` receives the full builder
/// and returns the one to continue with. Returns the last builder, not finished. The one rule
/// for cutting records into batches, shared by the log's appends and `encode_batches`.
pub fn fill_batches(
    mut builder: BatchBuilder,
    inputs: impl IntoIterator<Item = impl EncodeRecord>,
    target: usize,
    mut next: impl FnMut(BatchBuilder) -> Result<BatchBuilder>,
) -> Result<BatchBuilder> {
    for r in inputs {
        if builder.is_full_for(&r, target) {
            builder = next(builder)?;
        }
        builder.push_encoded(&r);
    }
    Ok(builder)
}

/// `records` as whole v2 batches of at most `target` bytes each (before compression), ready
/// for `Log::append_produce`: base offsets relative (the first record is offset 0; the log
/// re-offsets on append), CreateTime, and every batch stamped with `producer`, its baseSequence
/// the sequence of its first record (`producer.base_sequence` plus the records before it,
/// wrapping from i32::MAX to 0 as Kafka's sequences do). `transactional`: every batch carries
/// attribute bit 4, as a transactional producer's batches do (a producer is then required).
pub fn encode_batches(
    records: &[RecordInput<'_>],
    compression: Compression,
    target: usize,
    producer: ProducerStamp,
    transactional: bool,
) -> Result<Vec<u8>> {
    if records.is_empty() {
        return Err(Error::config("encode_batches needs at least one record"));
    }
    if transactional && producer.producer_id < 0 {
        return Err(Error::config("a transactional batch needs a producer id, epoch and base sequence"));
    }
    let mut out = Vec::new();
    let mut encoded = 0u64;
    // Each finished batch is copied out and its buffer reused for the next.
    let mut finish = |mut builder: BatchBuilder| -> Result<Vec<u8>> {
        let count = builder.count() as u64;
        builder.set_producer(producer.advanced(encoded));
        if transactional {
            builder.set_transactional();
        }
        let (bytes, _) = builder.finish(encoded as i64)?;
        out.extend_from_slice(&bytes);
        encoded += count;
        Ok(bytes)
    };
    let first = BatchBuilder::new(compression, None, target);
    let last = fill_batches(first, records.iter().copied(), target, |full| {
        Ok(BatchBuilder::with_buffer(finish(full)?, compression, None))
    })?;
    finish(last)?;
    Ok(out)
}
