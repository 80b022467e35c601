//! ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848): the wire side of
//! `consumer_group::Coordinator`, with Kafka's request checks (INVALID_REQUEST and its
//! message for a malformed heartbeat, UNSUPPORTED_ASSIGNOR for an assignor it does not have,
//! INVALID_REGULAR_EXPRESSION for a SubscribedTopicRegex that does not compile) and topics named
//! by id (`topic_ids`). With ACLs, subscribed topic names the principal may not DESCRIBE refuse
//! the heartbeat (`acl_requests`, TOPIC_AUTHORIZATION_FAILED as KafkaApis does) and a regex
//! matches only topics it may DESCRIBE (as Kafka's TopicRegexResolver filters them).

use kafka_protocol::messages::consumer_group_describe_response::{self as describe, DescribedGroup};
use kafka_protocol::messages::consumer_group_heartbeat_response::{self as heartbeat, Assignment as WireAssignment};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::server::codes;
use crate::server::security::authorizer::{op, resource, Who};
use crate::server::state::assignors::{Assignment, ASSIGNORS};
use crate::server::state::broker::{Broker, Topics};
use crate::server::state::kip848_coordinator::{
    Heartbeat, Refusal, TopicRegex, TopicsView, JOIN_EPOCH, STATIC_LEAVE_EPOCH,
};
use crate::server::state::topic_ids;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// Kafka's checks of a heartbeat's fields (throwIfConsumerGroupHeartbeatRequestIsInvalid).
fn invalid(r: &ConsumerGroupHeartbeatRequest, version: i16) -> Option<String> {
    let empty = |f: &Option<StrBytes>| f.as_ref().is_some_and(|v| v.trim().is_empty());
    if r.group_id.trim().is_empty() {
        return Some("GroupId can't be empty.".into());
    }
    if empty(&r.instance_id) {
        return Some("InstanceId can't be empty.".into());
    }
    if empty(&r.rack_id) {
        return Some("RackId can't be empty.".into());
    }
    if r.member_id.trim().is_empty() && (version >= 1 || r.member_epoch != JOIN_EPOCH) {
        return Some("MemberId can't be empty.".into());
    }
    match r.member_epoch {
        JOIN_EPOCH if r.rebalance_timeout_ms == -1 => {
            Some("RebalanceTimeoutMs must be provided in first request.".into())
        }
        JOIN_EPOCH if !r.topic_partitions.as_ref().is_some_and(|t| t.is_empty()) => {
            Some("TopicPartitions must be empty when (re-)joining.".into())
        }
        JOIN_EPOCH if r.subscribed_topic_names.is_none() && r.subscribed_topic_regex.is_none() => {
            Some("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.".into())
        }
        STATIC_LEAVE_EPOCH if r.instance_id.is_none() => Some("InstanceId can't be null.".into()),
        e if e < STATIC_LEAVE_EPOCH => Some(format!("MemberEpoch is invalid: {e}.")),
        _ => None,
    }
}

/// A member id for a v0 join without one (v1+ clients make their own), as Kafka's Uuid prints.
fn new_member_id() -> String {
    use base64::Engine;
    let bytes = crate::coordination::users::random_bytes(16).unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        nanos.as_nanos().to_le_bytes().to_vec()
    });
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn assignment_by_id(a: &Assignment) -> Vec<heartbeat::TopicPartitions> {
    a.iter()
        .map(|(t, p)| {
            heartbeat::TopicPartitions::default()
                .with_topic_id(topic_ids::of(t))
                .with_partitions(p.iter().copied().collect())
        })
        .collect()
}

fn refuse(peer: &str, group: &str, (code, message): Refusal) -> ConsumerGroupHeartbeatResponse {
    // FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID are how members learn to rejoin: logged, as
    // Kafka's coordinator logs them, but they are refusals all the same.
    let code = codes::refused(peer, "ConsumerGroupHeartbeat", code, &format!("group {group:?}: {message}"));
    ConsumerGroupHeartbeatResponse::default().with_error_code(code).with_error_message(Some(s(message)))
}

