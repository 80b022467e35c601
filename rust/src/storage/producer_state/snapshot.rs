//! Kafka's producer snapshot files (kafka-format.md §4.8): `<offset>.snapshot` holds the
//! producer state as of `offset` (`ProducerStateManager.writeSnapshot` / `readSnapshot`): the
//! byte layout, and the files listed, written atomically, pruned and loaded (a damaged one is
//! logged, deleted and the next older one tried).

use std::path::Path;

use crate::storage::checkpoint::{remove_if_exists, write_atomically};
use crate::storage::error::{IoContext, Result};
use crate::storage::files::{file_name, parse_base_offset, SNAPSHOT_SUFFIX};
use crate::storage::record::header::{crc32c, NO_SEQUENCE};

use super::{BatchMetadata, Entry, ProducerState};

const SNAPSHOT_VERSION: i16 = 1;
/// version (2), CRC-32C (4), entry count (4).
const SNAPSHOT_HEADER_LEN: usize = 10;
/// Where the CRC-covered bytes start (after version and CRC).
const SNAPSHOT_CRC_START: usize = 6;
/// producerId 8, epoch 2, lastSequence 4, lastOffset 8, offsetDelta 4, timestamp 8,
/// coordinatorEpoch 4, currentTxnFirstOffset 8.
const SNAPSHOT_ENTRY_LEN: usize = 46;

impl ProducerState {
    /// The snapshot file's bytes, Kafka's layout: version 1, CRC-32C of what follows the
    /// CRC, entry count, then per producer its last batch (`writeSnapshot`).
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SNAPSHOT_HEADER_LEN + self.producers.len() * SNAPSHOT_ENTRY_LEN);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&(self.producers.len() as i32).to_be_bytes());
        let mut ids: Vec<_> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let e = &self.producers[&id];
            let last = e.batches.back();
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.epoch.to_be_bytes());
            out.extend_from_slice(&last.map_or(NO_SEQUENCE, |b| b.last_seq).to_be_bytes());
            out.extend_from_slice(&last.map_or(-1i64, |b| b.last_offset).to_be_bytes());
            out.extend_from_slice(&last.map_or(0i32, |b| b.offset_delta).to_be_bytes());
            out.extend_from_slice(&e.last_timestamp.to_be_bytes());
            out.extend_from_slice(&e.coordinator_epoch.to_be_bytes());
            out.extend_from_slice(&e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
        }
        let crc = crc32c(&out[SNAPSHOT_CRC_START..]);
        out[2..6].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Read a snapshot taken at `map_end` (`readSnapshot`); Err says what is wrong with it.
    pub fn decode_snapshot(bytes: &[u8], map_end: i64) -> std::result::Result<ProducerState, String> {
        if bytes.len() < SNAPSHOT_HEADER_LEN {
            return Err(format!("{} bytes are too short for a snapshot header", bytes.len()));
        }
        let version = i16::from_be_bytes([bytes[0], bytes[1]]);
        if version != SNAPSHOT_VERSION {
            return Err(format!("unknown snapshot version {version}"));
        }
        let crc = u32::from_be_bytes(bytes[2..6].try_into().unwrap());
        let computed = crc32c(&bytes[SNAPSHOT_CRC_START..]);
        if crc != computed {
            return Err(format!("CRC mismatch (stored {crc:#010x}, computed {computed:#010x})"));
        }
        let count = i32::from_be_bytes(bytes[6..10].try_into().unwrap());
        let body = &bytes[SNAPSHOT_HEADER_LEN..];
        if count < 0 || body.len() != count as usize * SNAPSHOT_ENTRY_LEN {
            return Err(format!("{count} entries do not fill the {} bytes after the header", body.len()));
        }
        let mut state = ProducerState::empty(map_end);
        for e in body.chunks_exact(SNAPSHOT_ENTRY_LEN) {
            let i64_at = |at: usize| i64::from_be_bytes(e[at..at + 8].try_into().unwrap());
            let i32_at = |at: usize| i32::from_be_bytes(e[at..at + 4].try_into().unwrap());
            let (id, epoch) = (i64_at(0), i16::from_be_bytes([e[8], e[9]]));
            let batch = BatchMetadata {
                last_seq: i32_at(10),
                last_offset: i64_at(14),
                offset_delta: i32_at(22),
                timestamp: i64_at(26),
            };
            let mut entry = Entry::at_epoch(epoch);
            entry.last_timestamp = batch.timestamp;
            entry.coordinator_epoch = i32_at(34);
            entry.current_txn_first_offset = Some(i64_at(38)).filter(|&o| o >= 0);
            if batch.last_offset >= 0 && batch.last_seq >= 0 {
                entry.batches.push_back(batch);
            }
            state.producers.insert(id, entry);
        }
        Ok(state)
    }
}

/// Offsets of the `<offset>.snapshot` files in a partition directory, ascending.
pub fn list_snapshots(dir: &Path) -> Result<Vec<i64>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.context(|| format!("cannot list {}", dir.display()))?;
        if let Some(offset) = parse_base_offset(&entry.file_name().to_string_lossy(), SNAPSHOT_SUFFIX) {
            found.push(offset);
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// Write `state` as `<map_end>.snapshot`, atomically (`takeSnapshot`).
pub fn write_snapshot(dir: &Path, state: &ProducerState) -> Result<()> {
    crate::storage::failpoint::hit("producer_snapshot.write")
        .context(|| format!("cannot write a producer snapshot in {}", dir.display()))?;
    write_atomically(dir, &file_name(state.map_end, SNAPSHOT_SUFFIX), &state.encode_snapshot())
}

/// Delete the snapshots below `keep_from` and above `log_end` (Kafka's `deleteSnapshotsBefore`
/// and `truncateAndReload`): the first are superseded, the second describe batches the log
/// no longer holds.
pub fn delete_snapshots_outside(dir: &Path, keep_from: i64, log_end: i64) -> Result<()> {
    for offset in list_snapshots(dir)? {
        if offset < keep_from || offset > log_end {
            remove_if_exists(&dir.join(file_name(offset, SNAPSHOT_SUFFIX)))?;
        }
    }
    Ok(())
}

/// The latest readable snapshot at or below `log_end` (Kafka's `loadFromSnapshot`). A
/// damaged one is logged, deleted, and the next older one tried. `Ok(None)` with `any`
/// false: the directory had no snapshot at all; with `any` true: none was usable.
pub fn load_latest_snapshot(dir: &Path, log_end: i64) -> Result<(Option<ProducerState>, bool)> {
    let offsets = list_snapshots(dir)?;
    let any = !offsets.is_empty();
    for &offset in offsets.iter().rev().filter(|&&o| o <= log_end) {
        let path = dir.join(file_name(offset, SNAPSHOT_SUFFIX));
        let bytes = match crate::storage::nofollow::open_read(&path, "producer snapshot") {
            Ok(mut f) => {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut f, &mut bytes).map(|_| bytes).map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        match bytes.and_then(|b| ProducerState::decode_snapshot(&b, offset)) {
            Ok(state) => return Ok((Some(state), any)),
            Err(why) => {
                ::log::warn!(
                    target: crate::LOG_TARGET,
                    "ignoring the damaged producer snapshot {} ({why}); deleting it and rebuilding the producer \
                     state from the log",
                    path.display()
                );
                remove_if_exists(&path)?;
            }
        }
    }
    Ok((None, any))
}
