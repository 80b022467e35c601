//! Which operation on which resource each API needs (Kafka's `KafkaApis` checks, in one
//! table: `needs`), and the answer of a refused request: the API's *_AUTHORIZATION_FAILED code
//! on every item the request named (`refusal`), with one WARNING line naming the principal, the
//! client's address, the operation and the resource. The decision itself is `authorizer`'s.
//!
//! A request is checked whole, before its handler runs: if any resource it names is refused,
//! every item of the request gets the code of the first refusal (Kafka answers the authorized
//! items of a mixed request normally; clients send one topic's or group's worth at a time in
//! the cases that matter). Listings are filtered instead, as Kafka does: Metadata leaves out
//! topics the principal may not DESCRIBE and answers a named one TOPIC_AUTHORIZATION_FAILED
//! (also a missing one it may not CREATE, rather than creating it); ListGroups lists only the
//! groups it may DESCRIBE (all with DESCRIBE on the cluster); ListTransactions only the
//! transactional ids it may DESCRIBE.

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::authorizer::{op, operation_name, resource, resource_name, Who, CLUSTER_NAME};
use super::broker::Broker;
use super::codes;
use super::dispatch::{Body, DecodeError, Request};
use super::metrics::frame;

/// Kafka's `ConfigResource.Type` codes (DescribeConfigs, AlterConfigs).
const CONFIG_TOPIC: i8 = 2;
const CONFIG_GROUP: i8 = 32;

/// One permission a request needs: any of `any_of` (operation, resource type, name; no name:
/// some resource of that type, Kafka's `authorizeByResourceType`), else `code`.
struct Need {
    code: i16,
    any_of: Vec<(i8, i8, Option<String>)>,
}

fn need(code: i16, operation: i8, resource_type: i8, name: &str) -> Need {
    Need { code, any_of: vec![(operation, resource_type, Some(name.to_string()))] }
}

fn topic(operation: i8, name: &str) -> Need {
    need(codes::TOPIC_AUTHORIZATION_FAILED, operation, resource::TOPIC, name)
}

fn group(operation: i8, name: &str) -> Need {
    need(codes::GROUP_AUTHORIZATION_FAILED, operation, resource::GROUP, name)
}

fn cluster(operation: i8) -> Need {
    need(codes::CLUSTER_AUTHORIZATION_FAILED, operation, resource::CLUSTER, CLUSTER_NAME)
}

fn txn(operation: i8, name: &str) -> Need {
    need(codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED, operation, resource::TRANSACTIONAL_ID, name)
}

/// DescribeConfigs/AlterConfigs: the resource a config resource is authorized as.
fn config(operation: i8, resource_type: i8, name: &str) -> Need {
    match resource_type {
        CONFIG_TOPIC => topic(operation, name),
        CONFIG_GROUP => group(operation, name),
        _ => cluster(operation), // the broker and its loggers
    }
}

