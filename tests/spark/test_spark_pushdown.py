"""Filter pushdown through Spark: a query gives the same rows with
``spark.sql.python.filterPushdown.enabled`` on (the filters narrow each task's offset range)
and off (the source scans, Spark filters), over random data and random filters on topic,
partition, offset and timestamp, with the startingOffsets/endingOffsets options and both
isolation levels; the data has out-of-order CreateTime timestamps, a LogAppendTime topic, a
compacted partition (offset gaps) and transactional partitions (control batches, aborted and
open transactions). ``explain("formatted")`` lists what was pushed."""

from __future__ import annotations

import json
import random
import time

import pytest

pytestmark = pytest.mark.spark  # starts a local Spark session: -m 'not spark' leaves it out

pyspark = pytest.importorskip("pyspark")
if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 1):
    pytest.skip("filter pushdown came in PySpark 4.1", allow_module_level=True)

from helpers import local_spark  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kafkalite import Admin, Producer  # noqa: E402
from kafkalite.log import Log  # noqa: E402
from txn_partition import INTERLEAVED, A, B, Data, Marker, TxnPartition  # noqa: E402

SETTING = "spark.sql.python.filterPushdown.enabled"
T0 = 1_700_000_000_000
TOPICS = {"a": 2, "c": 1, "l": 1, "tx": 2}  # CreateTime, compacted, LogAppendTime, transactional


@pytest.fixture(scope="module")
def spark():
    with local_spark(2, {"spark.sql.shuffle.partitions": "2", SETTING: "true"}) as session:
        yield session


def build(path: str, rng: random.Random) -> list[int]:
    """The data directory (see the module comment); returns every record timestamp in it."""
    TxnPartition(f"{path}/tx-0").run(INTERLEAVED)
    TxnPartition(f"{path}/tx-1").run(INTERLEAVED + [Data(B, 2), Data(None, 2), Data(A, 1), Marker(A, True)])
    admin = Admin(path)
    admin.create_topic("a", 2, {"segment.bytes": 600})
    admin.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": 400})
    admin.create_topic("l", 1, {"message.timestamp.type": "LogAppendTime"})
    with Producer(path, batch_size=rng.choice([100, 400, 4000])) as producer:
        for partition in (0, 1):
            for i in range(rng.randint(0, 40)):
                ts = T0 + rng.randint(0, 60)  # out of order
                producer.send("a", b"a%d" % i, key=b"%d" % (i % 4), partition=partition, timestamp_ms=ts)
                if rng.random() < 0.1:
                    producer.flush()  # batches of several sizes
        for i in range(rng.randint(0, 40)):
            producer.send(
                "c", b"c%d" % i, key=b"%d" % rng.randint(0, 5), timestamp_ms=T0 + rng.randint(0, 60)
            )
        for burst in range(3):
            for i in range(rng.randint(0, 8)):
                producer.send("l", b"l%d-%d" % (burst, i), timestamp_ms=T0)  # the broker's time wins
            producer.flush()
            time.sleep(0.003)
    admin.compact_topic("c")
    stamps = []
    for topic, partitions in TOPICS.items():
        for p in range(partitions):
            with Log(f"{path}/{topic}-{p}", readonly=True) as log:
                stamps += [r.timestamp for r in log.records()]
    return sorted(set(stamps))


@st.composite
def clause(draw, stamps: list[int]) -> str:
    kind = draw(
        st.sampled_from(["topic", "partition", "offset", "offset", "timestamp", "timestamp", "other"])
    )
    if kind == "topic":
        names = draw(st.lists(st.sampled_from([*TOPICS, "zz"]), min_size=1, max_size=3, unique=True))
        return (
            f"topic = '{names[0]}'"
            if len(names) == 1
            else "topic IN ({})".format(", ".join(f"'{n}'" for n in names))
        )
    if kind == "partition":
        ps = draw(st.lists(st.integers(0, 2), min_size=1, max_size=2, unique=True))
        return f"partition = {ps[0]}" if len(ps) == 1 else f"partition IN ({', '.join(map(str, ps))})"
    if kind == "offset":
        op = draw(st.sampled_from(["=", "<", "<=", ">", ">=", "BETWEEN"]))
        n = draw(st.integers(-1, 45))
        return (
            f"offset BETWEEN {n} AND {n + draw(st.integers(-1, 20))}"
            if op == "BETWEEN"
            else f"offset {op} {n}"
        )
    if kind == "timestamp":
        # Around the records' own timestamps, to the millisecond and between two.
        # An index, not sampled_from(stamps): LogAppendTime stamps differ when hypothesis
        # replays an example, and the draws must not depend on them.
        def at() -> str:
            i = draw(st.integers(0, 1 << 16))
            near = draw(st.sampled_from([-1000, -500, 0, 500, 1000]))
            return f"timestamp_micros({(stamps[i % len(stamps)] if stamps else T0) * 1000 + near})"

        op = draw(st.sampled_from(["=", "<", "<=", ">", ">=", "BETWEEN"]))
        return f"timestamp BETWEEN {at()} AND {at()}" if op == "BETWEEN" else f"timestamp {op} {at()}"
    return draw(st.sampled_from(["key IS NOT NULL", "(partition = 0 OR offset > 3)", "NOT (offset = 3)"]))


