"""The server's events reach Python's logging under ``kafkalite.server...``: connections at
DEBUG, bad frames and undecodable requests at WARNING with the peer, group joins, rebalances
and evictions at INFO; ``kafkalite serve`` logs at INFO to stderr by default (``--log-level``)."""

from __future__ import annotations

import logging
import signal
import socket
import struct
import threading
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
        journal = tmp_path / "journal"
        member = spawn("server_group_member.py", server.bootstrap_servers, "logged", "watched", journal)
        deadline = time.monotonic() + 60
        while not (journal.exists() and journal.read_text().startswith("A ")):  # partitions assigned
            assert time.monotonic() < deadline and member.poll() is None, "the member was never assigned"
            time.sleep(0.05)
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


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _partitions(topic: str, *entries: bytes) -> bytes:
    """One topic's array of partition entries, in a request's [topic [partition ...]] array."""
    return struct.pack(">i", 1) + _s(topic) + struct.pack(">i", len(entries)) + b"".join(entries)


# Each refused API: (key, version, body, what its one WARNING line names). Topic "logged" exists
# (3 partitions, cleanup.policy=compact); "ghost" does not.
REFUSALS = {
    "produce_unknown_partitions": (
        0,
        3,
        struct.pack(">hhi", -1, 1, 5_000)
        + _partitions("ghost", *(struct.pack(">ii", p, -1) for p in range(3))),
        ["refused Produce", "3 partitions refused", "UNKNOWN_TOPIC_OR_PARTITION (ghost-0, ghost-1, ghost-2"],
    ),
    "produce_bad_acks": (
        0,
        3,
        struct.pack(">hhi", -1, 7, 5_000) + _partitions("logged", struct.pack(">ii", 0, -1)),
        ["refused Produce", "INVALID_REQUIRED_ACKS (logged-0", "acks must be -1, 0 or 1, not 7"],
    ),
    "fetch_unknown_partitions": (
        1,
        4,
        struct.pack(">iiiib", -1, 0, 0, 1 << 20, 0)
        + _partitions("ghost", *(struct.pack(">iqi", p, 0, 1 << 20) for p in range(2))),
        ["refused Fetch", "2 partitions refused", "UNKNOWN_TOPIC_OR_PARTITION (ghost-0, ghost-1)"],
    ),
    "fetch_offset_out_of_range": (
        1,
        4,
        struct.pack(">iiiib", -1, 0, 0, 1 << 20, 0)
        + _partitions("logged", struct.pack(">iqi", 0, 99, 1 << 20)),
        ["refused Fetch", "OFFSET_OUT_OF_RANGE (logged-0)"],
    ),
    "fetch_session": (
        1,
        7,
        struct.pack(">iiiibii", -1, 0, 0, 1 << 20, 0, 42, 1) + struct.pack(">ii", 0, 0),
        ["refused Fetch", "FETCH_SESSION_ID_NOT_FOUND", "session 42"],
    ),
    "list_offsets": (
        2,
        1,
        struct.pack(">i", -1) + _partitions("ghost", struct.pack(">iq", 0, -1), struct.pack(">iq", 1, -1)),
        ["refused ListOffsets", "2 partitions refused", "UNKNOWN_TOPIC_OR_PARTITION (ghost-0, ghost-1)"],
    ),
    "join_group_bad_session_timeout": (
        11,
        0,
        _s("g")
        + struct.pack(">i", 1)
        + _s("")
        + _s("consumer")
        + struct.pack(">i", 1)
        + _s("range")
        + b"\0\0\0\0",
        ["refused JoinGroup", "INVALID_SESSION_TIMEOUT", 'group "g"'],
    ),
    "sync_group_unknown_member": (
        14,
        0,
        _s("g") + struct.pack(">i", 1) + _s("stranger") + struct.pack(">i", 0),
        ["refused SyncGroup", "UNKNOWN_MEMBER_ID", 'member "stranger"'],
    ),
    "heartbeat_unknown_member": (
        12,
        0,
        _s("g") + struct.pack(">i", 1) + _s("stranger"),
        ["refused Heartbeat", "UNKNOWN_MEMBER_ID", 'member "stranger"'],
    ),
    "leave_group_unknown_member": (
        13,
        0,
        _s("g") + _s("stranger"),
        ["refused LeaveGroup", "UNKNOWN_MEMBER_ID", 'member "stranger"'],
    ),
    "delete_records": (
        21,
        0,
        _partitions("logged", struct.pack(">iq", 0, 0), struct.pack(">iq", 1, 0)) + struct.pack(">i", 5_000),
        [
            "refused DeleteRecords",
            "2 partitions refused",
            "POLICY_VIOLATION (logged-0, logged-1",
            "cleanup.policy",
        ],
    ),
    "init_producer_id_transaction_timeout": (
        22,
        0,
        _s("txn") + struct.pack(">i", 0),
        ["refused InitProducerId", "INVALID_TRANSACTION_TIMEOUT", 'transactional id "txn"'],
    ),
    "metadata_unknown_topic": (
        3,
        1,
        struct.pack(">i", 2) + _s("ghost") + _s("ghost2"),
        [
            "refused Metadata",
            "2 topics refused",
            "UNKNOWN_TOPIC_OR_PARTITION (ghost, ghost2",
            "auto-creation is off",
        ],
    ),
    "describe_configs_unknown_topic": (
        32,
        1,
        struct.pack(">i", 1) + struct.pack(">b", 2) + _s("ghost") + struct.pack(">i", -1) + b"\0",
        ["refused DescribeConfigs", "UNKNOWN_TOPIC_OR_PARTITION", "ghost"],
    ),
    "alter_configs_unknown_key": (
        33,
        0,
        struct.pack(">i", 1)
        + struct.pack(">b", 2)
        + _s("logged")
        + struct.pack(">i", 1)
        + _s("no.such")
        + _s("1")
        + b"\0",
        ["refused AlterConfigs", "INVALID_CONFIG", "no.such"],
    ),
    "incremental_alter_configs_unknown_topic": (
        44,
        0,
        struct.pack(">i", 1)
        + struct.pack(">b", 2)
        + _s("ghost")
        + struct.pack(">i", 1)
        + _s("retention.ms")
        + b"\0"
        + _s("1")
        + b"\0",
        ["refused IncrementalAlterConfigs", "UNKNOWN_TOPIC_OR_PARTITION", "ghost"],
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_refused_request_logs_one_warning_with_the_peer_and_the_reason(tmp_path, caplog, case):
    """A refused request is one WARNING line naming the client's address, the API, Kafka's error
    and why; a request refused for several partitions is still one line."""
    from server_wire import Wire

    caplog.set_level(logging.INFO, logger="kafkalite.server")
    kafkalite.Admin(str(tmp_path)).create_topic("logged", partitions=3, config={"cleanup.policy": "compact"})
    key, version, body, expected = REFUSALS[case]
    with kafkalite.Server(tmp_path, auto_create_topics=False) as server:
        wire = Wire(server.address, timeout=30)
        try:
            wire.call(key, version, body)
            wait_for(caplog, lambda r: r.levelno == logging.WARNING and "refused" in r.message)
            wire.api_versions()  # anything more the request logged is in by now
            time.sleep(0.5)
        finally:
            wire.close()
    # The client's address as Kafka gives it (a group member's client host): "/127.0.0.1".
    lines = [r.message for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, lines
    assert " from /127.0.0.1: " in lines[0], lines[0]
    for part in expected:
        assert part in lines[0], (part, lines[0])


def test_a_heartbeat_during_a_rebalance_is_not_logged_as_a_refusal(tmp_path, caplog):
    """REBALANCE_IN_PROGRESS is the group protocol telling a member to rejoin, not a refusal."""
    from server_wire import Wire

    caplog.set_level(logging.INFO, logger="kafkalite.server")
    with kafkalite.Server(tmp_path) as server:
        first, second = Wire(server.address), Wire(server.address)
        try:
            join = _s("r") + struct.pack(">i", 10_000) + _s("") + _s("consumer")
            join += struct.pack(">i", 1) + _s("range") + b"\0\0\0\0"
            r = first.call(11, 0, join)  # the first member: generation 1, alone
            error, generation = struct.unpack(">hi", r[:6])
            assert error == 0
            rest = r[6:]
            n = struct.unpack(">h", rest[:2])[0]  # protocol name
            rest = rest[2 + n :]
            n = struct.unpack(">h", rest[:2])[0]  # leader
            rest = rest[2 + n :]
            n = struct.unpack(">h", rest[:2])[0]
            member = rest[2 : 2 + n].decode()
            # The second member's join starts a rebalance (it waits for the first to rejoin).
            joining = threading.Thread(target=lambda: second.call(11, 0, join), daemon=True)
            joining.start()
            deadline = time.monotonic() + 10
            while True:
                beat = first.call(12, 0, _s("r") + struct.pack(">i", generation) + _s(member))
                if struct.unpack(">h", beat[:2])[0] == 27 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert struct.unpack(">h", beat[:2])[0] == 27  # REBALANCE_IN_PROGRESS
            time.sleep(0.5)
        finally:
            first.close()
            second.close()
    assert not [
        r.message for r in caplog.records if r.levelno >= logging.WARNING and "Heartbeat" in r.message
    ]
