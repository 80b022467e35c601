//! One file per Kafka API or API family, each over the shared `state`: `produce`, `fetch`,
//! `list_offsets`, `metadata` (Metadata, CreateTopics), `find_coordinator`, `group_api` (the
//! classic group APIs), `consumer_group_api` (KIP-848), `offset_commit` (OffsetCommit,
//! OffsetFetch), `offset_delete`, `init_producer_id`, `txn_api` (the transactional producer's
//! APIs and the verification of transactional Produce batches), `transactions_admin`,
//! `describe_producers`, the admin APIs (`topics_admin`, `configs`, `delete_records`,
//! `groups_admin`, `log_dirs`, `cluster`, `acl_api`, `scram_admin`, `client_quotas`), and
//! `acl_requests` (which operation on which resource each API needs, checked by `dispatch`
//! before the handler, with `acl_requests/refusals`: a refused request's answer, and
//! `acl_requests/listing`: listings filtered instead). Handlers import state; state never
//! imports a handler (tests/project/test_layer_picture.py checks).

pub mod acl_api;
pub mod acl_requests;
pub mod client_quotas;
pub mod cluster;
pub mod configs;
pub mod consumer_group_api;
pub mod delete_records;
pub mod describe_producers;
pub mod fetch;
pub mod find_coordinator;
pub mod group_api;
pub mod groups_admin;
pub mod init_producer_id;
pub mod list_offsets;
pub mod log_dirs;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod produce;
pub mod scram_admin;
pub mod topics_admin;
pub mod transactions_admin;
pub mod txn_api;
