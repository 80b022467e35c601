"""``__consumer_offsets`` records in every version Kafka has written (OffsetCommitValue v0-v4,
v4 being Kafka 4.x's flexible version), other record types skipped, and clear errors for a
future version or damaged bytes."""

from __future__ import annotations

import struct

import pytest
from kafkalite.errors import CorruptRecordError, UnsupportedFormatError
from kafkalite.offsets import decode_key, decode_value, encode_key, encode_value


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
