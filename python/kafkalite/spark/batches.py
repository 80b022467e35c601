"""Record batches that say who wrote them, the way Kafka's idempotent producer does: every
batch the streaming sink appends carries the sink's producer id and epoch and, as
``baseSequence``, the per-partition sequence number of its first record. A replayed commit
then finds its own batches in the log by those header fields, whatever other writers appended
in between, and users see no extra header.

The engine encodes batches (keys, headers, compression, size limits) but offers no call that
sets the producer fields or returns the encoded bytes, so ``encode`` lets a private scratch log
build them, reads the raw batches back, writes the three fields and the CRC, and
``Log.append_batches`` appends them to the real partition unchanged but for the base offset.
(An engine call taking ``producer_id/producer_epoch/base_sequence`` would remove the scratch
log; nothing else here would change.)
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Self

from kafkalite._native import crc32c
from kafkalite.log import Log, Record

# Kafka's v2 batch header (kafka-format.md): baseOffset, batchLength, partitionLeaderEpoch,
# magic, crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId,
# producerEpoch, baseSequence, recordsCount.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LOG_OVERHEAD = 12  # baseOffset + batchLength
_CRC_AT, _CRC_FROM = 17, 21  # the CRC covers attributes .. end of batch
_PRODUCER_AT = 43  # producerId (8), producerEpoch (2), baseSequence (4)
_PRODUCER = struct.Struct(">qhi")
_CONTROL = 0x20
#: Kafka's sequence numbers wrap from Int.MaxValue to 0 (DefaultRecordBatch.incrementSequence).
SEQUENCE_MODULUS = 1 << 31


@dataclass(frozen=True)
class Producer:
    """A batch writer's identity: Kafka's ``producerId`` and ``producerEpoch``."""

    id: int
    epoch: int = 0


@dataclass(frozen=True)
class BatchInfo:
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: int
    control: bool


def next_sequence(sequence: int, records: int) -> int:
    return (sequence + records) % SEQUENCE_MODULUS


def batch_infos(data: bytes | bytearray | memoryview) -> Iterator[BatchInfo]:
    """The headers of the whole v2 batches in ``data`` (as ``Log.read`` returns them)."""
    pos = 0
    while pos + _HEADER.size <= len(data):
        (base, length, _epoch, _magic, _crc, attrs, last_delta, _bt, _mt, pid, pepoch, seq, count) = (
            _HEADER.unpack_from(data, pos)
        )
        yield BatchInfo(base, base + last_delta, pid, pepoch, seq, count, bool(attrs & _CONTROL))
        pos += _LOG_OVERHEAD + length


def scan(log: Log, start: int) -> Iterator[BatchInfo]:
    """Every batch from the one holding ``start`` to the log end, read header by header."""
    position = start
    while position < log.end_offset:
        data = log.read(position, 1 << 20)
        if len(data) == 0:
            return
        for info in batch_infos(data):
            if info.last_offset >= position:
                yield info
                position = info.last_offset + 1


def stamp(data: bytearray, producer: Producer, first_sequence: int) -> None:
    """Give every batch in ``data`` the producer's id and epoch and the sequence number of its
    first record (``first_sequence`` + its offset in ``data``, which starts at offset 0)."""
    pos = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        end = pos + _LOG_OVERHEAD + length
        sequence = next_sequence(first_sequence, base)
        _PRODUCER.pack_into(data, pos + _PRODUCER_AT, producer.id, producer.epoch, sequence)
        struct.pack_into(">I", data, pos + _CRC_AT, crc32c(bytes(memoryview(data)[pos + _CRC_FROM : end])))
        pos = end


class Encoder:
    """Encodes rows into v2 batches with a partition's settings (compression, batch size,
    compaction's key rule), in scratch logs under ``folder`` that ``close`` removes. Encoding
    every partition's rows before appending any of them moves every per-row refusal (record
    too large, null key on a compacted topic) before the first append."""

    def __init__(self, folder: str) -> None:
        os.makedirs(folder, exist_ok=True)
        _remove_orphans(folder)
        self._folder = tempfile.mkdtemp(prefix=f"{_owner_prefix(os.getpid())}", dir=folder)
        self._logs: dict[tuple, Log] = {}

    def _scratch(self, options: dict) -> Log:
        # What shapes the batches (size target: min of max.message.bytes and segment.bytes) and
        # what the topic refuses; time, retention and flushing do not matter here.
        settings = {
            k: options[k]
            for k in ("compression", "max_message_bytes", "segment_bytes", "compact")
            if k in options
        }
        key = tuple(sorted(settings.items()))
        log = self._logs.get(key)
        if log is None:
            path = os.path.join(self._folder, str(uuid.uuid4()))
            log = self._logs[key] = Log(path, **settings)
        return log

    def encode(
        self,
        options: dict,
        values: list[bytes],
        keys: list[bytes | None],
        headers: list[list[tuple[str, bytes | None]]],
        producer: Producer | None = None,
        first_sequence: int = 0,
    ) -> bytes:
        """``values`` (with their keys and headers) as whole v2 batches, stamped with
        ``producer`` when given; the batches' base offsets are relative (the log re-offsets)."""
        log = self._scratch(options)
        if not any(k is not None or h for k, h in zip(keys, headers, strict=True)):
            first, last = log.append_values(values)
        else:
            first, last = log.append(
                [Record(v, key=k, headers=h or None) for v, k, h in zip(values, keys, headers, strict=True)]
            )
        out = bytearray()
        position = first
        while position <= last:
            data = bytearray(log.read(position, 8 << 20))
            if not data:
                break
            infos = list(batch_infos(data))
            out += _slice_batches(data, position, last)
            position = infos[-1].last_offset + 1
        _rebase(out, first)
        if producer is not None:
            stamp(out, producer, first_sequence)
        return bytes(out)

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _owner_prefix(pid: int) -> str:
    return f"encode-{socket.gethostname()}-{pid}-"


def _remove_orphans(folder: str) -> None:
    """Scratch logs of killed commits on this host (their process is gone) are removed."""
    mine = f"encode-{socket.gethostname()}-"
    for name in os.listdir(folder):
        pid = name[len(mine) :].split("-", 1)[0]
        if not name.startswith(mine) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
        except PermissionError:
            pass  # alive, another user's


def _slice_batches(data: bytearray, first: int, last: int) -> bytearray:
    """The batches of ``data`` whose offsets lie in ``[first, last]``."""
    out = bytearray()
    pos = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        end = pos + _LOG_OVERHEAD + length
        if first <= base <= last:
            out += data[pos:end]
        pos = end
    return out


def _rebase(data: bytearray, first: int) -> None:
    """Base offsets relative to ``first`` (the CRC does not cover them)."""
    pos = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        struct.pack_into(">q", data, pos, base - first)
        pos += _LOG_OVERHEAD + length
