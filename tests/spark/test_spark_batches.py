"""The Spark sink's stamped batches, built and checked by the engine (``Log.encode_batches``,
``Log.append_produce``): what kafka-python decodes from them, a replay that the engine
recognises and does not write again, the sequence wrap."""

from __future__ import annotations

import pytest
from kafkalite import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidTypeError,
    OutOfOrderSequenceNumberError,
)
from kafkalite.log import Log

default_records = pytest.importorskip("kafka.record.default_records")


def _kafka_python_batches(data: bytes) -> list:
    """Every batch of ``data`` as kafka-python's DefaultRecordBatch, its CRC checked."""
    out, pos = [], 0
    while pos < len(data):
        length = int.from_bytes(data[pos + 8 : pos + 12], "big")
        batch = default_records.DefaultRecordBatch(data[pos : pos + 12 + length])
        assert batch.validate_crc(), f"kafka-python rejects the CRC of the batch at byte {pos}"
        out.append(batch)
        pos += 12 + length
    return out


def test_stamped_batches_decode_with_kafka_python(tmp_path):
    values = [b"v%04d" % i + b"." * 200 for i in range(30)]
    keys = [b"k%d" % i if i % 3 else None for i in range(30)]
    headers = [[("h", b"x%d" % i)] if i % 2 else [] for i in range(30)]
    first = (1 << 31) - 5  # the run wraps: Int.MaxValue -> 0, as Kafka's sequences do
    with Log(str(tmp_path / "t-0"), max_message_bytes=1024) as log:
        data = log.encode_batches(
            values, keys, headers, producer_id=77, producer_epoch=2, base_sequence=first
        )
        assert log.end_offset == 0  # encoded, not appended
    batches = _kafka_python_batches(data)
    assert len(batches) > 2
    decoded, records = [], 0
    for batch in batches:
        assert (batch.producer_id, batch.producer_epoch) == (77, 2)
        assert batch.base_sequence == (first + records) % (1 << 31)
        assert batch.base_offset == records
        for r in batch:
            decoded.append((r.offset, r.key, r.value, [tuple(h) for h in r.headers]))
        records += batch.next_offset - batch.base_offset
    assert decoded == [
        (i, k, v, [(hk, hv) for hk, hv in h])
        for i, (k, v, h) in enumerate(zip(keys, values, headers, strict=True))
    ]
    assert any(b.base_sequence < 5 for b in batches)


def test_a_replayed_append_is_a_duplicate_and_writes_nothing(tmp_path):
    path = str(tmp_path / "t-0")
    with Log(path, shared_writers=True) as log, Log(path, shared_writers=True) as other:
        data = log.encode_batches([b"a", b"b", b"c"], producer_id=5, producer_epoch=0, base_sequence=0)
        assert log.append_produce(data) == (0, 2, False)
        other.append_values([b"someone else"])
        assert log.end_offset == 4  # (follows the other writer)
        before = bytes(log.read(0))
        # The same commit replayed, by this writer and by another process's handle.
        assert other.append_produce(data) == (0, 2, True)
        assert log.append_produce(data) == (0, 2, True)
        assert log.end_offset == other.end_offset == 4 and bytes(log.read(0)) == before
        # A gap and an older epoch are refused with Kafka's errors, nothing written.
        gap = log.encode_batches([b"e"], producer_id=5, producer_epoch=0, base_sequence=4)
        with pytest.raises(OutOfOrderSequenceNumberError, match="out of order sequence"):
            log.append_produce(gap)
        newer = log.encode_batches([b"d"], producer_id=5, producer_epoch=1, base_sequence=0)
        assert log.append_produce(newer) == (4, 4, False)
        older = log.encode_batches([b"x"], producer_id=5, producer_epoch=0, base_sequence=3)
        with pytest.raises(InvalidProducerEpochError, match="epoch 0"):
            other.append_produce(older)
        assert log.end_offset == 5
        assert [i.producer_id for i in log.batch_headers(0)] == [5, -1, 5]
        assert log.producer_sequence(5) == (1, 0)


def test_bad_input_is_refused_with_typed_errors(tmp_path):
    with Log(str(tmp_path / "t-0"), compact=True) as log:
        with pytest.raises(InvalidTypeError, match="bytes"):
            log.encode_batches(["text"])
        with pytest.raises(ValueError, match="keys has 1 entries for 2 values"):
            log.encode_batches([b"a", b"b"], [b"k"])
        with pytest.raises(ValueError, match="key"):  # a compacted topic needs keys
            log.encode_batches([b"a"])
        with pytest.raises(ValueError, match="producer_epoch"):
            log.encode_batches([b"a"], [b"k"], producer_id=1, producer_epoch=-1, base_sequence=0)
        with pytest.raises(ValueError, match="at least one record"):
            log.encode_batches([])
        with pytest.raises(CorruptRecordError, match="not a whole record batch"):
            log.append_produce(b"\x00" * 70)
        assert log.end_offset == 0
