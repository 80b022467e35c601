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
import resource

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
        server = serve_on(spawn.module, path, port, "--max-open-partitions", "1", "--log-level", "ERROR")
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


#: RLIMIT_NOFILE (soft and hard) of the server in the share test: the default --max-open-partitions
#: is then far above its floor of 16, so the share itself is what is measured.
SHARE_LIMIT = 600


def partition_descriptors(pid: int, data_dir: str) -> int:
    """Descriptors ``pid`` holds on files inside ``data_dir``'s partition folders."""
    held = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        held += target.startswith(data_dir + os.sep) and os.path.dirname(target) != data_dir
    return held


def test_open_partitions_take_at_most_half_the_descriptor_limit_by_default(tmp_path, spawn):
    """The default --max-open-partitions leaves half of RLIMIT_NOFILE to connections: it counted
    3 descriptors per open partition, but an acks=all (`--acks-all disk`, the default) partition
    also holds its group-commit file, so the open logs took two thirds (400 of 600)."""
    path = str(tmp_path)
    kafkalite.Admin(path).create_topic("t", 150)
    port = free_port()
    limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (SHARE_LIMIT, SHARE_LIMIT))  # noqa: E731
    server = serve_on(spawn.module, path, port, "--log-level", "ERROR", preexec_fn=limit)
    wire = Wire(f"127.0.0.1:{port}")
    try:
        for p in range(150):
            assert wire.produce("t", p, b"x") == NONE  # acks=all
        held = partition_descriptors(server.pid, path)
        assert held <= SHARE_LIMIT // 2, f"open partitions hold {held} of {SHARE_LIMIT} descriptors"
    finally:
        wire.close()
        server.terminate()
        server.wait(timeout=60)
