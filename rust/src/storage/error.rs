//! The engine's one error type. The Python layer maps each variant to one exception class
//! under `kafkalite.KafkaliteError`, so every message here is written for the end user:
//! it says what went wrong and what to do about it.

use std::io;
use std::path::{Path, PathBuf};

/// Every way the engine can fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bytes that are not a valid v2 record batch (bad length, CRC, varint, magic, ...).
    #[error("corrupt record data: {0}")]
    Corrupt(String),

    /// An offset outside `[log start offset, log end offset]`.
    #[error("offset {offset} is out of range: the log holds offsets [{start}, {end})")]
    OffsetOutOfRange { offset: i64, start: i64, end: i64 },

    /// Another writer holds the partition's lock file.
    #[error(
        "{path} is locked by another writer ({holder}); close that writer first, or open this log with readonly=True"
    )]
    Locked { path: PathBuf, holder: String },

    /// A wait for the partition's append lock ran out: its holder is stopped or hung.
    #[error(
        "gave up after {waited_ms} ms waiting for the append lock of {path}, held by a writer that does not \
         release it (stopped or hung?); the writers are: {holder}"
    )]
    LockTimeout { path: PathBuf, waited_ms: u64, holder: String },

    /// A setting or argument the caller can fix.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// A batch or record larger than `max_message_bytes`.
    #[error("record batch of {size} bytes exceeds max_message_bytes ({max}); send fewer or smaller records per batch")]
    RecordTooLarge { size: usize, max: usize },

    /// A record this log refuses, such as a null key on a compacted topic.
    #[error("invalid record: {0}")]
    InvalidRecord(String),

    /// Data we can read in principle but do not support (magic v0/v1, unknown codec, ...).
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// The log was closed, or opened read-only and asked to write.
    #[error("{0}")]
    Closed(String),

    /// A write, flush or publish failed earlier (or another process truncated the file): the
    /// fate of unflushed data is unknown, so writes stop. `{0}` says what failed.
    #[error(
        "the log refuses writes after a failure that may have lost unflushed data ({0}); reopen it to run recovery"
    )]
    Poisoned(String),

    /// A thread panicked while it held the mutex around a log (a bug): what the log holds in
    /// memory is unknown, so it takes no more calls; reopening it runs recovery.
    #[error("a thread panicked while it was using {0}, so its state in memory is unknown; close it and open it again")]
    LogPoisoned(String),

    /// The partition's directory was deleted (its topic deleted, perhaps created again)
    /// since this log opened it (Kafka's UNKNOWN_TOPIC_OR_PARTITION).
    #[error("unknown topic or partition: {0}")]
    UnknownTopicOrPartition(String),

    /// An operation a topic refuses: Kafka's INVALID_TOPIC_EXCEPTION, such as deleting an
    /// internal topic or its records (`datadir::refuse_internal`).
    #[error("{0}")]
    InvalidTopic(String),

    /// A damaged `.kafkalite-topics.json` (`datadir.rs`); the message names the file, the topic
    /// and the fix.
    #[error("{0}")]
    CorruptMetadata(String),

    /// A transaction coordinator's or a transactional append's refusal, with Kafka's error
    /// (`TxnErrorKind::code`); `message` says what happened and what to do.
    #[error("{message}")]
    Transaction { kind: TxnErrorKind, message: String },

    /// Any I/O failure, with what the engine was doing and, when known, the file it concerned
    /// (the binding hands both to Python as `OSError.strerror` / `.filename`).
    #[error("{context}: {source}")]
    Io { context: String, path: Option<PathBuf>, source: io::Error },
}

pub type Result<T> = std::result::Result<T, Error>;

/// The transaction errors of Kafka's protocol (`Errors.java`), one per error code the
/// coordinator (`transactions/`) and transactional appends answer with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxnErrorKind {
    /// PRODUCER_FENCED (90): a newer producer with the same transactional id took over.
    ProducerFenced,
    /// INVALID_PRODUCER_EPOCH (47): a batch's epoch is older than the partition's for its producer.
    InvalidProducerEpoch,
    /// INVALID_TXN_STATE (48): the operation is not valid in the transaction's state.
    InvalidTxnState,
    /// INVALID_PRODUCER_ID_MAPPING (49): the producer id is not the transactional id's.
    InvalidProducerIdMapping,
    /// INVALID_TRANSACTION_TIMEOUT (50): outside 1..=transaction.max.timeout.ms.
    InvalidTransactionTimeout,
    /// CONCURRENT_TRANSACTIONS (51, retriable): another operation holds the transactional id.
    ConcurrentTransactions,
    /// TRANSACTIONAL_ID_NOT_FOUND (105): no such transactional id.
    TransactionalIdNotFound,
}

impl TxnErrorKind {
    /// Kafka's error code.
    pub fn code(self) -> i16 {
        match self {
            TxnErrorKind::ProducerFenced => 90,
            TxnErrorKind::InvalidProducerEpoch => 47,
            TxnErrorKind::InvalidTxnState => 48,
            TxnErrorKind::InvalidProducerIdMapping => 49,
            TxnErrorKind::InvalidTransactionTimeout => 50,
            TxnErrorKind::ConcurrentTransactions => 51,
            TxnErrorKind::TransactionalIdNotFound => 105,
        }
    }

    /// Whether a client retries it (Kafka's `RetriableException` subclasses).
    pub fn retriable(self) -> bool {
        self == TxnErrorKind::ConcurrentTransactions
    }
}

impl Error {
    /// Wrap an I/O error with what we were doing and to which file.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io { context: context.into(), path: None, source }
    }

    /// An I/O error concerning the file or directory `path`.
    pub fn io_at(path: impl Into<PathBuf>, context: impl Into<String>, source: io::Error) -> Self {
        Error::Io { context: context.into(), path: Some(path.into()), source }
    }

    /// Name `path` as the file an I/O error concerned, unless it names one already: a caller
    /// that knows which partition it was working on gives every I/O error a file name.
    pub fn or_path(self, path: &Path) -> Self {
        match self {
            Error::Io { context, path: None, source } => Error::Io { context, path: Some(path.to_path_buf()), source },
            other => other,
        }
    }

    pub fn corrupt(msg: impl Into<String>) -> Self {
        Error::Corrupt(msg.into())
    }

    pub fn config(msg: impl Into<String>) -> Self {
        Error::InvalidConfig(msg.into())
    }

    /// A transaction error of `kind`.
    pub fn txn(kind: TxnErrorKind, message: impl Into<String>) -> Self {
        Error::Transaction { kind, message: message.into() }
    }

    /// The transaction error kind, if this is one.
    pub fn txn_kind(&self) -> Option<TxnErrorKind> {
        match self {
            Error::Transaction { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// Attach a context message (and, with `context_at`, the file concerned) to an `io::Result`.
pub trait IoContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
    fn context_at(self, path: &Path, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io(what(), e))
    }

    fn context_at(self, path: &Path, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io_at(path, what(), e))
    }
}
