//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics (their own config over
//! the data directory's defaults over Kafka's) and for the one broker, "0" or "" (the data
//! directory's config under a broker's names, as `kafkalite config` shows it). Every topic config
//! of Kafka 4.x is accepted; those kafkalite does not apply are stored, reported and warned about. The config tables, their
//! checks and the resolution order are the engine's `topic_config`; the stores are `DataDir`'s.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    incremental_alter_configs_response, AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::{Map, Value};

use crate::server::codes;
use crate::server::state::broker::Broker;
use crate::storage::error::Error;
use crate::storage::topic_config::{self, ConfigDef, Kind, DIR_CONFIGS, TOPIC_CONFIGS};

/// Kafka's ConfigResource.Type codes.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;

/// Kafka's DescribeConfigsResponse.ConfigSource codes.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const DYNAMIC_BROKER_CONFIG: i8 = 2;
const DYNAMIC_DEFAULT_BROKER_CONFIG: i8 = 3;
const DEFAULT_CONFIG: i8 = 5;

/// Kafka's AlterConfigOp.OpType codes.
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

use super::topics_admin::{topic_name, Failure};

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// A stored config value as Kafka's configs travel: a string.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Kafka's ConfigEntry.ConfigType code of a config.
fn config_type(def: &ConfigDef) -> i8 {
    match def.kind {
        Kind::Bool => 1,
        Kind::Choice(_) => 2,
        Kind::Int { max, .. } if max <= i32::MAX as i64 => 3,
        Kind::Int { .. } => 5,
        Kind::Ratio => 6,
        Kind::List(_) | Kind::Text => 7,
    }
}

fn engine_failure(e: Error) -> Failure {
    let code = match &e {
        Error::InvalidConfig(_) => codes::INVALID_CONFIG,
        Error::UnknownTopicOrPartition(_) => codes::UNKNOWN_TOPIC_OR_PARTITION,
        other => codes::for_error(other),
    };
    (code, e.to_string())
}

/// The broker resource names kafkalite answers: its node id, and "" (the cluster-wide default).
fn check_broker(name: &str) -> Result<(), Failure> {
    if name.is_empty() || name == super::metadata::NODE_ID.to_string() {
        return Ok(());
    }
    Err((
        codes::INVALID_REQUEST,
        format!("kafkalite is one broker with id {}; there is no broker {name:?}", super::metadata::NODE_ID),
    ))
}

fn unsupported_resource(kind: i8) -> Failure {
    (
        codes::INVALID_REQUEST,
        format!("kafkalite has configs for topics (resource type 2) and broker 0 (type 4), not resource type {kind}"),
    )
}

