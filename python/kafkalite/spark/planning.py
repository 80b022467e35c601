"""Driver-side planning for the Spark source, with no Spark in it: which partitions, which
offsets, how ranges are split (Kafka's ``KafkaOffsetRangeCalculator``) and how much a
micro-batch may take (Kafka's ``rateLimit``). Offsets are exclusive ends ("next to read")."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kafkalite.datadir import DataDir
from kafkalite.errors import InvalidConfigError
from kafkalite.log import Log
from kafkalite.spark.options import EARLIEST, LATEST, OffsetSpec, SourceOptions, SparkOptionError

TP = tuple[str, int]
R = TypeVar("R")


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


class PartitionView:
    """The partitions an options set selects, opened read-only (never writes)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        try:
            self.dir = DataDir(options.path, create=False)
        except InvalidConfigError:
            raise SparkOptionError(f"{options.path} is not a kafkalite data directory") from None
        self._logs: dict[TP, Log] = {}

    def topic_partitions(self) -> list[TP]:
        topics = self.dir.topics()
        o = self.options
        if o.assign is not None:
            return sorted((t, p) for t, ps in o.assign.items() for p in ps)
        if o.subscribe is not None:
            names = [t for t in o.subscribe if t in topics]
        else:
            regex = re.compile(o.pattern or "")
            names = [t for t in topics if regex.fullmatch(t) and not t.startswith("__")]
        return sorted((t, p) for t in names for p in range(int(topics[t]["partitions"])))

    def log(self, tp: TP) -> Log:
        log = self._logs.get(tp)
        if log is None:
            path = self.dir.partition_path(*tp)
            if not os.path.isdir(path):
                raise SparkOptionError(
                    f"topic-partition {tp[0]}-{tp[1]} does not exist in {self.options.path}"
                )
            log = self._logs[tp] = Log(path, readonly=True)
        return log

    def bounds(self, tp: TP) -> tuple[int, int]:
        """(log start offset, where reads end): the log end offset, or under
        kafka.isolation.level=read_committed the last stable offset, as Kafka's "latest"."""
        log = self.log(tp)
        return log.start_offset, log.last_stable_offset if self.options.read_committed else log.end_offset

    def resolve(self, spec: OffsetSpec, tps: list[TP], *, starting: bool) -> dict[TP, int]:
        """Offsets for ``tps`` (sentinels -2/-1 resolved to the log start/end)."""
        out: dict[TP, int] = {}
        if spec.kind in ("offsets", "timestamps"):
            given = spec.offsets or {}
            missing = sorted(set(tps) - set(given))
            if missing and self.options.assign is not None:
                name = ("starting" if starting else "ending") + (
                    "OffsetsByTimestamp" if spec.kind == "timestamps" else "Offsets"
                )
                raise SparkOptionError(f"{name} must specify all TopicPartitions; missing {missing}")
        for tp in tps:
            first, last = self.bounds(tp)
            if spec.kind == "earliest":
                out[tp] = first
            elif spec.kind == "latest":
                out[tp] = last
            elif spec.kind == "offsets":
                value = (spec.offsets or {}).get(tp, EARLIEST if starting else LATEST)
                out[tp] = first if value == EARLIEST else last if value == LATEST else value
            else:
                ts = spec.timestamp if spec.kind == "timestamp" else (spec.offsets or {}).get(tp)
                found = None if ts is None else self.log(tp).offset_for_timestamp(ts)
                if found is None:
                    if starting and ts is not None and self.options.timestamp_strategy == "error":
                        raise SparkOptionError(
                            f"No offset matched the timestamp {ts} for {tp[0]}-{tp[1]} (startingOffsetsByTimestampStrategy=error)"
                        )
                    found = last
                out[tp] = found
        return out

    def check_start(self, tp: TP, start: int) -> int:
        """Kafka's data-loss rule: a start below the log start offset (retention or compaction
        removed it) fails with failOnDataLoss=true, else reading resumes at the log start."""
        first, _ = self.bounds(tp)
        if start < first:
            if self.options.fail_on_data_loss:
                raise SparkOptionError(
                    f"Cannot fetch offset {start} of {tp[0]}-{tp[1]}: the earliest available offset is {first}. "
                    "Some data may have been lost because they are not available any more (deleted by retention). "
                    "If you want your query to continue, set the option 'failOnDataLoss' to 'false'."
                )
            return first
        return start

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()


def split_ranges(
    ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None
) -> list[OffsetRange]:
    """Kafka's ``KafkaOffsetRangeCalculator.getRanges``: drop empty ranges, cut those above
    ``maxRecordsPerPartition``, then split large ranges until about ``minPartitions`` exist."""
    ranges = [r for r in ranges if r.size > 0]
    if max_records:
        ranges = [piece for r in ranges for piece in _divide(r, math.ceil(r.size / max_records))]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    small = [r for r in ranges if max(round(r.size / total * min_partitions), 1) == 1]
    large = [r for r in ranges if r not in small]
    remaining = min_partitions - len(small)
    large_total = sum(r.size for r in large)
    out = [piece for r in large for piece in _divide(r, max(round(r.size / large_total * remaining), 1))]
    return out + small


def pack_small(ranges: list[R], budget: int, size: Callable[[R], int]) -> list[list[R]]:
    """Tasks for ``ranges`` (of ``size(r)`` records each): those of fewer than ``budget``
    records share a task, in order, up to ``budget`` records per task (as Spark's file sources
    pack small files up to ``spark.sql.files.maxPartitionBytes``); larger ones keep a task each.
    A task costs Spark tens of milliseconds whatever it reads."""
    tasks: list[list[R]] = []
    shared: list[R] = []
    total = 0
    for r in ranges:
        if size(r) >= budget:
            tasks.append([r])
            continue
        if shared and total + size(r) > budget:
            tasks.append(shared)
            shared, total = [], 0
        shared.append(r)
        total += size(r)
    if shared:
        tasks.append(shared)
    return tasks


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    pieces, start = [], r.start
    for part in range(parts):
        size = (r.end - start) // (parts - part)  # the last piece takes the rounding
        pieces.append(OffsetRange(r.topic, r.partition, start, start + size))
        start += size
    return pieces


def rate_limit(limit: int, start: dict[TP, int], until: dict[TP, int]) -> dict[TP, int]:
    """Kafka's ``rateLimit``: ``limit`` records spread over partitions in proportion to their
    backlog (floor, but ceil below 1 so small partitions are not starved)."""
    sizes = {tp: end - start.get(tp, end) for tp, end in until.items() if end - start.get(tp, end) > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(until)
    out = {}
    for tp, end in until.items():
        if tp not in sizes:
            out[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        n = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, start[tp] + n)
    return out
