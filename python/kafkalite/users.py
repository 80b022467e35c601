"""SASL/SCRAM users of a data directory: who may connect to ``kafkalite serve`` on a
SASL listener (SASL_SSL on a non-loopback address, or ``Server(..., sasl=True)``).

The engine (``rust/src/coordination/users.rs``) owns the file: per user and mechanism a random salt, the
PBKDF2 iteration count, StoredKey and ServerKey, as Kafka keeps SCRAM credentials; never the
password. The file is readable by its owner only. A running server sees changes from the next
connection on.

    kafkalite.users.add_user("data", "alice", "alice-secret")
    kafkalite.users.list_users("data")   # {"alice": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}}
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from kafkalite import _native
from kafkalite.errors import InvalidConfigError, InvalidTypeError

#: The mechanisms the server offers, by Kafka's names.
MECHANISMS: tuple[str, ...] = tuple(_native.SCRAM_MECHANISMS)
#: Kafka's default (and minimum) PBKDF2 iteration count.
DEFAULT_ITERATIONS: int = _native.SCRAM_DEFAULT_ITERATIONS


def _dir(data_dir: str | os.PathLike[str]) -> str:
    try:
        return os.path.abspath(os.fspath(data_dir))
    except TypeError:
        raise InvalidTypeError(
            f"the data directory must be a path (str or os.PathLike), not {type(data_dir).__name__}"
        ) from None


def _name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidTypeError(f"the user name must be a str, not {type(name).__name__}")
    return name


def add_user(
    data_dir: str | os.PathLike[str],
    name: str,
    password: str,
    mechanisms: Sequence[str] = MECHANISMS,
    iterations: int = DEFAULT_ITERATIONS,
) -> None:
    """Add ``name`` (or replace its credentials for ``mechanisms``; its others are kept, as
    Kafka's ``alterUserScramCredentials`` does)."""
    if not isinstance(password, str):
        raise InvalidTypeError(f"the password must be a str, not {type(password).__name__}")
    if isinstance(mechanisms, str) or not all(isinstance(m, str) for m in mechanisms):
        raise InvalidTypeError(f"mechanisms must be a list of names such as {list(MECHANISMS)}")
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        raise InvalidTypeError(f"iterations must be an int, not {type(iterations).__name__}")
    if not _native.SCRAM_MIN_ITERATIONS <= iterations <= _native.SCRAM_MAX_ITERATIONS:
        raise InvalidConfigError(
            f"iterations must be between {_native.SCRAM_MIN_ITERATIONS} and {_native.SCRAM_MAX_ITERATIONS} "
            f"(Kafka's SCRAM limits), got {iterations}"
        )
    # Kafka's ScramFormatter hashes the password's UTF-8 bytes (no SASLprep), as clients do.
    _native.users_add(_dir(data_dir), _name(name), password.encode(), list(mechanisms), iterations)


def list_users(data_dir: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    """Every user: ``{name: {mechanism: iterations}}``."""
    return {user: dict(creds) for user, creds in _native.users_list(_dir(data_dir))}


def delete_user(data_dir: str | os.PathLike[str], name: str) -> bool:
    """Remove ``name``; False when there was no such user."""
    return _native.users_delete(_dir(data_dir), _name(name))
