//! DescribeCluster (one broker, node 0, its own controller) and the cluster id every response
//! that carries one reports (Metadata too).

use std::path::Path;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use super::metadata::NODE_ID;
use crate::server::codes;
use crate::server::state::broker::Broker;
use crate::storage::files::KAFKA_META_PROPERTIES;

/// The cluster id of a data directory that has no Kafka `meta.properties`.
pub const DEFAULT_CLUSTER_ID: &str = "kafkalite";

/// The data directory's cluster id: a Kafka broker's log directory keeps it in
/// `meta.properties` (`cluster.id=...`), so clients see the same id as from that broker;
/// any other data directory is the cluster "kafkalite".
pub fn cluster_id(data_dir: &Path) -> String {
    let text = std::fs::read_to_string(data_dir.join(KAFKA_META_PROPERTIES)).unwrap_or_default();
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("cluster.id="))
        .map(str::trim)
        .find(|id| !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_graphic()))
        .map_or_else(|| DEFAULT_CLUSTER_ID.to_string(), str::to_string)
}

pub fn describe_cluster(broker: &Broker, request: DescribeClusterRequest) -> DescribeClusterResponse {
    let response = DescribeClusterResponse::default().with_endpoint_type(request.endpoint_type);
    // Endpoint type 1 is brokers (the default); 2 asks for controllers, which KRaft brokers
    // refuse with UNSUPPORTED_ENDPOINT_TYPE.
    if request.endpoint_type != 1 {
        return response.with_error_code(codes::UNSUPPORTED_ENDPOINT_TYPE).with_error_message(Some(
            StrBytes::from_static_str("kafkalite answers DescribeCluster for brokers only (endpoint type 1)"),
        ));
    }
    let (host, port) = broker.advertised();
    response
        .with_cluster_id(StrBytes::from_string(cluster_id(broker.dir.path())))
        .with_controller_id(BrokerId(NODE_ID))
        .with_brokers(vec![DescribeClusterBroker::default()
            .with_broker_id(BrokerId(NODE_ID))
            .with_host(StrBytes::from_string(host))
            .with_port(port)])
        // Kafka's "not requested" value; kafkalite has no ACLs.
        .with_cluster_authorized_operations(i32::MIN)
}
