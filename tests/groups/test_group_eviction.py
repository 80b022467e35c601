"""A member that loses its partitions (evicted after a stall, or its revocation listener raised)
stops fetching them at once: it never returns a record of a partition that another member
owns, and the listener's error still reaches the caller, once (issue 9 point 2)."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import defaultdict

import pytest
from kafkalite import Admin, Consumer, Producer, TopicPartition
from kafkalite.errors import CommitFailedError

# A member with the README's CommitOnRevoke listener (no on_partitions_lost, so a loss calls
# on_partitions_revoked, whose commit then raises). Logs, unbuffered:
#   ASSIGN ns t:p,..   REVOKE ns t:p,..   R ns p offset   STALL ns   ERR ns   READY pid
# It stalls once for 1.6 s when its STALL_FILE appears (the stalling member has
# max_poll_interval_ms=1000; the other one 60 s, so that a loaded machine does not evict it).
MEMBER = r"""
import os, sys, time
from kafkalite import Consumer
from kafkalite.errors import CommitFailedError

data, log_file, stall_file, stop_file, max_poll_interval_ms = sys.argv[1:6]
fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
emit = lambda line: os.write(fd, (line + "\n").encode())
consumer = Consumer(data, group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                    max_poll_interval_ms=int(max_poll_interval_ms), session_timeout_ms=6000, heartbeat_interval_ms=200)

class CommitOnRevoke:
    def on_partitions_revoked(self, revoked):
        emit(f"REVOKE {time.monotonic_ns()} " + ",".join(f"{t}:{p}" for t, p in revoked))
        consumer.commit()
    def on_partitions_assigned(self, assigned):
        emit(f"ASSIGN {time.monotonic_ns()} " + ",".join(f"{t}:{p}" for t, p in assigned))

consumer.subscribe(["t"], listener=CommitOnRevoke())
emit(f"READY {os.getpid()}")
while not os.path.exists(stop_file):
    try:
        batches = consumer.poll(timeout_ms=20, max_records=50)
    except CommitFailedError:
        emit(f"ERR {time.monotonic_ns()}")
        continue
    now = time.monotonic_ns()
    for tp, records in batches.items():
        for r in records:
            emit(f"R {now} {tp.partition} {r.offset}")
    try:
        if batches:
            consumer.commit()
    except CommitFailedError:
        emit(f"ERR {time.monotonic_ns()}")
    if os.path.exists(stall_file):
        os.unlink(stall_file)
        emit(f"STALL {time.monotonic_ns()}")
        time.sleep(1.6)
