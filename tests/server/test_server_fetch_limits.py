"""Fetch responses are bounded as Kafka bounds them (issue 21): the request's max_bytes capped
by the server's ``fetch.max.bytes``, each partition by its partition_max_bytes with only the
first partition that returns data allowed its first batch past the limits (KIP-74), a
partition named twice read once; and the record bytes of responses not yet written, over all
connections, share one budget, so hostile fetches cannot grow the server's memory.

Before: a 111-byte Fetch naming one 100 MB partition four times with max_bytes 2^31-1 built a
404 MB response; six such connections took the server from 19 MB to 2.2 GB resident."""

from __future__ import annotations

import socket
import threading
import time

import kafkalite
import pytest
from kafkalite.errors import InvalidConfigError
from kafkalite.server import Server
from serve_proc import start_serve
from server_wire import record_batch
from test_server_memory import peak_rss
from wire_fetch import BATCH, NO_LIMIT, fetch, fetch_request, fill, hostile, read_response

FETCH_MAX_BYTES = 55 * 1024 * 1024


def test_a_partition_named_four_times_is_read_once_within_fetch_max_bytes(tmp_path):
    data = str(tmp_path / "data")
    fill(data, "big", 1, 70)
    with Server(data) as server:
        size, partitions = fetch(server.address, [("big", 0, 0, NO_LIMIT)] * 4)
    assert [(p.topic, p.partition, p.error_code) for p in partitions] == [("big", 0, 0)], "read once"
    assert 0 < partitions[0].records <= FETCH_MAX_BYTES
    assert size < FETCH_MAX_BYTES + 4096


def test_the_server_setting_caps_every_request(tmp_path):
    data = str(tmp_path / "data")
    fill(data, "t", 2, 5)
    limit = 2 * 1024 * 1024
    with Server(data, fetch_max_bytes=limit) as server:
        _, partitions = fetch(
            server.address, [("t", 0, 0, NO_LIMIT), ("t", 1, 0, NO_LIMIT)], max_bytes=NO_LIMIT
        )
        total = sum(p.records for p in partitions)
        assert 0 < total <= limit
        # The request's max_bytes counts when smaller.
        _, partitions = fetch(server.address, [("t", 0, 0, NO_LIMIT)], max_bytes=1_500_000)
        assert 0 < partitions[0].records <= 1_500_000


def test_only_the_first_partition_with_data_may_exceed_the_limits_by_its_first_batch(tmp_path):
    data = str(tmp_path / "data")
    fill(data, "t", 3, 3)
    kafkalite.Admin(data).create_topic("empty", 1)
    with Server(data) as server:
        # Every batch (about 1 MB) is larger than partition_max_bytes.
        _, parts = fetch(server.address, [("empty", 0, 0, 1000), ("t", 0, 0, 1000), ("t", 1, 0, 1000)])
        records = {(p.topic, p.partition): p.records for p in parts}
        assert records[("empty", 0)] == 0
        assert BATCH <= records[("t", 0)] < 2 * BATCH, "the first partition with data: its first batch"
        assert records[("t", 1)] == 0, "any later one: nothing past its limit"
        # Within the limits, whole batches up to partition_max_bytes, and max_bytes over all.
        _, parts = fetch(
            server.address,
            [("t", 0, 0, 2_500_000), ("t", 1, 0, 2_500_000), ("t", 2, 0, 2_500_000)],
            max_bytes=3_500_000,
        )
        sizes = [p.records for p in parts]
        assert all(s <= 2_500_000 for s in sizes) and sum(sizes) <= 3_500_000, sizes
        assert sizes[0] >= 2 * BATCH and sizes[1] > 0, sizes


def test_fetch_max_bytes_is_validated(tmp_path):
    with pytest.raises(InvalidConfigError, match="fetch_max_bytes"):
        Server(str(tmp_path / "d"), fetch_max_bytes=100)
    with pytest.raises(InvalidConfigError, match="fetch_max_bytes"):
        Server(str(tmp_path / "d"), fetch_max_bytes=2**31)


HOSTILE_CONNECTIONS, ROUNDS = 8, 3
RSS_BOUND = 256 << 20


