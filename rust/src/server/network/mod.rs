pub mod admission;
pub mod connection;
pub mod frame;
pub mod listen;
pub mod metrics_page;
pub mod pipeline;
pub mod sasl;
pub mod tls;
