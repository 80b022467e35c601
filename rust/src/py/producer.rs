//! The producer's per-record path, native end to end: `Accumulator.send` checks a record,
//! has the producer's core (`crate::producer::Accumulator`) place it (murmur2 of the key, or
//! the sticky partitioner) and encode it into that partition's v2 batch, and returns its
//! `FutureRecordMetadata`, in one call. Sealed batches wait in order for the caller (or the
//! sender thread) to take and append (`drain.rs`). This file converts: Python arguments in,
//! futures (`future.rs`) and answer codes out, a panic in the core into `LogPoisonedError`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};
use pyo3::IntoPyObjectExt;

use crate::producer::partitioner;
use crate::producer::{self as core, Placed, Refusal};
use crate::storage::record::record::record_size_upper_bound;
use crate::storage::record::{BatchBuilder, Compression, RecordInput};

use super::future::{lock, BatchState, FutureRecordMetadata};
use super::record::{header_slices, held_headers};

/// `Accumulator.send`'s answers other than a bare future, `(code, a, future or None)`:
/// the record fits no batch on its own (`a`: its size as a batch of its own).
pub const TOO_LARGE: i64 = -2;
/// Neither key nor value.
pub const NO_KEY_OR_VALUE: i64 = -3;
/// No key, to a compacted topic.
pub const NULL_KEY: i64 = -4;
/// The producer closed (or its sender thread died): nothing is queued any more, since nothing
/// would append it (`Accumulator.close`).
pub const CLOSED: i64 = -5;
/// Flag: partition `a` has full batches queued: the caller appends them now (`take(a, False)`).
pub const DRAIN: i64 = 1;
/// Flag: the record started partition `a`'s batch: the sender appends it after `linger_ms`.
pub const FIRST: i64 = 2;

/// A full batch handed to `PyLog.append_buffer` (which takes its records out).
#[pyclass(frozen, module = "kafkalite._native")]
pub struct BatchBuffer {
    inner: Mutex<Option<BatchBuilder>>,
}

impl BatchBuffer {
    /// The batch's records (once: the buffer is empty afterwards).
    pub fn take(&self) -> Option<BatchBuilder> {
        lock(&self.inner).take().filter(|b| b.count() > 0)
    }

    /// A buffer holding `builder` (a batch the native drain hands to the Python path).
    pub(super) fn holding(builder: BatchBuilder) -> Self {
        BatchBuffer { inner: Mutex::new(Some(builder)) }
    }

    /// Give back records taken and not appended (the log's folder was replaced: the caller
    /// appends them to the reopened partition).
    pub fn put_back(&self, builder: BatchBuilder) {
        *lock(&self.inner) = Some(builder);
    }
}

#[pymethods]
impl BatchBuffer {
    fn __len__(&self) -> usize {
        lock(&self.inner).as_ref().map_or(0, |b| b.count())
    }

    /// Encoded bytes (uncompressed).
    fn size_bytes(&self) -> usize {
        lock(&self.inner).as_ref().map_or(0, |b| b.size())
    }
}

/// A topic's keyless-record partitioner (`crate::producer::partitioner::StickyPartitioner`), shared by
/// `send` and `send_batch` of one producer.
#[pyclass(frozen, module = "kafkalite._native")]
pub struct StickyPartitioner {
    /// Shared with the topic's `Accumulator`, which places `send`'s keyless records with it.
    inner: Arc<Mutex<partitioner::StickyPartitioner>>,
}

#[pymethods]
impl StickyPartitioner {
    #[new]
    fn new(partitions: u32, batch_size: usize, seed: u64) -> Self {
        StickyPartitioner {
            inner: Arc::new(Mutex::new(partitioner::StickyPartitioner::new(partitions, batch_size, seed))),
        }
    }

    /// The partition the next keyless record goes to.
    #[getter]
    fn current(&self) -> PyResult<u32> {
        Ok(self.locked()?.current())
    }

    /// Count a record of `size` bytes appended to `current` (may move to another partition).
    fn appended(&self, size: usize) -> PyResult<()> {
        self.locked()?.appended(size);
        Ok(())
    }

    /// Place keyless records (`bytes` values, or None) in order: `(partition, start, end)` runs.
    fn runs(&self, values: &Bound<'_, PyList>, timestamp: i64) -> PyResult<Vec<(u32, usize, usize)>> {
        let mut sizes = Vec::with_capacity(values.len());
        for v in values.iter() {
            let bytes = if v.is_none() { None } else { Some(v.cast::<PyBytes>()?.clone()) };
            let value = bytes.as_ref().map(|b| b.as_bytes());
            sizes.push(record_size_upper_bound(&RecordInput { key: None, value, headers: &[], timestamp }));
        }
        Ok(self.locked()?.runs(sizes))
    }
}

