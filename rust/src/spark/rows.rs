//! Records as the rows of Spark's Kafka source, in Arrow: `key binary, value binary, topic
//! string, partition int, offset long, timestamp timestamp (µs, UTC), timestampType int`
//! and, with headers, `headers array<struct<key: string, value: binary>>` (null when a record
//! has none). Types match what PySpark's `to_arrow_schema` expects, so the Spark data source
//! hands these batches to Spark with no per-record Python.

use std::sync::Arc;

use arrow_array::builder::{ArrayBuilder, BinaryBuilder, Int32Builder, Int64Builder, TimestampMicrosecondBuilder};
use arrow_array::{ArrayRef, Int32Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::storage::arrow::{count_payload, header_fields_with, HeaderColumns};
use crate::storage::error::{Error, Result};
use crate::storage::log_read::RecordSink;
use crate::storage::record::RecordRef;

/// Kafka's `timestampType` ids.
const CREATE_TIME: i32 = 0;
const LOG_APPEND_TIME: i32 = 1;

pub fn spark_schema(include_headers: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("topic", DataType::Utf8, true),
        Field::new("partition", DataType::Int32, true),
        Field::new("offset", DataType::Int64, true),
        Field::new("timestamp", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
        Field::new("timestampType", DataType::Int32, true),
    ];
    if include_headers {
        let item = Field::new("element", DataType::Struct(header_fields_with(true)), true);
        fields.push(Field::new("headers", DataType::List(Arc::new(item)), true));
    }
    Arc::new(Schema::new(fields))
}

/// Accumulates one partition's records as Spark rows.
pub struct SparkSink {
    topic: String,
    partition: i32,
    keys: BinaryBuilder,
    values: BinaryBuilder,
    offsets: Int64Builder,
    timestamps: TimestampMicrosecondBuilder,
    timestamp_types: Int32Builder,
    headers: Option<HeaderColumns>,
    payload_bytes: usize,
}

impl SparkSink {
    pub fn new(topic: &str, partition: i32, include_headers: bool, records: usize, bytes: usize) -> Self {
        SparkSink {
            topic: topic.to_string(),
            partition,
            keys: BinaryBuilder::with_capacity(records, 0),
            values: BinaryBuilder::with_capacity(records, bytes),
            offsets: Int64Builder::with_capacity(records),
            timestamps: TimestampMicrosecondBuilder::with_capacity(records).with_timezone("UTC"),
            timestamp_types: Int32Builder::with_capacity(records),
            headers: include_headers.then(|| HeaderColumns::with_capacity(records)),
            payload_bytes: 0,
        }
    }

    pub fn finish(mut self) -> Result<RecordBatch> {
        let n = self.offsets.len();
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.keys.finish()),
            Arc::new(self.values.finish()),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(self.topic.as_str(), n))),
            Arc::new(Int32Array::from_value(self.partition, n)),
            Arc::new(self.offsets.finish()),
            Arc::new(self.timestamps.finish()),
            Arc::new(self.timestamp_types.finish()),
        ];
        let include_headers = self.headers.is_some();
        if let Some(headers) = self.headers.take() {
            // Spark names the list item "element" and declares items and struct fields nullable.
            columns.push(Arc::new(headers.finish("element", true)));
        }
        RecordBatch::try_new(spark_schema(include_headers), columns)
            .map_err(|e| Error::corrupt(format!("cannot build Arrow batch: {e}")))
    }
}

impl RecordSink for SparkSink {
    fn push(&mut self, r: &RecordRef<'_>) -> Result<()> {
        count_payload(&mut self.payload_bytes, r)?;
        self.keys.append_option(r.key);
        self.values.append_option(r.value);
        self.offsets.append_value(r.offset);
        self.timestamps.append_value(r.timestamp.saturating_mul(1000));
        self.timestamp_types.append_value(if r.log_append_time { LOG_APPEND_TIME } else { CREATE_TIME });
        if let Some(h) = self.headers.as_mut() {
            h.push(r);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spark's Kafka-source schema (`KafkaRecordToRowConverter.kafkaSchema`), column for column;
    /// the core's own schema shares no column order with it and names none of Spark's extras.
    #[test]
    fn rows_have_the_kafka_source_columns() {
        let names = |s: &SchemaRef| s.fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>();
        let spark = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"];
        assert_eq!(names(&spark_schema(false)), spark);
        assert_eq!(names(&spark_schema(true)).last().map(String::as_str), Some("headers"));
        let core = names(&crate::storage::arrow::record_schema());
        assert!(core.iter().all(|c| !["topic", "partition", "timestampType"].contains(&c.as_str())));

        let mut sink = SparkSink::new("t", 2, true, 1, 1);
        let record = RecordRef {
            offset: 5,
            timestamp: 7,
            log_append_time: true,
            key: None,
            value: Some(b"v"),
            headers: vec![("h", Some(&b"x"[..]))],
        };
        sink.push(&record).unwrap();
        let batch = sink.finish().unwrap();
        assert_eq!(batch.num_rows(), 1);
        let types = batch.column(6).as_any().downcast_ref::<Int32Array>().unwrap();
        assert_eq!(types.value(0), LOG_APPEND_TIME);
    }
}
