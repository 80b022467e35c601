"""``spark.read/readStream/write/writeStream.format("kafkalite")``: a PySpark (4.x) Python data
source with the contract of Spark's own Kafka source and sink.

Planning runs on the driver (``kafkalite.spark.planning``); each task carries one offset range,
opens its partition read-only on the executor, seeks with the offset index and receives whole
batches already shaped as Spark's rows in Arrow (``Log.read_spark_arrow``, built in Rust), so no
per-record Python runs on the read path. Writes are staged by the tasks and appended by the
driver's commit (nothing is visible before every task succeeded); a streaming write is
exactly-once per sink and micro-batch. What holds on failure: ``kafkalite.spark.sink``.
What a read or write names is checked on the driver first: ``kafkalite.spark.checks``.
Filters on topic, partition, offset and timestamp narrow the ranges when Spark pushes them
(PySpark 4.1+ with ``spark.sql.python.filterPushdown.enabled``): ``kafkalite.spark.pushdown``;
the small ranges they leave then share a task (``RangeGroup``), since each task costs Spark
more than reading tens of thousands of records.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

from kafkalite.spark.checks import check_read_targets, check_write_target, short_errors
from kafkalite.spark.options import (
    SourceOptions,
    SparkOptionError,
    offsets_from_json,
    offsets_json,
    option_bool,
    parse,
)
from kafkalite.spark.planning import OffsetRange, PartitionView, pack_small, rate_limit, split_ranges
from kafkalite.spark.pushdown import Pushed, push

SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
HEADERS = "headers array<struct<key:string,value:binary>>"
#: Rows per Arrow batch handed to Spark (the PySpark notes measured 8K-64K as the sweet spot).
ROWS_PER_BATCH = 65536
#: Records up to which ranges left by pushed filters share one task (``planning.pack_small``):
#: about what one core reads into Spark (~2 M records/s) in the time a task costs a Python data
#: source whatever it reads (~40 ms on PySpark 4.2+, ~100 ms on 4.0/4.1), so sharing delays a
#: range by about what a task of its own would have cost.
PACK_RECORDS = 131_072

try:  # 4.1+: streaming writes receive Arrow batches instead of Rows
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    _ARROW_STREAM_WRITES = True
except ImportError:  # pragma: no cover - PySpark 4.0
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc,assignment]
    _ARROW_STREAM_WRITES = False

try:  # 4.2+: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNow
except ImportError:  # pragma: no cover - PySpark 4.0/4.1
    _AvailableNow = object  # type: ignore[assignment,misc]


@dataclass
class RangePartition(InputPartition):
    """One task: an offset range of one partition, with what the executor needs to read it."""

    path: str
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    fail_on_data_loss: bool
    read_committed: bool = False


@dataclass
class RangeGroup(InputPartition):
    """One task reading several small ranges one after the other (``planning.pack_small``)."""

    ranges: list[RangePartition]


def _arrow_target(schema: Any) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(schema, timezone="UTC")  # 4.2+
    except TypeError:  # pragma: no cover - 4.0/4.1
        return to_arrow_schema(schema)


def read_range(part: InputPartition | None, schema: Any) -> Iterator[Any]:
    """Executor side: the range's records as Arrow batches of Spark's exact schema."""
    import pyarrow as pa

    from kafkalite.errors import OffsetOutOfRangeError
    from kafkalite.log import Log

    if isinstance(part, RangeGroup):
        for one in part.ranges:
            yield from read_range(one, schema)
        return
    if not isinstance(part, RangePartition):
        return  # no ranges planned: PySpark still runs one task with InputPartition(None) (or None)
    target = _arrow_target(schema)
    path = os.path.join(part.path, f"{part.topic}-{part.partition}")
    with Log(path, readonly=True) as log:
        position = part.start
        if position < log.start_offset:
            if part.fail_on_data_loss:
                raise OffsetOutOfRangeError(
                    f"offsets {part.start}..{log.start_offset - 1} of {part.topic}-{part.partition} were deleted (retention) "
                    "before this task read them. Some data may have been lost; set failOnDataLoss=false to skip them."
                )
            position = log.start_offset
        isolation_level = "read_committed" if part.read_committed else "read_uncommitted"
        while position < part.end:
            latest = log.last_stable_offset if part.read_committed else log.end_offset
            if position >= latest:
                _past_the_latest_offset(part, position, latest)
                return
            native, position = log._native.read_spark_arrow(
                part.topic,
                part.partition,
                position,
                part.end,
                ROWS_PER_BATCH,
                part.include_headers,
                isolation_level=isolation_level,
            )
            batch = pa.record_batch(native)
            if batch.num_rows == 0:
                break
            yield batch if batch.schema.equals(target) else batch.cast(target)


def _past_the_latest_offset(part: RangePartition, position: int, latest: int) -> None:
    """A range that ends past the latest offset (``endingOffsets`` beyond the log end, or the
    log cut back since planning): Spark's Kafka source plans the range as given and its task,
    finding nothing at ``position``, reports data loss (``KafkaDataConsumer.get``): it fails
    with failOnDataLoss=true and, with false, ends the range at the latest offset."""
    if part.fail_on_data_loss:
        from kafkalite.errors import OffsetOutOfRangeError

        raise OffsetOutOfRangeError(
            f"Cannot fetch offset {position} of {part.topic}-{part.partition}: the latest offset is {latest} "
            f"and the range ends at {part.end}. Some data may have been lost because they are not available "
            "any more; set failOnDataLoss=false to read up to the latest offset."
        )


class KafkaliteReader(DataSourceReader):
    """Batch reads: every partition's range from the startingOffsets/endingOffsets options."""

    #: Bounds from pushed filters (``KafkalitePushdownReader``); None: read the whole ranges.
    pushed: Pushed | None = None

    def __init__(self, schema: Any, options: dict[str, str]) -> None:
        self.schema = schema
        self.options = dict(options)

    @short_errors
    def partitions(self) -> list[RangePartition | RangeGroup]:
        opts = parse(self.options, streaming=False)
        view = PartitionView(opts)
        try:
            tps = view.topic_partitions()
            starts = view.resolve(opts.starting, tps, starting=True)
            ends = view.resolve(opts.ending, tps, starting=False)
            ranges = []
            for t, p in tps:
                # The options' start is checked first, so failOnDataLoss fails as without pushdown.
                start, end = view.check_start((t, p), starts[(t, p)]), ends[(t, p)]
                if self.pushed is not None:
                    start, end = self.pushed.narrow(t, p, start, end, view.log((t, p)))
                ranges.append(OffsetRange(t, p, start, end))
        finally:
            view.close()
        tasks = _tasks(opts, ranges)
        if self.pushed is None or opts.min_partitions or opts.max_records_per_partition:
            return list(tasks)  # Kafka's one task per partition range, or the split asked for
        # Spark's Kafka source cannot take these filters, so how many tasks read what they leave
        # is ours to choose: a few small ranges cost less in one task than in one task each.
        grouped = pack_small(tasks, PACK_RECORDS, lambda t: t.end - t.start)
        return [g[0] if len(g) == 1 else RangeGroup(g) for g in grouped]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        yield from read_range(partition, self.schema)


