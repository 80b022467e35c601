"""Choosing a partition the way Kafka's Java client does: keyed records go to
``(murmur2(key) & 0x7fffffff) % partitions`` (so a key lands in the same partition number as
in a real cluster); null keys stick to one partition until ``batch_size`` bytes went to it
(KIP-480/KIP-794)."""

from __future__ import annotations

import random

# Kafka's ``BuiltInPartitioner.partitionForKey``: toPositive(murmur2(key)) % partitions (Rust,
# rust/src/producer/partitioner.rs, which also holds the sticky partitioner the producer uses).
from kafkalite._native import partition_for_key

__all__ = ["DefaultPartitioner", "partition_for_key"]


class DefaultPartitioner:
    """kafka-python's partitioner call shape: ``partitioner(key_bytes, all_partitions, available)``.
    Keyed: murmur2. Null key: a sticky random partition per call site (the producer re-picks it
    when a batch is sent)."""

    def __call__(self, key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        if key is None:
            return random.choice(available or all_partitions)
        return all_partitions[partition_for_key(key, len(all_partitions))]
