//! Kafka's producer state (`ProducerStateManager`, `ProducerStateEntry`, `ProducerAppendInfo`):
//! per producer id, its epoch, the metadata of its last five batches and the first offset of
//! its open transaction, learnt from the batch headers in the log (producerId, producerEpoch,
//! baseSequence, lastOffsetDelta, the transactional and control bits). An
//! idempotent produce is checked against it: a retried batch is found and answered with its
//! original offsets instead of being written again, a sequence gap or an old epoch is refused.
//!
//! It also holds KIP-890 part 1's verification guards (Kafka's `VerificationStateEntry`), in
//! memory only: a transactional batch that opens its producer's transaction in the partition is
//! verified with the coordinator first, and appended only if no transactional batch or marker of
//! its producer came between (`verification_guard`, `verified`).
//!
//! The state survives restarts in Kafka's `<offset>.snapshot` files in the partition folder
//! (kafka-format.md §4.8): the state as of `offset`, the log end when it was taken. At open the
//! latest snapshot at or below the log end is loaded and the batches after it are scanned.
//! This file holds the state and its checks; `producer_state/snapshot.rs` the snapshot codec and
//! files; `log/producers.rs` wires them into the partition (when to load, catch up, snapshot).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::storage::record::header::{decrement_sequence, increment_sequence, BatchHeader, NO_EPOCH, NO_SEQUENCE};

/// `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`: the batches a retry is looked up in (a
/// producer has at most 5 requests in flight with idempotence on).
pub const BATCHES_TO_RETAIN: usize = 5;
/// Kafka's `producer.id.expiration.ms` default (1 day): a producer silent that long is
/// forgotten, and its next batch is taken with any sequence (an unknown producer).
pub const PRODUCER_ID_EXPIRATION_MS: i64 = 86_400_000;

mod snapshot;

pub use snapshot::{delete_snapshots_outside, list_snapshots, load_latest_snapshot, write_snapshot};

/// `ProducerAppendInfo.inSequence`.
fn in_sequence(last: i32, next: i32) -> bool {
    next as i64 == last as i64 + 1 || (next == 0 && last == i32::MAX)
}

/// Kafka's `BatchMetadata`: one appended batch of a producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchMetadata {
    pub last_seq: i32,
    pub last_offset: i64,
    pub offset_delta: i32,
    pub timestamp: i64,
}

impl BatchMetadata {
    pub fn first_seq(&self) -> i32 {
        decrement_sequence(self.last_seq, self.offset_delta)
    }

    pub fn first_offset(&self) -> i64 {
        self.last_offset - self.offset_delta as i64
    }

    fn of(h: &BatchHeader) -> BatchMetadata {
        BatchMetadata {
            last_seq: increment_sequence(h.base_sequence, h.last_offset_delta),
            last_offset: h.last_offset(),
            offset_delta: h.last_offset_delta,
            timestamp: h.max_timestamp,
        }
    }
}

/// Kafka's `ProducerStateEntry`, with its transaction fields: the coordinator epoch of the
/// producer's last marker and the first offset of its open transaction (`currentTxnFirstOffset`,
/// what the last stable offset is computed from), both written to snapshots as Kafka does.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    epoch: i16,
    batches: VecDeque<BatchMetadata>,
    last_timestamp: i64,
    coordinator_epoch: i32,
    current_txn_first_offset: Option<i64>,
}

impl Entry {
    fn empty() -> Entry {
        Entry::at_epoch(NO_EPOCH)
    }

    fn at_epoch(epoch: i16) -> Entry {
        Entry {
            epoch,
            batches: VecDeque::new(),
            last_timestamp: -1,
            coordinator_epoch: -1,
            current_txn_first_offset: None,
        }
    }

    fn last_seq(&self) -> i32 {
        self.batches.back().map_or(NO_SEQUENCE, |b| b.last_seq)
    }

    /// `maybeUpdateProducerEpoch`: a new epoch starts with no batches.
    fn set_epoch(&mut self, epoch: i16) {
        if self.epoch != epoch {
            self.batches.clear();
            self.epoch = epoch;
        }
    }

