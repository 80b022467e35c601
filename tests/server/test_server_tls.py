"""TLS on `kafkalite serve` (issue 24): kafka-python and confluent-kafka (librdkafka) produce and
consume over SSL and SASL_SSL (SCRAM), with client certificates required (Kafka's
ssl.client.auth=required) and the principal taken from the certificate's subject; an expired
server certificate, a wrong CA, a client without a certificate or with one from another CA or
expired, a plaintext client on the TLS port and a client that never speaks each fail on the
client side, are logged in one WARNING, and the next good client is served. Off loopback the
server needs TLS unless --allow-plaintext. The Java client: test_server_tls_java.py."""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path

import kafkalite
import kafkalite.users
import pytest
import wire_fetch
from kafkalite import _native
from kafkalite.server import TLS, Server
from tls_certs import CLIENT_PRINCIPAL, Pki, make_pki

pytest_plugins = ["kafkalite.testing"]

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

USER, PASSWORD = "alice", "alice-secret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def confluent_config(server: Server, ca: Path, cert=None, **extra) -> dict:
    config = {
        "bootstrap.servers": server.bootstrap_servers,
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca),
        **extra,
    }
    if cert is not None:
        config["ssl.certificate.location"] = str(cert.cert)
        config["ssl.key.location"] = str(cert.key)
    return config


