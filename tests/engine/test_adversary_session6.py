"""Adversary findings against session 6's changes (resident window, append_values/read_arrow
fast paths, ...). Each test injects the fault it is about; every one runs its victim in a child
process, since the failures they guard against kill the process (an abort or a panic)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from helpers import child_env


def run_child(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = child_env()  # the kafkalite this test imported: a source tree or the installed wheel
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the child as another user")
def test_a_process_that_cannot_start_threads_still_opens_and_appends():
    """The writer's prefault helper (one thread per 2 MiB window since the resident window)
    is best effort; std::thread::spawn panicked when the process could not start a thread
    (RLIMIT_NPROC spent, a pids cgroup full): Log() itself failed with LogPoisonedError
    'the log refuses writes after a failed flush (... failed to spawn thread ...)'."""
    # Not under tmp_path: its parents are private to root, so the other user could not reach it.
    with tempfile.TemporaryDirectory(prefix="kafkalite-adv-") as tmp:
        os.chown(tmp, 65534, 65534)
        child = run_child(NO_THREADS_CHILD, str(Path(tmp) / "t-0"))
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split() == [str(20 * 1010)]


NO_THREADS_CHILD = """
        import os, resource, sys
        from kafkalite import _native  # imported first: the other user may not read the venv
        os.setgid(65534)
        os.setuid(65534)
        # Root ignores RLIMIT_NPROC; this user now cannot create a single thread.
        resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
        log = _native.Log(sys.argv[1])
        for _ in range(20):  # 20 MB: several 2 MiB windows, both the map and pwrite paths
            log.append_values([b"x" * 1000] * 1000)
            log.append_values([b"y" * 100] * 10)
        log.close()
        print(_native.Log(sys.argv[1], readonly=True).end_offset)
