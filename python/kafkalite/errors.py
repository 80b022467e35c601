"""kafkalite's exceptions: one base class, one subclass per way things go wrong.

Each also subclasses the builtin a Python user would reach for first (``ValueError`` for bad
configuration, ``OSError`` for I/O), so generic handlers keep working.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar


class KafkaliteError(Exception):
    """Base class of every error kafkalite raises.

    An error whose fix is a call names that call in API terms: ``action`` (for example
    ``"Admin.create_topic"``), with ``action_args`` (the values the fix needs, such as
    ``{"topic": "events"}``). The message renders it as a Python call; another front end
    renders it in its own terms through ``message_for`` (the CLI names its command). Errors
    without a fix to call have ``action`` None."""

    action: str | None = None
    action_args: dict[str, str] = {}  # replaced per instance by with_action, never mutated
    _problem: str = ""
    _fix: str = ""

    def message_for(self, render: Callable[[str, dict[str, str]], str]) -> str:
        """The message with the action rendered by ``render(action, action_args)``."""
        if self.action is None:
            return str(self)
        return _with_fix(self._problem, self._fix, render(self.action, self.action_args))


def _with_fix(problem: str, fix: str, call: str) -> str:
    return f"{problem}; {fix}: {call}"


E = TypeVar("E", bound=KafkaliteError)


def with_action(cls: type[E], problem: str, fix: str, action: str, **action_args: str) -> E:
    """An error of class ``cls`` saying ``problem``, then ``fix`` done by calling ``action``:
    ``with_action(UnknownTopicError, "unknown topic 'x'", "create it first", "Admin.create_topic",
    topic="x")`` says "unknown topic 'x'; create it first: Admin.create_topic(...)"."""
    error = cls(_with_fix(problem, fix, f"{action}(...)"))
    error.action, error.action_args, error._problem, error._fix = action, action_args, problem, fix
    return error


class CorruptRecordError(KafkaliteError):
    """Bytes that are not a valid Kafka v2 record batch (bad length, CRC, varint...)."""


class OffsetOutOfRangeError(KafkaliteError, IndexError):
    """An offset outside [log start offset, log end offset]."""


class LogLockedError(KafkaliteError):
    """Another process (named in the message) is writing this partition."""


class InvalidConfigError(KafkaliteError, ValueError):
    """A setting or argument that the caller can fix."""


class RecordTooLargeError(KafkaliteError, ValueError):
    """A batch larger than max_message_bytes."""


class InvalidRecordError(KafkaliteError, ValueError):
    """A record the topic refuses, such as a record without a key on a compacted topic."""


class UnsupportedFormatError(KafkaliteError):
    """Data in a format kafkalite does not read (for example magic v0/v1 message sets)."""


class LogClosedError(KafkaliteError):
    """The log is closed, or read-only and asked to write."""


class LogPoisonedError(KafkaliteError, RuntimeError):
    """The log's state is unknown and it takes no more calls: a flush failed earlier, or a
    thread panicked inside it. Close it and open it again (which recovers). Also a
    ``RuntimeError``: the call was fine, the log cannot take it."""


class KafkaliteIOError(KafkaliteError, OSError):
    """An operating-system I/O error, with the file it concerned (``errno``, ``filename``).
    Errors that Python gives a class of their own arrive as the subclasses below, so
    ``except FileNotFoundError`` / ``except PermissionError`` work as with ``open()``."""

    def __str__(self) -> str:
        # Without an errno, OSError would print "[Errno None] None: 'file'".
        if self.errno is None and self.args:
            return str(self.args[0])
        return super().__str__()


class KafkaliteFileNotFoundError(KafkaliteIOError, FileNotFoundError):
    """ENOENT: a file or directory kafkalite needs is missing."""


class KafkalitePermissionError(KafkaliteIOError, PermissionError):
    """EACCES / EPERM: the process may not read or write the file."""


class KafkaliteFileExistsError(KafkaliteIOError, FileExistsError):
    """EEXIST: a file kafkalite creates is already there."""


class KafkaliteIsADirectoryError(KafkaliteIOError, IsADirectoryError):
    """EISDIR: a directory where kafkalite expects a file."""


class KafkaliteNotADirectoryError(KafkaliteIOError, NotADirectoryError):
    """ENOTDIR: a file where kafkalite expects a directory."""


# Python's own errno -> class choice (``type(OSError(errno, ...))``) picks the builtin; this
# table picks kafkalite's class for it. Errors without a class of their own (ENOSPC, EMFILE,
# EIO...) stay KafkaliteIOError, an ``OSError`` with that errno.
_IO_CLASSES: dict[type[OSError], type[KafkaliteIOError]] = {
    FileNotFoundError: KafkaliteFileNotFoundError,
    PermissionError: KafkalitePermissionError,
    FileExistsError: KafkaliteFileExistsError,
    IsADirectoryError: KafkaliteIsADirectoryError,
    NotADirectoryError: KafkaliteNotADirectoryError,
}


def io_error(errno: int | None, message: str, filename: str | None = None) -> KafkaliteIOError:
    """The kafkalite exception for an I/O failure: the ``KafkaliteIOError`` subclass that is
    also the builtin Python raises for ``errno`` (``FileNotFoundError`` for ENOENT...), with
    ``errno``, ``strerror`` (= ``message``) and ``filename`` set. The engine's I/O errors come
    through here too (rust/src/py/errors.rs), so both layers agree."""
    if errno is None:
        error = KafkaliteIOError(message)
        error.filename = filename
        return error
    cls = _IO_CLASSES.get(type(OSError(errno, message)), KafkaliteIOError)
    if filename is None:
        return cls(errno, message)
    return cls(errno, message, filename)


@contextmanager
def typed_io_errors(doing: str) -> Iterator[None]:
    """Let an ``OSError`` of the block leave as a ``KafkaliteIOError`` (errno and file name
    kept, ``doing`` said first; ``FileNotFoundError`` etc. stay so, see ``io_error``), so
    callers catching ``KafkaliteError`` see full disks and descriptor limits too."""
    try:
        yield
    except KafkaliteError:
        raise
    except OSError as e:
        raise io_error(e.errno, f"{doing}: {e.strerror or e}", e.filename) from e


__all__ = [
    "KafkaliteError",
    "CorruptRecordError",
    "OffsetOutOfRangeError",
    "LogLockedError",
    "InvalidConfigError",
    "RecordTooLargeError",
    "InvalidRecordError",
    "UnsupportedFormatError",
    "LogClosedError",
    "LogPoisonedError",
    "KafkaliteIOError",
    "KafkaliteFileNotFoundError",
    "KafkalitePermissionError",
    "KafkaliteFileExistsError",
    "KafkaliteIsADirectoryError",
    "KafkaliteNotADirectoryError",
]


class UnknownTopicError(KafkaliteError, KeyError):
    """The topic does not exist in this data directory (create it with Admin.create_topic)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class TopicAlreadyExistsError(KafkaliteError):
    """create_topic was given the name of an existing topic."""


