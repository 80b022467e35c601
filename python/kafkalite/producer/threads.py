"""The producer's helper threads: the flusher that runs bounded flushes and closes, and the
parallel close of partition logs; and the one rule for background work that failed."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from kafkalite.errors import KafkaliteError
from kafkalite.log import Log

logger = logging.getLogger("kafkalite.producer")

#: How many partition logs ``close()`` closes at once (``_close_logs``).
_CLOSE_PARALLELISM = 8


def _log_background_failure(what: str, e: Exception) -> None:
    """The one rule for background work that failed and is retried on the next pass: a
    KafkaliteError (full disk, too many open files) is operational and its message says it all
    (WARNING); anything else is a bug, logged with its traceback (ERROR)."""
    if isinstance(e, KafkaliteError):
        logger.warning("%s failed; retrying on the next pass: %s", what, e)
    else:
        logger.error("%s failed; retrying on the next pass", what, exc_info=e)


class _Flusher:
    """One long-lived thread, started on first use, that runs the bounded flushes and closes of
    a producer: a caller waits at most its timeout even when an append waits for a partition
    lock held by a stopped process (the engine waits up to 60 s), while the work goes on here.
    Jobs run one at a time, in order. The thread holds only its queue, never the producer, so an
    abandoned producer can still be collected."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._mutex = threading.Lock()

    def run(self, job: Callable[[], None], timeout: float) -> bool:
        """Run ``job`` here, waiting at most ``timeout`` s; False if it has not finished by then.
        An exception of the job is raised to the caller."""
        if threading.current_thread() is self._thread:  # a job that flushes (close at exit)
            job()
            return True
        finished = threading.Event()
        failure: list[BaseException] = []

        def wrapped() -> None:
            try:
                job()
            except BaseException as e:  # handed to the caller below
                failure.append(e)
            finally:
                finished.set()

        with self._mutex:
            if self._thread is None or not self._thread.is_alive():  # first use, or after a fork
                self._thread = threading.Thread(
                    target=_run_jobs, args=(self._jobs,), name="kafkalite-producer-flusher", daemon=True
                )
                self._thread.start()
            self._jobs.put(wrapped)
        if not finished.wait(timeout):
            return False
        if failure:
            raise failure[0]
        return True

    def stop(self) -> None:
        """End the thread after the jobs already queued (not waited for: one may be stuck)."""
        with self._mutex:
            if self._thread is not None and self._thread.is_alive():
                self._jobs.put(None)
            self._thread = None


def _run_jobs(jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
    while (job := jobs.get()) is not None:
        job()


def _close_logs(logs: list[Log], left: Callable[[], float | None]) -> None:
    """Close a producer's partition logs, up to ``_CLOSE_PARALLELISM`` at once. Closing a
    partition's last writer syncs its active segment (Kafka's clean shutdown: the marker says
    the data is on disk), which mostly waits for the disk, and the syncs of several partitions
    overlap (4 partitions that took 1,000,000 records, the machine busy: 240-250 ms one by one,
    105-130 ms together). Each close is
    bounded by ``left()`` (another writer may hold the lock). Every log is closed even when one
    fails; the first failure is raised."""
    pending = list(logs)  # list.pop is atomic: the workers share it
    failures: list[BaseException] = []

    def work() -> None:
        while pending:
            try:
                log = pending.pop()
            except IndexError:  # another worker took the last one
                return
            try:
                log.close(left())
            except BaseException as e:  # raised below, once every log is closed
                failures.append(e)

    helpers = [
        threading.Thread(target=work, name="kafkalite-producer-close", daemon=True)
        for _ in range(min(_CLOSE_PARALLELISM, len(logs)) - 1)
    ]
    for h in helpers:
        h.start()
    work()  # the closing thread closes logs too
    for h in helpers:
        h.join()
    if failures:
        raise failures[0]
