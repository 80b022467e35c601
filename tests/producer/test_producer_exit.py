"""Issue 11 point 1: records a script sent are written when it exits without flush()/close()
(and when an open producer is garbage collected), with a bounded wait and a logged warning
naming what could not be written."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import time

import pytest
from kafkalite import Admin, Log

#: The children's opening: a producer that would linger for a minute, with ten records queued.
SEND_TEN = """
    import sys
    from kafkalite import Producer
    producer = Producer(sys.argv[1], linger_ms=60_000)
    for i in range(10):
        producer.send("t", b"record-%d" % i)
"""


@pytest.fixture
def data_dir(tmp_path) -> str:
    """A data directory with topic ``t`` (one partition)."""
    path = str(tmp_path / "data")
    Admin(path).create_topic("t")
    return path


def _run(*script: str, data_dir: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the script's parts (each dedented on its own), in order, with ``data_dir`` as argv[1]."""
    return subprocess.run(
        [sys.executable, "-c", "\n".join(textwrap.dedent(part) for part in script), data_dir],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _count(data_dir: str) -> int:
    with Log(os.path.join(data_dir, "t-0"), readonly=True) as log:
        return log.end_offset


def test_records_sent_before_exit_without_close_are_written(data_dir):
    result = _run(SEND_TEN, data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    assert _count(data_dir) == 10


def test_a_garbage_collected_open_producer_writes_its_records(data_dir):
    result = _run(
        SEND_TEN,
        """
        import gc, os
        from kafkalite import Log
        del producer
        gc.collect()
        with Log(os.path.join(sys.argv[1], "t-0"), readonly=True) as log:
            print(log.end_offset)
        sys.stdout.flush()
        os._exit(0)  # no atexit handlers: only the collection can have written them
        """,
        data_dir=data_dir,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "10"


def test_a_stuck_write_at_exit_is_bounded_and_reported(data_dir):
    part = os.path.join(data_dir, "t-0")
    with open(os.path.join(part, ".kafkalite.lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # every writer of t-0 now waits: the write is stuck
        started = time.monotonic()
        result = _run(
            """
            import sys
            import kafkalite.producer
            kafkalite.producer.EXIT_FLUSH_TIMEOUT = 1.0
            producer = kafkalite.producer.Producer(sys.argv[1], linger_ms=60_000)
            for i in range(7):
                producer.send("t", b"record-%d" % i)
            """,
            data_dir=data_dir,
            timeout=60,
        )
        elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "7 of 7 queued records could not be written within 1.0 s" in result.stderr
    assert elapsed < 30  # 1 s bound + interpreter start-up on a loaded machine
    assert _count(data_dir) == 0
