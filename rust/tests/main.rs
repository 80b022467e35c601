//! The engine's integration tests, one module per area, linked into one binary (`cargo test`
//! runs them all; `cargo test --test engine <module>::` runs one area).

mod cleaner_crash;
mod cleaner_shared;
mod durable_sync;
mod hostile;
mod locks;
mod log;
mod producers;
mod server;
mod topics_journal;
mod transactions;
mod txn;
mod vectors;
