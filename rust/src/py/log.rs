//! `kafkalite._native.Log`: the engine's `Log` behind a mutex, with the GIL released for
//! every call that touches disk or decodes.

use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::arrow::ArrowSink;
use crate::cleaner::CleanOptions;
use crate::log::Produced;
use crate::log::{now_ms, Log};
use crate::log_read::RecordSink;
use crate::options::{FlushPolicy, LogConfig};
use crate::record::{BatchBuilder, Compression, Header, ProducerStamp, RecordInput, TimestampType};
use crate::spark::SparkSink;
use crate::txn::{IsolationLevel, TxnState};

use super::arrow::ArrowBatch;
use super::buffer::{bytes_items, BatchView};
use super::consumer::ConsumerRecord;
use super::durable::DurableMark;
use super::errors::{refused, InvalidTypeError};
use super::producer::BatchBuffer;
use super::record::{header_slices, held_headers, to_bytes, HeldHeaders, Record, RecordArena};
use super::transactions::{PyTransaction, TxnShared};

/// (base_offset, valid_bytes, dropped_bytes, reason) as Python sees a recovery report.
type RecoveryTuple = (i64, u64, u64, Option<String>);

#[pyclass(frozen, name = "Log", module = "kafkalite._native")]
pub struct PyLog {
    /// The partition directory (`Log::dir`), kept outside the mutex: it never changes.
    path: std::path::PathBuf,
    inner: Mutex<Log>,
    /// read_committed bookkeeping, learnt incrementally (txn.rs). Locked after `inner`.
    txn: Mutex<TxnState>,
    /// The transactional producer this log appends for (`attach_transaction`), with the
    /// partition it is: each append first makes sure the partition is in the open transaction.
    producer_txn: std::sync::OnceLock<(Arc<TxnShared>, String, i32)>,
    /// The (producer id, epoch) last set on the writer for `producer_txn`.
    stamped: Mutex<Option<(i64, i16)>>,
}

impl PyLog {
    /// The log, or `Error::LogPoisoned` if a thread panicked holding it (`sync.rs`).
    /// Only ever called with the GIL released (`py.detach`): the engine may log while it holds
    /// this mutex, and logging takes the GIL (pyo3-log), so a thread waiting here with the GIL
    /// held would deadlock against it. (`try_append_attached` only tries it, with the GIL.)
    fn lock(&self) -> crate::Result<MutexGuard<'_, Log>> {
        crate::sync::lock_log(&self.inner, || self.describe())
    }

    /// The log for `close`, `closed` and `path`, even after a panic poisoned the mutex: those
    /// stay usable so a poisoned log can still be closed (and shown). The log is marked
    /// poisoned first, so its close releases the partition without marking the shutdown
    /// clean, and the next open recovers.
    fn lock_even_poisoned(&self) -> MutexGuard<'_, Log> {
        self.inner.lock().unwrap_or_else(|poisoned| {
            let mut log = poisoned.into_inner();
            log.poison("a thread panicked while it was using the log".into());
            log
        })
    }

    /// How errors name this log: its directory (immutable, so readable even when poisoned).
    fn describe(&self) -> String {
        format!("the log of {}", self.path.display())
    }

    /// Run `f` on the log with the GIL released. A panic (a bug) never crosses into Python as
    /// `PanicException`: it poisons the log and surfaces as `LogPoisonedError`.
    fn detached<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut Log) -> crate::Result<T> + Send) -> PyResult<T> {
        py.detach(|| {
            let mut log = self.lock()?;
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut log))) {
                // An I/O error that names no file names the partition.
                Ok(result) => result.map_err(|e| e.or_path(log.dir())),
                Err(payload) => Err(log.poison_after_panic(&*payload)),
            }
        })
        .map_err(Into::into)
    }
}

/// What `PyLog::try_append_attached` did: appended (or found the folder replaced, with the
/// batch given back), or nothing because another thread or writer holds the log now.
enum Attached {
    Done(std::result::Result<AppendedBatch, BatchBuilder>),
    Busy(BatchBuilder),
}