    /// `addBatch`: remember the batch, forgetting the oldest beyond five.
    fn add(&mut self, epoch: i16, batch: BatchMetadata) {
        self.set_epoch(epoch);
        self.batches.push_back(batch);
        if self.batches.len() > BATCHES_TO_RETAIN {
            self.batches.pop_front();
        }
        self.last_timestamp = batch.timestamp;
    }

    /// `findDuplicateBatch`: a cached batch of the same epoch and sequence range.
    fn duplicate_of(&self, h: &BatchHeader) -> Option<BatchMetadata> {
        if h.producer_epoch != self.epoch {
            return None;
        }
        let last = increment_sequence(h.base_sequence, h.last_offset_delta);
        self.batches.iter().find(|b| b.first_seq() == h.base_sequence && b.last_seq == last).copied()
    }
}

/// Why an idempotent batch is refused (Kafka's exception, hence the client's error code).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `InvalidProducerEpochException`: the batch's epoch is older than the producer's.
    InvalidProducerEpoch(String),
    /// `OutOfOrderSequenceException`: a gap (or a new epoch not starting at 0).
    OutOfOrderSequence(String),
}

/// One producer of a partition, as DescribeProducers describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerSummary {
    pub producer_id: i64,
    pub epoch: i16,
    /// The sequence of its last batch's last record (-1: none kept).
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// The coordinator epoch of its last transaction marker (-1: none).
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction in this partition.
    pub current_txn_first_offset: Option<i64>,
}

/// What the checks decided for the batches of one produce request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Append them.
    Append,
    /// A retry of this batch, already in the log: acknowledge it, write nothing.
    Duplicate(BatchMetadata),
    /// Refuse them all.
    Refused(Refusal),
}

/// Kafka's `VerificationGuard`: what a transactional batch carries from the partition, through
/// the coordinator's verification, back to its append. Unique in the process (no two states, no
/// two takes after a clear, ever hand out the same one), so a guard matches only the entry it was
/// taken from: a state loaded again (a reopened partition, a log cut below what it knew) has no
/// entries, and refuses every guard taken before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerificationGuard(u64);

impl VerificationGuard {
    fn next() -> VerificationGuard {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        VerificationGuard(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// The most verification guards a partition keeps at once: far more producers than verify their
/// first batch in one partition within the same few milliseconds.
const MAX_VERIFICATIONS: usize = 1024;

/// Kafka's `VerificationStateEntry`: a producer's guard, and when it was taken (for expiry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Verification {
    guard: VerificationGuard,
    taken_ms: i64,
}

/// The producer state of one partition, as of `map_end` (the log offset up to which batches
/// were applied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerState {
    producers: HashMap<i64, Entry>,
    map_end: i64,
    /// Per producer id, the guard of its batches being verified (`verification_guard`); not in
    /// snapshots (Kafka keeps them in memory too).
    verifications: HashMap<i64, Verification>,
    /// Per producer id, the last guard one of its transactional batches or markers made stale
    /// (`apply`): a guard found neither here nor in `verifications` was dropped (the bound, its
    /// expiry, the partition's log closed and opened again), not outrun (`outrun`).
    outrun: HashMap<i64, VerificationGuard>,
}

impl ProducerState {
    /// No producers, as of `map_end`.
    pub fn empty(map_end: i64) -> ProducerState {
        ProducerState { producers: HashMap::new(), map_end, verifications: HashMap::new(), outrun: HashMap::new() }
    }

    pub fn map_end(&self) -> i64 {
        self.map_end
    }

    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// The epoch and cached batches (oldest first) of a producer.
    pub fn producer(&self, producer_id: i64) -> Option<(i16, Vec<BatchMetadata>)> {
        self.producers.get(&producer_id).map(|e| (e.epoch, e.batches.iter().copied().collect()))
    }

