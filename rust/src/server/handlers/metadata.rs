//! Metadata (one broker, node 0, leader of every partition) with auto topic creation, and
//! CreateTopics. Topics are created through `DataDir`, exactly as the Python `Admin` does, off
//! the request workers, one request's batch at a time, and under the controller mutation quota
//! when one is set (`topic_creation`): past it a topic is answered THROTTLING_QUOTA_EXCEEDED.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, CreateTopicsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::cluster::cluster_id;
use crate::server::codes;
use crate::server::state::broker::Broker;
use crate::server::state::offsets::OFFSETS_TOPIC;
use crate::server::state::topic_creation::Created;
use crate::server::state::waits;
use crate::storage::datadir::{validate_topic_name, TopicMeta};
use crate::storage::error::Error;

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
    if version >= 10 {
        // Consumer-protocol assignments name topics by id (`topic_ids`).
        topic = topic.with_topic_id(crate::server::state::topic_ids::of(name));
    }
    topic
}

fn topic_error(name: Option<&str>, code: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(name.map(|n| TopicName(StrBytes::from_string(n.to_string()))))
        .with_error_code(code)
}

/// Whether Metadata may auto-create `name` (Kafka refuses invalid and internal-looking names).
fn creatable(name: &str) -> bool {
    validate_topic_name(name).is_ok() && !name.starts_with("__")
}

/// Create the missing topics among `names` with the broker's defaults for auto-creation; the
/// error code of each that was not created, and the response's `throttle_time_ms`.
async fn auto_create(broker: &Arc<Broker>, names: BTreeSet<String>, peer: &str) -> (BTreeMap<String, i16>, i32) {
    let partitions = broker.default_partitions();
    let wanted = names.into_iter().map(|n| (n, partitions, BTreeMap::new())).collect();
    let (outcomes, throttle_ms) = broker.topic_creation.create(broker, wanted, true, waits::deadline(0)).await;
    let mut refused = BTreeMap::new();
    for (name, outcome) in outcomes {
        let code = match outcome {
            Created::Done | Created::Existed => continue,
            Created::Throttled { .. } => codes::THROTTLING_QUOTA_EXCEEDED,
            // Kafka's answer for a topic whose creation has not completed: the client retries.
            Created::Late => codes::LEADER_NOT_AVAILABLE,
            Created::Failed(_) => codes::UNKNOWN_TOPIC_OR_PARTITION,
        };
        refused.insert(name, code);
    }
    let throttled = refused.values().filter(|&&c| c == codes::THROTTLING_QUOTA_EXCEEDED).count();
    if throttled > 0 {
        log::warn!(
            target: crate::server::log_target::LOG_TARGET,
            "refused to auto-create {throttled} topic(s) for a Metadata request from {peer}: over the controller \
             mutation quota ({}); answered THROTTLING_QUOTA_EXCEEDED, retry after {throttle_ms} ms",
            broker.topic_creation.quota()
        );
    }
    (refused, throttle_ms)
}

pub async fn metadata(broker: &Arc<Broker>, request: MetadataRequest, version: i16, peer: &str) -> MetadataResponse {
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
            let (missing, invalid): (BTreeSet<String>, BTreeSet<String>) = wanted
                .iter()
                .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
                .filter(|name| allow_create && !topics.contains_key(name))
                .partition(|name| creatable(name));
            let mut refused: BTreeMap<String, i16> =
                invalid.into_iter().map(|n| (n, codes::INVALID_TOPIC_EXCEPTION)).collect();
            if !missing.is_empty() {
                let (not_created, throttle_ms) = auto_create(broker, missing, peer).await;
                refused.extend(not_created);
                if version >= 3 {
                    response = response.with_throttle_time_ms(throttle_ms);
                }
                topics = broker.topics().unwrap_or(topics);
            }
            let mut out = Vec::with_capacity(wanted.len().min(1024));
            // Not LEADER_NOT_AVAILABLE (a creation still under way: the client's retry finds the
            // topic) nor THROTTLING_QUOTA_EXCEEDED (logged by `auto_create`).
            let mut refusals = codes::Refusals::new("topic");
            let mut refuse = |name: &str, code: i16| {
                if code != codes::LEADER_NOT_AVAILABLE && code != codes::THROTTLING_QUOTA_EXCEEDED {
                    let why = || match code {
                        codes::UNKNOWN_TOPIC_OR_PARTITION if !allow_create => "no such topic (auto-creation is off)",
                        codes::UNKNOWN_TOPIC_OR_PARTITION => "no such topic",
                        _ => "",
                    };
                    refusals.add(code, name, || why().to_string());
                }
                topic_error(Some(name), code)
            };
            for t in wanted {
                // v10+ may name a topic by id alone (librdkafka does, for the topics of a
                // consumer-protocol assignment, which names them by id; the Java client sends an
                // empty name beside the id, and Kafka then looks the topic up by its id).
                let by_id = || {
                    (!t.topic_id.is_nil())
                        .then(|| crate::server::state::topic_ids::name_of(&topics, &t.topic_id))
                        .flatten()
                };
                let named = t.name.as_ref().filter(|n| !n.is_empty() || t.topic_id.is_nil());
                let Some(name) = named.map(|n| n.0.to_string()).or_else(by_id) else {
                    out.push(topic_error(None, codes::UNKNOWN_TOPIC_ID));
                    continue;
                };
                if let Some(&code) = refused.get(&name) {
                    out.push(refuse(&name, code));
                    continue;
                }
                match topics.get(&name) {
                    Some(meta) => out.push(topic_entry(&name, meta, version)),
                    None if validate_topic_name(&name).is_err() => {
                        out.push(refuse(&name, codes::INVALID_TOPIC_EXCEPTION))
                    }
                    None => out.push(refuse(&name, codes::UNKNOWN_TOPIC_OR_PARTITION)),
                }
            }
            refusals.log(peer, "Metadata");
            out
        }
    };
    response.with_topics(entries)
}

