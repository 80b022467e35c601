//! read_committed: which records belong to aborted transactions, and the last stable offset
//! (LSO), as a Kafka broker serves them to a consumer with `isolation.level=read_committed`.
//!
//! A transactional producer's batches carry attribute bit 4 and its producer id. Per producer
//! id, a transaction starts at its first transactional batch after its previous marker and
//! ends at its marker: a control batch (bit 5) whose one record's key is (version, type) with
//! type 0 = ABORT, 1 = COMMIT. An ABORT makes that producer's transactional batches in
//! `[first offset, marker offset]` aborted; they are hidden from read_committed readers, as are
//! all control batches. The LSO is the first offset of the earliest transaction still open (no
//! marker yet), or the log end offset when none is: read_committed readers stop there.
//!
//! The aborted transactions are learnt from the markers (a walk over batch headers, decoding
//! only control records) and from Kafka's per-segment aborted-transaction index
//! (`<base>.txnindex`, 34-byte entries: version i16, producerId i64, firstOffset i64,
//! lastOffset i64, lastStableOffset i64) where a broker left one. `TxnState` keeps what it
//! learnt and walks only the batches appended since its last look, so a consumer does not
//! rescan the log on every poll.
//!
//! This is the reading half; the writing half is the coordinator (`transactions/`) and the
//! partition's transactional appends and markers (`log/transactional.rs`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::storage::error::{Error, Result};
use crate::storage::log::Log;
use crate::storage::log_read::RecordSink;
use crate::storage::record::header::BatchHeader;
use crate::storage::record::scan::verify_crc;
use crate::storage::record::{for_each_record, record_area, RecordRef};

/// Bytes per `.txnindex` entry (Kafka's `AbortedTxn.TOTAL_SIZE`).
pub const TXN_INDEX_ENTRY_SIZE: usize = 34;

/// Control record types that end a transaction (Kafka's `ControlRecordType`): the key of a
/// marker's one record is (version 0, type). The one definition the markers' writer
/// (`log/transactional.rs`) and every reader (here, the server's offsets cache) share.
pub(crate) const ABORT: i16 = 0;
pub(crate) const COMMIT: i16 = 1;

/// What a reader sees of transactions (Kafka's `IsolationLevel`, kafka-python's
/// `isolation_level`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IsolationLevel {
    /// Every record up to the log end offset.
    #[default]
    ReadUncommitted,
    /// No record of an aborted transaction, no control record, nothing at or past the LSO.
    ReadCommitted,
}

impl IsolationLevel {
    /// kafka-python's spelling: `"read_uncommitted"` or `"read_committed"`.
    pub fn parse(name: &str) -> Result<IsolationLevel> {
        match name {
            "read_uncommitted" => Ok(IsolationLevel::ReadUncommitted),
            "read_committed" => Ok(IsolationLevel::ReadCommitted),
            other => Err(Error::config(format!(
                "isolation_level must be \"read_uncommitted\" or \"read_committed\", not {other:?}"
            ))),
        }
    }
}

/// One aborted transaction, as Kafka's `AbortedTxn` (and a `.txnindex` entry) holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    /// The offset of the transaction's first batch.
    pub first_offset: i64,
    /// The offset of its ABORT marker.
    pub last_offset: i64,
    /// The LSO right after the marker: the first offset of another producer's open
    /// transaction, else the marker's offset + 1.
    pub last_stable_offset: i64,
}

