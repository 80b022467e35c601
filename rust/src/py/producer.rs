//! A producer's per-partition buffer: `send` encodes each record straight into a v2 batch in
//! Rust, so nothing per record is kept as a Python object until the batch is appended.

use std::sync::Mutex;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use crate::record::{BatchBuilder, Compression, Header, RecordInput};

#[pyclass(frozen, module = "kafkalite._native")]
pub struct BatchBuffer {
    compression: Compression,
    inner: Mutex<Option<BatchBuilder>>,
}

impl BatchBuffer {
    /// Take the batch built so far, leaving an empty buffer.
    pub fn take(&self) -> Option<BatchBuilder> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).take().filter(|b| b.count() > 0)
    }
}

#[pymethods]
impl BatchBuffer {
    #[new]
    #[pyo3(signature = (compression="none"))]
    fn new(compression: &str) -> PyResult<Self> {
        Ok(BatchBuffer { compression: Compression::parse_for_writing(compression)?, inner: Mutex::new(None) })
    }

    /// Encode one record; returns (its index in the batch, the batch's size in bytes).
    #[pyo3(signature = (value, key, headers, timestamp))]
    fn add(
        &self,
        value: Option<&[u8]>,
        key: Option<&[u8]>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: i64,
    ) -> PyResult<(usize, usize)> {
        let mut held: Vec<(Bound<'_, PyString>, Option<Bound<'_, PyBytes>>)> = Vec::new();
        if let Some(hs) = headers.filter(|h| !h.is_none()) {
            for item in hs.try_iter()? {
                let item = item?;
                let pair = item
                    .cast::<PyTuple>()
                    .map_err(|_| PyTypeError::new_err("each header must be a (str, bytes | None) tuple"))?;
                let (k, v): (Bound<'_, PyString>, Option<Bound<'_, PyBytes>>) = pair
                    .extract()
                    .map_err(|_| PyTypeError::new_err("each header must be a (str, bytes | None) tuple"))?;
                held.push((k, v));
            }
        }
        let hs: Vec<Header<'_>> =
            held.iter().map(|(k, v)| Ok((k.to_str()?, v.as_ref().map(|b| b.as_bytes())))).collect::<PyResult<_>>()?;
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let builder = guard.get_or_insert_with(|| BatchBuilder::new(self.compression, None, 16 * 1024));
        let index = builder.count();
        builder.push(&RecordInput { key, value, headers: &hs, timestamp });
        Ok((index, builder.size()))
    }

    fn __len__(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map_or(0, |b| b.count())
    }

    /// Encoded bytes so far (uncompressed).
    fn size_bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map_or(0, |b| b.size())
    }
}
