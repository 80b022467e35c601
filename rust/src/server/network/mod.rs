//! The network side: listeners and connections, below the handlers, which it reaches only
//! through `dispatch`. `listen` (which security an address needs), `tls` (TLS listeners and
//! client certificates), `admission` (connection caps, the authentication deadline), `connection`
//! (one client: read, dispatch, answer, in order) with `pipeline` (Produce answers waiting for
//! their syncs while the next requests are appended), `frame` (length-prefixed frames and their
//! limits), `sasl` (a connection's SASL state: SaslHandshake, SaslAuthenticate) and
//! `metrics_page` (the Prometheus text page on its own listener).

pub mod admission;
pub mod connection;
pub mod connection_rate;
pub mod frame;
pub mod listen;
pub mod metrics_page;
pub mod pipeline;
pub mod sasl;
pub mod tls;
