"""Client quotas of a data directory (Kafka's ``producer_byte_rate`` and ``consumer_byte_rate``,
bytes per second, and ``request_percentage``, the percentage of one request worker's time, per
user, client id, or user and client id, each name or the default): what ``kafkalite serve``
enforces by ``throttle_time_ms``, what ``kafka-configs --entity-type users|clients`` and
Describe/AlterClientQuotas see. The engine (``rust/src/coordination/quotas.rs``) owns the file and Kafka's
validation; a running server sees changes within a second.

    kafkalite.quotas.alter_quotas("data", {"user": "alice"}, {"producer_byte_rate": 1048576})
    kafkalite.quotas.alter_quotas("data", {"client-id": None}, {"consumer_byte_rate": 2 << 20})
    kafkalite.quotas.alter_quotas("data", {"user": "bob"}, {"request_percentage": 12.5})
    kafkalite.quotas.describe_quotas("data")
    # [({"user": "alice"}, {"producer_byte_rate": 1048576.0}), ({"client-id": None}, {...})]

An entity maps ``"user"`` and/or ``"client-id"`` to a name, or to None for the default; or
``"ip"`` alone to an address (or None, the default address), whose one quota is Kafka's
``connection_creation_rate``: connections per second ``kafkalite serve`` accepts from it
(KIP-612; over it a connection is closed unserved):

    kafkalite.quotas.alter_quotas("data", {"ip": "10.0.0.5"}, {"connection_creation_rate": 50})
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kafkalite import _native
from kafkalite.errors import InvalidTypeError
from kafkalite.users import _dir

#: The quota keys kafkalite enforces: bytes per second (whole numbers), and the percentage of one
#: request worker's time (any positive number).
KEYS: tuple[str, ...] = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
#: The quota of an ip entity (connections per second).
IP_KEYS: tuple[str, ...] = ("connection_creation_rate",)

Entity = Mapping[str, "str | None"]


def _parts(entity: Entity) -> list[tuple[str, str | None]]:
    if not isinstance(entity, Mapping):
        raise InvalidTypeError(
            f"the entity must map 'user'/'client-id' (or 'ip') to a name or None, not {type(entity).__name__}"
        )
    for kind, name in entity.items():
        if not isinstance(kind, str) or not (name is None or isinstance(name, str)):
            raise InvalidTypeError(f"the entity {dict(entity)!r} must map str to a str name or None")
    return list(entity.items())


def describe_quotas(data_dir: str | os.PathLike[str]) -> list[tuple[dict[str, str | None], dict[str, float]]]:
    """Every entity with quotas, and its quotas."""
    return [(dict(entity), dict(values)) for entity, values in _native.quotas_list(_dir(data_dir))]


def alter_quotas(
    data_dir: str | os.PathLike[str], entity: Entity, changes: Mapping[str, float | None]
) -> None:
    """Set each key of ``changes`` to its value for ``entity``, or remove it (None); all or
    nothing. Bad keys, values or entities raise InvalidConfigError saying what Kafka accepts."""
    values = []
    for key, value in changes.items():
        if not isinstance(key, str) or not (value is None or isinstance(value, (int, float))):
            raise InvalidTypeError(f"quota {key!r}: a str key and a number (or None to remove)")
        values.append((key, None if value is None else float(value)))
    _native.quotas_alter(_dir(data_dir), _parts(entity), values)