/// The table: what each API needs (KafkaApis' `authorize` calls). ApiVersions and the SASL
/// APIs need nothing; Metadata, ListGroups and ListTransactions filter (`Listing`).
fn needs(body: &Body, version: i16) -> Vec<Need> {
    match body {
        Body::Produce(r) => {
            let id = r.transactional_id.iter().map(|t| txn(op::WRITE, t));
            id.chain(r.topic_data.iter().map(|t| topic(op::WRITE, &t.name))).collect()
        }
        Body::Fetch(r) => r.topics.iter().map(|t| topic(op::READ, &t.topic)).collect(),
        Body::ListOffsets(r) => r.topics.iter().map(|t| topic(op::DESCRIBE, &t.name)).collect(),
        Body::CreateTopics(r) => r
            .topics
            .iter()
            .map(|t| Need {
                code: codes::TOPIC_AUTHORIZATION_FAILED,
                any_of: vec![
                    (op::CREATE, resource::CLUSTER, Some(CLUSTER_NAME.into())),
                    (op::CREATE, resource::TOPIC, Some(t.name.to_string())),
                ],
            })
            .collect(),
        Body::FindCoordinator(r) => {
            let keys: Vec<&StrBytes> = if version >= 4 { r.coordinator_keys.iter().collect() } else { vec![&r.key] };
            let by_key = |k: &&StrBytes| if r.key_type == 1 { txn(op::DESCRIBE, k) } else { group(op::DESCRIBE, k) };
            keys.iter().map(by_key).collect()
        }
        Body::OffsetCommit(r) => {
            let topics = r.topics.iter().map(|t| topic(op::READ, &t.name));
            std::iter::once(group(op::READ, &r.group_id)).chain(topics).collect()
        }
        Body::OffsetFetch(r) => {
            let mut out = Vec::new();
            if version < 8 {
                out.push(group(op::DESCRIBE, &r.group_id));
                out.extend(r.topics.iter().flatten().map(|t| topic(op::DESCRIBE, &t.name)));
            }
            for g in &r.groups {
                out.push(group(op::DESCRIBE, &g.group_id));
                out.extend(g.topics.iter().flatten().map(|t| topic(op::DESCRIBE, &t.name)));
            }
            out
        }
        Body::JoinGroup(r) => vec![group(op::READ, &r.group_id)],
        Body::SyncGroup(r) => vec![group(op::READ, &r.group_id)],
        Body::Heartbeat(r) => vec![group(op::READ, &r.group_id)],
        Body::LeaveGroup(r) => vec![group(op::READ, &r.group_id)],
        Body::DescribeGroups(r) => r.groups.iter().map(|g| group(op::DESCRIBE, g)).collect(),
        Body::ConsumerGroupHeartbeat(r) => vec![group(op::READ, &r.group_id)],
        Body::ConsumerGroupDescribe(r) => r.group_ids.iter().map(|g| group(op::DESCRIBE, g)).collect(),
        Body::InitProducerId(r) => match &r.transactional_id {
            Some(id) => vec![txn(op::WRITE, id)],
            None => vec![Need {
                code: codes::CLUSTER_AUTHORIZATION_FAILED,
                any_of: vec![
                    (op::IDEMPOTENT_WRITE, resource::CLUSTER, Some(CLUSTER_NAME.into())),
                    (op::WRITE, resource::TOPIC, None),
                ],
            }],
        },
        Body::AddPartitionsToTxn(r) => {
            let mut out = Vec::new();
            if version < 4 {
                out.push(txn(op::WRITE, &r.v3_and_below_transactional_id));
                out.extend(r.v3_and_below_topics.iter().map(|t| topic(op::WRITE, &t.name)));
            }
            for t in &r.transactions {
                out.push(txn(op::WRITE, &t.transactional_id));
                out.extend(t.topics.iter().map(|t| topic(op::WRITE, &t.name)));
            }
            out
        }
        Body::AddOffsetsToTxn(r) => vec![txn(op::WRITE, &r.transactional_id), group(op::READ, &r.group_id)],
        Body::EndTxn(r) => vec![txn(op::WRITE, &r.transactional_id)],
        Body::TxnOffsetCommit(r) => {
            let first = [txn(op::WRITE, &r.transactional_id), group(op::READ, &r.group_id)];
            first.into_iter().chain(r.topics.iter().map(|t| topic(op::READ, &t.name))).collect()
        }
        Body::DescribeProducers(r) => r.topics.iter().map(|t| topic(op::READ, &t.name)).collect(),
        Body::DescribeTransactions(r) => r.transactional_ids.iter().map(|t| txn(op::DESCRIBE, t)).collect(),
        Body::DeleteGroups(r) => r.groups_names.iter().map(|g| group(op::DELETE, g)).collect(),
        Body::DeleteTopics(r) => {
            let named = r.topics.iter().map(|t| t.name.as_ref().map_or("", |n| n.as_str()));
            named.chain(r.topic_names.iter().map(|n| n.as_str())).map(|n| topic(op::DELETE, n)).collect()
        }
        Body::CreatePartitions(r) => r.topics.iter().map(|t| topic(op::ALTER, &t.name)).collect(),
        Body::DescribeConfigs(r) => {
            r.resources.iter().map(|c| config(op::DESCRIBE_CONFIGS, c.resource_type, &c.resource_name)).collect()
        }
        Body::AlterConfigs(r) => {
            r.resources.iter().map(|c| config(op::ALTER_CONFIGS, c.resource_type, &c.resource_name)).collect()
        }
        Body::IncrementalAlterConfigs(r) => {
            r.resources.iter().map(|c| config(op::ALTER_CONFIGS, c.resource_type, &c.resource_name)).collect()
        }
        Body::DeleteRecords(r) => r.topics.iter().map(|t| topic(op::DELETE, &t.name)).collect(),
        Body::DescribeCluster(_) | Body::DescribeLogDirs(_) => vec![cluster(op::DESCRIBE)],
        Body::OffsetDelete(r) => {
            let topics = r.topics.iter().map(|t| topic(op::READ, &t.name));
            std::iter::once(group(op::DELETE, &r.group_id)).chain(topics).collect()
        }
        Body::CreateAcls(_) | Body::DeleteAcls(_) => vec![cluster(op::ALTER)],
        Body::DescribeAcls(_) => vec![cluster(op::DESCRIBE)],
        Body::Metadata(_)
        | Body::ListGroups(_)
        | Body::ListTransactions(_)
        | Body::ApiVersions(_)
        | Body::ApiVersionsUnsupported
        | Body::SaslHandshake(_)
        | Body::SaslAuthenticate(_) => Vec::new(),
    }
}

