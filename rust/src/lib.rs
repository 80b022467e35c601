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
//! `cleaner-offset-checkpoint` and `recovery-point-offset-checkpoint` (`checkpoint.rs`), and a
//! broker's entries there are read.
//!
//! Layers, bottom up: `record` (the v2 codec: batches, records, varints, codecs, `scan`,
//! `filter`), `index` (`.index` / `.timeindex`) and `segment` (one `.log` with its indexes,
//! appended through `mmap`; split by role into `writer`, `follower` and `recovery`; `prealloc`
//! bounds the disk reserved ahead of writers), `log` and `log_read` (a partition: `log::load`
//! opens and recovers, `log::follow` learns what other processes wrote, `log::append` appends
//! and rolls; `log_read` reads), `retention`, `txn` (aborted
//! transactions, last stable offset), `group_commit` (flush="always": one sync covers every
//! batch appended meanwhile, across threads and processes), `producer_state` (Kafka's per-producer sequences and
//! `.snapshot` files, for idempotent produce), `producer_ids` (InitProducerId's ids), `transactions` (Kafka's transaction coordinator over a data
//! directory: `__transaction_state`, per-id locks, two-phase commit with markers), `cleaner` (compaction), `checkpoint` (small atomic files,
//! Kafka's checkpoint files), `topic_config` (every topic and data-directory config key: one
//! table, one resolution), `options` (a log's settings) and `error` (the one error type). Above
//! the partition: `datadir` (a data directory's topic metadata), `partitioner` (Kafka's
//! murmur2), `producer` (the embedded producer's core: batching per partition, linger, draining
//! through the log's append), `notify` (futex wake-ups across processes), `offsets_codec` (Kafka's
//! `__consumer_offsets` records, for the server and the clients), `committed_offsets` (a group's
//! committed offsets read from them with Kafka's transactional rules, for the same two), `inspect` (a segment judged by
//! recovery's rules, for `kafkalite dump-log`), `arrow` (records to Arrow), `spark` (the same
//! records as Spark's Kafka-source rows), `users` (the SASL/SCRAM credentials `kafkalite serve`
//! checks), `quotas` (the client quotas it enforces, stored in the data directory) and `server` (`kafkalite serve`, Kafka's wire protocol). `py` is the PyO3 binding, built only with the `python` feature. Beside them:
//! `nofollow` (every data-directory file is opened without following symlinks), `sigbus` (a file
//! truncated under a map costs data, not the process), `failpoint` (named fault-injection
//! points, `KAFKALITE_FAILPOINTS`), `lock` (writers' flocks, bounded waits),
//! `sync` (the in-process mutex around a log, poisoned by a panic), `files` (every file name and
//! suffix the engine writes, as Kafka's `LogFileUtils`).

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
