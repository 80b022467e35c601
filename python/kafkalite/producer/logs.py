"""The partition logs a producer's sender holds (a mixin of ``_Sender``): opened on first
use as a shared writer, reopened when the topic was deleted and created again, closed when the
topic is gone or the log idle (Kafka's metadata refresh, ``metadata_max_idle_ms``), the append
of one taken batch into them, and the retention and compaction the sender thread runs through
them on their schedules."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from kafkalite._native import BatchBuffer, DurableMark
from kafkalite.compaction import clean_if_dirty
from kafkalite.datadir import DataDir
from kafkalite.errors import UnknownTopicError, UnknownTopicOrPartitionError
from kafkalite.log import Log
from kafkalite.producer.threads import _log_background_failure
from kafkalite.producer.topics import _Partition, _Topic
from kafkalite.transactions.manager import TransactionManager

logger = logging.getLogger("kafkalite.producer")

#: How long closing a deleted or idle partition's log may wait for its append lock (another
#: process's writer may hold it, even stopped): the sender thread must go on sending.
_CLOSE_TIMEOUT = 1.0
#: A file mtime older than this is final: a later change gets a later mtime even where the
#: file system's clock ticks coarsely (Linux stamps with the jiffy clock, some file systems by
#: the second).
_MTIME_SETTLED_NS = 2_000_000_000


class _PartitionLogs:
    """``_Sender``'s partition logs: the methods that open, reopen, append to, clean and close
    them.
    The attributes they use are the sender's (set and described in ``_Sender.__init__``)."""

    dir: DataDir
    config: dict[str, Any]
    codec: str
    durable: bool
    topics: dict[str, _Topic]
    txn: TransactionManager | None
    swept_metadata: tuple[int, ...] | None

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
        stale = p.clear_log()
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
        p.set_log(log, log._native, current)
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
        (or re-creating) a topic changes the data directory's metadata files (an entry appended
        to the journal, or a new snapshot: ``DataDir.change_stamp``). This keeps a producer
        opening many partitions from stat-ing every open one each time. (The directory's own
        mtime would not do: opening a log rewrites checkpoints there.)"""
        found = self.dir.change_stamp()
        signature, settled = None, False  # no metadata: nothing to compare, sweep every time
        if found is not None:
            signature, newest = found
            settled = newest < time.time_ns() - _MTIME_SETTLED_NS
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

    # -- retention and compaction, through the open logs ------------------------------------
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
