//! A batch's futures: `BatchState` (what the futures of one batch resolve from, set once by
//! `complete` or `fail`, with the callbacks registered before it resolved) and
//! `FutureRecordMetadata`, kafka-python's future of one `send()`. The producer's core
//! (`crate::producer`) carries a `BatchState` per batch as its opaque handle; the binding
//! (`producer.rs`, `drain.rs`) resolves it with the batch's outcome.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyTuple};

pyo3::import_exception!(kafkalite.errors, KafkaTimeoutError);

/// How often a `get()` without the GIL looks up for signals (Ctrl-C interrupts it, as it
/// interrupts a `threading.Event.wait`).
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// Lock a mutex whose state no panic can leave half-updated, even if a holder panicked.
/// Only for `BatchState`'s `Outcome` and `BatchBuffer` (and for collecting the batch states of a
/// poisoned `Accumulator`, read-only, to fail them): every change under those locks is one
/// field assignment, a `VecDeque` push or pop, or an `Option::take`, none of which can panic
/// part way (allocation failure aborts rather than unwinds). A batch's futures must stay
/// resolvable after a panic elsewhere: that is how they fail with `LogPoisonedError`.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
    pub(super) fn new(topic: &Py<PyString>, partition: i32, py: Python<'_>) -> Self {
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
    pub(super) fn fail(&self, py: Python<'_>, error: Py<PyAny>) -> PyResult<()> {
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
    pub(super) batch: Py<BatchState>,
    pub(super) index: i64,
    pub(super) timestamp: i64,
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
