"""The transactions of a data directory as Kafka's Admin reports them (``listTransactions()``,
``describeTransactions()``) and as ``kafka-transactions.sh abort`` ends one, for ``Admin`` and
``kafkalite transactions``. What they read is the engine coordinator's ``__transaction_state``
(``rust/src/coordination/transactions/``); nothing here keeps state of its own."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafkalite import _native
from kafkalite.errors import (
    ConcurrentTransactionsError,
    InvalidConfigError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
)
from kafkalite.groups.assignors import TopicPartition

#: Kafka's transaction state names (``TransactionState.stateName()``), as ListTransactions filters on them.
STATES: tuple[str, ...] = tuple(_native.TRANSACTION_STATES)


@dataclass(frozen=True)
class TransactionListing:
    """One transactional id as Kafka's ``TransactionListing`` reports it."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    """One transactional id as Kafka's ``TransactionDescription`` reports it;
    ``transaction_start_time_ms`` is None when no transaction was ever open since the producer
    started (Kafka's empty ``OptionalLong``)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None
    topic_partitions: list[TopicPartition]


def _check_id(transactional_id: Any) -> str:
    if not isinstance(transactional_id, str) or not transactional_id:
        raise InvalidConfigError(f"a transactional id is a non-empty str, not {transactional_id!r}")
    return transactional_id


def list_transactions(
    data_dir: str,
    states: Iterable[str] | None = None,
    producer_ids: Iterable[int] | None = None,
    duration_ms: int | None = None,
) -> list[TransactionListing]:
    """Kafka's ListTransactions filters: ``states`` (state names), ``producer_ids``, and
    ``duration_ms`` (KIP-994: only transactions started longer ago than this). Dead ids are
    never listed, as Kafka's coordinator lists none."""
    wanted_states = None if states is None else set(_strs("states", states))
    unknown = sorted((wanted_states or set()) - set(STATES))
    if unknown:
        raise InvalidConfigError(f"unknown transaction states {unknown}: the states are {', '.join(STATES)}")
    wanted_pids = None if producer_ids is None else set(producer_ids)
    if wanted_pids is not None and not all(type(p) is int for p in wanted_pids):
        raise InvalidConfigError(f"producer_ids must be ints, got {sorted(map(repr, wanted_pids))}")
    if duration_ms is not None and (type(duration_ms) is not int or duration_ms < 0):
        raise InvalidConfigError(f"duration_ms must be an int >= 0, got {duration_ms!r}")
    now = int(time.time() * 1000)
    out = []
    for m in _native.list_transactions(data_dir):
        if m["state"] == "Dead":
            continue
        if wanted_states is not None and m["state"] not in wanted_states:
            continue
        if wanted_pids is not None and m["producer_id"] not in wanted_pids:
            continue
        # Kafka's rule: `now - txnStartTimestamp <= filter` is left out (no start time counts as long ago).
        if duration_ms is not None and now - m["start_ms"] <= duration_ms:
            continue
        out.append(TransactionListing(m["transactional_id"], m["producer_id"], m["state"]))
    return out


def _strs(name: str, values: Iterable[str]) -> list[str]:
    if isinstance(values, str):
        raise InvalidConfigError(f"{name} must be a list of str, not the str {values!r}")
    out = list(values)
    if not all(isinstance(v, str) for v in out):
        raise InvalidConfigError(f"{name} must be a list of str, got {out!r}")
    return out


def describe_transaction(data_dir: str, transactional_id: str) -> TransactionDescription:
    """One id's metadata; TransactionalIdNotFoundError when the data directory has none for it."""
    _check_id(transactional_id)
    txn = _native.Transaction(data_dir, transactional_id)
    try:
        m = txn.describe()
    finally:
        txn.close()
    if m is None or m["state"] == "Dead":
        raise TransactionalIdNotFoundError(
            f"transactional id {transactional_id!r} is not known in {data_dir}"
        )
    return TransactionDescription(
        transactional_id=m["transactional_id"],
        producer_id=m["producer_id"],
        producer_epoch=m["producer_epoch"],
        state=m["state"],
        transaction_timeout_ms=m["transaction_timeout_ms"],
        transaction_start_time_ms=None if m["start_ms"] < 0 else m["start_ms"],
        topic_partitions=[TopicPartition(t, p) for t, p in m["partitions"]],
    )


def describe_transactions(
    data_dir: str, transactional_ids: Iterable[str]
) -> dict[str, TransactionDescription]:
    """Kafka's ``describeTransactions(ids)``: a description per id; the first unknown id
    raises TransactionalIdNotFoundError."""
    return {i: describe_transaction(data_dir, i) for i in _strs("transactional_ids", transactional_ids)}


def abort_transaction(data_dir: str, transactional_id: str) -> TransactionDescription:
    """Abort the open transaction of ``transactional_id`` as the coordinator aborts one past its
    timeout: ABORT markers to every partition of it (read_committed readers never see its
    records) and the producer's epoch bumped, so the producer that opened it is fenced
    (``ProducerFencedError`` at its next send or commit). It is InitProducerId's abort, done on
    the producer's behalf: the id's metadata is left Empty at the new epoch. Returns the id's
    description afterwards. InvalidTxnStateError when no transaction of the id is open."""
    before = describe_transaction(data_dir, transactional_id)
    if before.state != "Ongoing":
        raise InvalidTxnStateError(
            f"transactional id {transactional_id!r} has no open transaction to abort (state {before.state})"
        )
    txn = _native.Transaction(data_dir, transactional_id, before.transaction_timeout_ms)
    try:
        # The producer described above, checked under the id's lock: a producer that started
        # since (and may have no transaction open) is not fenced by a stale abort.
        txn.init_producer_id((before.producer_id, before.producer_epoch))
    except ProducerFencedError:
        raise ConcurrentTransactionsError(
            f"transactional id {transactional_id!r} changed producer while being aborted; describe it again"
        ) from None
    finally:
        txn.close()
    return describe_transaction(data_dir, transactional_id)


@dataclass(frozen=True)
class ProducerState:
    """One producer of a partition as Kafka's Admin ``describeProducers`` reports it
    (``ProducerState``); ``current_transaction_start_offset`` is None when it has no open
    transaction there."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None
    current_transaction_start_offset: int | None


@dataclass(frozen=True)
class HangingTransaction:
    """A row of ``kafka-transactions.sh find-hanging``: a producer's transaction open in a
    partition past the longest transaction timeout, which no coordinator will end."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int
    duration_ms: int


def _open_partition(data_dir: str, topic: str, partition: int) -> Any:
    from kafkalite.datadir import DataDir
    from kafkalite.errors import UnknownTopicOrPartitionError

    d = DataDir(data_dir)
    if not 0 <= partition < d.partitions(topic):  # an unknown topic raises here
        raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist in {data_dir}")
    return d.open_partition(topic, partition, shared_writers=True)


def describe_producers(
    data_dir: str, partitions: Iterable[tuple[str, int]]
) -> dict[TopicPartition, list[ProducerState]]:
    """Kafka's ``describeProducers``: each partition's producers from its producer state (what
    the idempotence and transaction checks use), read as the partition's writer."""
    out = {}
    for topic, partition in partitions:
        with _open_partition(data_dir, topic, partition) as log:
            out[TopicPartition(topic, partition)] = [
                ProducerState(pid, epoch, seq, ts, None if ce < 0 else ce, None if start < 0 else start)
                for pid, epoch, seq, ts, ce, start in log._native.producers()
            ]
    return out


def all_partitions(data_dir: str) -> list[tuple[str, int]]:
    """Every partition of the data directory (``--broker-id``: the directory is one broker)."""
    from kafkalite.datadir import DataDir

    d = DataDir(data_dir)
    return [(t, p) for t in sorted(d.topics()) for p in range(d.partitions(t))]


def find_hanging(
    data_dir: str,
    partitions: Iterable[tuple[str, int]],
    max_transaction_timeout_ms: int,
    now_ms: int | None = None,
) -> list[HangingTransaction]:
    """``kafka-transactions.sh find-hanging``'s check: the producers with a transaction open in
    ``partitions`` whose last write is older than ``max_transaction_timeout_ms`` (no transaction
    may run that long), unless the coordinator has that producer's transaction Ongoing with the
    partition in it (then its timeout will abort it)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    ongoing = {
        (d.producer_id, tp)
        for t in list_transactions(data_dir, ["Ongoing"], None, None)
        for d in [describe_transaction(data_dir, t.transactional_id)]
        for tp in d.topic_partitions
    }
    out = []
    for tp, producers in describe_producers(data_dir, partitions).items():
        for p in producers:
            start = p.current_transaction_start_offset
            if start is None or now - p.last_timestamp <= max_transaction_timeout_ms:
                continue
            if (p.producer_id, tp) in ongoing:
                continue
            out.append(
                HangingTransaction(
                    tp.topic,
                    tp.partition,
                    p.producer_id,
                    p.producer_epoch,
                    -1 if p.coordinator_epoch is None else p.coordinator_epoch,
                    start,
                    p.last_timestamp,
                    now - p.last_timestamp,
                )
            )
    return out


def abort_hanging(
    data_dir: str, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int
) -> int:
    """Kafka's Admin ``abortTransaction(AbortTransactionSpec)``: an ABORT marker for
    ``producer_id``'s open transaction in one partition, as the coordinator would write it (its
    records hidden from read_committed readers, the last stable offset released). Returns the
    marker's offset; InvalidTxnStateError when the partition has no open transaction of that
    producer at that epoch."""
    with _open_partition(data_dir, topic, partition) as log:
        offset = log._native.write_txn_marker(producer_id, producer_epoch, False, coordinator_epoch)
    if offset is None:
        raise InvalidTxnStateError(
            f"{topic}-{partition} has no open transaction of producer {producer_id} at epoch {producer_epoch}"
        )
    return int(offset)
