//! DeleteRecords: moves each partition's log start offset forward (`Log::delete_records_before`,
//! what `Admin.delete_records` calls too); whole segments below it are deleted. -1 means the
//! high watermark; beyond it is OFFSET_OUT_OF_RANGE, as in Kafka.

use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::server::codes;
use crate::server::state::broker::{lock_log, Broker};
use crate::storage::datadir::{refuse_internal, TopicMeta};
use crate::storage::topic_config::effective_config;

/// Kafka's DeleteRecordsRequest.HIGH_WATERMARK.
const HIGH_WATERMARK: i64 = -1;

/// Kafka refuses DeleteRecords on a topic whose cleanup.policy lacks `delete`.
fn deletes_allowed(broker: &Broker, meta: &TopicMeta) -> bool {
    let dir = broker.dir.dir_config().unwrap_or_default();
    let policy =
        effective_config(&dir, &meta.config).get("cleanup.policy").and_then(|v| v.as_str().map(str::to_string));
    policy.is_none_or(|p| p.split(',').any(|part| part.trim() == "delete"))
}

/// The new log start offset (low watermark), or Kafka's error code.
fn delete_before(broker: &Broker, topic: &str, partition: i32, offset: i64) -> Result<i64, i16> {
    // Internal topics: INVALID_TOPIC_EXCEPTION whatever their cleanup.policy (Admin's rule too).
    refuse_internal(topic, "DeleteRecords").map_err(|e| codes::for_error(&e))?;
    let topics = broker.topics().map_err(|e| codes::for_error(&e))?;
    let Some(meta) = topics.get(topic) else { return Err(codes::UNKNOWN_TOPIC_OR_PARTITION) };
    if partition < 0 || partition >= meta.partitions {
        return Err(codes::UNKNOWN_TOPIC_OR_PARTITION);
    }
    if meta.discovered || !deletes_allowed(broker, meta) {
        return Err(codes::POLICY_VIOLATION);
    }
    let log = match broker.partition_to_write(topic, partition) {
        Ok(Some(log)) => log,
        Ok(None) => return Err(codes::UNKNOWN_TOPIC_OR_PARTITION),
        Err(e) => return Err(codes::for_error(&e)),
    };
    let result = lock_log(&log).and_then(|mut log| {
        log.follow()?;
        let target = if offset == HIGH_WATERMARK { log.end_offset() } else { offset };
        log.delete_records_before(target)
    });
    result.map_err(|e| {
        if codes::needs_reopen(&e) {
            broker.forget_partition(topic, partition);
        }
        codes::for_error(&e)
    })
}

pub fn delete_records(broker: &Broker, request: DeleteRecordsRequest, peer: &str) -> DeleteRecordsResponse {
    let mut refusals = codes::Refusals::new("partition");
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let result = DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
                    match delete_before(broker, &t.name.0, p.partition_index, p.offset) {
                        Ok(low) => result.with_low_watermark(low),
                        Err(code) => {
                            let why = || match code {
                                codes::POLICY_VIOLATION => "its cleanup.policy does not include delete".to_string(),
                                _ => String::new(),
                            };
                            refusals.add(code, format_args!("{}-{}", t.name.0, p.partition_index), why);
                            result.with_error_code(code).with_low_watermark(-1)
                        }
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    refusals.log(peer, "DeleteRecords");
    DeleteRecordsResponse::default().with_topics(topics)
}
