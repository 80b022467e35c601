"""``kafkalite dump-log``: what kafka-dump-log shows for a partition directory, read straight
from the files: every batch (offsets, position, count, timestamps, codec, size, CRC check) and
a sanity check of each segment's `.index` and `.timeindex`."""

from __future__ import annotations

import glob
import itertools
import os
import struct
from collections.abc import Iterator
from typing import TextIO

from kafkalite._native import crc32c

_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 batch header
_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def batches(data: bytes) -> Iterator[tuple[int, tuple, bool]]:
    """(position, header fields, crc ok) for each whole batch; stops at the valid end."""
    pos = 0
    while len(data) - pos > 17:
        base, length = struct.unpack_from(">qi", data, pos)
        if length < 49 or pos + 12 + length > len(data) or data[pos + 16] != 2:
            return
        fields = _HEADER.unpack_from(data, pos)
        yield pos, fields, crc32c(data[pos + 21 : pos + 12 + length]) == fields[4]
        pos += 12 + length


def dump_partition(path: str, out: TextIO, print_batches: bool = True) -> int:
    """Print the partition's batches and index checks; return the number of problems."""
    problems = 0
    for log_path in sorted(glob.glob(os.path.join(path, "*.log"))):
        base_offset = int(os.path.basename(log_path).split(".")[0])
        data = open(log_path, "rb").read()
        print(f"Dumping {log_path}", file=out)
        ends: dict[int, int] = {}
        valid_end = 0
        for pos, f, ok in batches(data):
            base, length, epoch, _magic, crc, attrs, last_delta, first_ts, max_ts, pid, pepoch, seq, count = f
            ends[pos] = base + last_delta
            valid_end = pos + 12 + length
            if not ok:
                problems += 1
            if print_batches:
                kind = " isControl: true" if attrs & 0x20 else ""
                ts_type = "LogAppendTime" if attrs & 0x08 else "CreateTime"
                print(
                    f"baseOffset: {base} lastOffset: {base + last_delta} count: {count} position: {pos} "
                    f"{ts_type}: {max_ts} size: {12 + length} compresscodec: {_CODECS.get(attrs & 7, attrs & 7)} "
                    f"partitionLeaderEpoch: {epoch} producerId: {pid} crc: {crc} isValid: {str(ok).lower()}{kind}",
                    file=out,
                )
        if valid_end != len(data):
            problems += 1
            print(
                f"  PROBLEM: {len(data) - valid_end} bytes after the last valid batch at position {valid_end}",
                file=out,
            )
        problems += _check_indexes(log_path, base_offset, ends, out)
    return problems


def _check_indexes(log_path: str, base_offset: int, ends: dict[int, int], out: TextIO) -> int:
    problems = 0
    stem = log_path[: -len(".log")]
    index_path, time_path = stem + ".index", stem + ".timeindex"
    if not os.path.exists(index_path):
        print(f"  PROBLEM: {index_path} is missing (a writer rebuilds it)", file=out)
        return 1
    raw = open(index_path, "rb").read()
    times = open(time_path, "rb").read() if os.path.exists(time_path) else b""
    for problem in kafka_sanity_problems(base_offset, raw, times):
        problems += 1
        print(f"  PROBLEM: {problem}", file=out)
    entries = [struct.unpack_from(">ii", raw, i) for i in range(0, len(raw) - len(raw) % 8, 8)]
    for rel, pos in entries:
        if ends.get(pos) != base_offset + rel:
            if rel == 0 and pos == 0 and len(entries) > 1:  # a preallocated index's zero tail
                break
            problems += 1
            print(
                f"  PROBLEM: index entry (offset {base_offset + rel}, position {pos}) does not point at a batch ending there",
                file=out,
            )
            break
    stamps = [struct.unpack_from(">qi", times, i) for i in range(0, len(times) - len(times) % 12, 12)]
    if any(b[0] <= a[0] for a, b in itertools.pairwise(stamps) if b != (0, 0)):
        problems += 1
        print(f"  PROBLEM: {time_path} timestamps do not increase", file=out)
    print(
        f"  index: {len(entries)} entries, timeindex: {len(stamps)} entries, {'ok' if problems == 0 else 'PROBLEMS'}",
        file=out,
    )
    return problems


def kafka_sanity_problems(base_offset: int, index: bytes, timeindex: bytes) -> list[str]:
    """Kafka's index sanity rules (``OffsetIndex``/``TimeIndex.sanityCheck``, what a broker checks
    before trusting an index and DumpLogSegments ``--index-sanity-check`` reports as
    CorruptIndexException): whole entries only, the last entry's offset not below the base offset
    (relative offsets are signed 32-bit), the last timestamp not below the first."""
    problems = []
    if len(index) % 8:
        problems.append(f"CorruptIndexException: offset index size {len(index)} is not a multiple of 8")
    elif index:
        (last_rel,) = struct.unpack_from(">i", index, len(index) - 8)
        if base_offset + last_rel < base_offset:
            problems.append(
                f"CorruptIndexException: offset index has last offset {base_offset + last_rel} below the base offset {base_offset}"
            )
    if len(timeindex) % 12:
        problems.append(f"CorruptIndexException: time index size {len(timeindex)} is not a multiple of 12")
    elif timeindex:
        (first_ts,) = struct.unpack_from(">q", timeindex, 0)
        last_ts, last_rel = struct.unpack_from(">qi", timeindex, len(timeindex) - 12)
        if last_ts < first_ts:
            problems.append(
                f"CorruptIndexException: time index last timestamp {last_ts} is below its first {first_ts}"
            )
        if base_offset + last_rel < base_offset:
            problems.append(
                f"CorruptIndexException: time index has last offset {base_offset + last_rel} (timestamp {last_ts}) "
                f"below the base offset {base_offset}"
            )
    return problems
