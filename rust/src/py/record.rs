//! `kafkalite.Record` and the conversions between records and Python objects.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyMemoryView, PyString, PyTuple};

use crate::storage::error::Result as EngineResult;
use crate::storage::log_read::RecordSink;
use crate::storage::record::{Header, RecordRef};

/// One Kafka record: `Record(value=None, key=None, headers=None, timestamp=None, offset=None)`.
/// `offset` and `timestamp` are filled in for records read from a log.
#[pyclass(frozen, module = "kafkalite", name = "Record")]
pub struct Record {
    #[pyo3(get)]
    pub offset: Option<i64>,
    #[pyo3(get)]
    pub timestamp: Option<i64>,
    #[pyo3(get)]
    pub key: Option<Py<PyBytes>>,
    #[pyo3(get)]
    pub value: Option<Py<PyBytes>>,
    /// `(str, bytes | None)` pairs; None when there are none (see `ConsumerRecord::headers`).
    pub headers: Option<Py<PyList>>,
}

/// Accept bytes, bytearray or memoryview (copied to bytes); refuse anything else clearly.
pub fn to_bytes<'py>(obj: Option<Bound<'py, PyAny>>, what: &str) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let Some(obj) = obj else { return Ok(None) };
    if obj.is_none() {
        return Ok(None);
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Some(b.clone()));
    }
    if obj.is_instance_of::<PyByteArray>() || obj.is_instance_of::<PyMemoryView>() {
        let b = obj.py().get_type::<PyBytes>().call1((obj,))?;
        return Ok(Some(b.cast_into::<PyBytes>()?));
    }
    Err(PyTypeError::new_err(format!(
        "record {what} must be bytes or None, not {}; encode text with .encode() or set a serializer",
        obj.get_type().name()?
    )))
}

/// Header pairs held as Python objects, so their bytes can be borrowed (also without the GIL).
pub type HeldHeaders<'py> = Vec<(Bound<'py, PyString>, Option<Bound<'py, PyBytes>>)>;

/// Validate headers, an iterable of `(str, bytes | None)` pairs (bytearray and memoryview
/// values are copied to bytes). The one place headers from Python are checked.
pub fn held_headers<'py>(headers: Option<&Bound<'py, PyAny>>) -> PyResult<HeldHeaders<'py>> {
    let mut out = Vec::new();
    let Some(headers) = headers.filter(|h| !h.is_none()) else { return Ok(out) };
    for item in headers.try_iter()? {
        let item = item?;
        let pair = item
            .cast::<PyTuple>()
            .map_err(|_| PyTypeError::new_err("each header must be a (str, bytes | None) tuple"))?;
        if pair.len() != 2 {
            return Err(PyTypeError::new_err("each header must be a (str, bytes | None) tuple"));
        }
        let key = pair.get_item(0)?;
        let key = key.cast_into::<PyString>().map_err(|e| {
            PyTypeError::new_err(format!(
                "header keys must be str, not {}",
                e.into_inner().get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        })?;
        out.push((key, to_bytes(Some(pair.get_item(1)?), "header value")?));
    }
    Ok(out)
}

/// Borrow held headers as the engine's `(key, value)` slices.
pub fn header_slices<'a>(held: &'a HeldHeaders<'_>) -> PyResult<Vec<Header<'a>>> {
    held.iter().map(|(k, v)| Ok((k.to_str()?, v.as_ref().map(|b| b.as_bytes())))).collect()
}

/// Validated headers as the list a `Record` keeps.
fn to_headers<'py>(py: Python<'py>, headers: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for (key, value) in held_headers(headers.as_ref())? {
        out.append(PyTuple::new(
            py,
            [key.into_any(), value.map(Bound::into_any).unwrap_or_else(|| py.None().into_bound(py))],
        )?)?;
    }
    Ok(out)
}

