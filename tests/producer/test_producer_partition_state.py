"""The producer's per-partition state is native (``rust/src/py/partition.rs``): the drain lock,
the records in flight, the open log and the per-thread callback depth. What the Python objects
they replace gave and the drain relies on: a drain waiting for the lock lets the holder (which
needs the GIL) finish, and Ctrl-C ends the wait; ``threading.Lock``'s answers; a callback
depth per thread; and a callback that raises or sends, or a topic deleted, leaves nothing in
flight. (Threads racing drains of one partition: ``test_producer_native_drain``.)"""

from __future__ import annotations

import _thread
import os
import threading
import time

import pytest
from kafkalite import Admin, Log, Producer
from kafkalite.producer.callbacks import _in_callbacks

PAD = b"x" * 100
#: Two or three of these records fill a batch: nearly every send() appends one.
SMALL_BATCH = 300


def _values(data_dir: str) -> list[bytes]:
    with Log(os.path.join(data_dir, "t-0"), readonly=True) as log:
        return [r.value.rstrip(b"x") for r in log.records()]


def _partition(p: Producer):
    return p._sender.topic("t").partitions[0]


def test_a_drain_waiting_for_the_lock_lets_the_holder_finish(tmp_path):
    """flush() waits for a partition's drain lock that another thread holds; that thread needs
    the GIL to let go. A wait that kept the GIL would deadlock both."""
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    with Producer(data_dir, linger_ms=60_000) as p:
        future = p.send("t", b"queued", key=b"k")
        part = _partition(p)
        held, go = threading.Event(), threading.Event()

        def holder():
            with part.drain_lock:
                held.set()
                go.wait(10)
                time.sleep(0.2)  # Python work under the lock, after flush() began waiting

        t = threading.Thread(target=holder)
        t.start()
        assert held.wait(10)
        flushed = threading.Thread(target=p.flush)
        flushed.start()
        time.sleep(0.1)
        assert not future.is_done  # flush() is waiting for the lock
        go.set()
        t.join(10)
        flushed.join(10)
        assert not t.is_alive() and not flushed.is_alive(), "the drain lock's wait held the GIL"
        assert future.get(timeout=5).offset == 0


def test_ctrl_c_ends_a_wait_for_the_drain_lock(tmp_path):
    Admin(tmp_path).create_topic("t")
    with Producer(str(tmp_path)) as p:
        lock = _partition(p).drain_lock
        assert lock.acquire()
        try:
            threading.Timer(0.2, _thread.interrupt_main).start()
            started = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                lock.acquire()
            assert time.monotonic() - started < 5
        finally:
            lock.release()


def test_the_drain_lock_answers_as_threading_lock_does(tmp_path):
    Admin(tmp_path).create_topic("t")
    with Producer(str(tmp_path)) as p:
        lock = _partition(p).drain_lock
        with pytest.raises(RuntimeError, match="release unlocked lock"):
            lock.release()
        assert lock.acquire(blocking=False) and lock.locked()
        assert not lock.acquire(blocking=False)
        started = time.monotonic()
        assert not lock.acquire(timeout=0.1)
        assert time.monotonic() - started >= 0.09
        lock.release()
        assert not lock.locked()


def test_the_callback_depth_is_per_thread():
    _in_callbacks.depth = 1
    try:
        seen = []
        t = threading.Thread(target=lambda: seen.append(_in_callbacks.depth))
        t.start()
        t.join()
        assert seen == [0] and _in_callbacks.depth == 1
    finally:
        _in_callbacks.depth = 0


@pytest.mark.parametrize("acks", [1, "all"])
def test_callbacks_that_raise_or_send_leave_nothing_in_flight(tmp_path, acks):
    """Callbacks run inside the native drain (or, acks='all', the acknowledging thread) with the
    callback depth raised: one raising, one sending more, and the depth and in-flight count come
    back to 0; the records sent from callbacks are written after."""
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    depths: list[int] = []
    with Producer(data_dir, batch_size=SMALL_BATCH, linger_ms=0, acks=acks) as p:
        later = []

        def raising(metadata):
            depths.append(_in_callbacks.depth)
            raise ValueError("a bug in the callback")

        def sending(metadata):
            later.append(p.send("t", b"cb" + PAD, key=b"k"))

        for i in range(30):
            p.send("t", b"v%d" % i + PAD, key=b"k").add_callback(raising if i % 2 else sending)
        p.flush()
        p.flush()  # the callbacks' sends of the first flush
        assert all(f.get(timeout=10).offset >= 0 for f in later) and len(later) == 15
        assert _partition(p).inflight == 0 and p._sender.pending() == 0
    # (a callback added to a record already written runs at once, in add_callback: depth 0)
    assert 1 in depths and _in_callbacks.depth == 0
    assert len(_values(data_dir)) == 45


def test_a_topic_deleted_under_queued_batches_fails_them_and_forgets_the_log(tmp_path):
    """The drain finds the folder of its open log replaced: the batches go to ``append_one``,
    which fails them typed (the topic is gone) and drops the log; nothing stays in flight."""
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    with Producer(data_dir, batch_size=SMALL_BATCH, linger_ms=60_000) as p:
        seed = p.send("t", b"seed" + PAD, key=b"k")
        p.flush()
        assert seed.get(timeout=10).offset == 0
        part = _partition(p)
        assert part.log is not None and part.identity is not None
        Admin(data_dir).delete_topic("t")
        futures = [p.send("t", b"v%d" % i + PAD, key=b"k") for i in range(10)]
        p.flush()
        assert all(f.is_done and not f.succeeded() for f in futures)
        assert part.log is None and part.identity is None and part.inflight == 0
