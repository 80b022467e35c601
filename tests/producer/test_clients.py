"""Admin, Producer and Consumer as a kafka-python user drives them: round trips, every config
key, every error path."""

from __future__ import annotations

import json
import os
import time

import kafkalite
import pyarrow as pa
import pytest
from kafkalite import Admin, Consumer, Producer, TopicPartition
from kafkalite.producer.partitioner import partition_for_key


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "data")


def make_topic(data_dir, name="events", partitions=3, config=None):
    Admin(data_dir).create_topic(name, partitions=partitions, config=config)


# -- Admin ----------------------------------------------------------------------------------


def test_admin_create_list_describe_alter_delete(data_dir):
    admin = Admin(data_dir)
    admin.create_topic("orders", partitions=2, config={"retention.ms": 1000, "segment.bytes": "4096"})
    admin.create_topic("audit.log")
    assert admin.list_topics() == ["audit.log", "orders"]
    d = admin.describe_topic("orders")
    assert [p.partition for p in d.partitions] == [0, 1]
    assert d.config["retention.ms"] == 1000 and d.config["segment.bytes"] == 4096
    assert d.config["cleanup.policy"] == "delete"  # Kafka's defaults fill the rest
    with Producer(data_dir, batch_size=1000) as p:
        for _ in range(50):
            p.send("orders", b"x" * 200, partition=0)
    d = admin.describe_topic("orders")
    assert (
        d.partitions[0].end_offset == 50
        and d.partitions[0].size_bytes > 10_000
        and d.partitions[0].segments > 1
    )
    admin.alter_config("orders", {"retention.bytes": 5000, "retention.ms": None})
    d = admin.describe_topic("orders")
    assert d.config["retention.bytes"] == 5000 and d.config["retention.ms"] == 604800000
    admin.create_partitions("orders", 4)
    assert len(admin.describe_topic("orders").partitions) == 4
    admin.delete_topic("orders")
    assert admin.list_topics() == ["audit.log"]
    assert not any(n.startswith("orders-") for n in os.listdir(data_dir))


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../x", "a/b", "x" * 250, "ünicode", "sp ace", None, "a\x00b"]
)
def test_bad_topic_names_are_refused_and_touch_nothing(tmp_path, name):
    data_dir = str(tmp_path / "data")
    os.mkdir(data_dir)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(kafkalite.InvalidTopicError):
        Admin(data_dir).create_topic(name)
    assert sorted(os.listdir(tmp_path)) == before
    assert os.listdir(data_dir) == []


@pytest.mark.parametrize(
    "config, message",
    [
        ({"retention.ms": "soon"}, "retention.ms must be an integer"),
        ({"retention.ms": -2}, "retention.ms must be >= -1"),
        ({"retention.bytes": 1.5}, "retention.bytes must be an integer"),
        ({"segment.bytes": 10}, "segment.bytes must be >= 14"),
        ({"segment.bytes": 2**31}, "segment.bytes must be at most"),
        ({"segment.ms": 0}, "segment.ms must be >= 1"),
        ({"max.message.bytes": 10}, "max.message.bytes must be >= 61"),
        ({"compression.type": "brotli"}, "compression.type must be one of"),
        ({"message.timestamp.type": "Now"}, "message.timestamp.type must be one of"),
        ({"cleanup.policy": "archive"}, "cleanup.policy must be"),
        ({"retention.hours": 1}, "unknown topic config 'retention.hours'"),
    ],
)
def test_bad_config_is_refused(data_dir, config, message):
    with pytest.raises(kafkalite.InvalidConfigError, match=message):
        Admin(data_dir).create_topic("t", config=config)
    assert not os.path.exists(data_dir)  # refused before anything was created


def test_every_config_key_takes_effect(data_dir):
    make_topic(
        data_dir,
        "t",
        1,
        {
            "segment.bytes": 2048,
            "segment.ms": 3_600_000,
            "retention.bytes": 100_000,
            "retention.ms": 3_600_000,
            "compression.type": "zstd",
            "max.message.bytes": 5000,
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "delete",
        },
    )
    before = int(time.time() * 1000)
    with Producer(data_dir, batch_size=1000) as p:
        for _ in range(100):
            p.send("t", os.urandom(300), timestamp_ms=1)
        with pytest.raises(kafkalite.RecordTooLargeError, match="5000"):
            p.send("t", b"x" * 6000)
    d = Admin(data_dir).describe_topic("t")
    assert d.partitions[0].segments > 1  # segment.bytes
    with Consumer(data_dir, "t", auto_offset_reset="earliest") as c:
        recs = [r for rs in c.poll(timeout_ms=100, max_records=1000).values() for r in rs]
    assert len(recs) == 100
    assert all(r.timestamp >= before and r.timestamp_type == 1 for r in recs)  # LogAppendTime
    raw = open(os.path.join(data_dir, "t-0", "00000000000000000000.log"), "rb").read()
    assert raw[21 + 1] & 0x07 == 4  # attributes: zstd


