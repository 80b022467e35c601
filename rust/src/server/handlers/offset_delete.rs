//! OffsetDelete (`kafka-consumer-groups --delete-offsets`, `Admin.deleteConsumerGroupOffsets`):
//! tombstones for some of a group's committed offsets, with Kafka's rules (GroupCoordinator
//! `deleteOffsets`): GROUP_ID_NOT_FOUND for a group that does not exist, and per partition
//! GROUP_SUBSCRIBED_TO_TOPIC while a live member of the group (network or embedded) subscribes
//! to its topic, so offsets are never pulled from under a consumer.

use std::collections::BTreeSet;
use std::path::Path;

use bytes::Buf;
use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use serde_json::Value;

use crate::server::codes;
use crate::server::state::broker::Broker;
use crate::server::state::group_owner::embedded_members;
use crate::storage::files::{id_file_name, GROUPS_DIR};

const API: &str = "OffsetDelete";

/// What the live members of a group subscribe to.
enum Subscribed {
    Topics(BTreeSet<String>),
    /// A member whose subscription cannot be read: every topic counts as subscribed.
    Unknown,
}

impl Subscribed {
    fn contains(&self, topic: &str) -> bool {
        match self {
            Subscribed::Topics(t) => t.contains(topic),
            Subscribed::Unknown => true,
        }
    }
}

/// The topics of a ConsumerProtocolSubscription (any version: they all start with the version,
/// then the topics as an array of strings; the format is not flexible).
fn subscription_topics(mut buf: &[u8]) -> Option<Vec<String>> {
    if buf.remaining() < 6 {
        return None;
    }
    let _version = buf.get_i16();
    let count = buf.get_i32();
    let mut topics = Vec::new();
    for _ in 0..count.max(0) {
        if buf.remaining() < 2 {
            return None;
        }
        let len = usize::try_from(buf.get_i16()).ok()?;
        if buf.remaining() < len {
            return None;
        }
        topics.push(String::from_utf8(buf[..len].to_vec()).ok()?);
        buf.advance(len);
    }
    Some(topics)
}

/// The topics the embedded members of a group subscribe to, from the group's state file
/// (group.py's `members[id].topics`).
fn embedded_subscriptions(data_dir: &Path, group: &str) -> Subscribed {
    let Ok(name) = id_file_name(group, "group id") else { return Subscribed::Unknown };
    let path = data_dir.join(GROUPS_DIR).join(name).join("state.json");
    let Some(state) = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()) else {
        return Subscribed::Unknown;
    };
    let Some(members) = state.get("members").and_then(Value::as_object) else { return Subscribed::Unknown };
    let mut topics = BTreeSet::new();
    for info in members.values() {
        let Some(list) = info.get("topics").and_then(Value::as_array) else { return Subscribed::Unknown };
        topics.extend(list.iter().filter_map(Value::as_str).map(str::to_string));
    }
    Subscribed::Topics(topics)
}

/// What the live members of a group subscribe to, if it has any (embedded or network).
fn members_subscriptions(broker: &Broker, group: &str) -> Option<Subscribed> {
    if embedded_members(broker.dir.path(), group) {
        return Some(embedded_subscriptions(broker.dir.path(), group));
    }
    let (_, _, _, members) = broker.groups.describe(group)?;
    if members.is_empty() {
        return None;
    }
    let mut topics = BTreeSet::new();
    for member in &members {
        match subscription_topics(&member.metadata) {
            Some(t) => topics.extend(t),
            None => return Some(Subscribed::Unknown),
        }
    }
    Some(Subscribed::Topics(topics))
}

/// What the live members of a group subscribe to; None when it has no live member. Err when the
/// group does not exist.
fn live_subscriptions(broker: &Broker, group: &str) -> Result<Option<Subscribed>, (i16, String)> {
    if let Some(subscribed) = members_subscriptions(broker, group) {
        return Ok(Some(subscribed));
    }
    match broker.groups.describe(group) {
        Some(_) => Ok(None),
        None => match broker.offsets.load(broker, group) {
            Ok(o) if !o.is_empty() => Ok(None),
            Ok(_) => Err((codes::GROUP_ID_NOT_FOUND, format!("group {group:?} does not exist"))),
            Err(e) => Err((codes::for_error(&e), format!("cannot read the offsets of group {group:?}: {e}"))),
        },
    }
}

pub fn offset_delete(broker: &Broker, request: OffsetDeleteRequest, peer: &str) -> OffsetDeleteResponse {
    let group = request.group_id.0.to_string();
    let live = if group.is_empty() {
        Err((codes::INVALID_GROUP_ID, "the group id is empty".to_string()))
    } else {
        live_subscriptions(broker, &group)
    };
    let live = match live {
        Ok(live) => live,
        Err((code, reason)) => {
            return OffsetDeleteResponse::default().with_error_code(codes::refused(peer, API, code, &reason))
        }
    };
    let subscribed = |topic: &str| live.as_ref().is_some_and(|s| s.contains(topic));
    let wanted: Vec<(String, i32)> = request
        .topics
        .iter()
        .filter(|t| !subscribed(&t.name))
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.to_string(), p.partition_index)))
        .collect();
    // Again under the offsets partition's append lock: a member may have joined (and fetched
    // the offsets) while the tombstones waited for another writer to let it go.
    let admit = || match members_subscriptions(broker, &group) {
        Some(now) if wanted.iter().any(|(topic, _)| now.contains(topic)) => {
            let reason =
                format!("a member of group {group:?} subscribed to a topic while its offsets waited to be deleted");
            Err(codes::refused(peer, API, codes::GROUP_SUBSCRIBED_TO_TOPIC, &reason))
        }
        _ => Ok(()),
    };
    let written = match broker.offsets.delete(broker, &group, Some(&wanted), admit) {
        Ok(verdict) => verdict.map(|_| ()),
        Err(e) => {
            let reason = format!("cannot delete offsets of group {group:?}: {e}");
            Err(codes::refused(peer, API, codes::for_error(&e), &reason))
        }
    };
    let refused: Vec<&str> = request.topics.iter().filter(|t| subscribed(&t.name)).map(|t| t.name.as_str()).collect();
    if !refused.is_empty() {
        let reason = format!("group {group:?} has live members subscribed to {}", refused.join(", "));
        codes::refused(peer, API, codes::GROUP_SUBSCRIBED_TO_TOPIC, &reason);
    }
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let code = if subscribed(&t.name) {
                codes::GROUP_SUBSCRIBED_TO_TOPIC
            } else {
                written.err().unwrap_or(codes::NONE)
            };
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetDeleteResponseTopic::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
