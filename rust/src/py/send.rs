//! `Producer.send` as a native method: `kafkalite.Producer` subclasses `ProducerCore`, so the
//! common call (a known topic, bytes key and value, no explicit partition or timestamp, no
//! serializer or custom partitioner, the producer open) runs no Python frame at all: it finds
//! the topic's `Accumulator` and queues the record there (`Accumulator::send`); a batch it
//! fills is appended here too (`drain.rs`), and a batch it starts wakes the sender thread. Every
//! other call, and every answer the native path does not take (a refused record, a drain that
//! must wait or is unusual), goes to the producer's Python methods `_send_slow` and `_sent`,
//! which hold the rules: this file only decides which path a call takes. A Python frame per
//! record cost about as much as the rest of `send` together.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use pyo3::exceptions::{PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use super::drain::{drain_partition, wake, DrainHooks};
use super::errors::IllegalStateError;
use super::future::FutureRecordMetadata;
use super::partition::PartitionState;
use super::producer::{Accumulator, DRAIN, FIRST};

/// Whether a producer still takes records: shut when it closes or its sender thread dies
/// (then every send takes the Python path, which raises why). Owned by the sender, which
/// holds no reference to the producer; `ProducerCore` only reads it.
#[pyclass(frozen, module = "kafkalite._native")]
pub struct SendGate {
    open: AtomicBool,
}

#[pymethods]
impl SendGate {
    #[new]
    fn new() -> Self {
        SendGate { open: AtomicBool::new(true) }
    }

    /// Send every later record through `Producer._send_slow` (which raises for a closed producer).
    fn shut(&self) {
        self.open.store(false, Ordering::Release);
    }

    /// Let records take the native path again: a transactional producer's gate is shut
    /// between transactions (`Producer.begin_transaction` reopens it; a closed producer's
    /// accumulators refuse records anyway, so a reopen racing a close loses none).
    fn reopen(&self) {
        self.open.store(true, Ordering::Release);
    }

    #[getter]
    fn open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }
}

/// What `ProducerCore.send` needs, given once by `Producer.__init__`.
struct Setup {
    /// Topic name -> `(its Accumulator, its partitions' PartitionState list)` (the sender adds
    /// a topic when it first uses it; the list grows and shrinks in place with the topic).
    accumulators: Py<PyDict>,
    gate: Py<SendGate>,
    /// False when a serializer or a custom partitioner must see every record (Python path).
    direct: bool,
    /// The sender's side of the native drain (`drain.rs`) and its wake-up.
    hooks: Py<DrainHooks>,
}

/// The native base of `kafkalite.Producer`: its `send`.
#[pyclass(subclass, frozen, module = "kafkalite._native")]
pub struct ProducerCore {
    setup: OnceLock<Setup>,
}

