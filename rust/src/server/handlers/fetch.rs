//! Fetch: whole batches straight from the segment maps (the response's record bytes are
//! the mapped file's bytes, not re-encoded), bounded as Kafka's `ReplicaManager.readFromLog`
//! bounds them: the request's `max_bytes` capped by the server's `fetch.max.bytes`, each
//! partition at most its `partition_max_bytes` and what is left of that, and only the first
//! partition that returns data may exceed them by its first batch (KIP-74: a batch larger than
//! the limits still makes progress). A partition named twice in one request is read once, as
//! Kafka reads the request into a map keyed by topic-partition. A fetch short of `min_bytes`
//! waits until an append wakes it (this server's or any embedded producer's) or `max_wait_ms`
//! passes.
//!
//! A connection reads no further request while its answer is unwritten (Kafka mutes a channel
//! with an unsent response), so each connection holds one response at most. Over all
//! connections, the record bytes of responses not yet written are bounded by a shared budget
//! (`QUEUED_MAX_RESPONSE_BYTES`) as a memory safety net only: a response takes its bytes from it
//! until it is written, a fetch that finds too little room answers at once with what fits, and
//! with no room at all still with its first batch (KIP-74), outside the budget, bounded per
//! client (`fetch_overdraft`). So clients that never read their answers hold at most the budget
//! plus their overdrafts, and never make another client's fetch return empty (or wait) while its
//! partition has data; Kafka has no such
//! budget at all (it sends from the page cache) and bounds users by client quotas (`quotas`).
//!
//! Fetch sessions are declined: every response carries session id 0, so clients send full
//! fetch requests. A read_committed fetch (`isolation_level` 1) gets only the batches below the
//! partition's last stable offset and the aborted transactions among them (`committed`); a
//! read_uncommitted one is told the high watermark as its last stable offset (it reads to the
//! end, and working the LSO out would walk the log's batches for a figure it does not use).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::FetchPartition;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};

use crate::server::codes;
use crate::server::request::DecodeError;
use crate::server::state::broker::{lock_log, Broker};
use crate::server::state::committed::{below_stable, READ_COMMITTED};
use crate::server::state::fetch_limits::{Held, Limits};
use crate::server::state::fetch_overdraft::client_key;
use crate::server::state::metrics::frame; // notes the response's error codes for `Metrics::answered`
use crate::server::state::open_logs::Access;
use crate::server::state::quotas::Kind;
use crate::server::state::waits;
use crate::storage::log::Log;
use crate::storage::log_read::BatchSlice;

/// Lets `Bytes` borrow a segment's map: the map stays alive while the response is encoded.
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

/// An encoded response with its share of the response budget, given back when the connection
/// has written (or dropped) it.
struct Budgeted {
    bytes: Bytes,
    _held: Held,
}

impl AsRef<[u8]> for Budgeted {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// The partitions of a request, each once, grouped by topic in the order first named; a
/// partition named again replaces the earlier entry's position and limit but keeps its place
/// (Kafka's `LinkedHashMap` of the request's topic-partitions).
type Wanted<'a> = Vec<(&'a TopicName, Vec<&'a FetchPartition>)>;

fn wanted(request: &FetchRequest) -> Wanted<'_> {
    let mut topics: Wanted<'_> = Vec::new();
    let mut topic_at: HashMap<&TopicName, usize> = HashMap::new();
    let mut partition_at: HashMap<(usize, i32), usize> = HashMap::new();
    for topic in &request.topics {
        let t = *topic_at.entry(&topic.topic).or_insert_with(|| {
            topics.push((&topic.topic, Vec::new()));
            topics.len() - 1
        });
        for p in &topic.partitions {
            match partition_at.entry((t, p.partition)) {
                Entry::Occupied(at) => topics[t].1[*at.get()] = p,
                Entry::Vacant(at) => {
                    at.insert(topics[t].1.len());
                    topics[t].1.push(p);
                }
            }
        }
    }
    topics
}

