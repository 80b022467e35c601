"""Hand-built Kafka requests on their own connections, and stopped lock holders: what
tests/test_server_isolation.py and benches/bench_server_isolation.py use to measure a server
while a neighbour holds a lock (issue 21), tests/test_server_idempotence.py to send an idempotent
producer's batches as they are, and tests/test_engine_stopped_lock_holder.py to stop a writer. Requests are built by hand (``struct``) so each runs
on its own connection with its own timing."""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable

from kafka.record import default_records

PRODUCE, FETCH, METADATA, JOIN_GROUP, API_VERSIONS, INIT_PRODUCER_ID = 0, 1, 3, 11, 18, 22
NONE, REQUEST_TIMED_OUT, COORDINATOR_LOAD_IN_PROGRESS, THROTTLING_QUOTA_EXCEEDED = 0, 7, 14, 89

HOLD_FLOCK = r"""
import fcntl, os, sys, time
f = open(sys.argv[1], "a+")
fcntl.flock(f, fcntl.LOCK_EX)   # caught holding the lock...
print("holding", flush=True)
time.sleep(600)                 # ...and stopped (SIGSTOP) by the test
"""

SHARED_WRITER = r"""
import fcntl, os, sys, time
from kafkalite import Log
log = Log(sys.argv[1], shared_writers=True)   # a live embedded writer of the partition...
f = open(os.path.join(sys.argv[1], ".kafkalite.lock"), "r+")
fcntl.flock(f, fcntl.LOCK_EX)                  # ...caught holding the append lock
print("holding", flush=True)
time.sleep(600)
"""


