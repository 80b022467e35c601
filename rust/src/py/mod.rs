//! The PyO3 binding, `kafkalite._native`: converts types, releases the GIL around I/O and
//! decoding, and maps engine errors to `kafkalite.errors`. No storage logic lives here.

mod arrow;
mod buffer;
mod consumer;
mod drain;
mod durable;
mod errors;
mod future;
mod inspect;
mod log;
mod metadata;
mod offsets;
mod partition;
mod producer;
mod quotas;
mod record;
mod send;
mod server;
mod topic_config;
mod transactions;
mod users;

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
    m.add_class::<future::FutureRecordMetadata>()?;
    m.add_class::<future::BatchState>()?;
    m.add_class::<producer::Accumulator>()?;
    m.add_class::<send::ProducerCore>()?;
    m.add_class::<send::SendGate>()?;
    m.add_class::<server::NativeServer>()?;
    m.add_class::<durable::DurableMark>()?;
    m.add_function(wrap_pyfunction!(durable::wait_durable, m)?)?;
    m.add_function(wrap_pyfunction!(drain::drain_partition, m)?)?;
    m.add_function(wrap_pyfunction!(drain::drain_locked, m)?)?;
    m.add_class::<drain::DrainHooks>()?;
    m.add_class::<partition::PartitionState>()?;
    m.add_class::<partition::DrainLock>()?;
    m.add_class::<partition::CallbackDepth>()?;
    m.add_function(wrap_pyfunction!(record::murmur2, m)?)?;
    m.add_function(wrap_pyfunction!(record::partitions_for_keys, m)?)?;
    m.add_function(wrap_pyfunction!(record::partition_for_key, m)?)?;
    m.add_function(wrap_pyfunction!(record::crc32c, m)?)?;
    m.add("APPEND_LOCK_FILE", crate::storage::files::APPEND_LOCK_FILE)?;
    m.add("WRITERS_FILE", crate::storage::files::WRITERS_FILE)?;
    m.add("TOPICS_FILE", crate::storage::files::TOPICS_FILE)?;
    m.add("TOPICS_JOURNAL_FILE", crate::storage::files::TOPICS_JOURNAL_FILE)?;
    m.add("GROUPS_DIR", crate::storage::files::GROUPS_DIR)?;
    m.add("GROUP_STATE_LOCK_FILE", crate::storage::files::GROUP_STATE_LOCK_FILE)?;
    m.add("GROUP_NETWORK_OWNER_FILE", crate::storage::files::GROUP_NETWORK_OWNER_FILE)?;
    m.add("ADMIN_LOCK_FILE", crate::storage::files::ADMIN_LOCK_FILE)?;
    m.add("NOTIFY_FILE", crate::storage::files::NOTIFY_FILE)?;
    m.add("NOTIFY_FILE_LEN", crate::storage::notify::FILE_LEN)?;
    m.add("KAFKA_META_PROPERTIES", crate::storage::files::KAFKA_META_PROPERTIES)?;
    // A Log's size defaults, for the signature Python shows (log.py) and the config docs.
    let log_defaults = crate::LogConfig::default();
    m.add("SEGMENT_BYTES_DEFAULT", log_defaults.segment_bytes)?;
    m.add("INDEX_INTERVAL_BYTES_DEFAULT", log_defaults.index_interval_bytes)?;
    m.add("MAX_MESSAGE_BYTES_DEFAULT", log_defaults.max_message_bytes)?;
    m.add("FIRST_SINK_PRODUCER_ID", crate::coordination::producer_ids::FIRST_SINK_PRODUCER_ID)?;
    m.add("PREALLOCATE_BUDGET_BYTES_DEFAULT", crate::storage::prealloc::DEFAULT_BUDGET_BYTES)?;
    m.add("SEND_DRAIN", producer::DRAIN)?;
    m.add("SEND_FIRST", producer::FIRST)?;
    m.add("SEND_NO_KEY_OR_VALUE", producer::NO_KEY_OR_VALUE)?;
    m.add("SEND_NULL_KEY", producer::NULL_KEY)?;
    m.add("SEND_CLOSED", producer::CLOSED)?;
    m.add("RECORD_TOO_LARGE", producer::TOO_LARGE)?;
    m.add_function(wrap_pyfunction!(failpoint_names, m)?)?;
    m.add_function(wrap_pyfunction!(id_file_name, m)?)?;
    m.add("ID_NAME_MAX", crate::storage::files::ID_NAME_MAX)?;
    m.add("COMPRESSION_TYPES", crate::storage::record::compression::CODEC_NAMES.to_vec())?;
    m.add("HASHED_ID_PREFIX", crate::storage::files::HASHED_ID_PREFIX)?;
    offsets::register(m)?;
    users::register(m)?;
    quotas::register(m)?;
    transactions::register(m)?;
    m.add_function(wrap_pyfunction!(inspect::inspect_segment, m)?)?;
    m.add_function(wrap_pyfunction!(topic_config::topic_config_defs, m)?)?;
    m.add_function(wrap_pyfunction!(topic_config::dir_config_defs, m)?)?;
    m.add_function(wrap_pyfunction!(topic_config::validate_topic_config, m)?)?;
    m.add_function(wrap_pyfunction!(topic_config::validate_dir_config, m)?)?;
    m.add_function(wrap_pyfunction!(topic_config::warn_unapplied, m)?)?;
    m.add("INTERNAL_TOPICS", crate::storage::datadir::INTERNAL_TOPICS.to_vec())?;
    m.add_function(wrap_pyfunction!(topic_config::effective_topic_config, m)?)?;
    m.add_function(wrap_pyfunction!(topic_config::topic_log_options, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::read_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::metadata_changes, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::create_topic, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::update_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::open_data_dir, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::refuse_internal, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::broker_owned, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::partition_folder, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::validate_topic_name, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::delete_topic, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::create_partitions, m)?)?;
    m.add_function(wrap_pyfunction!(metadata::alter_topic_config, m)?)?;
    m.add("MAX_PARTITIONS", crate::storage::topic_config::MAX_PARTITIONS)?;
    m.add("FETCH_MAX_BYTES", crate::server::FETCH_MAX_BYTES)?;
    m.add("FETCH_MAX_BYTES_MIN", crate::server::FETCH_MAX_BYTES_MIN)?;
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

/// Take a new object out of the cyclic GC's lists, so that collections (every 700
/// allocations) never walk it: for the objects made per record (producer futures, consumed
/// records), which a program may keep by the million. Only for classes without `__traverse__`:
/// the GC cannot see their references anyway, so tracking them finds nothing and costs a walk.
pub(crate) fn gc_untrack<T>(object: &Bound<'_, T>) {
    // SAFETY: `object` is a live object (a Bound holds a reference) and the GIL is held
    // (a Bound proves it). Untracking only removes it from the GC's generation lists; its
    // deallocation untracks again, which CPython allows for an untracked object.
    unsafe { pyo3::ffi::PyObject_GC_UnTrack(object.as_ptr().cast()) }
}

/// The file-name component of a group or member id (`files::id_file_name`), the one rule
/// group.py and the server share; `what` names the id in the error for an empty one.
#[pyfunction]
fn id_file_name(value: &str, what: &str) -> PyResult<String> {
    Ok(crate::storage::files::id_file_name(value, what)?)
}

/// The engine's fail points (see `failpoint.rs`), for fault-injection suites that set
/// `KAFKALITE_FAILPOINTS` in the processes they start.
#[pyfunction]
fn failpoint_names() -> Vec<&'static str> {
    crate::storage::failpoint::NAMES.to_vec()
}
