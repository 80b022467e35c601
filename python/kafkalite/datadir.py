"""A data directory laid out like a Kafka ``log.dirs`` folder: one ``<topic>-<partition>``
folder per partition, plus kafkalite's metadata in ``.kafkalite-topics.json`` and
``.kafkalite-topics.journal`` (a snapshot and the changes appended since: read, checked and
written by the engine, ``rust/src/storage/datadir/metadata_file.rs``, which the wire-protocol server
uses too; this keeps its own copy and applies only the entries appended since it last looked):
the topics with their own config, and the directory's
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
from kafkalite.errors import (
    InvalidConfigError,
    InvalidTopicError,
    InvalidTypeError,
    NotADataDirError,
    ReadOnlyDataDirError,
    TopicAlreadyExistsError,
    UnknownTopicError,
    broker_address_error,
    with_action,
)
from kafkalite.log import Log

METADATA_FILE: str = _native.TOPICS_FILE
JOURNAL_FILE: str = _native.TOPICS_JOURNAL_FILE
NOTIFY_FILE: str = _native.NOTIFY_FILE
LOCK_FILE: str = _native.ADMIN_LOCK_FILE
#: What a Kafka broker writes at the top of each of its log directories.
BROKER_META_FILE: str = _native.KAFKA_META_PROPERTIES

logger = logging.getLogger("kafkalite.admin")

#: The most partitions a topic may have (the engine's ``topic_config::MAX_PARTITIONS``).
MAX_PARTITIONS: int = _native.MAX_PARTITIONS

#: The topic config table, defined once in the engine (``rust/src/storage/topic_config/mod.rs``, as
#: Kafka's ``LogConfig.define``): dicts of name, broker_name, type, default, min, max, choices, doc.
TOPIC_CONFIG_DEFS: list[dict[str, Any]] = _native.topic_config_defs()
#: The data directory's own config table (its topic defaults use each topic key's broker_name).
DIR_CONFIG_DEFS: list[dict[str, Any]] = _native.dir_config_defs()

#: Kafka's topic-level defaults, for the keys kafkalite implements.
TOPIC_DEFAULTS: dict[str, Any] = {d["name"]: d["default"] for d in TOPIC_CONFIG_DEFS}

#: Data-directory config: what a Kafka broker's server.properties sets for all its topics, under
#: the broker's names (``kafka-configs --entity-type brokers``). Defaults are Kafka's.
DIR_DEFAULTS: dict[str, Any] = {d["name"]: d["default"] for d in DIR_CONFIG_DEFS}

#: The broker's name of each topic config's default (Kafka's ServerTopicConfigSynonyms):
#: setting ``log.retention.ms`` on the data directory sets ``retention.ms`` of every topic that
#: does not override it, as on a broker.
BROKER_SYNONYMS: dict[str, str] = {d["broker_name"]: d["name"] for d in TOPIC_CONFIG_DEFS if d["broker_name"]}

#: The Python types each table type takes (Kafka's config strings are accepted for numbers);
#: the engine checks the values.
_ACCEPTED_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int, float, str),
    "float": (int, float, str),
    "list": (str, list, tuple),
}
_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number between 0 and 1",
    "list": "a str such as 'compact,delete'",
}


def _check_types(config: Mapping[str, Any], defs: dict[str, dict[str, Any]], what: str) -> None:
    """Refuse values of the wrong Python type with InvalidTypeError (the engine checks the rest)."""
    if not isinstance(config, Mapping):
        raise InvalidTypeError(
            f"config must be a dict of Kafka {what} config keys, not {type(config).__name__}"
        )
    for key, value in config.items():
        if not isinstance(key, str):
            raise InvalidTypeError(f"config keys are str, not {type(key).__name__} ({key!r})")
        kind = defs[key]["type"] if key in defs else None
        accepted = _ACCEPTED_TYPES.get(kind or "")
        if accepted and (isinstance(value, bool) or not isinstance(value, accepted)):
            raise InvalidTypeError(
                f"{defs[key]['name']} must be {_TYPE_WORDS[kind or '']}, not {type(value).__name__} ({value!r})"
            )
        if kind == "list" and not isinstance(value, str) and not all(isinstance(p, str) for p in value):
            raise InvalidTypeError(f"{key} must be a list of str, not {value!r}")
        if kind is None and not isinstance(value, (str, int, float, bool)):
            raise InvalidTypeError(f"{key} must be a str, int, float or bool, not {type(value).__name__}")


#: Kafka's topic-name rules (``Topic.validate``), the engine's ``datadir::topic_name_problem``:
#: returns the name, or raises InvalidTopicTypeError (not a str) or InvalidTopicError saying
#: which rule failed. The server applies the same rules, so the two cannot disagree.
validate_topic_name: Callable[[object], str] = _native.validate_topic_name


def validate_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check Kafka-named topic config; return it with values normalised (ints as ints). The
    engine's table decides (the wire-protocol server's CreateTopics uses the same check)."""
    config = {} if config is None else config
    _check_types(config, {d["name"]: d for d in TOPIC_CONFIG_DEFS}, "topic")
    return _native.validate_topic_config(dict(config))


