"""Reads never need a partition's append lock (issue 21): the server keeps at most
--max-open-partitions idle logs open (`open_logs`), and a partition it closed for want of room
is opened again by the next request. That reopen took the append lock (a shared writer's open
follows the other writers under it), so an evicted partition whose lock an embedded writer held
while stopped (SIGSTOP) could not be read at all: Fetch, ListOffsets and DescribeLogDirs of it
waited the server's 5 s and got REQUEST_TIMED_OUT for as long as the writer stayed stopped. Now
reads reopen a partition read-only, as an embedded `Log(readonly=True)` does, and only a Produce
takes the append lock (with a bounded wait and Kafka's retriable error)."""

from __future__ import annotations

import os
import threading
import time

import kafkalite
import pytest
import server_wire as wire
from kafka.record import MemoryRecords
from kafkalite.server import Server

pytest.importorskip("kafka.record.default_records")
from server_wire import NONE, REQUEST_TIMED_OUT, SHARED_WRITER, release, stop_holder

#: "At once": far below the 5 s a held lock is waited for, far above a loaded machine's noise.
PROMPT = 2.0
#: A produce to the held partition gets its retriable error after the server's 5 s deadline.
BOUNDED = 15.0
#: The same for a produce queued behind another's open: its own 5 s, with a loaded machine's
#: margin, well under the 10 s a second wait in line took.
QUEUED_BOUND = 8.0


def fetch_values(conn: wire.Wire, topic: str, partition: int) -> tuple[int, list[bytes]]:
    """One Fetch (no wait) of ``topic``-``partition`` from offset 0: its error code and values."""
    response = conn.call(wire.fetch([(topic, partition, 0)], 0, 1 << 20, 1 << 20), timeout=30)
    [p] = [p for t in response.responses for p in t.partitions]
    values = []
    if p.records:
        records = MemoryRecords(p.records)
        while (batch := records.next_batch()) is not None:
            values.extend(r.value for r in batch)
    return p.error_code, values


def produce_error(conn: wire.Wire, topic: str, partition: int, value: bytes) -> int:
    response = conn.call(wire.produce(topic, partition, wire.record_batch([value]), 30_000), timeout=60)
    return response.responses[0].partition_responses[0].error_code


def timed(call, *args):
    started = time.monotonic()
    result = call(*args)
    return result, time.monotonic() - started


def test_an_evicted_partition_whose_append_lock_a_stopped_writer_holds_is_still_read(tmp_path, spawn):
    path = str(tmp_path)
    admin = kafkalite.Admin(path)
    admin.create_topic("held", 1)
    admin.create_topic("other", 2)
    with kafkalite.Producer(path) as producer:
        for i in range(3):
            producer.send("held", b"r%d" % i, partition=0).get(timeout=30)
    expected = [b"r0", b"r1", b"r2"]
    with Server(path, max_open_partitions=1) as server:
        conn = wire.Wire(server.address, timeout=30)
        assert fetch_values(conn, "held", 0) == (NONE, expected)  # the server has held-0 open
        holder = stop_holder(spawn.code, SHARED_WRITER, os.path.join(path, "held-0"))
        try:
            # Only one idle log stays open: these close held-0.
            assert produce_error(conn, "other", 0, b"a") == NONE
            assert produce_error(conn, "other", 1, b"b") == NONE
            answer, seconds = timed(fetch_values, conn, "held", 0)
            assert answer == (NONE, expected)
            assert seconds < PROMPT, f"the Fetch of the evicted partition took {seconds:.1f} s"
            # And again after another eviction, then a produce elsewhere, still at once.
            assert produce_error(conn, "other", 0, b"c") == NONE
            answer, seconds = timed(fetch_values, conn, "held", 0)
            assert answer == (NONE, expected) and seconds < PROMPT, (answer, seconds)
            error, seconds = timed(produce_error, conn, "other", 1, b"d")
            assert error == NONE and seconds < PROMPT, (error, seconds)
            # A produce to the held partition itself waits for the lock, and gets the retriable
            # error after the server's deadline rather than waiting for the holder.
            error, seconds = timed(produce_error, conn, "held", 0, b"stuck")
            assert error == REQUEST_TIMED_OUT and seconds < BOUNDED, (error, seconds)
            # The held partition still reads while its writer is stopped.
            answer, seconds = timed(fetch_values, conn, "held", 0)
            assert answer == (NONE, expected) and seconds < PROMPT, (answer, seconds)
        finally:
            release(holder)
        # Once the holder is gone the held partition takes produces again.
        assert produce_error(conn, "held", 0, b"after") == NONE
        assert fetch_values(conn, "held", 0) == (NONE, [*expected, b"after"])
        conn.close()


def test_produces_queued_behind_a_stopped_writer_get_their_error_by_their_own_deadline(tmp_path, spawn):
    """Produces to a partition the server must open as a writer, while a stopped writer holds
    its append lock: one open waits for the lock at a time and the others wait for that one
    (so they do not take every slot of blocking work). The open waited for its own 5 s from
    when it started, so a produce queued behind it was answered after up to 10 s; each is
    answered by its own request's deadline now."""
    path = str(tmp_path)
    kafkalite.Admin(path).create_topic("held", 1)
    with Server(path, max_open_partitions=1) as server:
        holder = stop_holder(spawn.code, SHARED_WRITER, os.path.join(path, "held-0"))
        try:
            results: list[tuple[int, float]] = []

            def one() -> None:
                conn = wire.Wire(server.address, timeout=60)
                try:
                    results.append(timed(produce_error, conn, "held", 0, b"queued"))
                finally:
                    conn.close()

            threads = [threading.Thread(target=one) for _ in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
        finally:
            release(holder)
    assert [error for error, _ in results] == [REQUEST_TIMED_OUT] * 6, results
    slowest = max(seconds for _, seconds in results)
    assert slowest < QUEUED_BOUND, f"a queued produce was answered after {slowest:.1f} s: {results}"
