//! InitProducerId for idempotent producers: a new producer id, never handed out before in this
//! data directory (`producer_ids.rs`), at epoch 0. As Kafka's broker does without a
//! transactional id, every call gets a fresh id, whatever id and epoch the request carries
//! (a producer re-initialising after an error starts clean). Transactions are not served: a
//! transactional id is answered with UNSUPPORTED_VERSION, which clients report as fatal.

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::broker::{lock, Broker};
use super::codes;

pub fn init_producer_id(broker: &Broker, request: InitProducerIdRequest, peer: &str) -> InitProducerIdResponse {
    let refuse = |code| {
        InitProducerIdResponse::default().with_error_code(code).with_producer_id(ProducerId(-1)).with_producer_epoch(-1)
    };
    if let Some(id) = request.transactional_id.as_ref() {
        let reason = format!("transactional id {:?}: kafkalite serve does not support transactions", id.0.as_str());
        return refuse(codes::refused(peer, "InitProducerId", codes::UNSUPPORTED_VERSION, &reason));
    }
    let allocated = lock(&broker.producer_ids).allocate();
    match allocated {
        Ok(id) => InitProducerIdResponse::default().with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(e) => {
            ::log::error!(target: crate::LOG_TARGET, "cannot allocate a producer id: {e}");
            refuse(codes::refused(peer, "InitProducerId", codes::for_error(&e), "cannot allocate a producer id"))
        }
    }
}
