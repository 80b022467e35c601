"""Producer, Consumer and Admin config, defined once per family (as kafka-python's
``DEFAULT_CONFIG`` and Kafka's ``ConfigDef``): each key's name (kafka-python's), type, default,
validator and doc. The constructors take their defaults and checks from these tables; the class
docstrings and ``docs/configuration.md`` are generated from them (``python -m kafkalite._docs``).
Topic and data-directory config are the engine's tables (``kafkalite.datadir.TOPIC_CONFIG_DEFS``).
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafkalite import _native, validate
from kafkalite.errors import InvalidConfigError, InvalidTypeError, broker_address_error


@dataclass(frozen=True)
class ConfigKey:
    """One client config key."""

    name: str
    #: The type as the docs show it.
    type: str
    default: Any
    doc: str
    #: ``check(name, value)`` raises a typed error naming the key, or returns the value to use.
    check: Callable[[str, Any], Any]
    #: False for kafkalite's own keys (kafka-python has no such setting).
    kafka_python: bool = True


class ConfigTable:
    """The config keys of one client family, and the checks over several keys."""

    def __init__(
        self,
        family: str,
        keys: list[ConfigKey],
        check_all: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.family = family
        self.keys = {k.name: k for k in keys}
        self._check_all = check_all

    def defaults(self) -> dict[str, Any]:
        return {name: key.default for name, key in self.keys.items()}

    def resolve(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The defaults overridden by ``config``, every value checked (unknown keys refused)."""
        unknown = sorted(set(config) - set(self.keys))
        if "bootstrap_servers" in unknown:
            address = config["bootstrap_servers"]
            raise broker_address_error(
                address, f"unknown {self.family} config 'bootstrap_servers' ({address!r}: a broker address)"
            )
        if unknown:
            raise InvalidConfigError(
                f"unknown {self.family} config {unknown[0]!r}; supported: {', '.join(sorted(self.keys))}"
            )
        out = {**self.defaults(), **config}
        for name, key in self.keys.items():
            out[name] = key.check(name, out[name])
        if self._check_all:
            self._check_all(out)
        return out

    def document(self, cls: type) -> None:
        """Append the keys to ``cls``'s docstring, so ``help(cls)`` lists them."""
        cls.__doc__ = inspect.cleandoc(cls.__doc__ or "") + "\n" + self.docstring()

    def docstring(self) -> str:
        """The keys as a docstring section (kafka-python's ``KafkaConsumer`` style)."""
        if not self.keys:
            return ""
        lines = ["", "Keyword Arguments (config, kafka-python's names):"]
        for key in self.keys.values():
            own = "" if key.kafka_python else " kafkalite's own."
            lines.append(f"    {key.name} ({key.type}): {key.doc}{own} Default: {key.default!r}.")
        return "\n".join(
            textwrap.fill(line, 100, subsequent_indent=" " * 8) if line else line for line in lines
        )


# -- checks ----------------------------------------------------------------------------------


def _acks(name: str, value: Any) -> Any:
    if isinstance(value, bool) or value not in (0, 1, -1, "all", "0", "1", "-1"):
        raise InvalidConfigError(f"{name} must be 0, 1 or 'all', not {value!r}")
    return value


def compression_type(name: str, value: Any, optional: bool = True) -> Any:
    """Check a codec name against Kafka's (``_native.COMPRESSION_TYPES``, the engine's one list):
    ``InvalidTypeError`` for a non-str, ``InvalidConfigError`` naming the valid ones otherwise.
    ``optional``: None means 'none', as kafka-python's default."""
    if value is None and optional:
        return value
    if not isinstance(value, str):
        raise InvalidTypeError(
            f"{name} must be {'None or ' if optional else ''}a str, not {type(value).__name__}"
        )
    if value not in _native.COMPRESSION_TYPES:
        valid = ", ".join(repr(c) for c in _native.COMPRESSION_TYPES)
        raise InvalidConfigError(
            f"{name} must be {'None or ' if optional else ''}one of {valid}, not {value!r}"
        )
    return value


#: The codec names as the docs show them.
_CODECS = (
    ", ".join(repr(c) for c in _native.COMPRESSION_TYPES[:-1]) + f" or {_native.COMPRESSION_TYPES[-1]!r}"
)


