//! The transactional producer's APIs (KIP-98, KIP-360, KIP-447, KIP-890): InitProducerId with
//! a transactional id, AddPartitionsToTxn (the clients' v0-v3, and v4+'s batched form with its
//! verify-only check), AddOffsetsToTxn, TxnOffsetCommit and EndTxn (answered at its decision, its
//! markers written after: `txn_ends`), each one call of the data
//! directory's transaction coordinator (`crate::coordination::transactions::Coordinator`), the same one the
//! embedded transactional producers use, so a network producer and an embedded one with the
//! same transactional id fence each other.
//!
//! Transaction version 2 (KIP-890 part 2), which ApiVersions finalizes (`dispatch.rs`) and the
//! request versions say a client uses, as Kafka's broker reads them: Produce v12+ adds its
//! partitions to the transaction (`verify_produce`), TxnOffsetCommit v5+ its group's offsets
//! partition, AddPartitionsToTxn v4+ (a broker's form) adds at version 2, and EndTxn v5+ bumps
//! the epoch and answers the producer id and epoch to continue with. Older versions keep
//! version 0's rules (kafka-python, librdkafka, Java 3.x).
//!
//! Every call takes the transactional id's lock, which an embedded producer (maybe stopped)
//! can hold, and writes durably: they run off the request workers (`dispatch::blocking`), and a
//! lock not had within `waits::LOCK_WAIT` answers CONCURRENT_TRANSACTIONS, which clients retry.
//! Engine errors become Kafka's codes (`codes::for_error`); PRODUCER_FENCED goes to the API
//! versions that know it (KIP-588), INVALID_PRODUCER_EPOCH to older ones, as Kafka's broker does.

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    EndTxnRequest, EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProducerId,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::offset_commit::{requested, CommitPlan, Committer};
use crate::coordination::transactions::{TV_0, TV_2};
use crate::server::codes;
use crate::server::state::broker::Broker;
use crate::server::state::txn_ends;
use crate::server::state::waits;
use crate::storage::error::Error;
use crate::storage::log::now_ms;
use crate::storage::record::header::{BatchHeader, HEADER_LEN, MIN_BATCH_LENGTH};

/// The first version of each API a client sends at transaction version 2 (Kafka's
/// `transactionVersionForEndTxn`, `transactionVersionForAddPartitionsToTxn`, Produce's
/// `addPartition` verification and TxnOffsetCommit's).
const TV2_SINCE_END: i16 = 5;
const TV2_SINCE_ADD: i16 = 4;
const TV2_SINCE_PRODUCE: i16 = 12;
const TV2_SINCE_OFFSETS_COMMIT: i16 = 5;

/// Whether the client sending Produce `version` is at transaction version 2: its Produce adds
/// its partitions to the transaction, and each of its transaction's ends bumps the epoch (the
/// markers carry the epoch after the transaction's own).
pub fn ends_bump(produce_version: i16) -> bool {
    client_version(produce_version, TV2_SINCE_PRODUCE) >= TV_2
}

/// The client's transaction version of a request of `version` of an API whose first version-2
/// version is `since`.
fn client_version(version: i16, since: i16) -> i16 {
    if version >= since {
        TV_2
    } else {
        TV_0
    }
}

/// The first version of each API whose clients know PRODUCER_FENCED (KIP-588); older ones are
/// told INVALID_PRODUCER_EPOCH, which they treat as fatal the same way.
const FENCED_SINCE_INIT: i16 = 4;
const FENCED_SINCE_ADD: i16 = 2;
const FENCED_SINCE_OFFSETS_COMMIT: i16 = 3;

/// The code for an engine error, for a request of `version` of an API that knows
/// PRODUCER_FENCED since `fenced_since`, logged as a refusal.
fn refusal(e: &Error, versions: (i16, i16), peer: &str, api: &str, what: &str) -> i16 {
    codes::refused(peer, api, refusal_code(e, versions), &format!("{what}: {e}"))
}

/// `refusal`'s code, not logged (for a refusal among others logged as one line).
fn refusal_code(e: &Error, (version, fenced_since): (i16, i16)) -> i16 {
    let mut code = match e {
        // An empty transactional or group id, a value out of range: Kafka's INVALID_REQUEST.
        Error::InvalidConfig(_) => codes::INVALID_REQUEST,
        e => codes::for_error(e),
    };
    if code == codes::PRODUCER_FENCED && version < fenced_since {
        code = codes::INVALID_PRODUCER_EPOCH;
    }
    code
}

