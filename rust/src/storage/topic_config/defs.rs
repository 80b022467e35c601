//! The config tables: every topic and data-directory config key kafkalite accepts, with its
//! type, bounds, Kafka's default, its doc and whether kafkalite applies it (as Kafka's
//! `LogConfig.define`). `topic_config.rs` validates and resolves values against them.

use serde_json::{json, Value};

/// Kafka's `max.message.bytes` default: 1 MiB of records plus a batch's overhead.
pub const MAX_MESSAGE_BYTES: i64 = 1_048_588;
/// Kafka's `segment.bytes` default (1 GiB).
pub const SEGMENT_BYTES: i64 = 1 << 30;
/// The most partitions a topic may have. Each partition is a folder and, while written, a few
/// open files; this bound keeps a typo (partitions=10**9) from filling the disk with folders.
pub const MAX_PARTITIONS: i64 = 100_000;
/// Codecs kafkalite reads (a Kafka broker's files) but does not write (the codec's own list).
use crate::storage::record::compression::TOPIC_CODEC_CHOICES;

const I32_MAX: i64 = i32::MAX as i64;

/// What a config's values are and which of them are allowed.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// An integer within `[min, max]`.
    Int { min: i64, max: i64 },
    /// A number within `[0, 1]`.
    Ratio,
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// A comma-separated subset of these strings (`cleanup.policy`), normalised sorted.
    List(&'static [&'static str]),
    /// true or false.
    Bool,
    /// Any string (Kafka's throttled-replica lists, which name brokers and partitions).
    Text,
}

impl Kind {
    /// The type's name as the reference page and Python's type checks use it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Kind::Int { .. } => "int",
            Kind::Ratio => "float",
            Kind::Choice(_) => "string",
            Kind::List(_) => "list",
            Kind::Bool => "boolean",
            Kind::Text => "string",
        }
    }
}

/// One config key.
#[derive(Clone, Copy, Debug)]
pub struct ConfigDef {
    /// The topic-level name (`retention.ms`), or the data directory's own name.
    pub name: &'static str,
    /// For topic configs: the broker's name of its default (`log.retention.ms`), which the data
    /// directory sets for every topic that does not override it.
    pub broker_name: Option<&'static str>,
    pub kind: Kind,
    /// Kafka's default, as stored in the metadata file.
    pub default: DefaultValue,
    pub doc: &'static str,
    /// False for the configs Kafka 4.x accepts that kafkalite stores and reports but does not
    /// act on (remote storage, replication, flushing schedules, ...): a client setting one is
    /// accepted, as by a Kafka broker, and a WARNING says that it changes nothing here.
    pub applied: bool,
}

