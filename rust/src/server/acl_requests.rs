//! Which operation on which resource each API needs (Kafka's `KafkaApis` checks, in one
//! table: `needs`), and the answer of a refused request: the API's *_AUTHORIZATION_FAILED code
//! on every item the request named (`refusal`), with one WARNING line naming the principal, the
//! client's address, the operation and the resource. The decision itself is `authorizer`'s.
//!
//! A request is checked before its handler runs. Its whole-request needs (a group, a
//! transactional id, the cluster) refuse it whole: every item gets the code of the first
//! refusal. The topics of Produce, Fetch, ListOffsets, CreateTopics, DeleteTopics,
//! DeleteRecords, OffsetCommit and OffsetFetch are authorized one by one, as Kafka does: the
//! refused ones are taken out of the request (`split`), the handler serves the others, and the
//! refused ones are added to its response with TOPIC_AUTHORIZATION_FAILED (`Refused`), built by
//! the same per-API builder as a whole refusal (`*_refused`). Listings are filtered instead, as Kafka does: Metadata leaves out
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
use super::{client_quotas, scram_admin};

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
        // Their topics are checked one by one (`split`).
        Body::Produce(r) => r.transactional_id.iter().map(|t| txn(op::WRITE, t)).collect(),
        Body::Fetch(_) | Body::ListOffsets(_) | Body::CreateTopics(_) => Vec::new(),
        Body::FindCoordinator(r) => {
            let keys: Vec<&StrBytes> = if version >= 4 { r.coordinator_keys.iter().collect() } else { vec![&r.key] };
            let by_key = |k: &&StrBytes| if r.key_type == 1 { txn(op::DESCRIBE, k) } else { group(op::DESCRIBE, k) };
            keys.iter().map(by_key).collect()
        }
        Body::OffsetCommit(r) => vec![group(op::READ, &r.group_id)],
        Body::OffsetFetch(r) => {
            let mut out = Vec::new();
            if version < 8 {
                out.push(group(op::DESCRIBE, &r.group_id));
            }
            // v8+: each group whole; its topics one by one (`split`).
            out.extend(r.groups.iter().map(|g| group(op::DESCRIBE, &g.group_id)));
            out
        }
        Body::JoinGroup(r) => vec![group(op::READ, &r.group_id)],
        Body::SyncGroup(r) => vec![group(op::READ, &r.group_id)],
        Body::Heartbeat(r) => vec![group(op::READ, &r.group_id)],
        Body::LeaveGroup(r) => vec![group(op::READ, &r.group_id)],
        Body::DescribeGroups(r) => r.groups.iter().map(|g| group(op::DESCRIBE, g)).collect(),
        // KafkaApis: READ on the group, then DESCRIBE on every subscribed topic name
        // (TOPIC_AUTHORIZATION_FAILED); a regex only matches topics the member may describe.
        Body::ConsumerGroupHeartbeat(r) => std::iter::once(group(op::READ, &r.group_id))
            .chain(r.subscribed_topic_names.iter().flatten().map(|t| topic(op::DESCRIBE, t)))
            .collect(),
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
        Body::DeleteTopics(_) => Vec::new(),
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
        Body::DeleteRecords(_) => Vec::new(),
        Body::DescribeCluster(_) | Body::DescribeLogDirs(_) => vec![cluster(op::DESCRIBE)],
        Body::OffsetDelete(r) => {
            let topics = r.topics.iter().map(|t| topic(op::READ, &t.name));
            std::iter::once(group(op::DELETE, &r.group_id)).chain(topics).collect()
        }
        Body::CreateAcls(_) | Body::DeleteAcls(_) => vec![cluster(op::ALTER)],
        Body::DescribeAcls(_) => vec![cluster(op::DESCRIBE)],
        Body::AlterUserScramCredentials(_) => vec![cluster(op::ALTER)],
        Body::DescribeUserScramCredentials(_) => vec![cluster(op::DESCRIBE)],
        Body::AlterClientQuotas(_) => vec![cluster(op::ALTER_CONFIGS)],
        Body::DescribeClientQuotas(_) => vec![cluster(op::DESCRIBE_CONFIGS)],
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

