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

This module holds the topic and partition state, the sender thread (``_Sender``) and the public
class; beside it, by role: ``producer_callbacks`` (where callbacks run, and what they may not
call), ``producer_threads`` (the flusher thread, closing logs in parallel), ``producer_checks``
(argument checks) and ``producer_transactions`` (the transactional methods). The batching and
draining themselves are native: ``rust/src/producer/``, wrapped by ``rust/src/py/``."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from kafkalite import transactions, validate
from kafkalite._native import (
    RECORD_TOO_LARGE,
    SEND_CLOSED,
    SEND_DRAIN,
    SEND_FIRST,
    SEND_NO_KEY_OR_VALUE,
    SEND_NULL_KEY,
    Accumulator,
    BatchBuffer,
    BatchState,
    DurableMark,
    FutureRecordMetadata,
    Notifier,
    ProducerCore,
    SendGate,
    StickyPartitioner,
    drain_partition,
    partitions_for_keys,
)
from kafkalite.client_config import PRODUCER_CONFIG
from kafkalite.client_metrics import StatsReporter, avg, rate
from kafkalite.compaction import clean_if_dirty
from kafkalite.datadir import METADATA_FILE, NOTIFY_FILE, DataDir, is_compacted, log_options
from kafkalite.durable_acks import DurableAcks
from kafkalite.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidRecordError,
    InvalidTypeError,
    KafkaliteError,
    KafkaTimeoutError,
    LogPoisonedError,
    NotADataDirError,
    ReadOnlyDataDirError,
    RecordTooLargeError,
    UnknownTopicError,
    UnknownTopicOrPartitionError,
    with_action,
)
from kafkalite.log import Log, Record
from kafkalite.producer_callbacks import _finish_batch, _in_callbacks, _refuse_in_callback
from kafkalite.producer_checks import (
    _NULL_KEY,
    _as_bytes_list,
    _check_partition,
    _check_values,
    _record_error,
)
from kafkalite.producer_threads import _close_logs, _Flusher, _log_background_failure
from kafkalite.producer_transactions import TransactionalProducer
from kafkalite.transactions import TransactionManager

logger = logging.getLogger("kafkalite.producer")

#: How long closing a deleted or idle partition's log may wait for its append lock (another
#: process's writer may hold it, even stopped): the sender thread must go on sending.
_CLOSE_TIMEOUT = 1.0
#: A file mtime older than this is final: a later change gets a later mtime even where the
#: file system's clock ticks coarsely (Linux stamps with the jiffy clock, some file systems by
#: the second).
_MTIME_SETTLED_NS = 2_000_000_000

#: How long a producer still open at interpreter exit, or garbage collected while open, waits
#: for its queued records to be written (seconds; ``Producer.close()`` takes its own timeout).
#: Records still unwritten then are named in a logged warning.
EXIT_FLUSH_TIMEOUT = 30.0

#: How long an acks='all' batch waits for another writer's sync (a stopped process holding the
#: partition's sync lock) before it fails: the engine's lock timeout, Kafka's max.block.ms default.
_DURABLE_TIMEOUT_MS = 60_000

#: Producer config keys (kafka-python's names) and their defaults (``PRODUCER_CONFIG``).
DEFAULTS: dict[str, Any] = PRODUCER_CONFIG.defaults()


