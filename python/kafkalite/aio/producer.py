"""``AIOProducer``: aiokafka's ``AIOKafkaProducer`` API over the sync ``kafkalite.Producer``.

``send`` queues the record on the calling (event loop) thread as the sync ``send`` does (no
I/O unless a batch filled up) and returns an asyncio future; the kafkalite future's callback
resolves it through ``call_soon_threadsafe``, batched: one loop wakeup for every record a
batch append resolved, not one per record. ``start``, ``flush`` and ``stop`` block on the
disk, so they run in the shared executor (``_bridge``)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from kafkalite.aio._bridge import run_blocking
from kafkalite.client_config import PRODUCER_CONFIG
from kafkalite.errors import IllegalStateError
from kafkalite.producer import FutureRecordMetadata, Producer, RecordMetadata


class _Resolver:
    """Hands outcomes from whichever thread resolved a kafkalite future to asyncio futures on
    the loop, with one ``call_soon_threadsafe`` per burst."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._ready: deque[tuple[asyncio.Future[RecordMetadata], Any, bool]] = deque()
        self._scheduled = False

    def bind(self, future: FutureRecordMetadata) -> asyncio.Future[RecordMetadata]:
        out: asyncio.Future[RecordMetadata] = self._loop.create_future()
        future.add_callback(self._push, out, True)
        future.add_errback(self._push, out, False)
        return out

    def _push(self, out: asyncio.Future[RecordMetadata], ok: bool, outcome: Any) -> None:
        with self._lock:
            self._ready.append((out, outcome, ok))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop is closed: nobody can await these any more
            pass

    def _deliver(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, deque()
            self._scheduled = False
        for out, outcome, ok in ready:
            if out.done():  # cancelled by its awaiter
                continue
            if ok:
                out.set_result(outcome)
            else:
                out.set_exception(outcome)


class AIOProducer:
    """``AIOProducer(path, **config)``: the sync Producer's arguments (kafka-python's names),
    the data directory where aiokafka takes ``bootstrap_servers``. ``await start()`` before
    sending; ``async with`` starts and stops it."""

    def __init__(self, path: str | os.PathLike[str] | None = None, **config: Any) -> None:
        PRODUCER_CONFIG.resolve(config)  # refuse bad config here, as aiokafka does, not at start()
        self._path = path
        self._config = config
        self._producer: Producer | None = None
        self._resolver: _Resolver | None = None
        self._stopped = False

    async def start(self) -> None:
        """Open the data directory (created if missing) and start the sender."""
        if self._producer is not None or self._stopped:
            raise IllegalStateError("AIOProducer.start() may be called once")
        self._resolver = _Resolver(asyncio.get_running_loop())
        self._producer = await run_blocking(Producer, self._path, **self._config)

    def _started(self) -> Producer:
        if self._producer is None:
            raise IllegalStateError("the AIOProducer is not started: await producer.start() first")
        return self._producer

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue a record; returns a future of its ``RecordMetadata`` (aiokafka's contract:
        ``fut = await send(...)``, then ``await fut``). Bad records raise here, typed."""
        producer = self._started()
        sent = producer.send(
            topic, value=value, key=key, headers=headers, partition=partition, timestamp_ms=timestamp_ms
        )
        assert self._resolver is not None
        return self._resolver.bind(sent)

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordMetadata:
        """``send`` and wait until the record is in the log."""
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every record sent so far is in the log."""
        await run_blocking(self._started().flush, timeout)

    async def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of ``topic`` (created as by the first send when missing)."""
        return await run_blocking(self._started().partitions_for, topic)

    async def stop(self, timeout: float | None = None) -> None:
        """Flush and close (idempotent; a producer never started just stops)."""
        self._stopped = True
        if self._producer is not None:
            await run_blocking(self._producer.close, timeout)

    async def __aenter__(self) -> AIOProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
