"""`kafkalite serve` under a low open-file limit (issue 21, the adversary's finding): the server
kept every partition it ever opened open (about 3 descriptors each), so one DescribeLogDirs with
topics=null, or a Fetch naming thousands of partitions, ran it out of descriptors, after which
producers got KAFKA_STORAGE_ERROR and new connections were not accepted. Now at most
--max-open-partitions unused logs stay open (by default a share of RLIMIT_NOFILE), the least
recently used closed and reopened when needed; an open that still finds no descriptor closes
every unused log and tries again, and failing that answers a retriable error with a WARNING.

The server runs as a child whose RLIMIT_NOFILE (soft and hard: it raises the soft limit to the
hard one at start) is set low in the child only; its descriptors are counted in /proc/PID/fd."""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time

import kafkalite
import pytest
import server_wire as wire
from helpers import kafka_python_read_to_end
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafkalite.errors import InvalidConfigError, InvalidTypeError
from kafkalite.server import Server
from serve_proc import free_port, serve_on

#: RLIMIT_NOFILE of the server process: far fewer than 3 per partition of the data directory
#: (a low limit keeps the test short: each partition past what stays open is closed, with a sync,
#: and reopened).
LIMIT = 128
TOPICS, PARTITIONS = 4, 100
NONE, KAFKA_STORAGE_ERROR = 0, 56


def low_limit(limit: int):
    """A ``preexec_fn`` setting the child's RLIMIT_NOFILE, soft and hard, to ``limit``."""
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class PeakDescriptors:
    """The most descriptors a process had open, sampled every 5 ms on a thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            try:
                self.peak = max(self.peak, descriptors(self.pid))
            except OSError:  # the process ended
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def many_partitions(path: str) -> list[tuple[str, int]]:
    admin = kafkalite.Admin(path)
    for t in range(TOPICS):
        admin.create_topic(f"t{t}", PARTITIONS)
    with kafkalite.Producer(path) as producer:  # a record in some, so fetches return data too
        for t in range(TOPICS):
            producer.send(f"t{t}", b"x", partition=t)
    return [(f"t{t}", p) for t in range(TOPICS) for p in range(PARTITIONS)]


def fetch_all(bootstrap: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """One Fetch naming every partition: each one's error code."""
    conn = wire.Wire(bootstrap, timeout=120)
    try:
        request = wire.fetch([(t, p, 0) for t, p in partitions], 100, 1 << 20, 1 << 10)
        response = conn.call(request, timeout=120)
    finally:
        conn.close()
    return {(t.topic, p.partition_index): p.error_code for t in response.responses for p in t.partitions}


def produce_and_fetch_fresh(path: str, bootstrap: str) -> None:
    """A partition the server has not opened yet: produced to (acks=all) and read back."""
    kafkalite.Admin(path).create_topic("fresh", 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0, request_timeout_ms=30_000)
    try:
        producer.send("fresh", b"after the flood").get(timeout=60)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        consumer.assign([TopicPartition("fresh", 0)])
        consumer.seek_to_beginning()
        assert [m.value for m in kafka_python_read_to_end(consumer)] == [b"after the flood"]
    finally:
        consumer.close()


@pytest.mark.slow
def test_describe_log_dirs_fetch_and_list_offsets_of_every_partition_leave_descriptors_for_everyone(
    tmp_path, spawn
):
    """400 partitions under a limit of 128 descriptors (the old server ran out after ~40): each
    request names all of them and every partition is answered; then a partition not opened yet
    is produced to and read back, and the server never came near its limit."""
    path = str(tmp_path)
    partitions = many_partitions(path)
    port = free_port()
    server = serve_on(spawn.module, path, port, "--log-level", "WARNING", preexec_fn=low_limit(LIMIT))
    bootstrap = f"127.0.0.1:{port}"
    peak = PeakDescriptors(server.pid)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    try:
        [broker] = admin.describe_log_dirs()  # topics=null: every partition
    finally:
        admin.close()
    [log_dir] = broker["log_dirs"]
    described = {(t["name"], p["partition_index"]) for t in log_dir["topics"] for p in t["partitions"]}
    assert described == set(partitions)
    sizes = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in log_dir["topics"]
        for p in t["partitions"]
    }
    # Partitions opened after the first ~40 were still measured (0 is what an open that failed gave).
    assert all(sizes[(f"t{t}", t)] > 0 for t in range(TOPICS)), sizes
    after_describe = descriptors(server.pid)

    errors = fetch_all(bootstrap, partitions)
    assert set(errors) == set(partitions)
    refused = {tp: code for tp, code in errors.items() if code != NONE}
    assert not refused, f"{len(refused)} partitions refused, e.g. {list(refused.items())[:5]}"
    after_fetch = descriptors(server.pid)

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    try:  # ListOffsets of every partition
        ends = consumer.end_offsets([TopicPartition(t, p) for t, p in partitions])
    finally:
        consumer.close()
    assert {(tp.topic, tp.partition): end for tp, end in ends.items()} == {
        (t, p): int(t == f"t{p}") for t, p in partitions
    }

    produce_and_fetch_fresh(path, bootstrap)
    assert server.poll() is None, "the server died"
    highest = peak.stop()
    print(f"descriptors: after DescribeLogDirs {after_describe}, after Fetch {after_fetch}, peak {highest}")
    assert highest < LIMIT, f"the server reached its limit of {LIMIT} descriptors ({highest})"
    server.terminate()
    _, err = server.communicate(timeout=60)
    assert "Too many open files" not in err, err[-2000:]
    assert "more partitions are in use than --max-open-partitions" in err, err[-2000:]


