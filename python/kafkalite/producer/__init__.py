"""``kafkalite.Producer``: kafka-python's producer API over an embedded data directory.

``send`` is native (``ProducerCore.send``, the base of ``Producer``): for the common record it
runs no Python frame, and ``Accumulator.send`` checks the record, picks its partition, encodes
it into that partition's v2 batch and returns its future. Every other record goes through
``Producer._send_slow``. A full batch is appended by the caller, a partial one by the sender
thread after ``linger_ms``. Futures (``FutureRecordMetadata``, native) resolve when their batch
is in the log. Several producer processes may write the same partition at once (shared writers).

The sender thread and everything it needs live in ``_Sender``; the ``Producer`` object is the
public face and the only owner of the sender. So a producer that is garbage collected, or still
open when the interpreter exits, is flushed by its finalizer (``weakref.finalize``) with a
bounded wait, as kafka-python delivers queued records at exit.

This module holds the public class; beside it in this package, by role: ``sender`` (the sender thread
and what it touches: draining, acknowledging, its schedules, metrics, flush and close),
``logs`` (the partition logs the sender holds: open, reopen, append, retention and
compaction, close),
``topics`` (the topic and partition state), ``callbacks`` (where callbacks
run, and what they may not call), ``threads`` (the flusher thread, closing logs in
parallel), ``checks`` (argument checks) and ``transactional`` (the
transactional methods). The batching and draining themselves are native:
``rust/src/producer/``, wrapped by ``rust/src/py/``."""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from kafkalite import validate
from kafkalite._native import (
    RECORD_TOO_LARGE,
    SEND_CLOSED,
    SEND_DRAIN,
    SEND_FIRST,
    SEND_NO_KEY_OR_VALUE,
    SEND_NULL_KEY,
    FutureRecordMetadata,
    ProducerCore,
    partitions_for_keys,
)
from kafkalite.client_config import PRODUCER_CONFIG
from kafkalite.datadir import DataDir
from kafkalite.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidTypeError,
    ReadOnlyDataDirError,
    RecordTooLargeError,
    with_action,
)
from kafkalite.log import Record
from kafkalite.producer.callbacks import _in_callbacks, _refuse_in_callback
from kafkalite.producer.checks import (
    _NULL_KEY,
    _as_bytes_list,
    _check_partition,
    _check_values,
    _record_error,
)
from kafkalite.producer.sender import _Sender
from kafkalite.producer.topics import _Topic
from kafkalite.producer.transactional import TransactionalProducer
from kafkalite.transactions.manager import TransactionManager

#: How long a producer still open at interpreter exit, or garbage collected while open, waits
#: for its queued records to be written (seconds; ``Producer.close()`` takes its own timeout).
#: Records still unwritten then are named in a logged warning.
EXIT_FLUSH_TIMEOUT = 30.0

#: Producer config keys (kafka-python's names) and their defaults (``PRODUCER_CONFIG``).
DEFAULTS: dict[str, Any] = PRODUCER_CONFIG.defaults()


class RecordMetadata(NamedTuple):
    """Where a record was written."""

    topic: str
    partition: int
    offset: int
    timestamp: int


def _finalize(sender: _Sender, why: str) -> None:
    # EXIT_FLUSH_TIMEOUT read now: a program may have changed it since the producer was made.
    sender.close_at_exit(why, EXIT_FLUSH_TIMEOUT)


