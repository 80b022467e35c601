//! Produce: each partition's record batches go to `Log::append_produce`, which checks
//! CRC and structure, checks idempotent producers' sequences (a retried batch is answered
//! with its original base offset and not written again), assigns offsets and stores the
//! batches as sent (every codec, no recompression: Kafka's `compression.type=producer`). acks=0 gets no response;
//! acks=1 answers once the batches are in the log, acks=-1 after `durable` (on disk, or in the
//! page cache under `--acks-all=page-cache`; transactional batches at once: their transaction's
//! end makes them durable).
//!
//! A partition's append lock held by another writer (an embedded producer, maybe stopped) is
//! waited for without blocking a request worker and without holding the partition's log while
//! waiting (`Log::try_with_append_lock` retried by `waits::retry_until`), until the request's
//! `timeout_ms` or `waits::LOCK_WAIT`: then that partition is answered REQUEST_TIMED_OUT
//! (retriable: the producer sends again) and a WARNING names the holder.
//!
//! Transactional batches are appended without asking the coordinator when their partition holds
//! an open transaction of their producer at their epoch (checked under the append lock, so no
//! marker can come between: Kafka's `hasOngoingTransaction`); a transaction's first batch in a
//! partition is verified first (`txn_api::verify_produce`): its producer must be the
//! transactional id's current one, in an open transaction its partition was added to.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;

use super::broker::{try_lock_log, Broker};
use super::codes;
use super::durable::{self, Pending};
use super::open_logs::Access;
use super::txn_api;
use super::waits;
use crate::log::{Log, Produced};
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

/// The outcome of one append: `Ok(None)` when its batches are transactional and their partition
/// holds no open transaction of their producer at their epoch (nothing appended: verify first).
type Outcome = Result<Option<Appended>, (i16, String)>;

/// The outcome of one try at the append: `None` while the log or its append lock is busy.
type Attempt = Option<Outcome>;

/// Append one partition's batches. `open_txn`: the (producer id, epoch) of its transactional
/// batches when they were not verified: appended only into that producer's open transaction.
async fn append(
    broker: &Arc<Broker>,
    (topic, partition): (&str, i32),
    records: Option<&[u8]>,
    (acks, deadline): (i16, Instant),
    open_txn: Option<(i64, i16)>,
    peer: &str,
) -> Outcome {
    let log = match broker.partition_within((topic, partition), Access::Write, deadline).await {
        Ok(Some(log)) => log,
        Ok(None) => {
            return Err((codes::UNKNOWN_TOPIC_OR_PARTITION, format!("this server does not host {topic}-{partition}")))
        }
        Err(e) => {
            if matches!(e, crate::error::Error::LockTimeout { .. }) {
                log::warn!(target: super::LOG_TARGET, "produce to {topic}-{partition} from {peer}: opening it: {e}");
            }
            return Err((codes::for_error(&e), e.to_string()));
        }
    };
    if topic == super::offsets::OFFSETS_TOPIC {
        return Err((
            codes::INVALID_TOPIC_EXCEPTION,
            format!("{topic} is internal: clients commit offsets with OffsetCommit"),
        ));
    }
    let records = records.ok_or((codes::CORRUPT_MESSAGE, "the partition's records are null".to_string()))?;
    let started = Instant::now();
    if let Some(outcome) = waits::retry_until(deadline, || {
        std::future::ready(attempt(broker, &log, (topic, partition), records, (acks, open_txn)))
    })
    .await
    {
        return outcome;
    }
    // Ran out: say who held it (the log is free unless a request of this server is using it).
    let holder = match log.try_lock() {
        Ok(log) => log.append_lock_holder(),
        Err(_) => "a request of this server (the partition's log stayed busy)".into(),
    };
    let waited = started.elapsed().as_millis();
    log::warn!(
        target: super::LOG_TARGET,
        "produce to {topic}-{partition} from {peer}: gave up after {waited} ms waiting for the partition's append \
         lock, held by {holder} (stopped or hung?); answered REQUEST_TIMED_OUT"
    );
    Err((
        codes::REQUEST_TIMED_OUT,
        format!("{topic}-{partition}: its append lock stayed held by {holder} for {waited} ms; retry later"),
    ))
}