    /// Learn one batch of the log (its offsets final). Batches without a producer id only
    /// move `map_end`; a control batch (a transaction marker a broker wrote) carries its
    /// producer's epoch (`appendEndTxnMarker`).
    pub fn apply(&mut self, h: &BatchHeader) {
        self.map_end = self.map_end.max(h.last_offset() + 1);
        if h.producer_id < 0 {
            return;
        }
        if h.is_transactional() || h.is_control() {
            // A marker ended the producer's transaction here, or a batch opened one: a guard
            // taken before either is stale (Kafka's `clearVerificationStateEntry`).
            if let Some(v) = self.verifications.remove(&h.producer_id) {
                self.outrun.insert(h.producer_id, v.guard);
            }
        }
        let entry = self.producers.entry(h.producer_id).or_insert_with(Entry::empty);
        if h.is_control() {
            // `appendEndTxnMarker`: the marker ends the producer's open transaction.
            if h.producer_epoch >= entry.epoch {
                entry.set_epoch(h.producer_epoch);
            }
            entry.current_txn_first_offset = None;
            entry.last_timestamp = h.max_timestamp;
            return;
        }
        if h.is_transactional() && entry.current_txn_first_offset.is_none() {
            entry.current_txn_first_offset = Some(h.base_offset);
        }
        entry.add(h.producer_epoch, BatchMetadata::of(h));
    }

    /// The first offset of `producer_id`'s open transaction in this partition (no marker yet).
    pub fn open_txn_first_offset(&self, producer_id: i64) -> Option<i64> {
        self.producers.get(&producer_id)?.current_txn_first_offset
    }

    /// Kafka's `hasOngoingTransaction(producerId, epoch)`: the partition holds an open
    /// transaction of `producer_id` at `epoch`, which the coordinator verified when it began
    /// here, so its later batches are appended without asking again.
    pub fn has_ongoing_txn(&self, producer_id: i64, epoch: i16) -> bool {
        self.producers.get(&producer_id).is_some_and(|e| e.epoch == epoch && e.current_txn_first_offset.is_some())
    }

    /// Kafka's `maybeCreateVerificationStateEntry`: the guard for a batch of `producer_id` about
    /// to be verified with the coordinator (the one already taken, if any: concurrent first
    /// batches share it, and the first appended makes the others' check `has_ongoing_txn`).
    pub fn verification_guard(&mut self, producer_id: i64, now_ms: i64) -> VerificationGuard {
        if self.verifications.len() >= MAX_VERIFICATIONS && !self.verifications.contains_key(&producer_id) {
            // Guards whose batches never came back (their verification failed), or a client
            // making up producer ids: the oldest goes. Its batch, if still being verified, is
            // refused, never appended wrongly.
            if let Some(oldest) = self.verifications.iter().min_by_key(|(_, v)| v.taken_ms).map(|(&id, _)| id) {
                self.verifications.remove(&oldest);
            }
        }
        let taken = Verification { guard: VerificationGuard::next(), taken_ms: now_ms };
        self.verifications.entry(producer_id).or_insert(taken).guard
    }

    /// Whether `guard` is still `producer_id`'s: no transactional batch or marker of it was
    /// applied since it was taken, and this state was not loaded again (Kafka's
    /// `VerificationGuard.verify` at the append).
    pub fn verified(&self, producer_id: i64, guard: VerificationGuard) -> bool {
        self.verifications.get(&producer_id).is_some_and(|v| v.guard == guard)
    }

    /// Whether `guard`, no longer `verified`, was made stale by a transactional batch or marker
    /// of `producer_id` applied to this state since it was taken; false when it was dropped
    /// otherwise (the bound, its expiry, a state loaded again), which proves nothing about the
    /// producer's transaction: its batch is then verified again, not refused for good.
    pub fn outrun(&self, producer_id: i64, guard: VerificationGuard) -> bool {
        self.outrun.get(&producer_id) == Some(&guard)
    }

    /// The first offset of the earliest open transaction of a producer other than
    /// `except`: the last stable offset right after `except`'s marker, where there is one
    /// (`ProducerStateManager.lastStableOffset(completedTxn)`).
    pub fn first_open_txn_except(&self, except: i64) -> Option<i64> {
        self.producers.iter().filter(|(&id, _)| id != except).filter_map(|(_, e)| e.current_txn_first_offset).min()
    }

