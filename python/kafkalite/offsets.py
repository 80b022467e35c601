"""Committed offsets, stored as Kafka stores them: in the compacted topic ``__consumer_offsets``
(50 partitions; a group lives in partition ``abs(javaHash(group_id)) % 50``), with Kafka's own
binary key (OffsetCommitKey v1: group, topic, partition) and value (OffsetCommitValue v3:
offset, leader epoch, metadata, commit timestamp). Deleting a group writes tombstones, which
compaction removes after ``delete.retention.ms``. Offsets follow Kafka's meaning: the next
offset to read.

Each store keeps the group's offsets in memory and reads only what was appended since its last
look, so ``load`` is cheap; commits are appended with ``flush="always"`` (durable when the call
returns) by a shared writer, so any number of processes can commit at once.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Mapping

from kafkalite.compaction import clean_if_dirty
from kafkalite.datadir import DataDir
from kafkalite.errors import (
    CorruptRecordError,
    InvalidConfigError,
    TopicAlreadyExistsError,
    UnsupportedFormatError,
)
from kafkalite.log import Log, Record

OFFSETS_TOPIC = "__consumer_offsets"
#: Kafka's offsets.topic.num.partitions and offsets.topic.segment.bytes.
OFFSETS_PARTITIONS = 50
OFFSETS_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024}
#: How often a committing store checks whether its partition needs compaction.
CLEAN_CHECK_SECONDS = 15.0

Offsets = dict[tuple[str, int], tuple[int, str]]


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit wrap), as a signed int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group_id: str) -> int:
    """Kafka's ``GroupCoordinator.partitionFor``: ``Utils.abs(groupId.hashCode) % 50``."""
    h = java_string_hash(group_id)
    return 0 if h == -(1 << 31) else abs(h) % OFFSETS_PARTITIONS


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise InvalidConfigError(f"{s[:40]!r}... is longer than Kafka's 32767-byte strings")
    return struct.pack(">h", len(raw)) + raw


