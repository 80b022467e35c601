pub mod admission;
pub mod connection;
pub mod frame;
pub mod listen;
pub mod pipeline;
pub mod sasl;
pub mod tls;
