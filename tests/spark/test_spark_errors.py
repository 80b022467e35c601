"""Spark reads and writes that name a missing data directory, topic or partition fail on the
driver before any task runs (at load() or save()), with a short message that names it and says
what to do; a write whose rows the topic refuses appends nothing."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pyspark")

from helpers import local_spark, start_stream_copy
from kafkalite import Admin
from kafkalite.log import Log

pytestmark = pytest.mark.spark  # starts a local Spark session: -m 'not spark' leaves it out

#: Spark's prefix and SQLSTATE line, one frame of traceback, our message.
MAX_LINES = 6


@pytest.fixture(scope="module")
def spark():
    with local_spark(1, log_level="OFF") as session:
        yield session


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("errors") / "data")
    Admin(path).create_topic("events", 2)
    return path


def _fails_before_tasks(spark, action, *needles):
    """``action`` raises a short error containing every needle, and no Spark job ran."""
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("check", "errors")
    try:
        with pytest.raises(Exception) as info:
            action()
    finally:
        spark.sparkContext.setJobGroup("done", "errors")
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    assert len(message.strip().splitlines()) <= MAX_LINES, message
    assert tracker.getJobIdsForGroup("check") == [], "tasks ran before the error"
    return message


def test_a_missing_data_directory(spark, tmp_path):
    missing = str(tmp_path / "nope")
    _fails_before_tasks(
        spark,
        lambda: spark.read.format("kafkalite").option("subscribe", "events").load(missing),
        missing,
        "does not exist",
        "topics create",
    )
    _fails_before_tasks(
        spark,
        lambda: spark.readStream.format("kafkalite").option("subscribe", "events").load(missing),
        missing,
    )
    df = spark.createDataFrame([("a",)], "value string")
    _fails_before_tasks(
        spark,
        lambda: df.write.format("kafkalite").mode("append").option("topic", "events").save(missing),
        missing,
        "save()",
    )


def test_a_missing_topic_or_partition(spark, data):
    def read():  # a fresh reader each time: option() changes the reader it is called on
        return spark.read.format("kafkalite")

    # Used to be an empty DataFrame: a typo read nothing, silently.
    _fails_before_tasks(
        spark,
        lambda: read().option("subscribe", "events,evnts").load(data),
        "'evnts'",
        "option 'subscribe'",
        "its topics: events",
        "topics create evnts",
    )
    _fails_before_tasks(
        spark, lambda: read().option("assign", '{"nosuch": [0]}').load(data), "'nosuch'", "option 'assign'"
    )
    _fails_before_tasks(
        spark, lambda: read().option("assign", '{"events": [0, 7]}').load(data), "[7]", "partitions 0..1"
    )
    _fails_before_tasks(
        spark,
        lambda: spark.readStream.format("kafkalite").option("subscribe", "nosuch").load(data),
        "'nosuch'",
    )
    # A write creates a missing topic (auto.create.topics.enable, as a broker): where the data
    # directory turns that off, the write fails on the driver naming the topic.
    no_auto = os.path.join(os.path.dirname(data), "no-auto")
    Admin(no_auto).init(config={"auto.create.topics.enable": False})
    df = spark.createDataFrame([("a",)], "value string")
    _fails_before_tasks(
        spark,
        lambda: df.write.format("kafkalite").mode("append").option("topic", "nosuch").save(no_auto),
        "'nosuch'",
        "option 'topic'",
        "auto.create.topics.enable=false",
    )
    assert Admin(no_auto).list_topics() == []


def test_a_write_with_a_row_the_topic_refuses_appends_nothing(spark, data):
    """Rows for partitions 0 and 1, and one for partition 5 of a 2-partition topic: the commit
    fails naming it, and partitions 0 and 1 stay empty (they were appended before)."""
    df = spark.createDataFrame([(0, "a"), (1, "b"), (5, "c")], "partition int, value string")
    with pytest.raises(Exception, match="partition 5 of topic 'events'"):
        df.write.format("kafkalite").mode("append").option("topic", "events").save(data)
    for p in (0, 1):
        with Log(os.path.join(data, f"events-{p}"), readonly=True) as log:
            assert log.end_offset == 0


def test_a_write_creates_its_missing_topic_on_the_driver_before_any_task(spark, tmp_path):
    """Issue 10 point 6: the README's write to a topic nobody created works, as with a broker's
    auto.create.topics.enable=true; the topic exists once save()/start() checked the target."""
    path = str(tmp_path / "data")
    Admin(path).init(config={"num.partitions": 2})
    df = spark.createDataFrame([("k1", "a"), ("k2", "b")], "key string, value string")
    df.write.format("kafkalite").mode("append").option("topic", "copy").save(path)
    # Besides __transaction_state: a batch write commits in one transaction.
    assert [t for t in Admin(path).list_topics() if not t.startswith("__")] == ["copy"]
    assert sorted(
        r.value for r in spark.read.format("kafkalite").option("subscribe", "copy").load(path).collect()
    ) == [
        b"a",
        b"b",
    ]
    from kafkalite import Producer

    with Producer(path) as producer:
        producer.send("src", b"streamed row").get(timeout=10)
    q = start_stream_copy(spark, path, "src", "streamed", str(tmp_path / "ck"))
    try:
        q.processAllAvailable()  # the stream writer (driver side) created the topic
    finally:
        q.stop()
    assert sorted(t for t in Admin(path).list_topics() if not t.startswith("__")) == [
        "copy",
        "src",
        "streamed",
    ]
    # Records, not end offsets: each write also ends a transaction with a COMMIT marker.
    assert [
        r.value for r in spark.read.format("kafkalite").option("subscribe", "streamed").load(path).collect()
    ] == [b"streamed row"]


def test_a_write_to_a_brokers_log_directory_fails_before_any_task(spark, tmp_path):
    from test_broker_layout import write_broker_partition

    path = tmp_path / "kafka-logs"
    path.mkdir()
    write_broker_partition(str(path / "orders-0"))
    df = spark.createDataFrame([("a",)], "value string")
    _fails_before_tasks(
        spark,
        lambda: df.write.format("kafkalite").mode("append").option("topic", "orders").save(str(path)),
        "broker's log directory",
        "kafkalite init --adopt",
    )
