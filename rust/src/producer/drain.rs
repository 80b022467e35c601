//! Appending a partition's taken batches, in order, each to the engine's one append path
//! (`Log::append_builder_deferred`, which the server's produce path and the Spark sink reach
//! too, through `Log::append_produce`: both end in `Log::append_batch`), and reporting what
//! became of each batch to the caller, who completes or fails its handle.
//!
//! The rule kept here: every taken batch gets an outcome, in order, whatever happened to the
//! ones before it (they are out of the accumulator: stopping early would lose their records),
//! and once the partition's folder turns out replaced (the topic deleted, perhaps re-created)
//! no later batch is appended to this log: they all go back to the caller, in order, to reopen
//! the partition or fail them.

use crate::storage::error::Result;
use crate::storage::fsync_batch::Ticket;
use crate::storage::log::Log;
use crate::storage::record::BatchBuilder;

/// Where one batch went.
pub struct Appended {
    pub first_offset: i64,
    pub last_offset: i64,
    /// The LogAppendTime the log stamped the batch with, if the topic uses it.
    pub log_append_time: Option<i64>,
    /// flush="always": what to wait for before acknowledging (None otherwise).
    pub ticket: Option<Ticket>,
}

/// Something a partition's batches are appended to.
pub trait BatchSink {
    type Error;

    /// Append one batch; `Ok(Err(builder))` gives it back untouched when the partition's
    /// folder is no longer the one this sink opened.
    fn append(
        &mut self,
        builder: BatchBuilder,
    ) -> std::result::Result<std::result::Result<Appended, BatchBuilder>, Self::Error>;
}

impl BatchSink for Log {
    type Error = crate::Error;

    fn append(&mut self, builder: BatchBuilder) -> Result<std::result::Result<Appended, BatchBuilder>> {
        let ((first_offset, last_offset), ticket) = self.append_builder_deferred(builder)?;
        Ok(Ok(Appended { first_offset, last_offset, log_append_time: self.last_log_append_time(), ticket }))
    }
}

/// What became of one taken batch (`records`: how many it held).
pub enum Drained<B, E> {
    Appended {
        batch: B,
        records: usize,
        at: Appended,
    },
    Failed {
        batch: B,
        records: usize,
        error: E,
    },
    /// Not appended: the folder was replaced (this batch or an earlier one found it so).
    Replaced {
        batch: B,
        builder: BatchBuilder,
    },
}

/// Append `batches` to `sink` in order and hand each outcome to `each`, in order, as soon as
/// it is known (so a batch's futures resolve before the next batch is appended, as Kafka's do
/// per produce response).
pub fn append_in_order<B, S: BatchSink>(
    sink: &mut S,
    batches: Vec<(BatchBuilder, B)>,
    mut each: impl FnMut(Drained<B, S::Error>),
) {
    let mut batches = batches.into_iter();
    while let Some((builder, batch)) = batches.next() {
        let records = builder.count();
        match sink.append(builder) {
            Ok(Ok(at)) => each(Drained::Appended { batch, records, at }),
            Err(error) => each(Drained::Failed { batch, records, error }),
            Ok(Err(builder)) => {
                each(Drained::Replaced { batch, builder });
                for (builder, batch) in batches.by_ref() {
                    each(Drained::Replaced { batch, builder });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::producer::accumulator::{Accumulator, Placed};
    use crate::producer::partitioner::StickyPartitioner;
    use crate::storage::record::{Compression, RecordInput};
    use crate::LogConfig;

    /// A sink that appends to a log until `replaced_after` batches, then finds its folder replaced;
    /// batch number `fail_at` fails.
    struct Scripted {
        log: Log,
        appended: usize,
        replaced_after: usize,
        fail_at: Option<usize>,
    }

    impl BatchSink for Scripted {
        type Error = String;

        fn append(
            &mut self,
            builder: BatchBuilder,
        ) -> std::result::Result<std::result::Result<Appended, BatchBuilder>, String> {
            let n = self.appended;
            self.appended += 1;
            if Some(n) == self.fail_at {
                return Err(format!("batch {n} failed"));
            }
            if n >= self.replaced_after {
                return Ok(Err(builder));
            }
            BatchSink::append(&mut self.log, builder).map_err(|e| e.to_string())
        }
    }

    fn filled(batches: usize, records: usize) -> Vec<(BatchBuilder, usize)> {
        let mut acc = Accumulator::<usize>::new(1 << 20);
        acc.configure(
            1,
            Arc::new(Mutex::new(StickyPartitioner::new(1, 1 << 20, 1))),
            Compression::None,
            false,
            usize::MAX,
        );
        let mut out = Vec::new();
        for b in 0..batches {
            for _ in 0..records {
                let r = RecordInput { key: None, value: Some(b"v"), headers: &[], timestamp: 1 };
                assert!(matches!(acc.append(&r, Some(0), |_| -> Result<usize> { Ok(b) }).unwrap(), Placed::Queued(_)));
            }
            out.extend(acc.take(0, true));
        }
        out
    }

    #[test]
    fn appends_in_order_and_reports_each_batch() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path().join("t-0"), LogConfig::default()).unwrap();
        let mut seen = Vec::new();
        append_in_order(&mut log, filled(3, 4), |d| match d {
            Drained::Appended { batch, records, at } => seen.push((batch, records, at.first_offset, at.last_offset)),
            _ => panic!("not appended"),
        });
        assert_eq!(seen, vec![(0, 4, 0, 3), (1, 4, 4, 7), (2, 4, 8, 11)]);
        assert_eq!(log.end_offset(), 12);
    }

    #[test]
    fn a_failed_batch_does_not_stop_the_later_ones() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path().join("t-0"), LogConfig::default()).unwrap();
        let mut sink = Scripted { log, appended: 0, replaced_after: usize::MAX, fail_at: Some(1) };
        let mut seen = Vec::new();
        append_in_order(&mut sink, filled(3, 2), |d| match d {
            Drained::Appended { batch, at, .. } => seen.push(format!("{batch}@{}", at.first_offset)),
            Drained::Failed { batch, records, error } => seen.push(format!("{batch} x{records}: {error}")),
            Drained::Replaced { batch, .. } => seen.push(format!("{batch} replaced")),
        });
        assert_eq!(seen, ["0@0", "1 x2: batch 1 failed", "2@2"]);
    }

    #[test]
    fn a_replaced_folder_hands_back_that_batch_and_every_later_one() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path().join("t-0"), LogConfig::default()).unwrap();
        let mut sink = Scripted { log, appended: 0, replaced_after: 1, fail_at: None };
        let mut seen = Vec::new();
        append_in_order(&mut sink, filled(4, 3), |d| match d {
            Drained::Appended { batch, .. } => seen.push((batch, "appended", 0)),
            Drained::Replaced { batch, builder } => seen.push((batch, "replaced", builder.count())),
            Drained::Failed { .. } => panic!("failed"),
        });
        assert_eq!(seen, [(0, "appended", 0), (1, "replaced", 3), (2, "replaced", 3), (3, "replaced", 3)]);
        assert_eq!(sink.appended, 2, "nothing after the first replaced batch reaches the sink");
        assert_eq!(sink.log.end_offset(), 3);
    }
}
