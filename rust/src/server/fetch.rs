//! Fetch: whole batches straight from the segment maps (the response's record bytes are
//! the mapped file's bytes, not re-encoded), within `max_bytes` and each partition's
//! `partition_max_bytes` (the first batch is always returned, as Kafka does, so a batch
//! larger than the limits still makes progress). A fetch short of `min_bytes` waits until
//! an append wakes it (this server's or any embedded producer's) or `max_wait_ms` passes.
//! Fetch sessions are declined: every response carries session id 0, so clients send full
//! fetch requests. Without transactions the last stable offset is the high watermark, so
//! both isolation levels read the same.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse};

use super::broker::{lock_log, Broker};
use super::codes;
use crate::log_read::BatchSlice;

/// Lets `Bytes` borrow a segment's map: the map stays alive while the response is written.
struct Mapped(BatchSlice);

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// Once the response holding them is gone, the fetched pages leave this process's resident set
/// (they stay in the page cache, and a later fetch faults them back in): without this a server
/// that serves a large log keeps every page it ever sent resident (issue 13: RSS <= 100 MB).
impl Drop for Mapped {
    fn drop(&mut self) {
        if let Some(map) = &self.0.map {
            map.release(self.0.start, self.0.len);
        }
    }
}

/// One pass over the requested partitions: the response and how many record bytes it holds.
fn read_once(broker: &Broker, request: &FetchRequest, version: i16) -> (FetchResponse, usize, bool) {
    let mut budget = request.max_bytes.max(0) as usize;
    let mut total = 0usize;
    let mut any_error = false;
    let mut topics = Vec::with_capacity(request.topics.len().min(1024));
    for topic in &request.topics {
        let name = topic.topic.0.to_string();
        let mut partitions = Vec::with_capacity(topic.partitions.len().min(1024));
        for p in &topic.partitions {
            let mut data = PartitionData::default().with_partition_index(p.partition);
            let log = match broker.partition(&name, p.partition) {
                Ok(Some(log)) => log,
                Ok(None) => {
                    any_error = true;
                    partitions.push(data.with_error_code(codes::UNKNOWN_TOPIC_OR_PARTITION).with_high_watermark(-1));
                    continue;
                }
                Err(e) => {
                    any_error = true;
                    partitions.push(data.with_error_code(codes::for_error(&e)).with_high_watermark(-1));
                    continue;
                }
            };
            let mut log = match lock_log(&log) {
                Ok(log) => log,
                Err(e) => {
                    any_error = true;
                    broker.forget_partition(&name, p.partition);
                    partitions.push(data.with_error_code(codes::for_error(&e)).with_high_watermark(-1));
                    continue;
                }
            };
            let limit = (p.partition_max_bytes.max(0) as usize).min(budget);
            let read = if total > 0 && limit == 0 {
                Ok(BatchSlice { map: None, start: 0, len: 0 })
            } else {
                log.read(p.fetch_offset, limit.max(1))
            };
            let (hw, start) = (log.end_offset(), log.start_offset());
            drop(log);
            data = data.with_high_watermark(hw).with_last_stable_offset(hw);
            if version >= 5 {
                data = data.with_log_start_offset(start);
            }
            match read {
                // Past the budget once something is in the response: leave it for the next fetch.
                Ok(slice) if total > 0 && slice.len > budget => {}
                Ok(slice) if slice.len > 0 => {
                    total += slice.len;
                    budget = budget.saturating_sub(slice.len);
                    data = data.with_records(Some(Bytes::from_owner(Mapped(slice))));
                }
                Ok(_) => {}
                Err(e) => {
                    any_error = true;
                    if codes::needs_reopen(&e) {
                        broker.forget_partition(&name, p.partition);
                    }
                    data = data.with_error_code(codes::for_error(&e));
                }
            }
            partitions.push(data);
        }
        topics.push(FetchableTopicResponse::default().with_topic(topic.topic.clone()).with_partitions(partitions));
    }
    (FetchResponse::default().with_responses(topics), total, any_error)
}

pub async fn fetch(broker: &Broker, request: FetchRequest, version: i16) -> FetchResponse {
    if version >= 7 && request.session_id != 0 {
        // We never hand out session ids, so an incremental fetch names an unknown session.
        return FetchResponse::default().with_error_code(codes::FETCH_SESSION_ID_NOT_FOUND);
    }
    let deadline = Instant::now() + Duration::from_millis(request.max_wait_ms.max(0) as u64);
    let min_bytes = request.min_bytes.max(0) as usize;
    loop {
        // Register for the wake-up before reading, so an append in between is not missed.
        let appended = broker.appended.notified();
        tokio::pin!(appended);
        appended.as_mut().enable();
        let (response, bytes, any_error) = read_once(broker, &request, version);
        let now = Instant::now();
        if bytes >= min_bytes || any_error || now >= deadline || request.topics.is_empty() {
            return response;
        }
        let _ = tokio::time::timeout(deadline - now, appended).await;
        if Instant::now() >= deadline {
            return read_once(broker, &request, version).0;
        }
    }
}
