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
//! transactional id's current one, in an open transaction its partition was added to. Its
//! transaction may end while the coordinator is asked (an EndTxn sent with the Produce in
//! flight): KIP-890 part 1's verification guard, taken from the partition's producer state under
//! the append lock before asking, is checked under it again at the append, and a batch whose
//! producer had a marker (or another transactional batch) in the partition since is refused
//! with INVALID_TXN_STATE, as Kafka's broker refuses it, instead of opening a transaction there
//! that no marker would ever end (unless that marker was the previous transaction's, a
//! transaction version 2 end its verification completed: NOT_ENOUGH_REPLICAS, retried).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;

use super::txn_api;
use crate::server::codes;
use crate::server::state::broker::{try_lock_log, Broker};
use crate::server::state::durable::{self, Pending};
use crate::server::state::open_logs::Access;
use crate::server::state::waits;
use crate::storage::log::{Log, Produced};
use crate::storage::producer_state::{Refusal, VerificationGuard};
use crate::storage::record::TimestampType;

/// Byte offset of maxTimestamp in a v2 batch header (Kafka's DefaultRecordBatch layout).
const MAX_TIMESTAMP_OFFSET: usize = 35;

struct Appended {
    base_offset: i64,
    log_append_time: i64,
    log_start_offset: i64,
    /// What acks=all still waits for (`durable::after_append`).
    durable: Option<Pending>,
}

/// The outcome of one append: `Ok(Err(unverified))` when its batches are transactional and
/// must be verified with the coordinator first (nothing appended: `TxnCheck`). An append whose
/// check never asks for that (`Infallible`) cannot end so: it appended or was refused.
type Outcome<T> = Result<Result<Appended, T>, (i16, String)>;

/// The outcome of one try at the append: `None` while the log or its append lock is busy.
type Attempt<T> = Option<Outcome<T>>;

/// Why a `TxnCheck` stopped an append: verify with the coordinator first, or refused (the
/// error code, and why).
enum Stop<U> {
    Verify(U),
    Refuse(i16, String),
}

/// What `append` checks of transactional batches under the partition's append lock, before
/// appending them: `((producer id, epoch), ends_bump)` for a first try (appended into that producer's open
/// transaction at that epoch, else sent to the coordinator with a guard), `Guarded` after the
/// coordinator's verification, and `Infallible` for batches that need no check.
trait TxnCheck: Copy {
    /// What an append sent to the coordinator gives back (`Infallible`: it never is).
    type Unverified;

    /// Under the append lock, with the log caught up with the files (markers the coordinator
    /// wrote through its own handle are applied): Ok(()) to append.
    fn check(
        self,
        log: &mut Log,
        partition: (&str, i32),
    ) -> crate::storage::error::Result<Result<(), Stop<Self::Unverified>>>;
}

/// A partition's transactional batches being verified: their producer (id, epoch), whether
/// their client's transaction ends bump the epoch (transaction version 2: `txn_api::ends_bump`),
/// and the guard taken before the coordinator was asked (`ProducerState::verification_guard`).
#[derive(Clone, Copy)]
struct Guarded {
    producer: (i64, i16),
    ends_bump: bool,
    guard: VerificationGuard,
}

/// A first try: the (producer id, epoch) of the batches and whether their client's transaction
/// ends bump the epoch.
impl TxnCheck for ((i64, i16), bool) {
    type Unverified = Guarded;

    fn check(self, log: &mut Log, _: (&str, i32)) -> crate::storage::error::Result<Result<(), Stop<Guarded>>> {
        let ((producer_id, epoch), ends_bump) = self;
        if log.producer_state()?.has_ongoing_txn(producer_id, epoch) {
            return Ok(Ok(()));
        }
        let guard = log.verification_guard(producer_id)?;
        Ok(Err(Stop::Verify(Guarded { producer: (producer_id, epoch), ends_bump, guard })))
    }
}

impl TxnCheck for Guarded {
    type Unverified = Infallible;