class InvalidTopicError(KafkaliteError, ValueError):
    """A topic name that breaks Kafka's rules (1-249 characters of [a-zA-Z0-9._-], not . or ..), or
    a call the topic refuses (Kafka's INVALID_TOPIC_EXCEPTION): deleting the internal
    ``__consumer_offsets`` or records from it."""


class IllegalStateError(KafkaliteError, RuntimeError):
    """A call that the client's current state does not allow (closed, or assign after subscribe...).
    Also a ``RuntimeError``: the call is fine, the object is not in a state to take it."""


class CommitFailedError(KafkaliteError):
    """A commit from a consumer that no longer owns the partitions: the group rebalanced, or the
    member was presumed dead (kafka-python's name)."""


class FencedInstanceIdError(CommitFailedError):
    """A static group member (``group_instance_id``) was replaced by another consumer that
    joined with the same instance id: fatal for this consumer, as Kafka's FENCED_INSTANCE_ID
    (kafka-python's name). A commit it attempts fails with this error too."""


class IllegalGenerationError(CommitFailedError):
    """Kafka's ILLEGAL_GENERATION (22): a commit named a generation that is not the group's
    current one (the group rebalanced since the consumer's ``group_metadata()``); kafka-python's
    name. In a transaction (``send_offsets_to_transaction``) the transaction must be aborted."""

    code = 22


