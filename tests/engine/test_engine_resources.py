"""Resources follow use, not the number of partitions and segments (issue 9 point 10).

An idle partition holds one descriptor (its writer's presence lock); a sealed segment holds
none (it is read through its map and in-memory index entries); preallocation starts at 64 KiB
(tests/engine/test_engine_preallocation.py). Each test runs its process under a lowered descriptor
limit (resource.setrlimit in a subprocess), the fault it guards against, and reports peak RSS
from /proc/self/status (VmHWM).

The partition counts use /dev/shm when the machine has it: these tests measure descriptors and
memory, and each clean close fsyncs four files, which on a shared disk costs minutes for
10,000 partitions and tells nothing about resources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

LIMIT_AND_MEASURE = r"""
import json, os, resource, sys
def limit_descriptors(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))
def descriptors():
    return len(os.listdir("/proc/self/fd"))
def peak_rss_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
def maps():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)
def disk_bytes(root):
    # Allocated blocks of every file under root (du), preallocated reserves included.
    total = 0
    for folder, _dirs, files in os.walk(root):
        total += sum(os.lstat(os.path.join(folder, f)).st_blocks * 512 for f in files)
    return total
def report(**kw):
    print("RESULT " + json.dumps(kw), flush=True)
"""

MANY_PARTITIONS = (
    LIMIT_AND_MEASURE
    + r"""
from kafkalite import Log
root, count, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
shared = sys.argv[4:] == ["shared"]
limit_descriptors(limit)
before = descriptors()
logs = []
for i in range(count):
    log = Log(os.path.join(root, f"t-{i}"), shared_writers=shared)
    log.append_values([b"record %d" % i])
    logs.append(log)
held = descriptors() - before
disk = disk_bytes(root)
for i, log in enumerate(logs):
    assert [r.value for r in log.records()] == [b"record %d" % i]
for log in logs:
    log.close()
