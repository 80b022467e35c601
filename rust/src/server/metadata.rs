//! Metadata (one broker, node 0, leader of every partition) with auto topic creation, and
//! CreateTopics. Topics are created through `DataDir`, exactly as the Python `Admin` does.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, CreateTopicsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::broker::Broker;
use super::cluster::cluster_id;
use super::codes;
use super::offsets::OFFSETS_TOPIC;
use crate::datadir::{validate_topic_name, TopicMeta};
use crate::error::Error;

pub const NODE_ID: i32 = 0;

fn topic_entry(name: &str, meta: &TopicMeta, version: i16) -> MetadataResponseTopic {
    let partitions = (0..meta.partitions)
        .map(|p| {
            let mut part = MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(BrokerId(NODE_ID))
                .with_replica_nodes(vec![BrokerId(NODE_ID)])
                .with_isr_nodes(vec![BrokerId(NODE_ID)]);
            if version >= 7 {
                // No leader epochs: clients skip OffsetForLeaderEpoch validation.
                part = part.with_leader_epoch(-1);
            }
            part
        })
        .collect();
    let mut topic = MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))))
        .with_partitions(partitions);
    if version >= 1 {
        topic = topic.with_is_internal(name == OFFSETS_TOPIC);
    }
    topic
}

fn topic_error(name: Option<&str>, code: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(name.map(|n| TopicName(StrBytes::from_string(n.to_string()))))
        .with_error_code(code)
}

/// Create `name` with the broker's defaults for auto-creation; the error code on failure.
fn auto_create(broker: &Broker, name: &str) -> Result<(), i16> {
    if validate_topic_name(name).is_err() || name.starts_with("__") {
        return Err(codes::INVALID_TOPIC_EXCEPTION);
    }
    match broker.dir.create_topic(name, broker.default_partitions(), &BTreeMap::new()) {
        Ok(_) => {
            broker.topics_changed();
            Ok(())
        }
        Err(_) => Err(codes::UNKNOWN_TOPIC_OR_PARTITION),
    }
}

pub fn metadata(broker: &Broker, request: MetadataRequest, version: i16) -> MetadataResponse {
    let (host, port) = broker.advertised();
    let mut response = MetadataResponse::default().with_brokers(vec![MetadataResponseBroker::default()
        .with_node_id(BrokerId(NODE_ID))
        .with_host(StrBytes::from_string(host))
        .with_port(port)]);
    if version >= 1 {
        response = response.with_controller_id(BrokerId(NODE_ID));
    }
    if version >= 2 {
        response = response.with_cluster_id(Some(StrBytes::from_string(cluster_id(broker.dir.path()))));
    }
    let mut topics = match broker.topics() {
        Ok(t) => t,
        Err(_) => return response, // unreadable metadata: no topics, clients retry
    };
    // v0: an empty list means every topic; v1+: null does.
    let wanted = match request.topics {
        None => None,
        Some(t) if t.is_empty() && version == 0 => None,
        Some(t) => Some(t),
    };
    let allow_create = (version < 4 || request.allow_auto_topic_creation) && broker.auto_create_topics();
    let entries = match wanted {
        None => topics.iter().map(|(name, meta)| topic_entry(name, meta, version)).collect(),
        Some(wanted) => {
            let mut out = Vec::with_capacity(wanted.len().min(1024));
            for t in wanted {
                let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
                    out.push(topic_error(None, codes::UNKNOWN_TOPIC_ID));
                    continue;
                };
                if !topics.contains_key(&name) && allow_create {
                    if let Err(code) = auto_create(broker, &name) {
                        out.push(topic_error(Some(&name), code));
                        continue;
                    }
                    topics = broker.topics().unwrap_or(topics);
                }
                match topics.get(&name) {
                    Some(meta) => out.push(topic_entry(&name, meta, version)),
                    None if validate_topic_name(&name).is_err() => {
                        out.push(topic_error(Some(&name), codes::INVALID_TOPIC_EXCEPTION))
                    }
                    None => out.push(topic_error(Some(&name), codes::UNKNOWN_TOPIC_OR_PARTITION)),
                }
            }
            out
        }
    };
    response.with_topics(entries)
}

pub fn create_topics(broker: &Broker, request: CreateTopicsRequest, version: i16, peer: &str) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(request.topics.len().min(1024));
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let partitions = if topic.num_partitions == -1 { broker.default_partitions() } else { topic.num_partitions };
        let configs: BTreeMap<String, String> =
            topic.configs.iter().filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string()))).collect();
        let checked = crate::datadir::validate_config(&configs);
        let exists = broker.topics().map(|t| t.contains_key(&name)).unwrap_or(false);
        let outcome: Result<(), (i16, String)> = if validate_topic_name(&name).is_err() {
            Err((codes::INVALID_TOPIC_EXCEPTION, validate_topic_name(&name).unwrap_err().to_string()))
        } else if let Err(refusal) = super::topics_admin::creatable(&name) {
            Err(refusal)
        } else if exists {
            Err((codes::TOPIC_ALREADY_EXISTS, format!("topic {name:?} already exists")))
        } else if !(topic.replication_factor == -1 || topic.replication_factor == 1) {
            Err((
                codes::INVALID_REPLICATION_FACTOR,
                format!("replication factor {} is larger than the 1 available broker", topic.replication_factor),
            ))
        } else if !topic.assignments.is_empty() {
            Err((codes::INVALID_REPLICA_ASSIGNMENT, "kafkalite has one broker; send no replica assignment".into()))
        } else if !(1..=crate::datadir::MAX_PARTITIONS).contains(&partitions) {
            Err((
                codes::INVALID_PARTITIONS,
                format!(
                    "number of partitions must be between 1 and {}, got {partitions}",
                    crate::datadir::MAX_PARTITIONS
                ),
            ))
        } else if let Err(e) = checked.as_ref() {
            Err((codes::INVALID_CONFIG, e.to_string()))
        } else if request.validate_only {
            Ok(())
        } else {
            match broker.dir.create_topic(&name, partitions, &configs) {
                Ok(true) => {
                    broker.topics_changed();
                    Ok(())
                }
                Ok(false) => Err((codes::TOPIC_ALREADY_EXISTS, format!("topic {name:?} already exists"))),
                Err(e @ Error::InvalidConfig(_)) => Err((codes::INVALID_TOPIC_EXCEPTION, e.to_string())),
                Err(e) => Err((codes::UNKNOWN_SERVER_ERROR, e.to_string())),
            }
        };
        let mut result = CreatableTopicResult::default().with_name(topic.name.clone());
        match outcome {
            Ok(()) => {
                if version >= 5 {
                    let own = checked.as_ref().cloned().unwrap_or_default();
                    let configs = super::configs::created_topic_configs(broker, &own)
                        .into_iter()
                        .map(|(name, value, source)| {
                            CreatableTopicConfigs::default()
                                .with_name(StrBytes::from_string(name))
                                .with_value(Some(StrBytes::from_string(value)))
                                .with_config_source(source)
                        })
                        .collect();
                    result =
                        result.with_num_partitions(partitions).with_replication_factor(1).with_configs(Some(configs));
                }
            }
            Err((code, message)) => {
                result = result.with_error_code(codes::refused(peer, "CreateTopics", code, &message));
                if version >= 1 {
                    result = result.with_error_message(Some(StrBytes::from_string(message)));
                }
            }
        }
        results.push(result);
    }
    CreateTopicsResponse::default().with_topics(results)
}
