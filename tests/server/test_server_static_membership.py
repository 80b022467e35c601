"""Static membership (KIP-345, issue 24 item 2) in ``kafkalite serve``'s classic groups, with
kafka-python's ``group_instance_id`` in child processes that are killed with SIGKILL, and raw
wire requests (kafka-python's protocol classes) for what a client library hides:

- a static member killed and restarted with the same instance id within the session timeout
  takes its old place: same generation, same partitions, no rebalance of the other member, fast;
- the killed member's id is fenced: FENCED_INSTANCE_ID on Heartbeat, SyncGroup and OffsetCommit
  that name the instance id (UNKNOWN_MEMBER_ID without it);
- DescribeGroups v4+ shows the instance ids;
- LeaveGroup v3+ by instance id alone removes the member and rebalances at once;
- a static member that never comes back is evicted when its session times out;
- (marker ``broker``) the Java client's static member restarts without a rebalance too."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable

import kafkalite
import pytest
from kafkalite.server import Server

pytest.importorskip("kafka")
from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from server_wire import Wire

# Every test here alone under pytest-xdist: twice a lone kafka-python static member (stable_pair's
# first, in this test and in the session-timeout one) reported no assignment in 60 s beside a busy
# worker (a CI at load 3 among them), never in a one-process run; not understood yet (issue 23's
# note), so the module's 2 minutes run alone rather than fail a run.
pytestmark = pytest.mark.serial

TOPIC = "events"
PARTITIONS = 4
GROUP = "static-group"
FENCED_INSTANCE_ID = 82
UNKNOWN_MEMBER_ID = 25

#: A kafka-python consumer with a group.instance.id, in a child process: prints one line per
#: assignment, "ASSIGN <generation> <member id> <partition,...>" (as tests/java-client/
#: StaticMember.java does), and polls until killed.
MEMBER = """
import sys
from kafka import KafkaConsumer, ConsumerRebalanceListener
bootstrap, topic, group, instance, session_ms = sys.argv[1:6]
consumer = None

class Report(ConsumerRebalanceListener):
    def on_partitions_revoked(self, revoked):
        pass

    def on_partitions_assigned(self, assigned):
        generation = consumer._coordinator._generation
        partitions = ",".join(str(p) for p in sorted(tp.partition for tp in assigned))
        print("ASSIGN", generation.generation_id, generation.member_id, partitions, flush=True)

consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, group_instance_id=instance,
                         session_timeout_ms=int(session_ms), heartbeat_interval_ms=500,
                         enable_auto_commit=False, client_id="static-" + instance)
consumer.subscribe([topic], listener=Report())
while True:
    consumer.poll(timeout_ms=100)
"""


#: Starts a static member's process: (spawn, bootstrap servers, instance id, session timeout ms).
Starter = Callable[..., subprocess.Popen]


def kafka_python_member(spawn, bootstrap: str, instance: str, session_ms: int) -> subprocess.Popen:
    return spawn.code(
        MEMBER, bootstrap, TOPIC, GROUP, instance, session_ms, stdout=subprocess.PIPE, text=True
    )


class Member:
    """A static member's child process and the assignments it reported."""

    def __init__(
        self, spawn, server: Server, instance: str, session_ms: int, start: Starter = kafka_python_member
    ) -> None:
        self.instance = instance
        self.proc = start(spawn, server.bootstrap_servers, instance, session_ms)
        self.reports: queue.Queue[dict] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("ASSIGN "):
                _, generation, member, partitions = line.rstrip("\n").split(" ", 3)
                self.reports.put(
                    {
                        "generation": int(generation),
                        "member": member,
                        "partitions": [int(p) for p in partitions.split(",") if p],
                    }
                )

    def next_report(self, timeout: float) -> dict:
        try:
            return self.reports.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"member {self.instance} reported no assignment within {timeout} s"
            ) from None

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def stable_pair(
    spawn, server: Server, session_ms: int, start: Starter = kafka_python_member
) -> tuple[Member, Member, dict, dict]:
    """Two static members "a" and "b" and their assignments once they share the topic in one
    generation, and nothing else happened for a second (the restart must not meet a rebalance
    that was still under way)."""
    a = Member(spawn, server, "a", session_ms, start)
    # One member at a time: a kafka-python leader that joined before it had the topic's metadata
    # assigns nothing and rejoins at once; once (in about 15 loaded runs) a second member joining
    # in that window left that leader silent (no SyncGroup outcome logged for 30 s, then evicted),
    # while the same requests sent raw are answered at once. The restart is what is tested here.
    first = a.next_report(60)
    while first["partitions"] != list(range(PARTITIONS)):
        first = a.next_report(60)
    b = Member(spawn, server, "b", session_ms, start)
    last = {"a": first, "b": b.next_report(60)}
    changed = time.monotonic()
    deadline = changed + 60
    while not (
        last["a"]["generation"] == last["b"]["generation"]
        and sorted(last["a"]["partitions"] + last["b"]["partitions"]) == list(range(PARTITIONS))
        and last["a"]["partitions"]
        and last["b"]["partitions"]
        and time.monotonic() - changed >= 1
    ):
        assert time.monotonic() < deadline, f"the two members never shared the topic: {last}"
        for m in (a, b):
            while not m.reports.empty():
                last[m.instance] = m.reports.get()
                changed = time.monotonic()
        time.sleep(0.05)
    return a, b, last["a"], last["b"]


