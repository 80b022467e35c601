"""Helpers shared by the tests that drive real clients (Java, kcat, Spark, confluent-kafka child
processes) against `kafkalite serve`: the records they exchange, reading them back with the
embedded Consumer, starting `kafkalite serve` as a child process, and asking the server which
APIs it serves."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time
from pathlib import Path

import kafkalite
from kafkalite.server import Server
from serve_proc import serve_on

#: Kafka's API key of InitProducerId (idempotent producers).
INIT_PRODUCER_ID = 22

Item = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def items(n: int) -> list[Item]:
    """The records the clients exchange, number i of n: key ``k<i>`` (null when i % 3 == 0),
    value ``v<i>`` plus 40 x's so that every codec shrinks it (null when i % 5 == 0), headers
    i=<i> and nil=null. tests/java-client/KafkaliteJavaClient.java makes the same ones."""
    return [
        (
            None if i % 3 == 0 else b"k%d" % i,
            None if i % 5 == 0 else b"v%d" % i + b"x" * 40,
            [("i", b"%d" % i), ("nil", None)],
        )
        for i in range(n)
    ]


def write_from_python(server: Server, n: int) -> dict[str, list[Item]]:
    """What the other clients read: ``items(n)`` produced by confluent-kafka with every codec
    (topics ``py-<codec>``) and, by the embedded Producer, those with a key or a value (it refuses
    a record with neither, as kafka-python does) to ``py-embedded``. Returns topic -> items."""
    from test_server import CODECS, confluent_producer, produce_all  # needs confluent-kafka

    written: dict[str, list[Item]] = {}
    for codec in CODECS:
        producer = confluent_producer(server, **{"compression.type": codec})
        written[f"py-{codec}"] = items(n)
        produce_all(producer, f"py-{codec}", items(n))
    written["py-embedded"] = [item for item in items(n) if item[0] is not None or item[1] is not None]
    with kafkalite.Producer(server.path) as producer:
        for key, value, headers in written["py-embedded"]:
            producer.send("py-embedded", value, key=key, headers=headers, partition=0)
    return written


def embedded_read(path: str, topic: str, count: int, timeout: float = 30.0) -> list:
    """``count`` records of ``topic`` from the start, read by the embedded Consumer (no group),
    in offset order per partition."""
    consumer = kafkalite.Consumer(path, topic, auto_offset_reset="earliest")
    out: list = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                out.extend(records)
    finally:
        consumer.close()
    return out


def serve(spawn, data: Path, port: int) -> subprocess.Popen:
    """`kafkalite serve` as a child process; returns it once it listens."""
    return serve_on(spawn.module, data, port)


def stored_codecs(path: str, topic: str, partition: int = 0) -> set[int]:
    """The codecs (attributes bits 0-2: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd) of the batches in
    the partition's first segment. The active segment is preallocated: its zeros end the scan."""
    with open(os.path.join(path, f"{topic}-{partition}", "00000000000000000000.log"), "rb") as f:
        data = f.read()
    codecs, pos = set(), 0
    while pos + 23 <= len(data):
        length = struct.unpack(">i", data[pos + 8 : pos + 12])[0]
        if length <= 0:
            break
        codecs.add(struct.unpack(">h", data[pos + 21 : pos + 23])[0] & 0x7)
        pos += 12 + length
    return codecs


def served_api_keys(address: str) -> set[int]:
    """The API keys the server announces in ApiVersions (v0, the version every server takes)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        request = struct.pack(">hhih", 18, 0, 1, -1)  # ApiVersions v0, correlation 1, no client id
        s.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", _recv_exactly(s, 4))[0]
        body = _recv_exactly(s, size)
    correlation, error, count = struct.unpack(">ihi", body[:10])
    assert (correlation, error) == (1, 0), (correlation, error)
    return {struct.unpack(">h", body[10 + 6 * i : 12 + 6 * i])[0] for i in range(count)}


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"the server closed the connection after {len(data)} of {n} bytes")
        data += chunk
    return data
