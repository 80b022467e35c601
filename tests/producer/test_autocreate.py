"""Issue 10 point 6: a topic is created by the first produce to it, as a Kafka broker with its
defaults (auto.create.topics.enable=true, num.partitions=1) does; the defaults are settable per
data directory under the broker's names, and consumers never create topics. Also point 7: one
resolution of compression.type for every write path."""

from __future__ import annotations

import glob
import logging
import os
import struct
import textwrap

import kafkalite
import pytest
from helpers import run_cli
from kafkalite import Admin, Consumer, Log, Producer, TopicPartition
from kafkalite.datadir import DataDir, target_compression


def _values(data_dir: str, topic: str, partitions: int = 1) -> list[bytes]:
    out = []
    for p in range(partitions):
        with Log(os.path.join(data_dir, f"{topic}-{p}"), readonly=True) as log:
            out += [r.value for r in log.records()]
    return out


def test_send_creates_a_missing_topic_with_kafkas_defaults_and_logs_it(tmp_path, caplog):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("existing")
    with caplog.at_level(logging.INFO, logger="kafkalite.admin"), Producer(data_dir) as p:
        meta = p.send("fresh", b"v1").get(timeout=10)
        assert p.partitions_for("other") == {0}  # a metadata request creates it too, as on a broker
    assert (meta.topic, meta.partition, meta.offset) == ("fresh", 0, 0)
    assert sorted(Admin(data_dir).list_topics()) == ["existing", "fresh", "other"]
    assert len(Admin(data_dir).describe_topic("fresh").partitions) == 1  # num.partitions=1
    assert _values(data_dir, "fresh") == [b"v1"]
    created = [
        r
        for r in caplog.records
        if r.name == "kafkalite.admin" and "auto-created topic 'fresh'" in r.getMessage()
    ]
    assert len(created) == 1, caplog.text


def test_send_batch_creates_a_missing_topic(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).init()
    with Producer(data_dir) as p:
        assert p.send_batch("bulk", [b"a", b"b"]) == {0: (0, 1)}
    assert _values(data_dir, "bulk") == [b"a", b"b"]


def test_the_data_directorys_defaults_apply_to_created_topics(tmp_path):
    """num.partitions and log.* (broker names) apply to auto-created topics and, as a broker's
    defaults, to every topic that does not set the key itself."""
    data_dir = str(tmp_path / "data")
    admin = Admin(data_dir)
    admin.create_topic("own", config={"retention.ms": 5000})
    admin.alter_data_dir_config({"num.partitions": 4, "log.retention.ms": 60_000, "log.segment.bytes": 4096})
    with Producer(data_dir) as p:
        for i in range(100):
            p.send("auto", b"x" * 1000, key=b"k%d" % i)
    d = admin.describe_topic("auto")
    assert len(d.partitions) == 4
    assert d.config["retention.ms"] == 60_000 and d.config["segment.bytes"] == 4096
    assert admin.describe_topic("own").config["retention.ms"] == 5000  # its own setting wins
    assert admin.describe_topic("own").config["segment.bytes"] == 4096  # the directory's default
    assert sum(p.segments for p in d.partitions) > 4  # segment.bytes=4096 took effect on the writes
    settings = admin.describe_data_dir_config()
    assert settings["num.partitions"] == 4 and settings["auto.create.topics.enable"] is True
    assert settings["log.retention.bytes"] == -1  # Kafka's default, filled in
    admin.alter_data_dir_config({"num.partitions": None})
    assert admin.describe_data_dir_config()["num.partitions"] == 1


def test_auto_creation_can_be_turned_off(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).init(config={"auto.create.topics.enable": "false"})
    with Producer(data_dir) as p:
        with pytest.raises(
            kafkalite.UnknownTopicError, match="'nope'.*auto.create.topics.enable is false.*create_topic"
        ):
            p.send("nope", b"v")
        with pytest.raises(kafkalite.UnknownTopicError):
            p.send_batch("nope", [b"v"])
    assert Admin(data_dir).list_topics() == []
    assert not glob.glob(os.path.join(data_dir, "nope-*"))


