"""The consumer group protocol (KIP-848, issue 24 item 1) in ``kafkalite serve``:

- wire level (hand-built ConsumerGroupHeartbeat v1 frames): a stale member epoch is answered
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

import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import kafkalite
import maven_jars
import pytest
from kafkalite.server import Server

TOPIC = "kip848"
PARTITIONS = 6
SESSION_MS = 8_000
HEARTBEAT_MS = 300
NONE, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID = 0, 25, 110, 111
INCONSISTENT_GROUP_PROTOCOL, GROUP_ID_NOT_FOUND = 23, 69
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69


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
def _uvarint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw


def _carray(items: list[bytes] | None) -> bytes:
    return b"\x00" if items is None else _uvarint(len(items) + 1) + b"".join(items)


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def i8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def cstr(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


class Wire:
    """One connection speaking ConsumerGroupHeartbeat v1 (flexible: request header v2)."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation = 0

    def call(self, api: int, version: int, body: bytes) -> Reader:
        self.correlation += 1
        header = (
            struct.pack(">hhi", api, version, self.correlation) + struct.pack(">h", 4) + b"test" + b"\x00"
        )
        frame = header + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self._read(4))[0]
        r = Reader(self._read(size))
        assert r.i32() == self.correlation
        r.tags()
        return r

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "the server closed the connection"
            out += chunk
        return out

    def heartbeat(
        self,
        group: str,
        member: str,
        epoch: int,
        *,
        topics: list[str] | None = None,
        owned: dict[str, list[int]] | None = None,
        instance: str | None = None,
        rebalance_ms: int = -1,
    ) -> dict:
        owned_wire = None
        if owned is not None:
            owned_wire = [
                topic_id(t) + _carray([struct.pack(">i", p) for p in ps]) + b"\x00" for t, ps in owned.items()
            ]
        body = (
            _cstr(group)
            + _cstr(member)
            + struct.pack(">i", epoch)
            + _cstr(instance)
            + _cstr(None)  # rack id
            + struct.pack(">i", rebalance_ms)
            + _carray(None if topics is None else [_cstr(t) for t in topics])
            + _cstr(None)  # regex
            + _cstr(None)  # server assignor: the default, uniform
            + _carray(owned_wire)
            + b"\x00"
        )
        r = self.call(CONSUMER_GROUP_HEARTBEAT, 1, body)
        r.i32()  # throttle
        out: dict = {"error": r.i16(), "message": r.cstr(), "member": r.cstr(), "epoch": r.i32()}
        r.i32()  # heartbeat interval
        if r.i8() < 0:
            out["assignment"] = None
            return out
        assignment: dict[bytes, list[int]] = {}
        for _ in range(r.uvarint() - 1):
            tid = r.take(16)
            assignment[tid] = [r.i32() for _ in range(r.uvarint() - 1)]
            r.tags()
        out["assignment"] = {by_id(tid): sorted(ps) for tid, ps in assignment.items()}
        return out

    def join(self, group: str, member: str, topics: list[str], instance: str | None = None) -> dict:
        return self.heartbeat(
            group, member, 0, topics=topics, owned={}, instance=instance, rebalance_ms=30_000
        )


_NAMES: dict[bytes, str] = {}


def topic_id(name: str) -> bytes:
    """The id Metadata v10+ gives the topic (asked once per topic and remembered)."""
    for tid, n in _NAMES.items():
        if n == name:
            return tid
    raise AssertionError(f"unknown topic {name}")


def by_id(tid: bytes) -> str:
    return _NAMES[tid]


