"""Consumer groups across processes: membership, hand-over, fencing and committed offsets."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import threading
import time
from collections import defaultdict
from datetime import datetime

import pytest
from kafkalite import Admin, Consumer, Producer, TopicPartition
from kafkalite.errors import CommitFailedError, InvalidConfigError
from kafkalite.groups.offsets import (
    OFFSETS_TOPIC,
    OffsetStore,
    decode_key,
    decode_value,
    java_string_hash,
    offsets_partition,
)


def start_member(spawn, data_dir: str, log_file: str, strategy: str) -> subprocess.Popen:
    proc = spawn(
        "group_member_proc.py", data_dir, log_file, "g", strategy, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if os.path.exists(log_file) and "READY" in open(log_file).read():
            return proc
        time.sleep(0.02)
    raise AssertionError(f"member {log_file} did not start")


def parse(log_file: str):
    events = []  # (kind, ns or None, payload)
    for line in open(log_file).read().splitlines():
        kind, _, rest = line.partition(" ")
        events.append((kind, rest))
    return events


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_three_members_kill_join_and_leave(tmp_path, strategy, spawn):
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", 6)
    produced = threading.Event()
    enough = threading.Event()

    def produce() -> None:
        # Until the last membership change is done (not a fixed count: on a loaded machine the
        # members start slowly, and the newcomers must still find records nobody else read).
        with Producer(data, linger_ms=5) as producer:
            i = 0
            while not enough.is_set() or i < 3000:
                producer.send("t", key=b"key-%d" % i, value=b"value-%d" % i)
                if i % 100 == 0:
                    time.sleep(0.05)
                i += 1
        produced.set()

    threading.Thread(target=produce, daemon=True).start()
    logs = {name: str(tmp_path / f"{name}.log") for name in "ABCD"}
    procs = {name: start_member(spawn, data, logs[name], strategy) for name in "ABC"}
    time.sleep(1.0)
    procs["B"].send_signal(signal.SIGKILL)
    procs["B"].wait()
    killed_at = time.monotonic_ns()
    time.sleep(0.5)
    procs["D"] = start_member(spawn, data, logs["D"], strategy)
    time.sleep(1.0)
    procs["A"].send_signal(signal.SIGTERM)
    assert procs["A"].wait(timeout=30) == 0
    time.sleep(0.5)
    enough.set()
    assert produced.wait(timeout=60)
    # Wait until the survivors committed everything.
    store = OffsetStore(data, "g")
    ends = Consumer(data).end_offsets([TopicPartition("t", p) for p in range(6)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        committed = store.load()
        if all(committed.get(("t", p), (0, ""))[0] >= ends[TopicPartition("t", p)] for p in range(6)):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"not everything was committed: {store.load()} vs {ends}")
    for name in "CD":
        procs[name].send_signal(signal.SIGTERM)
        assert procs[name].wait(timeout=30) == 0

    # Ownership intervals per partition, from each member's own log.
    intervals = defaultdict(list)  # tp -> [(start, end, member)]
    processed = defaultdict(list)  # (p, offset) -> [member]
    last_commit = {}  # (member, p) -> offset
    for name, path in logs.items():
        held = {}
        for kind, rest in parse(path):
            if kind == "ASSIGN":
                ns, _, tps = rest.partition(" ")
                for tp in filter(None, tps.split(",")):
                    held.setdefault(tp, int(ns))
            elif kind == "REVOKE":
                ns, _, tps = rest.partition(" ")
                for tp in filter(None, tps.split(",")):
                    if tp in held:
                        intervals[tp].append((held.pop(tp), int(ns), name))
            elif kind == "R":
                _, p, off = rest.split()
                assert f"t:{p}" in held, f"{name} processed t:{p} without owning it"
                processed[(int(p), int(off))].append(name)
            elif kind == "C":
                _, p, off = rest.split()
                last_commit[(name, int(p))] = int(off)
            elif kind == "FENCED":
                raise AssertionError(f"{name} was fenced: {rest}")
        end = killed_at if name == "B" else None
        assert end is not None or not held or name in "CD", f"{name} ended owning {held}"
        for tp, start in held.items():
            intervals[tp].append((start, end or 2**63, name))
    for tp, spans in intervals.items():
        spans.sort()
        for (_s1, e1, m1), (s2, _e2, m2) in itertools.pairwise(spans):
            assert e1 <= s2, f"{tp}: {m1} and {m2} owned it at once"
    # Every record processed at least once; duplicates only after the dead member's last commit.
    for p in range(6):
        for off in range(ends[TopicPartition("t", p)]):
            who = processed.get((p, off))
            assert who, f"t:{p}@{off} was never processed"
            if len(who) > 1:
                assert who.count("B") == 1 and len(who) == 2, f"t:{p}@{off} processed by {who}"
                assert off >= last_commit.get(("B", p), 0), f"t:{p}@{off} duplicated below B's last commit"
    assert any(len(w) == 1 and w[0] in "CD" for w in processed.values())  # newcomers did take over


@pytest.mark.slow
def test_a_late_commit_from_an_evicted_member_is_rejected(tmp_path):
    data = str(tmp_path)
    Admin(data).create_topic("t", 2)
    with Producer(data) as producer:
        for i in range(10):
            producer.send("t", value=b"%d" % i, partition=i % 2)
    stuck = Consumer(
        data,
        group_id="g",
        auto_offset_reset="earliest",
        max_poll_interval_ms=300,
        heartbeat_interval_ms=100,
        session_timeout_ms=1000,
    )
    stuck.subscribe(["t"])
    assert sum(len(v) for v in stuck.poll(200).values()) == 10
    other = Consumer(data, group_id="g", auto_offset_reset="earliest")
    other.subscribe(["t"])
    time.sleep(0.8)  # stuck stops polling: its heartbeat thread leaves the group
    deadline = time.monotonic() + 5
    while len(other.assignment()) < 2 and time.monotonic() < deadline:
        other.poll(50)
    assert len(other.assignment()) == 2
    with pytest.raises(CommitFailedError, match="removed from the group"):
        stuck.commit()
    assert OffsetStore(data, "g").load() == {}
    # Its next poll rejoins with a new member id and gets a share again (polled until then: 20
    # rounds of 2 x 20 ms failed under load).
    deadline = time.monotonic() + 30
    while not (len(stuck.assignment()) == 1 == len(other.assignment())) and time.monotonic() < deadline:
        stuck.poll(20)
        other.poll(20)
    assert len(stuck.assignment()) == 1 and len(other.assignment()) == 1
    stuck.close()
    other.close()


def test_rebalance_listener_sees_revoke_before_the_new_owner_starts(tmp_path):
    data = str(tmp_path)
    Admin(data).create_topic("t", 4)
    events = []

    class Listener:
        def __init__(self, name):
            self.name = name

        def on_partitions_revoked(self, tps):
            events.append((self.name, "revoked", sorted(p for _, p in tps)))

        def on_partitions_assigned(self, tps):
            events.append((self.name, "assigned", sorted(p for _, p in tps)))

    a = Consumer(data, group_id="g", partition_assignment_strategy="cooperative-sticky")
    a.subscribe(["t"], listener=Listener("a"))
    b = Consumer(data, group_id="g", partition_assignment_strategy="cooperative-sticky")
    b.subscribe(["t"], listener=Listener("b"))
    b.poll(10)  # b wants 2 partitions, but a still owns them: nothing yet
    assert b.assignment() == set()
    a.poll(10)  # a revokes (cooperative: only the two that move) and hands them over
    b.poll(10)
    assert events == [("a", "assigned", [0, 1, 2, 3]), ("a", "revoked", [2, 3]), ("b", "assigned", [2, 3])]
    assert a.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
    a.close()
    b.poll(10)
    assert b.assignment() == {TopicPartition("t", p) for p in range(4)}
    b.close()


def test_members_without_a_common_strategy_are_refused(tmp_path):
    data = str(tmp_path)
    Admin(data).create_topic("t", 1)
    a = Consumer(data, "t", group_id="g", partition_assignment_strategy="range")
    with pytest.raises(InvalidConfigError, match="share no partition_assignment_strategy"):
        Consumer(data, "t", group_id="g", partition_assignment_strategy="roundrobin")
    with pytest.raises(InvalidConfigError, match="partition_assignment_strategy must name"):
        Consumer(data, group_id="g", partition_assignment_strategy="fastest")
    a.close()


def assigned_consumer(data: str, group_id: str) -> Consumer:
    """A consumer outside the group's membership (assign()) on a fresh one-partition topic."""
    Admin(data).create_topic("t", 1)
    consumer = Consumer(data, group_id=group_id)
    consumer.assign([TopicPartition("t", 0)])
    return consumer


