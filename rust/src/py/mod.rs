//! The PyO3 binding, `kafkalite._native`: converts types, releases the GIL around I/O and
//! decoding, and maps engine errors to `kafkalite.errors`. No storage logic lives here.

mod arrow;
mod buffer;
mod consumer;
mod errors;
mod log;
mod producer;
mod record;
mod server;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<log::PyLog>()?;
    m.add_class::<record::Record>()?;
    m.add_class::<buffer::BatchView>()?;
    m.add_class::<arrow::ArrowBatch>()?;
    m.add_class::<consumer::ConsumerRecord>()?;
    m.add_class::<consumer::Notifier>()?;
    m.add_class::<producer::BatchBuffer>()?;
    m.add_class::<producer::StickyPartitioner>()?;
    m.add_class::<producer::FutureBase>()?;
    m.add_class::<server::NativeServer>()?;
    m.add_function(wrap_pyfunction!(record::murmur2, m)?)?;
    m.add_function(wrap_pyfunction!(record::partitions_for_keys, m)?)?;
    m.add_function(wrap_pyfunction!(record::partition_for_key, m)?)?;
    m.add_function(wrap_pyfunction!(record::crc32c, m)?)?;
    m.add("APPEND_LOCK_FILE", crate::lock::LOCK_FILE)?;
    m.add("WRITERS_FILE", crate::lock::WRITERS_FILE)?;
    m.add("BATCH_FULL", producer::FULL)?;
    m.add("RECORD_TOO_LARGE", producer::TOO_LARGE)?;
    m.add_function(wrap_pyfunction!(failpoint_names, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// The engine's fail points (see `failpoint.rs`), for fault-injection suites that set
/// `KAFKALITE_FAILPOINTS` in the processes they start.
#[pyfunction]
fn failpoint_names() -> Vec<&'static str> {
    crate::failpoint::NAMES.to_vec()
}