def learn_topic_ids(address: str) -> None:
    """Metadata v12 (flexible) for all topics: remember each name's id."""
    wire = Wire(address)
    body = b"\x00" + b"\x00" + b"\x00" + b"\x00"  # topics null, auto-create false, authorized ops false, tags
    r = wire.call(3, 12, body)
    r.i32()  # throttle
    for _ in range(r.uvarint() - 1):  # brokers
        r.i32()
        r.cstr()
        r.i32()
        r.cstr()
        r.tags()
    r.cstr()  # cluster id
    r.i32()  # controller
    for _ in range(r.uvarint() - 1):
        r.i16()
        name = r.cstr()
        tid = r.take(16)
        assert tid != bytes(16), "Metadata v10+ gives every topic an id"
        _NAMES[tid] = name or ""
        r.i8()
        for _ in range(r.uvarint() - 1):  # partitions
            r.i16()
            r.i32()
            r.i32()
            r.i32()
            for _ in range(3):  # replicas, isr, offline
                for _ in range(r.uvarint() - 1):
                    r.i32()
            r.tags()
        r.i32()  # authorized operations
        r.tags()
    wire.sock.close()


def owned_count(answer: dict) -> int:
    return sum(len(p) for p in (answer["assignment"] or {}).values())


def test_epochs_fencing_and_revocation_before_reassignment(tmp_path):
    path = str(tmp_path)
    kafkalite.Admin(path).create_topic(TOPIC, partitions=PARTITIONS)
    with start_server(path) as server:
        learn_topic_ids(server.address)
        wire = Wire(server.address)
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
        assert join_error(server.address, group) == INCONSISTENT_GROUP_PROTOCOL

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


def join_error(address: str, group: str) -> int:
    """The error of a classic JoinGroup v5 (kafka-python's encoding) to ``group``."""
    from kafka.protocol.consumer.group import JoinGroupRequest

    request = JoinGroupRequest[5](group, 10_000, 30_000, "", None, "consumer", [("range", b"")])
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        header = struct.pack(">hhi", 11, 5, 7) + struct.pack(">h", 4) + b"test"
        frame = header + request.encode()
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", sock.recv(4))[0]
        data = b""
        while len(data) < size:
            data += sock.recv(size - len(data))
    # correlation id, throttle time, error code
    return struct.unpack(">h", data[8:10])[0]


# -- real clients -------------------------------------------------------------------------------
class Member:
    """A client process printing "ASSIGN p,p" and "REC p o" lines (see Kip848Member.java)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.assigned: set[int] | None = None
        self.records: set[tuple[int, int]] = set()
        self.closed = False
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            words = line.split()
            with self.lock:
                if words[:1] == ["ASSIGN"]:
                    self.assigned = {int(p) for p in words[1].split(",")} if len(words) > 1 else set()
                elif words[:1] == ["REC"]:
                    self.records.add((int(words[1]), int(words[2])))
                elif words[:1] == ["CLOSED"]:
                    self.closed = True

    def owned(self) -> set[int]:
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


JAVA_SOURCE = Path(__file__).parent / "java-client" / "Kip848Member.java"


@pytest.fixture(scope="module")
def java_member(tmp_path_factory) -> Callable[..., Callable[[str, str], subprocess.Popen]]:
    jars = maven_jars.require(maven_jars.java_client_jars)
    if not shutil.which("javac"):
        if os.environ.get("CI"):
            pytest.fail("javac is missing (.ci/run installs openjdk-17-jdk-headless)")
        pytest.skip("javac is missing (apt-get install openjdk-17-jdk-headless)")
    classes = tmp_path_factory.mktemp("java-kip848-classes")
    classpath = f"{classes}{os.pathsep}{jars}/*"
    done = subprocess.run(
        ["javac", "-d", str(classes), "-cp", classpath, str(JAVA_SOURCE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr

    def bind(spawn, assignor: str) -> Callable[[str, str], subprocess.Popen]:
        def start(bootstrap: str, group: str) -> subprocess.Popen:
            # exec, so that SIGKILL and SIGTERM reach the JVM itself.
            argv = ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath]
            argv += ["Kip848Member", bootstrap, TOPIC, group, assignor]
            return spawn.code(
                "import os, sys; os.execvp(sys.argv[1], sys.argv[1:])",
                *argv,
                stdout=subprocess.PIPE,
                text=True,
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
