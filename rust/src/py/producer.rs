//! A producer's per-partition buffer: `send` encodes each record straight into a v2 batch in
//! Rust, so nothing per record is kept as a Python object until the batch is appended.

use std::sync::Mutex;

use pyo3::prelude::*;

use crate::record::{BatchBuilder, Compression, RecordInput};

use super::record::{header_slices, held_headers};

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

    /// Encode one record; returns (its index in the batch, the batch's size in bytes, its
    /// timestamp), or None if the buffer was already taken (the caller retries on the new one).
    /// `timestamp` defaults to now; a record larger than `max_bytes` is refused.
    #[pyo3(signature = (value, key, headers, timestamp, max_bytes))]
    fn add(
        &self,
        value: Option<&[u8]>,
        key: Option<&[u8]>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: Option<i64>,
        max_bytes: usize,
    ) -> PyResult<Option<(usize, usize, i64)>> {
        let size = value.map_or(0, <[u8]>::len) + key.map_or(0, <[u8]>::len);
        if size > max_bytes {
            return Err(crate::Error::RecordTooLarge { size, max: max_bytes }.into());
        }
        let held = held_headers(headers)?;
        let hs = header_slices(&held)?;
        let timestamp = timestamp.unwrap_or_else(crate::log::now_ms);
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if guard.sealed {
            return Ok(None);
        }
        let builder = guard.builder.get_or_insert_with(|| BatchBuilder::new(self.compression, None, 16 * 1024));
        let index = builder.count();
        builder.push(&RecordInput { key, value, headers: &hs, timestamp });
        Ok(Some((index, builder.size(), timestamp)))
    }

    fn __len__(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).builder.as_ref().map_or(0, |b| b.count())
    }

    /// Encoded bytes so far (uncompressed).
    fn size_bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).builder.as_ref().map_or(0, |b| b.size())
    }
}
