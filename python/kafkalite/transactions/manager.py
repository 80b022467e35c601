"""Transactions of the embedded producer (Kafka's exactly-once, KIP-98 / KIP-447), with
kafka-python's and confluent-kafka's names: ``Producer(path, transactional_id=...)`` then
``init_transactions()``, ``begin_transaction()``, ``send()``..., ``send_offsets_to_transaction()``,
``commit_transaction()`` or ``abort_transaction()``.

The coordinator is the engine's (``rust/src/coordination/transactions/``): there is no coordinator process,
each call on a transactional id holds that id's lock in the data directory for its length, and
the state lives in ``__transaction_state`` in Kafka's format. The producer's partition logs are
attached to the native ``Transaction`` (``_native.Transaction``): the first batch appended to a
partition in a transaction adds the partition to it, and every batch carries the producer's id
and epoch (attribute bit 4), natively, so a transactional ``send()`` costs what a plain one does.

What read_committed readers see: records of a committed transaction all appear at its COMMIT,
records of an aborted or never-ended one never do; offsets sent with
``send_offsets_to_transaction`` are the group's committed offsets iff the transaction commits. A
second producer with the same ``transactional_id`` fences the first (``ProducerFencedError`` on its
next call), whatever process it runs in, embedded or through ``kafkalite serve``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from kafkalite import _native
from kafkalite.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalGenerationError,
    IllegalStateError,
    InvalidConfigError,
    InvalidTxnStateError,
    KafkaliteError,
    ProducerFencedError,
    UnknownMemberIdError,
)
from kafkalite.groups.member import GroupFiles, static_member

logger = logging.getLogger("kafkalite.transactions")  # the name users configure, from before the move

if TYPE_CHECKING:
    from kafkalite.log import Log

#: Kafka's transaction.max.timeout.ms: the longest ``transaction_timeout_ms``.
MAX_TRANSACTION_TIMEOUT_MS: int = _native.MAX_TRANSACTION_TIMEOUT_MS
TRANSACTION_STATE_TOPIC: str = _native.TRANSACTION_STATE_TOPIC
#: Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms: how often a transactional
#: producer's sender thread aborts the data directory's transactions past their timeout (and
#: completes ones a crash left half-ended), whatever their transactional id.
ABORT_TIMED_OUT_INTERVAL_MS = 10_000


def abort_expired_transactions(data_dir: str) -> int:
    """Abort the data directory's transactions past their timeout and complete the ones a crash
    left half-ended (ids whose lock is free), as Kafka's coordinator does on its timer; for a
    process with no transactional producer of its own (a consumer waiting for a transaction's
    offsets). Returns how many."""
    # The native handle needs a transactional id; this one is never initialized or written.
    native = _native.Transaction(data_dir, "__kafkalite-expiry-sweep", MAX_TRANSACTION_TIMEOUT_MS)
    try:
        return int(native.abort_expired_and_complete_pending())
    finally:
        native.close()


class ConsumerGroupMetadata(NamedTuple):
    """What ``send_offsets_to_transaction`` needs of a consumer (``Consumer.group_metadata()``,
    Kafka's ``ConsumerGroupMetadata``): its group, and its generation and member id in it."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


def _group_metadata(group: Any) -> ConsumerGroupMetadata:
    """``consumer.group_metadata()`` (kafkalite's, or any object with Kafka's field names) or a
    bare group id (kafka-python's ``consumer_group_id``: no generation, no member)."""
    if isinstance(group, str):
        meta = ConsumerGroupMetadata(group)
    else:
        meta = ConsumerGroupMetadata(
            getattr(group, "group_id", None),  # type: ignore[arg-type]
            getattr(group, "generation_id", -1),
            getattr(group, "member_id", "") or "",
            getattr(group, "group_instance_id", None),
        )
    if not isinstance(meta.group_id, str) or not meta.group_id:
        raise InvalidConfigError(
            "send_offsets_to_transaction takes consumer.group_metadata() or a group id (a non-empty str), "
            f"not {group!r}"
        )
    if type(meta.generation_id) is not int or not isinstance(meta.member_id, str):
        raise InvalidConfigError(f"not a consumer group metadata: {group!r}")
    return meta


def _names_member(meta: ConsumerGroupMetadata) -> bool:
    """Whether a commit names a generation, a member or an instance (KIP-447's form)."""
    return meta.generation_id >= 0 or bool(meta.member_id) or meta.group_instance_id is not None


def generation_refusal(state: dict[str, Any] | None, meta: ConsumerGroupMetadata) -> CommitFailedError | None:
    """Why the group refuses a transactional offset commit from ``meta`` (KIP-447, Kafka's
    ``validateTransactionalOffsetCommit``), or None. ``state``: the group's (None: no such group).
    A commit naming no generation, member nor instance (a bare group id) is not checked; one
    naming them must come from a current member of the current generation: a zombie that lost
    its partitions in a rebalance gets ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID."""
    who = f"member {meta.member_id!r} of generation {meta.generation_id} of group {meta.group_id!r}"
    if state is None:
        if meta.generation_id < 0:
            return None
        return IllegalGenerationError(f"transactional offset commit refused: {who}: the group does not exist")
    if not _names_member(meta):
        return None
    if meta.group_instance_id is not None:
        holder = static_member(state, meta.group_instance_id)
        if holder is None:
            return UnknownMemberIdError(
                f"transactional offset commit refused: {who}: no member has group_instance_id "
                f"{meta.group_instance_id!r} any more"
            )
        if holder != meta.member_id:
            return FencedInstanceIdError(
                f"transactional offset commit refused: {who} was fenced by member {holder!r}, which joined "
                f"with the same group_instance_id {meta.group_instance_id!r}"
            )
    elif meta.member_id not in state["members"]:
        return UnknownMemberIdError(
            f"transactional offset commit refused: {who} is no longer in the group (presumed dead, or past "
            "max_poll_interval_ms; its partitions were given to other members)"
        )
    if meta.generation_id != state["generation"]:
        return IllegalGenerationError(
            f"transactional offset commit refused: {who}: the group is at generation {state['generation']} "
            "(it rebalanced)"
        )
    return None


def _offset_entries(offsets: Mapping[Any, Any]) -> list[tuple[str, int, int, str | None]]:
    """``{TopicPartition: OffsetAndMetadata or int}`` as (topic, partition, offset, metadata)."""
    if not isinstance(offsets, Mapping):
        raise InvalidConfigError(
            f"offsets must be a dict of TopicPartition to OffsetAndMetadata, not {type(offsets).__name__}"
        )
    entries = []
    for tp, value in offsets.items():
        topic, partition = (tp.topic, tp.partition) if hasattr(tp, "topic") else tp
        offset = value.offset if hasattr(value, "offset") else value
        metadata = getattr(value, "metadata", None)
        if not isinstance(topic, str) or type(partition) is not int or type(offset) is not int or offset < 0:
            raise InvalidConfigError(f"not a (TopicPartition, offset) entry: {tp!r}: {value!r}")
        entries.append((topic, partition, offset, metadata))
    return entries


class TransactionManager:
    """A transactional producer's transactions (kafka-python's ``TransactionManager``): the
    state machine of the calls (no begin before init, no send outside a transaction, fenced
    for good once fenced), over the native ``Transaction``. ``failed_records`` is a callable
    counting the producer's failed records: a transaction in which one failed does not commit."""

    def __init__(self, data_dir: str, transactional_id: str, timeout_ms: int, failed_records: Any) -> None:
        if not 1 <= timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS:
            raise InvalidConfigError(
                f"transaction_timeout_ms must be between 1 and {MAX_TRANSACTION_TIMEOUT_MS}, got {timeout_ms}"
            )
        self.native = _native.Transaction(data_dir, transactional_id, timeout_ms)
        self.transactional_id = transactional_id
        self.data_dir = data_dir
        self._abortable: CommitFailedError | None = None  # a refused offset commit: abort only
        self._failed_records = failed_records
        self._failed_at_begin = 0
        self._fatal: KafkaliteError | None = None
        self._lock = threading.Lock()

    @property
    def in_transaction(self) -> bool:
        return bool(self.native.in_transaction)

    @property
    def initialized(self) -> bool:
        return self.native.producer is not None

    def attach(self, log: Log) -> None:
        """A partition log the producer opened: its appends join this producer's transactions."""
        log._native.attach_transaction(self.native)

    def _check_fatal(self) -> None:
        if self._fatal is not None:
            raise type(self._fatal)(str(self._fatal)) from self._fatal

    def _fenced(self, e: KafkaliteError) -> KafkaliteError:
        if isinstance(e, ProducerFencedError):
            self._fatal = e
        return e

    def append_failed(self, e: BaseException) -> None:
        """A batch of the transaction failed: fenced (a newer producer bumped the partition's
        epoch) is fatal, as Kafka's client makes it."""
        if isinstance(e, ProducerFencedError):
            self._fatal = e

    def abort_expired(self) -> int:
        """Abort every transaction of the data directory past its timeout, complete every one a
        crash left half-ended (ids whose lock is free). Returns how many."""
        return int(self.native.abort_expired_and_complete_pending())

    def close(self) -> None:
        """Close the coordinator's logs (the producer closed; an open transaction stays open
        until the next producer with the id, or its timeout, ends it)."""
        self.native.close()

    def check_send(self) -> None:
        """``send()`` of a transactional producer: only inside a transaction."""
        self._check_fatal()
        self._check_abortable()
        if not self.in_transaction:
            raise InvalidTxnStateError(
                f"transactional producer {self.transactional_id!r}: send() outside a transaction; "
                "call begin_transaction() first"
            )

    def init(self) -> tuple[int, int]:
        with self._lock:
            self._check_fatal()
            if self.in_transaction:
                raise InvalidTxnStateError("init_transactions() while a transaction is open")
            try:
                return self.native.init_producer_id()
            except ProducerFencedError as e:
                raise self._fenced(e) from None

    def begin(self) -> None:
        with self._lock:
            self._check_fatal()
            if not self.initialized:
                raise InvalidTxnStateError("call init_transactions() before begin_transaction()")
            self.native.begin()
            self._abortable = None
            self._failed_at_begin = self._failed_records()

    def send_offsets(self, offsets: Mapping[Any, Any], group: Any) -> None:
        """AddOffsetsToTxn and TxnOffsetCommit. With a consumer's group metadata, the group
        checks its generation, member id and instance id first, under the group's lock, held
        until the offsets are written (no rebalance in between); a refusal makes the transaction
        abortable only, as Kafka's producer does (``commit_transaction()`` raises it again)."""
        meta = _group_metadata(group)
        entries = _offset_entries(offsets)
        with self._lock:
            self._check_fatal()
            if not self.in_transaction:
                raise InvalidTxnStateError("send_offsets_to_transaction() without begin_transaction()")
            self._check_abortable()
            try:
                files = GroupFiles(self.data_dir, meta.group_id)
                exists = files.exists()
                if not exists or not _names_member(meta):  # nothing to check under the group's lock
                    self._refuse_if(None if exists else generation_refusal(None, meta))
                    self.native.send_offsets(meta.group_id, entries)
                    return
                with files.locked():
                    self._refuse_if(generation_refusal(files.load(), meta))
                    self.native.send_offsets(meta.group_id, entries)
            except ProducerFencedError as e:
                raise self._fenced(e) from None

    def _refuse_if(self, refusal: CommitFailedError | None) -> None:
        """The group refused the offsets: logged, and the transaction can only be aborted."""
        if refusal is not None:
            self._abortable = refusal
            logger.warning("transactional producer %r: %s", self.transactional_id, refusal)
            raise refusal

    def _check_abortable(self) -> None:
        if self._abortable is not None:
            raise type(self._abortable)(
                f"the transaction can only be aborted (abort_transaction()): {self._abortable}"
            ) from self._abortable

    def end(self, commit: bool) -> None:
        """Commit or abort the open transaction (the caller flushed the producer first)."""
        with self._lock:
            self._check_fatal()
            if not self.in_transaction:
                raise InvalidTxnStateError(
                    f"{'commit' if commit else 'abort'}_transaction() without begin_transaction()"
                )
            if commit:
                self._check_abortable()
            failed = self._failed_records() - self._failed_at_begin
            if commit and failed:
                raise IllegalStateError(
                    f"{failed} records of this transaction were not written (see the futures' errors), so it "
                    "cannot commit: call abort_transaction()"
                )
            try:
                self.native.end(commit)
            except ProducerFencedError as e:
                raise self._fenced(e) from None
            self._abortable = None
