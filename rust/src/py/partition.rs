//! A producer's per-partition state, native: what the drain (`drain.rs`) reads and keeps
//! while it appends a partition's batches — the partition's accumulator, its open log, the
//! drain lock that keeps one partition's appends (and callbacks) in order, the records in
//! flight, the time of the last append — and the per-thread count of drains and
//! acknowledgements under way (`CallbackDepth`). The Python producer reads and sets the same
//! state through these types, so neither side knows the other's attributes by name.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use super::future::lock;
use super::log::PyLog;
use super::producer::Accumulator;

/// How long a blocked `DrainLock.acquire` waits without the GIL before it checks for a
/// signal (Ctrl-C interrupts a wait for `threading.Lock` too).
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// `threading.Lock`'s interface over a Rust mutex: the drain takes it without a Python call,
/// and a blocked `acquire` waits without the GIL (the holder may need the GIL to finish).
#[pyclass(frozen, module = "kafkalite._native")]
pub struct DrainLock {
    held: Mutex<bool>,
    freed: Condvar,
    /// Threads in `acquire_waiting`: an unlock with none skips the wake-up (a system call).
    waiting: AtomicUsize,
}

impl DrainLock {
    fn new() -> Self {
        DrainLock { held: Mutex::new(false), freed: Condvar::new(), waiting: AtomicUsize::new(0) }
    }

    /// Take the lock if it is free.
    pub(super) fn try_acquire(&self) -> bool {
        !std::mem::replace(&mut *lock(&self.held), true)
    }

    pub(super) fn unlock(&self) -> bool {
        let was = std::mem::replace(&mut *lock(&self.held), false);
        // A waiter counted itself before it looked at `held` under the mutex: it saw `false`, or
        // is counted here (and the wait is sliced anyway).
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.freed.notify_one();
        }
        was
    }

    /// Wait for the lock without the GIL, at most `timeout`; a signal's exception ends the wait.
    fn acquire_waiting(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<bool> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let got = self.wait_sliced(py, timeout);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        got
    }

    fn wait_sliced(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let slice =
                deadline.map_or(SIGNAL_CHECK, |d| d.saturating_duration_since(Instant::now()).min(SIGNAL_CHECK));
            let got = py.detach(|| {
                let held = lock(&self.held);
                let (mut held, _) = self
                    .freed
                    .wait_timeout_while(held, slice, |h| *h)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                !std::mem::replace(&mut *held, true)
            });
            if got {
                return Ok(true);
            }
            py.check_signals()?;
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }
}

#[pymethods]
impl DrainLock {
    /// `threading.Lock.acquire`: True once taken; False when not blocking, or `timeout` passed.
    #[pyo3(signature = (blocking=true, timeout=-1.0))]
    fn acquire(&self, py: Python<'_>, blocking: bool, timeout: f64) -> PyResult<bool> {
        if self.try_acquire() {
            return Ok(true);
        }
        if !blocking {
            return Ok(false);
        }
        let timeout = (timeout >= 0.0).then(|| Duration::try_from_secs_f64(timeout).unwrap_or(Duration::MAX));
        self.acquire_waiting(py, timeout)
    }

    fn release(&self) -> PyResult<()> {
        if self.unlock() {
            Ok(())
        } else {
            Err(PyRuntimeError::new_err("release unlocked lock"))
        }
    }

    fn locked(&self) -> bool {
        *lock(&self.held)
    }

    fn __enter__(&self, py: Python<'_>) -> PyResult<bool> {
        self.acquire(py, true, -1.0)
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.release()
    }
}

/// The partition's open log: the Python `Log` the producer's Python code uses, and its native
/// handle, which the drain appends to; with the identity (device, inode) of the folder it was
/// opened on, to notice a deleted (and perhaps re-created) topic.
struct OpenLog {
    log: Py<PyAny>,
    native: Py<PyLog>,
    identity: Option<(u64, u64)>,
}

/// One partition of a producer's topic (`kafkalite.producer_topics._Partition`).
#[pyclass(frozen, name = "PartitionState", module = "kafkalite._native")]
pub struct PartitionState {
    topic: String,
    number: usize,
    acc: Py<Accumulator>,
    drain_lock: Py<DrainLock>,
    log: Mutex<Option<OpenLog>>,
    /// Records of the batches being appended now (counted by `pending()`, for the exit warning).
    inflight: AtomicUsize,
    /// `time.monotonic()` of the last append, as f64 bits (`metadata_max_idle_ms`).
    last_used: AtomicU64,
}

