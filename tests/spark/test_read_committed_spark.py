"""The Spark source's ``kafka.isolation.level`` (Spark's Kafka source hands it to its consumers):
read_committed hides aborted transactions and plans "latest" as the last stable offset, in
batch and streaming reads; read_uncommitted (the default) returns every record."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from helpers import local_spark
from txn_partition import INTERLEAVED, A, B, Data, Marker, TxnPartition

pytestmark = pytest.mark.spark  # starts a local Spark session: -m 'not spark' leaves it out

OPEN_TAIL = [Data(B, 2), Data(None, 2), Data(A, 1), Marker(A, commit=True)]  # B's transaction stays open


@pytest.fixture(scope="module")
def spark():
    with local_spark(2, {"spark.sql.shuffle.partitions": "2"}) as session:
        yield session


def _data(tmp_path) -> tuple[str, TxnPartition, TxnPartition]:
    """tx-0: interleaved transactions, all decided; tx-1: the same, then one left open."""
    data = tmp_path / "data"
    p0, p1 = TxnPartition(str(data / "tx-0")), TxnPartition(str(data / "tx-1"))
    p0.run(INTERLEAVED)
    p1.run(INTERLEAVED + OPEN_TAIL)
    return str(data), p0, p1


def _rows(df) -> list[tuple[int, int, bytes]]:
    return sorted((r.partition, r.offset, bytes(r.value)) for r in df.collect())


def _expected(parts: dict[int, TxnPartition], committed: bool) -> list[tuple[int, int, bytes]]:
    return sorted((p, o, v) for p, part in parts.items() for o, v in part.expected(committed))


@pytest.mark.parametrize("level", [None, "read_uncommitted", "read_committed"])
def test_batch_read_with_each_isolation_level(spark, tmp_path, level):
    data, p0, p1 = _data(tmp_path)
    committed = level == "read_committed"
    reader = spark.read.format("kafkalite").option("subscribe", "tx").option("minPartitions", "7")
    if level is not None:
        reader = reader.option("kafka.isolation.level", level)
    got = _rows(reader.load(data))
    assert got == _expected({0: p0, 1: p1}, committed)
    if committed:
        assert max(o for p, o, _ in got if p == 1) < p1.lso < p1.offset


def test_streaming_read_committed_waits_for_the_open_transaction(spark, tmp_path):
    data, p0, p1 = _data(tmp_path)
    stream = (
        spark.readStream.format("kafkalite")
        .option("subscribe", "tx")
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load(data)
    )
    query = stream.writeStream.format("memory").queryName("txn_stream").start()
    try:
        query.processAllAvailable()
        assert _rows(spark.table("txn_stream")) == _expected({0: p0, 1: p1}, True)
        p1.run([Marker(B, commit=True), Data(None, 1)])  # B commits: its records and what follows
        query.processAllAvailable()
        assert _rows(spark.table("txn_stream")) == _expected({0: p0, 1: p1}, True)
    finally:
        query.stop()
