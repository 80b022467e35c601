"""Damaged files: each kind of damage is detected, truncated (or refused on read) and
reported; indexes that are missing or corrupt are rebuilt."""

from __future__ import annotations

import os
import random

import pytest
from conftest import kafka_python_records
from kafkalite import CorruptRecordError, Log, RecoveryWarning

SEG = "00000000000000000000"


def build(part_dir, batches=20, per_batch=10):
    with Log(part_dir, segment_bytes=1 << 20) as log:
        for b in range(batches):
            log.append_values([f"{b}-{i}".encode() * 5 for i in range(per_batch)], timestamp=1000 + b)
        sizes = [len(log.read(b * per_batch, max_bytes=1)) for b in range(batches)]
    return sizes


def crash(part_dir):
    """Make the next open unclean, as after kill -9."""
    os.remove(os.path.join(part_dir, ".kafkalite-clean-shutdown"))


def log_file(part_dir, ext="log"):
    return os.path.join(part_dir, f"{SEG}.{ext}")


def flip(part_dir, pos, mask):
    with open(log_file(part_dir), "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ mask]))


def reopen_expecting_truncation(part_dir, valid_batches, sizes, dropped):
    with pytest.warns(
        RecoveryWarning, match=f"truncated to {sum(sizes[:valid_batches])} bytes; {dropped} bytes"
    ):
        log = Log(part_dir)
    assert log.end_offset == valid_batches * 10
    assert len(list(log.records())) == valid_batches * 10
    log.close()
    assert os.path.getsize(log_file(part_dir)) == sum(sizes[:valid_batches])
    assert len(kafka_python_records(part_dir)) == valid_batches * 10


def test_truncated_tail(part_dir):
    sizes = build(part_dir)
    with open(log_file(part_dir), "r+b") as f:
        f.truncate(sum(sizes) - 7)
    crash(part_dir)
    reopen_expecting_truncation(part_dir, 19, sizes, sizes[-1] - 7)


def test_truncated_tail_even_after_clean_shutdown(part_dir):
    sizes = build(part_dir)
    with open(log_file(part_dir), "r+b") as f:
        f.truncate(sum(sizes) - 7)
    reopen_expecting_truncation(part_dir, 19, sizes, sizes[-1] - 7)


def test_flipped_bit_after_crash(part_dir):
    sizes = build(part_dir)
    flip(part_dir, sum(sizes[:12]) + 40, 0x04)
    crash(part_dir)
    reopen_expecting_truncation(part_dir, 12, sizes, sum(sizes) - sum(sizes[:12]))


def test_flipped_bit_in_trusted_segment_fails_reads_not_silently(part_dir):
    sizes = build(part_dir)
    flip(part_dir, sum(sizes[:3]) + 70, 0xFF)
    with Log(part_dir) as log:
        assert [r.offset for r in log.records(0, 30)] == list(range(30))
        with pytest.raises(CorruptRecordError, match="CRC"):
            list(log.records(30, 40))
        with pytest.raises(CorruptRecordError, match="CRC"):
            log.read_arrow(0)


def test_zero_filled_tail_is_trimmed_silently(part_dir):
    sizes = build(part_dir)
    with open(log_file(part_dir), "ab") as f:
        f.write(b"\0" * 100_000)
    crash(part_dir)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # zeros are a preallocated tail, not lost data
        with Log(part_dir) as log:
            assert log.end_offset == 200
    assert os.path.getsize(log_file(part_dir)) == sum(sizes)


@pytest.mark.parametrize("garbage", [b"\xff" * 5, b"garbage after the last batch" * 10, bytes(range(256))])
def test_garbage_after_last_batch(part_dir, garbage):
    sizes = build(part_dir)
    with open(log_file(part_dir), "ab") as f:
        f.write(garbage)
    crash(part_dir)
    reopen_expecting_truncation(part_dir, 20, sizes, len(garbage))


def test_garbage_after_last_batch_with_clean_marker(part_dir):
    sizes = build(part_dir)
    with open(log_file(part_dir), "ab") as f:
        f.write(b"\x01" * 300)
    reopen_expecting_truncation(part_dir, 20, sizes, 300)


@pytest.mark.parametrize("ext", ["index", "timeindex"])
def test_deleted_index_is_rebuilt_identically(part_dir, ext):
    build(part_dir, batches=200)
    original = open(log_file(part_dir, ext), "rb").read()
    assert original
    os.remove(log_file(part_dir, ext))
    with Log(part_dir) as log:
        assert log.end_offset == 2000
        assert [r.offset for r in log.records(1234, 1236)] == [1234, 1235]
    assert open(log_file(part_dir, ext), "rb").read() == original


def test_corrupt_index_is_rebuilt(part_dir):
    build(part_dir, batches=200)
    original = open(log_file(part_dir, "index"), "rb").read()
    rng = random.Random(7)
    damaged = bytearray(original)
    for i in range(8, len(damaged), 16):
        damaged[i + 7] = rng.randrange(256)  # positions that no longer point at batches
    open(log_file(part_dir, "index"), "wb").write(bytes(damaged) + b"\x00\x01\x02")
    with Log(part_dir) as log:
        assert [r.offset for r in log.records(1500, 1502)] == [1500, 1501]
    assert open(log_file(part_dir, "index"), "rb").read() == original
