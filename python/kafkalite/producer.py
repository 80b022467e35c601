"""``kafkalite.Producer``: kafka-python's producer API over an embedded data directory.

``send`` encodes each record straight into its partition's v2 batch in Rust (a
``BatchBuffer``); a full batch is appended by the caller, a partial one by the sender thread
after ``linger_ms``. Futures resolve when their batch is in the log. Several producer
processes may write the same partition at once (shared writers)."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from kafkalite._native import BatchBuffer, Notifier, partitions_for_keys
from kafkalite.compaction import clean_if_dirty
from kafkalite.datadir import NOTIFY_FILE, DataDir, is_compacted, log_options
from kafkalite.errors import (
    InvalidRecordError,
    IllegalStateError,
    InvalidConfigError,
    KafkaliteError,
    KafkaTimeoutError,
    RecordTooLargeError,
)
from kafkalite.log import Log
from kafkalite.partitioner import partition_for_key

DEFAULTS: dict[str, Any] = {
    "acks": 1,
    "batch_size": 16384,
    "linger_ms": 0,
    "compression_type": None,
    "key_serializer": None,
    "value_serializer": None,
    "partitioner": None,
    "max_request_size": 1048576,
    "client_id": None,
    "retention_check_interval_ms": 300_000,
    "cleaner_check_interval_ms": 15_000,
}


_NULL_KEY = "topic {topic!r} is compacted (cleanup.policy=compact), so every record needs a key; got key=None"


class RecordMetadata(NamedTuple):
    """Where a record was written."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class _Batch:
    """What the futures of one partition batch wait on."""

    __slots__ = ("topic", "partition", "done", "first_offset", "log_append_time", "error", "callbacks")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.done = threading.Event()
        self.first_offset = -1
        self.log_append_time: int | None = None
        self.error: BaseException | None = None
        self.callbacks: list[tuple[FutureRecordMetadata, bool, Callable, tuple]] = []


