//! Settings of one partition log, with Kafka's names and defaults where Kafka has them.

use crate::storage::error::{Error, Result};
use crate::storage::record::{Compression, TimestampType};

/// When appended data is forced to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushPolicy {
    /// Leave it to the page cache (Kafka's default): a process crash loses nothing, a power
    /// loss may lose the tail.
    Os,
    /// msync before `append` returns: nothing acknowledged is lost even on power loss.
    Always,
    /// Flush after every N messages (Kafka's `flush.messages`).
    EveryMessages(u64),
}

impl FlushPolicy {
    /// `"os"`, `"always"`, or a message count given as text.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "os" => Ok(FlushPolicy::Os),
            "always" => Ok(FlushPolicy::Always),
            other => match other.trim().parse::<u64>() {
                Ok(n) if n >= 1 => Ok(FlushPolicy::EveryMessages(n)),
                _ => Err(Error::config(format!("flush must be \"os\", \"always\" or a message count, not {other:?}"))),
            },
        }
    }

    /// Flush after every `n` messages; `n` must be at least 1.
    pub fn every(n: i64) -> Result<Self> {
        match u64::try_from(n) {
            Ok(n) if n >= 1 => Ok(FlushPolicy::EveryMessages(n)),
            _ => Err(Error::config("flush must be \"os\", \"always\" or a positive message count")),
        }
    }
}

/// Configuration of a partition log. The topic-level settings' names, defaults and bounds are
/// defined once in `topic_config::TOPIC_CONFIGS`; `topic_config::resolve` builds this from them.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// `segment.bytes`: roll when a segment would exceed this size.
    pub segment_bytes: u64,
    /// `index.interval.bytes`: bytes between offset-index entries (default 4096).
    pub index_interval_bytes: u64,
    /// `segment.ms`: roll a segment after this much time (default none).
    pub segment_ms: Option<i64>,
    /// `retention.bytes`: delete oldest segments past this total size (default none).
    pub retention_bytes: Option<u64>,
    /// `retention.ms`: delete segments whose newest record is older (None: no limit; the
    /// topic config's -1).
    pub retention_ms: Option<i64>,
    /// `compression.type` for batches this log builds.
    pub compression: Compression,
    pub flush: FlushPolicy,
    /// `message.timestamp.type`.
    pub timestamp_type: TimestampType,
    /// `max.message.bytes`: the largest batch accepted.
    pub max_message_bytes: usize,
    /// `segment.index.bytes`: the size of a full index (default 10 MiB).
    pub max_index_bytes: usize,
    /// Open without writing anything.
    pub readonly: bool,
    /// Let several writers (processes) append, each taking the append lock per batch.
    pub shared_writers: bool,
    /// `cleanup.policy` includes `compact`: every record needs a key.
    pub compact: bool,
    /// Longest wait of a shared writer for the append lock before the operation fails with
    /// `Error::LockTimeout` (Kafka's producer blocks at most `max.block.ms`, 60 s).
    pub lock_timeout: Option<std::time::Duration>,
    /// `log.preallocate.budget.bytes` of the data directory: the most bytes this process keeps
    /// reserved ahead of its writers over all partitions of the directory (`prealloc.rs`).
    /// None leaves the directory's current limit (`prealloc::DEFAULT_BUDGET_BYTES` at first).
    pub preallocate_budget_bytes: Option<u64>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: crate::storage::topic_config::SEGMENT_BYTES as u64,
            index_interval_bytes: 4096,
            segment_ms: None,
            retention_bytes: None,
            retention_ms: None,
            compression: Compression::None,
            flush: FlushPolicy::Os,
            timestamp_type: TimestampType::CreateTime,
            max_message_bytes: crate::storage::topic_config::MAX_MESSAGE_BYTES as usize,
            max_index_bytes: 10 * 1024 * 1024,
            lock_timeout: Some(std::time::Duration::from_secs(60)),
            readonly: false,
            shared_writers: false,
            compact: false,
            preallocate_budget_bytes: None,
        }
    }
}

impl LogConfig {
    /// Check every setting and say which one is wrong and why.
    pub fn validate(&self) -> Result<()> {
        // Segments are addressed with i32 positions in the index.
        if self.segment_bytes < 14 || self.segment_bytes > i32::MAX as u64 {
            return Err(Error::config(format!(
                "segment_bytes must be between 14 and {} (2 GiB - 1), got {}",
                i32::MAX,
                self.segment_bytes
            )));
        }
        if self.index_interval_bytes == 0 {
            return Err(Error::config("index_interval_bytes must be positive"));
        }
        if let Some(ms) = self.segment_ms {
            if ms <= 0 {
                return Err(Error::config(format!("segment_ms must be positive, got {ms}")));
            }
        }
        if let Some(ms) = self.retention_ms {
            if ms < 0 {
                return Err(Error::config(format!("retention_ms must be >= 0 (or None for no limit), got {ms}")));
            }
        }
        if let FlushPolicy::EveryMessages(0) = self.flush {
            return Err(Error::config("flush every N messages needs N >= 1"));
        }
        if self.max_message_bytes < 61 || self.max_message_bytes > i32::MAX as usize {
            return Err(Error::config(format!(
                "max_message_bytes must be between 61 (one batch header) and {}, got {}",
                i32::MAX,
                self.max_message_bytes
            )));
        }
        if self.max_index_bytes < 12 {
            return Err(Error::config("max_index_bytes must hold at least one time index entry (12 bytes)"));
        }
        Ok(())
    }
}
