"""Topic config is defined once, in the engine (rust/src/storage/topic_config/mod.rs): the wire-protocol
server and the Python clients validate it and resolve a topic's effective config the same way
(issue 12 point 1)."""

from __future__ import annotations

import os

import kafkalite
import pytest
from kafkalite import _native
from kafkalite.datadir import (
    BROKER_SYNONYMS,
    DIR_DEFAULTS,
    MAX_PARTITIONS,
    TOPIC_DEFAULTS,
    DataDir,
    log_options,
    validate_config,
    validate_dir_config,
)

pytest_plugins = ["kafkalite.testing"]

confluent_kafka = pytest.importorskip("confluent_kafka")

ZSTD = 4


def _codecs(partition_dir: str) -> set[int]:
    """The codec ids (attributes & 7) of every batch of a partition's first segment."""
    with open(os.path.join(partition_dir, "00000000000000000000.log"), "rb") as f:
        data = f.read()
    codecs, pos = set(), 0
    while pos + 61 <= len(data):
        length = int.from_bytes(data[pos + 8 : pos + 12], "big")
        codecs.add(int.from_bytes(data[pos + 21 : pos + 23], "big") & 7)
        pos += 12 + length
    return codecs


def test_the_python_tables_are_the_engines():
    defs = _native.topic_config_defs()
    assert TOPIC_DEFAULTS == {d["name"]: d["default"] for d in defs}
    # Configs without a broker-wide default (remote.storage.enable) have no synonym.
    assert BROKER_SYNONYMS == {d["broker_name"]: d["name"] for d in defs if d["broker_name"]}
    assert DIR_DEFAULTS == {d["name"]: d["default"] for d in _native.dir_config_defs()}
    assert MAX_PARTITIONS == 100_000
    # Kafka's defaults, one place: 7 days, 1 MiB + overhead, 1 GiB.
    assert TOPIC_DEFAULTS["retention.ms"] == 604_800_000
    assert TOPIC_DEFAULTS["max.message.bytes"] == 1_048_588
    assert TOPIC_DEFAULTS["segment.bytes"] == 1 << 30
    for d in defs:
        assert d["doc"] and d["type"] in ("int", "float", "string", "list", "boolean"), d


