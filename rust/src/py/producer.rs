//! The producer's per-record path, native end to end: `Accumulator.send` validates a record,
//! picks its partition (murmur2 of the key, or the sticky partitioner), encodes it into that
//! partition's v2 batch and returns its `FutureRecordMetadata`, in one call. Full batches are
//! queued in order for the caller (or the sender thread) to append; `BatchState` is what the
//! futures of one batch resolve from.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyException, PyIndexError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3::IntoPyObjectExt;

use crate::partitioner;

use crate::record::header::HEADER_LEN;
use crate::record::record::record_size_upper_bound;
use crate::record::{BatchBuilder, Compression, RecordInput};

use super::record::{header_slices, held_headers};

pyo3::import_exception!(kafkalite.errors, KafkaTimeoutError);

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

/// The initial capacity of a batch's buffer (it grows up to `batch_size`).
const BATCH_CAPACITY: usize = 16 * 1024;
/// How often a `get()` without the GIL looks up for signals (Ctrl-C interrupts it, as it
/// interrupts a `threading.Event.wait`).
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// Lock a mutex whose state no panic can leave half-updated, even if a holder panicked.
/// Only for `BatchState`'s `Outcome` and `BatchBuffer` (and for collecting the batch states of a
/// poisoned `Accumulator`, read-only, to fail them): every change under those locks is one
/// field assignment, a `VecDeque` push or pop, or an `Option::take`, none of which can panic
/// part way (allocation failure aborts rather than unwinds). A batch's futures must stay
/// resolvable after a panic elsewhere: that is how they fail with `LogPoisonedError`.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Lock a mutex whose state a panic may have left half-updated (a batch half encoded, a
/// partitioner half moved), or raise `LogPoisonedError` naming `what`.
fn lock_or_raise<'a, T>(m: &'a Mutex<T>, what: impl FnOnce() -> String) -> PyResult<MutexGuard<'a, T>> {
    Ok(crate::sync::lock_log(m, what)?)
}

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

/// A topic's keyless-record partitioner (`crate::partitioner::StickyPartitioner`), shared by
/// `send` and `send_batch` of one producer.
#[pyclass(frozen, module = "kafkalite._native")]
pub struct StickyPartitioner {
    inner: Mutex<partitioner::StickyPartitioner>,
}

#[pymethods]
impl StickyPartitioner {
    #[new]
    fn new(partitions: u32, batch_size: usize, seed: u64) -> Self {
        StickyPartitioner { inner: Mutex::new(partitioner::StickyPartitioner::new(partitions, batch_size, seed)) }
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
        lock_or_raise(&self.inner, || "a producer's sticky partitioner".into())
    }
}

/// What the futures of one batch wait on: set once, by `complete` or `fail`.
#[pyclass(frozen, module = "kafkalite._native")]
pub struct BatchState {
    #[pyo3(get)]
    topic: Py<PyString>,
    #[pyo3(get)]
    partition: i32,
    state: Mutex<Outcome>,
    resolved: Condvar,
}

struct Outcome {
    done: bool,
    first_offset: i64,
    log_append_time: Option<i64>,
    error: Option<Py<PyAny>>,
    /// Registered before the batch resolved; run in order by whoever resolves it.
    callbacks: VecDeque<Callback>,
}

struct Callback {
    on_success: bool,
    func: Py<PyAny>,
    args: Py<PyTuple>,
    index: i64,
    timestamp: i64,
}

impl BatchState {
    fn new(topic: &Py<PyString>, partition: i32, py: Python<'_>) -> Self {
        BatchState {
            topic: topic.clone_ref(py),
            partition,
            state: Mutex::new(Outcome {
                done: false,
                first_offset: -1,
                log_append_time: None,
                error: None,
                callbacks: VecDeque::new(),
            }),
            resolved: Condvar::new(),
        }
    }

