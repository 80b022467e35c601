"""The producer's sender (``_Sender``): everything the sender thread touches. It appends
lingering batches (``drain``; full ones are appended by the sending thread), resolves their
futures, schedules retention and compaction, reports metrics, and flushes and closes the
producer. It holds no reference to the ``Producer``, so an abandoned producer can be collected
and its finalizer flushes this. The partition logs it holds, and retention and compaction
through them, are ``logs``'s; the topic and partition state ``topics``'."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from kafkalite._native import (
    Accumulator,
    BatchBuffer,
    BatchState,
    DrainHooks,
    Notifier,
    SendGate,
    drain_locked,
    drain_partition,
)
from kafkalite.client_metrics import StatsReporter, avg, rate
from kafkalite.datadir import NOTIFY_FILE, DataDir
from kafkalite.errors import (
    IllegalStateError,
    KafkaliteError,
    KafkaTimeoutError,
    LogPoisonedError,
    NotADataDirError,
    UnknownTopicError,
)
from kafkalite.producer.callbacks import _finish_batch, _in_callbacks
from kafkalite.producer.durable_acks import DurableAcks
from kafkalite.producer.logs import _PartitionLogs
from kafkalite.producer.threads import _close_logs, _Flusher, _log_background_failure
from kafkalite.producer.topics import _Partition, _Topic
from kafkalite.transactions import manager as transactions
from kafkalite.transactions.manager import TransactionManager

logger = logging.getLogger("kafkalite.producer")

#: How long an acks='all' batch waits for another writer's sync (a stopped process holding the
#: partition's sync lock) before it fails: the engine's lock timeout, Kafka's max.block.ms default.
_DURABLE_TIMEOUT_MS = 60_000

#: Every producer's sender, for ``_shut_in_forked_child``.
_senders: weakref.WeakSet[_Sender] = weakref.WeakSet()


def _shut_in_forked_child() -> None:
    """A forked child has a copy of its parent's producers without their sender threads: a
    record it sent would never be appended, and its flush would append the parent's queued
    records a second time. Its sends take the Python path, which refuses them (``forked``)."""
    for sender in list(_senders):
        sender.gate.shut()


os.register_at_fork(after_in_child=_shut_in_forked_child)


class _Sender(_PartitionLogs):
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
        #: Each topic's accumulator and partitions, by name: what ``ProducerCore.send`` looks a
        #: topic up in.
        self.accumulators: dict[str, tuple[Accumulator, list[_Partition]]] = {}
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
        #: What the native drain and ``ProducerCore.send`` call back here (``drain.rs``).
        self.hooks = DrainHooks(self.notify, self.wake, self.append_one, self.append_failed, self.acks.hand)
        #: The metadata files' stamp when forget_deleted last swept (None: sweep next time).
        self.swept_metadata: tuple[int, ...] | None = None
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
                self.accumulators.setdefault(name, (topic.acc, topic.partitions))
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

    # -- appending ------------------------------------------------------------------------
    def drain(self, p: _Partition, current: bool = True) -> None:
        """Append the partition's full batches in order, and the one being built if
        ``current``; resolve each batch's futures (callbacks run here). Natively (``drain.rs``)
        when its drain lock is free; else once it is (waiting without the GIL)."""
        if drain_partition(self.hooks, p, current):
            return
        with p.drain_lock:
            self.drain_locked(p, current)
        self.notify()

    def drain_locked(self, p: _Partition, current: bool = True) -> None:
        """``drain`` for a caller holding ``p.drain_lock`` (it notifies the readers after)."""
        drain_locked(self.hooks, p, current)

    def append_one(self, p: _Partition, buffer: BatchBuffer, batch: BatchState) -> None:
        """Append one taken batch and resolve (acks='all': hand over) its futures; the caller
        holds ``p.drain_lock``, counted the batch in ``p.inflight`` and raised the callback
        depth (the native drain, for a partition with no open log or whose folder changed)."""
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
                    log = p.clear_log()
                    if log is not None:
                        logs.append(log)
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

    def close_at_exit(self, why: str, timeout: float) -> None:
        """Flush and close a producer nobody closed (interpreter exit, or garbage collection),
        waiting at most ``timeout`` (``producer.EXIT_FLUSH_TIMEOUT``): the work runs in a helper
        thread, so even a write stuck on a lock cannot hold the process. What stays unwritten is
        logged."""
        if self.closed or os.getpid() != self.pid:
            return
        pending = self.pending()
        unwritten: list[KafkaliteError] = []

        def work() -> None:
            try:
                self.close(timeout)
            except KafkaliteError as e:  # the bounded close ran out of time or could not write: counted below
                unwritten.append(e)
            except Exception:
                logger.warning("closing a producer at %s failed", why, exc_info=True)

        # close() is bounded by the same timeout; the grace covers closing the logs after it.
        if not self.flusher.run(work, timeout + 1.0) or unwritten:
            logger.warning(
                "a producer of %s left open at %s: %d of %d queued records could not be written within %.1f s "
                "(call flush() or close() before exiting)",
                self.dir.path,
                why,
                self.pending(),
                pending,
                timeout,
            )
        elif pending:
            logger.info("flushed %d records of a producer left open at %s", pending, why)
