"""Spark and `kafkalite serve` on one data directory: Spark's built-in Kafka source
(spark-sql-kafka-0-10 from Maven Central) reads from the server what kafkalite's own source reads
from the files, and the embedded API, the network and a Spark stream work the same directory at
the same time. Marker ``spark``."""

from __future__ import annotations

import json
import threading
import time

import kafkalite
import maven_jars
import pytest
from server_clients import embedded_read, items
from test_server import CODECS, confluent_producer, confluent_read
from test_spark import spark  # noqa: F401 (the module's local Spark session)

pytestmark = pytest.mark.spark
pytest_plugins = ["kafkalite.testing"]

pyspark = pytest.importorskip("pyspark")
confluent_kafka = pytest.importorskip("confluent_kafka")


def hexed(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def test_spark_kafka_source_reads_the_server(kafkalite_server, tmp_path, spawn):
    """Batch read with format("kafka"): one partition per codec, headers, null keys and values;
    the rows (count, offsets, timestamps, keys, values, headers) are what was produced and what
    format("kafkalite") reads from the same files."""
    _version, jars = maven_jars.require(lambda: maven_jars.spark_kafka_jars(pyspark.__version__))
    topic, n = "to-spark", 40
    kafkalite.Admin(kafkalite_server.path).create_topic(topic, partitions=len(CODECS))
    for partition, codec in enumerate(CODECS):
        producer = confluent_producer(kafkalite_server, **{"compression.type": codec})
        for key, value, headers in items(n):
            producer.produce(topic, value=value, key=key, headers=headers, partition=partition)
        assert producer.flush(20) == 0
    out = tmp_path / "rows.json"
    child = spawn(
        "spark_kafka_read.py",
        kafkalite_server.bootstrap_servers,
        topic,
        kafkalite_server.path,
        out,
        ",".join(jars),
        timeout=240,
    )
    assert child.wait() == 0
    rows = json.loads(out.read_text())
    assert rows["kafka_count"] == len(CODECS) * n
    want = [
        [topic, p, i, hexed(key), hexed(value), [[k, hexed(v)] for k, v in headers], 0]
        for p in range(len(CODECS))
        for i, (key, value, headers) in enumerate(items(n))
    ]
    assert [[t, p, o, k, v, h, tt] for t, p, o, _ts, tt, k, v, h in rows["kafka"]] == want
    assert rows["kafka"] == rows["kafkalite"]


def test_embedded_network_and_spark_on_one_directory_at_once(kafkalite_server, spark):  # noqa: F811
    """At the same time: confluent-kafka produces to "net" while the embedded Producer produces
    to "emb"; the embedded Consumer and a Spark stream (format("kafkalite")) read "net" from the
    files, and a confluent-kafka consumer reads "emb" over the network."""
    n, path = 3000, kafkalite_server.path
    admin = kafkalite.Admin(path)
    admin.create_topic("net", partitions=2)
    admin.create_topic("emb", partitions=1)
    query = (
        spark.readStream.format("kafkalite")
        .option("subscribe", "net")
        .option("startingOffsets", "earliest")
        .load(path)
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("memory")
        .queryName("net_rows")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()  # running, nothing to read yet
        results: dict[str, list] = {}

        def network_producer() -> None:
            producer = confluent_producer(kafkalite_server)
            for i in range(n):
                producer.produce("net", b"n%d" % i, key=b"%d" % (i % 11))
                if i % 100 == 0:
                    producer.poll(0)
                    time.sleep(0.1)  # a stream over ~3 s, not one burst
            assert producer.flush(20) == 0

        def embedded_producer() -> None:
            with kafkalite.Producer(path) as producer:
                for i in range(n):
                    producer.send("emb", b"e%d" % i)
                    if i % 100 == 0:
                        time.sleep(0.1)

        def embedded_consumer() -> None:
            results["embedded"] = [r.value for r in embedded_read(path, "net", n, timeout=60)]

        def network_consumer() -> None:
            results["network"] = [m.value() for m in confluent_read(kafkalite_server, "emb", n, timeout=60)]

        threads = [
            threading.Thread(target=f)
            for f in (network_producer, embedded_producer, embedded_consumer, network_consumer)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        query.processAllAvailable()
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
        streamed = [r.value for r in spark.sql("SELECT value FROM net_rows").collect()]
    finally:
        query.stop()
    assert sorted(results["embedded"]) == sorted(b"n%d" % i for i in range(n))
    assert results["network"] == [b"e%d" % i for i in range(n)]
    assert sorted(streamed) == sorted(f"n{i}" for i in range(n))
    assert len(batches) >= 2, f"Spark read everything in one micro-batch, not while it was written: {batches}"
