"""Issue 10 point 4: compaction leaves what Kafka's cleaner leaves. Consecutive segments are
cleaned into one segment (fewer files), no time-index entry is ever (-1, -1), the swap of a
group of segments survives SIGKILL at every step, readers that hold the old files follow the
merge, and ``kafkalite dump-log`` applies Kafka's index sanity rules."""

from __future__ import annotations

import glob
import io
import itertools
import os
import random
import struct
import subprocess
import sys
import time

import pytest
from kafkalite import Log, Record
from kafkalite.dump import dump_partition

NOW_LATER = 10**13  # a clock far past every delete horizon


def _write(path: str, rounds: int = 8, keys: int = 300) -> dict[bytes, tuple[int, bytes]]:
    latest: dict[bytes, tuple[int, bytes]] = {}
    with Log(path, segment_bytes=4096, compact=True, index_interval_bytes=256) as log:
        for r in range(rounds):
            for start in range(0, keys, 20):
                records = [
                    Record(b"r%d-%d" % (r, i), key=b"key-%d" % i, timestamp=1_700_000_000_000 + r * 1000 + i)
                    for i in range(start, start + 20)
                ]
                first, _ = log.append(records)
                for n, rec in enumerate(records):
                    latest[rec.key] = (first + n, rec.value)
        log.roll()  # everything written is cleanable
    return latest


def _read(path: str) -> list[tuple[int, bytes, bytes]]:
    with Log(path, readonly=True) as log:
        return [(r.offset, r.key, r.value) for r in log.records()]


def _latest(records) -> dict[bytes, tuple[int, bytes]]:
    return {k: (o, v) for o, k, v in records}


def _timeindex_entries(path: str):
    for f in glob.glob(os.path.join(path, "*.timeindex")):
        with open(f, "rb") as fh:
            raw = fh.read()
        yield f, [struct.unpack_from(">qi", raw, i) for i in range(0, len(raw), 12)]


def test_cleaning_merges_segments_and_writes_no_empty_time_entries(tmp_path):
    path = str(tmp_path / "kv-0")
    latest = _write(path)
    before = len(glob.glob(os.path.join(path, "*.log")))
    with Log(path, segment_bytes=4096, compact=True, index_interval_bytes=256) as log:
        stats = log.clean(0, now_ms=NOW_LATER)
    after = len(glob.glob(os.path.join(path, "*.log")))
    assert stats["segments_rewritten"] > 0
    assert after <= before // 3, (before, after)
    for f, entries in _timeindex_entries(path):
        assert all(rel >= 0 and ts >= 0 for ts, rel in entries), (f, entries)
    assert _latest(_read(path)) == latest
    out = io.StringIO()
    assert dump_partition(path, out) == 0, out.getvalue()
    # Every cleaned segment but the last group's fits segment.bytes; offsets stay in order.
    with Log(path, readonly=True) as log:
        segs = log.segments
    assert all(s.base_offset < t.base_offset for s, t in itertools.pairwise(segs))
    # A second pass has nothing left to merge.
    with Log(path, segment_bytes=4096, compact=True, index_interval_bytes=256) as log:
        assert log.clean(0, now_ms=NOW_LATER)["segments_rewritten"] == 0
    assert len(glob.glob(os.path.join(path, "*.log"))) == after


def test_an_emptied_segment_gets_no_time_index_entry(tmp_path):
    """All records of the cleanable range are expired tombstones: the group is one empty
    segment whose time index is empty, as Kafka's (not one (-1, -1) entry)."""
    path = str(tmp_path / "kv-0")
    with Log(path, segment_bytes=4096, compact=True) as log:
        for i in range(200):
            log.append([Record(None, key=b"k%d" % i, timestamp=1_700_000_000_000)])
        log.roll()
        log.clean(0, now_ms=NOW_LATER)  # stamps the horizon
        log.clean(0, now_ms=NOW_LATER * 2)  # removes the tombstones
    for f, entries in _timeindex_entries(path):
        assert entries == [] or all(rel >= 0 for _, rel in entries), (f, entries)
    out = io.StringIO()
    assert dump_partition(path, out) == 0, out.getvalue()


def test_dump_log_reports_kafkas_index_sanity_problems(tmp_path):
    path = str(tmp_path / "kv-0")
    with Log(path) as log:
        log.append([Record(b"v", key=b"k")])
    base = os.path.join(path, "00000000000000000000")
    with open(base + ".timeindex", "wb") as f:
        f.write(struct.pack(">qi", -1, -1))  # what the old cleaner left on emptied segments
    out = io.StringIO()
    assert dump_partition(path, out) >= 1
    assert "CorruptIndexException" in out.getvalue() and "below the base offset 0" in out.getvalue()
    with open(base + ".index", "wb") as f:
        f.write(b"\x00" * 5)
    out = io.StringIO()
    dump_partition(path, out)
    assert "offset index size 5 is not a multiple of 8" in out.getvalue()


