//! What bounds Fetch responses over all connections (`handlers/fetch` reads within it): the
//! `fetch.max.bytes` cap of one response, the budget of record bytes read and not yet written,
//! and the first batches sent past it (`fetch_overdraft`). State the broker holds, apart from
//! the handler, so that the broker's state never imports a handler.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::server::network::frame::QUEUED_MAX_RESPONSE_BYTES;
use crate::server::state::fetch_overdraft::{Overdraft, Overdrafts};

/// Kafka's `fetch.max.bytes` broker default: 55 MiB.
pub const FETCH_MAX_BYTES: i32 = 55 * 1024 * 1024;
/// Kafka's lower bound for `fetch.max.bytes`.
pub const FETCH_MAX_BYTES_MIN: i32 = 1024;

/// What bounds fetch responses, shared by every connection.
pub struct Limits {
    /// `fetch.max.bytes`: the most record bytes in one response.
    pub max_bytes: usize,
    /// Record bytes of responses read and not yet written, all connections together.
    pub budget: Arc<Semaphore>,
    /// First batches sent past the budget, bounded per client.
    pub overdrafts: Overdrafts,
}

/// What an unwritten answer holds: its share of the budget, and its first batch past it.
pub type Held = (Option<OwnedSemaphorePermit>, Option<Overdraft>);

impl Limits {
    pub fn new(fetch_max_bytes: i32) -> Limits {
        Limits {
            max_bytes: fetch_max_bytes.max(0) as usize,
            budget: Arc::new(Semaphore::new(QUEUED_MAX_RESPONSE_BYTES)),
            overdrafts: Overdrafts::default(),
        }
    }
}
