"""What an unauthenticated client learns and costs the server at SCRAM's first step (issue 35):
an unknown user's server-first message looks like a real user's (salt stable per name across
restarts, iteration counts drawn from the real users'), so user names cannot be enumerated; and
the users file is parsed once and kept in memory, not at every client-first, so clients that
send one and hang up cost a map lookup, not a parse of every user."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import stat
import struct
import subprocess
import time
from pathlib import Path

import kafkalite.users
import pytest
from kafkalite.server import Server
from serve_proc import start_serve
from test_server_sasl import authenticate, handshake, parse_authenticate, read_response, scram_client_final

pytest_plugins = ["kafkalite.testing"]

USERS_FILE = ".kafkalite-users.json"
DECOY_KEY_FILE = ".kafkalite-scram-decoy.key"


def server_first(address: str, user: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
    """SaslHandshake and the client-first message for `user` on a new connection: the server-first
    message's fields (r, s, i). The connection is then dropped, as an enumerating client would."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(handshake(mechanism.encode()))
        body = read_response(sock)
        assert body is not None and struct.unpack_from(">h", body)[0] == 0
        sock.sendall(authenticate(f"n,,n={user},r=clientnonce".encode()))
        code, message, first = parse_authenticate(read_response(sock) or b"")
        assert code == 0, message
    return dict(field.split("=", 1) for field in first.decode().split(","))


def test_an_unknown_user_looks_like_a_real_one(tmp_path):
    """Every real user has 8192 iterations: an unknown name gets 8192 too (it used to get a fixed
    4096), a salt as long as a real one, the same at every attempt and after a restart (it used
    to change at each restart), different for another name."""
    data = tmp_path / "data"
    for user in ("alice", "bob"):
        kafkalite.users.add_user(data, user, f"{user}-pw", iterations=8192)
    with Server(data, sasl=True) as server:
        real = server_first(server.address, "alice")
        mallory = server_first(server.address, "mallory")
        assert real["i"] == "8192"
        assert mallory["i"] == real["i"], "an unknown user's iteration count gives it away"
        assert len(base64.b64decode(mallory["s"])) == len(base64.b64decode(real["s"]))
        assert server_first(server.address, "mallory")["s"] == mallory["s"]
        assert server_first(server.address, "trudy")["s"] != mallory["s"]
        sha512 = server_first(server.address, "mallory", "SCRAM-SHA-512")
        assert sha512["i"] == "8192" and sha512["s"] != mallory["s"]
    with Server(data, sasl=True) as server:
        assert server_first(server.address, "mallory")["s"] == mallory["s"], "the same after a restart"
    key = data / DECOY_KEY_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_no_user_at_all_gets_kafkas_default_iterations(tmp_path):
    data = tmp_path / "data"
    kafkalite.users.add_user(data, "alice", "pw", mechanisms=["SCRAM-SHA-512"], iterations=8192)
    with Server(data, sasl=True) as server:
        assert server_first(server.address, "mallory", "SCRAM-SHA-256")["i"] == "4096"


def many_users(data: Path, n: int) -> None:
    """`n` users in the users file, written directly (deriving each would take minutes): copies
    of one real credential under other names."""
    kafkalite.users.add_user(data, "alice", "alice-pw")
    users = json.loads((data / USERS_FILE).read_text())
    alice = users["users"]["alice"]
    users["users"].update({f"user-{i:05}": alice for i in range(n)})
    (data / USERS_FILE).write_text(json.dumps(users))
    os.chmod(data / USERS_FILE, 0o600)


def login(address: str, user: str, password: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(handshake(b"SCRAM-SHA-256"))
        read_response(sock)
        bare = f"n={user},r=clientnonce"
        sock.sendall(authenticate(b"n,," + bare.encode()))
        code, message, first = parse_authenticate(read_response(sock) or b"")
        assert code == 0, message
        final, _ = scram_client_final(password.encode(), bare, first.decode())
        sock.sendall(authenticate(final))
        code, _, _ = parse_authenticate(read_response(sock) or b"")
        return code == 0


@pytest.mark.skipif(
    shutil.which("strace") is None, reason="needs strace to count the opens of the users file"
)
def test_client_first_messages_do_not_parse_the_users_file_each(tmp_path, spawn):
    """10,000 users; 200 clients each send a client-first message and hang up (what cost 45 ms of
    CPU per message, 1.7 cores for 200 connections): the server opens the users file at most
    once for all of them (counted with strace), and again only when the file changed (a user
    added while it runs can log in)."""
    data = tmp_path / "data"
    many_users(data, 10_000)
    proc, address = start_serve(spawn.module, data, "--sasl", "--log-level", "WARNING")
    trace = tmp_path / "strace.out"
    tracer = subprocess.Popen(
        ["strace", "-f", "-qq", "-e", "trace=open,openat", "-o", str(trace), "-p", str(proc.pid)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)  # attached to every thread
        if tracer.poll() is not None:
            pytest.skip(f"strace cannot attach here: {tracer.stderr.read() if tracer.stderr else ''}")
        for i in range(200):
            server_first(address, "mallory" if i % 2 else f"user-{i:05}")
        tracer.terminate()  # detaches; the trace is complete once it exited
        tracer.wait(timeout=30)
        opens = [line for line in trace.read_text().splitlines() if USERS_FILE in line]
        assert len(opens) <= 1, f"the users file was opened {len(opens)} times for 200 client-first messages"
        kafkalite.users.add_user(data, "newcomer", "newcomer-pw")
        assert login(address, "newcomer", "newcomer-pw"), "a user added while the server runs logs in"
        assert login(address, "alice", "alice-pw")
        assert not login(address, "alice", "wrong")
    finally:
        if tracer.poll() is None:
            tracer.terminate()
            tracer.wait(timeout=30)
        proc.terminate()
        proc.wait(timeout=30)
