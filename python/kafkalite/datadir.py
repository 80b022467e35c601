"""A data directory laid out like a Kafka ``log.dirs`` folder: one ``<topic>-<partition>``
folder per partition, plus kafkalite's topic metadata in ``.kafkalite-topics.json`` (written
atomically: temp file, fsync, rename). A broker's folder without our metadata is read-only
and its topics are discovered from the folder names.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from kafkalite.errors import (
    InvalidConfigError,
    InvalidTopicError,
    InvalidTopicTypeError,
    InvalidTypeError,
    TopicAlreadyExistsError,
    UnknownTopicError,
    typed_io_errors,
)
from kafkalite.log import Log

METADATA_FILE = ".kafkalite-topics.json"
NOTIFY_FILE = ".kafkalite-notify"
LOCK_FILE = ".kafkalite-admin.lock"

#: The most partitions a topic may have. Each partition is a folder and, while written, a few
#: open files; this bound keeps a typo (partitions=10**9) from filling the disk with folders.
MAX_PARTITIONS = 100_000

_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_PARTITION_DIR_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")

#: Kafka's topic-level defaults (LogConfig), for the keys kafkalite implements.
TOPIC_DEFAULTS: dict[str, Any] = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": 86400000,
    "max.message.bytes": 1048588,
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": 0.5,
    "min.compaction.lag.ms": 0,
    "retention.bytes": -1,
    "retention.ms": 604800000,
    "segment.bytes": 1073741824,
    "segment.ms": 604800000,
}


def validate_topic_name(name: object) -> str:
    """Kafka's rules (``Topic.validate``); raise InvalidTopicError saying which one failed."""
    if not isinstance(name, str):
        raise InvalidTopicTypeError(f"topic names are str, not {type(name).__name__} ({name!r:.100})")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if not _TOPIC_RE.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} is invalid: use 1-249 characters of ASCII letters, digits, '.', '_' and '-'"
        )
    return name


def _int(key: str, value: Any, minimum: int, maximum: int = 2**63 - 1) -> int:
    """An integer config value; Kafka's config strings ("1000") are accepted too."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidTypeError(f"{key} must be an integer, not {type(value).__name__} ({value!r})")
    try:
        number = int(value)
    except (ValueError, OverflowError):  # "abc", nan, inf
        raise InvalidConfigError(f"{key} must be an integer, not {value!r}") from None
    if isinstance(value, float) and value != number:
        raise InvalidConfigError(f"{key} must be an integer, not {value!r}")
    if number < minimum:
        raise InvalidConfigError(f"{key} must be >= {minimum}, got {number}")
    if number > maximum:
        raise InvalidConfigError(f"{key} must be at most {maximum}, got {number}")
    return number


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InvalidConfigError(f"{key} must be one of {', '.join(choices)}; got {value!r}")
    return str(value)


def validate_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check Kafka-named topic config; return it with values normalised (ints as ints)."""
    if config is not None and not isinstance(config, Mapping):
        raise InvalidTypeError(f"config must be a dict of Kafka topic config keys, not {type(config).__name__}")
    out: dict[str, Any] = {}
    for key, value in (config or {}).items():
        if key in ("retention.ms", "retention.bytes"):
            out[key] = _int(key, value, -1)
        elif key == "segment.bytes":
            out[key] = _int(key, value, 14, 2**31 - 1)
        elif key == "segment.ms":
            out[key] = _int(key, value, 1)
        elif key == "max.message.bytes":
            out[key] = _int(key, value, 61, 2**31 - 1)
        elif key == "compression.type":
            if value in ("gzip", "snappy", "lz4"):
                raise InvalidConfigError(
                    f"compression.type {value!r} is read but not written by kafkalite; use 'zstd', 'none' or 'producer'"
                )
            out[key] = _choice(key, value, ("producer", "none", "uncompressed", "zstd"))
        elif key == "message.timestamp.type":
            out[key] = _choice(key, value, ("CreateTime", "LogAppendTime"))
        elif key == "cleanup.policy":
            if not isinstance(value, (str, list, tuple)):
                raise InvalidTypeError(f"cleanup.policy must be a str such as 'compact,delete', not {type(value).__name__}")
            parts = value.split(",") if isinstance(value, str) else list(value)
            parts = sorted({str(p).strip() for p in parts})
            if not parts or any(p not in ("compact", "delete") for p in parts):
                raise InvalidConfigError(f"cleanup.policy must be 'delete', 'compact' or 'compact,delete'; got {value!r}")
            out[key] = ",".join(parts)
        elif key in ("delete.retention.ms", "min.compaction.lag.ms"):
            out[key] = _int(key, value, 0)
        elif key == "min.cleanable.dirty.ratio":
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise InvalidTypeError(f"{key} must be a number between 0 and 1, not {type(value).__name__}")
            try:
                ratio = float(value)
            except ValueError:
                raise InvalidConfigError(f"{key} must be a number between 0 and 1, not {value!r}") from None
            if not 0.0 <= ratio <= 1.0:
                raise InvalidConfigError(f"{key} must be between 0 and 1, got {ratio}")
            out[key] = ratio
        else:
            known = ", ".join(sorted(TOPIC_DEFAULTS))
            raise InvalidConfigError(f"unknown topic config {key!r}; kafkalite supports: {known}")
    return out


def is_compacted(config: Mapping[str, Any]) -> bool:
    return "compact" in str(config.get("cleanup.policy", "delete")).split(",")


