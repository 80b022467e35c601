//! DeleteGroups: a group without active members (network or embedded) loses its committed
//! offsets (tombstones in `__consumer_offsets`) and its embedded state folder, as
//! `Admin.delete_group` does; NON_EMPTY_GROUP while members are active, GROUP_ID_NOT_FOUND
//! for a group that has neither members, a folder nor committed offsets.
//!
//! Also the groups this server's coordinator does not hold, for ListGroups and DescribeGroups:
//! groups that only have committed offsets (after a restart, or committed by an admin client or
//! the embedded side) are Empty "consumer" groups, as Kafka lists and describes them; a group
//! whose embedded `kafkalite.Consumer`s are alive is Stable.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::server::codes;
use crate::server::state::broker::Broker;
use crate::server::state::group_owner::{embedded_members, remove_group_folder};

/// Kafka's protocol type of consumer groups.
const CONSUMER: &str = "consumer";

/// (state, protocol type) of a group the coordinator does not hold: Stable while embedded
/// members are alive, Empty when it only has committed offsets; None when there is no such group.
pub fn uncoordinated_group(
    broker: &Broker,
    group: &str,
    with_offsets: Option<bool>,
) -> Option<(&'static str, &'static str)> {
    if embedded_members(broker.dir.path(), group) {
        return Some(("Stable", CONSUMER));
    }
    let committed = match with_offsets {
        Some(known) => known,
        None => broker.offsets.load(broker, group).is_ok_and(|o| !o.is_empty()),
    };
    committed.then_some(("Empty", CONSUMER))
}

/// (group, protocol type, state) of the groups with committed offsets that the coordinator does
/// not list itself (`known`).
pub fn uncoordinated_groups(broker: &Broker, known: &[String]) -> Vec<(String, String, String)> {
    let groups = broker.offsets.groups(broker).unwrap_or_else(|e| {
        ::log::warn!(target: "kafkalite::server", "cannot list the groups in __consumer_offsets: {e}");
        Default::default()
    });
    groups
        .into_iter()
        .filter(|g| !known.contains(g))
        .filter_map(|g| {
            let (state, protocol_type) = uncoordinated_group(broker, &g, Some(true))?;
            Some((g, protocol_type.to_string(), state.to_string()))
        })
        .collect()
}

fn delete_group(broker: &Broker, group: &str) -> Result<(), i16> {
    if group.is_empty() {
        return Err(codes::INVALID_GROUP_ID);
    }
    if embedded_members(broker.dir.path(), group) {
        return Err(codes::NON_EMPTY_GROUP);
    }
    let known = broker.groups.delete(group)? | broker.consumer_groups.delete(group)?;
    // Members may join while the tombstones wait for the offsets partition's append lock.
    let admit = || {
        let joined = embedded_members(broker.dir.path(), group)
            || broker.groups.describe(group).is_some_and(|(_, _, _, members)| !members.is_empty())
            || broker.consumer_groups.has_members(group);
        if joined {
            Err(codes::NON_EMPTY_GROUP)
        } else {
            Ok(())
        }
    };
    let tombstoned = broker.offsets.delete(broker, group, None, admit).map_err(|e| {
        ::log::warn!(target: "kafkalite::server", "cannot delete the offsets of group {group:?}: {e}");
        codes::for_error(&e)
    })??;
    let folder = remove_group_folder(broker.dir.path(), group).map_err(|e| {
        ::log::warn!(target: "kafkalite::server", "cannot remove the folder of group {group:?}: {e}");
        codes::KAFKA_STORAGE_ERROR
    })?;
    if known || tombstoned > 0 || folder {
        Ok(())
    } else {
        Err(codes::GROUP_ID_NOT_FOUND)
    }
}

pub fn delete_groups(broker: &Broker, request: DeleteGroupsRequest, peer: &str) -> DeleteGroupsResponse {
    let results = request
        .groups_names
        .into_iter()
        .map(|g| {
            let result = DeletableGroupResult::default().with_group_id(g.clone());
            match delete_group(broker, &g.0) {
                Ok(()) => result,
                Err(code) => {
                    let reason = format!("group {:?} cannot be deleted", g.0.as_str());
                    result.with_error_code(codes::refused(peer, "DeleteGroups", code, &reason))
                }
            }
        })
        .collect();
    DeleteGroupsResponse::default().with_results(results)
}
