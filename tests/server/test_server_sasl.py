"""SASL/SCRAM on `kafkalite serve` (issue 13): real clients (confluent-kafka, kafka-python)
authenticate with SCRAM-SHA-256 and -512 on a SASL_PLAINTEXT listener; wrong passwords, unknown
users and wrong mechanisms get the client's authentication error; unauthenticated and hostile
connections are refused without disturbing anyone else; the credentials file is private and
holds no password; a non-loopback listener does not start without users."""

from __future__ import annotations

import base64
import logging
import os
import socket
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import kafkalite
import kafkalite.users
import pytest
from kafkalite.server import Server
from server_wire import scram_client_final

pytest_plugins = ["kafkalite.testing"]

confluent_kafka = pytest.importorskip("confluent_kafka")

USER, PASSWORD = "alice", "alice-secret-ç✓"
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


@pytest.fixture
def sasl_server(tmp_path):
    data = tmp_path / "data"
    kafkalite.users.add_user(data, USER, PASSWORD)
    with Server(data, sasl=True) as server:
        yield server


def client_config(server: Server, mechanism: str, user: str = USER, password: str = PASSWORD) -> dict:
    return {
        "bootstrap.servers": server.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


# -- raw protocol: just enough of Kafka's encoding to send what a real client would not ------


def request(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    """A request frame with a v1 header (client id "raw"): every API and version used here."""
    header = struct.pack(">hhih", api_key, version, correlation_id, 3) + b"raw"
    return struct.pack(">i", len(header) + len(body)) + header + body


def kstring(s: bytes) -> bytes:
    return struct.pack(">h", len(s)) + s


API_VERSIONS = request(18, 0, b"")
METADATA_ALL = request(3, 1, struct.pack(">i", -1))  # Metadata v1, every topic


def handshake(mechanism: bytes, version: int = 1) -> bytes:
    return request(17, version, kstring(mechanism))


def authenticate(token: bytes) -> bytes:
    """SaslAuthenticate v1 (auth_bytes as BYTES)."""
    return request(36, 1, struct.pack(">i", len(token)) + token)


def read_response(sock: socket.socket) -> bytes | None:
    """The next response body (after its correlation id), or None when the server closed."""
    head = recv_exact(sock, 4)
    if head is None:
        return None
    body = recv_exact(sock, struct.unpack(">i", head)[0])
    assert body is not None, "closed in the middle of a response"
    return body[4:]


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        try:
            chunk = sock.recv(n - len(out))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        out += chunk
    return out


def parse_authenticate(body: bytes) -> tuple[int, str | None, bytes]:
    """SaslAuthenticate v1 response: error code, error message, auth bytes."""
    code, n = struct.unpack_from(">hh", body)
    message = None if n < 0 else body[4 : 4 + n].decode()
    at = 4 + max(n, 0)
    (size,) = struct.unpack_from(">i", body, at)
    return code, message, body[at + 4 : at + 4 + size]


def connect(server: Server) -> socket.socket:
    host, port = server.address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def closed(sock: socket.socket) -> bool:
    return read_response(sock) is None


# -- real clients -----------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_produces_and_consumes_with_scram(sasl_server, mechanism):
    assert sasl_server.security_protocol == "SASL_PLAINTEXT"
    config = client_config(sasl_server, mechanism)
    producer = confluent_kafka.Producer({**config, "linger.ms": 5})
    values = [f"{mechanism}-{i}".encode() for i in range(5)]
    for v in values:
        producer.produce("secured", v, key=b"k")
    assert producer.flush(20) == 0
    consumer = confluent_kafka.Consumer(
        {**config, "group.id": f"g-{mechanism}", "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100}
    )
    consumer.subscribe(["secured"])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == values
    # The same records, read by the embedded API from the same files.
    embedded = kafkalite.Consumer(sasl_server.path, "secured", auto_offset_reset="earliest")
    seen = [r.value for records in embedded.poll(timeout_ms=2000).values() for r in records]
    embedded.close()
    assert seen == values


def auth_errors(config: dict, topic: str) -> list:
    """The errors a confluent producer reports while it cannot connect (its record purged)."""
    errors: list = []
    producer = confluent_kafka.Producer({**config, "error_cb": errors.append})
    producer.produce(topic, b"must not land")
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.05)
    producer.purge()
    producer.flush(1)
    return errors


@pytest.mark.parametrize(
    "case",
    ["wrong password", "unknown user", "user without that mechanism"],
)
def test_confluent_bad_credentials_get_the_authentication_error(tmp_path, case, caplog):
    data = tmp_path / "data"
    kafkalite.users.add_user(data, USER, PASSWORD)
    kafkalite.users.add_user(data, "only512", "pw-512", mechanisms=["SCRAM-SHA-512"])
    with Server(data, sasl=True) as server:
        config = {
            "wrong password": client_config(server, "SCRAM-SHA-256", password="not-it"),
            "unknown user": client_config(server, "SCRAM-SHA-512", user="mallory"),
            "user without that mechanism": client_config(server, "SCRAM-SHA-256", "only512", "pw-512"),
        }[case]
        with caplog.at_level(logging.INFO, logger="kafkalite.server"):
            errors = auth_errors(config, "guarded")
        assert errors, "the client must report why it cannot connect"
        assert errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION, errors
        assert "invalid credentials" in errors[0].str(), errors[0].str()
        assert "guarded" not in kafkalite.Admin(str(data)).list_topics()
    assert any("failed SASL authentication" in r.getMessage() for r in caplog.records), caplog.text


def test_confluent_mechanism_the_server_does_not_offer(sasl_server):
    config = {**client_config(sasl_server, "PLAIN"), "sasl.mechanisms": "PLAIN"}
    errors = auth_errors(config, "guarded")
    assert errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION, errors
    assert "SCRAM-SHA-256" in errors[0].str(), errors[0].str()  # the server names what it offers


def test_plaintext_client_on_a_sasl_listener_gets_nothing(sasl_server):
    errors = auth_errors({"bootstrap.servers": sasl_server.bootstrap_servers}, "guarded")
    assert errors, "a client without SASL must fail, not be served"
    assert "guarded" not in kafkalite.Admin(sasl_server.path).list_topics()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_scram(sasl_server, mechanism, caplog):
    kafka = pytest.importorskip("kafka")
    common = {
        "bootstrap_servers": sasl_server.bootstrap_servers,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
    }
    if "bootstrap_timeout_ms" in kafka.KafkaProducer.DEFAULT_CONFIG:  # kafka-python 3.x
        common["bootstrap_timeout_ms"] = 1500
    # kafka-python 2.1+ turns idempotence on by default; InitProducerId is not served yet.
    producer = kafka.KafkaProducer(enable_idempotence=False, **common)
    producer.send("kp", b"from kafka-python").get(timeout=20)
    producer.close()
    consumer = kafka.KafkaConsumer("kp", auto_offset_reset="earliest", consumer_timeout_ms=10_000, **common)
    first = next(consumer, None)
    assert first is not None and first.value == b"from kafka-python"
    consumer.close()
    # A wrong password: kafka-python cannot bootstrap, and says the server refused its credentials.
    with caplog.at_level(logging.ERROR, logger="kafka"), pytest.raises(kafka.errors.KafkaError):
        kafka.KafkaProducer(**{**common, "sasl_plain_password": "nope"}, enable_idempotence=False)
    assert "invalid credentials" in caplog.text, caplog.text


@pytest.mark.broker  # Java and the Kafka jars (tests/support/kafka_broker.py)
def test_java_client_scram(sasl_server):
    """The Java client (kafka-clients 4.x: SaslAuthenticate v2, flexible) authenticates with
    both mechanisms, and a wrong password is its SaslAuthenticationException."""
    from kafka_broker import require_jars

    classpath = str(require_jars() / "*")
    program = str(Path(__file__).parents[1] / "broker" / "ScramClient.java")

    def java(mechanism: str, password: str) -> str:
        done = subprocess.run(
            [
                "java",
                "-Xmx256m",
                "-cp",
                classpath,
                program,
                sasl_server.bootstrap_servers,
                mechanism,
                USER,
                password,
                "java",
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    for mechanism in MECHANISMS:
        out = java(mechanism, PASSWORD)
        assert "delivered" in out and "consumed from java" in out, out
    out = java("SCRAM-SHA-256", "wrong")
    assert "failed: org.apache.kafka.common.errors.SaslAuthenticationException" in out, out
    assert "invalid credentials" in out, out


# -- raw connections: what no well-behaved client sends ---------------------------------------


def test_unauthenticated_metadata_closes_the_connection(sasl_server, kafkalite_server):
    # Control: the same request on a PLAINTEXT listener is answered.
    with connect(kafkalite_server) as sock:
        sock.sendall(METADATA_ALL)
        assert read_response(sock) is not None
    with connect(sasl_server) as sock:
        sock.sendall(API_VERSIONS)  # allowed before authentication
        versions = read_response(sock)
        assert versions is not None and versions[:2] == b"\x00\x00"
        sock.sendall(METADATA_ALL)
        assert closed(sock), "Kafka closes a SASL connection that sends Metadata before authenticating"


def test_handshake_errors(sasl_server, kafkalite_server):
    with connect(sasl_server) as sock:
        sock.sendall(handshake(b"PLAIN"))
        body = read_response(sock)
        assert body is not None
        code, count = struct.unpack_from(">hi", body)
        assert code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert b"SCRAM-SHA-256" in body and b"SCRAM-SHA-512" in body and count == 2
        assert closed(sock)
    with connect(sasl_server) as sock:
        sock.sendall(authenticate(b"n,,n=alice,r=abc"))  # before SaslHandshake
        body = read_response(sock)
        assert body is not None and parse_authenticate(body)[0] == 34  # ILLEGAL_SASL_STATE
        assert closed(sock)
    with connect(kafkalite_server) as sock:  # a PLAINTEXT listener: ILLEGAL_SASL_STATE, still open
        sock.sendall(handshake(b"SCRAM-SHA-256"))
        body = read_response(sock)
        assert body is not None and struct.unpack_from(">h", body)[0] == 34
        sock.sendall(API_VERSIONS)
        assert read_response(sock) is not None


def start_exchange(server: Server, version: int = 1) -> tuple[socket.socket, str, str]:
    sock = connect(server)
    sock.sendall(handshake(b"SCRAM-SHA-256", version))
    body = read_response(sock)
    assert body is not None and struct.unpack_from(">h", body)[0] == 0
    bare = f"n={USER},r=clientnonce123"
    if version == 0:  # Kafka's original framing: bare size-prefixed tokens
        token = b"n,," + bare.encode()
        sock.sendall(struct.pack(">i", len(token)) + token)
        size = struct.unpack(">i", recv_exact(sock, 4) or b"")[0]
        return sock, bare, (recv_exact(sock, size) or b"").decode()
    sock.sendall(authenticate(b"n,," + bare.encode()))
    code, message, first = parse_authenticate(read_response(sock) or b"")
    assert code == 0, message
    return sock, bare, first.decode()


def test_raw_scram_exchange_v1_and_v0_and_then_served(sasl_server):
    sock, bare, first = start_exchange(sasl_server)
    final, server_final = scram_client_final(PASSWORD.encode(), bare, first)
    sock.sendall(authenticate(final))
    code, message, got = parse_authenticate(read_response(sock) or b"")
    assert (code, message, got) == (0, None, server_final)  # the server proves it knows the key
    sock.sendall(METADATA_ALL)
    assert read_response(sock) is not None, "authenticated: served"
    sock.close()
    sock, bare, first = start_exchange(sasl_server, version=0)
    final, server_final = scram_client_final(PASSWORD.encode(), bare, first)
    sock.sendall(struct.pack(">i", len(final)) + final)
    size = struct.unpack(">i", recv_exact(sock, 4) or b"")[0]
    assert recv_exact(sock, size) == server_final
    sock.sendall(METADATA_ALL)
    assert read_response(sock) is not None
    sock.close()


def test_hostile_authenticate_payloads_never_break_the_server(sasl_server):
    failures = []
    # Garbage, empty and over-long first messages.
    for token in [os.urandom(64), b"", b"\xff\xfe\x00", b"n,,n=alice,r=" + b"x" * 300_000, b"p=tls,,n=a,r=b"]:
        with connect(sasl_server) as sock:
            sock.sendall(handshake(b"SCRAM-SHA-256"))
            read_response(sock)
            sock.sendall(authenticate(token))
            body = read_response(sock)
            failures.append(body is None or parse_authenticate(body)[0] == 58)
            assert closed(sock)
    # A wrong nonce, a forged proof, and a truncated final message after a good first one.
    sock, bare, first = start_exchange(sasl_server)
    final, _ = scram_client_final(PASSWORD.encode(), bare, first, nonce="clientnonce123forged")
    sock.sendall(authenticate(final))
    code, message, _ = parse_authenticate(read_response(sock) or b"")
    assert code == 58 and message is not None and "nonce" in message
    assert closed(sock)
    sock, bare, first = start_exchange(sasl_server)
    final, _ = scram_client_final(b"guess", bare, first)
    sock.sendall(authenticate(final))
    assert parse_authenticate(read_response(sock) or b"")[0] == 58
    sock.close()
    sock, bare, first = start_exchange(sasl_server)
    frame = authenticate(scram_client_final(PASSWORD.encode(), bare, first)[0])
    sock.sendall(frame[: len(frame) // 2])
    sock.shutdown(socket.SHUT_WR)  # the client stops mid-request
    assert closed(sock)
    sock.close()
    # A frame over sasl.server.max.receive.size (512 KiB) before authentication: closed unread.
    with connect(sasl_server) as sock:
        sock.sendall(struct.pack(">i", 1024 * 1024) + b"\x00\x11\x00\x01")
        assert closed(sock)
    assert all(failures), failures
    # After all that, a real client still authenticates and is served.
    producer = confluent_kafka.Producer(client_config(sasl_server, "SCRAM-SHA-256"))
    producer.produce("after", b"fine")
    assert producer.flush(20) == 0


# -- the credentials file and the listener policy ----------------------------------------------


def test_credentials_file_is_private_and_holds_no_password(tmp_path):
    old = os.umask(0)  # even a permissive umask must not make it readable by others
    try:
        kafkalite.users.add_user(tmp_path, USER, PASSWORD, iterations=8192)
    finally:
        os.umask(old)
    path = tmp_path / kafkalite._native.USERS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_bytes()
    for form in (PASSWORD.encode(), base64.b64encode(PASSWORD.encode())):
        assert form not in text
    assert kafkalite.users.list_users(tmp_path) == {USER: {"SCRAM-SHA-256": 8192, "SCRAM-SHA-512": 8192}}
    with pytest.raises(kafkalite.InvalidConfigError, match="4096"):
        kafkalite.users.add_user(tmp_path, "bob", "pw", iterations=100)
    with pytest.raises(kafkalite.InvalidConfigError, match="SCRAM-SHA-256"):
        kafkalite.users.add_user(tmp_path, "bob", "pw", mechanisms=["SCRAM-SHA-1"])
    with pytest.raises(TypeError):
        kafkalite.users.add_user(tmp_path, "bob", b"pw")  # type: ignore[arg-type]


@pytest.mark.parametrize("fault", ["checkpoint.write=enospc", "checkpoint.rename=kill"])
def test_a_failed_users_write_keeps_the_old_file(tmp_path, fault):
    """The users file is replaced atomically: ENOSPC while writing, or the process killed between
    writing and renaming, leaves the previous users, still private, and a server still starts."""
    kafkalite.users.add_user(tmp_path, USER, PASSWORD)
    before = (tmp_path / kafkalite._native.USERS_FILE).read_bytes()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kafkalite",
            "users",
            "add",
            "bob",
            "--password-stdin",
            "--data-dir",
            str(tmp_path),
        ],
        input="bob-pw\n",
        env={**os.environ, "KAFKALITE_FAILPOINTS": fault},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if fault.endswith("kill"):
        assert out.returncode == -9, out
    else:
        assert out.returncode == 1 and "No space left" in out.stderr, out
    path = tmp_path / kafkalite._native.USERS_FILE
    assert path.read_bytes() == before
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert kafkalite.users.list_users(tmp_path) == {USER: {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}}
    kafkalite.users.add_user(tmp_path, "bob", "bob-pw")  # the leftover temp file is no obstacle
    assert set(kafkalite.users.list_users(tmp_path)) == {USER, "bob"}
    with Server(tmp_path, sasl=True):
        pass


def test_damaged_users_file_stops_the_start(tmp_path):
    (tmp_path / kafkalite._native.USERS_FILE).write_text('{"version": 1, "users": {"a": []}}')
    with pytest.raises(kafkalite.CorruptMetadataError, match="kafkalite users add"):
        Server(tmp_path, sasl=True)


def test_non_loopback_listener_needs_users_then_sasl(tmp_path):
    with pytest.raises(kafkalite.InvalidConfigError, match="kafkalite users add"):
        Server(tmp_path, "0.0.0.0:0")
    kafkalite.users.add_user(tmp_path, USER, PASSWORD)
    with pytest.raises(kafkalite.InvalidConfigError, match="advertised"):
        Server(tmp_path, "0.0.0.0:0", allow_plaintext=True)  # clients elsewhere cannot connect to 0.0.0.0
    with Server(tmp_path, "0.0.0.0:0", advertised_listener="127.0.0.1:1", allow_plaintext=True) as server:
        assert server.security_protocol == "SASL_PLAINTEXT"
        port = int(server.address.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(METADATA_ALL)
            assert closed(sock), "a non-loopback listener serves nobody unauthenticated"


def test_cli_users_and_serve(tmp_path, spawn):
    def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "kafkalite", *args, "--data-dir", str(tmp_path)],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    out = cli("serve", "--listen", "0.0.0.0:0")
    assert out.returncode == 1 and "kafkalite users add" in out.stderr, out.stderr
    out = cli("users", "add", USER, "--password-stdin", "--mechanism", "SCRAM-SHA-512", stdin=PASSWORD + "\n")
    assert out.returncode == 0, out.stderr
    out = cli("users", "add", "bob", "--password-stdin", stdin="bob-pw\n")
    assert out.returncode == 0, out.stderr
    listed = cli("users", "list").stdout
    assert f"{USER}\tSCRAM-SHA-512 (iterations=4096)" in listed, listed
    assert "bob\tSCRAM-SHA-256 (iterations=4096), SCRAM-SHA-512 (iterations=4096)" in listed, listed
    out = cli("users", "add", "carol", stdin="pw\n")  # no terminal, no --password-stdin
    assert out.returncode != 0 and "--password-stdin" in out.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = spawn.module(
        "kafkalite", "serve", "--data-dir", tmp_path, "--listen", f"127.0.0.1:{port}", "--sasl",
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stderr.readline()
    assert f"SASL_PLAINTEXT://127.0.0.1:{port}" in line, line
    config = {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
    }
    producer = confluent_kafka.Producer(config)
    producer.produce("cli", b"hello")
    assert producer.flush(20) == 0
    # A deleted user is refused from the next connection on, without a restart.
    assert cli("users", "delete", USER).returncode == 0
    assert cli("users", "delete", USER).returncode == 1
    errors = auth_errors(config, "cli")
    assert errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION
    proc.terminate()
    assert proc.wait(10) == 0
