"""Adversary of `kafkalite serve --max-open-partitions` (issue 21's last finding): partitions
evicted and reopened constantly while another process also writes them.

A partition the server closes while an embedded writer still has it open cannot be finished (the
server is not the last writer out), so its active segment keeps the blocks reserved ahead of the
writers. Each reopen followed that tail and reserved one more step (16 MiB) past the file's end
however much room it already had, so every eviction cycle grew the segment file, without bound:
a workload touching more partitions than the cap filled the disk (`cannot reserve 2.5 GB ...
No space left on device`, KAFKA_STORAGE_ERROR to every producer)."""

from __future__ import annotations

import glob
import os

import kafkalite
from serve_proc import free_port, serve_on
from server_wire import NONE, Wire

#: Eviction cycles: before the fix each grew the held partition's segment by 16 MiB.
CYCLES = 24
#: What the active segment may hold reserved past its data: a few allocation steps (16 MiB each).
RESERVE_BOUND = 64 << 20


def test_reopening_an_evicted_partition_another_writer_holds_does_not_grow_its_segment(tmp_path, spawn):
    path = str(tmp_path)
    kafkalite.Admin(path).create_topic("t", 2)
    # A live embedded writer of t-0: the server's close of t-0 cannot finish (trim) it.
    with kafkalite.Producer(path) as embedded:
        embedded.send("t", b"embedded", partition=0).get(timeout=30)
        port = free_port()
        server = serve_on(
            spawn.module, path, port, "--max-open-partitions", "1", "--log-level", "ERROR"
        )
        wire = Wire(f"127.0.0.1:{port}")
        try:
            for i in range(CYCLES):
                assert wire.produce("t", 0, b"n%d" % i) == NONE
                assert wire.produce("t", 1, b"evicts t-0") == NONE  # only one idle log stays open
            [segment] = glob.glob(os.path.join(path, "t-0", "*.log"))
            size = os.path.getsize(segment)
            assert size < RESERVE_BOUND, (
                f"{segment} is {size >> 20} MiB after {CYCLES} evictions of a few hundred bytes of data"
            )
        finally:
            wire.close()
            server.terminate()
            server.wait(timeout=60)
