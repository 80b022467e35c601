//! The coordinator role for one transactional id, held only for the length of one operation:
//! an exclusive flock on `.kafkalite-transactions/<id>.lock` in the data directory, so several
//! processes (embedded producers, `kafkalite serve`) coordinate the same id without a
//! coordinator process, and a holder that dies releases it. Waits are bounded: a holder that
//! is stopped (SIGSTOP) or hung makes the others fail with CONCURRENT_TRANSACTIONS (retriable,
//! as Kafka answers while another operation holds the transaction), never wait forever.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::storage::error::{Error, Result, TxnErrorKind};
use crate::storage::files::{id_file_name, TRANSACTIONS_DIR, TRANSACTION_LOCK_SUFFIX};

/// A held per-id lock; dropping it releases the flock.
#[derive(Debug)]
pub struct TxnLock {
    _file: File,
}

/// Whether the id's lock can be had within `wait`: `Ok(None)` when another holder kept it
/// that long (or, with `wait` zero, holds it now).
pub fn try_lock(data_dir: &Path, transactional_id: &str, wait: Duration) -> Result<Option<TxnLock>> {
    let dir = data_dir.join(TRANSACTIONS_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io_at(&dir, format!("cannot create {}", dir.display()), e))?;
    let name = format!("{}{TRANSACTION_LOCK_SUFFIX}", id_file_name(transactional_id, "transactional_id")?);
    let path = dir.join(name);
    let file = crate::storage::nofollow::open(
        crate::storage::nofollow::options().read(true).write(true).create(true),
        &path,
        "transaction lock file",
    )?;
    let locked = crate::storage::lock::lock_exclusive_until(&file, &path, Some(Instant::now() + wait))?;
    Ok(locked.then_some(TxnLock { _file: file }))
}

/// `try_lock`, or CONCURRENT_TRANSACTIONS naming the holder when the wait ran out.
pub fn lock(data_dir: &Path, transactional_id: &str, wait: Duration) -> Result<TxnLock> {
    if let Some(lock) = try_lock(data_dir, transactional_id, wait)? {
        return Ok(lock);
    }
    let path = data_dir.join(TRANSACTIONS_DIR);
    let holder = id_file_name(transactional_id, "transactional_id")
        .ok()
        .and_then(|n| File::open(path.join(format!("{n}{TRANSACTION_LOCK_SUFFIX}"))).ok())
        .map_or_else(
            || "another process".to_string(),
            |f| crate::storage::lock::describe_holder(&f, || "another process".into()),
        );
    Err(Error::txn(
        TxnErrorKind::ConcurrentTransactions,
        format!(
            "transactional id {transactional_id:?} is busy: {holder} held its coordinator lock for over {} ms \
             (stopped or hung?); retry later",
            wait.as_millis()
        ),
    ))
}