class UnknownMemberIdError(CommitFailedError):
    """Kafka's UNKNOWN_MEMBER_ID (25): a commit named a member that is no longer in the group
    (presumed dead, or evicted past ``max_poll_interval_ms``); kafka-python's name. In a
    transaction (``send_offsets_to_transaction``) the transaction must be aborted."""

    code = 25


class KafkaTimeoutError(KafkaliteError, TimeoutError):
    """A future or flush did not complete in time."""


class InconsistentGroupProtocolError(KafkaliteError, RuntimeError):
    """The consumer group is coordinated elsewhere: its id is in use by network consumers of a
    ``kafkalite serve`` on the same data directory, and one group id has one coordinator at a
    time (kafka-python's name for Kafka's INCONSISTENT_GROUP_PROTOCOL, the error network
    consumers get in the opposite case). Use another group id, or wait until the network
    consumers have left the group."""


__all__ += [
    "InconsistentGroupProtocolError",
    "CommitFailedError",
    "FencedInstanceIdError",
    "IllegalGenerationError",
    "UnknownMemberIdError",
    "UnknownTopicError",
    "TopicAlreadyExistsError",
    "InvalidTopicError",
    "IllegalStateError",
    "KafkaTimeoutError",
]


# -- argument, topic and data-directory errors ------------------------------------------------


class UnknownTopicOrPartitionError(UnknownTopicError):
    """kafka-python's name for Kafka's UNKNOWN_TOPIC_OR_PARTITION: the partition does not exist,
    or was deleted (and perhaps created again) while a client was writing it."""


class InvalidTypeError(InvalidConfigError, TypeError):
    """An argument or setting of the wrong type (``str`` where bytes are expected, a float
    where an integer is...). Also a ``TypeError``, and an ``InvalidConfigError``."""


class ReadOnlyDataDirError(KafkaliteError, PermissionError):
    """The call must write to the data directory (committed offsets, group membership), but the
    directory is read-only to this process or is a Kafka broker's log directory."""


class CorruptMetadataError(KafkaliteError, ValueError):
    """A kafkalite metadata file (topics, group state) that does not parse."""


class MissingDependencyError(KafkaliteError, ImportError):
    """An optional dependency a method needs is not installed (the message names the extra)."""


class InvalidTopicTypeError(InvalidTopicError, InvalidTypeError):
    """A topic name that is not a str."""


def bytes_expected(argument: str, got: object, *, serializers: bool = True) -> InvalidTypeError:
    """The one wording for ``str`` (or another type) where bytes are expected, used by
    ``Producer.send``, ``send_batch`` and ``Log.append*``. ``serializers``: the caller takes
    ``value_serializer`` / ``key_serializer`` (a Producer does, a Log does not)."""
    if isinstance(got, str):
        fix = (
            "or set a serializer (value_serializer=str.encode / key_serializer=str.encode)"
            if serializers
            else ""
        )
        return InvalidTypeError(
            f"{argument} must be bytes (or None), not str; encode it with .encode() {fix}".rstrip()
        )
    fix = " or set a serializer (value_serializer / key_serializer)" if serializers else ""
    return InvalidTypeError(
        f"{argument} must be bytes (or None), not {type(got).__name__}; convert it to bytes{fix}"
    )


__all__ += [
    "UnknownTopicOrPartitionError",
    "InvalidTypeError",
    "InvalidTopicTypeError",
    "ReadOnlyDataDirError",
    "MissingDependencyError",
    "CorruptMetadataError",
]


class NotADataDirError(InvalidConfigError, FileNotFoundError):
    """The path is not a kafkalite data directory (missing, or a file). Only calls that create
    (``Admin.create_topic``, producing with auto-creation, ``kafkalite init``, ``kafkalite topics
    create``) make a new data directory, so a typo never creates one."""


class NotAPartitionDirError(InvalidConfigError):
    """``Log(path)`` where ``path`` is not one partition's folder: a data directory, or a folder
    not named ``<topic>-<partition>`` (``Log(path, any_folder=True)`` takes any folder on purpose)."""