    /// The baseSequence of the next batch of a transactional producer at `epoch` that appends
    /// under the partition's append lock (so nothing can come between the check and the
    /// append): the sequence after its last batch at that epoch, or 0 for a new epoch. An epoch
    /// older than the partition's for this producer is refused (a newer instance, or the
    /// coordinator's marker after a fence, bumped it).
    pub fn next_sequence(
        &self,
        producer_id: i64,
        epoch: i16,
        topic_partition: &str,
    ) -> std::result::Result<i32, Refusal> {
        let Some(entry) = self.producers.get(&producer_id) else { return Ok(0) };
        if epoch < entry.epoch {
            return Err(Refusal::InvalidProducerEpoch(format!(
                "epoch {epoch} of producer {producer_id} is older than its current epoch {} in {topic_partition}: \
                 a newer instance of this transactional producer took over (or its transaction was aborted)",
                entry.epoch
            )));
        }
        if epoch > entry.epoch {
            return Ok(0);
        }
        Ok(match entry.last_seq() {
            NO_SEQUENCE => 0,
            last => increment_sequence(last, 1),
        })
    }

    /// Every producer, as DescribeProducers reports them (Kafka's `activeProducers`).
    pub fn summaries(&self) -> Vec<ProducerSummary> {
        let mut all: Vec<ProducerSummary> = self
            .producers
            .iter()
            .map(|(&producer_id, e)| ProducerSummary {
                producer_id,
                epoch: e.epoch,
                last_sequence: e.last_seq(),
                last_timestamp: e.last_timestamp,
                coordinator_epoch: e.coordinator_epoch,
                current_txn_first_offset: e.current_txn_first_offset,
            })
            .collect();
        all.sort_by_key(|p| p.producer_id);
        all
    }

    /// The epoch this partition knows for `producer_id`, if any.
    pub fn epoch_of(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|e| e.epoch)
    }

    /// Kafka's checks (`UnifiedLog.analyzeAndValidateProducerState`, `ProducerAppendInfo`)
    /// for the batches of one request, in order: a batch that repeats one of its producer's
    /// cached batches makes the whole request a duplicate; otherwise each batch's epoch must
    /// not be older than its producer's and its sequence must follow the previous batch's.
    /// A producer with no state (new, or forgotten after expiry or retention) may start at
    /// any sequence (Kafka 2.5+, KIP-360: no UNKNOWN_PRODUCER_ID). Batches without a
    /// producer id are not checked.
    pub fn check(&self, headers: &[BatchHeader], topic_partition: &str) -> Verdict {
        // Each producer's state as the request's earlier batches leave it (Kafka's updatedEntry).
        let mut updated: HashMap<i64, Entry> = HashMap::new();
        for h in headers.iter().filter(|h| h.producer_id >= 0) {
            let current = self.producers.get(&h.producer_id);
            if let Some(duplicate) = current.and_then(|e| e.duplicate_of(h)) {
                return Verdict::Duplicate(duplicate);
            }
            let current_epoch = current.map_or(NO_EPOCH, |e| e.epoch);
            let entry = updated.entry(h.producer_id).or_insert_with(|| Entry::at_epoch(current_epoch));
            let pid = h.producer_id;
            if h.producer_epoch < entry.epoch {
                return Verdict::Refused(Refusal::InvalidProducerEpoch(format!(
                    "epoch {} of producer {pid} is older than its current epoch {} in {topic_partition}: \
                     a newer instance of this producer took over",
                    h.producer_epoch, entry.epoch
                )));
            }
            let first = h.base_sequence;
            if h.producer_epoch != entry.epoch {
                if first != 0 && entry.epoch != NO_EPOCH {
                    return Verdict::Refused(Refusal::OutOfOrderSequence(format!(
                        "invalid sequence number {first} for the new epoch {} of producer {pid} in \
                         {topic_partition}: a new epoch starts at sequence 0",
                        h.producer_epoch
                    )));
                }
            } else {
                let last = if !entry.batches.is_empty() {
                    entry.last_seq()
                } else if current.is_some_and(|c| c.epoch == h.producer_epoch) {
                    current.map_or(NO_SEQUENCE, Entry::last_seq)
                } else {
                    NO_SEQUENCE
                };
                if current_epoch != NO_EPOCH && !in_sequence(last, first) {
                    return Verdict::Refused(Refusal::OutOfOrderSequence(format!(
                        "out of order sequence number for producer {pid} in {topic_partition}: {first} \
                         (incoming sequence), {last} (current end sequence)"
                    )));
                }
            }
            entry.add(h.producer_epoch, BatchMetadata::of(h));
        }
        Verdict::Append
    }