    fn resolve(&self, py: Python<'_>, set: impl FnOnce(&mut Outcome)) -> PyResult<()> {
        {
            let mut s = lock(&self.state);
            if s.done {
                return Ok(());
            }
            set(&mut s);
            s.done = true;
        }
        self.resolved.notify_all();
        // Popped one at a time without the lock held: a callback may call get() or add_callback.
        // A KeyboardInterrupt or SystemExit (not the callback's own failure) is raised once the
        // batch's other callbacks ran: stopping here would drop them, as they are popped only here.
        let mut interrupted = None;
        while let Some(cb) = self.next_callback() {
            if let Err(e) = self.run(py, &cb) {
                interrupted.get_or_insert(e);
            }
        }
        interrupted.map_or(Ok(()), Err)
    }

    /// Run a callback of a resolved batch: a failure of its own (an `Exception`) is logged, as
    /// kafka-python does, and the record's result stands; a KeyboardInterrupt or SystemExit is
    /// returned.
    fn run(&self, py: Python<'_>, cb: &Callback) -> PyResult<()> {
        match self.fire(py, cb) {
            Err(e) if e.is_instance_of::<PyException>(py) => {
                log_callback_failure(py, &cb.func, e);
                Ok(())
            }
            result => result,
        }
    }

    fn next_callback(&self) -> Option<Callback> {
        lock(&self.state).callbacks.pop_front()
    }

    /// Call a callback of a resolved batch: `func(*args, metadata)` if written and it is a
    /// callback, `func(*args, exception)` if failed and it is an errback.
    fn fire(&self, py: Python<'_>, cb: &Callback) -> PyResult<()> {
        let (error, first, log_append_time) = {
            let s = lock(&self.state);
            (s.error.as_ref().map(|e| e.clone_ref(py)), s.first_offset, s.log_append_time)
        };
        let last = match (cb.on_success, error) {
            (true, None) => self.metadata(py, first, log_append_time, cb.index, cb.timestamp)?,
            (false, Some(err)) => err.into_bound(py),
            _ => return Ok(()),
        };
        let mut args: Vec<Bound<'_, PyAny>> = cb.args.bind(py).iter().collect();
        args.push(last);
        cb.func.bind(py).call1(PyTuple::new(py, args)?)?;
        Ok(())
    }

    /// kafka-python's `RecordMetadata(topic, partition, offset, timestamp)` of record `index`.
    fn metadata<'py>(
        &self,
        py: Python<'py>,
        first: i64,
        log_append_time: Option<i64>,
        index: i64,
        timestamp: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        static RECORD_METADATA: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let cls = RECORD_METADATA.import(py, "kafkalite.producer", "RecordMetadata")?;
        cls.call1((self.topic.clone_ref(py), self.partition, first + index, log_append_time.unwrap_or(timestamp)))
    }
}

/// A failing user callback is logged, as kafka-python does; the record's result stands.
fn log_callback_failure(py: Python<'_>, func: &Py<PyAny>, e: PyErr) {
    static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let logged = LOGGER
        .get_or_try_init(py, || {
            py.import("logging")?.call_method1("getLogger", ("kafkalite.producer",)).map(Bound::unbind)
        })
        .and_then(|logger| {
            let kwargs = PyDict::new(py);
            kwargs.set_item("exc_info", e.value(py))?;
            logger.bind(py).call_method(
                "error",
                ("a producer callback (%r) raised; the record's result is unaffected", func.clone_ref(py)),
                Some(&kwargs),
            )
        });
    if let Err(log_error) = logged {
        e.print(py);
        log_error.print(py);
    }
}

#[pymethods]
impl BatchState {
    /// The batch is in the log from `first_offset`: resolve its futures, run their callbacks.
    #[pyo3(signature = (first_offset, log_append_time=None))]
    pub(super) fn complete(&self, py: Python<'_>, first_offset: i64, log_append_time: Option<i64>) -> PyResult<()> {
        self.resolve(py, |s| {
            s.first_offset = first_offset;
            s.log_append_time = log_append_time;
        })
    }

