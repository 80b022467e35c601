//! DeleteTopics and CreatePartitions, through the engine's `DataDir` (what `Admin.delete_topic`
//! and `Admin.create_partitions` call too): one owner of how a topic is deleted or grown.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::server::codes;
use crate::server::state::broker::Broker;
use crate::storage::error::Error;

/// A topic-level failure: Kafka's code and the message that says what to fix.
pub type Failure = (i16, String);

/// The code and message for an engine error of a topic admin call.
fn failure(e: Error, invalid: i16) -> Failure {
    let code = match &e {
        Error::UnknownTopicOrPartition(_) => codes::UNKNOWN_TOPIC_OR_PARTITION,
        Error::InvalidConfig(_) => invalid,
        other => codes::for_error(other),
    };
    (code, e.to_string())
}

/// Kafka's topic-name rules: INVALID_TOPIC_EXCEPTION, before any name becomes a path.
pub fn topic_name(name: &str) -> Result<(), Failure> {
    crate::storage::datadir::validate_topic_name(name).map_err(|e| (codes::INVALID_TOPIC_EXCEPTION, e.to_string()))
}

/// A topic of a Kafka broker's log directory (no kafkalite metadata): read-only here.
pub fn read_only(name: &str) -> Failure {
    (
        codes::POLICY_VIOLATION,
        format!("topic {name:?} belongs to a Kafka broker's log directory, which kafkalite only reads"),
    )
}

/// CreateTopics of an internal topic (`datadir::INTERNAL_TOPICS`): refused as Kafka refuses
/// it. kafkalite creates `__consumer_offsets` itself, with its 50 partitions, at the first
/// commit; one created by hand with another count would send each group's offsets to a
/// partition that does not exist.
pub fn creatable(name: &str) -> Result<(), Failure> {
    if crate::storage::datadir::is_internal(name) {
        return Err((codes::INVALID_REQUEST, format!("Creation of internal topic {name} is prohibited.")));
    }
    Ok(())
}

fn delete_one(broker: &Broker, name: &str) -> Result<(), Failure> {
    topic_name(name)?;
    // `DataDir::delete_topic` refuses it too; checked first so that the server's open logs of
    // `__consumer_offsets` (its committed-offset store) are not dropped for a refused call.
    crate::storage::datadir::refuse_internal(name, "DeleteTopics")
        .map_err(|e| failure(e, codes::INVALID_TOPIC_EXCEPTION))?;
    let meta = broker.topics().ok().and_then(|t| t.get(name).cloned());
    if meta.as_ref().is_some_and(|m| m.discovered) {
        return Err(read_only(name));
    }
    let partitions = meta.map_or(0, |m| m.partitions);
    let result = broker.dir.delete_topic(name);
    // This server's own open logs of the topic are stale either way.
    for p in 0..partitions {
        broker.forget_partition(name, p);
    }
    broker.topics_changed();
    result.map_err(|e| failure(e, codes::INVALID_TOPIC_EXCEPTION))
}

pub fn delete_topics(broker: &Broker, request: DeleteTopicsRequest, version: i16, peer: &str) -> DeleteTopicsResponse {
    // v0-5 name the topics in `topic_names`, v6+ in `topics` (by name or by topic id).
    let named: Vec<(Option<TopicName>, bool)> = if version >= 6 {
        request.topics.into_iter().map(|t| (t.name, !t.topic_id.is_nil())).collect()
    } else {
        request.topic_names.into_iter().map(|n| (Some(n), false)).collect()
    };
    let responses = named
        .into_iter()
        .map(|(name, by_id)| {
            let result = DeletableTopicResult::default().with_name(name.clone());
            let outcome = match name {
                // kafkalite's topics have no ids (Metadata reports none), so an id names no topic.
                _ if by_id => {
                    Err((codes::UNKNOWN_TOPIC_ID, "kafkalite's topics have no topic ids; delete by name".into()))
                }
                None => Err((codes::INVALID_REQUEST, "a topic to delete needs a name".into())),
                Some(n) => delete_one(broker, &n.0),
            };
            match outcome {
                Ok(()) => result,
                Err((code, message)) => {
                    let result = result.with_error_code(codes::refused(peer, "DeleteTopics", code, &message));
                    if version >= 5 {
                        result.with_error_message(Some(StrBytes::from_string(message)))
                    } else {
                        result
                    }
                }
            }
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}

fn grow(broker: &Broker, name: &str, count: i32, assigned: bool, validate_only: bool) -> Result<(), Failure> {
    topic_name(name)?;
    if assigned {
        return Err((codes::INVALID_REPLICA_ASSIGNMENT, "kafkalite has one broker; send no replica assignment".into()));
    }
    let discovered = broker.topics().ok().and_then(|t| t.get(name).map(|m| m.discovered)).unwrap_or(false);
    if discovered {
        return Err(read_only(name));
    }
    let result = broker.dir.create_partitions(name, count, validate_only);
    broker.topics_changed();
    result.map_err(|e| failure(e, codes::INVALID_PARTITIONS))
}

pub fn create_partitions(broker: &Broker, request: CreatePartitionsRequest, peer: &str) -> CreatePartitionsResponse {
    let results = request
        .topics
        .into_iter()
        .map(|t| {
            let result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            match grow(broker, &t.name.0, t.count, t.assignments.is_some(), request.validate_only) {
                Ok(()) => result,
                Err((code, message)) => {
                    let code = codes::refused(peer, "CreatePartitions", code, &message);
                    result.with_error_code(code).with_error_message(Some(StrBytes::from_string(message)))
                }
            }
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results)
}
