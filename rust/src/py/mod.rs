//! The PyO3 binding, `kafkalite._native`: converts types, releases the GIL around I/O and
//! decoding, and maps engine errors to `kafkalite.errors`. No storage logic lives here.

mod arrow;
mod buffer;
mod consumer;
mod durable;
mod errors;
mod inspect;
mod log;
mod metadata;
mod offsets;
mod producer;
mod record;
mod server;
mod topic_config;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    install_logging(m.py());
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
    m.add_class::<durable::DurableMark>()?;
    m.add_function(wrap_pyfunction!(durable::wait_durable, m)?)?;
    m.add_function(wrap_pyfunction!(record::murmur2, m)?)?;
    m.add_function(wrap_pyfunction!(record::partitions_for_keys, m)?)?;
    m.add_function(wrap_pyfunction!(record::partition_for_key, m)?)?;
    m.add_function(wrap_pyfunction!(record::crc32c, m)?)?;
    m.add("APPEND_LOCK_FILE", crate::files::APPEND_LOCK_FILE)?;
    m.add("WRITERS_FILE", crate::files::WRITERS_FILE)?;
    m.add("TOPICS_FILE", crate::files::TOPICS_FILE)?;
    m.add("ADMIN_LOCK_FILE", crate::files::ADMIN_LOCK_FILE)?;
    m.add("PREALLOCATE_BUDGET_BYTES_DEFAULT", crate::prealloc::DEFAULT_BUDGET_BYTES)?;
    m.add("BATCH_FULL", producer::FULL)?;
    m.add("RECORD_TOO_LARGE", producer::TOO_LARGE)?;
    m.add_function(wrap_pyfunction!(failpoint_names, m)?)?;
    offsets::register(m)?;
    m.add_function(wrap_pyfunction!(inspect::inspect_segment, m)?)?;
    m.add_function(wrap_pyfunction!(topic_config::topic_config_defs, m)?)?;
    m.add_function(wrap_pyfunction!(topic_config::dir_config_defs, m)?)?;
    m.add_function(wrap_pyfunction!(topic_config::validate_topic_config, m)?)?;
    m.add_function(wrap_pyfunction!(topic_config::validate_dir_config, m)?)?;
    m.add_function(wrap_pyfunction!(topic_config::effective_topic_config, m)?)?;
    m.add_function(wrap_pyfunction!(topic_config::topic_log_options, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::read_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::update_metadata, m)?)?;
    m.add("MAX_PARTITIONS", crate::topic_config::MAX_PARTITIONS)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Forward the engine's `log` events (target `kafkalite::engine`) to Python's
/// `logging.getLogger("kafkalite.engine")`. Python logger objects are cached on the Rust side,
/// levels are not (`Caching::Loggers`): the engine logs rarely, so asking Python per event costs
/// nothing, and a level or handler set after import (caplog, `logging.basicConfig`) is obeyed.
/// Another `log` logger already installed in this process (a second extension) keeps its place.
fn install_logging(py: Python<'_>) {
    match pyo3_log::Logger::new(py, pyo3_log::Caching::Loggers) {
        Ok(logger) => {
            let _ = logger.install();
        }
        Err(e) => e.print(py),
    }
}

/// The engine's fail points (see `failpoint.rs`), for fault-injection suites that set
/// `KAFKALITE_FAILPOINTS` in the processes they start.
#[pyfunction]
fn failpoint_names() -> Vec<&'static str> {
    crate::failpoint::NAMES.to_vec()
}
