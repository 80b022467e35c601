//! FindCoordinator: this one broker (node 0) coordinates every consumer group and every
//! transactional id (key types 0 and 1), in every version, batched keys (v4+) included. The
//! transaction coordinator's state is the data directory's (`crate::coordination::transactions`), shared with
//! the embedded producers, so whichever process serves a request sees the same transactions.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::acl_requests::Listing;
use super::metadata::NODE_ID;
use crate::server::codes;
use crate::server::state::broker::Broker;

/// `CoordinatorType.GROUP`.
const GROUP: i8 = 0;
/// `CoordinatorType.TRANSACTION`.
const TRANSACTION: i8 = 1;

/// The error for one key: none, or Kafka's code and message (`KafkaApis.handleFindCoordinatorRequest`).
fn answer(key_type: i8, key: &StrBytes) -> (i16, Option<&'static str>) {
    match key_type {
        GROUP if key.is_empty() => (codes::INVALID_GROUP_ID, Some("the group id is empty")),
        // A Kafka broker answers an empty transactional id INVALID_REQUEST (non-retriable).
        TRANSACTION if key.is_empty() => (codes::INVALID_REQUEST, Some("the transactional id is empty")),
        GROUP | TRANSACTION => (codes::NONE, None),
        // Share groups (2) and anything newer: Kafka's answer to a type it does not serve.
        _ => (codes::INVALID_REQUEST, Some("unknown coordinator type")),
    }
}

/// A key answered with `code` and Kafka's `Node.noNode` (id -1, port -1).
fn no_node(c: Coordinator, code: i16) -> Coordinator {
    c.with_error_code(code).with_node_id(BrokerId(-1)).with_port(-1)
}

/// Coordinator keys (v4+) the principal may not DESCRIBE are refused one by one (`listing`).
pub fn find_coordinator(
    broker: &Broker,
    request: FindCoordinatorRequest,
    version: i16,
    peer: &str,
    listing: &Listing,
) -> FindCoordinatorResponse {
    let (host, port) = broker.advertised();
    let key_type = request.key_type;
    let refuse = |code: i16, key: &StrBytes, message: &str| {
        let reason = format!("key type {key_type}, key {:?}: {message}", key.as_str());
        codes::refused(peer, "FindCoordinator", code, &reason)
    };
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .iter()
            .map(|key| {
                let c = Coordinator::default().with_key(key.clone());
                if let Some(code) = listing.coordinator_refusal(key_type, key) {
                    return no_node(c, code);
                }
                match answer(key_type, key) {
                    (codes::NONE, _) => {
                        c.with_node_id(BrokerId(NODE_ID)).with_host(StrBytes::from_string(host.clone())).with_port(port)
                    }
                    (code, message) => no_node(c, refuse(code, key, message.unwrap_or("")))
                        .with_error_message(message.map(StrBytes::from_static_str)),
                }
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    match answer(key_type, &request.key) {
        (codes::NONE, _) => FindCoordinatorResponse::default()
            .with_node_id(BrokerId(NODE_ID))
            .with_host(StrBytes::from_string(host))
            .with_port(port),
        (code, message) => {
            let code = refuse(code, &request.key, message.unwrap_or(""));
            let response =
                FindCoordinatorResponse::default().with_error_code(code).with_node_id(BrokerId(-1)).with_port(-1);
            if version >= 1 {
                response.with_error_message(message.map(StrBytes::from_static_str))
            } else {
                response
            }
        }
    }
}
