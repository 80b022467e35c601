"""Log compaction (cleanup.policy=compact): the cleaner against a dict model, offsets kept,
tombstones expiring, kafka-python decoding what the cleaner wrote, null keys refused, crash
safety of the segment swap, and the cleaner running by itself from a producer."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest
from conftest import kafka_python_records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafkalite import Admin, Producer
from kafkalite.errors import InvalidConfigError, InvalidRecordError
from kafkalite.log import Log, Record

DAY = 86_400_000


def compacted_log(path: str, **kw) -> Log:
    return Log(path, segment_bytes=kw.pop("segment_bytes", 600), compact=True, **kw)


def read_all(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in log.records()]


# A history: (key index, value or None for a tombstone), appended one batch per step.
histories = st.lists(
    st.lists(
        st.tuples(st.integers(0, 7), st.one_of(st.none(), st.binary(min_size=1, max_size=20))),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    history=histories,
    codec=st.sampled_from(["none", "zstd"]),
    cleans=st.lists(st.integers(0, 3), min_size=1, max_size=4),
)
@pytest.mark.slow
def test_cleaner_matches_a_dict_model(tmp_path_factory, history, codec, cleans):
    path = str(tmp_path_factory.mktemp("c") / "t-0")
    log = compacted_log(path, compression=codec)
    appended: list[tuple[int, bytes, bytes | None]] = []
    for batch in history:
        first, _ = log.append([Record(v, key=b"k%d" % k, timestamp=1000) for k, v in batch])
        appended += [(first + i, b"k%d" % k, v) for i, (k, v) in enumerate(batch)]
    retention = 10 * DAY
    now = 2000
    for step in cleans:  # clock steps of 0-3 days between passes: tombstones expire after 10
        now += step * 3 * DAY
        log.clean(retention, now_ms=now)
    active_base = log.segments[-1].base_offset
    got = read_all(log)
    by_offset = {o: (k, v) for o, k, v in appended}
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for o, k, v in appended:
        latest[k] = (o, v)

    # Nothing invented, offsets preserved, order kept.
    assert [o for o, _, _ in got] == sorted(o for o, _, _ in got)
    for o, k, v in got:
        assert by_offset[o] == (k, v)
    present = {o for o, _, _ in got}
    # The active segment is never touched.
    assert {o for o, _, _ in appended if o >= active_base} <= present
    # What the cleaner saw: the latest record per key below the active segment.
    latest_sealed = {k: o for o, k, _ in appended if o < active_base}
    for key, (offset, value) in latest.items():
        if value is not None:
            assert offset in present, f"latest value of {key!r} lost"
        older = [o for o, k, _ in got if k == key and o < latest_sealed.get(key, -1)]
        assert not older, f"superseded records of {key!r} survived cleaning: {older}"
    # Same answers after reopening, and from kafka-python's decoder.
    log.close()
    again = Log(path, readonly=True)
    assert read_all(again) == got
    assert [(o, k, v) for o, _, k, v, _ in kafka_python_records(path)] == got


def test_tombstones_stay_for_delete_retention_then_go(tmp_path):
    log = compacted_log(str(tmp_path / "t-0"))
    log.append([Record(b"v1", key=b"a"), Record(b"v1", key=b"b")])
    log.append([Record(None, key=b"a")])
    log.roll()
    log.append([Record(b"x", key=b"c")])
    first = log.clean(delete_retention_ms=DAY, now_ms=10_000)
    assert first["records_removed"] == 1  # a's old value; the tombstone stays, stamped
    assert [(k, v) for _, k, v in read_all(log)] == [(b"b", b"v1"), (b"a", None), (b"c", b"x")]
    assert log.clean(delete_retention_ms=DAY, now_ms=10_000 + DAY - 1)["tombstones_removed"] == 0
    assert log.clean(delete_retention_ms=DAY, now_ms=10_000 + DAY)["tombstones_removed"] == 1
    assert read_all(log) == [(1, b"b", b"v1"), (3, b"c", b"x")]
    assert log.end_offset == 4 and log.start_offset == 0  # offsets never move


def test_rewritten_batches_keep_codec_offsets_and_horizon_bit(tmp_path):
    from kafka.record.memory_records import MemoryRecords

    path = str(tmp_path / "t-0")
    log = compacted_log(path, compression="zstd")
    log.append([Record(b"old", key=b"k"), Record(b"keep", key=b"j"), Record(None, key=b"t")])
    log.append([Record(b"new", key=b"k")])
    log.roll()
    log.append([Record(b"tail", key=b"z")])
    log.clean(DAY, now_ms=50_000)
    data = open(os.path.join(path, "00000000000000000000.log"), "rb").read()
    batch = MemoryRecords(data).next_batch()
    assert batch.compression_type == 4  # zstd kept
    assert batch.base_offset == 0 and batch.last_offset_delta == 2  # lastOffset kept
    assert batch.attributes & 0x40  # delete horizon set: the batch keeps a tombstone
    assert batch.first_timestamp == 50_000 + DAY
    assert [(r.offset, r.key, r.value) for r in batch] == [(1, b"j", b"keep"), (2, b"t", None)]
    log.close()


def test_readers_holding_old_segments_keep_reading(tmp_path):
    path = str(tmp_path / "t-0")
    log = compacted_log(path)
    for i in range(200):
        log.append([Record(b"value-%d" % i, key=b"k%d" % (i % 3))])
    reader = Log(path, readonly=True)
    before = read_all(reader)
    held = reader.read(0)  # a view of the first segment's map
    held_bytes = bytes(held)
    stats = log.clean(DAY)
    assert stats["records_removed"] > 150
    assert bytes(held) == held_bytes  # the reader's maps still hold the old files
    fresh = Log(path, readonly=True)
    after = read_all(fresh)
    assert set(after) < set(before) and len(after) < 60
    # The cleaner moved the segment generation: the reader lists again and reads the new files.
    assert read_all(reader) == after


def test_null_keys_are_refused_on_compacted_topics(tmp_path):
    admin = Admin(str(tmp_path))
    admin.create_topic("kv", 2, {"cleanup.policy": "compact"})
    with Producer(str(tmp_path)) as producer:
        with pytest.raises(InvalidRecordError, match="needs a key"):
            producer.send("kv", value=b"x")
        with pytest.raises(InvalidRecordError, match="needs a key"):
            producer.send_batch("kv", [b"a", b"b"])
        with pytest.raises(InvalidRecordError, match="needs a key"):
            producer.send_batch("kv", [b"a", b"b"], keys=[b"k", None])
        producer.send("kv", value=b"x", key=b"k").get(5)
    log = Log(str(tmp_path / "direct-0"), compact=True)
    with pytest.raises(InvalidRecordError):
        log.append([Record(b"a", key=b"k"), Record(b"b")])
    with pytest.raises(InvalidRecordError):
        log.append_values([b"a"])
    assert log.end_offset == 0  # all or nothing
    with pytest.raises(InvalidConfigError, match="cleanup.policy must be"):
        admin.create_topic("bad", 1, {"cleanup.policy": "compact,archive"})
    with pytest.raises(InvalidConfigError, match="set it to 'compact'"):
        admin.create_topic("plain", 1)
        admin.compact_topic("plain")


def test_compact_and_delete_policy_keeps_time_retention(tmp_path):
    admin = Admin(str(tmp_path))
    admin.create_topic(
        "both", 1, {"cleanup.policy": "delete,compact", "retention.ms": 1000, "segment.bytes": 600}
    )
    admin.create_topic("only", 1, {"cleanup.policy": "compact", "retention.ms": 1000, "segment.bytes": 600})
    assert admin.describe_topic("both").config["cleanup.policy"] == "compact,delete"
    with Producer(str(tmp_path), batch_size=100) as producer:
        for topic in ("both", "only"):
            for i in range(50):
                producer.send(topic, value=b"v" * 40, key=b"k%d" % i, timestamp_ms=1000)
    deleted = admin.enforce_retention(now_ms=10**12)
    assert deleted["both"] > 0 and deleted["only"] == 0  # compact alone never deletes by time


def test_interrupted_swap_is_finished_at_open(tmp_path):
    path = str(tmp_path / "t-0")
    log = compacted_log(path)
    for i in range(60):
        log.append([Record(b"v%d" % i, key=b"k%d" % (i % 4))])
    expected = read_all(log)
    log.close()
    # A crash after the commit point: X.log.swap is durable, the old X.log and indexes remain.
    seg = os.path.join(path, "00000000000000000000")
    shutil.copy(seg + ".log", seg + ".log.swap")
    open(seg + ".log.cleaned", "wb").write(b"half-written")  # and a pass that never committed
    reopened = compacted_log(path)
    assert not [n for n in os.listdir(path) if n.endswith((".swap", ".cleaned"))]
    assert read_all(reopened) == expected


@pytest.mark.slow
def test_kill_during_cleaning_loses_nothing(tmp_path, spawn):
    """SIGKILL a process while it cleans a big compacted log, many times; every reopen must
    give every key its latest value, with the offsets it was written at."""
    path = str(tmp_path / "kv-0")
    log = compacted_log(path, segment_bytes=64 * 1024)
    latest: dict[bytes, tuple[int, bytes]] = {}
    for round_ in range(20):
        records = [Record(b"r%d-%d" % (round_, i) * 4, key=b"key-%d" % (i % 700)) for i in range(1500)]
        first, _ = log.append(records)
        for i, r in enumerate(records):
            latest[r.key] = (first + i, r.value)
    log.close()
    script = (
        "import sys, time\n"
        "from kafkalite.log import Log\n"
        "log = Log(sys.argv[1], segment_bytes=64 * 1024, compact=True)\n"
        "print('open', flush=True)\n"
        "while True:\n"
        "    log.clean(0, now_ms=int(time.time() * 1000) + 10**9)\n"
    )
    for attempt in range(12):
        proc = spawn.code(script, path, stdout=subprocess.PIPE)
        assert proc.stdout.readline() == b"open\n"
        time.sleep(0.005 + 0.02 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reopened = compacted_log(path, segment_bytes=64 * 1024)
        got = {k: (o, v) for o, k, v in read_all(reopened)}
        assert got == latest
        reopened.close()


def test_producers_clean_by_themselves_past_the_dirty_ratio(tmp_path):
    admin = Admin(str(tmp_path))
    admin.create_topic(
        "kv", 1, {"cleanup.policy": "compact", "segment.bytes": 2000, "min.cleanable.dirty.ratio": 0.3}
    )
    with Producer(str(tmp_path), batch_size=200, cleaner_check_interval_ms=50) as producer:
        for i in range(400):
            producer.send("kv", key=b"k%d" % (i % 4), value=b"value-%d" % i)
        producer.flush()
        deadline = time.monotonic() + 10
        while (
            os.path.exists(os.path.join(tmp_path, "kv-0", ".kafkalite-cleaner-offset")) is False
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
    log = Log(str(tmp_path / "kv-0"), readonly=True)
    assert len(read_all(log)) < 100  # superseded values removed with no compact_topic call
    assert {k: v for _, k, v in read_all(log)}[b"k3"] == b"value-399"
