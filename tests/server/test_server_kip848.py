"""The consumer group protocol (KIP-848, issue 24 item 1) in ``kafkalite serve``:

- wire level (hand-built ConsumerGroupHeartbeat v1 frames, tests/support/consumer_group_wire.py): a stale member epoch is answered
  FENCED_MEMBER_EPOCH, an unknown member UNKNOWN_MEMBER_ID, a partition is not given to a new
  member before its previous owner's heartbeat acknowledged revoking it, a static member's
  instance id is not taken while it is held (UNRELEASED_INSTANCE_ID), and a member that stops
  heartbeating is removed after ``group.consumer.session.timeout.ms``;
- (marker ``broker``) the Java client (kafka-clients 4.1, ``group.protocol=consumer``) and
  librdkafka (confluent-kafka) with three members: each partition owned by exactly one, a member
  killed with SIGKILL whose partitions move to the others after the session timeout, one that
  closes and whose partitions move at once, every record consumed and the offsets committed.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import kafkalite
import pytest
from consumer_group_wire import (
    FENCED_MEMBER_EPOCH,
    INCONSISTENT_GROUP_PROTOCOL,
    NONE,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    TopicIds,
    join_group_error,
    owned_count,
)
from consumer_group_wire import Member as WireMember
from kafkalite.server import Server

TOPIC = "kip848"
PARTITIONS = 6
SESSION_MS = 8_000
HEARTBEAT_MS = 300


def start_server(path: str) -> Server:
    return Server(
        path, group_consumer_session_timeout_ms=SESSION_MS, group_consumer_heartbeat_interval_ms=HEARTBEAT_MS
    )


def produce(path: str, count: int, start: int = 0) -> None:
    producer = kafkalite.Producer(path)
    for i in range(start, start + count):
        producer.send(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS)
    producer.flush()
    producer.close()


# -- wire level ---------------------------------------------------------------------------------
def test_epochs_fencing_and_revocation_before_reassignment(tmp_path):
    path = str(tmp_path)
    kafkalite.Admin(path).create_topic(TOPIC, partitions=PARTITIONS)
    with start_server(path) as server:
        wire = WireMember(server.address, TopicIds(server.address))
        group, a, b = "wire-group", str(uuid.uuid4()), str(uuid.uuid4())
        first = wire.join(group, a, [TOPIC])
        assert first["error"] == NONE, first
        a_epoch = first["epoch"]
        assert owned_count(first) == PARTITIONS  # alone: every partition
        a_owned = first["assignment"]

        # An unknown member, and a member epoch ahead of the member's: refused.
        assert wire.heartbeat(group, str(uuid.uuid4()), 1)["error"] == UNKNOWN_MEMBER_ID
        assert wire.heartbeat(group, a, a_epoch + 5)["error"] == FENCED_MEMBER_EPOCH

        # B joins: the group epoch moves, but A still owns everything, so B gets nothing yet.
        joined = wire.join(group, b, [TOPIC])
        assert joined["error"] == NONE, joined
        assert owned_count(joined) == 0
        b_epoch = joined["epoch"]

        # A's heartbeat: it must revoke half, and keeps its epoch until it has.
        hb = wire.heartbeat(group, a, a_epoch)
        assert hb["error"] == NONE and hb["epoch"] == a_epoch
        assert owned_count(hb) == PARTITIONS // 2
        kept = hb["assignment"]
        # B asks again while A has not acknowledged: still nothing for B (A still owns them).
        again = wire.heartbeat(group, b, b_epoch, owned={})
        assert again["error"] == NONE and owned_count(again) == 0

        # A's old epoch with partitions it no longer has is fenced... (it must rejoin)
        # ...but here A acknowledges the revocation by heartbeating with what it kept.
        ack = wire.heartbeat(group, a, a_epoch, owned=kept)
        assert ack["error"] == NONE and ack["epoch"] > a_epoch
        # A stale epoch from now on (its previous one, with partitions it no longer owns) is fenced.
        stale = wire.heartbeat(group, a, a_epoch, owned=a_owned)
        assert stale["error"] == FENCED_MEMBER_EPOCH, stale

        # Now B gets the released partitions, disjoint from A's.
        got = wire.heartbeat(group, b, b_epoch, owned={})
        assert got["error"] == NONE and owned_count(got) == PARTITIONS // 2
        assert not set(got["assignment"][TOPIC]) & set(kept[TOPIC])

        # A static member's instance id is not taken while its member holds it.
        c = wire.join(group, str(uuid.uuid4()), [TOPIC], instance="i-1")
        assert c["error"] == NONE
        other = wire.join(group, str(uuid.uuid4()), [TOPIC], instance="i-1")
        assert other["error"] == UNRELEASED_INSTANCE_ID, other

        # A classic JoinGroup to this group gets Kafka's answer for a group of another type.
        assert join_group_error(server.address, group) == INCONSISTENT_GROUP_PROTOCOL

        # B stops heartbeating: after the session timeout it is removed and A and C, who
        # heartbeat as a client does (reporting what they own), share every partition.
        peers = {a: [ack["epoch"], kept], c["member"]: [c["epoch"], c["assignment"] or {}]}
        started = time.monotonic()
        while True:
            for member, state in peers.items():
                hb = wire.heartbeat(group, member, state[0], owned=state[1])
                assert hb["error"] == NONE, hb
                state[0] = hb["epoch"]
                if hb["assignment"] is not None:
                    state[1] = hb["assignment"]
            owned = [set(state[1].get(TOPIC, ())) for state in peers.values()]
            if sum(map(len, owned)) == PARTITIONS and set().union(*owned) == set(range(PARTITIONS)):
                break
            assert time.monotonic() - started < SESSION_MS / 1000 + 15, "B was not removed after its session"
            time.sleep(0.2)
        assert time.monotonic() - started >= SESSION_MS / 1000 - 1, (
            "B's partitions moved before its session ended"
        )


# -- real clients -------------------------------------------------------------------------------
class Member:
    """A client process printing "ASSIGN p,p" and "REC p o" lines (see Kip848Member.java); subscribed
    with a SubscriptionPattern it names the topic too: "ASSIGN topic:p,..." and "REC topic p o"."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.assigned: set | None = None
        self.records: set[tuple] = set()
        self.closed = False
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    @staticmethod
    def _partition(entry: str) -> int | tuple[str, int]:
        topic, _, partition = entry.rpartition(":")
        return (topic, int(partition)) if topic else int(partition)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            words = line.split()
            with self.lock:
                if words[:1] == ["ASSIGN"]:
                    self.assigned = (
                        {self._partition(e) for e in words[1].split(",")} if len(words) > 1 else set()
                    )
                elif words[:1] == ["REC"]:
                    *topic, partition, offset = words[1:]
                    self.records.add((*topic, int(partition), int(offset)))
                elif words[:1] == ["CLOSED"]:
                    self.closed = True

    def owned(self) -> set:
        with self.lock:
            return set(self.assigned or ())


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)
    return time.monotonic() - started


