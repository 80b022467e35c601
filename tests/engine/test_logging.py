"""What a user needs to see of background work is logged (issue 11 point 6): the engine's
recovery cuts, index rebuilds, retention deletes and undone rolls reach Python's
``kafkalite.engine`` logger (the `log` crate through pyo3-log); rebalances (INFO) and evictions
(WARNING) reach ``kafkalite.group``. Each test causes the event it checks: a torn tail, a
deleted index, a retention breach, a failing roll, a member killed with SIGKILL."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time

import pytest
from kafkalite import Admin, Consumer, Log, Producer, RecoveryWarning

ENGINE = "kafkalite.engine"
GROUP = "kafkalite.group"


def messages(caplog, logger: str, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == level]


def test_recovery_cutting_a_torn_tail_is_a_warning_with_path_and_offsets(tmp_path, caplog):
    part = tmp_path / "t-0"
    with Log(str(part)) as log:
        log.append_values([b"a", b"b", b"c"])
    segment = part / "00000000000000000000.log"
    valid = segment.stat().st_size
    with open(segment, "ab") as f:  # a torn batch: junk after the last valid one
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x01\x00" + b"\xab" * 64)
    os.remove(part / ".kafkalite-clean-shutdown")  # as after a crash
    caplog.set_level(logging.INFO, logger=ENGINE)
    with pytest.warns(RecoveryWarning), Log(str(part)) as log:  # Log's own warning stays too
        assert log.end_offset == 3
    warnings = messages(caplog, ENGINE, logging.WARNING)
    assert any(
        "recovery cut" in m and str(segment) in m and "base offset 0" in m and f"to {valid} valid bytes" in m
        for m in warnings
    ), caplog.records


def test_an_index_rebuilt_at_open_is_a_warning(tmp_path, caplog):
    part = tmp_path / "t-0"
    with Log(str(part), segment_bytes=16 * 1024) as log:
        for _ in range(20):
            log.append_values([b"x" * 1000])
    sealed = sorted(p for p in os.listdir(part) if p.endswith(".index"))[0]
    os.remove(part / sealed)
    caplog.set_level(logging.INFO, logger=ENGINE)
    with Log(str(part), readonly=False) as log:
        assert log.end_offset == 20
    warnings = messages(caplog, ENGINE, logging.WARNING)
    assert any(
        "rebuilt the indexes" in m and str(part / sealed.replace(".index", ".log")) in m for m in warnings
    ), caplog.records


def fill_and_retain(part) -> int:
    """60 KB into 16 KiB segments with a 20 KiB retention limit; returns the segments deleted."""
    with Log(str(part), segment_bytes=16 * 1024, retention_bytes=20 * 1024) as log:
        for _ in range(60):
            log.append_values([b"x" * 1000])
        return log.enforce_retention()


def test_a_segment_deleted_by_retention_is_logged(tmp_path, caplog):
    part = tmp_path / "t-0"
    caplog.set_level(logging.INFO, logger=ENGINE)
    assert fill_and_retain(part) > 0
    infos = messages(caplog, ENGINE, logging.INFO)
    assert any("deleted segment 00000000000000000000.log" in m and str(part) in m for m in infos), (
        caplog.records
    )


def test_a_compaction_pass_is_logged_with_its_sizes(tmp_path, caplog):
    from kafkalite.log import Record

    part = tmp_path / "t-0"
    caplog.set_level(logging.INFO, logger=ENGINE)
    with Log(str(part), segment_bytes=600, compact=True) as log:
        log.append([Record(b"v1", key=b"a"), Record(b"v1", key=b"b")])
        log.append([Record(b"v2", key=b"a")])
        log.roll()
        log.append([Record(b"x", key=b"c")])
        assert log.clean(now_ms=10_000)["records_removed"] == 1
        quiet = len(caplog.records)
        log.clean(now_ms=10_000)  # nothing left to clean: no line
        assert len(caplog.records) == quiet
    infos = messages(caplog, ENGINE, logging.INFO)
    assert any(
        m.startswith(f"compacted {part}") and "1 record(s) and 0 tombstone(s) removed" in m for m in infos
    ), caplog.records


def test_engine_logs_obey_levels_set_after_import(tmp_path, caplog):
    # Levels are asked of Python per event (not cached in Rust): raising the level silences it.
    part = tmp_path / "t-0"
    caplog.set_level(logging.ERROR, logger=ENGINE)
    assert fill_and_retain(part) > 0
    assert not [r for r in caplog.records if r.name == ENGINE]


UNDONE_ROLL = r"""
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
from kafkalite import Log
log = Log(sys.argv[1], segment_bytes=16 * 1024)
try:
    for _ in range(40):
        log.append_values([b"x" * 1000])
except OSError as e:
    print("failed:", e.errno, flush=True)
"""


def test_an_undone_roll_is_a_warning(tmp_path, spawn):
    part = tmp_path / "t-0"
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "segment.create.log=enospc@2"}
    done = spawn.run(UNDONE_ROLL, part, timeout=120, env=env)
    assert done.returncode == 0 and "failed: 28" in done.stdout, (done.stdout, done.stderr)
    assert f"kafkalite.engine WARNING could not roll {part} at offset" in done.stderr, done.stderr
    assert "undone" in done.stderr


MEMBER = r"""
import sys, time
from kafkalite import Consumer
c = Consumer(sys.argv[1], group_id="g", session_timeout_ms=60000, auto_offset_reset="earliest")
c.subscribe(["t"])
deadline = time.time() + 60
while not c.assignment() and time.time() < deadline:
    c.poll(timeout_ms=100)
print("joined", flush=True)
time.sleep(600)
"""


def test_rebalances_are_info_and_a_dead_member_is_a_warning(tmp_path, caplog, spawn):
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", partitions=2)
    with Producer(data) as producer:
        producer.send("t", b"v", partition=0)
    caplog.set_level(logging.INFO, logger=GROUP)
    child = spawn.code(MEMBER, data, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "joined"
    consumer = Consumer(data, group_id="g", auto_offset_reset="earliest")
    consumer.subscribe(["t"])
    consumer.poll(timeout_ms=500)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    deadline = time.monotonic() + 30
    while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
        consumer.poll(timeout_ms=100)
    assert len(consumer.assignment()) == 2
    consumer.close()
    infos = messages(caplog, GROUP, logging.INFO)
    assert any("group 'g' rebalanced (member" in m and "joined" in m for m in infos), infos
    assert any("group 'g' rebalanced (members were evicted)" in m for m in infos), infos
    warnings = messages(caplog, GROUP, logging.WARNING)
    assert any("group 'g' evicted member" in m and "its process is gone" in m for m in warnings), warnings
    assert any("group 'g' rebalanced (member" in m and "left" in m for m in infos), infos