impl StickyPartitioner {
    fn locked(&self) -> PyResult<MutexGuard<'_, partitioner::StickyPartitioner>> {
        Ok(crate::storage::sync::lock_log(&self.inner, || "a producer's sticky partitioner".into())?)
    }
}

/// A producer's record accumulator for one topic (Kafka's `RecordAccumulator`): the core's,
/// with a `BatchState` per batch.
#[pyclass(frozen, module = "kafkalite._native")]
pub struct Accumulator {
    topic: Py<PyString>,
    core: Mutex<core::Accumulator<Py<BatchState>>>,
}

#[pymethods]
impl Accumulator {
    #[new]
    fn new(topic: Py<PyString>, batch_size: usize) -> Self {
        Accumulator { topic, core: Mutex::new(core::Accumulator::new(batch_size)) }
    }

    /// Take the topic's (possibly new) settings: partition count, the sticky partitioner of
    /// keyless records, the codec of new batches, whether keys are required, and the hard cap
    /// of an encoded batch. Returns the batches (with records) of partitions beyond the new
    /// count, for the caller to fail: the topic that had them is gone.
    fn configure(
        &self,
        py: Python<'_>,
        partitions: usize,
        sticky: Py<StickyPartitioner>,
        compression: &str,
        compacted: bool,
        max_bytes: usize,
    ) -> PyResult<Vec<Py<BatchState>>> {
        let compression = Compression::parse(compression)?;
        let sticky = Arc::clone(&sticky.get().inner);
        self.with_core(py, |acc| Ok(acc.configure(partitions, sticky, compression, compacted, max_bytes)))
    }

    /// Refuse every later record (`send` answers `CLOSED`), as Kafka's `RecordAccumulator.close`:
    /// the producer is closing (or its sender died) and takes what is queued one last time.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.with_core(py, |acc| {
            acc.close();
            Ok(())
        })
    }

    /// Queue one record (`crate::producer::Accumulator::append`): to `partition`, else by the
    /// key's murmur2, else to the sticky partition. Returns the record's future, or
    /// `(code, partition or size, future or None)` when the caller has more to do (see the
    /// constants). `timestamp` defaults to now. A key, value or headers of the wrong type raise
    /// `TypeError`. (`ProducerCore.send` calls this directly, without a Python call in between.)
    #[pyo3(signature = (value, key, headers, partition, timestamp))]
    pub(super) fn send<'py>(
        &self,
        py: Python<'py>,
        value: Option<&[u8]>,
        key: Option<&[u8]>,
        headers: Option<&Bound<'py, PyAny>>,
        partition: Option<usize>,
        timestamp: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // A record with neither key nor value is refused whatever its headers: not read then.
        let held = if key.is_none() && value.is_none() { Vec::new() } else { held_headers(headers)? };
        let hs = header_slices(&held)?;
        let timestamp = timestamp.unwrap_or_else(crate::storage::log::now_ms);
        let record = RecordInput { key, value, headers: &hs, timestamp };
        let sent = self.with_core(py, |acc| {
            let placed = acc.append(&record, partition, |n| Py::new(py, BatchState::new(&self.topic, n as i32, py)))?;
            let q = match placed {
                Placed::Queued(q) => q,
                Placed::Refused(why) => return refused(why),
            };
            let future = FutureRecordMetadata { batch: q.batch.clone_ref(py), index: q.index as i64, timestamp };
            let flags = if q.full { DRAIN } else { 0 } | if q.first { FIRST } else { 0 };
            Ok(Sent::Future(future, flags, q.partition))
        })?;
        let (future, flags, number) = match sent {
            Sent::Code(code, a) => return (code, a, py.None()).into_bound_py_any(py),
            Sent::Future(future, flags, number) => (future, flags, number),
        };
        let future = Bound::new(py, future)?;
        // A future refers to its batch only, and a batch never to futures: no cycle runs
        // through it, and a program keeping a million futures would otherwise pay GC passes
        // over all of them again and again.
        super::gc_untrack(&future);
        if flags == 0 {
            Ok(future.into_any())
        } else {
            (flags, number, future).into_bound_py_any(py)
        }
    }

    /// Partition `partition`'s queued full batches, oldest first, with the one being built
    /// when `current`: `[(BatchBuffer, BatchState)]`, to append in that order.
    fn take(&self, py: Python<'_>, partition: usize, current: bool) -> PyResult<Vec<(BatchBuffer, Py<BatchState>)>> {
        Ok(self
            .take_batches(py, partition, current)?
            .into_iter()
            .map(|(b, state)| (BatchBuffer::holding(b), state))
            .collect())
    }

    /// `(batches, records, bytes, largest batch's bytes)` taken for appending so far (bytes
    /// uncompressed, with the batch header): what `Producer.metrics()` reports.
    fn taken(&self, py: Python<'_>) -> PyResult<(u64, u64, u64, u64)> {
        self.with_core(py, |acc| {
            let t = acc.taken();
            Ok((t.batches, t.records, t.bytes, t.max_batch_bytes))
        })
    }

    /// Records queued and not taken, of one partition or of all.
    #[pyo3(signature = (partition=None))]
    fn pending(&self, py: Python<'_>, partition: Option<usize>) -> PyResult<usize> {
        self.with_core(py, |acc| Ok(acc.pending(partition)))
    }

    /// Seconds until `linger` seconds passed since partition `partition`'s latest batch got
    /// its first record (0 once due; `crate::producer::Accumulator::linger_left`); None when
    /// no record ever went to the partition.
    fn linger_left(&self, py: Python<'_>, partition: usize, linger: f64) -> PyResult<Option<f64>> {
        let linger = Duration::try_from_secs_f64(linger).unwrap_or(Duration::MAX);
        self.with_core(py, |acc| Ok(acc.linger_left(partition, linger, Instant::now()).map(|d| d.as_secs_f64())))
    }
}