/// What to do with a request: refuse it whole (framed), or serve it, adding the topics it
/// named that were taken out (`Refused`) to its response.
// One per request, returned once and matched at once: boxing `Serve` would only add an
// allocation to every served request.
#[allow(clippy::large_enum_variant)]
pub enum Verdict {
    Refuse(Bytes),
    Serve(Refused),
}

/// Check `request` for `who`. Whole-request needs (`needs`) refuse it whole; the topics of the
/// per-topic APIs (`split`) that `who` may not touch are taken out of it, unless that leaves
/// nothing, when it is refused whole too (the same answer).
pub fn check(broker: &Broker, who: &Who, request: &mut Request, peer: &str) -> Result<Verdict, DecodeError> {
    // Another process (a server on the same directory, `kafkalite acls`) may have changed them.
    broker.acls.refresh();
    if !broker.acls.enforced() {
        return Ok(Verdict::Serve(Refused(None)));
    }
    let v = request.header.request_api_version;
    let api = format!("{:?}", request.key);
    if let Some(refused) = needs(&request.body, v).into_iter().find(|n| !allowed(broker, who, &n.any_of)) {
        let what: Vec<String> = refused
            .any_of
            .iter()
            .map(|(operation, resource_type, name)| {
                let name = name.as_deref().unwrap_or("(any)");
                format!("{} {} {name}", operation_name(*operation), resource_name(*resource_type))
            })
            .collect();
        let reason = format!("{} from {} may not {}", who.principal, who.host, what.join(" or "));
        let code = codes::refused(peer, &api, refused.code, &reason);
        return refusal(request, code).map(Verdict::Refuse);
    }
    let may = |operation: i8, resource_type: i8, name: &str| broker.acls.allows(who, operation, resource_type, name);
    let Some(Split { denied, names, refused, left }) = split(&mut request.body, v, may) else {
        return Ok(Verdict::Serve(Refused(None)));
    };
    let reason = format!("{} from {} may not {refused} TOPIC {}", who.principal, who.host, names.join(", "));
    let code = codes::refused(peer, &api, codes::TOPIC_AUTHORIZATION_FAILED, &reason);
    if left == 0 {
        request.body = denied;
        return refusal(request, code).map(Verdict::Refuse);
    }
    Ok(Verdict::Serve(Refused(Some(denied))))
}

/// The topics `split` took out of a request: the request with only those, their names, what
/// was refused on them ("READ"), and how many topics are left to serve.
struct Split {
    denied: Body,
    names: Vec<String>,
    refused: String,
    left: usize,
}

/// Move the items `refuse` names out of `items`.
fn take<T>(items: &mut Vec<T>, refuse: impl Fn(&T) -> bool) -> Vec<T> {
    let (out, keep) = std::mem::take(items).into_iter().partition(|t| refuse(t));
    *items = keep;
    out
}

