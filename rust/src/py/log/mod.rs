//! `kafkalite._native.Log`: the engine's `Log` behind a mutex, with the GIL released for
//! every call that touches disk or decodes. This file is the class and its Python-facing
//! methods (one `#[pymethods]` block: pyo3 without `multiple-pymethods` takes one per class);
//! `access` is how a call reaches the engine's log (mutex, GIL, panics, transactions, scans)
//! and `columns` holds records given as Python columns.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::spark::SparkSink;
use crate::storage::arrow::ArrowSink;
use crate::storage::cleaner::CleanOptions;
use crate::storage::log::Produced;
use crate::storage::log::{now_ms, Log};
use crate::storage::options::{FlushPolicy, LogConfig};
use crate::storage::read_committed::TxnState;
use crate::storage::record::{Compression, ProducerStamp, TimestampType};

use super::arrow::ArrowBatch;
use super::buffer::{bytes_items, BatchView};
use super::consumer::ConsumerRecord;
use super::durable::DurableMark;
use super::errors::{refused, InvalidTypeError};
use super::producer::BatchBuffer;
use super::record::{held_headers, Record};
use super::transactions::{PyTransaction, TxnShared};

mod access;
mod columns;

use access::folder_replaced;
use columns::{held_columns, held_header_slices, record_inputs, HeldRecord};

/// (base_offset, valid_bytes, dropped_bytes, reason) as Python sees a recovery report.
type RecoveryTuple = (i64, u64, u64, Option<String>);

#[pyclass(frozen, name = "Log", module = "kafkalite._native")]
pub struct PyLog {
    /// The partition directory (`Log::dir`), kept outside the mutex: it never changes.
    path: std::path::PathBuf,
    inner: Mutex<Log>,
    /// read_committed bookkeeping, learnt incrementally (read_committed.rs). Locked after `inner`.
    txn: Mutex<TxnState>,
    /// The transactional producer this log appends for (`attach_transaction`), with the
    /// partition it is: each append first makes sure the partition is in the open transaction.
    producer_txn: std::sync::OnceLock<(Arc<TxnShared>, String, i32)>,
    /// The (producer id, epoch) last set on the writer for `producer_txn`.
    stamped: Mutex<Option<(i64, i16)>>,
}

/// Batches for a log attached to a transaction must be its producer's transactional ones:
/// anything else would be appended outside the transaction it is meant to be in.
fn check_transactional_batches(data: &[u8], producer: Option<(i64, i16)>) -> crate::Result<()> {
    let mut pos = 0;
    while pos < data.len() {
        let h = crate::storage::record::header::BatchHeader::parse(&data[pos..])?;
        if !h.is_transactional() || Some((h.producer_id, h.producer_epoch)) != producer {
            return Err(crate::Error::config(format!(
                "append_produce on a log attached to a transaction takes that producer's ({producer:?}) \
                 transactional batches (encode_batches(..., transactional=True)); a batch has producer \
                 ({}, {}), transactional={}",
                h.producer_id,
                h.producer_epoch,
                h.is_transactional()
            )));
        }
        pos += h.total_size();
    }
    Ok(())
}

fn parse_flush(flush: &Bound<'_, PyAny>) -> PyResult<FlushPolicy> {
    if let Ok(s) = flush.cast::<PyString>() {
        return Ok(FlushPolicy::parse(s.to_str()?)?);
    }
    Ok(FlushPolicy::every(flush.extract::<i64>().unwrap_or(0))?)
}

fn clean_options(delete_retention_ms: i64, min_compaction_lag_ms: i64, now: Option<i64>) -> CleanOptions {
    CleanOptions { now_ms: now.unwrap_or_else(now_ms), delete_retention_ms, min_compaction_lag_ms }
}

/// A batch header as Python's `batch_headers` returns it.
type BatchInfoTuple = (i64, i64, i64, i16, i32, i32, bool);

/// A producer as Python's `producers` returns it.
type ProducerTuple = (i64, i16, i32, i64, i32, i64);