"""


def test_read_arrow_on_a_batch_declaring_2g_records_raises_instead_of_aborting(tmp_path):
    """A damaged batch whose CRC was recomputed (a bad copy, a hostile file) declares
    2^31-1 records. read_arrow sized its value column from that count times the bytes per row
    seen so far: 'memory allocation of 2147483655000 bytes failed', the process aborted
    (SIGABRT) instead of raising CorruptRecordError."""
    code = """
        import glob, struct, sys
        from kafkalite import _native, CorruptRecordError
        path = sys.argv[1]
        log = _native.Log(path)
        log.append_values([b"v" * 1000] * 8)
        log.append_values([b"w" * 5000] * 2)
        log.close()
        seg = sorted(glob.glob(path + "/*.log"))[0]
        with open(seg, "r+b") as f:
            data = f.read()
            pos = 12 + struct.unpack(">i", data[8:12])[0]  # the second batch
            batch = bytearray(data[pos : pos + 12 + struct.unpack(">i", data[pos + 8 : pos + 12])[0]])
            struct.pack_into(">i", batch, 57, 2**31 - 1)  # recordsCount
            struct.pack_into(">I", batch, 17, _native.crc32c(bytes(batch[21:])))
            f.seek(pos)
            f.write(batch)
        log = _native.Log(path, readonly=True)
        try:
            log.read_arrow(0)
        except CorruptRecordError as e:
            print("raised", e)
    """
    child = run_child(code, str(tmp_path / "t-0"))
    assert child.returncode == 0, child.stderr[-2000:]
    assert "declares 2147483647 records" in child.stdout


def test_a_leftover_of_an_older_topic_of_the_same_name_does_not_delete_the_live_one(tmp_path):
    """Every embedded open now finishes interrupted deletes (DataDir::open). A `t-1.<id>-delete`
    folder that is not the live topic's: process A deleted "t" (2 partitions) and is still
    removing its folders (or could not remove one) when B re-creates "t" with 1 partition and
    writes to it. The next Admin/Producer/Consumer open took the leftover for an interrupted
    delete of the new "t" (listed, no t-1 folder) and deleted the live topic and its records:
    'finished deleting topic "t", which an interrupted delete left half-deleted', topics []."""
    import kafkalite

    data = str(tmp_path)
    admin = kafkalite.Admin(data)
    admin.create_topic("t", partitions=2)
    admin.delete_topic("t")
    admin.create_topic("t", partitions=1)
    with kafkalite.Producer(data) as producer:
        producer.send("t", b"live", partition=0).get(timeout=10)
    # Process A's delete of the old "t", still under way: its folders are renamed, the metadata
    # no longer lists that "t", the removal has not reached t-1's folder yet.
    (tmp_path / "t-1.5f1c0a3e9b2d4c6f8a7e1b3d5c9f0a2e-delete").mkdir()
    assert "t" in kafkalite.Admin(data).list_topics()
    with kafkalite.Consumer(data, "t", auto_offset_reset="earliest", consumer_timeout_ms=0) as consumer:
        assert [r.value for r in consumer] == [b"live"]


@pytest.mark.slow
def test_stalled_large_frames_do_not_lock_every_other_client_out(tmp_path):
    """Six connections each declare a frame of socket.request.max.bytes (100 MiB),
    send 90 MiB of it and stall. They hold the server's whole request budget
    (QUEUED_MAX_REQUEST_BYTES, 512 MiB), so any other client's request, even a 10-byte
    ApiVersions, waits for permits until connections.max.idle.ms (10 minutes) cuts the stalled
    ones: kafka-python could not bootstrap ('Unable to bootstrap', 30 s), and the server held
    549 MB resident. Kafka's default (queued.max.request.bytes=-1) never blocks a small request
    behind other connections' partial frames. Fixed: frames of one chunk (64 KiB) or less skip
    the shared budget (server/frame.rs)."""
    import socket
    import struct

    import kafkalite

    kafkalite.Admin(str(tmp_path)).create_topic("t", partitions=1)
    with kafkalite.Server(str(tmp_path)) as server:
        host, port = server.bootstrap_servers.rsplit(":", 1)
        stalled = []
        try:
            chunk = b"\0" * (1 << 20)
            for _ in range(6):
                s = socket.create_connection((host, int(port)))
                s.sendall(struct.pack(">i", 100 * 1024 * 1024 - 1))
                s.settimeout(2)
                try:
                    for _ in range(90):
                        s.sendall(chunk)
                except TimeoutError:
                    pass  # the server stopped reading this one: its budget is spent
                stalled.append(s)
            # ApiVersions v0 from a new client: api_key 18, version 0, correlation id 7, null client id.
            with socket.create_connection((host, int(port)), timeout=10) as legit:
                body = struct.pack(">hhih", 18, 0, 7, -1)
                legit.sendall(struct.pack(">i", len(body)) + body)
                head = legit.recv(8)
            assert len(head) == 8 and struct.unpack(">i", head[4:8])[0] == 7
        finally:
            for s in stalled:
                s.close()


def test_append_values_and_append_name_the_bad_item_with_a_typed_error(tmp_path):
    """A str among append_values' values, or a non-Record given to append, is an
    InvalidTypeError (a KafkaliteError and a TypeError) naming the item; nothing is appended.
    (The native calls behind them raise the same class, not a plain TypeError.)"""
    import kafkalite
    from kafkalite import Log, _native

    with Log(str(tmp_path / "t-0")) as log:
        with pytest.raises(kafkalite.InvalidTypeError, match=r"values\[1\] must be bytes") as bad:
            log.append_values([b"ok", "text"])
        assert isinstance(bad.value, TypeError) and isinstance(bad.value, kafkalite.KafkaliteError)
        with pytest.raises(kafkalite.InvalidTypeError, match="Record objects, not bytes"):
            log.append([b"raw"])
        assert log.end_offset == 0
    native = _native.Log(str(tmp_path / "n-0"))
    try:
        with pytest.raises(kafkalite.InvalidTypeError, match="item 1 is <class 'str'>"):
            native.append_values([b"ok", "text"])
        assert native.end_offset == 0
    finally:
        native.close()