/// One try: lock the partition's log and its append lock if both are free now, then append.
fn attempt(
    broker: &Broker,
    log: &std::sync::Mutex<Log>,
    (topic, partition): (&str, i32),
    records: &[u8],
    (acks, open_txn): (i16, Option<(i64, i16)>),
) -> Attempt {
    let mut log = match try_lock_log(log) {
        Ok(Some(log)) => log,
        Ok(None) => return None,
        Err(e) => {
            broker.forget_partition(topic, partition);
            return Some(Err((codes::for_error(&e), e.to_string())));
        }
    };
    // A panic here (a bug) leaves the log locked half way through a request.
    if let Err(e) = crate::failpoint::hit("server.produce") {
        return Some(Err((codes::KAFKA_STORAGE_ERROR, e.to_string())));
    }
    let produced = match log.try_with_append_lock(|log| {
        if let Some((producer_id, epoch)) = open_txn {
            // Under the append lock, caught up with the files: a marker the coordinator wrote
            // (it appends under the same lock) has ended the transaction here already.
            let state = log.producer_state()?;
            if state.open_txn_first_offset(producer_id).is_none() || state.epoch_of(producer_id) != Some(epoch) {
                return Ok(None);
            }
        }
        log.append_produce(records).map(Some)
    }) {
        Ok(None) => return None,
        Ok(Some(None)) => return Some(Ok(None)),
        Ok(Some(Some(produced))) => Ok(produced),
        Err(e) => Err(e),
    };
    // acks=all: what the answer waits for, taken while the log is still locked (`durable`).
    let since = match &produced {
        Ok(Produced::Appended(first, _)) => Some(*first),
        Ok(Produced::Duplicate(batch)) => Some(batch.first_offset()),
        _ => None,
    };
    // Transactional batches are made durable by their transaction's end, not here (`durable`).
    let transactional = since.is_some() && txn_api::all_transactional(records);
    let waits = |since| durable::after_append(broker, &mut log, (topic, partition), (acks, transactional), since);
    let durable = match since.map(waits) {
        Some(Err(e)) => return Some(Err((codes::for_error(&e), e.to_string()))),
        Some(Ok(pending)) => pending,
        None => None,
    };
    Some(match produced {
        Ok(Produced::Duplicate(batch)) => {
            // Kafka answers a retry with the original batch's offset (and, for LogAppendTime,
            // the time it was appended).
            let log_append_time =
                if log.config().timestamp_type == TimestampType::LogAppendTime { batch.timestamp } else { -1 };
            let log_start_offset = log.start_offset();
            Ok(Some(Appended { base_offset: batch.first_offset(), log_append_time, log_start_offset, durable }))
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
            Ok(Some(Appended { base_offset, log_append_time, log_start_offset: log.start_offset(), durable }))
        }
        Err(e) => {
            if codes::needs_reopen(&e) {
                drop(log);
                broker.forget_partition(topic, partition);
            }
            Err((codes::for_error(&e), e.to_string()))
        }
    })
}

/// A Produce request's batches appended: its answer, once what acks=all waits for (if anything)
/// is done (`answer`).
pub struct Written {
    acks: i16,
    timeout_ms: i32,
    version: i16,
    responses: Vec<TopicProduceResponse>,
    pending: Vec<((usize, usize), Pending)>,
}

