//! A producer's per-partition buffer: `send` encodes each record straight into a v2 batch in
//! Rust, so nothing per record is kept as a Python object until the batch is appended.

use std::sync::Mutex;

use pyo3::prelude::*;

use crate::record::header::HEADER_LEN;
use crate::record::record::record_size_upper_bound;
use crate::record::{BatchBuilder, Compression, RecordInput};

use super::record::{header_slices, held_headers};

/// `BatchBuffer.add`'s answer when the record does not fit the batch (send it, start another).
pub const FULL: i64 = -1;
/// `BatchBuffer.add`'s answer when the record does not fit any batch on its own.
pub const TOO_LARGE: i64 = -2;

#[pyclass(frozen, module = "kafkalite._native")]
pub struct BatchBuffer {
    compression: Compression,
    inner: Mutex<Buffered>,
}

/// The batch so far, and whether it was taken for appending (then `add` refuses, and the
/// sender retries on the partition's next buffer: no Python-side lock is needed).
#[derive(Default)]
struct Buffered {
    builder: Option<BatchBuilder>,
    sealed: bool,
}

impl BatchBuffer {
    /// Take the batch built so far and seal the buffer against further records.
    pub fn take(&self) -> Option<BatchBuilder> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.sealed = true;
        inner.builder.take().filter(|b| b.count() > 0)
    }
}

#[pymethods]
impl BatchBuffer {
    #[new]
    #[pyo3(signature = (compression="none"))]
    fn new(compression: &str) -> PyResult<Self> {
        Ok(BatchBuffer {
            compression: Compression::parse_for_writing(compression)?,
            inner: Mutex::new(Buffered::default()),
        })
    }

    /// Encode one record into this batch, as Kafka's `RecordAccumulator.tryAppend` does.
    /// Returns one of:
    /// - `(index in the batch >= 0, the batch's size in bytes, the record's timestamp)`: added;
    /// - `(FULL, size, ts)`: the batch holds records and this one would push it past
    ///   `min(batch_size, max_bytes)`: the caller sends this batch and adds the record to the next;
    /// - `(TOO_LARGE, size of a batch holding only this record, ts)`: no batch can hold the record
    ///   within `max_bytes` (the hard cap: the topic's max.message.bytes / max_request_size);
    /// - `None`: the buffer was already taken for appending (the caller retries on the new one).
    ///
    /// Sizes are encoded batch bytes including the 61-byte batch header and log overhead
    /// (uncompressed, so an upper bound of what a compressed batch takes). `timestamp`
    /// defaults to now.
    #[pyo3(signature = (value, key, headers, timestamp, batch_size, max_bytes))]
    #[allow(clippy::too_many_arguments)]
    fn add(
        &self,
        value: Option<&[u8]>,
        key: Option<&[u8]>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: Option<i64>,
        batch_size: usize,
        max_bytes: usize,
    ) -> PyResult<Option<(i64, usize, i64)>> {
        let held = held_headers(headers)?;
        let hs = header_slices(&held)?;
        let timestamp = timestamp.unwrap_or_else(crate::log::now_ms);
        let record = RecordInput { key, value, headers: &hs, timestamp };
        let record_bytes = record_size_upper_bound(&record);
        if HEADER_LEN + record_bytes > max_bytes {
            return Ok(Some((TOO_LARGE, HEADER_LEN + record_bytes, timestamp)));
        }
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if guard.sealed {
            return Ok(None);
        }
        let builder = guard.builder.get_or_insert_with(|| BatchBuilder::new(self.compression, None, 16 * 1024));
        let index = builder.count();
        if index > 0 && builder.size() + record_bytes > batch_size.min(max_bytes) {
            return Ok(Some((FULL, builder.size(), timestamp)));
        }
        builder.push(&record);
        Ok(Some((index as i64, builder.size(), timestamp)))
    }

    fn __len__(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).builder.as_ref().map_or(0, |b| b.count())
    }

    /// Encoded bytes so far (uncompressed).
    fn size_bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).builder.as_ref().map_or(0, |b| b.size())
    }
}
