//! Topic and data-directory config, defined once (as Kafka's `LogConfig.define` and
//! `ServerTopicConfigSynonyms`): every key kafkalite accepts with its type, default, bounds and
//! doc. Validation (Python's `Admin`, the wire-protocol server's CreateTopics and
//! `kafkalite config`), defaults, the generated reference page and the `LogConfig` a topic's
//! partitions are opened with all derive from these tables; Python reads them through
//! `_native.topic_config_defs()` instead of keeping a copy.
//!
//! Values are `serde_json::Value`s, as the metadata file stores them: integers as numbers,
//! Kafka's config strings ("1000") accepted on input and normalised.
//!
//! The tables themselves are `topic_config/defs.rs`; this file validates, normalises and
//! resolves values against them.

use serde_json::{json, Map, Value};

use crate::storage::error::{Error, Result};
use crate::storage::options::LogConfig;
use crate::storage::record::{Compression, TimestampType};

mod defs;

pub use defs::{
    topic_def, ConfigDef, DefaultValue, Kind, DIR_CONFIGS, MAX_MESSAGE_BYTES, MAX_PARTITIONS, SEGMENT_BYTES,
    TOPIC_CONFIGS,
};

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
        // Validated against TOPIC_CODEC_CHOICES before it gets here.
        _ => Compression::parse(topic_codec).unwrap_or(Compression::None),
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
        for bad in [json!({"retention.ms": -2}), json!({"compression.type": "brotli"}), json!({"x": 1})] {
            assert!(validate_topic_config(&map(bad)).is_err());
        }
        let err = validate_dir_config(&map(json!({"log.retention.ms": "soon"}))).unwrap_err();
        assert!(err.to_string().contains("log.retention.ms (the default of retention.ms)"), "{err}");
    }
}