class KafkalitePushdownReader(KafkaliteReader):
    """``KafkaliteReader`` that takes Spark's filters (``kafkalite.spark.pushdown``). Only used
    when Spark plans with pushdown on: PySpark refuses any reader that defines ``pushFilters``
    while ``spark.sql.python.filterPushdown.enabled`` is off (DATA_SOURCE_PUSHDOWN_DISABLED)."""

    def pushFilters(self, filters: list[Any]) -> Iterable[Any]:
        self.pushed = Pushed()
        return push(self.pushed, filters)


def _planning_with_pushdown() -> bool:
    """Whether Spark asks for the reader from its filter-pushdown planner. PySpark tells a data
    source nothing about the setting; the planner it runs is the one sure sign: with the setting
    on, Spark plans through ``pyspark/sql/worker/data_source_pushdown_filters.py`` (4.1+), which
    calls ``pushFilters``; with it off (or on PySpark 4.0) through ``plan_data_source_read.py``,
    which refuses a reader that has ``pushFilters``."""
    frame = sys._getframe(1)
    while frame is not None:
        if os.path.basename(frame.f_code.co_filename) == "data_source_pushdown_filters.py":
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _tasks(opts: SourceOptions, ranges: list[OffsetRange]) -> list[RangePartition]:
    """One task per range, after Kafka's minPartitions / maxRecordsPerPartition split."""
    path = os.path.abspath(opts.path)
    return [
        RangePartition(
            path,
            r.topic,
            r.partition,
            r.start,
            r.end,
            opts.include_headers,
            opts.fail_on_data_loss,
            opts.read_committed,
        )
        for r in split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)
    ]


