"""Static members of embedded groups (issue 24 item 2): ``Consumer(..., group_instance_id=...)``
has the meaning of Kafka's ``group.instance.id`` (KIP-345), as ``kafkalite serve`` gives it to
network members. A static member killed with SIGKILL is not presumed dead until its session
times out: its partitions wait for it, and its restart takes them back in the same generation
without a rebalance. ``close()`` does not leave the group. A second consumer with the same
instance id takes the first one's place and fences it (``FencedInstanceIdError``)."""

from __future__ import annotations

import glob
import os
import queue
import signal
import subprocess
import threading
import time

import pytest
from kafkalite import Admin, Consumer, TopicPartition
from kafkalite.errors import CommitFailedError, FencedInstanceIdError, InvalidConfigError, InvalidTypeError
from kafkalite.groups.member import describe, group_dir

TOPIC = "t"
PARTITIONS = 4
GROUP = "g"

#: A static member in a child process: prints "ASSIGN p,p,.." / "REVOKE p,p,.." lines and polls
#: until killed.
MEMBER = r"""
import sys
from kafkalite import Consumer
data, group, instance, session_ms = sys.argv[1:5]
consumer = Consumer(data, group_id=group, group_instance_id=instance, session_timeout_ms=int(session_ms),
                    heartbeat_interval_ms=200, enable_auto_commit=False)

class Report:
    def on_partitions_revoked(self, revoked):
        print("REVOKE " + ",".join(str(tp.partition) for tp in revoked), flush=True)
    def on_partitions_assigned(self, assigned):
        print("ASSIGN " + ",".join(str(tp.partition) for tp in assigned), flush=True)

consumer.subscribe([sys.argv[5]], listener=Report())
while True:
    consumer.poll(timeout_ms=50)
"""


class Child:
    def __init__(self, spawn, path: str, instance: str, session_ms: int) -> None:
        self.proc = spawn.code(
            MEMBER, path, GROUP, instance, session_ms, TOPIC, stdout=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def next_line(self, timeout: float) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line from the member within {timeout} s") from None

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def owners(path: str) -> dict[str, str]:
    """instance id -> sorted partitions "0,1" it owns, from the group's state."""
    state = describe(path, GROUP)
    by_member = {m: info.get("instance_id") for m, info in state["members"].items()}
    out: dict[str, list[int]] = {}
    for key, member in state["owners"].items():
        out.setdefault(by_member.get(member) or member, []).append(int(key.rpartition(":")[2]))
    return {i: ",".join(map(str, sorted(ps))) for i, ps in out.items()}


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"{what} not within {timeout} s")


def shared(path: str) -> dict[str, str] | None:
    """The owners once "a" and "b" hold the whole topic between them."""
    o = owners(path)
    held = sorted(int(p) for ps in o.values() for p in ps.split(",") if p)
    return o if set(o) == {"a", "b"} and held == list(range(PARTITIONS)) else None


def test_killed_static_member_restarts_into_its_place_without_a_rebalance(spawn, tmp_path):
    """kill -9 of static member "b", restarted with the same instance id within the session
    timeout: the same generation, the same partitions, nothing revoked from "a". Without static
    membership the death is noticed within 50 ms and the group rebalances (twice)."""
    path = str(tmp_path)
    Admin(path).create_topic(TOPIC, partitions=PARTITIONS)
    a = Child(spawn, path, "a", 30_000)
    b = Child(spawn, path, "b", 30_000)
    before = wait_until(lambda: shared(path), 30, "a and b sharing the topic")
    generation = describe(path, GROUP)["generation"]
    # "a" reports its share in its next poll, after the group's state shows it: wait for that
    # line, so that a late one is not taken for a rebalance below.
    while a.next_line(30) != f"ASSIGN {before['a']}":
        pass
    while not a.lines.empty():
        a.lines.get()
    b.kill()
    time.sleep(1)  # 20 liveness probes of "a": a non-static member would be evicted by now
    assert describe(path, GROUP)["generation"] == generation
    assert owners(path) == before, "b's partitions did not wait for it"

    started = time.monotonic()
    b2 = Child(spawn, path, "b", 30_000)
    assert b2.next_line(20) == f"ASSIGN {before['b']}"
    assert time.monotonic() - started < 15  # a new interpreter and one join, against the 30 s session
    state = describe(path, GROUP)
    assert state["generation"] == generation
    assert sorted(info["instance_id"] for info in state["members"].values()) == ["a", "b"]
    assert owners(path) == before
    time.sleep(0.5)
    assert a.lines.empty(), f"a was rebalanced: {a.next_line(1)}"
    a.kill()
    b2.kill()


def test_static_close_does_not_leave_and_the_session_timeout_evicts(tmp_path):
    """A static member's close() keeps its place: its partitions wait for it, then move at its
    session timeout. (A dynamic member's close() hands them over at once.)"""
    path = str(tmp_path)
    Admin(path).create_topic(TOPIC, partitions=PARTITIONS)
    session_ms = 2_000
    config = {"group_id": GROUP, "session_timeout_ms": session_ms, "heartbeat_interval_ms": 100}
    a = Consumer(path, TOPIC, group_instance_id="a", **config)
    b = Consumer(path, TOPIC, group_instance_id="b", **config)
    try:
        wait_until(
            lambda: (a.poll(timeout_ms=10), b.poll(timeout_ms=10)) and shared(path), 20, "a and b sharing"
        )
        mine = set(a.assignment())
        generation = describe(path, GROUP)["generation"]
        b.close()
        closed = time.monotonic()
        while time.monotonic() - closed < session_ms / 1000 * 0.75:
            a.poll(timeout_ms=20)
            assert set(a.assignment()) == mine, "b's partitions moved before its session expired"
        assert describe(path, GROUP)["generation"] == generation
        wait_until(
            lambda: a.poll(timeout_ms=20) is not None and len(a.assignment()) == PARTITIONS,
            20,
            "a taking all",
        )
        assert time.monotonic() - closed >= session_ms / 1000 * 0.75
        assert [info["instance_id"] for info in describe(path, GROUP)["members"].values()] == ["a"]
    finally:
        a.close()
        b.close()


