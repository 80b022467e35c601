"""``kafkalite dump-log``: what kafka-dump-log shows for a partition directory, read straight
from the files: every batch (offsets, position, count, timestamps, codec, size, CRC check) and
a check of each segment's `.index` and `.timeindex`.

The files are judged by the engine (``rust/src/storage/inspect.rs``) with recovery's own rules, so the
dump says what a writer opening the partition would do: where recovery stops and why, whether
it cuts the damaged bytes (the last segment) or keeps them sealed (a segment with a successor),
and whether it trusts the indexes or rebuilds them. Kafka's index sanity rules
(DumpLogSegments ``--index-sanity-check``) are reported too."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from typing import Any, TextIO

from kafkalite._native import inspect_segment


def dump_partition(
    path: str, out: TextIO, print_batches: bool = True, on_segment: Callable[[str], None] = lambda path: None
) -> int:
    """Print the partition's batches and index checks; return the number of problems.
    ``on_segment(path)`` is called after each segment (the CLI's progress)."""
    problems = 0
    segments = sorted(glob.glob(os.path.join(glob.escape(path), "*.log")))
    for i, log_path in enumerate(segments):
        print(f"Dumping {log_path}", file=out)
        seg = inspect_segment(log_path, i == len(segments) - 1)
        for b in seg["batches"]:
            if not b["crc_ok"]:
                problems += 1
            if print_batches:
                _print_batch(b, out)
        if seg["damaged_bytes"]:
            problems += 1
            print(f"  PROBLEM: {seg['recovery']}", file=out)
        problems += _print_indexes(seg, out)
        on_segment(log_path)
    return problems


def _print_batch(b: dict[str, Any], out: TextIO) -> None:
    kind = " isControl: true" if b["is_control"] else ""
    ts_type = "LogAppendTime" if b["log_append_time"] else "CreateTime"
    print(
        f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} count: {b['count']} "
        f"position: {b['position']} {ts_type}: {b['max_timestamp']} size: {b['size']} "
        f"compresscodec: {b['compression']} "
        f"partitionLeaderEpoch: {b['partition_leader_epoch']} producerId: {b['producer_id']} "
        f"crc: {b['crc']} isValid: {str(b['crc_ok']).lower()}{kind}",
        file=out,
    )


def _print_indexes(seg: dict[str, Any], out: TextIO) -> int:
    problems = 0
    for missing in seg["missing"]:
        problems += 1
        print(f"  PROBLEM: {missing} is missing (a writer rebuilds it)", file=out)
    for problem in seg["index_problems"]:
        problems += 1
        print(f"  PROBLEM: {problem}", file=out)
    if seg["index_problems"]:
        print("  a writer does not trust these indexes: it rebuilds them from the .log", file=out)
    print(
        f"  index: {seg['index_entries']} entries, timeindex: {seg['time_entries']} entries, "
        f"{'ok' if problems == 0 else 'PROBLEMS'}",
        file=out,
    )
    return problems