/// One described config: (def, value, source, synonyms as (name, value, source)).
struct Entry {
    def: &'static ConfigDef,
    name: &'static str,
    value: Value,
    source: i8,
    synonyms: Vec<(&'static str, Value, i8)>,
}

fn topic_entries(broker: &Broker, name: &str) -> Result<Vec<Entry>, Failure> {
    topic_name(name)?;
    let topics = broker.topics().map_err(engine_failure)?;
    let meta =
        topics.get(name).ok_or_else(|| (codes::UNKNOWN_TOPIC_OR_PARTITION, format!("unknown topic {name:?}")))?;
    let dir = broker.dir.dir_config().map_err(engine_failure)?;
    Ok(described_topic(&dir, &meta.config))
}

/// Every topic config of a topic with its own `config` in a data directory with `dir` config.
fn described_topic(dir: &Map<String, Value>, config: &Map<String, Value>) -> Vec<Entry> {
    let effective = topic_config::effective_config(dir, config);
    TOPIC_CONFIGS
        .iter()
        .map(|def| {
            let mut synonyms = Vec::new();
            if let Some(own) = config.get(def.name) {
                synonyms.push((def.name, own.clone(), DYNAMIC_TOPIC_CONFIG));
            }
            let broker_name = def.broker_name.unwrap_or(def.name);
            if let Some(set) = dir.get(broker_name) {
                synonyms.push((broker_name, set.clone(), DYNAMIC_DEFAULT_BROKER_CONFIG));
            }
            synonyms.push((broker_name, def.default.to_value(), DEFAULT_CONFIG));
            Entry { def, name: def.name, value: effective[def.name].clone(), source: synonyms[0].2, synonyms }
        })
        .collect()
}

/// CreateTopics v5+ reports the new topic's configs: (name, value, source).
pub fn created_topic_configs(broker: &Broker, config: &Map<String, Value>) -> Vec<(String, String, i8)> {
    let dir = broker.dir.dir_config().unwrap_or_default();
    described_topic(&dir, config).into_iter().map(|e| (e.name.to_string(), text(&e.value), e.source)).collect()
}

/// Broker configs: the data directory's, reached by broker "0" and by "" (the cluster-wide
/// default) alike. A value set there is reported as Kafka reports a value set for the resource
/// asked about (DYNAMIC_BROKER_CONFIG for "0", DYNAMIC_DEFAULT_BROKER_CONFIG for ""), which is
/// what `kafka-configs --entity-name 0` and `--entity-default` show and let `--delete-config` remove.
fn broker_entries(broker: &Broker, name: &str) -> Result<Vec<Entry>, Failure> {
    check_broker(name)?;
    let dynamic = if name.is_empty() { DYNAMIC_DEFAULT_BROKER_CONFIG } else { DYNAMIC_BROKER_CONFIG };
    let dir = broker.dir.dir_config().map_err(engine_failure)?;
    let defs =
        DIR_CONFIGS.iter().map(|d| (d, d.name)).chain(TOPIC_CONFIGS.iter().filter_map(|d| Some((d, d.broker_name?))));
    Ok(defs
        .map(|(def, key)| {
            let mut synonyms = Vec::new();
            if let Some(set) = dir.get(key) {
                synonyms.push((key, set.clone(), dynamic));
            }
            synonyms.push((key, def.default.to_value(), DEFAULT_CONFIG));
            Entry { def, name: key, value: synonyms[0].1.clone(), source: synonyms[0].2, synonyms }
        })
        .collect())
}

pub fn describe_configs(
    broker: &Broker,
    request: DescribeConfigsRequest,
    version: i16,
    peer: &str,
) -> DescribeConfigsResponse {
    let results = request
        .resources
        .into_iter()
        .map(|r| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let entries = match r.resource_type {
                TOPIC => topic_entries(broker, &r.resource_name),
                BROKER => broker_entries(broker, &r.resource_name),
                other => Err(unsupported_resource(other)),
            };
            let entries = match entries {
                Ok(e) => e,
                Err((code, message)) => {
                    let code = codes::refused(peer, "DescribeConfigs", code, &message);
                    return result.with_error_code(code).with_error_message(Some(s(message)));
                }
            };
            let wanted =
                |name: &str| r.configuration_keys.as_ref().is_none_or(|keys| keys.iter().any(|k| k.as_str() == name));
            let configs = entries
                .into_iter()
                .filter(|e| wanted(e.name))
                .map(|e| {
                    let mut c = DescribeConfigsResourceResult::default()
                        .with_name(s(e.name))
                        .with_value(Some(s(text(&e.value))))
                        .with_config_source(e.source);
                    if request.include_synonyms {
                        c = c.with_synonyms(
                            e.synonyms
                                .iter()
                                .map(|(n, v, src)| {
                                    DescribeConfigsSynonym::default()
                                        .with_name(s(*n))
                                        .with_value(Some(s(text(v))))
                                        .with_source(*src)
                                })
                                .collect(),
                        );
                    }
                    if version >= 3 {
                        c = c.with_config_type(config_type(e.def));
                        if request.include_documentation {
                            c = c.with_documentation(Some(s(e.def.doc)));
                        }
                    }
                    c
                })
                .collect();
            result.with_configs(configs)
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

/// The definition of `key` for a resource type (topic names, or a broker's names).
fn def_for(resource_type: i8, key: &str) -> Option<&'static ConfigDef> {
    match resource_type {
        TOPIC => topic_config::topic_def(key),
        _ => DIR_CONFIGS
            .iter()
            .find(|d| d.name == key)
            .or_else(|| TOPIC_CONFIGS.iter().find(|d| d.broker_name == Some(key))),
    }
}

/// Apply `change` (current config -> new config) to a topic's or the broker's config; the
/// engine checks the result and stores it unless `validate_only`.
fn alter(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    validate_only: bool,
    change: impl FnOnce(&Map<String, Value>) -> Result<Map<String, Value>, Error>,
) -> Result<(), Failure> {
    let result = match resource_type {
        TOPIC => {
            topic_name(name)?;
            if broker.topics().map_err(engine_failure)?.get(name).is_some_and(|m| m.discovered) {
                return Err(super::topics_admin::read_only(name));
            }
            broker.dir.alter_topic_config(name, validate_only, change)
        }
        BROKER => {
            check_broker(name)?;
            broker.dir.alter_dir_config(validate_only, change)
        }
        other => return Err(unsupported_resource(other)),
    };
    broker.topics_changed();
    result.map_err(engine_failure)
}

/// The error code and message a resource's outcome is answered with (a refusal is logged).
fn error_of(outcome: Result<(), Failure>, api: &str, peer: &str) -> (i16, Option<StrBytes>) {
    match outcome {
        Ok(()) => (codes::NONE, None),
        Err((code, message)) => (codes::refused(peer, api, code, &message), Some(s(message))),
    }
}

/// AlterConfigs (the legacy API): the given configs replace the resource's own config.
pub fn alter_configs(broker: &Broker, request: AlterConfigsRequest, peer: &str) -> AlterConfigsResponse {
    let responses = request
        .resources
        .into_iter()
        .map(|r| {
            let replacement: Map<String, Value> = r
                .configs
                .iter()
                .filter_map(|c| Some((c.name.to_string(), Value::String(c.value.as_ref()?.to_string()))))
                .collect();
            let outcome = alter(broker, r.resource_type, &r.resource_name, request.validate_only, |_| Ok(replacement));
            let (code, message) = error_of(outcome, "AlterConfigs", peer);
            kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
                .with_error_code(code)
                .with_error_message(message)
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}

/// One IncrementalAlterConfigs operation on `config` (Kafka's ConfigAdminManager rules: APPEND
/// and SUBTRACT only for list configs; DELETE restores the default).
fn apply_op(
    config: &mut Map<String, Value>,
    effective: &dyn Fn(&str) -> Option<Value>,
    resource_type: i8,
    key: &str,
    op: i8,
    value: Option<&str>,
) -> Result<(), Error> {
    let unknown = || {
        let what = if resource_type == TOPIC { "topic" } else { "data directory" };
        Error::config(format!("unknown {what} config '{key}'"))
    };
    match op {
        // An unknown key or a bad value is reported by the engine's check of the result.
        SET => {
            let value = value.ok_or_else(|| Error::config(format!("SET of '{key}' needs a value")))?;
            config.insert(key.to_string(), Value::String(value.to_string()));
        }
        DELETE => {
            def_for(resource_type, key).ok_or_else(unknown)?;
            config.remove(key);
        }
        APPEND | SUBTRACT if !matches!(def_for(resource_type, key).ok_or_else(unknown)?.kind, Kind::List(_)) => {
            let verb = if op == APPEND { "append" } else { "subtract" };
            return Err(Error::config(format!("Config value {verb} is not allowed for config key: {key}")));
        }
        APPEND | SUBTRACT => {
            let current = config.get(key).cloned().or_else(|| effective(key)).unwrap_or_default();
            let mut items: Vec<String> =
                text(&current).split(',').map(str::trim).filter(|p| !p.is_empty()).map(str::to_string).collect();
            let given = value.unwrap_or_default().split(',').map(str::trim).filter(|p| !p.is_empty());
            for item in given {
                if op == APPEND && !items.iter().any(|i| i == item) {
                    items.push(item.to_string());
                } else if op == SUBTRACT {
                    items.retain(|i| i != item);
                }
            }
            config.insert(key.to_string(), Value::String(items.join(",")));
        }
        other => return Err(Error::config(format!("unknown config operation {other} for '{key}'"))),
    }
    Ok(())
}

pub fn incremental_alter_configs(
    broker: &Broker,
    request: IncrementalAlterConfigsRequest,
    peer: &str,
) -> IncrementalAlterConfigsResponse {
    let responses = request
        .resources
        .into_iter()
        .map(|r| {
            let mut seen = std::collections::BTreeSet::new();
            let duplicate = r.configs.iter().find(|c| !seen.insert(c.name.as_str())).map(|c| c.name.to_string());
            let outcome = match duplicate {
                Some(key) => Err((codes::INVALID_REQUEST, format!("config '{key}' appears more than once"))),
                None => {
                    let ops: Vec<(String, i8, Option<String>)> = r
                        .configs
                        .iter()
                        .map(|c| (c.name.to_string(), c.config_operation, c.value.as_ref().map(|v| v.to_string())))
                        .collect();
                    let kind = r.resource_type;
                    let effective = effective_values(broker, kind, &r.resource_name);
                    alter(broker, kind, &r.resource_name, request.validate_only, |current| {
                        let mut config = current.clone();
                        let lookup = |key: &str| effective.get(key).cloned();
                        for (key, op, value) in &ops {
                            apply_op(&mut config, &lookup, kind, key, *op, value.as_deref())?;
                        }
                        Ok(config)
                    })
                }
            };
            let (code, message) = error_of(outcome, "IncrementalAlterConfigs", peer);
            incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
                .with_error_code(code)
                .with_error_message(message)
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// The values a resource's configs have now (defaults included), for APPEND/SUBTRACT.
fn effective_values(broker: &Broker, resource_type: i8, name: &str) -> Map<String, Value> {
    let entries = match resource_type {
        TOPIC => topic_entries(broker, name),
        _ => broker_entries(broker, name),
    };
    entries.map(|e| e.into_iter().map(|e| (e.name.to_string(), e.value)).collect()).unwrap_or_default()
}
