"""Spark's built-in Kafka source (spark-sql-kafka-0-10) reading TOPIC from a server, beside
kafkalite's own data source reading the same topic from the data directory, in a process of its
own: ``spark.jars`` only reaches the driver's class path when Spark's JVM starts, and a test
process may have started one already. Writes {"kafka": rows, "kafkalite": rows} as JSON to OUT,
a row being [topic, partition, offset, timestamp, timestampType, key, value, headers] with bytes
as hex (null stays null).

    spark_kafka_read.py BOOTSTRAP TOPIC DATA_DIR OUT JARS(comma-separated)"""

from __future__ import annotations

import json
import os
import sys


def main(bootstrap: str, topic: str, data_dir: str, out: str, jars: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.jars", jars)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def rows(df) -> list:
        def hexed(b):
            return None if b is None else bytes(b).hex()

        return [
            [
                r.topic,
                r.partition,
                r.offset,
                round(r.timestamp.timestamp() * 1000),
                r.timestampType,
                hexed(r.key),
                hexed(r.value),
                [[h.key, hexed(h.value)] for h in r.headers or []],
            ]
            for r in df.orderBy("partition", "offset").collect()
        ]

    kafka = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
    )
    kafkalite = (
        spark.read.format("kafkalite")
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load(data_dir)
    )
    result = {"kafka": rows(kafka), "kafka_count": kafka.count(), "kafkalite": rows(kafkalite)}
    with open(out, "w") as f:
        json.dump(result, f)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
