//! Topic and data-directory config, defined once (as Kafka's `LogConfig.define` and
//! `ServerTopicConfigSynonyms`): every key kafkalite accepts with its type, default, bounds and
//! doc. Validation (Python's `Admin`, the wire-protocol server's CreateTopics and
//! `kafkalite config`), defaults, the generated reference page and the `LogConfig` a topic's
//! partitions are opened with all derive from these tables; Python reads them through
//! `_native.topic_config_defs()` instead of keeping a copy.
//!
//! Values are `serde_json::Value`s, as the metadata file stores them: integers as numbers,
//! Kafka's config strings ("1000") accepted on input and normalised.

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::options::LogConfig;
use crate::record::{Compression, TimestampType};

/// Kafka's `max.message.bytes` default: 1 MiB of records plus a batch's overhead.
pub const MAX_MESSAGE_BYTES: i64 = 1_048_588;
/// Kafka's `segment.bytes` default (1 GiB).
pub const SEGMENT_BYTES: i64 = 1 << 30;
/// The most partitions a topic may have. Each partition is a folder and, while written, a few
/// open files; this bound keeps a typo (partitions=10**9) from filling the disk with folders.
pub const MAX_PARTITIONS: i64 = 100_000;
/// Codecs kafkalite reads (a Kafka broker's files) but does not write (the codec's own list).
pub use crate::record::compression::READ_ONLY_CODECS;

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
        Kind::Choice(&["producer", "none", "uncompressed", "zstd"]),
        DefaultValue::Str("producer"),
        "The codec batches are written with: 'producer' keeps the writer's own compression_type; \
         'none'/'uncompressed' or 'zstd' force one. gzip, snappy and lz4 are read but not written.",
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
        default: DefaultValue::Int(crate::prealloc::DEFAULT_BUDGET_BYTES as i64),
        doc: "kafkalite's own (a Kafka broker has only the switch log.preallocate): the most bytes one process \
              keeps reserved on disk ahead of its writers, over all partitions of the data directory. When it is \
              spent, a segment grows by what each append needs.",
        applied: true,
    },
];

pub fn topic_def(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// A value as Python's `repr` shows it, so messages read the same from every route.
fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("'{s}'"),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Null => "None".into(),
        other => other.to_string(),
    }
}

impl ConfigDef {
    /// Check one value and return it normalised (integers as numbers, policies sorted).
    pub fn validate(&self, value: &Value) -> Result<Value> {
        let key = self.name;
        match self.kind {
            Kind::Int { min, max } => {
                let number = match value {
                    Value::Number(n) => n
                        .as_i64()
                        .map(i128::from)
                        .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e30).map(|f| f as i128)),
                    Value::String(s) => s.trim().parse::<i128>().ok(),
                    _ => None,
                };
                let n =
                    number.ok_or_else(|| Error::config(format!("{key} must be an integer, not {}", show(value))))?;
                if n < min as i128 {
                    return Err(Error::config(format!("{key} must be >= {min}, got {n}")));
                }
                if n > max as i128 {
                    return Err(Error::config(format!("{key} must be at most {max}, got {n}")));
                }
                Ok(json!(n as i64))
            }
            Kind::Ratio => {
                let ratio = match value {
                    Value::Number(n) => n.as_f64(),
                    Value::String(s) => s.trim().parse::<f64>().ok(),
                    _ => None,
                };
                match ratio {
                    Some(r) if (0.0..=1.0).contains(&r) => Ok(json!(r)),
                    Some(r) if r.is_finite() => Err(Error::config(format!("{key} must be between 0 and 1, got {r}"))),
                    _ => Err(Error::config(format!("{key} must be a number between 0 and 1, not {}", show(value)))),
                }
            }
            Kind::Choice(choices) => {
                let text = value.as_str().unwrap_or_default();
                if key == "compression.type" && READ_ONLY_CODECS.contains(&text) {
                    return Err(Error::config(format!(
                        "compression.type '{text}' is read but not written by kafkalite; use 'zstd', 'none' or 'producer'"
                    )));
                }
                if value.is_string() && choices.contains(&text) {
                    return Ok(value.clone());
                }
                Err(Error::config(format!("{key} must be one of {}; got {}", choices.join(", "), show(value))))
            }
            Kind::List(choices) => {
                let mut parts: Vec<String> = match value {
                    Value::String(s) => s.split(',').map(|p| p.trim().to_string()).collect(),
                    Value::Array(items) => {
                        items.iter().map(|p| p.as_str().map(str::trim).unwrap_or("").to_string()).collect()
                    }
                    _ => Vec::new(),
                };
                parts.sort_unstable();
                parts.dedup();
                if parts.is_empty() || parts.iter().any(|p| !choices.contains(&p.as_str())) {
                    return Err(Error::config(format!(
                        "{key} must be 'delete', 'compact' or 'compact,delete'; got {}",
                        show(value)
                    )));
                }
                Ok(json!(parts.join(",")))
            }
            Kind::Text => match value {
                Value::String(_) => Ok(value.clone()),
                _ => Err(Error::config(format!("{key} must be a string, not {}", show(value)))),
            },
            Kind::Bool => match value {
                Value::Bool(b) => Ok(json!(b)),
                Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(json!(true)),
                Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(json!(false)),
                _ => Err(Error::config(format!("{key} must be true or false, not {}", show(value)))),
            },
        }
    }
}