class KafkaliteStreamReader(DataSourceStreamReader, _AvailableNow):  # type: ignore[misc,valid-type]
    """Micro-batches: offsets are ``{"topic": {"partition": next offset}}`` as in the Kafka source."""

    def __init__(self, schema: Any, options: dict[str, str]) -> None:
        self.schema = schema
        self.options = dict(options)
        self.opts = parse(self.options, streaming=True)
        self._view: PartitionView | None = None
        self._last_trigger = time.monotonic()
        self._available_now: dict | None = None

    def _partitions(self) -> PartitionView:
        if self._view is None:
            self._view = PartitionView(self.opts)
        return self._view

    @short_errors
    def initialOffset(self) -> dict:
        view = self._partitions()
        tps = view.topic_partitions()
        return offsets_json(view.resolve(self.opts.starting, tps, starting=True))

    def _end_offsets(self) -> dict:
        view = self._partitions()
        return {tp: view.bounds(tp)[1] for tp in view.topic_partitions()}

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to what exists now, in limited micro-batches."""
        self._available_now = self._end_offsets()

    @short_errors
    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        until = self._available_now or self._end_offsets()
        if start is None:
            # PySpark 4.0/4.1 call latestOffset() without a start (admission control came in
            # 4.2): every trigger reads all that is available.
            if self.opts.max_offsets_per_trigger or self.opts.min_offsets_per_trigger:
                warnings.warn(
                    "maxOffsetsPerTrigger/minOffsetsPerTrigger need PySpark >= 4.2; ignored", stacklevel=2
                )
            return offsets_json(until)
        begin = offsets_from_json(start)
        view = self._partitions()
        for tp in until:  # partitions that appeared since: from their earliest offset
            begin.setdefault(tp, view.bounds(tp)[0])
        o = self.opts
        backlog = sum(max(0, until[tp] - begin[tp]) for tp in until)
        if o.min_offsets_per_trigger and backlog < o.min_offsets_per_trigger and not self._available_now:
            if (time.monotonic() - self._last_trigger) * 1000 < o.max_trigger_delay_ms:
                return start
        if o.max_offsets_per_trigger:
            until = rate_limit(o.max_offsets_per_trigger, begin, until)
        if until != {tp: begin[tp] for tp in until}:
            self._last_trigger = time.monotonic()
        return offsets_json(until)

    def getDefaultReadLimit(self) -> Any:  # only called by PySpark 4.2+
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        m = self.opts.max_offsets_per_trigger
        return ReadMaxRows(m) if m else ReadAllAvailable()

    @short_errors
    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begin, until = offsets_from_json(start), offsets_from_json(end)
        view = self._partitions()
        ranges = []
        for tp, stop in until.items():
            first = begin.get(tp, view.bounds(tp)[0])
            ranges.append(OffsetRange(tp[0], tp[1], view.check_start(tp, first), stop))
        return _tasks(self.opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        yield from read_range(partition, self.schema)

    def commit(self, end: dict) -> None:
        pass  # kafkalite keeps data by the topic's retention, not by what readers consumed

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()


# -- writing ---------------------------------------------------------------------------------
STAGING_DIR = ".kafkalite-spark-staging"


@dataclass
class StagedFiles(WriterCommitMessage):
    files: list[str] = field(default_factory=list)


def _stage(path: str, job: str, batches: Iterator[Any]) -> StagedFiles:
    """Executor side: the task's rows, as an Arrow IPC file that nobody reads until commit."""
    import pyarrow as pa

    folder = os.path.join(path, STAGING_DIR, job)
    os.makedirs(folder, exist_ok=True)
    out = os.path.join(folder, f"{uuid.uuid4()}.arrow")
    writer = None
    for batch in batches:
        if writer is None:
            writer = pa.ipc.new_file(out, batch.schema)
        writer.write_batch(batch)
    if writer is None:
        return StagedFiles([])
    writer.close()
    return StagedFiles([out])


def _discard(messages: list[Any]) -> None:
    for m in messages:
        for f in getattr(m, "files", None) or []:
            try:
                os.unlink(f)
            except FileNotFoundError:
                pass


def _staged_tables(messages: list[Any]) -> list[Any]:
    import pyarrow as pa

    return [pa.ipc.open_file(f).read_all() for m in messages if m is not None for f in m.files]


class KafkaliteWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], overwrite: bool) -> None:
        if overwrite:
            raise SparkOptionError("kafkalite is an append-only log: use .mode('append')")
        from kafkalite.spark import transactional
        from kafkalite.spark.sink import sink_compression

        self.path = check_write_target(options, "save")
        self.topic = options.get("topic")
        self.compression = sink_compression(options)
        self.transactional_id = transactional.transactional_id(options)
        self.timeout_ms = transactional.timeout_ms(options)
        self.job = str(uuid.uuid4())

    def write(self, iterator: Iterator[Any]) -> StagedFiles:
        return _stage(self.path, self.job, iterator)

    @short_errors
    def commit(self, messages: list[Any]) -> None:
        from kafkalite.spark.sink import publish

        try:
            publish(
                self.path,
                _staged_tables(messages),
                self.topic,
                self.compression,
                self.transactional_id,
                self.timeout_ms,
            )
        finally:
            _discard(messages)

    def abort(self, messages: list[Any]) -> None:
        # PySpark 4.0 passes no messages for tasks that succeeded before another failed: drop
        # the job's whole staging folder.
        _discard(messages)
        shutil.rmtree(os.path.join(self.path, STAGING_DIR, self.job), ignore_errors=True)


class KafkaliteStreamWriter(_StreamWriterBase):  # type: ignore[misc,valid-type]
    """Exactly-once per sink (``kafkalite.spark.sink.publish_once``): each micro-batch is one
    transaction that also commits its id, so a replayed one is skipped and one killed midway is
    aborted and written again whole."""

    def __init__(self, options: dict[str, str]) -> None:
        from kafkalite.spark import transactional
        from kafkalite.spark.sink import sink_compression, sink_id

        self.path = check_write_target(options, "start")
        self.topic = options.get("topic")
        self.compression = sink_compression(options)
        self.sink = sink_id(options)
        self.transactional_id = transactional.transactional_id(options)
        self.timeout_ms = transactional.timeout_ms(options)

    def write(self, iterator: Iterator[Any]) -> StagedFiles:
        if _ARROW_STREAM_WRITES:
            return _stage(self.path, self.sink, iterator)
        import pyarrow as pa  # PySpark 4.0 hands over Rows

        batches = (
            pa.RecordBatch.from_pylist([r.asDict() for r in chunk]) for chunk in _chunks(iterator, 10_000)
        )
        return _stage(self.path, self.sink, batches)

    @short_errors
    def commit(self, messages: list[Any], batchId: int) -> None:
        from kafkalite.spark.sink import publish_once

        try:
            publish_once(
                self.path,
                self.sink,
                batchId,
                _staged_tables(messages),
                self.topic,
                self.compression,
                self.transactional_id,
                self.timeout_ms,
            )
        finally:
            _discard(messages)

    def abort(self, messages: list[Any], batchId: int) -> None:
        _discard(messages)


def _chunks(rows: Iterator[Any], n: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class KafkaliteDataSource(DataSource):
    """``format("kafkalite")``: found by PySpark through the ``pyspark_kafkalite`` module."""

    @classmethod
    def name(cls) -> str:
        return "kafkalite"

    @short_errors
    def schema(self) -> str:
        # Called by load() (unless the user gave a schema): the earliest moment to say that the
        # path or a topic does not exist. Writes never call it.
        check_read_targets(self.options)
        include = option_bool(self.options, "includeHeaders", False)
        return SCHEMA + (", " + HEADERS if include else "")

    @short_errors
    def reader(self, schema: Any) -> KafkaliteReader:
        parse(dict(self.options), streaming=False)  # bad options fail before any task
        check_read_targets(self.options)
        if _planning_with_pushdown():
            return KafkalitePushdownReader(schema, dict(self.options))
        return KafkaliteReader(schema, dict(self.options))

    @short_errors
    def streamReader(self, schema: Any) -> KafkaliteStreamReader:
        check_read_targets(self.options)
        return KafkaliteStreamReader(schema, dict(self.options))

    @short_errors
    def writer(self, schema: Any, overwrite: bool) -> KafkaliteWriter:
        return KafkaliteWriter(dict(self.options), overwrite)

    @short_errors
    def streamWriter(self, schema: Any, overwrite: bool) -> KafkaliteStreamWriter:
        return KafkaliteStreamWriter(dict(self.options))


__all__ = ["KafkaliteDataSource", "RangePartition", "SCHEMA", "HEADERS"]
