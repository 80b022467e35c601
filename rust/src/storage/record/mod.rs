//! Kafka's v2 record format: varints, records, batch headers, batches and codecs.

pub mod batch;
pub mod compression;
pub mod filter;
pub mod header;
#[allow(clippy::module_inception)]
pub mod record;
pub mod scan;
pub mod varint;

pub use batch::{
    decode_batch_owned, encode_batches, fill_batches, for_each_record, for_each_record_until, record_area,
    BatchBuilder, OwnedRecord,
};
pub use compression::Compression;
pub use header::{BatchHeader, ProducerStamp, TimestampType};
pub use record::{EncodeRecord, Header, RecordInput, RecordRef, ValueInput};
