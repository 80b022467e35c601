"""Sockets that never authenticate cannot hold the server (issue 35): with SASL a connection must
authenticate within ``authentication_timeout_ms`` of its accept (ApiVersions does not extend it);
``max_connections`` (Kafka's ``max.connections``) and ``max_connections_per_ip`` (with overrides)
bound them; and when every slot is taken the oldest unauthenticated connection is closed to
make room, so a client that authenticates is never locked out by silent sockets."""

from __future__ import annotations

import socket
import struct
import time

import kafkalite.users
import pytest
from kafkalite.server import Server
from serve_proc import free_port, serve_on, start_serve
from test_server_sasl import (
    API_VERSIONS,
    METADATA_ALL,
    authenticate,
    handshake,
    parse_authenticate,
    read_response,
    scram_client_final,
)
from test_server_scram_users import login

USER, PASSWORD = "alice", "alice-pw"


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data"
    kafkalite.users.add_user(path, USER, PASSWORD)
    return path


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """True when the server closes `sock` within `within` seconds (it sends nothing to a silent
    client, so any read returning is the close)."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_api_versions_do_not_extend_the_authentication_deadline(data):
    """The attack: a client that never authenticates but sends ApiVersions every 0.5 s kept its
    connection for good (each request reset the 600 s idle timer). With the default deadline
    (10 s from the accept) it is closed by 14 s."""
    with Server(data, sasl=True) as server:
        sock = connect(server.address)
        start = time.monotonic()
        closed = False
        while time.monotonic() - start < 14 and not closed:
            try:
                sock.sendall(API_VERSIONS)
                closed = read_response(sock) is None
            except (BrokenPipeError, ConnectionResetError):
                closed = True
            time.sleep(0.5)
        assert closed, "still open 14 s after the accept without authenticating"
        assert time.monotonic() - start >= 9, "closed before its deadline"
        sock.close()
        assert login(server.address, USER, PASSWORD), "a client that authenticates is served"


def test_an_authenticated_client_is_never_locked_out_by_silent_sockets(data):
    """Every slot taken by silent sockets: a new client still connects (the oldest silent socket
    is closed to make room) and authenticates; an authenticated connection is never the one
    closed; once every slot holds an authenticated connection a new one is refused."""
    with Server(data, sasl=True, max_connections=20, authentication_timeout_ms=60_000) as server:
        first = connect(server.address)
        assert login_on(first), "authenticated before the flood"
        silent = [connect(server.address) for _ in range(19)]
        time.sleep(0.5)
        flood = [connect(server.address) for _ in range(5)]  # each closes the oldest silent one
        assert all(closed_by_server(s, 5) for s in silent[:5]), "the oldest silent sockets made room"
        assert not closed_by_server(silent[5], 0.5), "only as many as needed"
        assert login(server.address, USER, PASSWORD), "a new client is not locked out"
        first.sendall(METADATA_ALL)
        assert read_response(first) is not None, "the authenticated connection was kept"
        for s in silent + flood:
            s.close()


def login_on(sock: socket.socket) -> bool:
    sock.sendall(handshake(b"SCRAM-SHA-256"))
    read_response(sock)
    bare = f"n={USER},r=clientnonce"
    sock.sendall(authenticate(b"n,," + bare.encode()))
    _, _, first = parse_authenticate(read_response(sock) or b"")
    final, _ = scram_client_final(PASSWORD.encode(), bare, first.decode())
    sock.sendall(authenticate(final))
    code, _, _ = parse_authenticate(read_response(sock) or b"")
    return code == 0


def test_connections_per_address_are_capped_with_overrides(data):
    with Server(data, max_connections_per_ip=3) as server:
        held = [connect(server.address) for _ in range(3)]
        time.sleep(0.3)
        extra = connect(server.address)
        assert closed_by_server(extra, 5), "the 4th connection from 127.0.0.1 is closed at once"
        for s in held:
            s.sendall(API_VERSIONS)
            assert read_response(s) is not None
            s.close()
    with Server(data, max_connections_per_ip=1, max_connections_per_ip_overrides={"127.0.0.1": 4}) as server:
        held = [connect(server.address) for _ in range(4)]
        for s in held:
            s.sendall(API_VERSIONS)
            assert read_response(s) is not None
        assert closed_by_server(connect(server.address), 5)
        for s in held:
            s.close()
    with pytest.raises(kafkalite.InvalidConfigError, match="HOST:COUNT"):
        Server(data, max_connections_per_ip_overrides="127.0.0.1")


def test_silent_sockets_from_one_address_do_not_lock_out_its_clients(data):
    """Every local client shares 127.0.0.1's max.connections.per.ip: sockets from it that never
    authenticate held all of its slots, so each new client of 127.0.0.1 was closed at once until
    their deadline. The oldest silent one of that address now makes room; authenticated ones are
    never closed, and once all are authenticated the address is full."""
    with Server(data, sasl=True, max_connections_per_ip=5, authentication_timeout_ms=60_000) as server:
        first = connect(server.address)
        assert login_on(first)
        silent = [connect(server.address) for _ in range(4)]
        time.sleep(0.3)
        assert login(server.address, USER, PASSWORD), "a client of 127.0.0.1 is not locked out"
        assert closed_by_server(silent[0], 5), "the oldest silent socket of 127.0.0.1 made room"
        assert not closed_by_server(silent[1], 0.3), "only as many as needed"
        first.sendall(METADATA_ALL)
        assert read_response(first) is not None, "the authenticated connection was kept"
        for s in silent:
            s.close()


def test_zero_per_address_needs_overrides(data):
    """As Kafka's KafkaConfig: max.connections.per.ip=0 without overrides refuses every client."""
    with pytest.raises(kafkalite.InvalidConfigError, match="overrides"):
        Server(data, max_connections_per_ip=0)
    with Server(data, max_connections_per_ip=0, max_connections_per_ip_overrides={"127.0.0.1": 2}) as server:
        sock = connect(server.address)
        sock.sendall(API_VERSIONS)
        assert read_response(sock) is not None
        sock.close()


