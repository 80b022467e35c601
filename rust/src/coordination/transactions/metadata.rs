//! What the coordinator knows of one transactional id (Kafka's `TransactionMetadata`) and the
//! states of its transaction (`TransactionState`, with Kafka's byte values: they are what
//! `__transaction_state` stores).

use std::collections::BTreeSet;

/// Kafka's feature `transaction.version` (KIP-1022), as ApiVersions names it.
pub const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";
/// Transaction version 0 (Kafka's `TV_0`): what a request of a client before KIP-890 part 2
/// carries (EndTxn < 5, Produce < 12, TxnOffsetCommit < 5) and what the embedded producers use:
/// partitions join by AddPartitionsToTxn / AddOffsetsToTxn, the epoch stays across transactions.
pub const TV_0: i16 = 0;
/// Transaction version 2 (`TV_2`, KIP-890 part 2): partitions join by the Produce (v12+) and
/// TxnOffsetCommit (v5+) that write to them, and every EndTxn (v5+) bumps the producer epoch
/// (the markers carry the bumped one), answering the epoch the producer continues with.
pub const TV_2: i16 = 2;

/// Kafka's `TransactionState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransactionState {
    /// No transaction (after InitProducerId).
    Empty,
    /// Partitions were added: a transaction is open.
    Ongoing,
    /// EndTxn(commit) recorded; markers being written.
    PrepareCommit,
    /// EndTxn(abort) (or a fence, a timeout) recorded; markers being written.
    PrepareAbort,
    /// Every COMMIT marker written.
    CompleteCommit,
    /// Every ABORT marker written.
    CompleteAbort,
    /// The transactional id expired (its tombstone follows).
    Dead,
    /// In memory only in Kafka while a timed-out transaction's epoch is bumped; read if found.
    PrepareEpochFence,
}

impl TransactionState {
    /// The byte Kafka stores (`TransactionState.id()`).
    pub fn id(self) -> i8 {
        match self {
            TransactionState::Empty => 0,
            TransactionState::Ongoing => 1,
            TransactionState::PrepareCommit => 2,
            TransactionState::PrepareAbort => 3,
            TransactionState::CompleteCommit => 4,
            TransactionState::CompleteAbort => 5,
            TransactionState::Dead => 6,
            TransactionState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TransactionState> {
        Some(match id {
            0 => TransactionState::Empty,
            1 => TransactionState::Ongoing,
            2 => TransactionState::PrepareCommit,
            3 => TransactionState::PrepareAbort,
            4 => TransactionState::CompleteCommit,
            5 => TransactionState::CompleteAbort,
            6 => TransactionState::Dead,
            7 => TransactionState::PrepareEpochFence,
            _ => return None,
        })
    }

    /// Kafka's names (`TransactionState.stateName()`), as DescribeTransactions and
    /// ListTransactions answer them.
    pub fn name(self) -> &'static str {
        match self {
            TransactionState::Empty => "Empty",
            TransactionState::Ongoing => "Ongoing",
            TransactionState::PrepareCommit => "PrepareCommit",
            TransactionState::PrepareAbort => "PrepareAbort",
            TransactionState::CompleteCommit => "CompleteCommit",
            TransactionState::CompleteAbort => "CompleteAbort",
            TransactionState::Dead => "Dead",
            TransactionState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// PrepareCommit or PrepareAbort: decided, markers not all written.
    pub fn is_prepare(self) -> bool {
        matches!(self, TransactionState::PrepareCommit | TransactionState::PrepareAbort)
    }
}

/// One transactional id's record in `__transaction_state` (TransactionLogValue's fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    /// v1 tagged field 0: the producer id of the last committed transaction (-1: none).
    pub previous_producer_id: i64,
    /// v1 tagged field 1: the producer id handed out next for this id (-1: none).
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TransactionState,
    /// The partitions of the open (or ending) transaction.
    pub partitions: BTreeSet<(String, i32)>,
    pub last_update_ms: i64,
    /// When the open transaction started (its first AddPartitions); -1 when none.
    pub start_ms: i64,
    /// v1 tagged field 2: the client's transaction version (0: before KIP-890).
    pub client_transaction_version: i16,
}

impl TransactionMetadata {
    /// A new id's metadata: a fresh producer id at epoch 0, no transaction.
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> TransactionMetadata {
        TransactionMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: 0,
            timeout_ms,
            state: TransactionState::Empty,
            partitions: BTreeSet::new(),
            last_update_ms: now_ms,
            start_ms: -1,
            client_transaction_version: 0,
        }
    }

    /// An Ongoing transaction past its timeout (Kafka's `txnStartTimestamp + txnTimeoutMs < now`).
    pub fn expired(&self, now_ms: i64) -> bool {
        self.state == TransactionState::Ongoing && self.start_ms.saturating_add(self.timeout_ms as i64) < now_ms
    }
}
