"""Kafka Streams with ``processing.guarantee=exactly_once_v2`` against `kafkalite serve` (issue 22:
before transactions were served, such an application stayed in REBALANCING forever and wrote
nothing): tests/kafka-streams/WordCountEos.java (kafka-streams 4.1 from Maven Central) counts the
words of an input topic into an output topic; a read_committed reader of the output finds, for
every word, the exact count as its last value. Marker ``broker`` (Java and Maven)."""

from __future__ import annotations

import collections
import subprocess
import time
from pathlib import Path

import kafkalite
import maven_jars
import pytest

pytestmark = pytest.mark.broker
pytest_plugins = ["kafkalite.testing"]

SOURCE = Path(__file__).parents[1] / "kafka-streams" / "WordCountEos.java"
LINES = [f"the quick fox {i % 7} jumps over the lazy dog {i % 3}" for i in range(300)]


@pytest.fixture(scope="module")
def classpath(tmp_path_factory) -> str:
    return maven_jars.compiled(
        maven_jars.kafka_streams_jars, SOURCE, tmp_path_factory.mktemp("streams-classes")
    )


def streams_cmd(classpath: str, bootstrap: str, state: Path) -> list[str]:
    return [
        "java", "-Xmx384m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
        "WordCountEos", bootstrap, "lines", "counts", "240000", str(state),
    ]  # fmt: skip


def last_counts(path: str) -> dict[str, int]:
    """Each word's last count in the output, as a read_committed reader sees it."""
    last: dict[str, int] = {}
    consumer = kafkalite.Consumer(
        path, "counts", auto_offset_reset="earliest", isolation_level="read_committed"
    )
    while True:
        polled = consumer.poll(timeout_ms=1000, max_records=10_000)
        if not polled:
            break
        for records in polled.values():
            for r in records:
                last[r.key.decode()] = int(r.value.decode())
    consumer.close()
    return last


@pytest.mark.parametrize("killed", [False, True], ids=["clean", "killed-mid-run"])
def test_kafka_streams_exactly_once_v2_word_count_gives_exact_counts(
    kafkalite_server, classpath, tmp_path, killed
):
    """The word count runs to the end (clean), or is killed (kill -9) a moment after it started
    processing and run again: either way the counts are exact, not one line counted twice or
    lost (what exactly_once_v2 promises, through the server's transactions)."""
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("lines", 2)
    admin.create_topic("counts", 2)
    lines = LINES * (30 if killed else 1)
    with kafkalite.Producer(kafkalite_server.path) as producer:
        for i, line in enumerate(lines):
            producer.send("lines", line.encode(), key=b"%d" % i)
    cmd = streams_cmd(classpath, kafkalite_server.bootstrap_servers, tmp_path / "state")
    # stdin=PIPE: the application runs until its stdin ends (WordCountEos.java).
    if killed:
        first = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        try:
            assert first.stdout is not None
            assert first.stdout.readline().strip() == "RUNNING"
            time.sleep(1.0)  # a few commit intervals (200 ms) in: a transaction is open
        finally:
            first.kill()
            first.wait(30)
        # The state directory stays: it keeps the process id, hence the transactional id, so the
        # restarted application's InitProducerId fences the killed one and aborts its transaction.
    expected = dict(collections.Counter(word for line in lines for word in line.split()))
    run = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # The restarted application reaches RUNNING before its stdin is closed: when the first
        # run had committed every count before its kill, the counts are complete at once, and
        # closing stdin then stopped the restart before it ran (DONE NOT_RUNNING).
        assert run.stdout is not None
        running = run.stdout.readline().strip()
        # Read until every line is counted: a read_committed reader stops at the last stable
        # offset, so it sees the counts once their transactions are committed (a restart after
        # kill -9 first waits out the killed member's 10 s session).
        deadline = time.monotonic() + 180
        while (counts := last_counts(kafkalite_server.path)) != expected and time.monotonic() < deadline:
            assert run.poll() is None, "the word count ended before counting every line"
            time.sleep(0.5)
        assert counts == expected
        out, err = run.communicate(timeout=60)  # its stdin ends: a clean close
    finally:
        run.kill()
        run.wait(30)
    assert run.returncode == 0, err[-4000:]
    assert running == "RUNNING" and any(line.startswith("DONE") for line in out.splitlines()), (
        running + out + err[-4000:]
    )
    assert not any(line.startswith("TIMEOUT") for line in out.splitlines()), out
    # After the close (its last transaction committed) the counts are still exact: no line was
    # counted again.
    assert last_counts(kafkalite_server.path) == expected
