"""Adversary findings on session 5's changes (issues 13 and 14): the admin APIs, idempotent
produce and SASL of ``kafkalite serve``, and the native send path. Each test attacks as a hostile
client or a crash would and failed on the code before its fix."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import kafkalite
import pytest
from kafkalite.server import Server

kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient, KafkaConsumer, OffsetAndMetadata, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType  # noqa: E402
from kafka.errors import InvalidTopicError  # noqa: E402

OFFSETS_PARTITIONS = 50


def committed(server: Server, group: str, tp: TopicPartition) -> int | None:
    consumer = KafkaConsumer(
        bootstrap_servers=server.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    try:
        return consumer.committed(tp)
    finally:
        consumer.close()


def test_delete_records_of_consumer_offsets_is_refused_whatever_its_policy(tmp_path):
    """Kafka refuses DeleteRecords on an internal topic (INVALID_TOPIC_EXCEPTION). kafkalite only
    refused it while ``__consumer_offsets`` was compacted: a client that first set its
    cleanup.policy to ``delete`` (AlterConfigs is allowed, as in Kafka) then wiped every group's
    committed offsets with DeleteRecords."""
    data = tmp_path / "data"
    tp = TopicPartition("t", 0)
    with Server(data) as server:
        kafkalite.Admin(server.path).create_topic("t")
        consumer = KafkaConsumer(
            bootstrap_servers=server.bootstrap_servers, group_id="g", enable_auto_commit=False
        )
        consumer.commit({tp: OffsetAndMetadata(3, "", -1)})
        consumer.close()
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        try:
            admin.alter_configs(
                [
                    ConfigResource(
                        ConfigResourceType.TOPIC, "__consumer_offsets", configs={"cleanup.policy": "delete"}
                    )
                ]
            )
            for partition in range(OFFSETS_PARTITIONS):
                with pytest.raises(InvalidTopicError):
                    admin.delete_records({TopicPartition("__consumer_offsets", partition): -1})
        finally:
            admin.close()
        assert committed(server, "g", tp) == 3
    with Server(data) as server:
        assert committed(server, "g", tp) == 3


def network_values(server: Server, topic: str, want: int, timeout: float = 10.0) -> list[bytes]:
    """The values a kafka-python consumer reads from the start of ``topic``-0: stops at ``want``
    records or after ``timeout`` seconds (to show extra records, not only missing ones)."""
    consumer = KafkaConsumer(
        bootstrap_servers=server.bootstrap_servers, enable_auto_commit=False, consumer_timeout_ms=1500
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(values) < want and time.monotonic() < deadline:
            values.extend(r.value for r in consumer)
        return values
    finally:
        consumer.close()


def test_a_topic_deleted_and_created_again_embedded_is_not_served_stale(tmp_path):
    """``Admin.delete_topic`` then ``create_topic`` in this (embedded) process while the server
    has the partition open: the server kept reading the deleted folder's open segments and
    served the deleted records to every new consumer (until a produce over the network reopened
    the partition). Now the follower notices the folder is a new one and the server reopens."""
    with Server(tmp_path / "data") as server:
        admin = kafkalite.Admin(server.path)
        admin.create_topic("t")
        with kafkalite.Producer(server.path) as producer:
            for i in range(10):
                producer.send("t", b"old%d" % i)
        assert network_values(server, "t", 10) == [b"old%d" % i for i in range(10)]
        admin.delete_topic("t")
        admin.create_topic("t")
        with kafkalite.Producer(server.path) as producer:
            for i in range(3):
                producer.send("t", b"new%d" % i)
        assert network_values(server, "t", 3) == [b"new0", b"new1", b"new2"]


def test_a_delete_killed_before_the_metadata_write_is_finished_at_the_next_start(tmp_path):
    """kill -9 of a topic delete (the engine's ``DataDir::delete_topic``, what DeleteTopics and
    ``Admin.delete_topic`` run) after its partition folders were renamed to ``-delete`` but
    before the metadata was written: the topic stayed listed with its data gone (reads as
    empty, offsets reused) and the renamed folders were never removed. Now the server's start
    finishes the delete, as Kafka's log manager does: the topic is gone, so are the folders."""
    data = tmp_path / "data"
    admin = kafkalite.Admin(data)
    admin.create_topic("t", partitions=3)
    with kafkalite.Producer(data) as producer:
        for i in range(30):
            producer.send("t", b"v%d" % i, partition=i % 3)
    # A delete's metadata write is one journal entry (`datadir/journal.rs`).
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "topics.journal.append=kill"}
    killed = subprocess.run(
        [sys.executable, "-c", f"import kafkalite; kafkalite.Admin({str(data)!r}).delete_topic('t')"],
        env=env,
        timeout=60,
    )
    assert killed.returncode == -9
    assert any(name.endswith("-delete") for name in os.listdir(data)), "the kill came before the renames"
    with Server(data) as server:
        assert kafkalite.Admin(server.path).list_topics() == []
    assert not [name for name in os.listdir(data) if name.startswith("t-")]


@pytest.mark.parametrize("call", ["flush", "close"])
@pytest.mark.parametrize("drainer", ["sender thread", "caller's flush"])
def test_flush_or_close_inside_a_callback_is_refused_not_a_deadlock(tmp_path, call, drainer):
    """A future's callback runs while its partition is being written (holding its drain lock),
    in the sender thread or in the thread whose flush() drains. flush() or close() from the
    callback waited for that drain forever: the sender thread hung, every later record stayed
    unwritten. Kafka's Java producer refuses flush() in a callback; kafkalite raises
    IllegalStateError (a KafkaliteError and RuntimeError) for both, and the producer goes on."""
    admin = kafkalite.Admin(tmp_path)
    admin.create_topic("t")
    producer = kafkalite.Producer(tmp_path, linger_ms=0 if drainer == "sender thread" else 60_000)
    outcome: list[BaseException | None] = []

    def callback(_metadata: object) -> None:
        try:
            getattr(producer, call)(timeout=None)
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    producer.send("t", b"first").add_callback(callback)
    if drainer == "caller's flush":
        # In a thread of its own: before the fix this flush never returned.
        threading.Thread(target=producer.flush, daemon=True).start()
    deadline = time.monotonic() + 10
    while not outcome and time.monotonic() < deadline:
        time.sleep(0.01)
    assert outcome, f"{call}() inside the callback never returned (deadlock)"
    (error,) = outcome
    assert isinstance(error, kafkalite.IllegalStateError) and isinstance(error, RuntimeError), error
    assert "callback" in str(error)
    second = producer.send("t", b"second")
    producer.flush(timeout=10)
    second.get(timeout=10)
    producer.close(timeout=10)
    with kafkalite.Log(tmp_path / "t-0", readonly=True) as log:
        assert [r.value for r in log.records()] == [b"first", b"second"]