def rows(df) -> list[tuple]:
    return sorted(
        (r.topic, r.partition, r.offset, r.key and bytes(r.key), bytes(r.value), r.timestamp, r.timestampType)
        for r in df.collect()
    )


def query(spark, path: str, options: dict[str, str], where: str, pushdown: bool) -> list[tuple]:
    spark.conf.set(SETTING, "true" if pushdown else "false")
    reader = spark.read.format("kafkalite")
    for k, v in options.items():
        reader = reader.option(k, v)
    return rows(reader.load(path).where(where))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(seed=st.integers(0, 2**32 - 1), data=st.data())
def test_same_rows_with_and_without_pushdown(spark, tmp_path_factory, seed, data):
    path = str(tmp_path_factory.mktemp("pushdown") / "data")
    stamps = build(path, random.Random(seed))
    where = " AND ".join(data.draw(st.lists(clause(stamps), min_size=1, max_size=4), label="filters"))
    options = {
        "subscribe": ",".join(data.draw(st.sampled_from([list(TOPICS), ["a", "c"], ["tx", "l", "a"]])))
    }
    if data.draw(st.booleans(), label="read_committed"):
        options["kafka.isolation.level"] = "read_committed"
    if data.draw(st.booleans(), label="startingOffsets"):
        options["startingOffsets"] = json.dumps({"a": {"0": data.draw(st.integers(0, 10))}, "tx": {"1": 4}})
    if data.draw(st.booleans(), label="endingOffsets"):
        # Not past the log end: such a range fails under failOnDataLoss (Spark's data-loss
        # rule, test_spark_ending_offsets.py) unless pushed filters end it sooner, which is not
        # what this test compares.
        with Log(f"{path}/a-1", readonly=True) as log:
            end = min(data.draw(st.integers(0, 30)), log.end_offset)
        options["endingOffsets"] = json.dumps({"a": {"1": end}, "tx": {"0": 12}})
    if data.draw(st.booleans(), label="minPartitions"):
        options["minPartitions"] = "5"
    scanned = query(spark, path, options, where, pushdown=False)
    assert query(spark, path, options, where, pushdown=True) == scanned, (where, options)


def test_a_query_with_the_setting_off_works_and_explain_shows_what_was_pushed(spark, tmp_path, capsys):
    """Off (Spark's default): PySpark refuses a reader that has pushFilters, so the source
    must not offer one; the rows are the same. On: explain lists the pushed filters."""
    path = str(tmp_path / "data")
    build(path, random.Random(7))
    where = f"topic = 'tx' AND partition = 1 AND offset BETWEEN 3 AND 20 AND timestamp >= timestamp_millis({T0 + 5})"
    options = {"subscribe": "a,tx", "kafka.isolation.level": "read_committed"}
    off = query(spark, path, options, where, pushdown=False)
    assert off and off == query(spark, path, options, where, pushdown=True)
    spark.conf.set(SETTING, "true")
    df = spark.read.format("kafkalite").option("subscribe", "a,tx").load(path).where(where)
    capsys.readouterr()
    df.explain("formatted")
    plan = capsys.readouterr().out
    pushed = next(line for line in plan.splitlines() if line.startswith("PushedFilters:"))
    for f in [
        "EqualTo(topic,tx)",
        "EqualTo(partition,1)",
        "GreaterThanOrEqual(offset,3)",
        "LessThanOrEqual(offset,20)",
    ]:
        assert f in pushed, plan
    assert "(timestamp," not in pushed and "timestamp#" in plan  # a seek bound, still filtered by Spark