/// InitProducerId for a transactional id: the coordinator aborts the id's open transaction (if
/// any) and bumps its epoch, fencing any older producer of the id; `producer_id`/`epoch` set
/// (v3+, KIP-360) re-initialise a producer that still has them.
pub fn init_producer_id(
    broker: &Broker,
    transactional_id: &str,
    request: &InitProducerIdRequest,
    version: i16,
    peer: &str,
) -> InitProducerIdResponse {
    let expected = (request.producer_id.0 >= 0).then_some((request.producer_id.0, request.producer_epoch));
    // This boot recorded before a producer can send (unsynced: `durable`), so a restart of the
    // server in the same boot keeps its open transaction (`Coordinator::abort_open_after_reboot`).
    let done = broker.transactions.record_boot().and_then(|()| {
        broker.transactions.init_producer_id(transactional_id, request.transaction_timeout_ms, expected, now_ms())
    });
    match done {
        Ok((id, epoch)) => {
            InitProducerIdResponse::default().with_producer_id(ProducerId(id)).with_producer_epoch(epoch)
        }
        Err(e) => {
            let what = format!("transactional id {transactional_id:?}");
            let code = refusal(&e, (version, FENCED_SINCE_INIT), peer, "InitProducerId", &what);
            InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
        }
    }
}

/// The partitions of a request's topics.
fn partitions_of(topics: &[AddPartitionsToTxnTopic]) -> Vec<(String, i32)> {
    topics.iter().flat_map(|t| t.partitions.iter().map(move |&p| (t.name.0.to_string(), p))).collect()
}

/// Per partition of `topics`, the code (Kafka's `AddPartitionsToTxnResult`): one code for all
/// when the coordinator refused, UNKNOWN_TOPIC_OR_PARTITION for the partitions that do not
/// exist and OPERATION_NOT_ATTEMPTED for the others when some do not (nothing is added then).
fn results(
    topics: &[AddPartitionsToTxnTopic],
    mut code_of: impl FnMut(&str, i32) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            let results = t
                .partitions
                .iter()
                .map(|&p| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(p)
                        .with_partition_error_code(code_of(t.name.0.as_str(), p))
                })
                .collect();
            AddPartitionsToTxnTopicResult::default().with_name(t.name.clone()).with_results_by_partition(results)
        })
        .collect()
}

/// One transaction's AddPartitionsToTxn (or its verification, `verify_only`), answered per topic.
fn add_or_verify(
    broker: &Broker,
    (transactional_id, producer_id, epoch): (&str, i64, i16),
    topics: &[AddPartitionsToTxnTopic],
    (verify_only, version): (bool, i16),
    peer: &str,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let what = format!("transactional id {transactional_id:?}");
    let partitions = partitions_of(topics);
    if verify_only {
        let mut refusals = codes::Refusals::new("partition");
        let answered = results(topics, |t, p| {
            match broker.transactions.verify_partition(transactional_id, producer_id, epoch, t, p) {
                Ok(()) => codes::NONE,
                Err(e) => {
                    let code = refusal_code(&e, (version, FENCED_SINCE_ADD));
                    refusals.add(code, format_args!("{t}-{p}"), || format!("{what}: {e}"))
                }
            }
        });
        refusals.log(peer, "AddPartitionsToTxn");
        return answered;
    }
    let known = broker.topics().ok();
    let exists =
        |t: &str, p: i32| known.as_ref().and_then(|k| k.get(t)).is_some_and(|m| (0..m.partitions).contains(&p));
    if partitions.iter().any(|(t, p)| !exists(t, *p)) {
        let mut refusals = codes::Refusals::new("partition");
        let answered = results(topics, |t, p| match exists(t, p) {
            true => refusals.add(codes::OPERATION_NOT_ATTEMPTED, format_args!("{t}-{p}"), || {
                format!("{what}: another partition of the request does not exist")
            }),
            false => refusals.add(codes::UNKNOWN_TOPIC_OR_PARTITION, format_args!("{t}-{p}"), || {
                format!("{what}: no such partition")
            }),
        });
        refusals.log(peer, "AddPartitionsToTxn");
        return answered;
    }
    let tv = client_version(version, TV2_SINCE_ADD);
    match broker.transactions.add_partitions_as(transactional_id, producer_id, epoch, &partitions, tv, now_ms()) {
        Ok(()) => results(topics, |_, _| codes::NONE),
        Err(e) => {
            let code = refusal(&e, (version, FENCED_SINCE_ADD), peer, "AddPartitionsToTxn", &what);
            results(topics, |_, _| code)
        }
    }
}

