"""The producer's acknowledging thread for ``acks='all'`` (group commit, issue 14 target 2).

A batch appended under ``acks='all'`` is in the log but not yet on disk: the appending thread
(``send()``'s caller or the sender thread) hands it here with the engine's ``DurableMark`` and
goes on appending. This thread takes every batch handed in meanwhile, over all partitions, and
waits for them with one ``wait_durable`` call: one msync per partition covers them all (and
the batches other threads and processes appended to those partitions), the partitions in
parallel. Then it resolves their futures: written, or failed with the sync's error. So nothing
is acknowledged before it is on this host's disk, and a sync costs once per group, not per batch.

How many batches a group holds follows what a sync costs here, as in Kafka's and databases'
group commit: while one sync runs, batches keep coming in and the next group takes them all.
When batches came in during the last sync (the producer is streaming), the next group also
waits for a share of the measured sync cost before it syncs, so an expensive sync (a disk
flush: milliseconds) covers many batches instead of the one or two that arrived since the
last one; a cheap sync (microseconds: tmpfs, a fast cache) gets no window and goes at once. A
lone record after a pause, a ``flush()`` or a ``close()`` never waits for a window."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from kafkalite._native import DurableMark, wait_durable

logger = logging.getLogger("kafkalite.producer")

#: resolve(batch, error): the producer's way to finish a batch's futures.
Resolve = Callable[[Any, BaseException | None], None]

#: A streaming group waits this share of the measured sync cost for more batches...
WINDOW_SHARE = 0.5
#: ...never longer than this (the latency it may add to a record)...
MAX_WINDOW = 0.005
#: ...and not at all when that share is below this: waiting would cost what the sync does.
MIN_WINDOW = 0.0002
#: Weight of the newest sync in the running estimate of its cost.
COST_WEIGHT = 0.25


def batching_window(sync_cost: float | None) -> float:
    """Seconds a streaming group waits for more batches before it syncs, given the estimated
    cost of a sync (None: not measured yet, no window)."""
    if sync_cost is None:
        return 0.0
    window = min(sync_cost * WINDOW_SHARE, MAX_WINDOW)
    return window if window >= MIN_WINDOW else 0.0


class DurableAcks:
    """Batches waiting to be on disk, and the thread that waits for them."""

    def __init__(self, resolve: Resolve, timeout_ms: int) -> None:
        self._resolve = resolve
        self._timeout_ms = timeout_ms
        self._cond = threading.Condition()
        self._queue: list[tuple[Any, DurableMark, int, str]] = []
        self._records = 0  # handed in and not resolved (queued or being waited for)
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        #: The thread waits for work (only then does a new batch need to wake it: a wake-up per
        #: batch handed the GIL to it and back).
        self._idle = False
        #: flush() / close() calls waiting: a group then goes at once, without a window.
        self._hurry = 0
        #: Running estimate of one group's sync, in seconds (None until one was measured).
        self.sync_cost: float | None = None

    def hand(self, batch: Any, mark: DurableMark, records: int, where: str) -> None:
        """Acknowledge `batch` (`records` records, of partition `where`) once `mark` is durable."""
        with self._cond:
            self._queue.append((batch, mark, records, where))
            self._records += records
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                # First use, or in a forked child (threads do not survive fork).
                self._pid = os.getpid()
                self._closed = False
                self._thread = threading.Thread(target=self._run, name="kafkalite-producer-acks", daemon=True)
                self._thread.start()
            elif self._idle:
                self._cond.notify_all()

    def pending(self) -> int:
        """Records appended and not yet acknowledged (or failed)."""
        return self._records

    def wait_idle(self, timeout: float | None) -> bool:
        """Wait until every batch handed in so far is resolved; False if `timeout` ran out."""
        with self._cond:
            self._hurry += 1
            self._cond.notify_all()  # a group waiting for its window goes now
            try:
                return self._cond.wait_for(lambda: self._records == 0, timeout)
            finally:
                self._hurry -= 1

    def close(self, timeout: float | None) -> None:
        """End the thread once the batches handed in are resolved (waiting at most `timeout`)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        streaming = False  # batches came in while the last group synced
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._idle = True
                    self._cond.wait()
                self._idle = False
                if not self._queue:
                    return
                window = batching_window(self.sync_cost) if streaming else 0.0
                if window and not self._closed and not self._hurry:
                    # hand() does not wake this thread (not idle); flush() and close() do.
                    self._cond.wait(window)
                work, self._queue = self._queue, []
            began = time.perf_counter()
            try:
                errors: list[BaseException | None] = wait_durable(
                    [m for _, m, _, _ in work], self._timeout_ms
                )
            except BaseException as e:  # a bug: fail the batches (never acknowledge them) and say so
                logger.exception("waiting for %d batches to be durable failed", len(work))
                errors = [e] * len(work)
            took = time.perf_counter() - began
            cost = self.sync_cost
            self.sync_cost = took if cost is None else cost + (took - cost) * COST_WEIGHT
            for (batch, _, records, where), error in zip(work, errors, strict=True):
                if error is not None:
                    logger.warning(
                        "%d records for %s were appended but not made durable: %s", records, where, error
                    )
                try:
                    self._resolve(batch, error)
                except BaseException:  # a resolve that raised must not stop the acknowledgements
                    # (nor a callback's SystemExit or KeyboardInterrupt end this thread: the
                    # batches after it would never resolve, and every flush() would wait forever)
                    logger.exception("resolving a batch of %s failed", where)
            with self._cond:
                self._records -= sum(records for _, _, records, _ in work)
                streaming = bool(self._queue)
                self._cond.notify_all()
