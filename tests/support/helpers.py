"""Plain helpers the tests share (``from helpers import ...``: pyproject.toml's pytest
``pythonpath`` puts tests/support/ on sys.path). Fixtures live in tests/conftest.py; the Kafka
broker's in kafka_broker.py; child-process scripts in procs/. Nothing here imports pyspark until
a Spark helper is called."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

SUPPORT = os.path.dirname(os.path.abspath(__file__))  # tests/support/: helpers, procs/, fixtures/, vectors/
TESTS = os.path.dirname(SUPPORT)  # tests/: faults/, java-client/ and the other programs


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child: the caller's (or ``env``), with PYTHONPATH putting first the
    kafkalite this test imported (so the child tests the same copy), tests/ (so a child can import
    ``faults.*``) and tests/support/ (``procs.*`` and the test helpers)."""
    import kafkalite

    out = dict(os.environ if env is None else env)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(kafkalite.__file__)))
    rest = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    out["PYTHONPATH"] = os.pathsep.join([package_parent, TESTS, SUPPORT, *rest])
    return out


#: Child-script code, put before a producer child's ``python -c`` source: ``outcomes(p, futures)``
#: flushes producer ``p`` (a failed flush shows in the futures) and gives each future's outcome,
#: ``["ok", offset, partition]`` or ``[error class, message]``.
CHILD_OUTCOMES = """
def outcomes(p, futures):
    try:
        p.flush(60)
    except Exception:
        pass
    out = []
    for f in futures:
        try:
            m = f.get(60)
            out.append(["ok", m.offset, m.partition])
        except Exception as e:
            out.append([type(e).__name__, str(e)])
    return out
"""


def produce_all(
    producer: Any,
    topic: str,
    value: bytes,
    keys: Iterable[bytes | None],
    partitions: Iterable[int] | None = None,
) -> None:
    """confluent-kafka's ``produce(topic, value, key)`` for each key (None: keyless), serving
    delivery reports whenever librdkafka's queue is full (``BufferError``), as its docs say, and
    every 10,000 records so they never pile up; record i goes to ``partitions[i]`` when given.
    Does not flush. The one copy of this loop: the tests and the benches (which put tests/ on
    sys.path, as for serve_proc.py) use it. The benches time the call without partitions, so
    it stays the bare ``producer.produce``; only the partitioned form pays for a wrapper."""
    produce = producer.produce
    records: Iterable[Any] = keys
    if partitions is not None:
        records = zip(keys, partitions, strict=False)

        def produce(topic: str, value: bytes, record: tuple[bytes | None, int]) -> None:
            producer.produce(topic, value, record[0], record[1])

    for i, record in enumerate(records):
        while True:
            try:
                produce(topic, value, record)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 9_999:
            producer.poll(0)


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    text: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess:
    """``python -m kafkalite ARGS`` run to the end (killed after ``timeout``), output captured
    (bytes unless ``text``), in ``env`` completed by ``child_env``; ``input=``, ``cwd=`` go
    to ``subprocess.run``. It never raises for the exit status: tests assert on it."""
    return subprocess.run(
        [sys.executable, "-m", "kafkalite", *args],
        env=child_env(env),
        capture_output=True,
        text=text,
        timeout=timeout,
        check=False,
        **kwargs,
    )


def run_python_ok(
    code: str, *args: str, env: dict[str, str], timeout: float = 120, stderr_tail: int = 2000
) -> subprocess.CompletedProcess:
    """``python -c CODE ARGS`` (this interpreter) run to the end in exactly ``env`` (not completed
    by ``child_env``: some tests need an environment without this kafkalite), text output
    captured; asserts it exited 0, showing the last ``stderr_tail`` characters of stderr if not."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-stderr_tail:]
    return done


def wait_until_stopped(proc: subprocess.Popen, what: str, timeout: float = 60.0) -> None:
    """Until ``proc`` (``what``, for the failure message) stopped itself: SIGSTOP, its fail
    point's ``stop`` fired."""
    import pytest

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"{what} ended ({proc.returncode}) before its fail point stopped it: {err[-2000:]}")
        with open(f"/proc/{proc.pid}/status") as status:
            if any(line.split()[:2] == ["State:", "T"] for line in status):
                return
        time.sleep(0.01)
    pytest.fail(f"{what} did not stop at its fail point within {timeout:.0f} s")


def split_by_writer(values: list[bytes]) -> dict[int, list[int]]:
    """Values written as ``b"<writer>:<seq>"`` (by threads or processes), grouped by writer in
    log order, to check that each writer's records kept their order."""
    out: dict[int, list[int]] = {}
    for v in values:
        writer, seq = v.split(b":")
        out.setdefault(int(writer), []).append(int(seq))
    return out


def kafka_python_read_to_end(consumer: Any, timeout: float = 30.0) -> list[Any]:
    """The records a kafka-python consumer reads from its assigned partitions' positions up to
    the end offsets it is told first (the last stable offset under read_committed), in poll
    order. It stops when every position has reached its end, not after seconds of silence
    (``consumer_timeout_ms``), so nothing extra can hide and no test waits out a quiet timeout;
    ``timeout`` bounds a partition that never gets there (the caller's assert shows the rest)."""
    import time

    ends = consumer.end_offsets(list(consumer.assignment()))
    deadline = time.monotonic() + timeout
    got: list[Any] = []
    while any(consumer.position(tp) < end for tp, end in ends.items()) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(records)
    return got


@contextmanager
def local_spark(cores: int, conf: dict[str, str] | None = None, log_level: str = "ERROR") -> Iterator[Any]:
    """A local SparkSession (``local[cores]``, UI off) whose Python workers run this interpreter,
    so they import the kafkalite under test; stopped on exit."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(f"local[{cores}]").config("spark.ui.enabled", "false")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    try:
        yield session
    finally:
        session.stop()


def start_stream_copy(spark: Any, path: str, source: str, target: str, checkpoint: str) -> Any:
    """Start a streaming query that copies the values of topic ``source`` (from earliest) into
    topic ``target`` of the data directory ``path``, checkpointing in ``checkpoint``."""
    return (
        spark.readStream.format("kafkalite")
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load(path)
        .select("value")
        .writeStream.format("kafkalite")
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
        .start(path)
    )


def read_process_write_data(tmp_path: Any) -> str:
    """A data directory for a consume-transform-produce loop: topics ``in`` (10 records, b"0".."9",
    in partition 0) and ``out``, one partition each; the ``data`` fixture of the KIP-447 tests."""
    from kafkalite import Admin, Producer

    path = str(tmp_path / "data")
    admin = Admin(path)
    admin.create_topic("in", 1)
    admin.create_topic("out", 1)
    with Producer(path) as plain:
        for i in range(10):
            plain.send("in", b"%d" % i, partition=0)
    return path