def test_duplicate_and_unknown_topics(data_dir):
    make_topic(data_dir, "t", 1)
    with pytest.raises(kafkalite.TopicAlreadyExistsError):
        Admin(data_dir).create_topic("t")
    Admin(data_dir).create_topic("a.b")
    with pytest.raises(kafkalite.InvalidTopicError, match="collides"):
        Admin(data_dir).create_topic("a_b")
    with pytest.raises(kafkalite.UnknownTopicError, match="create it first"):
        Admin(data_dir).describe_topic("nope")
    with pytest.raises(kafkalite.UnknownTopicError):
        Admin(data_dir).delete_topic("nope")
    with pytest.raises(kafkalite.InvalidConfigError, match="must be larger"):
        Admin(data_dir).create_partitions("t", 1)


# -- Producer -------------------------------------------------------------------------------


def test_produce_consume_round_trip_with_serializers(data_dir):
    make_topic(data_dir, "t", 3)
    with Producer(
        data_dir, key_serializer=str.encode, value_serializer=lambda v: json.dumps(v).encode()
    ) as p:
        futures = [
            p.send("t", {"n": i}, key=f"user-{i % 7}", headers=[("h", b"%d" % i)], timestamp_ms=1000 + i)
            for i in range(300)
        ]
        p.flush()
        metas = [f.get(timeout=5) for f in futures]
    for i, m in enumerate(metas):
        assert (
            m.topic == "t"
            and m.partition == partition_for_key(f"user-{i % 7}".encode(), 3)
            and m.timestamp == 1000 + i
        )
    with Consumer(
        data_dir,
        "t",
        auto_offset_reset="earliest",
        key_deserializer=bytes.decode,
        value_deserializer=json.loads,
    ) as c:
        got = {}
        for recs in c.poll(timeout_ms=500, max_records=1000).values():
            for r in recs:
                got[r.value["n"]] = (r.key, r.partition, r.offset, r.timestamp, r.headers)
    assert len(got) == 300
    for i, m in enumerate(metas):
        assert got[i] == (f"user-{i % 7}", m.partition, m.offset, 1000 + i, [("h", b"%d" % i)])


def test_futures_callbacks_and_errbacks(data_dir):
    make_topic(data_dir, "t", 1)
    seen, errors = [], []
    with Producer(data_dir, linger_ms=20) as p:
        f = p.send("t", b"v").add_callback(seen.append).add_errback(errors.append)
        assert f.get(timeout=5).offset == 0
        assert f.is_done and f.succeeded() and not f.failed() and f.value.offset == 0 and f.exception is None
        f2 = p.send("t", b"w")
        p.flush()
        f2.add_callback(lambda extra, md: seen.append((extra, md.offset)), "late")
    assert seen[0].offset == 0 and seen[1] == ("late", 1) and errors == []


def test_murmur2_partitioning_matches_the_java_client(data_dir):
    # kafka-python's test_murmur2_java_compatibility, through a 1000-partition topic.
    make_topic(data_dir, "big", 1000)
    vectors = {b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742}
    with Producer(data_dir) as p:
        for key, partition in vectors.items():
            assert p.send("big", b"v", key=key).get(5).partition == partition


def test_null_keys_are_sticky_per_batch(data_dir):
    # Kafka's sticky partitioner switches after batch_size bytes, not when a batch is sent: a
    # flush alone keeps the partition (tests/producer/test_producer_sticky.py has the properties).
    make_topic(data_dir, "t", 4)
    with Producer(data_dir, batch_size=1 << 30, linger_ms=60_000) as p:
        futures = [p.send("t", b"x") for _ in range(100)]
        p.flush()
        assert len({f.get(5).partition for f in futures}) == 1  # one batch, one partition
        later = [p.send("t", b"y") for _ in range(10)]
        p.flush()
        assert later[0].get(5).partition == futures[0].get(5).partition