#[pymethods]
impl PyLog {
    #[new]
    // The size defaults (None) are `LogConfig::default()`'s, the engine's one copy of them;
    // Python's `Log` shows the same values (`_native.SEGMENT_BYTES_DEFAULT`...).
    #[pyo3(signature = (path, segment_bytes=None, index_interval_bytes=None, segment_ms=None,
                        retention_bytes=None, retention_ms=None, compression="none", flush=None,
                        timestamp_type="create", max_message_bytes=None, readonly=false, shared_writers=false,
                        compact=false, preallocate_budget_bytes=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        segment_bytes: Option<i64>,
        index_interval_bytes: Option<i64>,
        segment_ms: Option<i64>,
        retention_bytes: Option<i64>,
        retention_ms: Option<i64>,
        compression: &str,
        flush: Option<Bound<'_, PyAny>>,
        timestamp_type: &str,
        max_message_bytes: Option<i64>,
        readonly: bool,
        shared_writers: bool,
        compact: bool,
        preallocate_budget_bytes: Option<i64>,
    ) -> PyResult<Self> {
        let positive = |name: &str, v: i64| -> PyResult<u64> {
            if v <= 0 {
                return Err(crate::Error::config(format!("{name} must be positive, got {v}")).into());
            }
            Ok(v as u64)
        };
        let non_negative = |name: &str, v: i64| -> PyResult<u64> {
            u64::try_from(v).map_err(|_| crate::Error::config(format!("{name} must be >= 0, got {v}")).into())
        };
        let defaults = LogConfig::default();
        let config = LogConfig {
            segment_bytes: match segment_bytes {
                Some(v) => positive("segment_bytes", v)?,
                None => defaults.segment_bytes,
            },
            index_interval_bytes: match index_interval_bytes {
                Some(v) => positive("index_interval_bytes", v)?,
                None => defaults.index_interval_bytes,
            },
            segment_ms,
            // 0 is a valid limit (retention.bytes=0 keeps only the active segment, as in Kafka).
            retention_bytes: retention_bytes
                .map(|v| {
                    u64::try_from(v)
                        .map_err(|_| crate::Error::config(format!("retention_bytes must be >= 0 (or None), got {v}")))
                })
                .transpose()?,
            retention_ms,
            compression: Compression::parse(compression)?,
            flush: match &flush {
                Some(f) if !f.is_none() => parse_flush(f)?,
                _ => FlushPolicy::Os,
            },
            timestamp_type: TimestampType::parse(timestamp_type)?,
            max_message_bytes: match max_message_bytes {
                Some(v) => positive("max_message_bytes", v)? as usize,
                None => defaults.max_message_bytes,
            },
            readonly,
            shared_writers,
            compact,
            preallocate_budget_bytes: preallocate_budget_bytes
                .map(|v| non_negative("preallocate_budget_bytes", v))
                .transpose()?,
            ..defaults
        };
        let log = py.detach(|| {
            std::panic::catch_unwind(|| Log::open(&path, config))
                .unwrap_or_else(|payload| Err(crate::Error::Poisoned(crate::storage::log::panic_message(&*payload))))
                .map_err(|e| e.or_path(&path))
        })?;
        Ok(PyLog {
            path: log.dir().to_path_buf(),
            inner: Mutex::new(log),
            txn: Mutex::new(TxnState::new()),
            producer_txn: std::sync::OnceLock::new(),
            stamped: Mutex::new(None),
        })
    }

    /// Append `Record` objects; returns (first offset, last offset).
    fn append(&self, py: Python<'_>, records: &Bound<'_, PyAny>) -> PyResult<(i64, i64)> {
        let now = now_ms();
        let mut held = Vec::new();
        for item in records.try_iter()? {
            let item = item?;
            let rec = item
                .cast::<Record>()
                .map_err(|_| {
                    InvalidTypeError::new_err(format!(
                        "append takes Record objects, not {}",
                        item.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                    ))
                })?
                .get();
            held.push(HeldRecord {
                key: rec.key.as_ref().map(|b| b.bind(py).clone()),
                value: rec.value.as_ref().map(|b| b.bind(py).clone()),
                headers: held_headers(rec.headers.as_ref().map(|h| h.bind(py).as_any()))?,
                timestamp: rec.timestamp.unwrap_or(now),
            });
        }
        let header_slices = held_header_slices(&held)?;
        let inputs = record_inputs(&held, &header_slices);
        self.join_transaction(py)?;
        self.appended_durably(py, |log| log.append_records(&inputs))
    }

    /// Records given as columns (values, keys, headers; all stamped `timestamp`, default now)
    /// as whole v2 batches stamped with the producer's id, epoch and first sequence (-1: no
    /// producer), batched as this log's appends are; nothing is appended (`Log::encode_batches`).
    // The text signature spelled out: pyo3 shows negative defaults as `...`.
    #[pyo3(signature = (values, keys=None, headers=None, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                        timestamp=None, transactional=false),
           text_signature = "(self, /, values, keys=None, headers=None, producer_id=-1, producer_epoch=-1, \
                             base_sequence=-1, timestamp=None, transactional=False)")]
    #[allow(clippy::too_many_arguments)]
    fn encode_batches<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyAny>,
        keys: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
        timestamp: Option<i64>,
        transactional: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let producer = ProducerStamp::new(producer_id, producer_epoch, base_sequence)?;
        let held = held_columns(values, keys, headers, timestamp.unwrap_or_else(now_ms))?;
        let header_slices = held_header_slices(&held)?;
        let inputs = record_inputs(&held, &header_slices);
        let data = self.detached(py, |log| log.encode_batches(&inputs, producer, transactional))?;
        Ok(PyBytes::new(py, &data))
    }

    /// Append values (null keys, no headers) from a list of bytes, with one timestamp.
    #[pyo3(signature = (values, timestamp=None))]
    fn append_values(&self, py: Python<'_>, values: &Bound<'_, PyAny>, timestamp: Option<i64>) -> PyResult<(i64, i64)> {
        // A tuple of the values holds them for the append (the caller's list may change once
        // the GIL is released); a list's copy is one C call.
        let (items, what) = match values.cast::<PyList>() {
            Ok(list) => (list.to_tuple(), "a list"),
            Err(_) => (PyTuple::new(py, values.try_iter()?.collect::<PyResult<Vec<_>>>()?)?, "an iterable"),
        };
        let slices = bytes_items(&items).map_err(|i| {
            let kind = items.get_item(i).map(|v| v.get_type().to_string()).unwrap_or_default();
            InvalidTypeError::new_err(format!(
                "append_values takes {what} of bytes; item {i} is {kind} (convert it with bytes(...))"
            ))
        })?;
        let ts = timestamp.unwrap_or_else(now_ms);
        self.join_transaction(py)?;
        self.appended_durably(py, |log| log.append_values(&slices, ts))
    }

    /// Append pre-built v2 record batches; they are validated and given new offsets.
    fn append_batches(&self, py: Python<'_>, data: &[u8]) -> PyResult<(i64, i64)> {
        self.appended_durably(py, |log| log.append_raw_batches(data))
    }

    /// Append v2 record batches as Kafka's broker does a produce request: validated, then
    /// checked against the partition's idempotent producer state (`Log::append_produce`).
    /// Returns (first offset, last offset, duplicate): for a retry of batches already in the
    /// log, the offsets of the batch found and True, nothing written. A sequence gap or an old
    /// epoch raises OutOfOrderSequenceNumberError / InvalidProducerEpochError, nothing written.
    ///
    /// On a log attached to a transaction (`attach_transaction`) the batches must be that
    /// producer's transactional ones (`encode_batches(..., transactional=True)`): the partition
    /// joins the open transaction first, as the other appends do.
    fn append_produce(&self, py: Python<'_>, data: &[u8]) -> PyResult<(i64, i64, bool)> {
        if let Some((txn, _, _)) = self.producer_txn.get() {
            self.join_transaction(py)?;
            let producer = txn.producer();
            check_transactional_batches(data, producer)?;
        }
        match self.appended_durably(py, |log| log.append_produce(data))? {
            Produced::Appended(first, last) => Ok((first, last, false)),
            Produced::Duplicate(batch) => Ok((batch.first_offset(), batch.last_offset, true)),
            Produced::Refused(refusal) => Err(refused(refusal)),
        }
    }

    /// The headers of the batches from the one holding `start`, at most `max_batches`, as
    /// (base_offset, last_offset, producer_id, producer_epoch, base_sequence, records_count,
    /// is_control) (`Log::batch_headers`).
    #[pyo3(signature = (start, max_batches=4096))]
    fn batch_headers(&self, py: Python<'_>, start: i64, max_batches: usize) -> PyResult<Vec<BatchInfoTuple>> {
        let headers = self.detached(py, |log| log.batch_headers(start, max_batches))?;
        Ok(headers
            .iter()
            .map(|h| {
                let info = (h.base_offset, h.last_offset(), h.producer_id, h.producer_epoch, h.base_sequence);
                (info.0, info.1, info.2, info.3, info.4, h.records_count, h.is_control())
            })
            .collect())
    }

    /// (epoch, last sequence) of a producer in this partition's producer state, or None if
    /// the partition has no state for it (never seen, expired, or its batches deleted).
    fn producer_sequence(&self, py: Python<'_>, producer_id: i64) -> PyResult<Option<(i16, i32)>> {
        self.detached(py, |log| {
            let state = log.producer_state()?;
            Ok(state.producer(producer_id).map(|(epoch, batches)| {
                (epoch, batches.last().map_or(crate::storage::record::header::NO_SEQUENCE, |b| b.last_seq))
            }))
        })
    }

    /// Every producer of this partition's producer state, as DescribeProducers reports them:
    /// (producer id, epoch, last sequence, last timestamp, coordinator epoch of its last
    /// marker, first offset of its open transaction or -1).
    fn producers(&self, py: Python<'_>) -> PyResult<Vec<ProducerTuple>> {
        self.detached(py, |log| {
            Ok(log
                .producer_state()?
                .summaries()
                .into_iter()
                .map(|p| {
                    let open = p.current_txn_first_offset.unwrap_or(-1);
                    (p.producer_id, p.epoch, p.last_sequence, p.last_timestamp, p.coordinator_epoch, open)
                })
                .collect())
        })
    }

    /// Kafka's WriteTxnMarkers for one partition (what Admin's `abortTransaction` sends): an
    /// ABORT (or COMMIT) marker of `producer_id` at `epoch`. Returns its offset, or None when
    /// the partition holds no open transaction of that producer at that epoch (nothing written).
    fn write_txn_marker(
        &self,
        py: Python<'_>,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
    ) -> PyResult<Option<i64>> {
        let written =
            self.detached(py, |log| log.append_txn_marker(producer_id, epoch, commit, coordinator_epoch, now_ms()))?;
        Ok(written.map(|m| m.offset))
    }

    /// Make this log a transactional producer's (once): its appends join `txn`'s open
    /// transaction and carry its producer id and epoch.
    fn attach_transaction(&self, txn: &PyTransaction) -> PyResult<()> {
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (topic, partition) = crate::storage::datadir::partition_folder(&name).ok_or_else(|| {
            crate::Error::config(format!("{} is not a <topic>-<partition> folder", self.path.display()))
        })?;
        self.producer_txn
            .set((Arc::clone(&txn.shared), topic, partition))
            .map_err(|_| crate::Error::config("this log is attached to a transaction already").into())
    }

    /// Append the batch a producer buffered for this partition (the buffer is left empty).
    /// Returns (first offset, last offset, log append time or None), or None if it was empty.
    fn append_buffer(&self, py: Python<'_>, buffer: &BatchBuffer) -> PyResult<Option<(i64, i64, Option<i64>)>> {
        self.join_transaction(py)?;
        match buffer.take() {
            Some(builder) => self
                .detached(py, |log| {
                    let (first, last) = log.append_builder(builder)?;
                    Ok((first, last, log.last_log_append_time()))
                })
                .map(Some),
            None => Ok(None),
        }
    }

    /// `append_buffer` that does not wait for durability: under flush="always" the result also
    /// holds the `DurableMark` to pass to `wait_durable` before acknowledging (None otherwise).
    ///
    /// `if_current`: first check that the partition folder is still the one this log opened,
    /// and if it is not (the topic was deleted, perhaps created again) return False with the
    /// buffer untouched, for the caller to reopen the partition and append there. This is the
    /// producer's per-batch check, done here without the GIL: a stat in Python released and
    /// retook the GIL once per batch, handing it to the sender thread and back. The engine
    /// repeats the check under the append lock, where a delete racing this append fails it
    /// (`UnknownTopicOrPartitionError`), never acknowledging it into the deleted folder.
    #[pyo3(signature = (buffer, if_current=false))]
    fn append_buffer_deferred<'py>(
        &self,
        py: Python<'py>,
        buffer: &BatchBuffer,
        if_current: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        use pyo3::IntoPyObjectExt;
        let Some(builder) = buffer.take() else {
            return match self.detached(py, |log| Ok(if_current && folder_replaced(log))) {
                Ok(true) => false.into_bound_py_any(py),
                Ok(false) => Ok(py.None().into_bound(py)),
                Err(e) => Err(e),
            };
        };
        match self.append_batch(py, builder, if_current)? {
            Ok(((first, last), ticket, time)) => {
                let mark = ticket.map(|ticket| DurableMark { ticket, dir: self.path.clone() });
                (first, last, time, mark).into_bound_py_any(py)
            }
            Err(builder) => {
                buffer.put_back(builder); // the caller reopens the partition and appends it there
                false.into_bound_py_any(py)
            }
        }
    }

    /// Decode up to `max_records` records as kafka-python `ConsumerRecord`s of `topic`/`partition`.
    /// Returns (records, next offset). Every reader takes kafka-python's `isolation_level`:
    /// `"read_committed"` hides records of aborted transactions and stops at the last stable offset.
    #[pyo3(signature = (topic, partition, start, max_records=500, end=None, isolation_level="read_uncommitted"))]
    #[allow(clippy::too_many_arguments)]
    fn read_consumer_records(
        &self,
        py: Python<'_>,
        topic: Py<PyString>,
        partition: i32,
        start: i64,
        max_records: usize,
        end: Option<i64>,
        isolation_level: &str,
    ) -> PyResult<(Vec<Py<ConsumerRecord>>, i64)> {
        let (arena, next) = self.scan_into_arena(py, isolation_level, start, end, max_records)?;
        Ok((arena.into_consumer_records(py, &topic, partition)?, next))
    }

    /// Whole batches from the one holding `offset`, as a zero-copy buffer object.
    #[pyo3(signature = (offset, max_bytes=1048576))]
    fn read(&self, py: Python<'_>, offset: i64, max_bytes: usize) -> PyResult<BatchView> {
        let slice = self.detached(py, |log| log.read(offset, max_bytes))?;
        Ok(BatchView { slice })
    }

    /// Decode up to `max_records` records from `start` (to `end`); returns (records, next offset).
    #[pyo3(signature = (start, end=None, max_records=8192, isolation_level="read_uncommitted"))]
    fn read_records(
        &self,
        py: Python<'_>,
        start: i64,
        end: Option<i64>,
        max_records: usize,
        isolation_level: &str,
    ) -> PyResult<(Vec<Py<Record>>, i64)> {
        let (arena, next) = self.scan_into_arena(py, isolation_level, start, end, max_records)?;
        Ok((arena.into_records(py)?, next))
    }

    /// Records in `[start, end)` as one Arrow batch (exported through `__arrow_c_array__`).
    #[pyo3(signature = (start, end=None, max_records=None, isolation_level="read_uncommitted"))]
    fn read_arrow(
        &self,
        py: Python<'_>,
        start: i64,
        end: Option<i64>,
        max_records: Option<usize>,
        isolation_level: &str,
    ) -> PyResult<(ArrowBatch, i64)> {
        let make = |n: usize| ArrowSink::with_capacity(n, n * 64);
        self.scan_to_arrow(py, isolation_level, start, end, max_records, make, ArrowSink::finish)
    }

    /// Records in `[start, end)` as the rows of Spark's Kafka source (the Spark data source's
    /// executor path): key, value, topic, partition, offset, timestamp[us], timestampType[, headers].
    #[pyo3(signature = (topic, partition, start, end=None, max_records=None, include_headers=false,
                        isolation_level="read_uncommitted"))]
    #[allow(clippy::too_many_arguments)]
    fn read_spark_arrow(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        start: i64,
        end: Option<i64>,
        max_records: Option<usize>,
        include_headers: bool,
        isolation_level: &str,
    ) -> PyResult<(ArrowBatch, i64)> {
        let make = |n: usize| SparkSink::new(topic, partition, include_headers, n, n * 64);
        self.scan_to_arrow(py, isolation_level, start, end, max_records, make, SparkSink::finish)
    }

    /// The last stable offset: where read_committed readers stop (the first offset of the
    /// earliest open transaction, else the log end offset).
    #[getter]
    fn last_stable_offset(&self, py: Python<'_>) -> PyResult<i64> {
        self.detached_txn(py, |log, txn| {
            txn.update(log)?;
            Ok(txn.last_stable_offset(log))
        })
    }

    /// (producer_id, first_offset, last_offset, last_stable_offset) of every aborted
    /// transaction, in marker order (Kafka's `.txnindex` entries).
    fn aborted_transactions(&self, py: Python<'_>) -> PyResult<Vec<(i64, i64, i64, i64)>> {
        self.detached_txn(py, |log, txn| {
            txn.update(log)?;
            Ok(txn
                .aborted_transactions()
                .into_iter()
                .map(|t| (t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset))
                .collect())
        })
    }

    /// (offset, timestamp) of the earliest record with timestamp >= ts, or None.
    fn offset_for_timestamp(&self, py: Python<'_>, ts: i64) -> PyResult<Option<(i64, i64)>> {
        self.detached(py, |log| log.offset_for_timestamp(ts))
    }

    #[getter]
    fn start_offset(&self, py: Python<'_>) -> PyResult<i64> {
        self.detached(py, |log| {
            log.check_open()?; // `follow` does nothing on a closed log: no stale answer
            log.follow()?;
            Ok(log.start_offset())
        })
    }

    #[getter]
    fn end_offset(&self, py: Python<'_>) -> PyResult<i64> {
        self.detached(py, |log| {
            log.check_open()?; // `follow` does nothing on a closed log: no stale answer
            log.follow()?;
            Ok(log.end_offset())
        })
    }

    /// (base_offset, next_offset, size, max_timestamp) per segment.
    #[getter]
    fn segments(&self, py: Python<'_>) -> PyResult<Vec<(i64, i64, u64, i64)>> {
        self.detached(py, |log| {
            log.check_open()?;
            Ok(log.segments().into_iter().map(|s| (s.base_offset, s.next_offset, s.size, s.max_timestamp)).collect())
        })
    }

    /// (base_offset, valid_bytes, dropped_bytes, reason) for segments recovery cut short.
    #[getter]
    fn recovery_reports(&self, py: Python<'_>) -> PyResult<Vec<RecoveryTuple>> {
        self.detached(py, |log| {
            Ok(log
                .recovery_reports()
                .iter()
                .map(|r| (r.base_offset, r.valid_bytes, r.dropped_bytes, r.reason.clone()))
                .collect())
        })
    }

    fn delete_records_before(&self, py: Python<'_>, offset: i64) -> PyResult<i64> {
        self.detached(py, |log| log.delete_records_before(offset))
    }

    #[pyo3(signature = (now_ms=None))]
    fn enforce_retention(&self, py: Python<'_>, now_ms: Option<i64>) -> PyResult<usize> {
        self.detached(py, |log| match now_ms {
            Some(now) => log.enforce_retention_at(now),
            None => log.enforce_retention(),
        })
    }

    /// One compaction pass; returns CleanStats as a dict.
    #[pyo3(signature = (delete_retention_ms, min_compaction_lag_ms=0, now_ms=None))]
    fn clean<'py>(
        &self,
        py: Python<'py>,
        delete_retention_ms: i64,
        min_compaction_lag_ms: i64,
        now_ms: Option<i64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let options = clean_options(delete_retention_ms, min_compaction_lag_ms, now_ms);
        let s = self.detached(py, |log| log.clean(options))?;
        let d = PyDict::new(py);
        d.set_item("first_dirty_offset", s.first_dirty_offset)?;
        d.set_item("dirty_end_offset", s.dirty_end_offset)?;
        d.set_item("keys", s.keys)?;
        d.set_item("segments_rewritten", s.segments_rewritten)?;
        d.set_item("bytes_before", s.bytes_before)?;
        d.set_item("bytes_after", s.bytes_after)?;
        d.set_item("records_removed", s.records_removed)?;
        d.set_item("tombstones_removed", s.tombstones_removed)?;
        Ok(d)
    }

    /// Dirty bytes over cleanable bytes (Kafka's `min.cleanable.dirty.ratio` measure).
    #[pyo3(signature = (min_compaction_lag_ms=0, now_ms=None))]
    fn dirty_ratio(&self, py: Python<'_>, min_compaction_lag_ms: i64, now_ms: Option<i64>) -> PyResult<f64> {
        Ok(py.detach(|| self.lock().map(|log| log.dirty_ratio(&clean_options(0, min_compaction_lag_ms, now_ms))))?)
    }

    fn roll(&self, py: Python<'_>) -> PyResult<()> {
        self.detached(py, |log| log.roll())
    }

    /// Python keeps the name `refresh`; the engine's verb is `Log::follow`.
    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        self.detached(py, |log| log.follow())
    }

    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.detached(py, |log| log.flush())
    }

    /// `timeout` (seconds) bounds both waits: for this log's mutex (another thread may be
    /// inside an append that waits for the partition lock) and for the partition lock.
    #[pyo3(signature = (timeout=None))]
    fn close(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let Some(timeout) = timeout else {
            return py
                .detach(|| {
                    let mut log = self.lock_even_poisoned();
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| log.close()))
                        .unwrap_or_else(|payload| Err(log.poison_after_panic(&*payload)))
                })
                .map_err(Into::into);
        };
        if !(timeout.is_finite() && timeout >= 0.0) {
            return Err(crate::Error::config(format!(
                "timeout must be a non-negative number of seconds, got {timeout}"
            ))
            .into());
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(timeout.min(1e9));
        py.detach(|| {
            let closed = crate::storage::lock::retry_until(Some(deadline), || match self.inner.try_lock() {
                Ok(mut log) => Some(log.close_within(Some(deadline))),
                Err(std::sync::TryLockError::Poisoned(_)) => {
                    Some(self.lock_even_poisoned().close_within(Some(deadline)))
                }
                Err(std::sync::TryLockError::WouldBlock) => None,
            });
            closed.unwrap_or_else(|| {
                Err(crate::Error::LockTimeout {
                    path: std::path::PathBuf::from("this log"),
                    waited_ms: (timeout * 1000.0) as u64,
                    holder: "another thread of this process, inside an operation on the log".into(),
                })
            })
        })
        .map_err(Into::into)
    }

    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        py.detach(|| self.lock_even_poisoned().closed)
    }

    #[getter]
    fn path(&self) -> std::path::PathBuf {
        self.path.clone()
    }
}