    fn check(
        self,
        log: &mut Log,
        (topic, partition): (&str, i32),
    ) -> crate::storage::error::Result<Result<(), Stop<Infallible>>> {
        let (producer_id, epoch) = self.producer;
        let state = log.producer_state()?;
        // A newer epoch came in (a fence's abort marker): the append's epoch check refuses the
        // batch, INVALID_PRODUCER_EPOCH, as Kafka checks the epoch before the guard.
        let known = state.epoch_of(producer_id);
        let fenced = known.is_some_and(|known| known > epoch);
        // Another batch of its transaction, verified too, may have opened it here meanwhile.
        if fenced || state.has_ongoing_txn(producer_id, epoch) || state.verified(producer_id, self.guard) {
            return Ok(Ok(()));
        }
        if self.ends_bump && known == Some(epoch) {
            // Transaction version 2 ends a transaction with markers at the epoch after its own,
            // so a marker at the batch's epoch ended the transaction before: a decided end whose
            // markers were left pending (`txn_ends`), completed by this batch's verification.
            // The batch's own transaction is open: NOT_ENOUGH_REPLICAS, which the client retries
            // under a fresh guard (Kafka's coordinator answers the verification
            // CONCURRENT_TRANSACTIONS while the markers are pending, which its broker turns into
            // that), never INVALID_TXN_STATE, which would abort a transaction that did no wrong.
            return Ok(Err(Stop::Refuse(
                codes::NOT_ENOUGH_REPLICAS,
                format!(
                    "the batch of producer {producer_id} (epoch {epoch}) came in with the marker of its previous \
                     transaction in {topic}-{partition} (that end completed by this batch's verification); retry"
                ),
            )));
        }
        if !state.outrun(producer_id, self.guard) {
            // The guard was dropped, not outrun: the partition's log was closed and opened again
            // while the coordinator verified the batch (`open_logs`), or the guards' bound. Nothing
            // of the producer came in: retried, the batch is verified again under a new guard.
            return Ok(Err(Stop::Refuse(
                codes::NOT_ENOUGH_REPLICAS,
                format!(
                    "the verification guard of producer {producer_id}'s batch in {topic}-{partition} was dropped \
                     while the coordinator verified it (the partition's log closed and reopened?); retry"
                ),
            )));
        }
        Ok(Err(Stop::Refuse(
            codes::INVALID_TXN_STATE,
            format!(
                "the batch of producer {producer_id} (epoch {epoch}) is not part of an ongoing transaction: its \
                 transaction ended in {topic}-{partition} (a marker came in) while the coordinator verified it \
                 (EndTxn sent before this Produce was answered?); not appended"
            ),
        )))
    }
}

impl TxnCheck for Infallible {
    type Unverified = Infallible;

    fn check(self, _: &mut Log, _: (&str, i32)) -> crate::storage::error::Result<Result<(), Stop<Infallible>>> {
        match self {}
    }
}

