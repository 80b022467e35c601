//! What the handlers share, and never a handler: `broker` (the topics, the open partitions,
//! the append wake-up, and the pieces below) with `open_logs` (which partitions stay open),
//! `locks` (locking that survives a panicked holder) and `waits` (lock waits off the request
//! workers); `durable` (what acks=all waits for), `committed` (what read_committed reads),
//! `fetch_limits` with `fetch_overdraft` (the response budget), `quotas` (client quota
//! enforcement) with `request_time` (a request's server time, for `request_percentage`),
//! `topic_creation` (the creation lane and the controller mutation quota),
//! `topic_ids`, `offsets` (the `__consumer_offsets` store), `txn_ends` (EndTxn's markers after
//! its answer), `metrics` (the counters); and the coordinators' state: `group` (the classic
//! group coordinator, with `group/state`, `group/join`, `group/claim`), `group_owner` (embedded
//! or network coordinator), `kip848_coordinator` (the consumer protocol's groups: epochs,
//! reconciliation, timeouts) with `assignors` (`uniform` and `range`).

pub mod assignors;
pub mod broker;
pub mod committed;
pub mod durable;
pub mod fetch_limits;
pub mod fetch_overdraft;
pub mod group;
pub mod group_owner;
pub mod kip848_coordinator;
pub mod locks;
pub mod metrics;
pub mod offsets;
pub mod open_logs;
pub mod quotas;
pub mod request_time;
pub mod topic_creation;
pub mod topic_ids;
pub mod txn_ends;
pub mod waits;
