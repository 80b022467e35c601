//! The coordination layer: the state Kafka's coordinators keep in a data directory, above the
//! storage layer and below the server: committed offsets (`__consumer_offsets`), producer ids,
//! the transaction coordinator, SCRAM users and client quotas. Both the server and the embedded
//! clients (through the binding) use it; it imports storage only, never the server or the binding.

pub mod committed_offsets;
pub mod offsets_codec;
pub mod producer_ids;
pub mod quotas;
pub mod transactions;
pub mod users;