/// Whether `who` may do one of `any_of`.
fn allowed(broker: &Broker, who: &Who, any_of: &[(i8, i8, Option<String>)]) -> bool {
    any_of.iter().any(|(operation, resource_type, name)| match name {
        Some(name) => broker.acls.allows(who, *operation, *resource_type, name),
        None => broker.acls.allows_some(who, *operation, *resource_type),
    })
}

/// The refusal of `request`, framed, when `who` may not make it; None: serve it.
pub fn check(broker: &Broker, who: &Who, request: &Request, peer: &str) -> Result<Option<Bytes>, DecodeError> {
    if !broker.acls.enforced() {
        return Ok(None);
    }
    let v = request.header.request_api_version;
    let Some(refused) = needs(&request.body, v).into_iter().find(|n| !allowed(broker, who, &n.any_of)) else {
        return Ok(None);
    };
    let what: Vec<String> = refused
        .any_of
        .iter()
        .map(|(operation, resource_type, name)| {
            let name = name.as_deref().unwrap_or("(any)");
            format!("{} {} {name}", operation_name(*operation), resource_name(*resource_type))
        })
        .collect();
    let reason = format!("{} from {} may not {}", who.principal, who.host, what.join(" or "));
    let code = codes::refused(peer, &format!("{:?}", request.key), refused.code, &reason);
    refusal(request, code).map(Some)
}

