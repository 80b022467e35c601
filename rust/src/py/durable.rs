//! Group commit for the producer (`acks='all'`): `Log.append_buffer_deferred` returns a
//! `DurableMark` with each batch, and the producer's acknowledging thread waits for the marks
//! of many batches, over many partitions, with one call (`wait_durable`).

use pyo3::prelude::*;

use crate::group_commit::{wait_all, Ticket};

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
