//! The `log` target of the server's events, a leaf every part of the server logs under.

/// The `log` target of the server's events (failed authentications, refused connections); the
/// binding forwards it to Python's `logging.getLogger("kafkalite.server")`.
pub const LOG_TARGET: &str = "kafkalite::server";
