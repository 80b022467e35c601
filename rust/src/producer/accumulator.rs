//! Kafka's `RecordAccumulator` for one topic: records queued per partition into v2 batches,
//! a batch sealed when the next record would push it past `min(batch_size, max_bytes)` or when
//! it reached `batch_size`, sealed batches kept in order until taken for appending, and the
//! time each open batch got its first record, for `linger_ms`.
//!
//! `B` is what the caller hands the records of one batch (in the Python binding, the
//! `BatchState` its futures resolve from): made by the caller when a record starts a batch,
//! returned with the batch when it is taken, so completion stays the caller's business.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::producer::partitioner::{self, StickyPartitioner};
use crate::storage::error::Error;
use crate::storage::record::header::HEADER_LEN;
use crate::storage::record::record::record_size_upper_bound;
use crate::storage::record::{BatchBuilder, Compression, RecordInput};

/// The initial capacity of a batch's buffer (it grows up to `batch_size`).
const BATCH_CAPACITY: usize = 16 * 1024;

/// Why `Accumulator::append` queued a record nowhere (nothing changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The accumulator is closed (`close`): nothing would append the record.
    Closed,
    /// Neither key nor value.
    NoKeyOrValue,
    /// No key, to a compacted topic.
    NullKey,
    /// The record fits no batch: its size as a batch of its own.
    TooLarge(usize),
    /// The chosen partition does not exist (`count` are configured; 0: none yet).
    NoPartition { partition: usize, count: usize },
}

/// A record queued by `Accumulator::append`.
#[derive(Debug)]
pub struct Queued<'a, B> {
    /// The partition it went to.
    pub partition: usize,
    /// Its index in its batch (its offset is the batch's first offset plus this).
    pub index: usize,
    /// Its batch's handle.
    pub batch: &'a B,
    /// The partition has sealed batches waiting: the caller should take them now.
    pub full: bool,
    /// The record started its batch: it is due `linger_ms` from now.
    pub first: bool,
}

/// What `Accumulator::append` did with a record.
#[derive(Debug)]
pub enum Placed<'a, B> {
    Queued(Queued<'a, B>),
    Refused(Refusal),
}

/// Batches taken for appending since the accumulator was made (bytes uncompressed, with the
/// batch header): what a producer's metrics report.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct TakenStats {
    pub batches: u64,
    pub records: u64,
    pub bytes: u64,
    pub max_batch_bytes: u64,
}

/// The batch a partition is filling.
struct Open<B> {
    builder: BatchBuilder,
    batch: B,
}

/// One partition's records not yet taken: the batch being filled and the sealed ones, oldest
/// first.
struct Slot<B> {
    open: Option<Open<B>>,
    sealed: VecDeque<(BatchBuilder, B)>,
    /// When the partition's latest batch got its first record (kept once it is taken).
    started: Option<Instant>,
}

impl<B> Slot<B> {
    fn new() -> Self {
        Slot { open: None, sealed: VecDeque::new(), started: None }
    }

    /// Queue the open batch (if any) behind the sealed ones.
    fn seal(&mut self) {
        if let Some(open) = self.open.take() {
            self.sealed.push_back((open.builder, open.batch));
        }
    }

    fn records(&self) -> usize {
        self.open.as_ref().map_or(0, |o| o.builder.count()) + self.sealed.iter().map(|(b, _)| b.count()).sum::<usize>()
    }
}

/// A producer's record accumulator for one topic.
pub struct Accumulator<B> {
    slots: Vec<Slot<B>>,
    /// Keyless records' partitioner, shared with whatever else places this topic's keyless
    /// records (a bulk send), so both spread over the partitions as one stream.
    sticky: Option<Arc<Mutex<StickyPartitioner>>>,
    compression: Compression,
    compacted: bool,
    max_bytes: usize,
    batch_size: usize,
    /// Set by `close`: `append` refuses records. Checked under the same lock that queues a
    /// record, so a record queued after the closing caller's last take cannot exist.
    closed: bool,
    taken: TakenStats,
}

