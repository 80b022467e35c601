"""acks=all Produce requests pipelined on one connection (issue 25 item 1): while a request's
answer waits for its sync, the server reads and appends the connection's next Produce requests,
so one group-commit sync covers several requests of a producer (Kafka's clients keep up to 5 in
flight) instead of one sync each. The answers still come in request order, and only after a
sync that covered each request succeeded. The faults: a process stopped (SIGSTOP) while it holds
the partition's sync lock, and an msync failing with EIO (fail point ``group_commit.sync``).

Before: the connection read its next request only once the previous one was answered, so each
acks=all request waited for a sync of its own (4.5 server CPU seconds per million records
against 1.0 at acks=1, benches/results/server-2026-11-27.md)."""

from __future__ import annotations

import os
import select
import time

import pytest
from server_wire import (
    API_VERSIONS,
    HOLD_FLOCK,
    KAFKA_STORAGE_ERROR,
    NONE,
    PRODUCE,
    REQUEST_TIMED_OUT,
    Wire,
    produce_body,
    produce_error,
    release,
    stop_holder,
)
from test_server_acks import serve

confluent_kafka = pytest.importorskip("confluent_kafka")

PIPELINED = 4


def end_offset(bootstrap: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(confluent_kafka.TopicPartition("t", 0), timeout=10)[1]
    finally:
        consumer.close()


def wait_for_end(bootstrap: str, want: int, within: float) -> int:
    """The partition's end offset once it is ``want``, or what it is after ``within`` seconds."""
    deadline = time.monotonic() + within
    while (end := end_offset(bootstrap)) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return end


def answered_yet(wire: Wire) -> bool:
    return bool(select.select([wire.sock], [], [], 0)[0])


def hold_sync_lock(spawn, data: str) -> object:
    """A process holding the partition's sync lock (the flock of its group-commit file), stopped."""
    return stop_holder(spawn.code, HOLD_FLOCK, os.path.join(data, "t-0", ".kafkalite-durable"))


def test_while_a_stopped_process_holds_the_sync_lock_the_next_produces_are_appended_and_none_answered(
    tmp_path, spawn
):
    data = str(tmp_path / "data")
    server, bootstrap = serve(spawn, tmp_path)
    wire = Wire(bootstrap)
    try:
        assert wire.produce("t", 0, b"warm-up") == NONE  # the partition joins group commit
        holder = hold_sync_lock(spawn, data)
        began = time.monotonic()
        sent = [
            wire.send_raw(PRODUCE, 3, produce_body("t", 0, b"%d" % i, timeout_ms=3000))
            for i in range(PIPELINED)
        ]
        sent.append(wire.send_raw(API_VERSIONS, 0, b""))  # not a Produce: answered after them
        # Before: the second request was read only once the first was answered (3 s later).
        assert wait_for_end(bootstrap, 1 + PIPELINED, within=2) == 1 + PIPELINED, (
            "the connection's next Produce requests were not appended while the first waited for its sync"
        )
        assert not answered_yet(wire), "a request was answered while no sync could run"
        answers = [wire.receive_raw() for _ in sent]
        waited = time.monotonic() - began
        assert [correlation for correlation, _ in answers] == sent, "answers out of request order"
        assert [produce_error(body) for _, body in answers[:PIPELINED]] == [REQUEST_TIMED_OUT] * PIPELINED
        assert waited < 10, f"answered after {waited:.1f} s: the requests' 3 s timeouts were not kept"
        release(holder)
        assert wire.produce("t", 0, b"after") == NONE
        assert end_offset(bootstrap) == 2 + PIPELINED
    finally:
        wire.close()
        server.kill()
        server.wait()


def test_an_msync_failing_fails_every_produce_appended_before_it_on_the_connection(tmp_path, spawn):
    """The second sync fails (EIO): the pipelined requests it covered, all appended while a
    stopped process held the sync lock, are each answered KAFKA_STORAGE_ERROR (none is
    acknowledged), in order; the partition reopens and the next request is acknowledged."""
    data = str(tmp_path / "data")
    server, bootstrap = serve(spawn, tmp_path, env={"KAFKALITE_FAILPOINTS": "group_commit.sync=eio@2"})
    wire = Wire(bootstrap)
    try:
        assert wire.produce("t", 0, b"warm-up") == NONE  # the first sync
        holder = hold_sync_lock(spawn, data)
        sent = [wire.send_raw(PRODUCE, 3, produce_body("t", 0, b"%d" % i)) for i in range(PIPELINED)]
        assert wait_for_end(bootstrap, 1 + PIPELINED, within=10) == 1 + PIPELINED
        assert not answered_yet(wire)
        release(holder)  # the next sync, the failing one, runs now and would cover all four
        answers = [wire.receive_raw() for _ in sent]
        assert [correlation for correlation, _ in answers] == sent
        assert [produce_error(body) for _, body in answers] == [KAFKA_STORAGE_ERROR] * PIPELINED, (
            "a request appended before the failed sync was acknowledged"
        )
        assert wire.produce("t", 0, b"after") == NONE
    finally:
        wire.close()
        server.kill()
        stderr = server.communicate()[1]
    assert "not made durable" in stderr