    /// Writing the batch failed with `error`: fail its futures, run their errbacks.
    fn fail(&self, py: Python<'_>, error: Py<PyAny>) -> PyResult<()> {
        self.resolve(py, |s| s.error = Some(error))
    }

    #[getter]
    fn done(&self) -> bool {
        lock(&self.state).done
    }

    #[getter]
    fn error(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        lock(&self.state).error.as_ref().map(|e| e.clone_ref(py))
    }
}

/// kafka-python's future of one `send()`: `get(timeout)`, `add_callback`, `add_errback`,
/// `is_done`, `succeeded()`, `failed()`, `value`, `exception`.
#[pyclass(frozen, module = "kafkalite.producer", name = "FutureRecordMetadata")]
pub struct FutureRecordMetadata {
    batch: Py<BatchState>,
    index: i64,
    timestamp: i64,
}

impl FutureRecordMetadata {
    /// (done, error) now.
    fn outcome(&self, py: Python<'_>) -> (bool, Option<Py<PyAny>>) {
        let s = lock(&self.batch.get().state);
        (s.done, s.error.as_ref().map(|e| e.clone_ref(py)))
    }

    fn written<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let b = self.batch.get();
        let (first, log_append_time) = {
            let s = lock(&b.state);
            (s.first_offset, s.log_append_time)
        };
        b.metadata(py, first, log_append_time, self.index, self.timestamp)
    }

    fn add(slf: Bound<'_, Self>, on_success: bool, func: Py<PyAny>, args: Py<PyTuple>) -> PyResult<Bound<'_, Self>> {
        let py = slf.py();
        let (batch, index, timestamp) = {
            let me = slf.get();
            (me.batch.clone_ref(py), me.index, me.timestamp)
        };
        let cb = Callback { on_success, func, args, index, timestamp };
        let b = batch.get();
        let cb = {
            let mut s = lock(&b.state);
            if !s.done {
                s.callbacks.push_back(cb);
                return Ok(slf);
            }
            cb
        };
        // Resolved already: now, in the caller's thread. Its failure is logged as when the
        // drain runs it (kafka-python's Future.add_callback does the same): whether send()
        // appended the batch before this call is timing, and must not decide whether it raises.
        b.run(py, &cb)?;
        Ok(slf)
    }
}

#[pymethods]
impl FutureRecordMetadata {
    /// True once the record was written or failed.
    #[getter]
    fn is_done(&self) -> bool {
        lock(&self.batch.get().state).done
    }

    /// True once the record was written.
    fn succeeded(&self, py: Python<'_>) -> bool {
        matches!(self.outcome(py), (true, None))
    }

    /// True once writing the record failed (see `exception`).
    fn failed(&self, py: Python<'_>) -> bool {
        matches!(self.outcome(py), (true, Some(_)))
    }