def test_an_open_that_finds_no_descriptor_is_answered_retriable_and_the_server_recovers(tmp_path, spawn):
    """Everything in use: idle connections hold every descriptor the limit leaves. An open
    first gives back what unused logs hold; with nothing to give back, the produce gets
    KAFKA_STORAGE_ERROR (retriable) and the server a WARNING saying why; once the connections
    close, the same produce succeeds."""
    path = str(tmp_path)
    kafkalite.Admin(path).create_topic("late", 1)
    port = free_port()
    # A max.connections of the operator's choosing, above what the limit leaves (the default
    # is held to it, so that connections are evicted before the descriptors run out).
    server = serve_on(
        spawn.module,
        path,
        port,
        "--log-level",
        "WARNING",
        "--max-connections",
        "1000",
        preexec_fn=low_limit(LIMIT),
    )
    bootstrap = f"127.0.0.1:{port}"
    producer = wire.Wire(bootstrap, timeout=30)
    batch = wire.record_batch([b"v"])
    flood = []
    try:
        # Connect until the server stops accepting (its descriptors are gone), then some more.
        deadline = time.monotonic() + 60
        while descriptors(server.pid) < LIMIT and time.monotonic() < deadline:
            flood.append(wire.connect(bootstrap, timeout=5))
        assert descriptors(server.pid) >= LIMIT - 2, descriptors(server.pid)
        refused = producer.call(wire.produce("late", 0, batch, 10_000), timeout=30)
        assert refused.responses[0].partition_responses[0].error_code == KAFKA_STORAGE_ERROR
    finally:
        for sock in flood:
            sock.close()
    assert server.poll() is None, "the server died"
    deadline = time.monotonic() + 30
    while True:
        answer = producer.call(wire.produce("late", 0, batch, 10_000), timeout=30)
        code = answer.responses[0].partition_responses[0].error_code
        if code == NONE or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    producer.close()
    assert code == NONE
    server.terminate()
    _, err = server.communicate(timeout=60)
    assert "out of file descriptors" in err, err[-3000:]


@pytest.mark.serial  # its server did not stop within 60 s of SIGTERM beside 2 busy workers (issue 23)
def test_the_server_raises_its_soft_limit_to_the_hard_one_and_says_both_figures(tmp_path, spawn):
    """The soft RLIMIT_NOFILE is often 1024 where the hard one is far higher: the server raises
    it at start, as the JVM does for a Kafka broker, and its start line says the limit and how
    many idle partitions stay open (a share of it, or --max-open-partitions)."""
    soft, hard = 64, 4096
    raise_soft = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))  # noqa: E731
    port = free_port()
    server = serve_on(spawn.module, tmp_path, port, preexec_fn=raise_soft)
    with open(f"/proc/{server.pid}/limits") as f:
        [line] = [line for line in f if line.startswith("Max open files")]
    assert line.split()[3:5] == [str(hard), str(hard)], line
    server.terminate()
    server.communicate(timeout=60)
    port = free_port()
    server = spawn.module(
        "kafkalite", "serve", "--data-dir", tmp_path, "--listen", f"127.0.0.1:{port}",
        "--max-open-partitions", "7", stderr=subprocess.PIPE, text=True, preexec_fn=raise_soft,
    )  # fmt: skip
    assert server.stderr is not None
    started = server.stderr.readline()
    assert "open-file limit 4,096, up to 7 idle partitions kept open" in started, started
    server.terminate()
    server.communicate(timeout=60)


def test_max_open_partitions_is_checked(tmp_path):
    with pytest.raises(InvalidConfigError, match="at least 1"):
        Server(tmp_path, max_open_partitions=0)
    with pytest.raises(InvalidTypeError):
        Server(tmp_path, max_open_partitions="7")  # type: ignore[arg-type]
    with Server(tmp_path, max_open_partitions=7) as server:
        assert server.max_open_partitions == 7
        assert server.open_file_limit == resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def test_the_default_cap_fits_a_small_limit_and_a_limit_too_small_to_serve_is_refused(tmp_path, spawn):
    """The default --max-open-partitions had a floor of 16 (64 descriptors) whatever the limit,
    so under a small RLIMIT_NOFILE the open logs could take every descriptor: it is now the
    limit's share however small, and under a limit too small to serve at all the server does
    not start, saying why, rather than fail requests with EMFILE."""
    server = spawn.module(
        "kafkalite", "serve", "--data-dir", tmp_path, "--listen", f"127.0.0.1:{free_port()}",
        stderr=subprocess.PIPE, text=True, preexec_fn=low_limit(80),
    )  # fmt: skip
    assert server.stderr is not None
    started = server.stderr.readline()
    server.terminate()
    server.communicate(timeout=60)
    assert "open-file limit 80, up to 10 idle partitions kept open" in started, started
    refused = spawn.module(
        "kafkalite", "serve", "--data-dir", tmp_path, "--listen", f"127.0.0.1:{free_port()}",
        stderr=subprocess.PIPE, text=True, preexec_fn=low_limit(40),
    )  # fmt: skip
    _, err = refused.communicate(timeout=60)
    assert refused.returncode != 0
    assert "open-file limit (RLIMIT_NOFILE) is 40, too few to serve" in err, err[-2000:]
