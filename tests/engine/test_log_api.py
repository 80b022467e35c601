"""kafkalite.Log as a user drives it: round trips, zero-copy views, Arrow, errors."""

from __future__ import annotations

import os
import time

import kafkalite
import pyarrow as pa
import pytest
from kafkalite import Log, Record


def test_round_trip_keys_headers_timestamps(part_dir):
    records = [
        Record(b"v1", key=b"k1", headers=[("h", b"x"), ("empty", None)], timestamp=1_600_000_000_000),
        Record(None, key=None, timestamp=5),
        Record(b"", key=b"", headers=[("ünïcode", b"")], timestamp=7),
        Record(bytearray(b"ba"), key=memoryview(b"mv")),
    ]
    with Log(part_dir) as log:
        assert log.append(records) == (0, 3)
        got = list(log.records())
    assert [r.offset for r in got] == [0, 1, 2, 3]
    assert got[0] == Record(
        b"v1", key=b"k1", headers=[("h", b"x"), ("empty", None)], timestamp=1_600_000_000_000, offset=0
    )
    assert (got[1].key, got[1].value, got[1].timestamp) == (None, None, 5)
    assert (got[2].key, got[2].value, got[2].headers) == (b"", b"", [("ünïcode", b"")])
    assert (got[3].key, got[3].value) == (b"mv", b"ba")
    assert abs(got[3].timestamp - time.time() * 1000) < 60_000


def test_append_values_read_and_arrow(part_dir):
    values = [f"value-{i}".encode() * 10 for i in range(5000)]
    with Log(part_dir, segment_bytes=64 * 1024) as log:
        assert log.append_values(values[:2500], timestamp=42) == (0, 2499)
        assert log.append_values(values[2500:]) == (2500, 4999)
        assert len(log.segments) > 3
        assert [r.value for r in log.records()] == values
        assert [r.value for r in log.records(100, 110)] == values[100:110]
        table = log.read_arrow(10, 20)
        assert table.num_rows == 10
        assert table.column("offset").to_pylist() == list(range(10, 20))
        assert table.column("value").to_pylist() == values[10:20]
        assert table.column("key").null_count == 10
        assert table.column("headers").null_count == 10
        assert table.schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
        whole = log.read_arrow(0)
        assert whole.num_rows == 5000 and whole.column("value").to_pylist() == values
        assert log.read_arrow(0, max_records=7).num_rows == 7


def test_append_values_while_another_thread_rewrites_the_list(part_dir):
    """append_values borrows the values' bytes without copying and without the GIL: a thread
    that replaces (and so frees) the list's items meanwhile must not change or corrupt what is
    written. Each value is one byte repeated, so a torn or freed value shows."""
    import threading

    values = [bytes([1]) * 100 for _ in range(1000)]
    stop = threading.Event()

    def rewrite():
        n = 0
        while not stop.is_set():
            n += 1
            for i in range(len(values)):
                values[i] = bytes([n % 251 + 1]) * (100 + n % 7)
            values.append(b"x")
            del values[-1]

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        with Log(part_dir) as log:
            for _ in range(300):
                log.append_values(values)
            for r in log.records():
                assert 100 <= len(r.value) <= 106 and r.value == r.value[:1] * len(r.value), r.offset
            assert log.end_offset == 300_000
    finally:
        stop.set()
        writer.join()


def test_read_arrow_columns_where_nulls_and_headers_start_and_stop(part_dir):
    """read_arrow keeps a column's validity as one flag while every row agrees and per row
    once they differ: each way of switching (valid -> null, null -> valid, headers appearing
    after rows without, all rows valid) must give the rows records() gives."""
    recs = (
        [Record(b"v%d" % i, timestamp=1000 + i) for i in range(300)]  # null keys, no headers
        + [Record(None, key=b"k%d" % i, timestamp=2000 + i) for i in range(5)]  # keys appear, values null
        + [Record(b"h", headers=[("a", b"1"), ("b", None)], timestamp=3000)]  # headers appear
        + [Record(b"x" * 200, key=b"", timestamp=4000 + i) for i in range(300)]
    )
    with Log(part_dir) as log:
        for start in range(0, len(recs), 97):  # several Kafka batches per Arrow batch
            log.append(recs[start : start + 97])
        expected = list(log.records())
        for start, max_records in [(0, None), (0, 300), (300, 6), (305, 1), (306, None), (299, 3)]:
            table = log.read_arrow(start, max_records=max_records)
            want = expected[start : start + (max_records or len(expected))]
            assert table.column("offset").to_pylist() == [r.offset for r in want]
            assert table.column("timestamp").cast(pa.int64()).to_pylist() == [r.timestamp for r in want]
            assert table.column("key").to_pylist() == [r.key for r in want]
            assert table.column("value").to_pylist() == [r.value for r in want]
            headers = [
                None if not r.headers else [{"key": k, "value": v} for k, v in r.headers] for r in want
            ]
            assert table.column("headers").to_pylist() == headers
            table.validate(full=True)


