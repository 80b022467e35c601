//! Decoded records into an Arrow `RecordBatch`: one copy from the (decompressed) batch into
//! Arrow's contiguous buffers, no per-record objects.
//!
//! Schema: `offset int64, timestamp timestamp[ms, UTC], key binary, value binary,
//! headers list<struct<key: string, value: binary>>` (headers null when a record has none).
//! The pieces other row shapes reuse (the `headers` column, the 2 GiB payload guard) are
//! `pub(crate)`; Spark's own shape lives in `crate::spark`, never here.

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::{ArrayRef, BinaryArray, Int64Array, ListArray, RecordBatch, StructArray, TimestampMillisecondArray};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use crate::storage::error::{Error, Result};
use crate::storage::log_read::RecordSink;
use crate::storage::record::RecordRef;

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

/// Per-row validity, kept as one flag while every row so far agrees (the usual case: every
/// key null, or no record with headers) and as one flag per row once they differ: a store
/// per row saved on the hot path of every reader.
pub(crate) struct Validity {
    rows: usize,
    uniform: bool,
    per_row: Option<Vec<bool>>,
}

impl Validity {
    fn new() -> Self {
        Validity { rows: 0, uniform: true, per_row: None }
    }

    #[inline(always)]
    fn push(&mut self, valid: bool) {
        match &mut self.per_row {
            Some(rows) => rows.push(valid),
            None if self.rows == 0 || valid == self.uniform => self.uniform = valid,
            None => {
                let mut rows = vec![self.uniform; self.rows];
                rows.push(valid);
                self.per_row = Some(rows);
            }
        }
        self.rows += 1;
    }

    /// Arrow's null buffer: none when every row is valid.
    fn finish(self) -> Option<NullBuffer> {
        match self.per_row {
            Some(rows) => Some(NullBuffer::from(rows)),
            None if self.rows > 0 && !self.uniform => Some(NullBuffer::new_null(self.rows)),
            None => None,
        }
    }
}

/// The `headers` column: `list<struct<key, value>>`, null for records without headers.
pub(crate) struct HeaderColumns {
    /// List offsets, only once a record had headers (until then every one is 0).
    offsets: Vec<i32>,
    /// The rows expected, to size `offsets` when it is made.
    capacity: usize,
    present: Validity,
    keys: StringBuilder,
    values: BinaryBuilder,
}

impl HeaderColumns {
    pub(crate) fn with_capacity(records: usize) -> Self {
        HeaderColumns {
            offsets: Vec::new(),
            capacity: records,
            present: Validity::new(),
            keys: StringBuilder::new(),
            values: BinaryBuilder::new(),
        }
    }

    #[inline(always)]
    pub(crate) fn push(&mut self, r: &RecordRef<'_>) {
        if !r.headers.is_empty() {
            if self.offsets.is_empty() {
                self.offsets.reserve(self.capacity.max(self.present.rows) + 1);
                self.offsets.resize(self.present.rows + 1, 0);
            }
            for (k, v) in &r.headers {
                self.keys.append_value(k);
                self.values.append_option(*v);
            }
        }
        if let Some(&last) = self.offsets.last() {
            self.offsets.push(last + r.headers.len() as i32);
        }
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
        let offsets = match self.offsets.is_empty() {
            true => vec![0; self.present.rows + 1],
            false => self.offsets,
        };
        ListArray::new(
            Arc::new(Field::new(item_name, DataType::Struct(fields), item_nullable)),
            OffsetBuffer::new(offsets.into()),
            Arc::new(structs),
            self.present.finish(),
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

/// One nullable binary column (keys or values) laid out as Arrow stores it: the bytes in one
/// buffer, an offset per row, validity per row. Handed to Arrow without a copy at the end.
pub(crate) struct BinaryColumn {
    offsets: Vec<i32>,
    data: Vec<u8>,
    valid: Validity,
}

impl BinaryColumn {
    pub(crate) fn with_capacity(records: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(records + 1);
        offsets.push(0);
        BinaryColumn { offsets, data: Vec::with_capacity(bytes), valid: Validity::new() }
    }

    /// Room for `bytes` more, sized so that the buffer grows once rather than doubling (a
    /// doubling copies everything read so far): `rows_left` more rows like the ones so far
    /// (or, before the first, like the batch about to be read: `bytes` for `rows` rows).
    pub(crate) fn reserve(&mut self, bytes: usize, rows: usize, rows_left: usize) {
        if self.data.capacity() - self.data.len() >= bytes {
            return;
        }
        let per_row = match self.valid.rows {
            0 => bytes.div_ceil(rows.max(1)),
            n => self.data.len().div_ceil(n),
        };
        self.data.reserve(bytes.max(per_row.saturating_mul(rows_left)));
    }

    /// Append one row. Fails once the column holds more than Arrow's 32-bit offsets address.
    #[inline(always)]
    pub(crate) fn push(&mut self, bytes: Option<&[u8]>) -> Result<()> {
        if let Some(b) = bytes {
            self.data.extend_from_slice(b);
        }
        let end = i32::try_from(self.data.len()).map_err(|_| {
            Error::config("records do not fit one Arrow batch (2 GiB of keys or values); pass a smaller max_records")
        })?;
        self.offsets.push(end);
        self.valid.push(bytes.is_some());
        Ok(())
    }

    pub(crate) fn finish(self) -> BinaryArray {
        BinaryArray::new(OffsetBuffer::new(self.offsets.into()), Buffer::from_vec(self.data), self.valid.finish())
    }
}

/// Accumulates records as Arrow columns.
pub struct ArrowSink {
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    keys: BinaryColumn,
    values: BinaryColumn,
    headers: HeaderColumns,
    /// The rows the caller expects (the sink's capacity), for sizing the binary buffers.
    expected: usize,
}

impl ArrowSink {
    /// `records`: the rows expected (at most); the keys' and values' buffers are sized from
    /// the batches as they come (`RecordSink::reserve`), `bytes` is only a first guess.
    pub fn with_capacity(records: usize, bytes: usize) -> Self {
        ArrowSink {
            offsets: Vec::with_capacity(records),
            timestamps: Vec::with_capacity(records),
            keys: BinaryColumn::with_capacity(records, 0),
            values: BinaryColumn::with_capacity(records, bytes),
            headers: HeaderColumns::with_capacity(records),
            expected: records,
        }
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Build the batch.
    pub fn finish(self) -> Result<RecordBatch> {
        let headers = self.headers.finish("item", false);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::new(self.offsets.into(), None)),
            Arc::new(TimestampMillisecondArray::new(self.timestamps.into(), None).with_timezone("UTC")),
            Arc::new(self.keys.finish()),
            Arc::new(self.values.finish()),
            Arc::new(headers),
        ];
        RecordBatch::try_new(record_schema(), columns)
            .map_err(|e| Error::corrupt(format!("cannot build Arrow batch: {e}")))
    }
}

impl RecordSink for ArrowSink {
    fn reserve(&mut self, records: usize, bytes: usize) {
        let left = self.expected.saturating_sub(self.len()).max(records);
        // Keys and values share the record area's bytes; values usually hold most of them.
        self.values.reserve(bytes, records, left);
    }

    #[inline(always)]
    fn push(&mut self, r: &RecordRef<'_>) -> Result<()> {
        self.keys.push(r.key)?;
        self.values.push(r.value)?;
        self.offsets.push(r.offset);
        self.timestamps.push(r.timestamp);
        self.headers.push(r);
        Ok(())
    }
}