    /// The RecordMetadata of a written record, else None.
    #[getter]
    fn value<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.outcome(py) {
            (true, None) => self.written(py).map(Some),
            _ => Ok(None),
        }
    }

    /// The error of a failed record, else None.
    #[getter]
    fn exception(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.outcome(py).1
    }

    /// Wait until the record is in the log and return where; raise what went wrong
    /// (`KafkaTimeoutError` when `timeout` seconds pass first).
    #[pyo3(signature = (timeout=None))]
    fn get<'py>(&self, py: Python<'py>, timeout: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        static CHECK_TIMEOUT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let mut deadline = None;
        if let Some(t) = timeout.as_ref().filter(|t| !t.is_none()) {
            let seconds: f64 =
                CHECK_TIMEOUT.import(py, "kafkalite.validate", "timeout")?.call1(("timeout", t))?.extract()?;
            // A wait too long for an Instant is a wait without limit.
            deadline = Duration::try_from_secs_f64(seconds).ok().and_then(|d| Instant::now().checked_add(d));
        }
        let b = self.batch.get();
        loop {
            let slice =
                deadline.map_or(SIGNAL_CHECK, |d| d.saturating_duration_since(Instant::now()).min(SIGNAL_CHECK));
            let done = py.detach(|| {
                let s = lock(&b.state);
                let (s, _) = b.resolved.wait_timeout_while(s, slice, |s| !s.done).unwrap_or_else(|p| p.into_inner());
                s.done
            });
            if done {
                break;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                let shown =
                    timeout.as_ref().map_or_else(|| Ok("None".to_string()), |t| t.str().map(|s| s.to_string()))?;
                return Err(KafkaTimeoutError::new_err(format!("record not written within {shown} s")));
            }
            py.check_signals()?;
        }
        match self.outcome(py).1 {
            Some(err) => Err(PyErr::from_value(err.into_bound(py))),
            None => self.written(py),
        }
    }

    /// Call `fn(*args, metadata)` once the record is written.
    #[pyo3(signature = (func, *args))]
    fn add_callback<'py>(slf: Bound<'py, Self>, func: Py<PyAny>, args: Py<PyTuple>) -> PyResult<Bound<'py, Self>> {
        Self::add(slf, true, func, args)
    }

    /// Call `fn(*args, exception)` if writing fails.
    #[pyo3(signature = (func, *args))]
    fn add_errback<'py>(slf: Bound<'py, Self>, func: Py<PyAny>, args: Py<PyTuple>) -> PyResult<Bound<'py, Self>> {
        Self::add(slf, false, func, args)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let b = self.batch.get();
        let state = match self.outcome(py) {
            (false, _) => "pending",
            (true, None) => "written",
            (true, Some(_)) => "failed",
        };
        format!("<FutureRecordMetadata {}-{} #{} {state}>", b.topic.bind(py), b.partition, self.index)
    }
}

/// One partition's records not yet handed to the log: the batch being built, the state its
/// futures share, and the full batches waiting (in order) to be appended.
struct Slot {
    builder: Option<BatchBuilder>,
    batch: Py<BatchState>,
    full: VecDeque<(BatchBuilder, Py<BatchState>)>,
}

impl Slot {
    fn new(py: Python<'_>, topic: &Py<PyString>, partition: usize) -> PyResult<Self> {
        Ok(Slot {
            builder: None,
            batch: Py::new(py, BatchState::new(topic, partition as i32, py))?,
            full: VecDeque::new(),
        })
    }

    /// Queue the batch being built (if it holds records) and start another.
    fn seal(&mut self, py: Python<'_>, topic: &Py<PyString>, partition: usize) -> PyResult<()> {
        if self.builder.as_ref().is_some_and(|b| b.count() > 0) {
            let fresh = Py::new(py, BatchState::new(topic, partition as i32, py))?;
            let batch = std::mem::replace(&mut self.batch, fresh);
            if let Some(builder) = self.builder.take() {
                self.full.push_back((builder, batch));
            }
        }
        Ok(())
    }

    fn records(&self) -> usize {
        self.builder.as_ref().map_or(0, |b| b.count()) + self.full.iter().map(|(b, _)| b.count()).sum::<usize>()
    }
}

struct Batches {
    slots: Vec<Slot>,
    sticky: Option<Py<StickyPartitioner>>,
    compression: Compression,
    compacted: bool,
    max_bytes: usize,
    batch_size: usize,
    /// Set by `Accumulator.close`: `send` refuses records (`CLOSED`). Checked under the same
    /// lock that queues a record, so a send that passed the producer's own open-check before
    /// close() and queues after close()'s last take cannot leave a record nobody appends.
    closed: bool,
    /// What `take` handed out for appending, for `Producer.metrics()`: counted per batch,
    /// under the lock the take holds anyway.
    taken: TakenStats,
}

/// Batches taken for appending since the accumulator was made.
#[derive(Default, Clone, Copy)]
struct TakenStats {
    batches: u64,
    records: u64,
    bytes: u64,
    max_batch_bytes: u64,
}

