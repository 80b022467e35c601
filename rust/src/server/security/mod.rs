//! Who a client is and what it may do, below everything that asks: `principal` (Kafka's
//! `User:<name>`), `credentials` (the SCRAM users kept in memory) with `scram` (one SCRAM
//! exchange), and `authorizer` (Kafka's ACL model: the ACL file, StandardAuthorizer's decision).
//! It imports no handler, no network module and no state, so either can use it.

pub mod authorizer;
pub mod credentials;
pub mod principal;
pub mod scram;
