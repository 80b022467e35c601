"""Committed offsets, stored as Kafka stores them: in the compacted topic ``__consumer_offsets``
(50 partitions; a group lives in partition ``abs(javaHash(group_id)) % 50``), with Kafka's own
binary key (OffsetCommitKey v1: group, topic, partition) and value (OffsetCommitValue v3:
offset, leader epoch, metadata, commit timestamp), encoded and decoded by the engine's codec
(``rust/src/offsets_codec.rs``), the one the wire-protocol server uses. Deleting a group
writes tombstones, which compaction removes after ``delete.retention.ms``. Offsets follow
Kafka's meaning: the next offset to read.

Each store keeps the group's offsets in memory and reads only what was appended since its last
look, so ``load`` is cheap; commits are appended with ``flush="always"`` (durable when the call
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
#: (``rust/src/offsets_codec.rs``), which the wire-protocol server encodes with too.
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
        # A key's record type (int16), then the group as an int16-length string: the prefix of
        # every offset commit key of this group, cut from an encoded key (empty topic: 2 bytes,
        # partition: 4).
        group_part = encode_key(group_id, "", 0)[2:-6]
        self._prefixes = tuple(
            t.to_bytes(2, "big", signed=True) + group_part for t in OFFSET_COMMIT_KEY_TYPES
        )
        self._offsets: Offsets = {}
        #: Plain and decided commits past the last stable offset (see ``_catch_up``); None: a tombstone.
        self._pending_plain: dict[tuple[str, int], tuple[int, str] | None] = {}
        #: Partitions with offsets of a transaction still open (Kafka's pending transactional
        #: offset commits: OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT).
        self._unstable: set[tuple[str, int]] = set()
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
            if not self._pending_plain:
                return dict(self._offsets)
            merged = dict(self._offsets)
            for tp, value in self._pending_plain.items():
                if value is None:
                    merged.pop(tp, None)
                else:
                    merged[tp] = value
            return merged

    def unstable(self, tp: tuple[str, int]) -> bool:
        """Whether an open transaction holds offsets of ``tp`` for this group (KIP-447): a
        read_committed consumer starts reading the partition only once it ended, so that it
        starts where that transaction leaves the group, not before its input."""
        with self._mutex:
            self._catch_up()
            return tp in self._unstable

    def _apply(
        self, into: dict[tuple[str, int], tuple[int, str] | None], key: bytes | None, value: bytes | None
    ) -> None:
        if key is not None and key.startswith(self._prefixes):
            decoded = decode_key(key)
            if decoded is not None and decoded[0] == self.group_id:
                into[(decoded[1], decoded[2])] = None if value is None else decode_value(value)

    def _catch_up(self) -> None:
        """Kafka's group coordinator's view: below the last stable offset, the records a
        read_committed reader sees, in log order (a transaction's offsets count iff it committed,
        and a later record of a key wins); past it (a transaction still open holds it back), the
        plain commits and those of transactions that committed already, newer than anything
        below; the open transactions' offsets make their partitions ``unstable``. Transactional commits are
        the only batches with a producer id in this topic (clients cannot produce to it)."""
        if self._reader is None:
            if not os.path.isdir(self._path()):
                return
            self._reader = Log(self._path(), readonly=True)
        log = self._reader
        start = max(self._read_to, log.start_offset)
        stable = log.last_stable_offset
        if start < stable:
            decided: dict[tuple[str, int], tuple[int, str] | None] = {}
            for r in log.committed_records(start, stable):
                self._apply(decided, r.key, r.value)
            for tp, value in decided.items():
                if value is None:
                    self._offsets.pop(tp, None)
                else:
                    self._offsets[tp] = value
            self._read_to = stable
        self._pending_plain = {}
        self._unstable = set()
        end = log.end_offset
        if stable < end:
            plain: list[tuple[int, int]] = []
            transactional: list[tuple[int, int, int]] = []
            marked: dict[int, int] = {}  # producer id -> offset of its last marker here
            position = stable
            while position < end:
                headers = log.batch_headers(position)
                if not headers:
                    break
                for b in headers:
                    if b.control:
                        marked[b.producer_id] = b.base_offset
                    elif b.producer_id < 0:
                        plain.append((b.base_offset, b.last_offset))
                    else:
                        transactional.append((b.base_offset, b.last_offset, b.producer_id))
                position = headers[-1].last_offset + 1
            # Transactional batches with no marker of their producer after them: still open.
            open_txn = [(first, last) for first, last, pid in transactional if marked.get(pid, -1) < first]
            # Ended ones count at once if they committed, as Kafka's coordinator applies a
            # transaction's offsets at its COMMIT marker (not once every earlier transaction of
            # this partition, another group's included, ended): in log order with the plain ones.
            ended = [(first, last, pid) for first, last, pid in transactional if marked.get(pid, -1) > first]
            if ended:
                aborted = [
                    (t.producer_id, t.first_offset, t.last_offset)
                    for t in log.aborted_transactions()
                    if t.last_offset >= stable
                ]
                plain += [
                    (first, last)
                    for first, last, pid in ended
                    if not any(p == pid and f <= first <= lst for p, f, lst in aborted)
                ]
            pending_txn: dict[tuple[str, int], tuple[int, str] | None] = {}
            for r in log.records(stable, end):
                at = r.offset
                if at is None:
                    continue
                if any(first <= at <= last for first, last in plain):
                    self._apply(self._pending_plain, r.key, r.value)
                elif any(first <= at <= last for first, last in open_txn):
                    self._apply(pending_txn, r.key, r.value)
            self._unstable = set(pending_txn)

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
