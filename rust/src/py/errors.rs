//! Engine errors become the exception classes defined in Python (`kafkalite.errors`), so
//! they can subclass both `KafkaliteError` and the matching builtin (ValueError, OSError...).
//!
//! Each class is a typed handle (`import_exception!`): pyo3 imports it once per process and
//! caches the type object, instead of a module import and attribute lookup on every error.
//! I/O errors go through `kafkalite.errors.io_error`, the one place that picks the class for an
//! errno (FileNotFoundError for ENOENT...), so both layers raise the same classes.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::storage::error::{Error, TxnErrorKind};
use crate::storage::producer_state::Refusal;

pyo3::import_exception!(kafkalite.errors, CorruptRecordError);
pyo3::import_exception!(kafkalite.errors, OffsetOutOfRangeError);
pyo3::import_exception!(kafkalite.errors, LogLockedError);
pyo3::import_exception!(kafkalite.errors, InvalidConfigError);
pyo3::import_exception!(kafkalite.errors, RecordTooLargeError);
pyo3::import_exception!(kafkalite.errors, InvalidRecordError);
pyo3::import_exception!(kafkalite.errors, UnsupportedFormatError);
pyo3::import_exception!(kafkalite.errors, LogClosedError);
pyo3::import_exception!(kafkalite.errors, LogPoisonedError);
pyo3::import_exception!(kafkalite.errors, UnknownTopicOrPartitionError);
pyo3::import_exception!(kafkalite.errors, CorruptMetadataError);
pyo3::import_exception!(kafkalite.errors, InvalidTopicError);
pyo3::import_exception!(kafkalite.errors, OutOfOrderSequenceNumberError);
pyo3::import_exception!(kafkalite.errors, InvalidProducerEpochError);
pyo3::import_exception!(kafkalite.errors, ProducerFencedError);
pyo3::import_exception!(kafkalite.errors, InvalidTxnStateError);
pyo3::import_exception!(kafkalite.errors, InvalidProducerIdMappingError);
pyo3::import_exception!(kafkalite.errors, InvalidTransactionTimeoutError);
pyo3::import_exception!(kafkalite.errors, ConcurrentTransactionsError);
pyo3::import_exception!(kafkalite.errors, TransactionalIdNotFoundError);
// Raised by the binding itself (a Python value of a type no config takes), not mapped from `Error`.
pyo3::import_exception!(kafkalite.errors, InvalidTypeError);
pyo3::import_exception!(kafkalite.errors, InvalidTopicTypeError);
pyo3::import_exception!(kafkalite.errors, IllegalStateError);

/// The one mapping from engine error to Python exception.
fn to_pyerr(py: Python<'_>, e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::Corrupt(_) => CorruptRecordError::new_err(msg),
        Error::OffsetOutOfRange { .. } => OffsetOutOfRangeError::new_err(msg),
        Error::Locked { .. } | Error::LockTimeout { .. } => LogLockedError::new_err(msg),
        Error::InvalidConfig(_) => InvalidConfigError::new_err(msg),
        Error::RecordTooLarge { .. } => RecordTooLargeError::new_err(msg),
        Error::InvalidRecord(_) => InvalidRecordError::new_err(msg),
        Error::Unsupported(_) => UnsupportedFormatError::new_err(msg),
        Error::Closed(_) => LogClosedError::new_err(msg),
        Error::Poisoned(_) | Error::LogPoisoned(_) => LogPoisonedError::new_err(msg),
        Error::UnknownTopicOrPartition(_) => UnknownTopicOrPartitionError::new_err(msg),
        Error::CorruptMetadata(_) => CorruptMetadataError::new_err(msg),
        Error::InvalidTopic(_) => InvalidTopicError::new_err(msg),
        Error::Io { context, path, source } => io_error(py, &context, path, &source),
        Error::Transaction { kind, .. } => match kind {
            TxnErrorKind::ProducerFenced => ProducerFencedError::new_err(msg),
            TxnErrorKind::InvalidProducerEpoch => InvalidProducerEpochError::new_err(msg),
            TxnErrorKind::InvalidTxnState => InvalidTxnStateError::new_err(msg),
            TxnErrorKind::InvalidProducerIdMapping => InvalidProducerIdMappingError::new_err(msg),
            TxnErrorKind::InvalidTransactionTimeout => InvalidTransactionTimeoutError::new_err(msg),
            TxnErrorKind::ConcurrentTransactions => ConcurrentTransactionsError::new_err(msg),
            TxnErrorKind::TransactionalIdNotFound => TransactionalIdNotFoundError::new_err(msg),
        },
    }
}

/// An idempotent append the producer-state checks refused (`Log::append_produce`), as the
/// exception of Kafka's error code (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH).
pub fn refused(refusal: Refusal) -> PyErr {
    match refusal {
        Refusal::OutOfOrderSequence(m) => OutOfOrderSequenceNumberError::new_err(m),
        Refusal::InvalidProducerEpoch(m) => InvalidProducerEpochError::new_err(m),
    }
}

/// `kafkalite.errors.io_error(errno, strerror, filename)`: the KafkaliteIOError subclass that is
/// also the builtin for the errno, with `errno`, `strerror` and `filename` set.
fn io_error(py: Python<'_>, context: &str, path: Option<std::path::PathBuf>, source: &std::io::Error) -> PyErr {
    static IO_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let errno = crate::storage::failpoint::errno(source);
    // Rust prints an OS error as "<strerror> (os error N)"; Python shows the errno itself.
    let described = source.to_string();
    let described = match errno {
        Some(n) => described.strip_suffix(&format!(" (os error {n})")).unwrap_or(&described).to_string(),
        None => described,
    };
    let strerror = format!("{context}: {described}");
    let made = IO_ERROR
        .import(py, "kafkalite.errors", "io_error")
        .and_then(|f| f.call1((errno, strerror, path.map(std::path::PathBuf::into_os_string))))
        .map(PyErr::from_value);
    made.unwrap_or_else(|err| {
        // kafkalite.errors itself failed to load: still an exception, never a panic.
        PyException::new_err(format!("{context}: {source} (and kafkalite.errors failed: {err})"))
    })
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        Python::attach(|py| to_pyerr(py, e))
    }
}
