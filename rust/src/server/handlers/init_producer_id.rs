//! InitProducerId. Without a transactional id (idempotent producers): a new producer id, never
//! handed out before in this data directory (`producer_ids.rs`), at epoch 0; as Kafka's broker
//! does, every call gets a fresh id, whatever id and epoch the request carries (a producer
//! re-initialising after an error starts clean). With one: the transaction coordinator's answer
//! (`txn_api::init_producer_id`), which fences the id's older producers.

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::txn_api;
use crate::server::codes;
use crate::server::state::broker::{lock, Broker};

pub fn init_producer_id(
    broker: &Broker,
    request: InitProducerIdRequest,
    version: i16,
    peer: &str,
) -> InitProducerIdResponse {
    if let Some(id) = request.transactional_id.as_ref() {
        return txn_api::init_producer_id(broker, id.0.as_str(), &request, version, peer);
    }
    let refuse = |code| {
        InitProducerIdResponse::default().with_error_code(code).with_producer_id(ProducerId(-1)).with_producer_epoch(-1)
    };
    let allocated = lock(&broker.producer_ids).allocate();
    match allocated {
        Ok(id) => InitProducerIdResponse::default().with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(e) => {
            ::log::error!(target: crate::LOG_TARGET, "cannot allocate a producer id: {e}");
            refuse(codes::refused(peer, "InitProducerId", codes::for_error(&e), "cannot allocate a producer id"))
        }
    }
}
