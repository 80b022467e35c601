"""A data directory laid out like a Kafka ``log.dirs`` folder: one ``<topic>-<partition>``
folder per partition, plus kafkalite's metadata in ``.kafkalite-topics.json`` (written
atomically: temp file, fsync, rename): the topics with their own config, and the directory's
config under a broker's names (``auto.create.topics.enable``, ``num.partitions``, ``log.*``
topic defaults). A broker's folder without our metadata is read-only and its topics are
discovered from the folder names. A topic's effective config is resolved here only
(``DataDir.resolve``: its own keys, else the directory's, else Kafka's), and so is the codec a
write uses (``target_compression``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kafkalite import _native
from kafkalite._files import locked, open_nofollow, write_atomically
from kafkalite.errors import (
    BrokerAddressError,
    CorruptMetadataError,
    InvalidConfigError,
    InvalidTopicError,
    InvalidTopicTypeError,
    InvalidTypeError,
    NotADataDirError,
    ReadOnlyDataDirError,
    TopicAlreadyExistsError,
    UnknownTopicError,
    typed_io_errors,
)
from kafkalite.log import Log

METADATA_FILE = ".kafkalite-topics.json"
NOTIFY_FILE = ".kafkalite-notify"
LOCK_FILE = ".kafkalite-admin.lock"
#: What a Kafka broker writes at the top of each of its log directories.
BROKER_META_FILE = "meta.properties"

logger = logging.getLogger("kafkalite.admin")

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
        raise InvalidTypeError(
            f"config must be a dict of Kafka topic config keys, not {type(config).__name__}"
        )
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
                raise InvalidTypeError(
                    f"cleanup.policy must be a str such as 'compact,delete', not {type(value).__name__}"
                )
            parts = value.split(",") if isinstance(value, str) else list(value)
            parts = sorted({str(p).strip() for p in parts})
            if not parts or any(p not in ("compact", "delete") for p in parts):
                raise InvalidConfigError(
                    f"cleanup.policy must be 'delete', 'compact' or 'compact,delete'; got {value!r}"
                )
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


#: Data-directory config: what a Kafka broker's server.properties sets for all its topics, under
#: the broker's names (``kafka-configs --entity-type brokers``). Defaults are Kafka's.
DIR_DEFAULTS: dict[str, Any] = {
    "auto.create.topics.enable": True,
    "num.partitions": 1,
    # kafkalite's own (Kafka's broker has only the switch log.preallocate): the most bytes one
    # process keeps reserved ahead of its writers, over all partitions of the directory.
    "log.preallocate.budget.bytes": _native.PREALLOCATE_BUDGET_BYTES_DEFAULT,
}

#: The broker's name of each topic config's default (Kafka's ServerTopicConfigSynonyms):
#: setting ``log.retention.ms`` on the data directory sets ``retention.ms`` of every topic that
#: does not override it, as on a broker.
BROKER_SYNONYMS: dict[str, str] = {
    "log.cleanup.policy": "cleanup.policy",
    "compression.type": "compression.type",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.retention.bytes": "retention.bytes",
    "log.retention.ms": "retention.ms",
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
}

#: A broker address such as ``localhost:9092``, ``PLAINTEXT://h:9092`` or ``h1:9092,h2:9093``.
_BROKER_ADDRESS = re.compile(
    r"^([A-Za-z][A-Za-z0-9_]*://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}(,.+)?$"
)


def validate_dir_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Check data-directory config (broker names); return it normalised."""
    if not isinstance(config, Mapping):
        raise InvalidTypeError(
            f"config must be a dict of Kafka broker config keys, not {type(config).__name__}"
        )
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key == "auto.create.topics.enable":
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise InvalidConfigError(f"auto.create.topics.enable must be true or false, not {value!r}")
            out[key] = value
        elif key == "num.partitions":
            out[key] = _int(key, value, 1, MAX_PARTITIONS)
        elif key == "log.preallocate.budget.bytes":
            out[key] = _int(key, value, 0)
        elif key in BROKER_SYNONYMS:
            topic_key = BROKER_SYNONYMS[key]
            try:
                out[key] = validate_config({topic_key: value})[topic_key]
            except InvalidConfigError as e:
                raise type(e)(f"{key} (the default of {topic_key}): {e}") from None
        else:
            hint = ""
            for broker_key, topic_key in BROKER_SYNONYMS.items():
                if key == topic_key:
                    hint = f" (the default of the topic config {key!r} is set as {broker_key!r})"
            known = ", ".join(sorted([*DIR_DEFAULTS, *BROKER_SYNONYMS]))
            raise InvalidConfigError(
                f"unknown data directory config {key!r}{hint}; kafkalite supports: {known}"
            )
    return out