/// `request` answered with `code` on every item it names.
fn refusal(request: &Request, code: i16) -> Result<Bytes, DecodeError> {
    let (key, v, id) = (request.key, request.header.request_api_version, request.header.correlation_id);
    let named = |code: i16, message: bool| -> Option<StrBytes> {
        message.then(|| StrBytes::from_string(format!("{} ({code})", codes::name(code))))
    };
    match &request.body {
        Body::Produce(r) => {
            let topics = r
                .topic_data
                .iter()
                .map(|t| {
                    let parts = t
                        .partition_data
                        .iter()
                        .map(|p| {
                            produce_response::PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(code)
                                .with_base_offset(-1)
                                .with_log_append_time_ms(-1)
                                .with_log_start_offset(-1)
                        })
                        .collect();
                    produce_response::TopicProduceResponse::default()
                        .with_name(t.name.clone())
                        .with_partition_responses(parts)
                })
                .collect();
            frame(key, v, id, &ProduceResponse::default().with_responses(topics))
        }
        Body::Fetch(r) => {
            let topics = r
                .topics
                .iter()
                .map(|t| {
                    let parts = t
                        .partitions
                        .iter()
                        .map(|p| {
                            fetch_response::PartitionData::default()
                                .with_partition_index(p.partition)
                                .with_error_code(code)
                                .with_high_watermark(-1)
                                .with_last_stable_offset(-1)
                                .with_log_start_offset(-1)
                        })
                        .collect();
                    fetch_response::FetchableTopicResponse::default()
                        .with_topic(t.topic.clone())
                        .with_topic_id(t.topic_id)
                        .with_partitions(parts)
                })
                .collect();
            frame(key, v, id, &FetchResponse::default().with_responses(topics))
        }
        Body::ListOffsets(r) => {
            let topics = r
                .topics
                .iter()
                .map(|t| {
                    let parts = t
                        .partitions
                        .iter()
                        .map(|p| {
                            list_offsets_response::ListOffsetsPartitionResponse::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code)
                                .with_timestamp(-1)
                                .with_offset(-1)
                        })
                        .collect();
                    list_offsets_response::ListOffsetsTopicResponse::default()
                        .with_name(t.name.clone())
                        .with_partitions(parts)
                })
                .collect();
            frame(key, v, id, &ListOffsetsResponse::default().with_topics(topics))
        }
        Body::CreateTopics(r) => {
            let topics = r
                .topics
                .iter()
                .map(|t| {
                    create_topics_response::CreatableTopicResult::default()
                        .with_name(t.name.clone())
                        .with_error_code(code)
                        .with_error_message(named(code, v >= 1))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                })
                .collect();
            frame(key, v, id, &CreateTopicsResponse::default().with_topics(topics))
        }
        Body::FindCoordinator(r) => {
            let coordinators = r
                .coordinator_keys
                .iter()
                .map(|k| {
                    find_coordinator_response::Coordinator::default()
                        .with_key(k.clone())
                        .with_node_id(BrokerId(-1))
                        .with_port(-1)
                        .with_error_code(code)
                        .with_error_message(named(code, true))
                })
                .collect();
            let body = FindCoordinatorResponse::default()
                .with_error_code(if v >= 4 { codes::NONE } else { code })
                .with_error_message(named(code, (1..4).contains(&v)))
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_coordinators(coordinators);
            frame(key, v, id, &body)
        }
        Body::OffsetCommit(r) => {
            let topics = r
                .topics
                .iter()
                .map(|t| {
                    let parts = t
                        .partitions
                        .iter()
                        .map(|p| {
                            offset_commit_response::OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code)
                        })
                        .collect();
                    offset_commit_response::OffsetCommitResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(parts)
                })
                .collect();
            frame(key, v, id, &OffsetCommitResponse::default().with_topics(topics))
        }
        Body::OffsetFetch(r) => {
            let groups = r
                .groups
                .iter()
                .map(|g| offset_fetch_response::OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone()))
                .map(|g| g.with_error_code(code))
                .collect();
            let body = OffsetFetchResponse::default()
                .with_error_code(if v >= 2 { code } else { codes::NONE })
                .with_groups(groups);
            let body = if v >= 2 {
                body
            } else {
                // v1 has no top-level code: every asked partition carries it.
                let topics = r
                    .topics
                    .iter()
                    .flatten()
                    .map(|t| {
                        let parts = t
                            .partition_indexes
                            .iter()
                            .map(|&p| {
                                offset_fetch_response::OffsetFetchResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(-1)
                                    .with_error_code(code)
                            })
                            .collect();
                        offset_fetch_response::OffsetFetchResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(parts)
                    })
                    .collect();
                body.with_topics(topics)
            };
            frame(key, v, id, &body)
        }
        Body::JoinGroup(r) => {
            let body = JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1)
                .with_member_id(r.member_id.clone())
                .with_protocol_name((v < 7).then(StrBytes::default));
            frame(key, v, id, &body)
        }
        Body::SyncGroup(_) => frame(key, v, id, &SyncGroupResponse::default().with_error_code(code)),
        Body::Heartbeat(_) => frame(key, v, id, &HeartbeatResponse::default().with_error_code(code)),
        Body::ConsumerGroupHeartbeat(_) => frame(
            key,
            v,
            id,
            &ConsumerGroupHeartbeatResponse::default().with_error_code(code).with_error_message(named(code, true)),
        ),
        Body::ConsumerGroupDescribe(r) => {
            let groups = r
                .group_ids
                .iter()
                .map(|g| {
                    consumer_group_describe_response::DescribedGroup::default()
                        .with_group_id(g.clone())
                        .with_error_code(code)
                })
                .collect();
            frame(key, v, id, &ConsumerGroupDescribeResponse::default().with_groups(groups))
        }
        Body::LeaveGroup(_) => frame(key, v, id, &LeaveGroupResponse::default().with_error_code(code)),
        Body::DescribeGroups(r) => {
            let groups = r
                .groups
                .iter()
                .map(|g| {
                    describe_groups_response::DescribedGroup::default()
                        .with_group_id(g.clone())
                        .with_error_code(code)
                        .with_authorized_operations(i32::MIN)
                })
                .collect();
            frame(key, v, id, &DescribeGroupsResponse::default().with_groups(groups))
        }
        Body::InitProducerId(_) => {
            let body = InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            frame(key, v, id, &body)
        }
        Body::AddPartitionsToTxn(r) => {
            let topic_results = |topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic]| {
                topics
                    .iter()
                    .map(|t| {
                        let parts = t
                            .partitions
                            .iter()
                            .map(|&p| {
                                add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default()
                                    .with_partition_index(p)
                                    .with_partition_error_code(code)
                            })
                            .collect();
                        add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default()
                            .with_name(t.name.clone())
                            .with_results_by_partition(parts)
                    })
                    .collect::<Vec<_>>()
            };
            let body = if v < 4 {
                AddPartitionsToTxnResponse::default()
                    .with_results_by_topic_v3_and_below(topic_results(&r.v3_and_below_topics))
            } else {
                let results = r
                    .transactions
                    .iter()
                    .map(|t| {
                        add_partitions_to_txn_response::AddPartitionsToTxnResult::default()
                            .with_transactional_id(t.transactional_id.clone())
                            .with_topic_results(topic_results(&t.topics))
                    })
                    .collect();
                AddPartitionsToTxnResponse::default().with_error_code(code).with_results_by_transaction(results)
            };
            frame(key, v, id, &body)
        }
        Body::AddOffsetsToTxn(_) => frame(key, v, id, &AddOffsetsToTxnResponse::default().with_error_code(code)),
        Body::EndTxn(_) => {
            let body = EndTxnResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1);
            frame(key, v, id, &body)
        }
        Body::TxnOffsetCommit(r) => {
            let topics = r
                .topics
                .iter()
                .map(|t| {
                    let parts = t
                        .partitions
                        .iter()
                        .map(|p| {
                            txn_offset_commit_response::TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code)
                        })
                        .collect();
                    txn_offset_commit_response::TxnOffsetCommitResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(parts)
                })
                .collect();
            frame(key, v, id, &TxnOffsetCommitResponse::default().with_topics(topics))
        }
        Body::DescribeProducers(r) => {
            let topics = r
                .topics
                .iter()
                .map(|t| {
                    let parts = t
                        .partition_indexes
                        .iter()
                        .map(|&p| {
                            describe_producers_response::PartitionResponse::default()
                                .with_partition_index(p)
                                .with_error_code(code)
                                .with_error_message(named(code, true))
                        })
                        .collect();
                    describe_producers_response::TopicResponse::default()
                        .with_name(t.name.clone())
                        .with_partitions(parts)
                })
                .collect();
            frame(key, v, id, &DescribeProducersResponse::default().with_topics(topics))
        }
        Body::DescribeTransactions(r) => {
            let states = r
                .transactional_ids
                .iter()
                .map(|t| {
                    describe_transactions_response::TransactionState::default()
                        .with_transactional_id(t.clone())
                        .with_error_code(code)
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1)
                })
                .collect();
            frame(key, v, id, &DescribeTransactionsResponse::default().with_transaction_states(states))
        }
        Body::DeleteGroups(r) => {
            let results = r
                .groups_names
                .iter()
                .map(|g| delete_groups_response::DeletableGroupResult::default().with_group_id(g.clone()))
                .map(|g| g.with_error_code(code))
                .collect();
            frame(key, v, id, &DeleteGroupsResponse::default().with_results(results))
        }
        Body::DeleteTopics(r) => {
            let by_state = r.topics.iter().map(|t| (t.name.clone(), t.topic_id));
            let by_name = r.topic_names.iter().map(|n| (Some(n.clone()), Default::default()));
            let results = by_state
                .chain(by_name)
                .map(|(name, topic_id)| {
                    delete_topics_response::DeletableTopicResult::default()
                        .with_name(name)
                        .with_topic_id(topic_id)
                        .with_error_code(code)
                        .with_error_message(named(code, v >= 5))
                })
                .collect();
            frame(key, v, id, &DeleteTopicsResponse::default().with_responses(results))
        }
        Body::CreatePartitions(r) => {
            let results = r
                .topics
                .iter()
                .map(|t| {
                    create_partitions_response::CreatePartitionsTopicResult::default()
                        .with_name(t.name.clone())
                        .with_error_code(code)
                        .with_error_message(named(code, true))
                })
                .collect();
            frame(key, v, id, &CreatePartitionsResponse::default().with_results(results))
        }
        Body::DescribeConfigs(r) => {
            let results = r
                .resources
                .iter()
                .map(|c| {
                    describe_configs_response::DescribeConfigsResult::default()
                        .with_resource_type(c.resource_type)
                        .with_resource_name(c.resource_name.clone())
                        .with_error_code(code)
                        .with_error_message(named(code, true))
                })
                .collect();
            frame(key, v, id, &DescribeConfigsResponse::default().with_results(results))
        }
        Body::AlterConfigs(r) => {
            let kinds = r.resources.iter().map(|c| (c.resource_type, c.resource_name.clone()));
            frame(key, v, id, &AlterConfigsResponse::default().with_responses(alter_results(kinds, code)))
        }
        Body::IncrementalAlterConfigs(r) => {
            let kinds = r.resources.iter().map(|c| (c.resource_type, c.resource_name.clone()));
            let results = alter_results(kinds, code)
                .into_iter()
                .map(|a| {
                    incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                        .with_resource_type(a.resource_type)
                        .with_resource_name(a.resource_name)
                        .with_error_code(a.error_code)
                        .with_error_message(a.error_message)
                })
                .collect();
            frame(key, v, id, &IncrementalAlterConfigsResponse::default().with_responses(results))
        }
        Body::DeleteRecords(r) => {
            let topics = r
                .topics
                .iter()
                .map(|t| {
                    let parts = t
                        .partitions
                        .iter()
                        .map(|p| {
                            delete_records_response::DeleteRecordsPartitionResult::default()
                                .with_partition_index(p.partition_index)
                                .with_low_watermark(-1)
                                .with_error_code(code)
                        })
                        .collect();
                    delete_records_response::DeleteRecordsTopicResult::default()
                        .with_name(t.name.clone())
                        .with_partitions(parts)
                })
                .collect();
            frame(key, v, id, &DeleteRecordsResponse::default().with_topics(topics))
        }
        Body::DescribeCluster(_) => {
            let body = DescribeClusterResponse::default()
                .with_error_code(code)
                .with_error_message(named(code, true))
                .with_controller_id(BrokerId(-1));
            frame(key, v, id, &body)
        }
        Body::OffsetDelete(_) => frame(key, v, id, &OffsetDeleteResponse::default().with_error_code(code)),
        Body::DescribeLogDirs(_) => frame(key, v, id, &DescribeLogDirsResponse::default().with_error_code(code)),
        Body::CreateAcls(r) => {
            let results = r
                .creations
                .iter()
                .map(|_| {
                    create_acls_response::AclCreationResult::default()
                        .with_error_code(code)
                        .with_error_message(named(code, true))
                })
                .collect();
            frame(key, v, id, &CreateAclsResponse::default().with_results(results))
        }
        Body::DeleteAcls(r) => {
            let results = r
                .filters
                .iter()
                .map(|_| {
                    delete_acls_response::DeleteAclsFilterResult::default()
                        .with_error_code(code)
                        .with_error_message(named(code, true))
                })
                .collect();
            frame(key, v, id, &DeleteAclsResponse::default().with_filter_results(results))
        }
        Body::DescribeAcls(_) => {
            let body = DescribeAclsResponse::default().with_error_code(code).with_error_message(named(code, true));
            frame(key, v, id, &body)
        }
        Body::Metadata(_)
        | Body::ListGroups(_)
        | Body::ListTransactions(_)
        | Body::ApiVersions(_)
        | Body::ApiVersionsUnsupported
        | Body::SaslHandshake(_)
        | Body::SaslAuthenticate(_) => Err(DecodeError(format!("{key:?} is never refused whole (a bug)"))),
    }
}