/// Kafka authorizes each topic of these requests on its own (KafkaApis' `filterByAuthorized`):
/// the topics `may` refuses, moved out of `body`; None when there are none (or the API is not
/// one of them).
fn split(body: &mut Body, version: i16, may: impl Fn(i8, i8, &str) -> bool) -> Option<Split> {
    let may = &may;
    let topic_may = |operation: i8| move |name: &str| may(operation, resource::TOPIC, name);
    let (denied, names, operation, left): (Body, Vec<String>, i8, usize) = match body {
        Body::Produce(r) => {
            let ok = topic_may(op::WRITE);
            let out = take(&mut r.topic_data, |t| !ok(&t.name));
            let names = out.iter().map(|t| t.name.to_string()).collect();
            (Body::Produce(ProduceRequest::default().with_topic_data(out)), names, op::WRITE, r.topic_data.len())
        }
        Body::Fetch(r) => {
            let ok = topic_may(op::READ);
            let out = take(&mut r.topics, |t| !ok(&t.topic));
            let names = out.iter().map(|t| t.topic.to_string()).collect();
            (Body::Fetch(FetchRequest::default().with_topics(out)), names, op::READ, r.topics.len())
        }
        Body::ListOffsets(r) => {
            let ok = topic_may(op::DESCRIBE);
            let out = take(&mut r.topics, |t| !ok(&t.name));
            let names = out.iter().map(|t| t.name.to_string()).collect();
            (Body::ListOffsets(ListOffsetsRequest::default().with_topics(out)), names, op::DESCRIBE, r.topics.len())
        }
        Body::CreateTopics(r) => {
            let cluster = may(op::CREATE, resource::CLUSTER, CLUSTER_NAME);
            let out = take(&mut r.topics, |t| !cluster && !may(op::CREATE, resource::TOPIC, &t.name));
            let names = out.iter().map(|t| t.name.to_string()).collect();
            (Body::CreateTopics(CreateTopicsRequest::default().with_topics(out)), names, op::CREATE, r.topics.len())
        }
        Body::DeleteTopics(r) => {
            let ok = topic_may(op::DELETE);
            let by_state = take(&mut r.topics, |t| !ok(t.name.as_ref().map_or("", |n| n.as_str())));
            let by_name = take(&mut r.topic_names, |n| !ok(n));
            let names = by_state
                .iter()
                .map(|t| t.name.as_ref().map_or(String::new(), |n| n.to_string()))
                .chain(by_name.iter().map(|n| n.to_string()))
                .collect();
            let denied = DeleteTopicsRequest::default().with_topics(by_state).with_topic_names(by_name);
            (Body::DeleteTopics(denied), names, op::DELETE, r.topics.len() + r.topic_names.len())
        }
        Body::DeleteRecords(r) => {
            let ok = topic_may(op::DELETE);
            let out = take(&mut r.topics, |t| !ok(&t.name));
            let names = out.iter().map(|t| t.name.to_string()).collect();
            (Body::DeleteRecords(DeleteRecordsRequest::default().with_topics(out)), names, op::DELETE, r.topics.len())
        }
        Body::OffsetCommit(r) => {
            let ok = topic_may(op::READ);
            let out = take(&mut r.topics, |t| !ok(&t.name));
            let names = out.iter().map(|t| t.name.to_string()).collect();
            (Body::OffsetCommit(OffsetCommitRequest::default().with_topics(out)), names, op::READ, r.topics.len())
        }
        Body::OffsetFetch(r) if version < 8 => {
            let ok = topic_may(op::DESCRIBE);
            let topics = r.topics.as_mut()?;
            let out = take(topics, |t| !ok(&t.name));
            let names = out.iter().map(|t| t.name.to_string()).collect();
            // Served even with no topic left: a whole refusal of OffsetFetch is the group's code.
            let left = topics.len().max(1);
            (Body::OffsetFetch(OffsetFetchRequest::default().with_topics(Some(out))), names, op::DESCRIBE, left)
        }
        Body::OffsetFetch(r) => {
            // v8+: the topics of each group; a group left with none is still answered.
            let ok = topic_may(op::DESCRIBE);
            let (mut denied, mut names) = (Vec::new(), Vec::new());
            for g in &mut r.groups {
                let Some(topics) = g.topics.as_mut() else { continue };
                let out = take(topics, |t| !ok(&t.name));
                names.extend(out.iter().map(|t| t.name.to_string()));
                if !out.is_empty() {
                    let group =
                        offset_fetch_request::OffsetFetchRequestGroup::default().with_group_id(g.group_id.clone());
                    denied.push(group.with_topics(Some(out)));
                }
            }
            let left = r.groups.len().max(1);
            (Body::OffsetFetch(OffsetFetchRequest::default().with_groups(denied)), names, op::DESCRIBE, left)
        }
        _ => return None,
    };
    let refused = match operation {
        op::CREATE => format!("CREATE CLUSTER {CLUSTER_NAME} or CREATE"),
        other => operation_name(other).to_string(),
    };
    (!names.is_empty()).then_some(Split { denied, names, refused, left })
}

/// The topics taken out of a request before its handler ran (`check`), answered
/// TOPIC_AUTHORIZATION_FAILED in the handler's response, with the same builders as a whole
/// refusal.
pub struct Refused(Option<Body>);

