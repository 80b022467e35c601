"""The producer's argument checks: partitions, records, ``send_batch``'s columns, and the
errors naming what was wrong."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalite import validate
from kafkalite.errors import InvalidConfigError, InvalidTypeError, bytes_expected

if TYPE_CHECKING:
    from kafkalite.producer.topics import _Topic

_NULL_KEY = "topic {topic!r} is compacted (cleanup.policy=compact), so every record needs a key; got key=None"


def _check_partition(t: _Topic, partition: Any) -> int:
    number = validate.integer("partition", partition, -(2**63), validate.INT64_MAX)
    if not 0 <= number < len(t.partitions):
        raise InvalidConfigError(
            f"topic {t.name!r} has partitions 0..{len(t.partitions) - 1}; there is no partition {number}"
        )
    return number


def _record_error(value: Any, key: Any, headers: Any) -> InvalidTypeError:
    """Name what was wrong with a record the native buffer refused."""
    for name, item in (("value", value), ("key", key)):
        if item is not None and not isinstance(item, bytes):
            return bytes_expected(name, item)
    return InvalidTypeError(
        f"headers must be a list of (str, bytes or None) pairs, for example [('trace', b'1')]; got {headers!r:.200}"
    )


def _check_values(values: list, keys: list | None) -> None:
    """send_batch's records, all checked before any is written."""
    for i, v in enumerate(values):
        if not isinstance(v, bytes):
            if v is None and keys is not None and keys[i] is not None:
                continue
            if v is None:
                raise InvalidConfigError(
                    f"values[{i}] is None and has no key; a record needs a key or a value"
                )
            raise bytes_expected(f"values[{i}]", v)
    for i, k in enumerate(keys or ()):
        if k is not None and not isinstance(k, bytes):
            raise bytes_expected(f"keys[{i}]", k)


def _as_bytes_list(items: Any, what: str) -> list:
    """A list of bytes (or None) from a list or a pyarrow array."""
    if isinstance(items, list):
        return items
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover
        pa = None
    if pa is not None and isinstance(items, (pa.Array, pa.ChunkedArray)):
        if pa.types.is_string(items.type) or pa.types.is_large_string(items.type):
            items = items.cast(pa.binary())
        return items.to_pylist()
    return list(items)
