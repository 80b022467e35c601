"""Log compaction for topics with ``cleanup.policy=compact``: when and how the engine's
cleaner runs on a partition, with the topic's Kafka-named settings.

The cleaner itself is in Rust (``rust/src/storage/cleaner/mod.rs``). It runs by itself from producers (every
``cleaner_check_interval_ms``, on partitions whose dirty ratio reached
``min.cleanable.dirty.ratio``, as Kafka's cleaner threads do) and on demand from
``Admin.compact_topic``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkalite.datadir import TOPIC_DEFAULTS
from kafkalite.log import Log

#: The counts the engine's cleaner reports for one partition.
COUNTS = ("segments_rewritten", "bytes_before", "bytes_after", "records_removed", "tombstones_removed")


@dataclass(frozen=True)
class CompactionResult:
    """What one cleaning pass over a topic removed (summed over partitions, and per partition)."""

    topic: str
    records_removed: int = 0
    tombstones_removed: int = 0
    segments_rewritten: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    partitions: dict[int, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, topic: str, partitions: dict[int, dict[str, int]]) -> CompactionResult:
        totals = {name: sum(int(p[name]) for p in partitions.values()) for name in COUNTS}
        return cls(topic=topic, partitions=partitions, **totals)


def _settings(config: Mapping[str, Any]) -> tuple[int, int, float]:
    full = {**TOPIC_DEFAULTS, **config}
    return (
        int(full["delete.retention.ms"]),
        int(full["min.compaction.lag.ms"]),
        float(full["min.cleanable.dirty.ratio"]),
    )


def clean_partition(log: Log, config: Mapping[str, Any], now_ms: int | None = None) -> dict[str, int]:
    """A full cleaning pass on one partition now."""
    delete_retention_ms, lag_ms, _ = _settings(config)
    return log.clean(delete_retention_ms, lag_ms, now_ms)


def clean_if_dirty(log: Log, config: Mapping[str, Any]) -> dict[str, int] | None:
    """Clean when the partition's dirty ratio reached ``min.cleanable.dirty.ratio``."""
    _, lag_ms, min_ratio = _settings(config)
    ratio = log.dirty_ratio(lag_ms)
    if ratio <= 0.0 or ratio < min_ratio:
        return None
    return clean_partition(log, config)
