"""Issue 9 point 10 (adversary finding 3): an open Producer lets go of the logs it no longer
needs, as Kafka's producer forgets topics at metadata refresh: those of deleted topics every
``metadata_max_age_ms`` (and whenever it opens a partition), those idle for
``metadata_max_idle_ms`` (reopened on next use). No queued record is lost on the way."""

from __future__ import annotations

import os
import threading
import time

import pytest
from kafkalite import Admin, KafkaliteError, Producer
from kafkalite.errors import InvalidConfigError, UnknownTopicOrPartitionError


def _open_files_under(data_dir: str) -> int:
    """This process's descriptors of files in the data directory (deleted ones included)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(data_dir + os.sep) and os.path.basename(target.split(" ")[0]) != ".notify":
            count += 1
    return count


def _partition_files(data_dir: str, partition_dir: str) -> int:
    prefix = os.path.join(data_dir, partition_dir)
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(prefix):
                n += 1
        except OSError:
            pass
    return n


def _wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_the_sender_closes_a_deleted_topics_log_at_metadata_refresh(tmp_path):
    data_dir = str(tmp_path / "d")
    admin = Admin(data_dir)
    admin.create_topic("t1")
    with Producer(data_dir, metadata_max_age_ms=100) as producer:
        producer.send("t1", b"x").get(timeout=30)
        assert _partition_files(data_dir, "t1-0") > 0
        admin.delete_topic("t1")  # no later send: only the sender thread's refresh can notice
        assert _wait_for(lambda: _partition_files(data_dir, "t1-") == 0, 10)
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send("t1", b"y").get(timeout=30)


def test_an_idle_partitions_log_is_closed_and_reopened_on_next_use(tmp_path):
    data_dir = str(tmp_path / "d")
    admin = Admin(data_dir)
    admin.create_topic("idle")
    admin.create_topic("busy")
    with Producer(data_dir, metadata_max_age_ms=100, metadata_max_idle_ms=5000) as producer:
        producer.send("idle", b"0").get(timeout=30)
        assert _partition_files(data_dir, "idle-0") > 0
        # "busy" is written all along: only "idle" passes metadata_max_idle_ms.
        deadline = time.monotonic() + 20
        while _partition_files(data_dir, "idle-0") and time.monotonic() < deadline:
            producer.send("busy", b"b").get(timeout=30)
            time.sleep(0.1)
        assert _partition_files(data_dir, "idle-0") == 0
        assert _partition_files(data_dir, "busy-0") > 0
        assert producer.send("idle", b"1").get(timeout=30).offset == 1  # reopened, nothing lost
        assert _partition_files(data_dir, "idle-0") > 0


def test_metadata_max_idle_ms_has_kafkas_minimum(tmp_path):
    with pytest.raises(InvalidConfigError, match="metadata_max_idle_ms"):
        Producer(str(tmp_path / "d"), metadata_max_idle_ms=100)


def test_sends_racing_a_delete_either_succeed_or_fail_typed(tmp_path):
    """Senders keep writing while the topic is deleted and the sender thread refreshes
    metadata every few ms: every future completes, acknowledged or typed; none is left hanging."""
    data_dir = str(tmp_path / "d")
    admin = Admin(data_dir)
    for round_ in range(5):
        topic = f"t{round_}"
        admin.create_topic(topic, partitions=2)
        with Producer(data_dir, metadata_max_age_ms=1, linger_ms=1) as producer:
            futures = []
            stop = threading.Event()

            def send(producer=producer, topic=topic, futures=futures, stop=stop) -> None:
                i = 0
                while not stop.is_set():
                    try:
                        futures.append(producer.send(topic, str(i).encode(), partition=i % 2))
                    except KafkaliteError:
                        pass  # refused up front (typed) is fine too
                    i += 1

            senders = [threading.Thread(target=send) for _ in range(2)]
            for s in senders:
                s.start()
            time.sleep(0.05)
            admin.delete_topic(topic)
            time.sleep(0.05)
            stop.set()
            for s in senders:
                s.join()
            producer.flush(timeout=30)
            acked = failed = 0
            for f in futures:
                try:
                    f.get(timeout=30)
                    acked += 1
                except UnknownTopicOrPartitionError:
                    failed += 1
            assert acked + failed == len(futures) and acked > 0 and failed > 0
        assert _open_files_under(data_dir) == 0