def log_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """Topic config (Kafka names, defaults filled in) as ``Log`` keyword arguments.
    Time and size retention apply only when ``cleanup.policy`` includes ``delete``."""
    full = {**TOPIC_DEFAULTS, **config}
    deletes = "delete" in str(full["cleanup.policy"]).split(",")
    retention_ms = int(full["retention.ms"]) if deletes else -1
    retention_bytes = int(full["retention.bytes"]) if deletes else -1
    compression = full["compression.type"]
    return {
        "segment_bytes": int(full["segment.bytes"]),
        "segment_ms": int(full["segment.ms"]),
        "retention_ms": None if retention_ms < 0 else retention_ms,
        "retention_bytes": None if retention_bytes < 0 else retention_bytes,
        "max_message_bytes": int(full["max.message.bytes"]),
        "timestamp_type": "log_append" if full["message.timestamp.type"] == "LogAppendTime" else "create",
        "compression": "zstd" if compression == "zstd" else "none",
        "compact": is_compacted(full),
    }


class DataDir:
    """The topics of one data directory, shared by Admin, Producer and Consumer."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        try:
            self.path = os.path.abspath(os.fspath(path))
        except TypeError:
            raise InvalidTypeError(f"the data directory must be a path (str or os.PathLike), not {type(path).__name__}") from None
        if not os.path.isdir(self.path):
            if not create:
                raise InvalidConfigError(f"{self.path} is not a data directory")
            os.makedirs(self.path, exist_ok=True)
        self._mutex = threading.Lock()
        self._cache: tuple[float, dict[str, dict[str, Any]]] | None = None

    # -- metadata --------------------------------------------------------------------------
    @property
    def managed(self) -> bool:
        """True when kafkalite's metadata exists (otherwise: a broker's folder, read-only)."""
        return os.path.exists(os.path.join(self.path, METADATA_FILE))

    def topics(self) -> dict[str, dict[str, Any]]:
        """``{name: {"partitions": n, "config": {...}}}``, re-read when the file changes."""
        meta = os.path.join(self.path, METADATA_FILE)
        try:
            mtime = os.stat(meta).st_mtime_ns
        except FileNotFoundError:
            return self._discovered()
        with self._mutex:
            if self._cache and self._cache[0] == mtime:
                return self._cache[1]
            with typed_io_errors(f"cannot read the topics of {self.path}"), open(meta, encoding="utf-8") as f:
                topics = json.load(f)["topics"]
            self._cache = (mtime, topics)
            return topics

    def _discovered(self) -> dict[str, dict[str, Any]]:
        """Topics of a folder without our metadata (a Kafka broker's), from folder names."""
        found: dict[str, int] = {}
        for name in os.listdir(self.path):
            m = _PARTITION_DIR_RE.match(name)
            if m and os.path.isdir(os.path.join(self.path, name)) and _TOPIC_RE.match(m["topic"]):
                found[m["topic"]] = max(found.get(m["topic"], 0), int(m["partition"]) + 1)
        return {t: {"partitions": n, "config": {}, "discovered": True} for t, n in found.items()}

    def topic(self, name: str) -> dict[str, Any]:
        validate_topic_name(name)
        try:
            return self.topics()[name]
        except KeyError:
            raise UnknownTopicError(f"unknown topic {name!r} in {self.path}; create it first (Admin.create_topic)") from None

    def partitions(self, name: str) -> int:
        return int(self.topic(name)["partitions"])

    def update(self, change) -> None:  # change: Callable[[dict], None]
        """Apply ``change`` to the metadata under the data-directory lock and write it atomically."""
        import fcntl

        with typed_io_errors(f"cannot change the topics of {self.path}"), open(os.path.join(self.path, LOCK_FILE), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            meta = os.path.join(self.path, METADATA_FILE)
            if os.path.exists(meta):
                with open(meta, encoding="utf-8") as f:
                    data = json.load(f)
            elif self._discovered():
                raise InvalidConfigError(
                    f"{self.path} holds partitions but no kafkalite metadata (a Kafka broker's log directory?); "
                    "it can be read but not changed"
                )
            else:
                data = {"version": 1, "topics": {}}
            change(data["topics"])
            tmp = f"{meta}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, meta)
            dir_fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        with self._mutex:
            self._cache = None

    def create(self, name: str, partitions: int, config: Mapping[str, Any] | None) -> None:
        validate_topic_name(name)
        if isinstance(partitions, bool) or not isinstance(partitions, int):
            raise InvalidTypeError(f"partitions must be an integer, not {type(partitions).__name__} ({partitions!r})")
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidConfigError(f"partitions must be between 1 and {MAX_PARTITIONS} (MAX_PARTITIONS), got {partitions}")
        checked = validate_config(config)

        def change(topics: dict) -> None:
            if name in topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            clash = [t for t in topics if t.replace(".", "_") == name.replace(".", "_")]
            if clash:
                raise InvalidTopicError(f"topic {name!r} collides with {clash[0]!r} ('.' and '_' are the same to Kafka's metrics)")
            for p in range(partitions):
                os.makedirs(self.partition_path(name, p), exist_ok=True)
            topics[name] = {"partitions": partitions, "config": checked}

        self.update(change)

    def partition_path(self, topic: str, partition: int) -> str:
        return os.path.join(self.path, f"{topic}-{partition}")

    def open_partition(self, topic: str, partition: int, **overrides: Any) -> Log:
        """Open one partition's log with its topic's settings (read-only for broker folders)."""
        meta = self.topic(topic)
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise InvalidTypeError(f"partition must be an integer, not {type(partition).__name__} ({partition!r})")
        if not 0 <= partition < int(meta["partitions"]):
            raise InvalidConfigError(f"topic {topic!r} has partitions 0..{int(meta['partitions']) - 1}; there is no partition {partition}")
        options = log_options(meta.get("config", {}))
        if meta.get("discovered"):
            overrides["readonly"] = True
        options.update(overrides)
        return Log(self.partition_path(topic, partition), **options)