pub fn add_partitions_to_txn(
    broker: &Broker,
    request: AddPartitionsToTxnRequest,
    version: i16,
    peer: &str,
) -> AddPartitionsToTxnResponse {
    if version <= 3 {
        let txn = (
            request.v3_and_below_transactional_id.0.as_str(),
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
        );
        let topics = add_or_verify(broker, txn, &request.v3_and_below_topics, (false, version), peer);
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics);
    }
    let answered = request
        .transactions
        .iter()
        .map(|t| {
            let txn = (t.transactional_id.0.as_str(), t.producer_id.0, t.producer_epoch);
            let topics = add_or_verify(broker, txn, &t.topics, (t.verify_only, version), peer);
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(topics)
        })
        .collect();
    AddPartitionsToTxnResponse::default().with_results_by_transaction(answered)
}

pub fn add_offsets_to_txn(
    broker: &Broker,
    request: AddOffsetsToTxnRequest,
    version: i16,
    peer: &str,
) -> AddOffsetsToTxnResponse {
    let (id, group) = (request.transactional_id.0.as_str(), request.group_id.0.as_str());
    let code = if group.is_empty() {
        codes::refused(peer, "AddOffsetsToTxn", codes::INVALID_GROUP_ID, "the group id is empty")
    } else {
        match broker.transactions.add_offsets(id, request.producer_id.0, request.producer_epoch, group, now_ms()) {
            Ok(()) => codes::NONE,
            Err(e) => {
                let what = format!("transactional id {id:?}, group {group:?}");
                refusal(&e, (version, FENCED_SINCE_ADD), peer, "AddOffsetsToTxn", &what)
            }
        }
    };
    AddOffsetsToTxnResponse::default().with_error_code(code)
}