impl PartitionState {
    pub(super) fn topic_name(&self) -> &str {
        &self.topic
    }

    pub(super) fn partition(&self) -> usize {
        self.number
    }

    pub(super) fn accumulator<'py>(&self, py: Python<'py>) -> &Bound<'py, Accumulator> {
        self.acc.bind(py)
    }

    pub(super) fn lock(&self) -> &DrainLock {
        self.drain_lock.get()
    }

    /// The open log's native handle, if any (read under the drain lock: closing it holds it).
    pub(super) fn native_log(&self, py: Python<'_>) -> Option<Py<PyLog>> {
        lock(&self.log).as_ref().map(|open| open.native.clone_ref(py))
    }

    pub(super) fn set_inflight(&self, records: usize) {
        self.inflight.store(records, Ordering::Release);
    }

    pub(super) fn set_last_used(&self, at: f64) {
        self.last_used.store(at.to_bits(), Ordering::Release);
    }
}

#[pymethods]
impl PartitionState {
    #[new]
    fn new(py: Python<'_>, topic: String, number: usize, acc: Py<Accumulator>) -> PyResult<Self> {
        Ok(PartitionState {
            topic,
            number,
            acc,
            drain_lock: Py::new(py, DrainLock::new())?,
            log: Mutex::new(None),
            inflight: AtomicUsize::new(0),
            last_used: AtomicU64::new(0f64.to_bits()),
        })
    }

    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }

    #[getter]
    fn number(&self) -> usize {
        self.number
    }

    #[getter]
    fn acc(&self, py: Python<'_>) -> Py<Accumulator> {
        self.acc.clone_ref(py)
    }

    #[getter]
    fn drain_lock(&self, py: Python<'_>) -> Py<DrainLock> {
        self.drain_lock.clone_ref(py)
    }

    /// The open `Log`, or None.
    #[getter]
    fn log(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        lock(&self.log).as_ref().map(|open| open.log.clone_ref(py))
    }

    /// The (device, inode) of the folder the open log was opened on, or None.
    #[getter]
    fn identity(&self) -> Option<(u64, u64)> {
        lock(&self.log).as_ref().and_then(|open| open.identity)
    }

    /// The partition's log is now `log` (`native`: its `_native` handle), opened on the folder
    /// of `identity`. The caller holds the drain lock.
    fn set_log(&self, log: Py<PyAny>, native: Py<PyLog>, identity: Option<(u64, u64)>) {
        *lock(&self.log) = Some(OpenLog { log, native, identity });
    }

    /// Forget the open log (the caller closes it, holding the drain lock); returns it, or None.
    fn clear_log(&self) -> Option<Py<PyAny>> {
        lock(&self.log).take().map(|open| open.log)
    }

    #[getter]
    fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Acquire)
    }

    #[setter(inflight)]
    fn set_inflight_records(&self, records: usize) {
        self.set_inflight(records);
    }

    #[getter]
    fn last_used(&self) -> f64 {
        f64::from_bits(self.last_used.load(Ordering::Acquire))
    }

    #[setter(last_used)]
    fn set_last_used_at(&self, at: f64) {
        self.set_last_used(at);
    }

    fn __repr__(&self) -> String {
        format!("PartitionState({}-{})", self.topic, self.number)
    }
}

thread_local! {
    /// This thread's drains and acknowledgements under way (callbacks run inside them).
    static DEPTH: Cell<i64> = const { Cell::new(0) };
}

/// This thread's callback depth: above 0 inside a producer callback.
pub(super) fn callback_depth() -> i64 {
    DEPTH.with(Cell::get)
}

pub(super) fn set_callback_depth(depth: i64) {
    DEPTH.with(|d| d.set(depth));
}

/// `kafkalite.producer_callbacks._in_callbacks`: per thread, the drains and acknowledgements
/// under way (`depth`), kept natively so the native drain counts them without a Python call.
#[pyclass(frozen, module = "kafkalite._native")]
pub struct CallbackDepth;

#[pymethods]
impl CallbackDepth {
    #[new]
    fn new() -> Self {
        CallbackDepth
    }

    #[getter]
    fn depth(&self) -> i64 {
        callback_depth()
    }

    #[setter]
    fn set_depth(&self, depth: i64) {
        set_callback_depth(depth);
    }
}
