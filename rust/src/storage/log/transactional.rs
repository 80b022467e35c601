//! A partition's side of transactions (Kafka's `UnifiedLog` with its `ProducerStateManager`):
//! a transactional producer's batches, stamped with its id, epoch and next sequence under the
//! append lock and refused when a newer epoch took over; and the coordinator's markers
//! (`appendEndTxnMarker`), which end the producer's open transaction, carry (and so bump) its
//! epoch, and for an ABORT add an entry to the segment's `.txnindex` as a broker does; and
//! what makes a producer's open transaction durable here before the coordinator records its
//! end (`open_txn_durable_tickets`).

use std::io::Write;

use crate::storage::error::{Error, IoContext, Result, TxnErrorKind};
use crate::storage::files::{segment_path, TXN_INDEX_SUFFIX};
use crate::storage::fsync_batch::Ticket;
use crate::storage::producer_state::Refusal;
use crate::storage::read_committed::{AbortedTxn, ABORT, COMMIT, TXN_INDEX_ENTRY_SIZE};
use crate::storage::record::header::NO_SEQUENCE;
use crate::storage::record::{BatchBuilder, Compression, ProducerStamp, RecordInput};

use super::{DirDurable, Log};

/// What makes a committed transaction's records durable: sync tickets for every segment from its
/// first offset, and whether the newest segment's directory entry is (`Log::durable_tickets`).
pub type RecordsDurable = (Vec<Ticket>, DirDurable);

/// A marker this writer appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkerWritten {
    /// The marker's offset.
    pub offset: i64,
    /// For an ABORT that ended an open transaction: the aborted range, as `.txnindex` holds it.
    pub aborted: Option<AbortedTxn>,
}

/// The key and value of a marker's one record: ControlRecordKey (version 0, type) and
/// EndTransactionMarker (version 0, coordinator epoch).
fn marker_record(commit: bool, coordinator_epoch: i32) -> ([u8; 4], [u8; 6]) {
    let kind = if commit { COMMIT } else { ABORT };
    let mut key = [0u8; 4];
    key[2..].copy_from_slice(&kind.to_be_bytes());
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
    (key, value)
}

impl Log {
    /// Make this writer a transactional producer's: every batch it appends from now on
    /// carries `(producer_id, epoch)`, the producer's next sequence in this partition and
    /// attribute bit 4; an append is refused with PRODUCER_FENCED when the partition knows a
    /// newer epoch for the producer. `None` makes its appends plain again.
    pub fn set_transactional_producer(&mut self, producer: Option<(i64, i16)>) {
        self.transactional = producer;
    }

    /// The transactional producer this writer appends for.
    pub fn transactional_producer(&self) -> Option<(i64, i16)> {
        self.transactional
    }

    /// Stamp a batch about to be appended (append lock held) when this writer is a
    /// transactional producer's.
    pub(super) fn stamp_transactional(&mut self, builder: &mut BatchBuilder) -> Result<()> {
        let Some((producer_id, epoch)) = self.transactional else { return Ok(()) };
        let name = self.partition_name();
        let sequence = match self.producers_caught_up()?.next_sequence(producer_id, epoch, &name) {
            Ok(sequence) => sequence,
            Err(Refusal::InvalidProducerEpoch(m) | Refusal::OutOfOrderSequence(m)) => {
                return Err(Error::txn(TxnErrorKind::ProducerFenced, m))
            }
        };
        builder.set_producer(ProducerStamp { producer_id, producer_epoch: epoch, base_sequence: sequence });
        builder.set_transactional();
        Ok(())
    }

    /// What makes this partition's records of `producer_id`'s open transaction durable,
    /// whoever appended them and whatever their writer's flush policy (a producer with acks=1
    /// leaves them in the page cache): `durable_tickets` from the transaction's first offset,
    /// taken under the append lock so every batch appended so far is seen. None when the
    /// producer has no open transaction here (nothing appended, or already ended). The
    /// coordinator waits for them before it records PrepareCommit / PrepareAbort: a power loss
    /// must not keep a commit decision and lose the records it commits.
    pub fn open_txn_durable_tickets(&mut self, producer_id: i64) -> Result<Option<(Vec<Ticket>, DirDurable)>> {
        self.check_writable()?;
        self.as_writer(|log| match log.producers_caught_up()?.open_txn_first_offset(producer_id) {
            Some(first) => log.durable_tickets(first).map(Some),
            None => Ok(None),
        })
    }

