//! Decoded records into an Arrow `RecordBatch`: one copy from the (decompressed) batch into
//! Arrow's contiguous buffers, no per-record objects.
//!
//! Schema: `offset int64, timestamp timestamp[ms, UTC], key binary, value binary,
//! headers list<struct<key: string, value: binary>>` (headers null when a record has none).
//! The pieces other row shapes reuse (the `headers` column, the 2 GiB payload guard) are
//! `pub(crate)`; Spark's own shape lives in `crate::spark`, never here.

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, Int64Builder, StringBuilder, TimestampMillisecondBuilder};
use arrow_array::{ArrayRef, ListArray, RecordBatch, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use crate::error::{Error, Result};
use crate::log_read::RecordSink;
use crate::record::RecordRef;

fn header_fields() -> Fields {
    header_fields_with(false)
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

/// The `headers` column: `list<struct<key, value>>`, null for records without headers.
pub(crate) struct HeaderColumns {
    offsets: Vec<i32>,
    present: Vec<bool>,
    keys: StringBuilder,
    values: BinaryBuilder,
}

impl HeaderColumns {
    pub(crate) fn with_capacity(records: usize) -> Self {
        let mut offsets = Vec::with_capacity(records + 1);
        offsets.push(0);
        HeaderColumns {
            offsets,
            present: Vec::with_capacity(records),
            keys: StringBuilder::new(),
            values: BinaryBuilder::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.present.len()
    }

    pub(crate) fn push(&mut self, r: &RecordRef<'_>) {
        for (k, v) in &r.headers {
            self.keys.append_value(k);
            self.values.append_option(*v);
        }
        let last = *self.offsets.last().unwrap();
        self.offsets.push(last + r.headers.len() as i32);
        self.present.push(!r.headers.is_empty());
    }

    /// The list item's name and nullability (also of the struct's `key`) are the caller's:
    /// our own schema uses "item", not nullable; other row shapes choose their own.
    pub(crate) fn finish(self, item_name: &str, item_nullable: bool) -> ListArray {
        let (mut keys, mut values) = (self.keys, self.values);
        let fields = header_fields_with(item_nullable);
        let structs = StructArray::new(
            fields.clone(),
            vec![Arc::new(keys.finish()) as ArrayRef, Arc::new(values.finish())],
            None,
        );
        let any_missing = self.present.iter().any(|p| !p);
        ListArray::new(
            Arc::new(Field::new(item_name, DataType::Struct(fields), item_nullable)),
            OffsetBuffer::new(self.offsets.into()),
            Arc::new(structs),
            any_missing.then(|| NullBuffer::from(self.present)),
        )
    }
}

pub(crate) fn header_fields_with(nullable: bool) -> Fields {
    Fields::from(vec![Field::new("key", DataType::Utf8, nullable), Field::new("value", DataType::Binary, true)])
}

/// Guards Arrow's 32-bit binary offsets: at most 2 GiB of keys and values per batch.
pub(crate) fn count_payload(total: &mut usize, r: &RecordRef<'_>) -> Result<()> {
    *total += r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len);
    if *total > i32::MAX as usize {
        return Err(Error::config(
            "records do not fit one Arrow batch (2 GiB of keys and values); pass a smaller max_records",
        ));
    }
    Ok(())
}

/// Accumulates records as Arrow columns.
pub struct ArrowSink {
    offsets: Int64Builder,
    timestamps: TimestampMillisecondBuilder,
    keys: BinaryBuilder,
    values: BinaryBuilder,
    headers: HeaderColumns,
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
            headers: HeaderColumns::with_capacity(records),
            payload_bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.headers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Build the batch.
    pub fn finish(mut self) -> Result<RecordBatch> {
        let headers = self.headers.finish("item", false);
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
        count_payload(&mut self.payload_bytes, r)?;
        self.offsets.append_value(r.offset);
        self.timestamps.append_value(r.timestamp);
        self.keys.append_option(r.key);
        self.values.append_option(r.value);
        self.headers.push(r);
        Ok(())
    }
}