def test_assign_mode_commits_only_to_an_empty_group(tmp_path):
    data = str(tmp_path)
    loner = assigned_consumer(data, "g")
    loner.commit({TopicPartition("t", 0): 0})
    member = Consumer(data, "t", group_id="g")
    with pytest.raises(CommitFailedError, match="active members"):
        loner.commit({TopicPartition("t", 0): 0})
    member.close()
    loner.commit({TopicPartition("t", 0): 0})
    loner.close()


def test_offsets_are_kafka_records_in_consumer_offsets(tmp_path):
    data = str(tmp_path)
    c = assigned_consumer(data, "my-group")
    c.commit({TopicPartition("t", 0): 42})
    c.close()
    # Kafka's placement and encoding, read back with kafka-python's decoder.
    assert java_string_hash("my-group") == hash_java("my-group")
    part = offsets_partition("my-group")
    from conftest import kafka_python_records

    records = kafka_python_records(os.path.join(data, f"{OFFSETS_TOPIC}-{part}"))
    assert len(records) == 1
    _, _, key, value, _ = records[0]
    assert decode_key(key) == ("my-group", "t", 0)
    assert decode_value(value) == (42, "")
    assert key[:2] == b"\x00\x01" and value[:2] == b"\x00\x03"


def hash_java(s: str) -> int:
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def test_groups_command_line(tmp_path, capsys):
    from kafkalite.cli import main

    data = str(tmp_path)
    Admin(data).create_topic("t", 2)
    with Producer(data) as producer:
        for i in range(10):
            producer.send("t", value=b"%d" % i, partition=i % 2, timestamp_ms=1_000_000 + i)
    member = Consumer(data, "t", group_id="g", auto_offset_reset="earliest")
    member.poll(100)
    member.commit({TopicPartition("t", 0): 3, TopicPartition("t", 1): 5})
    run = lambda *argv: main(["--data-dir", data, "groups", *argv])  # noqa: E731
    assert run("list") == 0 and capsys.readouterr().out.split() == ["g"]
    assert run("describe", "g") == 0
    out = capsys.readouterr().out
    assert "state Stable" in out and "1 member(s)" in out
    row0 = next(line.split() for line in out.splitlines() if line.startswith("g ") and line.split()[2] == "0")
    assert row0[:6] == ["g", "t", "0", "3", "5", "2"] and row0[6] == member._member.member_id
    # An active group cannot be reset or deleted.
    assert run("reset-offsets", "g", "--all-topics", "--to-earliest", "--execute") == 1
    assert "active member" in capsys.readouterr().err
    member.close(autocommit=False)
    assert run("reset-offsets", "g", "--all-topics", "--to-latest") == 0  # dry run
    assert "dry run" in capsys.readouterr().out
    assert OffsetStore(data, "g").load()[("t", 0)][0] == 3
    for spec, expect in [
        (["--to-earliest"], 0),
        (["--to-latest"], 5),
        (["--to-offset", "99"], 5),  # clamped to the end
        (["--to-offset", "2"], 2),
        (["--shift-by", "-1"], 1),
        (["--to-datetime", datetime.fromtimestamp(1_000_004 / 1000).isoformat()], 2),
    ]:
        capsys.readouterr()
        assert run("reset-offsets", "g", "--topic", "t:0", *spec, "--execute") == 0
        assert OffsetStore(data, "g").load()[("t", 0)][0] == expect, spec
    assert run("delete", "g") == 0
    capsys.readouterr()
    assert run("list") == 0 and capsys.readouterr().out == ""
    assert run("describe", "g") == 1


def test_a_stopped_member_is_evicted_after_session_timeout(tmp_path, spawn):
    """SIGSTOP: alive (its flock held) but silent; the others take over after session_timeout_ms."""
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", 2)
    code = (
        "import sys, time\nfrom kafkalite import Consumer\n"
        "c = Consumer(sys.argv[1], 't', group_id='g', session_timeout_ms=1000, heartbeat_interval_ms=100)\n"
        "c.poll(0)\nprint('joined', flush=True)\n"
        "while True:\n    c.poll(50)\n"
    )
    proc = spawn.code(code, data, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"joined\n"
    other = Consumer(data, "t", group_id="g", session_timeout_ms=1000, heartbeat_interval_ms=100)
    deadline = time.monotonic() + 10
    while len(other.assignment()) != 1 and time.monotonic() < deadline:
        other.poll(20)
    assert len(other.assignment()) == 1
    proc.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        while len(other.assignment()) < 2 and time.monotonic() < stopped + 10:
            other.poll(20)
        waited = time.monotonic() - stopped
        assert len(other.assignment()) == 2
        assert waited >= 0.9  # not before the session timeout: it was alive, only silent
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()
        other.close()
