"""``AIOConsumer``: aiokafka's ``AIOKafkaConsumer`` API over the sync ``kafkalite.Consumer``.

The sync consumer is not thread-safe and its calls may block (a group join waits on files and
other members), so every call into it runs in the shared executor under ``_sync_lock``: a
cancelled coroutine cannot let two threads into it. A fetch reads up to ``max_poll_records``
into a buffer that ``getone``/``getmany``/``async for`` hand out from on the loop; the
positions the sync consumer commits (auto-commit, a rebalance's revoke, ``commit()``, ``stop``)
are those of the records handed out, never of records still buffered. A fetch that found
nothing waits on the notifier (``_bridge.LoopWaiter``) until a producer in any process appends.

Calls that aiokafka makes synchronous (``seek``, ``subscribe``, ``assign``, ``pause``, ...) are
checked at once and applied to the sync consumer before its next call."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from kafkalite import validate as args
from kafkalite._native import ConsumerRecord
from kafkalite.aio._bridge import WAIT_CAP_MS, LoopWaiter, run_blocking
from kafkalite.client_config import CONSUMER_CONFIG
from kafkalite.consumer import Consumer, TopicPartition
from kafkalite.errors import IllegalStateError

_Op = Callable[[Consumer], None]


def _seek_if_assigned(consumer: Consumer, tp: TopicPartition, offset: int) -> None:
    if tp in consumer.assignment():  # revoked meanwhile: its next owner starts at the commit
        consumer.seek(tp, offset)


class AIOConsumer:
    """``AIOConsumer(*topics, path=..., group_id=None, **config)`` is aiokafka's signature
    with the data directory as ``path`` (positional after the topics is not possible, so it is
    a keyword; ``bootstrap_servers`` is refused as by the sync consumer). Config: the sync
    Consumer's (kafka-python's names)."""

    def __init__(
        self,
        *topics: str,
        path: str | os.PathLike[str] | None = None,
        group_id: str | None = None,
        **config: Any,
    ) -> None:
        self._resolved = CONSUMER_CONFIG.resolve(dict(config))  # bad config fails here, as aiokafka's
        self._topics = args.topic_names(topics)
        self._path = path
        self._group_id = group_id
        self._config = config
        self._consumer: Consumer | None = None
        self._waiter: LoopWaiter | None = None
        self._sync_lock = threading.Lock()
        self._pending: list[_Op] = []  # sync-API calls made on the loop, applied before the next call
        self._buffer: dict[TopicPartition, deque[ConsumerRecord]] = {}
        self._handed: dict[TopicPartition, int] = {}  # next offset after the records handed out
        self._fetching: asyncio.Future[tuple[dict, set]] | None = None
        self._stopped = False

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the data directory and (with topics or ``subscribe``) join the group."""
        if self._consumer is not None or self._stopped:
            raise IllegalStateError("AIOConsumer.start() may be called once")
        consumer = await run_blocking(
            Consumer, self._path, *self._topics, group_id=self._group_id, **self._config
        )
        self._consumer = consumer
        self._waiter = LoopWaiter.acquire(asyncio.get_running_loop(), consumer._dir.path)
        await self._call(lambda c: None)  # apply subscribe()/assign() made before start

    async def stop(self) -> None:
        """Commit what was handed out (with auto-commit), leave the group, close (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        if self._fetching is not None:
            await asyncio.gather(self._fetching, return_exceptions=True)
        self._buffer.clear()  # not handed out: not committed, the next owner reads them
        if self._consumer is not None:
            try:
                await self._call(lambda c: c.close())
            finally:
                if self._waiter is not None:
                    self._waiter.release()
                    self._waiter = None

    async def __aenter__(self) -> AIOConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- calls into the sync consumer ------------------------------------------------------
    def _started(self) -> Consumer:
        if self._consumer is None:
            raise IllegalStateError("the AIOConsumer is not started: await consumer.start() first")
        return self._consumer

    def _job(self, fn: Callable[[Consumer], Any]) -> Callable[[], Any]:
        """``fn(consumer)`` with the pending sync calls and the handed-out positions applied
        first, all under ``_sync_lock`` (run in the executor)."""
        consumer = self._started()
        pending, self._pending = self._pending, []
        handed, self._handed = self._handed, {}

        def job() -> Any:
            with self._sync_lock:
                # The sync consumer's "consumed" positions are what it commits: make them the
                # handed-out ones (only for partitions it still has: a revoked one is not ours).
                for tp, offset in handed.items():
                    if tp in consumer._consumed:
                        consumer._consumed[tp] = offset
                for op in pending:
                    op(consumer)
                return fn(consumer)

        return job

    async def _call(self, fn: Callable[[Consumer], Any]) -> Any:
        return await run_blocking(self._job(fn))

    def _queue(self, op: _Op) -> None:
        if self._stopped:
            raise IllegalStateError("the consumer is stopped")
        self._pending.append(op)

    def _unbuffer(self, partitions: Iterable[TopicPartition]) -> None:
        """Drop buffered records; the sync consumer is moved back to the first of them, so
        dropped records are read again, not skipped."""
        for tp in list(partitions):
            records = self._buffer.pop(tp, None)
            if records:
                first = records[0].offset
                self._pending.append(functools.partial(_seek_if_assigned, tp=tp, offset=first))

    # -- fetching --------------------------------------------------------------------------
    def _fetch(self) -> asyncio.Future[tuple[dict, set]]:
        """Start (or join) the one fetch in flight. Its records go to the buffer even when the
        coroutine that started it is cancelled meanwhile (a thread cannot be interrupted, and
        dropping them would skip them)."""
        if self._fetching is None:
            max_records = self._resolved["max_poll_records"]
            buffered = list(self._buffer)

            def fetch(c: Consumer) -> tuple[dict, set]:
                # Partitions with records still buffered (getmany(*partitions) asked for
                # others) are not read again: the buffer stays bounded and in order.
                skip = [tp for tp in buffered if tp in c.assignment() and tp not in c.paused()]
                c.pause(*skip)
                try:
                    records = c.poll(0, max_records=max_records)
                finally:
                    c.resume(*skip)
                for tp, got in records.items():
                    c._consumed[tp] = got[0].offset  # buffered, not handed out yet
                return records, c.assignment()

            loop = asyncio.get_running_loop()
            fut = asyncio.ensure_future(run_blocking(self._job(fetch)), loop=loop)
            fut.add_done_callback(self._fetched)
            self._fetching = fut
        return self._fetching

    def _fetched(self, fut: asyncio.Future[tuple[dict, set]]) -> None:
        self._fetching = None
        if fut.cancelled() or fut.exception() is not None:
            return  # the awaiting caller raises it; a later call fetches (and fails) again
        records, assigned = fut.result()
        for tp in [tp for tp in self._buffer if tp not in assigned]:
            del self._buffer[tp]  # revoked by a rebalance: the next owner reads them
        for tp, got in records.items():
            self._buffer.setdefault(tp, deque()).extend(got)

    def _take(
        self, limit: int, only: frozenset[TopicPartition] = frozenset()
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp in list(self._buffer):
            if limit <= 0:
                break
            if only and tp not in only:
                continue
            records = self._buffer[tp]
            n = min(limit, len(records))
            taken = [records.popleft() for _ in range(n)]
            out[tp] = taken
            limit -= n
            self._handed[tp] = taken[-1].offset + 1
            if not records:
                del self._buffer[tp]
        return out

    async def _records(
        self, limit: int, timeout_ms: float | None, partitions: tuple[TopicPartition, ...] = ()
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``limit`` records (of ``partitions`` if given); waits (forever when
        ``timeout_ms`` is None) for some."""
        self._started()
        only = frozenset(args.partitions(partitions)) if partitions else frozenset()
        for tp in only:
            if tp not in self.assignment():
                raise IllegalStateError(f"{tp} is not assigned to this consumer")
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000.0
        waiter = self._waiter
        assert waiter is not None
        while True:
            if self._stopped:
                raise IllegalStateError("the consumer is stopped")
            got = self._take(limit, only)
            if got:
                return got
            seen = waiter.sequence()
            await asyncio.shield(self._fetch())
            got = self._take(limit, only)
            if got:
                return got
            wait_ms = float(WAIT_CAP_MS)
            if deadline is not None:
                left = (deadline - time.monotonic()) * 1000.0
                if left <= 0:
                    return {}
                wait_ms = min(wait_ms, left)
            await waiter.wait(seen, int(max(1, wait_ms)))

    def _take_one(self) -> ConsumerRecord | None:
        """``_take(1)`` without building a dict: the per-record path of ``async for``."""
        buffer = self._buffer
        if not buffer:
            return None
        tp = next(iter(buffer))
        records = buffer[tp]
        record = records.popleft()
        self._handed[tp] = record.offset + 1
        if not records:
            del buffer[tp]
        return record

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (of one of ``partitions`` if given), waiting as long as it takes."""
        record = None if self._stopped or partitions else self._take_one()
        if record is not None:
            return record
        got = await self._records(1, None, partitions)
        return next(iter(got.values()))[0]

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """``{TopicPartition: [records]}`` (of ``partitions`` if given), waiting up to
        ``timeout_ms`` for the first."""
        args.milliseconds("timeout_ms", timeout_ms)
        limit = (
            self._resolved["max_poll_records"]
            if max_records is None
            else args.integer("max_records", max_records, 1)
        )
        return await self._records(limit, timeout_ms, partitions)

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """Records forever; iteration ends when the consumer is stopped."""
        if self._stopped:
            raise StopAsyncIteration
        record = self._take_one()
        if record is not None:
            return record
        try:
            return await self.getone()
        except IllegalStateError:
            if self._stopped:
                raise StopAsyncIteration from None
            raise

    # -- commits and positions -------------------------------------------------------------
    async def commit(self, offsets: dict[TopicPartition, Any] | None = None) -> None:
        """Commit ``offsets``, by default the positions after the records handed out."""
        await self._call(lambda c: c.commit(offsets))

    async def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp``, or None."""
        return await self._call(lambda c: c.committed(tp))

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``getone`` returns for ``tp``."""
        tp = args.topic_partition(tp)
        records = self._buffer.get(tp)
        if records:
            return records[0].offset
        return await self._call(lambda c: c.position(tp))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The next record of ``tp`` handed out is at ``offset`` (aiokafka: synchronous)."""
        tp = args.topic_partition(tp)
        args.offset("offset", offset)
        if tp not in self.assignment():
            raise IllegalStateError(f"{tp} is not assigned to this consumer")
        self._buffer.pop(tp, None)
        self._handed[tp] = offset
        self._queue(lambda c: c.seek(tp, offset))

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Move to the first offset of these partitions (every assigned one when none given)."""
        self._unbuffer(partitions or list(self._buffer))
        await self._call(lambda c: c.seek_to_beginning(*partitions))

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Move past the last record of these partitions (every assigned one when none given)."""
        self._unbuffer(partitions or list(self._buffer))
        await self._call(lambda c: c.seek_to_end(*partitions))

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The first offset of each partition."""
        return await self._call(lambda c: c.beginning_offsets(partitions))

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset after the last record of each partition."""
        return await self._call(lambda c: c.end_offsets(partitions))

    # -- subscription (synchronous in aiokafka: applied before the next call) -------------
    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        """Follow topics by name or ``pattern`` (applied before the next call into the consumer)."""
        names = args.topic_names(topics)
        self._unbuffer(list(self._buffer))
        self._queue(lambda c: c.subscribe(names, pattern=pattern, listener=listener))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (applied before the next call into the consumer)."""
        parts = args.partitions(partitions)
        self._unbuffer(list(self._buffer))
        self._queue(lambda c: c.assign(parts))

    def unsubscribe(self) -> None:
        """Drop the subscription (and leave the group) and every assigned partition."""
        self._buffer.clear()
        self._queue(lambda c: c.unsubscribe())

    def pause(self, *partitions: TopicPartition) -> None:
        """Hand out no records of these partitions until resume()."""
        parts = args.partitions(partitions)
        self._unbuffer(parts)
        self._queue(lambda c: c.pause(*parts))

    def resume(self, *partitions: TopicPartition) -> None:
        """Hand out records of these paused partitions again."""
        parts = args.partitions(partitions)
        self._queue(lambda c: c.resume(*parts))

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned as of the last call into the consumer."""
        return set(self._consumer._assigned) if self._consumer is not None else set()

    def subscription(self) -> set[str]:
        """The subscribed topic names."""
        return self._started().subscription()

    async def topics(self) -> set[str]:
        """The topics of the data directory."""
        return await self._call(lambda c: c.topics())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition numbers of ``topic``, or None when it does not exist."""
        return self._started().partitions_for_topic(topic)