def test_send_batch_lists_arrow_and_keys(data_dir):
    make_topic(data_dir, "t", 2)
    with Producer(data_dir) as p:
        assert p.send_batch("t", [b"a", b"b", b"c"], partition=1) == {1: (0, 2)}
        out = p.send_batch("t", pa.array(["x", "y"]), partition=0)
        assert out == {0: (0, 1)}
        keyed = p.send_batch("t", [b"1", b"2", b"3", b"4"], keys=[b"k1", b"k2", b"k3", b"k4"])
        assert sum(last - first + 1 for first, last in keyed.values()) == 4
        assert all(partition_for_key(k, 2) in keyed for k in [b"k1", b"k2", b"k3", b"k4"])
    with Consumer(data_dir) as c:
        c.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        c.seek_to_beginning()
        values = sorted(r.value for rs in c.poll(100, 100).values() for r in rs)
    assert values == sorted([b"a", b"b", b"c", b"x", b"y", b"1", b"2", b"3", b"4"])


def test_acks_all_compression_and_producer_errors(data_dir):
    make_topic(data_dir, "t", 2)
    with pytest.raises(kafkalite.InvalidConfigError, match="acks"):
        Producer(data_dir, acks=2)
    with pytest.raises(kafkalite.InvalidConfigError, match="unknown producer config 'bootstrap_servers'"):
        Producer(data_dir, bootstrap_servers="localhost:9092")
    with pytest.raises(kafkalite.InvalidConfigError, match="compression_type"):
        Producer(data_dir, compression_type="brotli")
    p = Producer(data_dir, acks="all", compression_type="zstd")
    assert p.send("t", b"durable " * 50, partition=1).get(5).offset == 0
    Admin(data_dir).alter_data_dir_config({"auto.create.topics.enable": False})
    with pytest.raises(kafkalite.UnknownTopicError, match="nope.*auto.create.topics.enable is false"):
        p.send("nope", b"v")
    with pytest.raises(kafkalite.InvalidConfigError, match="no partition 5"):
        p.send("t", b"v", partition=5)
    with pytest.raises(kafkalite.InvalidConfigError, match="key or a value"):
        p.send("t")
    with pytest.raises(kafkalite.InvalidTopicError):
        p.send("../x", b"v")
    with pytest.raises(TypeError, match="header"):
        p.send("t", b"v", headers=[("k", "not bytes")])
    p.close()
    p.close()
    with pytest.raises(kafkalite.IllegalStateError, match="closed"):
        p.send("t", b"late")
    raw = open(os.path.join(data_dir, "t-1", "00000000000000000000.log"), "rb").read()
    assert raw[22] & 0x07 == 4


# -- Consumer -------------------------------------------------------------------------------


def fill(data_dir, topic="t", partitions=2, n=100):
    make_topic(data_dir, topic, partitions)
    with Producer(data_dir) as p:
        for i in range(n):
            p.send(topic, b"%d" % i, partition=i % partitions, timestamp_ms=10_000 + i)


def test_consumer_positions_seeks_and_offsets(data_dir):
    fill(data_dir)
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    with Consumer(data_dir) as c:
        c.assign([tp0, tp1])
        assert c.assignment() == {tp0, tp1}
        assert c.position(tp0) == 50  # auto_offset_reset='latest'
        c.seek(tp0, 10)
        recs = c.poll(max_records=5)[tp0]
        assert [r.offset for r in recs] == [10, 11, 12, 13, 14] and c.position(tp0) == 15
        c.seek_to_beginning(tp1)
        assert c.position(tp1) == 0
        c.seek_to_end()
        assert c.poll() == {}
        assert c.beginning_offsets([tp0]) == {tp0: 0} and c.end_offsets([tp0, tp1]) == {tp0: 50, tp1: 50}
        found = c.offsets_for_times({tp0: 10_010, tp1: 99_999})
        assert found[tp0] == kafkalite.OffsetAndTimestamp(5, 10_010) and found[tp1] is None
        c.pause(tp0)
        c.seek(tp0, 0)
        c.seek(tp1, 0)
        assert set(c.poll(max_records=1000)) == {tp1}
        assert c.paused() == {tp0}
        c.resume(tp0)
        assert set(c.poll(max_records=1000)) == {tp0}
        assert (
            c.partitions_for_topic("t") == {0, 1}
            and c.partitions_for_topic("zz") is None
            and c.topics() == {"t"}
        )
        with pytest.raises(kafkalite.IllegalStateError, match="subscribe"):
            c.subscribe(["t"])
        with pytest.raises(kafkalite.IllegalStateError, match="not assigned"):
            c.seek(TopicPartition("t", 9), 0)