impl<B> Accumulator<B> {
    /// An accumulator with no partitions yet (`configure` gives them).
    pub fn new(batch_size: usize) -> Self {
        Accumulator {
            slots: Vec::new(),
            sticky: None,
            compression: Compression::None,
            compacted: false,
            max_bytes: usize::MAX,
            batch_size,
            closed: false,
            taken: TakenStats::default(),
        }
    }

    /// Take the topic's (possibly new) settings: partition count, keyless records'
    /// partitioner, the codec of new batches, whether keys are required, and the hard cap of
    /// an encoded batch. Returns the handles of the batches of partitions beyond the new count,
    /// for the caller to fail: the topic that had them is gone.
    pub fn configure(
        &mut self,
        partitions: usize,
        sticky: Arc<Mutex<StickyPartitioner>>,
        compression: Compression,
        compacted: bool,
        max_bytes: usize,
    ) -> Vec<B> {
        let kept = partitions.min(self.slots.len());
        let mut dropped = Vec::new();
        for mut slot in self.slots.drain(kept..) {
            slot.seal();
            dropped.extend(slot.sealed.into_iter().map(|(_, batch)| batch));
        }
        self.slots.resize_with(partitions, Slot::new);
        self.sticky = Some(sticky);
        self.compression = compression;
        self.compacted = compacted;
        self.max_bytes = max_bytes;
        dropped
    }

