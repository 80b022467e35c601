"""Issue 14 target 1: a batch that fills is appended by ``send()`` itself, natively
(``rust/src/py/drain.rs``), and the sender thread's drain takes the same path; the append keeps
the GIL unless the log is held. What that path must keep from the Python one: a send from a
callback queues instead of waiting for the drain that runs the callback; a topic deleted (or
re-created) between batches fails the later ones typed (or sends them to the new folder); an
acknowledged record survives kill -9; a failed append fails its batch, logged, and later ones
go on; and an append waiting for another writer's lock lets the other threads run."""

from __future__ import annotations

import fcntl
import os
import threading
import time

import pytest
from kafkalite import Admin, Log, Producer
from kafkalite.errors import UnknownTopicOrPartitionError

PAD = b"x" * 100
#: Two or three of these records fill a batch: nearly every send() appends one.
SMALL_BATCH = 300


def _topic(tmp_path) -> tuple[str, Admin]:
    """A data directory with topic "t" (one partition), and its Admin."""
    data_dir = str(tmp_path / "data")
    admin = Admin(data_dir)
    admin.create_topic("t")
    return data_dir, admin


def _send(p: Producer, prefix: bytes, count: int) -> list:
    """``count`` keyed records ``prefix-i`` + PAD to "t"; their futures."""
    return [p.send("t", b"%s-%d" % (prefix, i) + PAD, key=b"k") for i in range(count)]


def _values(data_dir: str, topic: str = "t", partition: int = 0) -> list[bytes]:
    with Log(os.path.join(data_dir, f"{topic}-{partition}"), readonly=True) as log:
        return [r.value for r in log.records()]


CALLBACK_SENDS = r"""
import sys
from kafkalite import Admin, Producer
data_dir = sys.argv[1]
Admin(data_dir).create_topic("t")
with Producer(data_dir, batch_size=300, linger_ms=0) as p:
    def resend(i, metadata):
        if i % 3 == 0:  # fills a batch while this thread holds the partition's drain lock
            p.send("t", b"cb-%d" % i + b"x" * 100, key=b"k")
    for i in range(300):
        p.send("t", b"main-%d" % i + b"x" * 100, key=b"k").add_callback(resend, i)
print("done")
"""


def test_a_send_from_a_callback_of_a_batch_send_appended_queues_instead_of_deadlocking(tmp_path, spawn):
    # The callback runs inside send()'s native drain, holding the drain lock; its own send
    # fills a batch and must hand it to the sender thread, not wait for the lock it holds.
    data_dir = str(tmp_path / "data")
    out = spawn.run(CALLBACK_SENDS, data_dir, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr
    values = [v.rstrip(b"x") for v in _values(data_dir)]
    assert [v for v in values if v.startswith(b"main-")] == [b"main-%d" % i for i in range(300)]
    assert sorted(v for v in values if v.startswith(b"cb-")) == sorted(b"cb-%d" % i for i in range(0, 300, 3))


def test_a_topic_deleted_between_batches_send_appends_fails_the_later_ones_typed(tmp_path):
    data_dir, admin = _topic(tmp_path)
    # linger_ms long: only full batches are appended, each by the send() that filled it.
    with Producer(data_dir, batch_size=SMALL_BATCH, linger_ms=60_000) as p:
        before = _send(p, b"before", 10)
        written = [f for f in before if f.is_done]
        assert written and all(f.succeeded() for f in written)
        admin.delete_topic("t")
        after = _send(p, b"after", 10)
        assert sum(f.is_done for f in after) >= 8, "send() appended no batch after the delete"
        p.flush(timeout=10)  # and the lingering one
        for f in after:
            with pytest.raises(UnknownTopicOrPartitionError):
                f.get(timeout=0)
    assert not os.path.exists(os.path.join(data_dir, "t-0"))  # nothing re-created the folder


def test_a_topic_recreated_between_batches_send_appends_gets_the_later_ones(tmp_path):
    data_dir, admin = _topic(tmp_path)
    with Producer(data_dir, batch_size=SMALL_BATCH, linger_ms=60_000) as p:
        old = _send(p, b"old", 9)
        p.flush(timeout=10)
        assert [f.get(timeout=0).offset for f in old] == list(range(9))
        admin.delete_topic("t")
        admin.create_topic("t")
        new = _send(p, b"new", 9)
        assert sum(f.is_done for f in new) >= 6  # appended by send(), into the new folder
        p.flush(timeout=10)
        assert [f.get(timeout=0).offset for f in new] == list(range(9))
    assert _values(data_dir) == [b"new-%d" % i + PAD for i in range(9)]


KILLED_MID_APPEND = r"""
import os, sys
from kafkalite import Admin, Producer
data_dir = sys.argv[1]
def acked(i, metadata):
    os.write(1, b"%d %d\n" % (i, metadata.offset))
with Producer(data_dir, batch_size=1000, linger_ms=0) as p:
    for i in range(100_000):
        p.send("t", b"%d-" % i + b"x" * 100, key=b"k").add_callback(acked, i)
"""


def test_kill_9_in_an_append_send_runs_loses_no_acknowledged_record(tmp_path, spawn):
    data_dir, _ = _topic(tmp_path)
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "index.append=kill@40"}
    out = spawn.run(KILLED_MID_APPEND, data_dir, timeout=60, env=env)
    assert out.returncode == -9, (out.returncode, out.stderr)
    acked = [tuple(map(int, line.split())) for line in out.stdout.splitlines()]
    assert len(acked) > 100, "killed before acknowledging enough to check"
    values = _values(data_dir)
    for i, offset in acked:
        assert values[offset] == b"%d-" % i + PAD, f"record {i} acknowledged at {offset} is not there"


