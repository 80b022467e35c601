"""Recovery touches only what can be unsafe (Kafka's recovery point): the active segment after
an unclean shutdown. Damage in a sealed segment is reported when that range is read (a typed
CorruptRecordError), never answered by deleting the intact segments after it, and readers
never step over it silently."""

from __future__ import annotations

import glob
import os
import warnings

import pytest
from kafkalite import CorruptRecordError, Log


def build(path: str) -> list[str]:
    with Log(path, segment_bytes=3400) as log:
        for i in range(300):
            log.append_values([b"value-%03d-" % i + b"v" * 80])
        assert len(log.segments) == 15
    return sorted(glob.glob(os.path.join(path, "*.log")))


def flip_one_byte(path: str, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def damaged_offsets(log: Log) -> tuple[int, int]:
    first, second = log.segments[0], log.segments[1]
    return first[0], second[0]


@pytest.mark.parametrize("where", ["body", "length"])
@pytest.mark.parametrize("crashed", [False, True])
def test_one_damaged_byte_in_the_oldest_sealed_segment_deletes_nothing(part_dir, where, crashed):
    files = build(part_dir)
    sizes_before = {f: os.path.getsize(f) for f in files}
    # The second batch: a byte of its body (the CRC fails) or of its length field (the batch
    # runs past the end of the segment).
    with open(files[0], "rb") as f:
        second = 12 + int.from_bytes(f.read(12)[8:12], "big")
    flip_one_byte(files[0], second + (40 if where == "body" else 8))
    if crashed:
        os.remove(os.path.join(part_dir, ".kafkalite-clean-shutdown"))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        log = Log(part_dir, segment_bytes=3400)
    with log:
        assert len(log.segments) == 15
        assert log.end_offset == 300
        bad_from, bad_to = damaged_offsets(log)
        assert bad_from == 0
        # Every intact segment is still there and reads.
        assert [r.value[:10] for r in log.records(bad_to)] == [b"value-%03d-" % i for i in range(bad_to, 300)]
        # Reading into the damaged range raises, and never skips to the next segment.
        with pytest.raises(CorruptRecordError):
            list(log.records(0))
        with pytest.raises(CorruptRecordError):
            list(log.records(1, 2))  # the damaged batch itself
        # The log stays writable.
        log.append_values([b"after"])
        assert log.end_offset == 301
    for f in files[1:-1]:
        assert os.path.getsize(f) == sizes_before[f]
    # A reader in another process sees the same: an error at the damage, data after it.
    with Log(part_dir, readonly=True) as reader:
        with pytest.raises(CorruptRecordError):
            list(reader.records(0))
        assert len(list(reader.records(bad_to))) == 301 - bad_to


def test_a_sealed_segment_left_untrimmed_by_a_dead_roll_is_trimmed_not_reported(
    part_dir,
):
    files = build(part_dir)
    with open(files[3], "ab") as f:
        f.write(b"\0" * 65536)  # the preallocated tail a roll killed before its trim leaves
    os.remove(os.path.join(part_dir, ".kafkalite-clean-shutdown"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Log(part_dir, segment_bytes=3400) as log:
            assert [r.offset for r in log.records()] == list(range(300))
    assert os.path.getsize(files[3]) == os.path.getsize(files[2])
