"""Shared fixtures: a fresh partition directory per test, and a reader of .log files with
kafka-python's record decoder (an implementation we did not write)."""

from __future__ import annotations

import glob
import os

import pytest


@pytest.fixture
def part_dir(tmp_path):
    return str(tmp_path / "events-0")


def kafka_python_records(partition_dir: str) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    """Decode every batch of every .log in the directory with kafka-python, checking CRCs.
    Returns (offset, timestamp, key, value, headers) for each data record."""
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.memory_records import MemoryRecords

    out = []
    for path in sorted(glob.glob(os.path.join(partition_dir, "*.log"))):
        data = open(path, "rb").read()
        records = MemoryRecords(data)
        consumed = 0
        while records.has_next():
            batch = records.next_batch()
            assert isinstance(batch, DefaultRecordBatch)
            assert batch.validate_crc(), f"kafka-python rejects the CRC of a batch in {path}"
            consumed += batch.size_in_bytes
            if batch.is_control_batch:
                continue
            for r in batch:
                out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
        assert consumed == len(data), f"{path}: batches cover {consumed} of {len(data)} bytes"
    return out
