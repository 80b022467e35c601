//! `kafkalite._native.Transaction`: a transactional producer's hold on the engine's
//! coordinator (`transactions/`), for `kafkalite.transactions.TransactionManager`: its producer
//! id and epoch, whether a transaction is open, and the partitions added to it. The producer's
//! partition logs are attached to it (`Log.attach_transaction`), so the first batch appended
//! to a partition in a transaction adds the partition first (`ensure_added`, once per
//! partition and transaction, natively: no Python per record or per batch) and every batch
//! is stamped with the producer's id and epoch.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::coordination::transactions::{Coordinator, TransactionMetadata, TransactionState};
use crate::storage::error::{Error, TxnErrorKind};
use crate::storage::log::now_ms;

/// What a transaction holds between calls.
#[derive(Default)]
struct Inner {
    producer: Option<(i64, i16)>,
    open: bool,
    added: HashSet<(String, i32)>,
}

/// Shared by the `Transaction` object and the logs attached to it.
pub struct TxnShared {
    coordinator: Coordinator,
    id: String,
    timeout_ms: i32,
    inner: Mutex<Inner>,
}

impl TxnShared {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        // Every change under this lock is a field store or a set insert: consistent at a panic.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The producer's (id, epoch), once initialized.
    pub fn producer(&self) -> Option<(i64, i16)> {
        self.inner().producer
    }

    /// Before a batch is appended to `(topic, partition)`: the producer's (id, epoch), the
    /// partition added to the open transaction first if it is not yet. Outside a transaction
    /// the append is refused (INVALID_TXN_STATE).
    pub fn ensure_added(&self, py: Python<'_>, topic: &str, partition: i32) -> PyResult<(i64, i16)> {
        let key = (topic.to_string(), partition);
        let (producer, known) = {
            let inner = self.inner();
            let Some(producer) = inner.producer.filter(|_| inner.open) else {
                return Err(Error::txn(
                    TxnErrorKind::InvalidTxnState,
                    format!(
                        "a record for {topic}-{partition} of transactional producer {:?} outside a transaction: \
                         call begin_transaction() first",
                        self.id
                    ),
                )
                .into());
            };
            (producer, inner.added.contains(&key))
        };
        if !known {
            let (pid, epoch) = producer;
            let parts = [key.clone()];
            py.detach(|| self.coordinator.add_partitions(&self.id, pid, epoch, &parts, now_ms()))?;
            self.inner().added.insert(key);
        }
        Ok(producer)
    }
}

#[pyclass(frozen, name = "Transaction", module = "kafkalite._native")]
pub struct PyTransaction {
    pub(super) shared: Arc<TxnShared>,
}

fn metadata_dict<'py>(py: Python<'py>, m: &TransactionMetadata) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("transactional_id", &m.transactional_id)?;
    d.set_item("producer_id", m.producer_id)?;
    d.set_item("producer_epoch", m.producer_epoch)?;
    d.set_item("transaction_timeout_ms", m.timeout_ms)?;
    d.set_item("state", m.state.name())?;
    d.set_item("partitions", m.partitions.iter().cloned().collect::<Vec<_>>())?;
    d.set_item("last_update_ms", m.last_update_ms)?;
    d.set_item("start_ms", m.start_ms)?;
    Ok(d)
}

#[pymethods]
impl PyTransaction {
    #[new]
    #[pyo3(signature = (data_dir, transactional_id, transaction_timeout_ms=60_000, lock_wait_ms=5_000))]
    fn new(
        data_dir: std::path::PathBuf,
        transactional_id: String,
        transaction_timeout_ms: i32,
        lock_wait_ms: u64,
    ) -> PyResult<Self> {
        if transactional_id.is_empty() {
            return Err(Error::config("transactional_id must be a non-empty str").into());
        }
        let coordinator = Coordinator::open(&data_dir)?.with_lock_wait(std::time::Duration::from_millis(lock_wait_ms));
        let shared = TxnShared {
            coordinator,
            id: transactional_id,
            timeout_ms: transaction_timeout_ms,
            inner: Mutex::new(Inner::default()),
        };
        Ok(PyTransaction { shared: Arc::new(shared) })
    }

    #[getter]
    fn transactional_id(&self) -> &str {
        &self.shared.id
    }

    /// (producer id, epoch), or None before `init_producer_id`.
    #[getter]
    fn producer(&self) -> Option<(i64, i16)> {
        self.shared.inner().producer
    }

    #[getter]
    fn in_transaction(&self) -> bool {
        self.shared.inner().open
    }

    /// The partitions added to the open transaction.
    #[getter]
    fn partitions(&self) -> Vec<(String, i32)> {
        let mut parts: Vec<_> = self.shared.inner().added.iter().cloned().collect();
        parts.sort();
        parts
    }

    /// InitProducerId: fences older producers of the id, aborts its open transaction.
    /// `expected`: the (producer id, epoch) the caller takes for the id's current one (default:
    /// this object's own); PRODUCER_FENCED when it is not, checked under the id's lock (how
    /// `kafkalite transactions abort` aborts only the transaction it described).
    #[pyo3(signature = (expected=None))]
    fn init_producer_id(&self, py: Python<'_>, expected: Option<(i64, i16)>) -> PyResult<(i64, i16)> {
        let s = &self.shared;
        let expected = expected.or(s.inner().producer);
        let producer = py.detach(|| s.coordinator.init_producer_id(&s.id, s.timeout_ms, expected, now_ms()))?;
        let mut inner = s.inner();
        *inner = Inner { producer: Some(producer), ..Inner::default() };
        Ok(producer)
    }

