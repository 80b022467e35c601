//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups and ListGroups: the wire
//! side of `group::Coordinator`.

use std::time::Duration;

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::server::codes;
use crate::server::state::broker::Broker;
use crate::server::state::group::JoinRequest;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// A request's `group_instance_id` (absent before its version has it, null for a dynamic member).
pub fn instance_id(field: &Option<StrBytes>) -> Option<String> {
    field.as_ref().map(|i| i.to_string())
}

/// `code`, logged as a refusal unless it is part of the group protocol's normal flow:
/// REBALANCE_IN_PROGRESS (the member rejoins), and the coordinator's retriable
/// COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE (`group.rs` logs why it gave them).
fn answered(peer: &str, api: &str, group: &str, member_id: &str, code: i16) -> i16 {
    match code {
        codes::NONE
        | codes::REBALANCE_IN_PROGRESS
        | codes::COORDINATOR_LOAD_IN_PROGRESS
        | codes::COORDINATOR_NOT_AVAILABLE => code,
        _ => codes::refused(peer, api, code, &format!("group {group:?}, member {member_id:?}")),
    }
}

pub async fn join_group(
    broker: &Broker,
    r: JoinGroupRequest,
    version: i16,
    client_id: &str,
    host: &str,
) -> JoinGroupResponse {
    let rebalance = if version >= 1 { r.rebalance_timeout_ms } else { r.session_timeout_ms };
    // Kafka would take a classic member into a consumer-protocol group (a mixed group); this
    // server does not: Kafka's answer to a group of another type.
    if broker.consumer_groups.has_members(&r.group_id.0) {
        let reason = format!("group {:?} is a consumer-protocol (KIP-848) group with members", r.group_id.0.as_str());
        let code = codes::refused(host, "JoinGroup", codes::INCONSISTENT_GROUP_PROTOCOL, &reason);
        let resp =
            JoinGroupResponse::default().with_error_code(code).with_generation_id(-1).with_member_id(r.member_id);
        return if version >= 7 { resp } else { resp.with_protocol_name(Some(StrBytes::default())) };
    }
    broker.consumer_groups.forget_if_empty(&r.group_id.0);
    let result = broker
        .groups
        .join(JoinRequest {
            group: r.group_id.0.to_string(),
            member_id: r.member_id.to_string(),
            client_id: client_id.to_string(),
            client_host: host.to_string(),
            session_timeout: Duration::from_millis(r.session_timeout_ms.max(0) as u64),
            rebalance_timeout: Duration::from_millis(rebalance.max(0) as u64),
            protocol_type: r.protocol_type.to_string(),
            protocols: r.protocols.iter().map(|p| (p.name.to_string(), p.metadata.clone())).collect(),
            instance_id: instance_id(&r.group_instance_id),
        })
        .await;
    let members = result
        .members
        .into_iter()
        .map(|(id, instance, meta)| {
            JoinGroupResponseMember::default()
                .with_member_id(s(id))
                .with_group_instance_id(instance.map(s))
                .with_metadata(meta)
        })
        .collect();
    let error = answered(host, "JoinGroup", &r.group_id.0, &r.member_id, result.error);
    let mut resp = JoinGroupResponse::default()
        .with_error_code(error)
        .with_generation_id(result.generation)
        .with_leader(s(result.leader))
        .with_member_id(s(result.member_id))
        .with_members(members);
    resp = if version >= 7 {
        resp.with_protocol_type(Some(s(result.protocol_type))).with_protocol_name(result.protocol.map(s))
    } else {
        resp.with_protocol_name(Some(s(result.protocol.unwrap_or_default())))
    };
    resp
}

pub async fn sync_group(broker: &Broker, r: SyncGroupRequest, version: i16, peer: &str) -> SyncGroupResponse {
    let assignments = r.assignments.iter().map(|a| (a.member_id.to_string(), a.assignment.clone())).collect();
    let (code, assignment, protocol_type, protocol) = broker
        .groups
        .sync(&r.group_id.0, &r.member_id, instance_id(&r.group_instance_id).as_deref(), r.generation_id, assignments)
        .await;
    let code = answered(peer, "SyncGroup", &r.group_id.0, &r.member_id, code);
    let mut resp = SyncGroupResponse::default().with_error_code(code).with_assignment(assignment);
    if version >= 5 && code == codes::NONE {
        resp = resp.with_protocol_type(Some(s(protocol_type))).with_protocol_name(protocol.map(s));
    }
    resp
}

