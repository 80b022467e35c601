//! The producer's drain of one partition, the only one: take the partition's queued batches
//! from its `Accumulator`, append them to the partition's open log in order (the core's
//! `crate::producer::append_in_order`), resolve their futures (callbacks run here, in order)
//! and wake the readers. `ProducerCore.send` calls it when a batch fills, the sender thread
//! and flush through `_Sender.drain`. A Python frame per batch (the lock, the take, the append,
//! the completion) cost tens of microseconds, hundreds of nanoseconds per record.
//!
//! The state it keeps is the partition's native `PartitionState` (`partition.rs`). What needs
//! the producer's Python side goes through the `DrainHooks` the sender gave: under acks='all'
//! an appended batch goes to the producer's acknowledging thread (`DurableAcks.hand`); a batch
//! for a partition with no open log, or whose folder was replaced (the topic deleted, perhaps
//! re-created), goes to `_Sender.append_one`, which reopens the partition or fails it typed;
//! a failed append to `_Sender.append_failed`, which counts and logs it.
//!
//! `drain_partition` does nothing and answers False when the partition's drain lock is taken
//! (the caller then waits for it, without the GIL, and calls `drain_locked`) or inside a
//! callback (a send there hands its batches to the sender thread: this thread may hold the lock).

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::{PyTraverseError, PyVisit};

use crate::producer::{append_in_order, Appended, BatchSink, Drained};
use crate::storage::record::BatchBuilder;

use super::future::BatchState;
use super::log::PyLog;
use super::partition::{callback_depth, set_callback_depth, PartitionState};
use super::producer::BatchBuffer;

/// The producer's Python side, as the drain and `ProducerCore.send` call it: the sender's
/// `notify`, `wake`, `append_one`, `append_failed` and its acknowledging thread's `hand`.
#[pyclass(module = "kafkalite._native")]
pub struct DrainHooks {
    calls: Option<Hooks>,
}

struct Hooks {
    notify: Py<PyAny>,
    wake: Py<PyAny>,
    append_one: Py<PyAny>,
    append_failed: Py<PyAny>,
    hand: Py<PyAny>,
}

#[pymethods]
impl DrainHooks {
    #[new]
    fn new(
        notify: Py<PyAny>,
        wake: Py<PyAny>,
        append_one: Py<PyAny>,
        append_failed: Py<PyAny>,
        hand: Py<PyAny>,
    ) -> Self {
        DrainHooks { calls: Some(Hooks { notify, wake, append_one, append_failed, hand }) }
    }

    // The hooks are the sender's bound methods and the sender holds this: a cycle the garbage
    // collector must see to collect an abandoned producer.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(h) = &self.calls {
            for f in [&h.notify, &h.wake, &h.append_one, &h.append_failed, &h.hand] {
                visit.call(f)?;
            }
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.calls = None;
    }
}

/// The hook `pick` chooses, or an error once the collector cleared them (the sender is gone).
fn hook<'py>(hooks: &Bound<'py, DrainHooks>, pick: fn(&Hooks) -> &Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let borrowed = hooks.borrow();
    let calls = borrowed
        .calls
        .as_ref()
        .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("the producer's sender is gone"))?;
    Ok(pick(calls).bind(hooks.py()).clone())
}

/// `_Sender.wake(p)`: the sender thread appends `p`'s batch after `linger_ms`.
pub(super) fn wake(hooks: &Bound<'_, DrainHooks>, p: &Bound<'_, PartitionState>) -> PyResult<()> {
    hook(hooks, |h| &h.wake)?.call1((p,)).map(drop)
}

/// `DurableAcks.hand`: the acknowledging thread resolves `appended` once `mark` is durable.
pub(super) fn hand(
    hooks: &Bound<'_, DrainHooks>,
    appended: (Py<BatchState>, i64, Option<i64>),
    mark: Py<super::durable::DurableMark>,
    records: usize,
    place: String,
) -> PyResult<()> {
    hook(hooks, |h| &h.hand)?.call1((appended, mark, records, place)).map(drop)
}