/// Parse a `.txnindex` file; a missing file has no entries. A file that is not whole
/// entries of version 0 with sane offsets is refused (Kafka's `TransactionIndex.sanityCheck`
/// makes a broker rebuild it): a reader cannot tell which of its entries to trust.
pub fn read_txn_index(path: &Path) -> Result<Vec<AbortedTxn>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
    };
    let damaged = |why: String| {
        Error::corrupt(format!(
            "{} is damaged ({why}); a Kafka broker rebuilds it from the log's markers on recovery: \
             remove the file to read with the markers alone",
            path.display()
        ))
    };
    if bytes.len() % TXN_INDEX_ENTRY_SIZE != 0 {
        return Err(damaged(format!("{} bytes is not a multiple of {TXN_INDEX_ENTRY_SIZE}", bytes.len())));
    }
    let mut out = Vec::with_capacity(bytes.len() / TXN_INDEX_ENTRY_SIZE);
    for (i, e) in bytes.chunks_exact(TXN_INDEX_ENTRY_SIZE).enumerate() {
        let at = |k: usize| i64::from_be_bytes(e[k..k + 8].try_into().unwrap());
        let version = i16::from_be_bytes([e[0], e[1]]);
        let txn =
            AbortedTxn { producer_id: at(2), first_offset: at(10), last_offset: at(18), last_stable_offset: at(26) };
        if version != 0 {
            return Err(damaged(format!("entry {i} has version {version}; only version 0 exists")));
        }
        if txn.first_offset < 0 || txn.first_offset > txn.last_offset {
            return Err(damaged(format!(
                "entry {i} spans offsets {}..={}, which is not a range",
                txn.first_offset, txn.last_offset
            )));
        }
        out.push(txn);
    }
    Ok(out)
}

/// The (version, type) key of a control batch's record, or None if it has none.
pub(crate) fn control_type(batch: &[u8], header: &BatchHeader, pos: usize) -> Result<Option<i16>> {
    verify_crc(batch, header, pos)?;
    let area = record_area(batch, header)?;
    let mut kind = None;
    for_each_record(&area, header, |r| {
        if kind.is_none() {
            kind = r.key.filter(|k| k.len() >= 4).map(|k| i16::from_be_bytes([k[2], k[3]]));
        }
        Ok(())
    })?;
    Ok(kind)
}

/// One batch of a transaction walk (`walk_transactions`).
pub(crate) enum TxnBatch<'a> {
    /// A COMMIT (`commit`) or ABORT marker of `producer_id` at `offset`.
    Marker { producer_id: i64, offset: i64, commit: bool },
    /// A data batch: its header, its bytes and its position (neither decoded nor CRC-checked).
    Data(&'a BatchHeader, &'a [u8], usize),
}

