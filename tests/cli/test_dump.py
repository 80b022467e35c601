"""``kafkalite dump-log`` judges a partition with the engine's own rules (rust/src/storage/inspect.rs),
so what it reports is what a writer opening the partition does. Each test damages a copy of
a partition the way a crash or a disk does, runs the dump, then opens the partition for
writing and checks that recovery did exactly what the dump said. The damages are the ones
where the dump once parsed the files with rules of its own and disagreed with recovery."""

from __future__ import annotations

import io
import os
import re
import struct
import warnings

import pytest
from kafkalite import Log
from kafkalite.dump import dump_partition
from kafkalite.errors import CorruptRecordError

SEGMENT = "00000000000000000000"
CLEAN = ".kafkalite-clean-shutdown"
TIMESTAMP = 1_700_000_000_000


def _partition(path: str, batches: int = 3) -> list[tuple[int, int]]:
    """A partition of ``batches`` one-batch appends of two records each, closed cleanly.
    Returns each batch's (position, size).

    Every batch has the same timestamp, so the time index's one entry points at the first
    batch: with wall-clock timestamps a later batch in a later millisecond moved that entry past
    a damaged batch, and a writer then rebuilt the indexes instead of trusting the segment
    (about 1 run in 5 under load)."""
    with Log(path) as log:
        for i in range(batches):
            log.append_values([b"value-%d-a" % i, b"value-%d-b" % i], timestamp=TIMESTAMP)
    data = open(os.path.join(path, SEGMENT + ".log"), "rb").read()
    spans, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        spans.append((pos, 12 + length))
        pos += 12 + length
    return spans


def _dump(path: str) -> tuple[int, str]:
    out = io.StringIO()
    problems = dump_partition(path, out)
    return problems, out.getvalue()


def _recover(path: str) -> tuple[int, int]:
    """Open for writing (recovery runs), close; the .log's size and the end offset after it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Log(path) as log:
            end = log.end_offset
    return os.path.getsize(os.path.join(path, SEGMENT + ".log")), end


def _patch(path: str, ext: str, at: int, data: bytes) -> None:
    with open(os.path.join(path, SEGMENT + ext), "r+b") as f:
        f.seek(at)
        f.write(data)


def _truncation(report: str) -> int:
    found = re.search(r"recovery truncates the segment to (\d+) bytes", report)
    assert found, report
    return int(found.group(1))


def test_a_bad_crc_after_a_crash_is_cut_there_with_everything_after_it(part_dir):
    spans = _partition(part_dir)
    os.remove(os.path.join(part_dir, CLEAN))
    middle, _ = spans[1]
    _patch(part_dir, ".log", middle + 70, b"\xff")  # inside the second batch's records
    problems, report = _dump(part_dir)
    assert problems >= 2 and "isValid: false" in report
    assert f"position: {spans[2][0]}" not in report  # recovery never reaches the third batch
    assert _truncation(report) == middle
    assert _recover(part_dir) == (middle, 2)


def test_offsets_that_go_back_are_where_recovery_stops(part_dir):
    spans = _partition(part_dir)
    os.remove(os.path.join(part_dir, CLEAN))
    last, size = spans[2]
    # A whole, CRC-valid copy of the first batch (offsets 0..1) after the third: valid on its
    # own, but its offsets do not follow offset 5.
    first = open(os.path.join(part_dir, SEGMENT + ".log"), "rb").read()[: spans[0][1]]
    _patch(part_dir, ".log", last + size, first)
    problems, report = _dump(part_dir)
    assert problems >= 1 and "do not follow offset 5" in report
    assert _truncation(report) == last + size
    assert _recover(part_dir) == (last + size, 6)


def test_a_zero_filled_tail_is_unwritten_space_not_damage(part_dir):
    """A crash leaves an active segment's preallocated zeros; recovery drops nothing."""
    spans = _partition(part_dir)
    os.remove(os.path.join(part_dir, CLEAN))
    end = spans[-1][0] + spans[-1][1]
    _patch(part_dir, ".log", end, b"\x00" * 4096)
    problems, report = _dump(part_dir)
    assert problems == 0, report
    assert _recover(part_dir) == (end, 6)


def test_a_torn_tail_is_cut(part_dir):
    spans = _partition(part_dir)
    end = spans[-1][0] + spans[-1][1]
    first = open(os.path.join(part_dir, SEGMENT + ".log"), "rb").read()[: spans[0][1]]
    _patch(part_dir, ".log", end, first[:40])  # a batch whose write never finished
    problems, report = _dump(part_dir)
    assert problems >= 1 and "incomplete batch" in report
    assert _truncation(report) == end
    assert _recover(part_dir) == (end, 6)


def test_a_bad_crc_after_a_clean_close_is_kept_and_reads_raise(part_dir):
    """A clean shutdown makes the writer trust the segment without reading its records: the
    flipped byte stays, and reading it raises, as the dump says."""
    spans = _partition(part_dir)
    middle, _ = spans[1]
    _patch(part_dir, ".log", middle + 70, b"\xff")
    size = os.path.getsize(os.path.join(part_dir, SEGMENT + ".log"))
    problems, report = _dump(part_dir)
    assert problems >= 2 and "trusts segment 0 without recovery" in report
    assert "from offset 2 on in this segment raises CorruptRecordError" in report
    assert _recover(part_dir) == (size, 6)
    with pytest.raises(CorruptRecordError, match="CRC"), Log(part_dir, readonly=True) as log:
        list(log.records(2, 4))


def test_a_time_index_entry_past_the_last_offset_makes_a_writer_rebuild(part_dir):
    """The engine's trusted load refuses a time entry past the segment's last offset, so the
    dump reports it (the old dump only compared timestamps)."""
    _partition(part_dir)
    with open(os.path.join(part_dir, SEGMENT + ".timeindex"), "wb") as f:
        f.write(struct.pack(">qi", 1, 0) + struct.pack(">qi", 2, 40))
    problems, report = _dump(part_dir)
    assert problems == 1 and "past the segment's last offset 5" in report, report
    assert "rebuilds them" in report
    assert _recover(part_dir) == (os.path.getsize(os.path.join(part_dir, SEGMENT + ".log")), 6)
    with open(os.path.join(part_dir, SEGMENT + ".timeindex"), "rb") as f:
        rebuilt = f.read()
    assert all(rel <= 5 for _, rel in struct.iter_unpack(">qi", rebuilt))


def test_an_index_entry_past_the_end_of_the_log(part_dir):
    _partition(part_dir)
    with open(os.path.join(part_dir, SEGMENT + ".index"), "wb") as f:
        f.write(struct.pack(">ii", 5, 1 << 20))
    problems, report = _dump(part_dir)
    assert problems == 1 and "does not point at a batch ending there" in report, report


def test_damage_in_a_segment_with_a_successor_is_kept_sealed(part_dir):
    """Only the last segment is cut; a sealed one keeps its bytes (reads of them raise), and the
    dump says which of the two a writer does."""
    spans = _partition(part_dir)
    with Log(part_dir) as log:
        log.roll()
        log.append_values([b"later"])
    os.remove(os.path.join(part_dir, CLEAN))
    first = open(os.path.join(part_dir, SEGMENT + ".log"), "rb").read()[: spans[0][1]]
    end = spans[-1][0] + spans[-1][1]
    _patch(part_dir, ".log", end, first[:40])  # a torn tail, but in the older segment
    problems, report = _dump(part_dir)
    assert problems >= 1 and "has a successor, so recovery keeps them" in report, report
    assert "truncates" not in report
    size, end_offset = _recover(part_dir)
    assert (size, end_offset) == (end + 40, 7)
