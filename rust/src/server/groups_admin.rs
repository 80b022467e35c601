//! DeleteGroups: a group without active members (network or embedded) loses its committed
//! offsets (tombstones in `__consumer_offsets`) and its embedded state folder, as
//! `Admin.delete_group` does; NON_EMPTY_GROUP while members are active, GROUP_ID_NOT_FOUND
//! for a group that has neither members, a folder nor committed offsets.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use super::broker::Broker;
use super::codes;
use super::group_owner::{embedded_members, remove_group_folder};

fn delete_group(broker: &Broker, group: &str) -> Result<(), i16> {
    if group.is_empty() {
        return Err(codes::INVALID_GROUP_ID);
    }
    if embedded_members(broker.dir.path(), group) {
        return Err(codes::NON_EMPTY_GROUP);
    }
    let known = broker.groups.delete(group)?;
    let tombstoned = broker.offsets.delete(broker, group).map_err(|e| {
        ::log::warn!(target: "kafkalite::server", "cannot delete the offsets of group {group:?}: {e}");
        codes::for_error(&e)
    })?;
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

pub fn delete_groups(broker: &Broker, request: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let results = request
        .groups_names
        .into_iter()
        .map(|g| {
            let result = DeletableGroupResult::default().with_group_id(g.clone());
            match delete_group(broker, &g.0) {
                Ok(()) => result,
                Err(code) => result.with_error_code(code),
            }
        })
        .collect();
    DeleteGroupsResponse::default().with_results(results)
}