FAILED_APPEND = r"""
import logging, sys
from kafkalite import Admin, KafkaliteError, Producer
data_dir = sys.argv[1]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
Admin(data_dir).create_topic("t")
with Producer(data_dir, batch_size=1000, linger_ms=60_000) as p:
    futures = [p.send("t", b"%d-" % i + b"x" * 100, key=b"k") for i in range(400)]
    p.flush(timeout=30)
assert all(f.is_done for f in futures), "a future was left pending"
failed = [i for i, f in enumerate(futures) if f.failed()]
error = futures[failed[0]].exception
print(len(failed), isinstance(error, KafkaliteError) and isinstance(error, OSError))
later = futures[failed[-1] + 1:]
print(len(later), sum(f.succeeded() for f in later))
"""


def test_an_append_that_fails_in_send_fails_its_batch_logged_and_later_ones_go_on(tmp_path, spawn):
    data_dir = str(tmp_path / "data")
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "index.append=enospc@5"}
    out = spawn.run(FAILED_APPEND, data_dir, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    failed, later = out.stdout.splitlines()
    assert failed in ("8 True", "9 True"), out.stdout  # one batch, typed (KafkaliteError and OSError)
    count, written = map(int, later.split())
    assert count > 100 and written == count, out.stdout  # the batches after it were written
    assert "records for t-0 were not written" in out.stderr


def test_send_waiting_for_another_writers_append_lock_lets_other_threads_run(tmp_path):
    """send() fills a batch while another writer holds the partition's append lock: the append
    waits for it with the GIL released (the attempt that keeps the GIL only tries the lock)."""
    data_dir, _ = _topic(tmp_path)
    part = os.path.join(data_dir, "t-0")
    with Producer(data_dir, batch_size=SMALL_BATCH, linger_ms=60_000) as p:
        first = _send(p, b"a", 3)
        assert first[0].is_done  # the partition's log is open
        sent = threading.Event()

        def fill() -> None:
            _send(p, b"b", 3)
            sent.set()

        with open(os.path.join(part, ".kafkalite.lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            worker = threading.Thread(target=fill)
            worker.start()
            ticks = 0
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:  # needs the GIL the waiting append must not hold
                ticks += 1
                time.sleep(0.001)
            assert ticks > 50 and not sent.is_set()
            fcntl.flock(lock, fcntl.LOCK_UN)
        worker.join(30)
        assert sent.is_set()
    assert _values(data_dir) == [b"a-%d" % i + PAD for i in range(3)] + [b"b-%d" % i + PAD for i in range(3)]


def test_a_batch_send_fills_waits_for_the_sender_threads_drain_of_earlier_batches(tmp_path):
    """The sender thread appends batches a callback queued, and runs their (slow) callbacks
    between them; a batch send() fills meanwhile must wait for the rest (the drain lock), or
    it would land before records sent earlier."""
    data_dir, _ = _topic(tmp_path)
    sent: list[bytes] = []

    def send(value: bytes):
        sent.append(value)
        return p.send("t", value + PAD, key=b"k")

    def slow(metadata) -> None:  # in the sender thread's drain, between its batches
        time.sleep(0.05)

    def queue_more(metadata) -> None:  # in send()'s drain: these batches go to the sender thread
        for i in range(3):
            send(b"cb-%d" % i).add_callback(slow)

    with Producer(data_dir, batch_size=SMALL_BATCH, linger_ms=0) as p:
        send(b"v-0").add_callback(queue_more)
        send(b"v-1")  # fills v-0's batch: appended here, queue_more runs here
        time.sleep(0.02)  # the sender thread is in its drain now, sleeping in a callback
        for i in range(2, 5):
            send(b"v-%d" % i)
    assert _values(data_dir) == [v + PAD for v in sent]


def test_two_threads_sending_to_one_partition_lose_nothing_and_keep_their_order(tmp_path):
    data_dir, _ = _topic(tmp_path)
    per_thread = 5000
    with Producer(data_dir, batch_size=SMALL_BATCH * 4, linger_ms=0) as p:

        def work(n: int) -> None:
            for i in range(per_thread):
                p.send("t", b"%d:%d:" % (n, i) + PAD, key=b"k")

        workers = [threading.Thread(target=work, args=(n,)) for n in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    by_thread: dict[int, list[int]] = {0: [], 1: []}
    for value in _values(data_dir):
        n, i, _ = value.split(b":")
        by_thread[int(n)].append(int(i))
    assert by_thread == {n: list(range(per_thread)) for n in range(2)}
