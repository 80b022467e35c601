//! DescribeTransactions and ListTransactions (KIP-664, what `kafka-transactions.sh describe` and
//! `list` and the Admin client's `describeTransactions`/`listTransactions` send): the
//! coordinator's metadata of the data directory's transactional ids, embedded producers' and
//! network ones' alike, read from `__transaction_state` (off the request workers: it may open
//! its partitions).

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_transactions_response::{self, TopicData};
use kafka_protocol::messages::list_transactions_response;
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ListTransactionsRequest, ListTransactionsResponse,
    ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use crate::coordination::transactions::{TransactionMetadata, TransactionState};
use crate::server::codes;
use crate::server::state::broker::Broker;
use crate::storage::log::now_ms;

/// Every state a filter may name (Kafka's `TransactionState` names).
const STATES: &[TransactionState] = &[
    TransactionState::Empty,
    TransactionState::Ongoing,
    TransactionState::PrepareCommit,
    TransactionState::PrepareAbort,
    TransactionState::CompleteCommit,
    TransactionState::CompleteAbort,
    TransactionState::Dead,
    TransactionState::PrepareEpochFence,
];

fn described(m: &TransactionMetadata) -> describe_transactions_response::TransactionState {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in &m.partitions {
        by_topic.entry(topic).or_default().push(*partition);
    }
    let topics = by_topic
        .into_iter()
        .map(|(t, ps)| {
            TopicData::default().with_topic(TopicName(StrBytes::from_string(t.to_string()))).with_partitions(ps)
        })
        .collect();
    describe_transactions_response::TransactionState::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(m.transactional_id.clone())))
        .with_transaction_state(StrBytes::from_static_str(m.state.name()))
        .with_transaction_timeout_ms(m.timeout_ms)
        .with_transaction_start_time_ms(m.start_ms)
        .with_producer_id(ProducerId(m.producer_id))
        .with_producer_epoch(m.producer_epoch)
        .with_topics(topics)
}

/// A transactional id answered with an error.
fn not_described(id: &TransactionalId, code: i16) -> describe_transactions_response::TransactionState {
    describe_transactions_response::TransactionState::default()
        .with_transactional_id(id.clone())
        .with_error_code(code)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
        .with_transaction_start_time_ms(-1)
}

pub fn describe_transactions(
    broker: &Broker,
    request: DescribeTransactionsRequest,
    peer: &str,
) -> DescribeTransactionsResponse {
    let mut refusals = codes::Refusals::new("transactional id");
    let states = request
        .transactional_ids
        .iter()
        .map(|id| {
            let name = id.0.as_str();
            match broker.transactions.describe(name) {
                Ok(Some(m)) if m.state != TransactionState::Dead => described(&m),
                Ok(_) => {
                    let code = refusals.add(codes::TRANSACTIONAL_ID_NOT_FOUND, format_args!("{name:?}"), || {
                        "no such transactional id".into()
                    });
                    not_described(id, code)
                }
                Err(e) => {
                    not_described(id, refusals.add(codes::for_error(&e), format_args!("{name:?}"), || e.to_string()))
                }
            }
        })
        .collect();
    refusals.log(peer, "DescribeTransactions");
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

/// ListTransactions with its filters (Kafka's `TransactionStateManager.listTransactionStates`):
/// states by name (names it does not know are returned as `unknown_state_filters`), producer
/// ids, and (v1+) transactions open longer than a duration. Dead ids are never listed.
pub fn list_transactions(
    broker: &Broker,
    request: ListTransactionsRequest,
    version: i16,
    peer: &str,
) -> ListTransactionsResponse {
    let mut unknown = Vec::new();
    let mut states = Vec::new();
    for name in &request.state_filters {
        match STATES.iter().find(|s| s.name() == name.as_str()) {
            Some(s) => states.push(*s),
            None => unknown.push(name.clone()),
        }
    }
    let all = match broker.transactions.list() {
        Ok(all) => all,
        Err(e) => {
            let code = codes::refused(peer, "ListTransactions", codes::for_error(&e), &e.to_string());
            return ListTransactionsResponse::default().with_error_code(code);
        }
    };
    let pids: Vec<i64> = request.producer_id_filters.iter().map(|p| p.0).collect();
    let duration = if version >= 1 { request.duration_filter } else { -1 };
    let now = now_ms();
    let listed = all
        .iter()
        .filter(|m| m.state != TransactionState::Dead)
        .filter(|m| pids.is_empty() || pids.contains(&m.producer_id))
        .filter(|m| (request.state_filters.is_empty()) || states.contains(&m.state))
        .filter(|m| duration < 0 || now - m.start_ms > duration)
        .map(|m| {
            list_transactions_response::TransactionState::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(m.transactional_id.clone())))
                .with_producer_id(ProducerId(m.producer_id))
                .with_transaction_state(StrBytes::from_static_str(m.state.name()))
        })
        .collect();
    ListTransactionsResponse::default().with_unknown_state_filters(unknown).with_transaction_states(listed)
}