def confluent_round_trip(config: dict, topic: str, n: int = 20) -> None:
    """Produce n records with acks=all, then read them back from the start."""
    producer = confluent_kafka.Producer({**config, "acks": "all", "message.timeout.ms": 20_000})
    for i in range(n):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({**config, "group.id": f"{topic}-g", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.close()
    assert got == [f"v{i}".encode() for i in range(n)]


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def confluent_failure(config: dict) -> str:
    """What librdkafka says (its log and error callback) for a client that cannot get through
    (it must not)."""
    lines = Lines()
    log = logging.getLogger(f"rdkafka-test-{id(lines)}")
    log.addHandler(lines)
    log.propagate = False
    errors: list[str] = []
    quiet = {"reconnect.backoff.ms": 500, "logger": log, "error_cb": lambda e: errors.append(str(e))}
    producer = confluent_kafka.Producer({**config, **quiet})
    with pytest.raises(confluent_kafka.KafkaException):
        producer.list_topics(timeout=5)
    producer.poll(0.5)  # serves the log lines and errors
    return " | ".join(dict.fromkeys(lines.lines + errors))[:2000]


def kafka_python_round_trip(server: Server, topic: str, n: int = 20, **security) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=server.bootstrap_servers, acks="all", **security)
    for i in range(n):
        producer.send(topic, f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=server.bootstrap_servers,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
        **security,
    )
    got = [m.value for m in itertools.islice(consumer, n)]  # fewer: consumer_timeout_ms ends it
    consumer.close()
    assert got == [f"v{i}".encode() for i in range(n)]


def warnings_about(caplog, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("kafkalite.server") and text in r.getMessage()
    ]


def wait_for_warning(caplog, text: str, timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while not warnings_about(caplog, text) and time.monotonic() < deadline:
        time.sleep(0.05)
    return warnings_about(caplog, text)


def test_kafka_python_over_ssl_and_sasl_ssl(tmp_path, pki):
    tls = TLS(cert=pki.server.cert, key=pki.server.key)
    with Server(tmp_path / "ssl", tls=tls) as server:
        assert server.security_protocol == "SSL"
        kafka_python_round_trip(server, "kp-ssl", security_protocol="SSL", ssl_cafile=str(pki.ca))
    kafkalite.users.add_user(tmp_path / "sasl", USER, PASSWORD)
    with Server(tmp_path / "sasl", tls={"cert": pki.server.cert, "key": pki.server.key}, sasl=True) as server:
        assert server.security_protocol == "SASL_SSL"
        scram = {
            "security_protocol": "SASL_SSL",
            "ssl_cafile": str(pki.ca),
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": USER,
            "sasl_plain_password": PASSWORD,
        }
        kafka_python_round_trip(server, "kp-sasl-ssl", **scram)
        with pytest.raises(kafka.errors.KafkaError):  # the wrong password still fails, over TLS
            kafka.KafkaProducer(
                bootstrap_servers=server.bootstrap_servers,
                bootstrap_timeout_ms=5000,
                **{**scram, "sasl_plain_password": "x"},
            )


def test_confluent_kafka_with_required_client_certificates(tmp_path, pki, caplog):
    """ssl.client.auth=required: a client certificate signed by the CA gets in as
    User:<subject DN>; none, another CA's or an expired one is refused, each with a WARNING,
    and the next good client is served."""
    caplog.set_level(logging.DEBUG, logger="kafkalite.server")
    tls = TLS(cert=pki.server.cert, key=pki.server.key, client_ca=pki.ca)
    with Server(tmp_path, tls=tls) as server:
        assert server.security_protocol == "SSL"
        good = confluent_config(server, pki.ca, pki.client)
        confluent_round_trip(good, "certs")
        said = [r.getMessage() for r in caplog.records if "presented a client certificate" in r.getMessage()]
        assert said and all(line.endswith(CLIENT_PRINCIPAL) for line in said), said
        for name, cert, reason in [
            ("no certificate", None, "peer sent no certificates"),
            # OpenSSL does not send a certificate the server's CertificateRequest did not ask for
            # (its CA is not the server's), so the server sees none.
            ("another CA's", pki.other_client, "TLS handshake failed"),
            ("expired", pki.expired_client, "TLS handshake failed"),
        ]:
            caplog.clear()
            failure = confluent_failure(confluent_config(server, pki.ca, cert))
            assert "SSL" in failure, (name, failure)
            assert wait_for_warning(caplog, reason), (name, [r.getMessage() for r in caplog.records])
            confluent_round_trip(good, f"certs-after-{name.split()[0]}", n=3)


def test_clients_refuse_an_expired_or_unknown_server_certificate(tmp_path, pki):
    """The client side of a bad server certificate: librdkafka and kafka-python say the
    certificate failed verification; the server goes on serving a client that trusts it."""
    with Server(
        tmp_path / "expired", tls=TLS(cert=pki.expired_server.cert, key=pki.expired_server.key)
    ) as server:
        failure = confluent_failure(confluent_config(server, pki.ca))
        assert "certificate verify failed" in failure, failure
        trusting = confluent_config(server, pki.ca, **{"enable.ssl.certificate.verification": False})
        confluent_round_trip(trusting, "expired-but-trusted", n=3)
    with Server(tmp_path / "other", tls=TLS(cert=pki.other_server.cert, key=pki.other_server.key)) as server:
        failure = confluent_failure(confluent_config(server, pki.ca))  # trusts test-ca, not other-ca
        assert "certificate verify failed" in failure, failure
        with pytest.raises(kafka.errors.KafkaError, match="Unable to bootstrap"):
            kafka.KafkaProducer(bootstrap_servers=server.bootstrap_servers, security_protocol="SSL",
                                ssl_cafile=str(pki.ca), bootstrap_timeout_ms=5000)  # fmt: skip
        confluent_round_trip(confluent_config(server, pki.other_ca), "right-ca", n=3)


def test_plaintext_and_silent_clients_on_the_tls_port(tmp_path, pki, caplog):
    """A PLAINTEXT Kafka client on the TLS port is closed at once with one WARNING saying so; a
    client that opens TCP and sends nothing, and one that stops part way through its first TLS
    record, are closed at the handshake deadline (connections.max.idle.ms here, 10 s by default)
    with one WARNING each. Good clients are served meanwhile."""
    caplog.set_level(logging.INFO, logger="kafkalite.server")
    native = _native.NativeServer(
        str(tmp_path), "127.0.0.1:0", idle_timeout_ms=3000, tls_cert=pki.server.cert, tls_key=pki.server.key
    )
    try:
        host, port = native.local_addr.rsplit(":", 1)
        server = type("Addr", (), {"bootstrap_servers": native.advertised})()
        good = confluent_config(server, pki.ca)  # type: ignore[arg-type]
        silent = socket.create_connection((host, int(port)))
        me = "{}:{}".format(*silent.getsockname()[:2])
        stalled = socket.create_connection((host, int(port)))  # starts a TLS record, then stops
        stalled.sendall(b"\x16\x03\x01\x02")
        stalled_at = "{}:{}".format(*stalled.getsockname()[:2])
        with pytest.raises(kafka.errors.KafkaError, match="Unable to bootstrap"):
            kafka.KafkaProducer(bootstrap_servers=native.advertised, bootstrap_timeout_ms=5000)  # PLAINTEXT
        said = wait_for_warning(caplog, "did not start a TLS handshake")
        assert said and "PLAINTEXT" in said[0], said
        confluent_round_trip(good, "while-silent", n=3)
        silent.settimeout(10)
        began = time.monotonic()
        assert silent.recv(1) == b"", "the silent client is closed"
        assert time.monotonic() - began < 8
        assert len(warnings_about(caplog, me)) == 1, warnings_about(caplog, me)
        assert "no TLS handshake within 3000 ms" in warnings_about(caplog, me)[0]
        silent.close()
        stalled.settimeout(10)
        assert stalled.recv(1) == b""
        assert wait_for_warning(caplog, stalled_at) and len(warnings_about(caplog, stalled_at)) == 1
        assert "no TLS handshake within" in warnings_about(caplog, stalled_at)[0]
        stalled.close()
        confluent_round_trip(good, "after-silent", n=3)
    finally:
        native.stop(5000)


def test_bad_tls_files_stop_the_start(tmp_path, pki):
    with pytest.raises(kafkalite.InvalidConfigError, match="--tls-cert"):
        Server(tmp_path, tls=TLS(cert=tmp_path / "missing.pem", key=pki.server.key))
    with pytest.raises(kafkalite.InvalidConfigError, match="no PEM certificate"):
        Server(tmp_path, tls=TLS(cert=pki.server.key, key=pki.server.key))
    with pytest.raises(kafkalite.InvalidConfigError, match="with the key"):
        Server(tmp_path, tls=TLS(cert=pki.server.cert, key=pki.client.key))  # not its key
    with pytest.raises(kafkalite.InvalidConfigError, match="--tls-client-ca"):
        Server(tmp_path, tls=TLS(cert=pki.server.cert, key=pki.server.key, client_ca=pki.server.key))
    with pytest.raises(kafkalite.InvalidConfigError, match="client_ca"):
        Server(tmp_path, tls={"cert": pki.server.cert})
    with pytest.raises(TypeError):
        Server(tmp_path, tls="server.pem")  # type: ignore[arg-type]


def test_beyond_loopback_needs_tls_or_allow_plaintext(tmp_path, pki, caplog):
    caplog.set_level(logging.WARNING, logger="kafkalite.server")
    kafkalite.users.add_user(tmp_path, USER, PASSWORD)
    anywhere = {"listen": "0.0.0.0:0", "advertised_listener": "127.0.0.1:1"}
    with pytest.raises(kafkalite.InvalidConfigError, match="--allow-plaintext"):
        Server(tmp_path, **anywhere)
    with Server(tmp_path, **anywhere, tls=TLS(cert=pki.server.cert, key=pki.server.key)) as server:
        assert server.security_protocol == "SASL_SSL"
    assert not warnings_about(caplog, "WITHOUT TLS")
    with Server(tmp_path, **anywhere, allow_plaintext=True) as server:
        assert server.security_protocol == "SASL_PLAINTEXT"
    assert len(warnings_about(caplog, "WITHOUT TLS")) == 1
    # Client certificates authenticate: no SASL, so no user needed.
    certs = TLS(cert=pki.server.cert, key=pki.server.key, client_ca=pki.ca)
    with Server(tmp_path / "no-users", **anywhere, tls=certs) as server:
        assert server.security_protocol == "SSL"
    # Loopback as before: PLAINTEXT with nothing asked.
    with Server(tmp_path / "loopback") as server:
        assert server.security_protocol == "PLAINTEXT"


def test_cli_serve_with_tls(tmp_path, pki, spawn):
    out = subprocess.run(
        [sys.executable, "-m", "kafkalite", "serve", "--data-dir", str(tmp_path), "--tls-cert", str(pki.server.cert)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 1 and "--tls-key" in out.stderr, out.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = spawn.module(
        "kafkalite", "serve", "--data-dir", tmp_path, "--listen", f"127.0.0.1:{port}",
        "--tls-cert", pki.server.cert, "--tls-key", pki.server.key, "--tls-client-ca", pki.ca,
        "--log-level", "WARNING", stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stderr.readline()
    assert f"SSL://127.0.0.1:{port}" in line, line
    server = type("Addr", (), {"bootstrap_servers": f"127.0.0.1:{port}"})()
    confluent_round_trip(confluent_config(server, pki.ca, pki.client), "cli-tls", n=3)  # type: ignore[arg-type]


def test_large_fetch_responses_arrive_whole_over_tls(tmp_path, pki):
    """A Fetch response of megabytes to a client that reads slowly leaves the server completely:
    TLS keeps what the full socket did not take in its own buffer, and a response left part way
    there (the server not flushing it) would wait for the next response that never comes."""
    wire_fetch.fill(str(tmp_path), "big", 1, 8)
    with Server(tmp_path, tls=TLS(cert=pki.server.cert, key=pki.server.key)) as server:
        host, port = server.address.rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(pki.ca))
        for attempt in range(3):
            with socket.create_connection((host, int(port)), timeout=10) as raw:
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                    sock.sendall(wire_fetch.fetch_request([("big", 0, 0, wire_fetch.NO_LIMIT)]))
                    (size,) = struct.unpack(">i", wire_fetch.recv_exactly(sock, 4))
                    left = size
                    while left:  # slowly, so the server finds the socket full again and again
                        chunk = sock.recv(min(left, 64 * 1024))  # times out if bytes stay behind
                        assert chunk, f"closed with {left} of {size} bytes unread"
                        left -= len(chunk)
                        time.sleep(0.002)
                    assert size > 7_000_000, (attempt, size)


def test_clients_closing_after_the_handshake_are_not_warned_about(tmp_path, pki, caplog):
    """A TLS client that closes without reading the server's session tickets resets the
    connection; it went away and nothing was refused, so no WARNING (there was one per client)."""
    caplog.set_level(logging.DEBUG, logger="kafkalite.server")
    with Server(tmp_path, tls=TLS(cert=pki.server.cert, key=pki.server.key)) as server:
        host, port = server.address.rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(pki.ca))
        for _ in range(20):
            with socket.create_connection((host, int(port))) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1"):
                    pass
        deadline = time.monotonic() + 10
        while sum("closed (" in r.getMessage() for r in caplog.records) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sum("closed (" in r.getMessage() for r in caplog.records) == 20
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
