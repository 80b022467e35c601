//! Kafka's error codes (org.apache.kafka.common.protocol.Errors) for the engine's errors.

use crate::error::Error;

pub const NONE: i16 = 0;
pub const UNKNOWN_SERVER_ERROR: i16 = -1;
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
pub const LEADER_NOT_AVAILABLE: i16 = 5;
pub const CORRUPT_MESSAGE: i16 = 2;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const MESSAGE_TOO_LARGE: i16 = 10;
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
pub const INVALID_REQUIRED_ACKS: i16 = 21;
pub const INVALID_GROUP_ID: i16 = 24;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const ILLEGAL_SASL_STATE: i16 = 34;
pub const UNSUPPORTED_VERSION: i16 = 35;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
pub const INVALID_PARTITIONS: i16 = 37;
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
pub const INVALID_CONFIG: i16 = 40;
pub const INVALID_REQUEST: i16 = 42;
pub const POLICY_VIOLATION: i16 = 44;
pub const NON_EMPTY_GROUP: i16 = 68;
pub const GROUP_ID_NOT_FOUND: i16 = 69;
pub const UNSUPPORTED_ENDPOINT_TYPE: i16 = 119;
pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 = 43;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const KAFKA_STORAGE_ERROR: i16 = 56;
pub const REQUEST_TIMED_OUT: i16 = 7;
pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
pub const INVALID_RECORD: i16 = 87;
pub const THROTTLING_QUOTA_EXCEEDED: i16 = 89;
pub const UNKNOWN_TOPIC_ID: i16 = 100;

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