/// Walk the batches of `[from, end)` (whole batches, from the one holding `from`) as the
/// transaction bookkeeping reads them: markers decoded (CRC checked), other control batches
/// (KRaft's leader-change and snapshot records) skipped, data batches handed over as they are.
/// The one walk of `TxnState` (aborted transactions, the LSO) and of the server's
/// `__consumer_offsets` reader (transactional commits held until their producer's marker).
pub(crate) fn walk_transactions(
    log: &Log,
    (from, end): (i64, i64),
    mut f: impl FnMut(TxnBatch<'_>) -> Result<()>,
) -> Result<()> {
    log.walk_batches(from, |h, batch, pos| {
        if h.base_offset >= end {
            return Ok(false);
        }
        if !h.is_control() {
            f(TxnBatch::Data(h, batch, pos))?;
        } else if let Some(kind @ (ABORT | COMMIT)) = control_type(batch, h, pos)? {
            f(TxnBatch::Marker { producer_id: h.producer_id, offset: h.base_offset, commit: kind == COMMIT })?;
        }
        Ok(true)
    })
}

/// What is known of one partition's transactions, up to `scanned_to`.
#[derive(Default)]
pub struct TxnState {
    /// Batches below this offset have been walked.
    scanned_to: i64,
    /// The log end offset at the last walk (a smaller one means the log was truncated).
    seen_end: i64,
    /// Open transactions: producer id -> first offset.
    open: HashMap<i64, i64>,
    /// Aborted transactions by (marker offset, producer id): Kafka's order.
    aborted: BTreeMap<(i64, i64), AbortedTxn>,
    /// Per producer id, its aborted `(first, last)` ranges sorted by first offset.
    by_producer: HashMap<i64, Vec<(i64, i64)>>,
    /// Segments (by base offset) whose `.txnindex` was read.
    indexed: std::collections::HashSet<i64>,
    started: bool,
}

impl TxnState {
    pub fn new() -> Self {
        Self::default()
    }

    fn add_aborted(&mut self, txn: AbortedTxn) {
        if self.aborted.contains_key(&(txn.last_offset, txn.producer_id)) {
            return;
        }
        self.aborted.insert((txn.last_offset, txn.producer_id), txn);
        let ranges = self.by_producer.entry(txn.producer_id).or_default();
        let at = ranges.partition_point(|r| r.0 < txn.first_offset);
        ranges.insert(at, (txn.first_offset, txn.last_offset));
    }

    /// The aborted transaction of `producer_id` that covers `offset`, as (first, last).
    fn aborted_range(&self, producer_id: i64, offset: i64) -> Option<(i64, i64)> {
        let ranges = self.by_producer.get(&producer_id)?;
        let i = ranges.partition_point(|r| r.0 <= offset);
        // Ranges of one producer do not overlap, but an index from elsewhere could make them:
        // look at every range that starts at or before the offset, newest first.
        ranges[..i].iter().rev().copied().find(|&(first, last)| first <= offset && offset <= last)
    }

    /// Whether a transactional batch of `producer_id` starting at `offset` was aborted.
    pub fn is_aborted(&self, producer_id: i64, offset: i64) -> bool {
        self.aborted_range(producer_id, offset).is_some()
    }

    /// A transactional batch of `producer_id` at `offset`: it starts a transaction unless one
    /// is open. A `.txnindex` may say that the open one ended (aborted) before this batch,
    /// where the log no longer holds its marker: then this batch starts a new one.
    fn transactional_batch(&mut self, producer_id: i64, offset: i64) {
        match self.open.get(&producer_id) {
            Some(&first) if self.aborted_range(producer_id, first).is_none_or(|(_, last)| last >= offset) => {}
            _ => {
                self.open.insert(producer_id, offset);
            }
        }
    }

    /// Learn the batches appended (and segments sealed) since the last call.
    pub fn update(&mut self, log: &mut Log) -> Result<()> {
        log.follow()?;
        let end = log.end_offset();
        if end < self.seen_end {
            *self = TxnState::default(); // truncated (recovery cut the tail): start over
        }
        if !self.started {
            self.scanned_to = log.start_offset();
            self.started = true;
        }
        self.read_txn_indexes(log)?;
        let from = self.scanned_to.max(log.start_offset());
        if from < end {
            walk_transactions(log, (from, end), |batch| {
                match batch {
                    TxnBatch::Marker { producer_id, offset, commit } => self.close_txn(producer_id, offset, commit),
                    TxnBatch::Data(h, _, _) if h.is_transactional() && h.last_offset() >= from => {
                        self.transactional_batch(h.producer_id, h.base_offset)
                    }
                    TxnBatch::Data(..) => {}
                }
                Ok(())
            })?;
        }
        self.scanned_to = end;
        self.seen_end = end;
        Ok(())
    }

    /// A marker: a COMMIT or ABORT at `offset` closes its producer's open transaction.
    fn close_txn(&mut self, producer_id: i64, offset: i64, commit: bool) {
        let Some(first) = self.open.remove(&producer_id) else { return };
        if !commit {
            // Kafka's ProducerStateManager.lastStableOffset(completedTxn).
            let lso = self.open.values().copied().min().unwrap_or(offset + 1);
            self.add_aborted(AbortedTxn {
                producer_id,
                first_offset: first,
                last_offset: offset,
                last_stable_offset: lso,
            });
        }
    }

    /// Entries of the `.txnindex` files of segments not read yet (every segment but the
    /// active one, whose index a broker may still be appending to; its markers are walked).
    fn read_txn_indexes(&mut self, log: &Log) -> Result<()> {
        let segments = log.segments();
        let sealed = segments.len().saturating_sub(1);
        for seg in &segments[..sealed] {
            if self.indexed.insert(seg.base_offset) {
                let path = log
                    .dir()
                    .join(crate::storage::files::file_name(seg.base_offset, crate::storage::files::TXN_INDEX_SUFFIX));
                for txn in read_txn_index(&path)? {
                    self.add_aborted(txn);
                }
            }
        }
        Ok(())
    }

    /// The last stable offset as of the last `update`. A transaction that a `.txnindex` says
    /// was aborted is not open, even where the log no longer holds its marker.
    pub fn last_stable_offset(&self, log: &Log) -> i64 {
        let end = log.end_offset();
        let open = self.open.iter().filter(|&(&pid, &first)| !self.is_aborted(pid, first)).map(|(_, &first)| first);
        open.min().map_or(end, |first| first.min(end)).max(log.start_offset())
    }

    /// Every aborted transaction known, in marker order.
    pub fn aborted_transactions(&self) -> Vec<AbortedTxn> {
        self.aborted.values().copied().collect()
    }

    /// `Log::scan_records` as a read_committed reader sees the log: records of aborted
    /// transactions are skipped (their batches are not even decoded), and reading stops at
    /// the last stable offset. Returns the offset to continue from, which moves past aborted
    /// batches even when no record is returned.
    /// Decode records of `[start, end)` as a reader at `isolation` sees them: the one entry
    /// point of the readers that take an isolation level. Returns the offset to continue from.
    pub fn scan(
        &mut self,
        log: &mut Log,
        isolation: IsolationLevel,
        start: i64,
        end: Option<i64>,
        max_records: usize,
        sink: &mut impl RecordSink,
    ) -> Result<i64> {
        match isolation {
            IsolationLevel::ReadUncommitted => log.scan_records(start, end, max_records, sink),
            IsolationLevel::ReadCommitted => self.scan_committed(log, start, end, max_records, sink),
        }
    }

    pub fn scan_committed(
        &mut self,
        log: &mut Log,
        start: i64,
        end: Option<i64>,
        max_records: usize,
        sink: &mut impl RecordSink,
    ) -> Result<i64> {
        self.update(log)?;
        let end = end.unwrap_or(i64::MAX).min(self.last_stable_offset(log));
        if start >= end || max_records == 0 {
            // Checks `start` against the log's range exactly as a read_uncommitted read does.
            return log.scan_records(start, Some(start), 0, sink);
        }
        // Plan from the batch headers: the readable runs between aborted batches, until they
        // hold max_records records (or the end).
        let mut runs = Vec::new();
        let mut run_start = start;
        let mut planned = 0usize;
        let mut reached = end;
        log.walk_batches(start, |h, _, _| {
            if h.base_offset >= end {
                return Ok(false);
            }
            if h.is_control() {
                return Ok(true);
            }
            if h.is_transactional() && self.is_aborted(h.producer_id, h.base_offset) {
                if run_start < h.base_offset {
                    runs.push((run_start, h.base_offset));
                }
                run_start = run_start.max(h.next_offset());
                return Ok(true);
            }
            planned += h.records_count.max(0) as usize;
            if planned >= max_records {
                reached = h.next_offset().min(end);
                return Ok(false);
            }
            Ok(true)
        })?;
        if run_start < reached {
            runs.push((run_start, reached));
        }
        let mut counted = Counting { inner: sink, taken: 0 };
        for (from, to) in runs {
            let next = log.scan_records(from, Some(to), max_records - counted.taken, &mut counted)?;
            if counted.taken >= max_records {
                return Ok(next);
            }
        }
        Ok(reached.max(start))
    }
}

/// Counts what reaches the sink, so runs share one `max_records` budget.
struct Counting<'a, S: RecordSink> {
    inner: &'a mut S,
    taken: usize,
}

impl<S: RecordSink> RecordSink for Counting<'_, S> {
    fn push(&mut self, record: &RecordRef<'_>) -> Result<()> {
        self.taken += 1;
        self.inner.push(record)
    }
}
