"""Filter pushdown in the Spark source's planning, without a Spark session: which filters are
taken, the offset ranges they leave each task, their intersection with startingOffsets /
endingOffsets, and that the reader Spark gets without the pushdown setting has no pushFilters
(PySpark refuses such a reader then). The same results with and without pushdown through Spark:
``test_spark_pushdown.py``."""

from __future__ import annotations

import datetime as dt
import json

import pytest

pyspark = pytest.importorskip("pyspark")
if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) < (4, 1):
    pytest.skip("filter pushdown came in PySpark 4.1", allow_module_level=True)

from kafkalite import Admin, Producer  # noqa: E402
from kafkalite.log import Log  # noqa: E402
from kafkalite.spark.options import SparkOptionError  # noqa: E402
from kafkalite.spark.planning import pack_small  # noqa: E402
from kafkalite.spark.source import (  # noqa: E402
    PACK_RECORDS,
    KafkaliteDataSource,
    KafkalitePushdownReader,
    KafkaliteReader,
    RangeGroup,
    read_range,
)
from pyspark.sql.datasource import (  # noqa: E402
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    StringContains,
)
from test_spark_ending_offsets import SCHEMA  # noqa: E402  (the source's schema, built without a JVM)

T0 = 1_700_000_000_000
#: Out-of-order CreateTime timestamps: record i of partition 0 has STAMPS[i % 10].
STAMPS = [0, 5, 3, 9, 1, 7, 2, 8, 4, 6]


