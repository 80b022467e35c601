"""The consumer group protocol (KIP-848) on the wire, built by hand over ``server_wire.Wire``'s
flexible framing, for what a client library hides: ConsumerGroupHeartbeat v1 with any field a
hostile or buggy client may send, topic ids learnt from Metadata v12, ConsumerGroupDescribe;
and kafka-python's encoding of a flexible version's request (OffsetFetch v9), framed here. Used by tests/server/test_server_kip848.py and
tests/server/test_server_kip848_adversary.py."""

from __future__ import annotations

import io
import struct
import time
from typing import Any

from server_wire import Wire, compact_array, compact_string

CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE, METADATA = 68, 69, 3
NONE, UNKNOWN_MEMBER_ID, INCONSISTENT_GROUP_PROTOCOL, GROUP_ID_NOT_FOUND = 0, 25, 23, 69
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, INVALID_REQUEST, FENCED_INSTANCE_ID = 29, 30, 42, 82
FENCED_MEMBER_EPOCH, UNRELEASED_INSTANCE_ID, STALE_MEMBER_EPOCH, INVALID_REGULAR_EXPRESSION = (
    110,
    111,
    113,
    128,
)


class TopicIds:
    """Topic names and the ids Metadata v12 gives them, asked again when one is not known yet
    (a topic created during the test)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.by_name: dict[str, bytes] = {}
        self.refresh()

    def refresh(self) -> None:
        wire = Wire(self.address)
        try:
            # topics null (all), no auto-creation, no authorized operations, no tags
            r = wire.call_flexible(METADATA, 12, b"\x00\x00\x00\x00")
        finally:
            wire.close()
        r.i32()  # throttle
        for _ in range(r.count()):  # brokers
            r.i32()
            r.string()
            r.i32()
            r.string()
            r.tags()
        r.string()  # cluster id
        r.i32()  # controller
        for _ in range(r.count()):
            r.i16()
            name = r.string()
            tid = r.raw(16)
            assert tid != bytes(16), "Metadata v10+ gives every topic an id"
            self.by_name[name or ""] = tid
            r.i8()
            for _ in range(r.count()):  # partitions
                r.i16()
                r.i32()
                r.i32()
                r.i32()
                for _ in range(3):  # replicas, isr, offline
                    for _ in range(r.count()):
                        r.i32()
                r.tags()
            r.i32()  # authorized operations
            r.tags()

    def id(self, name: str) -> bytes:
        if name not in self.by_name:
            self.refresh()
        return self.by_name.get(name, b"\x99" * 16)  # a topic that does not exist: an unknown id

    def name(self, tid: bytes) -> str:
        for _ in range(2):
            for n, t in self.by_name.items():
                if t == tid:
                    return n
            self.refresh()
        raise AssertionError(f"the server assigned a topic id no topic has: {tid.hex()}")


class Member:
    """One connection speaking ConsumerGroupHeartbeat v1 for any member ids given to it."""

    def __init__(self, address: str, ids: TopicIds, client_id: str = "kip848-wire") -> None:
        self.wire = Wire(address, timeout=30)
        self.ids = ids
        self.client_id = client_id

    def close(self) -> None:
        self.wire.close()

    def heartbeat(
        self,
        group: str,
        member: str,
        epoch: int,
        *,
        topics: list[str] | None = None,
        regex: str | None = None,
        owned: dict[str, list[int]] | list[tuple[str, list[int]]] | None = None,
        instance: str | None = None,
        rebalance_ms: int = -1,
        assignor: str | None = None,
    ) -> dict:
        """The answer as {"error", "message", "member", "epoch", "interval", "assignment"}; the
        assignment by topic name (None when the answer has none). ``owned`` as a list may name a
        topic more than once."""
        owned_wire = None
        if owned is not None:
            items = owned.items() if isinstance(owned, dict) else owned
            owned_wire = [
                self.ids.id(t) + compact_array([struct.pack(">i", p) for p in ps]) + b"\x00"
                for t, ps in items
            ]
        body = (
            compact_string(group)
            + compact_string(member)
            + struct.pack(">i", epoch)
            + compact_string(instance)
            + compact_string(None)  # rack id
            + struct.pack(">i", rebalance_ms)
            + compact_array(None if topics is None else [compact_string(t) for t in topics])
            + compact_string(regex)
            + compact_string(assignor)
            + compact_array(owned_wire)
            + b"\x00"
        )
        r = self.wire.call_flexible(CONSUMER_GROUP_HEARTBEAT, 1, body, self.client_id)
        r.i32()  # throttle
        out: dict = {"error": r.i16(), "message": r.string(), "member": r.string(), "epoch": r.i32()}
        out["interval"] = r.i32()
        if r.i8() < 0:
            out["assignment"] = None
            return out
        assignment: dict[str, list[int]] = {}
        for _ in range(r.count()):
            tid = r.raw(16)
            assignment[self.ids.name(tid)] = sorted(r.i32() for _ in range(r.count()))
            r.tags()
        out["assignment"] = assignment
        return out

    def join(self, group: str, member: str, topics: list[str] | None, **kwargs) -> dict:
        kwargs.setdefault("rebalance_ms", 30_000)
        return self.heartbeat(group, member, 0, topics=topics, owned={}, **kwargs)

    def describe(self, group: str) -> dict:
        """ConsumerGroupDescribe v0: {"error", "state", "epoch", "members": {id: {...}}}."""
        body = compact_array([compact_string(group)]) + b"\x00" + b"\x00"  # groups, no ops, tags
        r = self.wire.call_flexible(CONSUMER_GROUP_DESCRIBE, 0, body, self.client_id)
        r.i32()  # throttle
        assert r.count() == 1
        out: dict = {"error": r.i16(), "message": r.string()}
        r.string()  # group id
        out["state"], out["epoch"], out["assignment_epoch"], out["assignor"] = (
            r.string(),
            r.i32(),
            r.i32(),
            r.string(),
        )
        members = {}
        for _ in range(r.count()):
            member_id = r.string()
            m: dict = {"instance": r.string(), "rack": r.string(), "epoch": r.i32()}
            m["client_id"], m["host"] = r.string(), r.string()
            m["topics"] = [r.string() for _ in range(r.count())]
            m["regex"] = r.string()
            m["assignment"], m["target"] = self._described_assignment(r), self._described_assignment(r)
            r.tags()
            members[member_id] = m
        out["members"] = members
        r.i32()  # authorized operations
        r.tags()
        return out

    @staticmethod
    def _described_assignment(r) -> dict[str, list[int]]:
        out = {}
        for _ in range(r.count()):
            r.raw(16)
            name = r.string() or ""
            out[name] = sorted(r.i32() for _ in range(r.count()))
            r.tags()
        r.tags()
        return out


def owned_count(answer: dict) -> int:
    return sum(len(p) for p in (answer["assignment"] or {}).values())


def join_group_error(address: str, group: str) -> int:
    """The error of a classic JoinGroup v5 (kafka-python's encoding) to ``group``."""
    from kafka.protocol.consumer.group import JoinGroupRequest

    request = JoinGroupRequest[5](group, 10_000, 30_000, "", None, "consumer", [("range", b"")])
    wire = Wire(address, timeout=10)
    try:
        body = wire.call(11, 5, request.encode())  # JoinGroup v5: not flexible, header v1
    finally:
        wire.close()
    # throttle time, error code
    return struct.unpack(">h", body[4:6])[0]


def call_kafka_python(address: str, request: Any, timeout: float = 10.0) -> Any:
    """A kafka-python request (an encoder and decoder we did not write) of a flexible version:
    its response after the v1 response header (correlation id, tagged fields)."""
    from kafka.protocol.api_header import ResponseClassRegistry
    from server_wire import Wire as KafkaPythonWire

    wire = KafkaPythonWire(address, timeout=timeout, client_id="kip848-wire")
    try:
        correlation = wire.send(request)
        body = wire.receive(time.monotonic() + timeout)
    finally:
        wire.close()
    assert struct.unpack(">i", body[:4])[0] == correlation
    assert body[4] == 0, "no tagged fields in the response header"
    return ResponseClassRegistry.get_response_class(request.header).decode(io.BytesIO(body[5:]))
