"""Kafka's client quotas on `kafkalite serve` (issue 35): AlterClientQuotas and
DescribeClientQuotas over the data directory's quota file with Kafka's validation and filter
semantics, kept across a restart and seen by another server on the same directory; a producer
over its producer_byte_rate is answered with throttle_time_ms > 0 and held near the rate, a
consumer over its consumer_byte_rate gets throttled empty answers; a client over its
request_percentage (server time) is answered with throttle_time_ms > 0 and held back while another
is not; with no quota set every throttle_time_ms is 0; the file is old or new after a kill while it is written, a damaged one
stops the start; `kafkalite quotas` and Kafka's `kafka-configs --entity-type clients|ips` edit it
(ip entities' connection_creation_rate: test_server_connection_rate.py)."""

from __future__ import annotations

import json
import os
import socket
import struct
import time

import kafkalite
import kafkalite.quotas
import pytest
from helpers import run_cli
from kafkalite.server import Server
from serve_proc import free_port, serve_on
from server_wire import METADATA, PRODUCE, Wire, produce_records_body, record_batch
from wire_fetch import fetch_request, read_response, recv_exactly

pytest_plugins = ["kafkalite.testing"]

kafka = pytest.importorskip("kafka")
from kafka.protocol.admin.client_quotas import (  # noqa: E402
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
)

INVALID_REQUEST = 42
EXACT, DEFAULT, SPECIFIED = 0, 1, 2
QUOTAS_FILE = ".kafkalite-quotas.json"


def alter(wire: Wire, entries, validate_only: bool = False) -> list[tuple[int, str | None]]:
    """AlterClientQuotas of ``entries`` [(entity [(type, name)], ops [(key, value, remove)])]."""
    response = wire.call(
        AlterClientQuotasRequest[0](entries=entries, validate_only=validate_only), timeout=10
    )
    return [(e.error_code, e.error_message) for e in response.entries]


def describe(wire: Wire, components, strict: bool = False) -> dict:
    """DescribeClientQuotas: {((type, name), ...): {key: value}}."""
    response = wire.call(DescribeClientQuotasRequest[0](components=components, strict=strict), timeout=10)
    assert response.error_code == 0, response
    return {tuple(tuple(e) for e in entity): dict(values) for entity, values in response.entries}


def test_alter_and_describe_with_kafkas_filters_validation_and_restart(tmp_path):
    data = tmp_path / "data"
    with Server(data) as server:
        wire = Wire(server.address)
        assert describe(wire, []) == {}
        entries = [
            ([("user", "alice")], [("producer_byte_rate", 1024.0, False)]),
            ([("user", None)], [("consumer_byte_rate", 2048.0, False)]),
            ([("user", "alice"), ("client-id", "app")], [("producer_byte_rate", 512.0, False)]),
            ([("client-id", "app")], [("consumer_byte_rate", 4096.0, False)]),
        ]
        assert alter(wire, entries, validate_only=True) == [(0, None)] * 4
        assert describe(wire, []) == {}, "validate_only stored nothing"
        assert alter(wire, entries) == [(0, None)] * 4
        alice = (("user", "alice"),)
        assert describe(wire, [("user", EXACT, "alice")], strict=True) == {
            alice: {"producer_byte_rate": 1024.0}
        }
        assert set(describe(wire, [("user", EXACT, "alice")])) == {
            alice,
            (("user", "alice"), ("client-id", "app")),
        }
        assert describe(wire, [("user", DEFAULT, None)]) == {
            (("user", None),): {"consumer_byte_rate": 2048.0}
        }
        assert set(describe(wire, [("user", SPECIFIED, None)], strict=True)) == {alice, (("user", None),)}
        assert set(describe(wire, [("client-id", SPECIFIED, None)])) == {
            (("client-id", "app"),),
            (("user", "alice"), ("client-id", "app")),
        }
        assert len(describe(wire, [])) == 4, "no component, not strict: every entity"
        refused = alter(
            wire,
            [
                ([("user", "bob")], [("no_such_key", 1.0, False)]),
                ([("user", "bob")], [("controller_mutation_rate", 50.0, False)]),
                ([("ip", "1.2.3.4")], [("producer_byte_rate", 5.0, False)]),
                ([("colour", "red")], [("producer_byte_rate", 5.0, False)]),
                ([("user", "bob")], [("producer_byte_rate", -1.0, False)]),
                ([("user", "bob")], [("producer_byte_rate", 100.0, False)]),
            ],
        )
        assert [code for code, _ in refused] == [INVALID_REQUEST] * 5 + [0], refused
        assert "Invalid configuration key no_such_key" in refused[0][1]
        assert "not enforced" in refused[1][1], "a quota kafkalite would not enforce is refused, not stored"
        assert describe(wire, [("user", EXACT, "bob")]) == {(("user", "bob"),): {"producer_byte_rate": 100.0}}
        assert alter(wire, [([("user", "bob")], [("producer_byte_rate", 0.0, True)])]) == [(0, None)]
        assert describe(wire, [("user", EXACT, "bob")]) == {}
        wire.close()
    stored = json.loads((data / QUOTAS_FILE).read_text())
    assert stored["version"] == 1 and len(stored["quotas"]) == 4
    with Server(data) as server:
        wire = Wire(server.address)
        assert describe(wire, [("user", EXACT, "alice")], strict=True) == {
            alice: {"producer_byte_rate": 1024.0}
        }
        wire.close()