const TOPIC_REFUSED: i16 = codes::TOPIC_AUTHORIZATION_FAILED;

impl Refused {
    pub fn produce(&self, mut response: ProduceResponse) -> ProduceResponse {
        if let Some(Body::Produce(r)) = &self.0 {
            response.responses.extend(produce_refused(r, TOPIC_REFUSED).responses);
        }
        response
    }

    /// Fetch's refused topics, for `fetch::answer` to add before it frames its response.
    pub fn fetch(&self) -> Vec<fetch_response::FetchableTopicResponse> {
        match &self.0 {
            Some(Body::Fetch(r)) => fetch_refused(r, TOPIC_REFUSED).responses,
            _ => Vec::new(),
        }
    }

    pub fn list_offsets(&self, mut response: ListOffsetsResponse) -> ListOffsetsResponse {
        if let Some(Body::ListOffsets(r)) = &self.0 {
            response.topics.extend(list_offsets_refused(r, TOPIC_REFUSED).topics);
        }
        response
    }

    pub fn create_topics(&self, mut response: CreateTopicsResponse, v: i16) -> CreateTopicsResponse {
        if let Some(Body::CreateTopics(r)) = &self.0 {
            response.topics.extend(create_topics_refused(r, TOPIC_REFUSED, v).topics);
        }
        response
    }

    pub fn delete_topics(&self, mut response: DeleteTopicsResponse, v: i16) -> DeleteTopicsResponse {
        if let Some(Body::DeleteTopics(r)) = &self.0 {
            response.responses.extend(delete_topics_refused(r, TOPIC_REFUSED, v).responses);
        }
        response
    }

    pub fn delete_records(&self, mut response: DeleteRecordsResponse) -> DeleteRecordsResponse {
        if let Some(Body::DeleteRecords(r)) = &self.0 {
            response.topics.extend(delete_records_refused(r, TOPIC_REFUSED).topics);
        }
        response
    }

    pub fn offset_commit(&self, mut response: OffsetCommitResponse) -> OffsetCommitResponse {
        if let Some(Body::OffsetCommit(r)) = &self.0 {
            response.topics.extend(offset_commit_refused(r, TOPIC_REFUSED).topics);
        }
        response
    }

    pub fn offset_fetch(&self, mut response: OffsetFetchResponse) -> OffsetFetchResponse {
        if let Some(Body::OffsetFetch(r)) = &self.0 {
            response.topics.extend(offset_fetch_topics_refused(r.topics.iter().flatten(), TOPIC_REFUSED));
            // v8+: into their group's answer, unless the group itself was refused (Kafka).
            for denied in &r.groups {
                let Some(g) = response.groups.iter_mut().find(|g| g.group_id == denied.group_id) else { continue };
                if g.error_code == codes::NONE {
                    g.topics.extend(offset_fetch_group_topics_refused(denied.topics.iter().flatten(), TOPIC_REFUSED));
                }
            }
        }
        response
    }
}

/// The error message of a refusal, where the version has one.
fn named(code: i16, message: bool) -> Option<StrBytes> {
    message.then(|| StrBytes::from_string(format!("{} ({code})", codes::name(code))))
}

