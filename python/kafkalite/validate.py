"""Up-front checks of arguments and config values for Producer, Consumer, Admin and Log.

Each check raises a typed kafkalite error that is also the builtin a caller would catch:
``InvalidTypeError`` (a ``TypeError``) for a value of the wrong type, ``InvalidConfigError``
(a ``ValueError``) for a value out of range, with a message naming the argument and what to
pass instead. Checking here, before anything is written, keeps the native layer from raising
``TypeError``/``OverflowError`` halfway through a call.
"""

from __future__ import annotations

import math
import operator
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kafkalite.errors import InvalidConfigError, InvalidTypeError

if TYPE_CHECKING:
    from kafkalite.groups.assignors import TopicPartition

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def _name(value: Any) -> str:
    return type(value).__name__


def integer(name: str, value: Any, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """An int (numpy ints too; not bool, not float) within ``[minimum, maximum]``."""
    if isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be an integer, not a bool ({value!r})")
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidTypeError(f"{name} must be an integer, not {type(value).__name__} ({value!r})") from None
    if number < minimum:
        raise InvalidConfigError(f"{name} must be >= {minimum}, got {number}")
    if number > maximum:
        raise InvalidConfigError(f"{name} must be at most {maximum}, got {number}")
    return number


def optional_integer(name: str, value: Any, minimum: int = 0, maximum: int = INT64_MAX) -> int | None:
    return None if value is None else integer(name, value, minimum, maximum)


def milliseconds(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """A number of milliseconds >= 0: an int, or a float that is not NaN (inf if allowed)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{name} must be a number of milliseconds, not {_name(value)} {value!r}")
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise InvalidConfigError(f"{name} must be a finite number of milliseconds, not {value!r}")
    if value < 0:
        raise InvalidConfigError(f"{name} must be >= 0 milliseconds, got {value!r}")
    return value


def number(name: str, value: Any, minimum: float = 0.0, maximum: float = float(INT64_MAX)) -> float:
    """A finite int or float (not bool) within ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{name} must be a number, not {type(value).__name__} ({value!r})")
    if not math.isfinite(value):
        raise InvalidConfigError(f"{name} must be a finite number, not {value!r}")
    if not minimum <= value <= maximum:
        raise InvalidConfigError(
            f"{name} must be between {_shown(minimum)} and {_shown(maximum)}, got {value!r}"
        )
    return value


def _shown(bound: float) -> str:
    """A bound as written in code: 2147483647, not 2.14748e+09."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def timeout(name: str, value: Any) -> float | None:
    """A wait in seconds: None (no limit) or a finite number >= 0."""
    return None if value is None else number(name, value, 0.0)


def boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be True or False, not {type(value).__name__} ({value!r})")
    return value


def text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a str, not {type(value).__name__} ({value!r})")
    return value


def path(name: str, value: Any) -> str:
    """A str or os.PathLike naming a file or directory."""
    try:
        result = os.fspath(value)
    except TypeError:
        raise InvalidTypeError(
            f"{name} must be a path (str or os.PathLike), not {type(value).__name__} ({value!r})"
        ) from None
    if not isinstance(result, str):
        raise InvalidTypeError(f"{name} must be a str path, not {type(result).__name__}; decode it first")
    if not result or "\0" in result:
        raise InvalidConfigError(f"{name} must be a non-empty path without NUL characters, got {result!r}")
    return result


def str_list(name: str, value: Any) -> list[str]:
    """A list or tuple of str (a single str is refused: it would be read as its characters)."""
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise InvalidTypeError(f"{name} must be a list of str, not {type(value).__name__} ({value!r})")
    for item in value:
        text(f"each of {name}", item)
    return list(value)


def optional_callable(name: str, value: Any) -> Callable[..., Any] | None:
    if value is not None and not callable(value):
        raise InvalidTypeError(f"{name} must be a callable or None, not {_name(value)} {value!r}")
    return value


def optional_text(name: str, value: Any) -> str | None:
    return None if value is None else text(name, value)


def topic_names(topics: Any) -> list[str]:
    """Topic names given as ``*topics`` or ``subscribe(topics)``: names, or lists of names (so
    ``Consumer(path, ["a", "b"])`` means what ``Consumer(path, "a", "b")`` does)."""
    from kafkalite.datadir import validate_topic_name  # datadir imports Log, which imports this

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
    from kafkalite.datadir import validate_topic_name
    from kafkalite.groups.assignors import TopicPartition

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


def offset(name: str, value: Any) -> int:
    try:
        return integer(name, value, 0, MAX_OFFSET)
    except InvalidTypeError:
        raise
    except InvalidConfigError as e:
        if operator.index(value) > MAX_OFFSET:
            raise InvalidConfigError(f"{e} (Kafka offsets are 64-bit)") from None
        raise


def metadata(name: str, value: Any) -> str:
    """Commit metadata: a str that UTF-8 can store (Kafka strings are UTF-8, at most 32767 bytes)."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a str, not {_name(value)}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise InvalidConfigError(
            f"{name} cannot be stored as UTF-8 ({e.reason} at position {e.start})"
        ) from None
    if size > 0x7FFF:
        raise InvalidConfigError(f"{name} is {size} bytes; Kafka strings hold at most 32767")
    return value


def mapping(name: str, value: Any) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise InvalidTypeError(f"{name} must be a dict {{TopicPartition: ...}}, not {_name(value)} {value!r}")
    return value