def test_server_and_python_resolve_a_topic_the_same_way(kafkalite_server):
    """A topic created over the wire and one created by Admin, both compression.type=zstd, in a
    data directory whose message.max.bytes is 2000: same stored config, same codec from an
    embedded Producer, and the server refuses what the Producer refuses (the server used to
    ignore the data directory's defaults and accept a 5000-byte record)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = kafkalite.Admin(kafkalite_server.path)
    admin.alter_data_dir_config({"message.max.bytes": 2000, "log.retention.ms": 123_456})
    client = AdminClient({"bootstrap.servers": kafkalite_server.bootstrap_servers})
    client.create_topics([NewTopic("net", num_partitions=1, config={"compression.type": "zstd"})])[
        "net"
    ].result(10)
    admin.create_topic("emb", config={"compression.type": "zstd"})

    net, emb = admin.describe_topic("net").config, admin.describe_topic("emb").config
    assert net == emb
    assert net["retention.ms"] == 123_456 and net["max.message.bytes"] == 2000
    data = DataDir(kafkalite_server.path)
    assert log_options(data.effective_config("net")) == log_options(data.effective_config("emb"))

    with kafkalite.Producer(kafkalite_server.path) as p:
        for topic in ("net", "emb"):
            p.send(topic, b"compressible " * 40, partition=0).get(timeout=10)
            with pytest.raises(kafkalite.KafkaliteError):
                p.send(topic, b"x" * 5000, partition=0).get(timeout=10)
    assert _codecs(os.path.join(kafkalite_server.path, "net-0")) == {ZSTD}
    assert _codecs(os.path.join(kafkalite_server.path, "emb-0")) == {ZSTD}

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": kafkalite_server.bootstrap_servers,
            "message.timeout.ms": 5000,
            "batch.size": 100_000,
        }
    )
    errors: list = []
    for topic in ("net", "emb"):
        producer.produce(topic, b"x" * 5000, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert [e.code() if e else None for e in errors] == [confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE] * 2


# Values at the bounds, and the ones where the two copies of the rules used to give different
# answers (an integer past i64: "must be at most" in Python, "must be an integer" in Rust).
BOUNDS = [
    ({"retention.ms": "-2"}, "retention.ms must be >= -1"),
    ({"segment.bytes": "13"}, "segment.bytes must be >= 14"),
    ({"segment.bytes": str(2**31)}, "segment.bytes must be at most 2147483647"),
    ({"max.message.bytes": "60"}, "max.message.bytes must be >= 61"),
    ({"segment.ms": "0"}, "segment.ms must be >= 1"),
    ({"retention.bytes": str(2**63)}, "retention.bytes must be at most 9223372036854775807"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio must be between 0 and 1"),
    ({"compression.type": "brotli"}, "compression.type must be one of producer, uncompressed, none, gzip"),
    ({"cleanup.policy": "compact,"}, "cleanup.policy must be 'delete', 'compact' or 'compact,delete'"),
]


@pytest.mark.parametrize("config,message", BOUNDS)
def test_admin_and_the_server_refuse_the_same_values(kafkalite_server, config, message):
    from confluent_kafka.admin import AdminClient, NewTopic

    with pytest.raises(kafkalite.InvalidConfigError, match=message):
        kafkalite.Admin(kafkalite_server.path).create_topic("t", config=config)
    with pytest.raises(ValueError, match=message):
        validate_config(config)
    client = AdminClient({"bootstrap.servers": kafkalite_server.bootstrap_servers})
    with pytest.raises(confluent_kafka.KafkaException, match=message):
        client.create_topics([NewTopic("t", num_partitions=1, config=config)])["t"].result(10)


@pytest.mark.parametrize(
    "config",
    [
        {"retention.ms": "-1"},
        {"segment.bytes": "14"},
        {"max.message.bytes": str(2**31 - 1)},
        {"segment.ms": "1"},
    ],
)
def test_admin_and_the_server_accept_the_same_edges(kafkalite_server, config):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("a", config=config)
    client = AdminClient({"bootstrap.servers": kafkalite_server.bootstrap_servers})
    client.create_topics([NewTopic("b", num_partitions=1, config=config)])["b"].result(10)
    assert admin.describe_topic("a").config == admin.describe_topic("b").config


def test_data_directory_defaults_are_checked_by_the_topic_rules():
    with pytest.raises(
        kafkalite.InvalidConfigError, match=r"log.retention.ms \(the default of retention.ms\)"
    ):
        validate_dir_config({"log.retention.ms": -2})
    with pytest.raises(
        kafkalite.InvalidTypeError, match=r"log.segment.bytes \(the default of segment.bytes\)"
    ):
        validate_dir_config({"log.segment.bytes": [1]})
    assert validate_dir_config({"log.cleanup.policy": "delete,compact", "num.partitions": "3"}) == {
        "log.cleanup.policy": "compact,delete",
        "num.partitions": 3,
    }


def test_log_timestamp_type_and_flush_are_parsed_by_the_engine(tmp_path):
    with pytest.raises(kafkalite.InvalidConfigError, match="timestamp_type must be"):
        kafkalite.Log(str(tmp_path / "a-0"), timestamp_type="now")
    with pytest.raises(kafkalite.InvalidConfigError, match="flush must be"):
        kafkalite.Log(str(tmp_path / "b-0"), flush="sometimes")
    with kafkalite.Log(str(tmp_path / "c-0"), timestamp_type="LogAppendTime", flush="always") as log:
        log.append_values([b"v"])


def test_every_value_a_topic_accepts_opens_its_partitions(tmp_path):
    """retention.bytes=0 was accepted as topic config (as Kafka does) but Log refused
    retention_bytes=0, so every write to such a topic failed; Log's bounds now come from the
    engine's table."""
    data = str(tmp_path / "data")
    admin = kafkalite.Admin(data)
    admin.create_topic("t", config={"retention.bytes": 0, "segment.bytes": 14, "max.message.bytes": 61})
    admin.create_topic("u", config={"retention.bytes": 0, "retention.ms": 0, "segment.ms": 1})
    with kafkalite.Producer(data) as p:
        p.send_batch("u", [b"v"], partition=0)
    with DataDir(data).open_partition("t", 0) as log:
        assert log.end_offset == 0
    with pytest.raises(kafkalite.InvalidConfigError, match="retention_bytes must be >= 0"):
        kafkalite.Log(str(tmp_path / "x"), retention_bytes=-1)
