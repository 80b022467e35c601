"""A directory shaped like a live Kafka broker's partition: batches written by kafka-python's
builder (as a producer sends them, re-offset as a broker stores them), a segment whose base
offset is not 0, an untrimmed zero-filled 10 MiB `.index` (a live or crashed broker's active
segment), broker files we do not know, and a control batch. kafkalite reads it read-only and
recovers it as a writer."""

from __future__ import annotations

import os
import struct

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafkalite import Log


def broker_batch(base_offset: int, values: list[bytes], ts: int, codec: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    for i, v in enumerate(values):
        builder.append(i, timestamp=ts + i, key=b"k%d" % i, value=v, headers=[])
    data = bytearray(builder.build())
    data[0:8] = struct.pack(">q", base_offset)  # the broker assigns offsets; not CRC-covered
    return bytes(data)


def control_batch(base_offset: int, ts: int) -> bytes:
    """A COMMIT marker as a transaction coordinator writes it: attributes 0x30 (transactional,
    control), one record with key (version 0, type 1) and value (version 0, epoch 0)."""
    from kafka.record.util import calc_crc32c, encode_varint

    key, value = struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0)
    body = bytearray(b"\x00")  # attributes
    for v in (0, 0):  # timestampDelta, offsetDelta
        encode_varint(v, body.append)
    encode_varint(len(key), body.append)
    body += key
    encode_varint(len(value), body.append)
    body += value
    encode_varint(0, body.append)  # headers
    record = bytearray()
    encode_varint(len(body), record.append)
    record += body
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, ts, ts, 42, 0, -1, 1) + bytes(record)
    crc = calc_crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, 0, 2, crc) + after_crc


def write_broker_partition(path: str) -> list[tuple[int, bytes]]:
    os.makedirs(path)
    expected = []
    first_base = 1000  # earlier segments were deleted by retention
    seg1, seg2 = b"", b""
    offset = first_base
    for b in range(30):
        if b == 15:  # a transaction marker takes an offset but is no data record
            seg1 += control_batch(offset, 1_700_000_000_000 + offset)
            offset += 1
        values = [f"broker-{offset + i}".encode() for i in range(10)]
        seg1 += broker_batch(offset, values, 1_700_000_000_000 + offset, codec=3 if b % 2 else 0)
        expected += [(offset + i, v) for i, v in enumerate(values)]
        offset += 10
    second_base = offset
    for _ in range(5):
        values = [f"broker-{offset + i}".encode() for i in range(10)]
        seg2 += broker_batch(offset, values, 1_700_000_000_000 + offset)
        expected += [(offset + i, v) for i, v in enumerate(values)]
        offset += 10
    names = {first_base: seg1, second_base: seg2}
    for base, data in names.items():
        open(os.path.join(path, f"{base:020d}.log"), "wb").write(data)
    # Sealed segment: empty trimmed indexes (fine: lookups scan). Active segment: untrimmed.
    open(os.path.join(path, f"{first_base:020d}.index"), "wb").close()
    open(os.path.join(path, f"{first_base:020d}.timeindex"), "wb").close()
    open(os.path.join(path, f"{second_base:020d}.index"), "wb").write(b"\0" * 10485760)
    open(os.path.join(path, f"{second_base:020d}.timeindex"), "wb").write(b"\0" * 10485756)
    open(os.path.join(path, "leader-epoch-checkpoint"), "w").write("0\n1\n0 1000\n")
    open(os.path.join(path, "partition.metadata"), "w").write("version: 0\ntopic_id: B3_HiNPgSQ6oxG9ZZ6ED5A")
    return expected


def test_read_only_open_of_a_broker_directory(tmp_path):
    path = str(tmp_path / "orders-3")
    expected = write_broker_partition(path)
    from conftest import kafka_python_records

    assert [(r[0], r[3]) for r in kafka_python_records(path)] == expected  # the fixture itself is valid Kafka
    with Log(path, readonly=True) as log:
        assert log.start_offset == 1000
        assert log.end_offset == 1351
        assert [(r.offset, r.value) for r in log.records()] == expected
        assert [(r.offset, r.value) for r in log.records(1298, 1304)] == expected[297:303]
        assert log.offset_for_timestamp(1_700_000_000_000 + 1334) == 1334
        assert log.read_arrow(1000).num_rows == 350


def test_writer_adopts_a_broker_directory(tmp_path):
    path = str(tmp_path / "orders-3")
    expected = write_broker_partition(path)
    with Log(path) as log:  # no clean-shutdown marker of ours: the active segment is recovered
        assert log.end_offset == 1351
        log.append_values([b"after"])
        assert [(r.offset, r.value) for r in log.records()] == expected + [(1351, b"after")]
    second = os.path.join(path, "00000000000000001301.index")
    assert os.path.getsize(second) % 8 == 0 and os.path.getsize(second) < 10485760