/// (first and last offset, the durability ticket under flush="always", the log-append time).
pub(super) type AppendedBatch = ((i64, i64), Option<crate::group_commit::Ticket>, Option<i64>);

impl PyLog {
    /// The partition directory (what a `DurableMark` names in its errors).
    pub(super) fn dir(&self) -> &std::path::Path {
        &self.path
    }

    /// A producer's batch, appended without waiting for durability (`append_buffer_deferred`):
    /// `Err(builder)` gives it back untouched when `if_current` and the folder was replaced.
    pub(super) fn append_batch(
        &self,
        py: Python<'_>,
        builder: BatchBuilder,
        if_current: bool,
    ) -> PyResult<std::result::Result<AppendedBatch, BatchBuilder>> {
        self.join_transaction(py)?;
        match self.try_append_attached(builder, if_current)? {
            Attached::Done(appended) => Ok(appended),
            Attached::Busy(builder) => self.detached(py, |log| {
                if if_current && folder_replaced(log) {
                    return Ok(Err(builder));
                }
                let (range, ticket) = log.append_builder_deferred(builder)?;
                Ok(Ok((range, ticket, log.last_log_append_time())))
            }),
        }
    }

    /// The producer's append without releasing the GIL, when nobody holds the log: neither
    /// another thread of this process (its mutex) nor another writer process (the append lock).
    /// Releasing the GIL for each batch let the other Python threads (the producer's sender
    /// among them) take it, and the sending thread then waited to get it back: a GIL hand-off
    /// per batch cost more than the append. When the log is held, `Busy` gives the batch back
    /// for the caller to wait for it with the GIL released, and so do a log that may sync
    /// during an append (flush="always") and a batch that would roll the segment (a roll
    /// writes and syncs checkpoints). Holding the GIL while holding the mutex is safe: the
    /// mutex is only tried here, never waited for, and the engine's logging under it (which
    /// takes the GIL) finds the GIL held by this very thread.
    fn try_append_attached(&self, builder: BatchBuilder, if_current: bool) -> PyResult<Attached> {
        let mut log = match self.inner.try_lock() {
            // flush="always" may sync (a roll syncs the sealed segment): never with the GIL held.
            Ok(log) if log.config().flush == FlushPolicy::Os => log,
            // Held, or poisoned (the detached path raises that, typed).
            _ => return Ok(Attached::Busy(builder)),
        };
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if if_current && folder_replaced(&log) {
                return Ok(Attached::Done(Err(builder)));
            }
            Ok(match log.try_append_builder_deferred(builder)? {
                Ok((range, ticket)) => Attached::Done(Ok((range, ticket, log.last_log_append_time()))),
                Err(builder) => Attached::Busy(builder),
            })
        }));
        match run {
            Ok(result) => result.map_err(|e: crate::Error| e.or_path(log.dir()).into()),
            Err(payload) => Err(log.poison_after_panic(&*payload).into()),
        }
    }
}

