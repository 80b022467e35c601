"""The data directory's preallocation budget (issue 9 point 10, rust/src/storage/prealloc.rs): the bytes
one process keeps reserved (fallocated) ahead of its writers, summed over the partitions of a
data directory, stay under ``log.preallocate.budget.bytes``; an append never fails for lack of
budget, it only gets no reserve ahead of it; a full disk still fails the append loudly.

Reserved-but-unwritten bytes are measured from the outside: a segment's allocated blocks
(``st_blocks``) minus its valid length (the log's own segment sizes). Each active segment may
also hold the rest of the page its data ends in (a file's blocks are whole pages), hence the
``PAGE * partitions`` slack in the bounds."""

from __future__ import annotations

import os

import pytest
from kafkalite import Admin, KafkaliteError, Log, Producer
from kafkalite.errors import InvalidConfigError

PAGE = 4096


def reserved_beyond_data(logs: list[Log]) -> int:
    """Allocated-but-unwritten bytes of the logs' segments."""
    total = 0
    for log in logs:
        for base, _next, size, *_ in log.segments:
            allocated = os.stat(os.path.join(log.path, f"{base:020d}.log")).st_blocks * 512
            total += max(0, allocated - size)
    return total


def test_many_partitions_stay_within_a_small_budget(tmp_path):
    """Before: each partition reserved its own 64 KiB-16 MiB steps whatever the others held
    (64 partitions here held 4-8 MiB ahead of their data); now the sum stays under the budget."""
    budget = 1 << 20
    count = 64
    logs = [Log(str(tmp_path / f"t-{i}"), preallocate_budget_bytes=budget) for i in range(count)]
    try:
        for i, log in enumerate(logs):
            log.append_values([b"record %d" % i])
        assert reserved_beyond_data(logs) <= budget + PAGE * count
        # Busy partitions want 16 MiB steps; the budget still holds for all of them together.
        for _ in range(5):
            for log in logs[:8]:
                log.append_values([b"v" * 1000] * 300)
        assert reserved_beyond_data(logs) <= budget + PAGE * count
        for i, log in enumerate(logs):
            values = [r.value for r in log.records()]
            assert values[0] == b"record %d" % i and len(values) == (1 + 1500 if i < 8 else 1)
    finally:
        for log in logs:
            log.close()


def test_an_append_larger_than_the_budget_succeeds_and_closing_returns_the_budget(tmp_path):
    """A spent (here: zero) budget reserves only what each append needs; sealing and closing
    give a partition's share back, so the next partition gets a reserve again."""
    logs = [Log(str(tmp_path / f"t-{i}"), preallocate_budget_bytes=0) for i in range(3)]
    try:
        big = b"x" * 700_000
        for log in logs:
            log.append_values([big])
            log.append_values([b"small"] * 10)
        assert reserved_beyond_data(logs) <= PAGE * len(logs)
        assert [r.value for r in logs[0].records()] == [big] + [b"small"] * 10
    finally:
        for log in logs:
            log.close()
    # The limit is the directory's: raise it, and a new writer reserves a step ahead again.
    fresh = Log(str(tmp_path / "t-9"), preallocate_budget_bytes=1 << 20)
    try:
        fresh.append_values([b"a"])
        assert 32 * 1024 <= reserved_beyond_data([fresh]) <= (1 << 20) + PAGE
        # Rolling seals (trims) the old segment: what it held goes back to the budget.
        for _ in range(3):
            fresh.roll()
            fresh.append_values([b"b" * 100])
        assert reserved_beyond_data([fresh]) <= (1 << 20) + PAGE
    finally:
        fresh.close()


def test_budget_returned_by_closed_logs_is_reserved_by_new_ones(tmp_path):
    """Nothing leaks: after many writers come and go, a new one still gets its full first step."""
    budget = 256 * 1024  # four first steps of 64 KiB
    for round_ in range(3):
        logs = [Log(str(tmp_path / f"t-{i}"), preallocate_budget_bytes=budget) for i in range(8)]
        for log in logs:
            log.append_values([b"r%d" % round_])
        assert reserved_beyond_data(logs) <= budget + PAGE * len(logs)
        for log in logs:
            log.close()
    last = Log(str(tmp_path / "last-0"), preallocate_budget_bytes=budget)
    try:
        last.append_values([b"z"])
        assert reserved_beyond_data([last]) >= 60 * 1024
    finally:
        last.close()


ENOSPC_WRITER = r"""
import sys
from kafkalite import Log, KafkaliteError
log = Log(sys.argv[1], preallocate_budget_bytes=0)  # segment.reserve hits 1 and 2: one page
log.append_values([b"first"])            # fits in that page: no reservation
try:
    log.append_values([b"y" * 200_000])  # growth with the budget spent: hit 3 fails
except OSError as e:
    assert isinstance(e, KafkaliteError), type(e)
    print("FAILED", type(e).__name__, e)
log.append_values([b"after"])            # the disk has room again
print("VALUES", [r.value[:5] for r in log.records()])
log.close()
"""


def test_a_full_disk_during_growth_still_fails_the_append(tmp_path, spawn):
    env = dict(os.environ, KAFKALITE_FAILPOINTS="segment.reserve=enospc@3")
    proc = spawn.run(ENOSPC_WRITER, tmp_path / "t-0", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FAILED" in proc.stdout and "disk full" in proc.stdout, proc.stdout
    assert "VALUES [b'first', b'after']" in proc.stdout, proc.stdout


def test_the_budget_is_a_data_directory_config_key(tmp_path):
    admin = Admin(str(tmp_path))
    admin.init()
    assert admin.describe_data_dir_config()["log.preallocate.budget.bytes"] == 256 << 20
    with pytest.raises(InvalidConfigError, match="log.preallocate.budget.bytes must be >= 0"):
        admin.alter_data_dir_config({"log.preallocate.budget.bytes": -1})
    admin.alter_data_dir_config({"log.preallocate.budget.bytes": "0"})
    admin.create_topic("t", partitions=4)
    producer = Producer(str(tmp_path))
    try:
        for p in range(4):
            producer.send("t", b"v" * 10, partition=p).get(timeout=30)
        producer.flush()
        logs = [Log(str(tmp_path / f"t-{p}"), readonly=True) for p in range(4)]
        try:
            assert reserved_beyond_data(logs) <= PAGE * 4
        finally:
            for log in logs:
                log.close()
    finally:
        producer.close()


@pytest.mark.parametrize("value", [-1, "10", 1.5, True])
def test_log_rejects_a_bad_budget(tmp_path, value):
    with pytest.raises(KafkaliteError) as e:
        Log(str(tmp_path / "t-0"), preallocate_budget_bytes=value)
    assert isinstance(e.value, (ValueError, TypeError))
    assert "preallocate_budget_bytes" in str(e.value)