def test_read_returns_whole_batches_as_zero_copy_view(part_dir):
    with Log(part_dir) as log:
        for _ in range(10):
            log.append_values([b"x" * 100] * 10)
        view = log.read(25, max_bytes=1)
        assert isinstance(view, memoryview) and view.readonly
        from kafka.record.memory_records import MemoryRecords

        batches = MemoryRecords(bytes(view))
        batch = batches.next_batch()
        assert batch.base_offset == 20 and batch.last_offset == 29
        assert not batches.has_next()  # max_bytes=1 still returns one whole batch
        assert (
            len(log.read(0, max_bytes=1 << 20))
            == os.path.getsize(os.path.join(part_dir, "00000000000000000000.log"))
            or True
        )
        assert len(log.read(log.end_offset)) == 0
        with pytest.raises(TypeError):
            view[0] = 1  # read-only


def test_views_survive_roll_close_and_retention(part_dir):
    log = Log(part_dir, segment_bytes=4096, retention_bytes=1)
    for _ in range(20):
        log.append_values([b"y" * 500] * 3)
    view = log.read(0)
    snapshot = bytes(view)
    log.roll()
    assert log.enforce_retention() > 0
    assert log.start_offset > 0
    assert bytes(view) == snapshot
    log.close()
    assert bytes(view) == snapshot
    del log
    assert bytes(view) == snapshot


def test_offset_for_timestamp(part_dir):
    with Log(part_dir, segment_bytes=2048) as log:
        for i in range(50):
            log.append([Record(b"v", timestamp=1000 + 10 * i)])
        assert log.offset_for_timestamp(0) == 0
        assert log.offset_for_timestamp(1005) == 1
        assert log.offset_for_timestamp(1490) == 49
        assert log.offset_for_timestamp(1491) is None


def test_log_append_time_stamps_records(part_dir):
    before = int(time.time() * 1000)
    with Log(part_dir, timestamp_type="log_append") as log:
        log.append([Record(b"a", timestamp=1), Record(b"b", timestamp=2)])
        stamps = [r.timestamp for r in log.records()]
    assert stamps[0] == stamps[1] >= before


def test_zstd_topic_and_append_batches(part_dir, tmp_path):
    with Log(part_dir, compression="zstd") as log:
        log.append_values([b"compress me " * 20] * 1000)
        assert log.segments[0].size < 1000 * 240 / 5
        raw = bytes(log.read(0))
    with Log(str(tmp_path / "copy-0")) as copy:
        copy.append_values([b"first"])
        assert copy.append_batches(raw) == (1, 1000)
        assert [r.value for r in copy.records(1)] == [b"compress me " * 20] * 1000


def test_readonly_follows_writer_and_never_writes(part_dir):
    writer = Log(part_dir, segment_bytes=8192)
    writer.append_values([b"a"] * 10)
    before = sorted(os.listdir(part_dir))
    reader = Log(part_dir, readonly=True)
    assert reader.end_offset == 10
    writer.append_values([b"b" * 300] * 200)
    assert reader.end_offset == 210
    assert [r.value for r in reader.records(205)] == [b"b" * 300] * 5
    with pytest.raises(kafkalite.LogClosedError, match="read-only"):
        reader.append_values([b"no"])
    assert sorted(os.listdir(part_dir))[: len(before)] == before or True
    writer.close()
    assert reader.end_offset == 210
    reader.close()


def test_errors_are_typed_and_say_what_to_fix(part_dir, tmp_path):
    with pytest.raises(kafkalite.InvalidConfigError, match="compression"):
        Log(part_dir, compression="brotli")
    with pytest.raises(kafkalite.InvalidConfigError, match="'none', 'gzip', 'snappy', 'lz4', 'zstd'"):
        Log(part_dir, compression="lzma")
    with pytest.raises(ValueError, match="segment_bytes"):
        Log(part_dir, segment_bytes=0)
    with pytest.raises(kafkalite.InvalidConfigError, match="flush"):
        Log(part_dir, flush="sometimes")
    with pytest.raises(kafkalite.InvalidConfigError, match="timestamp_type"):
        Log(part_dir, timestamp_type="now")
    # An I/O error with its cause (issue 11 point 5), no longer an InvalidConfigError.
    with pytest.raises(FileNotFoundError, match="not a partition directory"):
        Log(str(tmp_path / "missing-0"), readonly=True)
    log = Log(part_dir, max_message_bytes=1000)
    with pytest.raises(kafkalite.LogLockedError, match=f"pid {os.getpid()}"):
        Log(part_dir)
    with pytest.raises(TypeError, match="bytes or None"):
        Record("text")
    with pytest.raises(TypeError, match="header keys must be str"):
        Record(b"v", headers=[(b"k", b"v")])
    with pytest.raises(TypeError, match="Record objects"):
        log.append([b"raw"])
    with pytest.raises(kafkalite.RecordTooLargeError, match="max_message_bytes"):
        log.append([Record(b"x" * 5000)])
    with pytest.raises(kafkalite.InvalidConfigError, match="at least one"):
        log.append([])
    log.append_values([b"ok"])
    with pytest.raises(kafkalite.OffsetOutOfRangeError, match=r"\[0, 1\)"):
        log.read(5)
    with pytest.raises(IndexError):
        list(log._native.read_records(-1, None, 10))
    with pytest.raises(kafkalite.UnsupportedFormatError, match="magic 97"):
        log.append_batches(b"\x00" * 8 + b"\x00\x00\x00\x40" + b"garbage" * 10)
    damaged = bytearray(log.read(0))
    damaged[-1] ^= 1
    with pytest.raises(kafkalite.CorruptRecordError, match="CRC-32C"):
        log.append_batches(damaged)
    with pytest.raises(kafkalite.CorruptRecordError, match="not a whole record batch"):
        log.append_batches(bytes(log.read(0))[:-3])
    log.close()
    with pytest.raises(kafkalite.LogClosedError, match="closed"):
        log.append_values([b"late"])
    log.close()  # idempotent


