//! How each `kafkalite._native.Log` call reaches the engine's `Log`: its mutex (poisoned by a
//! panic, never waited for with the GIL held), the GIL released around disk and decoding, the
//! producer's attached append that keeps the GIL when nobody holds the log, a transactional
//! producer's partition joining its transaction, group commit under flush="always", and scans
//! into an arena or an Arrow sink. The Python-facing methods are in `py/log.rs`.

use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;

use crate::storage::log::{Log, TryAppend};
use crate::storage::log_read::RecordSink;
use crate::storage::read_committed::{IsolationLevel, TxnState};
use crate::storage::record::BatchBuilder;

use super::super::arrow::ArrowBatch;
use super::super::record::RecordArena;
use super::PyLog;

impl PyLog {
    /// The log, or `Error::LogPoisoned` if a thread panicked holding it (`sync.rs`).
    /// Only ever called with the GIL released (`py.detach`): the engine may log while it holds
    /// this mutex, and logging takes the GIL (pyo3-log), so a thread waiting here with the GIL
    /// held would deadlock against it. (`try_append_attached` only tries it, with the GIL.)
    pub(super) fn lock(&self) -> crate::Result<MutexGuard<'_, Log>> {
        crate::storage::sync::lock_log(&self.inner, || self.describe())
    }

    /// The log for `close`, `closed` and `path`, even after a panic poisoned the mutex: those
    /// stay usable so a poisoned log can still be closed (and shown). The log is marked
    /// poisoned first, so its close releases the partition without marking the shutdown
    /// clean, and the next open recovers.
    pub(super) fn lock_even_poisoned(&self) -> MutexGuard<'_, Log> {
        self.inner.lock().unwrap_or_else(|poisoned| {
            let mut log = poisoned.into_inner();
            log.poison("a thread panicked while it was using the log".into());
            log
        })
    }

    /// How errors name this log: its directory (immutable, so readable even when poisoned).
    pub(super) fn describe(&self) -> String {
        format!("the log of {}", self.path.display())
    }

    /// Run `f` on the log with the GIL released. A panic (a bug) never crosses into Python as
    /// `PanicException`: it poisons the log and surfaces as `LogPoisonedError`.
    pub(in crate::py) fn detached<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Log) -> crate::Result<T> + Send,
    ) -> PyResult<T> {
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
pub(in crate::py) type AppendedBatch = ((i64, i64), Option<crate::storage::fsync_batch::Ticket>, Option<i64>);

impl PyLog {
    /// The partition directory (what a `DurableMark` names in its errors).
    pub(in crate::py) fn dir(&self) -> &std::path::Path {
        &self.path
    }

    /// A producer's batch, appended without waiting for durability (`append_buffer_deferred`):
    /// `Err(builder)` gives it back untouched when `if_current` and the folder was replaced.
    pub(in crate::py) fn append_batch(
        &self,
        py: Python<'_>,
        builder: BatchBuilder,
        if_current: bool,
    ) -> PyResult<std::result::Result<AppendedBatch, BatchBuilder>> {
        self.join_transaction(py)?;
        match self.try_append_attached(py, builder, if_current)? {
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
    /// Releasing the GIL for each batch let the other Python threads (the producer's sender and,
    /// under acks='all', its acknowledging thread) take it, and the sending thread then waited
    /// to get it back: a GIL hand-off per batch cost more than the append. When the log is held,
    /// `Busy` gives the batch back for the caller to wait for it with the GIL released, and so
    /// does a log whose appends may sync (`Log::appends_without_syncing`: flush="always"
    /// appends do not once the group commit is joined; the caller waits for the ticket without
    /// the GIL). A batch that rolls the segment (a roll writes and syncs checkpoints, the
    /// producer snapshot, under flush="always" the sealed segment) is appended here too, with
    /// the GIL released, in the append lock hold that found the roll due.
    ///
    /// Holding the GIL while holding the mutex is safe: the mutex is only tried here, never
    /// waited for with the GIL held, and the engine's logging under it (which takes the GIL)
    /// finds the GIL held by this very thread. Releasing the GIL for the roll while holding
    /// the mutex is safe for the same reason: whoever holds the GIL meanwhile only tries it.
    fn try_append_attached(&self, py: Python<'_>, builder: BatchBuilder, if_current: bool) -> PyResult<Attached> {
        let mut log = match self.inner.try_lock() {
            Ok(log) if log.appends_without_syncing() => log,
            // Held, poisoned (the detached path raises that, typed), or its appends may sync.
            _ => return Ok(Attached::Busy(builder)),
        };
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if if_current && folder_replaced(&log) {
                return Ok(Attached::Done(Err(builder)));
            }
            let appended = match log.try_append_builder_deferred(builder)? {
                TryAppend::Done(appended) => appended,
                TryAppend::Busy(builder) => return Ok(Attached::Busy(builder)),
                TryAppend::Rolls(builder, hold) => {
                    let log: &mut Log = &mut log;
                    py.detach(move || log.append_rolling(builder, hold))?
                }
            };
            let (range, ticket) = appended;
            Ok(Attached::Done(Ok((range, ticket, log.last_log_append_time()))))
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
pub(super) fn folder_replaced(log: &Log) -> bool {
    match crate::storage::log::dir_identity(log.dir()) {
        Ok(identity) => identity != log.dir_identity(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

impl PyLog {
    /// A transactional producer's log, before an append: the partition joins the open
    /// transaction if it has not yet (refused outside one), and the writer stamps its
    /// batches with the producer's id and epoch.
    pub(super) fn join_transaction(&self, py: Python<'_>) -> PyResult<()> {
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
    /// sync covers them all. A failed sync fails this call and poisons the writer (`fsync_batch`).
    pub(super) fn appended_durably<T: Send>(
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
    pub(super) fn detached_txn<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Log, &mut TxnState) -> crate::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut log = self.lock()?;
            let mut txn = crate::storage::sync::lock_log(&self.txn, || self.describe())?;
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut log, &mut txn))) {
                Ok(result) => result.map_err(|e| e.or_path(log.dir())),
                Err(payload) => Err(log.poison_after_panic(&*payload)),
            }
        })
        .map_err(Into::into)
    }

    /// Decode records into an arena without the GIL, as a reader at `isolation` sees them;
    /// returns it and the offset to continue from.
    pub(super) fn scan_into_arena(
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
    pub(super) fn scan_to_arrow<S: RecordSink>(
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
