"""Adversarial tests of the data directory's preallocation budget (issue 9 point 10,
rust/src/storage/prealloc.rs): hostile config values, budget leaks, and writers/readers in several
processes while the budget is spent. Each test names what it attacks."""

from __future__ import annotations

import json
import os
import time

import pytest
from kafkalite import Admin, KafkaliteError, Log, Producer
from kafkalite.datadir import METADATA_FILE, DataDir
from kafkalite.errors import InvalidConfigError, InvalidTypeError


def _hand_written_budget(data_dir: str, value: object) -> None:
    """Set log.preallocate.budget.bytes in the metadata file as a person editing it would."""
    path = os.path.join(data_dir, METADATA_FILE)
    with open(path) as f:
        data = json.load(f)
    data.setdefault("config", {})["log.preallocate.budget.bytes"] = value
    with open(path, "w") as f:
        json.dump(data, f)


@pytest.mark.parametrize(
    "value, error",
    [
        ("abc", InvalidConfigError),
        ("1e3", InvalidConfigError),
        (None, InvalidTypeError),
        ([1], InvalidTypeError),
        ({"a": 1}, InvalidTypeError),
        (1.5, InvalidConfigError),
        (True, InvalidTypeError),
        (-5, InvalidConfigError),
        (2**64, InvalidConfigError),
    ],
)
def test_hand_written_budget_value_is_a_typed_error(tmp_path, value, error):
    """Before: open_partition ran int() on the stored value, so "abc", null, [1] raised a bare
    ValueError/TypeError from the producer's sender (with a logged traceback), and 1.5 / true
    were silently taken as a 1-byte budget."""
    data_dir = str(tmp_path / "d")
    Admin(data_dir).create_topic("t", partitions=1)
    _hand_written_budget(data_dir, value)
    with pytest.raises(error, match="log.preallocate.budget.bytes|preallocate_budget_bytes") as caught:
        DataDir(data_dir).open_partition("t", 0)
    assert isinstance(caught.value, KafkaliteError)
    producer = Producer(data_dir)
    try:
        with pytest.raises(error):
            producer.send("t", b"x").get(timeout=10)
    finally:
        producer.close()


@pytest.mark.parametrize("value, limit", [("4096", 4096), (8192.0, 8192), (0, 0)])
def test_hand_written_budget_in_kafka_string_form_is_accepted(tmp_path, value, limit):
    """Kafka's config strings ("4096") and whole floats stay accepted, as alter_data_dir_config does."""
    data_dir = str(tmp_path / "d")
    Admin(data_dir).create_topic("t", partitions=1)
    _hand_written_budget(data_dir, value)
    log = DataDir(data_dir).open_partition("t", 0)
    try:
        log.append_values([b"x"])
        assert [r.value for r in log.records()] == [b"x"]
    finally:
        log.close()


FOLLOWED_WRITER = r"""
import random, sys
from kafkalite import Log
path, budget, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(7)
log = Log(path, preallocate_budget_bytes=budget, segment_bytes=32768)
for i in range(count):
    log.append_values([b"%d-" % i + b"." * rnd.choice([10, 3000, 4000, 9000])])
    if rnd.random() < 0.05:
        log.roll()
log.close()
"""


@pytest.mark.parametrize("budget", [0, 256 << 20])
def test_a_follower_in_another_process_misses_no_segment(tmp_path, budget, spawn):
    """A read-only follower polls while a writer in another process appends and rolls small
    segments (with the budget spent, each append grows the file by exactly what it needs).
    Found: the follower skipped whole segments (offsets 1931..1934 of 3000 here, 2-15 gaps per
    run, with or without the budget, also on 55cdc82 before it), so a consumer silently
    missed acknowledged records."""
    path = tmp_path / "t-0"
    path.mkdir()
    count = 3000
    writer = spawn.code(FOLLOWED_WRITER, path, budget, count)
    gaps = []
    log = Log(str(path), readonly=True)
    expected = 0
    deadline = time.monotonic() + 120
    while expected < count and time.monotonic() < deadline:
        finished = writer.poll() is not None
        for record in log.records(expected):
            if record.offset != expected:
                gaps.append((expected, record.offset))
            expected = record.offset + 1
        if finished:
            break
    log.close()
    writer.kill()
    writer.wait()
    assert writer.returncode in (0, -9)
    assert gaps == [], f"the follower skipped offsets [from, to): {gaps[:10]}"
    assert expected == count


def _reserved_ahead(data_dir: str, topic: str) -> int:
    """Allocated-but-unwritten bytes of a partition's active segment."""
    path = os.path.join(data_dir, topic + "-0")
    log = Log(path, readonly=True)
    try:
        base, _next, size, *_ = log.segments[-1]
    finally:
        log.close()
    return os.stat(os.path.join(path, f"{base:020d}.log")).st_blocks * 512 - size


def test_deleting_a_topic_gives_its_budget_back_to_the_producer(tmp_path):
    """Two topics take the whole 128 KiB budget (64 KiB first steps); both are deleted while
    the producer stays open. Found: a new topic then gets one page ahead (4 KiB), not 64 KiB,
    and the producer held 6 descriptors of deleted files. Now opening t3 first closes the deleted
    topics' logs (metadata refresh, tests/producer/test_producer_metadata_refresh.py)."""
    data_dir = str(tmp_path / "d")
    admin = Admin(data_dir)
    admin.init()
    admin.alter_data_dir_config({"log.preallocate.budget.bytes": 128 * 1024})
    for topic in ("t1", "t2"):
        admin.create_topic(topic, partitions=1)
    producer = Producer(data_dir)
    try:
        for topic in ("t1", "t2"):
            producer.send(topic, b"x").get(timeout=30)
        assert _reserved_ahead(data_dir, "t1") >= 60 * 1024
        admin.delete_topic("t1")
        admin.delete_topic("t2")
        admin.create_topic("t3", partitions=1)
        producer.send("t3", b"x").get(timeout=30)
        assert _reserved_ahead(data_dir, "t3") >= 60 * 1024
        held = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                held.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        deleted = [
            t for t in held if t.startswith((os.path.join(data_dir, "t1-"), os.path.join(data_dir, "t2-")))
        ]
        assert deleted == []
    finally:
        producer.close()