class Producer(ProducerCore, TransactionalProducer):
    """``Producer(path, **config)`` with kafka-python's names: ``acks`` (0, 1, 'all'),
    ``batch_size``, ``linger_ms``, ``compression_type`` (None, 'none', 'gzip', 'snappy', 'lz4', 'zstd'),
    ``key_serializer``, ``value_serializer``, ``partitioner``, ``max_request_size``,
    ``client_id``, and kafkalite's ``retention_check_interval_ms`` /
    ``cleaner_check_interval_ms`` (how often this producer runs retention and compaction).

    A batch is sent when it reaches ``batch_size`` bytes or after ``linger_ms``; a record that
    would push a batch past ``batch_size`` (or the topic's ``max.message.bytes`` /
    ``max_request_size``) starts the next batch, and only a record too large for any batch
    fails (``RecordTooLargeError``). A producer not closed is flushed at interpreter exit and
    when garbage collected, waiting at most ``EXIT_FLUSH_TIMEOUT`` seconds.

    Thread safety: as kafka-python's ``KafkaProducer``, a producer is thread-safe; several
    threads may send through one instance (sharing it is cheaper than one per thread). Each
    thread's records to one partition keep that thread's order.

    The first ``send``/``send_batch``/``partitions_for`` of a topic that does not exist creates
    it (and a missing data directory) with the data directory's ``num.partitions``, unless its
    ``auto.create.topics.enable`` is false (``Admin.alter_data_dir_config``), as a Kafka broker
    does. ``path`` must be a data directory, not a broker address (``BrokerAddressError``),
    and not a Kafka broker's log directory (``ReadOnlyDataDirError``; see
    ``Admin.adopt_broker_dir``)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, **config: Any) -> None:
        if "_sender" in self.__dict__:  # its send path and sender thread are this producer's for good
            raise IllegalStateError("this Producer is initialised already: create a new Producer instead")
        # Before the path: Producer(bootstrap_servers=...) is a BrokerAddressError, not a TypeError.
        self.config = PRODUCER_CONFIG.resolve(config)
        if path is None:
            raise InvalidTypeError("Producer() takes the path of a data directory first: Producer('data')")
        data_dir = DataDir(
            validate.path("path", path), create=True
        )  # created by the first auto-created topic
        if data_dir.broker_owned():
            raise ReadOnlyDataDirError(
                f"{data_dir.path} is a Kafka broker's log directory: the broker's metadata log owns its topics, so "
                "kafkalite only reads it (Consumer without group_id, Spark reads) and a Producer may not write it. "
                f"To write it with kafkalite on purpose (no broker may use it afterwards), adopt it first: "
                f"`kafkalite init --adopt {data_dir.path}` or kafkalite.Admin(path).adopt_broker_dir()"
            )
        self._sender = _Sender(data_dir, self.config)
        self._txn: TransactionManager | None = None
        if self.config["transactional_id"] is not None:
            sender = self._sender
            self._txn = sender.txn = TransactionManager(
                data_dir.path,
                self.config["transactional_id"],
                self.config["transaction_timeout_ms"],
                lambda: sum(sender.errors.values()),
            )
            sender.gate.shut()  # no transaction yet: send() takes _send_slow, which raises
        self._topics = self._sender.topics  # shared: send() reads it without a method call
        self._batch_size = self.config["batch_size"]
        self._serializing = (
            self.config["key_serializer"] is not None or self.config["value_serializer"] is not None
        )
        self._custom_partitioner = self.config["partitioner"]
        # send() is ProducerCore.send (native): the common record queues without a Python
        # frame; the others come to _send_slow, and answers beyond the future to _sent.
        direct = not self._serializing and self._custom_partitioner is None
        self._setup_send(self._sender.accumulators, self._sender.gate, direct, self._sender.hooks)
        self._sender.thread.start()
        # Flushes at garbage collection and (weakref.finalize's atexit) at interpreter exit.
        self._finalizer = weakref.finalize(self, _finalize, self._sender, "exit or garbage collection")

    @property
    def _closed(self) -> bool:
        return self._sender.closed

    # -- sending ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        sender = self._sender
        if sender.forked:
            raise sender.forked_error()
        if sender.closed:
            raise IllegalStateError("the producer is closed")
        if sender.failure is not None:
            raise IllegalStateError(
                f"the producer's sender thread stopped ({sender.failure!r}); create a new Producer"
            ) from sender.failure

    def _topic(self, name: Any) -> _Topic:
        try:
            return self._topics[name]
        except KeyError:
            return self._sender.topic(name)
        except TypeError:  # unhashable
            raise InvalidTypeError(f"topic must be a str, not {type(name).__name__}") from None

    def _send_slow(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: Sequence[tuple[str, bytes | None]] | None,
        partition: int | None,
        timestamp_ms: int | None,
    ) -> FutureRecordMetadata:
        """``send`` of a record the native path (``ProducerCore.send``) does not take: a
        closed producer, a new topic, serializers, a custom partitioner, an explicit partition
        or timestamp, a key or value that is not bytes, bad headers."""
        sender = self._sender
        if not sender.gate.open:  # closed, the sender thread died, a forked child, no transaction
            self._check_open()
            if self._txn is not None:
                self._txn.check_send()
        if self._serializing:
            key, value = self._serialize(key, value)
        try:
            t = self._topics[topic]
        except (KeyError, TypeError):
            t = self._topic(topic)
        if partition is not None or self._custom_partitioner is not None:
            partition = self._route(t, key, value, partition)
        if timestamp_ms is not None:
            validate.integer("timestamp_ms", timestamp_ms, 0)
        try:
            sent = t.acc.send(value, key, headers, partition, timestamp_ms)
        except (TypeError, ValueError, OverflowError) as e:
            raise _record_error(value, key, headers) from e
        if isinstance(sent, tuple):
            return self._after_send(t, sent)
        return sent

    def _sent(self, topic: str, sent: tuple[int, int, FutureRecordMetadata | None]) -> FutureRecordMetadata:
        """``ProducerCore.send`` queued (or refused) a record and the answer needs more than
        its future (see ``_after_send``)."""
        return self._after_send(self._topics[topic], sent)

    def _after_send(
        self, t: _Topic, sent: tuple[int, int, FutureRecordMetadata | None]
    ) -> FutureRecordMetadata:
        """What ``send`` does beyond queueing: raise for a refused record, append full batches
        now, wake the sender for a new batch (appended after ``linger_ms``)."""
        code, n, future = sent
        if code == SEND_CLOSED:  # close() (or the sender's death) overtook this send
            self._check_open()
            raise IllegalStateError("the producer is closed")
        if code == SEND_NO_KEY_OR_VALUE:
            raise InvalidConfigError("a record needs a key or a value (None for both is not allowed)")
        if code == SEND_NULL_KEY:
            raise InvalidRecordError(_NULL_KEY.format(topic=t.name))
        if code == RECORD_TOO_LARGE:
            problem = (
                f"the record is {n} bytes as a batch of its own (with the 61-byte batch header), "
                f"more than {t.limit_name} allows for topic {t.name!r}"
            )
            if t.limit_is_topics:
                raise with_action(
                    RecordTooLargeError,
                    problem,
                    "send a smaller record, or raise max.message.bytes",
                    "Admin.alter_config",
                    topic=t.name,
                )
            raise RecordTooLargeError(f"{problem}; raise max_request_size or send a smaller record")
        assert future is not None
        p = t.partitions[n]
        sender = self._sender
        if code & SEND_DRAIN:  # full batches, this record's perhaps: append them now, in order
            if getattr(_in_callbacks, "depth", 0):
                # In a callback this thread may hold this partition's drain lock (or another's,
                # which a thread holding this one waits for): waiting for it would be a deadlock.
                # The sender thread appends them, due now whatever linger_ms.
                sender.wake(p, due=True)
                return future
            sender.drain(p, current=False)
        if code & SEND_FIRST:  # the accumulator noted when the batch started: linger from then
            sender.wake(p)
        return future

    def _serialize(self, key: Any, value: Any) -> tuple[Any, Any]:
        ks, vs = self.config["key_serializer"], self.config["value_serializer"]
        if ks is not None and key is not None:
            key = ks(key)
        if vs is not None and value is not None:
            value = vs(value)
        return key, value

    def _route(self, t: _Topic, key: Any, value: Any, partition: Any) -> int:
        """An explicit ``partition``, checked, else the custom ``partitioner``'s choice (the
        record itself is checked first, so a partitioner never sees a record send refuses)."""
        if value is None and key is None:
            raise InvalidConfigError("a record needs a key or a value (None for both is not allowed)")
        if key is None and t.compacted:
            raise InvalidRecordError(_NULL_KEY.format(topic=t.name))
        if partition is not None:
            return _check_partition(t, partition)
        chosen = self._custom_partitioner(key, t.all, t.all)
        try:
            return _check_partition(t, chosen)
        except InvalidConfigError as e:
            raise type(e)(f"the partitioner returned {chosen!r}: {e}") from None

    def send_batch(
        self,
        topic: str,
        values: Iterable[bytes] | Any,
        keys: Iterable[bytes | None] | Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> dict[int, tuple[int, int]]:
        """Bulk path: append many values (a list or a pyarrow binary/string array) at engine
        speed, synchronously. ``value_serializer`` / ``key_serializer`` apply as in ``send``.
        Keys choose partitions with murmur2 like ``send``; without keys the values go to
        ``partition``, or else are spread by the sticky partitioner as ``send`` spreads them (a
        new partition each time ``batch_size`` bytes went to one). Every argument is checked before anything is
        written. Returns ``{partition: (first offset, last offset)}``. Not permitted inside a
        send callback (``IllegalStateError``): it would wait for the partition being written."""
        _refuse_in_callback("send_batch")
        self._check_open()
        if self._txn is not None:
            self._txn.check_send()
        values = _as_bytes_list(values, "values")
        if keys is not None:
            keys = _as_bytes_list(keys, "keys")
            if len(keys) != len(values):
                raise InvalidConfigError(f"send_batch got {len(values)} values but {len(keys)} keys")
        vs, ks = self.config["value_serializer"], self.config["key_serializer"]
        if vs is not None:
            values = [None if v is None else vs(v) for v in values]
        if ks is not None and keys is not None:
            keys = [None if k is None else ks(k) for k in keys]
        t = self._topic(topic)
        if t.compacted and (keys is None or any(k is None for k in keys)):
            raise InvalidRecordError(_NULL_KEY.format(topic=topic))
        ts = (
            int(time.time() * 1000)
            if timestamp_ms is None
            else validate.integer("timestamp_ms", timestamp_ms, 0)
        )
        if partition is not None:
            partition = _check_partition(t, partition)
        _check_values(values, keys)
        if not values:
            return {}
        groups: dict[int, tuple[list, list | None]] = {}
        if keys is None and partition is not None:
            groups[partition] = (values, None)
        elif keys is None:
            runs = t.sticky.runs(values, ts)
            if len(runs) == 1:
                groups[runs[0][0]] = (values, None)
            for n, start, end in runs if len(runs) > 1 else ():
                groups.setdefault(n, ([], None))[0].extend(values[start:end])
        elif partition is not None:
            groups[partition] = (values, keys)
        else:
            numbers = partitions_for_keys([k if k is not None else b"" for k in keys], len(t.partitions))
            for v, k, n in zip(values, keys, numbers, strict=True):
                g = groups.setdefault(n, ([], []))
                g[0].append(v)
                g[1].append(k)  # type: ignore[union-attr]
        out = {}
        sender = self._sender
        for n, (vals, kss) in groups.items():
            p = t.partitions[n]
            with p.drain_lock:
                sender.drain_locked(p)  # keep send()'s earlier records first
                log = sender.log(p)
                if kss is None:
                    out[n] = log.append_values(vals, ts)
                else:
                    out[n] = log.append(
                        [Record(v, key=k, timestamp=ts) for v, k in zip(vals, kss, strict=True)]
                    )
        sender.notify()
        return out

    # -- lifecycle -------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Append every queued record now and wait until they are in the log."""
        _refuse_in_callback("flush")
        if self._sender.forked:
            raise self._sender.forked_error()
        self._sender.flush(validate.timeout("timeout", timeout))

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender thread, close the partition logs. Idempotent."""
        if not self._sender.closed:
            _refuse_in_callback("close")
        timeout = validate.timeout("timeout", timeout)
        self._finalizer.detach()
        self._sender.close(timeout)

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        """kafka-python's ``metrics()``: ``{group: {name: value}}``, 'producer-metrics' (record-send-rate,
        batch-size-avg, record-size-avg, records-per-request-avg, record-error-rate, ...) and
        'producer-topic-metrics.TOPIC'. Counted per batch as it is appended (``kafkalite.client_metrics``)."""
        return self._sender.metrics()

    def partitions_for(self, topic: str) -> set[int]:
        """The topic's partitions (creating the topic if missing, as a metadata request to a
        broker with auto.create.topics.enable does)."""
        self._check_open()
        return set(range(len(self._topic(topic).partitions)))

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


PRODUCER_CONFIG.document(Producer)
