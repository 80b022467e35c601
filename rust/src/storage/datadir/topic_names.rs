//! Topic names: Kafka's naming rules, a partition folder's name read back, and the internal
//! topics clients may not create, delete or repartition.

use crate::storage::error::{Error, Result};

/// (topic, partition) of a `<topic>-<partition>` folder name (Kafka's partition folders), None
/// for any other name.
pub fn partition_folder(name: &str) -> Option<(String, i32)> {
    let (topic, partition) = name.rsplit_once('-')?;
    let partition =
        partition.parse::<i32>().ok().filter(|p| *p >= 0 && partition.bytes().all(|b| b.is_ascii_digit()))?;
    validate_topic_name(topic).ok()?;
    Some((topic.to_string(), partition))
}

/// Kafka's topic-name rules (`Topic.validate`): what is wrong with `name`, in words that say
/// what to fix, or None for a valid name. The one copy: the server's CreateTopics and Metadata,
/// the data directory, and Python's `datadir.validate_topic_name` (through the binding) ask it.
pub fn topic_name_problem(name: &str) -> Option<String> {
    if name == "." || name == ".." {
        return Some(format!("topic name {name:?} is not allowed"));
    }
    let ok = !name.is_empty()
        && name.len() <= 249
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    (!ok).then(|| {
        format!("topic name {name:?} is invalid: use 1-249 characters of ASCII letters, digits, '.', '_' and '-'")
    })
}

/// `topic_name_problem` as the engine's error.
pub fn validate_topic_name(name: &str) -> Result<()> {
    topic_name_problem(name).map_or(Ok(()), |why| Err(Error::config(why)))
}

/// Kafka's committed offsets topic (`Topic.GROUP_METADATA_TOPIC_NAME`), named here with the
/// other internal topic so the storage layer needs no coordination module to know it.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Kafka's transaction log topic (`Topic.TRANSACTION_STATE_TOPIC_NAME`).
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
/// Kafka's internal topics (`Topic.INTERNAL_TOPICS`), the one list: clients may not create or
/// delete them (they are kafkalite's own: `__consumer_offsets` holds the committed offsets in
/// 50 partitions; a topic of another shape would break every group), nor change their partitions.
pub const INTERNAL_TOPICS: [&str; 2] = [OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC];

pub fn is_internal(topic: &str) -> bool {
    INTERNAL_TOPICS.contains(&topic)
}

/// Kafka's rule for destructive admin calls on an internal topic, the one copy that DeleteTopics
/// and DeleteRecords (the server's) and `Admin.delete_topic` / `Admin.delete_records` (embedded)
/// all apply: `__consumer_offsets` holds every consumer group's committed offsets, so deleting
/// it, or records from it, would lose them all. Kafka answers INVALID_TOPIC_EXCEPTION whatever
/// the topic's cleanup.policy (changing that config stays allowed, as in Kafka). `what` names
/// the refused call in the message.
pub fn refuse_internal(topic: &str, what: &str) -> Result<()> {
    if !is_internal(topic) {
        return Ok(());
    }
    Err(Error::InvalidTopic(format!(
        "{topic} is an internal topic (Kafka's, kept by kafkalite: {OFFSETS_TOPIC} holds every consumer group's \
         committed offsets), so {what} is not allowed on it; to drop or move a group's offsets, delete the \
         group or reset its offsets (Admin.delete_group, Admin.reset_offsets)"
    )))
}
