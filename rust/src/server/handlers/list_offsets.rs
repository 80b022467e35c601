//! ListOffsets: earliest (-2, and -4 "earliest local"), latest (-1), max timestamp (-3) and
//! the first offset at or after a timestamp. A read_committed client (`isolation_level` 1) is
//! answered as by Kafka's `Partition.fetchOffsetForTimestamp`: latest is the last stable offset,
//! and a timestamp found at or past it is not found.

use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::server::codes;
use crate::server::state::broker::{lock_log, Broker};
use crate::server::state::committed::READ_COMMITTED;
use crate::storage::error::Result;
use crate::storage::log::Log;
use crate::storage::log_read::RecordSink;
use crate::storage::record::RecordRef;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;

/// Finds the first record carrying a given timestamp.
struct FirstWithTimestamp {
    timestamp: i64,
    found: Option<i64>,
}

impl RecordSink for FirstWithTimestamp {
    fn push(&mut self, record: &RecordRef<'_>) -> Result<()> {
        if self.found.is_none() && record.timestamp == self.timestamp {
            self.found = Some(record.offset);
        }
        Ok(())
    }
}

/// Kafka's MAX_TIMESTAMP: the offset of the first record with the largest timestamp.
fn max_timestamp(log: &mut Log) -> Result<Option<(i64, i64)>> {
    let start = log.start_offset();
    let best =
        log.segments().into_iter().filter(|s| s.next_offset > start && s.size > 0).max_by_key(|s| s.max_timestamp);
    let Some(seg) = best else { return Ok(None) };
    let mut sink = FirstWithTimestamp { timestamp: seg.max_timestamp, found: None };
    let mut next = seg.base_offset.max(start);
    while sink.found.is_none() && next < seg.next_offset {
        let after = log.scan_records(next, Some(seg.next_offset), 10_000, &mut sink)?;
        if after <= next {
            break;
        }
        next = after;
    }
    Ok(sink.found.map(|offset| (offset, seg.max_timestamp)))
}

/// `timestamp`'s (timestamp, offset); `fetchable`: where a read_committed client's reads end.
fn lookup(log: &mut Log, timestamp: i64, fetchable: Option<i64>) -> Result<(i64, i64)> {
    log.follow()?;
    let end = fetchable.unwrap_or(log.end_offset());
    Ok(match timestamp {
        LATEST => (-1, end),
        EARLIEST | EARLIEST_LOCAL => (-1, log.start_offset()),
        MAX_TIMESTAMP => max_timestamp(log)?.map(|(o, t)| (t, o)).unwrap_or((-1, -1)),
        ts => log.offset_for_timestamp(ts)?.filter(|&(o, _)| o < end).map(|(o, t)| (t, o)).unwrap_or((-1, -1)),
    })
}

pub fn list_offsets(broker: &Broker, request: ListOffsetsRequest, version: i16, peer: &str) -> ListOffsetsResponse {
    let mut topics = Vec::with_capacity(request.topics.len().min(1024));
    let mut refusals = codes::Refusals::new("partition");
    for topic in &request.topics {
        let name = topic.name.0.to_string();
        let mut partitions = Vec::with_capacity(topic.partitions.len().min(1024));
        for p in &topic.partitions {
            let mut resp = ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            let outcome = match broker.partition(&name, p.partition_index) {
                Ok(Some(shared)) => lock_log(&shared)
                    .and_then(|mut log| {
                        let fetchable = if request.isolation_level == READ_COMMITTED {
                            let at = (name.as_str(), p.partition_index);
                            Some(broker.read_committed.view(at, &mut log)?.last_stable_offset)
                        } else {
                            None
                        };
                        lookup(&mut log, p.timestamp, fetchable)
                    })
                    .map_err(|e| {
                        if codes::needs_reopen(&e) {
                            broker.forget_partition(&name, p.partition_index);
                        }
                        codes::for_error(&e)
                    }),
                Ok(None) => Err(codes::UNKNOWN_TOPIC_OR_PARTITION),
                Err(e) => Err(codes::for_error(&e)),
            };
            if let Err(code) = outcome {
                refusals.add(code, format_args!("{name}-{}", p.partition_index), String::new);
            }
            match outcome {
                Ok((timestamp, offset)) => {
                    resp = resp.with_timestamp(timestamp).with_offset(offset);
                    if version >= 4 {
                        resp = resp.with_leader_epoch(-1);
                    }
                }
                Err(code) => resp = resp.with_error_code(code).with_timestamp(-1).with_offset(-1),
            }
            partitions.push(resp);
        }
        topics.push(ListOffsetsTopicResponse::default().with_name(topic.name.clone()).with_partitions(partitions));
    }
    refusals.log(peer, "ListOffsets");
    ListOffsetsResponse::default().with_topics(topics)
}
