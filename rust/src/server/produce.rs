//! Produce: each partition's record batches go to `Log::append_produce`, which checks
//! CRC and structure, checks idempotent producers' sequences (a retried batch is answered
//! with its original base offset and not written again), assigns offsets and stores the
//! batches as sent (every codec, no recompression: Kafka's `compression.type=producer`). acks=0 gets no response;
//! acks=1 answers once the batches are in the log, acks=-1 after `durable` (on disk, or in the
//! page cache under `--acks-all=page-cache`).

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;

use super::broker::{lock_log, Broker};
use super::codes;
use super::durable::{self, Pending};
use crate::log::Produced;
use crate::producer_state::Refusal;
use crate::record::TimestampType;

/// Byte offset of maxTimestamp in a v2 batch header (Kafka's DefaultRecordBatch layout).
const MAX_TIMESTAMP_OFFSET: usize = 35;

struct Appended {
    base_offset: i64,
    log_append_time: i64,
    log_start_offset: i64,
    /// What acks=all still waits for (`durable::after_append`).
    durable: Option<Pending>,
}

fn append(
    broker: &Broker,
    topic: &str,
    partition: i32,
    records: Option<&[u8]>,
    acks: i16,
) -> Result<Appended, (i16, String)> {
    let log = match broker.partition(topic, partition) {
        Ok(Some(log)) => log,
        Ok(None) => {
            return Err((codes::UNKNOWN_TOPIC_OR_PARTITION, format!("this server does not host {topic}-{partition}")))
        }
        Err(e) => return Err((codes::for_error(&e), e.to_string())),
    };
    if topic == super::offsets::OFFSETS_TOPIC {
        return Err((
            codes::INVALID_TOPIC_EXCEPTION,
            format!("{topic} is internal: clients commit offsets with OffsetCommit"),
        ));
    }
    let records = records.ok_or((codes::CORRUPT_MESSAGE, "the partition's records are null".to_string()))?;
    let mut log = match lock_log(&log) {
        Ok(log) => log,
        Err(e) => {
            broker.forget_partition(topic, partition);
            return Err((codes::for_error(&e), e.to_string()));
        }
    };
    // A panic here (a bug) leaves the log locked half way through a request.
    if let Err(e) = crate::failpoint::hit("server.produce") {
        return Err((codes::KAFKA_STORAGE_ERROR, e.to_string()));
    }
    let outcome = log.append_produce(records);
    // acks=all: what the answer waits for, taken while the log is still locked (`durable`).
    let since = match &outcome {
        Ok(Produced::Appended(first, _)) => Some(*first),
        Ok(Produced::Duplicate(batch)) => Some(batch.first_offset()),
        _ => None,
    };
    let durable = match since.map(|since| durable::after_append(broker, &mut log, topic, partition, acks, since)) {
        Some(Err(e)) => return Err((codes::for_error(&e), e.to_string())),
        Some(Ok(pending)) => pending,
        None => None,
    };
    match outcome {
        Ok(Produced::Duplicate(batch)) => {
            // Kafka answers a retry with the original batch's offset (and, for LogAppendTime,
            // the time it was appended).
            let log_append_time =
                if log.config().timestamp_type == TimestampType::LogAppendTime { batch.timestamp } else { -1 };
            let log_start_offset = log.start_offset();
            Ok(Appended { base_offset: batch.first_offset(), log_append_time, log_start_offset, durable })
        }
        Ok(Produced::Refused(refusal)) => Err(match refusal {
            Refusal::InvalidProducerEpoch(m) => (codes::INVALID_PRODUCER_EPOCH, m),
            Refusal::OutOfOrderSequence(m) => (codes::OUT_OF_ORDER_SEQUENCE_NUMBER, m),
        }),
        Ok(Produced::Appended(base_offset, _)) => {
            let mut log_append_time = -1;
            if log.config().timestamp_type == TimestampType::LogAppendTime {
                // The stamp the engine wrote into the first batch's maxTimestamp.
                if let Ok(slice) = log.read(base_offset, 1) {
                    let b = slice.bytes();
                    if b.len() >= MAX_TIMESTAMP_OFFSET + 8 {
                        log_append_time =
                            i64::from_be_bytes(b[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].try_into().unwrap());
                    }
                }
            }
            Ok(Appended { base_offset, log_append_time, log_start_offset: log.start_offset(), durable })
        }
        Err(e) => {
            if codes::needs_reopen(&e) {
                drop(log);
                broker.forget_partition(topic, partition);
            }
            Err((codes::for_error(&e), e.to_string()))
        }
    }
}

/// The response, or None for acks=0.
pub async fn produce(broker: &Broker, request: ProduceRequest, version: i16) -> Option<ProduceResponse> {
    let valid_acks = matches!(request.acks, -1..=1);
    let mut appended_any = false;
    let mut pending = Vec::new();
    let mut responses = Vec::with_capacity(request.topic_data.len().min(1024));
    for topic in &request.topic_data {
        let name = topic.name.0.to_string();
        let mut partitions = Vec::with_capacity(topic.partition_data.len().min(1024));
        for p in &topic.partition_data {
            let outcome = if valid_acks {
                append(broker, &name, p.index, p.records.as_deref(), request.acks)
            } else {
                Err((codes::INVALID_REQUIRED_ACKS, format!("acks must be -1, 0 or 1, not {}", request.acks)))
            };
            let mut resp = PartitionProduceResponse::default().with_index(p.index);
            match outcome {
                Ok(a) => {
                    appended_any = true;
                    if let Some(d) = a.durable {
                        pending.push(((responses.len(), partitions.len()), d));
                    }
                    resp = resp.with_base_offset(a.base_offset).with_log_append_time_ms(a.log_append_time);
                    if version >= 5 {
                        resp = resp.with_log_start_offset(a.log_start_offset);
                    }
                }
                Err((code, message)) => {
                    resp = resp.with_error_code(code).with_base_offset(-1).with_log_append_time_ms(-1);
                    if version >= 8 {
                        resp = resp.with_error_message(Some(StrBytes::from_string(message)));
                    }
                }
            }
            partitions.push(resp);
        }
        responses
            .push(TopicProduceResponse::default().with_name(topic.name.clone()).with_partition_responses(partitions));
    }
    if appended_any {
        broker.announce_append();
    }
    durable::settle(broker, pending, &mut responses, request.timeout_ms, version).await;
    (request.acks != 0).then(|| ProduceResponse::default().with_responses(responses))
}
