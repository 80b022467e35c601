//! `inspect_segment` for `kafkalite dump-log`: the engine's `inspect::inspect_segment` as a
//! dict of plain values.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A segment's `.log` read with recovery's rules and its indexes checked with the engine's
/// and Kafka's; see `rust/src/storage/inspect.rs` for the keys' meaning.
#[pyfunction]
pub fn inspect_segment<'py>(py: Python<'py>, log_path: PathBuf, is_last: bool) -> PyResult<Bound<'py, PyDict>> {
    let s = py.detach(|| crate::storage::inspect::inspect_segment(&log_path, is_last))?;
    let batches = s
        .log
        .batches
        .iter()
        .map(|b| {
            let h = &b.header;
            let d = PyDict::new(py);
            d.set_item("position", b.position)?;
            d.set_item("base_offset", h.base_offset)?;
            d.set_item("last_offset", h.last_offset())?;
            d.set_item("count", h.records_count)?;
            d.set_item("size", h.total_size())?;
            d.set_item("partition_leader_epoch", h.partition_leader_epoch)?;
            d.set_item("crc", h.crc)?;
            d.set_item("compression", b.codec_name())?;
            d.set_item("log_append_time", h.timestamp_type() == crate::storage::record::TimestampType::LogAppendTime)?;
            d.set_item("is_control", h.is_control())?;
            d.set_item("max_timestamp", h.max_timestamp)?;
            d.set_item("producer_id", h.producer_id)?;
            d.set_item("crc_ok", b.crc_ok)?;
            Ok(d)
        })
        .collect::<PyResult<Vec<_>>>()?;
    let out = PyDict::new(py);
    out.set_item("base_offset", s.base_offset)?;
    out.set_item("batches", batches)?;
    out.set_item("valid_bytes", s.log.valid_bytes)?;
    out.set_item("file_len", s.log.file_len)?;
    out.set_item("damage", s.log.damage)?;
    out.set_item("damaged_bytes", s.log.damaged_bytes)?;
    out.set_item("next_offset", s.log.next_offset)?;
    out.set_item("index_entries", s.indexes.index_entries)?;
    out.set_item("time_entries", s.indexes.time_entries)?;
    out.set_item("index_problems", s.indexes.problems)?;
    out.set_item("missing", s.missing)?;
    out.set_item("recovery", s.recovery)?;
    Ok(out)
}
