"""kafkalite: Apache Kafka's commit log as an embedded library.

Partitions are stored in Kafka's own on-disk format, so Kafka tools read what kafkalite
writes and kafkalite reads what a broker wrote.

The public names load on first use (PEP 562): ``import kafkalite`` alone imports only the
exception classes, so a process that needs one module (Spark's Python workers unpickling the
data source, the CLI, ``kafkalite.log``) does not pay for the producer, consumer, admin,
group and server modules. ``from kafkalite import X`` and ``kafkalite.X`` work as before.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kafkalite import errors
from kafkalite.errors import *  # noqa: F403 (the exception classes, listed in errors.__all__)
from kafkalite.spark.interpreter import use_this_interpreter as _use_this_interpreter

if TYPE_CHECKING:
    from kafkalite._native import ConsumerRecord, Record, __version__, murmur2
    from kafkalite.admin import Admin, PartitionInfo, TopicDescription
    from kafkalite.aio import AIOConsumer, AIOProducer
    from kafkalite.consumer import (
        Consumer,
        NoOffsetForPartitionError,
        OffsetAndMetadata,
        OffsetAndTimestamp,
        TopicPartition,
    )
    from kafkalite.log import Log, RecoveryWarning, SegmentInfo
    from kafkalite.producer import FutureRecordMetadata, Producer, RecordMetadata
    from kafkalite.server import TLS, Server

#: Each public name that loads on first use -> the module that defines it.
_LAZY = {
    "Admin": "kafkalite.admin",
    "PartitionInfo": "kafkalite.admin",
    "TopicDescription": "kafkalite.admin",
    "Producer": "kafkalite.producer",
    "FutureRecordMetadata": "kafkalite.producer",
    "RecordMetadata": "kafkalite.producer",
    "Consumer": "kafkalite.consumer",
    "NoOffsetForPartitionError": "kafkalite.consumer",
    "OffsetAndMetadata": "kafkalite.consumer",
    "OffsetAndTimestamp": "kafkalite.consumer",
    "TopicPartition": "kafkalite.consumer",
    "AIOProducer": "kafkalite.aio",
    "AIOConsumer": "kafkalite.aio",
    "Server": "kafkalite.server",
    "TLS": "kafkalite.server",
    "Log": "kafkalite.log",
    "RecoveryWarning": "kafkalite.log",
    "SegmentInfo": "kafkalite.log",
    "ConsumerRecord": "kafkalite._native",
    "Record": "kafkalite._native",
    "murmur2": "kafkalite._native",
    "__version__": "kafkalite._native",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        if not name.startswith("__"):
            # A submodule (``kafkalite.users`` after ``import kafkalite``), as when this file
            # imported them all eagerly.
            try:
                return import_module(f"kafkalite.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"kafkalite.{name}":
                    raise
        raise AttributeError(f"module 'kafkalite' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