impl Written {
    /// Whether the answer waits for a sync (acks=all on disk): the connection may read and
    /// append its next Produce meanwhile, so one sync covers both (`pipeline`).
    pub fn waits(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The response, or None for acks=0.
    pub async fn answer(mut self, broker: &Arc<Broker>) -> Option<ProduceResponse> {
        durable::settle(broker, self.pending, &mut self.responses, self.timeout_ms, self.version).await;
        (self.acks != 0).then(|| ProduceResponse::default().with_responses(self.responses))
    }
}

/// One partition's appended batches, or why not (its code and message).
type Done = Result<Appended, (i16, String)>;

/// An append that did not ask for an open transaction always appended or refused.
fn appended_or_bug(appended: Option<Appended>) -> Done {
    appended.ok_or_else(|| (codes::UNKNOWN_SERVER_ERROR, "an unverified append was not verified (a bug)".into()))
}

/// Append the request's batches (in request order: the connection's next request is read only
/// after this returns); its answer comes from `Written::answer`.
pub async fn produce(broker: &Arc<Broker>, request: ProduceRequest, version: i16, peer: &str) -> Written {
    let done = append_all(broker, &request, version, peer).await;
    let mut appended_any = false;
    let mut pending = Vec::new();
    let mut responses = Vec::with_capacity(request.topic_data.len().min(1024));
    let mut refusals = codes::Refusals::new("partition");
    for (topic, done) in request.topic_data.iter().zip(done) {
        let name = &topic.name.0;
        let mut partitions = Vec::with_capacity(done.len());
        for (p, outcome) in topic.partition_data.iter().zip(done) {
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
                    // REQUEST_TIMED_OUT was logged with the lock's holder by `append`.
                    if code != codes::REQUEST_TIMED_OUT {
                        refusals.add(code, format_args!("{name}-{}", p.index), || message.clone());
                    }
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
    refusals.log(peer, "Produce");
    if appended_any {
        broker.announce_append();
    }
    Written { acks: request.acks, timeout_ms: request.timeout_ms, version, responses, pending }
}

/// Each partition's outcome, by topic then partition as requested. A transactional partition
/// whose producer has no open transaction there at its epoch is verified by the coordinator
/// (all such partitions of the request at once), then appended after the request's others.
async fn append_all(broker: &Arc<Broker>, request: &ProduceRequest, version: i16, peer: &str) -> Vec<Vec<Done>> {
    let (acks, valid_acks) = (request.acks, matches!(request.acks, -1..=1));
    // One deadline for the whole request: its partitions' waits do not add up.
    let deadline = waits::deadline(request.timeout_ms);
    let (id, stamped, mut refused) =
        if valid_acks { txn_api::transactional_partitions(request) } else { Default::default() };
    let stamps: HashMap<(String, i32), (i64, i16)> = stamped.into_iter().collect();
    // None: waiting for its verification (`unverified`: where, and what to verify).
    let mut outcomes: Vec<Vec<Option<Done>>> = Vec::with_capacity(request.topic_data.len().min(1024));
    let mut unverified = Vec::new();
    for (t, topic) in request.topic_data.iter().enumerate() {
        let name = topic.name.0.to_string();
        let mut partitions = Vec::with_capacity(topic.partition_data.len().min(1024));
        for (i, p) in topic.partition_data.iter().enumerate() {
            let key = (name.clone(), p.index);
            let outcome = if let Some(refusal) = refused.remove(&key) {
                Some(Err(refusal))
            } else if !valid_acks {
                Some(Err((codes::INVALID_REQUIRED_ACKS, format!("acks must be -1, 0 or 1, not {acks}"))))
            } else {
                let open_txn = stamps.get(&key).copied();
                let records = p.records.as_deref();
                match (append(broker, (&name, p.index), records, (acks, deadline), open_txn, peer).await, open_txn) {
                    (Ok(None), Some(stamp)) => {
                        unverified.push(((t, i), (key, stamp)));
                        None
                    }
                    (outcome, _) => Some(outcome.and_then(appended_or_bug)),
                }
            };
            partitions.push(outcome);
        }
        outcomes.push(partitions);
    }
    if let (Some(id), false) = (&id, unverified.is_empty()) {
        let wanted = unverified.iter().map(|(_, stamped)| stamped.clone()).collect();
        let mut refused = txn_api::verify_produce(broker, id, wanted, version, deadline).await;
        for ((t, i), ((name, index), _)) in unverified {
            let records = request.topic_data[t].partition_data[i].records.as_deref();
            outcomes[t][i] = Some(match refused.remove(&(name.clone(), index)) {
                Some(refusal) => Err(refusal),
                None => append(broker, (&name, index), records, (acks, deadline), None, peer)
                    .await
                    .and_then(appended_or_bug),
            });
        }
    }
    let never = || Err((codes::UNKNOWN_SERVER_ERROR, "an unverified partition was never verified (a bug)".into()));
    outcomes.into_iter().map(|partitions| partitions.into_iter().map(|o| o.unwrap_or_else(never)).collect()).collect()
}