def target_compression(topic_codec: str, producer_codec: str | None) -> str:
    """The codec a batch is written with (Kafka's ``BrokerCompressionType.targetCompression``):
    the topic's ``compression.type``, or the producer's own when the topic says ``producer``.
    The one place this is decided, for ``send``, ``send_batch``, ``Log`` via ``open_partition``
    and the Spark sink."""
    if topic_codec == "producer":
        return "zstd" if producer_codec == "zstd" else "none"
    return "zstd" if topic_codec == "zstd" else "none"


def is_compacted(config: Mapping[str, Any]) -> bool:
    return "compact" in str(config.get("cleanup.policy", "delete")).split(",")


def log_options(config: Mapping[str, Any], producer_compression: str | None = None) -> dict[str, Any]:
    """Topic config (Kafka names, defaults filled in) as ``Log`` keyword arguments, for a writer
    whose own codec is ``producer_compression``. Time and size retention apply only when
    ``cleanup.policy`` includes ``delete``."""
    full = {**TOPIC_DEFAULTS, **config}
    deletes = "delete" in str(full["cleanup.policy"]).split(",")
    retention_ms = int(full["retention.ms"]) if deletes else -1
    retention_bytes = int(full["retention.bytes"]) if deletes else -1
    return {
        "segment_bytes": int(full["segment.bytes"]),
        "segment_ms": int(full["segment.ms"]),
        "retention_ms": None if retention_ms < 0 else retention_ms,
        "retention_bytes": None if retention_bytes < 0 else retention_bytes,
        "max_message_bytes": int(full["max.message.bytes"]),
        "timestamp_type": "log_append" if full["message.timestamp.type"] == "LogAppendTime" else "create",
        "compression": target_compression(str(full["compression.type"]), producer_compression),
        "compact": is_compacted(full),
    }


def looks_like_broker_address(path: str) -> bool:
    return bool(_BROKER_ADDRESS.match(path)) and not os.path.exists(path)


