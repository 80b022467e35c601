"""The server's events reach Python's logging under ``kafkalite.server...``: connections at
DEBUG, bad frames and undecodable requests at WARNING with the peer, group joins, rebalances
and evictions at INFO; ``kafkalite serve`` logs at INFO to stderr by default (``--log-level``)."""

from __future__ import annotations

import logging
import signal
import socket
import struct
import subprocess
import time

import kafkalite
import pytest
from serve_proc import start_serve

confluent_kafka = pytest.importorskip("confluent_kafka")


def local_address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def wait_for(caplog, predicate, timeout: float = 15.0) -> list[logging.LogRecord]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [r for r in caplog.records if predicate(r)]
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(
        "no such log record; got:\n"
        + "\n".join(f"{r.name} {r.levelname} {r.message}" for r in caplog.records)
    )


def test_connections_and_bad_requests_are_logged_with_the_peer(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="kafkalite.server")
    with kafkalite.Server(tmp_path) as server:
        host, port = server.address.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as quiet:
            me = local_address(quiet)
            wait_for(caplog, lambda r: r.levelno == logging.DEBUG and f"from {me} opened" in r.message)
        closed = wait_for(caplog, lambda r: f"from {me} closed" in r.message)
        assert closed[0].name == "kafkalite.server.connection" and "closed by the client" in closed[0].message

        with socket.create_connection((host, int(port))) as bad:
            me = local_address(bad)
            bad.sendall(struct.pack(">i", -5))
            bad.recv(1)  # the server closes it
        warned = wait_for(caplog, lambda r: r.levelno == logging.WARNING and me in r.message)
        assert "-5 bytes" in warned[0].message

        with socket.create_connection((host, int(port))) as garbage:
            me = local_address(garbage)
            body = b"\xff\xff" + b"garbage!"
            garbage.sendall(struct.pack(">i", len(body)) + body)
            garbage.recv(1)
        warned = wait_for(caplog, lambda r: r.levelno == logging.WARNING and me in r.message)
        assert "cannot decode" in warned[0].message


def test_group_joins_rebalances_and_evictions_are_logged_at_info(tmp_path, caplog, spawn):
    caplog.set_level(logging.INFO, logger="kafkalite.server")
    kafkalite.Admin(str(tmp_path)).create_topic("logged", partitions=2)
    with kafkalite.Server(tmp_path) as server:
        member = spawn(
            "server_group_member.py",
            server.bootstrap_servers,
            "logged",
            "watched",
            tmp_path / "out",
            stdout=subprocess.PIPE,
            text=True,
        )
        assert member.stdout.readline().startswith("assigned")
        group = [r for r in caplog.records if r.name == "kafkalite.server.group"]
        assert all(r.levelno == logging.INFO for r in group)
        text = "\n".join(r.message for r in group)
        assert 'group "watched": member' in text and "joined" in text
        assert 'stabilized group "watched" generation' in text
        member.send_signal(signal.SIGKILL)  # no LeaveGroup: its session expires (6 s)
        evicted = wait_for(caplog, lambda r: "has failed" in r.message and "watched" in r.message, timeout=20)
        assert evicted[0].levelno == logging.INFO
        wait_for(caplog, lambda r: '"watched"' in r.message and "is now empty" in r.message)


def test_cli_serve_logs_at_info_by_default(tmp_path, spawn):
    kafkalite.Admin(str(tmp_path)).create_topic("cli-topic")
    proc, bootstrap = start_serve(spawn.module, tmp_path)
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "cli-logged", "session.timeout.ms": 6000}
    )
    assigned: list = []
    consumer.subscribe(["cli-topic"], on_assign=lambda c, parts: assigned.extend(parts))
    deadline = time.monotonic() + 20
    while not assigned and time.monotonic() < deadline:
        consumer.poll(0.1)
    consumer.close()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    assert "INFO kafkalite.server.group: " in err and "cli-logged" in err, err
    assert "DEBUG" not in err  # connections are DEBUG, below the default level