/// The answer `send` gives for a refused record: a code for the Python path to raise with,
/// or `IndexError` for a partition the topic lacks.
fn refused(why: Refusal) -> PyResult<Sent> {
    Ok(match why {
        Refusal::Closed => Sent::Code(CLOSED, 0),
        Refusal::NoKeyOrValue => Sent::Code(NO_KEY_OR_VALUE, 0),
        Refusal::NullKey => Sent::Code(NULL_KEY, 0),
        Refusal::TooLarge(size) => Sent::Code(TOO_LARGE, size),
        Refusal::NoPartition { count: 0, .. } => {
            return Err(PyIndexError::new_err("the topic has no partitions configured"))
        }
        Refusal::NoPartition { partition, count } => {
            return Err(PyIndexError::new_err(format!("topic has no partition {partition} (it has {count})")))
        }
    })
}

/// Where `Accumulator::send` put a record: in a batch (its future, the flags, the partition),
/// or nowhere, with the code and value the caller acts on.
enum Sent {
    Code(i64, usize),
    Future(FutureRecordMetadata, i64, usize),
}

impl Accumulator {
    /// `take`, for the native drain: the batches themselves.
    pub(super) fn take_batches(
        &self,
        py: Python<'_>,
        partition: usize,
        current: bool,
    ) -> PyResult<Vec<(BatchBuilder, Py<BatchState>)>> {
        self.with_core(py, |acc| Ok(acc.take(partition, current)))
    }

    /// Run `f` on the core. A panic inside (a bug) may leave a batch half encoded, so it never
    /// crosses into Python as `PanicException`: the mutex stays poisoned, the futures of every
    /// record not yet handed to the log fail with `LogPoisonedError` (they would otherwise
    /// never resolve), and this call and every later one raise it.
    fn with_core<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut core::Accumulator<Py<BatchState>>) -> PyResult<R>,
    ) -> PyResult<R> {
        // The guard is taken inside the closure so that unwinding drops it, which poisons the mutex.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match self.core.lock() {
            Ok(mut acc) => Some(f(&mut acc)),
            Err(_) => None,
        }));
        match run {
            Ok(Some(result)) => result,
            Ok(None) => Err(self.poisoned(py)),
            Err(payload) => {
                ::log::error!(
                    target: "kafkalite.producer",
                    "{}: the producer of topic {} refuses records from now on",
                    crate::storage::log::panic_message(&*payload),
                    self.topic.bind(py)
                );
                Err(self.poisoned(py))
            }
        }
    }

    /// Fail the futures of every batch still held (a panic poisoned the mutex) and return the error.
    fn poisoned(&self, py: Python<'_>) -> PyErr {
        let topic = self.topic.bind(py).to_string();
        let err = PyErr::from(crate::Error::LogPoisoned(format!("the record accumulator of topic {topic:?}")));
        // Collected first, then failed without the lock: an errback may call the producer again.
        // (Read-only: failing them changes nothing under the lock.)
        let states: Vec<Py<BatchState>> = lock(&self.core).batches().map(|st| st.clone_ref(py)).collect();
        for state in states {
            if let Err(e) = state.get().fail(py, err.value(py).clone().into_any().unbind()) {
                return e; // KeyboardInterrupt or SystemExit in an errback: raised instead
            }
        }
        err
    }
}
