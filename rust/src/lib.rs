//! kafkalite's storage engine: Apache Kafka's partition log format, embedded.
//!
//! A data directory holds one folder per partition, `<topic>-<partition>/`, and in it
//! segments named by their base offset, exactly as a Kafka broker writes them:
//!
//! ```text
//! events-0/
//!   00000000000000000000.log        v2 record batches back to back (CRC-32C each)
//!   00000000000000000000.index      8-byte entries: relative offset, position
//!   00000000000000000000.timeindex  12-byte entries: timestamp, relative offset
//!   00000000000000104857.log ...    the next segment, based at its first offset
//!   00000000000000104857.snapshot   producer state (ids, epochs, sequences) as of that offset
//!   .kafkalite.writers              the writers' presence lock (the exclusive holder's pid inside)
//!   .kafkalite.lock                 the append lock shared writers take around each append
//!   .kafkalite-clean-shutdown       present after a clean close
//!   .kafkalite-segments             bumped when segments are deleted or replaced (not rolled)
//!   .kafkalite-log-start-offset     the log start offset, when above the first segment
//!   .kafkalite-cleaner-offset       where compaction resumes (compacted topics)
//! ```
//!
//! In a data directory (the parent holds `.kafkalite-topics.json` or a broker's files), the
//! same facts are also kept where a broker keeps them, in the shared `log-start-offset-checkpoint`,
//! `cleaner-offset-checkpoint` and `recovery-point-offset-checkpoint` (`storage::checkpoint`),
//! and a broker's entries there are read.
//!
//! Layers, bottom up, one folder each; a layer imports only those below it
//! (tests/test_layer_picture.py checks):
//!
//! - `storage`: one partition's log and a data directory's files, importing no layer above it.
//!   `record` (the v2 codec: batches, records, varints, codecs, `scan`, `filter`), `index`
//!   (`.index` / `.timeindex`) and `segment` (one `.log` with its indexes, appended through
//!   `mmap`; `prealloc` bounds the disk reserved ahead of writers), `log` and `log_read` (a
//!   partition: open and recovery, what other processes wrote, append and roll; reads),
//!   `producer_state` (Kafka's per-producer sequences and `.snapshot` files, which the log
//!   keeps, as Kafka's `ProducerStateManager`), `read_committed` (aborted transactions, the
//!   last stable offset: Kafka's transaction index), `fsync_batch` (flush="always": one sync
//!   covers every batch appended meanwhile, across threads and processes), `retention`,
//!   `cleaner` (compaction), `checkpoint`, `topic_config` (every config key: one table, one
//!   resolution), `options`, `error` (the one error type), `datadir` (a data directory's topic
//!   metadata), `inspect` (dump-log's judgement), `arrow` (records to Arrow), and beside them
//!   `notify`, `nofollow`, `sigbus`, `failpoint`, `lock`, `sync` and `files`.
//! - `coordination`: the state Kafka's coordinators keep, over storage: `offsets_codec` and
//!   `committed_offsets` (`__consumer_offsets`), `producer_ids`, `transactions` (the
//!   transaction coordinator), `users` (SCRAM credentials) and `quotas` (client quotas).
//! - `producer`: the embedded producer's core (batching per partition, linger, draining through
//!   the log's append, Kafka's partitioner), over storage.
//! - `spark`: the records as Spark's Kafka-source rows, over storage's `arrow`.
//! - `server`: `kafkalite serve`, Kafka's wire protocol, over storage and coordination.
//! - `py`: the PyO3 binding over all of them, built only with the `python` feature.

/// The `log` target of every engine event; the binding forwards it to Python's
/// `logging.getLogger("kafkalite.engine")`. The engine logs only notable events (recovery
/// cutting a segment or rebuilding its indexes, a segment deleted by retention, an undone roll),
/// never per record.
pub const LOG_TARGET: &str = "kafkalite::engine";

pub mod coordination;
pub mod producer;
pub mod server;
pub mod spark;
pub mod storage;

#[cfg(feature = "python")]
mod py;

pub use storage::error::{Error, Result};
pub use storage::log::{Log, SegmentInfo};
pub use storage::log_read::{BatchSlice, RecordSink};
pub use storage::options::{FlushPolicy, LogConfig};
