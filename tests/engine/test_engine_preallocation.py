"""Preallocation follows what is written: a partition holding one record reserves a small
first step (64 KiB), not 16 MiB, and the steps grow (doubling) as the segment fills."""

from __future__ import annotations

import os

from kafkalite import Log


def allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def test_one_record_reserves_little_and_a_growing_segment_reserves_more(tmp_path):
    logs = [Log(str(tmp_path / f"t-{i}")) for i in range(20)]
    try:
        for log in logs:
            log.append_values([b"x" * 100])
        for i in range(20):
            seg = str(tmp_path / f"t-{i}" / "00000000000000000000.log")
            assert allocated(seg) <= 256 * 1024, allocated(seg)
        seg = str(tmp_path / "t-0" / "00000000000000000000.log")
        for _ in range(40):
            logs[0].append_values([b"y" * 1000] * 1000)  # ~40 MB
        size = logs[0].segments[-1][2]
        assert size < allocated(seg) <= size + 2 * 16 * 1024 * 1024 + 4096
        assert [r.value[:1] for r in logs[0].records(40_000, 40_001)] == [b"y"]
    finally:
        for log in logs:
            log.close()
