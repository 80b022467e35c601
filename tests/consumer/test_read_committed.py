"""isolation_level=read_committed (Kafka's): records of aborted transactions are hidden, control
batches never show, and reads stop at the last stable offset (the first offset of a transaction
still open). Partitions are built as a broker stores transactional producers' batches
(tests/support/txn_partition.py), with an independent model of what each isolation level returns."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest
from kafkalite import (
    Consumer,
    CorruptRecordError,
    InvalidConfigError,
    InvalidTypeError,
    Log,
    TopicPartition,
)
from txn_partition import INTERLEAVED, A, B, Data, Marker, TxnPartition

LEVELS = ["read_uncommitted", "read_committed"]


def _partition(tmp_path, steps=INTERLEAVED) -> TxnPartition:
    part = TxnPartition(str(tmp_path / "data" / "tx-0"))
    part.run(steps)
    return part


def _poll_all(consumer: Consumer) -> list[tuple[int, bytes]]:
    got = []
    while True:
        batch = consumer.poll(timeout_ms=0, max_records=3)  # small polls: runs cut at aborted batches
        if not batch:
            return got
        got += [(r.offset, r.value) for rs in batch.values() for r in rs]


@pytest.mark.parametrize("level", LEVELS)
def test_consumer_reads_interleaved_transactions(tmp_path, level):
    part = _partition(tmp_path)
    expected = part.expected(level == "read_committed")
    assert part.expected(True) != part.expected(False)  # the fixture has aborted records
    with Consumer(
        str(tmp_path / "data"), "tx", auto_offset_reset="earliest", isolation_level=level
    ) as consumer:
        assert _poll_all(consumer) == expected
        assert consumer.position(TopicPartition("tx", 0)) == part.offset  # past the last marker
    with Consumer(
        str(tmp_path / "data"),
        "tx",
        auto_offset_reset="earliest",
        isolation_level=level,
        consumer_timeout_ms=200,
    ) as consumer:
        assert [(r.offset, r.value) for r in consumer] == expected
    with Consumer(
        str(tmp_path / "data"), "tx", auto_offset_reset="earliest", isolation_level=level
    ) as consumer:
        got = []
        while batches := consumer.poll_arrow(max_records=4):
            for batch in batches.values():
                got += list(
                    zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True)
                )
        assert got == expected


def test_log_reads_and_aborted_transactions(tmp_path):
    part = _partition(tmp_path)
    with Log(part.path, readonly=True) as log:
        assert [(r.offset, r.value) for r in log.committed_records()] == part.expected(True)
        assert [(r.offset, r.value) for r in log.records()] == part.expected(False)
        assert log.last_stable_offset == log.end_offset == part.offset
        aborted = log.aborted_transactions()
        assert [(t.producer_id, t.last_offset) for t in aborted] == [
            (pid, o) for o, pid, c in part.markers if not c
        ]
        # B's first transaction began at offset 4 (after 2 plain and A's 2); A's second at 13.
        assert [t.first_offset for t in aborted][:2] == [4, 13]
        # Reads starting inside a transaction, and ending inside one.
        for start in range(part.offset):
            for end in (start + 1, start + 4, part.offset):
                want = [x for x in part.expected(True) if start <= x[0] < end]
                assert [(r.offset, r.value) for r in log.committed_records(start, end)] == want, (start, end)


def test_an_open_transaction_stops_read_committed_at_the_lso(tmp_path):
    part = _partition(tmp_path)
    data = str(tmp_path / "data")
    tp = TopicPartition("tx", 0)
    part.run([Data(B, 2), Data(None, 2), Data(A, 1), Marker(A, commit=True)])  # B's transaction stays open
    lso = part.lso
    assert lso < part.offset
    committed = Consumer(data, "tx", auto_offset_reset="earliest", isolation_level="read_committed")
    uncommitted = Consumer(data, "tx", auto_offset_reset="earliest")
    latest = Consumer(data, "tx", auto_offset_reset="latest", isolation_level="read_committed")
    try:
        assert committed.end_offsets([tp]) == {tp: lso}
        assert uncommitted.end_offsets([tp]) == {tp: part.offset}
        assert latest.position(tp) == lso  # Kafka's "latest" under read_committed is the LSO
        got = _poll_all(committed)
        assert got == part.expected(True) and all(o < lso for o, _ in got)
        assert committed.position(tp) == lso
        assert committed.poll(timeout_ms=50) == {}
        assert _poll_all(uncommitted) == part.expected(False)
        # B commits: everything up to the log end becomes readable, the cache follows the log.
        part.run([Marker(B, commit=True), Data(None, 1)])
        assert committed.end_offsets([tp]) == {tp: part.offset}
        assert got + _poll_all(committed) == part.expected(True)
        assert _poll_all(latest) == [x for x in part.expected(True) if x[0] >= lso]
    finally:
        for c in (committed, uncommitted, latest):
            c.close()


def test_txnindex_entries_are_used(tmp_path):
    """A broker's `.txnindex` says which transactions were aborted, also where the log no longer
    holds the marker: without the index, B's aborted batches would run on into its next
    transaction and count as committed."""
    part = _partition(tmp_path)
    with Log(part.path, readonly=True) as log:
        full = log.aborted_transactions()
    first_abort = next(t for t in full if t.producer_id == B)
    seg = os.path.join(part.path, f"{0:020d}.log")
    data = bytearray(Path(seg).read_bytes())
    # Drop the ABORT marker of B's first transaction (keep offsets: a gap, as cleaning leaves).
    pos = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if base == first_abort.last_offset:
            del data[pos : pos + 12 + length]
            break
        pos += 12 + length
    stripped = tmp_path / "stripped-0"
    shutil.copytree(part.path, stripped)
    (stripped / f"{0:020d}.log").write_bytes(data)
    want = [x for x in part.expected(True) if x[0] != first_abort.last_offset]
    with Log(str(stripped), readonly=True) as log:
        wrong = [(r.offset, r.value) for r in log.committed_records()]
        assert (first_abort.first_offset, b"v%d" % first_abort.first_offset) in wrong
    entry = struct.pack(">hqqqq", 0, *first_abort)
    (stripped / f"{0:020d}.txnindex").write_bytes(entry)
    with Log(str(stripped), readonly=True) as log:
        assert log.last_stable_offset == part.offset
        assert [(r.offset, r.value) for r in log.committed_records()] == want
        assert log.aborted_transactions() == full  # the index entry and the marker-derived ones
    # An index that agrees with the markers changes nothing (entries are not counted twice).
    Path(part.path, f"{0:020d}.txnindex").write_bytes(entry)
    with Log(part.path, readonly=True) as log:
        assert log.aborted_transactions() == full
        assert [(r.offset, r.value) for r in log.committed_records()] == part.expected(True)


@pytest.mark.parametrize(
    "damage",
    [b"\x00" * 33, struct.pack(">hqqqq", 7, A, 0, 3, 4), struct.pack(">hqqqq", 0, A, 9, 3, 4)],
    ids=["partial-entry", "unknown-version", "first-after-last"],
)
def test_a_damaged_txnindex_is_a_typed_error(tmp_path, damage):
    part = _partition(tmp_path)
    index = os.path.join(part.path, f"{0:020d}.txnindex")
    Path(index).write_bytes(damage)
    with Log(part.path, readonly=True) as log:
        assert [(r.offset, r.value) for r in log.records()] == part.expected(
            False
        )  # read_uncommitted ignores it
        with pytest.raises(CorruptRecordError, match="txnindex"):
            list(log.committed_records())


def test_isolation_level_is_validated(tmp_path):
    _partition(tmp_path)
    data = str(tmp_path / "data")
    with pytest.raises(InvalidConfigError, match="read_committed"):
        Consumer(data, "tx", isolation_level="READ_COMMITTED")
    with pytest.raises(InvalidTypeError):
        Consumer(data, "tx", isolation_level=1)
    with Consumer(data, "tx") as consumer:  # kafka-python's default
        assert consumer.config["isolation_level"] == "read_uncommitted"


def test_every_native_reader_takes_one_isolation_level(tmp_path):
    """One set of native readers with an isolation_level (no read_committed_* twins): each
    answers as its level's model says, and an unknown level is a typed error naming both."""
    part = _partition(tmp_path)
    with Log(part.path, readonly=True) as log:
        native = log._native
        for level in LEVELS:
            want = part.expected(level == "read_committed")
            records, _ = native.read_records(0, None, 1000, isolation_level=level)
            assert [(r.offset, r.value) for r in records] == want, level
            consumer_records, _ = native.read_consumer_records("tx", 0, 0, 1000, isolation_level=level)
            assert [(r.offset, r.value) for r in consumer_records] == want, level
            batch, _ = native.read_arrow(0, None, 1000, isolation_level=level)
            assert len(batch) == len(want), level
        assert not any(name.startswith("read_committed_") for name in dir(native))
        for reader in (
            lambda: native.read_records(0, isolation_level="READ_COMMITTED"),
            lambda: native.read_arrow(0, isolation_level="committed"),
            lambda: native.read_consumer_records("tx", 0, 0, isolation_level=""),
            lambda: native.read_spark_arrow("tx", 0, 0, isolation_level="x"),
        ):
            with pytest.raises(InvalidConfigError, match="read_uncommitted.*read_committed"):
                reader()