reopened = [Log(os.path.join(root, f"t-{i}"), readonly=True) for i in range(0, count, max(1, count // 50))]
values = [next(iter(log.records())).value for log in reopened]
for log in reopened:
    log.close()
report(held=held, peak_rss=peak_rss_bytes(), values=len(values), disk=disk)
"""
)


def run(code: str, *args: object, timeout: float = 240) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


@pytest.fixture
def fast_dir(tmp_path):
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="kafkalite-resources-") as d:
            yield d
    else:
        yield str(tmp_path)


def test_1000_partitions_open_at_once_with_1024_descriptors_allowed(fast_dir):
    """Before: 7 descriptors per partition writer (EMFILE at the 146th partition)."""
    result = run(MANY_PARTITIONS, fast_dir, 1000, 1024)
    assert result["held"] <= 1000 + 10, result  # the presence lock only
    assert result["peak_rss"] < 600 << 20, result
    assert result["values"] == 50


def test_300_shared_writer_partitions_open_at_once_with_1024_descriptors_allowed(fast_dir):
    """A shared writer's idle partition holds three descriptors: its two locks and the active
    segment's `.log`, which it stats and reads under the append lock on every append (reopening
    it per append instead measured 43-50 -> 74-78 us per one-record append)."""
    result = run(MANY_PARTITIONS, fast_dir, 300, 1024, "shared")
    assert result["held"] <= 3 * 300 + 10, result
    assert result["values"] == 50


@pytest.mark.slow
def test_10000_partitions_with_one_record_each_in_one_process(fast_dir):
    """The issue's target: 10,000 partitions opened, written, kept open and closed by one
    process; before, 2,000 exhausted the machine's memory and 10,000 needed 70,000 descriptors."""
    result = run(MANY_PARTITIONS, fast_dir, 10_000, 12_000)
    assert result["held"] <= 10_000 + 10, result
    # Measured: 0.44 GB peak RSS and 0.35 GB on disk with all 10,000 open (the preallocation
    # budget caps the reserves at 256 MiB); 0.84 GB / 0.70 GB with a 64 KiB first step per
    # partition and no budget, and 16 MiB per partition (160 GB) before that.
    assert result["peak_rss"] < 1 << 30, result
    assert result["disk"] < 512 << 20, result


MAKE_SEGMENTS = r"""
import sys
from kafkalite import Log
path, count = sys.argv[1], int(sys.argv[2])
log = Log(path)
for i in range(count):
    log.append_values([b"value %d" % i])
    if i + 1 < count:
        log.roll()
assert len(log.segments) == count
log.close()
"""

READ_SEGMENTS = (
    LIMIT_AND_MEASURE
    + r"""
from kafkalite import Log
path, count = sys.argv[1], int(sys.argv[2])
limit_descriptors(1024)
before = descriptors()
log = Log(path, readonly=True)
held = descriptors() - before
assert len(log.segments) == count, len(log.segments)
values = [r.value for r in log.records()]
assert values == [b"value %d" % i for i in range(count)]
assert [r.value for r in log.records(count // 2, count // 2 + 1)] == [b"value %d" % (count // 2)]
held_after_reading = descriptors() - before
maps_after_reading = maps()
log.close()
report(held=held, held_after_reading=held_after_reading, peak_rss=peak_rss_bytes(), maps=maps_after_reading)
"""
)


@pytest.mark.slow
def test_10000_segments_readable_with_1024_descriptors_allowed(fast_dir):
    """Before: 3 descriptors per sealed segment for a reader (a 1,001-segment partition needed
    3,003), so 10,000 segments were unreadable under `ulimit -n 1024`."""
    path = os.path.join(fast_dir, "t-0")
    subprocess.run([sys.executable, "-c", MAKE_SEGMENTS, path, "10000"], check=True, timeout=240)
    result = run(READ_SEGMENTS, path, 10_000)
    assert result["held"] <= 4 and result["held_after_reading"] <= 4, result
    # One map per segment read (its indexes are read into memory, not mapped): a partition of
    # ~60,000 segments would reach vm.max_map_count (65,530 by default).
    assert result["maps"] < 10_000 + 1000, result  # + the interpreter's own maps


WRITE_SEGMENTS = (
    LIMIT_AND_MEASURE
    + r"""
from kafkalite import Log
path, count, shared = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "shared"
limit_descriptors(1024)
before = descriptors()
log = Log(path, shared_writers=shared)
assert len(log.segments) == count, len(log.segments)
held = descriptors() - before
for i in range(count, count + 20):
    log.append_values([b"value %d" % i])
    log.roll()
held_after_rolls = descriptors() - before
log.close()
log = Log(path, readonly=True)
assert [r.value for r in log.records()] == [b"value %d" % i for i in range(count + 20)]
log.close()
report(held=held, held_after_rolls=held_after_rolls, peak_rss=peak_rss_bytes())
"""
)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_1000_segment_partition_writable_with_1024_descriptors_allowed(fast_dir, mode):
    """Before: 5 descriptors per segment for a writer (5,007 for 1,001 segments)."""
    path = os.path.join(fast_dir, "t-0")
    subprocess.run([sys.executable, "-c", MAKE_SEGMENTS, path, "1000"], check=True, timeout=240)
    result = run(WRITE_SEGMENTS, path, 1000, mode)
    # Exclusive: the presence lock; shared: both locks and the active segment's log.
    assert result["held"] <= (1 if mode == "exclusive" else 3), result
    assert result["held_after_rolls"] <= (1 if mode == "exclusive" else 3), result


@pytest.mark.slow
def test_10000_segment_partition_writable_with_1024_descriptors_allowed(fast_dir):
    """The issue's second target, for writers: 10,000 segments opened for writing (exclusive,
    then shared) and rolled further under `ulimit -n 1024`. About a minute on 2 cores."""
    path = os.path.join(fast_dir, "t-0")
    subprocess.run([sys.executable, "-c", MAKE_SEGMENTS, path, "10000"], check=True, timeout=240)
    exclusive = run(WRITE_SEGMENTS, path, 10_000, "exclusive")
    shared = run(WRITE_SEGMENTS, path, 10_020, "shared")
    assert exclusive["held"] <= 4 and exclusive["held_after_rolls"] <= 6, exclusive
    assert shared["held"] <= 4 and shared["held_after_rolls"] <= 6, shared
    assert max(exclusive["peak_rss"], shared["peak_rss"]) < 512 << 20, (exclusive, shared)
