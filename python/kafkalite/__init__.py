"""kafkalite: Apache Kafka's commit log as an embedded library.

Partitions are stored in Kafka's own on-disk format, so Kafka tools read what kafkalite
writes and kafkalite reads what a broker wrote.
"""

from kafkalite._native import Record, __version__, murmur2
from kafkalite.errors import (
    CorruptRecordError,
    InvalidConfigError,
    KafkaliteError,
    KafkaliteIOError,
    LogClosedError,
    LogLockedError,
    LogPoisonedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnsupportedFormatError,
)
from kafkalite.log import Log, RecoveryWarning, SegmentInfo

__all__ = [
    "Log",
    "Record",
    "SegmentInfo",
    "RecoveryWarning",
    "murmur2",
    "__version__",
    "KafkaliteError",
    "CorruptRecordError",
    "OffsetOutOfRangeError",
    "LogLockedError",
    "InvalidConfigError",
    "RecordTooLargeError",
    "UnsupportedFormatError",
    "LogClosedError",
    "LogPoisonedError",
    "KafkaliteIOError",
]