pub async fn create_topics(
    broker: &Arc<Broker>,
    request: CreateTopicsRequest,
    version: i16,
    peer: &str,
) -> CreateTopicsResponse {
    // First every topic is checked (cheap), then the valid ones are created together, off the
    // request workers and under the quota: strict from v6 (THROTTLING_QUOTA_EXCEEDED past it),
    // permissive before (created, then throttled), as Kafka does.
    let mut checked_topics = Vec::with_capacity(request.topics.len().min(1024));
    let mut to_create = Vec::new();
    // A name the request repeats: every entry of it refused and none created (Kafka's
    // ControllerApis.createTopics, "Duplicate topic name"), not the first created.
    let mut seen = BTreeSet::new();
    let repeated: BTreeSet<&str> =
        request.topics.iter().map(|t| t.name.0.as_str()).filter(|name| !seen.insert(*name)).collect();
    let repeated: BTreeSet<String> = repeated.into_iter().map(str::to_string).collect();
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let partitions = if topic.num_partitions == -1 { broker.default_partitions() } else { topic.num_partitions };
        let configs: BTreeMap<String, String> =
            topic.configs.iter().filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string()))).collect();
        let checked = crate::storage::datadir::validate_config(&configs);
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
        } else if !(1..=crate::storage::datadir::MAX_PARTITIONS).contains(&partitions) {
            Err((
                codes::INVALID_PARTITIONS,
                format!(
                    "number of partitions must be between 1 and {}, got {partitions}",
                    crate::storage::datadir::MAX_PARTITIONS
                ),
            ))
        } else if let Err(e) = checked.as_ref() {
            Err((codes::INVALID_CONFIG, e.to_string()))
        } else {
            Ok(())
        };
        let outcome = match outcome {
            Ok(()) if repeated.contains(&name) => {
                Err((codes::INVALID_REQUEST, format!("the request names topic {name:?} twice")))
            }
            outcome => outcome,
        };
        if outcome.is_ok() && !request.validate_only {
            to_create.push((name.clone(), partitions, configs));
        }
        checked_topics.push((topic, name, partitions, checked, outcome));
    }
    let mut created = BTreeMap::new();
    let mut throttle_ms = 0;
    if !to_create.is_empty() {
        let strict = version >= 6;
        let (outcomes, throttle) =
            broker.topic_creation.create(broker, to_create, strict, waits::deadline(request.timeout_ms)).await;
        throttle_ms = throttle;
        created = outcomes.into_iter().collect();
    }
    let throttled = created.values().filter(|c| matches!(c, Created::Throttled { .. })).count();
    if throttled > 0 {
        log::warn!(
            target: crate::server::log_target::LOG_TARGET,
            "refused to create {throttled} topic(s) for a CreateTopics request from {peer}: over the controller \
             mutation quota ({}); answered THROTTLING_QUOTA_EXCEEDED, retry after {throttle_ms} ms",
            broker.topic_creation.quota()
        );
    }
    let mut results = Vec::with_capacity(checked_topics.len());
    for (topic, name, partitions, checked, outcome) in checked_topics {
        let outcome = outcome.and_then(|()| match created.remove(&name) {
            None | Some(Created::Done) => Ok(()), // None: validate_only
            Some(Created::Existed) => Err((codes::TOPIC_ALREADY_EXISTS, format!("topic {name:?} already exists"))),
            Some(Created::Throttled { throttle_ms }) => Err((
                codes::THROTTLING_QUOTA_EXCEEDED,
                format!(
                    "over the controller mutation quota ({}): retry after {throttle_ms} ms",
                    broker.topic_creation.quota()
                ),
            )),
            Some(Created::Late) => {
                Err((codes::REQUEST_TIMED_OUT, "the creation did not get its turn within the request's timeout".into()))
            }
            Some(Created::Failed(e @ Error::InvalidConfig(_))) => Err((codes::INVALID_TOPIC_EXCEPTION, e.to_string())),
            Some(Created::Failed(e)) => Err((codes::UNKNOWN_SERVER_ERROR, e.to_string())),
        });
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
                // Throttled topics are logged once for the request, above.
                let code = match code {
                    codes::THROTTLING_QUOTA_EXCEEDED => code,
                    _ => codes::refused(peer, "CreateTopics", code, &message),
                };
                result = result.with_error_code(code);
                if version >= 1 {
                    result = result.with_error_message(Some(StrBytes::from_string(message)));
                }
            }
        }
        results.push(result);
    }
    let response = CreateTopicsResponse::default().with_topics(results);
    if version >= 2 {
        response.with_throttle_time_ms(throttle_ms)
    } else {
        response
    }
}
