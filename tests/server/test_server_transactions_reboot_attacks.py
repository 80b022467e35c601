"""Attacks on the start-after-a-reboot rule of issue 22 (``test_server_transactions_reboot.py``
has the rule itself): a server starting under another boot id aborts every open transaction
before it answers anything. The fault here: a stopped embedded process holding the append lock
of a partition an open transaction wrote to. The abort needs only its decision (PrepareAbort at
a bumped epoch, which fences the producer) to be durable before the server answers; the records
need no sync and the markers can follow once the lock is free. Before, the start synced the
records and wrote the markers under that lock, waited 5 s for it and failed: no server at all
while the process stayed stopped."""

from __future__ import annotations

import os
import subprocess
import threading

import kafkalite
import pytest
from serve_proc import free_port

kafka = pytest.importorskip("kafka")
from server_wire import HOLD_FLOCK, release, stop_holder  # noqa: E402
from test_server_transactions_reboot import (  # noqa: E402
    TOPIC,
    a_newer_producer_commits_after,
    close_quietly,
    send_all,
    stop,
    transactional,
)

#: The start's guarantee: listening well within this while the lock holder stays stopped (its
#: append-lock wait is 5 s, a loaded machine's start a second or two).
PROMPT = 20.0


def serve_within(
    spawn, data, port: int, boot_id: str, within: float
) -> tuple[subprocess.Popen | None, list[str]]:
    """``kafkalite serve`` under ``boot_id``: the process once it listens, or None when it exited
    or did not listen within ``within`` s; and what it logged until then."""
    env = {**os.environ, "KAFKALITE_BOOT_ID": boot_id}
    server = spawn.module(
        "kafkalite", "serve", "--data-dir", str(data), "--listen", f"127.0.0.1:{port}", "--log-level", "WARNING",
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    said: list[str] = []
    listening = threading.Event()

    def read() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            said.append(line)
            if f"127.0.0.1:{port}" in line:
                listening.set()
                return

    threading.Thread(target=read, daemon=True).start()
    if listening.wait(within):
        return server, said
    server.kill()
    server.wait(30)
    return None, said


def test_a_stopped_append_lock_holder_does_not_keep_the_server_from_starting_after_a_reboot(tmp_path, spawn):
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic(TOPIC, 1)
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    server, _ = serve_within(spawn, data, port, "boot-before", PROMPT)
    assert server is not None
    producer = transactional(bootstrap)
    producer.begin_transaction()
    first = send_all(producer, b"first", 5)
    producer.commit_transaction()
    producer.begin_transaction()
    send_all(producer, b"open", 5)  # open when the machine "restarts"
    stop(server)
    holder = stop_holder(spawn.code, HOLD_FLOCK, str(data / f"{TOPIC}-0" / ".kafkalite.lock"))
    try:
        server, said = serve_within(spawn, data, port, "boot-after", PROMPT)
        assert server is not None, (
            f"no server while a stopped process holds a partition's append lock: {said}"
        )
        assert any("aborting the transaction of" in line for line in said), said
    finally:
        release(holder)
    try:
        # (Its commit waits, retried, for the markers, which need the lock: asked once it is free.)
        try:
            producer.commit_transaction()
        except kafka.errors.KafkaError:
            pass  # fenced: the open transaction was aborted at the start
        else:
            pytest.fail("a transaction open at a reboot was committed")
        close_quietly(producer)
        # The markers follow once the lock is free: read_committed gets past the aborted records.
        a_newer_producer_commits_after(bootstrap, first)
    finally:
        stop(server)
