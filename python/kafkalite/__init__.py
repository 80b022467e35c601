"""kafkalite: Apache Kafka's commit log as an embedded library.

Partitions are stored in Kafka's own on-disk format, so Kafka tools read what kafkalite
writes and kafkalite reads what a broker wrote.
"""

from typing import TYPE_CHECKING, Any

from kafkalite import errors
from kafkalite._native import ConsumerRecord, Record, __version__, murmur2
from kafkalite.admin import Admin, PartitionInfo, TopicDescription
from kafkalite.consumer import (
    Consumer,
    NoOffsetForPartitionError,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from kafkalite.errors import *  # noqa: F403 (the exception classes, listed in errors.__all__)
from kafkalite.log import Log, RecoveryWarning, SegmentInfo
from kafkalite.producer import FutureRecordMetadata, Producer, RecordMetadata
from kafkalite.server import TLS, Server
from kafkalite.spark.interpreter import use_this_interpreter as _use_this_interpreter

if TYPE_CHECKING:
    from kafkalite.aio import AIOConsumer, AIOProducer


def __getattr__(name: str) -> Any:
    """``kafkalite.AIOProducer`` / ``AIOConsumer`` import ``kafkalite.aio`` on first use: asyncio
    adds some 50 ms to ``import kafkalite`` for programs that never use it."""
    if name in ("AIOProducer", "AIOConsumer"):
        from kafkalite import aio

        return getattr(aio, name)
    raise AttributeError(f"module 'kafkalite' has no attribute {name!r}")


# Spark's Python workers run PYSPARK_PYTHON, else `python3` from PATH, which outside an activated
# venv has no kafkalite: default it to this interpreter (never overriding the user's choice).
_use_this_interpreter()

__all__ = [
    "Admin",
    "Producer",
    "Consumer",
    "AIOProducer",
    "AIOConsumer",
    "TopicPartition",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "ConsumerRecord",
    "RecordMetadata",
    "FutureRecordMetadata",
    "TopicDescription",
    "PartitionInfo",
    "NoOffsetForPartitionError",
    "Server",
    "TLS",
    "Log",
    "Record",
    "SegmentInfo",
    "RecoveryWarning",
    "murmur2",
    "__version__",
    *errors.__all__,
]