/// Append one partition's batches, after `txn_check` (`TxnCheck`) of its transactional ones.
async fn append<C: TxnCheck>(
    broker: &Arc<Broker>,
    (topic, partition): (&str, i32),
    (records, transactional): (Option<&[u8]>, bool),
    (acks, deadline): (i16, Instant),
    txn_check: Option<C>,
    peer: &str,
) -> Outcome<C::Unverified> {
    let log = match broker.partition_within((topic, partition), Access::Write, deadline).await {
        Ok(Some(log)) => log,
        Ok(None) => {
            return Err((codes::UNKNOWN_TOPIC_OR_PARTITION, format!("this server does not host {topic}-{partition}")))
        }
        Err(e) => {
            if matches!(e, crate::storage::error::Error::LockTimeout { .. }) {
                log::warn!(target: crate::server::log_target::LOG_TARGET, "produce to {topic}-{partition} from {peer}: opening it: {e}");
            }
            return Err((codes::for_error(&e), e.to_string()));
        }
    };
    if topic == crate::server::state::offsets::OFFSETS_TOPIC {
        return Err((
            codes::INVALID_TOPIC_EXCEPTION,
            format!("{topic} is internal: clients commit offsets with OffsetCommit"),
        ));
    }
    let records = records.ok_or((codes::CORRUPT_MESSAGE, "the partition's records are null".to_string()))?;
    let started = Instant::now();
    if let Some(outcome) = waits::retry_until(deadline, || {
        std::future::ready(attempt(broker, &log, (topic, partition), (records, transactional), (acks, txn_check)))
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
        target: crate::server::log_target::LOG_TARGET,
        "produce to {topic}-{partition} from {peer}: gave up after {waited} ms waiting for the partition's append \
         lock, held by {holder} (stopped or hung?); answered REQUEST_TIMED_OUT"
    );
    Err((
        codes::REQUEST_TIMED_OUT,
        format!("{topic}-{partition}: its append lock stayed held by {holder} for {waited} ms; retry later"),
    ))
}

/// One try: lock the partition's log and its append lock if both are free now, then append.
/// `transactional`: the records are all transactional batches (`txn_api::TxnBatches::all`).
fn attempt<C: TxnCheck>(
    broker: &Broker,
    log: &std::sync::Mutex<Log>,
    (topic, partition): (&str, i32),
    (records, transactional): (&[u8], bool),
    (acks, txn_check): (i16, Option<C>),
) -> Attempt<C::Unverified> {
    let mut log = match try_lock_log(log) {
        Ok(Some(log)) => log,
        Ok(None) => return None,
        Err(e) => {
            broker.forget_partition(topic, partition);
            return Some(Err((codes::for_error(&e), e.to_string())));
        }
    };
    // A panic here (a bug) leaves the log locked half way through a request.
    if let Err(e) = crate::storage::failpoint::hit("server.produce") {
        return Some(Err((codes::KAFKA_STORAGE_ERROR, e.to_string())));
    }
    let produced = match log.try_with_append_lock(|log| {
        if let Some(check) = txn_check {
            // Under the append lock, so no marker (the coordinator appends under the same lock)
            // can come between the check and the append.
            if let Err(stop) = check.check(log, (topic, partition))? {
                return Ok(Err(stop));
            }
        }
        log.append_produce(records).map(Ok)
    }) {
        Ok(None) => return None,
        Ok(Some(Err(Stop::Verify(unverified)))) => return Some(Ok(Err(unverified))),
        Ok(Some(Err(Stop::Refuse(code, why)))) => return Some(Err((code, why))),
        Ok(Some(Ok(produced))) => Ok(produced),
        Err(e) => Err(e),
    };
    // acks=all: what the answer waits for, taken while the log is still locked (`durable`).
    let since = match &produced {
        Ok(Produced::Appended(first, _)) => Some(*first),
        Ok(Produced::Duplicate(batch)) => Some(batch.first_offset()),
        _ => None,
    };
    // Transactional batches are made durable by their transaction's end, not here (`durable`).
    let transactional = since.is_some() && transactional;
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
            Ok(Ok(Appended { base_offset: batch.first_offset(), log_append_time, log_start_offset, durable }))
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
            Ok(Ok(Appended { base_offset, log_append_time, log_start_offset: log.start_offset(), durable }))
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

/// The outcome of an append that asked for no open transaction: it appended or was refused.
fn appended(outcome: Outcome<Infallible>) -> Done {
    outcome.map(|appended| appended.unwrap_or_else(|never| match never {}))
}

/// A partition between `append_all`'s two passes: done, or its transactional batches waiting
/// for the coordinator's verification (their producer held no open transaction there).
enum Pass {
    Done(Done),
    /// The partition, its guard, and whether it holds only transactional batches.
    Unverified((String, i32), Guarded, bool),
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
    // Stamped partitions come with the transactional id that verifies them: without one,
    // `transactional_partitions` refused them all.
    let txn = id.map(|id| (id, stamped.into_iter().collect::<HashMap<_, _>>()));
    let mut passes: Vec<Vec<Pass>> = Vec::with_capacity(request.topic_data.len().min(1024));
    for topic in &request.topic_data {
        let name = topic.name.0.to_string();
        let mut partitions = Vec::with_capacity(topic.partition_data.len().min(1024));
        for p in &topic.partition_data {
            let key = (name.clone(), p.index);
            let records = p.records.as_deref();
            let stamp = txn.as_ref().and_then(|(_, stamps)| stamps.get(&key).copied());
            let pass = if let Some(refusal) = refused.remove(&key) {
                Pass::Done(Err(refusal))
            } else if !valid_acks {
                Pass::Done(Err((codes::INVALID_REQUIRED_ACKS, format!("acks must be -1, 0 or 1, not {acks}"))))
            } else if let Some(txn_api::TxnBatches { producer, all }) = stamp {
                let (batches, check) = ((records, all), Some((producer, txn_api::ends_bump(version))));
                match append(broker, (&name, p.index), batches, (acks, deadline), check, peer).await {
                    Ok(Ok(appended)) => Pass::Done(Ok(appended)),
                    Ok(Err(guarded)) => Pass::Unverified(key, guarded, all),
                    Err(refusal) => Pass::Done(Err(refusal)),
                }
            } else {
                let (batches, unchecked) = ((records, false), None::<Infallible>);
                Pass::Done(appended(append(broker, (&name, p.index), batches, (acks, deadline), unchecked, peer).await))
            };
            partitions.push(pass);
        }
        passes.push(partitions);
    }
    // The unverified partitions, verified all at once, then appended after the request's others.
    let wanted: Vec<txn_api::Stamped> = passes
        .iter()
        .flatten()
        .filter_map(|pass| match pass {
            Pass::Unverified(key, guarded, _) => Some((key.clone(), guarded.producer)),
            Pass::Done(_) => None,
        })
        .collect();
    let verifying = !wanted.is_empty();
    let mut refused = match &txn {
        Some((id, _)) => txn_api::verify_produce(broker, id, wanted, version, deadline).await,
        None => HashMap::new(), // nothing stamped, so nothing unverified
    };
    // Between the verification and the append (no lock held): where a marker may come in.
    let injected = if verifying { crate::storage::failpoint::hit("server.produce.verified").err() } else { None };
    let mut outcomes = Vec::with_capacity(passes.len());
    for (topic, partitions) in request.topic_data.iter().zip(passes) {
        let mut done = Vec::with_capacity(partitions.len());
        for (p, pass) in topic.partition_data.iter().zip(partitions) {
            done.push(match pass {
                Pass::Done(outcome) => outcome,
                Pass::Unverified(key, guarded, all) => match (refused.remove(&key), &injected) {
                    (Some(refusal), _) => Err(refusal),
                    (None, Some(e)) => Err((codes::KAFKA_STORAGE_ERROR, e.to_string())),
                    (None, None) => {
                        let (batches, checked) = ((p.records.as_deref(), all), Some(guarded));
                        appended(append(broker, (&key.0, key.1), batches, (acks, deadline), checked, peer).await)
                    }
                },
            });
        }
        outcomes.push(done);
    }
    outcomes
}
