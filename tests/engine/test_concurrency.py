"""Readers in another process and in other threads follow a writer: they see every record
exactly once, in order, never a partial batch, across segment rolls."""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
import time

import pytest
from kafkalite import Log, Record
from procs.crash_writer import value_for

HERE = os.path.dirname(__file__)


def follow(log: Log, total: int, deadline: float) -> list[int]:
    seen, position = [], 0
    while position < total and time.monotonic() < deadline:
        end = log.end_offset
        for r in log.records(position, end):
            assert r.value == value_for(r.offset), f"offset {r.offset} has a torn or wrong value"
            seen.append(r.offset)
        if seen:
            position = seen[-1] + 1
    return seen


@pytest.mark.slow
def test_reader_in_this_process_follows_a_writer_process(part_dir, spawn):
    total = 20_000
    Log(part_dir, segment_bytes=32 * 1024).close()
    writer = spawn("tail_writer.py", part_dir, total)
    try:
        reader = Log(part_dir, readonly=True)
        seen = follow(reader, total, time.monotonic() + 120)
    finally:
        writer.wait(timeout=120)
    assert writer.returncode == 0
    assert seen == list(range(total))
    assert len(reader.segments) > 10  # it followed the writer across many rolls
    reader.close()


def test_threads_read_while_one_appends(part_dir):
    total = 30_000
    log = Log(part_dir, segment_bytes=64 * 1024)
    errors: list[BaseException] = []

    def reader():
        try:
            assert follow(log, total, time.monotonic() + 120) == list(range(total))
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    while log.end_offset < total:
        end = log.end_offset
        log.append([Record(value_for(o)) for o in range(end, min(total, end + 37))])
    for t in threads:
        t.join()
    log.close()
    assert not errors, errors[0]


def snapshot(directory: str) -> dict[str, tuple[int, float, str]]:
    out = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        st = os.stat(path)
        out[name] = (st.st_size, st.st_mtime, hashlib.sha256(open(path, "rb").read()).hexdigest())
    return out


def test_readonly_never_writes(part_dir):
    with Log(part_dir, segment_bytes=4096) as log:
        for _ in range(40):
            log.append_values([b"r" * 200] * 5)
    # An unclean-looking directory: no clean-shutdown marker. A writer would recover; a
    # reader must not touch anything.
    os.remove(os.path.join(part_dir, ".kafkalite-clean-shutdown"))
    before = snapshot(part_dir)
    reader = Log(part_dir, readonly=True)
    assert len(list(reader.records())) == 200
    reader.read_arrow(0)
    reader.offset_for_timestamp(0)
    reader.close()
    assert snapshot(part_dir) == before


def test_readonly_on_a_read_only_mount(part_dir, tmp_path):
    with Log(part_dir) as log:
        log.append_values([b"ro"] * 100)
    mount = tmp_path / "ro"
    mount.mkdir()
    if (
        subprocess.run(
            ["mount", "--bind", "-o", "ro", os.path.dirname(part_dir), str(mount)], capture_output=True
        ).returncode
        != 0
    ):
        import pytest

        pytest.skip("cannot bind-mount read-only here")
    try:
        ro_part = str(mount / os.path.basename(part_dir))
        assert (
            not os.access(ro_part, os.W_OK)
            or subprocess.run(["touch", f"{ro_part}/x"], capture_output=True).returncode != 0
        )
        with Log(ro_part, readonly=True) as reader:
            assert [r.value for r in reader.records()] == [b"ro"] * 100
    finally:
        subprocess.run(["umount", str(mount)], check=True)