def test_a_quota_altered_through_one_server_is_seen_by_another_on_the_same_directory(tmp_path):
    """The quotas are held in memory and re-read when the file changed (checked once a second),
    so a second server's AlterClientQuotas counts without a restart."""
    data = tmp_path / "data"
    with Server(data) as one, Server(data) as other:
        a, b = Wire(one.address), Wire(other.address)
        assert describe(b, []) == {}
        assert alter(a, [([("client-id", "x")], [("producer_byte_rate", 4096.0, False)])]) == [(0, None)]
        deadline = time.monotonic() + 5
        while describe(b, []) == {} and time.monotonic() < deadline:
            time.sleep(0.2)
        assert describe(b, []) == {(("client-id", "x"),): {"producer_byte_rate": 4096.0}}
        a.close()
        b.close()


def produce_throttle(wire: Wire, topic: str, value: bytes) -> int:
    """Produce v3 of one record: the answer's throttle_time_ms (the body's last field)."""
    body = wire.call(PRODUCE, 3, produce_records_body(record_batch([value]), topic, 0, 10_000))
    return struct.unpack(">i", body[-4:])[0]


RATE = 100_000  # bytes per second
CHUNK = 50_000
TOTAL = 2_400_000  # 24 s at RATE; Kafka's 11 x 1 s windows let the first ~10 s of it in at once


