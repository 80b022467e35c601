//! What Produce's acks=all waits for after the append (`--acks-all`): `disk` (the default)
//! answers once the batches are on this host's disk, as the embedded producer's `acks='all'`
//! does (the same group commit, `crate::storage::fsync_batch`: one msync per partition covers every
//! batch appended before it, by this server or any embedded producer); `page-cache` answers once
//! they are in the page cache, as a Kafka broker does (its durability is replication, which a
//! single server has not got). acks=1 always answers at the page cache, acks=0 not at all.
//!
//! Transactional batches are answered at the page cache too, whatever the acks (every
//! transactional producer sends acks=all): a transaction's records need to be durable only when
//! it is decided, as a database's commit, and the coordinator makes them so before it records
//! PrepareCommit / PrepareAbort (`transactions::Coordinator`'s `sync_records`), so EndTxn is
//! answered only once they and the decision are on disk (the markers follow: `txn_ends`). The hole a Produce answer
//! before its sync opens is an OS crash (a killed server keeps the page cache): an open
//! transaction's acknowledged records may be gone, and its producer, on another host, could
//! commit it after the restart. The server's start closes it: after a restart of the machine
//! (another boot id) every open transaction is aborted before any request is answered, its
//! producer fenced (`transactions::boot_id`, `Coordinator::abort_open_after_reboot`).
//!
//! The wait holds no partition lock: other requests append meanwhile (the connection's next
//! Produce requests too: `pipeline`) and share the sync. It holds no thread either while another
//! request's sync runs (`Ticket::poll_turn`: woken when it ends); only a sync itself, and the
//! wait for another process's sync lock, run on tokio's blocking pool, never on the server's two
//! worker threads.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_response::TopicProduceResponse;
use kafka_protocol::protocol::StrBytes;

use super::broker::Broker;
use crate::server::codes;
use crate::server::config::AcksAll;
use crate::storage::error::{Error, Result};
use crate::storage::fsync_batch::{Ticket, Turn};
use crate::storage::log::{DirDurable, Log};

/// One partition's appended batches not yet known durable.
pub struct Pending {
    topic: String,
    partition: i32,
    tickets: Vec<Ticket>,
    dir: Dir,
}

/// A partition's directory, whether its entries are known durable (`Log::durable_tickets`), and
/// the identity of the folder the batches went to (`Log::dir_identity`).
#[derive(Clone)]
struct Dir {
    path: PathBuf,
    durable: DirDurable,
    identity: (u64, u64),
}

/// After a successful append of acks=`acks` (the log still locked): what the answer must wait
/// for, if anything. `since`: the first offset this request appended (or, for a retried
/// idempotent batch, the original's). `transactional`: the batches are all transactional,
/// appended into their producer's open transaction: nothing to wait for (the module comment).
pub fn after_append(
    broker: &Broker,
    log: &mut Log,
    (topic, partition): (&str, i32),
    (acks, transactional): (i16, bool),
    since: i64,
) -> Result<Option<Pending>> {
    if acks != -1 || broker.acks_all != AcksAll::Disk || transactional {
        return Ok(None);
    }
    let (tickets, durable) = log.durable_tickets(since)?;
    let dir = Dir { path: log.dir().to_path_buf(), durable, identity: log.dir_identity() };
    Ok(Some(Pending { topic: topic.to_string(), partition, tickets, dir }))
}