/// A producer's record accumulator for one topic (Kafka's `RecordAccumulator`).
#[pyclass(frozen, module = "kafkalite._native")]
pub struct Accumulator {
    topic: Py<PyString>,
    batches: Mutex<Batches>,
}

#[pymethods]
impl Accumulator {
    #[new]
    fn new(topic: Py<PyString>, batch_size: usize) -> Self {
        let batches = Batches {
            slots: Vec::new(),
            sticky: None,
            compression: Compression::None,
            compacted: false,
            max_bytes: usize::MAX,
            batch_size,
            closed: false,
            taken: TakenStats::default(),
        };
        Accumulator { topic, batches: Mutex::new(batches) }
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
        self.with_batches(py, |b| {
            let mut dropped = Vec::new();
            let kept = partitions.min(b.slots.len());
            for (n, mut slot) in b.slots.drain(kept..).enumerate() {
                slot.seal(py, &self.topic, kept + n)?;
                dropped.extend(slot.full.into_iter().map(|(_, state)| state));
            }
            for n in b.slots.len()..partitions {
                let slot = Slot::new(py, &self.topic, n)?;
                b.slots.push(slot);
            }
            b.sticky = Some(sticky);
            b.compression = compression;
            b.compacted = compacted;
            b.max_bytes = max_bytes;
            Ok(dropped)
        })
    }

    /// Refuse every later record (`send` answers `CLOSED`), as Kafka's `RecordAccumulator.close`:
    /// the producer is closing (or its sender died) and takes what is queued one last time.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.with_batches(py, |b| {
            b.closed = true;
            Ok(())
        })
    }

    /// Queue one record, as Kafka's `RecordAccumulator.append`: to `partition`, else by the
    /// key's murmur2, else to the sticky partition. Returns the record's future, or
    /// `(code, partition or size, future or None)` when the caller has more to do (see the
    /// constants). A record that would push a batch past `min(batch_size, max_bytes)` starts
    /// the next batch; a batch that reached `batch_size` is queued full. `timestamp` defaults
    /// to now. A key, value or headers of the wrong type raise `TypeError`.
    /// (`ProducerCore.send` calls this directly, without a Python call in between.)
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
        if value.is_none() && key.is_none() {
            return (NO_KEY_OR_VALUE, 0, py.None()).into_bound_py_any(py);
        }
        let held = held_headers(headers)?;
        let hs = header_slices(&held)?;
        let timestamp = timestamp.unwrap_or_else(crate::log::now_ms);
        let record = RecordInput { key, value, headers: &hs, timestamp };
        let record_bytes = record_size_upper_bound(&record);
        let placed = self.with_batches(py, |b| {
            if b.closed {
                return Ok(Placed::Code(CLOSED, 0));
            }
            if key.is_none() && b.compacted {
                return Ok(Placed::Code(NULL_KEY, 0));
            }
            if HEADER_LEN + record_bytes > b.max_bytes {
                return Ok(Placed::Code(TOO_LARGE, HEADER_LEN + record_bytes));
            }
            let count = b.slots.len();
            if count == 0 {
                return Err(PyIndexError::new_err("the topic has no partitions configured"));
            }
            let sticky = b.sticky.as_ref().map(|s| s.get());
            let (number, sticky) = match (partition, key, sticky) {
                (Some(n), _, _) => (n, None),
                (None, Some(k), _) => (partitioner::partition_for_key(k, count as u32) as usize, None),
                (None, None, Some(s)) => (s.locked()?.current() as usize, Some(s)),
                (None, None, None) => (0, None),
            };
            let limit = b.batch_size.min(b.max_bytes);
            let Some(slot) = b.slots.get_mut(number) else {
                return Err(PyIndexError::new_err(format!("topic has no partition {number} (it has {count})")));
            };
            let mut flags = 0;
            if slot.builder.as_ref().is_some_and(|s| s.count() > 0 && s.size() + record_bytes > limit) {
                slot.seal(py, &self.topic, number)?;
                flags |= DRAIN;
            }
            let builder = slot.builder.get_or_insert_with(|| BatchBuilder::new(b.compression, None, BATCH_CAPACITY));
            let index = builder.count();
            builder.push(&record);
            // Here the batch holds a record no future stands for yet: a panic now is the worst
            // case. Only the `panic` (and `kill`) actions mean anything: this step does no I/O.
            let _ = crate::failpoint::hit("producer.accumulate");
            let future = FutureRecordMetadata { batch: slot.batch.clone_ref(py), index: index as i64, timestamp };
            if builder.size() >= b.batch_size {
                slot.seal(py, &self.topic, number)?;
                flags |= DRAIN;
            } else if index == 0 {
                flags |= FIRST;
            }
            if let Some(s) = sticky {
                s.locked()?.appended(record_bytes);
            }
            Ok(Placed::Future(future, flags, number))
        })?;
        let (future, flags, number) = match placed {
            Placed::Code(code, a) => return (code, a, py.None()).into_bound_py_any(py),
            Placed::Future(future, flags, number) => (future, flags, number),
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
        self.with_batches(py, |b| {
            let t = b.taken;
            Ok((t.batches, t.records, t.bytes, t.max_batch_bytes))
        })
    }

    /// Records queued and not taken, of one partition or of all.
    #[pyo3(signature = (partition=None))]
    fn pending(&self, py: Python<'_>, partition: Option<usize>) -> PyResult<usize> {
        self.with_batches(py, |b| {
            Ok(match partition {
                Some(n) => b.slots.get(n).map_or(0, Slot::records),
                None => b.slots.iter().map(Slot::records).sum(),
            })
        })
    }
}

