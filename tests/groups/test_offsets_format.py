"""``__consumer_offsets`` records in every version Kafka has written (OffsetCommitValue v0-v4,
v4 being Kafka 4.x's flexible version), other record types skipped, and clear errors for a
future version or damaged bytes; real records of a Kafka 4.1 broker (tests/support/vectors/
consumer_offsets.json) both ways. The codec is the engine's (rust/src/coordination/offsets_codec.rs), the
one the wire-protocol server uses."""

from __future__ import annotations

import json
import os
import struct

import pytest
from kafkalite.errors import CorruptRecordError, InvalidConfigError, UnsupportedFormatError
from kafkalite.groups.offsets import decode_key, decode_value, encode_key, encode_value, offsets_partition

BROKER = json.load(
    open(
        os.path.join(os.path.dirname(__file__), os.pardir, "support", "vectors", "consumer_offsets.json"),
        encoding="utf-8",
    )
)


def _string(s: bytes) -> bytes:
    return struct.pack(">h", len(s)) + s


@pytest.mark.parametrize(
    "raw",
    [
        struct.pack(">hq", 0, 42) + _string(b"meta") + struct.pack(">q", 1_700_000_000_000),
        struct.pack(">hq", 1, 42) + _string(b"meta") + struct.pack(">qq", 1_700_000_000_000, -1),
        struct.pack(">hq", 2, 42) + _string(b"meta") + struct.pack(">q", 1_700_000_000_000),
        struct.pack(">hqi", 3, 42, 5) + _string(b"meta") + struct.pack(">q", 1_700_000_000_000),
        # v4: compact string (length + 1 as an unsigned varint), then an empty tagged-field section.
        struct.pack(">hqi", 4, 42, 5) + bytes([5]) + b"meta" + struct.pack(">q", 1_700_000_000_000) + b"\x00",
    ],
    ids=["v0", "v1", "v2", "v3", "v4"],
)
def test_every_offset_commit_value_version(raw):
    assert decode_value(raw) == (42, "meta")


def test_our_own_encoding_round_trips():
    assert decode_value(encode_value(7, "", 1)) == (7, "")
    assert decode_key(encode_key("g", "t", 3)) == ("g", "t", 3)
    assert decode_key(struct.pack(">h", 0) + _string(b"g") + _string(b"t") + struct.pack(">i", 3)) == (
        "g",
        "t",
        3,
    )


@pytest.mark.parametrize("record_type", [2, 3, 4, 5, 6, 7, 8, 9, 10])
def test_other_record_types_hold_no_offsets(record_type):
    assert decode_key(struct.pack(">h", record_type) + _string(b"g")) is None


def test_a_future_version_names_itself():
    with pytest.raises(UnsupportedFormatError, match="version 5"):
        decode_value(struct.pack(">hqi", 5, 42, 5) + bytes([1]) + struct.pack(">q", 0) + b"\x00")


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x03\x00",
        struct.pack(">hqi", 3, 1, -1) + struct.pack(">h", 100) + b"ab",
        struct.pack(">hqi", 4, 1, -1) + b"\xff\xff\xff\xff\xff\xff",
    ],
)
def test_damaged_values_are_corrupt_record_errors(raw):
    with pytest.raises(CorruptRecordError):
        decode_value(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00",  # not even a record type
        struct.pack(">h", 1) + _string(b"g"),  # topic and partition missing
        struct.pack(">h", 1) + struct.pack(">h", -1) + _string(b"t") + struct.pack(">i", 0),
        struct.pack(">h", 0) + _string(b"\xff\xfe") + _string(b"t") + struct.pack(">i", 0),
    ],
    ids=["empty", "one-byte", "truncated", "null-group", "not-utf8"],
)
def test_damaged_keys_are_corrupt_record_errors(raw):
    with pytest.raises(CorruptRecordError, match="__consumer_offsets"):
        decode_key(raw)


def test_strings_longer_than_kafkas_are_invalid_config():
    with pytest.raises(InvalidConfigError, match="32767"):
        encode_key("g" * 40_000, "t", 0)
    with pytest.raises(InvalidConfigError, match="32767"):
        encode_value(1, "m" * 40_000, 0)
    with pytest.raises(InvalidConfigError, match="int32"):
        encode_key("g", "t", 1 << 31)


def _broker_records():
    return [
        (bytes.fromhex(r["key_hex"]), None if r["value_hex"] is None else bytes.fromhex(r["value_hex"]))
        for r in BROKER["records"]
    ]


def test_a_kafka_brokers_records_decode():
    """Group metadata (type 2) holds no offsets; the two commits are OffsetCommitValue v4."""
    assert {r["partition"] for r in BROKER["records"]} == {
        f"__consumer_offsets-{offsets_partition('billing')}"
    }
    commits = []
    for key, value in _broker_records():
        decoded = decode_key(key)
        if decoded is None:
            assert key[:2] == b"\x00\x02"
            continue
        assert decoded == ("billing", "orders", 0)
        assert value[:2] == b"\x00\x04"
        commits.append(decode_value(value))
    assert commits == [(7, "nöte"), (10, "")]


def test_what_kafkalite_writes_is_the_brokers_layout():
    """The key is the broker's byte for byte (OffsetCommitKey v1 on both sides); the value is
    the broker's v4 fields in Kafka's v3 layout (int16-length string, no tagged fields)."""
    for key, value in _broker_records():
        if decode_key(key) is None:
            continue
        assert encode_key("billing", "orders", 0) == key
        offset, metadata = decode_value(value)
        raw = metadata.encode()
        assert value[2:10] == struct.pack(">q", offset) and value[10:14] == struct.pack(">i", -1)
        (timestamp,) = struct.unpack_from(">q", value, 14 + 1 + len(raw))
        v3 = struct.pack(">hqi", 3, offset, -1) + _string(raw) + struct.pack(">q", timestamp)
        assert encode_value(offset, metadata, timestamp) == v3
        assert decode_value(v3) == (offset, metadata)