/// Append partition `p`'s queued batches (and the one being built when `current`); False,
/// having done nothing, when the drain lock is taken or inside a callback (module comment).
#[pyfunction]
pub fn drain_partition(hooks: &Bound<'_, DrainHooks>, p: &Bound<'_, PartitionState>, current: bool) -> PyResult<bool> {
    if callback_depth() > 0 || !p.get().lock().try_acquire() {
        return Ok(false);
    }
    let drained = drain_locked(hooks, p, current);
    p.get().lock().unlock();
    if drained? {
        hook(hooks, |h| &h.notify)?.call0()?;
    }
    Ok(true)
}

/// The partition's open log as the core's drain sees it: the producer's append (the GIL kept
/// unless another thread or writer holds the log), refusing a folder that was replaced; with
/// no log open, every batch is handed on as for a replaced folder (`append_one` opens it).
struct OpenLog<'a, 'py> {
    log: Option<&'a Bound<'py, PyLog>>,
}

impl BatchSink for OpenLog<'_, '_> {
    type Error = PyErr;

    fn append(&mut self, builder: BatchBuilder) -> PyResult<Result<Appended, BatchBuilder>> {
        let Some(log) = self.log else { return Ok(Err(builder)) };
        let appended = log.get().append_batch(log.py(), builder, true)?;
        Ok(appended.map(|((first_offset, last_offset), ticket, log_append_time)| Appended {
            first_offset,
            last_offset,
            log_append_time,
            ticket,
        }))
    }
}

/// Append the partition's batches; the caller holds its drain lock (and notifies the readers
/// when this returns True: it took a batch).
#[pyfunction]
pub fn drain_locked(hooks: &Bound<'_, DrainHooks>, p: &Bound<'_, PartitionState>, current: bool) -> PyResult<bool> {
    let py = p.py();
    let state = p.get();
    let taken = state.accumulator(py).get().take_batches(py, state.partition(), current)?;
    if taken.is_empty() {
        return Ok(false);
    }
    let mut queued: usize = taken.iter().map(|(b, _)| b.count()).sum();
    state.set_inflight(queued);
    state.set_last_used(monotonic(py)?);
    // Read under the lock: closing a partition's log (idle, deleted) holds it.
    let log = state.native_log(py).map(|log| log.into_bound(py));
    let depth = callback_depth();
    set_callback_depth(depth + 1);
    // Every taken batch is appended and resolved even when a callback raises KeyboardInterrupt
    // or SystemExit (raised below, once they all were): the core's drain gives every batch its
    // outcome, and only the first such error is kept.
    let mut interrupted: Option<PyErr> = None;
    let mut first_error = |r: PyResult<()>| {
        if let Err(e) = r {
            interrupted.get_or_insert(e);
        }
    };
    append_in_order(&mut OpenLog { log: log.as_ref() }, taken, |outcome| match outcome {
        Drained::Appended { batch, records, at } => {
            queued -= records;
            state.set_inflight(queued);
            first_error(match (at.ticket, &log) {
                // acks='all': acknowledged once group commit synced it (`_Sender.append_one`).
                (Some(ticket), Some(log)) => super::durable::hand(
                    hooks,
                    state,
                    log,
                    batch,
                    (at.first_offset, at.log_append_time),
                    ticket,
                    records,
                ),
                _ => batch.get().complete(py, at.first_offset, at.log_append_time),
            });
        }
        Drained::Replaced { batch, builder } => {
            // No log, or its folder was replaced: `append_one` reopens the partition (or fails
            // the batches typed) for this batch and every later one, in order, and counts it
            // off `inflight`.
            let buffer = BatchBuffer::holding(builder);
            first_error(hook(hooks, |h| &h.append_one).and_then(|f| f.call1((p, buffer, batch)).map(drop)));
        }
        Drained::Failed { batch, records, error } => {
            queued -= records;
            state.set_inflight(queued);
            let failed = hook(hooks, |h| &h.append_failed)
                .and_then(|f| f.call1((p, records, batch, error.into_value(py))).map(drop));
            first_error(failed);
        }
    });
    state.set_inflight(0);
    set_callback_depth(callback_depth() - 1);
    interrupted.map_or(Ok(true), Err)
}

/// `time.monotonic()`, the clock of `PartitionState.last_used` (the idle check reads it).
fn monotonic(py: Python<'_>) -> PyResult<f64> {
    static MONOTONIC: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    MONOTONIC.import(py, "time", "monotonic")?.call0()?.extract()
}