/// Check topic config (Kafka's topic names); return it normalised.
pub fn validate_topic_config(config: &Map<String, Value>) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    for (key, value) in config {
        let Some(def) = topic_def(key) else {
            let known: Vec<&str> = TOPIC_CONFIGS.iter().map(|d| d.name).collect();
            return Err(Error::config(format!(
                "unknown topic config '{key}'; kafkalite supports: {}",
                known.join(", ")
            )));
        };
        out.insert(key.clone(), def.validate(value)?);
    }
    Ok(out)
}

/// Log a WARNING for each config of `after` that kafkalite does not apply and that `before` did
/// not already have with the same value: the client that set it is told nothing changes here.
/// `what` names the topic (or the data directory) for the line.
pub fn warn_unapplied(what: &str, before: &Map<String, Value>, after: &Map<String, Value>) {
    for (key, value) in after {
        let def = topic_def(key).or_else(|| TOPIC_CONFIGS.iter().find(|d| d.broker_name == Some(key.as_str())));
        if def.is_some_and(|d| !d.applied) && before.get(key) != Some(value) {
            ::log::warn!(
                target: "kafkalite::engine",
                "{what}: {key}={} is stored and reported, but kafkalite does not apply it (see docs/configuration.md)",
                show(value)
            );
        }
    }
}

/// Check data-directory config (a broker's names: `DIR_CONFIGS` and each topic config's
/// `broker_name`); return it normalised.
pub fn validate_dir_config(config: &Map<String, Value>) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    for (key, value) in config {
        let checked = if let Some(def) = DIR_CONFIGS.iter().find(|d| d.name == key) {
            def.validate(value)?
        } else if let Some(def) = TOPIC_CONFIGS.iter().find(|d| d.broker_name == Some(key.as_str())) {
            def.validate(value).map_err(|e| match e {
                Error::InvalidConfig(msg) => Error::config(format!("{key} (the default of {}): {msg}", def.name)),
                other => other,
            })?
        } else {
            let hint = match topic_def(key).and_then(|d| d.broker_name) {
                Some(broker) => format!(" (the default of the topic config '{key}' is set as '{broker}')"),
                None => String::new(),
            };
            let mut known: Vec<&str> =
                DIR_CONFIGS.iter().map(|d| d.name).chain(TOPIC_CONFIGS.iter().filter_map(|d| d.broker_name)).collect();
            known.sort_unstable();
            return Err(Error::config(format!(
                "unknown data directory config '{key}'{hint}; kafkalite supports: {}",
                known.join(", ")
            )));
        };
        out.insert(key.clone(), checked);
    }
    Ok(out)
}

/// The data directory's settings with its defaults filled in (`DIR_CONFIGS` and what was set).
pub fn dir_settings(dir_config: &Map<String, Value>) -> Map<String, Value> {
    let mut out: Map<String, Value> = DIR_CONFIGS.iter().map(|d| (d.name.to_string(), d.default.to_value())).collect();
    for (k, v) in dir_config {
        out.insert(k.clone(), v.clone());
    }
    out
}

/// A topic's full config: its own settings, else the data directory's defaults (set under the
/// broker's names), else Kafka's. Every reader of topic config goes through here.
pub fn effective_config(dir_config: &Map<String, Value>, topic_config: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for def in TOPIC_CONFIGS {
        let dir_value = def.broker_name.and_then(|b| dir_config.get(b));
        let value = topic_config.get(def.name).or(dir_value).cloned().unwrap_or_else(|| def.default.to_value());
        out.insert(def.name.to_string(), value);
    }
    out
}

