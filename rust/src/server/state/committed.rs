//! What a read_committed client (Fetch and ListOffsets with `isolation_level` 1) sees of a
//! partition, as Kafka's broker serves it: records only below the last stable offset (LSO), and
//! with each Fetch the aborted transactions overlapping what it returns, which the client uses to
//! drop those producers' batches. Both come from the engine's `crate::storage::read_committed::TxnState`, which
//! learns transactions from the COMMIT/ABORT markers in the log (whoever wrote them: this
//! server's coordinator, an embedded producer's, a broker) and from `.txnindex` files.
//!
//! One `TxnState` per partition read this way, kept across requests so that each walks only the
//! batches appended since the last one, and across the server closing and reopening the
//! partition's log (`open_logs` evicts idle logs; a reader is replaced by a writer): it belongs
//! to the partition's folder, so a topic deleted and created again starts a new one. Locked
//! after the partition's log, never before it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kafka_protocol::messages::fetch_response::AbortedTransaction;
use kafka_protocol::messages::ProducerId;

use super::locks::lock;
use crate::storage::error::Result;
use crate::storage::log::Log;
use crate::storage::log_read::BatchSlice;
use crate::storage::read_committed::{AbortedTxn, TxnState};
use crate::storage::record::header::LOG_OVERHEAD;

/// Kafka's `IsolationLevel.READ_COMMITTED` id in Fetch and ListOffsets.
pub const READ_COMMITTED: i8 = 1;

/// The transaction state of the partitions read_committed clients read.
#[derive(Default)]
pub struct ReadCommitted {
    /// Consistent at any panic: one map operation per lock; a state is replaced whole.
    states: Mutex<HashMap<(String, i32), OfDir>>,
}

/// A partition's state, with the identity of the folder it was learnt from (`Log::dir_identity`).
type OfDir = ((u64, u64), Arc<Mutex<TxnState>>);

/// One partition as a read_committed client sees it now.
pub struct Committed {
    pub last_stable_offset: i64,
    state: Arc<Mutex<TxnState>>,
}

impl ReadCommitted {
    /// The partition's state, brought up to date with `log` (its log, locked).
    pub fn view(&self, (topic, partition): (&str, i32), log: &mut Log) -> Result<Committed> {
        let identity = log.dir_identity();
        let state = {
            let mut states = lock(&self.states);
            let key = (topic.to_string(), partition);
            match states.get(&key) {
                Some((of, state)) if *of == identity => state.clone(),
                _ => {
                    let state = Arc::new(Mutex::new(TxnState::new()));
                    states.insert(key, (identity, state.clone()));
                    state
                }
            }
        };
        let last_stable_offset = {
            // A walk that failed half way (damage) leaves `scanned_to` where it was: the next
            // request walks again; a panic in it (a bug) is no worse.
            let mut txn = lock(&state);
            txn.update(log)?;
            txn.last_stable_offset(log)
        };
        Ok(Committed { last_stable_offset, state })
    }

    /// Forget a partition's state (its log failed in a way reopening may cure, or its topic is
    /// gone): the next read learns it again.
    pub fn forget(&self, topic: &str, partition: i32) {
        lock(&self.states).remove(&(topic.to_string(), partition));
    }
}

impl Committed {
    /// The aborted transactions a Fetch returning `[from, to)` reports (Kafka's
    /// `collectAbortedTransactions`): those whose marker is at or after `from` and that start
    /// before `to`.
    pub fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTransaction> {
        let all: Vec<AbortedTxn> = lock(&self.state).aborted_transactions();
        all.into_iter()
            .filter(|t| t.last_offset >= from && t.first_offset < to)
            .map(|t| {
                AbortedTransaction::default()
                    .with_producer_id(ProducerId(t.producer_id))
                    .with_first_offset(t.first_offset)
            })
            .collect()
    }
}

/// `slice` cut to its batches that start below `lso` (a fetch never returns records at or past
/// the LSO to a read_committed client), and the offset after the last batch kept (`from` when
/// none is). The LSO is always a batch boundary: an open transaction's first batch, or the end.
pub fn below_stable(slice: BatchSlice, from: i64, lso: i64) -> (BatchSlice, i64) {
    let bytes = slice.bytes();
    let (mut kept, mut next) = (0usize, from);
    while bytes.len() >= kept + LOG_OVERHEAD + 15 {
        let at = &bytes[kept..];
        let base = i64::from_be_bytes(at[0..8].try_into().expect("8 bytes"));
        let length = i32::from_be_bytes(at[8..12].try_into().expect("4 bytes"));
        let last_delta = i32::from_be_bytes(at[23..27].try_into().expect("4 bytes"));
        let size = LOG_OVERHEAD + length.max(0) as usize;
        if base >= lso || length <= 0 || kept + size > bytes.len() {
            break;
        }
        kept += size;
        next = base + last_delta as i64 + 1;
    }
    (BatchSlice { map: slice.map, start: slice.start, len: kept }, next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::options::LogConfig;

    fn open(dir: &std::path::Path) -> Log {
        Log::open(dir, LogConfig { shared_writers: true, ..LogConfig::default() }).unwrap()
    }

    #[test]
    fn a_partition_reopened_keeps_its_state_and_a_new_folder_starts_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t-0");
        let states = ReadCommitted::default();
        let first = states.view(("t", 0), &mut open(&path)).unwrap();
        // The server closed the log (evicted, or a reader replaced by a writer) and opened it again.
        let again = states.view(("t", 0), &mut open(&path)).unwrap();
        assert!(Arc::ptr_eq(&first.state, &again.state), "reopening the log must not walk it again");
        // The topic deleted (its folder renamed away, as a delete does first) and created again.
        std::fs::rename(&path, dir.path().join("t-0.deleted")).unwrap();
        let recreated = states.view(("t", 0), &mut open(&path)).unwrap();
        assert!(!Arc::ptr_eq(&first.state, &recreated.state));
    }
}
