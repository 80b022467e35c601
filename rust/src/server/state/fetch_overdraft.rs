//! The first batches fetches send past the response budget (`fetch_limits::Limits`), counted per
//! client (principal and peer address): a fetch that finds no room in the budget still gets its
//! first batch (KIP-74), but each client's such batches not yet written are bounded
//! (`OVERDRAFT_PER_CLIENT`, and one batch always), so many connections of one client that
//! never read their answers cannot grow the server's memory by one batch each, while every
//! other client still gets its first batch at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::server::network::frame::QUEUED_MAX_RESPONSE_BYTES;

/// The most bytes of first batches past the budget one client's unwritten answers hold
/// (one batch however large is always allowed when the client holds none).
pub const OVERDRAFT_PER_CLIENT: usize = QUEUED_MAX_RESPONSE_BYTES;

/// Bytes past the budget held by each client's unwritten answers.
#[derive(Default)]
pub struct Overdrafts {
    held: Arc<Mutex<HashMap<String, usize>>>,
}

/// The client a fetch counts against: its principal and its peer's address without the port.
pub fn client_key(principal: &str, peer: &str) -> String {
    let host = peer.rsplit_once(':').map_or(peer, |(host, _)| host);
    format!("{principal}@{host}")
}

impl Overdrafts {
    /// Take `bytes` past the budget for `client`, unless its answers not yet written already
    /// hold some and this would take them past `OVERDRAFT_PER_CLIENT`.
    pub fn take(&self, client: &str, bytes: usize) -> Option<Overdraft> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let now = held.get(client).copied().unwrap_or(0);
        if now > 0 && now.saturating_add(bytes) > OVERDRAFT_PER_CLIENT {
            return None;
        }
        held.insert(client.to_string(), now + bytes);
        Some(Overdraft { held: Arc::clone(&self.held), client: client.to_string(), bytes })
    }
}

/// One answer's bytes past the budget, given back when it is written (or dropped).
pub struct Overdraft {
    held: Arc<Mutex<HashMap<String, usize>>>,
    client: String,
    bytes: usize,
}

impl Drop for Overdraft {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.client) {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                held.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_batch_always_then_bounded_per_client() {
        let o = Overdrafts::default();
        let big = o.take("User:ANONYMOUS@127.0.0.1", 2 * OVERDRAFT_PER_CLIENT).expect("one batch always");
        assert!(o.take("User:ANONYMOUS@127.0.0.1", 1).is_none(), "past the bound");
        assert!(o.take("User:alice@127.0.0.1", 1).is_some(), "another client is not affected");
        drop(big);
        assert!(o.take("User:ANONYMOUS@127.0.0.1", 1).is_some(), "given back once written");
        assert_eq!(client_key("User:a", "[::1]:9092"), "User:a@[::1]");
    }
}