    /// Kafka's `appendEndTxnMarker`: a COMMIT or ABORT control batch of `producer_id` at
    /// `epoch`, durable (under flush="always") when this returns. `Ok(None)`, writing nothing,
    /// when the partition already holds this producer's marker for this epoch (no transaction
    /// open, same epoch: a coordinator completing after a crash) or knows a newer epoch (the
    /// transaction was ended by a newer instance). An ABORT that ends an open transaction adds
    /// its entry to the `.txnindex` of the marker's segment once the marker is durable.
    pub fn append_txn_marker(
        &mut self,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        now_ms: i64,
    ) -> Result<Option<MarkerWritten>> {
        let marker = self.append_marker((producer_id, epoch), (commit, coordinator_epoch), now_ms, false)?;
        Ok(marker.map(|(marker, _)| marker))
    }

    /// `append_txn_marker` for a COMMIT, with what its sync must cover: every segment from the
    /// committed transaction's first offset to the marker, taken under the same append-lock hold
    /// as the marker (`durable_tickets`). A batch of the transaction appended after the
    /// coordinator synced its records (a Produce in flight when the end was decided) may sit in
    /// a segment a flush="os" writer rolled without a sync, older than the marker's.
    pub fn append_commit_marker(
        &mut self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
        now_ms: i64,
    ) -> Result<Option<(MarkerWritten, Option<RecordsDurable>)>> {
        self.append_marker((producer_id, epoch), (true, coordinator_epoch), now_ms, true)
    }

    /// The marker (`append_txn_marker`), and with `with_records` its records' syncs.
    fn append_marker(
        &mut self,
        (producer_id, epoch): (i64, i16),
        (commit, coordinator_epoch): (bool, i32),
        now_ms: i64,
        with_records: bool,
    ) -> Result<Option<(MarkerWritten, Option<RecordsDurable>)>> {
        self.check_writable()?;
        let written = self.as_writer(|log| {
            let state = log.producers_caught_up()?;
            let known = state.epoch_of(producer_id);
            let open_first = state.open_txn_first_offset(producer_id);
            if known.is_some_and(|e| e > epoch) || (known == Some(epoch) && open_first.is_none()) {
                return Ok(None);
            }
            let others = state.first_open_txn_except(producer_id);
            let (key, value) = marker_record(commit, coordinator_epoch);
            let mut builder = BatchBuilder::new(Compression::None, None, 64);
            builder.push(&RecordInput { key: Some(&key), value: Some(&value), headers: &[], timestamp: now_ms });
            builder.set_producer(ProducerStamp { producer_id, producer_epoch: epoch, base_sequence: NO_SEQUENCE });
            builder.set_control();
            let saved = log.transactional.take();
            let appended = log.append_built(builder);
            log.transactional = saved;
            appended?;
            log.after_append(1)?;
            let offset = log.end_offset() - 1;
            let segment = log.segments.last().map_or(offset, |s| s.base_offset);
            let aborted = open_first.filter(|_| !commit).map(|first| AbortedTxn {
                producer_id,
                first_offset: first,
                last_offset: offset,
                last_stable_offset: others.unwrap_or(offset + 1),
            });
            let records = if with_records { Some(log.durable_tickets(open_first.unwrap_or(offset))?) } else { None };
            Ok(Some((MarkerWritten { offset, aborted }, segment, records)))
        })?;
        let Some((marker, segment, records)) = written else { return Ok(None) };
        if let Some(aborted) = marker.aborted {
            self.append_txn_index(segment, &aborted)?;
        }
        Ok(Some((marker, records)))
    }

    /// One 34-byte entry at the end of `<segment>.txnindex`, synced.
    fn append_txn_index(&self, segment: i64, txn: &AbortedTxn) -> Result<()> {
        let path = segment_path(&self.dir, segment, TXN_INDEX_SUFFIX);
        let mut entry = Vec::with_capacity(TXN_INDEX_ENTRY_SIZE);
        entry.extend_from_slice(&0i16.to_be_bytes());
        for v in [txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset] {
            entry.extend_from_slice(&v.to_be_bytes());
        }
        let mut file = crate::storage::nofollow::open(
            crate::storage::nofollow::options().append(true).create(true),
            &path,
            "transaction index",
        )?;
        file.write_all(&entry)
            .and_then(|()| file.sync_data())
            .context_at(&path, || format!("cannot append to {}", path.display()))
    }
}
