"""`kafkalite.Server` / `kafkalite serve` against real Kafka clients (confluent-kafka, i.e.
librdkafka, and kafka-python) on 127.0.0.1 with a free port: every codec, headers, null
keys and values, the embedded API on the same data directory at the same time, restarts,
and hostile input that must not disturb other clients."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import kafkalite
import pytest
from kafkalite.server import Server
from serve_proc import start_serve

pytest_plugins = ["kafkalite.testing"]

confluent_kafka = pytest.importorskip("confluent_kafka")

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def confluent_producer(server: Server, **extra: object):
    return confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers, "linger.ms": 5, **extra})


def confluent_read(
    server: Server, topic: str, count: int | None, partitions: int = 1, timeout: float = 20.0
) -> list:
    """Read `count` messages from the start of every partition (assign, no group); `None`: as
    many as the partitions' high watermarks said at the start."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": server.bootstrap_servers,
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(partitions)
        ]
    )
    out = []
    deadline = time.monotonic() + timeout
    try:
        if count is None:
            count = sum(
                consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout)[1]
                for p in range(partitions)
            )
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
    finally:
        consumer.close()
    return out


def produce_all(producer, topic: str, items: list[tuple]) -> list:
    """Produce (key, value, headers) items; return the delivery reports, all checked."""
    reports: list = []
    for key, value, headers in items:
        producer.produce(
            topic,
            value=value,
            key=key,
            headers=headers,
            on_delivery=lambda err, msg: reports.append((err, msg)),
        )
    assert producer.flush(20) == 0
    assert [err for err, _ in reports if err is not None] == []
    return [msg for _, msg in reports]


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_every_codec_with_headers_and_nulls(kafkalite_server, codec):
    topic = f"codec-{codec}"
    items = [
        (b"k%d" % i if i % 3 else None, b"v%d" % i if i % 5 else None, [("h", b"x%d" % i), ("n", None)])
        for i in range(300)
    ]
    produce_all(confluent_producer(kafkalite_server, **{"compression.type": codec}), topic, items)
    got = confluent_read(kafkalite_server, topic, len(items))
    assert [(m.key(), m.value()) for m in got] == [(k, v) for k, v, _ in items]
    assert got[7].headers() == [("h", b"x7"), ("n", None)]
    assert [m.offset() for m in got] == list(range(len(items)))
    # Stored as sent: the batches on disk keep the producer's codec (attributes bits 0-2);
    # librdkafka sends a batch uncompressed when compressing would not shrink it.
    stored = batch_codecs(kafkalite_server, topic)
    assert CODECS.index(codec) in stored and stored <= {0, CODECS.index(codec)}


def batch_codecs(server: Server, topic: str) -> set[int]:
    with open(os.path.join(server.path, f"{topic}-0", "00000000000000000000.log"), "rb") as f:
        data = f.read()
    codecs, pos = set(), 0
    while pos + 23 <= len(data):
        length = struct.unpack(">i", data[pos + 8 : pos + 12])[0]
        codecs.add(struct.unpack(">h", data[pos + 21 : pos + 23])[0] & 0x7)
        pos += 12 + length
    return codecs


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd", None])
def test_kafka_python_roundtrip(kafkalite_server, codec):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"kp-{codec}"
    producer = KafkaProducer(
        bootstrap_servers=kafkalite_server.bootstrap_servers,
        compression_type=codec,
        acks="all",  # and idempotence, kafka-python 2.1+'s default: InitProducerId is served
    )
    futures = [
        producer.send(
            topic,
            value=b"v%d" % i if i % 4 else None,
            key=None if i % 2 else b"k",
            headers=[("h", b"%d" % i)],
        )
        for i in range(200)
    ]
    producer.flush()
    offsets = [f.get(timeout=10).offset for f in futures]
    assert offsets == list(range(200))
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=kafkalite_server.bootstrap_servers,
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = [m for _, m in zip(range(200), consumer, strict=False)]
    consumer.close()
    assert [(m.key, m.value) for m in got] == [
        (None if i % 2 else b"k", b"v%d" % i if i % 4 else None) for i in range(200)
    ]
    assert got[9].headers == [("h", b"9")]