/// A default value (`const`-constructible, unlike `serde_json::Value`).
#[derive(Clone, Copy, Debug)]
pub enum DefaultValue {
    Int(i64),
    Float(f64),
    Str(&'static str),
    Bool(bool),
}

impl DefaultValue {
    pub fn to_value(self) -> Value {
        match self {
            DefaultValue::Int(n) => json!(n),
            DefaultValue::Float(f) => json!(f),
            DefaultValue::Str(s) => json!(s),
            DefaultValue::Bool(b) => json!(b),
        }
    }
}

const fn topic(
    name: &'static str,
    broker_name: &'static str,
    kind: Kind,
    default: DefaultValue,
    doc: &'static str,
) -> ConfigDef {
    ConfigDef { name, broker_name: Some(broker_name), kind, default, doc, applied: true }
}

/// A topic config kafkalite stores and reports but does not apply (`ConfigDef::applied`).
const fn unapplied(
    name: &'static str,
    broker_name: Option<&'static str>,
    kind: Kind,
    default: DefaultValue,
    doc: &'static str,
) -> ConfigDef {
    ConfigDef { name, broker_name, kind, default, doc, applied: false }
}

const LONG: Kind = Kind::Int { min: 0, max: i64::MAX };

/// Every topic config of Kafka 4.x (its `LogConfig`), with Kafka's defaults: first those
/// kafkalite implements, then those it stores and reports but does not apply, each sorted by name.
pub static TOPIC_CONFIGS: &[ConfigDef] = &[
    topic(
        "cleanup.policy",
        "log.cleanup.policy",
        Kind::List(&["compact", "delete"]),
        DefaultValue::Str("delete"),
        "'delete' removes whole old segments past retention.ms / retention.bytes; 'compact' keeps the \
         latest record of each key (every record needs a key); 'compact,delete' does both.",
    ),
    topic(
        "compression.type",
        "compression.type",
        Kind::Choice(TOPIC_CODEC_CHOICES),
        DefaultValue::Str("producer"),
        "The codec batches are written with: 'producer' keeps the writer's own compression_type; \
         'uncompressed' (or 'none'), 'gzip', 'snappy', 'lz4' or 'zstd' force one.",
    ),
    topic(
        "delete.retention.ms",
        "log.cleaner.delete.retention.ms",
        Kind::Int { min: 0, max: i64::MAX },
        DefaultValue::Int(86_400_000),
        "How long a tombstone (a record with a key and no value) stays readable after compaction first sees it.",
    ),
    topic(
        "max.message.bytes",
        "message.max.bytes",
        Kind::Int { min: 61, max: I32_MAX },
        DefaultValue::Int(MAX_MESSAGE_BYTES),
        "The largest record batch an append accepts (61 is one batch header).",
    ),
    topic(
        "message.timestamp.type",
        "log.message.timestamp.type",
        Kind::Choice(&["CreateTime", "LogAppendTime"]),
        DefaultValue::Str("CreateTime"),
        "'CreateTime' keeps the producer's timestamps; 'LogAppendTime' stamps each batch with the time it is appended.",
    ),
    topic(
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        Kind::Ratio,
        DefaultValue::Float(0.5),
        "Compaction runs when at least this share of the log has not been compacted yet.",
    ),
    topic(
        "min.compaction.lag.ms",
        "log.cleaner.min.compaction.lag.ms",
        Kind::Int { min: 0, max: i64::MAX },
        DefaultValue::Int(0),
        "The youngest a record may be and still be compacted away.",
    ),
    topic(
        "retention.bytes",
        "log.retention.bytes",
        Kind::Int { min: -1, max: i64::MAX },
        DefaultValue::Int(-1),
        "Delete the oldest segments of a partition past this many bytes; -1: no size limit.",
    ),
    topic(
        "retention.ms",
        "log.retention.ms",
        Kind::Int { min: -1, max: i64::MAX },
        DefaultValue::Int(604_800_000),
        "Delete segments whose newest record is older than this (default 7 days); -1: keep forever.",
    ),
    topic(
        "segment.bytes",
        "log.segment.bytes",
        Kind::Int { min: 14, max: I32_MAX },
        DefaultValue::Int(SEGMENT_BYTES),
        "Roll to a new segment file when the active one would exceed this size.",
    ),
    topic(
        "segment.ms",
        "log.roll.ms",
        Kind::Int { min: 1, max: i64::MAX },
        DefaultValue::Int(604_800_000),
        "Roll to a new segment file after this long even if it is not full (so retention can delete it).",
    ),
    // Stored and reported, not applied (`ConfigDef::applied`).
    unapplied(
        "compression.gzip.level",
        Some("compression.gzip.level"),
        Kind::Int { min: -1, max: 9 },
        DefaultValue::Int(-1),
        "The gzip level of compression.type=gzip. Accepted and reported as by Kafka; kafkalite does not write gzip.",
    ),
    unapplied(
        "compression.lz4.level",
        Some("compression.lz4.level"),
        Kind::Int { min: 1, max: 17 },
        DefaultValue::Int(9),
        "The lz4 level of compression.type=lz4. Accepted and reported as by Kafka; kafkalite does not write lz4.",
    ),
    unapplied(
        "compression.zstd.level",
        Some("compression.zstd.level"),
        Kind::Int { min: -131_072, max: 22 },
        DefaultValue::Int(3),
        "The zstd level of compression.type=zstd. Accepted and reported as by Kafka; kafkalite writes zstd at its \
         default level.",
    ),
    unapplied(
        "file.delete.delay.ms",
        Some("log.segment.delete.delay.ms"),
        LONG,
        DefaultValue::Int(60_000),
        "How long Kafka waits before deleting a file from the file system. Accepted and reported as by Kafka; \
         kafkalite deletes segments at once (readers keep their open maps).",
    ),
    unapplied(
        "flush.messages",
        Some("log.flush.interval.messages"),
        Kind::Int { min: 1, max: i64::MAX },
        DefaultValue::Int(i64::MAX),
        "Force an fsync after this many records. Accepted and reported as by Kafka; kafkalite's writers choose \
         their durability (durable_acks, acks='all').",
    ),
    unapplied(
        "flush.ms",
        Some("log.flush.interval.ms"),
        LONG,
        DefaultValue::Int(i64::MAX),
        "Force an fsync after this long. Accepted and reported as by Kafka; kafkalite's writers choose their \
         durability (durable_acks, acks='all').",
    ),
    unapplied(
        "follower.replication.throttled.replicas",
        None,
        Kind::Text,
        DefaultValue::Str(""),
        "Replicas whose replication is throttled on the follower side. Accepted and reported as by Kafka; \
         kafkalite has no replicas.",
    ),
    unapplied(
        "index.interval.bytes",
        Some("log.index.interval.bytes"),
        Kind::Int { min: 0, max: I32_MAX },
        DefaultValue::Int(4096),
        "How often an offset index entry is added. Accepted and reported as by Kafka; kafkalite indexes every \
         4096 bytes.",
    ),
    unapplied(
        "leader.replication.throttled.replicas",
        None,
        Kind::Text,
        DefaultValue::Str(""),
        "Replicas whose replication is throttled on the leader side. Accepted and reported as by Kafka; \
         kafkalite has no replicas.",
    ),
    unapplied(
        "local.retention.bytes",
        Some("log.local.retention.bytes"),
        Kind::Int { min: -2, max: i64::MAX },
        DefaultValue::Int(-2),
        "Tiered storage: local bytes kept once segments are in remote storage. Accepted and reported as by \
         Kafka; kafkalite has no remote storage.",
    ),
    unapplied(
        "local.retention.ms",
        Some("log.local.retention.ms"),
        Kind::Int { min: -2, max: i64::MAX },
        DefaultValue::Int(-2),
        "Tiered storage: how long local segments are kept once in remote storage. Accepted and reported as by \
         Kafka; kafkalite has no remote storage.",
    ),
    unapplied(
        "max.compaction.lag.ms",
        Some("log.cleaner.max.compaction.lag.ms"),
        Kind::Int { min: 1, max: i64::MAX },
        DefaultValue::Int(i64::MAX),
        "The longest a record may stay uncompacted. Accepted and reported as by Kafka; kafkalite compacts by \
         min.cleanable.dirty.ratio.",
    ),
    unapplied(
        "message.timestamp.after.max.ms",
        Some("log.message.timestamp.after.max.ms"),
        LONG,
        DefaultValue::Int(3_600_000),
        "How far in the future a CreateTime timestamp may be. Accepted and reported as by Kafka; kafkalite does \
         not refuse records by their timestamp.",
    ),
    unapplied(
        "message.timestamp.before.max.ms",
        Some("log.message.timestamp.before.max.ms"),
        LONG,
        DefaultValue::Int(i64::MAX),
        "How far in the past a CreateTime timestamp may be. Accepted and reported as by Kafka; kafkalite does \
         not refuse records by their timestamp.",
    ),
    unapplied(
        "min.insync.replicas",
        Some("min.insync.replicas"),
        Kind::Int { min: 1, max: I32_MAX },
        DefaultValue::Int(1),
        "Replicas that must have a write for acks=all. Accepted and reported as by Kafka; kafkalite is one \
         replica.",
    ),
    unapplied(
        "preallocate",
        Some("log.preallocate"),
        Kind::Bool,
        DefaultValue::Bool(false),
        "Preallocate segment files. Accepted and reported as by Kafka; kafkalite preallocates within \
         log.preallocate.budget.bytes.",
    ),
    unapplied(
        "remote.copy.lag.bytes",
        None,
        Kind::Int { min: -1, max: i64::MAX },
        DefaultValue::Int(0),
        "Tiered storage: bytes a segment waits before it is copied. Accepted and reported as by Kafka; kafkalite \
         has no remote storage.",
    ),
    unapplied(
        "remote.copy.lag.ms",
        None,
        Kind::Int { min: -1, max: i64::MAX },
        DefaultValue::Int(0),
        "Tiered storage: how long a segment waits before it is copied. Accepted and reported as by Kafka; \
         kafkalite has no remote storage.",
    ),
    unapplied(
        "remote.log.copy.disable",
        None,
        Kind::Bool,
        DefaultValue::Bool(false),
        "Tiered storage: stop copying segments. Accepted and reported as by Kafka; kafkalite has no remote \
         storage.",
    ),
    unapplied(
        "remote.log.delete.on.disable",
        None,
        Kind::Bool,
        DefaultValue::Bool(false),
        "Tiered storage: delete remote data when it is disabled. Accepted and reported as by Kafka; kafkalite \
         has no remote storage.",
    ),
    unapplied(
        "remote.storage.enable",
        None,
        Kind::Bool,
        DefaultValue::Bool(false),
        "Tiered storage for the topic. Accepted and reported as by Kafka; kafkalite has no remote storage.",
    ),
    unapplied(
        "segment.index.bytes",
        Some("log.index.size.max.bytes"),
        Kind::Int { min: 4, max: I32_MAX },
        DefaultValue::Int(10_485_760),
        "The size of a segment's index files. Accepted and reported as by Kafka; kafkalite sizes its indexes \
         itself.",
    ),
    unapplied(
        "segment.jitter.ms",
        Some("log.roll.jitter.ms"),
        LONG,
        DefaultValue::Int(0),
        "A random jitter subtracted from segment.ms. Accepted and reported as by Kafka; kafkalite rolls at \
         segment.ms.",
    ),
    unapplied(
        "unclean.leader.election.enable",
        Some("unclean.leader.election.enable"),
        Kind::Bool,
        DefaultValue::Bool(false),
        "Let an out-of-sync replica become leader. Accepted and reported as by Kafka; kafkalite has no replicas.",
    ),
];

/// The data directory's own config (a broker's `server.properties` keys that are not topic
/// defaults). The topic defaults are set under each `TOPIC_CONFIGS` entry's `broker_name`.
pub static DIR_CONFIGS: &[ConfigDef] = &[
    ConfigDef {
        name: "auto.create.topics.enable",
        broker_name: None,
        kind: Kind::Bool,
        default: DefaultValue::Bool(true),
        doc: "A producer's first write to an unknown topic creates it (with num.partitions partitions).",
        applied: true,
    },
    ConfigDef {
        name: "num.partitions",
        broker_name: None,
        kind: Kind::Int { min: 1, max: MAX_PARTITIONS },
        default: DefaultValue::Int(1),
        doc: "The partitions of an auto-created topic.",
        applied: true,
    },
    ConfigDef {
        name: "log.preallocate.budget.bytes",
        broker_name: None,
        kind: Kind::Int { min: 0, max: i64::MAX },
        default: DefaultValue::Int(crate::storage::prealloc::DEFAULT_BUDGET_BYTES as i64),
        doc: "kafkalite's own (a Kafka broker has only the switch log.preallocate): the most bytes one process \
              keeps reserved on disk ahead of its writers, over all partitions of the data directory. When it is \
              spent, a segment grows by what each append needs.",
        applied: true,
    },
];

pub fn topic_def(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}
