"""Record batches that say who wrote them, the way Kafka's idempotent producer does: every
batch the streaming sink appends carries the sink's producer id and epoch and, as
``baseSequence``, the per-partition sequence number of its first record. A replayed commit
then finds its own batches in the log by those header fields, whatever other writers appended
in between, and users see no extra header.

The engine does the work: ``Log.encode_batches`` builds the stamped batches with the
partition's settings (compression, batch size, compaction's key rule, ``max.message.bytes``)
without appending them, ``Log.append_produce`` appends them through the partition's idempotent
producer checks (a batch already in the log is a duplicate and is not written again, a
sequence gap is refused), and ``Log.batch_headers`` reads the headers back for ``scan``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kafkalite.log import BatchInfo, Log

#: Kafka's sequence numbers wrap from Int.MaxValue to 0 (DefaultRecordBatch.incrementSequence).
SEQUENCE_MODULUS = 1 << 31

__all__ = ["SEQUENCE_MODULUS", "BatchInfo", "Producer", "encode", "next_sequence", "scan"]


@dataclass(frozen=True)
class Producer:
    """A batch writer's identity: Kafka's ``producerId`` and ``producerEpoch``."""

    id: int
    epoch: int = 0


def next_sequence(sequence: int, records: int) -> int:
    return (sequence + records) % SEQUENCE_MODULUS


def scan(log: Log, start: int) -> Iterator[BatchInfo]:
    """Every batch from the one holding ``start`` to the log end, header by header."""
    position = start
    while True:
        infos = log.batch_headers(position)
        if not infos:
            return
        yield from infos
        position = infos[-1].last_offset + 1
        if position >= log.end_offset:
            return


def encode(
    log: Log,
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None],
    headers: Sequence[Sequence[tuple[str, bytes | None]]],
    producer: Producer | None = None,
    first_sequence: int = 0,
    transactional: bool = False,
) -> bytes:
    """``values`` (with their keys and headers) as whole v2 batches built with ``log``'s
    settings, stamped with ``producer`` when given (as its transactional batches with
    ``transactional``); nothing is appended."""
    plain = not any(k is not None or h for k, h in zip(keys, headers, strict=True))
    if producer is None:
        return log.encode_batches(values, None if plain else keys, None if plain else headers)
    return log.encode_batches(
        values,
        None if plain else keys,
        None if plain else headers,
        producer_id=producer.id,
        producer_epoch=producer.epoch,
        base_sequence=first_sequence,
        transactional=transactional,
    )