    /// A transaction starts (locally, as Kafka's client: the coordinator learns of it from
    /// the first partition added).
    fn begin(&self) -> PyResult<()> {
        let mut inner = self.shared.inner();
        if inner.producer.is_none() {
            return Err(Error::txn(TxnErrorKind::InvalidTxnState, "call init_transactions() first").into());
        }
        if inner.open {
            return Err(Error::txn(TxnErrorKind::InvalidTxnState, "a transaction is open already").into());
        }
        inner.open = true;
        inner.added.clear();
        Ok(())
    }

    /// AddPartitionsToTxn of several partitions at once (one coordinator record), for a writer
    /// that knows them all before appending (the Spark sink's commit); the attached logs'
    /// appends then find them added.
    fn add_partitions(&self, py: Python<'_>, partitions: Vec<(String, i32)>) -> PyResult<()> {
        let s = &self.shared;
        let (pid, epoch) = self.open_producer()?;
        let new: Vec<_> = {
            let inner = s.inner();
            partitions.into_iter().filter(|p| !inner.added.contains(p)).collect()
        };
        if new.is_empty() {
            return Ok(());
        }
        py.detach(|| s.coordinator.add_partitions(&s.id, pid, epoch, &new, now_ms()))?;
        s.inner().added.extend(new);
        Ok(())
    }

    /// AddOffsetsToTxn and TxnOffsetCommit: `offsets` [(topic, partition, offset, metadata)]
    /// of `group_id` count iff the transaction commits.
    fn send_offsets(
        &self,
        py: Python<'_>,
        group_id: &str,
        offsets: Vec<(String, i32, i64, Option<String>)>,
    ) -> PyResult<()> {
        let s = &self.shared;
        let (pid, epoch) = self.open_producer()?;
        py.detach(|| {
            let now = now_ms();
            s.coordinator.add_offsets(&s.id, pid, epoch, group_id, now)?;
            s.coordinator.txn_offset_commit(&s.id, pid, epoch, group_id, &offsets, now)
        })?;
        let partition = crate::coordination::offsets_codec::offsets_partition(group_id);
        s.inner().added.insert((crate::coordination::offsets_codec::OFFSETS_TOPIC.to_string(), partition));
        Ok(())
    }

    /// EndTxn: commit (or abort) the open transaction. One that added nothing ends locally.
    fn end(&self, py: Python<'_>, commit: bool) -> PyResult<()> {
        let s = &self.shared;
        let (pid, epoch) = self.open_producer()?;
        if !s.inner().added.is_empty() {
            py.detach(|| s.coordinator.end_txn(&s.id, pid, epoch, commit, now_ms()))?;
        }
        let mut inner = s.inner();
        inner.open = false;
        inner.added.clear();
        Ok(())
    }

    /// Abort transactions past their timeout and complete crashed ends; returns how many.
    fn abort_expired_and_complete_pending(&self, py: Python<'_>) -> PyResult<usize> {
        let s = &self.shared;
        Ok(py.detach(|| s.coordinator.abort_expired_and_complete_pending(now_ms()))?)
    }

    /// Close the coordinator's logs (reopened if used again).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let s = &self.shared;
        Ok(py.detach(|| s.coordinator.close())?)
    }

    /// The metadata of `transactional_id` (default: this one), or None.
    #[pyo3(signature = (transactional_id=None))]
    fn describe<'py>(&self, py: Python<'py>, transactional_id: Option<&str>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let s = &self.shared;
        let id = transactional_id.unwrap_or(&s.id);
        let m = py.detach(|| s.coordinator.describe(id))?;
        m.map(|m| metadata_dict(py, &m)).transpose()
    }
}

impl PyTransaction {
    /// The producer of the open transaction, or INVALID_TXN_STATE.
    fn open_producer(&self) -> PyResult<(i64, i16)> {
        let inner = self.shared.inner();
        match inner.producer {
            Some(p) if inner.open => Ok(p),
            _ => {
                Err(Error::txn(TxnErrorKind::InvalidTxnState, "no transaction is open: call begin_transaction() first")
                    .into())
            }
        }
    }
}

/// Every transactional id of a data directory, as dicts (for Admin and the CLI).
#[pyfunction]
pub fn list_transactions<'py>(py: Python<'py>, data_dir: std::path::PathBuf) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let all = py.detach(|| Coordinator::open(&data_dir)?.list())?;
    all.iter().map(|m| metadata_dict(py, m)).collect()
}

/// A `__transaction_state` record (TransactionLogKey, TransactionLogValue v0/v1 or None for a
/// tombstone) as (transactional id, metadata dict or None): what kafkalite reads of a broker's.
#[pyfunction]
pub fn transaction_log_decode<'py>(
    py: Python<'py>,
    key: &[u8],
    value: Option<&[u8]>,
) -> PyResult<(String, Option<Bound<'py, PyDict>>)> {
    let id = crate::coordination::transactions::state_log::decode_key(key)?;
    let metadata = match value {
        None => None,
        Some(v) => Some(metadata_dict(py, &crate::coordination::transactions::state_log::decode_value(&id, v)?)?),
    };
    Ok((id, metadata))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTransaction>()?;
    m.add_function(wrap_pyfunction!(transaction_log_decode, m)?)?;
    m.add_function(wrap_pyfunction!(list_transactions, m)?)?;
    m.add("TRANSACTION_STATE_TOPIC", crate::coordination::transactions::TRANSACTION_STATE_TOPIC)?;
    m.add("MAX_TRANSACTION_TIMEOUT_MS", crate::coordination::transactions::MAX_TRANSACTION_TIMEOUT_MS)?;
    let states: Vec<&str> = (0i8..).map_while(TransactionState::from_id).map(TransactionState::name).collect();
    m.add("TRANSACTION_STATES", states)?;
    Ok(())
}