    /// Everything below `end` was applied (or given up on): `map_end` moves there.
    pub fn apply_end(&mut self, end: i64) {
        self.map_end = self.map_end.max(end);
    }

    /// Forget producers whose last batch is older than `PRODUCER_ID_EXPIRATION_MS`
    /// (`removeExpiredProducers`).
    pub fn expire(&mut self, now_ms: i64) {
        // A producer with an open transaction is kept (`isProducerExpired`): its first offset
        // holds the last stable offset back.
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some() || now_ms - e.last_timestamp < PRODUCER_ID_EXPIRATION_MS
        });
        // A guard whose batch never came back (its verification failed, its client went away);
        // one dropped under a batch still being verified only makes that batch refused.
        self.verifications.retain(|_, v| now_ms - v.taken_ms < PRODUCER_ID_EXPIRATION_MS);
        let producers = &self.producers;
        self.outrun.retain(|id, _| producers.contains_key(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(pid: i64, epoch: i16, seq: i32, base: i64, count: i32) -> BatchHeader {
        BatchHeader {
            base_offset: base,
            batch_length: 49,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 1000,
            max_timestamp: 1000 + base,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            records_count: count,
        }
    }

    #[test]
    fn the_empty_snapshot_is_kafkas_bytes() {
        // kafka-format.md §4.8, verified in a broker's files.
        assert_eq!(ProducerState::empty(0).encode_snapshot(), [0x00, 0x01, 0x48, 0x67, 0x4B, 0xC7, 0, 0, 0, 0]);
    }

    #[test]
    fn snapshots_round_trip_the_last_batch_and_refuse_damage() {
        let mut s = ProducerState::empty(0);
        s.apply(&batch(7, 2, 0, 0, 3));
        s.apply(&batch(7, 2, 3, 3, 2));
        s.apply(&batch(-1, -1, -1, 5, 4));
        s.apply(&batch(9, 0, 10, 9, 1));
        let bytes = s.encode_snapshot();
        assert_eq!(bytes.len(), 10 + 2 * 46);
        let back = ProducerState::decode_snapshot(&bytes, 10).unwrap();
        assert_eq!(back.map_end(), 10);
        let (epoch, batches) = back.producer(7).unwrap();
        assert_eq!(epoch, 2);
        assert_eq!(batches, vec![BatchMetadata { last_seq: 4, last_offset: 4, offset_delta: 1, timestamp: 1003 }]);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(ProducerState::decode_snapshot(&bad, 10).is_err(), "a flipped byte at {i} went unnoticed");
        }
        assert!(ProducerState::decode_snapshot(&bytes[..bytes.len() - 1], 10).is_err());
    }

    #[test]
    fn kafkas_sequence_rules() {
        let mut s = ProducerState::empty(0);
        // An unknown producer may start anywhere (KIP-360).
        assert_eq!(s.check(&[batch(1, 0, 42, 0, 2)], "t-0"), Verdict::Append);
        s.apply(&batch(1, 0, 42, 0, 2));
        // Next in sequence, in one request with a follower.
        assert_eq!(s.check(&[batch(1, 0, 44, 0, 1), batch(1, 0, 45, 0, 1)], "t-0"), Verdict::Append);
        // A gap inside a request, and against the log.
        assert!(matches!(
            s.check(&[batch(1, 0, 44, 0, 1), batch(1, 0, 46, 0, 1)], "t-0"),
            Verdict::Refused(Refusal::OutOfOrderSequence(_))
        ));
        assert!(matches!(s.check(&[batch(1, 0, 45, 0, 1)], "t-0"), Verdict::Refused(Refusal::OutOfOrderSequence(_))));
        // A retry of the cached batch.
        assert_eq!(
            s.check(&[batch(1, 0, 42, 0, 2)], "t-0"),
            Verdict::Duplicate(BatchMetadata { last_seq: 43, last_offset: 1, offset_delta: 1, timestamp: 1000 })
        );
        // Same start, different range: not a duplicate, and out of order.
        assert!(matches!(s.check(&[batch(1, 0, 42, 0, 1)], "t-0"), Verdict::Refused(Refusal::OutOfOrderSequence(_))));
        // A new epoch starts at 0; an older one is fenced.
        assert_eq!(s.check(&[batch(1, 1, 0, 0, 1)], "t-0"), Verdict::Append);
        assert!(matches!(s.check(&[batch(1, 1, 5, 0, 1)], "t-0"), Verdict::Refused(Refusal::OutOfOrderSequence(_))));
        s.apply(&batch(1, 1, 0, 2, 1));
        assert!(matches!(s.check(&[batch(1, 0, 44, 0, 1)], "t-0"), Verdict::Refused(Refusal::InvalidProducerEpoch(_))));
        // Batches without a producer id are never checked.
        assert_eq!(s.check(&[batch(-1, -1, -1, 0, 1)], "t-0"), Verdict::Append);
    }

    #[test]
    fn five_batches_are_kept_and_sequences_wrap() {
        let mut s = ProducerState::empty(0);
        for i in 0..7 {
            s.apply(&batch(3, 0, i, i as i64, 1));
        }
        let (_, batches) = s.producer(3).unwrap();
        assert_eq!(batches.iter().map(|b| b.first_seq()).collect::<Vec<_>>(), vec![2, 3, 4, 5, 6]);
        assert!(matches!(s.check(&[batch(3, 0, 1, 0, 1)], "t-0"), Verdict::Refused(_)), "evicted from the cache");
        assert!(matches!(s.check(&[batch(3, 0, 2, 0, 1)], "t-0"), Verdict::Duplicate(_)));
        let mut w = ProducerState::empty(0);
        w.apply(&batch(4, 0, i32::MAX - 1, 0, 3));
        assert_eq!(w.producer(4).unwrap().1[0].last_seq, 0, "i32::MAX - 1 plus 2 wraps to 0");
        assert_eq!(w.check(&[batch(4, 0, 1, 3, 1)], "t-0"), Verdict::Append);
        assert_eq!(w.producer(4).unwrap().1[0].first_seq(), i32::MAX - 1);
    }

    #[test]
    fn hostile_sequences_and_epochs_never_panic() {
        let mut s = ProducerState::empty(0);
        for (seq, count) in [(i32::MIN, 5), (-1, 1), (i32::MAX, i32::MAX), (i32::MIN, i32::MAX), (-7, 3)] {
            for epoch in [i16::MIN, -1, 0, i16::MAX] {
                let h = batch(11, epoch, seq, 0, count);
                let _ = s.check(&[h, h], "t-0");
                s.apply(&h);
                let _ = s.check(&[h], "t-0");
            }
        }
        let _ = ProducerState::decode_snapshot(&s.encode_snapshot(), 0).unwrap();
    }

    #[test]
    fn an_open_transaction_is_tracked_snapshotted_and_never_expired() {
        let mut s = ProducerState::empty(0);
        let mut t = batch(8, 3, 0, 10, 2);
        t.attributes = crate::storage::record::header::ATTR_TRANSACTIONAL;
        s.apply(&t);
        s.apply(&batch(9, 0, 0, 12, 1));
        let mut t2 = batch(8, 3, 2, 13, 1);
        t2.attributes = crate::storage::record::header::ATTR_TRANSACTIONAL;
        s.apply(&t2);
        assert_eq!(s.open_txn_first_offset(8), Some(10), "the first transactional batch opens it");
        assert_eq!(s.first_open_txn_except(9), Some(10));
        assert_eq!(s.next_sequence(8, 3, "t-0"), Ok(3));
        assert_eq!(s.next_sequence(8, 4, "t-0"), Ok(0), "a new epoch starts at 0");
        assert!(matches!(s.next_sequence(8, 2, "t-0"), Err(Refusal::InvalidProducerEpoch(_))));
        // Kafka's snapshot layout keeps currentTxnFirstOffset: a broker reading it agrees on the LSO.
        let back = ProducerState::decode_snapshot(&s.encode_snapshot(), 14).unwrap();
        assert_eq!(back.open_txn_first_offset(8), Some(10));
        s.expire(1000 + PRODUCER_ID_EXPIRATION_MS * 2);
        assert_eq!(s.open_txn_first_offset(8), Some(10), "a producer with an open transaction is kept");
        // Its marker (a control batch at a newer epoch) closes it and bumps the epoch.
        let mut marker = batch(8, 4, -1, 14, 1);
        marker.attributes =
            crate::storage::record::header::ATTR_TRANSACTIONAL | crate::storage::record::header::ATTR_CONTROL;
        s.apply(&marker);
        assert_eq!(s.open_txn_first_offset(8), None);
        assert_eq!(s.epoch_of(8), Some(4));
        assert!(matches!(s.next_sequence(8, 3, "t-0"), Err(Refusal::InvalidProducerEpoch(_))));
    }

    #[test]
    fn a_verification_guard_holds_until_a_transactional_batch_or_marker_of_its_producer() {
        let transactional = |pid, epoch, seq, base| {
            let mut h = batch(pid, epoch, seq, base, 1);
            h.attributes = crate::storage::record::header::ATTR_TRANSACTIONAL;
            h
        };
        let mut s = ProducerState::empty(0);
        let g = s.verification_guard(8, 1000);
        assert_eq!(s.verification_guard(8, 2000), g, "concurrent first batches share one guard");
        assert!(s.verified(8, g) && !s.has_ongoing_txn(8, 0));
        // Another producer's batches and this one's plain ones leave it alone.
        s.apply(&transactional(9, 0, 0, 0));
        s.apply(&batch(8, 0, 0, 1, 1));
        assert!(s.verified(8, g));
        // Its marker (its transaction ended while the batch was being verified) makes it stale.
        let mut marker = batch(8, 0, -1, 2, 1);
        marker.attributes =
            crate::storage::record::header::ATTR_TRANSACTIONAL | crate::storage::record::header::ATTR_CONTROL;
        s.apply(&marker);
        assert!(!s.verified(8, g) && s.outrun(8, g));
        let g2 = s.verification_guard(8, 3000);
        assert_ne!(g2, g, "a guard is never handed out twice");
        assert!(!s.verified(8, g));
        // A batch of its that opened the transaction here: later ones go by `has_ongoing_txn`.
        s.apply(&transactional(8, 0, 1, 3));
        assert!(!s.verified(8, g2) && s.has_ongoing_txn(8, 0) && !s.has_ongoing_txn(8, 1));
        // A state loaded again (a snapshot, a reopened partition) knows no guard taken before.
        let g3 = s.verification_guard(5, 3000);
        assert!(s.verified(5, g3));
        let back = ProducerState::decode_snapshot(&s.encode_snapshot(), s.map_end()).unwrap();
        assert!(!back.verified(5, g3) && !back.outrun(5, g3));
        assert!(!ProducerState::empty(0).verified(5, g3));
        // A flood of made-up producer ids keeps the newest guards, never more than the bound.
        let mut flood = ProducerState::empty(0);
        let first = flood.verification_guard(0, 0);
        for id in 1..=MAX_VERIFICATIONS as i64 * 3 {
            flood.verification_guard(id, id);
        }
        assert_eq!(flood.verifications.len(), MAX_VERIFICATIONS);
        assert!(!flood.verified(0, first) && !flood.outrun(0, first), "dropped, not outrun");
        let last = flood.verification_guard(MAX_VERIFICATIONS as i64 * 3, 0);
        assert!(flood.verified(MAX_VERIFICATIONS as i64 * 3, last));
        // One never used goes with the producers' expiry.
        s.expire(3000 + PRODUCER_ID_EXPIRATION_MS - 1);
        assert!(s.verified(5, g3));
        s.expire(3000 + PRODUCER_ID_EXPIRATION_MS);
        assert!(!s.verified(5, g3));
    }

    #[test]
    fn expiry_forgets_silent_producers() {
        let mut s = ProducerState::empty(0);
        s.apply(&batch(5, 0, 0, 0, 1));
        s.expire(1000 + PRODUCER_ID_EXPIRATION_MS - 1);
        assert_eq!(s.producer_count(), 1);
        s.expire(1000 + PRODUCER_ID_EXPIRATION_MS);
        assert_eq!(s.producer_count(), 0);
    }
}
