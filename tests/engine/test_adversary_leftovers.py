"""The three holes session 5's adversary left open (tests/server/test_adversary_session5.py), attacked
through the embedded APIs only: a killed topic delete seen by an embedded client, a send
callback that writes (send_batch, or send filling a batch) or flushes under acks='all', and
destructive admin calls on ``__consumer_offsets``. Each test failed on the code before its fix
(a deadlock shows as a thread still alive after its timeout, never as a hung run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import kafkalite
import pytest
from kafkalite.groups.offsets import OFFSETS_TOPIC

#: How long a call that must not deadlock gets before the test calls it hung.
PATIENCE = 10.0


def values(path: Path) -> list[bytes]:
    with kafkalite.Log(path, readonly=True) as log:
        return [r.value for r in log.records()]


# -- 1. an interrupted topic delete, finished by whichever embedded client opens first ---------

OPENERS: dict[str, Callable[[Path], object]] = {
    "Admin": lambda data: kafkalite.Admin(data),
    "Producer": lambda data: kafkalite.Producer(data).close(),
    "Consumer": lambda data: kafkalite.Consumer(data).close(),
}


def listed_on_disk(data: Path) -> dict:
    """The topics the metadata files list, read afresh (snapshot and journal, no cache)."""
    _, kind, metadata = kafkalite._native.metadata_changes(str(data), None)
    assert kind == "whole" and metadata is not None
    return json.loads(metadata)["topics"]


def kill_a_delete(data: Path, topic: str) -> None:
    """Run ``Admin.delete_topic`` in a child killed (-9) between the folder renames and the
    metadata write (the journal entry that unlists the topic)."""
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "topics.journal.append=kill"}
    code = f"import kafkalite; kafkalite.Admin({str(data)!r}).delete_topic({topic!r})"
    killed = subprocess.run([sys.executable, "-c", code], env=env, timeout=60)
    assert killed.returncode == -9
    assert any(name.endswith("-delete") for name in os.listdir(data)), "the kill came before the renames"
    assert topic in listed_on_disk(data), "the kill came after the metadata write"


@pytest.mark.parametrize("opener", sorted(OPENERS))
def test_a_killed_delete_is_finished_by_the_first_embedded_client(tmp_path, opener):
    """Only the server's start finished a delete killed after its renames: an embedded-only
    user saw the topic listed with its data gone (empty partitions, offsets reused, sends into
    fresh folders) and the renamed folders were never removed. Now opening the data directory
    (Admin, Producer, Consumer: the engine's ``DataDir::open``, which the server's start uses
    too) finishes it: the topic is gone, folders and metadata, and one created again under the
    same name holds only its own records."""
    data = tmp_path / "data"
    kafkalite.Admin(data).create_topic("t", partitions=3)
    with kafkalite.Producer(data) as producer:
        for i in range(30):
            producer.send("t", b"old%d" % i, partition=i % 3)
    kill_a_delete(data, "t")

    OPENERS[opener](data)

    assert not [name for name in os.listdir(data) if name.startswith("t-")]
    assert "t" not in listed_on_disk(data)
    admin = kafkalite.Admin(data)
    assert admin.list_topics() == []
    admin.create_topic("t", partitions=3)
    with kafkalite.Producer(data) as producer:
        for i in range(3):
            producer.send("t", b"new%d" % i, partition=i)
    assert [values(data / f"t-{p}") for p in range(3)] == [[b"new0"], [b"new1"], [b"new2"]]


def test_a_delete_that_cannot_be_finished_is_logged_and_reading_goes_on(tmp_path, caplog):
    """When the delete cannot be finished (here the admin lock cannot be opened: a directory
    planted in its place), the opener says so in the log (kafkalite.admin) and goes on; the
    next opener that can finishes it."""
    data = tmp_path / "data"
    kafkalite.Admin(data).create_topic("t")
    kafkalite.Admin(data).create_topic("kept")
    with kafkalite.Producer(data) as producer:
        producer.send("kept", b"v")
    kill_a_delete(data, "t")
    lock = data / ".kafkalite-admin.lock"
    lock.unlink()
    lock.mkdir()
    tp = kafkalite.TopicPartition("kept", 0)
    with caplog.at_level("WARNING", logger="kafkalite"):
        with kafkalite.Consumer(data, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            assert [r.value for r in consumer.poll(timeout_ms=1000)[tp]] == [b"v"]
    assert "cannot finish an interrupted topic delete" in caplog.text
    lock.rmdir()
    assert kafkalite.Admin(data).list_topics() == ["kept"]
    assert not [name for name in os.listdir(data) if name.startswith("t-")]


# -- 2. blocking calls inside a send callback ---------------------------------------------------


def run_in_callback(
    producer: kafkalite.Producer,
    first: kafkalite.FutureRecordMetadata,
    call: Callable,
    drain: Callable[[], object] = lambda: None,
) -> object:
    """Run ``call()`` in ``first``'s callback; its result or exception, or fail when it hung.
    ``drain`` starts what completes ``first``, called only once the callback is registered: a
    future already done runs its callback at once in the caller's thread, which is not the case
    under test (a callback added after another thread's flush completed it passed by chance)."""
    outcome: list[object] = []
    done = threading.Event()
    caller = threading.get_ident()

    def callback(_metadata: object) -> None:
        try:
            if threading.get_ident() == caller:
                raise AssertionError("the callback ran in the caller's thread: the drain came first")
            outcome.append(call())
        except BaseException as e:
            outcome.append(e)
        done.set()

    first.add_callback(callback)
    drain()
    assert done.wait(PATIENCE), "the call inside the callback never returned (deadlock)"
    return outcome[0]


# Who drains the first record: the sender thread once its linger ends (long enough for the
# callback to be registered first), or another thread's flush() (no linger end before it).
LINGER_MS = {"sender thread": 200, "caller's flush": 60_000}


def drainer_of(producer: kafkalite.Producer, drainer: str) -> Callable[[], object]:
    """What ``run_in_callback`` starts once the callback is registered."""
    if drainer == "caller's flush":
        return threading.Thread(target=producer.flush, daemon=True).start
    return lambda: None


@pytest.mark.parametrize("drainer", ["sender thread", "caller's flush"])
def test_send_batch_inside_a_callback_is_refused_not_a_deadlock(tmp_path, drainer):
    """send_batch() appends synchronously under the partition's drain lock, which the thread
    running the callback already holds: it waited for itself forever (and the sender thread
    with it). It is refused now, as flush() and close() are, naming what to use instead."""
    kafkalite.Admin(tmp_path).create_topic("t")
    producer = kafkalite.Producer(tmp_path, linger_ms=LINGER_MS[drainer])
    first = producer.send("t", b"first")
    error = run_in_callback(
        producer, first, lambda: producer.send_batch("t", [b"batch"]), drainer_of(producer, drainer)
    )
    assert isinstance(error, kafkalite.IllegalStateError) and isinstance(error, RuntimeError), error
    assert "callback" in str(error) and "use send()" in str(error)
    producer.send_batch("t", [b"after"])  # from the caller's thread: allowed
    producer.close(timeout=PATIENCE)
    assert values(tmp_path / "t-0") == [b"first", b"after"]


@pytest.mark.parametrize("drainer", ["sender thread", "caller's flush"])
def test_send_filling_a_batch_inside_a_callback_does_not_deadlock(tmp_path, drainer):
    """send() from a callback is allowed (as in Kafka), but a record that filled its batch was
    appended at once under the partition's drain lock, which the callback's thread holds: a
    deadlock. Now the full batches go to the sender thread, and every record is written in
    send order."""
    kafkalite.Admin(tmp_path).create_topic("t")
    producer = kafkalite.Producer(tmp_path, batch_size=200, linger_ms=LINGER_MS[drainer])
    first = producer.send("t", b"first")
    sent = [b"r%02d" % i + b"x" * 60 for i in range(20)]  # several batches of 200 bytes
    futures = run_in_callback(
        producer, first, lambda: [producer.send("t", v) for v in sent], drainer_of(producer, drainer)
    )
    assert isinstance(futures, list), futures
    for future in futures:
        future.get(timeout=PATIENCE)
    producer.close(timeout=PATIENCE)
    assert values(tmp_path / "t-0") == [b"first", *sent]


def test_callbacks_of_two_partitions_sending_to_each_other_do_not_deadlock(tmp_path):
    """Two threads each fill a batch of their own partition, so each drains it and runs its
    callback holding its drain lock; each callback fills a batch of the other partition. With
    that drain done inline, each waited for the lock the other held."""
    kafkalite.Admin(tmp_path).create_topic("t", partitions=2)
    producer = kafkalite.Producer(tmp_path, batch_size=100, linger_ms=60_000)
    both = threading.Barrier(2)

    def callback_to(other: int) -> Callable[[object], None]:
        def callback(_metadata: object) -> None:
            both.wait(PATIENCE)  # both threads hold their own partition's drain lock now
            producer.send("t", b"y" * 200, partition=other)

        return callback

    for p in (0, 1):
        producer.send("t", b"x", partition=p).add_callback(callback_to(1 - p))
    fillers = [
        threading.Thread(target=producer.send, args=("t", b"z" * 200), kwargs={"partition": p}, daemon=True)
        for p in (0, 1)
    ]
    for thread in fillers:
        thread.start()
    for thread in fillers:
        thread.join(PATIENCE)
    assert not any(thread.is_alive() for thread in fillers), "the two callbacks deadlocked"
    producer.close(timeout=PATIENCE)
    for p in (0, 1):
        written = values(tmp_path / f"t-{p}")
        assert written[0] == b"x" and sorted(written[1:]) == [b"y" * 200, b"z" * 200], written


@pytest.mark.parametrize("call", ["flush", "close"])
def test_flush_or_close_in_an_acks_all_callback_is_refused_not_a_deadlock(tmp_path, call):
    """Under acks='all' the callbacks run in the acknowledging thread, which flush() and
    close() wait for: flush() there waited for itself forever (only the drain's callbacks were
    refused). Refused the same way now; the producer goes on."""
    kafkalite.Admin(tmp_path).create_topic("t")
    producer = kafkalite.Producer(tmp_path, acks="all")
    error = run_in_callback(
        producer, producer.send("t", b"first"), lambda: getattr(producer, call)(timeout=None)
    )
    assert isinstance(error, kafkalite.IllegalStateError), error
    assert "callback" in str(error)
    producer.send("t", b"second").get(timeout=PATIENCE)
    producer.close(timeout=PATIENCE)
    assert values(tmp_path / "t-0") == [b"first", b"second"]


# -- 3. destructive admin calls on __consumer_offsets ------------------------------------------


def committed_offsets_dir(tmp_path: Path) -> tuple[Path, kafkalite.TopicPartition]:
    """A data directory whose group ``g`` committed offset 1 of ``t``-0 (in __consumer_offsets)."""
    data = tmp_path / "data"
    kafkalite.Admin(data).create_topic("t")
    with kafkalite.Producer(data) as producer:
        producer.send("t", b"a")
        producer.send("t", b"b")
    tp = kafkalite.TopicPartition("t", 0)
    with kafkalite.Consumer(data, group_id="g") as consumer:
        consumer.assign([tp])
        consumer.commit({tp: kafkalite.OffsetAndMetadata(1, "")})
    return data, tp


def committed(data: Path, tp: kafkalite.TopicPartition) -> int | None:
    with kafkalite.Consumer(data, group_id="g") as consumer:
        return consumer.committed(tp)


@pytest.mark.parametrize("policy", [None, "delete"])
def test_embedded_delete_records_of_consumer_offsets_is_refused(tmp_path, policy):
    """The server refuses DeleteRecords on __consumer_offsets (INVALID_TOPIC_EXCEPTION, the
    engine's ``refuse_internal``); embedded ``Admin.delete_records`` wiped every group's
    committed offsets, compacted or not. Now it raises InvalidTopicError (a ValueError) saying
    why and what to use, before applying anything of the call."""
    data, tp = committed_offsets_dir(tmp_path)
    admin = kafkalite.Admin(data)
    if policy is not None:
        admin.alter_config(OFFSETS_TOPIC, {"cleanup.policy": policy})  # allowed, as in Kafka
    partitions = admin.describe_topic(OFFSETS_TOPIC).partitions
    for p in partitions:
        with pytest.raises(kafkalite.InvalidTopicError) as refused:
            admin.delete_records({("t", 0): 1, (OFFSETS_TOPIC, p.partition): -1})
        assert isinstance(refused.value, ValueError)
        assert "internal topic" in str(refused.value) and "delete_group" in str(refused.value)
    assert committed(data, tp) == 1
    assert admin.describe_topic("t").partitions[0].start_offset == 0, "part of the refused call was applied"


def test_embedded_delete_topic_of_consumer_offsets_is_refused(tmp_path):
    """The server refuses DeleteTopics of __consumer_offsets; embedded ``Admin.delete_topic``
    deleted it with every group's offsets. The engine's ``DataDir::delete_topic`` refuses it
    now, for both."""
    data, tp = committed_offsets_dir(tmp_path)
    with pytest.raises(kafkalite.InvalidTopicError, match="internal topic"):
        kafkalite.Admin(data).delete_topic(OFFSETS_TOPIC)
    assert OFFSETS_TOPIC in kafkalite.Admin(data).list_topics()
    assert committed(data, tp) == 1


def test_the_server_refuses_deleting_consumer_offsets_with_the_engine_s_rule(tmp_path):
    """DeleteTopics over the network goes through the same rule (``refuse_internal``):
    INVALID_TOPIC_EXCEPTION with its message, and the offsets stay."""
    pytest.importorskip("kafka")
    from kafka import KafkaAdminClient
    from kafka.errors import InvalidTopicError
    from kafkalite.server import Server

    data, tp = committed_offsets_dir(tmp_path)
    with Server(data) as server:
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        try:
            with pytest.raises(InvalidTopicError, match="internal topic"):
                admin.delete_topics([OFFSETS_TOPIC])
        finally:
            admin.close()
    assert committed(data, tp) == 1