def test_concurrent_hostile_fetches_keep_the_server_resident_memory_bounded(tmp_path, spawn):
    data = str(tmp_path / "data")
    fill(data, "big", 1, 100)
    server, bootstrap = start_serve(spawn.module, data, "--log-level", "WARNING")
    try:
        errors: list[BaseException] = []
        threads = [
            threading.Thread(target=hostile, args=(bootstrap, "big", ROUNDS, errors))
            for _ in range(HOSTILE_CONNECTIONS)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors, errors
        hwm, _ = peak_rss(server.pid)
        print(f"server peak RSS {hwm / 1e6:.0f} MB after {HOSTILE_CONNECTIONS} x {ROUNDS} hostile fetches")
        assert hwm < RSS_BOUND, f"peak RSS {hwm / 1e6:.0f} MB under {HOSTILE_CONNECTIONS} hostile connections"
    finally:
        server.kill()
        server.wait()


RESPONSE_BUDGET = 64 * 1024 * 1024  # QUEUED_MAX_RESPONSE_BYTES in rust/src/server/frame.rs


def test_responses_not_yet_written_never_exceed_the_budget(tmp_path):
    """Two clients that send the hostile fetch and never read hold what the budget gave them
    (a full response, then the room left); a third fetch is answered by its max_wait with what
    fits in the room left, never more, and once they are gone full responses come again."""
    data = str(tmp_path / "data")
    fill(data, "big", 1, 100)
    with Server(data) as server:
        host, port = server.address.rsplit(":", 1)
        stalled = [socket.create_connection((host, int(port))) for _ in range(2)]
        try:
            for s in stalled:
                s.sendall(fetch_request([("big", 0, 0, NO_LIMIT)] * 4))
                time.sleep(0.5)  # the server has read its response and is stuck writing it
            began = time.monotonic()
            _, parts = fetch(server.address, [("big", 0, 0, NO_LIMIT)], max_wait_ms=500)
            assert time.monotonic() - began < 10, "answered by its max_wait, not held until the budget frees"
            assert parts[0].records <= RESPONSE_BUDGET - FETCH_MAX_BYTES
        finally:
            for s in stalled:
                s.close()
        time.sleep(0.5)  # their writes fail: the budget comes back
        _, parts = fetch(server.address, [("big", 0, 0, NO_LIMIT)], max_wait_ms=500)
        assert parts[0].records > FETCH_MAX_BYTES - 2 * BATCH


STALLED_CONNECTIONS = 12


def test_connections_that_never_read_their_answers_do_not_starve_another_clients_fetches(tmp_path):
    """Issue 35 (finding 6): twelve connections send Fetches with no limit over a 20 MB partition
    and never read their answers. Before, their responses held the whole server-wide response
    budget until written (up to 30 s), and every other client's fetch came back with 0 bytes
    although the partition had data, again and again. Now the budget is only a memory safety
    net: a fetch that finds no room still gets its first batch, at once."""
    data = str(tmp_path / "data")
    fill(data, "big", 1, 20)
    with Server(data) as server:
        host, port = server.address.rsplit(":", 1)
        stalled = []
        try:
            for i in range(STALLED_CONNECTIONS):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect((host, int(port)))
                sock.sendall(fetch_request([("big", 0, 0, NO_LIMIT)], correlation_id=i))
                stalled.append(sock)  # ...and never read
            time.sleep(1)  # the server has read their responses and is stuck writing them
            for _ in range(5):
                began = time.monotonic()
                _, parts = fetch(server.address, [("big", 0, 0, NO_LIMIT)], max_wait_ms=500)
                assert parts[0].error_code == 0
                assert parts[0].records > 0, (
                    "the stalled connections' answers leave other clients empty fetches"
                )
                assert time.monotonic() - began < 5
        finally:
            for s in stalled:
                s.close()


BIG_BATCH = 8 << 20
OVERDRAWN_CONNECTIONS = 60


def big_batch_log(data: str) -> None:
    """Topic ``huge`` (max.message.bytes 64 MiB) holding one batch of 8 MiB."""
    kafkalite.Admin(data).create_topic("huge", 1, {"max.message.bytes": 64 << 20})
    log = kafkalite.Log(f"{data}/huge-0", max_message_bytes=64 << 20)
    try:
        log.append_batches(record_batch([b"x" * (1 << 20)] * (BIG_BATCH >> 20), batch_size=64 << 20))
    finally:
        log.close()


def test_first_batches_past_the_budget_are_bounded_per_client(tmp_path, spawn):
    """Sixty connections of one client fetch an 8 MiB batch and never read their answers. Each
    fetch past the response budget got its first batch outside the budget, so the server held
    one 8 MiB copy per connection: 60 took it past 500 MB resident (500 of them 3.8 GB, and
    10,000, max.connections, far more). Now a client's first batches past the budget are bounded
    (one batch always): the rest of its fetches get what the budget's room holds, and a client
    on another address still gets its batch at once."""
    data = str(tmp_path / "data")
    big_batch_log(data)
    server, bootstrap = start_serve(spawn.module, data, "--log-level", "WARNING")
    host, port = bootstrap.rsplit(":", 1)
    stalled = []
    try:
        for i in range(OVERDRAWN_CONNECTIONS):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, int(port)))
            sock.sendall(fetch_request([("huge", 0, 0, NO_LIMIT)], correlation_id=i))
            stalled.append(sock)  # ...and never read
        time.sleep(2)  # the server has read their batches and is stuck writing them
        hwm, _ = peak_rss(server.pid)
        print(f"server peak RSS {hwm / 1e6:.0f} MB with {OVERDRAWN_CONNECTIONS} unread 8 MiB answers")
        assert hwm < 350_000_000, f"peak RSS {hwm / 1e6:.0f} MB: one batch past the budget per connection"
        other = socket.socket()
        other.bind(("127.0.0.2", 0))  # another client: its own overdraft
        other.settimeout(30)
        other.connect((host, int(port)))
        with other:
            other.sendall(fetch_request([("huge", 0, 0, NO_LIMIT)], max_wait_ms=500))
            _, parts = read_response(other)
        assert parts[0].records > BIG_BATCH, "another client gets its first batch"
    finally:
        for s in stalled:
            s.close()
        server.kill()
        server.wait()
