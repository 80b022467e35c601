//! Group commit for the producer (`acks='all'`): `Log.append_buffer_deferred` returns a
//! `DurableMark` with each batch, and the producer's acknowledging thread waits for the marks
//! of many batches, over many partitions, with one call (`wait_durable`).

use pyo3::prelude::*;

use super::drain::DrainHooks;
use super::future::BatchState;
use super::log::PyLog;
use super::partition::PartitionState;
use crate::storage::fsync_batch::{wait_all, Ticket};

/// What one appended batch waits for before it may be acknowledged.
#[pyclass(frozen, name = "DurableMark", module = "kafkalite._native")]
pub struct DurableMark {
    pub(crate) ticket: Ticket,
    pub(crate) dir: std::path::PathBuf,
}

/// Wait, without the GIL, until every mark's batch is durable (one sync per partition covers
/// all its marks; partitions sync in parallel). `timeout_ms` bounds the wait for another
/// writer's sync (a stopped process). Returns, per mark, None or the exception its batch fails with.
#[pyfunction]
#[pyo3(signature = (marks, timeout_ms=60000))]
pub fn wait_durable(py: Python<'_>, marks: Vec<Py<DurableMark>>, timeout_ms: u64) -> Vec<Option<Py<PyAny>>> {
    let tickets: Vec<Ticket> = marks.iter().map(|m| m.get().ticket.clone()).collect();
    let deadline = Some(std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms));
    let results = py.detach(|| wait_all(&tickets, deadline));
    results
        .into_iter()
        .zip(&marks)
        .map(|(r, m)| r.err().map(|e| PyErr::from(e.or_path(&m.get().dir)).into_value(py).into_any()))
        .collect()
}

/// The drain's tail for acks='all' (as `_Sender.append_one`'s): hand the appended batch (its
/// first offset and log-append time) to the producer's acknowledging thread
/// (`DurableAcks.hand`), which resolves it once its mark is durable.
pub(super) fn hand(
    hooks: &Bound<'_, DrainHooks>,
    p: &PartitionState,
    log: &Bound<'_, PyLog>,
    state: Py<BatchState>,
    (first, log_append_time): (i64, Option<i64>),
    ticket: Ticket,
    records: usize,
) -> PyResult<()> {
    let py = hooks.py();
    let mark = Py::new(py, DurableMark { ticket, dir: log.get().dir().to_path_buf() })?;
    let place = format!("{}-{}", p.topic_name(), p.partition());
    super::drain::hand(hooks, (state, first, log_append_time), mark, records, place)
}
