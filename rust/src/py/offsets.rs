//! `__consumer_offsets` for `kafkalite.offsets`: thin wrappers over the engine's
//! `offsets_codec` and `committed_offsets`, the codec and reader the wire-protocol server uses too.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::coordination::committed_offsets::{CommittedOffsets, Offsets};
use crate::py::log::PyLog;

use crate::coordination::offsets_codec as codec;
use crate::py::topic_config::to_py;
use crate::storage::error::Error;
use crate::storage::topic_config;
use serde_json::Value;

/// Java's `String.hashCode` of `s` (UTF-16 code units, 32-bit wrap), signed.
#[pyfunction]
pub fn java_string_hash(s: &str) -> i32 {
    codec::java_string_hash(s)
}

/// The `__consumer_offsets` partition of a group (Kafka's `GroupCoordinator.partitionFor`).
#[pyfunction]
pub fn offsets_partition(group_id: &str) -> i32 {
    codec::offsets_partition(group_id)
}

/// OffsetCommitKey v1 of (group, topic, partition).
#[pyfunction]
pub fn offsets_encode_key<'py>(
    py: Python<'py>,
    group_id: &str,
    topic: &str,
    partition: i64,
) -> PyResult<Bound<'py, PyBytes>> {
    let partition = i32::try_from(partition)
        .map_err(|_| Error::config(format!("partition {partition} is outside Kafka's int32 range")))?;
    Ok(PyBytes::new(py, &codec::encode_key(group_id, topic, partition)?))
}

/// OffsetCommitValue v3 of (offset, metadata, commit timestamp in ms).
#[pyfunction]
pub fn offsets_encode_value<'py>(
    py: Python<'py>,
    offset: i64,
    metadata: &str,
    timestamp_ms: i64,
) -> PyResult<Bound<'py, PyBytes>> {
    Ok(PyBytes::new(py, &codec::encode_value(offset, metadata, timestamp_ms)?))
}

/// (group, topic, partition) of an offset commit key, None for the other record types.
#[pyfunction]
pub fn offsets_decode_key(key: &[u8]) -> PyResult<Option<(String, String, i32)>> {
    Ok(codec::decode_key(key)?)
}

/// (offset, metadata) of an OffsetCommitValue v0-v4.
#[pyfunction]
pub fn offsets_decode_value(value: &[u8]) -> PyResult<(i64, String)> {
    Ok(codec::decode_value(value)?)
}

/// One group's committed offsets, read incrementally from its offsets partition (the engine's
/// `committed_offsets::CommittedOffsets`).
#[pyclass(frozen, name = "CommittedOffsets", module = "kafkalite._native")]
pub struct PyCommittedOffsets {
    group: String,
    inner: Mutex<CommittedOffsets>,
}

/// The offsets as `{(topic, partition): (offset, metadata)}` and the unstable partitions.
type Read = (Offsets, std::collections::BTreeSet<(String, i32)>);

#[pymethods]
impl PyCommittedOffsets {
    #[new]
    fn new(group_id: &str) -> Self {
        PyCommittedOffsets { group: group_id.to_string(), inner: Mutex::new(CommittedOffsets::new(group_id)) }
    }

    /// Catch up on `log` (the group's offsets partition, a `_native.Log`): (offsets, the
    /// partitions an open transaction holds commits of).
    fn read(&self, py: Python<'_>, log: &PyLog) -> PyResult<Read> {
        log.detached(py, |log| {
            // A panic while this was held (a bug, surfaced by `detached`) may have cut a read
            // short: such a reader starts again from the log's start.
            let mut state = self.inner.lock().unwrap_or_else(|poisoned| {
                let mut state = poisoned.into_inner();
                *state = CommittedOffsets::new(&self.group);
                state
            });
            state.catch_up(log)?;
            Ok((state.offsets().clone(), state.unstable()))
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCommittedOffsets>()?;
    m.add_function(wrap_pyfunction!(java_string_hash, m)?)?;
    m.add_function(wrap_pyfunction!(offsets_partition, m)?)?;
    m.add_function(wrap_pyfunction!(offsets_encode_key, m)?)?;
    m.add_function(wrap_pyfunction!(offsets_encode_value, m)?)?;
    m.add_function(wrap_pyfunction!(offsets_decode_key, m)?)?;
    m.add_function(wrap_pyfunction!(offsets_decode_value, m)?)?;
    m.add("OFFSETS_TOPIC", codec::OFFSETS_TOPIC)?;
    m.add("OFFSETS_PARTITIONS", codec::OFFSETS_PARTITIONS)?;
    let config = codec::OFFSETS_TOPIC_CONFIG.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect();
    m.add("OFFSETS_TOPIC_CONFIG", to_py(m.py(), &Value::Object(topic_config::validate_topic_config(&config)?))?)?;
    m.add("OFFSET_COMMIT_KEY_TYPES", codec::OFFSET_COMMIT_KEY_TYPES.to_vec())?;
    m.add("MAX_OFFSET_COMMIT_VALUE_VERSION", codec::MAX_OFFSET_COMMIT_VALUE_VERSION)?;
    Ok(())
}
