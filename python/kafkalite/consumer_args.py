"""Checks of ``Consumer``'s config and call arguments, done before anything is read or written.
Each raises a typed error (``InvalidTypeError`` is also a ``TypeError``; ``InvalidConfigError`` a
``ValueError``; ``UnknownTopicError`` a ``KeyError``) whose message says what to fix."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafkalite.assignors import TopicPartition
from kafkalite.datadir import validate_topic_name
from kafkalite.errors import InvalidConfigError, InvalidTypeError


def _name(value: Any) -> str:
    return type(value).__name__


def integer(what: str, value: Any, minimum: int | None = None) -> int:
    """An ``int`` (not a bool, not a float) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{what} must be an int, not {_name(value)} {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidConfigError(f"{what} must be >= {minimum}, got {value}")
    return value


def milliseconds(what: str, value: Any, *, allow_inf: bool = False) -> float:
    """A number of milliseconds >= 0: an int, or a float that is not NaN (inf if allowed)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{what} must be a number of milliseconds, not {_name(value)} {value!r}")
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise InvalidConfigError(f"{what} must be a finite number of milliseconds, not {value!r}")
    if value < 0:
        raise InvalidConfigError(f"{what} must be >= 0 milliseconds, got {value!r}")
    return value


def boolean(what: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{what} must be True or False, not {_name(value)} {value!r}")
    return value


def optional_callable(what: str, value: Any) -> Callable[..., Any] | None:
    if value is not None and not callable(value):
        raise InvalidTypeError(
            f"{what} must be a callable (bytes -> value) or None, not {_name(value)} {value!r}"
        )
    return value


def check_config(config: dict[str, Any]) -> None:
    """The consumer's settings (Kafka's names and kafka-python's defaults)."""
    if config["auto_offset_reset"] not in ("earliest", "latest", "none"):
        raise InvalidConfigError(
            f"auto_offset_reset must be 'earliest', 'latest' or 'none', not {config['auto_offset_reset']!r}"
        )
    boolean("enable_auto_commit", config["enable_auto_commit"])
    boolean("exclude_internal_topics", config["exclude_internal_topics"])
    integer("auto_commit_interval_ms", config["auto_commit_interval_ms"], 0)
    integer("max_poll_records", config["max_poll_records"], 1)
    milliseconds("consumer_timeout_ms", config["consumer_timeout_ms"], allow_inf=True)
    for key in ("session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms"):
        integer(key, config[key], 1)
    if config["heartbeat_interval_ms"] >= config["session_timeout_ms"]:
        raise InvalidConfigError("heartbeat_interval_ms must be lower than session_timeout_ms")
    optional_callable("key_deserializer", config["key_deserializer"])
    optional_callable("value_deserializer", config["value_deserializer"])
    if config["client_id"] is not None and not isinstance(config["client_id"], str):
        raise InvalidTypeError(f"client_id must be a str or None, not {_name(config['client_id'])}")


def topic_names(topics: Any) -> list[str]:
    """Topic names given as ``*topics`` or ``subscribe(topics)``: names, or lists of names (so
    ``Consumer(path, ["a", "b"])`` means what ``Consumer(path, "a", "b")`` does)."""
    if isinstance(topics, str):
        topics = [topics]
    if not isinstance(topics, Iterable) or isinstance(topics, (bytes, bytearray, Mapping)):
        raise InvalidTypeError(
            f"topics must be topic names (str) or a list of them, not {_name(topics)} {topics!r}"
        )
    names: list[str] = []
    for item in topics:
        if isinstance(item, (list, tuple, set, frozenset)):
            names += topic_names(list(item))
        elif isinstance(item, str):
            names.append(validate_topic_name(item))
        else:
            raise InvalidTypeError(f"topic names are str, not {_name(item)} {item!r}")
    return names


def pattern(value: Any) -> re.Pattern[str]:
    if isinstance(value, re.Pattern):
        return value
    if not isinstance(value, str):
        raise InvalidTypeError(f"pattern must be a regular expression (str), not {_name(value)} {value!r}")
    try:
        return re.compile(value)
    except re.error as e:
        raise InvalidConfigError(f"pattern {value!r} is not a valid regular expression: {e}") from None


def listener(value: Any) -> Any:
    missing = [
        m
        for m in ("on_partitions_revoked", "on_partitions_assigned")
        if not callable(getattr(value, m, None))
    ]
    if value is not None and missing:
        raise InvalidTypeError(
            f"listener must have on_partitions_revoked(partitions) and on_partitions_assigned(partitions) "
            f"(a ConsumerRebalanceListener); {_name(value)} lacks {', '.join(missing)}"
        )
    return value


def topic_partition(value: Any) -> TopicPartition:
    """A ``TopicPartition`` or a ``(topic, partition)`` pair, checked for shape and types."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)) or len(value) != 2:
        raise InvalidTypeError(f"expected a TopicPartition(topic, partition), not {_name(value)} {value!r}")
    topic, partition = value
    if not isinstance(topic, str):
        raise InvalidTypeError(f"a TopicPartition's topic must be a str, not {_name(topic)} {topic!r}")
    validate_topic_name(topic)
    integer(f"the partition of {topic!r}", partition, 0)
    return TopicPartition(topic, partition)


def partitions(values: Any) -> list[TopicPartition]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InvalidTypeError(f"expected a list of TopicPartition, not {_name(values)} {values!r}")
    if isinstance(values, tuple) and len(values) == 2 and isinstance(values[0], str):
        raise InvalidTypeError(
            f"expected a list of TopicPartition, not one partition {values!r}; wrap it in a list"
        )
    return [topic_partition(tp) for tp in values]


#: Kafka offsets are int64.
MAX_OFFSET = 2**63 - 1


def offset(what: str, value: Any) -> int:
    number = integer(what, value, 0)
    if number > MAX_OFFSET:
        raise InvalidConfigError(
            f"{what} must be at most {MAX_OFFSET} (Kafka offsets are 64-bit), got {number}"
        )
    return number


def metadata(what: str, value: Any) -> str:
    """Commit metadata: a str that UTF-8 can store (Kafka strings are UTF-8, at most 32767 bytes)."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{what} must be a str, not {_name(value)}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise InvalidConfigError(
            f"{what} cannot be stored as UTF-8 ({e.reason} at position {e.start})"
        ) from None
    if size > 0x7FFF:
        raise InvalidConfigError(f"{what} is {size} bytes; Kafka strings hold at most 32767")
    return value


def mapping(what: str, value: Any) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise InvalidTypeError(f"{what} must be a dict {{TopicPartition: ...}}, not {_name(value)} {value!r}")
    return value
