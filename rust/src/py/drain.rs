//! The producer's drain of one partition, native: take the partition's queued batches from its
//! `Accumulator`, append them to the partition's open log in order (the core's
//! `crate::producer::append_in_order`), resolve their futures (callbacks run here, in order)
//! and wake the readers. `ProducerCore.send` calls it when a batch fills, and
//! the sender thread's `_Sender.drain` tries it first. A Python frame per batch (the lock, the
//! take, the append, the completion) cost tens of microseconds, hundreds of nanoseconds per
//! record at ~130 records a batch.
//!
//! It keeps the Python path's bookkeeping (`_Partition.drain_lock`, `inflight`, `last_used`,
//! `_in_callbacks.depth`) and hands anything unusual to it, which holds the rules: it answers
//! False, having done nothing, when the partition's drain lock is taken (the Python path waits
//! for it), when no log is open, or inside a callback (a send there hands its batches to the
//! sender thread). Under acks='all' an appended batch goes to the producer's acknowledging
//! thread (`durable.rs`, `DurableAcks`) instead of being resolved here; and a batch whose folder was
//! replaced (the topic deleted, perhaps re-created) or whose append failed goes to
//! `_Sender.append_one` / `_Sender.append_failed`, as in `_Sender.drain_locked`.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::producer::{append_in_order, Appended, BatchSink, Drained};
use crate::record::BatchBuilder;

use super::log::PyLog;
use super::producer::{Accumulator, BatchBuffer};

/// Append partition `p`'s queued batches (and the one being built when `current`) natively;
/// False when the Python path (`_Sender.drain_locked`) must do it (see the module comment).
#[pyfunction]
pub fn drain_partition(sender: &Bound<'_, PyAny>, p: &Bound<'_, PyAny>, current: bool) -> PyResult<bool> {
    let py = sender.py();
    if callback_depth(py)? > 0 {
        return Ok(false);
    }
    let lock = p.getattr(intern!(py, "drain_lock"))?;
    if !lock.call_method1(intern!(py, "acquire"), (false,))?.is_truthy()? {
        return Ok(false);
    }
    // Read under the lock: closing a partition's log (idle, deleted) holds it.
    let drained = match open_log(p) {
        Ok(Some(log)) => drain_locked(sender, p, &log, current).map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    lock.call_method0(intern!(py, "release"))?;
    match drained? {
        None => Ok(false),
        Some(appended) => {
            if appended {
                sender.call_method0(intern!(py, "notify"))?;
            }
            Ok(true)
        }
    }
}

/// The partition's open native log, if any.
fn open_log<'py>(p: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyLog>>> {
    let log = p.getattr(intern!(p.py(), "log"))?;
    if log.is_none() {
        return Ok(None);
    }
    Ok(Some(log.getattr(intern!(p.py(), "_native"))?.cast_into::<PyLog>()?))
}

/// The partition's open log as the core's drain sees it: the producer's append (the GIL kept
/// unless another thread or writer holds the log), refusing a folder that was replaced.
struct OpenLog<'a, 'py> {
    log: &'a Bound<'py, PyLog>,
}

impl BatchSink for OpenLog<'_, '_> {
    type Error = PyErr;

    fn append(&mut self, builder: BatchBuilder) -> PyResult<Result<Appended, BatchBuilder>> {
        let appended = self.log.get().append_batch(self.log.py(), builder, true)?;
        Ok(appended.map(|((first_offset, last_offset), ticket, log_append_time)| Appended {
            first_offset,
            last_offset,
            log_append_time,
            ticket,
        }))
    }
}

/// `_Sender.drain_locked` for an open log (the caller holds the drain lock). True if it took
/// any batch.
fn drain_locked(
    sender: &Bound<'_, PyAny>,
    p: &Bound<'_, PyAny>,
    log: &Bound<'_, PyLog>,
    current: bool,
) -> PyResult<bool> {
    let py = p.py();
    let acc = p.getattr(intern!(py, "acc"))?.cast_into::<Accumulator>()?;
    let number: usize = p.getattr(intern!(py, "number"))?.extract()?;
    let taken = acc.get().take_batches(py, number, current)?;
    if taken.is_empty() {
        return Ok(false);
    }
    let inflight = intern!(py, "inflight");
    let mut queued: usize = taken.iter().map(|(b, _)| b.count()).sum();
    p.setattr(inflight, queued)?;
    p.setattr(intern!(py, "last_used"), monotonic(py)?)?;
    let depth = callback_depth(py)?;
    set_callback_depth(py, depth + 1)?;
    // Every taken batch is appended and resolved even when a callback raises KeyboardInterrupt
    // or SystemExit (raised below, once they all were): the core's drain gives every batch its
    // outcome, and only the first such error is kept.
    let mut interrupted: Option<PyErr> = None;
    let mut first_error = |r: PyResult<()>| {
        if let Err(e) = r {
            interrupted.get_or_insert(e);
        }
    };
    append_in_order(&mut OpenLog { log }, taken, |outcome| match outcome {
        Drained::Appended { batch, records, at } => {
            queued -= records;
            first_error(p.setattr(inflight, queued));
            first_error(match at.ticket {
                // acks='all': acknowledged once group commit synced it (`_Sender.append_one`).
                Some(ticket) => {
                    super::durable::hand(sender, p, log, batch, (at.first_offset, at.log_append_time), ticket, records)
                }
                None => batch.get().complete(py, at.first_offset, at.log_append_time),
            });
        }
        Drained::Replaced { batch, builder } => {
            // The folder was replaced: the Python path reopens the partition (or fails the
            // batches typed) for this batch and every later one, in order.
            let buffer = BatchBuffer::holding(builder);
            first_error(sender.call_method1(intern!(py, "append_one"), (p, buffer, batch)).map(drop));
        }
        Drained::Failed { batch, records, error } => {
            queued -= records;
            first_error(p.setattr(inflight, queued));
            let failed = sender.call_method1(intern!(py, "append_failed"), (p, records, batch, error.into_value(py)));
            first_error(failed.map(drop));
        }
    });
    let result = interrupted.map_or(Ok(()), Err);
    let restored = p.setattr(inflight, 0).and_then(|()| set_callback_depth(py, callback_depth(py)? - 1));
    result.and(restored).map(|()| true)
}

/// `kafkalite.producer._in_callbacks`: per thread, the drains and acknowledgements under way.
fn in_callbacks(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static IN_CALLBACKS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    IN_CALLBACKS.import(py, "kafkalite.producer", "_in_callbacks")
}

fn callback_depth(py: Python<'_>) -> PyResult<i64> {
    let local = in_callbacks(py)?;
    match local.getattr(intern!(py, "depth")) {
        Ok(depth) => depth.extract(),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) => Ok(0),
        Err(e) => Err(e),
    }
}

fn set_callback_depth(py: Python<'_>, depth: i64) -> PyResult<()> {
    in_callbacks(py)?.setattr(intern!(py, "depth"), depth)
}

/// `time.monotonic()`, the clock of `_Partition.last_used`.
fn monotonic(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static MONOTONIC: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    MONOTONIC.import(py, "time", "monotonic")?.call0()
}
