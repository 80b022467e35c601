//! In-process locks around a log. A thread that panics while it holds one poisons it (Rust's
//! `PoisonError`): the log it guards may be half way through an operation, so the next caller
//! gets `Error::LogPoisoned` instead of that state, and the only way on is closing the log
//! (which never marks the shutdown clean) and opening it again (which recovers).

use std::sync::{Mutex, MutexGuard};

use crate::storage::error::{Error, Result};

/// Lock `mutex`, or fail with `Error::LogPoisoned` (naming `what`) if a holder panicked.
pub fn lock_log<'a, T>(mutex: &'a Mutex<T>, what: impl FnOnce() -> String) -> Result<MutexGuard<'a, T>> {
    mutex.lock().map_err(|_| Error::LogPoisoned(what()))
}