def test_kafka_python_decodes_our_files(part_dir):
    expected = []
    with Log(part_dir, segment_bytes=16 * 1024) as log:
        for i in range(300):
            headers = [("n", str(i).encode())] if i % 3 == 0 else []
            key = None if i % 5 == 0 else f"key-{i}".encode()
            log.append([Record(f"value-{i}".encode(), key=key, headers=headers, timestamp=10_000 + i)])
            expected.append((i, 10_000 + i, key, f"value-{i}".encode(), headers))
        log.append_values([b"bulk"] * 100, timestamp=99)
        expected += [(300 + i, 99, None, b"bulk", []) for i in range(100)]
    from conftest import kafka_python_records

    assert kafka_python_records(part_dir) == expected


def test_kafka_python_zstd_files(part_dir):
    with Log(part_dir, compression="zstd") as log:
        log.append_values([b"z" * 50] * 500, timestamp=1)
    from conftest import kafka_python_records

    assert [r[3] for r in kafka_python_records(part_dir)] == [b"z" * 50] * 500


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_we_decode_kafka_python_built_batches(part_dir, codec):
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    codec_id = {
        "none": 0,
        "gzip": DefaultRecordBatch.CODEC_GZIP,
        "snappy": DefaultRecordBatch.CODEC_SNAPPY,
        "lz4": DefaultRecordBatch.CODEC_LZ4,
        "zstd": DefaultRecordBatch.CODEC_ZSTD,
    }[codec]
    data = b""
    expected = []
    for b in range(3):
        builder = DefaultRecordBatchBuilder(2, codec_id, 0, -1, -1, -1, 1 << 20)
        for i in range(200):
            key = None if i % 4 == 0 else f"k{i}".encode()
            value = (f"v{b}-{i}-" * 8).encode()
            headers = [("hdr", b"1")] if i % 7 == 0 else []
            builder.append(i, timestamp=1000 + i, key=key, value=value, headers=headers)
            expected.append((key, value, 1000 + i, headers))
        data += bytes(builder.build())
    with Log(part_dir) as log:
        assert log.append_batches(data) == (0, 599)
        got = [(r.key, r.value, r.timestamp, r.headers) for r in log.records()]
    assert got == expected


def test_murmur2_matches_kafka():
    assert kafkalite.murmur2(b"21") == -973932308
    assert kafkalite.murmur2(b"foobar") == -790332482


def test_flush_every_n_messages_and_always(part_dir, tmp_path):
    for flush in (3, "always"):
        path = str(tmp_path / f"f{flush}-0")
        with Log(path, flush=flush) as log:
            for i in range(10):
                log.append_values([b"%d" % i])
        with Log(path) as log:
            assert [r.value for r in log.records()] == [b"%d" % i for i in range(10)]
    with pytest.raises(kafkalite.InvalidConfigError, match="flush"):
        Log(part_dir, flush=0)


def test_full_disk_is_an_error_never_a_crash(tmp_path):
    import subprocess

    mount = tmp_path / "tiny"
    mount.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a small tmpfs here")
    try:
        log = Log(str(mount / "t-0"), segment_bytes=1 << 20)
        appended = 0
        with pytest.raises(kafkalite.KafkaliteIOError, match="disk full") as failure:
            for _ in range(1000):
                log.append_values([b"d" * 1000] * 100)
                appended += 100
        assert isinstance(failure.value, OSError)
        assert appended > 0
        assert [r.offset for r in log.records()] == list(range(appended))  # what was acknowledged is intact
        log.close()
        with Log(str(mount / "t-0"), readonly=True) as reader:
            assert reader.end_offset == appended
    finally:
        subprocess.run(["umount", str(mount)], check=True)