def micros(ms: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(0, dt.UTC) + dt.timedelta(microseconds=round(ms * 1000))


@pytest.fixture
def data(tmp_path):
    """events: 3 partitions x 50 records; partition 0's timestamps go up by 10 ms per 10
    records, out of order inside each ten."""
    path = str(tmp_path / "data")
    Admin(path).create_topic("events", 3)
    Admin(path).create_topic("other", 1)
    with Producer(path, batch_size=300) as producer:
        for i in range(150):
            p = i % 3
            ts = T0 + (i // 3 // 10) * 10 + STAMPS[(i // 3) % 10]
            producer.send("events", b"v%d" % i, partition=p, timestamp_ms=ts)
        producer.send("other", b"o")
    return path


def tasks(data, filters, **options):
    """(the filters Spark must still apply, the tasks planned)."""
    source = KafkaliteDataSource({"path": data, "subscribe": "events,other", **options})
    reader = KafkalitePushdownReader(None, dict(source.options))
    kept = list(reader.pushFilters(filters))
    return kept, reader.partitions()


def plan(data, filters, **options):
    """(the filters Spark must still apply, {(topic, partition): (start, end)} of the tasks)."""
    kept, planned = tasks(data, filters, **options)
    ranges: dict = {}
    for task in (r for t in planned for r in (t.ranges if isinstance(t, RangeGroup) else [t])):
        lo, hi = ranges.get((task.topic, task.partition), (task.start, task.end))
        ranges[(task.topic, task.partition)] = (min(lo, task.start), max(hi, task.end))
    return kept, ranges


def test_partition_topic_and_offsets_cut_the_ranges_exactly(data):
    f = [EqualTo(("partition",), 1), GreaterThanOrEqual(("offset",), 10), LessThanOrEqual(("offset",), 19)]
    kept, ranges = plan(data, f + [IsNotNull(("offset",))])
    assert kept == [] and ranges == {("events", 1): (10, 20)}
    kept, ranges = plan(data, [In(("partition",), (0, 2)), GreaterThan(("offset",), 47)])
    assert kept == [] and ranges == {("events", 0): (48, 50), ("events", 2): (48, 50)}
    kept, ranges = plan(data, [EqualTo(("topic",), "other")])
    assert kept == [] and ranges == {("other", 0): (0, 1)}
    kept, ranges = plan(data, [In(("topic",), ("nope",))])
    assert kept == [] and ranges == {}
    contradiction = [EqualTo(("offset",), 3), LessThan(("offset",), 3)]
    assert plan(data, contradiction)[1] == {}


def test_unsupported_filters_go_back_to_spark(data):
    odd = [
        StringContains(("topic",), "ev"),
        EqualTo(("partition",), "1"),  # not an int: Spark compares, not us
        In(("offset",), (1, 2)),
        EqualTo(("value",), b"v1"),
        LessThan(("timestamp",), micros(T0 + 20)),
    ]
    kept, ranges = plan(data, odd)
    assert kept == odd
    assert all(k is f for k, f in zip(kept, odd, strict=True))  # the same objects, as PySpark requires
    assert ranges == {
        ("events", 0): (0, 50),
        ("events", 1): (0, 50),
        ("events", 2): (0, 50),
        ("other", 0): (0, 1),
    }


def test_timestamp_lower_bound_seeks_through_the_time_index_and_stays_with_spark(data):
    with Log(f"{data}/events-0", readonly=True) as log:
        stamps = [r.timestamp for r in log.records()]
    for bound_ms, op in [
        (T0 + 23, GreaterThanOrEqual),
        (T0 + 23.5, GreaterThanOrEqual),
        (T0 + 23, GreaterThan),
    ]:
        f = [op(("timestamp",), micros(bound_ms)), EqualTo(("partition",), 0), EqualTo(("topic",), "events")]
        kept, ranges = plan(data, f)
        assert kept == f[:1]  # timestamps are not monotonic: Spark still filters
        start, end = ranges[("events", 0)]
        first_ms = int(bound_ms) + (1 if op is GreaterThan or bound_ms != int(bound_ms) else 0)
        first_match = next(o for o, ts in enumerate(stamps) if ts >= first_ms)
        assert (start, end) == (first_match, 50)
        assert all(ts < first_ms for ts in stamps[:start]) and min(stamps[start:]) < first_ms  # not exact
    kept, ranges = plan(
        data, [GreaterThan(("timestamp",), micros(T0 + 10_000)), EqualTo(("topic",), "events")]
    )
    assert ranges == {}  # no record reaches it


def test_pushed_bounds_intersect_starting_and_ending_offsets(data):
    options = {
        "startingOffsets": json.dumps({"events": {"0": 5, "1": 30, "2": 0}, "other": {"0": 0}}),
        "endingOffsets": json.dumps({"events": {"0": 20, "1": 40, "2": 3}, "other": {"0": 1}}),
    }
    kept, ranges = plan(data, [GreaterThanOrEqual(("offset",), 10), LessThan(("offset",), 35)], **options)
    assert kept == [] and ranges == {("events", 0): (10, 20), ("events", 1): (30, 35)}


def test_fail_on_data_loss_is_judged_on_the_options_not_the_filters(data):
    with Log(f"{data}/events-0", shared_writers=True) as log:
        log.delete_records_before(10)
    options = {"startingOffsets": json.dumps({"events": {"0": 2}})}
    with pytest.raises(SparkOptionError, match="Cannot fetch offset 2"):
        plan(data, [GreaterThanOrEqual(("offset",), 20)], **options)
    _, ranges = plan(data, [GreaterThanOrEqual(("offset",), 20)], failOnDataLoss="false", **options)
    assert ranges[("events", 0)] == (20, 50)


def test_without_the_pushdown_planner_the_reader_has_no_push_filters(data):
    """Called as Spark's ordinary planner calls it (the setting off), reader() returns a
    reader whose pushFilters is DataSourceReader's own: PySpark's check for it passes."""
    from pyspark.sql.datasource import DataSourceReader

    reader = KafkaliteDataSource({"path": data, "subscribe": "events"}).reader(None)
    assert type(reader) is KafkaliteReader
    assert reader.pushFilters.__func__ is DataSourceReader.pushFilters


def test_small_ranges_left_by_the_filters_share_a_task(data):
    """One task per partition costs Spark tens of milliseconds each however little it reads:
    the few records a filter leaves in each partition are read by one task, unless the query
    asks for a split (minPartitions, maxRecordsPerPartition: Kafka's calculator decides)."""
    f = [GreaterThanOrEqual(("offset",), 40)]
    _, planned = tasks(data, f)
    assert len(planned) == 1 and isinstance(planned[0], RangeGroup)
    assert [(r.topic, r.partition, r.start, r.end) for r in planned[0].ranges] == [
        ("events", 0, 40, 50),
        ("events", 1, 40, 50),
        ("events", 2, 40, 50),
    ]
    _, planned = tasks(data, [EqualTo(("partition",), 1), *f])
    assert [type(t).__name__ for t in planned] == ["RangePartition"]
    for split in ({"minPartitions": "3"}, {"maxRecordsPerPartition": "100"}):
        _, planned = tasks(data, f, **split)
        assert len(planned) == 3 and not any(isinstance(t, RangeGroup) for t in planned), split
    # Without pushdown, Kafka's one task per partition.
    reader = KafkaliteReader(None, {"path": data, "subscribe": "events"})
    assert len(reader.partitions()) == 3


def test_pack_small_keeps_large_ranges_apart_and_fills_tasks_in_order():
    def groups(sizes, budget):
        return [[s for s in g] for g in pack_small(sizes, budget, lambda s: s)]

    assert groups([5, 5, 5], 10) == [[5, 5], [5]]
    assert groups([3, 20, 4, 6, 1], 10) == [[20], [3, 4], [6, 1]]
    assert groups([10, 9, 1], 10) == [[10], [9, 1]]
    assert groups([], 10) == []
    assert PACK_RECORDS > 0


def test_a_shared_task_reads_each_of_its_ranges_whole_and_in_order(data):
    _, [group] = tasks(data, [GreaterThan(("offset",), 44)])
    assert isinstance(group, RangeGroup) and len(group.ranges) == 3

    def rows(task):
        return [
            (r["topic"], r["partition"], r["offset"], r["value"])
            for batch in read_range(task, SCHEMA)
            for r in batch.to_pylist()
        ]

    expected = [row for one in group.ranges for row in rows(one)]
    assert len(expected) == 3 * 5 and rows(group) == expected
