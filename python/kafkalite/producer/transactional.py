"""The transactional part of ``kafkalite.Producer`` (kafka-python's and confluent-kafka's
names; the protocol itself is ``kafkalite.transactions.manager``): a mixin over the producer's sender
(``self._sender``) and transaction manager (``self._txn``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalite import validate
from kafkalite.errors import CommitFailedError, IllegalStateError
from kafkalite.producer.callbacks import _refuse_in_callback
from kafkalite.transactions.manager import TransactionManager

if TYPE_CHECKING:
    from kafkalite.producer.sender import _Sender


class TransactionalProducer:
    """``Producer``'s transactions: ``init_transactions``, ``begin_transaction``,
    ``send_offsets_to_transaction``, ``commit_transaction``, ``abort_transaction``."""

    _sender: _Sender
    _txn: TransactionManager | None

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...  # Producer's: raises for a closed producer

    def _transactions(self) -> TransactionManager:
        self._check_open()
        if self._txn is None:
            raise IllegalStateError(
                "transactions need a transactional producer: Producer(path, transactional_id=...)"
            )
        return self._txn

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the ``transactional_id``: a previous producer with the same id (in any
        process) is fenced and its open transaction aborted. Call once, before the first
        ``begin_transaction()``. ``timeout`` is confluent-kafka's, accepted and unused: waits
        for other holders of the id are bounded (``ConcurrentTransactionsError``)."""
        validate.timeout("timeout", timeout)
        self._transactions().init()

    def begin_transaction(self) -> None:
        """Start a transaction: the records sent until ``commit_transaction()`` are read by
        read_committed consumers all at once at its commit, never if it aborts."""
        txn = self._transactions()
        txn.begin()
        self._sender.gate.reopen()  # sends take the native path again until the transaction ends

    def send_offsets_to_transaction(
        self, offsets: dict[Any, Any], consumer_group_metadata: Any, timeout: float | None = None
    ) -> None:
        """Commit the consumer's ``offsets`` (``{TopicPartition: OffsetAndMetadata}``, the next
        offsets to read) for its group as part of the transaction: they are the group's committed
        offsets iff the transaction commits. ``consumer_group_metadata``: ``Consumer.group_metadata()``
        or a group id (kafka-python's ``consumer_group_id``). A consumer that is no longer the
        group's member of that generation (a zombie: it lost its partitions in a rebalance) is
        refused (``CommitFailedError``: ``IllegalGenerationError``, ``UnknownMemberIdError``,
        ``FencedInstanceIdError``), after which the transaction can only be aborted."""
        validate.timeout("timeout", timeout)
        try:
            self._transactions().send_offsets(offsets, consumer_group_metadata)
        except CommitFailedError:
            self._sender.gate.shut()  # sends raise it again until abort_transaction()
            raise

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit the transaction (PrepareCommit, a COMMIT marker in every partition
        it wrote, CompleteCommit: durable at each step; a crash in between is completed by the next
        user of the transactional id). Raises if one of its records failed (abort it then)."""
        self._end_transaction(True, timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Flush, then abort the transaction: its records (and offsets) are never visible to
        read_committed readers."""
        self._end_transaction(False, timeout)

    def _end_transaction(self, commit: bool, timeout: float | None) -> None:
        _refuse_in_callback("commit_transaction" if commit else "abort_transaction")
        txn = self._transactions()
        if not txn.in_transaction:
            txn.end(commit)  # raises InvalidTxnStateError (or the fatal error)
        self._sender.gate.shut()  # later sends raise until the next begin_transaction()
        try:
            self._sender.flush(validate.timeout("timeout", timeout))
        except BaseException:
            self._sender.gate.reopen()  # still in the transaction
            raise
        try:
            txn.end(commit)
        except BaseException:
            if txn.in_transaction:
                self._sender.gate.reopen()
            raise