def test_network_and_embedded_clients_share_the_data_directory_at_once(kafkalite_server):
    """confluent-kafka produces while the embedded Producer produces to another topic; the
    embedded Consumer reads the network's records and confluent-kafka reads the embedded ones."""
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("from-net", partitions=2)
    admin.create_topic("from-embedded", partitions=1)
    n = 2000

    def embedded_produce():
        with kafkalite.Producer(kafkalite_server.path) as p:
            for i in range(n):
                p.send("from-embedded", b"e%d" % i, partition=0)

    writer = threading.Thread(target=embedded_produce)
    writer.start()
    produce_all(
        confluent_producer(kafkalite_server), "from-net", [(b"k%d" % i, b"n%d" % i, None) for i in range(n)]
    )
    net = confluent_read(kafkalite_server, "from-embedded", n)
    writer.join()
    assert sorted(m.value() for m in net) == sorted(b"e%d" % i for i in range(n))
    consumer = kafkalite.Consumer(kafkalite_server.path, "from-net", auto_offset_reset="earliest")
    seen: list = []
    deadline = time.monotonic() + 20
    while len(seen) < n and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            seen.extend(r.value for r in records)
    consumer.close()
    assert sorted(seen) == sorted(b"n%d" % i for i in range(n))


def test_fetch_long_poll_is_woken_by_an_embedded_append(kafkalite_server):
    kafkalite.Admin(kafkalite_server.path).create_topic("wake", partitions=1)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafkalite_server.bootstrap_servers,
            "group.id": "unused",
            "fetch.wait.max.ms": 10_000,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition("wake", 0, 0)])
    consumer.poll(1.0)  # connected, a fetch is now parked on the server
    with kafkalite.Producer(kafkalite_server.path) as producer:
        sent = time.monotonic()
        producer.send("wake", b"now", partition=0)
    msg = None
    while msg is None and time.monotonic() - sent < 15:
        msg = consumer.poll(0.1)
    waited = time.monotonic() - sent
    consumer.close()
    assert msg is not None and msg.value() == b"now"
    assert waited < 3, f"the parked fetch answered after {waited:.1f} s, not when the record arrived"


def test_topics_created_over_the_network_are_kafkalite_topics(kafkalite_server):
    from confluent_kafka.admin import AdminClient, NewTopic

    client = AdminClient({"bootstrap.servers": kafkalite_server.bootstrap_servers})
    futures = client.create_topics([NewTopic("made", num_partitions=3, config={"retention.ms": "60000"})])
    futures["made"].result(10)
    info = kafkalite.Admin(kafkalite_server.path).describe_topic("made")
    assert len(info.partitions) == 3
    again = client.create_topics([NewTopic("made", num_partitions=1)])
    with pytest.raises(confluent_kafka.KafkaException, match="TOPIC_ALREADY_EXISTS|already exists"):
        again["made"].result(10)
    bad = client.create_topics([NewTopic("bad", num_partitions=1, config={"no.such.config": "1"})])
    with pytest.raises(confluent_kafka.KafkaException, match="no.such.config"):
        bad["bad"].result(10)
    listed = client.list_topics(timeout=10).topics
    assert set(listed) >= {"made"} and len(listed["made"].partitions) == 3


