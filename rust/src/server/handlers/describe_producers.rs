//! DescribeProducers (KIP-664, `kafka-transactions.sh describe-producers`, Admin's
//! `describeProducers`): each partition's active producers from its producer state
//! (`crate::storage::producer_state`, what the idempotence and transaction checks use): producer id,
//! epoch, last sequence, last timestamp, the coordinator epoch of its last marker and the first
//! offset of its open transaction (-1: none), which is what holds the last stable offset back.
//! The state is read as the partition's writer (under its append lock, which an embedded
//! producer may hold: waited for up to `waits::LOCK_WAIT`, off the request workers).

use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use kafka_protocol::protocol::StrBytes;

use crate::server::codes;
use crate::server::state::broker::{append_blocking, Broker};
use crate::storage::error::Result;

/// One partition's producers.
fn producers(broker: &Broker, topic: &str, partition: i32) -> Result<Option<Vec<ProducerState>>> {
    let Some(log) = broker.partition_to_write(topic, partition)? else { return Ok(None) };
    let described = append_blocking(&log, |log| {
        let state = log.producer_state()?;
        Ok(state
            .summaries()
            .into_iter()
            .map(|p| {
                ProducerState::default()
                    .with_producer_id(ProducerId(p.producer_id))
                    .with_producer_epoch(p.epoch as i32)
                    .with_last_sequence(p.last_sequence)
                    .with_last_timestamp(p.last_timestamp)
                    .with_coordinator_epoch(p.coordinator_epoch)
                    .with_current_txn_start_offset(p.current_txn_first_offset.unwrap_or(-1))
            })
            .collect())
    });
    if let Err(e) = &described {
        if codes::needs_reopen(e) {
            broker.forget_partition(topic, partition);
        }
    }
    described.map(Some)
}

pub fn describe_producers(broker: &Broker, request: DescribeProducersRequest, peer: &str) -> DescribeProducersResponse {
    let mut refusals = codes::Refusals::new("partition");
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let name = t.name.0.as_str();
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&p| {
                    let answer = PartitionResponse::default().with_partition_index(p);
                    let (code, message) = match producers(broker, name, p) {
                        Ok(Some(active)) => return answer.with_active_producers(active),
                        Ok(None) => (codes::UNKNOWN_TOPIC_OR_PARTITION, "this server does not host it".to_string()),
                        Err(e) => (codes::for_error(&e), e.to_string()),
                    };
                    let code = refusals.add(code, format_args!("{name}-{p}"), || message.clone());
                    answer.with_error_code(code).with_error_message(Some(StrBytes::from_string(message)))
                })
                .collect();
            TopicResponse::default().with_name(t.name.clone()).with_partitions(partitions)
        })
        .collect();
    refusals.log(peer, "DescribeProducers");
    DescribeProducersResponse::default().with_topics(topics)
}