pub fn heartbeat(broker: &Broker, r: HeartbeatRequest, peer: &str) -> HeartbeatResponse {
    let instance = instance_id(&r.group_instance_id);
    let code = broker.groups.heartbeat(&r.group_id.0, &r.member_id, instance.as_deref(), r.generation_id);
    HeartbeatResponse::default().with_error_code(answered(peer, "Heartbeat", &r.group_id.0, &r.member_id, code))
}

pub fn leave_group(broker: &Broker, r: LeaveGroupRequest, version: i16, peer: &str) -> LeaveGroupResponse {
    let group = r.group_id.0.to_string();
    if version < 3 {
        let code = answered(peer, "LeaveGroup", &group, &r.member_id, broker.groups.leave(&group, &r.member_id, None));
        return LeaveGroupResponse::default().with_error_code(code);
    }
    // Several members in one request: one line for those refused.
    let mut refusals = codes::Refusals::new("member");
    let members = r
        .members
        .iter()
        .map(|m| {
            let instance = instance_id(&m.group_instance_id);
            let code = broker.groups.leave(&group, &m.member_id, instance.as_deref());
            let why = || format!("group {group:?}");
            let instance_text = instance.as_ref().map(|i| format!(" (instance id {i:?})")).unwrap_or_default();
            refusals.add(code, format_args!("{:?}{instance_text}", m.member_id.as_str()), why);
            MemberResponse::default()
                .with_member_id(m.member_id.clone())
                .with_group_instance_id(m.group_instance_id.clone())
                .with_error_code(code)
        })
        .collect();
    refusals.log(peer, "LeaveGroup");
    LeaveGroupResponse::default().with_members(members)
}

pub fn describe_groups(broker: &Broker, r: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let groups = r
        .groups
        .iter()
        .map(|g| {
            let described = DescribedGroup::default().with_group_id(g.clone());
            if let Some(d) = broker.consumer_groups.describe(&g.0) {
                return super::consumer_group_api::as_described_group(described, d);
            }
            match broker.groups.describe(&g.0) {
                Some((state, protocol_type, protocol, members)) => {
                    let members = members
                        .into_iter()
                        .map(|m| {
                            DescribedGroupMember::default()
                                .with_member_id(s(m.member_id))
                                .with_group_instance_id(m.instance_id.map(s))
                                .with_client_id(s(m.client_id))
                                .with_client_host(s(m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment)
                        })
                        .collect();
                    described
                        .with_group_state(s(state))
                        .with_protocol_type(s(protocol_type))
                        .with_protocol_data(s(protocol.unwrap_or_default()))
                        .with_members(members)
                }
                None => match super::groups_admin::uncoordinated_group(broker, &g.0, None) {
                    Some((state, protocol_type)) => {
                        described.with_group_state(s(state)).with_protocol_type(s(protocol_type))
                    }
                    // Kafka describes an unknown group as Dead with no members.
                    None => described.with_group_state(s("Dead")),
                },
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

pub fn list_groups(broker: &Broker, r: ListGroupsRequest, version: i16) -> ListGroupsResponse {
    // (group, protocol type, state, type): classic groups, consumer-protocol groups, then those
    // only known by their committed offsets (classic, as Kafka lists them after a restart).
    let mut listed: Vec<(String, String, String, &str)> =
        broker.groups.list().into_iter().map(|(id, p, state)| (id, p, state, "classic")).collect();
    let consumer = broker.consumer_groups.list();
    listed.retain(|(id, ..)| !consumer.iter().any(|(c, _)| c == id));
    listed.extend(consumer.into_iter().map(|(id, state)| (id, "consumer".to_string(), state.to_string(), "consumer")));
    let known: Vec<String> = listed.iter().map(|(id, ..)| id.clone()).collect();
    listed.extend(
        super::groups_admin::uncoordinated_groups(broker, &known).into_iter().map(|(id, p, st)| (id, p, st, "classic")),
    );
    // Kafka matches states and types case-insensitively (ListGroups v4's and v5's filters).
    let wanted =
        |filter: &[StrBytes], value: &str| filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value));
    let groups = listed
        .into_iter()
        .filter(|(_, _, state, kind)| wanted(&r.states_filter, state) && wanted(&r.types_filter, kind))
        .map(|(id, protocol_type, state, kind)| {
            let mut g = ListedGroup::default().with_group_id(GroupId(s(id))).with_protocol_type(s(protocol_type));
            if version >= 4 {
                g = g.with_group_state(s(state));
            }
            if version >= 5 {
                g = g.with_group_type(s(kind));
            }
            g
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}
