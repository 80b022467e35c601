//! The Spark-facing side of the engine: what Spark's Kafka source calls its rows. The storage
//! core (`arrow`, `log_read`) exports plain record batches and names no Spark column; this
//! module shapes the same records into Spark's columns, types and `timestampType` ids, so a
//! change in Spark's contract is made here and nowhere else.

mod rows;

pub use rows::{spark_schema, SparkSink};
