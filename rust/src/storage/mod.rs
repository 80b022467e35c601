//! The storage layer: one partition's log as Kafka writes it (records, segments, indexes,
//! recovery, retention, compaction, the producer state and aborted transactions kept beside it)
//! and a data directory's files. It imports no layer above it (coordination, producer, server,
//! py, spark), so the log can be reasoned about, and tested, on its own.

pub mod arrow;
pub mod checkpoint;
pub mod cleaner;
pub mod datadir;
pub mod error;
pub mod failpoint;
pub mod files;
pub mod fsync_batch;
pub mod index;
pub mod inspect;
pub mod lock;
pub mod log;
pub mod log_read;
pub mod mmap;
pub mod nofollow;
pub mod notify;
pub mod options;
pub mod prealloc;
pub mod producer_state;
pub mod read_committed;
pub mod record;
pub mod retention;
pub mod segment;
pub mod sigbus;
pub mod sync;
pub mod topic_config;
