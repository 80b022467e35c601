//! FindCoordinator: this one broker (node 0) coordinates every consumer group. Transaction
//! coordinators are not served (transactions are not part of kafkalite serve).

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::broker::Broker;
use super::codes;
use super::metadata::NODE_ID;

const GROUP: i8 = 0;

pub fn find_coordinator(broker: &Broker, request: FindCoordinatorRequest, version: i16) -> FindCoordinatorResponse {
    let (host, port) = broker.advertised();
    let answer = |key: &StrBytes| -> (i16, Option<&'static str>) {
        if request.key_type == GROUP && !key.is_empty() {
            (codes::NONE, None)
        } else if request.key_type == GROUP {
            (codes::INVALID_GROUP_ID, Some("the group id is empty"))
        } else {
            (codes::COORDINATOR_NOT_AVAILABLE, Some("kafkalite serve has no transaction coordinator"))
        }
    };
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .iter()
            .map(|key| {
                let (code, message) = answer(key);
                let c = Coordinator::default().with_key(key.clone()).with_error_code(code);
                if code == codes::NONE {
                    c.with_node_id(BrokerId(NODE_ID)).with_host(StrBytes::from_string(host.clone())).with_port(port)
                } else {
                    c.with_node_id(BrokerId(-1))
                        .with_port(-1)
                        .with_error_message(message.map(StrBytes::from_static_str))
                }
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let (code, message) = answer(&request.key);
    let mut response = FindCoordinatorResponse::default().with_error_code(code);
    if code == codes::NONE {
        response = response.with_node_id(BrokerId(NODE_ID)).with_host(StrBytes::from_string(host)).with_port(port);
    } else {
        response = response.with_node_id(BrokerId(-1)).with_port(-1);
        if version >= 1 {
            response = response.with_error_message(message.map(StrBytes::from_static_str));
        }
    }
    response
}