@pytest.mark.slow
def test_auto_creation_follows_the_server_setting(tmp_path):
    with Server(tmp_path / "d", auto_create_topics=False) as server:
        p = confluent_producer(server, **{"message.timeout.ms": 2000})
        errors: list = []
        p.produce("nope", b"x", on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        assert errors and errors[0] is not None
        assert not os.path.exists(tmp_path / "d" / "nope-0")


def test_list_offsets_earliest_latest_and_by_timestamp(kafkalite_server):
    p = confluent_producer(kafkalite_server)
    base = 1_700_000_000_000
    for i in range(10):
        p.produce("times", b"v", timestamp=base + i * 1000)
    p.flush(10)
    c = confluent_kafka.Consumer(
        {"bootstrap.servers": kafkalite_server.bootstrap_servers, "group.id": "unused"}
    )
    assert c.get_watermark_offsets(confluent_kafka.TopicPartition("times", 0), timeout=10) == (0, 10)
    found = c.offsets_for_times([confluent_kafka.TopicPartition("times", 0, base + 3500)], timeout=10)
    assert found[0].offset == 4
    beyond = c.offsets_for_times([confluent_kafka.TopicPartition("times", 0, base + 99_000)], timeout=10)
    assert beyond[0].offset in (-1, 10)  # librdkafka reports "end" as -1 (OFFSET_END)
    c.close()


@pytest.mark.slow
def test_restart_mid_stream_loses_nothing_acknowledged(tmp_path):
    data = tmp_path / "d"
    acked: list = []
    for round_ in range(3):
        with Server(data) as server:
            p = confluent_producer(server, acks="all")
            acked += [
                m.value()
                for m in produce_all(p, "restart", [(None, b"%d-%d" % (round_, i), None) for i in range(500)])
            ]
            p.produce("restart", b"unflushed")  # may or may not make it; never counted
    with Server(data) as server:
        got = confluent_read(server, "restart", None)  # up to the end, "unflushed" or not
    values = [m.value() for m in got]
    assert [v for v in values if v != b"unflushed"] == acked


def test_produce_errors_are_kafkas(kafkalite_server):
    kafkalite.Admin(kafkalite_server.path).create_topic(
        "small", partitions=1, config={"max.message.bytes": 1000}
    )
    p = confluent_producer(kafkalite_server, **{"message.timeout.ms": 5000, "batch.size": 100_000})
    errors: list = []
    p.produce("small", b"x" * 5000, on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors[0] is not None and errors[0].code() == confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE


def test_listening_beyond_loopback_needs_authentication(tmp_path):
    with pytest.raises(kafkalite.InvalidConfigError, match="SASL/SCRAM"):
        Server(tmp_path, "0.0.0.0:0")
    with pytest.raises(ValueError, match="HOST:PORT"):
        Server(tmp_path, "localhost")
    with pytest.raises(TypeError):
        Server(tmp_path, 9092)  # type: ignore[arg-type]


def test_hostile_connections_leave_other_clients_served(kafkalite_server):
    host, port = kafkalite_server.address.rsplit(":", 1)
    hostile = [
        struct.pack(">i", -1),
        struct.pack(">i", 200 * 1024 * 1024),
        struct.pack(">i", 8) + b"\x7f\x7f\x00\x00\x00\x00\x00\x01",
        struct.pack(">i", 16) + os.urandom(16),
        struct.pack(">i", 1000) + b"\x00\x00\x00\x09",  # truncated, then the client goes quiet
    ]
    socks = []
    for frame in hostile:
        s = socket.create_connection((host, int(port)))
        s.sendall(frame)
        socks.append(s)
    produce_all(confluent_producer(kafkalite_server), "calm", [(None, b"still served", None)])
    assert [m.value() for m in confluent_read(kafkalite_server, "calm", 1)] == [b"still served"]
    for s in socks[:4]:
        s.settimeout(5)
        assert s.recv(1) == b"", "a bad frame closes its connection"
    for s in socks:
        s.close()


def test_stop_is_bounded_with_clients_connected(tmp_path):
    server = Server(tmp_path)
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": server.bootstrap_servers, "group.id": "unused", "fetch.wait.max.ms": 30_000}
    )
    consumer.assign([confluent_kafka.TopicPartition("parked", 0, 0)])
    consumer.poll(1.0)
    began = time.monotonic()
    server.stop()
    server.stop()
    assert time.monotonic() - began < 6
    consumer.close()


def test_cli_serve_until_ctrl_c(tmp_path, spawn):
    proc, bootstrap = start_serve(spawn.module, tmp_path, "--log-level", "WARNING")
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    p.produce("cli", b"hello")
    assert p.flush(10) == 0
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0
    assert kafkalite.Admin(str(tmp_path)).describe_topic("cli").partitions[0].end_offset == 1


def test_cli_serve_refuses_a_public_address(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "kafkalite", "serve", "--data-dir", str(tmp_path), "--listen", "0.0.0.0:9092"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 1
    assert "SASL/SCRAM" in out.stderr


@pytest.mark.parametrize("group", ["net-group", "grüppe-✓-𝄞"])
def test_offsets_committed_over_the_network_are_the_embedded_ones(kafkalite_server, group):
    """OffsetCommit lands in __consumer_offsets as offsets.py writes it (same partition for
    the group, same key/value format): the embedded API and `kafkalite groups describe` see
    it, and an embedded commit is what OffsetFetch returns."""
    from kafkalite.groups.offsets import OffsetStore, offsets_partition

    kafkalite.Admin(kafkalite_server.path).create_topic("orders", partitions=2)
    produce_all(
        confluent_producer(kafkalite_server), "orders", [(b"k%d" % i, b"v%d" % i, None) for i in range(40)]
    )
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafkalite_server.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
        }
    )
    tps = [confluent_kafka.TopicPartition("orders", 0, 5), confluent_kafka.TopicPartition("orders", 1, 7)]
    consumer.commit(offsets=tps, asynchronous=False)
    with OffsetStore(kafkalite_server.path, group) as store:
        assert store.load() == {("orders", 0): (5, ""), ("orders", 1): (7, "")}
    assert os.path.isdir(
        os.path.join(kafkalite_server.path, f"__consumer_offsets-{offsets_partition(group)}")
    )
    description = kafkalite.Admin(kafkalite_server.path).describe_group(group)
    assert {(p.partition, p.committed) for p in description.partitions} == {(0, 5), (1, 7)}
    cli = subprocess.run(
        [sys.executable, "-m", "kafkalite", "groups", "describe", group, "--data-dir", kafkalite_server.path],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0 and "orders" in cli.stdout, cli.stderr
    # The embedded side commits; the network side reads it back.
    with OffsetStore(kafkalite_server.path, group) as store:
        store.commit({("orders", 0): (11, "from python")})
    committed = consumer.committed([confluent_kafka.TopicPartition("orders", 0)], timeout=10)
    assert committed[0].offset == 11
    consumer.close()
    # The metadata is read back with kafka-python: confluent-kafka copies it as a C string, so it
    # carries whatever heap bytes follow it up to a NUL (librdkafka issue 4649; CI saw
    # "from python<V)" once).
    assert committed_metadata(kafkalite_server, group, "orders", 0) == "from python"
    # An embedded consumer of the group resumes where the network consumer committed.
    embedded = kafkalite.Consumer(kafkalite_server.path, group_id=group, enable_auto_commit=False)
    embedded.assign([kafkalite.TopicPartition("orders", 1)])
    assert embedded.position(kafkalite.TopicPartition("orders", 1)) == 7
    embedded.close()


def committed_metadata(server, group: str, topic: str, partition: int) -> str:
    """The metadata OffsetFetch returns for ``group``'s commit of the partition, decoded by
    kafka-python (length-prefixed, as the protocol has it)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=server.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    try:
        return consumer.committed(KafkaTopicPartition(topic, partition), metadata=True).metadata
    finally:
        consumer.close()


def test_commits_without_a_group_membership_are_checked(kafkalite_server):
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafkalite_server.bootstrap_servers,
            "group.id": "g",
            "enable.auto.commit": False,
        }
    )
    with pytest.raises(confluent_kafka.KafkaException, match="UNKNOWN_TOPIC_OR_PART|Unknown topic"):
        consumer.commit(offsets=[confluent_kafka.TopicPartition("missing", 0, 1)], asynchronous=False)
    consumer.close()


def test_a_group_with_live_embedded_members_is_refused(kafkalite_server):
    kafkalite.Admin(kafkalite_server.path).create_topic("shared", partitions=2)
    embedded = kafkalite.Consumer(kafkalite_server.path, "shared", group_id="both")
    embedded.poll(timeout_ms=500)  # joined: holds its member lock
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafkalite_server.bootstrap_servers,
            "group.id": "both",
            "session.timeout.ms": 6000,
        }
    )
    errors: list = []
    consumer.subscribe(["shared"], on_assign=lambda c, parts: errors.append(("assigned", parts)))
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is not None:
            errors.append(msg.error())
    consumer.close()
    embedded.close()
    assert errors and not isinstance(errors[0], tuple), "the network consumer must not get partitions"
    assert errors[0].code() == confluent_kafka.KafkaError.INCONSISTENT_GROUP_PROTOCOL


def test_kafka_python_group_and_admin_views(kafkalite_server):
    """kafka-python subscribes through the coordinator; confluent-kafka's AdminClient lists
    and describes the group (ListGroups, DescribeGroups)."""
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer

    produce_all(
        confluent_producer(kafkalite_server), "kp-group", [(None, b"%d" % i, None) for i in range(30)]
    )
    consumer = KafkaConsumer(
        "kp-group",
        bootstrap_servers=kafkalite_server.bootstrap_servers,
        group_id="kp",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
    )
    got = [m.value for _, m in zip(range(30), consumer, strict=False)]
    assert sorted(got) == sorted(b"%d" % i for i in range(30))
    consumer.commit()
    admin = AdminClient({"bootstrap.servers": kafkalite_server.bootstrap_servers})
    listed = admin.list_consumer_groups().result(timeout=10)
    assert "kp" in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups(["kp"])["kp"].result(timeout=10)
    assert len(described.members) == 1 and str(described.state).endswith("STABLE")
    consumer.close()
    assert kafkalite.Admin(kafkalite_server.path).describe_group("kp").partitions[0].committed == 30


def test_serve_says_where_it_listens_once(tmp_path, spawn):
    """At the default log level (INFO) the terminal shows host:port in one line, not in the
    CLI's line and again in the server's own log line."""
    proc, bootstrap = start_serve(spawn.module, tmp_path)  # returns once the first line said it
    proc.terminate()
    rest = proc.communicate(timeout=30)[1]
    assert rest.count(bootstrap) == 0, rest  # the first line (already read) was the only one
    assert "server stopped" in rest