/// Whether the log's partition folder is gone or is another folder of the same name than the
/// one it opened (`Log::dir_identity`). A folder that cannot be stat-ed for another reason
/// counts as current: the append's own check under the lock reports that error, typed.
fn folder_replaced(log: &Log) -> bool {
    match crate::log::dir_identity(log.dir()) {
        Ok(identity) => identity != log.dir_identity(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Batches for a log attached to a transaction must be its producer's transactional ones:
/// anything else would be appended outside the transaction it is meant to be in.
fn check_transactional_batches(data: &[u8], producer: Option<(i64, i16)>) -> crate::Result<()> {
    let mut pos = 0;
    while pos < data.len() {
        let h = crate::record::header::BatchHeader::parse(&data[pos..])?;
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

impl PyLog {
    /// A transactional producer's log, before an append: the partition joins the open
    /// transaction if it has not yet (refused outside one), and the writer stamps its
    /// batches with the producer's id and epoch.
    fn join_transaction(&self, py: Python<'_>) -> PyResult<()> {
        let Some((txn, topic, partition)) = self.producer_txn.get() else { return Ok(()) };
        let producer = txn.ensure_added(py, topic, *partition)?;
        // The writer is stamped once per producer epoch: later batches keep the producer's
        // attached path (no GIL release).
        // (Not held across the detached call: the engine's logging there takes the GIL.)
        let stamped = |s: &Mutex<Option<(i64, i16)>>| s.lock().unwrap_or_else(|p| p.into_inner()).to_owned();
        if stamped(&self.stamped) != Some(producer) {
            self.detached(py, |log| {
                log.set_transactional_producer(Some(producer));
                Ok(())
            })?;
            *self.stamped.lock().unwrap_or_else(|p| p.into_inner()) = Some(producer);
        }
        Ok(())
    }

    /// Run the append `f` with the GIL released, then, under flush="always", wait for group
    /// commit outside the log's mutex: threads sharing this log append while one syncs, and one
    /// sync covers them all. A failed sync fails this call and poisons the writer (`group_commit`).
    fn appended_durably<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Log) -> crate::Result<T> + Send,
    ) -> PyResult<T> {
        let (value, ticket, deadline) = self.detached(py, |log| {
            let (value, ticket) = log.defer_durability(f)?;
            Ok((value, ticket, log.durability_deadline()))
        })?;
        if let Some(ticket) = ticket {
            py.detach(|| ticket.wait(deadline)).map_err(|e| e.or_path(&self.path))?;
        }
        Ok(value)
    }

    /// Run `f` on the log and its transaction state with the GIL released.
    fn detached_txn<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Log, &mut TxnState) -> crate::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut log = self.lock()?;
            let mut txn = crate::sync::lock_log(&self.txn, || self.describe())?;
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut log, &mut txn))) {
                Ok(result) => result.map_err(|e| e.or_path(log.dir())),
                Err(payload) => Err(log.poison_after_panic(&*payload)),
            }
        })
        .map_err(Into::into)
    }

    /// Decode records into an arena without the GIL, as a reader at `isolation` sees them;
    /// returns it and the offset to continue from.
    fn scan_into_arena(
        &self,
        py: Python<'_>,
        isolation: &str,
        start: i64,
        end: Option<i64>,
        max: usize,
    ) -> PyResult<(RecordArena, i64)> {
        let isolation = IsolationLevel::parse(isolation)?;
        self.detached_txn(py, |log, txn| {
            let mut arena = RecordArena::default();
            let next = txn.scan(log, isolation, start, end, max, &mut arena)?;
            Ok((arena, next))
        })
    }

    /// Scan `[start, end)` (at most `max_records`) into a sink made for the expected row count.
    #[allow(clippy::too_many_arguments)]
    fn scan_to_arrow<S: RecordSink>(
        &self,
        py: Python<'_>,
        isolation: &str,
        start: i64,
        end: Option<i64>,
        max_records: Option<usize>,
        make: impl FnOnce(usize) -> S + Send,
        finish: impl FnOnce(S) -> crate::Result<arrow_array::RecordBatch> + Send,
    ) -> PyResult<(ArrowBatch, i64)> {
        let isolation = IsolationLevel::parse(isolation)?;
        let (batch, next) = self.detached_txn(py, |log, txn| {
            let expected = (end.unwrap_or(log.end_offset()) - start).clamp(0, 1 << 20) as usize;
            let limit = max_records.unwrap_or(usize::MAX);
            let mut sink = make(expected.min(limit));
            let next = txn.scan(log, isolation, start, end, limit, &mut sink)?;
            Ok((finish(sink)?, next))
        })?;
        Ok((ArrowBatch::new(batch), next))
    }
}

fn clean_options(delete_retention_ms: i64, min_compaction_lag_ms: i64, now: Option<i64>) -> CleanOptions {
    CleanOptions { now_ms: now.unwrap_or_else(now_ms), delete_retention_ms, min_compaction_lag_ms }
}

