"""kafkalite's exceptions: one base class, one subclass per way things go wrong.

Each also subclasses the builtin a Python user would reach for first (``ValueError`` for bad
configuration, ``OSError`` for I/O), so generic handlers keep working.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class KafkaliteError(Exception):
    """Base class of every error kafkalite raises."""


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
    """An operating-system I/O error, with the file it concerned."""


@contextmanager
def typed_io_errors(doing: str) -> Iterator[None]:
    """Let an ``OSError`` of the block leave as a ``KafkaliteIOError`` (errno and file name
    kept, ``doing`` said first), so callers catching ``KafkaliteError`` see full disks and
    descriptor limits too."""
    try:
        yield
    except KafkaliteError:
        raise
    except OSError as e:
        raise KafkaliteIOError(e.errno, f"{doing}: {e.strerror or e}", e.filename) from e


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
]


class UnknownTopicError(KafkaliteError, KeyError):
    """The topic does not exist in this data directory (create it with Admin.create_topic)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class TopicAlreadyExistsError(KafkaliteError):
    """create_topic was given the name of an existing topic."""


class InvalidTopicError(KafkaliteError, ValueError):
    """A topic name that breaks Kafka's rules (1-249 characters of [a-zA-Z0-9._-], not . or ..)."""


class IllegalStateError(KafkaliteError, RuntimeError):
    """A call that the client's current state does not allow (closed, or assign after subscribe...).
    Also a ``RuntimeError``: the call is fine, the object is not in a state to take it."""


class CommitFailedError(KafkaliteError):
    """A commit from a consumer that no longer owns the partitions: the group rebalanced, or the
    member was presumed dead (kafka-python's name)."""


class KafkaTimeoutError(KafkaliteError, TimeoutError):
    """A future or flush did not complete in time."""


__all__ += [
    "CommitFailedError",
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


def bytes_expected(argument: str, got: object) -> InvalidTypeError:
    """The one wording for ``str`` (or another type) where bytes are expected, used by
    ``Producer.send``, ``send_batch`` and ``Log.append*``."""
    if isinstance(got, str):
        return InvalidTypeError(
            f"{argument} must be bytes (or None), not str; encode it with .encode() "
            "or set a serializer (value_serializer=str.encode / key_serializer=str.encode)"
        )
    return InvalidTypeError(
        f"{argument} must be bytes (or None), not {type(got).__name__}; convert it to bytes "
        "or set a serializer (value_serializer / key_serializer)"
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


class BrokerAddressError(NotADataDirError):
    """A ``host:port`` (a broker's bootstrap address) where kafkalite takes a data directory."""


__all__ += ["NotADataDirError", "BrokerAddressError"]