pub fn consumer_group_heartbeat(
    broker: &Broker,
    r: ConsumerGroupHeartbeatRequest,
    version: i16,
    client_id: &str,
    peer: &str,
    who: &Who,
) -> ConsumerGroupHeartbeatResponse {
    let group = r.group_id.0.to_string();
    if let Some(message) = invalid(&r, version) {
        return refuse(peer, &group, (codes::INVALID_REQUEST, message));
    }
    if let Some(assignor) = r.server_assignor.as_deref().filter(|a| !ASSIGNORS.contains(a)) {
        let message =
            format!("ServerAssignor {assignor} is not supported. Supported assignors: {}.", ASSIGNORS.join(", "));
        return refuse(peer, &group, (codes::UNSUPPORTED_ASSIGNOR, message));
    }
    // A classic group with members is not converted (Kafka's answer with migration disabled).
    if broker.groups.describe(&group).is_some_and(|(_, _, _, members)| !members.is_empty()) {
        let message = format!("Group {group} is not a consumer group: it is a classic group with members.");
        return refuse(peer, &group, (codes::GROUP_ID_NOT_FOUND, message));
    }
    // An empty regex is none (librdkafka sends one beside its topic names), as in Kafka.
    let regex = match r.subscribed_topic_regex.as_deref() {
        None => None,
        Some("") => Some(None),
        Some(source) => match TopicRegex::new(source) {
            Ok(re) => Some(Some(re)),
            Err(message) => return refuse(peer, &group, (codes::INVALID_REGULAR_EXPRESSION, message)),
        },
    };
    let topics: Topics = match broker.topics() {
        Ok(t) => t,
        Err(e) => return refuse(peer, &group, (codes::for_error(&e), format!("cannot read the topics: {e}"))),
    };
    let by_id = topic_ids::by_id(&topics);
    // Owned partitions of topics that no longer exist are nothing the group can reassign. A
    // topic listed twice is one topic: its partitions together (a hostile list must not hide
    // a partition the member still owns, which would give it to another member too).
    let owned = r.topic_partitions.as_ref().map(|tps| {
        let mut owned = Assignment::new();
        for tp in tps {
            if let Some(name) = by_id.get(&tp.topic_id) {
                owned.entry(name.clone()).or_default().extend(tp.partitions.iter().copied());
            }
        }
        owned
    });
    let member_id = if r.member_id.is_empty() { new_member_id() } else { r.member_id.to_string() };
    let hb = Heartbeat {
        group: group.clone(),
        member_id,
        epoch: r.member_epoch,
        instance_id: r.instance_id.as_ref().map(|i| i.to_string()),
        rack_id: r.rack_id.as_ref().map(|i| i.to_string()),
        rebalance_timeout_ms: r.rebalance_timeout_ms,
        subscribed: r.subscribed_topic_names.as_ref().map(|n| n.iter().map(|t| t.0.to_string()).collect()),
        regex,
        server_assignor: r.server_assignor.as_ref().map(|a| a.to_string()),
        owned,
        client_id: client_id.to_string(),
        client_host: peer.to_string(),
    };
    let partitions: std::collections::BTreeMap<String, i32> =
        topics.iter().map(|(name, meta)| (name.clone(), meta.partitions)).collect();
    let may_describe = |t: &str| broker.acls.allows(who, op::DESCRIBE, resource::TOPIC, t);
    let view = TopicsView { partitions: &partitions, may_describe: &may_describe };
    match broker.consumer_groups.heartbeat(hb, &view) {
        Ok(answer) => ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(s(answer.member_id)))
            .with_member_epoch(answer.epoch)
            .with_heartbeat_interval_ms(answer.heartbeat_interval.as_millis() as i32)
            .with_assignment(
                answer.assignment.map(|a| WireAssignment::default().with_topic_partitions(assignment_by_id(&a))),
            ),
        Err(refusal) => refuse(peer, &group, refusal),
    }
}

fn assignment_described(a: &Assignment) -> describe::Assignment {
    let topics = a
        .iter()
        .map(|(t, p)| {
            describe::TopicPartitions::default()
                .with_topic_id(topic_ids::of(t))
                .with_topic_name(TopicName(s(t.clone())))
                .with_partitions(p.iter().copied().collect())
        })
        .collect();
    describe::Assignment::default().with_topic_partitions(topics)
}

