//! Locking the server's shared state: a mutex no panic can leave half-updated is recovered, a
//! partition's log is not, and an append waits for the partition's append lock (which other
//! processes share) without holding a request worker past `waits::LOCK_WAIT`. A leaf of the
//! state, so that every piece of it can lock without importing the broker.

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use super::waits::LOCK_WAIT;
use crate::storage::error::{Error, Result};
use crate::storage::log::Log;

/// Lock a mutex whose state no panic can leave half-updated, recovering it if a holder
/// panicked, so one failed request never wedges the others. Each use says why its state is
/// consistent at every point a holder could panic (see the fields); a partition's log is not,
/// and is locked with `lock_log`.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Lock an open partition's log. A request that panicked holding it (a bug) may have left the
/// log's state in memory half-updated, so instead of that state: the log is marked poisoned (its
/// close never marks the shutdown clean), the panic is logged at ERROR, and this request and
/// every later one on it get `Error::LogPoisoned` (KAFKA_STORAGE_ERROR), after which the caller
/// forgets the partition (`codes::needs_reopen`): the next request reopens it, which recovers.
pub fn lock_log(log: &Mutex<Log>) -> Result<MutexGuard<'_, Log>> {
    log.lock().map_err(poisoned)
}

/// `lock_log`'s answer to a log a panicking request left behind (the guard of which it drops).
fn poisoned(poisoned: std::sync::PoisonError<MutexGuard<'_, Log>>) -> Error {
    let mut log = poisoned.into_inner();
    let dir = log.dir().display().to_string();
    log.poison("a request panicked while it was using the log".into());
    ::log::error!(
        target: "kafkalite::server",
        "a request panicked while it held the log of {dir}: that partition answers KAFKA_STORAGE_ERROR until it is reopened"
    );
    Error::LogPoisoned(format!("the log of {dir}"))
}

/// Try to lock an open partition's log without waiting: `Ok(None)` while another request holds
/// it (a caller retries with `waits::retry_until`); a poisoned log as `lock_log` says.
pub fn try_lock_log(log: &Mutex<Log>) -> Result<Option<MutexGuard<'_, Log>>> {
    match log.try_lock() {
        Ok(guard) => Ok(Some(guard)),
        Err(std::sync::TryLockError::WouldBlock) => Ok(None),
        // The poisoned guard is this lock already: locking again here would wait for itself.
        Err(std::sync::TryLockError::Poisoned(e)) => Err(poisoned(e)),
    }
}

/// Append with `f` under a partition's append lock, from a thread that may block (off the request
/// workers): the log and its append lock are tried without waiting and retried with backoff
/// until `LOCK_WAIT`, so the log is never held while another process's lock is waited for
/// (other requests read it meanwhile). Gives up with `Error::LockTimeout` naming the holder.
pub fn append_blocking<T>(log: &Mutex<Log>, mut f: impl FnMut(&mut Log) -> Result<T>) -> Result<T> {
    let started = Instant::now();
    let attempt = || match try_lock_log(log) {
        Ok(Some(mut log)) => log.try_with_append_lock(&mut f).transpose(),
        Ok(None) => None,
        Err(e) => Some(Err(e)),
    };
    crate::storage::lock::retry_until(Some(started + LOCK_WAIT), attempt).unwrap_or_else(|| {
        let (path, holder) = match log.try_lock() {
            Ok(log) => (log.dir().to_path_buf(), log.append_lock_holder()),
            Err(_) => (Default::default(), "a request of this server (the partition's log stayed busy)".into()),
        };
        let waited_ms = started.elapsed().as_millis() as u64;
        ::log::warn!(
            target: "kafkalite::server",
            "gave up after {waited_ms} ms waiting for the append lock of {}, held by {holder} (stopped or hung?)",
            path.display()
        );
        Err(Error::LockTimeout { path, waited_ms, holder })
    })
}