class FutureRecordMetadata:
    """kafka-python's future: ``get(timeout)``, ``add_callback``, ``add_errback``, ``is_done``."""

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch: _Batch, index: int, timestamp: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp

    @property
    def is_done(self) -> bool:
        return self._batch.done.is_set()

    def succeeded(self) -> bool:
        return self.is_done and self._batch.error is None

    def failed(self) -> bool:
        return self.is_done and self._batch.error is not None

    @property
    def value(self) -> RecordMetadata | None:
        return self._metadata() if self.succeeded() else None

    @property
    def exception(self) -> BaseException | None:
        return self._batch.error if self.is_done else None

    def _metadata(self) -> RecordMetadata:
        b = self._batch
        ts = b.log_append_time if b.log_append_time is not None else self._timestamp
        return RecordMetadata(b.topic, b.partition, b.first_offset + self._index, ts)

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait until the record is in the log and return where; raise what went wrong."""
        if not self._batch.done.wait(timeout):
            raise KafkaTimeoutError(f"record not written within {timeout} s")
        if self._batch.error is not None:
            raise self._batch.error
        return self._metadata()

    def add_callback(self, fn: Callable, *args: Any) -> FutureRecordMetadata:
        """Call ``fn(*args, metadata)`` once the record is written."""
        return self._add(True, fn, args)

    def add_errback(self, fn: Callable, *args: Any) -> FutureRecordMetadata:
        """Call ``fn(*args, exception)`` if writing fails."""
        return self._add(False, fn, args)

    def _add(self, on_success: bool, fn: Callable, args: tuple) -> FutureRecordMetadata:
        b = self._batch
        if b.done.is_set():
            _fire(self, on_success, fn, args)
        else:
            b.callbacks.append((self, on_success, fn, args))
            if b.done.is_set():  # resolved while we appended: make sure it fires once
                _resolve_callbacks(b)
        return self


def _fire(future: FutureRecordMetadata, on_success: bool, fn: Callable, args: tuple) -> None:
    err = future._batch.error
    if on_success and err is None:
        fn(*args, future._metadata())
    elif not on_success and err is not None:
        fn(*args, err)


def _resolve_callbacks(batch: _Batch) -> None:
    while batch.callbacks:
        try:
            future, on_success, fn, args = batch.callbacks.pop(0)
        except IndexError:
            break
        try:
            _fire(future, on_success, fn, args)
        except Exception:  # a user callback must not kill the sender thread
            import traceback

            traceback.print_exc()


class _Partition:
    """Per-partition state: the batch being built with its futures' shared state (swapped
    together as one tuple), and the log."""

    __slots__ = ("topic", "number", "current", "first_add", "log", "drain_lock", "codec")

    def __init__(self, topic: str, number: int, codec: str) -> None:
        self.topic = topic
        self.number = number
        self.codec = codec
        self.current: tuple[BatchBuffer, _Batch] = (BatchBuffer(codec), _Batch(topic, number))
        self.first_add = 0.0
        self.log: Log | None = None
        self.drain_lock = threading.Lock()


class _Topic:
    __slots__ = ("name", "partitions", "all", "sticky", "max_bytes", "codec", "config", "compacted")

    def __init__(self, name: str, count: int, codec: str, max_bytes: int, config: dict[str, Any]) -> None:
        self.name = name
        self.config = config
        self.compacted = is_compacted(config)  # checked by every keyless send()
        self.partitions = [_Partition(name, p, codec) for p in range(count)]
        self.all = list(range(count))
        self.sticky = random.randrange(count)
        self.max_bytes = max_bytes
        self.codec = codec


class Producer:
    """``Producer(path, **config)`` with kafka-python's names: ``acks`` (0, 1, 'all'),
    ``batch_size``, ``linger_ms``, ``compression_type`` (None/'none'/'zstd'),
    ``key_serializer``, ``value_serializer``, ``partitioner``, ``max_request_size``."""

    def __init__(self, path: str | os.PathLike[str], **config: Any) -> None:
        unknown = sorted(set(config) - set(DEFAULTS))
        if unknown:
            raise InvalidConfigError(f"unknown producer config {unknown[0]!r}; supported: {', '.join(sorted(DEFAULTS))}")
        self.config = {**DEFAULTS, **config}
        acks = self.config["acks"]
        if acks not in (0, 1, -1, "all", "0", "1", "-1"):
            raise InvalidConfigError(f"acks must be 0, 1 or 'all', not {acks!r}")
        self._durable = acks in (-1, "all", "-1")
        codec = self.config["compression_type"] or "none"
        if codec not in ("none", "zstd"):
            raise InvalidConfigError(f"compression_type must be None, 'none' or 'zstd' (kafkalite writes no {codec!r}), not {codec!r}")
        for key in ("batch_size", "max_request_size"):
            if not isinstance(self.config[key], int) or self.config[key] <= 0:
                raise InvalidConfigError(f"{key} must be a positive integer, not {self.config[key]!r}")
        if not isinstance(self.config["linger_ms"], (int, float)) or self.config["linger_ms"] < 0:
            raise InvalidConfigError(f"linger_ms must be >= 0, not {self.config['linger_ms']!r}")
        for key in ("key_serializer", "value_serializer", "partitioner"):
            if self.config[key] is not None and not callable(self.config[key]):
                raise InvalidConfigError(f"{key} must be callable")
        self._dir = DataDir(path)
        self._notifier = Notifier(os.path.join(self._dir.path, NOTIFY_FILE))
        self._topics: dict[str, _Topic] = {}
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(threading.Lock())
        self._dirty: set[_Partition] = set()
        self._closed = False
        self._batch_size = self.config["batch_size"]
        self._serializing = self.config["key_serializer"] is not None or self.config["value_serializer"] is not None
        self._custom_partitioner = self.config["partitioner"]
        self._linger = self.config["linger_ms"] / 1000.0
        self._sender = threading.Thread(target=self._run_sender, name="kafkalite-producer-sender", daemon=True)
        self._sender.start()

    # -- sending ---------------------------------------------------------------------------
    def _topic(self, name: str) -> _Topic:
        topic = self._topics.get(name)
        if topic is None:
            meta = self._dir.topic(name)
            options = log_options(meta.get("config", {}))
            topic_codec = meta.get("config", {}).get("compression.type", "producer")
            codec = (self.config["compression_type"] or "none") if topic_codec == "producer" else options["compression"]
            max_bytes = min(options["max_message_bytes"], self.config["max_request_size"])
            topic = _Topic(name, int(meta["partitions"]), codec, max_bytes, meta.get("config", {}))
            with self._lock:
                self._topics.setdefault(name, topic)
            topic = self._topics[name]
        return topic

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Queue one record; returns a future of its ``RecordMetadata``."""
        if self._closed:
            raise IllegalStateError("the producer is closed")
        if value is None and key is None:
            raise InvalidConfigError("a record needs a key or a value (None for both is not allowed)")
        if self._serializing:
            key, value = self._serialize(key, value)
        t = self._topics.get(topic) or self._topic(topic)
        if key is None and t.compacted:
            raise InvalidRecordError(_NULL_KEY.format(topic=topic))
        if partition is None:
            partition = t.sticky if key is None and self._custom_partitioner is None else self._choose_partition(t, key)
        elif not 0 <= partition < len(t.partitions):
            raise InvalidConfigError(f"topic {topic!r} has partitions 0..{len(t.partitions) - 1}; there is no partition {partition}")
        p = t.partitions[partition]
        while True:  # a buffer taken by the sender meanwhile refuses the record: use the next one
            buffer, batch = p.current
            added = buffer.add(value, key, headers, timestamp_ms, t.max_bytes)
            if added is not None:
                break
        index, batch_bytes, ts = added
        future = FutureRecordMetadata(batch, index, ts)
        if batch_bytes >= self._batch_size:
            self._drain(p)
        elif index == 0:
            p.first_add = time.monotonic()
            with self._wakeup:
                self._dirty.add(p)
                self._wakeup.notify()
        return future

    def _serialize(self, key: Any, value: Any) -> tuple[Any, Any]:
        ks, vs = self.config["key_serializer"], self.config["value_serializer"]
        if ks is not None and key is not None:
            key = ks(key)
        if vs is not None and value is not None:
            value = vs(value)
        return key, value

    def _choose_partition(self, t: _Topic, key: bytes | None) -> int:
        custom = self.config["partitioner"]
        if custom is not None:
            return int(custom(key, t.all, t.all))
        if key is None:
            return t.sticky
        return partition_for_key(key, len(t.partitions))

    def send_batch(
        self,
        topic: str,
        values: Iterable[bytes] | Any,
        keys: Iterable[bytes | None] | Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> dict[int, tuple[int, int]]:
        """Bulk path: append many values (a list or a pyarrow binary/string array) at engine
        speed, synchronously. Keys choose partitions with murmur2 like ``send``; without keys
        all values go to ``partition`` (default: the sticky one). Returns
        ``{partition: (first offset, last offset)}``."""
        if self._closed:
            raise IllegalStateError("the producer is closed")
        values = _as_bytes_list(values, "values")
        t = self._topics.get(topic) or self._topic(topic)
        if t.compacted and (keys is None or any(k is None for k in keys)):
            raise InvalidRecordError(_NULL_KEY.format(topic=topic))
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        groups: dict[int, tuple[list, list | None]] = {}
        if keys is None:
            target = t.sticky if partition is None else partition
            if not 0 <= target < len(t.partitions):
                raise InvalidConfigError(f"topic {topic!r} has no partition {target}")
            groups[target] = (values, None)
        else:
            keys = _as_bytes_list(keys, "keys")
            if len(keys) != len(values):
                raise InvalidConfigError(f"send_batch got {len(values)} values but {len(keys)} keys")
            if partition is not None:
                groups[partition] = (values, keys)
            else:
                numbers = partitions_for_keys([k if k is not None else b"" for k in keys], len(t.partitions))
                for v, k, n in zip(values, keys, numbers):
                    g = groups.setdefault(n, ([], []))
                    g[0].append(v)
                    g[1].append(k)  # type: ignore[union-attr]
        out = {}
        for n, (vals, ks) in groups.items():
            p = t.partitions[n]
            with p.drain_lock:
                self._drain_locked(p)  # keep send()'s earlier records first
                log = self._log(p)
                if ks is None:
                    out[n] = log.append_values(vals, ts)
                else:
                    from kafkalite.log import Record

                    out[n] = log.append([Record(v, key=k, timestamp=ts) for v, k in zip(vals, ks)])
        self._notifier.notify()
        return out

    # -- appending -------------------------------------------------------------------------
    def _log(self, p: _Partition) -> Log:
        if p.log is None:
            options = {"shared_writers": True, "flush": "always" if self._durable else "os"}
            p.log = self._dir.open_partition(p.topic, p.number, **options)
        return p.log

    def _drain(self, p: _Partition) -> None:
        with p.drain_lock:
            self._drain_locked(p)
        self._notifier.notify()

    def _drain_locked(self, p: _Partition) -> None:
        buffer, batch = p.current
        if len(buffer) == 0:
            return
        p.current = (BatchBuffer(p.codec), _Batch(p.topic, p.number))
        t = self._topics[p.topic]
        if t.sticky == p.number and len(t.partitions) > 1:  # KIP-480: a new sticky partition per batch
            t.sticky = random.choice([n for n in t.all if n != p.number])
        try:
            result = self._log(p)._native.append_buffer(buffer)
            if result is not None:
                batch.first_offset, _, batch.log_append_time = result
        except KafkaliteError as e:
            batch.error = e
        except Exception as e:  # report anything else through the futures too
            batch.error = e
        batch.done.set()
        _resolve_callbacks(batch)

    def _run_sender(self) -> None:
        next_retention = time.monotonic() + self.config["retention_check_interval_ms"] / 1000.0
        next_cleaning = time.monotonic() + self.config["cleaner_check_interval_ms"] / 1000.0
        while True:
            with self._wakeup:
                if not self._dirty and not self._closed:
                    next_due = min(next_retention, next_cleaning)
                    self._wakeup.wait(timeout=max(0.0, min(1.0, next_due - time.monotonic())))
                dirty, self._dirty = self._dirty, set()
                closing = self._closed
            if self._linger and dirty and not closing:
                oldest = min(p.first_add for p in dirty)
                delay = oldest + self._linger - time.monotonic()
                if delay > 0:
                    with self._wakeup:  # close() cuts the linger short
                        self._wakeup.wait_for(lambda: self._closed, timeout=delay)
            for p in dirty:
                self._drain(p)
            if time.monotonic() >= next_retention:
                self._enforce_retention()
                next_retention = time.monotonic() + self.config["retention_check_interval_ms"] / 1000.0
            if time.monotonic() >= next_cleaning and not closing:
                self._compact_dirty_partitions()
                next_cleaning = time.monotonic() + self.config["cleaner_check_interval_ms"] / 1000.0
            if closing:
                return

    def _enforce_retention(self) -> None:
        """Time and size retention for every topic of the data directory (Kafka's broker does
        this every log.retention.check.interval.ms): through this producer's open logs where it
        has them, by opening the others briefly as a shared writer."""
        from kafkalite.admin import Admin

        others = []
        for name in self._dir.topics():
            t = self._topics.get(name)
            if t is None:
                others.append(name)
                continue
            for p in t.partitions:
                try:
                    with p.drain_lock:
                        if p.log is not None:
                            p.log.enforce_retention()
                        elif os.path.isdir(self._dir.partition_path(name, p.number)):
                            with self._dir.open_partition(name, p.number, shared_writers=True) as log:
                                log.enforce_retention()
                except KafkaliteError:
                    pass  # retention is retried on the next pass
        try:
            Admin(self._dir.path).enforce_retention(others)
        except KafkaliteError:
            pass

    def _compact_dirty_partitions(self) -> None:
        """Kafka's background cleaner, for the compacted partitions this producer writes:
        clean those whose dirty ratio reached ``min.cleanable.dirty.ratio``."""
        for t in list(self._topics.values()):
            if not t.compacted:
                continue
            for p in t.partitions:
                try:
                    with p.drain_lock:
                        if p.log is not None:
                            clean_if_dirty(p.log, t.config)
                except KafkaliteError:
                    pass  # retried on the next pass

    # -- lifecycle -------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Append every queued record now and wait until they are in the log."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in list(self._topics.values()):
            for p in t.partitions:
                if deadline is not None and time.monotonic() > deadline:
                    raise KafkaTimeoutError(f"flush did not finish within {timeout} s")
                self._drain(p)
                if p.log is not None and self._durable:
                    p.log.flush()

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender thread, close the partition logs. Idempotent."""
        if self._closed:
            return
        self.flush(timeout)
        with self._wakeup:
            self._closed = True
            self._wakeup.notify()
        self._sender.join(timeout)
        for t in self._topics.values():
            for p in t.partitions:
                if p.log is not None:
                    p.log.close(timeout)
                    p.log = None

    def metrics(self) -> dict[str, Any]:
        return {}

    def partitions_for(self, topic: str) -> set[int]:
        return set(range(self._dir.partitions(topic)))

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _as_bytes_list(items: Any, what: str) -> list:
    """A list of bytes (or None) from a list or a pyarrow array."""
    if isinstance(items, list):
        return items
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover
        pa = None
    if pa is not None and isinstance(items, (pa.Array, pa.ChunkedArray)):
        if pa.types.is_string(items.type) or pa.types.is_large_string(items.type):
            items = items.cast(pa.binary())
        return items.to_pylist()
    return list(items)
