//! Decoded records into an Arrow `RecordBatch`: one copy from the (decompressed) batch into
//! Arrow's contiguous buffers, no per-record objects.
//!
//! Schema: `offset int64, timestamp timestamp[ms, UTC], key binary, value binary,
//! headers list<struct<key: string, value: binary>>` (headers null when a record has none,
//! as in Spark's Kafka source).

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, Int64Builder, StringBuilder, TimestampMillisecondBuilder};
use arrow_array::{ArrayRef, ListArray, RecordBatch, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use crate::error::{Error, Result};
use crate::log_read::RecordSink;
use crate::record::RecordRef;

fn header_fields() -> Fields {
    Fields::from(vec![Field::new("key", DataType::Utf8, false), Field::new("value", DataType::Binary, true)])
}

/// The schema of every batch `ArrowSink` produces.
pub fn record_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("offset", DataType::Int64, false),
        Field::new("timestamp", DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())), false),
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new(
            "headers",
            DataType::List(Arc::new(Field::new("item", DataType::Struct(header_fields()), false))),
            true,
        ),
    ]))
}

/// Accumulates records as Arrow columns.
pub struct ArrowSink {
    offsets: Int64Builder,
    timestamps: TimestampMillisecondBuilder,
    keys: BinaryBuilder,
    values: BinaryBuilder,
    header_offsets: Vec<i32>,
    header_present: Vec<bool>,
    header_keys: StringBuilder,
    header_values: BinaryBuilder,
    /// Bytes of keys and values so far: Arrow's binary type addresses at most 2 GiB.
    payload_bytes: usize,
}

impl ArrowSink {
    pub fn with_capacity(records: usize, bytes: usize) -> Self {
        ArrowSink {
            offsets: Int64Builder::with_capacity(records),
            timestamps: TimestampMillisecondBuilder::with_capacity(records).with_timezone("UTC"),
            keys: BinaryBuilder::with_capacity(records, 0),
            values: BinaryBuilder::with_capacity(records, bytes),
            header_offsets: {
                let mut v = Vec::with_capacity(records + 1);
                v.push(0);
                v
            },
            header_present: Vec::with_capacity(records),
            header_keys: StringBuilder::new(),
            header_values: BinaryBuilder::new(),
            payload_bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.header_present.len()
    }

    pub fn is_empty(&self) -> bool {
        self.header_present.is_empty()
    }

    /// Build the batch.
    pub fn finish(mut self) -> Result<RecordBatch> {
        let header_structs = StructArray::new(
            header_fields(),
            vec![Arc::new(self.header_keys.finish()) as ArrayRef, Arc::new(self.header_values.finish())],
            None,
        );
        let any_missing = self.header_present.iter().any(|p| !p);
        let headers = ListArray::new(
            Arc::new(Field::new("item", DataType::Struct(header_fields()), false)),
            OffsetBuffer::new(self.header_offsets.into()),
            Arc::new(header_structs),
            any_missing.then(|| NullBuffer::from(self.header_present)),
        );
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.offsets.finish()),
            Arc::new(self.timestamps.finish()),
            Arc::new(self.keys.finish()),
            Arc::new(self.values.finish()),
            Arc::new(headers),
        ];
        RecordBatch::try_new(record_schema(), columns)
            .map_err(|e| Error::corrupt(format!("cannot build Arrow batch: {e}")))
    }
}

impl RecordSink for ArrowSink {
    fn push(&mut self, r: &RecordRef<'_>) -> Result<()> {
        self.payload_bytes += r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len);
        if self.payload_bytes > i32::MAX as usize {
            return Err(Error::config(
                "records do not fit one Arrow batch (2 GiB of keys and values); pass a smaller max_records",
            ));
        }
        self.offsets.append_value(r.offset);
        self.timestamps.append_value(r.timestamp);
        self.keys.append_option(r.key);
        self.values.append_option(r.value);
        for (k, v) in &r.headers {
            self.header_keys.append_value(k);
            self.header_values.append_option(*v);
        }
        let last = *self.header_offsets.last().unwrap();
        self.header_offsets.push(last + r.headers.len() as i32);
        self.header_present.push(!r.headers.is_empty());
        Ok(())
    }
}
