"""Issue 9 point 4: a record that would push a producer batch past its limit starts the next
batch (Kafka's RecordAccumulator); only a record too large for any batch fails, and the CLI's
count and exit status say what was written."""

from __future__ import annotations

import os
import subprocess

import kafkalite
import pytest
from helpers import run_cli
from kafkalite import Admin, Log, Producer

# The README benchmark's settings scaled down 16x: batch_size equal to max.message.bytes
# (minus Kafka's 12 bytes of log overhead), so every batch that reaches batch_size used to be
# refused whole.
LIMIT = 65536 + 12


def _end_offsets(data_dir: str, topic: str, partitions: int = 1) -> list[int]:
    out = []
    for p in range(partitions):
        with Log(os.path.join(data_dir, f"{topic}-{p}"), readonly=True) as log:
            out.append(log.end_offset)
    return out


@pytest.mark.parametrize("linger_ms", [5, 1000])
def test_full_batches_start_new_ones_and_no_record_fails(tmp_path, linger_ms):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", config={"max.message.bytes": LIMIT})
    n = 20_000
    with Producer(data_dir, batch_size=65536, linger_ms=linger_ms) as p:
        futures = [p.send("t", b"x" * 100) for _ in range(n)]
        p.flush()
        failed = [f.exception for f in futures if f.failed()]
    assert failed == []
    assert [f.get().offset for f in futures] == list(range(n))
    assert _end_offsets(data_dir, "t") == [n]


def test_one_large_record_does_not_fail_the_small_ones_around_it(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", config={"max.message.bytes": 10_000})
    with Producer(data_dir, batch_size=1 << 20, linger_ms=1000) as p:
        small = [p.send("t", b"s" * 50) for _ in range(100)]
        large = p.send("t", b"L" * 9_000)  # fits a batch of its own, not with the 100 small ones
        more = [p.send("t", b"s" * 50) for _ in range(100)]
        with pytest.raises(kafkalite.RecordTooLargeError, match=r"max\.message\.bytes \(10000") as info:
            p.send("t", b"H" * 20_000)  # too large for any batch: only this one fails
        assert isinstance(info.value, ValueError)
        assert "20" in str(info.value) and "raise" in str(info.value)
        last = p.send("t", b"s" * 50)
        p.flush()
    offsets = [f.get().offset for f in [*small, large, *more, last]]
    assert offsets == list(range(202))
    with Log(os.path.join(data_dir, "t-0"), readonly=True) as log:
        values = [r.value for r in log.records()]
    assert values[100] == b"L" * 9_000 and len(values) == 202


def test_the_limit_named_is_the_smaller_of_topic_and_producer(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    with Producer(data_dir, max_request_size=5_000) as p:
        with pytest.raises(kafkalite.RecordTooLargeError, match="max_request_size"):
            p.send("t", b"v" * 6_000)
        p.send("t", b"v" * 4_000).get(timeout=10)


def _cli(data_dir: str, *args: str) -> subprocess.CompletedProcess:
    return run_cli("--data-dir", data_dir, *args, text=True, timeout=120)


def test_cli_produce_counts_only_acknowledged_records(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", config={"max.message.bytes": 2_000})
    lines = tmp_path / "lines.txt"
    # 250 lines that fit alone but not all in one batch, then one that fits no batch.
    lines.write_bytes(b"".join(b"%04d" % i + b"." * 1_500 + b"\n" for i in range(250)) + b"x" * 5_000 + b"\n")
    result = _cli(data_dir, "produce", "t", "--file", str(lines))
    assert result.returncode == 1, result.stderr
    assert "Produced 250 records" in result.stderr
    assert "1 of 251 records were not written" in result.stderr
    assert _end_offsets(data_dir, "t") == [250]


def test_cli_produce_succeeds_with_the_true_count(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", config={"max.message.bytes": 2_000})
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"".join(b"%04d" % i + b"." * 1_500 + b"\n" for i in range(251)))
    result = _cli(data_dir, "produce", "t", "--file", str(lines))
    assert result.returncode == 0, result.stderr
    assert "Produced 251 records" in result.stderr
    assert _end_offsets(data_dir, "t") == [251]