def test_commits_are_durable_and_resume_a_group(data_dir):
    fill(data_dir)
    with Consumer(data_dir, "t", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False) as c:
        first = c.poll(max_records=30)
        c.commit()
        assert sum(len(v) for v in first.values()) == 30
        committed = {tp: c.committed(tp) for tp in c.assignment()}
    with Consumer(data_dir, "t", group_id="g", auto_offset_reset="earliest") as c:
        for tp, pos in committed.items():
            assert c.position(tp) == (pos if pos is not None else 0)
        rest = c.poll(max_records=1000)
    assert sum(len(v) for v in rest.values()) == 70
    with Consumer(data_dir, "t", group_id="g") as c:  # auto-committed on close
        assert c.poll() == {}
    with Consumer(data_dir, group_id="g2") as c:
        c.assign([TopicPartition("t", 0)])
        c.commit({TopicPartition("t", 0): kafkalite.OffsetAndMetadata(7, "note")})
        assert c.committed(TopicPartition("t", 0)) == 7
    with pytest.raises(kafkalite.IllegalStateError, match="group_id"):
        Consumer(data_dir).commit()


def test_offset_reset_policies_and_out_of_range(data_dir):
    fill(data_dir, partitions=1, n=10)
    tp = TopicPartition("t", 0)
    with Consumer(data_dir, auto_offset_reset="none") as c:
        c.assign([tp])
        with pytest.raises(kafkalite.NoOffsetForPartitionError):
            c.poll()
    with Consumer(data_dir, auto_offset_reset="earliest") as c:
        c.assign([tp])
        with kafkalite.Log(os.path.join(data_dir, "t-0"), shared_writers=True) as log:
            log.delete_records_before(6)
        c.seek(tp, 2)  # deleted by then: reset to the earliest offset still there
        assert [r.offset for r in c.poll(max_records=100)[tp]] == [6, 7, 8, 9]
        assert c.position(tp) == 10
    with pytest.raises(kafkalite.InvalidConfigError, match="auto_offset_reset"):
        Consumer(data_dir, auto_offset_reset="smallest")
    with pytest.raises(kafkalite.InvalidConfigError, match="unknown consumer config"):
        Consumer(data_dir, bootstrap_servers="x")
    c = Consumer(data_dir)
    c.close()
    with pytest.raises(kafkalite.IllegalStateError, match="closed"):
        c.poll()


def test_subscribe_pattern_picks_up_new_topics_and_partitions(data_dir):
    make_topic(data_dir, "logs.app", 1)
    with Consumer(data_dir, auto_offset_reset="earliest") as c:
        c.subscribe(pattern=r"logs\..*")
        assert c.assignment() == {TopicPartition("logs.app", 0)}
        make_topic(data_dir, "logs.db", 2)
        make_topic(data_dir, "metrics", 1)
        with Producer(data_dir) as p:
            p.send("logs.db", b"d", partition=1)
        got = c.poll(timeout_ms=200)
        assert list(got) == [TopicPartition("logs.db", 1)]
        Admin(data_dir).create_partitions("logs.app", 2)
        c.poll()
        assert TopicPartition("logs.app", 1) in c.assignment()
        assert "metrics" not in {tp.topic for tp in c.assignment()}


def test_iteration_and_consumer_timeout(data_dir):
    fill(data_dir, n=1000)
    with Consumer(data_dir, "t", auto_offset_reset="earliest", consumer_timeout_ms=100) as c:
        offsets = sorted((r.partition, r.offset) for r in c)
    assert len(offsets) == 1000 and offsets[0] == (0, 0)


def test_consumers_never_see_control_batches(data_dir, tmp_path):
    from test_broker_layout import control_batch

    make_topic(data_dir, "t", 1)
    with kafkalite.Log(os.path.join(data_dir, "t-0")) as log:
        log.append_values([b"a"])
    with open(os.path.join(data_dir, "t-0", "00000000000000000000.log"), "ab") as f:
        f.write(control_batch(1, 5))  # a broker's transaction marker after our record
    with kafkalite.Log(os.path.join(data_dir, "t-0")) as log:
        log.append_values([b"b"])
    with Consumer(data_dir, "t", auto_offset_reset="earliest") as c:
        assert [(r.offset, r.value) for rs in c.poll(100).values() for r in rs] == [(0, b"a"), (2, b"b")]