pub fn consumer_group_describe(
    broker: &Broker,
    r: ConsumerGroupDescribeRequest,
    peer: &str,
) -> ConsumerGroupDescribeResponse {
    let groups = r
        .group_ids
        .iter()
        .map(|g| {
            let described = DescribedGroup::default().with_group_id(g.clone());
            let Some(d) = broker.consumer_groups.describe(g) else {
                let message = if broker.groups.describe(g).is_some() {
                    format!("Group {} is not a consumer group.", g.as_str())
                } else {
                    format!("Group {} not found.", g.as_str())
                };
                let code = codes::refused(peer, "ConsumerGroupDescribe", codes::GROUP_ID_NOT_FOUND, &message);
                return described.with_error_code(code).with_error_message(Some(s(message)));
            };
            let members = d
                .members
                .into_iter()
                .map(|m| {
                    describe::Member::default()
                        .with_member_id(s(m.member_id))
                        .with_instance_id(m.instance_id.map(s))
                        .with_rack_id(m.rack_id.map(s))
                        .with_member_epoch(m.epoch)
                        .with_client_id(s(m.client_id))
                        .with_client_host(s(m.client_host))
                        .with_subscribed_topic_names(m.subscribed.into_iter().map(|t| TopicName(s(t))).collect())
                        .with_subscribed_topic_regex(m.regex.map(s))
                        .with_assignment(assignment_described(&m.assignment))
                        .with_target_assignment(assignment_described(&m.target))
                        .with_member_type(1) // the consumer protocol (0 would be classic)
                })
                .collect();
            described
                .with_group_state(s(d.state))
                .with_group_epoch(d.epoch)
                .with_assignment_epoch(d.assignment_epoch)
                .with_assignor_name(s(d.assignor))
                .with_members(members)
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}

/// A consumer-protocol group as DescribeGroups shows it (Kafka's ConsumerGroup.asDescribedGroup):
/// protocol type "consumer", the assignor as the protocol, each member's subscription and
/// assignment in the classic consumer protocol's encoding.
pub fn as_described_group(
    described: kafka_protocol::messages::describe_groups_response::DescribedGroup,
    d: crate::server::state::kip848_coordinator::Described,
) -> kafka_protocol::messages::describe_groups_response::DescribedGroup {
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedTopic;
    use kafka_protocol::messages::describe_groups_response::DescribedGroupMember;
    let members = d
        .members
        .into_iter()
        .map(|m| {
            let subscription = ConsumerProtocolSubscription::default()
                .with_topics(m.subscribed.iter().map(|t| s(t.clone())).collect());
            let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
                m.assignment
                    .iter()
                    .map(|(t, p)| {
                        AssignedTopic::default()
                            .with_topic(TopicName(s(t.clone())))
                            .with_partitions(p.iter().copied().collect())
                    })
                    .collect(),
            );
            DescribedGroupMember::default()
                .with_member_id(s(m.member_id))
                .with_group_instance_id(m.instance_id.map(s))
                .with_client_id(s(m.client_id))
                .with_client_host(s(m.client_host))
                .with_member_metadata(versioned(&subscription))
                .with_member_assignment(versioned(&assignment))
        })
        .collect();
    described
        .with_group_state(s(d.state))
        .with_protocol_type(s("consumer"))
        .with_protocol_data(s(d.assignor))
        .with_members(members)
}

/// A classic consumer protocol message as ConsumerProtocol serializes it: its version (the
/// latest, 3), then the message.
fn versioned<T: kafka_protocol::protocol::Encodable>(message: &T) -> bytes::Bytes {
    const VERSION: i16 = 3;
    let mut buf = bytes::BytesMut::new();
    buf.extend_from_slice(&VERSION.to_be_bytes());
    match message.encode(&mut buf, VERSION) {
        Ok(()) => buf.freeze(),
        Err(_) => bytes::Bytes::new(),
    }
}