/// One of the request's partitions for one read pass, held only while that pass reads it, so a
/// fetch never holds its partitions across its long poll, nor all at once: a fetch of more
/// partitions than the server keeps open (`open_logs`) makes it reopen some rather than run out
/// of file descriptors. It is opened read-only (no lock: a writer stopped while it holds the
/// append lock does not delay the read), off the request workers (`partition_within`). On the
/// first pass an open partition is checked to still be the folder it was opened from (a topic
/// deleted and created again); later passes of the long poll take it as it is, and the client's
/// next fetch sees a re-creation. `Err`: the error code of an open that failed or ran out of time.
async fn log_for_pass(
    broker: &Arc<Broker>,
    (name, partition): (&str, i32),
    first: bool,
    deadline: Instant,
) -> Result<Option<Arc<Mutex<Log>>>, i16> {
    if !first {
        if let Some(log) = broker.cached_partition(name, partition) {
            return Ok(Some(log));
        }
    }
    broker.partition_within((name, partition), Access::Read, deadline).await.map_err(|e| codes::for_error(&e))
}

/// One pass over the partitions.
struct Read {
    response: FetchResponse,
    /// Record bytes in `response`.
    bytes: usize,
    any_error: bool,
}

/// Read each partition once, within `max_bytes` in all; with `hard`, no batch past the limits
/// either, else KIP-74's first batch. `first`: the request's first pass (`log_for_pass`).
async fn read_once(
    broker: &Arc<Broker>,
    (wanted, first): (&Wanted<'_>, bool),
    max_bytes: usize,
    hard: bool,
    (version, isolation): (i16, i8),
) -> Read {
    // One deadline for the pass's opens: its partitions' waits do not add up.
    let deadline = waits::deadline(0);
    let mut left = max_bytes;
    // Kafka's `minOneMessage`: true until a partition returned data.
    let mut min_one = !hard;
    let mut total = 0usize;
    let mut any_error = false;
    let mut topics = Vec::with_capacity(wanted.len());
    for (topic, wanted_partitions) in wanted {
        let name = topic.0.to_string();
        let mut partitions = Vec::with_capacity(wanted_partitions.len());
        for p in wanted_partitions {
            let mut data = PartitionData::default().with_partition_index(p.partition);
            let shared = match log_for_pass(broker, (&name, p.partition), first, deadline).await {
                Ok(Some(log)) => log,
                Ok(None) => {
                    any_error = true;
                    partitions.push(data.with_error_code(codes::UNKNOWN_TOPIC_OR_PARTITION).with_high_watermark(-1));
                    continue;
                }
                Err(code) => {
                    any_error = true;
                    partitions.push(data.with_error_code(code).with_high_watermark(-1));
                    continue;
                }
            };
            let locked = lock_log(&shared).and_then(|mut log| {
                let committed = if isolation == READ_COMMITTED {
                    Some(broker.read_committed.view((&name, p.partition), &mut log)?)
                } else {
                    None
                };
                Ok((log, committed))
            });
            let (mut log, committed) = match locked {
                Ok(locked) => locked,
                Err(e) => {
                    any_error = true;
                    let e = broker.deleted_meanwhile((&name, p.partition), e);
                    if codes::needs_reopen(&e) {
                        broker.forget_partition(&name, p.partition);
                    }
                    partitions.push(data.with_error_code(codes::for_error(&e)).with_high_watermark(-1));
                    continue;
                }
            };
            let limit = (p.partition_max_bytes.max(0) as usize).min(left);
            let read = if limit == 0 && !min_one {
                Ok(BatchSlice { map: None, start: 0, len: 0 })
            } else {
                // At least one whole batch, whatever the limit: one too large is dropped below.
                log.read(p.fetch_offset, limit.max(1))
            };
            let (hw, start) = (log.end_offset(), log.start_offset());
            drop(log);
            let lso = committed.as_ref().map_or(hw, |c| c.last_stable_offset);
            data = data.with_high_watermark(hw).with_last_stable_offset(lso);
            if version >= 5 {
                data = data.with_log_start_offset(start);
            }
            let read = match (read, &committed) {
                (Ok(slice), Some(committed)) => {
                    let (slice, next) = below_stable(slice, p.fetch_offset, lso);
                    data = data.with_aborted_transactions(Some(committed.aborted_between(p.fetch_offset, next)));
                    Ok(slice)
                }
                (read, _) => read,
            };
            match read {
                // A first batch past the limits, and not the response's first: left for a later fetch.
                Ok(slice) if slice.len > limit && !min_one => {}
                Ok(slice) if slice.len > 0 => {
                    total += slice.len;
                    left = left.saturating_sub(slice.len);
                    min_one = false;
                    data = data.with_records(Some(Bytes::from_owner(Mapped(slice))));
                }
                Ok(_) => {}
                Err(e) => {
                    any_error = true;
                    let e = broker.deleted_meanwhile((&name, p.partition), e);
                    if codes::needs_reopen(&e) {
                        broker.forget_partition(&name, p.partition);
                    }
                    data = data.with_error_code(codes::for_error(&e));
                }
            }
            partitions.push(data);
        }
        topics.push(FetchableTopicResponse::default().with_topic((*topic).clone()).with_partitions(partitions));
    }
    Read { response: FetchResponse::default().with_responses(topics), bytes: total, any_error }
}

/// Answer a Fetch of `(user, client id)` (`quota`): the encoded response frame, holding its share
/// of the response budget until the connection has written it. Past the consumer byte rate quota
/// the answer has no records and says how long to back off (Kafka's throttled fetch response:
/// what it read is not counted).
pub async fn answer(
    broker: &Arc<Broker>,
    request: FetchRequest,
    (version, correlation_id): (i16, i32),
    (peer, (user, client_id)): (&str, (&str, &str)),
    refused: Vec<FetchableTopicResponse>,
) -> Result<Bytes, DecodeError> {
    broker.quotas.wait_turn(Kind::Fetch, user, client_id).await;
    let cap = broker.quotas.max_bytes(Kind::Fetch, user, client_id).unwrap_or(usize::MAX);
    let client = client_key(user, peer);
    let (mut response, mut held) = fetch(broker, &request, (version, cap), (peer, &client)).await;
    let bytes: usize =
        response.responses.iter().flat_map(|t| &t.partitions).map(|p| p.records.as_ref().map_or(0, |r| r.len())).sum();
    // Past either the byte rate or the request quota, no records (Kafka's throttled fetch).
    let throttle = broker
        .quotas
        .record(Kind::Fetch, user, client_id, bytes)
        .max(crate::server::state::request_time::record_now(&broker.quotas));
    if throttle > 0 {
        broker.quotas.unrecord(Kind::Fetch, user, client_id, bytes);
        response = FetchResponse::default();
        held = (None, None);
    }
    response.throttle_time_ms = throttle;
    // The topics the ACLs took out of the request (`acl_requests::Refused`), already logged.
    response.responses.extend(refused);
    log_refusals(&response, peer);
    let bytes = frame(ApiKey::Fetch, version, correlation_id, &response)?;
    // The frame holds a copy of the records: their mapped pages leave the resident set now
    // (`Mapped::drop`), and the budget stays with the copy.
    drop(response);
    Ok(match held {
        (None, None) => bytes,
        held => Bytes::from_owner(Budgeted { bytes, _held: held }),
    })
}

/// One line for the partitions the answer refused (only the answer's: a long poll reads many
/// times).
fn log_refusals(response: &FetchResponse, peer: &str) {
    let mut refusals = codes::Refusals::new("partition");
    for topic in &response.responses {
        for p in &topic.partitions {
            refusals.add(p.error_code, format_args!("{}-{}", topic.topic.0, p.partition_index), String::new);
        }
    }
    refusals.log(peer, "Fetch");
}

/// `cap`: the most record bytes the client's quota allows in one answer; `client`: whom its
/// first batch past the budget counts against (`fetch_overdraft`).
async fn fetch(
    broker: &Arc<Broker>,
    request: &FetchRequest,
    (version, cap): (i16, usize),
    (peer, client): (&str, &str),
) -> (FetchResponse, Held) {
    if version >= 7 && request.session_id != 0 {
        // We never hand out session ids, so an incremental fetch names an unknown session.
        let reason = format!("incremental fetch session {}: this server declines fetch sessions", request.session_id);
        let code = codes::refused(peer, "Fetch", codes::FETCH_SESSION_ID_NOT_FOUND, &reason);
        return (FetchResponse::default().with_error_code(code), (None, None));
    }
    let limits = &broker.fetch_limits;
    let wanted = wanted(request);
    let wanted = &wanted;
    let max_bytes = (request.max_bytes.max(0) as usize).min(limits.max_bytes).min(cap);
    let deadline = Instant::now() + Duration::from_millis(request.max_wait_ms.max(0) as u64);
    let min_bytes = request.min_bytes.max(0) as usize;
    let mut first = true;
    loop {
        // Register for the wake-up before reading, so an append in between is not missed.
        let appended = broker.appended.notified();
        tokio::pin!(appended);
        appended.as_mut().enable();
        let read = read_once(broker, (wanted, first), max_bytes, false, (version, request.isolation_level)).await;
        first = false;
        let now = Instant::now();
        if read.bytes >= min_bytes || read.any_error || now >= deadline || wanted.is_empty() {
            return limits.admit(broker, (wanted, client), read, max_bytes, (version, request.isolation_level)).await;
        }
        let _ = tokio::time::timeout(deadline - now, appended).await;
        if Instant::now() >= deadline {
            let read = read_once(broker, (wanted, false), max_bytes, false, (version, request.isolation_level)).await;
            return limits.admit(broker, (wanted, client), read, max_bytes, (version, request.isolation_level)).await;
        }
    }
}

impl Limits {
    /// Take the budget for `read`'s record bytes if it has room for them now; else read again
    /// within the room there is, and past it still the first batch (KIP-74's minimum): that
    /// batch is not taken from the budget but from the client's own overdraft
    /// (`fetch_overdraft`), and without room there only what the budget's room holds. Nothing
    /// waits for other connections' responses to be written, so clients that never read theirs
    /// can use up the budget and their own overdraft but never make another client's fetch come
    /// back empty or late while its partition has data.
    async fn admit(
        &self,
        broker: &Arc<Broker>,
        (wanted, client): (&Wanted<'_>, &str),
        read: Read,
        max_bytes: usize,
        version: (i16, i8),
    ) -> (FetchResponse, Held) {
        if read.bytes == 0 {
            return (read.response, (None, None));
        }
        if let Ok(permit) = self.budget.clone().try_acquire_many_owned(read.bytes.min(u32::MAX as usize) as u32) {
            return (read.response, (Some(permit), None));
        }
        // Nothing of the first read was touched (no page of it is resident): read again.
        drop(read);
        let room = self.budget.available_permits().min(max_bytes);
        let mut permit = self.budget.clone().try_acquire_many_owned(room as u32).ok();
        let room = permit.as_ref().map_or(0, |p| p.num_permits());
        // Soft: with no room, the first batch all the same.
        let mut read = read_once(broker, (wanted, false), room, false, version).await;
        let mut overdraft = None;
        if read.bytes > room {
            overdraft = self.overdrafts.take(client, read.bytes - room);
            if overdraft.is_none() {
                // This client's unwritten answers already hold their share past the budget:
                // only what the room holds (possibly nothing; the client fetches again).
                drop(read);
                read = read_once(broker, (wanted, false), room, true, version).await;
            }
        }
        // What the read left unused goes back at once.
        if let Some(p) = permit.as_mut() {
            drop(p.split(room - read.bytes.min(room)));
        }
        (read.response, (permit, overdraft))
    }
}