def stop_holder(start: Callable[..., subprocess.Popen], source: str, path: str) -> subprocess.Popen:
    """Run ``python -c source path`` through ``start`` (``spawn.code`` in tests), wait until it
    holds its lock, and stop it there (SIGSTOP)."""
    proc = start(source, path, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    proc.send_signal(signal.SIGSTOP)
    return proc


def release(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.wait(timeout=30)


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> tuple:
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def string(self) -> str | None:
        (n,) = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s


class Wire:
    """One client connection (request header v1, response header v0)."""

    def __init__(self, address: str, timeout: float = 60.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def call(self, api_key: int, version: int, body: bytes) -> bytes:
        self.correlation += 1
        frame = struct.pack(">hhih", api_key, version, self.correlation, 9) + b"isolation" + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", self._read(4))
        response = self._read(size)
        assert struct.unpack(">i", response[:4])[0] == self.correlation
        return response[4:]

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "the server closed the connection"
            out += chunk
        return out

    def call_flexible(
        self, api_key: int, version: int, body: bytes, client_id: str = "wire"
    ) -> CompactReader:
        """A flexible version's request (header v2: client id, no tagged fields) and its response
        after the header (v1: correlation id, tagged fields), to read with compact types."""
        self.correlation += 1
        header = struct.pack(">hhi", api_key, version, self.correlation) + _string(client_id) + b"\x00"
        frame = header + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", self._read(4))
        r = CompactReader(self._read(size))
        assert r.i32() == self.correlation
        r.tags()
        return r

    def close(self) -> None:
        self.sock.close()

    def api_versions(self) -> int:
        return struct.unpack(">h", self.call(API_VERSIONS, 0, b"")[:2])[0]

    def metadata(self, topics: list[str]) -> dict[str, int]:
        """Metadata v1 (auto-creation allowed): each topic's error code."""
        body = self.call(METADATA, 1, struct.pack(">i", len(topics)) + b"".join(_string(t) for t in topics))
        r = Reader(body)
        for _ in range(r.take(">i")[0]):  # brokers
            r.take(">i")
            r.string()
            r.take(">i")
            r.string()
        r.take(">i")  # controller
        errors = {}
        for _ in range(r.take(">i")[0]):
            (error,) = r.take(">h")
            name = r.string()
            r.take(">?")
            for _ in range(r.take(">i")[0]):
                r.take(">hii")
                r.take(f">{r.take('>i')[0]}i")
                r.take(f">{r.take('>i')[0]}i")
            assert name is not None
            errors[name] = error
        return errors

    def produce(self, topic: str, partition: int, value: bytes) -> int:
        """Produce v3, acks=-1, timeout 30 s: the partition's error code."""
        builder = default_records.DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 20,
        )
        builder.append(0, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
        records = bytes(builder.build())
        body = (
            struct.pack(">hhi", -1, -1, 30_000)
            + struct.pack(">i", 1)
            + _string(topic)
            + struct.pack(">ii", 1, partition)
            + struct.pack(">i", len(records))
            + records
        )
        r = Reader(self.call(PRODUCE, 3, body))
        r.take(">i")
        r.string()
        r.take(">i")
        _index, error = r.take(">ih")
        return error

    def init_producer_id(self, transactional_id: str | None = None) -> tuple[int, int, int]:
        """(error, producer id, epoch), InitProducerId v1."""
        tid = struct.pack(">h", -1) if transactional_id is None else _string(transactional_id)
        body = self.call(INIT_PRODUCER_ID, 1, tid + struct.pack(">i", 60_000))
        _throttle, error, pid, epoch = struct.unpack(">ihqh", body)
        return error, pid, epoch

    def produce_batch(self, records: bytes, topic: str, partition: int = 0) -> tuple[int, int]:
        """Produce v3, acks=-1, of ``records`` (v2 batches) as they are: (error, base offset)."""
        body = (
            struct.pack(">hhi", -1, -1, 10_000)  # no transactional id, acks=-1, timeout
            + struct.pack(">i", 1)
            + _string(topic)
            + struct.pack(">ii", 1, partition)
            + struct.pack(">i", len(records))
            + records
        )
        r = Reader(self.call(PRODUCE, 3, body))
        assert r.take(">i")[0] == 1  # topics
        r.string()
        assert r.take(">i")[0] == 1  # partitions
        _index, error, base_offset, _append_time = r.take(">ihqq")
        return error, base_offset

    def fetch(self, topic: str, partition: int, offset: int) -> int:
        """Fetch v4, no wait: the partition's error code."""
        body = (
            struct.pack(">iiiib", -1, 0, 0, 1 << 20, 0)
            + struct.pack(">i", 1)
            + _string(topic)
            + struct.pack(">i", 1)
            + struct.pack(">iqi", partition, offset, 1 << 20)
        )
        r = Reader(self.call(FETCH, 4, body))
        r.take(">i")  # throttle
        r.take(">i")
        r.string()
        r.take(">i")
        _index, error = r.take(">ih")
        return error

    def join_group(self, group: str) -> int:
        """JoinGroup v0 as a new member: the error code."""
        protocols = struct.pack(">i", 1) + _string("range") + struct.pack(">i", 0)
        body = _string(group) + struct.pack(">i", 10_000) + _string("") + _string("consumer") + protocols
        return struct.unpack(">h", self.call(JOIN_GROUP, 0, body)[:2])[0]


def timed(call, *args):
    started = time.monotonic()
    result = call(*args)
    return result, time.monotonic() - started


def in_background(call, *args) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["result"], out["seconds"] = timed(call, *args)
        except Exception as e:
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


# -- flexible versions (KIP-482): compact strings and arrays, tagged fields ---------------------
def uvarint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


def compact_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def compact_array(items: list[bytes] | None) -> bytes:
    return b"\x00" if items is None else uvarint(len(items) + 1) + b"".join(items)


class CompactReader:
    """A flexible version's response body, read field by field."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def raw(self, n: int) -> bytes:
        out = self.data[self.at : self.at + n]
        assert len(out) == n, "the response ended early"
        self.at += n
        return out

    def i8(self) -> int:
        return struct.unpack(">b", self.raw(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self.raw(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.raw(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self.raw(8))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.raw(1)[0]
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self.raw(n - 1).decode()

    def count(self) -> int:
        """A compact array's length (-1 for null)."""
        return self.uvarint() - 1

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.raw(self.uvarint())