def test_serve_flags(data, spawn):
    proc, address = start_serve(
        spawn.module, data, "--max-connections-per-ip", "2", "--max-connections", "100",
        "--authentication-timeout-ms", "1000", "--sasl", "--log-level", "WARNING",
    )  # fmt: skip
    try:
        sock = connect(address)
        assert closed_by_server(sock, 8), "not authenticated within 1 s: closed"
        held = [connect(address) for _ in range(2)]
        time.sleep(0.3)
        assert closed_by_server(connect(address), 5)
        for s in held:
            s.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_unauthenticated_large_frames_do_not_take_the_authenticated_budget(data):
    """1,100 sockets that never authenticate each declare a frame of sasl.server.max.receive.size
    (512 KiB, what is allowed before authentication) and send most of it: they used to hold the
    server's whole request budget (512 MiB), so an authenticated client's 200 KiB Produce waited
    for permits until their deadline. They now draw on a small budget of their own."""
    import kafkalite
    from server_wire import produce_body, produce_error
    from test_server_sasl import request

    kafkalite.Admin(str(data)).create_topic("t", partitions=1)
    with Server(data, sasl=True, authentication_timeout_ms=60_000) as server:
        legit = connect(server.address)
        assert login_on(legit)
        body = b"\0" * (500 * 1024 - 8)
        stalled = []
        try:
            for _ in range(1_100):
                s = connect(server.address)
                s.setblocking(False)
                stalled.append([s, struct.pack(">i", 512 * 1024 - 1) + body])
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and any(rest for _, rest in stalled):
                for entry in stalled:
                    if entry[1]:
                        try:
                            entry[1] = entry[1][entry[0].send(entry[1]) :]
                        except BlockingIOError:
                            pass
                time.sleep(0.01)
            legit.settimeout(15)
            legit.sendall(request(0, 3, produce_body("t", 0, b"v" * 200 * 1024)))
            answer = read_response(legit)
            assert answer is not None and produce_error(answer) == 0
        finally:
            for s, _ in stalled:
                s.close()
            legit.close()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_connections": 2**64},
        {"max_connections_per_ip": 2**64},
        {"authentication_timeout_ms": 2**64},
        {"group_consumer_session_timeout_ms": 2**64},
    ],
)
def test_huge_limits_are_a_typed_error(data, kwargs):
    """They reached the native call and failed there with a bare OverflowError."""
    with pytest.raises(kafkalite.InvalidConfigError, match=next(iter(kwargs))):
        Server(data, **kwargs)


def test_a_flood_under_a_low_open_file_limit_does_not_lock_out_clients(data, spawn):
    """Under `ulimit -n 1024` (a common hard limit) max.connections (10,000) is never reached:
    1,030 silent sockets took every descriptor, accept failed (EMFILE) and, the listener never
    full, no silent socket was closed to make room: a client that would authenticate hung until
    their deadline. max.connections is now held to what the limit leaves."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2_200:
        pytest.skip("the test needs 2,200 descriptors for its own sockets")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    port = free_port()
    proc = serve_on(
        spawn.module, data, port, "--sasl", "--authentication-timeout-ms", "60000",
        "--log-level", "ERROR",  # each eviction is a WARNING: an unread stderr pipe would fill
        preexec_fn=low_limit,
    )  # fmt: skip
    silent = []
    try:
        silent = [connect(f"127.0.0.1:{port}") for _ in range(1_030)]
        time.sleep(0.5)
        assert login(f"127.0.0.1:{port}", USER, PASSWORD), "a client is not locked out"
    finally:
        for s in silent:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        proc.terminate()
        proc.wait(timeout=30)
