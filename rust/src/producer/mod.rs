//! The embedded producer's core, plain Rust (the Python binding wraps it: `py/producer.rs`):
//!
//! - `accumulator`: Kafka's `RecordAccumulator`, records batched per partition (murmur2 of the
//!   key, or the sticky partitioner of `crate::producer::partitioner`), sealed at `batch_size` or the
//!   topic's cap, with the time each open batch started, for `linger_ms`;
//! - `drain`: a partition's taken batches appended in order through the engine's append
//!   (`Log::append_builder_deferred`), with an outcome per batch for the caller to complete.
//!
//! A batch's completion is the caller's: the accumulator carries an opaque handle per batch
//! (`B`) and hands it back with the batch; nothing here knows of futures or callbacks.

pub mod accumulator;
pub mod drain;
pub mod partitioner;

pub use accumulator::{Accumulator, Placed, Queued, Refusal, TakenStats};
pub use drain::{append_in_order, Appended, BatchSink, Drained};
