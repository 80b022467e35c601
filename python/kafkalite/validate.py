"""Up-front checks of arguments and config values for Producer, Admin and Log.

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
from typing import Any

from kafkalite.errors import InvalidConfigError, InvalidTypeError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


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


def number(name: str, value: Any, minimum: float = 0.0, maximum: float = float(INT64_MAX)) -> float:
    """A finite int or float (not bool) within ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{name} must be a number, not {type(value).__name__} ({value!r})")
    if not math.isfinite(value):
        raise InvalidConfigError(f"{name} must be a finite number, not {value!r}")
    if not minimum <= value <= maximum:
        raise InvalidConfigError(f"{name} must be between {minimum:g} and {maximum:g}, got {value!r}")
    return value


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
