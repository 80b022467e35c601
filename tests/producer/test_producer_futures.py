"""Issue 14 target 1: ``send()`` is one native call that returns a native future. What must not
change with it: kafka-python's future API (callbacks in order, each with its own record's
metadata, errbacks on failure, re-entrant callbacks, bounded and interruptible ``get``), and
the order of one partition's records when several threads fill batches while the sender thread
appends them. And what the change is for: a future costs the cyclic GC nothing."""

from __future__ import annotations

import gc
import signal
import threading

import pytest
from kafkalite import Admin, Consumer, FutureRecordMetadata, KafkaTimeoutError, Producer


def _topic(tmp_path, partitions: int = 1) -> str:
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", partitions=partitions)
    return data_dir


def _read_all(data_dir: str) -> list:
    with Consumer(data_dir, "t", auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
        return list(c)


def test_futures_are_not_walked_by_the_cyclic_gc(tmp_path):
    data_dir = _topic(tmp_path)
    with Producer(data_dir) as p:
        futures = [p.send("t", b"v", key=b"k%d" % i) for i in range(1000)]
    assert all(isinstance(f, FutureRecordMetadata) for f in futures)
    assert not any(gc.is_tracked(f) for f in futures)
    gc.collect()  # untracked futures keep their batch alive: still resolved, still right
    assert [f.get(timeout=5).offset for f in futures] == list(range(1000))


def test_callbacks_run_in_order_each_with_its_own_records_metadata(tmp_path):
    data_dir = _topic(tmp_path)
    seen: list = []
    with Producer(data_dir, linger_ms=60_000) as p:  # one batch, appended by flush
        futures = [p.send("t", b"v%d" % i, timestamp_ms=1000 + i) for i in range(50)]
        for i, f in enumerate(futures):
            f.add_callback(lambda tag, md: seen.append((tag, md.offset, md.timestamp)), i)
            f.add_errback(lambda e: seen.append(("errback", e)))
        assert not any(f.is_done for f in futures) and seen == []
        p.flush()
        assert seen == [(i, i, 1000 + i) for i in range(50)]
        late: list = []
        futures[7].add_callback(late.append)  # already resolved: runs now, in this thread
        assert late[0].offset == 7 and late[0].topic == "t" and late[0].partition == 0


def test_a_callback_may_use_its_future_and_add_more_callbacks(tmp_path):
    data_dir = _topic(tmp_path)
    seen: list = []
    with Producer(data_dir, linger_ms=60_000) as p:
        f = p.send("t", b"v")

        def reenter(md):
            seen.append(f.get(timeout=1).offset)  # the batch's lock is not held while it runs
            f.add_callback(lambda md2: seen.append(("inner", md2.offset)))

        f.add_callback(reenter)
        p.flush()
    assert seen == [0, ("inner", 0)]


def test_a_failed_batch_runs_errbacks_and_get_raises_its_error(tmp_path):
    data_dir = _topic(tmp_path)
    errors: list = []
    with Producer(data_dir, linger_ms=60_000) as p:
        f = p.send("t", b"v").add_errback(errors.append).add_callback(lambda md: errors.append("callback"))
        Admin(data_dir).delete_topic("t")  # the append then fails typed
        with pytest.raises(Exception) as raised:
            p.flush()
            f.get(timeout=10)
    assert f.failed() and not f.succeeded() and f.value is None
    assert errors == [f.exception] and isinstance(f.exception, type(raised.value))


def test_get_is_bounded_by_its_timeout_and_interrupted_by_signals(tmp_path):
    data_dir = _topic(tmp_path)

    class Interrupted(Exception):
        pass

    def on_alarm(signum, frame):
        raise Interrupted

    with Producer(data_dir, linger_ms=60_000) as p:
        f = p.send("t", b"v")
        with pytest.raises(KafkaTimeoutError, match="within 0.05 s"):
            f.get(timeout=0.05)
        previous = signal.signal(signal.SIGALRM, on_alarm)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(Interrupted):
                f.get()  # no timeout: only the signal ends the wait
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert not f.is_done
    assert f.get(timeout=0).offset == 0  # close flushed it


def test_threads_filling_batches_while_the_sender_appends_keep_their_order(tmp_path):
    # Tiny batches: nearly every send() queues a full batch, and the caller, other threads'
    # callers and the sender thread all append them; each thread's records stay in order.
    data_dir = _topic(tmp_path)
    per_thread, threads = 3000, 4
    with Producer(data_dir, batch_size=300, linger_ms=0) as p:

        def work(n: int) -> None:
            for i in range(per_thread):
                p.send("t", b"%d:%d" % (n, i), key=b"k")

        workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    records = _read_all(data_dir)
    assert [r.offset for r in records] == list(range(per_thread * threads))
    by_thread: dict[int, list[int]] = {}
    for r in records:
        n, i = r.value.split(b":")
        by_thread.setdefault(int(n), []).append(int(i))
    assert by_thread == {n: list(range(per_thread)) for n in range(threads)}
