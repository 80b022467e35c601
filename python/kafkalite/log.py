"""``kafkalite.Log``: one Kafka partition directory, read and written in place.

A thin Python face over the native engine: argument defaults and documentation, a context
manager, the ``records()`` generator, pyarrow conversion, and recovery warnings.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from kafkalite import _native, validate
from kafkalite._arrow import require_pyarrow
from kafkalite._native import Record
from kafkalite.client_config import LOG_CONFIG, compression_type
from kafkalite.errors import InvalidConfigError, InvalidTypeError, NotAPartitionDirError, bytes_expected

_I32 = validate.INT32_MAX

#: The bounds of the topic configs behind Log's options, from the engine's table
#: (rust/src/storage/topic_config/mod.rs), so a Log opened for a topic accepts every value the topic did.
_TOPIC_BOUNDS: dict[str, tuple[int, int]] = {
    d["name"]: (d["min"], d["max"]) for d in _native.topic_config_defs() if d["type"] == "int"
}
#: The topic defaults behind ``clean``'s arguments (the same table).
_TOPIC_DEFAULTS: dict[str, Any] = {d["name"]: d["default"] for d in _native.topic_config_defs()}


def _bounded(name: str, value: Any, topic_key: str) -> int | None:
    """``value`` within ``topic_key``'s bounds; a topic's -1 ("no limit") is None here."""
    low, high = _TOPIC_BOUNDS[topic_key]
    return validate.optional_integer(name, value, max(low, 0), high)


#: Records decoded per native call while iterating; large enough to amortise the call.
_RECORDS_PER_CHUNK = 8192


class SegmentInfo(NamedTuple):
    """One segment: its offsets ``[base_offset, next_offset)``, bytes and newest timestamp."""

    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int


class AbortedTransaction(NamedTuple):
    """One aborted transaction (Kafka's ``AbortedTxn``, a ``.txnindex`` entry): the producer's
    transactional records in ``[first_offset, last_offset]`` (its ABORT marker) are hidden from
    read_committed readers; ``last_stable_offset`` is the LSO right after the marker."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class Produced(NamedTuple):
    """What ``Log.append_produce`` did: the offsets appended, or with ``duplicate`` the
    offsets of the batch already in the log that the request repeats (nothing written)."""

    first_offset: int
    last_offset: int
    duplicate: bool


class BatchInfo(NamedTuple):
    """One batch's header fields (``Log.batch_headers``): its offsets, the idempotent
    producer's id, epoch and first sequence number (-1: none), its record count, and whether
    it is a control batch (a transaction marker)."""

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: int
    control: bool


class RecoveryWarning(UserWarning):
    """Opening a log found a torn or corrupt tail and truncated it."""


class Log:
    """A partition log in Kafka's on-disk format (``<dir>/<20-digit offset>.log`` etc.).

    ``flush`` is ``"os"`` (page cache; a process crash loses nothing), ``"always"`` (every
    append is durable before it returns) or a message count. ``readonly=True`` never writes
    and follows a writer in another process. ``shared_writers=True`` lets several processes
    append to the partition, each holding the partition lock only while it appends a batch.
    ``preallocate_budget_bytes`` sets the data directory's ``log.preallocate.budget.bytes`` for
    this process: the most disk its writers keep reserved ahead of their data, summed over the
    directory's partitions (None keeps the current limit, 256 MiB unless set).

    ``path`` is one partition's folder, named ``<topic>-<partition>`` as in Kafka's layout
    (``data/events-0``); anything else raises ``NotAPartitionDirError``, so a typo or a data
    directory never gets segment files written into it. ``any_folder=True`` opens a folder of
    any name on purpose (a standalone log); a data directory (``.kafkalite-topics.json`` or a
    broker's ``meta.properties`` at its top) is refused even then.

    Thread safety: a ``Log`` is thread-safe; threads may append and read through one instance
    (its calls are serialized by a mutex inside, with the GIL released while the engine works,
    so other Python threads run meanwhile).
    Records and views it returned stay valid after further appends.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        segment_bytes: int = _native.SEGMENT_BYTES_DEFAULT,
        index_interval_bytes: int = _native.INDEX_INTERVAL_BYTES_DEFAULT,
        segment_ms: int | None = None,
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
        compression: str = "none",
        flush: str | int = "os",
        timestamp_type: str = "create",
        max_message_bytes: int = _native.MAX_MESSAGE_BYTES_DEFAULT,
        readonly: bool = False,
        shared_writers: bool = False,
        compact: bool = False,
        preallocate_budget_bytes: int | None = None,
        any_folder: bool = False,
    ) -> None:
        path = validate.path("path", path)
        segment_bytes = validate.integer("segment_bytes", segment_bytes, *_TOPIC_BOUNDS["segment.bytes"])
        index_interval_bytes = validate.integer("index_interval_bytes", index_interval_bytes, 1, _I32)
        segment_ms = _bounded("segment_ms", segment_ms, "segment.ms")
        retention_bytes = _bounded("retention_bytes", retention_bytes, "retention.bytes")
        retention_ms = _bounded("retention_ms", retention_ms, "retention.ms")
        preallocate_budget_bytes = validate.optional_integer(
            "preallocate_budget_bytes", preallocate_budget_bytes
        )
        compression_type("compression", compression, optional=False)
        if not isinstance(flush, str):
            flush = validate.integer("flush (a message count, or 'os' / 'always')", flush, 1)
        validate.text("timestamp_type", timestamp_type)
        max_message_bytes = validate.integer(
            "max_message_bytes", max_message_bytes, *_TOPIC_BOUNDS["max.message.bytes"]
        )
        for name, flag in (
            ("readonly", readonly),
            ("shared_writers", shared_writers),
            ("compact", compact),
            ("any_folder", any_folder),
        ):
            validate.boolean(name, flag)
        _check_partition_folder(path, any_folder)  # after the arguments: their errors come first
        self._compact = compact
        self._native = _native.Log(
            path,
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            segment_ms=segment_ms,
            retention_bytes=retention_bytes,
            retention_ms=retention_ms,
            compression=compression,
            flush=flush,
            timestamp_type=timestamp_type,
            max_message_bytes=max_message_bytes,
            readonly=readonly,
            shared_writers=shared_writers,
            compact=compact,
            preallocate_budget_bytes=preallocate_budget_bytes,
        )
        for base, valid, dropped, reason in self._native.recovery_reports:
            warnings.warn(
                f"{path}: segment {base:020d}.log was truncated to {valid} bytes; "
                f"{dropped} bytes after the last valid batch were dropped ({reason})",
                RecoveryWarning,
                stacklevel=2,
            )

    # -- writing ---------------------------------------------------------------------------
    def append(self, records: Iterable[Record]) -> tuple[int, int]:
        """Append records; returns the (first, last) offsets they were given."""
        try:
            return self._native.append(records)
        except TypeError as e:  # nothing was written: the records are checked first
            raise InvalidTypeError(f"append takes an iterable of kafkalite.Record objects: {e}") from e

    def append_values(self, values: list[bytes], timestamp: int | None = None) -> tuple[int, int]:
        """Fast path: values with null keys and no headers, no per-record Python objects."""
        timestamp = validate.optional_integer("timestamp", timestamp, 0)
        try:
            return self._native.append_values(values, timestamp)
        except TypeError as e:  # nothing was written: every value is checked first
            raise _values_error(values) from e

    def append_batches(self, data: bytes | bytearray | memoryview) -> tuple[int, int]:
        """Append pre-built Kafka v2 record batches; they are validated and re-offset."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise bytes_expected("data", data, serializers=False)
        return self._native.append_batches(bytes(data) if not isinstance(data, bytes) else data)

    def encode_batches(
        self,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
    ) -> bytes:
        """Records given as columns (``keys`` and ``headers``: None, or one entry per value)
        as whole v2 batches, built as this log's appends build them (compression, batch size,
        a compacted topic's key rule, ``max_message_bytes``), stamped with an idempotent
        producer's id, epoch and first sequence number (Kafka's producerId, producerEpoch,
        baseSequence; each batch's baseSequence is its first record's), and with
        ``transactional`` marked as a transactional producer's (for a log attached to its
        transaction). Nothing is appended: hand the bytes to ``append_produce``. Offsets start
        at 0 (the log re-offsets)."""
        validate.integer("producer_id", producer_id, -1)
        validate.integer("producer_epoch", producer_epoch, -1, (1 << 15) - 1)
        validate.integer("base_sequence", base_sequence, -1, _I32)
        try:
            return self._native.encode_batches(
                values, keys, headers, producer_id, producer_epoch, base_sequence, None, bool(transactional)
            )
        except TypeError as e:  # a value, key or header of the wrong type: nothing was encoded
            raise InvalidTypeError(f"encode_batches takes bytes (or None) values and keys: {e}") from e

    def append_produce(self, data: bytes | bytearray | memoryview) -> Produced:
        """Append v2 record batches as Kafka's broker appends a produce request: validated, then
        checked against the partition's idempotent producers (their last five batches, as
        Kafka's ``ProducerStateManager``). A retry of batches already in the log writes nothing
        and returns the original batch's offsets with ``duplicate=True``; a sequence gap raises
        ``OutOfOrderSequenceNumberError``, an older epoch ``InvalidProducerEpochError``."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise bytes_expected("data", data, serializers=False)
        return Produced(*self._native.append_produce(bytes(data) if not isinstance(data, bytes) else data))

    # -- reading ---------------------------------------------------------------------------
    def batch_headers(self, start: int, max_batches: int = 4096) -> list[BatchInfo]:
        """The headers of the batches from the one holding ``start``, at most ``max_batches``
        (records are not decoded)."""
        validate.integer("start", start, -(2**63))
        max_batches = validate.integer("max_batches", max_batches, 1)
        return [BatchInfo(*h) for h in self._native.batch_headers(start, max_batches)]

    def producer_sequence(self, producer_id: int) -> tuple[int, int] | None:
        """(epoch, last sequence number) of an idempotent producer in this partition, as the
        checks of ``append_produce`` know it; None for a producer the partition has no state
        for (never seen, expired after ``producer.id.expiration.ms``, or its batches deleted)."""
        validate.integer("producer_id", producer_id, 0)
        return self._native.producer_sequence(producer_id)

    def read(self, offset: int, max_bytes: int = 1 << 20) -> memoryview:
        """Whole batches starting with the one that holds ``offset``, as a read-only
        memoryview over the mapped segment (no copy). Empty at the log end."""
        offset = validate.integer("offset", offset, -(2**63))
        max_bytes = validate.integer("max_bytes", max_bytes, 1, _I32)
        return memoryview(self._native.read(offset, max_bytes))

    def records(self, start: int | None = None, end: int | None = None) -> Iterator[Record]:
        """Iterate records with offsets in ``[start, end)`` (defaults: the whole log)."""
        validate.optional_integer("start", start, -(2**63))
        validate.optional_integer("end", end, -(2**63))
        position = self.start_offset if start is None else start
        stop = self.end_offset if end is None else end
        while position < stop:
            chunk, position = self._native.read_records(position, stop, _RECORDS_PER_CHUNK)
            if not chunk:
                break
            yield from chunk

    def read_arrow(
        self, start: int, end: int | None = None, max_records: int | None = None
    ):  # -> pyarrow.RecordBatch
        """Records from ``start`` as a ``pyarrow.RecordBatch`` with columns offset, timestamp,
        key, value, headers."""
        pa = require_pyarrow("Log.read_arrow")
        return pa.record_batch(self.read_arrow_c(start, end, max_records))

    def read_arrow_c(self, start: int, end: int | None = None, max_records: int | None = None) -> Any:
        """The same records as ``read_arrow``, as an object implementing the Arrow PyCapsule
        interface (``__arrow_c_array__``), with no copy and no pyarrow needed: hand it to
        ``polars.from_arrow``, duckdb or ``pyarrow.record_batch``."""
        validate.integer("start", start, -(2**63))
        validate.optional_integer("end", end, -(2**63))
        validate.optional_integer("max_records", max_records, 1)
        batch, _next = self._native.read_arrow(start, end, max_records)
        return batch

    def committed_records(self, start: int | None = None, end: int | None = None) -> Iterator[Record]:
        """``records()`` as a read_committed reader sees them (Kafka's
        ``isolation.level=read_committed``): records of aborted transactions are skipped and
        iteration stops at the last stable offset."""
        validate.optional_integer("start", start, -(2**63))
        validate.optional_integer("end", end, -(2**63))
        position = self.start_offset if start is None else start
        stop = self.last_stable_offset if end is None else end
        while position < stop:
            chunk, position = self._native.read_records(
                position, stop, _RECORDS_PER_CHUNK, isolation_level="read_committed"
            )
            if not chunk:
                break
            yield from chunk

    @property
    def last_stable_offset(self) -> int:
        """The last stable offset (LSO): the first offset of the earliest transaction still
        open, else the log end offset. read_committed readers read below it only."""
        return self._native.last_stable_offset

    def aborted_transactions(self) -> list[AbortedTransaction]:
        """Every aborted transaction in the log, in marker order, learnt from the ABORT markers
        and from Kafka's ``.txnindex`` files where a broker left them."""
        return [AbortedTransaction(*t) for t in self._native.aborted_transactions()]

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The earliest offset whose record timestamp is >= ``timestamp_ms``, or None."""
        validate.integer("timestamp_ms", timestamp_ms, -(2**63))
        found = self._native.offset_for_timestamp(timestamp_ms)
        return None if found is None else found[0]

    # -- state -----------------------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        """The log start offset: the earliest offset still readable."""
        return self._native.start_offset

    @property
    def end_offset(self) -> int:
        """The log end offset: the offset the next appended record gets."""
        return self._native.end_offset

    @property
    def segments(self) -> list[SegmentInfo]:
        """The segments, oldest first."""
        return [SegmentInfo(*s) for s in self._native.segments]

    @property
    def path(self) -> str:
        """The partition directory."""
        return os.fspath(self._native.path)

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._native.closed

    # -- maintenance -----------------------------------------------------------------------
    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (Kafka's DeleteRecords)."""
        validate.integer("offset", offset, 0)
        return self._native.delete_records_before(offset)

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Delete whole segments past retention_bytes / retention_ms; returns how many."""
        validate.optional_integer("now_ms", now_ms, 0)
        return self._native.enforce_retention(now_ms)

    def clean(
        self,
        delete_retention_ms: int = _TOPIC_DEFAULTS["delete.retention.ms"],
        min_compaction_lag_ms: int = _TOPIC_DEFAULTS["min.compaction.lag.ms"],
        now_ms: int | None = None,
    ) -> dict[str, int]:
        """One log-compaction pass now (``cleanup.policy=compact``): keep the latest record per
        key in the sealed segments, drop tombstones older than ``delete_retention_ms``. Offsets
        are kept. Returns the cleaner's counts (records_removed, bytes_before, bytes_after...).
        Only a log opened with ``compact=True`` is cleaned: compaction drops records without
        keys, which a ``cleanup.policy=delete`` log keeps."""
        validate.integer("delete_retention_ms", delete_retention_ms, 0)
        validate.integer("min_compaction_lag_ms", min_compaction_lag_ms, 0)
        validate.optional_integer("now_ms", now_ms, 0)
        if not self._compact:
            raise InvalidConfigError(
                f"{self.path} was opened with compact=False (cleanup.policy=delete); cleaning it would delete its "
                "records without keys. Open it with compact=True (or set the topic's cleanup.policy=compact)"
            )
        return self._native.clean(delete_retention_ms, min_compaction_lag_ms, now_ms)

    def dirty_ratio(
        self, min_compaction_lag_ms: int = _TOPIC_DEFAULTS["min.compaction.lag.ms"], now_ms: int | None = None
    ) -> float:
        """Uncleaned bytes over cleanable bytes (compared with ``min.cleanable.dirty.ratio``)."""
        validate.integer("min_compaction_lag_ms", min_compaction_lag_ms, 0)
        validate.optional_integer("now_ms", now_ms, 0)
        return self._native.dirty_ratio(min_compaction_lag_ms, now_ms)

    def roll(self) -> None:
        """Seal the active segment and start a new one."""
        self._native.roll()

    def flush(self) -> None:
        """Make everything appended so far durable."""
        self._native.flush()

    def close(self, timeout: float | None = None) -> None:
        """Seal, flush and mark a clean shutdown; idempotent. With ``timeout`` (seconds), give
        up with LogLockedError if another writer holds the partition lock that long."""
        self._native.close(timeout)

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"offsets [{self.start_offset}, {self.end_offset})"
        return f"Log({self.path!r}, {state})"


#: Files at the top of a data directory (kafkalite's metadata, a Kafka broker's identity).
_DATA_DIR_FILES = (_native.TOPICS_FILE, _native.KAFKA_META_PROPERTIES)


def _check_partition_folder(path: str, any_folder: bool) -> None:
    """Refuse a data directory, and unless ``any_folder`` a folder not named
    ``<topic>-<partition>`` (the engine's ``datadir::partition_folder`` decides the name)."""
    marker = next((f for f in _DATA_DIR_FILES if os.path.lexists(os.path.join(path, f))), None)
    if marker is not None:
        raise NotAPartitionDirError(
            f"{path} is a data directory (it holds {marker}), not a partition: open one of its partitions, "
            f"Log({os.path.join(path, '<topic>-<partition>')!r}), or use Producer/Consumer({path!r})"
        )
    folder = os.path.basename(os.path.normpath(path))
    if not any_folder and _native.partition_folder(folder) is None:
        raise NotAPartitionDirError(
            f"{path} is not a partition folder: Log opens a folder named <topic>-<partition> (Kafka's layout, "
            f"such as data/events-0), and {folder!r} is not such a name; to keep a log in a folder of any name "
            "on purpose, pass Log(path, any_folder=True)"
        )


def _values_error(values: object) -> InvalidTypeError:
    """Name the first value append_values cannot take."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        return InvalidTypeError(f"values must be a list of bytes, not {type(values).__name__}")
    for i, v in enumerate(values):  # type: ignore[arg-type]
        if v is None:  # bytes_expected's "(or None)" is not true here
            return InvalidTypeError(
                f"values[{i}] is None: append_values takes bytes only; append a null value (a tombstone) "
                "with append([Record(key, None)])"
            )
        if not isinstance(v, bytes):
            return bytes_expected(f"values[{i}]", v, serializers=False)
    return InvalidTypeError("values must be a list of bytes")


LOG_CONFIG.document(Log)
