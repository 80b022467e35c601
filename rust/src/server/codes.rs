//! Kafka's error codes (org.apache.kafka.common.protocol.Errors) for the engine's errors.

use crate::server::log_target::LOG_TARGET;
use crate::storage::error::Error;

/// Each code once, with its name for log lines.
macro_rules! kafka_errors {
    ($($name:ident = $code:expr),* $(,)?) => {
        $(pub const $name: i16 = $code;)*

        /// Kafka's name of an error code (`Errors.name()`), as refusals are logged.
        pub fn name(code: i16) -> &'static str {
            $(if code == $name { return stringify!($name); })*
            "UNKNOWN"
        }
    };
}

kafka_errors! {
    NONE = 0,
    UNKNOWN_SERVER_ERROR = -1,
    OFFSET_OUT_OF_RANGE = 1,
    LEADER_NOT_AVAILABLE = 5,
    CORRUPT_MESSAGE = 2,
    UNKNOWN_TOPIC_OR_PARTITION = 3,
    MESSAGE_TOO_LARGE = 10,
    OFFSET_METADATA_TOO_LARGE = 12,
    COORDINATOR_LOAD_IN_PROGRESS = 14,
    COORDINATOR_NOT_AVAILABLE = 15,
    INVALID_TOPIC_EXCEPTION = 17,
    NOT_ENOUGH_REPLICAS = 19,
    ILLEGAL_GENERATION = 22,
    INCONSISTENT_GROUP_PROTOCOL = 23,
    INVALID_REQUIRED_ACKS = 21,
    INVALID_GROUP_ID = 24,
    UNKNOWN_MEMBER_ID = 25,
    INVALID_SESSION_TIMEOUT = 26,
    REBALANCE_IN_PROGRESS = 27,
    UNSUPPORTED_SASL_MECHANISM = 33,
    ILLEGAL_SASL_STATE = 34,
    UNSUPPORTED_VERSION = 35,
    TOPIC_ALREADY_EXISTS = 36,
    INVALID_PARTITIONS = 37,
    INVALID_REPLICATION_FACTOR = 38,
    INVALID_REPLICA_ASSIGNMENT = 39,
    INVALID_CONFIG = 40,
    INVALID_REQUEST = 42,
    POLICY_VIOLATION = 44,
    NON_EMPTY_GROUP = 68,
    GROUP_ID_NOT_FOUND = 69,
    UNSUPPORTED_ENDPOINT_TYPE = 119,
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43,
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45,
    INVALID_PRODUCER_EPOCH = 47,
    KAFKA_STORAGE_ERROR = 56,
    REQUEST_TIMED_OUT = 7,
    FETCH_SESSION_ID_NOT_FOUND = 70,
    SASL_AUTHENTICATION_FAILED = 58,
    INVALID_RECORD = 87,
    THROTTLING_QUOTA_EXCEEDED = 89,
    UNKNOWN_TOPIC_ID = 100,
    GROUP_SUBSCRIBED_TO_TOPIC = 86,
    FENCED_INSTANCE_ID = 82,
    INVALID_TXN_STATE = 48,
    INVALID_PRODUCER_ID_MAPPING = 49,
    INVALID_TRANSACTION_TIMEOUT = 50,
    CONCURRENT_TRANSACTIONS = 51,
    TOPIC_AUTHORIZATION_FAILED = 29,
    GROUP_AUTHORIZATION_FAILED = 30,
    CLUSTER_AUTHORIZATION_FAILED = 31,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53,
    OPERATION_NOT_ATTEMPTED = 55,
    UNSTABLE_OFFSET_COMMIT = 88,
    PRODUCER_FENCED = 90,
    TRANSACTIONAL_ID_NOT_FOUND = 105,
    RESOURCE_NOT_FOUND = 91,
    DUPLICATE_RESOURCE = 92,
    UNACCEPTABLE_CREDENTIAL = 93,
    FENCED_MEMBER_EPOCH = 110,
    UNRELEASED_INSTANCE_ID = 111,
    UNSUPPORTED_ASSIGNOR = 112,
    STALE_MEMBER_EPOCH = 113,
    INVALID_REGULAR_EXPRESSION = 128,
}

