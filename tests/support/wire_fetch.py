"""Fetch v4 on a raw socket, for the tests and the bench that send what no client library would
(one partition named several times, max_bytes 2^31-1) and look at the response's sizes, and the
large partitions they fetch from (written through the embedded ``Log``, before a server starts)."""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

import kafkalite

FETCH, VERSION = 1, 4
NO_LIMIT = 2**31 - 1
BATCH = 1000 * 1000  # one append_values call of 1000 x 1000 bytes: one batch of about 1 MB


def fill(data_dir: str, topic: str, partitions: int, megabytes: int) -> None:
    """Create ``topic`` with ``megabytes`` MB in each partition, in batches of about 1 MB."""
    kafkalite.Admin(data_dir).create_topic(topic, partitions)
    for p in range(partitions):
        log = kafkalite.Log(os.path.join(data_dir, f"{topic}-{p}"))
        try:
            for _ in range(megabytes * 1000 * 1000 // BATCH):
                log.append_values([b"x" * 1000] * 1000)
        finally:
            log.close()


def fetch_request(
    partitions: list[tuple[str, int, int, int]],
    *,
    max_bytes: int = NO_LIMIT,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    correlation_id: int = 1,
) -> bytes:
    """A framed Fetch v4 naming ``partitions`` as (topic, partition, fetch_offset,
    partition_max_bytes), each entry its own topic element (so a partition may appear twice)."""
    body = struct.pack(">iiiibi", -1, max_wait_ms, min_bytes, max_bytes, 0, len(partitions))
    for topic, partition, offset, partition_max in partitions:
        name = topic.encode()
        body += (
            struct.pack(">h", len(name)) + name + struct.pack(">iiqi", 1, partition, offset, partition_max)
        )
    header = struct.pack(">hhih", FETCH, VERSION, correlation_id, -1)
    return struct.pack(">i", len(header) + len(body)) + header + body


@dataclass
class Partition:
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    records: int  # bytes of records


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError(f"closed with {left} of {n} bytes unread")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_response(sock: socket.socket) -> tuple[int, list[Partition]]:
    """(frame size, partitions) of one Fetch v4 response."""
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    data = recv_exactly(sock, size)
    pos = 4 + 4  # correlation id, throttle time
    (topics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out = []
    for _ in range(topics):
        (name_len,) = struct.unpack_from(">h", data, pos)
        name = data[pos + 2 : pos + 2 + name_len].decode()
        pos += 2 + name_len
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(count):
            partition, error, hw, _lso, aborted = struct.unpack_from(">ihqqi", data, pos)
            pos += 4 + 2 + 8 + 8 + 4 + max(aborted, 0) * 16
            (records,) = struct.unpack_from(">i", data, pos)
            pos += 4 + max(records, 0)
            out.append(Partition(name, partition, error, hw, max(records, 0)))
    return size, out


def fetch(
    address: str, partitions: list[tuple[str, int, int, int]], **kwargs: int
) -> tuple[int, list[Partition]]:
    """One Fetch on a new connection: (response frame size, partitions)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(fetch_request(partitions, **kwargs))
        return read_response(sock)


def hostile(address: str, topic: str, rounds: int, errors: list[BaseException]) -> None:
    """Fetch partition 0 of ``topic`` named four times with no limit, ``rounds`` times on one
    connection, reading each answer (issue 21's amplification); a failure goes to ``errors``."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=120) as sock:
            for i in range(rounds):
                sock.sendall(fetch_request([(topic, 0, 0, NO_LIMIT)] * 4, correlation_id=i, max_wait_ms=5000))
                read_response(sock)
    except BaseException as e:  # reported by the caller
        errors.append(e)
