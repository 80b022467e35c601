//! DescribeLogDirs (`kafka-log-dirs --describe`, `Admin.describeLogDirs`): the data directory is
//! this broker's one log dir. Each partition's size is what Kafka reports, the bytes of its
//! segments; the offset lag is 0 (a partition has no future replica to catch up);
//! total and usable bytes are the file system's.

use std::path::Path;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use std::sync::Mutex;

use crate::server::codes;
use crate::server::state::broker::{lock_log, Broker};
use crate::storage::log::Log;

/// The bytes of a partition's segments, as Kafka's `log.size` counts them (their data, not the
/// length a preallocated file has on disk); 0 when it cannot be opened.
fn partition_size(broker: &Broker, topic: &str, partition: i32) -> i64 {
    let size = |log: &Mutex<Log>| -> crate::storage::error::Result<u64> {
        let mut log = lock_log(log)?;
        log.follow()?;
        Ok(log.size_bytes())
    };
    match broker.partition(topic, partition) {
        Ok(Some(log)) => size(&log).map_or(0, |n| n as i64),
        _ => 0,
    }
}

/// (total, usable) bytes of the file system that holds `dir`; -1 when unknown, as Kafka sends.
fn space(dir: &Path) -> (i64, i64) {
    match rustix::fs::statvfs(dir) {
        Ok(s) => ((s.f_blocks * s.f_frsize) as i64, (s.f_bavail * s.f_frsize) as i64),
        Err(_) => (-1, -1),
    }
}

pub fn describe_log_dirs(broker: &Broker, request: DescribeLogDirsRequest, peer: &str) -> DescribeLogDirsResponse {
    let topics = match broker.topics() {
        Ok(t) => t,
        Err(e) => {
            let reason = format!("cannot read the topics of {}: {e}", broker.dir.path().display());
            let code = codes::refused(peer, "DescribeLogDirs", codes::KAFKA_STORAGE_ERROR, &reason);
            return DescribeLogDirsResponse::default().with_error_code(code);
        }
    };
    // Null: every partition; otherwise the named partitions that exist here.
    let wanted: Vec<(String, Vec<i32>)> = match request.topics {
        None => topics.iter().map(|(name, meta)| (name.clone(), (0..meta.partitions).collect())).collect(),
        Some(named) => named
            .into_iter()
            .filter_map(|t| {
                let meta = topics.get(t.topic.as_str())?;
                let partitions: Vec<i32> =
                    t.partitions.into_iter().filter(|p| (0..meta.partitions).contains(p)).collect();
                // As Kafka: a topic none of whose named partitions is here is left out.
                (!partitions.is_empty()).then(|| (t.topic.to_string(), partitions))
            })
            .collect(),
    };
    let described = wanted
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|p| {
                    DescribeLogDirsPartition::default()
                        .with_partition_index(p)
                        .with_partition_size(partition_size(broker, &name, p))
                        .with_offset_lag(0)
                        .with_is_future_key(false)
                })
                .collect();
            DescribeLogDirsTopic::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(partitions)
        })
        .collect();
    let dir = broker.dir.path();
    let (total, usable) = space(dir);
    let result = DescribeLogDirsResult::default()
        .with_log_dir(StrBytes::from_string(dir.display().to_string()))
        .with_topics(described)
        .with_total_bytes(total)
        .with_usable_bytes(usable);
    DescribeLogDirsResponse::default().with_results(vec![result])
}