STEPS = [
    "cleaner.write_cleaned=kill",
    "cleaner.rename_swap=kill",
    "cleaner.remove_indexes=kill",
    "cleaner.replace_log=kill",
    "cleaner.delete_old=kill@1",
    "cleaner.delete_old=kill@3",
    "cleaner.remove_swap=kill",
    "dir.sync=kill@2",
]


@pytest.mark.parametrize("failpoint", STEPS)
def test_kill_at_each_step_of_a_group_swap(tmp_path, failpoint):
    """SIGKILL at each step of replacing a group of segments: the reopened log has every key's
    latest value at its offset, only records that were written at their offsets, segments in
    order without overlap, no temporary files; and cleaning again finishes the job."""
    path = str(tmp_path / "kv-0")
    latest = _write(path)
    written = set(_read(path))
    code = (
        "import sys\nfrom kafkalite import Log\n"
        "Log(sys.argv[1], segment_bytes=4096, compact=True, index_interval_bytes=256).clean(0, now_ms=10**13)\n"
    )
    env = {**os.environ, "KAFKALITE_FAILPOINTS": failpoint}
    done = subprocess.run(
        [sys.executable, "-c", code, path], env=env, timeout=60, capture_output=True, check=False
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    with Log(path, segment_bytes=4096, compact=True, index_interval_bytes=256) as log:
        segs = log.segments
        assert all(s.next_offset <= t.base_offset for s, t in itertools.pairwise(segs)), segs
    assert not [n for n in os.listdir(path) if n.endswith((".swap", ".cleaned"))]
    records = _read(path)
    assert set(records) <= written
    assert _latest(records) == latest
    with Log(path, segment_bytes=4096, compact=True, index_interval_bytes=256) as log:
        log.clean(0, now_ms=NOW_LATER)
    assert _latest(_read(path)) == latest
    assert len(_read(path)) == len(latest)
    out = io.StringIO()
    assert dump_partition(path, out) == 0, out.getvalue()


def test_a_reader_holding_the_old_segments_follows_the_merge(tmp_path):
    path = str(tmp_path / "kv-0")
    latest = _write(path)
    reader = Log(path, readonly=True)
    assert _latest([(r.offset, r.key, r.value) for r in reader.records()]) == latest
    with Log(path, segment_bytes=4096, compact=True, index_interval_bytes=256) as log:
        log.clean(0, now_ms=NOW_LATER)
        log.append([Record(b"new", key=b"key-0")])
    time.sleep(0.1)
    reader.read(reader.end_offset)  # a read at the end looks at the directory again
    got = _latest([(r.offset, r.key, r.value) for r in reader.records(start=0)])
    reader.close()
    assert got[b"key-0"][1] == b"new"
    del got[b"key-0"], latest[b"key-0"]
    assert got == latest


def test_a_shared_writer_finishes_the_swap_of_a_cleaner_that_died(tmp_path):
    """Producers are shared writers: one dies mid-swap while another stays open. The survivor's
    next cleaning completes the dead swap first (none is left for a later open to complete over
    newer segments), and its view follows the files."""
    path = str(tmp_path / "kv-0")
    rng = random.Random(7)
    keys = 1500
    with Log(path, segment_bytes=4096, compact=True, index_interval_bytes=256) as log:
        for _ in range(200):  # keys spread so that many groups change, not only the first
            log.append([Record(b"v", key=b"key-%d" % rng.randrange(keys)) for _ in range(20)])
        log.roll()
    latest = _latest(_read(path))
    opts = {"segment_bytes": 4096, "compact": True, "index_interval_bytes": 256, "shared_writers": True}
    survivor = Log(path, **opts)
    code = (
        "import sys\nfrom kafkalite import Log\n"
        "Log(sys.argv[1], segment_bytes=4096, compact=True, index_interval_bytes=256, shared_writers=True)"
        ".clean(0, now_ms=10**13)\n"
    )
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "cleaner.remove_swap=kill@2"}  # dies in the second group
    done = subprocess.run(
        [sys.executable, "-c", code, path], env=env, timeout=60, capture_output=True, check=False
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    assert any(n.endswith(".swap") for n in os.listdir(path))
    for i in range(keys):
        survivor.append([Record(b"late-%d" % i, key=b"key-%d" % i)])
    survivor.roll()
    survivor.clean(0, now_ms=NOW_LATER)
    assert not [n for n in os.listdir(path) if n.endswith((".swap", ".cleaned"))]
    assert set(latest) <= set(_latest([(r.offset, r.key, r.value) for r in survivor.records(start=0)]))
    survivor.close()
    got = _latest(_read(path))
    assert {k: v for k, (_, v) in got.items()} == {b"key-%d" % i: b"late-%d" % i for i in range(keys)}
    assert len(_read(path)) == keys
    with Log(path, **opts) as log:
        segs = log.segments
    assert all(s.next_offset <= t.base_offset for s, t in itertools.pairwise(segs)), segs