@pytest.mark.parametrize(
    "config, error, words",
    [
        ({"auto.create.topics.enable": "yes"}, ValueError, "true or false"),
        ({"num.partitions": 0}, ValueError, "num.partitions must be >= 1"),
        ({"num.partitions": 1.5}, ValueError, "num.partitions must be an integer"),
        ({"log.retention.ms": "soon"}, ValueError, "log.retention.ms.*retention.ms must be an integer"),
        ({"retention.ms": 1}, ValueError, "'retention.ms' is set as 'log.retention.ms'"),
        ({"log.segment.bytes": [1]}, TypeError, "segment.bytes must be an integer"),
    ],
)
def test_bad_data_directory_config_is_refused_typed(tmp_path, config, error, words):
    data_dir = str(tmp_path / "data")
    admin = Admin(data_dir)
    admin.init()
    with pytest.raises(kafkalite.InvalidConfigError, match=words) as info:
        admin.alter_data_dir_config(config)
    assert isinstance(info.value, error)
    assert admin.describe_data_dir_config()["num.partitions"] == 1


def test_consumers_never_create_topics(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).init()
    with Consumer(data_dir, "missing", auto_offset_reset="earliest") as c:
        assert c.poll(timeout_ms=100) == {}
    with pytest.raises(kafkalite.UnknownTopicError):
        Consumer(data_dir).assign([TopicPartition("missing", 0)])
    with Consumer(data_dir, "missing", group_id="g") as c:
        c.poll(timeout_ms=100)
    assert "missing" not in Admin(data_dir).list_topics()


PRODUCER = textwrap.dedent(
    """
    import sys
    from kafkalite import Producer
    path, who = sys.argv[1], sys.argv[2]
    with Producer(path) as p:
        for i in range(50):
            p.send("race", b"%s-%d" % (who.encode(), i), key=b"k%d" % i)
    """
)


@pytest.mark.slow
def test_producers_racing_to_create_the_same_topic_create_it_once(tmp_path, spawn):
    """Several processes send to the same missing topic at once: one topic, every record in it."""
    data_dir = str(tmp_path / "data")
    Admin(data_dir).init(config={"num.partitions": 3})
    procs = [spawn.code(PRODUCER, data_dir, n) for n in range(4)]
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    assert Admin(data_dir).list_topics() == ["race"]
    values = _values(data_dir, "race", 3)
    assert sorted(values) == sorted(b"%d-%d" % (n, i) for n in range(4) for i in range(50))


@pytest.mark.slow
def test_kafkalite_produce_creates_the_topic_and_config_sets_the_defaults(tmp_path):
    data_dir = str(tmp_path / "data")
    env = {**os.environ, "KAFKALITE_DATA_DIR": data_dir}

    def run(*args, stdin=None):
        return run_cli(*args, input=stdin, env=env)

    assert run("init").returncode == 0
    out = run("config", "alter", "--add-config", "num.partitions=2", "--add-config", "log.retention.ms=1000")
    assert out.returncode == 0, out.stderr
    described = run("config", "describe").stdout.decode()
    assert (
        "num.partitions=2" in described
        and "log.retention.ms=1000" in described
        and "auto.create.topics.enable=true" in described
    )
    out = run("produce", "orders", stdin=b"a\nb\n")
    assert out.returncode == 0 and b"Produced 2 records" in out.stderr, out.stderr
    assert len(Admin(data_dir).describe_topic("orders").partitions) == 2
    assert Admin(data_dir).describe_topic("orders").config["retention.ms"] == 1000
    assert run("config", "alter", "--add-config", "auto.create.topics.enable=false").returncode == 0
    out = run("produce", "other", stdin=b"a\n")
    assert out.returncode == 1
    assert b"auto.create.topics.enable is false" in out.stderr and b"kafkalite topics create" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 2  # "Produced 0 records" and the one-line error
    out = run("config", "alter", "--add-config", "retention.ms=5")
    assert out.returncode == 1 and b"log.retention.ms" in out.stderr and b"Traceback" not in out.stderr


# -- the Spark sink's commit (plain Python, no Spark) ---------------------------------------