def test_a_producer_over_its_byte_rate_is_throttled_and_held_near_the_rate(tmp_path):
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("t", 1)
    with Server(data) as server:
        free = Wire(server.address, client_id="free")
        assert [produce_throttle(free, "t", b"x" * CHUNK) for _ in range(40)] == [0] * 40, (
            "no quota set: never throttled"
        )
        assert alter(free, [([("client-id", "slow")], [("producer_byte_rate", float(RATE), False)])]) == [
            (0, None)
        ]
        slow = Wire(server.address, client_id="slow")
        began, throttles = time.monotonic(), []
        for _ in range(TOTAL // CHUNK):
            throttles.append(produce_throttle(slow, "t", b"x" * CHUNK))
        elapsed = time.monotonic() - began
        assert max(throttles) > 0, throttles
        assert elapsed >= TOTAL / RATE * 0.5, f"{TOTAL} bytes at {RATE} B/s took {elapsed:.1f} s"
        assert produce_throttle(free, "t", b"x" * CHUNK) == 0, "another client id has no quota"
        slow.close()
        free.close()


def fetch_answer(sock, correlation_id: int) -> tuple[int, int, int]:
    """One Fetch v4 of t-0 from offset 0 on ``sock`` (null client id): (throttle_time_ms,
    topics in the answer, record bytes)."""
    sock.sendall(fetch_request([("t", 0, 0, 1 << 20)], correlation_id=correlation_id))
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    data = recv_exactly(sock, size)
    throttle, topics = struct.unpack_from(">ii", data, 4)
    _, parts = read_response(io_socket(struct.pack(">i", size) + data))
    return throttle, topics, sum(p.records for p in parts)


class io_socket:
    """A received frame replayed for ``read_response``."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def recv(self, n: int) -> bytes:
        out, self.data = self.data[:n], self.data[n:]
        return out


QUOTA_WINDOW_BYTES = 10_000 * 10  # Kafka caps a fetch at the quota x all windows but one


def test_a_consumer_over_its_byte_rate_gets_throttled_empty_answers(tmp_path):
    """The default user's consumer_byte_rate (every unauthenticated client is User:ANONYMOUS):
    a fetch is capped at what the quota allows over its window, and the next one, past the quota,
    is answered with throttle_time_ms > 0 and no records (Kafka's throttled fetch response)."""
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("t", 1)
    log = kafkalite.Log(str(data / "t-0"))
    for _ in range(100):
        log.append_values([b"y" * 1000] * 10)
    log.close()
    with Server(data) as server:
        wire = Wire(server.address)
        host, port = server.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            assert fetch_answer(sock, 0)[0] == 0, "no quota set: never throttled"
            assert alter(wire, [([("user", None)], [("consumer_byte_rate", 10_000.0, False)])]) == [(0, None)]
            first = fetch_answer(sock, 1)
            second = fetch_answer(sock, 2)
        assert first[0] == 0 and 0 < first[2] <= QUOTA_WINDOW_BYTES + 11_000, first
        assert second[0] > 0 and second[1] == 0, second
        wire.close()


def test_kafkalite_quotas_cli_alters_a_data_directory_a_running_server_enforces(tmp_path):
    """`kafkalite quotas alter` on the data directory; the running server answers Describe with
    it within a second; bad keys are refused with Kafka's words and change nothing."""
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("t", 1)
    with Server(data) as server:
        done = run_cli(
            "quotas", "alter", "--data-dir", str(data), "--user", "alice", "--client-id-default",
            "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048", text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        wire = Wire(server.address)
        want = {
            (("user", "alice"), ("client-id", None)): {
                "producer_byte_rate": 1024.0,
                "consumer_byte_rate": 2048.0,
            }
        }
        deadline = time.monotonic() + 5
        while describe(wire, []) != want and time.monotonic() < deadline:
            time.sleep(0.2)
        assert describe(wire, []) == want
        wire.close()
    bad = run_cli(
        "quotas", "alter", "--data-dir", str(data), "--user", "bob", "--add-config", "colour=1", text=True
    )
    assert bad.returncode != 0 and "Invalid configuration key colour" in bad.stderr, bad.stderr
    listed = run_cli("quotas", "describe", "--data-dir", str(data), text=True)
    assert listed.stdout.splitlines() == [
        "user 'alice', client-id <default>\tconsumer_byte_rate=2048,producer_byte_rate=1024"
    ]
    removed = run_cli(
        "quotas", "alter", "--data-dir", str(data), "--user", "alice", "--client-id-default",
        "--delete-config", "producer_byte_rate,consumer_byte_rate", text=True,
    )  # fmt: skip
    assert removed.returncode == 0 and kafkalite.quotas.describe_quotas(data) == [], removed.stderr


@pytest.mark.parametrize("fault", ["checkpoint.write=kill", "checkpoint.rename=kill", "dir.sync=kill"])
def test_the_quota_file_is_old_or_new_after_a_kill_during_alter(tmp_path, spawn, fault):
    """The server killed (-9) while AlterClientQuotas writes the quota file, before the rename,
    or after it: the file parses and holds the old quotas or the new ones, and the next start
    enforces what it holds."""
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("t", 1)
    kafkalite.quotas.alter_quotas(data, {"user": "alice"}, {"producer_byte_rate": 1000})
    port = free_port()
    proc = serve_on(spawn.module, data, port, env={**os.environ, "KAFKALITE_FAILPOINTS": fault + "@1"})
    wire = Wire(f"127.0.0.1:{port}")
    with pytest.raises(ConnectionError):
        alter(wire, [([("user", "alice")], [("producer_byte_rate", 2000.0, False)])])
    assert proc.wait(10) == -9
    held = kafkalite.quotas.describe_quotas(data)
    assert held in (
        [({"user": "alice"}, {"producer_byte_rate": 1000.0})],
        [({"user": "alice"}, {"producer_byte_rate": 2000.0})],
    )
    with Server(data) as server:
        wire = Wire(server.address)
        assert describe(wire, []) == {(("user", "alice"),): held[0][1]}
        wire.close()


def test_a_rate_that_rounds_to_zero_is_refused_and_the_file_stays_readable(tmp_path):
    """A rate within 1e-6 of 0 (1e-300) passed the fractional check and was written as 0: the
    file was then damaged for every later alter and the server's next start, a data directory
    bricked by one AlterClientQuotas. Now it is refused as Kafka refuses 0; one within 1e-6 of
    a long is stored as that long."""
    data = tmp_path / "data"
    with Server(data) as server:
        wire = Wire(server.address)
        for tiny in (1e-300, 4e-7):
            [(code, message)] = alter(wire, [([("user", "a")], [("producer_byte_rate", tiny, False)])])
            assert code == INVALID_REQUEST and "must be greater than 0" in message
        assert alter(wire, [([("user", "a")], [("producer_byte_rate", 99.9999999, False)])]) == [(0, None)]
        assert alter(wire, [([("user", "b")], [("producer_byte_rate", 7.0, False)])]) == [(0, None)]
        assert describe(wire, [("user", EXACT, "a")]) == {(("user", "a"),): {"producer_byte_rate": 100.0}}
    with pytest.raises(kafkalite.KafkaliteError, match="must be greater than 0"):
        kafkalite.quotas.alter_quotas(data, {"user": "c"}, {"consumer_byte_rate": 1e-300})
    with Server(data) as server:
        assert len(describe(Wire(server.address), [])) == 2


def test_a_damaged_quota_file_stops_the_start_with_what_to_do(tmp_path):
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("t", 1)
    (data / QUOTAS_FILE).write_text('{"version": 1, "quotas": [{"entity": {"user": 7}}]}')
    with pytest.raises(kafkalite.KafkaliteError, match="client quota file .* is damaged"):
        Server(data)
    with pytest.raises(kafkalite.KafkaliteError, match="damaged"):
        kafkalite.quotas.describe_quotas(data)
    # Not UTF-8 at all: damaged too, with what to do (it was "stream did not contain valid UTF-8").
    (data / QUOTAS_FILE).write_bytes(b"\xff\xfe" * 10)
    with pytest.raises(kafkalite.KafkaliteError, match="client quota file .* is damaged.*delete it"):
        Server(data)


def config_command(server: Server, entity_type: str, *args: str) -> str:
    """Kafka 4.1.1's ConfigCommand (`kafka-configs --entity-type ENTITY_TYPE ARGS`) on `server`;
    its stdout."""
    import subprocess

    import maven_jars

    classpath = str(maven_jars.require(maven_jars.kafka_tools_jars) / "*")
    cmd = [
        "java", "-Xmx256m", "-cp", classpath, "kafka.admin.ConfigCommand",
        "--bootstrap-server", server.bootstrap_servers, "--entity-type", entity_type, *args,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.broker
def test_kafka_configs_sets_and_describes_a_default_client_id_quota(tmp_path):
    """`kafka-configs --entity-type clients --entity-default`."""
    with Server(tmp_path / "data") as server:
        default = (server, "clients", "--entity-default")
        config_command(*default, "--alter", "--add-config", "consumer_byte_rate=65536")
        wire = Wire(server.address)
        assert describe(wire, []) == {(("client-id", None),): {"consumer_byte_rate": 65536.0}}
        wire.close()
        assert "consumer_byte_rate=65536" in config_command(*default, "--describe")
        config_command(*default, "--alter", "--delete-config", "consumer_byte_rate")
        assert kafkalite.quotas.describe_quotas(tmp_path / "data") == []
        app = (server, "clients", "--entity-name", "app")
        config_command(*app, "--alter", "--add-config", "request_percentage=0.5")
        assert "request_percentage=0.5" in config_command(*app, "--describe")
        assert kafkalite.quotas.describe_quotas(tmp_path / "data") == [
            ({"client-id": "app"}, {"request_percentage": 0.5})
        ]


@pytest.mark.broker
def test_kafka_configs_sets_describes_and_deletes_an_ip_connection_creation_rate(tmp_path):
    """`kafka-configs --entity-type ips --entity-name 127.0.0.1` (KIP-612's per-address quota)."""
    with Server(tmp_path / "data") as server:
        ip = (server, "ips", "--entity-name", "127.0.0.1")
        config_command(*ip, "--alter", "--add-config", "connection_creation_rate=100")
        assert kafkalite.quotas.describe_quotas(tmp_path / "data") == [
            ({"ip": "127.0.0.1"}, {"connection_creation_rate": 100.0})
        ]
        assert "connection_creation_rate=100" in config_command(*ip, "--describe")
        config_command(*ip, "--alter", "--delete-config", "connection_creation_rate")
        assert kafkalite.quotas.describe_quotas(tmp_path / "data") == []


def metadata_throttle(wire: Wire, topics: list[str]) -> tuple[int, float]:
    """Metadata v4 of ``topics`` (no auto-creation): the answer's throttle_time_ms (the body's
    first field) and the seconds until it came."""
    names = b"".join(struct.pack(">h", len(t)) + t.encode() for t in topics)
    began = time.monotonic()
    body = wire.call(METADATA, 4, struct.pack(">i", len(topics)) + names + b"\x00")
    return struct.unpack(">i", body[:4])[0], time.monotonic() - began


HOG = [("user", "ANONYMOUS"), ("client-id", "hog")]


def test_a_client_over_its_request_percentage_is_throttled_and_held_back_and_another_is_not(tmp_path):
    """Kafka's request quota: a client hammering Metadata of 100 topics with request_percentage
    0.01 (1 ms of server time per 10 s window) gets throttle_time_ms > 0 (at most Kafka's one
    window, 1 s), on its Produce too, and its next request waits that out; another client id of
    the same user has no quota and is never throttled; with no quota, and once it is removed,
    every throttle_time_ms is 0."""
    data = tmp_path / "data"
    admin = kafkalite.Admin(str(data))
    topics = [f"t{i}" for i in range(100)]
    for topic in topics:
        admin.create_topic(topic, 1)
    with Server(data) as server:
        hog = Wire(server.address, client_id="hog")
        other = Wire(server.address, client_id="other")
        assert [metadata_throttle(hog, topics)[0] for _ in range(50)] == [0] * 50, "no quota: never throttled"
        assert alter(other, [(HOG, [("request_percentage", 0.01, False)])]) == [(0, None)]
        throttle = 0
        for _ in range(500):
            throttle, _ = metadata_throttle(hog, topics)
            if throttle:
                break
        assert 0 < throttle <= 1000, throttle
        _, waited = metadata_throttle(hog, topics)
        assert waited >= throttle / 1000 * 0.5, f"announced {throttle} ms, served after {waited:.3f} s"
        assert produce_throttle(hog, "t0", b"x") > 0, "a Produce carries the request throttle too"
        assert [metadata_throttle(other, topics)[0] for _ in range(20)] == [0] * 20, "no quota for 'other'"
        assert alter(other, [(HOG, [("request_percentage", 0.0, True)])]) == [(0, None)]
        assert [metadata_throttle(hog, topics)[0] for _ in range(20)] == [0] * 20, "quota removed"
        hog.close()
        other.close()


def test_request_percentage_is_a_positive_double_as_in_kafka(tmp_path):
    """Kafka's request_percentage is a DOUBLE: fractions are kept, 0 and negatives refused
    (INVALID_REQUEST over the wire, InvalidConfigError in Python, an error from the CLI), and a
    value that is not a number is refused by Python and the CLI before it reaches the file."""
    data = tmp_path / "data"
    with Server(data) as server:
        wire = Wire(server.address)
        for bad in (-1.0, 0.0):
            [(code, message)] = alter(wire, [([("user", "a")], [("request_percentage", bad, False)])])
            assert code == INVALID_REQUEST and "must be greater than 0" in message, message
        assert alter(wire, [([("user", "a")], [("request_percentage", 12.5, False)])]) == [(0, None)]
        assert describe(wire, [("user", EXACT, "a")]) == {(("user", "a"),): {"request_percentage": 12.5}}
        wire.close()
    with pytest.raises(kafkalite.InvalidConfigError, match="must be greater than 0"):
        kafkalite.quotas.alter_quotas(data, {"user": "b"}, {"request_percentage": -3})
    with pytest.raises(kafkalite.InvalidTypeError):
        kafkalite.quotas.alter_quotas(data, {"user": "b"}, {"request_percentage": "abc"})  # type: ignore[dict-item]
    bad = run_cli(
        "quotas", "alter", "--data-dir", str(data), "--user", "b", "--add-config", "request_percentage=abc",
        text=True,
    )  # fmt: skip
    assert bad.returncode != 0 and "a number" in bad.stderr, bad.stderr
    done = run_cli(
        "quotas", "alter", "--data-dir", str(data), "--user", "b", "--add-config", "request_percentage=0.25",
        text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = run_cli("quotas", "describe", "--data-dir", str(data), "--user", "b", text=True)
    assert listed.stdout.splitlines() == ["user 'b'\trequest_percentage=0.25"], listed.stdout
