//! `__transaction_state` read and appended: per partition of the topic, the latest metadata of
//! every transactional id in it, kept up to date by reading only the records appended since
//! the last look (other processes append too), as Kafka's `TransactionStateManager` loads a
//! partition. A record that does not decode is remembered for its id (and refused when that
//! id is used) rather than taken for "no transaction".

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::storage::error::{Error, Result};
use crate::storage::log::Log;
use crate::storage::log_read::RecordSink;
use crate::storage::record::{RecordInput, RecordRef};
use crate::storage::sync::lock_log;

use super::metadata::TransactionMetadata;
use super::state_log::{decode_key, decode_value, encode_key, encode_value, TRANSACTION_STATE_TOPIC};

/// An id's last record: its metadata, or why it does not decode.
type Entry = std::result::Result<TransactionMetadata, String>;

#[derive(Default)]
struct PartitionState {
    ids: HashMap<String, Entry>,
    read_to: i64,
}

impl RecordSink for PartitionState {
    fn push(&mut self, record: &RecordRef<'_>) -> Result<()> {
        let Some(key) = record.key else { return Ok(()) };
        let id = match decode_key(key) {
            Ok(id) => id,
            Err(e) => {
                ::log::warn!(target: crate::LOG_TARGET, "skipping a record of {TRANSACTION_STATE_TOPIC}: {e}");
                return Ok(());
            }
        };
        match record.value {
            None => {
                self.ids.remove(&id);
            }
            Some(value) => {
                let entry = decode_value(&id, value).map_err(|e| e.to_string());
                self.ids.insert(id, entry);
            }
        }
        Ok(())
    }
}

#[derive(Default)]
pub(super) struct StateStore {
    partitions: Mutex<HashMap<i32, PartitionState>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every change under this lock is an insert or a `read_to` store after a whole scan: a
    // panic leaves it consistent (a scan cut short is read again).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl StateStore {
    /// Read what `log` (partition `partition` of the topic) gained since the last look.
    fn catch_up(&self, log: &Arc<Mutex<Log>>, partition: i32, state: &mut PartitionState) -> Result<()> {
        let mut log = lock_log(log, || format!("{TRANSACTION_STATE_TOPIC}-{partition}"))?;
        log.follow()?;
        let end = log.end_offset();
        if end < state.read_to {
            *state = PartitionState::default(); // the log was cut: read it again
        }
        let mut next = state.read_to.max(log.start_offset());
        while next < end {
            let after = log.scan_records(next, Some(end), 10_000, state)?;
            if after <= next {
                break;
            }
            next = after;
        }
        state.read_to = end;
        Ok(())
    }

    pub(super) fn load(
        &self,
        log: &Arc<Mutex<Log>>,
        partition: i32,
        transactional_id: &str,
    ) -> Result<Option<TransactionMetadata>> {
        let mut partitions = lock(&self.partitions);
        let state = partitions.entry(partition).or_default();
        self.catch_up(log, partition, state)?;
        match state.ids.get(transactional_id) {
            None => Ok(None),
            Some(Ok(m)) => Ok(Some(m.clone())),
            Some(Err(why)) => Err(Error::corrupt(why.clone())),
        }
    }

    /// Every id of the partition whose last record decodes (the others are logged).
    pub(super) fn all(&self, log: &Arc<Mutex<Log>>, partition: i32) -> Result<Vec<TransactionMetadata>> {
        let mut partitions = lock(&self.partitions);
        let state = partitions.entry(partition).or_default();
        self.catch_up(log, partition, state)?;
        let mut out = Vec::with_capacity(state.ids.len());
        for (id, entry) in &state.ids {
            match entry {
                Ok(m) => out.push(m.clone()),
                Err(why) => ::log::warn!(target: crate::LOG_TARGET, "transactional id {id:?}: {why}"),
            }
        }
        Ok(out)
    }

    /// Append `m` and remember it: durable when this returns if `sync` (the log's flush is
    /// "always"), else left for the partition's next sync (a roll still syncs the directory).
    pub(super) fn append(
        &self,
        log: &Arc<Mutex<Log>>,
        partition: i32,
        m: &TransactionMetadata,
        sync: bool,
    ) -> Result<()> {
        let key = encode_key(&m.transactional_id)?;
        let value = encode_value(m)?;
        let record = RecordInput { key: Some(&key), value: Some(&value), headers: &[], timestamp: m.last_update_ms };
        let mut log = lock_log(log, || format!("{TRANSACTION_STATE_TOPIC}-{partition}"))?;
        if sync {
            log.append_records(&[record])?;
        } else {
            // The group-commit ticket is dropped unwaited: only the data msync is skipped.
            log.defer_durability(|log| log.append_records(&[record]))?;
        }
        drop(log);
        // Read back at the next look too (same value); remembered now so a reader between
        // sees it without a scan.
        lock(&self.partitions).entry(partition).or_default().ids.insert(m.transactional_id.clone(), Ok(m.clone()));
        Ok(())
    }
}