@pytest.mark.slow
def test_the_spark_sink_creates_missing_topics_at_commit(tmp_path):
    pa = pytest.importorskip("pyarrow")
    from kafkalite.spark import sink

    data_dir = str(tmp_path / "data")
    Admin(data_dir).init(config={"num.partitions": 2})
    table = pa.table({"topic": ["t1", "t2", "t2"], "value": [b"a", b"b", b"c"]})
    sink.publish(data_dir, [table], None)
    # Besides __transaction_state: a batch write commits in one transaction.
    assert sorted(t for t in Admin(data_dir).list_topics() if not t.startswith("__")) == ["t1", "t2"]
    assert sorted(_values(data_dir, "t2", 2)) == [b"b", b"c"]
    Admin(data_dir).alter_data_dir_config({"auto.create.topics.enable": False})
    with pytest.raises(
        kafkalite.UnknownTopicError, match="'t3'.*a row's 'topic' column.*auto.create.topics.enable=false"
    ):
        sink.publish(data_dir, [pa.table({"topic": ["t3"], "value": [b"x"]})], None)


def test_the_spark_write_check_creates_the_topic_on_the_driver(tmp_path):
    from kafkalite.spark.checks import check_write_target

    data_dir = str(tmp_path / "data")
    Admin(data_dir).init()
    assert check_write_target({"path": data_dir, "topic": "copy"}, "save") == os.path.abspath(data_dir)
    assert [t for t in Admin(data_dir).list_topics() if not t.startswith("__")] == ["copy"]


# -- issue 10 point 7: compression.type resolved once -----------------------------------------


def _codecs(partition_dir: str) -> list[int]:
    """The compression codec (attributes & 7) of every record batch in the partition's .log files
    (control batches, never compressed: the Spark sink's COMMIT markers, left out)."""
    codecs = []
    for path in sorted(glob.glob(os.path.join(partition_dir, "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 23 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            if length <= 0:
                break
            (attributes,) = struct.unpack_from(">h", data, pos + 21)
            if not attributes & 0x20:
                codecs.append(attributes & 7)
            pos += 12 + length
    return codecs


ZSTD, NONE, GZIP, SNAPPY, LZ4 = 4, 0, 1, 2, 3


@pytest.mark.parametrize(
    "topic_codec, producer_codec, expected",
    [
        ("producer", "zstd", ZSTD),
        ("producer", None, NONE),
        ("zstd", None, ZSTD),
        ("none", "zstd", NONE),
        ("uncompressed", "zstd", NONE),
        ("producer", "snappy", SNAPPY),
        ("gzip", None, GZIP),
        ("lz4", "zstd", LZ4),
    ],
)
def test_every_write_path_writes_the_same_codec(tmp_path, topic_codec, producer_codec, expected):
    """send(), send_batch() (keyless and keyed) and a Log from open_partition all write what
    target_compression decides (send_batch used to write uncompressed batches on a
    compression.type=producer topic from a zstd producer)."""
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", config={"compression.type": topic_codec})
    value = b"compressible " * 40
    with Producer(data_dir, compression_type=producer_codec) as p:
        p.send("t", value, partition=0).get(timeout=10)
        p.send_batch("t", [value] * 3, partition=0)
        p.send_batch("t", [value] * 3, keys=[b"a", b"b", b"c"], partition=0)
    with DataDir(data_dir).open_partition(
        "t", 0, producer_compression=producer_codec, shared_writers=True
    ) as log:
        log.append_values([value])
    codecs = _codecs(os.path.join(data_dir, "t-0"))
    assert codecs == [expected] * 4, codecs
    assert target_compression(topic_codec, producer_codec) == kafkalite._native.COMPRESSION_TYPES[expected]


@pytest.mark.slow
def test_the_spark_sink_resolves_compression_the_same_way(tmp_path):
    pa = pytest.importorskip("pyarrow")
    from kafkalite.spark import sink

    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", config={"compression.type": "producer"})
    table = pa.table({"value": [b"compressible " * 40] * 3})
    sink.publish(data_dir, [table], "t", sink.sink_compression({"kafka.compression.type": "zstd"}))
    sink.publish(data_dir, [table], "t", sink.sink_compression({}))
    assert _codecs(os.path.join(data_dir, "t-0")) == [ZSTD, NONE]
    with pytest.raises(kafkalite.InvalidConfigError, match="kafka.compression.type"):
        sink.sink_compression({"kafka.compression.type": "brotli"})
