"""How blocking kafkalite calls and cross-process wakeups reach an asyncio event loop.

* ``run_blocking``: one executor of ``EXECUTOR_WORKERS`` threads for the whole process, so a
  flush, commit or close never starts a thread of its own.
* ``LoopWaiter``: one daemon thread per (event loop, data directory) sleeps on the notify
  futex (``kafkalite.wakeup.Wakeups``, the sync consumer's) while some coroutine waits, and
  wakes those coroutines through ``loop.call_soon_threadsafe``; while none waits it sleeps on a
  ``threading.Event``. Nothing polls: an idle consumer costs one futex wait per second (the
  sync consumer's cap, which also lets a group member follow rebalances).
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from kafkalite.wakeup import Wakeups

T = TypeVar("T")

#: Threads of the shared executor: blocking calls of every AIOProducer/AIOConsumer of the
#: process queue for these (a bound, not a thread per call).
EXECUTOR_WORKERS = min(8, (os.cpu_count() or 1) + 2)
#: The longest a waiting coroutine sleeps before it looks again (as the sync consumer).
WAIT_CAP_MS = 1000

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def executor() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(EXECUTOR_WORKERS, thread_name_prefix="kafkalite-aio")
        return _executor


async def run_blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in the shared executor. Cancelling the caller does not stop a
    call already running (threads cannot be interrupted): callers that must not lose its result
    keep hold of it themselves (see AIOConsumer's fetch)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor(), functools.partial(fn, *args, **kwargs))


class LoopWaiter:
    """Wakes coroutines of one event loop when a producer of one data directory appends."""

    _instances: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, LoopWaiter]] = (
        weakref.WeakKeyDictionary()
    )
    _instances_lock = threading.Lock()

    @classmethod
    def acquire(cls, loop: asyncio.AbstractEventLoop, data_dir: str) -> LoopWaiter:
        """The waiter of ``loop`` for ``data_dir`` (started on first use); ``release`` it."""
        with cls._instances_lock:
            per_loop = cls._instances.setdefault(loop, {})
            waiter = per_loop.get(data_dir)
            if waiter is None or waiter._stopped:
                waiter = per_loop[data_dir] = cls(loop, data_dir)
            waiter._users += 1
            return waiter

    def release(self) -> None:
        """On the loop: a consumer stops using this waiter (its waiting coroutines look again)."""
        self._wake_all()
        with self._instances_lock:
            self._users -= 1
            if self._users > 0:
                return
            self._stopped = True
            per_loop = self._instances.get(self._loop, {})
            if per_loop.get(self._dir) is self:
                del per_loop[self._dir]
        self._wanted.set()  # the thread sees _stopped within one futex wait and ends

    def __init__(self, loop: asyncio.AbstractEventLoop, data_dir: str) -> None:
        self._loop = loop
        self._dir = data_dir
        # may_create=False: the sync consumer decides whether the notify file exists (a group
        # member creates it); without it this polls as the sync consumer does.
        self._wakeups = Wakeups(data_dir, may_create=False)
        self._wakeups_lock = threading.Lock()  # Wakeups attaches lazily: one thread at a time
        self._waiting: set[asyncio.Future[None]] = set()
        self._wanted = threading.Event()
        self._users = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="kafkalite-aio-waiter", daemon=True)
        self._thread.start()

    def sequence(self) -> int:
        """The notifier's count now: read it before looking for records, pass it to ``wait``."""
        with self._wakeups_lock:
            return self._wakeups.sequence()

    async def wait(self, seen: int, timeout_ms: int) -> None:
        """Return once a producer appended since ``sequence()`` returned ``seen`` (perhaps
        sooner: callers look again), or after ``timeout_ms``."""
        if self.sequence() != seen:
            return
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiting.add(fut)
        self._wanted.set()
        try:
            await asyncio.wait_for(fut, timeout_ms / 1000.0)
        except TimeoutError:
            pass
        finally:
            self._waiting.discard(fut)

    def _wake_all(self) -> None:
        """On the loop: wake every coroutine waiting now."""
        waiting, self._waiting = self._waiting, set()
        for fut in waiting:
            if not fut.done():
                fut.set_result(None)
        if not self._waiting:
            self._wanted.clear()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            if self._stopped:
                return
            seen = self.sequence()
            self._wakeups.wait(seen, WAIT_CAP_MS)
            if self._stopped:
                return
            try:
                self._loop.call_soon_threadsafe(self._wake_all)
            except RuntimeError:  # the loop was closed under us
                return
