"""The Spark source's planning without Spark: option validation, Kafka's range splitter and
rate limit, offsets JSON."""

from __future__ import annotations

import itertools
import os

import pytest
from kafkalite.spark.options import (
    SparkOptionError,
    offsets_from_json,
    offsets_json,
    parse,
    parse_duration_ms,
)
from kafkalite.spark.planning import OffsetRange, rate_limit, split_ranges


def test_defaults_and_validation():
    batch = parse({"path": "/d", "subscribe": "a, b"}, streaming=False)
    assert (
        batch.subscribe == ["a", "b"] and batch.starting.kind == "earliest" and batch.ending.kind == "latest"
    )
    assert batch.fail_on_data_loss and not batch.include_headers and batch.max_trigger_delay_ms == 15 * 60_000
    stream = parse({"path": "/d", "subscribepattern": "a.*"}, streaming=True)  # Spark lower-cases keys
    assert stream.pattern == "a.*" and stream.starting.kind == "latest"
    for options, message in [
        ({"assign": "[1]"}, "No topicpartitions to assign"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, "can't be latest"),
        (
            {"subscribe": "a", "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "9"},
            "higher than the maxOffsetsPerTrigger",
        ),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "must be true or false"),
        ({"subscribe": "a", "startingOffsets": "{bad"}, "Expected e.g."),
    ]:
        with pytest.raises(SparkOptionError, match=message):
            parse({"path": "/d", **options}, streaming=False)
    with pytest.raises(SparkOptionError, match="not valid in streaming"):
        parse({"path": "/d", "subscribe": "a", "endingTimestamp": "5"}, streaming=True)
    assert (
        parse_duration_ms("30s") == 30_000
        and parse_duration_ms("250ms") == 250
        and parse_duration_ms("2h") == 7_200_000
    )


def test_offsets_json_is_stable():
    offsets = {("b", 10): 5, ("a", 2): 1, ("b", 2): 7}
    assert list(offsets_json(offsets)) == ["a", "b"] and list(offsets_json(offsets)["b"]) == ["2", "10"]
    assert offsets_from_json(offsets_json(offsets)) == offsets


def test_kafka_range_calculator():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges, None, None) == ranges[:2]  # empty ranges dropped
    split = split_ranges(ranges, 5, None)
    assert OffsetRange("t", 1, 0, 10) in split  # small ranges stay whole
    big = [r for r in split if r.partition == 0]
    assert len(big) == 4 and big[0].start == 0 and big[-1].end == 1000
    assert all(a.end == b.start for a, b in itertools.pairwise(big))
    capped = split_ranges(ranges, None, 300)
    assert [r.size for r in capped if r.partition == 0] == [250, 250, 250, 250]


def test_rate_limit_is_proportional_and_never_starves():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    until = {("t", 0): 900, ("t", 1): 10, ("t", 2): 100}
    limited = rate_limit(100, start, until)
    assert limited == {("t", 0): 98, ("t", 1): 1, ("t", 2): 100}
    assert rate_limit(10_000, start, until) == until


def test_stream_reader_trigger_delay_and_data_loss(tmp_path):
    pytest.importorskip("pyspark")
    import time

    from kafkalite import Admin, Producer
    from kafkalite.log import Log
    from kafkalite.spark.source import KafkaliteStreamReader

    path = str(tmp_path)
    Admin(path).create_topic("t", 1)
    with Producer(path) as producer:
        for i in range(10):
            producer.send("t", value=b"%d" % i)
    options = {
        "path": path,
        "subscribe": "t",
        "startingoffsets": "earliest",
        "minoffsetspertrigger": "50",
        "maxtriggerdelay": "200ms",
    }
    reader = KafkaliteStreamReader(None, options)
    start = reader.initialOffset()
    assert start == {"t": {"0": 0}}
    assert reader.latestOffset(start, None) == start  # 10 < 50: wait...
    time.sleep(0.25)
    assert reader.latestOffset(start, None) == {"t": {"0": 10}}  # ...until maxTriggerDelay passed
    assert reader.partitions(start, start) == []
    with Log(os.path.join(path, "t-0"), shared_writers=True) as log:
        log.delete_records_before(4)
    with pytest.raises(SparkOptionError, match="failOnDataLoss"):
        reader.partitions(start, {"t": {"0": 10}})
    lenient = KafkaliteStreamReader(None, {**options, "failondataloss": "false"})
    [task] = lenient.partitions(start, {"t": {"0": 10}})
    assert (task.start, task.end) == (4, 10)
    reader.stop()
    lenient.stop()


def test_a_stream_commit_that_crashed_midway_is_finished_without_duplicates(tmp_path, monkeypatch):
    import pyarrow as pa
    from kafkalite import Admin
    from kafkalite.log import Log
    from kafkalite.spark import sink

    path = str(tmp_path)
    Admin(path).create_topic("dst", 2, {"max.message.bytes": 256})  # several batches per partition
    table = pa.table({"key": [b"k%d" % i for i in range(100)], "value": [b"v%d" % i for i in range(100)]})

    def contents():
        out = []
        for p in range(2):
            with Log(os.path.join(path, f"dst-{p}"), readonly=True) as log:
                out += [(r.key, r.value) for r in log.committed_records()]
        return sorted(out)

    expected = sorted(zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True))
    assert sink.publish_once(path, "s", 0, [table], "dst")
    assert not sink.publish_once(path, "s", 0, [table], "dst")  # a plain replay: skipped
    assert contents() == expected
    # Batch 1 crashes after appending one and a half partitions, before its commit mark.
    real_append = Log.append_produce
    calls = []

    def crashing_append(log, data):
        calls.append(log.path)
        if len(calls) == 2:
            ends, pos = [], 0  # where each batch ends: baseOffset (8), batchLength (4), batch
            while pos < len(data):
                pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
                ends.append(pos)
            assert len(ends) > 1
            real_append(log, data[: ends[len(ends) // 2 - 1]])
            raise SystemExit("killed")
        return real_append(log, data)

    monkeypatch.setattr(Log, "append_produce", crashing_append)
    with pytest.raises(SystemExit):
        sink.publish_once(path, "s", 1, [table], "dst")
    monkeypatch.setattr(Log, "append_produce", real_append)
    assert contents() == expected  # part of batch 1 is in the log, aborted: read_committed sees none of it
    assert sink.publish_once(path, "s", 1, [table], "dst")  # Spark replays batch 1
    assert contents() == sorted(expected * 2)  # batch 0 and batch 1, each exactly once