/// `request` answered with `code` on every item it names.
fn refusal(request: &Request, code: i16) -> Result<Bytes, DecodeError> {
    let (key, v, id) = (request.key, request.header.request_api_version, request.header.correlation_id);
    match &request.body {
        Body::Produce(r) => frame(key, v, id, &produce_refused(r, code)),
        Body::Fetch(r) => frame(key, v, id, &fetch_refused(r, code)),
        Body::ListOffsets(r) => frame(key, v, id, &list_offsets_refused(r, code)),
        Body::CreateTopics(r) => frame(key, v, id, &create_topics_refused(r, code, v)),
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
        Body::OffsetCommit(r) => frame(key, v, id, &offset_commit_refused(r, code)),
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
                let topics = offset_fetch_topics_refused(r.topics.iter().flatten(), code);
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
        Body::DeleteTopics(r) => frame(key, v, id, &delete_topics_refused(r, code, v)),
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
        Body::DeleteRecords(r) => frame(key, v, id, &delete_records_refused(r, code)),
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
        Body::AlterUserScramCredentials(r) => frame(key, v, id, &scram_admin::alter_refused(r, code)),
        Body::DescribeUserScramCredentials(_) => frame(key, v, id, &scram_admin::describe_refused(code)),
        Body::AlterClientQuotas(r) => frame(key, v, id, &client_quotas::alter_refused(r, code, codes::name(code))),
        Body::DescribeClientQuotas(_) => frame(key, v, id, &client_quotas::describe_refused(code, codes::name(code))),
        Body::Metadata(_)
        | Body::ListGroups(_)
        | Body::ListTransactions(_)
        | Body::ApiVersions(_)
        | Body::ApiVersionsUnsupported
        | Body::SaslHandshake(_)
        | Body::SaslAuthenticate(_) => Err(DecodeError(format!("{key:?} is never refused whole (a bug)"))),
    }
}

/// Produce answered `code` on every topic (partition) it names.
fn produce_refused(r: &ProduceRequest, code: i16) -> ProduceResponse {
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
            produce_response::TopicProduceResponse::default().with_name(t.name.clone()).with_partition_responses(parts)
        })
        .collect();
    ProduceResponse::default().with_responses(topics)
}

/// Fetch answered `code` on every topic (partition) it names.
fn fetch_refused(r: &FetchRequest, code: i16) -> FetchResponse {
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
    FetchResponse::default().with_responses(topics)
}

/// ListOffsets answered `code` on every topic (partition) it names.
fn list_offsets_refused(r: &ListOffsetsRequest, code: i16) -> ListOffsetsResponse {
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
            list_offsets_response::ListOffsetsTopicResponse::default().with_name(t.name.clone()).with_partitions(parts)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

/// CreateTopics answered `code` on every topic (partition) it names.
fn create_topics_refused(r: &CreateTopicsRequest, code: i16, v: i16) -> CreateTopicsResponse {
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
    CreateTopicsResponse::default().with_topics(topics)
}

/// OffsetCommit answered `code` on every topic (partition) it names.
fn offset_commit_refused(r: &OffsetCommitRequest, code: i16) -> OffsetCommitResponse {
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
    OffsetCommitResponse::default().with_topics(topics)
}

/// DeleteTopics answered `code` on every topic (partition) it names.
fn delete_topics_refused(r: &DeleteTopicsRequest, code: i16, v: i16) -> DeleteTopicsResponse {
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
    DeleteTopicsResponse::default().with_responses(results)
}

/// OffsetFetch's `topics` answered `code` on every partition they name.
fn offset_fetch_group_topics_refused<'a>(
    topics: impl Iterator<Item = &'a offset_fetch_request::OffsetFetchRequestTopics>,
    code: i16,
) -> Vec<offset_fetch_response::OffsetFetchResponseTopics> {
    topics
        .map(|t| {
            let parts = t
                .partition_indexes
                .iter()
                .map(|&p| {
                    offset_fetch_response::OffsetFetchResponsePartitions::default()
                        .with_partition_index(p)
                        .with_committed_offset(-1)
                        .with_committed_leader_epoch(-1)
                        .with_error_code(code)
                })
                .collect();
            offset_fetch_response::OffsetFetchResponseTopics::default().with_name(t.name.clone()).with_partitions(parts)
        })
        .collect()
}

fn offset_fetch_topics_refused<'a>(
    topics: impl Iterator<Item = &'a offset_fetch_request::OffsetFetchRequestTopic>,
    code: i16,
) -> Vec<offset_fetch_response::OffsetFetchResponseTopic> {
    topics
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
            offset_fetch_response::OffsetFetchResponseTopic::default().with_name(t.name.clone()).with_partitions(parts)
        })
        .collect()
}

/// DeleteRecords answered `code` on every topic (partition) it names.
fn delete_records_refused(r: &DeleteRecordsRequest, code: i16) -> DeleteRecordsResponse {
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
    DeleteRecordsResponse::default().with_topics(topics)
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