def test_a_closed_static_member_keeps_the_group_from_outside_commits_until_its_session_expires(tmp_path):
    """The group is not empty while a static member's place waits for it: a commit from outside
    the group (``assign()``) is refused, as Kafka refuses it (it would move the offsets the member
    resumes from); once its session expired, the commit is accepted."""
    path = str(tmp_path)
    Admin(path).create_topic(TOPIC, partitions=PARTITIONS)
    session_ms = 1_500
    member = Consumer(
        path,
        TOPIC,
        group_id=GROUP,
        group_instance_id="s",
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=100,
    )
    wait_until(lambda: member.poll(timeout_ms=10) is not None and member.assignment(), 20, "join")
    member.close()
    outside = Consumer(path, group_id=GROUP)
    try:
        outside.assign([TopicPartition(TOPIC, 0)])
        with pytest.raises(CommitFailedError, match="active members"):
            outside.commit({TopicPartition(TOPIC, 0): 3})
        time.sleep(session_ms / 1000 + 0.5)
        outside.commit({TopicPartition(TOPIC, 0): 3})
        assert outside.committed(TopicPartition(TOPIC, 0)) == 3
    finally:
        outside.close()


def test_a_second_consumer_with_the_same_instance_id_fences_the_first(tmp_path):
    path = str(tmp_path)
    Admin(path).create_topic(TOPIC, partitions=PARTITIONS)
    config = {"group_id": GROUP, "group_instance_id": "x", "enable_auto_commit": False}
    first = Consumer(path, TOPIC, **config)
    second = None
    try:
        wait_until(
            lambda: first.poll(timeout_ms=10) is not None and len(first.assignment()) == PARTITIONS,
            20,
            "join",
        )
        generation = describe(path, GROUP)["generation"]
        second = Consumer(path, TOPIC, **config)
        wait_until(
            lambda: second.poll(timeout_ms=10) is not None and len(second.assignment()) == PARTITIONS,
            20,
            "take",
        )
        assert describe(path, GROUP)["generation"] == generation
        with pytest.raises(FencedInstanceIdError):
            first.poll(timeout_ms=10)
        with pytest.raises(FencedInstanceIdError):
            first.commit({TopicPartition(TOPIC, 0): 1})
        second.commit({TopicPartition(TOPIC, 0): 1})
        assert second.committed(TopicPartition(TOPIC, 0)) == 1
        first.close()  # fenced: it has no place to keep, and leaves no member file behind
        assert len(glob.glob(os.path.join(group_dir(path, GROUP), "*.member"))) == 1
    finally:
        first.close()
        if second is not None:
            second.close()


def test_group_instance_id_is_checked(tmp_path):
    Admin(str(tmp_path)).create_topic(TOPIC)
    with pytest.raises(InvalidConfigError, match="group_instance_id requires group_id"):
        Consumer(str(tmp_path), TOPIC, group_instance_id="x")
    with pytest.raises(InvalidTypeError):
        Consumer(str(tmp_path), TOPIC, group_id=GROUP, group_instance_id=5)
    with pytest.raises(InvalidConfigError):
        Consumer(str(tmp_path), TOPIC, group_id=GROUP, group_instance_id="")


def test_static_member_past_max_poll_interval_rejoins_into_its_own_place(tmp_path):
    """Past ``max_poll_interval_ms`` a static member sends no leave (as Kafka's static members):
    it stops heartbeating and owns nothing; its next poll, within the session timeout, takes its
    place back in the same generation. (A dynamic member leaves, and the group rebalances.)"""
    path = str(tmp_path)
    Admin(path).create_topic(TOPIC, partitions=PARTITIONS)
    member = Consumer(
        path,
        TOPIC,
        group_id=GROUP,
        group_instance_id="slow",
        session_timeout_ms=10_000,
        heartbeat_interval_ms=100,
        max_poll_interval_ms=300,
    )
    try:
        wait_until(
            lambda: member.poll(timeout_ms=10) is not None and len(member.assignment()) == PARTITIONS,
            20,
            "join",
        )
        generation = describe(path, GROUP)["generation"]
        time.sleep(0.8)  # past max_poll_interval_ms: the heartbeat thread gives up the place
        state = describe(path, GROUP)
        assert [info["instance_id"] for info in state["members"].values()] == ["slow"]
        assert state["generation"] == generation
        wait_until(
            lambda: member.poll(timeout_ms=10) is not None and len(member.assignment()) == PARTITIONS,
            20,
            "back",
        )
        state = describe(path, GROUP)
        assert state["generation"] == generation
        assert [info["instance_id"] for info in state["members"].values()] == ["slow"]
    finally:
        member.close()
