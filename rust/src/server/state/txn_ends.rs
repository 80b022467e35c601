//! EndTxn answered once the end is decided, as a Kafka broker's coordinator answers it once
//! PrepareCommit / PrepareAbort is replicated: the transaction's records and the Prepare* record
//! are durable (`Coordinator::end_txn_decided_as`), and the markers and Complete* are written
//! right after, off the answer's path (`complete_later`: a task that runs
//! `Coordinator::complete_decided` on the blocking pool), started by `Completion` once the answer
//! is written, or as soon as the request ends without it (its client gone). The producer's next
//! transaction starts meanwhile instead of after them.
//!
//! Until they are written the id is in Prepare*, so a request of the same transactional id
//! (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn, a transactional
//! Produce) first waits here for the completion (`settled`: asleep, holding no request worker
//! and no blocking slot), bounded by its request's wait (`waits::deadline`), then goes on. It
//! never sees a half-done end: every coordinator operation takes the id's lock and completes a
//! Prepare* state it finds first, so one that comes before the completion (its wait ran out, or
//! it came in between) completes the end itself, or answers CONCURRENT_TRANSACTIONS (retriable)
//! when the completion holds the id's lock past its wait.
//!
//! A completion that fails (a partition's append lock held by a stopped writer past its wait, a
//! full disk) is logged at WARNING and left to the next user of the id or to the periodic
//! `Coordinator::abort_expired_and_complete_pending`; a server killed before it is done leaves the
//! id in Prepare*, completed the same way after the restart. read_committed readers see the
//! transaction once its markers land, as from a Kafka broker. (The embedded producers'
//! `commit_transaction()` still returns only once the end is complete: `Coordinator::end_txn`.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;

use super::broker::Broker;
use super::locks::lock;
use super::waits::{self, NotDone};
use crate::server::log_target::LOG_TARGET;
use crate::storage::log::now_ms;

/// The transactional ids whose decided end is being completed: each with the number of its
/// `Pending` and a receiver that sees `true` (or its sender gone) once the completion is over.
#[derive(Default)]
pub struct PendingEnds {
    ends: Mutex<HashMap<String, (u64, watch::Receiver<bool>)>>,
    next: AtomicU64,
}

/// One decided end to complete (`complete_later`); dropped, it wakes its waiters.
pub struct Pending {
    id: String,
    number: u64,
    done: watch::Sender<bool>,
}

impl PendingEnds {
    /// Register `id`'s decided end, before its EndTxn is answered: the id's next requests wait
    /// for it.
    pub fn start(&self, id: &str) -> Pending {
        let (done, receiver) = watch::channel(false);
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.ends).insert(id.to_string(), (number, receiver));
        Pending { id: id.to_string(), number, done }
    }

    /// The end is complete (or left to the next user of the id): wake its waiters and forget it,
    /// unless a later end of the id took its place.
    fn finish(&self, pending: Pending) {
        let mut ends = lock(&self.ends);
        if ends.get(&pending.id).is_some_and(|(number, _)| *number == pending.number) {
            ends.remove(&pending.id);
        }
        drop(ends);
        let _ = pending.done.send(true);
    }
}

/// Wait (asleep) until no decided end of `id` is being completed, or `deadline`; false when the
/// wait ran out. The request then goes on either way: the coordinator completes what is left.
pub async fn settled(broker: &Broker, id: &str, deadline: Instant) -> bool {
    let Some(mut receiver) = lock(&broker.txn_ends.ends).get(id).map(|(_, r)| r.clone()) else { return true };
    // A sender gone (its completion never ran: the request's task ended) counts as done.
    let waited = waits::within(deadline, receiver.wait_for(|done| *done)).await;
    waited.is_some()
}

/// `settled` for each of a request's transactional ids, the request's one deadline for all.
pub async fn all_settled(broker: &Broker, ids: Vec<String>, deadline: Instant) {
    for id in ids {
        settled(broker, &id, deadline).await;
    }
}

/// A decided end whose completion (`complete_later`) starts when this is dropped: once its
/// EndTxn's answer is written (`connection`), or wherever the request ends instead (its client
/// closed the connection while the end was being decided, an error framing the answer). The end
/// is decided, so its markers follow whatever became of the answer, as a Kafka coordinator's
/// do, not only at the id's next request or the periodic check, with read_committed readers of
/// its partitions stalled until then.
pub struct Completion {
    broker: Arc<Broker>,
    runtime: tokio::runtime::Handle,
    pending: Option<Pending>,
}

impl Completion {
    /// Call on the server's runtime (a worker or its blocking pool).
    pub fn new(broker: Arc<Broker>, pending: Pending) -> Completion {
        Completion { broker, runtime: tokio::runtime::Handle::current(), pending: Some(pending) }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            // Dropped on whichever thread the request ended on: spawn on the server's runtime.
            let _runtime = self.runtime.enter();
            complete_later(&self.broker, pending);
        }
    }
}

/// Write the markers and Complete* of `pending`'s end on the blocking pool (one of the
/// broker's blocking slots), then wake read_committed fetches and the id's waiting requests. A
/// failure is logged and left to the next user of the id (see the module comment).
fn complete_later(broker: &Arc<Broker>, pending: Pending) {
    let broker = Arc::clone(broker);
    tokio::spawn(async move {
        let id = pending.id.clone();
        let done =
            waits::off_workers(&broker, waits::deadline(0), move |b| b.transactions.complete_decided(&id, now_ms()))
                .await;
        let why = match done {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(NotDone::Busy) => Some("no slot for blocking work came free in time (server busy)".to_string()),
            Err(NotDone::Panicked) => Some("the completion panicked (a bug)".to_string()),
            Err(NotDone::Stopped) => Some("the server is stopping".to_string()),
        };
        if let Some(why) = why {
            ::log::warn!(
                target: LOG_TARGET,
                "the markers of the decided end of transactional id {:?} are not all written yet ({why}): the \
                 id's next request or the periodic check completes it",
                pending.id
            );
        }
        broker.announce_append();
        broker.txn_ends.finish(pending);
    });
}
