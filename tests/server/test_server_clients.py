"""confluent-kafka clients against `kafkalite serve` under faults: a consumer group of three
processes with one killed (SIGKILL) while records keep arriving, and the server itself killed with
SIGKILL while a producer with acks=all streams, then restarted on the same port."""

from __future__ import annotations

import collections
import subprocess
import threading
import time
from pathlib import Path

import kafkalite
import pytest
from serve_proc import free_port
from server_clients import INIT_PRODUCER_ID, serve, served_api_keys
from test_server import confluent_producer, confluent_read

pytest_plugins = ["kafkalite.testing"]

confluent_kafka = pytest.importorskip("confluent_kafka")


def read_journal(path: Path) -> list[tuple[str, int, tuple]]:
    """tests/support/procs/server_group_member.py's journal: (kind, time ns, fields); a line torn by the
    SIGKILL (no newline yet) is left out."""
    out = []
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            continue
        kind, t, *rest = line.split()
        if kind == "A":
            fields: tuple = tuple(int(p) for p in rest[0].split(",")) if rest else ()
        else:
            fields = tuple(map(int, rest))
        out.append((kind, int(t), fields))
    return out


class Stream:
    """A confluent-kafka producer thread writing "<i>" round-robin over the partitions until
    stopped; ``sent`` counts what it handed over, all acknowledged when ``stop`` returns."""

    def __init__(self, server, topic: str, partitions: int, rate: float) -> None:
        self.producer = confluent_producer(server)
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.sent = 0
        self.failed: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(
                self.topic,
                b"%d" % self.sent,
                partition=self.sent % self.partitions,
                on_delivery=lambda err, msg: err is not None and self.failed.append(err),
            )
            self.sent += 1
            self.producer.poll(0)
            time.sleep(1 / self.rate)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        assert self.producer.flush(30) == 0 and not self.failed, self.failed


@pytest.mark.slow
def test_consumer_group_of_three_processes_with_one_killed(kafkalite_server, tmp_path, spawn):
    """Three confluent-kafka processes in one group while a producer keeps writing; one member is
    killed with SIGKILL mid-stream. Its partitions move to the two survivors, every record is
    read, the committed offsets only move forward and reach the end, and no record is read again
    once a commit past it succeeded (each member's journal, merged by time, says)."""
    topic, group, partitions = "work", "workers", 6
    kafkalite.Admin(kafkalite_server.path).create_topic(topic, partitions=partitions)
    stream = Stream(kafkalite_server, topic, partitions, rate=400)
    journals = [tmp_path / f"member-{i}.journal" for i in range(3)]
    procs = [
        spawn(
            "server_group_member.py",
            kafkalite_server.bootstrap_servers,
            topic,
            group,
            j,
            stdout=subprocess.DEVNULL,
        )
        for j in journals
    ]
    try:
        # The group formed (three members, two partitions each) and the victim is reading.
        def settled() -> bool:
            events = [read_journal(j) for j in journals]
            last = [[f for k, _, f in e if k == "A"][-1:] for e in events]
            return all(a and len(a[0]) == 2 for a in last) and sum(k == "C" for k, _, _ in events[0]) >= 20

        deadline = time.monotonic() + 60
        while not settled():
            assert time.monotonic() < deadline, [read_journal(j)[-3:] for j in journals]
            time.sleep(0.1)
        procs[0].kill()
        procs[0].wait()
        killed_at = time.monotonic_ns()
        victim = [f for k, _, f in read_journal(journals[0]) if k == "A"][-1]
        time.sleep(8)  # past the victim's session timeout (6 s): the survivors take over
    finally:
        stream.stop()
    end = {
        info.partition: info.end_offset
        for info in kafkalite.Admin(kafkalite_server.path).describe_topic(topic).partitions
    }
    assert sum(end.values()) == stream.sent
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        committed = {
            p.partition: p.committed
            for p in kafkalite.Admin(kafkalite_server.path).describe_group(group).partitions
        }
        if committed == end:
            break
        time.sleep(0.3)

    events = sorted((t, i, kind, f) for i, j in enumerate(journals) for kind, t, f in read_journal(j))
    # The victim's partitions moved to the survivors, who read them after the kill.
    after = [(i, f) for t, i, kind, f in events if kind == "A" and t > killed_at]
    assert {p for i, f in after if i != 0 for p in f} == set(range(partitions))
    assert {f[0] for t, i, kind, f in events if kind == "R" and t > killed_at and i != 0} >= set(victim)
    # Every record read; none read again after a commit past it; commits never go backwards.
    reads: collections.Counter = collections.Counter()
    committed_so_far = dict.fromkeys(range(partitions), 0)
    for _t, i, kind, f in events:
        if kind == "R":
            partition, offset = f
            assert offset >= committed_so_far[partition], (
                f"member {i} read {partition}/{offset} after offset {committed_so_far[partition]} was committed"
            )
            reads[f] += 1
        elif kind == "C":
            partition, offset = f
            assert offset >= committed_so_far[partition], f"commit of {partition} went back to {offset}"
            committed_so_far[partition] = offset
    assert set(reads) == {(p, o) for p in range(partitions) for o in range(end[p])}
    twice = sum(n - 1 for n in reads.values())
    assert twice <= partitions, f"{twice} records read twice (at most one uncommitted per partition)"
    assert committed == end, "the survivors did not commit to the end"


