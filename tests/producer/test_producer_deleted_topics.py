"""Issue 9 point 9: after delete_topic (and re-creation) an open producer must not acknowledge
writes into the deleted files: Kafka answers UNKNOWN_TOPIC_OR_PARTITION, and a re-created
topic gets fresh partitions."""

from __future__ import annotations

import fcntl
import os
import threading
import time
import uuid

import kafkalite
import pytest
from kafkalite import Admin, Consumer, Log, Producer
from kafkalite.errors import UnknownTopicError, UnknownTopicOrPartitionError


def _values(data_dir: str, topic: str, partition: int = 0) -> list[bytes]:
    with Log(os.path.join(data_dir, f"{topic}-{partition}"), readonly=True) as log:
        return [r.value for r in log.records()]


def test_a_send_into_a_deleted_topic_fails_typed(tmp_path):
    data_dir = str(tmp_path / "data")
    admin = Admin(data_dir)
    admin.create_topic("t")
    with Producer(data_dir) as p:
        p.send("t", b"before").get(timeout=10)
        admin.delete_topic("t")
        with pytest.raises(UnknownTopicOrPartitionError) as info:
            p.send("t", b"after").get(timeout=10)
        assert isinstance(info.value, UnknownTopicError) and isinstance(info.value, kafkalite.KafkaliteError)
        assert kafkalite.UnknownTopicOrPartitionError is UnknownTopicOrPartitionError
    assert not os.path.exists(os.path.join(data_dir, "t-0"))  # nothing re-created the folder


def test_a_recreated_topic_gets_the_new_records_in_fresh_partitions(tmp_path):
    data_dir = str(tmp_path / "data")
    admin = Admin(data_dir)
    admin.create_topic("t", partitions=2)
    with Producer(data_dir) as p:
        for i in range(2):
            p.send("t", b"old-%d" % i, partition=i).get(timeout=10)
        admin.delete_topic("t")
        admin.create_topic("t", partitions=3)
        got = [p.send("t", b"new-%d" % i, partition=i).get(timeout=10) for i in range(3)]
    assert [(m.partition, m.offset) for m in got] == [(0, 0), (1, 0), (2, 0)]
    for i in range(3):
        assert _values(data_dir, "t", i) == [b"new-%d" % i]
    with Consumer(data_dir, "t", auto_offset_reset="earliest") as c:
        records = [r for rs in c.poll(timeout_ms=2000, max_records=100).values() for r in rs]
    assert sorted(r.value for r in records) == [b"new-0", b"new-1", b"new-2"]


def test_records_queued_for_partitions_a_recreated_topic_lacks_fail_typed_not_hang(tmp_path):
    # Queued (linger) records for partitions 1..3; the topic comes back with one partition. The
    # first append notices, re-reads the topic, and every queued record fails typed: none waits forever.
    data_dir = str(tmp_path / "data")
    admin = Admin(data_dir)
    admin.create_topic("t", partitions=4)
    with Producer(data_dir, linger_ms=60_000) as p:
        p.send("t", b"opened", partition=0)
        p.flush(timeout=10)  # the producer opened partition 0 of the first topic
        queued = [p.send("t", b"q-%d" % n, partition=n) for n in range(4)]
        admin.delete_topic("t")
        admin.create_topic("t", partitions=1)
        p.flush(timeout=10)
        for n, f in enumerate(queued[1:], 1):
            with pytest.raises(UnknownTopicOrPartitionError, match=f"no partition {n}"):
                f.get(timeout=10)
        assert queued[0].get(timeout=10).offset == 0  # partition 0 exists again: written there
    assert _values(data_dir, "t") == [b"q-0"]


def test_a_delete_racing_an_append_never_acknowledges_it_into_the_deleted_folder(tmp_path):
    """The append waits on the partition's append lock (held here, as delete_topic holds it
    around its rename); the folder is renamed meanwhile: the append must fail, typed."""
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    part = os.path.join(data_dir, "t-0")
    with Producer(data_dir) as p:
        p.send("t", b"first").get(timeout=10)  # the partition is open
        with open(os.path.join(part, ".kafkalite.lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            future = p.send("t", b"racing")
            time.sleep(0.5)  # the sender passed its own checks and waits on the append lock
            assert not future.is_done
            doomed = f"{part}.{uuid.uuid4().hex}-delete"
            os.rename(part, doomed)
            os.makedirs(part)  # re-created meanwhile
            fcntl.flock(lock, fcntl.LOCK_UN)
        with pytest.raises(UnknownTopicOrPartitionError):
            future.get(timeout=10)
    with Log(doomed, readonly=True, any_folder=True) as log:  # a deleted folder's name
        assert [r.value for r in log.records()] == [b"first"]


def test_delete_topic_while_producers_write_acknowledges_nothing_into_deleted_files(tmp_path):
    """Many sends race one delete + re-create: every record acknowledged after delete_topic
    returned is in the new topic at its acknowledged offset."""
    data_dir = str(tmp_path / "data")
    admin = Admin(data_dir)
    admin.create_topic("t")
    acked: list[tuple[int, bytes, int]] = []  # (ack time, value, offset)
    stop = threading.Event()

    def produce():
        with Producer(data_dir) as p:
            i = 0
            while not stop.is_set():
                value = b"v%d" % i
                i += 1
                try:
                    meta = p.send("t", value).get(timeout=10)
                except UnknownTopicOrPartitionError:
                    continue
                acked.append((time.monotonic_ns(), value, meta.offset))

    thread = threading.Thread(target=produce)
    thread.start()
    time.sleep(0.3)
    admin.delete_topic("t")
    admin.create_topic("t")
    deleted_at = time.monotonic_ns()
    time.sleep(0.3)
    stop.set()
    thread.join(30)
    after = [(v, o) for t, v, o in acked if t > deleted_at]
    assert after, "nothing was acknowledged after the re-creation"
    values = _values(data_dir, "t")
    for value, offset in after:
        assert values[offset] == value