class BrokerAddressError(NotADataDirError):
    """A ``host:port`` (a broker's bootstrap address) where kafkalite takes a data directory."""


def broker_address_error(address: str, problem: str | None = None) -> BrokerAddressError:
    """The one wording for a broker address (``host:port``, or ``bootstrap_servers=``) given
    where kafkalite takes a data directory; ``problem`` replaces the default first words."""
    problem = (
        problem or f"{address!r} looks like a broker address (host:port, kafka-python's bootstrap_servers)"
    )
    return BrokerAddressError(
        f"{problem}, but kafkalite takes the path of a data directory, for example Producer('data'). To talk to "
        "a Kafka broker, use a Kafka client such as kafka-python or confluent-kafka; to give Kafka clients a "
        "broker over a data directory, run: kafkalite serve --data-dir DIR --listen HOST:PORT"
    )


class GroupIdNotFoundError(KafkaliteError, KeyError):
    """A consumer group that does not exist in the data directory: no member, no committed
    offset (Kafka's GroupIdNotFoundException, kafka-python's GroupIdNotFoundError)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


__all__ += ["NotADataDirError", "NotAPartitionDirError", "BrokerAddressError", "GroupIdNotFoundError"]


class OutOfOrderSequenceNumberError(KafkaliteError, ValueError):
    """An idempotent producer's batch whose sequence number does not follow the producer's last
    one in the partition (Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER): records in between are missing,
    or the producer's state was reset. Nothing was appended."""


class InvalidProducerEpochError(KafkaliteError, ValueError):
    """A batch from an older epoch of a producer than the partition has seen (Kafka's
    INVALID_PRODUCER_EPOCH): a newer instance of the producer took over. Nothing was appended."""


__all__ += ["OutOfOrderSequenceNumberError", "InvalidProducerEpochError"]


# -- transactions (Kafka's error codes of the transaction coordinator) -------------------------


class TransactionError(KafkaliteError):
    """Base class of the errors of transactions (``Producer(transactional_id=...)``); each
    subclass is one of Kafka's error codes, in ``code``. ``retriable`` says whether the same call
    may succeed if tried again (only ``ConcurrentTransactionsError``)."""

    code: int = -1
    retriable: bool = False


class ProducerFencedError(TransactionError):
    """Kafka's PRODUCER_FENCED (90): another producer with the same ``transactional_id`` called
    ``init_transactions()`` since this one did (or this one's transaction outlived
    ``transaction_timeout_ms`` and was aborted). This producer can only be closed."""

    code = 90


class InvalidTxnStateError(TransactionError):
    """Kafka's INVALID_TXN_STATE (48): the call is not valid in the transaction's state
    (``commit_transaction()`` without ``begin_transaction()``, ``send()`` outside a transaction
    of a transactional producer, ...)."""

    code = 48


class InvalidProducerIdMappingError(TransactionError):
    """Kafka's INVALID_PRODUCER_ID_MAPPING (49): the producer id is not the transactional id's
    current one."""

    code = 49


class InvalidTransactionTimeoutError(TransactionError, InvalidConfigError):
    """Kafka's INVALID_TRANSACTION_TIMEOUT (50): ``transaction_timeout_ms`` outside 1 ..
    transaction.max.timeout.ms (900000)."""

    code = 50


class ConcurrentTransactionsError(TransactionError):
    """Kafka's CONCURRENT_TRANSACTIONS (51, retriable): another process held the transactional
    id's coordinator lock longer than the wait (stopped or hung?). Retry later."""

    code = 51
    retriable = True


class TransactionalIdNotFoundError(TransactionError, KeyError):
    """Kafka's TRANSACTIONAL_ID_NOT_FOUND (105): no such transactional id."""

    code = 105

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


__all__ += [
    "TransactionError",
    "ProducerFencedError",
    "InvalidTxnStateError",
    "InvalidProducerIdMappingError",
    "InvalidTransactionTimeoutError",
    "ConcurrentTransactionsError",
    "TransactionalIdNotFoundError",
]
