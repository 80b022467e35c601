"""Adversarial cases where EndTxn answered at its decision (``server/txn_ends.rs``) meets the
verification guard of transactional Produce (``server/produce.rs``).

A decided end whose markers could not be written after the answer (the first marker's write
fails: fail point ``txn.marker.before=eio@1``; the same as a stopped writer holding a partition's
append lock past the wait, or no blocking slot) leaves the id in PrepareCommit, to be completed
by its next request. With transaction version 2 that request is the next transaction's first
Produce (v12), which adds its partition through the coordinator: the coordinator completes the
old end first, so the old transaction's marker lands in the partition between the guard's take
and the append. That marker (at the bumped epoch, the batch's own) ended the transaction
before, not the batch's: the batch must not get INVALID_TXN_STATE, which the Java client treats
as an abortable error of a transaction that did nothing wrong. Kafka's coordinator answers the
verification CONCURRENT_TRANSACTIONS while its markers are pending, which the broker turns into a
retriable Produce error, and the retried batch is appended: either a retriable error then
success, or success at once, is right here.

Also: a batch whose verification guard was dropped (its partition's log closed and opened again
meanwhile) is verified again, not refused for good; an EndTxn whose client went away before its answer still gets its markers at once; and a
server stopped (SIGTERM) while a decided end's markers are held up exits cleanly, its next start
completing the end."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import kafkalite
import pytest
from serve_proc import free_port, serve_on

pytest.importorskip("kafka")
from kafka.protocol.producer.transaction import EndTxnRequest
from server_wire import HOLD_FLOCK, Wire, in_background, release, stop_holder
from test_server_transactions import values
from test_server_transactions_end_answer import wait_stopped
from test_server_transactions_v2 import END_TXN_V2, Client, control_epochs, describe, landed

pytest_plugins = ["kafkalite.testing"]

NONE, NOT_ENOUGH_REPLICAS, CONCURRENT_TRANSACTIONS = 0, 19, 51
RETRIABLE = {NOT_ENOUGH_REPLICAS, CONCURRENT_TRANSACTIONS}


def produce_retrying(client: Client, *args: object, tries: int = 5) -> list[int]:
    """The error codes of a Produce sent again (same batch, same sequence) while retriable, as a
    client retries it."""
    codes = [client.produce(*args)]  # type: ignore[arg-type]
    while codes[-1] in RETRIABLE and len(codes) < tries:
        codes.append(client.produce(*args))  # type: ignore[arg-type]
    return codes


def test_the_next_transactions_batch_is_not_refused_when_its_verification_completes_the_last_end(
    tmp_path, spawn
):
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("late", 1)
    tid = "late-tx"
    port = free_port()
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "txn.marker.before=eio@1"}
    server = serve_on(spawn.module, data, port, "--log-level", "WARNING", env=env)
    address = f"127.0.0.1:{port}"
    client = Client(address)
    try:
        error, pid, epoch = client.init_producer_id(tid)
        assert error == NONE
        assert client.produce(tid, "late", 0, (pid, epoch), 0, [b"first"]) == NONE
        # Answered at the decision; the completion's first marker fails: left in PrepareCommit.
        assert client.end_txn(tid, (pid, epoch), True) == (NONE, pid, epoch + 1)
        # The next transaction's first batch in the partition (its Produce waits for the
        # completion, which fails, then adds the partition: the coordinator completes the end).
        codes = produce_retrying(client, tid, "late", 0, (pid, epoch + 1), 0, [b"second"])
        assert codes[-1] == NONE, f"the next transaction's batch got {codes} (48: INVALID_TXN_STATE)"
        assert control_epochs(str(data), "late", 0) == [(pid, epoch + 1, True)]
        assert describe(str(data), tid).state == "Ongoing"
        assert client.end_txn(tid, (pid, epoch + 1), True) == (NONE, pid, epoch + 2)
        assert sorted(values(address, "late", "read_committed", want=2)) == [b"first", b"second"]
        with kafkalite.Log(str(data / "late-0"), readonly=True) as log:
            assert log.last_stable_offset == log.end_offset, "a hanging transaction"
    finally:
        client.close()
        server.kill()
        server.wait(30)


def test_a_server_stopped_with_markers_held_exits_and_its_next_start_completes_the_end(tmp_path, spawn):
    """SIGTERM while a decided end's markers are held up (a stopped writer holds a partition's
    append lock): the server exits cleanly within its bounded waits, and the next start completes
    the end (every record of the committed transaction visible to read_committed)."""
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("term", 2)
    tid = "term-tx"
    port = free_port()
    # The server stops itself before the first marker, after its answer (the decision's sync
    # needs the partitions): the writer takes its lock then.
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "txn.marker.before=stop@1"}
    server = serve_on(spawn.module, data, port, "--log-level", "WARNING", env=env)
    client = Client(f"127.0.0.1:{port}")
    holder = None
    try:
        error, pid, epoch = client.init_producer_id(tid)
        assert error == NONE
        records = [b"term-%d" % p for p in range(2)]
        for p in range(2):
            assert client.produce(tid, "term", p, (pid, epoch), 0, [records[p]]) == NONE
        assert client.end_txn(tid, (pid, epoch), True) == (NONE, pid, epoch + 1)
        wait_stopped(server.pid)
        holder = stop_holder(spawn.code, HOLD_FLOCK, os.path.join(data, "term-1", ".kafkalite.lock"))
        server.send_signal(signal.SIGTERM)
        server.send_signal(signal.SIGCONT)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            raise AssertionError("the server did not exit within 60 s of SIGTERM with markers held") from None
        assert server.returncode == 0, server.stderr.read() if server.stderr else server.returncode
    finally:
        client.close()
        if holder is not None:
            release(holder)
        server.kill()
        server.wait(30)
    port = free_port()
    server = serve_on(spawn.module, data, port, "--log-level", "WARNING")
    try:
        read = values(f"127.0.0.1:{port}", "term", "read_committed", want=len(records))
        assert sorted(read) == records, "the committed transaction is not all visible after the restart"
        assert all(control_epochs(str(data), "term", p) == [(pid, epoch + 1, True)] for p in range(2))
    finally:
        server.kill()
        server.wait(30)


def test_an_end_txn_whose_client_went_away_before_the_answer_still_gets_its_markers(tmp_path, spawn):
    """The producer sends EndTxn (commit) and goes away (closes its connection) while the server
    decides the end (stopped by ``txn.prepare.after_record=stop@1`` right after PrepareCommit is
    recorded): the end is decided, so its markers must follow at once, as a Kafka coordinator
    writes them whatever became of the client; not only at the id's next request or the periodic
    check 10 s later, with read_committed readers of the partitions stalled until then."""
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("gone", 2)
    tid = "gone-tx"
    port = free_port()
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "txn.prepare.after_record=stop@1"}
    server = serve_on(spawn.module, data, port, "--log-level", "WARNING", env=env)
    client = Client(f"127.0.0.1:{port}")
    try:
        error, pid, epoch = client.init_producer_id(tid)
        assert error == NONE
        for p in range(2):
            assert client.produce(tid, "gone", p, (pid, epoch), 0, [b"gone-%d" % p]) == NONE
        request = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True)
        request.with_header(correlation_id=99, client_id="gone")
        client.sock.sendall(request.encode(version=END_TXN_V2, header=True, framed=True))
        wait_stopped(server.pid)
        client.close()  # gone before the answer
        server.send_signal(signal.SIGCONT)
        # Well before the periodic check (10 s) would complete it.
        want = [(pid, epoch + 1, True)]
        assert [landed(str(data), "gone", p, want, timeout=4.0) for p in range(2)] == [want, want], (
            "the decided end's markers were not written after its client went away"
        )
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait(30)


def test_a_verified_batch_whose_partition_was_closed_meanwhile_is_not_refused_for_good(tmp_path, spawn):
    """A transaction's first batch in a partition (Produce v12) waits in its verification (a
    stopped process holds the transactional id's coordinator lock); meanwhile the partition's log
    is closed by the server (``--max-open-partitions 1``, another partition touched), which drops
    the in-memory verification guard with its producer state. Nothing of the producer came into
    the partition: the batch must be appended or get a retriable error, not INVALID_TXN_STATE
    (an abortable error for a transaction that did no wrong)."""
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("evict", 2)
    tid = "evict-tx"
    port = free_port()
    server = serve_on(spawn.module, data, port, "--log-level", "WARNING", "--max-open-partitions", "1")
    address = f"127.0.0.1:{port}"
    client, wire = Client(address), Wire(address)
    holder = None
    try:
        error, pid, epoch = client.init_producer_id(tid)
        assert error == NONE
        lock_file = os.path.join(data, ".kafkalite-transactions", f"{tid}.lock")
        holder = stop_holder(spawn.code, HOLD_FLOCK, lock_file)
        thread, answer = in_background(client.produce, tid, "evict", 0, (pid, epoch), 0, [b"mine"])
        time.sleep(1.0)  # the Produce took its guard and waits for the coordinator's lock
        assert wire.produce("evict", 1, b"other") == NONE  # evict-0's log is closed
        release(holder)
        holder = None
        thread.join(30)
        assert "error" not in answer, answer
        codes = [answer["result"]]
        while codes[-1] in RETRIABLE and len(codes) < 5:
            codes.append(client.produce(tid, "evict", 0, (pid, epoch), 0, [b"mine"]))
        assert codes[-1] == NONE, f"the batch got {codes} (48: INVALID_TXN_STATE)"
        assert client.end_txn(tid, (pid, epoch), True) == (NONE, pid, epoch + 1)
        assert sorted(values(address, "evict", "read_committed", want=2)) == [b"mine", b"other"]
    finally:
        if holder is not None:
            release(holder)
        client.close()
        wire.close()
        server.kill()
        server.wait(30)
