"""Connection creation rate limits on `kafkalite serve` (issue 35, Kafka's KIP-612): the ip
entities' ``connection_creation_rate`` quota closes, unserved, connections from an address over
its rate while connections already open keep working, and stops once the quota is removed
(AlterClientQuotas); ``max_connection_creation_rate`` (``max.connection.creation.rate``) delays
the accepts over it instead; values Kafka refuses are refused with its messages."""

from __future__ import annotations

import socket
import time

import kafkalite
import kafkalite.quotas
import pytest
from helpers import run_cli
from kafkalite.server import Server
from server_wire import Wire
from test_server_sasl import API_VERSIONS, read_response

kafka = pytest.importorskip("kafka")
from kafka.protocol.admin.client_quotas import (  # noqa: E402
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
)
from kafka.protocol.metadata import MetadataRequest  # noqa: E402

INVALID_REQUEST = 42
RATE = "connection_creation_rate"


def alter(wire: Wire, entries) -> list[tuple[int, str | None]]:
    response = wire.call(AlterClientQuotasRequest[0](entries=entries, validate_only=False), timeout=10)
    return [(e.error_code, e.error_message) for e in response.entries]


def served(address: str, n: int) -> list[bool]:
    """Open `n` connections at once, then ask each for ApiVersions: True where it was answered,
    False where the server closed it unserved."""
    host, port = address.rsplit(":", 1)
    socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(n)]
    out = []
    for sock in socks:
        try:
            sock.sendall(API_VERSIONS)
            out.append(read_response(sock) is not None)
        except (BrokenPipeError, ConnectionResetError):
            out.append(False)
        sock.close()
    return out


def test_a_flood_over_its_addresses_rate_is_closed_while_an_open_client_keeps_working(tmp_path):
    with Server(tmp_path / "data") as server:
        client = Wire(server.address)
        ip = [("ip", "127.0.0.1")]
        assert alter(client, [(ip, [(RATE, 2.0, False)])]) == [(0, None)]
        response = client.call(
            DescribeClientQuotasRequest[0](components=[("ip", 0, "127.0.0.1")], strict=True), timeout=10
        )
        assert [(e, dict(v)) for e, v in response.entries] == [([("ip", "127.0.0.1")], {RATE: 2.0})]
        # 2/s over Kafka's 10 s minimum window: about 20 at once, the rest closed unserved.
        answered = served(server.address, 60)
        assert 15 <= sum(answered) <= 25, answered
        assert not all(answered[-20:]), "the last of the flood is over the rate"
        # The connection opened before the flood is served throughout.
        assert client.call(MetadataRequest[1](topics=None), timeout=10).brokers
        assert alter(client, [(ip, [(RATE, 0.0, True)])]) == [(0, None)], "removed"
        assert all(served(server.address, 30)), "no quota: every connection served"
        client.close()


def test_the_default_ip_quota_applies_to_every_address_without_its_own(tmp_path):
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("t", 1)  # the data directory, before its quotas
    kafkalite.quotas.alter_quotas(data, {"ip": None}, {RATE: 1})
    assert kafkalite.quotas.describe_quotas(data) == [({"ip": None}, {RATE: 1.0})]
    with Server(data) as server:
        assert 5 <= sum(served(server.address, 30)) <= 15, "the default, 1/s: about 10"
        # 127.0.0.1's own quota, far above the flood, set beside the running server (seen
        # within a second) overrides the default.
        kafkalite.quotas.alter_quotas(data, {"ip": "127.0.0.1"}, {RATE: 1000})
        time.sleep(1.5)
        assert all(served(server.address, 30))


def test_the_broker_wide_rate_delays_accepts_over_it_without_closing_them(tmp_path):
    with Server(tmp_path / "data", max_connection_creation_rate=2) as server:
        # 20 within the 10 s window; the next ones wait (a throttle of up to 1 s each) but are
        # served.
        assert all(served(server.address, 20))
        start = time.monotonic()
        assert all(served(server.address, 4)), "delayed, not closed"
        assert time.monotonic() - start >= 1.0, "the accepts over 2/s waited"
    with pytest.raises(kafkalite.InvalidConfigError, match="max_connection_creation_rate"):
        Server(tmp_path / "data", max_connection_creation_rate=0)


def test_values_and_entities_kafka_refuses_are_refused(tmp_path):
    data = tmp_path / "data"
    with Server(data) as server:
        wire = Wire(server.address)
        refused = alter(
            wire,
            [
                ([("ip", "127.0.0.1")], [("producer_byte_rate", 5.0, False)]),
                ([("ip", "127.0.0.1")], [(RATE, 1.5, False)]),
                ([("ip", "127.0.0.1")], [(RATE, 0.0, False)]),
                ([("ip", "127.0.0.1")], [(RATE, 3e9, False)]),
                ([("ip", "no-such-host.invalid")], [(RATE, 5.0, False)]),
                ([("ip", "127.0.0.1"), ("user", "bob")], [(RATE, 5.0, False)]),
                ([("user", "bob")], [(RATE, 5.0, False)]),
                ([("ip", None)], [(RATE, 7.0, False)]),
            ],
        )
        assert [code for code, _ in refused] == [INVALID_REQUEST] * 7 + [0], refused
        messages = [why for _, why in refused]
        assert "Invalid configuration key producer_byte_rate" in messages[0]
        assert "cannot be a fractional value" in messages[1]
        assert "must be greater than 0" in messages[2]
        assert "too large for an INT" in messages[3]
        assert "is not a valid IP or resolvable host" in messages[4]
        assert "should not be combined" in messages[5]
        assert f"Invalid configuration key {RATE}" in messages[6]
        wire.close()
    assert kafkalite.quotas.describe_quotas(data) == [({"ip": None}, {RATE: 7.0})]
    with pytest.raises(kafkalite.InvalidConfigError, match="fractional"):
        kafkalite.quotas.alter_quotas(data, {"ip": "10.0.0.5"}, {RATE: 2.5})
    done = run_cli(
        "quotas",
        "alter",
        "--data-dir",
        str(data),
        "--ip",
        "10.0.0.5",
        "--add-config",
        f"{RATE}=50",
        text=True,
    )
    assert done.returncode == 0, done.stderr
    shown = run_cli("quotas", "describe", "--data-dir", str(data), "--ip", "10.0.0.5", text=True).stdout
    assert shown.splitlines() == [f"ip '10.0.0.5'\t{RATE}=50"], shown
