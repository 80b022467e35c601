//! How a request waits without taking a request worker (the runtime has two) from everyone
//! else: every wait for something another process or thread holds (a partition's append lock, a
//! partition's log, a group's state lock, a slot for blocking work) is a non-blocking try retried
//! with backoff on the async side, or runs on tokio's blocking pool, and every wait ends at a
//! deadline, after which the request gets its API's retriable error. So a writer stopped
//! (SIGSTOP) while it holds a lock delays only the requests that need that lock.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::storage::lock::Backoff;

/// The longest a request waits for a lock held by another process or by another request: a
/// partition's append lock or log (Produce: REQUEST_TIMED_OUT), a group's state lock (JoinGroup:
/// COORDINATOR_LOAD_IN_PROGRESS), a slot for blocking work. Other writers hold these locks for
/// one append or one read-modify-write (microseconds to milliseconds), so only a stopped or hung
/// holder makes a request wait this long; well under clients' `request.timeout.ms` (30 s), so
/// they get the retriable error rather than a timeout of their own.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// How many requests at a time run blocking work (opening a partition, an admin change, a
/// commit that waits for an append lock) on the blocking pool; more wait for a slot, without a
/// worker, until their deadline.
pub const BLOCKING_SLOTS: usize = 16;

/// The deadline of a wait that starts now and lasts `LOCK_WAIT`, or `limit_ms` when the request
/// asks for less (Produce's `timeout_ms`; 0 or less: no limit of its own).
pub fn deadline(limit_ms: i32) -> Instant {
    let wait = if limit_ms > 0 { LOCK_WAIT.min(Duration::from_millis(limit_ms as u64)) } else { LOCK_WAIT };
    Instant::now() + wait
}

/// Try `attempt` (which must not block for long) until it gives `Some` or `deadline` passes
/// (then `None`), asleep between tries for the engine's `lock::Backoff` pauses, the same as a
/// shared writer's own wait for the append lock (`WriterLock::enter`), so neither side starves.
/// (A thread that may block, one running off the workers, uses `crate::storage::lock::retry_until`.)
pub async fn retry_until<T, F: Future<Output = Option<T>>>(
    deadline: Instant,
    mut attempt: impl FnMut() -> F,
) -> Option<T> {
    let mut backoff = Backoff::until(Some(deadline));
    loop {
        if let Some(done) = attempt().await {
            return Some(done);
        }
        tokio::time::sleep(backoff.next()?).await;
    }
}

/// Why `off_workers` has no result.
#[derive(Debug)]
pub enum NotDone {
    /// No slot came free by the deadline.
    Busy,
    /// The work panicked (a bug); the blocking pool caught it.
    Panicked,
    /// The server is stopping: its runtime's shutdown cancelled the work before it began.
    Stopped,
}

/// Run blocking `work` on tokio's blocking pool once one of the broker's `BLOCKING_SLOTS` is
/// free (waiting for one, asynchronously, until `deadline`), so the request workers go on
/// serving everyone else meanwhile. The slot is held by the work itself: a request whose client
/// went away does not free it before the work is done.
pub async fn off_workers<B: Slots, T: Send + 'static>(
    broker: &Arc<B>,
    deadline: Instant,
    work: impl FnOnce(&B) -> T + Send + 'static,
) -> Result<T, NotDone> {
    let slot = within(deadline, broker.slots().clone().acquire_owned()).await;
    let Some(Ok(slot)) = slot else { return Err(NotDone::Busy) };
    let broker = Arc::clone(broker);
    let (out, spent) = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let start = Instant::now();
        (work(&broker), start.elapsed())
    })
    .await
    .map_err(|e| if e.is_cancelled() { NotDone::Stopped } else { NotDone::Panicked })?;
    // The request's server time, under its request quota (`request_time`).
    super::request_time::add(spent);
    Ok(out)
}

/// Who holds the `BLOCKING_SLOTS` (the broker): a trait, so that waiting needs no import of
/// the broker, whose state uses these waits.
pub trait Slots: Send + Sync + 'static {
    fn slots(&self) -> &Arc<Semaphore>;
}

/// `future`'s output, or `None` if it is not ready by `deadline`.
pub async fn within<F: Future>(deadline: Instant, future: F) -> Option<F::Output> {
    tokio::time::timeout_at(deadline.into(), future).await.ok()
}