/// A batch header as Python's `batch_headers` returns it.
type BatchInfoTuple = (i64, i64, i64, i16, i32, i32, bool);

/// A producer as Python's `producers` returns it.
type ProducerTuple = (i64, i16, i32, i64, i32, i64);

/// Records given as columns: `values` (bytes or None each), `keys` and `headers` (None, or one
/// entry per value), held so their bytes can be borrowed without the GIL.
fn held_columns<'py>(
    values: &Bound<'py, PyAny>,
    keys: Option<&Bound<'py, PyAny>>,
    headers: Option<&Bound<'py, PyAny>>,
    timestamp: i64,
) -> PyResult<Vec<HeldRecord<'py>>> {
    let values = values.try_iter()?.collect::<PyResult<Vec<_>>>()?;
    let keys = column(keys, "keys", values.len())?;
    let headers = column(headers, "headers", values.len())?;
    let mut held = Vec::with_capacity(values.len());
    for (i, value) in values.into_iter().enumerate() {
        held.push(HeldRecord {
            key: to_bytes(keys.as_ref().map(|k| k[i].clone()), "key")?,
            value: to_bytes(Some(value), "value")?,
            headers: held_headers(headers.as_ref().map(|h| &h[i]))?,
            timestamp,
        });
    }
    Ok(held)
}

/// An optional column of one entry per value.
fn column<'py>(c: Option<&Bound<'py, PyAny>>, name: &str, values: usize) -> PyResult<Option<Vec<Bound<'py, PyAny>>>> {
    let Some(c) = c.filter(|c| !c.is_none()) else { return Ok(None) };
    let items = c.try_iter()?.collect::<PyResult<Vec<_>>>()?;
    if items.len() != values {
        let n = items.len();
        return Err(
            crate::Error::config(format!("{name} has {n} entries for {values} values; give one per value")).into()
        );
    }
    Ok(Some(items))
}

fn held_header_slices<'a>(held: &'a [HeldRecord<'_>]) -> PyResult<Vec<Vec<Header<'a>>>> {
    held.iter().map(|h| header_slices(&h.headers)).collect()
}

/// Held records as the engine's inputs (borrowing their bytes).
fn record_inputs<'a>(held: &'a [HeldRecord<'_>], header_slices: &'a [Vec<Header<'a>>]) -> Vec<RecordInput<'a>> {
    held.iter()
        .zip(header_slices)
        .map(|(h, hs)| RecordInput {
            key: h.key.as_ref().map(|b| b.as_bytes()),
            value: h.value.as_ref().map(|b| b.as_bytes()),
            headers: hs,
            timestamp: h.timestamp,
        })
        .collect()
}

/// Held references to one record's Python objects, so their bytes can be borrowed without the GIL.
struct HeldRecord<'py> {
    key: Option<Bound<'py, PyBytes>>,
    value: Option<Bound<'py, PyBytes>>,
    headers: HeldHeaders<'py>,
    timestamp: i64,
}

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
                .unwrap_or_else(|payload| Err(crate::Error::Poisoned(crate::log::panic_message(&*payload))))
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
                (epoch, batches.last().map_or(crate::record::header::NO_SEQUENCE, |b| b.last_seq))
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
        let (topic, partition) = crate::datadir::partition_folder(&name).ok_or_else(|| {
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
            let mut pause = std::time::Duration::from_micros(100);
            loop {
                match self.inner.try_lock() {
                    Ok(mut log) => return log.close_within(Some(deadline)),
                    Err(std::sync::TryLockError::Poisoned(_)) => {
                        return self.lock_even_poisoned().close_within(Some(deadline))
                    }
                    Err(std::sync::TryLockError::WouldBlock) => {}
                }
                let now = std::time::Instant::now();
                if now >= deadline {
                    return Err(crate::Error::LockTimeout {
                        path: std::path::PathBuf::from("this log"),
                        waited_ms: (timeout * 1000.0) as u64,
                        holder: "another thread of this process, inside an operation on the log".into(),
                    });
                }
                std::thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(std::time::Duration::from_millis(20));
            }
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
