"""Kafka's framing for the server suite's raw clients (the probe and the attackers): requests
encoded and responses decoded by kafka-python's protocol classes (an implementation we did not
write), every read bounded by a deadline, so a server that does not answer is measured, never
waited on forever."""

from __future__ import annotations

import io
import socket
import struct
import time
from typing import Any

from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest

INT31 = 2**31 - 1


class Closed(ConnectionError):
    """The server closed the connection (or reset it) before the answer was complete."""


class Late(TimeoutError):
    """No complete answer within the deadline."""


def connect(address: str, timeout: float) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


class Wire:
    """One connection: ``call`` sends a request and returns the decoded response; ``Closed`` or
    ``Late`` when it does not come, after which the connection is unusable (close it)."""

    def __init__(self, address: str, timeout: float, client_id: str = "faults") -> None:
        self.sock = connect(address, timeout)
        self.client_id = client_id
        self.correlation = 0

    def send(self, request: Any) -> int:
        self.correlation += 1
        request.with_header(correlation_id=self.correlation, client_id=self.client_id)
        self.sock.sendall(request.encode(header=True, framed=True))
        return self.correlation

    def receive(self, deadline: float) -> bytes:
        """One response frame, without its size."""
        size = struct.unpack(">i", read_exactly(self.sock, 4, deadline))[0]
        return read_exactly(self.sock, size, deadline)

    def skip(self, deadline: float) -> int:
        """Read one response frame and drop it as it comes (a huge Fetch answer); its size."""
        size = left = struct.unpack(">i", read_exactly(self.sock, 4, deadline))[0]
        while left > 0:
            left -= len(read_exactly(self.sock, min(left, 1 << 20), deadline, partial=True))
        return int(size)

    def call(self, request: Any, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        correlation = self.send(request)
        body = self.receive(deadline)
        got = struct.unpack(">i", body[:4])[0]
        if got != correlation:
            raise Closed(f"answer to correlation {got}, expected {correlation}")
        response_class = ResponseClassRegistry.get_response_class(request.header)
        return response_class.decode(io.BytesIO(body[4:]))

    def close(self) -> None:
        self.sock.close()


def read_exactly(sock: socket.socket, n: int, deadline: float, partial: bool = False) -> bytes:
    """``n`` bytes (or, with ``partial``, whatever arrives first) before ``deadline``."""
    out = bytearray()
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0 and out:
            raise Late(f"{len(out)} of {n} bytes before the deadline")
        # Past the deadline, what already arrived (bytes, or the close) still counts: a caller
        # reading several sockets against one deadline must not call a socket the server closed
        # in time "late" because an earlier socket used up the wait.
        sock.settimeout(max(left, 0.01))
        try:
            chunk = sock.recv(n - len(out))
        except TimeoutError as e:
            raise Late(f"{len(out)} of {n} bytes before the deadline") from e
        except OSError as e:  # reset, broken pipe
            raise Closed(str(e)) from e
        if not chunk:
            raise Closed(f"closed after {len(out)} of {n} bytes")
        out += chunk
        if partial:
            break
    return bytes(out)


# -- the requests the probe and the attackers send ------------------------------------------------
def api_versions() -> Any:
    return ApiVersionsRequest[0]()


def metadata(topics: list[str] | None, auto_create: bool = False) -> Any:
    """Metadata v4: ``topics`` None asks for every topic."""
    req = MetadataRequest[4]
    names = None if topics is None else [req.MetadataRequestTopic(name=t) for t in topics]
    return req(topics=names, allow_auto_topic_creation=auto_create)


def fetch(
    partitions: list[tuple[str, int, int]], max_wait_ms: int, max_bytes: int, partition_max_bytes: int
) -> Any:
    """Fetch v4 of (topic, partition, offset)s, in that order (a partition may repeat)."""
    req = FetchRequest[4]
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, offset in partitions:
        by_topic.setdefault(topic, []).append(
            req.FetchTopic.FetchPartition(
                partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes
            )
        )
    return req(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        topics=[req.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
    )


def produce(topic: str, partition: int, records: bytes, timeout_ms: int) -> Any:
    """Produce v3, acks=-1 (all)."""
    req = ProduceRequest[3]
    data = req.TopicProduceData.PartitionProduceData(index=partition, records=records)
    return req(
        transactional_id=None,
        acks=-1,
        timeout_ms=timeout_ms,
        topic_data=[req.TopicProduceData(name=topic, partition_data=[data])],
    )


def offset_commit(group: str, generation: int, member: str, offsets: list[tuple[str, int, int]]) -> Any:
    """OffsetCommit v2 of (topic, partition, offset)s."""
    req = OffsetCommitRequest[2]
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, offset in offsets:
        by_topic.setdefault(topic, []).append(
            req.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=""
            )
        )
    return req(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        retention_time_ms=-1,
        topics=[req.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
    )


def offset_fetch(group: str, partitions: list[tuple[str, int]]) -> Any:
    """OffsetFetch v1."""
    req = OffsetFetchRequest[1]
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return req(
        group_id=group,
        topics=[req.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
    )


def describe_groups(groups: list[str]) -> Any:
    """DescribeGroups v0."""
    return DescribeGroupsRequest[0](groups=groups)


def record_batch(values: list[bytes]) -> bytes:
    """A v2 record batch of ``values`` (kafka-python's builder), for raw Produce requests."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    now = int(time.time() * 1000)
    for i, value in enumerate(values):
        builder.append(i, timestamp=now, key=None, value=value, headers=[])
    return bytes(builder.build())


def errors_of(response: Any) -> list[int]:
    """Every error code in a response, top-level and per partition (whatever its shape)."""
    out: list[int] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "error_code" and isinstance(v, int):
                    out.append(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(response.to_dict())
    return out