def _int(minimum: int, maximum: int = validate.INT64_MAX) -> Callable[[str, Any], int]:
    return lambda name, value: validate.integer(name, value, minimum, maximum)


def _number(minimum: float, maximum: float) -> Callable[[str, Any], float]:
    return lambda name, value: validate.number(name, value, minimum, maximum)


def _choice(*choices: str) -> Callable[[str, Any], str]:
    def check(name: str, value: Any) -> str:
        if value not in choices:
            raise InvalidConfigError(
                f"{name} must be {', '.join(repr(c) for c in choices[:-1])} or {choices[-1]!r}, not {value!r}"
            )
        return value

    return check


def _any(name: str, value: Any) -> Any:
    return value


def _ms_or_inf(name: str, value: Any) -> float:
    return validate.milliseconds(name, value, allow_inf=True)


#: confluent-kafka's statistics callback (librdkafka's ``stats_cb`` / ``statistics.interval.ms``),
#: shared by the producer and the consumer (``kafkalite.client_metrics``).
_STATS_KEYS = [
    ConfigKey(
        "stats_cb",
        "callable",
        None,
        "confluent-kafka's stats_cb: called every statistics_interval_ms with a JSON str of the client's "
        "statistics (librdkafka's names), from the producer's sender thread or the consumer's poll(). "
        "An exception it raises is logged (kafkalite.metrics) and ignored.",
        validate.optional_callable,
        kafka_python=False,
    ),
    ConfigKey(
        "statistics_interval_ms",
        "int",
        0,
        "How often stats_cb is called (confluent-kafka's statistics.interval.ms; 0: never).",
        _int(0, 86_400_000),
        kafka_python=False,
    ),
]


