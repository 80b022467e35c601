"""The tests' one Kafka wire client (the server soak's probe and attackers included), and
stopped lock holders.

``Wire`` is one client connection (request header v1, response header v0) whose every read
has a deadline: ``Late`` when no complete answer comes in time, ``Closed`` when the server
closes or resets the connection (either way the connection is unusable after it: close it),
so a server that does not answer is measured, never waited on forever. Two ways to ask:

- ``wire.call(API_KEY, version, body)``: a body built by hand (``struct``), so each request
  runs on its own connection with its own timing; the response body comes back, within the
  connection's timeout. The methods ``api_versions()``, ``metadata()``, ``produce()``,
  ``produce_batch()``, ``fetch()``, ``join_group()``, ``init_producer_id()``,
  ``find_coordinator()`` and ``login()`` (SASL/SCRAM, RFC 5802's client computation in
  ``scram_client_final``) are such calls.
  tests/server/test_server_isolation.py and benches/bench_server_isolation.py measure a server so
  while a neighbour holds a lock (issue 21), tests/server/test_server_idempotence.py sends an
  idempotent producer's batches as they are.
- ``wire.call(request, timeout)``: a request of kafka-python's protocol classes (an
  implementation we did not write), built by this module's functions ``api_versions()``,
  ``metadata()``, ``fetch()``, ``produce()``, ``offset_commit()``, ``offset_fetch()`` and
  ``describe_groups()``; its decoded response (``errors_of`` lists its error codes). The soak's
  probe and attackers (tests/faults/server_*.py) ask so; ``send``/``skip`` read a huge answer
  without keeping it.

``stop_holder`` starts a process that takes a lock (``HOLD_FLOCK``, ``SHARED_WRITER``) and
stops it there (SIGSTOP); tests/engine/test_engine_stopped_lock_holder.py stops a writer so."""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, overload

from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

PRODUCE, FETCH, METADATA, JOIN_GROUP, API_VERSIONS, INIT_PRODUCER_ID = 0, 1, 3, 11, 18, 22
FIND_COORDINATOR, SASL_HANDSHAKE, SASL_AUTHENTICATE = 10, 17, 36
NONE, REQUEST_TIMED_OUT, COORDINATOR_LOAD_IN_PROGRESS, THROTTLING_QUOTA_EXCEEDED = 0, 7, 14, 89
INT31 = 2**31 - 1
KAFKA_STORAGE_ERROR = 56

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


# -- the connection -------------------------------------------------------------------------------
class Closed(ConnectionError):
    """The server closed the connection (or reset it) before the answer was complete."""


class Late(TimeoutError):
    """No complete answer within the deadline."""


def connect(address: str, timeout: float) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


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


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def produce_body(topic: str, partition: int, value: bytes, timeout_ms: int = 30_000) -> bytes:
    """A Produce v3 body, acks=-1: one record of ``value`` for ``topic``-``partition``."""
    return produce_records_body(record_batch([value]), topic, partition, timeout_ms)


def produce_records_body(records: bytes, topic: str, partition: int, timeout_ms: int) -> bytes:
    """A Produce v3 body, acks=-1, no transactional id: ``records`` (v2 batches) as they are."""
    return (
        struct.pack(">hhi", -1, -1, timeout_ms)
        + struct.pack(">i", 1)
        + _string(topic)
        + struct.pack(">ii", 1, partition)
        + struct.pack(">i", len(records))
        + records
    )