fn alter_results(
    resources: impl Iterator<Item = (i8, StrBytes)>,
    code: i16,
) -> Vec<alter_configs_response::AlterConfigsResourceResponse> {
    resources
        .map(|(kind, name)| {
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(kind)
                .with_resource_name(name)
                .with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(codes::name(code).to_string())))
        })
        .collect()
}

/// What a listing may show `who`: the filters of Metadata, ListGroups and ListTransactions.
pub struct Listing<'a> {
    broker: &'a Broker,
    who: &'a Who,
    peer: &'a str,
}

impl<'a> Listing<'a> {
    pub fn new(broker: &'a Broker, who: &'a Who, peer: &'a str) -> Listing<'a> {
        Listing { broker, who, peer }
    }

    /// Always true while the ACLs are not enforced: nothing is filtered then.
    fn may(&self, operation: i8, resource_type: i8, name: &str) -> bool {
        self.broker.acls.allows(self.who, operation, resource_type, name)
    }

    /// Metadata before its handler: named topics the principal may not DESCRIBE, or may not
    /// CREATE while they do not exist and would be created, are taken out of the request;
    /// returns them for `metadata_after`, with the names asked (None: every topic).
    pub fn metadata_before(&self, r: &mut MetadataRequest, version: i16) -> MetadataCut {
        let every = r.topics.as_ref().is_none_or(|t| t.is_empty() && version == 0);
        let Some(topics) = r.topics.as_mut().filter(|_| !every && self.broker.acls.enforced()) else {
            return MetadataCut { asked: None, refused: Vec::new() };
        };
        let existing = self.broker.topics().ok();
        let exists = |n: &str| existing.as_ref().is_none_or(|t| t.contains_key(n));
        let may_create =
            |n: &str| self.may(op::CREATE, resource::CLUSTER, CLUSTER_NAME) || self.may(op::CREATE, resource::TOPIC, n);
        let mut asked = BTreeSet::new();
        let mut refused = Vec::new();
        topics.retain(|t| {
            let Some(name) = t.name.as_ref().map(|n| n.to_string()) else { return true };
            asked.insert(name.clone());
            let ok = self.may(op::DESCRIBE, resource::TOPIC, &name) && (exists(&name) || may_create(&name));
            if !ok {
                refused.push(name);
            }
            ok
        });
        if !refused.is_empty() {
            let reason = format!(
                "{} from {} may not DESCRIBE (or CREATE) TOPIC {}",
                self.who.principal,
                self.who.host,
                refused.join(", ")
            );
            codes::refused(self.peer, "Metadata", codes::TOPIC_AUTHORIZATION_FAILED, &reason);
        }
        MetadataCut { asked: Some(asked), refused }
    }

    /// Metadata after its handler: only what was asked and may be described, and the refused
    /// names with TOPIC_AUTHORIZATION_FAILED.
    pub fn metadata_after(&self, cut: MetadataCut, mut response: MetadataResponse) -> MetadataResponse {
        if !self.broker.acls.enforced() {
            return response;
        }
        response.topics.retain(|t| {
            let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
            cut.asked.as_ref().is_none_or(|a| a.contains(&name)) && self.may(op::DESCRIBE, resource::TOPIC, &name)
        });
        for name in cut.refused {
            response.topics.push(
                metadata_response::MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(name))))
                    .with_error_code(codes::TOPIC_AUTHORIZATION_FAILED)
                    .with_topic_authorized_operations(i32::MIN),
            );
        }
        response
    }

    /// ListGroups: every group with DESCRIBE on the cluster, else those it may DESCRIBE.
    pub fn list_groups(&self, mut response: ListGroupsResponse) -> ListGroupsResponse {
        if self.broker.acls.enforced() && !self.may(op::DESCRIBE, resource::CLUSTER, CLUSTER_NAME) {
            response.groups.retain(|g| self.may(op::DESCRIBE, resource::GROUP, &g.group_id));
        }
        response
    }

    /// ListTransactions: the transactional ids it may DESCRIBE.
    pub fn list_transactions(&self, mut response: ListTransactionsResponse) -> ListTransactionsResponse {
        if self.broker.acls.enforced() {
            let may = |t: &list_transactions_response::TransactionState| {
                self.may(op::DESCRIBE, resource::TRANSACTIONAL_ID, &t.transactional_id)
            };
            response.transaction_states.retain(may);
        }
        response
    }
}

/// Metadata's named topics (None: all) and those refused before the handler ran.
pub struct MetadataCut {
    asked: Option<BTreeSet<String>>,
    refused: Vec<String>,
}
