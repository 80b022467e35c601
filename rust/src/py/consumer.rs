//! kafka-python's `ConsumerRecord`, built in Rust straight from decoded batches, and the
//! cross-process `Notifier` a caught-up consumer sleeps on.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

use crate::storage::notify::Notifier as EngineNotifier;

/// A consumed record, with kafka-python's attribute names.
#[pyclass(frozen, module = "kafkalite", name = "ConsumerRecord")]
pub struct ConsumerRecord {
    #[pyo3(get)]
    pub topic: Py<PyString>,
    #[pyo3(get)]
    pub partition: i32,
    #[pyo3(get)]
    pub offset: i64,
    #[pyo3(get)]
    pub timestamp: i64,
    /// 0 = CreateTime, 1 = LogAppendTime (kafka-python's convention).
    #[pyo3(get)]
    pub timestamp_type: i32,
    #[pyo3(get)]
    pub key: Option<Py<PyAny>>,
    #[pyo3(get)]
    pub value: Option<Py<PyAny>>,
    /// None when the record has no headers: no empty list is allocated per record (each one
    /// would be another object for the cyclic GC to walk); the getter returns a new `[]`.
    pub headers: Option<Py<PyList>>,
    #[pyo3(get)]
    pub serialized_key_size: i64,
    #[pyo3(get)]
    pub serialized_value_size: i64,
    #[pyo3(get)]
    pub serialized_header_size: i64,
}

#[pymethods]
impl ConsumerRecord {
    /// The record's headers, `[(key, value), ...]` (a new empty list when there are none).
    #[getter]
    fn headers(&self, py: Python<'_>) -> Py<PyList> {
        match &self.headers {
            Some(h) => h.clone_ref(py),
            None => PyList::empty(py).unbind(),
        }
    }

    /// Not tracked on disk by kafkalite (always None), kept for kafka-python compatibility.
    #[getter]
    fn leader_epoch(&self) -> Option<i32> {
        None
    }

    /// v2 batches carry a CRC per batch, not per record (kafka-python also returns None).
    #[getter]
    fn checksum(&self) -> Option<i64> {
        None
    }

    /// A copy with the key and value replaced (used to apply deserializers).
    fn _with_key_value(&self, py: Python<'_>, key: Option<Py<PyAny>>, value: Option<Py<PyAny>>) -> Self {
        ConsumerRecord {
            topic: self.topic.clone_ref(py),
            partition: self.partition,
            offset: self.offset,
            timestamp: self.timestamp,
            timestamp_type: self.timestamp_type,
            key,
            value,
            headers: self.headers.as_ref().map(|h| h.clone_ref(py)),
            serialized_key_size: self.serialized_key_size,
            serialized_value_size: self.serialized_value_size,
            serialized_header_size: self.serialized_header_size,
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let show = |o: &Option<Py<PyAny>>| -> PyResult<String> {
            Ok(match o {
                Some(v) => v.bind(py).repr()?.to_string(),
                None => "None".into(),
            })
        };
        Ok(format!(
            "ConsumerRecord(topic={}, partition={}, offset={}, timestamp={}, timestamp_type={}, key={}, value={}, headers={})",
            self.topic.bind(py).repr()?,
            self.partition,
            self.offset,
            self.timestamp,
            self.timestamp_type,
            show(&self.key)?,
            show(&self.value)?,
            self.headers(py).bind(py).repr()?
        ))
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(other) = other.cast::<ConsumerRecord>() else { return Ok(false) };
        self.identity(py)?.eq(other.get().identity(py)?)
    }
}

impl ConsumerRecord {
    /// The fields that make two records equal, as a Python tuple.
    fn identity<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let opt = |o: &Option<Py<PyAny>>| o.as_ref().map(|v| v.clone_ref(py));
        (
            self.topic.clone_ref(py),
            self.partition,
            self.offset,
            self.timestamp,
            opt(&self.key),
            opt(&self.value),
            self.headers(py),
        )
            .into_pyobject(py)
    }
}

/// Wake-ups across processes (see `notify.rs`).
#[pyclass(frozen, module = "kafkalite._native")]
pub struct Notifier {
    inner: EngineNotifier,
}

#[pymethods]
impl Notifier {
    #[new]
    fn new(path: std::path::PathBuf) -> PyResult<Self> {
        Ok(Notifier { inner: EngineNotifier::open(&path)? })
    }

    fn sequence(&self) -> u32 {
        self.inner.sequence()
    }

    fn notify(&self) {
        self.inner.notify()
    }

    /// Sleep (without the GIL) until the sequence moves past `seen` or `timeout_ms` passes.
    fn wait(&self, py: Python<'_>, seen: u32, timeout_ms: u64) -> bool {
        py.detach(|| self.inner.wait(seen, Duration::from_millis(timeout_ms)))
    }
}