/// Wait for every pending partition (together: their syncs overlap) until `timeout_ms` (the
/// request's, as Kafka's broker waits for its replicas), then turn each failed one's answer into
/// its error: KAFKA_STORAGE_ERROR for a failed sync (the partition is reopened by the next
/// request, as for any failed write), REQUEST_TIMED_OUT when another writer's sync held it up.
/// `pending` names each partition's answer by (topic, partition) index in `responses`.
pub async fn settle(
    broker: &Arc<Broker>,
    pending: Vec<((usize, usize), Pending)>,
    responses: &mut [TopicProduceResponse],
    timeout_ms: i32,
    version: i16,
) {
    if pending.is_empty() {
        return;
    }
    let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
    // The partitions wait together (their syncs overlap: the file system commits concurrent
    // syncs together), each as a task of its own.
    let waits: Vec<_> = pending
        .iter()
        .map(|(_, p)| tokio::spawn(wait(Arc::clone(broker), p.tickets.clone(), p.dir.clone(), deadline)))
        .collect();
    let mut outcome = Vec::with_capacity(waits.len());
    for wait in waits {
        outcome.push(wait.await.unwrap_or_else(|e| Err(Error::Poisoned(format!("the durability wait failed: {e}")))));
    }
    for (((t, i), p), result) in pending.iter().zip(outcome) {
        let Err(e) = result else { continue };
        if codes::needs_reopen(&e) {
            broker.forget_partition(&p.topic, p.partition);
        }
        ::log::warn!(
            target: crate::server::log_target::LOG_TARGET,
            "acks=all batches for {}-{} were appended but not made durable: {e}",
            p.topic,
            p.partition
        );
        let resp = &mut responses[*t].partition_responses[*i];
        resp.error_code = codes::for_error(&e);
        resp.base_offset = -1;
        resp.log_append_time_ms = -1;
        if version >= 8 {
            resp.error_message = Some(StrBytes::from_string(e.to_string()));
        }
    }
}

/// One partition's wait: each of its segments' tickets (usually one), then its directory if its
/// entries are not known durable yet (a new segment's).
async fn wait(broker: Arc<Broker>, tickets: Vec<Ticket>, dir: Dir, deadline: Instant) -> Result<()> {
    for ticket in tickets {
        durable(ticket, deadline).await?;
    }
    if !dir.durable.load(Ordering::Acquire) {
        let synced = tokio::task::spawn_blocking(move || {
            sync_entries(&broker, &dir)?;
            dir.durable.store(true, Ordering::Release);
            Ok(())
        });
        synced.await.unwrap_or_else(|e| Err(Error::Poisoned(format!("the directory sync failed: {e}"))))?;
    }
    Ok(())
}

/// Wait until `ticket` is durable: for another request's sync without a thread, or by running
/// the sync on the blocking pool when it is this request's turn (`Ticket::poll_turn`).
async fn durable(ticket: Ticket, deadline: Instant) -> Result<()> {
    let started = Instant::now();
    let turn = tokio::time::timeout_at(deadline.into(), std::future::poll_fn(|cx| ticket.poll_turn(cx))).await;
    match turn {
        Err(_) => Err(ticket.timed_out(started)),
        Ok(Err(e)) => Err(e),
        Ok(Ok(Turn::Durable)) => Ok(()),
        Ok(Ok(Turn::Sync(turn))) => tokio::task::spawn_blocking(move || turn.sync(Some(deadline)))
            .await
            .unwrap_or_else(|e| Err(Error::Poisoned(format!("the sync panicked: {e}")))),
    }
}

/// Sync a partition's directory, which holds a segment the batches are in. A directory that is
/// gone, or is another folder of the same name, is a topic deleted (and maybe created again)
/// since the append: its batches went with it, so the answer is UNKNOWN_TOPIC_OR_PARTITION, as
/// for an append after the delete. Opening the directory takes a descriptor: with none left,
/// unused logs give theirs back first, as an open of a partition does (`Broker::with_descriptors`).
fn sync_entries(broker: &Broker, dir: &Dir) -> Result<()> {
    let deleted = || {
        Error::UnknownTopicOrPartition(format!(
            "{} was deleted before its acks=all batches were durable",
            dir.path.display()
        ))
    };
    let synced = broker.with_descriptors(|| crate::storage::checkpoint::sync_dir(&dir.path)).map_err(|(closed, e)| {
        let what = format!("sync the directory of {}", dir.path.display());
        broker.out_of_descriptors(&what, closed, e)
    });
    match crate::storage::log::dir_identity(&dir.path) {
        Ok(now) if now == dir.identity => synced,
        Ok(_) => Err(deleted()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(deleted()),
        // The sync's own outcome says more than a failed stat after it.
        Err(_) => synced,
    }
}
