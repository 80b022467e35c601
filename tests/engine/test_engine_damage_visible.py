"""Damage in the active segment is reported, never read as "nothing more yet": a batch behind
its offset/length prefix (written last by every writer) was published whole, so a bad CRC or
offsets that do not follow are damage. Before, readers stopped quietly at such a batch: a
damaged commit record in `__consumer_offsets` made `committed()` return None (and a member
with auto_offset_reset="latest" skip records), and a consumer never saw the records after."""

from __future__ import annotations

import glob
import os
import struct

import pytest
from kafkalite import Admin, Consumer, Log, Producer, TopicPartition
from kafkalite.errors import CorruptRecordError, KafkaliteError


def _batches(path: str) -> list[tuple[int, int]]:
    """(position, total size) of every batch in a .log file."""
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos + 12 <= len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0]
        if length <= 0:
            break
        out.append((pos, 12 + length))
        pos += 12 + length
    return out


def _flip(path: str, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x10]))


def _write(part: str, batches: int) -> None:
    with Log(part) as log:
        for i in range(batches):
            log.append_values([b"v%d-%d" % (i, j) for j in range(5)])


@pytest.mark.parametrize("where", ["crc-covered byte", "base offset backwards"])
def test_damage_in_the_active_segment_raises_for_readers(tmp_path, where):
    part = str(tmp_path / "t-0")
    _write(part, 10)
    (log_file,) = glob.glob(os.path.join(part, "*.log"))
    pos, size = _batches(log_file)[6]
    if where == "crc-covered byte":
        _flip(log_file, pos + size - 3)  # inside the records: the CRC covers it
    else:
        with open(log_file, "r+b") as f:  # baseOffset is not CRC-covered: make it go backwards
            f.seek(pos)
            f.write(struct.pack(">q", 3))
    with pytest.raises(CorruptRecordError, match="damage"):
        with Log(part, readonly=True) as log:
            list(log.records(0))


def test_a_damaged_commit_is_an_error_not_a_forgotten_offset(tmp_path):
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", 1)
    with Producer(data) as producer:
        for i in range(30):
            producer.send("t", b"%d" % i, partition=0)
    tp = TopicPartition("t", 0)
    with Consumer(data, group_id="g", enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        consumer.commit({tp: __import__("kafkalite").OffsetAndMetadata(10, "")})
    offsets_logs = [
        p for p in glob.glob(os.path.join(data, "__consumer_offsets-*", "*.log")) if os.path.getsize(p)
    ]
    (log_file,) = offsets_logs
    pos, size = _batches(log_file)[-1]
    _flip(log_file, pos + size - 5)
    with pytest.raises(KafkaliteError):
        with Consumer(data, group_id="g", enable_auto_commit=False) as consumer:
            consumer.assign([tp])
            consumer.committed(tp)
