"""Filter pushdown for batch reads (PySpark 4.1+, ``spark.sql.python.filterPushdown.enabled``):
the filters Spark hands to ``DataSourceReader.pushFilters`` become bounds on the offset range
each partition's task reads, so a query for one partition, an offset range or a recent time
window seeks instead of scanning. A pushed filter only ever narrows ranges; what it cannot
decide exactly stays with Spark.

* ``topic`` (=, IN), ``partition`` (=, IN): whole partitions are left out. Exact.
* ``offset`` (=, <, <=, >, >=; BETWEEN arrives as the pair): the range is cut. Exact: a read
  of ``[start, end)`` yields exactly the visible records with offsets in it (compaction gaps
  and control batches simply have none).
* ``timestamp`` (=, >, >=): the range starts at the partition's earliest offset whose record
  timestamp reaches the bound (``Log.offset_for_timestamp``, through the time index), since
  every earlier record is older by that definition. Kept for Spark too: with CreateTime a
  later record may be older than the bound. ``<`` and ``<=`` cannot move the end for the same
  reason (a record past any offset may carry an older timestamp), so they stay with Spark.
* ``IsNotNull`` on those columns is always true and ``IsNull`` always false (never null).

Everything else (``key``, ``value``, OR, NOT, string matches, values of other types) is
returned to Spark unchanged. Offsets and ranges are exclusive at the end, as in planning.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafkalite.log import Log

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_MICROSECOND = _dt.timedelta(microseconds=1)


@dataclass
class Pushed:
    """The conjunction of the filters taken: None means "no bound from the filters"."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    offset_from: int | None = None  # first offset that may match
    offset_until: int | None = None  # first offset past the matches
    timestamp_from_ms: int | None = None  # no match has an older record timestamp
    empty: bool = False  # a contradiction (offset < 0, x IS NULL, ...): nothing matches

    def narrow(self, topic: str, partition: int, start: int, end: int, log: Log) -> tuple[int, int]:
        """``[start, end)`` of ``topic``-``partition`` cut to what may match (``start == end``:
        nothing). ``log`` answers the timestamp bound and is only asked when the range is not
        already empty."""
        if (
            self.empty
            or (self.topics is not None and topic not in self.topics)
            or (self.partitions is not None and partition not in self.partitions)
        ):
            return start, start
        if self.offset_from is not None:
            start = max(start, self.offset_from)
        if self.offset_until is not None:
            end = min(end, self.offset_until)
        if start < end and self.timestamp_from_ms is not None:
            found = log.offset_for_timestamp(self.timestamp_from_ms)
            start = end if found is None else max(start, found)
        return start, max(start, end)


def _column(f: Any) -> str | None:
    attribute: tuple[str, ...] = getattr(f, "attribute", ())
    return attribute[0] if len(attribute) == 1 else None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _both(names: frozenset[Any] | None, values: Iterable[Any]) -> frozenset[Any]:
    new = frozenset(values)
    return new if names is None else names & new


def _at_least(current: int | None, bound: int) -> int:
    return bound if current is None else max(current, bound)


def _below(current: int | None, bound: int) -> int:
    return bound if current is None else min(current, bound)


def _micros(v: Any) -> int | None:
    """A filter's timestamp value in microseconds since the epoch (Spark's unit), or None for
    anything that is not an aware datetime (a naive one has no defined instant)."""
    if isinstance(v, _dt.datetime) and v.tzinfo is not None:
        return (v - _EPOCH) // _MICROSECOND
    return None


def push(pushed: Pushed, filters: list[Any]) -> list[Any]:
    """Fold what ``filters`` say about topic, partition, offset and timestamp into ``pushed``;
    return the filters Spark must still apply (each one of the inputs, as PySpark requires)."""
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        IsNotNull,
        IsNull,
        LessThan,
        LessThanOrEqual,
    )

    kept = []
    for f in filters:
        column = _column(f)
        value: Any = getattr(f, "value", None)
        equal = isinstance(f, (EqualTo, EqualNullSafe))
        if column not in ("topic", "partition", "offset", "timestamp"):
            kept.append(f)
        elif isinstance(f, IsNotNull):
            pass  # these columns are never null
        elif isinstance(f, IsNull):
            pushed.empty = True
        elif column == "topic" and (equal or isinstance(f, In)):
            values = (value,) if equal else value
            if not all(isinstance(v, str) for v in values):
                kept.append(f)
                continue
            pushed.topics = _both(pushed.topics, values)
        elif column == "partition" and (equal or isinstance(f, In)):
            values = (value,) if equal else value
            if not all(_is_int(v) for v in values):
                kept.append(f)
                continue
            pushed.partitions = _both(pushed.partitions, values)
        elif column == "offset" and _is_int(value):
            if equal or isinstance(f, GreaterThanOrEqual):
                pushed.offset_from = _at_least(pushed.offset_from, value)
            if isinstance(f, GreaterThan):
                pushed.offset_from = _at_least(pushed.offset_from, value + 1)
            if equal or isinstance(f, LessThanOrEqual):
                pushed.offset_until = _below(pushed.offset_until, value + 1)
            if isinstance(f, LessThan):
                pushed.offset_until = _below(pushed.offset_until, value)
            if not (equal or isinstance(f, (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual))):
                kept.append(f)  # IN on offsets: not taken
        elif column == "timestamp" and _micros(value) is not None:
            micros = _micros(value)
            assert micros is not None
            # A record of ``ms`` milliseconds is ``ms * 1000`` microseconds in Spark.
            if equal or isinstance(f, GreaterThanOrEqual):
                pushed.timestamp_from_ms = _at_least(pushed.timestamp_from_ms, -(-micros // 1000))
            elif isinstance(f, GreaterThan):
                pushed.timestamp_from_ms = _at_least(pushed.timestamp_from_ms, micros // 1000 + 1)
            kept.append(f)  # a bound, not the answer: see the module comment
        else:
            kept.append(f)
    return kept


__all__ = ["Pushed", "push"]
