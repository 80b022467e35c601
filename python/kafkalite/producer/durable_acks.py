"""The producer's acknowledging thread for ``acks='all'`` (group commit, issue 14 target 2).

A batch appended under ``acks='all'`` is in the log but not yet on disk: the appending thread
(``send()``'s caller or the sender thread) hands it here with the engine's ``DurableMark`` and
goes on appending. This thread takes every batch handed in meanwhile, over all partitions, and
waits for them with one ``wait_durable`` call: one msync per partition covers them all (and
the batches other threads and processes appended to those partitions), the partitions in
parallel. Then it resolves their futures: written, or failed with the sync's error. So nothing
is acknowledged before it is on this host's disk, and a sync costs once per group, not per batch.

How many batches a group holds follows what a sync costs here, as in Kafka's and databases'
group commit: while one sync runs, batches keep coming in, and the next group takes all of them,
so an expensive sync (a disk flush: milliseconds) covers many batches and a cheap one (tmpfs:
microseconds) a few, with no timer. (A window that also waited half the measured sync cost
before a streaming group synced made bench_peers' acks='all' row slower, 260 K against 420 K
records/s at load 25: the records' wait grew and no append got faster.) The appending threads
wake this thread only when it is idle: a wake-up per batch handed it the GIL and back. For
the same reason an appending thread keeps the GIL through its appends (a group-commit append
never syncs: `rust/src/py/log/access.rs`), so this thread resolves a group when the
interpreter hands it the GIL (``sys.getswitchinterval()``, 5 ms, or sooner when the appender
waits), and the next group holds what was appended meanwhile."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from kafkalite._native import DurableMark, wait_durable

logger = logging.getLogger("kafkalite.producer")

#: resolve(batch, error): the producer's way to finish a batch's futures.
Resolve = Callable[[Any, BaseException | None], None]


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
            return self._cond.wait_for(lambda: self._records == 0, timeout)

    def close(self, timeout: float | None) -> None:
        """End the thread once the batches handed in are resolved (waiting at most `timeout`)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._idle = True
                    self._cond.wait()
                self._idle = False
                if not self._queue:
                    return
                work, self._queue = self._queue, []
            try:
                errors: list[BaseException | None] = wait_durable(
                    [m for _, m, _, _ in work], self._timeout_ms
                )
            except BaseException as e:  # a bug: fail the batches (never acknowledge them) and say so
                logger.exception("waiting for %d batches to be durable failed", len(work))
                errors = [e] * len(work)
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
                self._cond.notify_all()