def produce_error(body: bytes) -> int:
    """The (first) partition's error code in a Produce v3 response body."""
    r = Reader(body)
    r.take(">i")
    r.string()
    r.take(">i")
    _index, error = r.take(">ih")
    return error


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
    """One client connection; ``timeout`` bounds the connect and every hand-built call."""

    def __init__(self, address: str, timeout: float = 60.0, client_id: str = "kafkalite-tests") -> None:
        self.sock = connect(address, timeout)
        self.timeout = timeout
        self.client_id = client_id
        self.correlation = 0

    def send(self, request: Any) -> int:
        """Send a kafka-python request; its correlation id."""
        self.correlation += 1
        request.with_header(correlation_id=self.correlation, client_id=self.client_id)
        self._send(request.encode(header=True, framed=True))
        return self.correlation

    def _send(self, frame: bytes) -> None:
        self.sock.settimeout(self.timeout)  # not what the last read's deadline left
        self.sock.sendall(frame)

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

    def _answer(self, correlation: int, deadline: float) -> bytes:
        """The response to ``correlation``, after its correlation id."""
        body = self.receive(deadline)
        got = struct.unpack(">i", body[:4])[0]
        if got != correlation:
            raise Closed(f"answer to correlation {got}, expected {correlation}")
        return body[4:]

    @overload
    def call(self, api_key: int, version: int, body: bytes, /) -> bytes: ...

    @overload
    def call(self, request: Any, /, timeout: float) -> Any: ...

    def call(self, request: Any, /, timeout: float, body: bytes | None = None) -> Any:
        """``call(request, timeout)``: a kafka-python request, its decoded response within
        ``timeout`` seconds. ``call(api_key, version, body)``: a hand-built request body, the
        response body within the connection's timeout."""
        if body is None:
            deadline = time.monotonic() + timeout
            answer = self._answer(self.send(request), deadline)
            return ResponseClassRegistry.get_response_class(request.header).decode(io.BytesIO(answer))
        api_key, version = request, int(timeout)  # the hand-built form's second argument
        deadline = time.monotonic() + self.timeout
        self.correlation += 1
        frame = struct.pack(">hhi", api_key, version, self.correlation) + _string(self.client_id) + body
        self._send(struct.pack(">i", len(frame)) + frame)
        return self._answer(self.correlation, deadline)

    def send_raw(self, api_key: int, version: int, body: bytes) -> int:
        """Send a hand-built request without waiting for its response (several may be in flight,
        as a producer's are); its correlation id, which ``receive_raw`` gives back."""
        self.correlation += 1
        frame = struct.pack(">hhi", api_key, version, self.correlation) + _string(self.client_id) + body
        self._send(struct.pack(">i", len(frame)) + frame)
        return self.correlation

    def receive_raw(self) -> tuple[int, bytes]:
        """The next response within the connection's timeout: (its correlation id, its body)."""
        body = self.receive(time.monotonic() + self.timeout)
        return struct.unpack(">i", body[:4])[0], body[4:]

    def _read(self, n: int) -> bytes:
        """``n`` bytes within the connection's timeout."""
        return read_exactly(self.sock, n, time.monotonic() + self.timeout)

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

    # -- hand-built calls ------------------------------------------------------------------------
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
        """Produce v3 of one record, acks=-1, timeout 30 s: the partition's error code."""
        return self._produce(record_batch([value]), topic, partition, 30_000)[0]

    def produce_batch(self, records: bytes, topic: str, partition: int = 0) -> tuple[int, int]:
        """Produce v3, acks=-1, of ``records`` (v2 batches) as they are: (error, base offset)."""
        return self._produce(records, topic, partition, 10_000)

    def _produce(self, records: bytes, topic: str, partition: int, timeout_ms: int) -> tuple[int, int]:
        r = Reader(self.call(PRODUCE, 3, produce_records_body(records, topic, partition, timeout_ms)))
        assert r.take(">i")[0] == 1  # topics
        r.string()
        assert r.take(">i")[0] == 1  # partitions
        _index, error, base_offset, _append_time = r.take(">ihqq")
        return error, base_offset

    def init_producer_id(self, transactional_id: str | None = None) -> tuple[int, int, int]:
        """(error, producer id, epoch), InitProducerId v1."""
        tid = struct.pack(">h", -1) if transactional_id is None else _string(transactional_id)
        body = self.call(INIT_PRODUCER_ID, 1, tid + struct.pack(">i", 60_000))
        _throttle, error, pid, epoch = struct.unpack(">ihqh", body)
        return error, pid, epoch

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

    def login(self, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> int:
        """SaslHandshake v1 and SaslAuthenticate v1 through a SCRAM exchange: the error code
        (0: authenticated)."""
        error = struct.unpack(">h", self.call(SASL_HANDSHAKE, 1, _string(mechanism))[:2])[0]
        if error:
            return int(error)
        bare = f"n={user},r={base64.b64encode(struct.pack('>d', time.time())).decode()}"
        error, first = self.sasl_authenticate(b"n,," + bare.encode())
        if error:
            return error
        final, _ = scram_client_final(password.encode(), bare, first.decode(), hash=mechanism[6:])
        return self.sasl_authenticate(final)[0]

    def sasl_authenticate(self, token: bytes) -> tuple[int, bytes]:
        """SaslAuthenticate v1 of one token: (error code, the server's token)."""
        r = Reader(self.call(SASL_AUTHENTICATE, 1, struct.pack(">i", len(token)) + token))
        (error,) = r.take(">h")
        r.string()  # the error message
        (size,) = r.take(">i")
        return int(error), r.take(f">{max(size, 0)}s")[0]

    def find_coordinator(self, key: str, key_type: int = 0) -> list[int]:
        """FindCoordinator v4 (KIP-699's batched keys) of one group (key_type 0) or
        transactional id (1): each key's error code."""
        body = struct.pack(">b", key_type) + compact_array([compact_string(key)]) + b"\x00"
        r = self.call_flexible(FIND_COORDINATOR, 4, body, client_id=self.client_id)
        r.i32()  # throttle_time_ms
        errors = []
        for _ in range(r.count()):
            r.string()  # the key
            r.i32()  # node id
            r.string()  # host
            r.i32()  # port
            errors.append(r.i16())
            r.string()  # the error message
            r.tags()
        return errors

    def join_group(self, group: str) -> int:
        """JoinGroup v0 as a new member: the error code."""
        protocols = struct.pack(">i", 1) + _string("range") + struct.pack(">i", 0)
        body = _string(group) + struct.pack(">i", 10_000) + _string("") + _string("consumer") + protocols
        return struct.unpack(">h", self.call(JOIN_GROUP, 0, body)[:2])[0]


def scram_client_final(
    password: bytes,
    client_first_bare: str,
    server_first: str,
    nonce: str | None = None,
    hash: str = "SHA-256",
) -> tuple[bytes, bytes]:
    """RFC 5802's client computation, with hashlib and hmac (independent of the server's crates):
    the client-final message and the server-final one to expect."""
    name = hash.lower().replace("-", "")
    fields = dict(f.split("=", 1) for f in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(name, password, base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", name).digest()
    without_proof = f"c=biws,r={nonce or fields['r']}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.new(name, client_key).digest(), auth, name).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.new(salted, b"Server Key", name).digest()
    expected = base64.b64encode(hmac.new(server_key, auth, name).digest()).decode()
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode(), f"v={expected}".encode()


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


# -- kafka-python requests, for ``Wire.call(request, timeout)`` --------------------------------------
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


def record_batch(values: list[bytes], batch_size: int = 1 << 20) -> bytes:
    """A v2 record batch of ``values`` (kafka-python's builder), for raw Produce requests;
    ``batch_size``: room for more than 1 MiB of values in one batch."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=batch_size,
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