class RecordMetadata(NamedTuple):
    """Where a record was written."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class _Partition:
    """Per-partition state: the topic's accumulator that holds this partition's queued
    records, the log, and the identity (device, inode) of the directory the log was opened on,
    to notice a deleted (and perhaps re-created) topic."""

    __slots__ = (
        "topic",
        "number",
        "acc",
        "log",
        "identity",
        "drain_lock",
        "inflight",
        "last_used",
    )

    def __init__(self, topic: str, number: int, acc: Accumulator) -> None:
        self.topic = topic
        self.number = number
        self.acc = acc
        self.log: Log | None = None
        self.identity: tuple[int, int] | None = None
        self.drain_lock = threading.Lock()
        self.inflight = 0  # records of the batch being appended now (for the exit warning)
        self.last_used = 0.0  # monotonic time of the last append (metadata_max_idle_ms)


class _Topic:
    __slots__ = (
        "name",
        "partitions",
        "all",
        "sticky",
        "max_bytes",
        "limit_name",
        "limit_is_topics",
        "codec",
        "config",
        "compacted",
        "batch_size",
        "acc",
    )

    def __init__(
        self,
        name: str,
        meta: dict[str, Any],
        config: dict[str, Any],
        producer_codec: str,
        max_request_size: int,
        batch_size: int,
    ) -> None:
        self.name = name
        self.partitions: list[_Partition] = []
        self.batch_size = batch_size
        self.acc = Accumulator(name, batch_size)  # send()'s records, per partition, in Rust
        self.configure(meta, config, producer_codec, max_request_size)

    def configure(
        self, meta: dict[str, Any], config: dict[str, Any], producer_codec: str, max_request_size: int
    ) -> None:
        """Take the topic's (possibly new) metadata and effective config (``DataDir.resolve``):
        limits, codec, partition count."""
        self.config = config
        self.compacted = is_compacted(self.config)  # checked by every keyless send()
        options = log_options(self.config, producer_codec)
        self.codec = options["compression"]  # the same resolution as send_batch's Log (target_compression)
        # The hard cap of an encoded batch, and the setting to raise when a record exceeds it.
        if options["max_message_bytes"] <= max_request_size:
            self.max_bytes = options["max_message_bytes"]
            self.limit_name = f"the topic's max.message.bytes ({self.max_bytes})"
            self.limit_is_topics = True
        else:
            self.max_bytes = max_request_size
            self.limit_name = f"the producer's max_request_size ({max_request_size})"
            self.limit_is_topics = False
        count = int(meta["partitions"])
        resized = count != len(self.partitions)  # re-created with another partition count
        if resized:
            kept = self.partitions[:count]
            partitions = kept + [_Partition(self.name, p, self.acc) for p in range(len(kept), count)]
            # Other threads send meanwhile (the GIL may switch between these lines): send() looks
            # up the partition the accumulator chose in `partitions`, a custom partitioner picks
            # from `all`. So `partitions` grows before the accumulator and shrinks after it, and
            # `all` the other way round: neither names a partition the other lacks.
            if count > len(self.partitions):
                self.partitions = partitions
            else:
                self.all = list(range(count))
            # Keyless records: Kafka's sticky partitioner (a new partition per batch_size bytes).
            self.sticky = StickyPartitioner(count, self.batch_size, random.getrandbits(64))
        failed = self.acc.configure(count, self.sticky, self.codec, self.compacted, self.max_bytes)
        if resized:
            self.partitions = partitions
            self.all = list(range(count))
        for batch in failed:
            batch.fail(
                UnknownTopicOrPartitionError(
                    f"topic {self.name!r} has no partition {batch.partition} any more (it was deleted and "
                    f"created again with {count} partitions); its queued records were not written"
                )
            )


#: Every producer's sender, for ``_shut_in_forked_child``.
_senders: weakref.WeakSet[_Sender] = weakref.WeakSet()


def _shut_in_forked_child() -> None:
    """A forked child has a copy of its parent's producers without their sender threads: a
    record it sent would never be appended, and its flush would append the parent's queued
    records a second time. Its sends take the Python path, which refuses them (``forked``)."""
    for sender in list(_senders):
        sender.gate.shut()


os.register_at_fork(after_in_child=_shut_in_forked_child)


class _Sender:
    """Everything the sender thread touches: topics, partition logs, the wake-up condition.
    It holds no reference to the ``Producer``, so an abandoned producer can be collected (and
    its finalizer flushes this)."""

    def __init__(self, data_dir: DataDir, config: dict[str, Any]) -> None:
        self.dir = data_dir
        self.config = config
        acks = config["acks"]
        self.durable = acks in (-1, "all", "-1")
        self.codec = config["compression_type"] or "none"
        # The wake-up file lives in the data directory: opened now if it exists, else once an
        # auto-created topic made it (a Producer never creates the directory by itself).
        self._notifier: Notifier | None = None
        if os.path.isdir(data_dir.path):
            self._notifier = Notifier(os.path.join(data_dir.path, NOTIFY_FILE))
        self.topics: dict[str, _Topic] = {}
        #: Each topic's accumulator, by name: what ``ProducerCore.send`` looks a topic up in.
        self.accumulators: dict[str, Accumulator] = {}
        #: Shut when the producer closes or this thread dies: ``send`` then takes the Python path.
        self.gate = SendGate()
        self.lock = threading.Lock()
        self.wakeup = threading.Condition(threading.Lock())
        self.dirty: set[_Partition] = set()
        #: True while the sender thread waits with nothing to send: only then does a new batch
        #: need to wake it (otherwise it finds the batch in ``dirty`` on its next pass). Each
        #: needless wake-up hands the GIL to the sender thread and back, per batch.
        self.idle = False
        #: A partition in ``dirty`` must be appended now, whatever linger_ms (full batches a
        #: callback queued): cuts the sender's linger wait short.
        self.due = False
        self.closed = False
        #: Set when the sender thread died: later sends raise at once instead of timing out.
        self.failure: BaseException | None = None
        self.linger = config["linger_ms"] / 1000.0
        self.pid = os.getpid()  # a forked child must not flush its parent's records at its exit
        self.thread = threading.Thread(target=self.run, name="kafkalite-producer-sender", daemon=True)
        self.flusher = _Flusher()
        #: Held by the close() under way: a second caller waits for it (see close). Reentrant: a
        #: signal handler closing the producer may interrupt this thread's own close().
        self.close_lock = threading.RLock()
        #: acks='all': batches appended and waiting for group commit before they are acknowledged.
        self.acks = DurableAcks(_finish_batch, _DURABLE_TIMEOUT_MS)
        #: The metadata file's identity when forget_deleted last swept (None: sweep next time).
        self.swept_metadata: tuple[int, int, int] | None = None
        #: Records whose batch failed to append, by topic (``metrics()``'s record-error-*).
        self.errors: dict[str, int] = {}
        self.stats = StatsReporter(config, "producer", self.statistics)
        #: A transactional producer's transactions: every log it opens is attached to them.
        self.txn: TransactionManager | None = None
        _senders.add(self)

    @property
    def forked(self) -> bool:
        """True in a process forked after this producer was made (see ``_shut_in_forked_child``)."""
        return os.getpid() != self.pid

    def forked_error(self) -> IllegalStateError:
        return IllegalStateError(
            f"this producer was created in process {self.pid} before os.fork(); a forked process "
            "cannot use it (its records would never be written): create a new Producer in the child"
        )

    def wake(self, p: _Partition, due: bool = False) -> None:
        """Have the sender thread append ``p``'s records: ``linger_ms`` after its batch got
        its first record (the accumulator notes when), or at once when ``due``."""
        with self.wakeup:
            self.dirty.add(p)
            if due:
                self.due = True
                self.wakeup.notify()
            elif self.idle:
                self.wakeup.notify()

    def notify(self) -> None:
        """Wake readers in every process (the wake-up file is made with the data directory)."""
        if self._notifier is None:
            self._notifier = Notifier(os.path.join(self.dir.path, NOTIFY_FILE))
        self._notifier.notify()

    # -- topics and logs ------------------------------------------------------------------
    def topic(self, name: str) -> _Topic:
        """The topic, created on first use when missing and the data directory's
        ``auto.create.topics.enable`` allows (a broker creates it on the first produce)."""
        topic = self.topics.get(name)
        if topic is None:
            try:
                meta = self.dir.topic(name)
            except (UnknownTopicError, NotADataDirError):  # a missing directory is made with the topic
                meta = self.dir.auto_create(name)
            config = self.dir.resolve(meta.get("config", {}))
            topic = _Topic(
                name, meta, config, self.codec, self.config["max_request_size"], self.config["batch_size"]
            )
            with self.lock:
                topic = self.topics.setdefault(name, topic)
                self.accumulators.setdefault(name, topic.acc)
                if self.closed or self.failure is not None:  # see refuse_records
                    topic.acc.close()
        return topic

    def refuse_records(self) -> None:
        """Take no more records (close, or the sender thread died): shut the gate, so ``send``
        takes the Python path that raises why, and have every accumulator refuse records from
        now on, before the last take of what they hold: a send that passed the open-check
        earlier and queues only now (a thread preempted in between, a serializer running) is
        refused (``SEND_CLOSED``) instead of queued where nobody appends it."""
        self.gate.shut()
        with self.lock:
            for t in self.topics.values():
                try:
                    t.acc.close()
                except LogPoisonedError:  # a panic poisoned it: it refuses every record already
                    pass

    def identity(self, p: _Partition) -> tuple[int, int] | None:
        """The (device, inode) of the partition's directory now; None when it is gone."""
        try:
            st = os.stat(self.dir.partition_path(p.topic, p.number))
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino)

    def close_log(self, p: _Partition) -> None:
        """Close the partition's log (the caller holds ``p.drain_lock``). Its queued records stay
        queued: the next append reopens the log, or fails them typed if the topic is gone."""
        stale, p.log, p.identity = p.log, None, None
        if stale is None:
            return
        try:
            stale.close(_CLOSE_TIMEOUT)
        except Exception:  # the handle is dropped anyway: dropping it releases what close did not
            logger.warning("closing the log of %s-%d failed", p.topic, p.number, exc_info=True)

    def log(self, p: _Partition) -> Log:
        """The partition's log, reopened when its directory is not the one it was opened on
        (the topic was deleted, perhaps created again). The engine repeats this check under
        the append lock, so a delete racing with this append also fails it (typed), never
        acknowledges it."""
        p.last_used = time.monotonic()
        current = self.identity(p)
        if p.log is not None and current == p.identity:
            return p.log
        if p.log is not None:  # deleted: drop the stale handle, re-read the topic
            logger.warning(
                "topic %r partition %d was deleted while this producer wrote it; re-reading the topic",
                p.topic,
                p.number,
            )
            self.close_log(p)
        try:
            meta = self.dir.topic(p.topic)
        except UnknownTopicError:
            raise UnknownTopicOrPartitionError(
                f"topic {p.topic!r} was deleted from {self.dir.path}"
            ) from None
        t = self.topics.get(p.topic)
        if t is not None and current != p.identity:
            t.configure(
                meta, self.dir.resolve(meta.get("config", {})), self.codec, self.config["max_request_size"]
            )
        if p.number >= int(meta["partitions"]) or current is None:
            raise UnknownTopicOrPartitionError(
                f"topic {p.topic!r} has no partition {p.number} (any more) in {self.dir.path}"
            )
        # Opening a partition is a metadata request in Kafka: first let go of deleted topics'
        # logs, so the new log gets the preallocation budget they held.
        self.forget_deleted()
        options = {"shared_writers": True, "flush": "always" if self.durable else "os"}
        try:
            log = self.dir.open_partition(p.topic, p.number, producer_compression=self.codec, **options)
        except FileNotFoundError:  # deleted between the stat above and the open
            raise UnknownTopicOrPartitionError(
                f"topic {p.topic!r} partition {p.number} was deleted from {self.dir.path}"
            ) from None
        if self.txn is not None:
            self.txn.attach(log)
        p.log, p.identity = log, current
        return log

    def append(
        self, p: _Partition, buffer: BatchBuffer
    ) -> tuple[int, int, int | None, DurableMark | None] | None:
        """Append one taken batch to the partition (the caller holds ``p.drain_lock``): into
        the open log while its folder is the one it opened (checked natively; the append keeps
        the GIL unless another thread or writer holds the log), else through ``log``, which
        reopens the partition of a re-created topic or fails the batch typed when it is gone."""
        p.last_used = time.monotonic()
        if p.log is not None:
            result = p.log._native.append_buffer_deferred(buffer, if_current=True)
            if result is not False:
                return result
        return self.log(p)._native.append_buffer_deferred(buffer)

    def forget_deleted(self) -> None:
        """``forget_unused``, when a topic may have been deleted since the last sweep: deleting
        (or re-creating) a topic rewrites the data directory's metadata file (atomically: a new
        inode). This keeps a producer opening many partitions from stat-ing every open one each
        time. (The directory's own mtime would not do: opening a log rewrites checkpoints there.)"""
        try:
            st = os.stat(os.path.join(self.dir.path, METADATA_FILE))
            signature: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
            settled = st.st_mtime_ns < time.time_ns() - _MTIME_SETTLED_NS
        except FileNotFoundError:  # no metadata file: nothing to compare, sweep every time
            signature, settled = None, False
        if signature is not None and signature == self.swept_metadata:
            return
        self.forget_unused()
        self.swept_metadata = signature if settled else None

    def forget_unused(self) -> None:
        """Kafka's metadata refresh, for the logs this producer holds: close those of deleted
        (or re-created) partitions, and those not written for ``metadata_max_idle_ms`` that have
        no records queued (reopened on next use). A partition being written now (its drain lock
        taken, perhaps by the caller) is skipped: its own append notices a deletion."""
        idle_before = time.monotonic() - self.config["metadata_max_idle_ms"] / 1000.0
        for t in list(self.topics.values()):
            for p in list(t.partitions):
                if p.log is None or not p.drain_lock.acquire(blocking=False):
                    continue
                try:
                    if p.log is None:
                        continue
                    if self.identity(p) != p.identity:
                        logger.info("closing the log of %s-%d: the topic was deleted", p.topic, p.number)
                        self.close_log(p)
                    elif p.last_used < idle_before and not p.acc.pending(p.number):
                        logger.debug("closing the log of %s-%d: idle", p.topic, p.number)
                        self.close_log(p)
                finally:
                    p.drain_lock.release()

    # -- appending ------------------------------------------------------------------------
    def drain(self, p: _Partition, current: bool = True) -> None:
        # The common case natively (drain.rs: an open log, the lock free, acks 0 or 1, not in a
        # callback); else here, waiting for the lock.
        if drain_partition(self, p, current):
            return
        with p.drain_lock:
            self.drain_locked(p, current)
        self.notify()

    def drain_locked(self, p: _Partition, current: bool = True) -> None:
        """Append the partition's full batches in order, and the one being built if
        ``current``; resolve each batch's futures (callbacks run here)."""
        taken = p.acc.take(p.number, current)
        if not taken:
            return
        p.inflight = sum(len(buffer) for buffer, _ in taken)
        _in_callbacks.depth = getattr(_in_callbacks, "depth", 0) + 1
        # A KeyboardInterrupt or SystemExit (a callback's, or a signal's) is raised once every
        # taken batch was appended and resolved: the batches are out of the accumulator, and
        # stopping at the first would lose the others' records and never resolve their futures.
        interrupted: BaseException | None = None
        try:
            for buffer, batch in taken:
                try:
                    self.append_one(p, buffer, batch)
                except BaseException as e:  # raised below, after the other batches
                    interrupted = interrupted or e
        finally:
            p.inflight = 0
            _in_callbacks.depth -= 1
        if interrupted is not None:
            raise interrupted

    def append_one(self, p: _Partition, buffer: BatchBuffer, batch: BatchState) -> None:
        """Append one taken batch and resolve (acks='all': hand over) its futures; the caller
        holds ``p.drain_lock``, counted the batch in ``p.inflight`` and raised the callback
        depth (``drain_locked``, or the native drain for a partition whose folder changed)."""
        count = len(buffer)
        try:
            # acks='all': appended now, acknowledged by self.acks once group commit synced it.
            result = self.append(p, buffer)
        except Exception as e:  # every failure reaches the batch's futures, and the log
            p.inflight -= count
            self.append_failed(p, count, batch, e)
            return
        except BaseException as e:  # Ctrl-C in the middle: the futures still learn of it
            p.inflight -= count
            why = f"appending this record's batch was interrupted ({e!r}); it may or may not be in the log"
            with contextlib.suppress(BaseException):  # an errback's own interrupt: this one is raised
                batch.fail(IllegalStateError(why))
            raise
        p.inflight -= count
        if result is None:
            batch.complete(-1, None)
            return
        first_offset, _, log_append_time, mark = result
        if mark is None:
            batch.complete(first_offset, log_append_time)
        else:
            self.acks.hand((batch, first_offset, log_append_time), mark, count, f"{p.topic}-{p.number}")

    def append_failed(self, p: _Partition, count: int, batch: BatchState, e: Exception) -> None:
        """Appending a batch of ``count`` records failed with ``e``: say so, fail its futures."""
        self.errors[p.topic] = self.errors.get(p.topic, 0) + count
        if self.txn is not None:
            self.txn.append_failed(e)
        if isinstance(e, KafkaliteError):
            logger.warning("%d records for %s-%d were not written: %s", count, p.topic, p.number, e)
        else:
            logger.error("%d records for %s-%d were not written", count, p.topic, p.number, exc_info=e)
        batch.fail(e)

    def pending(self) -> int:
        """Records accepted by send() and not acknowledged yet (queued, being appended, or
        appended and waiting to be durable)."""
        topics = list(self.topics.values())
        queued = sum(t.acc.pending() for t in topics) + sum(p.inflight for t in topics for p in t.partitions)
        return queued + self.acks.pending()

    # -- metrics ----------------------------------------------------------------------------
    def metrics(self) -> dict[str, dict[str, float]]:
        """kafka-python's ``KafkaProducer.metrics()``: 'producer-metrics' and a
        'producer-topic-metrics.TOPIC' group per topic written. A request is one batch append."""
        since = self.stats.started
        out: dict[str, dict[str, float]] = {}
        taken = {name: t.acc.taken() for name, t in list(self.topics.items())}
        batches = sum(b for b, _, _, _ in taken.values())
        records = sum(r for _, r, _, _ in taken.values())
        size = sum(n for _, _, n, _ in taken.values())
        largest = max((m for _, _, _, m in taken.values()), default=0)
        errors = sum(self.errors.values())
        for name, (_, r, n, _) in taken.items():
            e = self.errors.get(name, 0)
            out[f"producer-topic-metrics.{name}"] = {
                "record-send-total": r,
                "record-send-rate": rate(r, since),
                "byte-total": n,
                "byte-rate": rate(n, since),
                "record-error-total": e,
                "record-error-rate": rate(e, since),
            }
        out["producer-metrics"] = {
            "record-send-total": records,
            "record-send-rate": rate(records, since),
            "byte-rate": rate(size, since),
            "request-total": batches,
            "request-rate": rate(batches, since),
            "records-per-request-avg": avg(records, batches),
            "batch-size-avg": avg(size, batches),
            "batch-size-max": largest,
            "record-size-avg": avg(size, records),
            "record-error-total": errors,
            "record-error-rate": rate(errors, since),
            "record-queue-count": self.pending(),
        }
        return dict(sorted(out.items()))

    def statistics(self) -> dict[str, Any]:
        """``stats_cb``'s fields beyond the common ones (librdkafka's names)."""
        topics = {}
        sent = sent_bytes = 0
        for name, t in list(self.topics.items()):
            _, r, n, _ = t.acc.taken()
            sent, sent_bytes = sent + r, sent_bytes + n
            topics[name] = {"topic": name, "txmsgs": r, "txbytes": n, "errors": self.errors.get(name, 0)}
        return {"msg_cnt": self.pending(), "txmsgs": sent, "txmsg_bytes": sent_bytes, "topics": topics}

    # -- the sender thread ----------------------------------------------------------------
    def run(self) -> None:
        try:
            self.loop()
        except BaseException as e:  # a bug: make later sends fail at once, and say so
            self.failure = e
            self.refuse_records()
            logger.critical("the producer's sender thread stopped; later sends will fail", exc_info=True)
            for t in list(self.topics.values()):
                for p in t.partitions:
                    for _, batch in t.acc.take(p.number, True):
                        batch.fail(IllegalStateError(f"the producer's sender thread stopped: {e!r}"))

    def loop(self) -> None:
        """Send lingering batches; run retention and compaction on their schedules. A failing
        step is logged and retried on the next pass; nothing here ends the thread but close()."""
        next_retention = time.monotonic() + self.config["retention_check_interval_ms"] / 1000.0
        next_cleaning = time.monotonic() + self.config["cleaner_check_interval_ms"] / 1000.0
        next_metadata = time.monotonic() + self.config["metadata_max_age_ms"] / 1000.0
        # A transactional producer is also a coordinator of the data directory's transactions
        # (there is no coordinator process): it aborts those past their timeout on Kafka's schedule.
        txn_interval = transactions.ABORT_TIMED_OUT_INTERVAL_MS / 1000.0
        next_txn_check = time.monotonic() + txn_interval if self.txn is not None else float("inf")
        while True:
            with self.wakeup:
                if not self.dirty and not self.closed:
                    next_due = min(next_retention, next_cleaning, next_metadata, next_txn_check)
                    now = time.monotonic()
                    stats_due = self.stats.timeout(now)
                    wait = min(1.0, next_due - now, 1.0 if stats_due is None else stats_due)
                    self.idle = True
                    self.wakeup.wait(timeout=max(0.0, wait))
                    self.idle = False
                dirty, due, self.dirty, self.due = self.dirty, self.due, set(), False
                closing = self.closed
            if closing:  # the last pass: everything queued before close() refused records, even
                # a record whose sender has not called wake() yet (preempted after queueing it)
                dirty = {p for t in list(self.topics.values()) for p in t.partitions}
            if self.linger and dirty and not closing and not due:
                # The batch that started first is due first (a partition never written: due now).
                try:
                    delay = min(p.acc.linger_left(p.number, self.linger) or 0.0 for p in dirty)
                except LogPoisonedError:  # a panic: due now, the drain fails the records typed
                    delay = 0.0
                if delay > 0:
                    with self.wakeup:  # close(), or batches due now, cut the linger short
                        self.wakeup.wait_for(lambda: self.closed or self.due, timeout=delay)
            for p in dirty:
                self.step("sending a batch", self.drain, p)
            self.stats.maybe_report()
            if time.monotonic() >= next_retention:
                self.step("enforcing retention", self.enforce_retention)
                next_retention = time.monotonic() + self.config["retention_check_interval_ms"] / 1000.0
            if time.monotonic() >= next_cleaning and not closing:
                self.step("compacting", self.compact_dirty_partitions)
                next_cleaning = time.monotonic() + self.config["cleaner_check_interval_ms"] / 1000.0
            if self.txn is not None and time.monotonic() >= next_txn_check and not closing:
                self.step("aborting timed-out transactions", self.txn.abort_expired)
                next_txn_check = time.monotonic() + txn_interval
            if time.monotonic() >= next_metadata and not closing:
                self.step("refreshing metadata", self.forget_unused)
                next_metadata = time.monotonic() + self.config["metadata_max_age_ms"] / 1000.0
            if closing:
                return

    def step(self, what: str, fn: Callable, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:
            _log_background_failure(f"producer sender: {what}", e)

    def enforce_retention(self) -> None:
        """Time and size retention for every topic of the data directory (Kafka's broker does
        this every log.retention.check.interval.ms): through this producer's open logs where it
        has them, by opening the others briefly as a shared writer. A failing partition is
        logged and retried on the next pass."""
        from kafkalite.admin import Admin

        others = []
        for name in self.dir.topics():
            t = self.topics.get(name)
            if t is None:
                others.append(name)
                continue
            for p in t.partitions:
                try:
                    with p.drain_lock:
                        if p.log is not None:
                            p.log.enforce_retention()
                        elif os.path.isdir(self.dir.partition_path(name, p.number)):
                            with self.dir.open_partition(name, p.number, shared_writers=True) as log:
                                log.enforce_retention()
                except Exception as e:
                    _log_background_failure(f"retention of {name}-{p.number}", e)
        if others:
            Admin(self.dir.path).enforce_retention(others)

    def compact_dirty_partitions(self) -> None:
        """Kafka's background cleaner, for the compacted partitions this producer writes:
        clean those whose dirty ratio reached ``min.cleanable.dirty.ratio``."""
        for t in list(self.topics.values()):
            if not t.compacted:
                continue
            for p in t.partitions:
                try:
                    with p.drain_lock:
                        if p.log is not None:
                            clean_if_dirty(p.log, t.config)
                except Exception as e:
                    _log_background_failure(f"compaction of {t.name}-{p.number}", e)

    # -- lifecycle ------------------------------------------------------------------------
    def flush(self, timeout: float | None) -> None:
        """Write every buffered record. With a timeout, the draining runs on the flusher thread
        so that the caller returns in time even when an append waits for another writer's lock
        (a stopped process can hold it for the engine's 60 s); the flush finishes there."""
        if timeout is None:
            return self.flush_within(None)
        deadline = time.monotonic() + timeout
        if not self.flusher.run(lambda: self.flush_within(deadline), timeout):
            raise KafkaTimeoutError(
                f"flush did not finish within {timeout} s; {self.pending()} records are not written yet "
                "(an append is waiting for a partition's lock: is another writer stopped?)"
            )
        return None

    def flush_within(self, deadline: float | None) -> None:
        timeout = None if deadline is None else round(deadline - time.monotonic(), 3)
        for t in list(self.topics.values()):
            for p in t.partitions:
                if deadline is not None and time.monotonic() > deadline:
                    raise KafkaTimeoutError(
                        f"flush did not finish within {timeout} s; {self.pending()} records are not written yet"
                    )
                self.drain(p)
        # acks='all': the batches just appended are acknowledged once group commit synced them.
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self.acks.wait_idle(left):
            raise KafkaTimeoutError(
                f"flush did not finish within {timeout} s; {self.pending()} records are not on disk yet"
            )

    def close(self, timeout: float | None) -> None:
        """Flush, stop the sender thread, close the logs. A close() called while another thread's
        is under way waits for it (as every caller of Kafka's close joins its I/O thread): it
        returns once the records are written and the logs closed, not as soon as ``closed`` is
        set. Inside a callback it returns at once: the close under way may be waiting for it."""
        in_callback: int = getattr(_in_callbacks, "depth", 0)
        if self.closed and in_callback:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.close_lock.acquire(timeout=-1 if timeout is None else timeout):
            raise KafkaTimeoutError(
                f"close did not finish within {timeout} s (another thread is closing the producer)"
            )
        try:
            self.close_locked(deadline)
        finally:
            self.close_lock.release()

    def close_locked(self, deadline: float | None) -> None:
        if self.closed:
            return
        if self.forked:  # the parent's records and logs: the parent writes and closes them
            self.closed = True
            return

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        flushed = False
        try:
            remaining = left()
            self.flush(None if remaining is None else round(remaining, 3))
            flushed = True
        finally:
            self.flusher.stop()
            with self.wakeup:
                self.closed = True
                self.refuse_records()
                self.wakeup.notify()
            if self.thread.is_alive() and self.thread is not threading.current_thread():
                self.thread.join(left())
            self.acks.close(left())
            logs = []
            for t in self.topics.values():
                for p in t.partitions:
                    if p.log is not None:
                        logs.append(p.log)
                        p.log = None
            try:
                _close_logs(logs, left)
                if self.txn is not None:
                    self.txn.close()  # the coordinator's logs (markers, __transaction_state)
            except KafkaliteError:
                if flushed:
                    raise
                # The flush's error (raised on leaving this block) says what went wrong: a log
                # whose close timed out is one that append is still stuck in (the flusher's, a
                # thread of this process), which is all this one would say.
                logger.warning("closing the partition logs after the flush failed failed too", exc_info=True)

    def close_at_exit(self, why: str) -> None:
        """Flush and close a producer nobody closed (interpreter exit, or garbage collection),
        waiting at most EXIT_FLUSH_TIMEOUT: the work runs in a helper thread, so even a write
        stuck on a lock cannot hold the process. What stays unwritten is logged."""
        if self.closed or os.getpid() != self.pid:
            return
        pending = self.pending()
        unwritten: list[KafkaliteError] = []

        def work() -> None:
            try:
                self.close(EXIT_FLUSH_TIMEOUT)
            except KafkaliteError as e:  # the bounded close ran out of time or could not write: counted below
                unwritten.append(e)
            except Exception:
                logger.warning("closing a producer at %s failed", why, exc_info=True)

        # close() is bounded by the same timeout; the grace covers closing the logs after it.
        if not self.flusher.run(work, EXIT_FLUSH_TIMEOUT + 1.0) or unwritten:
            logger.warning(
                "a producer of %s left open at %s: %d of %d queued records could not be written within %.1f s "
                "(call flush() or close() before exiting)",
                self.dir.path,
                why,
                self.pending(),
                pending,
                EXIT_FLUSH_TIMEOUT,
            )
        elif pending:
            logger.info("flushed %d records of a producer left open at %s", pending, why)


def _finalize(sender: _Sender, why: str) -> None:
    sender.close_at_exit(why)


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
        self._setup_send(self._sender.accumulators, self._sender.gate, direct, self._sender)
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