#[pymethods]
impl ProducerCore {
    /// Takes (and ignores) the subclass's constructor arguments: `Producer.__init__` reads them
    /// and calls `_setup_send`.
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        ProducerCore { setup: OnceLock::new() }
    }

    /// Give `send` the topics' accumulators and partitions (a dict the sender fills), the gate,
    /// whether records may skip the Python path, and the sender's drain hooks. Once per producer.
    fn _setup_send(
        &self,
        accumulators: Py<PyDict>,
        gate: Py<SendGate>,
        direct: bool,
        hooks: Py<DrainHooks>,
    ) -> PyResult<()> {
        self.setup
            .set(Setup { accumulators, gate, direct, hooks })
            .map_err(|_| PyRuntimeError::new_err("the producer's send path is set up already"))
    }

    /// Queue one record; returns a future of its ``RecordMetadata``.
    #[pyo3(signature = (topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None))]
    fn send<'py>(
        slf: &Bound<'py, Self>,
        topic: &Bound<'py, PyAny>,
        value: Option<&Bound<'py, PyAny>>,
        key: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
        partition: Option<&Bound<'py, PyAny>>,
        timestamp_ms: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let slow = || {
            if slf.get().setup.get().is_none() {
                // Built with Producer.__new__, or sending before (or after a failed) __init__:
                // the Python path would fail on a missing attribute.
                return Err(IllegalStateError::new_err(
                    "this Producer is not initialised (Producer.__init__ did not run, or failed): create it with Producer(path, ...)",
                ));
            }
            slf.call_method1(intern!(py, "_send_slow"), (topic, value, key, headers, partition, timestamp_ms))
        };
        let Some((acc, partitions)) = slf.get().direct_accumulator(py, topic, partition, timestamp_ms) else {
            return slow();
        };
        let (Some(value), Some(key)) = (as_bytes(value), as_bytes(key)) else { return slow() };
        match acc.get().send(py, value, key, headers, None, None) {
            Ok(sent) if sent.is_instance_of::<FutureRecordMetadata>() => Ok(sent),
            Ok(sent) => match slf.get().after_send(&partitions, &sent)? {
                Some(future) => Ok(future),
                None => slf.call_method1(intern!(py, "_sent"), (topic, sent)),
            },
            // Refused before anything was queued (bad headers): the Python path names the problem.
            Err(e)
                if e.is_instance_of::<PyTypeError>(py)
                    || e.is_instance_of::<PyValueError>(py)
                    || e.is_instance_of::<PyOverflowError>(py) =>
            {
                slow()
            }
            Err(e) => Err(e),
        }
    }
}

impl ProducerCore {
    /// `Producer._after_send` for a queued record, natively: append the partition's full batches
    /// now (`drain.rs`) and wake the sender for a new batch. None, having done nothing, when the
    /// Python path must answer (a refused record, or a drain the native path does not take).
    fn after_send<'py>(
        &self,
        partitions: &Bound<'py, PyAny>,
        sent: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = partitions.py();
        let Some(setup) = self.setup.get() else { return Ok(None) };
        let Ok((flags, number, future)) = sent.extract::<(i64, usize, Bound<'py, FutureRecordMetadata>)>() else {
            return Ok(None); // a refusal code: no future
        };
        if flags <= 0 {
            return Ok(None);
        }
        let hooks = setup.hooks.bind(py);
        let p = partitions.get_item(number)?.cast_into::<PartitionState>()?;
        if flags & DRAIN != 0 && !drain_partition(hooks, &p, false)? {
            return Ok(None);
        }
        if flags & FIRST != 0 {
            // The core noted when the batch started: the sender lingers from then.
            wake(hooks, &p)?;
        }
        Ok(Some(future.into_any()))
    }

    /// The topic's accumulator and partition list when this call may skip the Python path.
    fn direct_accumulator<'py>(
        &self,
        py: Python<'py>,
        topic: &Bound<'py, PyAny>,
        partition: Option<&Bound<'py, PyAny>>,
        timestamp_ms: Option<&Bound<'py, PyAny>>,
    ) -> Option<(Bound<'py, Accumulator>, Bound<'py, PyAny>)> {
        let setup = self.setup.get()?;
        if !setup.direct || partition.is_some() || timestamp_ms.is_some() || !setup.gate.get().open() {
            return None;
        }
        // An unknown topic (created by the Python path) or an unhashable one: the Python path.
        let entry = setup.accumulators.bind(py).get_item(topic).ok()??;
        let entry = entry.cast_into::<PyTuple>().ok()?;
        let acc = entry.get_item(0).ok()?.cast_into::<Accumulator>().ok()?;
        Some((acc, entry.get_item(1).ok()?))
    }
}

/// A key or value the direct path takes: None, or `bytes` (anything else: the Python path,
/// which converts or refuses it). The outer None means "not direct".
fn as_bytes<'a>(item: Option<&'a Bound<'_, PyAny>>) -> Option<Option<&'a [u8]>> {
    match item {
        None => Some(None),
        Some(b) => b.cast::<PyBytes>().ok().map(|b| Some(b.as_bytes())),
    }
}