#[pymethods]
impl Record {
    #[new]
    #[pyo3(signature = (value=None, key=None, headers=None, timestamp=None, offset=None))]
    fn new<'py>(
        py: Python<'py>,
        value: Option<Bound<'py, PyAny>>,
        key: Option<Bound<'py, PyAny>>,
        headers: Option<Bound<'py, PyAny>>,
        timestamp: Option<i64>,
        offset: Option<i64>,
    ) -> PyResult<Self> {
        Ok(Record {
            offset,
            timestamp,
            key: to_bytes(key, "key")?.map(Bound::unbind),
            value: to_bytes(value, "value")?.map(Bound::unbind),
            headers: Some(to_headers(py, headers)?).filter(|h| !h.is_empty()).map(Bound::unbind),
        })
    }

    /// A list of `(str, bytes | None)` pairs (a new empty list when there are none).
    #[getter]
    fn headers(&self, py: Python<'_>) -> Py<PyList> {
        match &self.headers {
            Some(h) => h.clone_ref(py),
            None => PyList::empty(py).unbind(),
        }
    }

    fn _fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        (
            self.offset,
            self.timestamp,
            self.key.as_ref().map(|b| b.clone_ref(py)),
            self.value.as_ref().map(|b| b.clone_ref(py)),
            self.headers(py),
        )
            .into_pyobject(py)
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        match other.cast::<Record>() {
            Ok(o) => self._fields(py)?.eq(o.get()._fields(py)?),
            Err(_) => Ok(false),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let r = |o: &Option<Py<PyBytes>>| -> PyResult<String> {
            Ok(match o {
                Some(b) => b.bind(py).repr()?.to_string(),
                None => "None".into(),
            })
        };
        let opt = |o: Option<i64>| o.map_or("None".to_string(), |v| v.to_string());
        Ok(format!(
            "Record(offset={}, timestamp={}, key={}, value={}, headers={})",
            opt(self.offset),
            opt(self.timestamp),
            r(&self.key)?,
            r(&self.value)?,
            self.headers(py).bind(py).repr()?
        ))
    }
}

/// Kafka's murmur2 of `data` (a signed 32-bit int, as the Java client returns it).
#[pyfunction]
pub fn murmur2(data: &[u8]) -> i32 {
    crate::producer::partitioner::murmur2(data)
}

/// CRC-32C (Castagnoli), as stored in v2 batches over bytes 21..end.
#[pyfunction]
pub fn crc32c(data: &[u8]) -> u32 {
    crate::storage::record::header::crc32c(data)
}

/// Kafka's default partition of a non-null key, `(murmur2(key) & 0x7fffffff) % partitions`
/// (the Java client's `BuiltInPartitioner.partitionForKey`).
#[pyfunction]
pub fn partition_for_key(key: &[u8], partitions: u32) -> PyResult<u32> {
    if partitions == 0 {
        return Err(crate::Error::config("a topic has at least one partition").into());
    }
    Ok(crate::producer::partitioner::partition_for_key(key, partitions))
}

/// Kafka's default partition of each key, `(murmur2(key) & 0x7fffffff) % partitions`, for a
/// whole list at once (the bulk producer path).
#[pyfunction]
pub fn partitions_for_keys(keys: Vec<Vec<u8>>, partitions: u32) -> PyResult<Vec<u32>> {
    if partitions == 0 {
        return Err(crate::Error::config("a topic has at least one partition").into());
    }
    Ok(keys.iter().map(|k| crate::producer::partitioner::partition_for_key(k, partitions)).collect())
}

/// Records decoded without the GIL into one contiguous arena, turned into Python objects
/// afterwards: one copy of the bytes and a handful of allocations per chunk.
#[derive(Default)]
pub struct RecordArena {
    data: Vec<u8>,
    records: Vec<ArenaRecord>,
    headers: Vec<(Span, Option<Span>)>,
}

type Span = (usize, usize);

struct ArenaRecord {
    offset: i64,
    timestamp: i64,
    log_append_time: bool,
    key: Option<Span>,
    value: Option<Span>,
    headers: Span,
}