    /// Refuse every later record (`Refusal::Closed`), as Kafka's `RecordAccumulator.close`.
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// Queue one record, as Kafka's `RecordAccumulator.append`: to `partition`, else by the
    /// key's murmur2, else to the sticky partition. `new_batch(partition)` makes the handle of
    /// a batch the record starts. A record that would push the open batch past
    /// `min(batch_size, max_bytes)` seals it and starts the next; a batch that reached
    /// `batch_size` is sealed. An error is the sticky partitioner's poisoned lock or
    /// `new_batch`'s own; nothing is queued then.
    pub fn append<E: From<Error>>(
        &mut self,
        record: &RecordInput<'_>,
        partition: Option<usize>,
        new_batch: impl FnOnce(usize) -> std::result::Result<B, E>,
    ) -> std::result::Result<Placed<'_, B>, E> {
        if record.key.is_none() && record.value.is_none() {
            return Ok(Placed::Refused(Refusal::NoKeyOrValue));
        }
        if self.closed {
            return Ok(Placed::Refused(Refusal::Closed));
        }
        if record.key.is_none() && self.compacted {
            return Ok(Placed::Refused(Refusal::NullKey));
        }
        let record_bytes = record_size_upper_bound(record);
        if HEADER_LEN + record_bytes > self.max_bytes {
            return Ok(Placed::Refused(Refusal::TooLarge(HEADER_LEN + record_bytes)));
        }
        let count = self.slots.len();
        let mut sticky = match (partition, record.key, &self.sticky) {
            (None, None, Some(s)) => {
                Some(crate::storage::sync::lock_log(s, || "a producer's sticky partitioner".into())?)
            }
            _ => None,
        };
        let number = match (partition, record.key, &sticky) {
            (Some(n), _, _) => n,
            (None, Some(k), _) if count > 0 => partitioner::partition_for_key(k, count as u32) as usize,
            (None, None, Some(s)) => s.current() as usize,
            _ => 0,
        };
        let limit = self.batch_size.min(self.max_bytes);
        let Some(slot) = self.slots.get_mut(number) else {
            return Ok(Placed::Refused(Refusal::NoPartition { partition: number, count }));
        };
        let mut full = false;
        if slot.open.as_ref().is_some_and(|o| o.builder.size() + record_bytes > limit) {
            slot.seal();
            full = true;
        }
        let open = match &mut slot.open {
            Some(open) => open,
            None => {
                let batch = new_batch(number)?;
                let builder = BatchBuilder::new(self.compression, None, BATCH_CAPACITY);
                slot.started = Some(Instant::now());
                slot.open.insert(Open { builder, batch })
            }
        };
        let index = open.builder.count();
        open.builder.push(record);
        // Here the batch holds a record no handle was returned for yet: a panic now is the
        // worst case. Only the `panic` (and `kill`) actions mean anything: this step does no I/O.
        let _ = crate::storage::failpoint::hit("producer.accumulate");
        if let Some(s) = sticky.as_mut() {
            s.appended(record_bytes);
        }
        drop(sticky);
        // A batch full at once is taken now with the others: it does not linger.
        let mut first = false;
        if open.builder.size() >= self.batch_size {
            slot.seal();
            full = true;
        } else {
            first = index == 0;
        }
        let batch = match &slot.open {
            Some(open) => &open.batch,
            None => &slot.sealed.back().expect("sealed just above").1,
        };
        Ok(Placed::Queued(Queued { partition: number, index, batch, full, first }))
    }

    /// Partition `partition`'s sealed batches, oldest first, and the open one when `current`,
    /// to append in that order.
    pub fn take(&mut self, partition: usize, current: bool) -> Vec<(BatchBuilder, B)> {
        let Some(slot) = self.slots.get_mut(partition) else { return Vec::new() };
        if current {
            slot.seal();
        }
        for (builder, _) in &slot.sealed {
            let size = builder.size() as u64;
            self.taken.batches += 1;
            self.taken.records += builder.count() as u64;
            self.taken.bytes += size;
            self.taken.max_batch_bytes = self.taken.max_batch_bytes.max(size);
        }
        slot.sealed.drain(..).collect()
    }

    /// What `take` handed out so far.
    pub fn taken(&self) -> TakenStats {
        self.taken
    }

    /// Records queued and not taken, of one partition or of all.
    pub fn pending(&self, partition: Option<usize>) -> usize {
        match partition {
            Some(n) => self.slots.get(n).map_or(0, Slot::records),
            None => self.slots.iter().map(Slot::records).sum(),
        }
    }

    /// How long until `linger` has passed since partition `partition`'s latest batch got its
    /// first record (zero once due), as Kafka's sender waits per partition: the latest batch
    /// whether or not it was taken since, so a sender woken for it keeps that deadline rather
    /// than sweeping the partition at once. None when no record ever went to the partition.
    pub fn linger_left(&self, partition: usize, linger: Duration, now: Instant) -> Option<Duration> {
        let started = self.slots.get(partition)?.started?;
        Some((started + linger).saturating_duration_since(now))
    }

    /// The handle of every batch not taken, open or sealed (to fail them all when the
    /// accumulator cannot go on).
    pub fn batches(&self) -> impl Iterator<Item = &B> {
        self.slots.iter().flat_map(|s| s.open.iter().map(|o| &o.batch).chain(s.sealed.iter().map(|(_, b)| b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::error::Result;

    type Acc = Accumulator<u32>;

    fn acc(partitions: usize, batch_size: usize, max_bytes: usize) -> Acc {
        let mut a = Acc::new(batch_size);
        let sticky = Arc::new(Mutex::new(StickyPartitioner::new(partitions as u32, batch_size, 1)));
        assert!(a.configure(partitions, sticky, Compression::None, false, max_bytes).is_empty());
        a
    }

    fn rec<'a>(key: Option<&'a [u8]>, value: &'a [u8]) -> RecordInput<'a> {
        RecordInput { key, value: Some(value), headers: &[], timestamp: 1 }
    }

    /// Queue `r`, numbering batches from `next`; (partition, index, batch, full, first).
    fn put(
        a: &mut Acc,
        r: &RecordInput<'_>,
        partition: Option<usize>,
        next: &mut u32,
    ) -> (usize, usize, u32, bool, bool) {
        let placed = a.append(r, partition, |_| -> Result<u32> {
            *next += 1;
            Ok(*next)
        });
        match placed.unwrap() {
            Placed::Queued(q) => (q.partition, q.index, *q.batch, q.full, q.first),
            Placed::Refused(r) => panic!("refused: {r:?}"),
        }
    }

    #[test]
    fn batches_fill_up_to_batch_size_then_seal_in_order() {
        let mut a = acc(1, 1000, usize::MAX);
        let mut next = 0;
        let value = [7u8; 100];
        let mut seen = Vec::new();
        for _ in 0..25 {
            seen.push(put(&mut a, &rec(None, &value), Some(0), &mut next));
        }
        assert!(seen[0].4, "the first record starts a batch");
        assert!(!seen[1].4);
        // A record that does not fit seals the batch it would have overfilled.
        let sealed_at = seen.iter().position(|s| s.3).unwrap();
        assert!(sealed_at > 1);
        assert_eq!(seen[sealed_at].1, 0, "a sealing record starts the next batch");
        let taken = a.take(0, false);
        assert!(!taken.is_empty());
        for (b, _) in &taken {
            assert!(b.size() <= 1000, "a batch stays within batch_size: {}", b.size());
        }
        let handles: Vec<u32> = taken.iter().map(|(_, h)| *h).collect();
        assert!(handles.windows(2).all(|w| w[0] < w[1]), "oldest first: {handles:?}");
        let rest = a.pending(Some(0));
        assert_eq!(taken.iter().map(|(b, _)| b.count()).sum::<usize>() + rest, 25);
        assert_eq!(a.take(0, true).iter().map(|(b, _)| b.count()).sum::<usize>(), rest);
        assert_eq!(a.pending(None), 0);
        let stats = a.taken();
        assert_eq!((stats.records, stats.batches as usize), (25, handles.len() + 1));
    }

    #[test]
    fn records_share_their_batch_handle_and_index() {
        let mut a = acc(2, 1 << 20, usize::MAX);
        let mut next = 0;
        let r0 = put(&mut a, &rec(None, b"a"), Some(1), &mut next);
        let r1 = put(&mut a, &rec(None, b"b"), Some(1), &mut next);
        let other = put(&mut a, &rec(None, b"c"), Some(0), &mut next);
        assert_eq!((r0.1, r1.1), (0, 1));
        assert_eq!(r0.2, r1.2);
        assert_ne!(other.2, r0.2);
        let taken = a.take(1, true);
        assert_eq!(taken.len(), 1);
        assert_eq!((taken[0].0.count(), taken[0].1), (2, r0.2));
    }

    #[test]
    fn keys_pick_partitions_by_murmur2() {
        let mut a = acc(5, 1 << 20, usize::MAX);
        let mut next = 0;
        for key in [&b"alpha"[..], b"beta", b"", b"gamma-123"] {
            let (p, ..) = put(&mut a, &rec(Some(key), b"v"), None, &mut next);
            assert_eq!(p, partitioner::partition_for_key(key, 5) as usize);
        }
    }

    #[test]
    fn keyless_records_stick_to_a_partition_for_a_batch() {
        let mut a = acc(4, 1000, usize::MAX);
        let mut next = 0;
        let value = [0u8; 90];
        let parts: Vec<usize> = (0..40).map(|_| put(&mut a, &rec(None, &value), None, &mut next).0).collect();
        let switches = parts.windows(2).filter(|w| w[0] != w[1]).count();
        assert!((2..=5).contains(&switches), "about one partition per 1000 bytes: {parts:?}");
    }

    #[test]
    fn refusals_queue_nothing() {
        let mut a = acc(2, 1000, 200);
        let mut next = 0;
        let none = RecordInput { key: None, value: None, headers: &[], timestamp: 1 };
        let refused = |a: &mut Acc, r: &RecordInput<'_>, p| match a.append(r, p, |_| -> Result<u32> { Ok(0) }).unwrap()
        {
            Placed::Refused(why) => why,
            Placed::Queued(_) => panic!("queued"),
        };
        assert_eq!(refused(&mut a, &none, None), Refusal::NoKeyOrValue);
        let big = [0u8; 300];
        assert!(matches!(refused(&mut a, &rec(None, &big), None), Refusal::TooLarge(n) if n > 300));
        assert_eq!(refused(&mut a, &rec(None, b"x"), Some(5)), Refusal::NoPartition { partition: 5, count: 2 });
        let sticky = Arc::new(Mutex::new(StickyPartitioner::new(2, 1000, 1)));
        assert!(a.configure(2, sticky, Compression::None, true, 200).is_empty());
        assert_eq!(refused(&mut a, &rec(None, b"x"), None), Refusal::NullKey);
        put(&mut a, &rec(Some(b"k"), b"x"), None, &mut next);
        a.close();
        assert_eq!(refused(&mut a, &rec(Some(b"k"), b"x"), None), Refusal::Closed);
        assert_eq!(a.pending(None), 1);
        assert_eq!(
            Acc::new(10).append(&rec(None, b"x"), None, |_| -> Result<u32> { Ok(0) }).unwrap().refusal(),
            Some(Refusal::NoPartition { partition: 0, count: 0 })
        );
    }

    #[test]
    fn max_bytes_caps_a_batch_below_batch_size() {
        let mut a = acc(1, 1 << 20, 500);
        let mut next = 0;
        let value = [1u8; 100];
        for _ in 0..20 {
            put(&mut a, &rec(None, &value), Some(0), &mut next);
        }
        let taken = a.take(0, true);
        assert!(taken.len() >= 4);
        assert!(taken.iter().all(|(b, _)| b.size() <= 500));
    }

    #[test]
    fn shrinking_hands_back_the_dropped_partitions_batches() {
        let mut a = acc(3, 1 << 20, usize::MAX);
        let mut next = 0;
        let kept = put(&mut a, &rec(None, b"a"), Some(0), &mut next).2;
        let gone = put(&mut a, &rec(None, b"b"), Some(2), &mut next).2;
        let sticky = Arc::new(Mutex::new(StickyPartitioner::new(1, 1 << 20, 1)));
        assert_eq!(a.configure(1, sticky, Compression::None, false, usize::MAX), vec![gone]);
        assert_eq!(a.batches().copied().collect::<Vec<_>>(), vec![kept]);
        assert_eq!(a.pending(None), 1);
    }

    #[test]
    fn linger_counts_from_the_first_record_of_the_open_batch() {
        let mut a = acc(1, 1 << 20, usize::MAX);
        let mut next = 0;
        let linger = Duration::from_millis(50);
        assert_eq!(a.linger_left(0, linger, Instant::now()), None);
        put(&mut a, &rec(None, b"a"), Some(0), &mut next);
        let now = Instant::now();
        let left = a.linger_left(0, linger, now).unwrap();
        assert!(left <= linger && left > Duration::ZERO);
        assert_eq!(a.linger_left(0, linger, now + linger), Some(Duration::ZERO));
        put(&mut a, &rec(None, b"b"), Some(0), &mut next);
        assert_eq!(a.linger_left(0, linger, now + linger), Some(Duration::ZERO), "a later record does not restart it");
        a.take(0, true);
        assert_eq!(a.linger_left(0, linger, now), Some(left), "a taken batch's deadline stands");
        put(&mut a, &rec(None, b"c"), Some(0), &mut next);
        assert!(a.linger_left(0, linger, now + linger).unwrap() > Duration::ZERO, "the next batch starts its own");
    }

    #[test]
    fn a_failing_handle_queues_nothing() {
        let mut a = acc(1, 1 << 20, usize::MAX);
        let failed = a.append(&rec(None, b"a"), Some(0), |_| Err(Error::config("no handle")));
        assert!(failed.is_err());
        assert_eq!(a.pending(None), 0);
    }

    impl<B> Placed<'_, B> {
        fn refusal(&self) -> Option<Refusal> {
            match self {
                Placed::Refused(r) => Some(*r),
                Placed::Queued(_) => None,
            }
        }
    }
}
