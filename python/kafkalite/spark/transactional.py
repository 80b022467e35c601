"""The transactional id a Spark write commits under, and its coordinator handle (a streaming
sink's id: ``spark/sink.py``).

A batch write's commit is one Kafka transaction over every partition it writes (the engine's
coordinator, ``rust/src/coordination/transactions/``): read_committed readers see all of the write or none
of it, whatever kills the driver in the middle. What stays behind after a kill is an open
transaction, which holds back the last stable offset of its partitions until someone ends it;
the next commit under the same transactional id does (InitProducerId aborts it, or completes
one killed after its commit decision), so it is never blocked behind the dead one.

Which id:

* ``kafka.transactional.id`` (the Kafka producer's ``transactional.id``, as Spark passes
  ``kafka.``-prefixed options to its producer): that id. Two writes running at once under one
  id fence each other, as two Kafka producers do (the older fails with ProducerFencedError).
* Otherwise one of a pool, ``kafkalite-spark-batch-<n>``: a commit takes the lowest slot whose
  lock (``.kafkalite-spark-sinks/batch-slots/<n>.lock``, a flock that dies with its holder) is
  free, so concurrent writes never fence each other and a rerun after a kill gets the dead
  commit's slot back. A commit also ends the open transactions of the other free slots (a
  commit killed while a lower slot was busy), so none outlives the next write.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator, Mapping

from kafkalite import _native
from kafkalite._files import open_nofollow
from kafkalite.spark.options import SparkOptionError

TRANSACTIONAL_ID_OPTION = "kafka.transactional.id"
TIMEOUT_OPTION = "kafka.transaction.timeout.ms"
#: The Kafka producer's transaction.timeout.ms default.
DEFAULT_TIMEOUT_MS = 60_000
POOL_PREFIX = "kafkalite-spark-batch"
SLOTS_DIR = os.path.join(".kafkalite-spark-sinks", "batch-slots")
#: Coordinator states of a transaction that is not over (the next InitProducerId ends it).
_UNFINISHED = {"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}


def transactional_id(options: Mapping[str, str]) -> str | None:
    """The ``kafka.transactional.id`` option (None: a pool slot's)."""
    value = options.get(TRANSACTIONAL_ID_OPTION)
    if value is None:
        return None
    if not value.strip():
        raise SparkOptionError(f"option '{TRANSACTIONAL_ID_OPTION}' must be a non-empty string")
    return value


def timeout_ms(options: Mapping[str, str]) -> int:
    """``kafka.transaction.timeout.ms``: how long a commit's transaction may stay open before
    any transactional producer of the data directory aborts it (Kafka's default, 60 s)."""
    raw = options.get(TIMEOUT_OPTION)
    if raw is None:
        return DEFAULT_TIMEOUT_MS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= _native.MAX_TRANSACTION_TIMEOUT_MS:
        raise SparkOptionError(
            f"Invalid value {raw} for configuration transaction.timeout.ms: must be between 1 and "
            f"{_native.MAX_TRANSACTION_TIMEOUT_MS} (transaction.max.timeout.ms)"
        )
    return value


def _try_lock(path: str) -> int | None:
    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


@contextlib.contextmanager
def _slot(path: str) -> Iterator[int]:
    """The lowest free slot of the pool, held until the block ends."""
    folder = os.path.join(path, SLOTS_DIR)
    os.makedirs(folder, exist_ok=True)
    n = 0
    while (fd := _try_lock(os.path.join(folder, f"{n}.lock"))) is None:
        n += 1
    try:
        yield n
    finally:
        os.close(fd)


def _end_abandoned(path: str, held: int, txn: _native.Transaction, timeout: int) -> None:
    """End the unfinished transactions of the pool's free slots: commits killed in them."""
    folder = os.path.join(path, SLOTS_DIR)
    for name in os.listdir(folder):
        stem = name.removesuffix(".lock")
        if not stem.isdigit() or int(stem) == held:
            continue
        fd = _try_lock(os.path.join(folder, name))
        if fd is None:  # a commit is running in it
            continue
        try:
            ident = f"{POOL_PREFIX}-{int(stem)}"
            described = txn.describe(ident)
            if described is not None and described["state"] in _UNFINISHED:
                with open_transaction(path, ident, timeout):
                    pass
        finally:
            os.close(fd)


@contextlib.contextmanager
def open_transaction(path: str, ident: str, timeout: int) -> Iterator[_native.Transaction]:
    """A coordinator handle for ``ident``, initialized (its previous transaction ended, the
    producer's epoch bumped: an older user of the id is fenced); closed when the block ends."""
    txn = _native.Transaction(path, ident, timeout)
    try:
        txn.init_producer_id()
        yield txn
    finally:
        txn.close()


@contextlib.contextmanager
def batch_transaction(path: str, ident: str | None, timeout: int) -> Iterator[_native.Transaction]:
    """A coordinator handle for one batch commit, initialized (the id's previous transaction
    ended, the producer's epoch bumped); closed when the block ends."""
    if ident is not None:
        with open_transaction(path, ident, timeout) as txn:
            yield txn
        return
    with _slot(path) as slot, open_transaction(path, f"{POOL_PREFIX}-{slot}", timeout) as txn:
        _end_abandoned(path, slot, txn, timeout)
        yield txn