/// TxnOffsetCommit: the group's offsets written into the transaction (visible to OffsetFetch
/// once it commits, never if it aborts), checked against the group by the check OffsetCommit
/// uses (`Committer`; KIP-447: a zombie of an older generation or member epoch is refused). One
/// naming neither member nor generation (the pre-KIP-447 form) passes, as in Kafka, unless
/// embedded consumers are consuming the group.
pub fn txn_offset_commit(
    broker: &Broker,
    request: TxnOffsetCommitRequest,
    version: i16,
    peer: &str,
) -> TxnOffsetCommitResponse {
    let (id, group) = (request.transactional_id.0.to_string(), request.group_id.0.to_string());
    let what = format!("transactional id {id:?}, group {group:?}");
    let committer = Committer {
        group: &group,
        member_id: &request.member_id,
        instance: request.group_instance_id.as_ref().map(|i| i.as_str()),
        generation: request.generation_id,
        version,
        transactional: true,
    };
    let verdict: Result<(), i16> = if group.is_empty() {
        Err(codes::refused(peer, "TxnOffsetCommit", codes::INVALID_GROUP_ID, "the group id is empty"))
    } else {
        committer.check(broker, &format!("TxnOffsetCommit ({what})"), peer)
    };
    let plan = CommitPlan::new(broker, requested!(request.topics), verdict);
    let written = if plan.commits.is_empty() {
        Ok(())
    } else {
        let (pid, epoch) = (request.producer_id.0, request.producer_epoch);
        let tv = client_version(version, TV2_SINCE_OFFSETS_COMMIT);
        // Checked again where the offsets are written: the member may have been fenced while
        // the commit waited for the transactional id's lock.
        let admit = || committer.check(broker, &format!("TxnOffsetCommit ({what}, checked again where written)"), peer);
        match broker.transactions.txn_offset_commit_as(&id, pid, epoch, &group, &plan.commits, tv, now_ms(), admit) {
            Ok(admitted) => admitted,
            Err(e) => Err(refusal(&e, (version, FENCED_SINCE_OFFSETS_COMMIT), peer, "TxnOffsetCommit", &what)),
        }
    };
    let mut refusals = codes::Refusals::new("partition");
    let topics = plan
        .answered(written)
        .map(|(name, parts)| {
            let partitions = parts
                .map(|(index, code)| {
                    // The group's verdict and the coordinator's refusal were logged already.
                    if verdict.is_ok() && written.is_ok() {
                        refusals.add(code, format_args!("{}-{index}", name.0), || format!("{what}: not committed"));
                    }
                    TxnOffsetCommitResponsePartition::default().with_partition_index(index).with_error_code(code)
                })
                .collect();
            TxnOffsetCommitResponseTopic::default().with_name(name).with_partitions(partitions)
        })
        .collect();
    refusals.log(peer, "TxnOffsetCommit");
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// EndTxn: commit or abort, two-phase (the coordinator records Prepare* after the transaction's
/// records are durable; the markers and Complete* follow), answered once the end is decided, as
/// Kafka's coordinator does: the rest is `Pending`, for `txn_ends::Completion`, and finished
/// by whoever touches the id next if this server dies before. v5+ (transaction version 2) bumps
/// the epoch and answers the producer id and epoch the producer continues with (-1, -1 with an
/// error).
pub fn end_txn(
    broker: &Broker,
    request: EndTxnRequest,
    version: i16,
    peer: &str,
) -> (EndTxnResponse, Option<txn_ends::Pending>) {
    let id = request.transactional_id.0.as_str();
    let (pid, epoch) = (request.producer_id.0, request.producer_epoch);
    let tv = client_version(version, TV2_SINCE_END);
    let decided = broker.transactions.end_txn_decided_as(id, pid, epoch, request.committed, tv, now_ms());
    // Markers may have been written (a Prepare* state settled first, a step failed after them):
    // wake read_committed fetches.
    broker.announce_append();
    match decided {
        Ok(decided) => {
            let pending = decided.pending.then(|| broker.txn_ends.start(id));
            let response = match version >= TV2_SINCE_END {
                true => EndTxnResponse::default()
                    .with_producer_id(ProducerId(decided.producer_id))
                    .with_producer_epoch(decided.producer_epoch),
                false => EndTxnResponse::default(),
            };
            (response, pending)
        }
        Err(e) => {
            let what = format!("{} of transactional id {id:?}", if request.committed { "commit" } else { "abort" });
            let code = refusal(&e, (version, FENCED_SINCE_ADD), peer, "EndTxn", &what);
            (EndTxnResponse::default().with_error_code(code), None)
        }
    }
}

/// Each v2 batch header of a partition's records, in order, to `f`: `Err` for one that does not
/// parse (or `f`'s). A length the engine's validation refuses ends the walk there; that refusal
/// follows at the append.
fn each_header(records: &[u8], mut f: impl FnMut(&BatchHeader) -> Result<(), String>) -> Result<(), String> {
    let mut at = 0usize;
    while records.len() >= at + HEADER_LEN {
        let header = BatchHeader::parse(&records[at..]).map_err(|e| e.to_string())?;
        f(&header)?;
        if header.batch_length < MIN_BATCH_LENGTH {
            break;
        }
        at = at.saturating_add(header.total_size());
    }
    Ok(())
}

/// A partition's transactional batches: their producer (id, epoch), and whether the partition
/// holds nothing else (its durability is then their transaction's end's: `durable::after_append`).
#[derive(Clone, Copy, Debug)]
pub struct TxnBatches {
    pub producer: (i64, i16),
    pub all: bool,
}

/// The transactional batches in a partition's records, if any: `Err` when they are not all one
/// producer's (Kafka takes one batch per partition from v3).
fn transactional_batches(records: &[u8]) -> Result<Option<TxnBatches>, String> {
    let (mut producer, mut all) = (None, true);
    each_header(records, |header| {
        if !header.is_transactional() {
            all = false;
            return Ok(());
        }
        let this = (header.producer_id, header.producer_epoch);
        if producer.is_some_and(|p| p != this) {
            return Err("transactional batches of more than one producer in one partition".into());
        }
        producer = Some(this);
        Ok(())
    })?;
    Ok(producer.map(|producer| TxnBatches { producer, all }))
}

/// The transactional partitions of a Produce request: each with its transactional batches'
/// producer (id, epoch) and whether they are all it holds, and the refusals of those that cannot
/// be appended at all (batches of several producers in one partition; transactional batches
/// without a transactional id, which Kafka refuses before any check). `None` as the id: the
/// request names none.
pub fn transactional_partitions(request: &ProduceRequest) -> (Option<String>, Vec<TxnPartition>, Refused) {
    let mut refused = HashMap::new();
    let mut wanted = Vec::new();
    for topic in &request.topic_data {
        for p in &topic.partition_data {
            let key = (topic.name.0.to_string(), p.index);
            match transactional_batches(p.records.as_deref().unwrap_or_default()) {
                Ok(Some(batches)) => wanted.push((key, batches)),
                Ok(None) => {}
                Err(why) => {
                    refused.insert(key, (codes::INVALID_RECORD, why));
                }
            }
        }
    }
    let id = request.transactional_id.as_ref().map(|id| id.0.to_string());
    if id.is_none() {
        // Kafka: transactional records need a transactional id the client may write as.
        for (key, _) in wanted.drain(..) {
            let why = "transactional batches without a transactional id".to_string();
            refused.insert(key, (codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED, why));
        }
    }
    (id, wanted, refused)
}

/// What Kafka's broker checks of a transactional Produce whose partition holds no open
/// transaction of its producer at its epoch (KIP-890 part 1's verification, with the coordinator
/// at hand; `produce` skips it for a partition that does, as Kafka's `hasOngoingTransaction`
/// does): each partition's batches are `id`'s current producer and epoch in an open transaction
/// the partition was added to. Otherwise a batch could land after its transaction ended (an
/// append no marker will ever close, holding the last stable offset back for good) or from a
/// fenced producer. From v12 (transaction version 2, KIP-890 part 2) a partition not yet in
/// the transaction is added to it instead (starting one), as a Kafka 4 broker's verification
/// does; the coordinator still refuses another epoch or producer id. Per refused partition: the
/// code and why. Reads (and adds) off the request workers.
pub async fn verify_produce(
    broker: &Arc<Broker>,
    id: &str,
    wanted: Vec<Stamped>,
    version: i16,
    deadline: Instant,
) -> Refused {
    let mut refused = HashMap::new();
    if wanted.is_empty() {
        return refused;
    }
    let checked: Vec<Stamped> = wanted.clone();
    let adds = ends_bump(version);
    let verdicts = waits::off_workers(broker, deadline, {
        let id = id.to_string();
        move |b| {
            let each = |((t, p), (pid, epoch)): &Stamped| {
                b.transactions
                    .verify_partition(&id, *pid, *epoch, t, *p)
                    .map_err(|e| (codes::for_error(&e), e.to_string()))
            };
            let mut verdicts = checked.iter().map(each).collect::<Vec<_>>();
            if adds {
                add_unverified(b, &id, &checked, &mut verdicts);
            }
            verdicts
        }
    })
    .await;
    for (i, (key, _)) in wanted.into_iter().enumerate() {
        let verdict = match &verdicts {
            Ok(each) => each[i].clone(),
            Err(waits::NotDone::Busy) => {
                Err((codes::REQUEST_TIMED_OUT, "no slot for blocking work came free in time (server busy)".into()))
            }
            Err(waits::NotDone::Stopped) => Err((codes::REQUEST_TIMED_OUT, "the server is stopping".into())),
            Err(waits::NotDone::Panicked) => {
                Err((codes::UNKNOWN_SERVER_ERROR, "the verification panicked (a bug)".into()))
            }
        };
        if let Err((code, why)) = verdict {
            // Produce answers a fenced producer INVALID_PRODUCER_EPOCH (its clients know no
            // PRODUCER_FENCED there), and a coordinator busy with the id (its lock held)
            // NOT_ENOUGH_REPLICAS, which every client retries (Kafka's translation of
            // CONCURRENT_TRANSACTIONS from the verification).
            let code = match code {
                codes::PRODUCER_FENCED => codes::INVALID_PRODUCER_EPOCH,
                codes::CONCURRENT_TRANSACTIONS => codes::NOT_ENOUGH_REPLICAS,
                code => code,
            };
            refused.insert(key, (code, format!("transactional id {id:?}: {why}")));
        }
    }
    refused
}

/// Refused partitions of a Produce: (topic, partition) -> (code, why).
pub type Refused = HashMap<(String, i32), (i16, String)>;

/// A partition of a transactional Produce and the producer (id, epoch) of its batches.
pub type Stamped = ((String, i32), (i64, i16));

/// A partition of a Produce holding transactional batches, and what they are.
pub type TxnPartition = ((String, i32), TxnBatches);

/// Transaction version 2's verification: the partitions whose check found them outside the
/// transaction (INVALID_TXN_STATE: right producer and epoch) are added to it, one coordinator
/// call per producer of the request; each gets that call's verdict.
fn add_unverified(broker: &Broker, id: &str, checked: &[Stamped], verdicts: &mut [Result<(), (i16, String)>]) {
    let mut missing: Vec<((i64, i16), Vec<usize>)> = Vec::new();
    for (i, (_, producer)) in checked.iter().enumerate() {
        if !matches!(&verdicts[i], Err((codes::INVALID_TXN_STATE, _))) {
            continue;
        }
        match missing.iter_mut().find(|(p, _)| p == producer) {
            Some((_, at)) => at.push(i),
            None => missing.push((*producer, vec![i])),
        }
    }
    for ((pid, epoch), at) in missing {
        let partitions: Vec<(String, i32)> = at.iter().map(|&i| checked[i].0.clone()).collect();
        let added = broker
            .transactions
            .add_partitions_as(id, pid, epoch, &partitions, TV_2, now_ms())
            .map_err(|e| (codes::for_error(&e), e.to_string()));
        for i in at {
            verdicts[i] = added.clone();
        }
    }
}
