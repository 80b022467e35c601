"""A batch read whose endingOffsets lie past the log end, run task by task as Spark's executors
would (no Spark session): Spark's Kafka source plans such a range as given and its task, finding
no record at the latest offset, reports data loss (KafkaDataConsumer.get): it fails under
failOnDataLoss=true (the default) and reads up to the latest offset under false. minPartitions
splits the range first, so some tasks start past the log end."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark")

from kafkalite import Admin, Producer
from kafkalite.errors import OffsetOutOfRangeError
from kafkalite.spark.source import KafkaliteReader
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

#: The source's schema (``KafkaliteDataSource.schema``), built without a JVM to parse the DDL.
SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)


@pytest.fixture
def data(tmp_path):
    """events: 2 partitions of 20 records."""
    path = str(tmp_path / "data")
    Admin(path).create_topic("events", 2)
    with Producer(path) as producer:
        for p in (0, 1):
            producer.send_batch("events", [b"v"] * 20, partition=p)
    return path


def run(path, **options):
    """Every task's rows, as Spark would run them: (tasks planned, offsets read per partition)."""
    reader = KafkaliteReader(SCHEMA, {"path": path, "subscribe": "events", **options})
    tasks = reader.partitions()
    read: dict[int, list[int]] = {}
    for task in tasks:
        for batch in reader.read(task):
            for p, o in zip(
                batch.column("partition").to_pylist(), batch.column("offset").to_pylist(), strict=True
            ):
                read.setdefault(p, []).append(o)
    return len(tasks), {p: sorted(o) for p, o in read.items()}


PAST_THE_END = json.dumps({"events": {"0": 50, "1": -1}})


@pytest.mark.parametrize("min_partitions", [None, "8"])
def test_ending_offsets_past_the_log_end_fail_on_data_loss(data, min_partitions):
    extra = {"minPartitions": min_partitions} if min_partitions else {}
    with pytest.raises(
        OffsetOutOfRangeError, match=r"Cannot fetch offset 20 of events-0: .*failOnDataLoss=false"
    ):
        run(data, endingOffsets=PAST_THE_END, **extra)


@pytest.mark.parametrize("min_partitions", [None, "8"])
def test_ending_offsets_past_the_log_end_without_fail_on_data_loss_read_to_the_latest(data, min_partitions):
    extra = {"minPartitions": min_partitions} if min_partitions else {}
    tasks, read = run(data, endingOffsets=PAST_THE_END, failOnDataLoss="false", **extra)
    assert read == {0: list(range(20)), 1: list(range(20))}
    if min_partitions:
        # [0, 50) split into pieces, the later ones starting past offset 20: they read nothing.
        assert tasks >= 6
