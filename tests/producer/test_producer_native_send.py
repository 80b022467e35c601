"""Issue 14 target 1: ``Producer.send`` is a native method (``ProducerCore.send``) that queues
the common record without a Python frame. These pin what it must hand to the Python rules: a
closed producer, a dead sender thread, serializers, a custom partitioner, and that the records
it queues are the ones written, in order, with their futures."""

from __future__ import annotations

import json
import os
import threading
import time

import kafkalite
import pytest
from helpers import child_env, run_python_ok
from kafkalite import Admin, Consumer, Producer
from kafkalite import producer as producer_module


def _records(data_dir: str, topic: str) -> list:
    with Consumer(data_dir, topic, auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
        return list(c)


def test_a_closed_producer_refuses_a_known_topic_at_once(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    p = Producer(data_dir)
    p.send("t", b"before", key=b"k").get(timeout=10)  # "t" is known: send takes the native path
    p.close()
    with pytest.raises(kafkalite.IllegalStateError, match="closed"):
        p.send("t", b"after", key=b"k")
    assert [r.value for r in _records(data_dir, "t")] == [b"before"]


def test_a_dead_sender_makes_later_sends_to_a_known_topic_fail_at_once(tmp_path, monkeypatch):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    die = threading.Event()
    loop = producer_module._Sender.loop

    def dying_loop(self):
        die.wait(30)
        raise AssertionError("injected: a bug in the sender loop")

    monkeypatch.setattr(producer_module._Sender, "loop", dying_loop)
    p = Producer(data_dir)
    assert p.partitions_for("t") == {0}  # the topic is known: send takes the native path
    die.set()
    p._sender.thread.join(10)
    assert not p._sender.thread.is_alive()
    started = time.monotonic()
    with pytest.raises(kafkalite.IllegalStateError, match="sender thread stopped"):
        p.send("t", b"v", key=b"k")
    assert time.monotonic() - started < 1.0
    monkeypatch.setattr(producer_module._Sender, "loop", loop)
    p.close(timeout=5)


def test_serializers_and_a_custom_partitioner_see_every_record_of_a_known_topic(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", partitions=3)
    seen = []

    def partitioner(key, all_partitions, available):
        seen.append(key)
        return 2

    with Producer(
        data_dir, key_serializer=str.encode, value_serializer=str.encode, partitioner=partitioner
    ) as p:
        futures = [p.send("t", f"v{i}", key=f"k{i}") for i in range(300)]
    assert seen == [f"k{i}".encode() for i in range(300)]
    assert {f.get(timeout=10).partition for f in futures} == {2}
    records = _records(data_dir, "t")
    assert [(r.key, r.value) for r in records] == [(f"k{i}".encode(), f"v{i}".encode()) for i in range(300)]


def test_records_queued_natively_are_written_in_order_with_their_futures(tmp_path):
    # 20,000 keyed and keyless records (many full batches, drained by the caller and by the
    # sender thread) through the native path; every future names the record's place.
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", partitions=4)
    with Producer(data_dir) as p:
        send = p.send
        futures = [
            (i, send("t", b"v%d" % i, key=None if i % 3 == 0 else b"k%d" % (i % 50))) for i in range(20_000)
        ]
    by_place = {(r.partition, r.offset): r for r in _records(data_dir, "t")}
    assert len(by_place) == 20_000
    for i, f in futures:
        m = f.get(timeout=0)
        r = by_place[(m.partition, m.offset)]
        assert r.value == b"v%d" % i and r.key == (None if i % 3 == 0 else b"k%d" % (i % 50))
    for partition in range(4):  # each partition holds its records in send order
        values = [int(r.value[1:]) for (n, _), r in sorted(by_place.items()) if n == partition]
        assert values == sorted(values)


def test_send_keeps_kafka_pythons_signature(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    with Producer(data_dir) as p:
        first = p.send("t", b"v", b"k", [("h", b"1")], 0, 5)  # positional, in kafka-python's order
        second = p.send(topic="t", value=b"w", key=None, headers=None, partition=None, timestamp_ms=None)
        assert first.get(timeout=10).timestamp == 5 and second.get(timeout=10).offset == 1
    with pytest.raises(TypeError):
        p.send("t", b"v", bogus=1)


CLOSE_WITH_A_FAILING_PARTITION = r"""
import json, os, sys
from kafkalite import Admin, Producer
data = sys.argv[1]
Admin(data).create_topic("t", partitions=4)
p = Producer(data)
for n in range(4):
    p.send("t", b"v%d" % n, partition=n)
p.flush()
try:
    p.close()
    error = None
except Exception as e:
    error = {"type": type(e).__name__, "message": str(e)}
# Seen before this process exits (dropping a log at exit would close it anyway).
markers = [os.path.exists(os.path.join(data, f"t-{n}", ".kafkalite-clean-shutdown")) for n in range(4)]
print(json.dumps({"error": error, "markers": markers}))
"""


def test_close_closes_every_partition_even_when_one_fails_and_raises_that_failure(tmp_path):
    """close() closes the partition logs several at once; one close's clean-shutdown
    step fails (fail point, ENOSPC): close() raises that failure, typed, and every other
    partition still got its clean shutdown (its marker), the failed one not."""
    data_dir = str(tmp_path / "data")
    env = child_env({**os.environ, "KAFKALITE_FAILPOINTS": "shutdown.before_marker=enospc@2"})
    done = run_python_ok(CLOSE_WITH_A_FAILING_PARTITION, data_dir, env=env, timeout=60)
    result = json.loads(done.stdout)
    error = result["error"]
    assert error is not None and "No space left" in error["message"], result
    assert sorted(result["markers"]) == [False, True, True, True], result
    for n in range(4):  # every record is there for the next open (the unclean one recovers)
        assert [r.value for r in _records_of(data_dir, n)] == [b"v%d" % n]


def _records_of(data_dir: str, partition: int) -> list:
    from kafkalite import Log

    with Log(os.path.join(data_dir, f"t-{partition}"), readonly=True) as log:
        return list(log.records())
