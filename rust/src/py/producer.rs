//! A producer's per-partition buffer: `send` encodes each record straight into a v2 batch in
//! Rust, so nothing per record is kept as a Python object until the batch is appended.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::partitioner;

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
    /// - `(index in the batch >= 0, the batch's size in bytes, the record's timestamp, the
    ///   record's size)`: added (the record's size, an upper bound, is what the sticky
    ///   partitioner counts);
    /// - `(FULL, size, ts, record size)`: the batch holds records and this one would push it past
    ///   `min(batch_size, max_bytes)`: the caller sends this batch and adds the record to the next;
    /// - `(TOO_LARGE, size of a batch holding only this record, ts, record size)`: no batch can hold the record
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
    ) -> PyResult<Option<(i64, usize, i64, usize)>> {
        let held = held_headers(headers)?;
        let hs = header_slices(&held)?;
        let timestamp = timestamp.unwrap_or_else(crate::log::now_ms);
        let record = RecordInput { key, value, headers: &hs, timestamp };
        let record_bytes = record_size_upper_bound(&record);
        if HEADER_LEN + record_bytes > max_bytes {
            return Ok(Some((TOO_LARGE, HEADER_LEN + record_bytes, timestamp, record_bytes)));
        }
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if guard.sealed {
            return Ok(None);
        }
        let builder = guard.builder.get_or_insert_with(|| BatchBuilder::new(self.compression, None, 16 * 1024));
        let index = builder.count();
        if index > 0 && builder.size() + record_bytes > batch_size.min(max_bytes) {
            return Ok(Some((FULL, builder.size(), timestamp, record_bytes)));
        }
        builder.push(&record);
        Ok(Some((index as i64, builder.size(), timestamp, record_bytes)))
    }

    fn __len__(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).builder.as_ref().map_or(0, |b| b.count())
    }

    /// Encoded bytes so far (uncompressed).
    fn size_bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).builder.as_ref().map_or(0, |b| b.size())
    }
}

/// A topic's keyless-record partitioner (`crate::partitioner::StickyPartitioner`), shared by
/// `send` and `send_batch` of one producer.
#[pyclass(frozen, module = "kafkalite._native")]
pub struct StickyPartitioner {
    inner: Mutex<partitioner::StickyPartitioner>,
}

impl StickyPartitioner {
    fn lock(&self) -> std::sync::MutexGuard<'_, partitioner::StickyPartitioner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl StickyPartitioner {
    #[new]
    fn new(partitions: u32, batch_size: usize, seed: u64) -> Self {
        StickyPartitioner { inner: Mutex::new(partitioner::StickyPartitioner::new(partitions, batch_size, seed)) }
    }

    /// The partition the next keyless record goes to.
    #[getter]
    fn current(&self) -> u32 {
        self.lock().current()
    }

    /// Count a record of `size` bytes appended to `current` (may move to another partition).
    fn appended(&self, size: usize) {
        self.lock().appended(size)
    }

    /// Place keyless records (`bytes` values, or None) in order: `(partition, start, end)` runs.
    fn runs(&self, values: &Bound<'_, PyList>, timestamp: i64) -> PyResult<Vec<(u32, usize, usize)>> {
        let mut sizes = Vec::with_capacity(values.len());
        for v in values.iter() {
            let bytes = if v.is_none() { None } else { Some(v.cast::<PyBytes>()?.clone()) };
            let value = bytes.as_ref().map(|b| b.as_bytes());
            sizes.push(record_size_upper_bound(&RecordInput { key: None, value, headers: &[], timestamp }));
        }
        Ok(self.lock().runs(sizes))
    }
}

/// The state of one `send()` future (`kafkalite.producer.FutureRecordMetadata` subclasses it):
/// the shared batch it resolves from, its index in that batch and its timestamp. Native so that
/// creating one per record costs an allocation, not a Python `__init__`.
#[pyclass(subclass, frozen, module = "kafkalite._native")]
pub struct FutureBase {
    #[pyo3(get, name = "_batch")]
    batch: Py<PyAny>,
    #[pyo3(get, name = "_index")]
    index: i64,
    #[pyo3(get, name = "_timestamp")]
    timestamp: i64,
}

#[pymethods]
impl FutureBase {
    #[new]
    fn new(batch: Py<PyAny>, index: i64, timestamp: i64) -> Self {
        FutureBase { batch, index, timestamp }
    }
}
