"""A writer that holds a partition's append lock and is then stopped (SIGSTOP) must not hang
the others forever: closing with a timeout returns within it (LogLockedError naming the
writers), and so does Producer.close(timeout=...)."""

from __future__ import annotations

import os
import threading
import time

import pytest
from kafkalite import Admin, KafkaliteError, Log, LogLockedError, Producer
from server_wire import SHARED_WRITER, release, stop_holder


def test_log_close_with_timeout_returns_while_an_append_waits_for_a_stopped_holder(part_dir, spawn):
    log = Log(part_dir, shared_writers=True)
    log.append_values([b"before"])
    holder = stop_holder(spawn.code, SHARED_WRITER, part_dir)
    try:

        def append_and_wait() -> None:
            try:
                log.append_values([b"x"])  # waits for the stopped holder
            except KafkaliteError:
                pass  # closed under it, or the lock wait ran out: either is fine here

        blocked = threading.Thread(target=append_and_wait, daemon=True)
        blocked.start()
        time.sleep(0.3)  # the append now waits for the stopped holder, holding the log's mutex
        started = time.monotonic()
        with pytest.raises(LogLockedError, match="gave up after"):
            log.close(timeout=1)
        assert time.monotonic() - started < 3
    finally:
        release(holder)
    blocked.join(timeout=90)


def test_close_timeout_bounds_the_partition_lock_wait(part_dir, spawn):
    with Log(part_dir, shared_writers=True) as first:
        first.append_values([b"a"])
    log = Log(part_dir, shared_writers=True)
    holder = stop_holder(spawn.code, SHARED_WRITER, part_dir)
    try:
        # The holder is alive, so `log` is not the last one out: close needs no lock...
        started = time.monotonic()
        log.close(timeout=1)
        assert time.monotonic() - started < 3
    finally:
        release(holder)
    # ...and an append after the holder died goes on.
    with Log(part_dir, shared_writers=True) as again:
        again.append_values([b"b"])
        assert again.end_offset == 2


@pytest.mark.slow
def test_producer_close_with_timeout_returns(tmp_path, spawn):
    """Producer.close(timeout=2) used to never return while a stopped process held the lock.
    It now returns within its timeout (raising KafkaTimeoutError for the records it could not
    write); the stuck append finishes or fails on its own when the lock frees."""
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", partitions=1)
    producer = Producer(data)
    producer.send("t", b"first").get(timeout=30)
    holder = stop_holder(spawn.code, SHARED_WRITER, os.path.join(data, "t-0"))
    try:
        producer.send("t", b"stuck")  # the sender thread now waits for the stopped holder
        time.sleep(0.3)
        started = time.monotonic()
        with pytest.raises(KafkaliteError):  # loud is fine; hanging is not
            producer.close(timeout=2)
        assert time.monotonic() - started < 6
    finally:
        release(holder)