@pytest.mark.slow
def test_server_killed_mid_stream_keeps_every_acknowledged_record(tmp_path, spawn):
    """kill -9 of `kafkalite serve` while a confluent-kafka producer (acks=all) streams, three
    times, each followed by a restart on the same port: every acknowledged record is stored
    exactly once (the producer is idempotent: retries after a restart are deduplicated),
    nothing is stored that was not sent, and the producer itself never fails."""
    data, port = tmp_path / "data", free_port()
    kafkalite.Admin(str(data)).create_topic("stream", partitions=2)
    server = serve(spawn, data, port)
    assert INIT_PRODUCER_ID in served_api_keys(f"127.0.0.1:{port}")
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "acks": "all",
            "linger.ms": 2,
            "enable.idempotence": True,
            "message.timeout.ms": 60_000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
        }
    )
    acked: list[bytes] = []
    errors: list = []

    def delivered(err, msg) -> None:
        (errors if err is not None else acked).append(err or msg.value())

    sent = 0

    def produce_for(seconds: float) -> None:
        nonlocal sent
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            producer.produce("stream", b"%d" % sent, key=b"%d" % (sent % 7), on_delivery=delivered)
            sent += 1
            producer.poll(0)
            time.sleep(0.0005)  # ~1,500 records/s: a stream, not a flood

    for _ in range(3):
        produce_for(1.0)
        server.kill()  # SIGKILL, requests in flight
        server.wait()
        produce_for(0.3)  # while it is down: queued, retried after the restart
        server = serve(spawn, data, port)
    produce_for(0.5)
    assert producer.flush(60) == 0
    assert errors == [] and len(acked) == sent
    server.kill()
    server.wait()
    total = sum(info.end_offset for info in kafkalite.Admin(str(data)).describe_topic("stream").partitions)
    with kafkalite.Server(data) as fresh:  # everything the killed servers left, read back over the network
        stored = [m.value() for m in confluent_read(fresh, "stream", total, partitions=2, timeout=60)]
    assert len(stored) == total
    counts = collections.Counter(stored)
    assert set(acked) <= set(counts), f"{len(set(acked) - set(counts))} acknowledged records lost"
    assert set(counts) <= {b"%d" % i for i in range(sent)}
    duplicates = len(stored) - len(counts)
    print(f"{sent} records sent and acknowledged across 3 kill -9 restarts; {duplicates} stored twice")
    assert duplicates == 0
