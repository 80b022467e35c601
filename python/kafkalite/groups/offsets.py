"""Committed offsets, stored as Kafka stores them: in the compacted topic ``__consumer_offsets``
(50 partitions; a group lives in partition ``abs(javaHash(group_id)) % 50``), with Kafka's own
binary key (OffsetCommitKey v1: group, topic, partition) and value (OffsetCommitValue v3:
offset, leader epoch, metadata, commit timestamp), encoded and decoded by the engine's codec
(``rust/src/coordination/offsets_codec.rs``), the one the wire-protocol server uses. Deleting a group
writes tombstones, which compaction removes after ``delete.retention.ms``. Offsets follow
Kafka's meaning: the next offset to read.

Each store reads the group's commits through the engine's reader (``rust/src/coordination/committed_offsets.rs``,
the server's too: Kafka's rules for transactional commits), which keeps them in memory and reads
only what was appended since its last look, so ``load`` is cheap; commits are appended with ``flush="always"`` (durable when the call
returns) by a shared writer, so any number of processes can commit at once.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from kafkalite import _native
from kafkalite.compaction import clean_if_dirty
from kafkalite.datadir import DataDir
from kafkalite.errors import InvalidConfigError, TopicAlreadyExistsError
from kafkalite.log import Log, Record

#: The topic, its partition count and the record types and versions are the engine's
#: (``rust/src/coordination/offsets_codec.rs``), which the wire-protocol server encodes with too.
OFFSETS_TOPIC: str = _native.OFFSETS_TOPIC
OFFSETS_PARTITIONS: int = _native.OFFSETS_PARTITIONS
OFFSET_COMMIT_KEY_TYPES: tuple[int, ...] = tuple(_native.OFFSET_COMMIT_KEY_TYPES)
MAX_OFFSET_COMMIT_VALUE_VERSION: int = _native.MAX_OFFSET_COMMIT_VALUE_VERSION
#: The offsets topic's config as created (compacted, Kafka's offsets.topic.segment.bytes): the engine's.
OFFSETS_CONFIG: dict[str, Any] = _native.OFFSETS_TOPIC_CONFIG
#: How often a committing store checks whether its partition needs compaction.
CLEAN_CHECK_SECONDS = 15.0

Offsets = dict[tuple[str, int], tuple[int, str]]


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit wrap), as a signed int."""
    return _native.java_string_hash(s)


def offsets_partition(group_id: str) -> int:
    """Kafka's ``GroupCoordinator.partitionFor``: ``Utils.abs(groupId.hashCode) % 50``."""
    return _native.offsets_partition(group_id)


def encode_key(group_id: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey v1. A string over 32767 bytes is an InvalidConfigError."""
    return _native.offsets_encode_key(group_id, topic, partition)


def encode_value(offset: int, metadata: str, timestamp_ms: int) -> bytes:
    """OffsetCommitValue v3: offset, leader epoch -1, metadata, commit timestamp."""
    return _native.offsets_encode_value(offset, metadata, timestamp_ms)


def decode_key(key: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset commit key; None for the other record types
    (group metadata and the newer group records), which hold no offsets. A damaged offset
    commit key is a CorruptRecordError."""
    return _native.offsets_decode_key(key)


def decode_value(value: bytes) -> tuple[int, str]:
    """(offset, metadata) of OffsetCommitValue v0-v4 (v4 is Kafka 4.x's flexible version). A
    newer version is an UnsupportedFormatError, damaged bytes a CorruptRecordError."""
    return _native.offsets_decode_value(value)


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
        #: The engine's reader of this group's commits (``rust/src/coordination/committed_offsets.rs``, the
        #: server's too): Kafka's transactional rules, reading only what was appended since.
        self._committed = _native.CommittedOffsets(group_id)
        self._writer: Log | None = None
        self._reader: Log | None = None
        self._mutex = threading.Lock()
        self._next_clean_check = time.monotonic() + CLEAN_CHECK_SECONDS

    def _path(self) -> str:
        return self._dir.partition_path(OFFSETS_TOPIC, self.partition)

    def load(self) -> Offsets:
        """``{(topic, partition): (offset, metadata)}``, including commits from other processes."""
        with self._mutex:
            return self._catch_up()[0]

    def unstable(self, tp: tuple[str, int]) -> bool:
        """Whether an open transaction holds offsets of ``tp`` for this group (KIP-447): a
        read_committed consumer starts reading the partition only once it ended, so that it
        starts where that transaction leaves the group, not before its input."""
        with self._mutex:
            return tp in self._catch_up()[1]

    def _catch_up(self) -> tuple[Offsets, set[tuple[str, int]]]:
        """The offsets and the partitions an open transaction commits offsets of, as Kafka's
        group coordinator sees them (a transaction's offsets count at its COMMIT marker)."""
        if self._reader is None:
            if not os.path.isdir(self._path()):
                return {}, set()
            self._reader = Log(self._path(), readonly=True)
        return self._committed.read(self._reader._native)

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