def call(server: Server, request):
    wire = Wire(server.address, timeout=10, client_id="static-test")
    try:
        return wire.call(request, timeout=10)
    finally:
        wire.close()


def describe_members(server: Server) -> dict[str, str | None]:
    """member id -> group instance id, from DescribeGroups v4."""
    response = call(server, DescribeGroupsRequest[4](groups=[GROUP], include_authorized_operations=False))
    (group,) = response.groups
    assert group.error_code == 0
    return {m.member_id: m.group_instance_id for m in group.members}


def setup(path: str) -> None:
    kafkalite.Admin(path).create_topic(TOPIC, partitions=PARTITIONS)


def restart_without_rebalance(
    spawn, server: Server, start: Starter
) -> tuple[Member, Member, dict, dict, dict]:
    """Two static members; "b" is killed with SIGKILL and restarted with the same instance id
    within the session timeout (30 s). Checks that its old generation and partitions come back
    within seconds and that "a" sees no rebalance. Returns a, the restarted b, and the reports."""
    session_ms = 30_000
    a, b, before_a, before_b = stable_pair(spawn, server, session_ms, start)
    b.kill()
    started = time.monotonic()
    b2 = Member(spawn, server, "b", session_ms, start)
    after_b = b2.next_report(session_ms / 1000)
    rejoin_s = time.monotonic() - started
    assert after_b["generation"] == before_b["generation"], (before_b, after_b)
    assert after_b["partitions"] == before_b["partitions"]
    assert after_b["member"] != before_b["member"]
    # Generous: a new process, the client's start, one join and one sync, against the 30 s that
    # the old server waited for the dead member's session.
    assert rejoin_s < 15, f"the restarted static member took {rejoin_s:.1f} s to get its partitions back"
    time.sleep(1.5)  # three heartbeats of "a": a rebalance would have reached it by now
    assert a.reports.empty(), f"the other member was rebalanced: {a.reports.get()}"
    return a, b2, before_a, before_b, after_b


def test_restarted_static_member_takes_its_place_without_a_rebalance(spawn, tmp_path):
    """kill -9 of a static member and its restart with the same instance id, within the session
    timeout: its old generation and partitions come back within seconds, the other member sees no
    rebalance, and the killed member's id is fenced. On the old server the restart started a new
    generation (and waited for the dead member until its session expired)."""
    path = str(tmp_path)
    setup(path)
    with Server(path) as server:
        a, b2, before_a, before_b, after_b = restart_without_rebalance(spawn, server, kafka_python_member)

        # The killed member's id is fenced wherever it names its instance id.
        old, generation = before_b["member"], before_b["generation"]
        hb = call(
            server,
            HeartbeatRequest[3](
                group_id=GROUP, generation_id=generation, member_id=old, group_instance_id="b"
            ),
        )
        assert hb.error_code == FENCED_INSTANCE_ID
        hb = call(
            server,
            HeartbeatRequest[3](
                group_id=GROUP, generation_id=generation, member_id=old, group_instance_id=None
            ),
        )
        assert hb.error_code == UNKNOWN_MEMBER_ID
        sync = call(
            server,
            SyncGroupRequest[3](
                group_id=GROUP, generation_id=generation, member_id=old, group_instance_id="b", assignments=[]
            ),
        )
        assert sync.error_code == FENCED_INSTANCE_ID
        req = OffsetCommitRequest[7]
        commit = call(
            server,
            req(
                group_id=GROUP,
                generation_id_or_member_epoch=generation,
                member_id=old,
                group_instance_id="b",
                topics=[
                    req.OffsetCommitRequestTopic(
                        name=TOPIC,
                        partitions=[
                            req.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                partition_index=before_b["partitions"][0],
                                committed_offset=5,
                                committed_metadata="",
                            )
                        ],
                    )
                ],
            ),
        )
        assert [p.error_code for t in commit.topics for p in t.partitions] == [FENCED_INSTANCE_ID]
        # The restarted member's own heartbeat is fine.
        hb = call(
            server,
            HeartbeatRequest[3](
                group_id=GROUP, generation_id=generation, member_id=after_b["member"], group_instance_id="b"
            ),
        )
        assert hb.error_code == 0

        assert describe_members(server) == {before_a["member"]: "a", after_b["member"]: "b"}
        a.kill()
        b2.kill()