def encode_key(group_id: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", 1) + _string(group_id) + _string(topic) + struct.pack(">i", partition)


def encode_value(offset: int, metadata: str, timestamp_ms: int) -> bytes:
    return struct.pack(">hqi", 3, offset, -1) + _string(metadata) + struct.pack(">q", timestamp_ms)


def _read_string(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", buf, pos)
    if n < 0 or pos + 2 + n > len(buf):
        raise struct.error(f"string of {n} bytes at {pos} does not fit a {len(buf)}-byte record")
    return buf[pos + 2 : pos + 2 + n].decode("utf-8"), pos + 2 + n


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint (Kafka's flexible versions: compact lengths, tagged fields)."""
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise struct.error(f"bad unsigned varint at {pos}")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _read_compact_string(buf: bytes, pos: int) -> tuple[str, int]:
    n, pos = _read_uvarint(buf, pos)
    if n == 0 or pos + n - 1 > len(buf):
        raise struct.error(f"compact string of length {n - 1} at {pos} does not fit a {len(buf)}-byte record")
    return buf[pos : pos + n - 1].decode("utf-8"), pos + n - 1


#: Record types of `__consumer_offsets` keys (the key's leading int16): 0 and 1 are offset
#: commits (OffsetCommitKey), 2 is group metadata, 3+ are the KIP-848 consumer/share group
#: records of Kafka 4.x's group coordinator. Only offset commits carry offsets.
OFFSET_COMMIT_KEY_TYPES = (0, 1)
#: OffsetCommitValue versions Kafka has written: 0-3 fixed, 4 flexible (Kafka 4.x).
MAX_OFFSET_COMMIT_VALUE_VERSION = 4


def decode_key(key: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset commit key; None for the other record types
    (group metadata and the newer group records), which hold no offsets."""
    (version,) = struct.unpack_from(">h", key, 0)
    if version not in OFFSET_COMMIT_KEY_TYPES:
        return None
    try:
        group, pos = _read_string(key, 2)
        topic, pos = _read_string(key, pos)
        (partition,) = struct.unpack_from(">i", key, pos)
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptRecordError(
            f"{OFFSETS_TOPIC} holds an offset commit key that does not decode: {e}"
        ) from None
    return group, topic, partition


def decode_value(value: bytes) -> tuple[int, str]:
    """(offset, metadata) of OffsetCommitValue v0-v4 (Kafka's OffsetCommitValue.json: v1 adds
    expireTimestamp, v3 leaderEpoch, v4 is the first flexible version: compact string and
    tagged fields, as Kafka 4.x writes)."""
    try:
        (version,) = struct.unpack_from(">h", value, 0)
        if not 0 <= version <= MAX_OFFSET_COMMIT_VALUE_VERSION:
            raise UnsupportedFormatError(
                f"{OFFSETS_TOPIC} holds an OffsetCommitValue of version {version}; kafkalite reads versions "
                f"0-{MAX_OFFSET_COMMIT_VALUE_VERSION} (a newer Kafka wrote it: upgrade kafkalite)"
            )
        (offset,) = struct.unpack_from(">q", value, 2)
        pos = 10 + (4 if version >= 3 else 0)  # leaderEpoch from v3 on
        metadata, _ = _read_compact_string(value, pos) if version >= 4 else _read_string(value, pos)
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptRecordError(
            f"{OFFSETS_TOPIC} holds an OffsetCommitValue that does not decode: {e}"
        ) from None
    return offset, metadata


def ensure_offsets_topic(data_dir: DataDir) -> None:
    if OFFSETS_TOPIC not in data_dir.topics():
        try:
            data_dir.create(OFFSETS_TOPIC, OFFSETS_PARTITIONS, OFFSETS_CONFIG)
        except TopicAlreadyExistsError:
            pass  # another process created it first


class OffsetStore:
    """One group's committed offsets."""

    def __init__(self, data_dir: str | DataDir, group_id: str) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise InvalidConfigError(f"group_id must be a non-empty str, not {group_id!r}")
        self._dir = data_dir if isinstance(data_dir, DataDir) else DataDir(data_dir)
        self.group_id = group_id
        self.partition = offsets_partition(group_id)
        self._prefixes = tuple(struct.pack(">h", t) + _string(group_id) for t in OFFSET_COMMIT_KEY_TYPES)
        self._offsets: Offsets = {}
        self._read_to = 0
        self._writer: Log | None = None
        self._reader: Log | None = None
        self._mutex = threading.Lock()
        self._next_clean_check = time.monotonic() + CLEAN_CHECK_SECONDS

    def _path(self) -> str:
        return self._dir.partition_path(OFFSETS_TOPIC, self.partition)

    def load(self) -> Offsets:
        """``{(topic, partition): (offset, metadata)}``, including commits from other processes."""
        with self._mutex:
            self._catch_up()
            return dict(self._offsets)

    def _catch_up(self) -> None:
        if self._reader is None:
            if not os.path.isdir(self._path()):
                return
            self._reader = Log(self._path(), readonly=True)
        log = self._reader
        start = max(self._read_to, log.start_offset)
        end = log.end_offset
        if start >= end:
            return
        for r in log.records(start, end):
            key = r.key
            if key is not None and key.startswith(self._prefixes):
                decoded = decode_key(key)
                if decoded is not None and decoded[0] == self.group_id:
                    tp = (decoded[1], decoded[2])
                    if r.value is None:
                        self._offsets.pop(tp, None)
                    else:
                        self._offsets[tp] = decode_value(r.value)
        self._read_to = end

    def _log(self) -> Log:
        if self._writer is None:
            ensure_offsets_topic(self._dir)
            self._writer = self._dir.open_partition(
                OFFSETS_TOPIC, self.partition, shared_writers=True, flush="always"
            )
        return self._writer

    def commit(self, offsets: Offsets) -> None:
        """Store ``offsets`` durably (one batch, so all or nothing)."""
        self._append(offsets)

    def delete(self, partitions: list[tuple[str, int]] | None = None) -> int:
        """Tombstone the group's offsets (all of them by default). Returns how many."""
        targets = list(self.load()) if partitions is None else partitions
        if targets:
            self._append({tp: None for tp in targets})
        return len(targets)

    def _append(self, entries: Mapping[tuple[str, int], tuple[int, str] | None]) -> None:
        if not entries:
            return
        now = int(time.time() * 1000)
        records = [
            Record(
                None if om is None else encode_value(om[0], om[1], now),
                key=encode_key(self.group_id, t, p),
                timestamp=now,
            )
            for (t, p), om in sorted(entries.items())
        ]
        with self._mutex:
            log = self._log()
            log.append(records)
            if time.monotonic() >= self._next_clean_check:
                self._next_clean_check = time.monotonic() + CLEAN_CHECK_SECONDS
                clean_if_dirty(log, self._dir.effective_config(OFFSETS_TOPIC))

    def close(self) -> None:
        for log in (self._writer, self._reader):
            if log is not None:
                log.close()
        self._writer = self._reader = None

    def __enter__(self) -> OffsetStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