def test_spark_option_and_planning(tmp_path):
    """kafka.isolation.level parsed as Spark's Kafka source does; "latest" is the LSO under
    read_committed. (Spark reads themselves: tests/spark/test_read_committed_spark.py.)"""
    from kafkalite.spark.options import SparkOptionError, parse
    from kafkalite.spark.planning import PartitionView

    part = _partition(tmp_path)
    part.run([Data(B, 2), Data(None, 1)])
    base = {"path": str(tmp_path / "data"), "subscribe": "tx"}
    assert parse(base, streaming=False).read_committed is False
    with pytest.raises(SparkOptionError, match="isolation.level"):
        parse({**base, "kafka.isolation.level": "committed"}, streaming=False)
    for level, end in (("read_uncommitted", part.offset), ("read_committed", part.lso)):
        view = PartitionView(parse({**base, "kafka.isolation.level": level}, streaming=False))
        try:
            assert view.resolve(view.options.ending, [("tx", 0)], starting=False) == {("tx", 0): end}
        finally:
            view.close()


def _flip_marker_byte(part: TxnPartition, marker_offset: int) -> None:
    """Damage the last byte (inside the CRC-covered record) of the marker at ``marker_offset``."""
    seg = Path(part.path, f"{0:020d}.log")
    data = bytearray(seg.read_bytes())
    pos = 0
    while True:
        base, length = struct.unpack_from(">qi", data, pos)
        if base == marker_offset:
            break
        pos += 12 + length
    end = pos + 12 + length - 1
    with open(seg, "r+b") as f:  # in place: readers map this file
        f.seek(end)
        f.write(bytes([data[end] ^ 0xFF]))


def test_a_damaged_marker_is_a_typed_error_under_read_committed(tmp_path):
    part = _partition(tmp_path)
    _flip_marker_byte(part, part.markers[0][0])
    with Log(part.path, readonly=True) as log:
        assert [(r.offset, r.value) for r in log.records()] == part.expected(False)  # markers are skipped
        with pytest.raises(CorruptRecordError, match="CRC"):
            list(log.committed_records())


def test_polls_do_not_rescan_the_log(tmp_path):
    """The transaction state is learnt once and then only from new batches: damage to a marker
    already read does not reach later polls (a fresh reader sees it)."""
    part = _partition(tmp_path)
    data = str(tmp_path / "data")
    with Consumer(data, "tx", auto_offset_reset="earliest", isolation_level="read_committed") as consumer:
        first = _poll_all(consumer)
        _flip_marker_byte(part, part.markers[0][0])
        part.run([Data(A, 1), Marker(A, commit=True), Data(None, 1)])
        assert first + _poll_all(consumer) == part.expected(True)
    with (
        pytest.raises(CorruptRecordError),
        Consumer(data, "tx", auto_offset_reset="earliest", isolation_level="read_committed") as consumer,
    ):
        consumer.poll()