class DataDir:
    """The topics of one data directory, shared by Admin, Producer and Consumer.

    Nothing here creates the directory but ``create`` (a topic), ``auto_create`` and ``init``.
    ``create=False`` (readers) requires the directory to exist now; ``create=True`` (Admin,
    Producer) defers the check to the first call that needs it, so ``Admin("new").create_topic``
    can make a new data directory while ``Admin("typo").list_topics()`` reports the typo."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = False) -> None:
        try:
            raw = os.fspath(path)
        except TypeError:
            raise InvalidTypeError(
                f"the data directory must be a path (str or os.PathLike), not {type(path).__name__}"
            ) from None
        if isinstance(raw, str) and looks_like_broker_address(raw):
            raise BrokerAddressError(
                f"{raw!r} looks like a broker address (host:port), but kafkalite takes the path of a data directory "
                "(where kafka-python takes bootstrap_servers), for example Producer('data'). To talk to a Kafka "
                "broker, use a Kafka client such as kafka-python or confluent-kafka; to serve kafkalite's files "
                "from a broker, point its log.dirs at the data directory"
            )
        self.path = os.path.abspath(raw)
        if not create or os.path.lexists(self.path):  # a path that exists must be a data directory now
            self.require()
        self._mutex = threading.Lock()
        self._cache: tuple[float, dict[str, Any]] | None = None

    def require(self) -> None:
        """Raise NotADataDirError unless the path is a directory."""
        if not os.path.isdir(self.path):
            what = "is a file" if os.path.exists(self.path) else "does not exist"
            raise NotADataDirError(
                f"{self.path} is not a kafkalite data directory (it {what}). Fix the path, or create a data "
                f"directory there: `kafkalite init {self.path}` (or create a topic: Admin.create_topic)"
            )

    # -- metadata --------------------------------------------------------------------------
    @property
    def managed(self) -> bool:
        """True when kafkalite's metadata exists (otherwise: a broker's folder, read-only)."""
        return os.path.exists(os.path.join(self.path, METADATA_FILE))

    def broker_owned(self) -> bool:
        """A Kafka broker's log directory (its partitions, or its ``meta.properties``, without
        kafkalite's metadata): the broker's metadata log owns its topics."""
        if self.managed or not os.path.isdir(self.path):
            return False
        return os.path.exists(os.path.join(self.path, BROKER_META_FILE)) or bool(self._discovered())

    def _metadata(self) -> dict[str, Any] | None:
        """The whole metadata file (re-read when it changes), None when there is none."""
        meta = os.path.join(self.path, METADATA_FILE)
        try:
            mtime = os.stat(meta).st_mtime_ns
        except (FileNotFoundError, NotADirectoryError):
            self.require()
            return None
        with self._mutex:
            if self._cache and self._cache[0] == mtime:
                return self._cache[1]
            data = _read_metadata(meta)
            self._cache = (mtime, data)
            return data

    def topics(self) -> dict[str, dict[str, Any]]:
        """``{name: {"partitions": n, "config": {...}}}``, re-read when the file changes."""
        data = self._metadata()
        return self._discovered() if data is None else data["topics"]

    def dir_config(self) -> dict[str, Any]:
        """The data directory's config: DIR_DEFAULTS and what was set (broker names)."""
        data = self._metadata() if os.path.isdir(self.path) else None
        return {**DIR_DEFAULTS, **((data or {}).get("config") or {})}

    def effective_config(self, name: str) -> dict[str, Any]:
        """A topic's full config: its own settings, else the data directory's defaults (broker
        names, BROKER_SYNONYMS), else Kafka's (TOPIC_DEFAULTS). Every reader of topic config
        goes through here."""
        return self.resolve(self.topic(name).get("config", {}))

    def resolve(self, topic_config: Mapping[str, Any]) -> dict[str, Any]:
        """TOPIC_DEFAULTS < data directory defaults < ``topic_config``."""
        defaults = {BROKER_SYNONYMS[k]: v for k, v in self.dir_config().items() if k in BROKER_SYNONYMS}
        return {**TOPIC_DEFAULTS, **defaults, **topic_config}

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
            raise UnknownTopicError(
                f"unknown topic {name!r} in {self.path}; create it first (Admin.create_topic)"
            ) from None

    def partitions(self, name: str) -> int:
        return int(self.topic(name)["partitions"])

    def update(self, change: Callable[[dict[str, Any]], None], *, create: bool = False) -> None:
        """Apply ``change`` to the topics under the data-directory lock and write them atomically."""
        self.update_metadata(lambda data: change(data["topics"]), create=create)

    def update_metadata(
        self, change: Callable[[dict[str, Any]], None], *, create: bool = False, adopt: bool = False
    ) -> None:
        """Apply ``change`` to the whole metadata (``{"version", "topics", "config"}``) under the
        data-directory lock and write it atomically (temp file, fsync, rename, fsync of the
        folder). ``create``: make the directory if missing (only what creates passes it);
        ``adopt``: a broker's directory gets kafkalite metadata for the topics found in it."""
        if create and not os.path.exists(self.path):
            os.makedirs(self.path, exist_ok=True)
            logger.info("created the data directory %s", self.path)
        self.require()
        with locked(os.path.join(self.path, LOCK_FILE)):
            meta = os.path.join(self.path, METADATA_FILE)
            if os.path.lexists(meta):
                data = _read_metadata(meta)
            elif self.broker_owned() and not adopt:
                raise ReadOnlyDataDirError(
                    f"{self.path} is a Kafka broker's log directory (partitions or meta.properties, no kafkalite "
                    f"metadata): the broker's metadata log owns its topics, so kafkalite only reads it. To write it "
                    f"with kafkalite on purpose (no broker may run on it then), adopt it: `kafkalite init --adopt "
                    f"{self.path}` (or Admin.adopt_broker_dir())"
                )
            else:
                data = {"version": 1, "topics": {}}
                if adopt:
                    data["topics"] = _adopted(self._discovered())
            data.setdefault("config", {})
            change(data)
            write_atomically(meta, json.dumps(data, indent=1, sort_keys=True).encode())
        with self._mutex:
            self._cache = None

    def init(self, *, adopt: bool = False, config: Mapping[str, Any] | None = None) -> bool:
        """Make this a kafkalite data directory (``kafkalite init``): create it and its metadata.
        ``adopt`` takes over a broker's log directory, recording the topics found in it. Returns
        False when it already was one (then only ``config`` is applied)."""
        checked = validate_dir_config(config or {})
        existed = self.managed

        def change(data: dict[str, Any]) -> None:
            data["config"].update(checked)

        self.update_metadata(change, create=True, adopt=adopt)
        if adopt and not existed:
            logger.warning(
                "adopted the broker log directory %s: kafkalite now owns its topics %s",
                self.path,
                sorted(self.topics()),
            )
        return not existed

    def alter_dir_config(self, config: Mapping[str, Any]) -> None:
        """Set data-directory config keys (broker names; ``None`` restores the default)."""
        if not isinstance(config, Mapping):
            raise InvalidTypeError(
                f"config must be a dict of Kafka broker config keys, not {type(config).__name__}"
            )
        removals = [k for k, v in config.items() if v is None]
        checked = validate_dir_config({k: v for k, v in config.items() if v is not None})
        unknown = [k for k in removals if k not in DIR_DEFAULTS and k not in BROKER_SYNONYMS]
        if unknown:
            validate_dir_config({unknown[0]: None})  # raises, naming the key

        def change(data: dict[str, Any]) -> None:
            data["config"].update(checked)
            for k in removals:
                data["config"].pop(k, None)

        self.update_metadata(change)

    def create(self, name: str, partitions: int, config: Mapping[str, Any] | None) -> None:
        validate_topic_name(name)
        if isinstance(partitions, bool) or not isinstance(partitions, int):
            raise InvalidTypeError(
                f"partitions must be an integer, not {type(partitions).__name__} ({partitions!r})"
            )
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidConfigError(
                f"partitions must be between 1 and {MAX_PARTITIONS} (MAX_PARTITIONS), got {partitions}"
            )
        checked = validate_config(config)

        def change(topics: dict) -> None:
            if name in topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            _add_topic(self, topics, name, partitions, checked)

        self.update(change, create=True)

    def auto_create(self, name: str) -> dict[str, Any]:
        """A topic a producer writes to before anyone created it: created with the data
        directory's ``num.partitions`` when ``auto.create.topics.enable`` (Kafka's broker
        defaults: true, 1), as a broker does on the first produce. Returns its metadata."""
        validate_topic_name(name)
        settings = self.dir_config()
        if not settings["auto.create.topics.enable"]:
            raise UnknownTopicError(
                f"unknown topic {name!r} in {self.path}, and auto.create.topics.enable is false for this data "
                "directory; create it first (Admin.create_topic)"
            )
        created: list[int] = []

        def change(topics: dict) -> None:
            if name in topics:  # another producer created it meanwhile
                return
            count = int(settings["num.partitions"])
            _add_topic(self, topics, name, count, {})
            created.append(count)

        self.update(change, create=True)
        if created:
            logger.info(
                "auto-created topic %r with %d partition(s) in %s (auto.create.topics.enable=true)",
                name,
                created[0],
                self.path,
            )
        return self.topic(name)

    def partition_path(self, topic: str, partition: int) -> str:
        return os.path.join(self.path, f"{topic}-{partition}")

    def open_partition(
        self, topic: str, partition: int, *, producer_compression: str | None = None, **overrides: Any
    ) -> Log:
        """Open one partition's log with its topic's effective settings (read-only for broker
        folders); appends are compressed as ``target_compression`` decides for a writer whose
        own codec is ``producer_compression``."""
        meta = self.topic(topic)
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise InvalidTypeError(
                f"partition must be an integer, not {type(partition).__name__} ({partition!r})"
            )
        if not 0 <= partition < int(meta["partitions"]):
            raise InvalidConfigError(
                f"topic {topic!r} has partitions 0..{int(meta['partitions']) - 1}; there is no partition {partition}"
            )
        options = log_options(self.resolve(meta.get("config", {})), producer_compression)
        # Validated here too: the metadata file may have been written by hand (a typed error naming
        # the key, never int()'s ValueError/TypeError, and no silent 1.5 -> 1 or true -> 1).
        budget_key = "log.preallocate.budget.bytes"
        options["preallocate_budget_bytes"] = _int(budget_key, self.dir_config()[budget_key], 0)
        if meta.get("discovered"):
            overrides["readonly"] = True
        options.update(overrides)
        return Log(self.partition_path(topic, partition), **options)