def each_partition_once(members: list[Member]) -> bool:
    owned = [m.owned() for m in members]
    union = set().union(*owned)
    return union == set(range(PARTITIONS)) and sum(map(len, owned)) == PARTITIONS and all(owned)


def committed(address: str, group: str) -> dict[int, int]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=address)
    try:
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == TOPIC}


def scenario(spawn, tmp_path: Path, start: Callable[[str, str], subprocess.Popen], group: str) -> None:
    """Three members; one killed (SIGKILL), one closed; every record consumed and committed."""
    path = str(tmp_path)
    kafkalite.Admin(path).create_topic(TOPIC, partitions=PARTITIONS)
    produce(path, 60)
    with start_server(path) as server:
        members = [Member(start(server.bootstrap_servers, group)) for _ in range(3)]
        wait_for("three members owning each partition once", lambda: each_partition_once(members), 90)
        produce(path, 60, start=60)

        killed, leaving, staying = members
        killed.proc.kill()
        killed.proc.wait()
        took = wait_for(
            "the killed member's partitions to move", lambda: each_partition_once([leaving, staying]), 60
        )
        # Not before its session timed out: it could still have been consuming.
        assert took >= SESSION_MS / 1000 - 2, took

        leaving.proc.send_signal(signal.SIGTERM)
        took = wait_for("the closed member's partitions to move", lambda: each_partition_once([staying]), 60)
        assert took < SESSION_MS / 1000, f"a clean leave waited {took:.1f} s, as long as a session timeout"
        wait_for("the closing member to exit", lambda: leaving.proc.poll() is not None, 30)
        assert leaving.closed

        produce(path, 60, start=120)
        everything = {(i % PARTITIONS, i // PARTITIONS) for i in range(180)}
        consumed = lambda: set().union(*(m.records for m in members))  # noqa: E731
        wait_for("every record consumed", lambda: consumed() >= everything, 60)
        wait_for(
            "the offsets committed",
            lambda: committed(server.bootstrap_servers, group) == {p: 30 for p in range(PARTITIONS)},
            30,
        )
        staying.proc.kill()


@pytest.fixture
def java_member(java_program) -> Callable[..., Callable[[str, str], subprocess.Popen]]:
    java_program.classpath("Kip848Member")

    def bind(spawn, assignor: str) -> Callable[[str, str], subprocess.Popen]:
        def start(bootstrap: str, group: str) -> subprocess.Popen:
            return java_program.start(
                spawn, "Kip848Member", bootstrap, TOPIC, group, assignor, stdout=subprocess.PIPE, text=True
            )

        return start

    return bind


@pytest.mark.broker
@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_java_consumers_with_group_protocol_consumer(spawn, tmp_path, java_member, assignor):
    scenario(spawn, tmp_path, java_member(spawn, assignor), f"java-{assignor}")


#: A librdkafka (confluent-kafka) member with group.protocol=consumer, printing as Kip848Member.java.
RDKAFKA_MEMBER = """
import signal, sys
from confluent_kafka import Consumer
bootstrap, topic, group = sys.argv[1:4]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
consumer.subscribe([topic])
printed = None
while not stop:
    msg = consumer.poll(0.1)
    if msg is not None and msg.error() is None:
        print("REC", msg.partition(), msg.offset(), flush=True)
        consumer.commit(message=msg, asynchronous=False)
    now = ",".join(str(p) for p in sorted(tp.partition for tp in consumer.assignment()))
    if now != printed:
        print("ASSIGN", now, flush=True)
        printed = now
consumer.close()
print("CLOSED", flush=True)
"""


@pytest.mark.broker
def test_librdkafka_consumers_with_group_protocol_consumer(spawn, tmp_path):
    pytest.importorskip("confluent_kafka")

    def start(bootstrap: str, group: str) -> subprocess.Popen:
        return spawn.code(RDKAFKA_MEMBER, bootstrap, TOPIC, group, stdout=subprocess.PIPE, text=True)

    scenario(spawn, tmp_path, start, "rdkafka-group")


@pytest.mark.broker
def test_java_consumers_subscribe_with_a_pattern(spawn, tmp_path, java_program):
    """The Java client's ``subscribe(SubscriptionPattern)`` (the regex resolved by the server):
    two members share the matching topics, each partition once, a matching topic created later
    is picked up, the others are never assigned, and every matching record is consumed."""
    path = str(tmp_path)
    admin = kafkalite.Admin(path)
    for name, partitions in (("orders-eu", 2), ("orders-us", 1), ("payments", 1)):
        admin.create_topic(name, partitions=partitions)
    producer = kafkalite.Producer(path)
    for name in ("orders-eu", "orders-us", "payments"):
        producer.send(name, value=b"x", partition=0)
    producer.flush()
    with start_server(path) as server:
        members = [
            Member(
                java_program.start(
                    spawn,
                    "Kip848Member",
                    server.bootstrap_servers,
                    "pattern:orders-.*",
                    "java-pattern",
                    "uniform",
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
            for _ in range(2)
        ]

        def exactly(want: set[tuple[str, int]]) -> Callable[[], bool]:
            def check() -> bool:
                owned = [m.owned() for m in members]
                return set().union(*owned) == want and sum(map(len, owned)) == len(want)

            return check

        want = {("orders-eu", 0), ("orders-eu", 1), ("orders-us", 0)}
        wait_for("the two members to share the matching topics", exactly(want), 90)
        admin.create_topic("orders-asia", partitions=1)
        producer.send("orders-asia", value=b"y", partition=0)
        producer.flush()
        wait_for("the topic created later to be assigned", exactly(want | {("orders-asia", 0)}), 60)
        records = lambda: set().union(*(m.records for m in members))  # noqa: E731
        wait_for(
            "every matching record consumed",
            lambda: (
                {(t, p) for t, p, _ in records()} >= {("orders-eu", 0), ("orders-us", 0), ("orders-asia", 0)}
            ),
            60,
        )
        assert not any(t == "payments" for t, _, _ in records())
        producer.close()


@pytest.mark.broker
def test_java_member_stopped_holding_partitions_while_another_joins(spawn, tmp_path, java_member):
    """A Java member SIGSTOPped while it owns partitions: a member that joins meanwhile gets none
    of them until the stopped one's session expired (it could still be consuming them); after
    SIGCONT the stopped member learns it was removed, rejoins, and the three share the topic,
    each partition once."""
    path = str(tmp_path)
    kafkalite.Admin(path).create_topic(TOPIC, partitions=PARTITIONS)
    start = java_member(spawn, "uniform")
    with start_server(path) as server:
        stopped, other = (Member(start(server.bootstrap_servers, "java-stopped")) for _ in range(2))
        wait_for("two members owning each partition once", lambda: each_partition_once([stopped, other]), 90)
        held = stopped.owned()
        stopped.proc.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        joined = Member(start(server.bootstrap_servers, "java-stopped"))
        while time.monotonic() - stopped_at < SESSION_MS / 1000 - 1.5:
            assert not joined.owned() & held, "a stopped member's partitions moved before its session expired"
            time.sleep(0.1)
        wait_for("the stopped member's partitions to move", lambda: each_partition_once([other, joined]), 60)
        stopped.proc.send_signal(signal.SIGCONT)
        wait_for(
            "the three members to share the topic", lambda: each_partition_once([stopped, other, joined]), 90
        )