def test_leave_group_by_instance_id_rebalances_at_once(spawn, tmp_path):
    """An administrator removes a killed static member by instance id (LeaveGroup v3, no member
    id, as ``kafka-consumer-groups --delete`` of static members does): the other member gets every
    partition at once, not after the 30 s session timeout. The old server answered
    UNKNOWN_MEMBER_ID and the partitions waited for the session to expire."""
    path = str(tmp_path)
    setup(path)
    with Server(path) as server:
        a, b, _, before_b = stable_pair(spawn, server, 30_000)
        b.kill()
        leave = call(
            server,
            LeaveGroupRequest[3](
                group_id=GROUP,
                members=[LeaveGroupRequest[3].MemberIdentity(member_id="", group_instance_id="b")],
            ),
        )
        assert leave.error_code == 0
        assert [(m.group_instance_id, m.error_code) for m in leave.members] == [("b", 0)]
        started = time.monotonic()
        report = a.next_report(30)
        while report["partitions"] != list(range(PARTITIONS)):
            report = a.next_report(30)
        assert time.monotonic() - started < 15
        assert report["generation"] > before_b["generation"]
        assert list(describe_members(server).values()) == ["a"]
        # Unknown now: the same leave again is refused.
        leave = call(
            server,
            LeaveGroupRequest[3](
                group_id=GROUP,
                members=[LeaveGroupRequest[3].MemberIdentity(member_id="", group_instance_id="b")],
            ),
        )
        assert [m.error_code for m in leave.members] == [UNKNOWN_MEMBER_ID]
        a.kill()


def test_static_member_that_never_returns_is_evicted_at_session_timeout(spawn, tmp_path):
    """Its partitions wait for it until ``session.timeout.ms``, then go to the other member."""
    path = str(tmp_path)
    setup(path)
    session_ms = 6_000  # Kafka's group.min.session.timeout.ms
    with Server(path) as server:
        a, b, _, before_b = stable_pair(spawn, server, session_ms)
        b.kill()
        killed = time.monotonic()
        report = a.next_report(60)
        while report["partitions"] != list(range(PARTITIONS)):
            report = a.next_report(60)
        waited = time.monotonic() - killed
        # The session counts from b's last heartbeat (up to one interval before the kill).
        assert waited >= session_ms / 1000 - 1, (
            f"b's partitions moved after {waited:.1f} s, before its session expired"
        )
        assert waited < session_ms / 1000 + 20
        assert list(describe_members(server).values()) == ["a"]
        a.kill()


# -- the Java client ------------------------------------------------------------------------------
@pytest.fixture
def java_static_member(java_program) -> Starter:
    """Starts tests/java-client/StaticMember.java (compiled against kafka-clients 4.x)."""
    java_program.classpath("StaticMember")

    def start(spawn, bootstrap: str, instance: str, session_ms: int) -> subprocess.Popen:
        return java_program.start(
            spawn,
            "StaticMember",
            bootstrap,
            TOPIC,
            GROUP,
            instance,
            session_ms,
            stdout=subprocess.PIPE,
            text=True,
        )

    return start


@pytest.mark.broker
def test_java_static_member_restarts_without_a_rebalance(spawn, tmp_path, java_static_member):
    """The Java client (``group.instance.id``), killed with SIGKILL and restarted: its old
    generation and partitions, no rebalance of the other member."""
    path = str(tmp_path)
    setup(path)
    with Server(path) as server:
        a, b2, before_a, _, after_b = restart_without_rebalance(spawn, server, java_static_member)
        assert describe_members(server) == {before_a["member"]: "a", after_b["member"]: "b"}
        a.kill()
        b2.kill()


def test_an_embedded_static_members_place_keeps_the_group_from_the_network(tmp_path):
    """An embedded static member (``Consumer(group_instance_id=...)``) that closed, or died, still
    holds its place until its session expires, so the group is not empty for the server either:
    a commit from outside the group is refused (UNKNOWN_MEMBER_ID, as Kafka refuses it for a
    non-empty group), and accepted once the session expired."""
    from server_wire import offset_commit

    path = str(tmp_path)
    setup(path)
    session_ms = 2_000
    member = kafkalite.Consumer(
        path,
        TOPIC,
        group_id=GROUP,
        group_instance_id="e",
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=100,
    )
    deadline = time.monotonic() + 20
    while not member.assignment():
        assert time.monotonic() < deadline
        member.poll(timeout_ms=20)
    member.close()
    with Server(path) as server:
        refused = call(server, offset_commit(GROUP, -1, "", [(TOPIC, 0, 7)]))
        assert [p.error_code for t in refused.topics for p in t.partitions] == [UNKNOWN_MEMBER_ID]
        time.sleep(session_ms / 1000 + 0.5)
        accepted = call(server, offset_commit(GROUP, -1, "", [(TOPIC, 0, 7)]))
        assert [p.error_code for t in accepted.topics for p in t.partitions] == [0]
