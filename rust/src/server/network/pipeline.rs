//! One connection's answers not yet written, in request order. A connection answers in the
//! order it was asked (Kafka's ordering), but an acks=all Produce whose batches are appended
//! only waits for a sync (`durable`) before its answer: meanwhile the connection reads and
//! appends its next Produce requests, so one group-commit sync covers all of them instead of
//! one sync per request (producers keep up to 5 requests in flight on a connection: Java's
//! and librdkafka's `max.in.flight.requests.per.connection` with idempotence). The waiting
//! answers are tasks of their own, so their syncs start at once, not when the connection
//! gets to them.
//!
//! What stays as before: appends happen in request order (a request is read only after the
//! previous one's append returned); answers are written in request order; any request but a
//! Produce is served only after every earlier answer was written (`connection`), so nothing else
//! sees the overlap; every waiting answer ends at its request's deadline (`durable::settle`).

use std::collections::VecDeque;
use std::future::Future;

use bytes::Bytes;
use tokio::task::JoinHandle;

use super::frame::Frame;
use crate::server::request::{Answer, DecodeError};

/// The most answers one connection keeps waiting; it reads no further request until the
/// oldest is written. Above the 5 in flight of Kafka's clients, and small: each keeps its
/// request's frame (a share of the request budget) until it is written.
pub const MAX_WAITING: usize = 8;

/// A Produce's answer, computed by its own task once its sync is done.
pub struct Waiting(JoinHandle<Result<Option<Bytes>, DecodeError>>);

impl Waiting {
    /// Run `answer` (the wait for the sync, then the response's encoding) as a task now.
    pub fn spawn(answer: impl Future<Output = Result<Option<Bytes>, DecodeError>> + Send + 'static) -> Waiting {
        Waiting(tokio::spawn(answer))
    }
}

/// The answers of one connection not yet written, oldest first, each with its request's frame
/// (which holds its share of the request budget until it is answered, as any request's does).
#[derive(Default)]
pub struct Answers(VecDeque<(Answer, Frame)>);

impl Answers {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the connection must write the oldest answer before it reads another request.
    pub fn is_full(&self) -> bool {
        self.0.len() >= MAX_WAITING
    }

    pub fn push(&mut self, answer: Answer, frame: Frame) {
        self.0.push_back((answer, frame));
    }

    /// The oldest answer once it is done (never, while there is none). Cancel-safe (for
    /// `select!`): an answer is taken off the queue only when it is returned.
    pub async fn next(&mut self) -> Result<Option<Bytes>, DecodeError> {
        let outcome = match self.0.front_mut() {
            None => std::future::pending().await,
            Some((Answer::Now(bytes), _)) => Ok(bytes.take()),
            // Never queued: `connection` queues its bytes as `Now` and starts its work.
            Some((Answer::Then(bytes, _), _)) => Ok(Some(bytes.clone())),
            Some((Answer::Later(Waiting(task)), _)) => {
                task.await.unwrap_or_else(|_| Err(DecodeError("Produce: its answer's task panicked (a bug)".into())))
            }
        };
        self.0.pop_front();
        outcome
    }
}