PRODUCER_CONFIG = ConfigTable(
    "producer",
    [
        ConfigKey(
            "acks",
            "0, 1 or 'all'",
            1,
            "'all' (or -1): a batch is flushed to disk before its future completes (survives power loss); "
            "0 and 1: written to the page cache (survives a process crash).",
            _acks,
        ),
        ConfigKey(
            "batch_size",
            "int",
            16384,
            "A batch is written when it reaches this many bytes (or after linger_ms).",
            _int(1, validate.INT32_MAX),
        ),
        ConfigKey(
            "linger_ms",
            "number",
            0,
            "How long a batch waits for more records before it is written.",
            _number(0, validate.INT32_MAX),
        ),
        ConfigKey(
            "compression_type",
            f"None, {_CODECS}",
            None,
            "The producer's codec (None: 'none'), used where the topic's compression.type is 'producer'; "
            "written as Kafka's Java producer writes it.",
            compression_type,
        ),
        ConfigKey(
            "key_serializer", "callable", None, "Turns each key into bytes.", validate.optional_callable
        ),
        ConfigKey(
            "value_serializer", "callable", None, "Turns each value into bytes.", validate.optional_callable
        ),
        ConfigKey(
            "partitioner",
            "callable",
            None,
            "partitioner(key_bytes, all_partitions, available_partitions) -> partition; "
            "default: murmur2 of the key as Kafka's, a sticky partition per batch for keyless records.",
            validate.optional_callable,
        ),
        ConfigKey(
            "max_request_size",
            "int",
            1048576,
            "The largest batch this producer writes (the topic's max.message.bytes also applies).",
            _int(1, validate.INT32_MAX),
        ),
        ConfigKey("client_id", "str", None, "A name for this producer in logs.", validate.optional_text),
        ConfigKey(
            "transactional_id",
            "str",
            None,
            "Makes the producer transactional (init_transactions(), begin_transaction(), "
            "commit_transaction()...): records are written in transactions, and a newer producer with "
            "the same id, in any process, fences this one.",
            validate.optional_text,
        ),
        ConfigKey(
            "transaction_timeout_ms",
            "int",
            60_000,
            "A transaction open longer than this is aborted (and its producer fenced) by the next user of "
            "its transactional_id (at most transaction.max.timeout.ms, 900000).",
            _int(1, 900_000),
        ),
        ConfigKey(
            "retention_check_interval_ms",
            "number",
            300_000,
            "How often this producer applies retention.ms / retention.bytes to the topics it writes "
            "(a broker's log.retention.check.interval.ms).",
            _number(1, validate.INT64_MAX // 10**6),
            kafka_python=False,
        ),
        ConfigKey(
            "cleaner_check_interval_ms",
            "number",
            15_000,
            "How often this producer compacts the compacted topics it writes when dirty enough "
            "(a broker's log.cleaner.backoff.ms).",
            _number(1, validate.INT64_MAX // 10**6),
            kafka_python=False,
        ),
        ConfigKey(
            "metadata_max_age_ms",
            "number",
            300_000,
            "How often the producer re-reads topic metadata: at least this often (and whenever it opens "
            "a partition) it closes the logs of deleted topics, giving back their descriptors, disk "
            "blocks and preallocation budget.",
            _number(1, validate.INT64_MAX // 10**6),
        ),
        ConfigKey(
            "metadata_max_idle_ms",
            "number",
            300_000,
            "A partition not written for this long has its log closed at the next metadata refresh "
            "(reopened on next use), as Kafka's metadata.max.idle.ms (at least 5000).",
            _number(5000, validate.INT64_MAX // 10**6),
            kafka_python=False,
        ),
        *_STATS_KEYS,
    ],
)


def _heartbeat_below_session(config: dict[str, Any]) -> None:
    if config["heartbeat_interval_ms"] >= config["session_timeout_ms"]:
        raise InvalidConfigError("heartbeat_interval_ms must be lower than session_timeout_ms")


CONSUMER_CONFIG = ConfigTable(
    "consumer",
    [
        ConfigKey(
            "auto_offset_reset",
            "'earliest', 'latest' or 'none'",
            "latest",
            "Where to start without a committed offset (or when it is out of range); 'none' raises "
            "NoOffsetForPartitionError.",
            _choice("earliest", "latest", "none"),
        ),
        ConfigKey(
            "enable_auto_commit",
            "bool",
            True,
            "Commit the group's positions every auto_commit_interval_ms (needs group_id).",
            validate.boolean,
        ),
        ConfigKey("auto_commit_interval_ms", "int", 5000, "How often positions are auto-committed.", _int(0)),
        ConfigKey(
            "key_deserializer",
            "callable",
            None,
            "Turns each key's bytes into a value.",
            validate.optional_callable,
        ),
        ConfigKey(
            "value_deserializer",
            "callable",
            None,
            "Turns each value's bytes into a value.",
            validate.optional_callable,
        ),
        ConfigKey("max_poll_records", "int", 500, "The most records one poll() returns.", _int(1)),
        ConfigKey(
            "consumer_timeout_ms",
            "number",
            float("inf"),
            "Iteration stops after this long without a new record (inf: wait forever).",
            _ms_or_inf,
        ),
        ConfigKey(
            "client_id",
            "str",
            None,
            "A name for this consumer in logs and group descriptions.",
            validate.optional_text,
        ),
        ConfigKey(
            "session_timeout_ms",
            "int",
            10_000,
            "A group member that does not heartbeat for this long is evicted and its partitions reassigned.",
            _int(1),
        ),
        ConfigKey(
            "heartbeat_interval_ms",
            "int",
            3_000,
            "How often a group member heartbeats (below session_timeout_ms).",
            _int(1),
        ),
        ConfigKey(
            "max_poll_interval_ms",
            "int",
            300_000,
            "A member that does not poll for this long leaves the group.",
            _int(1),
        ),
        ConfigKey(
            "partition_assignment_strategy",
            "names or assignor classes",
            ("range", "cooperative-sticky"),
            "The group's assignors in order of preference: 'range', 'roundrobin', 'sticky', "
            "'cooperative-sticky' or kafka-python assignor classes (checked by Consumer, which knows them).",
            _any,
        ),
        ConfigKey(
            "exclude_internal_topics",
            "bool",
            True,
            "Pattern subscriptions leave out internal topics (__consumer_offsets).",
            validate.boolean,
        ),
        ConfigKey(
            "isolation_level",
            "'read_uncommitted' or 'read_committed'",
            "read_uncommitted",
            "'read_committed' skips aborted transactions and reads only below the last stable offset.",
            _any,  # Consumer._read_committed checks it, with its own type error
        ),
        *_STATS_KEYS,
    ],
    _heartbeat_below_session,
)

#: Admin takes the data directory only; what it configures is topic and data-directory config.
ADMIN_CONFIG = ConfigTable("admin", [])

#: ``Log``'s keyword arguments: one partition's settings (the topic config it is opened with,
#: under Python names; ``DataDir.open_partition`` fills them from the topic). ``Log`` checks
#: them itself; this table documents them and a test keeps it equal to ``Log``'s signature.
LOG_CONFIG = ConfigTable(
    "log",
    [
        ConfigKey(
            "segment_bytes",
            "int",
            _native.SEGMENT_BYTES_DEFAULT,
            "Roll to a new segment past this size (segment.bytes).",
            _any,
        ),
        ConfigKey(
            "index_interval_bytes",
            "int",
            _native.INDEX_INTERVAL_BYTES_DEFAULT,
            "Bytes between offset-index entries.",
            _any,
        ),
        ConfigKey(
            "segment_ms", "int", None, "Roll a segment after this long (segment.ms); None: never.", _any
        ),
        ConfigKey(
            "retention_bytes",
            "int",
            None,
            "Delete the oldest segments past this size (retention.bytes).",
            _any,
        ),
        ConfigKey(
            "retention_ms",
            "int",
            None,
            "Delete segments whose newest record is older (retention.ms); None: keep forever (the topic's -1).",
            _any,
        ),
        ConfigKey(
            "compression",
            _CODECS,
            "none",
            "The codec of the batches this log writes, as Kafka's Java producer writes it.",
            _any,
        ),
        ConfigKey(
            "flush",
            "'os', 'always' or int",
            "os",
            "'os' leaves writing to the page cache (a process crash loses nothing); 'always' makes every "
            "append durable before it returns; N flushes every N messages.",
            _any,
        ),
        ConfigKey(
            "timestamp_type",
            "'create' or 'log_append'",
            "create",
            "message.timestamp.type: CreateTime or LogAppendTime (Kafka's names are accepted too).",
            _any,
        ),
        ConfigKey(
            "max_message_bytes",
            "int",
            _native.MAX_MESSAGE_BYTES_DEFAULT,
            "The largest batch accepted (max.message.bytes).",
            _any,
        ),
        ConfigKey("readonly", "bool", False, "Never write; follow a writer in another process.", _any),
        ConfigKey(
            "shared_writers",
            "bool",
            False,
            "Several processes append, each holding the partition lock only while it appends a batch.",
            _any,
        ),
        ConfigKey(
            "compact", "bool", False, "cleanup.policy includes compact: every record needs a key.", _any
        ),
        ConfigKey(
            "preallocate_budget_bytes",
            "int",
            None,
            "Sets the data directory's log.preallocate.budget.bytes for this process (the most bytes "
            "reserved ahead of writers over all its partitions); None keeps the current one (default 256 MiB).",
            _any,
        ),
        ConfigKey(
            "any_folder",
            "bool",
            False,
            "Open a folder of any name, not only a <topic>-<partition> partition folder (a data directory "
            "is refused even then).",
            _any,
        ),
    ],
)


def topic_docstring() -> str:
    """The topic and data-directory config keys (the engine's tables) as a docstring section."""
    from kafkalite.datadir import DIR_CONFIG_DEFS, TOPIC_CONFIG_DEFS

    lines = ["", "Topic config (create_topic, alter_config; Kafka's names):"]
    for d in TOPIC_CONFIG_DEFS:
        lines.append(f"    {d['name']} ({d['type']}): {d['doc']} Default: {d['default']!r}.")
    lines += ["", "Data-directory config (init, alter_data_dir_config; a broker's names):"]
    for d in DIR_CONFIG_DEFS:
        lines.append(f"    {d['name']} ({d['type']}): {d['doc']} Default: {d['default']!r}.")
    for d in TOPIC_CONFIG_DEFS:
        if d["broker_name"]:
            lines.append(f"    {d['broker_name']}: the default of every topic's {d['name']}.")
    return "\n".join(textwrap.fill(line, 100, subsequent_indent=" " * 8) if line else line for line in lines)
