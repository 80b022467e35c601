"""EndTxn through ``kafkalite serve`` is answered once the end is decided (the records and the
PrepareCommit / PrepareAbort record durable), the markers and CompleteCommit / CompleteAbort
written right after, off the answer's path, as a Kafka broker's coordinator does
(``rust/src/server/txn_ends.rs``). Each test holds the marker writer: the server stops itself
(the ``stop`` fail point action) at ``txn.marker.before``, right after the answer. Then: the
producer has its answer while no marker is written; a request of the same transactional id sent
meanwhile waits for the markers and succeeds, never INVALID_TXN_STATE; with the markers held up
past the request's wait (a partition's append lock held by a stopped writer) it gets
CONCURRENT_TRANSACTIONS, never a hang. kill -9 after the answer: test_server_transactions_v2.py
(``txn.marker.before`` and the other marker fail points)."""

from __future__ import annotations

import os
import signal
import threading
import time

import kafkalite
import pytest
from serve_proc import free_port, serve_on

pytest.importorskip("kafka")
from server_wire import HOLD_FLOCK, release, stop_holder
from test_server_transactions import values
from test_server_transactions_v2 import Client, control_epochs

pytest_plugins = ["kafkalite.testing"]

NONE, INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS = 0, 48, 51


def wait_stopped(pid: int, timeout: float = 30.0) -> None:
    """Until process ``pid`` is stopped (SIGSTOP: state T)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/status") as status:
            if any(line.split()[:2] == ["State:", "T"] for line in status):
                return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} did not stop")


def started(tmp_path, spawn, topic: str):
    """A server that stops itself before its first marker, a transaction of three records in
    each of 3 partitions of ``topic``, and its producer: (server, client, address, (pid, epoch),
    records)."""
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic(topic, 3)
    port = free_port()
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "txn.marker.before=stop@1"}
    server = serve_on(spawn.module, data, port, "--log-level", "WARNING", env=env)
    address = f"127.0.0.1:{port}"
    client = Client(address)
    error, pid, epoch = client.init_producer_id(f"{topic}-tx")
    assert error == NONE
    records = [b"%s-%d-%d" % (topic.encode(), p, i) for p in range(3) for i in range(3)]
    for p in range(3):
        assert client.produce(f"{topic}-tx", topic, p, (pid, epoch), 0, records[p * 3 : p * 3 + 3]) == NONE
    return server, client, address, (pid, epoch), records


def test_end_txn_is_answered_before_its_markers_and_the_ids_next_request_waits_for_them(tmp_path, spawn):
    """The commit is answered while the server is stopped before its first marker (none is
    written); the producer's next transaction's first Produce (v12: it adds its partition),
    sent then, waits for the markers and is appended into the new transaction, which commits."""
    server, client, address, (pid, epoch), records = started(tmp_path, spawn, "early")
    data = str(tmp_path / "data")
    try:
        assert client.end_txn("early-tx", (pid, epoch), True) == (NONE, pid, epoch + 1)
        wait_stopped(server.pid)
        early = [control_epochs(data, "early", p) for p in range(3)]
        assert early == [[], [], []], f"markers before the answer: {early}"
        outcome: dict = {}

        def produce() -> None:
            started_at = time.monotonic()
            outcome["code"] = client.produce("early-tx", "early", 0, (pid, epoch + 1), 0, [b"next"])
            outcome["seconds"] = time.monotonic() - started_at

        sender = threading.Thread(target=produce)
        sender.start()
        time.sleep(1.0)
        assert "code" not in outcome, "answered while the markers were held"
        server.send_signal(signal.SIGCONT)
        sender.join(30)
        assert outcome["code"] == NONE, f"the next transaction's Produce got {outcome['code']}"
        # The markers came before the new transaction's batch, at the ended transaction's epoch.
        assert all(control_epochs(data, "early", p) == [(pid, epoch + 1, True)] for p in range(3))
        assert client.end_txn("early-tx", (pid, epoch + 1), True) == (NONE, pid, epoch + 2)
        read = values(address, "early", "read_committed", want=len(records) + 1)
        assert sorted(read) == sorted([*records, b"next"])
    finally:
        server.send_signal(signal.SIGCONT)
        client.close()
        server.kill()
        server.wait(30)


def test_a_request_of_the_id_gets_concurrent_transactions_when_the_markers_stay_held(tmp_path, spawn):
    """The abort is answered, then a partition's append lock is taken by a writer that stops
    (SIGSTOP) before the server goes on to the markers: a new producer of the id (InitProducerId)
    waits for them, then gets CONCURRENT_TRANSACTIONS (retriable) within the server's bounded
    waits, never INVALID_TXN_STATE or a hang; once the writer is gone the markers are written
    and the id's InitProducerId is answered; nothing of the aborted transaction is visible."""
    server, client, address, (pid, epoch), records = started(tmp_path, spawn, "held")
    data = str(tmp_path / "data")
    holder = None
    try:
        assert client.end_txn("held-tx", (pid, epoch), False) == (NONE, pid, epoch + 1)
        wait_stopped(server.pid)
        holder = stop_holder(spawn.code, HOLD_FLOCK, os.path.join(data, "held-1", ".kafkalite.lock"))
        server.send_signal(signal.SIGCONT)
        started_at = time.monotonic()
        error, _, _ = client.init_producer_id("held-tx")
        seconds = time.monotonic() - started_at
        assert error == CONCURRENT_TRANSACTIONS, f"InitProducerId got {error}"
        assert seconds < 25, f"InitProducerId took {seconds:.1f} s"
        release(holder)
        holder = None
        error, new_pid, new_epoch = client.init_producer_id("held-tx")
        assert (error, new_pid, new_epoch) == (NONE, pid, epoch + 2)
        assert all(control_epochs(data, "held", p) == [(pid, epoch + 1, False)] for p in range(3))
        assert values(address, "held", "read_committed", want=0, timeout=5) == []
        assert len(values(address, "held", "read_uncommitted", want=len(records))) == len(records)
    finally:
        if holder is not None:
            release(holder)
        server.send_signal(signal.SIGCONT)
        client.close()
        server.kill()
        server.wait(30)