impl RecordArena {
    fn put(&mut self, b: &[u8]) -> Span {
        let start = self.data.len();
        self.data.extend_from_slice(b);
        (start, self.data.len())
    }

    fn bytes(&self, py: Python<'_>, s: Span) -> Py<PyBytes> {
        PyBytes::new(py, &self.data[s.0..s.1]).unbind()
    }

    /// The record's headers as a list, or None when it has none.
    fn headers_of(&self, py: Python<'_>, r: &ArenaRecord) -> PyResult<Option<Py<PyList>>> {
        if r.headers.0 == r.headers.1 {
            return Ok(None);
        }
        let headers = PyList::empty(py);
        for (k, v) in &self.headers[r.headers.0..r.headers.1] {
            let key = std::str::from_utf8(&self.data[k.0..k.1]).expect("validated by the decoder");
            headers.append((key, v.map(|v| self.bytes(py, v))))?;
        }
        Ok(Some(headers.unbind()))
    }

    pub fn into_records(self, py: Python<'_>) -> PyResult<Vec<Py<Record>>> {
        let mut out = Vec::with_capacity(self.records.len());
        for r in &self.records {
            out.push(Py::new(
                py,
                Record {
                    offset: Some(r.offset),
                    timestamp: Some(r.timestamp),
                    key: r.key.map(|s| self.bytes(py, s)),
                    value: r.value.map(|s| self.bytes(py, s)),
                    headers: self.headers_of(py, r)?,
                },
            )?);
        }
        Ok(out)
    }

    /// The records as kafka-python-shaped `ConsumerRecord`s of one topic-partition.
    pub fn into_consumer_records(
        self,
        py: Python<'_>,
        topic: &Py<PyString>,
        partition: i32,
    ) -> PyResult<Vec<Py<super::consumer::ConsumerRecord>>> {
        let mut out = Vec::with_capacity(self.records.len());
        for r in &self.records {
            let size = |s: Option<Span>| s.map_or(-1, |s| (s.1 - s.0) as i64);
            let header_size = self.headers[r.headers.0..r.headers.1]
                .iter()
                .map(|(k, v)| (k.1 - k.0) + v.map_or(0, |v| v.1 - v.0))
                .sum::<usize>() as i64;
            let record = Bound::new(
                py,
                super::consumer::ConsumerRecord {
                    topic: topic.clone_ref(py),
                    partition,
                    offset: r.offset,
                    timestamp: r.timestamp,
                    timestamp_type: if r.log_append_time { 1 } else { 0 },
                    key: r.key.map(|s| self.bytes(py, s).into_any()),
                    value: r.value.map(|s| self.bytes(py, s).into_any()),
                    headers: self.headers_of(py, r)?,
                    serialized_key_size: size(r.key),
                    serialized_value_size: size(r.value),
                    serialized_header_size: if r.headers.0 == r.headers.1 { -1 } else { header_size },
                },
            )?;
            // ConsumerRecord has no __traverse__ (the GC cannot see its fields anyway): being
            // tracked would only make every collection walk each record still held.
            super::gc_untrack(&record);
            out.push(record.unbind());
        }
        Ok(out)
    }
}

impl RecordSink for RecordArena {
    fn push(&mut self, r: &RecordRef<'_>) -> EngineResult<()> {
        let key = r.key.map(|k| self.put(k));
        let value = r.value.map(|v| self.put(v));
        let h_start = self.headers.len();
        for (k, v) in &r.headers {
            let ks = self.put(k.as_bytes());
            let vs = v.map(|v| self.put(v));
            self.headers.push((ks, vs));
        }
        self.records.push(ArenaRecord {
            offset: r.offset,
            timestamp: r.timestamp,
            log_append_time: r.log_append_time,
            key,
            value,
            headers: (h_start, self.headers.len()),
        });
        Ok(())
    }
}