/// The codec a batch is written with (Kafka's `BrokerCompressionType.targetCompression`): the
/// topic's `compression.type`, or the writer's own when the topic says `producer`.
pub fn target_compression(topic_codec: &str, producer: Compression) -> Compression {
    match topic_codec {
        "producer" => producer,
        "zstd" => Compression::Zstd,
        _ => Compression::None,
    }
}

fn int_of(config: &Map<String, Value>, key: &str) -> Result<i64> {
    let value = config.get(key).cloned().unwrap_or(Value::Null);
    let def = topic_def(key).expect("a key of TOPIC_CONFIGS");
    // Stored values were validated when written; a hand-edited file still gets a clear error.
    def.validate(&value)?.as_i64().ok_or_else(|| Error::config(format!("{key} must be an integer")))
}

/// The `LogConfig` a topic's partitions are opened with, for a writer whose own codec is
/// `producer`: the one resolution every write path uses (Python's Log/Producer/Admin through
/// `_native.topic_log_options`, the wire-protocol server's produce path). Time and size
/// retention apply only when `cleanup.policy` includes `delete`; -1 means no limit.
pub fn resolve(
    dir_config: &Map<String, Value>,
    topic_config: &Map<String, Value>,
    producer: Compression,
) -> Result<LogConfig> {
    let c = effective_config(dir_config, topic_config);
    let policy = topic_def("cleanup.policy").expect("cleanup.policy").validate(&c["cleanup.policy"])?;
    let policy = policy.as_str().unwrap_or_default();
    let deletes = policy.split(',').any(|p| p == "delete");
    let limit = |n: i64| (deletes && n >= 0).then_some(n);
    let codec = topic_def("compression.type").expect("compression.type").validate(&c["compression.type"])?;
    let stamps = topic_def("message.timestamp.type").expect("timestamp").validate(&c["message.timestamp.type"])?;
    Ok(LogConfig {
        segment_bytes: int_of(&c, "segment.bytes")? as u64,
        segment_ms: Some(int_of(&c, "segment.ms")?),
        retention_ms: limit(int_of(&c, "retention.ms")?),
        retention_bytes: limit(int_of(&c, "retention.bytes")?).map(|n| n as u64),
        max_message_bytes: int_of(&c, "max.message.bytes")? as usize,
        timestamp_type: TimestampType::parse(stamps.as_str().unwrap_or_default())?,
        compression: target_compression(codec.as_str().unwrap_or_default(), producer),
        compact: policy.split(',').any(|p| p == "compact"),
        ..LogConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn resolution_order_is_topic_then_directory_then_kafka() {
        let dir = map(json!({"log.retention.ms": 5000, "compression.type": "zstd"}));
        let config = resolve(&dir, &Map::new(), Compression::None).unwrap();
        assert_eq!(config.retention_ms, Some(5000));
        assert_eq!(config.compression, Compression::Zstd);
        let own = resolve(&dir, &map(json!({"retention.ms": -1})), Compression::None).unwrap();
        assert_eq!(own.retention_ms, None);
        let kafka = resolve(&Map::new(), &Map::new(), Compression::Zstd).unwrap();
        assert_eq!(kafka.retention_ms, Some(604_800_000));
        assert_eq!(kafka.compression, Compression::Zstd, "compression.type=producer keeps the writer's codec");
        assert_eq!(kafka.max_message_bytes, MAX_MESSAGE_BYTES as usize);
    }

    #[test]
    fn compact_only_topics_have_no_retention() {
        let config = resolve(&Map::new(), &map(json!({"cleanup.policy": "compact"})), Compression::None).unwrap();
        assert!(config.compact);
        assert_eq!(config.retention_ms, None);
    }

    #[test]
    fn values_are_checked_and_normalised() {
        let ok = validate_topic_config(&map(json!({"retention.ms": "1000", "cleanup.policy": "delete, compact"})));
        assert_eq!(ok.unwrap(), map(json!({"retention.ms": 1000, "cleanup.policy": "compact,delete"})));
        for bad in [json!({"retention.ms": -2}), json!({"compression.type": "lz4"}), json!({"x": 1})] {
            assert!(validate_topic_config(&map(bad)).is_err());
        }
        let err = validate_dir_config(&map(json!({"log.retention.ms": "soon"}))).unwrap_err();
        assert!(err.to_string().contains("log.retention.ms (the default of retention.ms)"), "{err}");
    }
}