/// The code a client gets for an engine error on a partition.
pub fn for_error(e: &Error) -> i16 {
    match e {
        Error::Corrupt(_) => CORRUPT_MESSAGE,
        Error::OffsetOutOfRange { .. } => OFFSET_OUT_OF_RANGE,
        Error::RecordTooLarge { .. } => MESSAGE_TOO_LARGE,
        Error::InvalidRecord(_) | Error::InvalidConfig(_) => INVALID_RECORD,
        Error::Unsupported(_) => UNSUPPORTED_FOR_MESSAGE_FORMAT,
        Error::UnknownTopicOrPartition(_) => UNKNOWN_TOPIC_OR_PARTITION,
        Error::InvalidTopic(_) => INVALID_TOPIC_EXCEPTION,
        Error::Transaction { kind, .. } => kind.code(),
        Error::LockTimeout { .. } => REQUEST_TIMED_OUT, // another writer held the append lock too long
        Error::Locked { .. }
        | Error::Closed(_)
        | Error::Poisoned(_)
        | Error::LogPoisoned(_)
        | Error::CorruptMetadata(_)
        | Error::Io { .. } => KAFKA_STORAGE_ERROR,
    }
}

/// Errors after which the cached log should be reopened.
pub fn needs_reopen(e: &Error) -> bool {
    matches!(e, Error::UnknownTopicOrPartition(_) | Error::Poisoned(_) | Error::LogPoisoned(_) | Error::Closed(_))
}

/// A refused request: one WARNING line with the client's address, the API, Kafka's error name
/// and why, so that an operator sees what a client was told (a client's own log often hides
/// it). Returns `code`, for the response.
pub fn refused(peer: &str, api: &str, code: i16, reason: &str) -> i16 {
    ::log::warn!(target: LOG_TARGET, "refused {api} from {peer}: {} ({reason})", name(code));
    code
}

/// How many partitions a refusal line names per error before "and N more": a request naming
/// thousands of unknown partitions still logs one short line.
const NAMED_PER_ERROR: usize = 5;

/// The refused partitions (or resources) of one request, logged as one WARNING line when the
/// request is answered (`log`): a request with many refused partitions is one refusal, not one
/// line each. Per error code, the partitions it was given for and the first reason.
pub struct Refusals {
    /// What is refused, singular: "partition", "topic".
    noun: &'static str,
    by_code: Vec<(i16, Vec<String>, String)>,
    count: usize,
}

impl Refusals {
    pub fn new(noun: &'static str) -> Refusals {
        Refusals { noun, by_code: Vec::new(), count: 0 }
    }

    /// Note `code` for `what` (e.g. "topic-0"), unless it is NONE; returns `code`.
    pub fn add(&mut self, code: i16, what: impl std::fmt::Display, reason: impl FnOnce() -> String) -> i16 {
        if code == NONE {
            return code;
        }
        self.count += 1;
        match self.by_code.iter_mut().find(|(c, _, _)| *c == code) {
            Some((_, named, _)) => named.push(what.to_string()),
            None => self.by_code.push((code, vec![what.to_string()], reason())),
        }
        code
    }

    /// The one line for the request, if anything was refused: "refused Produce from PEER: 3
    /// partitions: UNKNOWN_TOPIC_OR_PARTITION (x-1, x-2: reason), INVALID_REQUIRED_ACKS (y-0: reason)".
    pub fn log(&self, peer: &str, api: &str) {
        if self.count == 0 {
            return;
        }
        let errors: Vec<String> = self
            .by_code
            .iter()
            .map(|(code, named, reason)| {
                let mut list = named.iter().take(NAMED_PER_ERROR).cloned().collect::<Vec<_>>().join(", ");
                if named.len() > NAMED_PER_ERROR {
                    list.push_str(&format!(" and {} more", named.len() - NAMED_PER_ERROR));
                }
                if reason.is_empty() {
                    format!("{} ({list})", name(*code))
                } else {
                    format!("{} ({list}: {reason})", name(*code))
                }
            })
            .collect();
        let plural = if self.count == 1 { "" } else { "s" };
        ::log::warn!(
            target: LOG_TARGET,
            "refused {api} from {peer}: {} {}{plural} refused: {}",
            self.count,
            self.noun,
            errors.join(", ")
        );
    }
}