def _add_topic(data_dir: DataDir, topics: dict, name: str, partitions: int, config: dict[str, Any]) -> None:
    """Record a new topic and make its partition folders (under the metadata lock)."""
    clash = [t for t in topics if t.replace(".", "_") == name.replace(".", "_")]
    if clash:
        raise InvalidTopicError(
            f"topic {name!r} collides with {clash[0]!r} ('.' and '_' are the same to Kafka's metrics)"
        )
    for p in range(partitions):
        os.makedirs(data_dir.partition_path(name, p), exist_ok=True)
    topics[name] = {"partitions": partitions, "config": config}


def _read_metadata(meta: str) -> dict[str, Any]:
    """The parsed metadata file. Damage is a CorruptMetadataError naming the file (never a
    JSONDecodeError or KeyError from deep inside a call); I/O errors are KafkaliteIOErrors."""
    fd = open_nofollow(meta, os.O_RDONLY)
    with typed_io_errors(f"cannot read {meta}"), os.fdopen(fd, "rb") as f:
        raw = f.read()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptMetadataError(
            f"{meta} is damaged ({e}); restore it from a backup or re-create the topics"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("topics"), dict):
        raise CorruptMetadataError(
            f"{meta} is damaged (no topics table); restore it from a backup or re-create the topics"
        )
    return data


def _adopted(found: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A broker's topics as kafkalite metadata; ``__consumer_offsets`` keeps its compaction."""
    from kafkalite.offsets import OFFSETS_CONFIG, OFFSETS_TOPIC

    return {
        name: {
            "partitions": int(meta["partitions"]),
            "config": dict(OFFSETS_CONFIG) if name == OFFSETS_TOPIC else {},
        }
        for name, meta in found.items()
    }