def test_retention_runs_by_itself(data_dir):
    make_topic(data_dir, "t", 1, {"segment.bytes": 1024, "retention.bytes": 2048})
    with Producer(data_dir, retention_check_interval_ms=50) as p:
        for _ in range(200):
            p.send("t", b"r" * 100)
        p.flush()
        deadline = time.time() + 10
        while Admin(data_dir).describe_topic("t").partitions[0].start_offset == 0 and time.time() < deadline:
            time.sleep(0.05)
    part = Admin(data_dir).describe_topic("t").partitions[0]
    # Kafka deletes whole segments while the rest still exceeds retention.bytes.
    assert part.start_offset > 0 and part.segments <= 2


def test_retention_covers_topics_no_producer_writes(data_dir):
    make_topic(data_dir, "old", 1, {"segment.bytes": 1024, "retention.ms": 1000})
    make_topic(data_dir, "busy", 1)
    with Producer(data_dir, batch_size=500) as p:
        for _ in range(50):
            p.send("old", b"o" * 100, timestamp_ms=1)  # ancient records
    assert Admin(data_dir).describe_topic("old").partitions[0].segments > 3
    with Producer(data_dir, retention_check_interval_ms=50) as p:
        p.send("busy", b"b")
        deadline = time.time() + 10
        while (
            Admin(data_dir).describe_topic("old").partitions[0].start_offset == 0 and time.time() < deadline
        ):
            time.sleep(0.05)
    old = Admin(data_dir).describe_topic("old").partitions[0]
    assert old.start_offset == 50 and old.end_offset == 50  # every expired segment is gone
    assert Admin(data_dir).enforce_retention() == {"busy": 0, "old": 0}


def test_a_reader_whose_newest_segment_retention_deleted_lists_again(data_dir):
    """A reader that knew a partition before retention removed every segment it knew (the
    newest too: the writer rolled past it) lists the directory again instead of failing with
    "cannot open segment ... No such file" (a CI run met this in the test above, through the
    describe_topic it polls)."""
    from kafkalite.log import Log

    make_topic(data_dir, "old", 1, {"segment.bytes": 1024, "retention.ms": 1000})
    with Producer(data_dir, batch_size=500) as p:
        for _ in range(50):
            p.send("old", b"o" * 100, timestamp_ms=1)  # ancient records
    with Log(os.path.join(data_dir, "old-0"), readonly=True) as reader:
        assert reader.start_offset == 0 and reader.end_offset == 50
        assert Admin(data_dir).enforce_retention()["old"] > 3  # segments deleted, the newest among them
        assert not os.path.exists(os.path.join(data_dir, "old-0", "00000000000000000000.log"))
        assert reader.start_offset == 50 and reader.end_offset == 50
        assert list(reader.records()) == []


def test_a_brokers_log_dir_is_readable_but_not_changeable(tmp_path):
    from test_broker_layout import write_broker_partition

    data_dir = tmp_path / "kafka-logs"
    data_dir.mkdir()
    expected = write_broker_partition(str(data_dir / "orders-0"))
    assert Admin(str(data_dir)).list_topics() == ["orders"]
    with Consumer(str(data_dir), "orders", auto_offset_reset="earliest") as c:
        got = [(r.offset, r.value) for rs in c.poll(100, 10_000).values() for r in rs]
    assert got == expected
    with pytest.raises(kafkalite.ReadOnlyDataDirError, match="Kafka broker.*kafkalite init --adopt"):
        Admin(str(data_dir)).create_topic("new")


def test_poll_arrow_bulk_path(data_dir):
    fill(data_dir, n=1000)
    with Consumer(data_dir, "t", group_id="arrow", auto_offset_reset="earliest") as c:
        batches = c.poll_arrow(timeout_ms=100, max_records=300)
        assert sum(b.num_rows for b in batches.values()) == 300
        rest = c.poll_arrow(timeout_ms=100)
        assert sum(b.num_rows for b in rest.values()) == 700
        assert c.poll_arrow() == {}
        values = sorted(
            int(v) for b in [*batches.values(), *rest.values()] for v in b.column("value").to_pylist()
        )
        assert values == list(range(1000))
        c.commit()
        assert sum(c.committed(tp) for tp in c.assignment()) == 1000
        tp0 = TopicPartition("t", 0)
        c.seek(tp0, 10_000)  # past the end: auto_offset_reset applies, as for poll()
        assert c.poll_arrow(max_records=1000)[tp0].num_rows == 500
