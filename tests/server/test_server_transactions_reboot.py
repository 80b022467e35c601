"""A served transaction's records are synced once, when it ends (issue 22): ``kafkalite serve``
answers a transactional Produce at the page cache, even acks=all under ``--acks-all=disk``, and
EndTxn only once the records, the decision and the markers are on disk. The hole that opens is an
OS crash: the records a producer was told were written are gone, the producer (on another host)
is not, and its commit after the restart would commit a transaction with records missing. The
server's start closes it: under another boot id (``KAFKALITE_BOOT_ID``, the test-only stand-in
for Linux's ``/proc/sys/kernel/random/boot_id``) every open transaction is aborted, its producer
fenced, before any request is answered.

The faults: a power loss simulated on the data directory (the server killed with kill -9, then
the partition's segment put back to what the last commit synced: the bytes after it zeroed, as
a power loss leaves a preallocated file's unsynced pages) and a reboot (another boot id); a kill
-9 alone under the same boot (nothing is lost: the transaction carries on); a stopped process
holding the partition's sync lock (the transactional Produce is answered, the commit is not)."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import kafkalite
import pytest
from serve_proc import free_port

kafka = pytest.importorskip("kafka")
from kafka import KafkaProducer  # noqa: E402
from server_wire import HOLD_FLOCK, release, stop_holder  # noqa: E402
from test_server_transactions import values  # noqa: E402

TOPIC = "reboot"
SEGMENT = f"{TOPIC}-0/00000000000000000000.log"
#: Far below the 30 s an acks=all Produce waits for its sync, far above a loaded machine's noise.
PROMPT = 5.0


def serve(spawn, data, port: int, boot_id: str, said: list[str] | None = None) -> subprocess.Popen:
    """``kafkalite serve`` under ``boot_id``; the lines it logged before it listened go to ``said``
    (the start's aborts are logged then)."""
    env = {**os.environ, "KAFKALITE_BOOT_ID": boot_id}
    server = spawn.module(
        "kafkalite", "serve", "--data-dir", str(data), "--listen", f"127.0.0.1:{port}", "--log-level", "WARNING",
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stderr is not None
    while f"127.0.0.1:{port}" not in (line := server.stderr.readline()):
        assert line, "kafkalite serve exited before it listened"
        if said is not None:
            said.append(line)
    return server


def stop(server: subprocess.Popen) -> None:
    server.kill()
    server.wait(30)


def transactional(bootstrap: str, transactional_id: str = "reboot-tx") -> KafkaProducer:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        acks="all",
        request_timeout_ms=30_000,
        reconnect_backoff_max_ms=200,
    )
    producer.init_transactions()
    return producer


def send_all(producer: KafkaProducer, prefix: bytes, n: int) -> list[bytes]:
    sent = [b"%s-%d" % (prefix, i) for i in range(n)]
    for value in sent:
        producer.send(TOPIC, value, partition=0)
    producer.flush(timeout=60)
    return sent


def committed_values(bootstrap: str, want: int, timeout: float = 20.0) -> list[bytes]:
    """The values a read_committed consumer reads from the start (``values``' rules)."""
    return values(bootstrap, TOPIC, "read_committed", want=want, timeout=timeout)


def started_with_a_commit(spawn, data, boot_id: str, said: list[str] | None = None):
    """A topic of one partition, a server under ``boot_id`` and a transactional producer that
    committed one transaction of 20 records: (bootstrap, server, producer, its values)."""
    kafkalite.Admin(str(data)).create_topic(TOPIC, 1)
    port = free_port()
    server = serve(spawn, data, port, boot_id, said)
    bootstrap = f"127.0.0.1:{port}"
    producer = transactional(bootstrap)
    producer.begin_transaction()
    first = send_all(producer, b"first", 20)
    producer.commit_transaction()  # its records, decision and markers synced
    return bootstrap, server, producer, first


def lose_unsynced(data, synced: bytes) -> None:
    """The partition's segment as a power loss leaves it when ``synced`` was all that a sync
    covered: the same bytes, and zeros after them (the file keeps its length)."""
    path = os.path.join(data, SEGMENT)
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        assert size >= len(synced)
        f.write(synced)
        f.write(b"\0" * (size - len(synced)))
        f.flush()


def a_newer_producer_commits_after(bootstrap: str, first: list[bytes]) -> None:
    """A new producer with the same transactional id commits 5 records, and read_committed sees
    ``first`` then them: the fenced transaction was aborted, its markers written."""
    newer = transactional(bootstrap)
    newer.begin_transaction()
    after = send_all(newer, b"after", 5)
    newer.commit_transaction()
    newer.close()
    assert committed_values(bootstrap, want=len(first) + len(after)) == first + after


def close_quietly(producer: KafkaProducer) -> None:
    try:
        producer.close(timeout=5)
    except kafka.errors.KafkaError:
        pass


def test_a_transaction_open_when_the_machine_restarted_is_aborted_not_committed_without_its_records(
    tmp_path, spawn
):
    data = tmp_path / "data"
    bootstrap, server, producer, first = started_with_a_commit(spawn, data, "boot-before")
    port = int(bootstrap.rsplit(":", 1)[1])
    synced = (data / SEGMENT).read_bytes()
    producer.begin_transaction()
    send_all(producer, b"lost", 20)  # acknowledged (acks=all) from the page cache only
    stop(server)
    lose_unsynced(data, synced)
    said: list[str] = []
    server = serve(spawn, data, port, "boot-after", said)
    assert any('aborting the transaction of "reboot-tx"' in line for line in said), said
    try:
        try:
            producer.commit_transaction()
        except kafka.errors.KafkaError:
            pass  # fenced (or its transaction found aborted): what a timeout abort gives
        else:
            seen = committed_values(bootstrap, want=len(first) + 20)
            pytest.fail(
                f"committed a transaction whose acknowledged records a reboot lost: read_committed sees {len(seen)}"
            )
        close_quietly(producer)
        assert committed_values(bootstrap, want=len(first)) == first
        a_newer_producer_commits_after(bootstrap, first)
    finally:
        stop(server)


def test_a_server_killed_and_restarted_under_the_same_boot_keeps_the_open_transaction(tmp_path, spawn):
    data = tmp_path / "data"
    bootstrap, server, producer, first = started_with_a_commit(spawn, data, "one-boot")
    port = int(bootstrap.rsplit(":", 1)[1])
    producer.begin_transaction()
    second = send_all(producer, b"second", 20)
    stop(server)  # kill -9: the page cache keeps what it acknowledged
    server = serve(spawn, data, port, "one-boot")
    try:
        producer.commit_transaction()
        producer.close()
        assert committed_values(bootstrap, want=len(first) + len(second)) == first + second
    finally:
        stop(server)


def test_a_transactional_produce_is_answered_before_its_sync_and_its_commit_only_after(tmp_path, spawn):
    """A stopped process holds the partition's sync lock: the transactional acks=all Produce is
    answered all the same (before: it waited for a sync that could not run, and timed out), and
    the commit is not answered while the records cannot be made durable; once the holder is gone
    the transaction commits with every record."""
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic(TOPIC, 1)
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    server = serve(spawn, data, port, "one-boot")
    try:
        producer = transactional(bootstrap)
        producer.begin_transaction()
        warm = send_all(producer, b"warm", 1)  # the partition's group-commit file exists
        producer.commit_transaction()
        holder = stop_holder(spawn.code, HOLD_FLOCK, str(data / f"{TOPIC}-0" / ".kafkalite-durable"))
        try:
            producer.begin_transaction()
            started = time.monotonic()
            sent = send_all(producer, b"held", 10)
            answered = time.monotonic() - started
            assert answered < PROMPT, f"the transactional Produce waited {answered:.1f} s for a sync"
            done: dict[str, object] = {}

            def commit() -> None:
                try:
                    producer.commit_transaction()
                    done["ok"] = time.monotonic()
                except Exception as e:  # reported below
                    done["error"] = e

            committing = threading.Thread(target=commit, daemon=True)
            committing.start()
            committing.join(PROMPT)
            assert "ok" not in done, "the commit was answered before its records could be synced"
            assert committed_values(bootstrap, want=len(warm) + 1, timeout=3) == warm
        finally:
            release(holder)
        committing.join(120)
        assert done.get("ok"), f"the commit did not complete once the sync lock was free: {done}"
        producer.close()
        assert committed_values(bootstrap, want=len(warm) + len(sent)) == warm + sent
    finally:
        stop(server)
