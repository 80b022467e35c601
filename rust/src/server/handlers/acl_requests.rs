//! Which operation on which resource each API needs (Kafka's `KafkaApis` checks, in one
//! table: `needs`), checked before the handler runs, with one WARNING line naming the principal,
//! the client's address, the operation and the resource for a refusal. The decision itself is
//! `authorizer`'s.
//!
//! A request's whole-request needs (a group, a transactional id, the cluster) refuse it whole:
//! every item gets the code of the first refusal. The topics of Produce, Fetch, ListOffsets,
//! CreateTopics, DeleteTopics, DeleteRecords, OffsetCommit and OffsetFetch are authorized one by
//! one, as Kafka does: the refused ones are taken out of the request (`split`), the handler
//! serves the others, and the refused ones are added to its response with
//! TOPIC_AUTHORIZATION_FAILED (`Refused`).
//!
//! Beside it: `acl_requests/refusals.rs`, the answer of a refused request (one builder per API,
//! for a whole refusal and for the topics taken out alike), and `acl_requests/listing.rs`, the
//! listings filtered instead of refused (Metadata, ListGroups, ListTransactions).

mod listing;
mod refusals;

use bytes::Bytes;
use kafka_protocol::messages::*;

use crate::server::codes;
use crate::server::request::{Body, DecodeError, Request};
use crate::server::security::authorizer::{op, operation_name, resource, resource_name, Who, CLUSTER_NAME};
use crate::server::state::broker::Broker;
use refusals::{refusal, Refused};

pub use listing::Listing;

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
        // v4+ batches keys, each refused on its own (`Listing::coordinator_refusal`).
        Body::FindCoordinator(_) if version >= 4 => Vec::new(),
        Body::FindCoordinator(r) if r.key_type == 1 => vec![txn(op::DESCRIBE, &r.key)],
        Body::FindCoordinator(r) => vec![group(op::DESCRIBE, &r.key)],
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
    Ok(Verdict::Serve(Refused(Some((denied, v)))))
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