/// Where `Accumulator::send` put a record: in a batch (its future, the flags, the partition),
/// or nowhere, with the code and value the caller acts on.
enum Placed {
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
        self.with_batches(py, |b| {
            let Some(slot) = b.slots.get_mut(partition) else { return Ok(Vec::new()) };
            if current {
                slot.seal(py, &self.topic, partition)?;
            }
            for (builder, _) in &slot.full {
                let size = builder.size() as u64;
                b.taken.batches += 1;
                b.taken.records += builder.count() as u64;
                b.taken.bytes += size;
                b.taken.max_batch_bytes = b.taken.max_batch_bytes.max(size);
            }
            Ok(slot.full.drain(..).collect())
        })
    }

    /// Run `f` on the batches. A panic inside (a bug) may leave a batch half encoded, so it
    /// never crosses into Python as `PanicException`: the mutex stays poisoned, the futures of
    /// every record not yet handed to the log fail with `LogPoisonedError` (they would
    /// otherwise never resolve), and this call and every later one raise it.
    fn with_batches<R>(&self, py: Python<'_>, f: impl FnOnce(&mut Batches) -> PyResult<R>) -> PyResult<R> {
        // The guard is taken inside the closure so that unwinding drops it, which poisons the mutex.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match self.batches.lock() {
            Ok(mut b) => Some(f(&mut b)),
            Err(_) => None,
        }));
        match run {
            Ok(Some(result)) => result,
            Ok(None) => Err(self.poisoned(py)),
            Err(payload) => {
                ::log::error!(
                    target: "kafkalite.producer",
                    "{}: the producer of topic {} refuses records from now on",
                    crate::log::panic_message(&*payload),
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
        let states: Vec<Py<BatchState>> = {
            let b = lock(&self.batches);
            let held = b.slots.iter().flat_map(|s| std::iter::once(&s.batch).chain(s.full.iter().map(|(_, st)| st)));
            held.map(|st| st.clone_ref(py)).collect()
        };
        for state in states {
            if let Err(e) = state.get().fail(py, err.value(py).clone().into_any().unbind()) {
                return e; // KeyboardInterrupt or SystemExit in an errback: raised instead
            }
        }
        err
    }
}