def validate_dir_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Check data-directory config (broker names); return it normalised."""
    defs = {d["name"]: d for d in DIR_CONFIG_DEFS}
    defs.update({d["broker_name"]: d for d in TOPIC_CONFIG_DEFS if d["broker_name"]})
    try:
        _check_types(config, defs, "broker")
    except InvalidTypeError as e:
        bad = next(
            (k for k in config if k in BROKER_SYNONYMS and str(e).startswith(BROKER_SYNONYMS[k])), None
        )
        if bad is None:
            raise
        raise InvalidTypeError(f"{bad} (the default of {BROKER_SYNONYMS[bad]}): {e}") from None
    return _native.validate_dir_config(dict(config))


def target_compression(topic_codec: str, producer_codec: str | None) -> str:
    """The codec a batch is written with (Kafka's ``BrokerCompressionType.targetCompression``):
    the topic's ``compression.type``, or the producer's own when the topic says ``producer``.
    Decided by the engine's ``topic_config::resolve``, as for every write path."""
    return log_options({"compression.type": topic_codec}, producer_codec)["compression"]


def is_compacted(config: Mapping[str, Any]) -> bool:
    return "compact" in str(config.get("cleanup.policy", "delete")).split(",")


def log_options(config: Mapping[str, Any], producer_compression: str | None = None) -> dict[str, Any]:
    """Topic config (Kafka names; missing keys take Kafka's defaults) as ``Log`` keyword
    arguments, for a writer whose own codec is ``producer_compression``: the engine's
    ``topic_config::resolve``, the one resolution every write path (Producer, Log via
    ``open_partition``, the Spark sink, the wire-protocol server) uses. Time and size retention
    apply only when ``cleanup.policy`` includes ``delete``."""
    return _native.topic_log_options({}, dict(config), producer_compression)


#: A broker address such as ``localhost:9092``, ``PLAINTEXT://h:9092`` or ``h1:9092,h2:9093``.
_BROKER_ADDRESS = re.compile(
    r"^([A-Za-z][A-Za-z0-9_]*://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}(,.+)?$"
)


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
            raise broker_address_error(raw)
        self.path = os.path.abspath(raw)
        if not create or os.path.lexists(self.path):  # a path that exists must be a data directory now
            self.require()
            # The engine's DataDir::open, as the server's start: a topic delete killed between its
            # folder renames and its metadata write is finished before this client reads the topics.
            _native.open_data_dir(self.path)
        self._mutex = threading.Lock()
        # The engine's position in the metadata files, and the metadata as of it.
        self._cache: tuple[list[int], dict[str, Any] | None] | None = None

    def require(self) -> None:
        """Raise NotADataDirError unless the path is a directory."""
        if not os.path.isdir(self.path):
            what = "is a file" if os.path.exists(self.path) else "does not exist"
            raise with_action(
                NotADataDirError,
                f"{self.path} is not a kafkalite data directory (it {what})",
                "fix the path, or create a data directory there (creating a topic does too)",
                "Admin.init",
                path=self.path,
            )

    # -- metadata --------------------------------------------------------------------------
    @property
    def managed(self) -> bool:
        """True when kafkalite's metadata exists (otherwise: a broker's folder, read-only)."""
        return os.path.exists(os.path.join(self.path, METADATA_FILE))

    def broker_owned(self) -> bool:
        """A Kafka broker's log directory (no kafkalite metadata, and the broker's
        ``meta.properties`` or partition folders holding a broker's own files): the broker's
        metadata log owns its topics. Partition folders that ``Log`` made are not one
        (``DataDir::broker_owned`` in the engine decides, for the server too)."""
        if self.managed or not os.path.isdir(self.path):
            return False
        return _native.broker_owned(self.path)

    def _metadata(self) -> dict[str, Any] | None:
        """The whole metadata, None when there is none: what this read last, with the journal
        entries appended since applied (two ``lstat`` calls when nothing changed), or all of it
        again after a compaction. Damage is a CorruptMetadataError naming the file, the topic
        and the fix; I/O errors (a link planted there included) are KafkaliteIOErrors."""
        with self._mutex:
            position, kind, payload = _native.metadata_changes(self.path, self._cache and self._cache[0])
            if kind == "whole":
                data = None if payload is None else json.loads(payload)
            elif kind == "entries" and self._cache and self._cache[1] is not None:
                data = _applied(self._cache[1], json.loads(payload or "[]"))
            else:
                data = self._cache[1] if self._cache else None
            self._cache = (position, data)
        if data is None:
            self.require()
        return data

    def change_stamp(self) -> tuple[tuple[int, ...], int] | None:
        """Something that differs after every change of the topics (the metadata files' inodes,
        sizes and times), and the newest of their mtimes; None without metadata."""
        stamp: list[int] = []
        newest = 0
        for name in (METADATA_FILE, JOURNAL_FILE):
            try:
                st = os.stat(os.path.join(self.path, name))
            except FileNotFoundError:
                if name == METADATA_FILE:
                    return None
                stamp.append(0)
                continue
            stamp.extend((st.st_ino, st.st_mtime_ns, st.st_size))
            newest = max(newest, st.st_mtime_ns)
        return tuple(stamp), newest

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
        return _native.effective_topic_config(self.dir_config(), dict(topic_config))

    def _discovered(self) -> dict[str, dict[str, Any]]:
        """Topics of a folder without our metadata, from its ``<topic>-<partition>`` folder
        names: a Kafka broker's (``discovered``: read-only), or folders ``Log`` made, which the
        first metadata write records as topics (``update_metadata``)."""
        found: dict[str, int] = {}
        for name in os.listdir(self.path):
            parsed = _native.partition_folder(name)
            if parsed and os.path.isdir(os.path.join(self.path, name)):
                found[parsed[0]] = max(found.get(parsed[0], 0), parsed[1] + 1)
        broker = self.broker_owned()
        return {t: {"partitions": n, "config": {}, "discovered": broker} for t, n in found.items()}

    def topic(self, name: str) -> dict[str, Any]:
        validate_topic_name(name)
        try:
            return self.topics()[name]
        except KeyError:
            raise with_action(
                UnknownTopicError,
                f"unknown topic {name!r} in {self.path}",
                "create it first",
                "Admin.create_topic",
                topic=name,
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

        def apply(data: dict[str, Any] | None) -> dict[str, Any]:
            # Called by the engine under the data-directory lock, with the checked metadata
            # (None: no file yet); what it returns is checked again and written atomically.
            if data is None:
                if not adopt:
                    self.check_writable()
                # A broker's topics when adopting; otherwise the partition folders ``Log`` made.
                data = {"version": 1, "topics": _adopted(self._discovered())}
            if data.get("config") is None:
                data["config"] = {}
            change(data)
            return data

        _native.update_metadata(self.path, apply)

    def check_writable(self) -> None:
        """Raise ReadOnlyDataDirError for a Kafka broker's log directory (not adopted)."""
        if self.broker_owned():
            raise ReadOnlyDataDirError(
                f"{self.path} is a Kafka broker's log directory (partitions or meta.properties, no "
                f"kafkalite metadata): the broker's metadata log owns its topics, so kafkalite only reads "
                f"it. To write it with kafkalite on purpose (no broker may run on it then), adopt it: "
                f"`kafkalite init --adopt {self.path}` (or Admin.adopt_broker_dir())"
            )

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
            _native.warn_unapplied("the data directory", data["config"], checked)
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
        if self.managed:  # one entry appended by the engine, which checks the rest under the lock
            if not _native.create_topic(self.path, name, partitions, checked):
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            return

        def change(topics: dict) -> None:
            if name in topics:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            _native.warn_unapplied(f"topic {name!r}", {}, checked)
            _add_topic(self, topics, name, partitions, checked)

        self.update(change, create=True)

    def auto_create(self, name: str) -> dict[str, Any]:
        """A topic a producer writes to before anyone created it: created with the data
        directory's ``num.partitions`` when ``auto.create.topics.enable`` (Kafka's broker
        defaults: true, 1), as a broker does on the first produce. Returns its metadata."""
        validate_topic_name(name)
        settings = self.dir_config()
        if not settings["auto.create.topics.enable"]:
            raise with_action(
                UnknownTopicError,
                f"unknown topic {name!r} in {self.path}, and auto.create.topics.enable is false for this data "
                "directory",
                "create it first",
                "Admin.create_topic",
                topic=name,
            )
        created: list[int] = []
        count = int(settings["num.partitions"])

        def change(topics: dict) -> None:
            if name in topics:  # another producer created it meanwhile
                return
            _add_topic(self, topics, name, count, {})
            created.append(count)

        if self.managed:
            if _native.create_topic(self.path, name, count, {}):  # False: created by another meanwhile
                created.append(count)
        else:
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
        options["preallocate_budget_bytes"] = validate_dir_config(
            {budget_key: self.dir_config()[budget_key]}
        )[budget_key]
        if meta.get("discovered"):
            overrides["readonly"] = True
        options.update(overrides)
        return Log(self.partition_path(topic, partition), **options)


def _add_topic(data_dir: DataDir, topics: dict, name: str, partitions: int, config: dict[str, Any]) -> None:
    """Record a new topic and make its partition folders (under the metadata lock), in a data
    directory's first metadata write (``DataDir::create_checked_topic`` in the engine does it
    once there is metadata)."""
    clash = [t for t in topics if t.replace(".", "_") == name.replace(".", "_")]
    if clash:
        raise InvalidTopicError(
            f"topic {name!r} collides with {clash[0]!r} ('.' and '_' are the same to Kafka's metrics)"
        )
    for p in range(partitions):
        os.makedirs(data_dir.partition_path(name, p), exist_ok=True)
    topics[name] = {"partitions": partitions, "config": config}


def _applied(data: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """``data`` with the journal's ``entries`` applied (``metadata_file.rs`` has their format):
    new dicts, since a caller may still be iterating the old ones."""
    data = dict(data)
    topics = data["topics"] = dict(data["topics"])
    for entry in entries:
        for name, meta in (entry.get("topics") or {}).items():
            if meta is None:
                topics.pop(name, None)
            else:
                topics[name] = meta
        if "config" in entry:
            data["config"] = entry["config"]
    return data


def _adopted(found: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A broker's topics as kafkalite metadata; ``__consumer_offsets`` keeps its compaction."""
    from kafkalite.groups.offsets import OFFSETS_CONFIG, OFFSETS_TOPIC

    return {
        name: {
            "partitions": int(meta["partitions"]),
            "config": dict(OFFSETS_CONFIG) if name == OFFSETS_TOPIC else {},
        }
        for name, meta in found.items()
    }