consumer.close(autocommit=False)
emit("CLOSED")
"""


def _events(path: str) -> list[list[str]]:
    return [line.split(" ") for line in open(path).read().splitlines()] if os.path.exists(path) else []


def _wait_for(path: str, kind: str, count: int = 1, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for e in _events(path) if e[0] == kind) >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path}: no {kind} x{count} within {timeout}s: {_events(path)[-20:]}")


def ownership(path: str) -> tuple[dict[str, list[tuple[int, int]]], list[tuple[int, str]]]:
    """Per partition, the intervals this member held it (by its own log; a stall ends every
    interval: it reads nothing while stalled and is evicted meanwhile), and its reads. Fails
    on a read of a partition the member did not hold."""
    held: dict[str, int] = {}
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    reads = []
    for e in _events(path):
        if e[0] == "ASSIGN":
            for tp in filter(None, e[2].split(",") if len(e) > 2 else []):
                held.setdefault(tp, int(e[1]))
        elif e[0] == "REVOKE":
            for tp in filter(None, e[2].split(",") if len(e) > 2 else []):
                if tp in held:
                    spans[tp].append((held.pop(tp), int(e[1])))
        elif e[0] == "STALL":
            for tp, start in held.items():
                spans[tp].append((start, int(e[1])))
            held.clear()
        elif e[0] == "R":
            tp = f"t:{e[2]}"
            assert tp in held, f"{os.path.basename(path)} read {tp}@{e[3]} without owning it"
            reads.append((int(e[1]), tp))
    for tp, start in held.items():
        spans[tp].append((start, 2**63))
    return spans, reads


@pytest.mark.slow
def test_a_member_evicted_after_a_stall_stops_reading_its_old_partitions(tmp_path, spawn):
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", 2)
    stop_producing = threading.Event()

    def produce() -> None:
        with Producer(data, linger_ms=1) as producer:
            i = 0
            while not stop_producing.is_set():
                producer.send("t", value=b"%d" % i, partition=i % 2)
                i += 1
                time.sleep(0.002)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    stop = str(tmp_path / "stop")
    logs = {name: str(tmp_path / f"{name}.log") for name in ("stalling", "other")}
    procs = {}
    try:
        for name, log_file in logs.items():
            max_poll = "1000" if name == "stalling" else "60000"
            procs[name] = spawn.code(MEMBER, data, log_file, tmp_path / f"{name}.stall", stop, max_poll)
            _wait_for(log_file, "ASSIGN")
        time.sleep(0.5)  # both members own a partition and read it
        open(str(tmp_path / "stalling.stall"), "w").close()
        _wait_for(logs["stalling"], "STALL")
        # Evicted during the stall (max_poll_interval_ms), the other member takes both partitions;
        # after the stall the listener's commit fails (reaching poll's caller), the member rejoins
        # and gets a partition back through the hand-over.
        _wait_for(logs["stalling"], "ERR", timeout=10)
        _wait_for(logs["stalling"], "ASSIGN", count=2, timeout=10)
        time.sleep(1.0)
    finally:
        open(stop, "w").close()
        codes = {name: proc.wait(timeout=30) for name, proc in procs.items()}
        stop_producing.set()
        producer.join()

    stalled_spans, stalled_reads = ownership(logs["stalling"])
    other_spans, other_reads = ownership(logs["other"])
    stall_at = next(int(e[1]) for e in _events(logs["stalling"]) if e[0] == "STALL")
    rejoined_at = next(
        int(e[1]) for e in _events(logs["stalling"]) if e[0] == "ASSIGN" and int(e[1]) > stall_at
    )
    # The loss after the stall reaches the caller once; then the member rejoins.
    assert (
        sum(1 for e in _events(logs["stalling"]) if e[0] == "ERR" and stall_at < int(e[1]) < rejoined_at) == 1
    )
    assert any(t > stall_at for t, _ in stalled_reads), "the evicted member read nothing after rejoining"
    assert {tp for t, tp in other_reads if t > stall_at} == {"t:0", "t:1"}, (
        "the other member did not take over"
    )
    for tp in ("t:0", "t:1"):
        spans = sorted(
            [(s, e, "stalling") for s, e in stalled_spans[tp]] + [(s, e, "other") for s, e in other_spans[tp]]
        )
        for (_s1, e1, m1), (s2, _e2, m2) in itertools.pairwise(spans):
            assert e1 <= s2, f"{tp}: {m1} and {m2} owned it at once"
        for t, read_tp in stalled_reads:
            if read_tp == tp:
                assert not any(s <= t < e for s, e in other_spans[tp]), (
                    f"the evicted member read {tp} while the other owned it"
                )
    assert codes == {"stalling": 0, "other": 0}


class RaisingListener:
    def __init__(self) -> None:
        self.revoked: list[list[TopicPartition]] = []
        self.assigned: list[list[TopicPartition]] = []

    def on_partitions_revoked(self, revoked):
        self.revoked.append(sorted(revoked))
        raise RuntimeError("listener failed")

    def on_partitions_assigned(self, assigned):
        self.assigned.append(sorted(assigned))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_raising_revocation_listener_still_releases_the_partition(tmp_path, strategy):
    data = str(tmp_path)
    Admin(data).create_topic("t", 2)
    with Producer(data) as producer:
        for i in range(20):
            producer.send("t", value=b"%d" % i, partition=i % 2)
    listener = RaisingListener()
    a = Consumer(data, group_id="g", auto_offset_reset="earliest", partition_assignment_strategy=strategy)
    a.subscribe(["t"], listener=listener)
    assert sum(len(v) for v in a.poll(100).values()) == 20
    b = Consumer(data, group_id="g", auto_offset_reset="earliest", partition_assignment_strategy=strategy)
    b.subscribe(["t"])
    b.poll(10)
    with pytest.raises(RuntimeError, match="listener failed"):
        a.poll(10)  # the error reaches the caller...
    with Producer(data) as producer:
        for i in range(20, 40):
            producer.send("t", value=b"%d" % i, partition=i % 2)
    got_a: dict[int, int] = defaultdict(int)
    got_b: dict[int, int] = defaultdict(int)
    for _ in range(30):  # ...once; the partition was released and b takes it
        for tp, records in a.poll(10).items():
            got_a[tp.partition] += len(records)
        for tp, records in b.poll(10).items():
            got_b[tp.partition] += len(records)
    assert len(a.assignment()) == 1 and len(b.assignment()) == 1
    assert a.assignment() | b.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
    mine = next(iter(a.assignment())).partition
    assert set(got_a) <= {mine} and set(got_b) == {1 - mine}
    assert got_a[mine] == 10 and got_b[1 - mine] > 0  # a no longer reads the partition it gave up
    if strategy == "range":  # eager: everything was revoked; the kept partition is re-announced
        assert listener.assigned[-1] == sorted(a.assignment())
    else:  # cooperative: only the moved partition was revoked
        assert listener.revoked[0] == [TopicPartition("t", 1 - mine)] and len(listener.assigned) == 1
    with pytest.raises(RuntimeError):
        a.close()  # its revocation listener raises again, after the consumer closed
    b.close()


def test_close_leaves_the_group_even_when_the_listener_raises(tmp_path):
    data = str(tmp_path)
    Admin(data).create_topic("t", 2)
    a = Consumer(data, group_id="g")
    a.subscribe(["t"], listener=RaisingListener())
    a.poll(10)
    with pytest.raises(RuntimeError):
        a.close()
    assert a._closed
    b = Consumer(data, "t", group_id="g")
    deadline = time.monotonic() + 5
    while len(b.assignment()) < 2 and time.monotonic() < deadline:
        b.poll(10)
    assert len(b.assignment()) == 2
    b.close()


def test_a_member_that_left_for_max_poll_interval_fetches_nothing(tmp_path):
    """The heartbeat thread left the group; the member's very next fetch is empty, before any
    rebalance step ran, and the positions of what it owned are dropped."""
    data = str(tmp_path)
    Admin(data).create_topic("t", 1)
    with Producer(data) as producer:
        producer.send("t", value=b"x")
    a = Consumer(
        data,
        "t",
        group_id="g",
        auto_offset_reset="earliest",
        max_poll_interval_ms=300,
        heartbeat_interval_ms=100,
        session_timeout_ms=1000,
    )
    a.poll(100)
    time.sleep(0.8)
    assert a._member is not None and a._member._left
    assert a._fetchable() == []
    assert a._positions == {}
    a.close()


def test_an_evicted_member_with_a_commit_listener_raises_once(tmp_path):
    """In one process: the lost partitions are dropped before CommitFailedError leaves poll()."""
    data = str(tmp_path)
    Admin(data).create_topic("t", 1)
    with Producer(data) as producer:
        for i in range(5):
            producer.send("t", value=b"%d" % i)
    stuck = Consumer(
        data,
        group_id="g",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_interval_ms=300,
        heartbeat_interval_ms=100,
        session_timeout_ms=1000,
    )

    class CommitOnRevoke:
        def on_partitions_revoked(self, revoked):
            stuck.commit()

        def on_partitions_assigned(self, assigned):
            pass

    stuck.subscribe(["t"], listener=CommitOnRevoke())
    assert sum(len(v) for v in stuck.poll(100).values()) == 5
    time.sleep(0.8)
    other = Consumer(data, "t", group_id="g", auto_offset_reset="earliest")
    deadline = time.monotonic() + 5
    while not other.assignment() and time.monotonic() < deadline:
        other.poll(10)
    assert other.assignment() == {TopicPartition("t", 0)}
    with Producer(data) as producer:
        producer.send("t", value=b"late")
    with pytest.raises(CommitFailedError):
        stuck.poll(10)
    for _ in range(10):
        assert stuck.poll(10) == {}  # the partition is the other member's: nothing read
    assert stuck.assignment() == set()
    stuck.close()
    other.close()
