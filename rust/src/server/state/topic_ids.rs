//! Topic ids (KIP-516) for the APIs that name topics by id: the consumer group protocol's
//! assignments (KIP-848: ConsumerGroupHeartbeat, ConsumerGroupDescribe) and Metadata v10+,
//! where clients learn them. kafkalite stores no id with a topic, so a topic's id is derived
//! from its name (SHA-256): the same in every process and across restarts, never the nil id.
//! Unlike Kafka, a topic deleted and created again under its name gets the same id.

use std::collections::HashMap;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::broker::Topics;

/// The id of `topic`.
pub fn of(topic: &str) -> Uuid {
    let digest = Sha256::new().chain_update(b"kafkalite topic id\0").chain_update(topic.as_bytes()).finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    // RFC 9562 version 8 (custom) and variant bits: a well-formed UUID, never nil.
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    Uuid::from_bytes(bytes)
}

/// The name of the topic whose id is `id`, among `topics`.
pub fn name_of(topics: &Topics, id: &Uuid) -> Option<String> {
    topics.keys().find(|name| of(name) == *id).cloned()
}

/// Every topic of `topics` by its id: one hash per topic for a request that names many by id
/// (a heartbeat's owned partitions), not one per topic it names.
pub fn by_id(topics: &Topics) -> HashMap<Uuid, String> {
    topics.keys().map(|name| (of(name), name.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_are_stable_distinct_and_never_nil() {
        assert_eq!(of("orders"), of("orders"));
        assert_ne!(of("orders"), of("orders2"));
        assert!(!of("").is_nil());
    }
}
